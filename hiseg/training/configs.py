"""What a training config may name, checked before the parser imports anything and again once
it has parsed: configs are code. Every class path, and every value that is code (a dotted name
of an importable module; once parsed, anything callable: a function, a class, a partial, a
ufunc such as ``numpy.add``, an object with ``__call__``), must be one of the objects of an
explicit registry (:func:`allowed_objects`), compared as objects, never by a name's prefix
(``hiseg.data.datamodule.pl.LightningDataModule`` is Lightning's base class, not hiseg's).
Every way a config arrives is read: ``-c/--config`` (``-cFILE``, ``--config=FILE``; the parser
takes no abbreviations), inline YAML, option values, configs included by path, and the parser's
environment variables (``JSONARGPARSE_DEFAULT_ENV=true``, ``PL_FIT__TRAINER__CALLBACKS=...``).
``--trust-config`` is the one way past it. A dotted value that is data, a torch dtype such as
``torch.bfloat16``, is not code. Config files are read within bounds
(:mod:`hiseg.training.config_files`), and the class paths of renamed modules are read as
today's (:data:`hiseg._compat.RENAMED_MODULES`)."""
from __future__ import annotations

import functools
import importlib
import os
import re
import warnings
from pathlib import Path
from typing import Mapping, Optional, Sequence

from .._compat import current_path
from .config_files import ConfigFileError, is_config_path, load_config_yaml, read_config_text

__all__ = ["ALLOWED_KINDS", "REFUSED_CLASSES", "TRUST_FLAG", "UntrustedConfigError", "ConfigFileError",
           "allowed_objects", "allowed_names", "trusted_class_path", "check_config_text", "check_config_objects",
           "current_class_paths", "is_file_path", "config_values"]

#: The registry's rule, module by module: the public classes of each module (by any name they
#: have there, and their own ``module.qualname``) that subclass one of the named bases, the
#: bases themselves excepted: hiseg's data modules, callbacks, loggers and LightningModule,
#: torch's optimisers, schedulers and layers, Lightning's callbacks, loggers and strategies.
ALLOWED_KINDS = (
    ("hiseg.data.datamodule", ("pytorch_lightning.LightningDataModule",)),
    ("hiseg.data.edges", ("pytorch_lightning.LightningDataModule",)),
    ("hiseg.training.callbacks", ("pytorch_lightning.Callback", "pytorch_lightning.loggers.Logger")),
    ("hiseg.training.module", ("pytorch_lightning.LightningModule",)),
    ("torch.optim", ("torch.optim.Optimizer",)),
    ("torch.optim.lr_scheduler", ("torch.optim.lr_scheduler.LRScheduler",)),
    ("torch.nn", ("torch.nn.Module",)),
    ("pytorch_lightning.callbacks", ("pytorch_lightning.Callback",)),
    ("pytorch_lightning.loggers", ("pytorch_lightning.loggers.Logger",)),
    ("pytorch_lightning.strategies", ("pytorch_lightning.strategies.Strategy",)),
)
#: Classes of those modules whose arguments are code: refused without ``--trust-config``.
REFUSED_CLASSES = ("pytorch_lightning.callbacks.LambdaCallback",)
#: hiseg's lazily exported data modules (``hiseg.data.SyntheticDataModule``): names of the registry too.
_LAZY_EXPORTS = (("hiseg.data", "hiseg.data.datamodule", ("SyntheticDataModule", "BSDS500DataModule",
                                                           "FolderDataModule")),)
TRUST_FLAG = "--trust-config"
_DOTTED = re.compile(r"^[A-Za-z_]\w*(\.[A-Za-z_]\w*)+$")
#: Options and keys whose values are files or folders, not configs (checkpoints are read as
#: data by :func:`hiseg.models.weights.load_checkpoint_file`)
_NOT_CONFIG_KEYS = re.compile(r"(^|\.)(ckpt_path|init_from|data_root|val_root|root|dirpath|save_dir|default_root_dir|"
                              r"cache_dir|train_data)$")  # train_data: the pixel stage's packed .npz (data.edges)
#: The most configs one command may include by path (each bounded by itself).
MAX_INCLUDED_CONFIGS = 64


class UntrustedConfigError(ValueError):
    """A training config names code outside :func:`allowed_objects` (without ``--trust-config``)."""


def _object(path: str):
    """The object ``path`` names (its longest importable module, then attributes); None if none."""
    parts = path.split(".")
    for i in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:i]))
        except ImportError:
            continue
        except Exception:  # noqa: BLE001 - a module failing at import names nothing usable
            return None
        for p in parts[i:]:
            obj = getattr(obj, p, None)
            if obj is None:
                return None
        return obj
    return None


@functools.lru_cache(maxsize=1)
def _registry() -> tuple[dict, dict]:
    """({id: object}, {name: object}) of the registry (:data:`ALLOWED_KINDS`); imports only
    the modules it names (hiseg's, torch's, Lightning's)."""
    import inspect

    refused = {id(_object(p)) for p in REFUSED_CLASSES}
    objects, names = {}, {}
    for module_name, base_names in ALLOWED_KINDS:
        module = importlib.import_module(module_name)
        bases = tuple(_object(b) for b in base_names)
        for attr, obj in vars(module).items():
            if attr.startswith("_") or not inspect.isclass(obj) or obj in bases or id(obj) in refused:
                continue
            if issubclass(obj, bases) and not obj.__name__.startswith("_"):
                objects[id(obj)] = obj
                names[f"{module_name}.{attr}"] = obj
                names[f"{obj.__module__}.{obj.__qualname__}"] = obj
    for module_name, _ in ALLOWED_KINDS:  # an allowed class re-exported by another of these modules, by that path
        for attr, obj in vars(importlib.import_module(module_name)).items():  # too (hiseg.training.module.CSVLogger)
            if id(obj) in objects:
                names.setdefault(f"{module_name}.{attr}", obj)
    for module_name, source, attrs in _LAZY_EXPORTS:
        for attr in attrs:
            obj = getattr(importlib.import_module(source), attr)
            if id(obj) in objects:
                names[f"{module_name}.{attr}"] = obj
    return objects, names


def allowed_objects() -> list:
    """The objects a training config may name without ``--trust-config`` (classes only: no function)."""
    return list(_registry()[0].values())


def allowed_names() -> dict:
    """{name: object} of the names by which a config may name them (``pytorch_lightning.callbacks.
    ModelCheckpoint`` and ``pytorch_lightning.callbacks.model_checkpoint.ModelCheckpoint``, ...)."""
    return dict(_registry()[1])


def trusted_class_path(path: str) -> bool:
    """Whether a config may name ``path`` without ``--trust-config``: one of :func:`allowed_names`
    exactly (nothing outside the registry's modules is imported to tell)."""
    return isinstance(path, str) and path in _registry()[1]


def _untrusted(where: str, what: str) -> UntrustedConfigError:
    return UntrustedConfigError(
        f"{where} names {what}, outside the classes a training config may name (hiseg's data modules, callbacks and "
        "loggers, torch's optimisers, schedulers and layers, Lightning's callbacks, loggers and strategies; no "
        f"callables): a config is code. Give {TRUST_FLAG} to run a config you trust (docs/training.md, 'Configs "
        "are code')")


def _is_data(text: str) -> bool:
    """Whether the dotted ``text`` names a value that is plain data, not code: one of torch's
    dtypes (``torch.float32``, ``torch.bfloat16``; looked up in torch's own namespace, which
    training imports anyway: no other module is imported, no lazy submodule loaded)."""
    head, _, name = text.partition(".")
    if head != "torch" or not name or "." in name:
        return False
    import torch

    return isinstance(vars(torch).get(name), torch.dtype)


def _names_module(text: str) -> bool:
    """Whether ``text`` is a dotted name whose first part is an importable module (found, not imported)."""
    import importlib.util

    if not _DOTTED.match(text):
        return False
    try:
        return importlib.util.find_spec(text.split(".")[0]) is not None
    except (ImportError, ValueError):  # pragma: no cover
        return False


def is_file_path(path: Path) -> bool:
    """``path.is_file()``, False for a value that cannot be a path at all (a config given as its
    YAML text: a name too long, a NUL byte) instead of OSError / ValueError."""
    try:
        return path.is_file()
    except (OSError, ValueError):
        return False


class _Scan:
    """One command line's walk over its configs and values (:func:`check_config_text`): the
    configs it includes by path are read within bounds and walked too, at most
    :data:`MAX_INCLUDED_CONFIGS` of them."""

    def __init__(self, allow_list: bool):
        self.allow_list, self.included = allow_list, 0

    def config(self, text: str, where: str, base: Optional[Path]) -> None:
        """A config given as a file (an existing path) or as its YAML text."""
        path = _existing(text, base)
        if path is not None:
            self.file(path)
            return
        import yaml

        try:
            doc = load_config_yaml(text, where)
        except yaml.YAMLError:
            return  # the parser names it
        self.value(doc, where, base, "")

    def file(self, path: Path) -> None:
        import yaml

        self.included += 1
        if self.included > MAX_INCLUDED_CONFIGS:
            raise ConfigFileError(f"config {path}: more than {MAX_INCLUDED_CONFIGS} configs included by path in one "
                                  "command (a config including itself?); nothing was run")
        text = read_config_text(path)
        try:
            doc = load_config_yaml(text, f"config {path}")
        except yaml.YAMLError:
            return  # the parser names it
        self.value(doc, f"config {path}", path.parent, "")

    def value(self, obj, where: str, base: Optional[Path], key: str) -> None:
        """UntrustedConfigError for a dotted name of code in ``obj`` (before the parser imports
        anything); a string naming a file is a config included by path (read and walked)."""
        if isinstance(obj, dict):
            for k, v in obj.items():
                self.value(v, f"{where}.{k}" if where else str(k), base, f"{key}.{k}" if key else str(k))
        elif isinstance(obj, list):
            for i, v in enumerate(obj):
                self.value(v, f"{where}[{i}]", base, key)
        elif isinstance(obj, str):
            name = current_path(obj)
            if self.allow_list and _names_module(name) and not trusted_class_path(name) and not _is_data(name):
                raise _untrusted(where or "the command line", repr(obj))
            if _NOT_CONFIG_KEYS.search(key):
                return  # a checkpoint or a folder
            path = _existing(obj, base)
            if path is not None and not os.path.isdir(path):
                self.file(path)  # not a regular file: refused there, never opened


def _existing(text: str, base: Optional[Path]) -> Optional[Path]:
    """The path ``text`` names, relative to ``base`` (the including config's folder) or to the
    current folder, when something is there; None otherwise."""
    if not isinstance(text, str) or "\n" in text:
        return None
    for p in ([base / text] if base is not None else []) + [Path(text)]:
        if is_config_path(p):
            return p.expanduser()
    return None


def config_values(argv: Sequence[str], environ: Optional[Mapping[str, str]] = None):
    """``(option, value, is_config)`` of a ``train.py`` command line, as the parser reads them:
    ``-c FILE``, ``-cFILE``, ``-c=FILE``, ``--config[=]FILE`` (configs), the other options'
    values, and, when jsonargparse reads the environment (``JSONARGPARSE_DEFAULT_ENV=true``),
    the ``PL_*`` variables (``PL_FIT__CONFIG``: a config; ``PL_FIT__TRAINER__CALLBACKS``: a value)."""
    args, i, out = list(argv), 0, []
    while i < len(args):
        a = args[i]
        opt, eq, val = a.partition("=")
        if a.startswith("-c") and not a.startswith("--") and len(a) > 2:  # -cFILE, -c=FILE
            out.append(("-c", a[3:] if a[2] == "=" else a[2:], True))
            i += 1
            continue
        if not opt.startswith("-") or opt in ("-h", "--help", "--print_config"):
            i += 1
            continue
        if not eq:
            if i + 1 >= len(args) or args[i + 1].startswith("--"):
                i += 1
                continue
            val, i = args[i + 1], i + 2
        else:
            i += 1
        out.append((opt, val, opt in ("-c", "--config")))
    environ = os.environ if environ is None else environ
    if environ.get("JSONARGPARSE_DEFAULT_ENV", "").lower() == "true":
        for name, val in sorted(environ.items()):
            if name.startswith("PL_"):
                out.append((f"environment variable {name}", val, name == "PL_CONFIG" or name.endswith("__CONFIG")))
    return out


def check_config_text(argv: Sequence[str], environ: Optional[Mapping[str, str]] = None,
                      allow_list: bool = True) -> None:
    """Walk the configs (``--config FILE`` or inline YAML, the files they include by path) and
    option values of a ``train.py`` command line and of its environment (:func:`config_values`)
    before it is parsed (the parser imports the classes a config names): ConfigFileError for a
    config file that is not a regular file, too large or an alias bomb
    (:mod:`hiseg.training.config_files`); with ``allow_list`` (no ``--trust-config``),
    UntrustedConfigError naming the first value outside :func:`allowed_names`."""
    import yaml

    scan = _Scan(allow_list)
    for opt, val, is_config in config_values(argv, environ):
        where = opt if opt.startswith("environment") else opt.lstrip("-").rstrip("+")
        if is_config:
            scan.config(val, where, None)
            continue
        try:
            doc = load_config_yaml(val, where)
        except yaml.YAMLError:
            doc = val
        scan.value(doc, where, None, where.rsplit("__", 1)[-1].lower() if opt.startswith("environment") else where)


def check_config_objects(cfg, where: str = "") -> None:
    """The check after parsing, before anything is built: a ``class_path`` that does not resolve
    to one of :func:`allowed_objects`, or a value that is callable (a function, a class, a
    partial, a ufunc, an object with ``__call__``: LambdaCallback's ``on_fit_start: os.system``,
    ``numpy.add``) and not one of them, raise UntrustedConfigError."""
    objects = _registry()[0]
    items = cfg.__dict__.items() if type(cfg).__name__ == "Namespace" else \
        cfg.items() if isinstance(cfg, dict) else enumerate(cfg) if isinstance(cfg, (list, tuple)) else None
    if items is None:
        if callable(cfg) and id(cfg) not in objects and not _is_path(cfg):
            raise _untrusted(where or "the config", f"the callable {_callable_name(cfg)}")
        return
    for k, v in list(items):
        here = f"{where}.{k}" if where else str(k)
        if k == "class_path" and isinstance(v, str) and id(_object(current_path(v))) not in objects:
            raise _untrusted(where or "the config", f"class_path {v}")
        check_config_objects(v, here)


def _is_path(obj) -> bool:
    """Whether ``obj`` is a path the parser made (``__default_config__``: a ``jsonargparse.Path``,
    callable for its text): data, not code."""
    from jsonargparse import Path as ParserPath

    return type(obj) is ParserPath


def _callable_name(obj) -> str:
    """``module.qualname`` of a callable, or its type's for an instance (``numpy.add``: numpy.ufunc 'add')."""
    name = getattr(obj, "__qualname__", None) or getattr(obj, "__name__", None)
    module = getattr(obj, "__module__", None) or ""
    if name is None:
        return f"{type(obj).__module__}.{type(obj).__qualname__} object"
    return f"{module}.{name}".lstrip(".")


def current_class_paths(argv: list[str]) -> list[str]:
    """``argv`` with the class paths of renamed modules (``hiseg.callbacks.LastCheckpoint``, in an
    option or in a ``--config`` file) replaced by today's (:data:`hiseg._compat.RENAMED_MODULES`),
    each file named in a warning; a config that needs it is passed as its YAML text, the file
    left as it is. Files are read within bounds (:func:`~hiseg.training.config_files.read_config_text`)."""
    out, config_next = [], False
    for arg in argv:
        flag, eq, value = arg.partition("=")
        is_config = config_next or (eq and flag in ("-c", "--config"))
        path = Path(value if eq else arg).expanduser() if is_config else None
        new = arg
        if path is not None and is_file_path(path):
            text = read_config_text(path)
            if current_path(text) != text:
                warnings.warn(f"{path} names hiseg classes at their former paths (hiseg.callbacks, "
                              "hiseg.lightning, ...): read with today's (hiseg.training.callbacks, ...); "
                              "update the file", FutureWarning, stacklevel=3)
                new = (f"{flag}=" if eq else "") + current_path(text)
        elif current_path(arg) != arg:
            warnings.warn(f"{arg} names a hiseg class at its former path: read as {current_path(arg)}",
                          FutureWarning, stacklevel=3)
            new = current_path(arg)
        out.append(new)
        config_next = not eq and arg in ("-c", "--config")
    return out
