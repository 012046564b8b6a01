"""The LightningCLI behind ``train.py`` (kept in the package so it is importable and tested).

Subcommands ``fit`` (the default), ``validate`` and ``test``; per-image predictions are
``hiseg predict``'s. Checkpoints are data, never code: a ``--ckpt_path`` or
``--model.init_from`` that is a URL is refused, and local checkpoints are read with
``weights_only=True`` (Lightning's default for URLs is ``weights_only=False``, which runs
whatever the file pickles). ``fit --ckpt_path CKPT`` resumes into the log folders (logger
versions) the checkpoint was written from.
"""
from __future__ import annotations

import importlib
import sys
import warnings
from pathlib import Path
from typing import Optional, Sequence

import pytorch_lightning as pl
from pytorch_lightning.cli import LightningCLI

from .lightning import VAL_THRESHOLDS, HierarchicalSegmentationModule
from .models.weights import CheckpointError, load_checkpoint_file, refuse_remote_checkpoint

SUBCOMMANDS = ("fit", "validate", "test")
# Lightning's ckpt_path keywords (resolved by the trainer, not files)
_CKPT_KEYWORDS = ("last", "best", "hpc", "registry")


class HisegCLI(LightningCLI):
    """LightningCLI without ``predict``, with checkpoint checks and same-folder resume."""

    @staticmethod
    def subcommands() -> dict[str, set[str]]:
        return {k: v for k, v in LightningCLI.subcommands().items() if k in SUBCOMMANDS}

    def parse_arguments(self, parser, args) -> None:
        """Parse, then check the checkpoints before anything reads them (Lightning reads a
        local ``ckpt_path``'s hyper-parameters right after parsing)."""
        super().parse_arguments(parser, args)
        sub = self.config.get("subcommand")
        if sub is None:
            return
        cfg = self.config[sub]
        refuse_remote_checkpoint(cfg["model"].get("init_from"), "--model.init_from")
        ckpt = cfg.get("ckpt_path")
        if ckpt is None or str(ckpt) in _CKPT_KEYWORDS or str(ckpt).startswith("registry:"):
            return
        refuse_remote_checkpoint(ckpt, "--ckpt_path")
        if cfg.get("weights_only") is False:
            return  # the user vouches for this local file
        cfg["weights_only"] = True
        checkpoint = load_checkpoint_file(ckpt)  # clear errors for a missing, corrupt or unsafe file
        if sub == "fit":
            _resume_log_versions(cfg["trainer"], checkpoint)

    def before_instantiate_classes(self) -> None:
        """Loggers without a ``save_dir`` log under ``trainer.default_root_dir``."""
        sub = self.config.get("subcommand")
        _logs_follow_root_dir((self.config[sub] if sub else self.config)["trainer"])

    def after_fit(self) -> None:
        """What the run made: validation F before and after, the checkpoints, the next command."""
        trainer, model = self.trainer, self.model
        if not trainer.is_global_zero:
            return
        print(fit_summary(trainer, model))


def fit_summary(trainer, model) -> str:
    """The closing summary of a fit (see :meth:`HisegCLI.after_fit`)."""
    from pytorch_lightning.callbacks import ModelCheckpoint

    lines = ["", "[hiseg] training finished: "
             f"{trainer.current_epoch} epoch(s), {trainer.global_step} step(s)"]
    before = getattr(model, "initial_validation", None) or {}
    after = {k[len("val/"):]: float(v) for k, v in trainer.callback_metrics.items() if k.startswith("val/")}

    def f(d):
        if "boundary_f" not in d:
            return "not measured"
        return f"{d['boundary_f']:.4f} (best of {len(VAL_THRESHOLDS)} thresholds {d.get('boundary_f_ods', float('nan')):.4f})"
    lines.append(f"  validation boundary F before: {f(before)}")
    lines.append(f"  validation boundary F after:  {f(after)}")
    best = last = None
    for cb in trainer.callbacks:
        if isinstance(cb, ModelCheckpoint) and cb.monitor and cb.best_model_path:
            best = best or (cb.best_model_path, cb.monitor, cb.best_model_score)
        if getattr(cb, "last_model_path", None):
            last = last or cb.last_model_path
    if best:
        score = f"{float(best[2]):.4f}" if best[2] is not None else "?"
        lines.append(f"  best checkpoint ({best[1]} = {score}): {best[0]}")
    if last:
        lines.append(f"  last checkpoint (resume with --ckpt_path): {last}")
    ck = best[0] if best else last
    if ck:
        lines.append(f"  next: hiseg predict IMAGE --checkpoint {ck} --out predictions/")
    return "\n".join(lines)


def _appends_on_resume(class_path: str) -> bool:
    """Loggers that keep what a folder holds: TensorBoard (a new events file) and
    :class:`hiseg.lightning.CSVLogger`; Lightning's own CSVLogger deletes ``metrics.csv``."""
    from pytorch_lightning.loggers import TensorBoardLogger

    from .lightning import CSVLogger

    module, _, name = str(class_path).rpartition(".")
    try:
        cls = getattr(importlib.import_module(module), name)
    except (ImportError, AttributeError, ValueError):
        return False
    return isinstance(cls, type) and issubclass(cls, (TensorBoardLogger, CSVLogger))


def _resume_log_versions(trainer_cfg, checkpoint) -> None:
    """Give each configured logger without a ``version`` the version the checkpoint's run
    logged to (matched by position, class and name), so the resumed run logs there; only
    for loggers that append (:func:`_appends_on_resume`), the others start a new version."""
    saved = (checkpoint.get("hiseg") or {}).get("loggers") or [] if isinstance(checkpoint, dict) else []
    entries = trainer_cfg.get("logger")
    entries = entries if isinstance(entries, list) else [entries]
    for entry, old in zip(entries, saved):
        init_args = getattr(entry, "init_args", None)
        if init_args is None or str(entry.class_path).rsplit(".", 1)[-1] != old["class"]:
            continue
        if init_args.get("name") != old["name"] or init_args.get("version") is not None:
            continue
        if _appends_on_resume(entry.class_path):
            init_args["version"] = old["version"]
        else:
            warnings.warn(f"{entry.class_path} would delete the logs of {old['name']} version {old['version']!r} "
                          f"if resumed there: it logs to a new version (hiseg.lightning.CSVLogger appends)",
                          stacklevel=2)


def _logs_follow_root_dir(trainer_cfg) -> None:
    """Loggers configured without a ``save_dir`` (:class:`hiseg.lightning.CSVLogger`
    allows it) log under the trainer's ``default_root_dir``."""
    entries = trainer_cfg.get("logger")
    for entry in entries if isinstance(entries, list) else [entries]:
        init_args = getattr(entry, "init_args", None)
        if init_args is not None and "save_dir" in init_args and init_args.get("save_dir") is None:
            init_args["save_dir"] = trainer_cfg.get("default_root_dir") or "."


def _quiet_lightning() -> None:
    """Silence, at their source, the start-up messages that are not the user's business:
    Lightning's promotional tip and internal deprecation / by-design notices."""
    import logging

    class _NoTip(logging.Filter):
        def filter(self, record):
            return "litlogger" not in record.getMessage() and "Tip:" not in record.getMessage()

    for name in ("pytorch_lightning.trainer.connectors.logger_connector.logger_connector",
                 "pytorch_lightning.utilities.rank_zero", "lightning.pytorch.utilities.rank_zero"):
        logging.getLogger(name).addFilter(_NoTip())
    # Lightning internals calling a deprecated torch API (not hiseg's code)
    warnings.filterwarnings("ignore", message=r".*isinstance\(treespec, LeafSpec\)")
    # hiseg's module moves its GraphBatch itself, by design
    warnings.filterwarnings("ignore", message=r"You have overridden `transfer_batch_to_device`")


def main(argv: Optional[Sequence[str]] = None, default_config: Optional[Path] = None, run: bool = True):
    """Run the CLI. With no subcommand, ``fit`` is implied; the default config applies to ``fit``."""
    from_command_line = argv is None or list(argv) == sys.argv[1:]
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] == "predict":
        raise SystemExit("train.py: error: predict is not a train.py subcommand; per-image hierarchies "
                         "(UCMs) of a trained checkpoint: hiseg predict IMAGES --checkpoint CKPT --out DIR")
    if run and (not argv or argv[0] not in SUBCOMMANDS + ("-h", "--help", "--print_config")):
        argv = ["fit"] + argv  # (run=False: no subcommand, the classes are only built)
    parser_kwargs = {}
    if default_config is not None and Path(default_config).is_file():
        parser_kwargs = {sub: {"default_config_files": [str(default_config)]} for sub in SUBCOMMANDS}
        parser_kwargs["description"] = (
            "Train hiseg's boundary network through the differentiable ultrametric layer. With no "
            f"arguments: fit on the embedded synthetic dataset ({Path(default_config).name}), on the CPU. "
            "Subcommands: fit (default), validate, test; `python train.py fit --help` lists every option.")
    _quiet_lightning()
    if from_command_line:
        sys.argv = sys.argv[:1] + argv
    try:
        return HisegCLI(
            HierarchicalSegmentationModule,
            pl.LightningDataModule,
            subclass_mode_data=True,
            seed_everything_default=0,
            save_config_kwargs={"overwrite": True},
            parser_kwargs=parser_kwargs,
            # from the command line, LightningCLI reads sys.argv itself (passing args too warns)
            args=None if from_command_line else argv,
            run=run,
        )
    except (CheckpointError, FileNotFoundError) as e:
        raise SystemExit(f"train.py: error: {e}") from e
