"""Model registry and checkpoint loading, in the torchvision style.

Two registries live here:

* **builders** (architectures): ``name -> builder(weights=None, **kwargs)``; see
  :func:`list_models`, :func:`get_model`, :func:`register_model`.
* **weights** (trained checkpoints): ``name -> ModelWeights``; see
  :func:`list_weights`, :func:`get_weights`, :func:`register_weights`.

A checkpoint file is *data, never code*: every file is read with
``torch.load(path, map_location=..., weights_only=True)``.  A checkpoint that pickles
custom classes (e.g. a Lightning checkpoint whose hyper-parameters hold a ``Path`` or an
arbitrary object) is refused with :class:`CheckpointError`; if you trust the file, allow
the classes explicitly around the call::

    with torch.serialization.safe_globals([pathlib.PosixPath]):
        model = get_model("compact_boundary_net", weights="run.ckpt")

Accepted checkpoint layouts (see :func:`extract_state_dict`):

1. a plain ``state_dict`` (``{"stage1.0.dw.weight": tensor, ...}``);
2. a Lightning checkpoint ``{"state_dict": {"model.<key>": tensor, ...},
   "hyper_parameters": {...}, ...}``: keys under the ``model.`` prefix are taken and the
   prefix is stripped (other keys, e.g. loss buffers, are ignored);
3. the file written by :func:`save_weights`: ``{"state_dict": {...}, "hyper_parameters":
   {"arch": ..., "arch_kwargs": {...}}, "metadata": {...}}``.

Architecture hints: ``hyper_parameters["arch"]`` (a registered builder name) and
``hyper_parameters["arch_kwargs"]`` (its keyword arguments) are used by
:func:`load_model` to rebuild the network, and by error messages to say which
architecture a mismatching checkpoint was made for.  A LightningModule that wants its
checkpoints loadable by path should save these two hyper-parameters.
"""
from __future__ import annotations

import copy
import importlib
import os
import pickle
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping

import torch
from torch import nn

__all__ = [
    "CheckpointError",
    "ArchitectureMismatchError",
    "ModelWeights",
    "models_dir",
    "register_model",
    "list_models",
    "get_model_builder",
    "get_model",
    "register_weights",
    "list_weights",
    "get_weights",
    "load_checkpoint_file",
    "refuse_remote_checkpoint",
    "extract_state_dict",
    "load_state_dict_checked",
    "load_weights",
    "save_weights",
    "load_model",
]

PathLike = str | os.PathLike


class CheckpointError(RuntimeError):
    """A checkpoint file exists but cannot be used (corrupt, unsafe, wrong layout)."""


class ArchitectureMismatchError(CheckpointError):
    """A checkpoint's tensors do not fit the model they are loaded into."""


# --------------------------------------------------------------------------- models dir
def models_dir() -> Path:
    """The model-zoo directory that relative :attr:`ModelWeights.path` values start from.

    Returns
    -------
    pathlib.Path
        ``$HISEG_MODELS_DIR`` when that environment variable is set, else the
        ``models/`` folder next to the ``hiseg`` package (the repository's ``models/``
        in a checkout).  The directory is not required to exist.
    """
    env = os.environ.get("HISEG_MODELS_DIR")
    if env:
        return Path(env).expanduser()
    return Path(__file__).resolve().parents[2] / "models"


# --------------------------------------------------------------------------- ModelWeights
@dataclass(frozen=True)
class ModelWeights:
    """A trained checkpoint and what is needed to rebuild and describe it.

    Parameters
    ----------
    name : str
        Registry name, e.g. ``"compact_boundary_net_bsds500_v1"``.
    path : str or os.PathLike
        Checkpoint file, absolute or relative to :func:`models_dir`.
    builder : str
        Registered builder name (see :func:`list_models`), e.g.
        ``"compact_boundary_net"``.
    builder_kwargs : mapping
        Keyword arguments the builder needs to rebuild the trained architecture
        (e.g. ``{"width": 24}``).
    metadata : mapping
        Free-form description: training data, config file, metrics, licence, ...

    Notes
    -----
    ``meta`` is an alias of ``metadata`` (torchvision spelling).
    """

    name: str
    path: PathLike
    builder: str
    builder_kwargs: Mapping[str, Any] = field(default_factory=dict)
    metadata: Mapping[str, Any] = field(default_factory=dict)

    @property
    def meta(self) -> Mapping[str, Any]:
        return self.metadata

    def resolve_path(self) -> Path:
        """Absolute checkpoint path (relative paths start at :func:`models_dir`)."""
        p = Path(self.path).expanduser()
        return p if p.is_absolute() else models_dir() / p

    def load_checkpoint(self, map_location: Any = "cpu") -> Any:
        """The raw checkpoint object, read with ``weights_only=True``.

        Raises
        ------
        FileNotFoundError, CheckpointError
            See :func:`load_checkpoint_file`.
        """
        return load_checkpoint_file(self.resolve_path(), map_location=map_location)

    def get_state_dict(self, map_location: Any = "cpu") -> dict[str, torch.Tensor]:
        """The model's state dict (prefixes stripped, see :func:`extract_state_dict`)."""
        return extract_state_dict(self.load_checkpoint(map_location), source=self.resolve_path())[0]

    def to_dict(self) -> dict[str, Any]:
        """JSON-friendly dict (for a model card); inverse of :meth:`from_dict`."""
        return {
            "name": self.name,
            "path": str(self.path),
            "builder": self.builder,
            "builder_kwargs": dict(self.builder_kwargs),
            "metadata": copy.deepcopy(dict(self.metadata)),
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "ModelWeights":
        """Build from :meth:`to_dict` output (e.g. a JSON model card)."""
        return cls(
            name=d["name"],
            path=d["path"],
            builder=d["builder"],
            builder_kwargs=dict(d.get("builder_kwargs", {})),
            metadata=dict(d.get("metadata", {})),
        )


# --------------------------------------------------------------------------- registries
# Builders are referenced lazily ("module:function") so that this module can be imported
# by the architecture modules without an import cycle.
_BUILDERS: dict[str, Callable[..., nn.Module] | str] = {
    "compact_boundary_net": "hiseg.models.boundary_net:compact_boundary_net",
    "vgg16_boundary_net": "hiseg.models.backbone_net:vgg16_boundary_net",
    "resnet18_boundary_net": "hiseg.models.backbone_net:resnet18_boundary_net",
}
_WEIGHTS: dict[str, ModelWeights] = {}


def register_model(name: str, builder: Callable[..., nn.Module], *, overwrite: bool = False) -> None:
    """Add an architecture builder ``builder(weights=None, **kwargs) -> nn.Module``.

    Raises
    ------
    ValueError
        If ``name`` is taken and ``overwrite`` is False.
    """
    if name in _BUILDERS and not overwrite:
        raise ValueError(f"a model builder named {name!r} is already registered")
    _BUILDERS[name] = builder


def list_models() -> list[str]:
    """Sorted names of the registered architecture builders."""
    return sorted(_BUILDERS)


def get_model_builder(name: str) -> Callable[..., nn.Module]:
    """The builder function registered under ``name``.

    Raises
    ------
    ValueError
        Unknown name (the message lists the known ones).
    """
    try:
        b = _BUILDERS[name]
    except KeyError:
        raise ValueError(f"unknown model {name!r}; known models: {', '.join(list_models())}") from None
    if isinstance(b, str):
        module, fn = b.split(":")
        b = getattr(importlib.import_module(module), fn)
        _BUILDERS[name] = b
    return b


def get_model(name: str, weights: Any = None, **kwargs: Any) -> nn.Module:
    """Build the architecture ``name``, optionally loading trained ``weights``.

    Parameters
    ----------
    name : str
        A name from :func:`list_models`.
    weights : None, ModelWeights, str or os.PathLike
        ``None`` (random init), a :class:`ModelWeights`, a registered weights name or a
        checkpoint path.
    **kwargs
        Passed to the builder (e.g. ``width=24``, ``pretrained_backbone="auto"``).

    Returns
    -------
    torch.nn.Module
        The model, on the CPU, in training mode.

    Raises
    ------
    ValueError, FileNotFoundError, CheckpointError
        Unknown name; see the builder and :func:`load_state_dict_checked`.
    """
    return get_model_builder(name)(weights=weights, **kwargs)


def register_weights(weights: ModelWeights, *, overwrite: bool = False) -> ModelWeights:
    """Add ``weights`` to the weights registry; returns it.

    Raises
    ------
    ValueError
        Name taken (and not ``overwrite``) or unknown builder.
    """
    if weights.name in _WEIGHTS and not overwrite:
        raise ValueError(f"weights named {weights.name!r} are already registered")
    if weights.builder not in _BUILDERS:
        raise ValueError(f"weights {weights.name!r} name unknown builder {weights.builder!r}; known: {list_models()}")
    _WEIGHTS[weights.name] = weights
    return weights


def list_weights(builder: str | None = None) -> list[str]:
    """Sorted registered weights names, optionally only those of one builder."""
    return sorted(n for n, w in _WEIGHTS.items() if builder is None or w.builder == builder)


def get_weights(name: str) -> ModelWeights:
    """The :class:`ModelWeights` registered under ``name``.

    Raises
    ------
    ValueError
        Unknown name.
    """
    try:
        return _WEIGHTS[name]
    except KeyError:
        known = ", ".join(list_weights()) or "(none registered)"
        raise ValueError(f"unknown weights {name!r}; registered weights: {known}") from None


# --------------------------------------------------------------------------- file loading
_URL = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*://")


def refuse_remote_checkpoint(path: Any, what: str = "checkpoint") -> None:
    """Raise :class:`CheckpointError` when ``path`` is a URL (``http://``, ``s3://``, ...).

    A checkpoint is unpickled; one fetched from a URL is not a file anyone has checked, and
    Lightning loads URLs with ``weights_only=False`` (it runs what the file pickles).
    """
    if path is not None and _URL.match(str(path)):
        raise CheckpointError(
            f"{what} {path}: remote checkpoints are refused (a checkpoint is unpickled, and one "
            f"from a URL can run code). Download it, check where it comes from, and pass the local file.")


def load_checkpoint_file(path: PathLike, map_location: Any = "cpu") -> Any:
    """Read a checkpoint with ``torch.load(..., weights_only=True)``.

    Parameters
    ----------
    path : str or os.PathLike
    map_location : passed to :func:`torch.load` (default ``"cpu"``).

    Returns
    -------
    object
        Whatever the file holds (usually a dict).

    Cost
    ----
    One read of the file.

    Raises
    ------
    FileNotFoundError
        No such file (the message gives the absolute path).
    CheckpointError
        ``path`` is a URL (see :func:`refuse_remote_checkpoint`); the file is not a torch
        checkpoint (truncated, corrupted, another format), or it
        needs classes that ``weights_only`` loading refuses to import.
    """
    refuse_remote_checkpoint(path)
    p = Path(path).expanduser()
    if not p.is_file():
        raise FileNotFoundError(f"checkpoint file not found: {p.resolve()}")
    try:
        return torch.load(p, map_location=map_location, weights_only=True)
    except pickle.UnpicklingError as e:
        msg = re.sub(r"\x1b\[[0-9;]*m", "", str(e))
        # Only a refused *global* (a class or function to import) means "code in the
        # file"; any other unpickling failure (e.g. "Unsupported operand") is corruption.
        if "Unsupported global" in msg:
            detail = next(ln.strip() for ln in msg.splitlines() if "Unsupported global" in ln)
            raise CheckpointError(
                f"checkpoint {p} holds Python objects that a weights-only load refuses "
                f"(a checkpoint is read as data, never code). If you trust the file, allow "
                f"the listed classes with `with torch.serialization.safe_globals([...]):` "
                f"around the call, or re-save only its state_dict. Details: {detail}"
            ) from e
        detail = next((ln.strip() for ln in msg.splitlines() if "Unsupported" in ln), msg.splitlines()[0] if msg else "")
        raise CheckpointError(f"checkpoint {p} is corrupted or not a torch checkpoint: {detail}") from e
    except Exception as e:  # zip/pickle/EOF/decode errors: all mean "not a usable checkpoint"
        raise CheckpointError(f"checkpoint {p} is corrupted or not a torch checkpoint: {type(e).__name__}: {e}") from e


def extract_state_dict(
    checkpoint: Any, *, prefix: str = "model.", source: Any = "<checkpoint>"
) -> tuple[dict[str, torch.Tensor], dict[str, Any]]:
    """Split a loaded checkpoint into ``(state_dict, hyper_parameters)``.

    Parameters
    ----------
    checkpoint : dict
        A plain state dict, or a dict with a ``"state_dict"`` entry (Lightning or
        :func:`save_weights` layout) and optional ``"hyper_parameters"``.
    prefix : str
        When some keys start with ``prefix`` (Lightning's attribute name of the
        network, ``"model."``), only those are kept, with the prefix removed.  A
        ``"module."`` (DataParallel) or ``"_orig_mod."`` (torch.compile) prefix on every
        key is removed too.
    source : any
        Named in error messages (usually the file path).

    Returns
    -------
    state_dict : dict of str to Tensor
    hyper_parameters : dict
        ``{}`` when the checkpoint has none.

    Raises
    ------
    CheckpointError
        Not a mapping, or no tensors found.
    """
    if not isinstance(checkpoint, Mapping):
        raise CheckpointError(f"checkpoint {source} holds a {type(checkpoint).__name__}, not a state dict")
    hparams: dict[str, Any] = {}
    if "state_dict" in checkpoint and isinstance(checkpoint["state_dict"], Mapping):
        sd = checkpoint["state_dict"]
        hp = checkpoint.get("hyper_parameters", {})
        hparams = dict(hp) if isinstance(hp, Mapping) else {}
    else:
        sd = checkpoint
    sd = {k: v for k, v in sd.items() if isinstance(k, str) and isinstance(v, torch.Tensor)}
    if not sd:
        raise CheckpointError(f"checkpoint {source} contains no tensors (keys: {list(checkpoint)[:8]})")
    if prefix and any(k.startswith(prefix) for k in sd):
        sd = {k[len(prefix):]: v for k, v in sd.items() if k.startswith(prefix)}
    for p in ("module.", "_orig_mod."):
        if all(k.startswith(p) for k in sd):
            sd = {k[len(p):]: v for k, v in sd.items()}
    return sd, hparams


def _arch_from_hparams(hparams: Mapping[str, Any]) -> tuple[str | None, dict[str, Any]]:
    """Best guess of ``(builder name, kwargs)`` from checkpoint hyper-parameters."""
    for key in ("arch", "architecture", "model_name", "network", "net"):
        v = hparams.get(key)
        if isinstance(v, str):
            kw = hparams.get("arch_kwargs", hparams.get("model_kwargs", {}))
            return v, dict(kw) if isinstance(kw, Mapping) else {}
    # LightningCLI style: {"model": {"class_path": "...CompactBoundaryNet", "init_args": {...}}}
    for v in hparams.values():
        if isinstance(v, str) and v in _BUILDERS:
            return v, {}
        if isinstance(v, Mapping) and isinstance(v.get("class_path"), str):
            cls = v["class_path"].rsplit(".", 1)[-1]
            args = dict(v.get("init_args", {}) or {})
            if cls == "CompactBoundaryNet":
                return "compact_boundary_net", args
            if cls == "BackboneBoundaryNet":
                bb = args.pop("backbone", "vgg16")
                return f"{bb}_boundary_net", args
            if cls.endswith("_boundary_net"):
                return cls, args
    return None, {}


def _guess_arch_from_keys(state_dict: Mapping[str, torch.Tensor]) -> str | None:
    """Registered builder whose default key set best overlaps the checkpoint's.

    Each builder is run on the meta device (no memory, no I/O); the best Jaccard overlap
    of key sets wins if it is at least 0.5.
    """
    keys = set(state_dict)
    best, best_score = None, 0.5
    for name in list_models():
        try:
            with torch.device("meta"):
                m = get_model_builder(name)()
        except Exception:  # a user builder that cannot build on meta: skip the hint
            continue
        own = set(m.state_dict())
        score = len(own & keys) / max(1, len(own | keys))
        if score >= best_score:
            best, best_score = name, score
    return best


def load_state_dict_checked(
    model: nn.Module,
    state_dict: Mapping[str, torch.Tensor],
    *,
    source: Any = "<state_dict>",
    hyper_parameters: Mapping[str, Any] | None = None,
    arch: str | None = None,
    max_listed: int = 5,
) -> nn.Module:
    """``model.load_state_dict(state_dict, strict=True)`` with a readable mismatch error.

    Parameters
    ----------
    model : nn.Module
    state_dict : mapping of str to Tensor
    source : any
        Named in the error message (file path or weights name).
    hyper_parameters : mapping, optional
        The checkpoint's hyper-parameters, used to say which architecture it was for.
    arch : str, optional
        The architecture name of ``model``, for the message.
    max_listed : int
        How many offending keys of each kind the message lists.

    Returns
    -------
    nn.Module
        ``model``, with the tensors copied in.

    Cost
    ----
    O(number of parameters) copies; on a mismatch, building each registered
    architecture on the meta device (no memory) to guess the checkpoint's one.

    Raises
    ------
    ArchitectureMismatchError
        Missing keys, unexpected keys or shape mismatches.  The message lists up to
        ``max_listed`` of each and, when the checkpoint says (or its keys show) which
        architecture it was made for, names it.
    """
    own = model.state_dict()
    missing = [k for k in own if k not in state_dict]
    unexpected = [k for k in state_dict if k not in own]
    shapes = [
        (k, tuple(state_dict[k].shape), tuple(v.shape))
        for k, v in own.items()
        if k in state_dict and tuple(state_dict[k].shape) != tuple(v.shape)
    ]
    if missing or unexpected or shapes:
        arch = arch or getattr(model, "arch", None) or type(model).__name__
        parts = [f"checkpoint {source} does not fit architecture {arch!r}:"]
        if missing:
            parts.append(f"{len(missing)} missing key(s), e.g. {missing[:max_listed]}")
        if unexpected:
            parts.append(f"{len(unexpected)} unexpected key(s), e.g. {unexpected[:max_listed]}")
        if shapes:
            ex = ", ".join(f"{k}: checkpoint {a} vs model {b}" for k, a, b in shapes[:max_listed])
            parts.append(f"{len(shapes)} shape mismatch(es), e.g. {ex}")
        hp_arch, hp_kwargs = _arch_from_hparams(hyper_parameters or {})
        if hp_arch is not None:
            kw = f" with {hp_kwargs}" if hp_kwargs else ""
            parts.append(f"the checkpoint's hyper_parameters say it was made for {hp_arch!r}{kw}")
        else:
            guess = _guess_arch_from_keys(state_dict)
            if guess is not None and guess != arch:
                parts.append(f"its keys look like architecture {guess!r}")
            elif shapes and not missing and not unexpected:
                parts.append("same layers, other sizes: was it built with other keyword arguments (e.g. width)?")
        raise ArchitectureMismatchError(parts[0] + " " + "; ".join(parts[1:]))
    model.load_state_dict(state_dict, strict=True)
    return model


def _as_weights(weights: Any, builder: str | None) -> ModelWeights:
    if isinstance(weights, ModelWeights):
        return weights
    if isinstance(weights, str) and weights in _WEIGHTS:
        return _WEIGHTS[weights]
    if isinstance(weights, (str, os.PathLike)):
        refuse_remote_checkpoint(weights, "weights")
        p = Path(weights).expanduser()
        looks_like_path = p.suffix in {".pt", ".pth", ".ckpt", ".bin"} or os.sep in str(weights) or p.exists()
        if looks_like_path:
            return ModelWeights(name=p.stem, path=p.resolve(), builder=builder or "", builder_kwargs={})
        known = ", ".join(list_weights()) or "(none registered)"
        raise ValueError(f"weights {weights!r} is neither a registered weights name ({known}) nor a checkpoint path")
    raise TypeError(f"weights must be None, a ModelWeights, a weights name or a path, got {type(weights).__name__}")


@dataclass
class _PreparedWeights:
    """What a builder needs: final kwargs and, if any, the state dict to load."""

    kwargs: dict[str, Any]
    state_dict: dict[str, torch.Tensor] | None = None
    hyper_parameters: dict[str, Any] = field(default_factory=dict)
    source: Any = None
    builder: str = ""

    def load_into(self, model: nn.Module) -> nn.Module:
        if self.state_dict is not None:
            load_state_dict_checked(
                model, self.state_dict, source=self.source, hyper_parameters=self.hyper_parameters, arch=self.builder
            )
        return model


def prepare_weights(builder: str, weights: Any, kwargs: Mapping[str, Any], map_location: Any = "cpu") -> _PreparedWeights:
    """Resolve ``weights`` for ``builder`` and merge its kwargs with the user's.

    Used by the builders.  ``kwargs`` entries equal to ``None`` mean "not given".  The
    architecture kwargs come from (lowest priority first) the checkpoint's
    ``hyper_parameters["arch_kwargs"]`` (when its ``arch`` is ``builder``), the
    :class:`ModelWeights`' ``builder_kwargs``, then the caller's explicit kwargs; an
    explicit kwarg that contradicts the ModelWeights' is an error.

    Raises
    ------
    ValueError
        Weights of another builder, contradicting kwargs, unknown weights name.
    FileNotFoundError, CheckpointError
        See :func:`load_checkpoint_file`.
    """
    given = {k: v for k, v in kwargs.items() if v is not None}
    if weights is None:
        return _PreparedWeights(kwargs=given, builder=builder)
    w = _as_weights(weights, builder)
    if w.builder and w.builder != builder:
        raise ValueError(f"weights {w.name!r} are for builder {w.builder!r}, not {builder!r}; use get_model({w.builder!r}, weights=...)")
    for k, v in w.builder_kwargs.items():
        if k in given and given[k] != v:
            raise ValueError(f"weights {w.name!r} need {k}={v!r}, but {k}={given[k]!r} was passed")
    path = w.resolve_path()
    sd, hp = extract_state_dict(load_checkpoint_file(path, map_location), source=path)
    merged: dict[str, Any] = {}
    hp_arch, hp_kwargs = _arch_from_hparams(hp)
    if hp_arch == builder:
        merged.update(hp_kwargs)
    merged.update(w.builder_kwargs)
    merged.update(given)
    return _PreparedWeights(kwargs=merged, state_dict=sd, hyper_parameters=hp, source=path, builder=builder)


# --------------------------------------------------------------------------- high level
def load_weights(model: nn.Module, weights: Any, *, map_location: Any = "cpu") -> nn.Module:
    """Load ``weights`` (ModelWeights, registered name or path) into an existing ``model``.

    Returns
    -------
    nn.Module
        ``model``.

    Raises
    ------
    FileNotFoundError, CheckpointError, ArchitectureMismatchError, ValueError
    """
    w = _as_weights(weights, getattr(model, "arch", None))
    path = w.resolve_path()
    sd, hp = extract_state_dict(load_checkpoint_file(path, map_location), source=path)
    return load_state_dict_checked(model, sd, source=path, hyper_parameters=hp)


def save_weights(model: nn.Module, path: PathLike, *, metadata: Mapping[str, Any] | None = None) -> Path:
    """Save ``model`` as a self-describing checkpoint that :func:`load_model` rebuilds.

    Layout: ``{"state_dict": ..., "hyper_parameters": {"arch": model.arch, "arch_kwargs":
    model.arch_kwargs}, "metadata": metadata}``; only tensors and plain Python values, so
    it loads with ``weights_only=True``.

    Raises
    ------
    ValueError
        ``metadata`` is not made of plain values (str, numbers, lists, dicts, None).
    """
    _check_plain(metadata or {}, "metadata")
    hp: dict[str, Any] = {}
    if getattr(model, "arch", None):
        hp = {"arch": model.arch, "arch_kwargs": dict(getattr(model, "arch_kwargs", {}))}
    p = Path(path).expanduser()
    p.parent.mkdir(parents=True, exist_ok=True)
    torch.save({"state_dict": model.state_dict(), "hyper_parameters": hp, "metadata": dict(metadata or {})}, p)
    return p


def _check_plain(obj: Any, where: str) -> None:
    if obj is None or isinstance(obj, (str, int, float, bool)):
        return
    if isinstance(obj, (list, tuple)):
        for i, v in enumerate(obj):
            _check_plain(v, f"{where}[{i}]")
        return
    if isinstance(obj, dict):
        for k, v in obj.items():
            if not isinstance(k, (str, int)):
                raise ValueError(f"{where} has a non-str key {k!r}")
            _check_plain(v, f"{where}[{k!r}]")
        return
    raise ValueError(f"{where} holds a {type(obj).__name__}; only plain values load with weights_only=True")


def load_model(weights: Any, **kwargs: Any) -> nn.Module:
    """Rebuild a model from a checkpoint that names its architecture, and load it.

    Parameters
    ----------
    weights : ModelWeights, registered weights name, or path
        A path must point to a checkpoint whose ``hyper_parameters`` name the
        architecture (as written by :func:`save_weights`, or a Lightning checkpoint
        with ``arch``/``arch_kwargs`` hyper-parameters).
    **kwargs
        Extra builder kwargs.

    Raises
    ------
    CheckpointError
        The checkpoint does not say which architecture it holds.
    FileNotFoundError, ArchitectureMismatchError, ValueError
    """
    w = _as_weights(weights, None)
    builder = w.builder
    if not builder:
        path = w.resolve_path()
        _, hp = extract_state_dict(load_checkpoint_file(path), source=path)
        builder, _ = _arch_from_hparams(hp)
        if builder is None:
            raise CheckpointError(
                f"checkpoint {path} does not name its architecture (no hyper_parameters['arch']); "
                f"use get_model(<name>, weights=...) with one of {list_models()}"
            )
        w = ModelWeights(name=w.name, path=path, builder=builder)
    return get_model(builder, weights=w, **kwargs)
