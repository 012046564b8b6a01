"""What a training config may name, checked before the parser imports anything: configs are
code (a class path outside :data:`TRUSTED_CLASS_PATHS`, a callable, LambdaCallback's arguments
are refused unless ``--trust-config``; a dotted value that is data, a torch dtype such as
``torch.bfloat16``, is not code), and the class paths of renamed modules are read as today's
(:data:`hiseg._compat.RENAMED_MODULES`)."""
from __future__ import annotations

import re
import warnings
from pathlib import Path
from typing import Sequence

from .._compat import current_path

__all__ = ["TRUSTED_CLASS_PATHS", "UNTRUSTED_CLASSES", "TRUST_FLAG", "UntrustedConfigError", "trusted_class_path",
           "check_config_text", "check_config_objects", "current_class_paths", "is_file_path"]

#: Where a training config's class paths may point without ``--trust-config``: hiseg, torch's
#: optimisers, schedulers and layers, Lightning's callbacks, loggers and strategies.
TRUSTED_CLASS_PATHS = ("hiseg.", "torch.optim.", "torch.nn.", "pytorch_lightning.callbacks.",
                       "pytorch_lightning.loggers.", "pytorch_lightning.strategies.", "lightning.pytorch.callbacks.",
                       "lightning.pytorch.loggers.", "lightning.pytorch.strategies.")
#: Lightning callbacks whose arguments are code: refused without ``--trust-config`` whatever their arguments.
UNTRUSTED_CLASSES = ("pytorch_lightning.callbacks.LambdaCallback", "lightning.pytorch.callbacks.LambdaCallback")
TRUST_FLAG = "--trust-config"
_DOTTED = re.compile(r"^[A-Za-z_]\w*(\.[A-Za-z_]\w*)+$")


class UntrustedConfigError(ValueError):
    """A training config names code outside :data:`TRUSTED_CLASS_PATHS` (without ``--trust-config``)."""


def trusted_class_path(path: str) -> bool:
    """Whether a config may name ``path`` without ``--trust-config``."""
    return path not in UNTRUSTED_CLASSES and any(path.startswith(p) for p in TRUSTED_CLASS_PATHS)


def _untrusted(where: str, what: str) -> UntrustedConfigError:
    return UntrustedConfigError(
        f"{where} names {what}, outside the classes a training config may name (hiseg, torch.optim, torch.nn, "
        f"Lightning's callbacks, loggers and strategies; no callables): a config is code. Give {TRUST_FLAG} to run "
        "a config you trust (docs/training.md, 'Configs are code')")


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


def _scan_raw(obj, where: str) -> None:
    """UntrustedConfigError for a class path or a dotted name of code in a config's raw values
    (before the parser imports anything)."""
    if isinstance(obj, dict):
        for k, v in obj.items():
            _scan_raw(v, f"{where}.{k}" if where else str(k))
    elif isinstance(obj, list):
        for i, v in enumerate(obj):
            _scan_raw(v, f"{where}[{i}]")
    elif isinstance(obj, str) and _names_module(obj) and not trusted_class_path(obj) and not _is_data(obj):
        raise _untrusted(where or "the command line", repr(obj))


def check_config_text(argv: Sequence[str]) -> None:
    """:func:`_scan_raw` over the configs (``--config FILE`` or inline YAML) and option values
    of a ``train.py`` command line, before it is parsed: the parser imports the classes a config
    names. UntrustedConfigError naming the first one outside :data:`TRUSTED_CLASS_PATHS`."""
    import yaml

    args = list(argv)
    i = 0
    while i < len(args):
        a = args[i]
        opt, eq, val = a.partition("=")
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
        if opt in ("-c", "--config") and is_file_path(Path(val)):
            try:
                doc = yaml.safe_load(Path(val).read_text())
            except (OSError, yaml.YAMLError, UnicodeDecodeError):
                continue  # the parser names it
            _scan_raw(doc, f"config {val}")
            continue
        try:
            doc = yaml.safe_load(val)
        except yaml.YAMLError:
            doc = val
        _scan_raw(doc, opt.lstrip("-").rstrip("+"))


def check_config_objects(cfg, where: str = "") -> None:
    """The check after parsing, before anything is built: a ``class_path`` outside
    :data:`TRUSTED_CLASS_PATHS`, or a callable or class the parser resolved from a config
    (LambdaCallback's ``on_fit_start: os.system``), raise UntrustedConfigError."""
    import functools
    import inspect

    items = cfg.__dict__.items() if hasattr(cfg, "__dict__") and type(cfg).__name__ == "Namespace" else \
        cfg.items() if isinstance(cfg, dict) else enumerate(cfg) if isinstance(cfg, (list, tuple)) else None
    if items is None:
        if inspect.isclass(cfg):
            name = f"{cfg.__module__}.{cfg.__qualname__}"
            if not trusted_class_path(name):
                raise _untrusted(where, f"class {name}")
        elif inspect.isroutine(cfg) or isinstance(cfg, functools.partial):  # a function, builtin, method
            name = f"{getattr(cfg, '__module__', None) or ''}.{getattr(cfg, '__qualname__', type(cfg).__name__)}"
            raise _untrusted(where, f"the callable {name.lstrip('.')}")
        return
    for k, v in list(items):
        here = f"{where}.{k}" if where else str(k)
        if k == "class_path" and isinstance(v, str) and not trusted_class_path(v):
            raise _untrusted(where or "the config", f"class_path {v}")
        check_config_objects(v, here)


def current_class_paths(argv: list[str]) -> list[str]:
    """``argv`` with the class paths of renamed modules (``hiseg.callbacks.LastCheckpoint``, in an
    option or in a ``--config`` file) replaced by today's (:data:`hiseg._compat.RENAMED_MODULES`),
    each file named in a warning; a config that needs it is passed as its YAML text, the file
    left as it is."""
    out, config_next = [], False
    for arg in argv:
        flag, eq, value = arg.partition("=")
        is_config = config_next or (eq and flag in ("-c", "--config"))
        path = Path(value if eq else arg).expanduser() if is_config else None
        new = arg
        if path is not None and is_file_path(path):
            text = path.read_text(encoding="utf-8", errors="replace")
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
