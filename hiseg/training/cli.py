"""The LightningCLI behind ``train.py`` (kept in the package so it is importable and tested).

Subcommands ``fit`` (the default), ``validate`` and ``test``; per-image predictions are
``hiseg predict``'s. Checkpoints are data, never code: a ``--ckpt_path`` or
``--model.init_from`` that is a URL is refused, and local checkpoints are read with
``weights_only=True`` (Lightning's default for URLs is ``weights_only=False``, which runs
whatever the file pickles). ``fit --ckpt_path CKPT`` resumes into the log folders (logger
versions) the checkpoint was written from.
"""
from __future__ import annotations

import errno
import importlib
import sys
import warnings
from pathlib import Path
from typing import Optional, Sequence

import pytorch_lightning as pl
from pytorch_lightning.cli import LightningCLI

from .._lifetime import first_process
from ..io import DataError
from ..models.weights import CheckpointError, load_checkpoint_file, refuse_remote_checkpoint
from .configs import (TRUST_FLAG, ConfigFileError, UntrustedConfigError, check_config_objects, check_config_text, current_class_paths,
                      is_file_path)
from .help_texts import shown_config
from .module import HierarchicalSegmentationModule
from .run_folders import ExclusiveSaveConfig
from .summary import fit_summary

SUBCOMMANDS = ("fit", "validate", "test")


class NoDataError(ValueError):
    """``fit`` / ``validate`` / ``test`` whose named configs give no data module."""

    MESSAGE = ("{sub}: no data. A command that names a config or a data module uses only what it names, and "
               "these give no data module (configs/synthetic.yaml applies when neither is named); give one: "
               "--config configs/synthetic.yaml (the default run), --config configs/folder_finetune.yaml "
               "--data.init_args.data_root DIR (your own images, README 'Your own images'), "
               "--config configs/bsds500.yaml")

SUBCOMMAND_HELP = {
    "fit": "Train (the default subcommand): python train.py fit --config CONFIG [--ckpt_path last.ckpt to resume].",
    "validate": "Evaluate a model on the validation set once.",
    "test": "Evaluate a model on the test set once (kept apart from fit, so that the test set is "
            "only used when you decide to).",
}
_SLIM_HINT = ("to start from its weights, pass it as --model.init_from (with the config of its "
              "architecture, e.g. --config configs/folder_finetune.yaml for models/hiseg_bsds500.ckpt)")
CKPT_PATH_HELP = {
    "fit": "A local last.ckpt (or other Lightning checkpoint) of a train.py run to resume, or 'last'. "
           "URLs are refused (download the file first); files are read with weights_only=True. "
           "To start from the weights of a shipped or slim checkpoint, use --model.init_from instead.",
    "validate": "A local Lightning checkpoint of a train.py run to evaluate, or 'best' / 'last'. URLs are "
                "refused; files are read with weights_only=True.",
    "test": "A local Lightning checkpoint of a train.py run to evaluate, or 'best' / 'last'. URLs are "
            "refused; files are read with weights_only=True.",
}
# Lightning's ckpt_path keywords (resolved by the trainer, not files)
_CKPT_KEYWORDS = ("last", "best", "hpc", "registry")


_TRUST_CONFIG = False  # --trust-config given: class paths and callables of the configs are not checked
_RESUMED_LOGGERS: list = []  # (name, version) of the loggers of the checkpoint a fit resumes: theirs to log into


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
        if not _TRUST_CONFIG:  # before anything is built or called
            check_config_objects(self.config[sub] if sub is not None else self.config)
        if sub is None:
            return
        cfg = self.config[sub]
        if cfg.get("data") is None:
            raise NoDataError(NoDataError.MESSAGE.format(sub=sub))
        refuse_remote_checkpoint(cfg["model"].get("init_from"), "--model.init_from")
        ckpt = cfg.get("ckpt_path")
        if ckpt is None or str(ckpt) in _CKPT_KEYWORDS or str(ckpt).startswith("registry:"):
            return
        refuse_remote_checkpoint(ckpt, "--ckpt_path")
        vouched = cfg.get("weights_only") is False
        try:  # clear errors for a missing, corrupt or unsafe file
            checkpoint = load_checkpoint_file(ckpt)
        except CheckpointError as e:
            if vouched and "unsafe" in str(e):  # Lightning reads its hyper-parameters weights-only in any case
                raise CheckpointError(f"--ckpt_path {ckpt} is not a safe checkpoint: it holds pickled Python objects, "
                                      "and Lightning reads a checkpoint's hyper-parameters as data only even with "
                                      "--weights_only false; nothing was run. Re-save it as tensors and plain "
                                      "values") from None
            raise
        if vouched:
            return  # the user vouches for this local file
        cfg["weights_only"] = True
        _refuse_slim_checkpoint(ckpt, checkpoint, sub)
        _check_architecture(ckpt, checkpoint)
        if sub == "fit":
            _resume_log_versions(cfg["trainer"], checkpoint)

    def setup_parser(self, add_subcommands, main_kwargs, subparser_kwargs) -> None:
        """Lightning's parser, with whole-sentence subcommand help and a ``--ckpt_path`` help
        that says what hiseg accepts (local files; URLs are refused)."""
        super().setup_parser(add_subcommands, main_kwargs, subparser_kwargs)
        for action in self.parser._actions:
            for choice in getattr(action, "_choices_actions", []):  # argparse's subcommand entries
                choice.help = SUBCOMMAND_HELP.get(choice.dest, choice.help)
            if hasattr(action, "_choices_actions"):  # the subcommand: fit when none is given (main), not "required"
                action.help = "fit when none is given"
                action._jsonargparse_preexpanded_help = True  # shown as written
        for sub, parser in getattr(self, "_subcommand_parsers", {}).items():
            for action in parser._actions:
                if action.dest == "ckpt_path":
                    action.help = CKPT_PATH_HELP[sub]

    def _remember_new_log_dirs(self) -> None:
        """The log folders this run will create (see :func:`_remove_unused_log_dirs`); every
        checkpoint of the run written atomically (:class:`hiseg.training.callbacks.AtomicCheckpointIO`)."""
        from .callbacks import use_atomic_checkpoints
        from .run_folders import refuse_replacing_loggers

        # before anything is written, in the process the user started: the other ranks of a DDP run (started by
        # its launcher once the run began) find the first rank's files in the same folders, and must join it
        if not _TRUST_CONFIG and first_process():
            refuse_replacing_loggers(self.trainer.loggers, _RESUMED_LOGGERS)
        use_atomic_checkpoints(self.trainer)
        global _NEW_LOG_DIRS
        _NEW_LOG_DIRS = (self.trainer, _new_dirs([lg.log_dir for lg in self.trainer.loggers if lg.log_dir]))

    def before_fit(self) -> None:
        self._remember_new_log_dirs()

    def before_validate(self) -> None:
        self._remember_new_log_dirs()

    def before_test(self) -> None:
        self._remember_new_log_dirs()

    def before_instantiate_classes(self) -> None:
        """Loggers without a ``save_dir`` log under ``trainer.default_root_dir``."""
        sub = self.config.get("subcommand")
        _logs_follow_root_dir((self.config[sub] if sub else self.config)["trainer"])

    def after_fit(self) -> None:
        """What the run made: validation F before and after, the checkpoints, the next command."""
        trainer, model = self.trainer, self.model
        if not trainer.is_global_zero:
            return
        sys.stderr.flush()  # after the progress bars, on lines of its own
        print(fit_summary(trainer, model), flush=True)


def _check_checkpoint_options(args) -> None:
    """The checks of :meth:`HisegCLI.parse_arguments` on raw ``--ckpt_path`` / ``--model.init_from``
    options (for a command refused before parsing)."""
    for i, a in enumerate(args):
        opt, eq, val = a.partition("=")
        if opt not in ("--ckpt_path", "--model.init_from"):
            continue
        val = val if eq else (args[i + 1] if i + 1 < len(args) else None)
        refuse_remote_checkpoint(val, opt)
        if opt == "--ckpt_path" and val not in (None, *_CKPT_KEYWORDS) and not str(val).startswith("registry:"):
            load_checkpoint_file(val)
        elif opt == "--model.init_from" and val and is_file_path(Path(val).expanduser()):
            load_checkpoint_file(val)


def _configs_give_data(argv) -> bool:
    """Whether the command gives a data module: ``--data`` / ``--data.class_path``, or a
    ``--config`` file with a ``data`` key (top level, or under the subcommand); a config that
    cannot be read counts as giving one (the parser then names its problem)."""
    import yaml

    if any(a.split("=")[0] in ("--data", "--data.class_path") for a in argv):
        return True
    for i, a in enumerate(argv):
        opt, eq, val = a.partition("=")
        if opt not in ("-c", "--config"):
            continue
        val = val if eq else (argv[i + 1] if i + 1 < len(argv) else None)
        try:
            cfg = yaml.safe_load(Path(val).read_text(encoding="utf-8")) or {}
        except (OSError, yaml.YAMLError, TypeError):
            return True
        if not isinstance(cfg, dict) or "data" in cfg or any(isinstance(cfg.get(s), dict) and "data" in cfg[s]
                                                             for s in SUBCOMMANDS):
            return True
    return False


def _refuse_slim_checkpoint(path, checkpoint, sub: str) -> None:
    """CheckpointError for a ``--ckpt_path`` that is not a Lightning training checkpoint (a slim
    file such as ``models/hiseg_bsds500.ckpt``: weights, architecture, pipeline only), which
    Lightning would crash on (``KeyError: 'pytorch-lightning_version'``)."""
    if isinstance(checkpoint, dict) and "pytorch-lightning_version" in checkpoint:
        return
    what = "resumes a train.py run from its Lightning checkpoint (last.ckpt)" if sub == "fit" else \
        "evaluates a train.py run's Lightning checkpoint"
    raise CheckpointError(f"--ckpt_path {path} is not a Lightning training checkpoint (no training state: a slim "
                          f"weights file); --ckpt_path {what}. {_SLIM_HINT[0].upper()}{_SLIM_HINT[1:]}.")


def _check_architecture(path, checkpoint) -> None:
    """CheckpointError, before anything is built, when the network a training checkpoint's
    hyper-parameters name (``arch``, ``arch_kwargs``: what Lightning gives the module on resume)
    does not fit its tensors (:func:`hiseg.models.weights.check_architecture`: bounded cost)."""
    from ..models.weights import check_architecture, checked_arch_kwargs, checkpoint_of

    ck = checkpoint_of(checkpoint, path)
    hp = ck.hyper_parameters
    if not hp:
        return  # no hyper-parameters: the config's network is built and loaded (strict)
    arch = hp.get("arch", "compact_boundary_net")  # the module's default
    if not isinstance(arch, str):
        raise CheckpointError(f"--ckpt_path {path}: hyper_parameters['arch'] must be a builder's name, got a "
                              f"{type(arch).__name__}")
    check_architecture(arch, checked_arch_kwargs(hp, path), ck.state_dict, path, hp)


class StartupRefusal(SystemExit):
    """A run refused before its first training step (a bad option, checkpoint or data set):
    exit status 2, as argument errors; ``str()`` is the one line printed on stderr."""

    def __init__(self, line: str):
        super().__init__(2)
        self.line = line

    def __str__(self) -> str:
        return self.line


def _refuse(error) -> StartupRefusal:
    """Print ``train.py: error: ERROR`` on stderr; the :class:`StartupRefusal` to raise."""
    line = f"train.py: error: {error}"
    print(line, file=sys.stderr)
    return StartupRefusal(line)


#: errors of a write that the disk refused (full, over quota, a file too large): one line, no traceback
_DISK_ERRORS = tuple(getattr(errno, n) for n in ("ENOSPC", "EDQUOT", "EFBIG") if hasattr(errno, n))

# (trainer, folders) of the running subcommand: the log folders it creates, removed again when
# it fails before its first training step (nothing half-made is left behind)
_NEW_LOG_DIRS = None


def _new_dirs(paths) -> list[Path]:
    """Each of ``paths`` that does not exist yet, with its missing parents, deepest first."""
    out = []
    for p in paths:
        p = Path(p).absolute()
        while not p.exists() and p not in out and p != p.parent:
            out.append(p)
            p = p.parent
    return sorted(out, key=lambda q: len(q.parts), reverse=True)


def _remove_unused_log_dirs() -> None:
    """After a run that failed before its first training step: remove the log folders it created
    (``version_N`` with at most a config, hyper-parameters or an empty events file), unless they
    hold a checkpoint."""
    global _NEW_LOG_DIRS
    if _NEW_LOG_DIRS is None:
        return
    (trainer, dirs), _NEW_LOG_DIRS = _NEW_LOG_DIRS, None
    if trainer.global_step > 0 or not trainer.is_global_zero:
        return
    import shutil

    for d in dirs:  # deepest first: a parent is removed only when nothing else is in it
        if not d.is_dir() or any(d.rglob("*.ckpt")):
            continue
        if all(f.is_dir() or f.name in ("config.yaml", "hparams.yaml", "metrics.csv") or f.name.startswith("events.")
               for f in d.rglob("*")):
            shutil.rmtree(d, ignore_errors=True)


def _appends_on_resume(class_path: str) -> bool:
    """Loggers that keep what a folder holds: TensorBoard (a new events file) and
    :class:`hiseg.training.module.CSVLogger`; Lightning's own CSVLogger deletes ``metrics.csv``."""
    from pytorch_lightning.loggers import TensorBoardLogger

    from .callbacks import CSVLogger

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
    global _RESUMED_LOGGERS
    _RESUMED_LOGGERS = [(old.get("name"), old.get("version")) for old in saved if isinstance(old, dict)]
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
                          f"if resumed there: it logs to a new version (hiseg.training.module.CSVLogger appends)",
                          stacklevel=2)


def _logs_follow_root_dir(trainer_cfg) -> None:
    """Loggers configured without a ``save_dir`` (:class:`hiseg.training.module.CSVLogger`
    allows it) log under the trainer's ``default_root_dir``."""
    entries = trainer_cfg.get("logger")
    for entry in entries if isinstance(entries, list) else [entries]:
        init_args = getattr(entry, "init_args", None)
        if init_args is not None and "save_dir" in init_args and init_args.get("save_dir") is None:
            init_args["save_dir"] = trainer_cfg.get("default_root_dir") or "."


def _quiet_lightning() -> None:
    """Silence, at their source, the start-up messages that are not the user's business:
    Lightning's promotional tip and its internal or by-design notices."""
    import logging

    class _NoTip(logging.Filter):
        def filter(self, record):
            return "litlogger" not in record.getMessage() and "Tip:" not in record.getMessage()

    for name in ("pytorch_lightning.trainer.connectors.logger_connector.logger_connector",
                 "pytorch_lightning.utilities.rank_zero", "lightning.pytorch.utilities.rank_zero"):
        logging.getLogger(name).addFilter(_NoTip())
    # Lightning internals calling a torch API torch has retired (not hiseg's code)
    warnings.filterwarnings("ignore", message=r".*isinstance\(treespec, LeafSpec\)")
    # hiseg's module moves its GraphBatch itself, by design
    warnings.filterwarnings("ignore", message=r"You have overridden `transfer_batch_to_device`")


def _trusted_argv(argv: list) -> list:
    """``argv`` without ``--trust-config`` (remembered for the run) and with today's class paths.
    Its config files are read within bounds first, trusted or not (:func:`check_config_text`:
    a FIFO, a huge file, an alias bomb refused); without it, the configs, options and
    environment variables it names are held to the allow-list. Each refusal in one line."""
    global _TRUST_CONFIG
    _TRUST_CONFIG = TRUST_FLAG in argv
    argv = [a for a in argv if a != TRUST_FLAG]
    try:
        check_config_text(argv, allow_list=not _TRUST_CONFIG)
        return current_class_paths(argv)
    except (UntrustedConfigError, ConfigFileError) as e:
        raise _refuse(e) from e


def main(argv: Optional[Sequence[str]] = None, default_config: Optional[Path] = None, run: bool = True):
    """Run the CLI. With no subcommand, ``fit`` is implied. ``default_config`` applies unless
    ``argv`` names a config (``--config``) or a data module (``--data``): then the run uses only
    what it names, and one without data stops with a message saying which to give."""
    from_command_line = argv is None or list(argv) == sys.argv[1:]
    default_config = shown_config(default_config)  # as the stored help texts name it (hiseg.training.help_texts)
    argv = _trusted_argv(list(sys.argv[1:] if argv is None else argv))
    if argv and argv[0] == "predict":
        raise SystemExit("train.py: error: predict is not a train.py subcommand; per-image hierarchies "
                         "(UCMs) of a trained checkpoint: hiseg predict IMAGES --checkpoint CKPT --out DIR")
    # the default run's config applies unless the command names a config or a data module: a user's
    # first change to it (`python train.py --trainer.max_epochs 1`) keeps it
    # (--data.init_args.X only sets an argument of the data module in force)
    names_config = any(a.split("=")[0] in ("-c", "--config", "--data", "--data.class_path") for a in argv)
    if run and (not argv or argv[0] not in SUBCOMMANDS + ("-h", "--help", "--print_config")):
        argv = ["fit"] + argv  # (run=False: no subcommand, the classes are only built)
    # no abbreviations (`--conf FILE` is not `--config FILE`): every option is read by its full name,
    # as the config check reads it (jsonargparse 5 drops them too)
    parser_kwargs = {"allow_abbrev": False, **{sub: {"description": SUBCOMMAND_HELP[sub], "allow_abbrev": False}
                                              for sub in SUBCOMMANDS}}
    if default_config is not None:
        if not names_config:  # the default run, with the command's overrides
            for sub in SUBCOMMANDS:
                parser_kwargs[sub]["default_config_files"] = [str(default_config)]
            if not run:  # no subcommand parsers: the main parser reads it
                parser_kwargs["default_config_files"] = [str(default_config)]
        elif run and argv[0] in SUBCOMMANDS and not any(a.split("=")[0] in ("-h", "--help", "--print_config")
                                                        for a in argv[1:]) and not _configs_give_data(argv[1:]):
            try:  # a refused checkpoint is the first thing to say
                _check_checkpoint_options(argv[1:])
            except (CheckpointError, FileNotFoundError) as e:
                raise _refuse(e) from e
            raise _refuse(NoDataError.MESSAGE.format(sub=argv[0]))
        parser_kwargs["description"] = (
            "Train hiseg's boundary network through the differentiable ultrametric layer. With no "
            f"arguments: fit on the embedded synthetic dataset ({Path(default_config).name}), on the CPU; "
            "options override it (--trainer.max_epochs 1). A command that names a config (--config) or a data "
            "module (--data) uses only what it names. "
            "Your own images: --config configs/folder_finetune.yaml --data.init_args.data_root DIR (README, "
            "'Your own images'). Subcommands: fit (default), validate, test; "
            "`python train.py fit --help` lists every option.")
    _quiet_lightning()
    if from_command_line:
        sys.argv = sys.argv[:1] + argv
    global _NEW_LOG_DIRS, _RESUMED_LOGGERS
    _NEW_LOG_DIRS, _RESUMED_LOGGERS = None, []  # set by the subcommand's before_* hook, by a resume
    try:
        cli = HisegCLI(
            HierarchicalSegmentationModule,
            pl.LightningDataModule,
            subclass_mode_data=True,
            seed_everything_default=0,
            save_config_callback=ExclusiveSaveConfig,  # never over a file (hiseg.training.run_folders)
            parser_kwargs=parser_kwargs,
            # from the command line, LightningCLI reads sys.argv itself (passing args too warns)
            args=None if from_command_line else argv,
            run=run,
        )
        _NEW_LOG_DIRS = None
        return cli
    except (CheckpointError, FileNotFoundError, NoDataError, DataError) as e:
        _remove_unused_log_dirs()
        raise _refuse(e) from e
    except ValueError as e:  # a bad option or data set, found before the first step: the user's, one line
        started = _NEW_LOG_DIRS is not None and _NEW_LOG_DIRS[0].global_step > 0
        _remove_unused_log_dirs()
        if started:
            raise
        raise _refuse(e) from e
    except OSError as e:
        _remove_unused_log_dirs()
        if e.errno in _DISK_ERRORS:  # a full disk, a quota, a file too large: the file is named, no traceback
            msg = e.strerror or str(e)
            if e.filename and str(e.filename) not in msg:
                msg = f"cannot write {e.filename}: {msg}"
            raise SystemExit(f"train.py: error: {msg}") from e
        raise
    except BaseException:
        _remove_unused_log_dirs()
        raise

