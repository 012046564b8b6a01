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

from .lightning import HierarchicalSegmentationModule
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


def main(argv: Optional[Sequence[str]] = None, default_config: Optional[Path] = None, run: bool = True):
    """Run the CLI. With no subcommand, ``fit`` is implied; the default config applies to ``fit``."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] == "predict":
        raise SystemExit("train.py: error: predict is not a train.py subcommand; per-image hierarchies "
                         "(UCMs) of a trained checkpoint: hiseg predict IMAGES --checkpoint CKPT --out DIR")
    if not argv or argv[0] not in SUBCOMMANDS + ("-h", "--help", "--print_config"):
        argv = ["fit"] + argv
    parser_kwargs = {}
    if default_config is not None and Path(default_config).is_file():
        parser_kwargs = {sub: {"default_config_files": [str(default_config)]} for sub in SUBCOMMANDS}
    try:
        return HisegCLI(
            HierarchicalSegmentationModule,
            pl.LightningDataModule,
            subclass_mode_data=True,
            seed_everything_default=0,
            save_config_kwargs={"overwrite": True},
            parser_kwargs=parser_kwargs,
            args=argv,
            run=run,
        )
    except (CheckpointError, FileNotFoundError) as e:
        raise SystemExit(f"train.py: error: {e}") from e
