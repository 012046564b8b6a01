"""Architectures by name, the shipped weights, and the one checkpoint loader (torchvision style).

* **builders**: ``name -> builder(weights=None, **kwargs)``: :func:`list_models`,
  :func:`get_model`, :func:`register_model`;
* **shipped weights**: the :class:`Weights` enum; each entry carries its file, its
  builder, the pipeline settings and preprocessing it was trained and measured with, and
  its metadata (data, metrics, licence). ``Segmenter.from_pretrained("bsds500")`` uses it;
* **loading**: :func:`read_checkpoint` returns ``(state_dict, hyper_parameters,
  metadata)`` of any accepted file, read once, with ``torch.load(..., weights_only=True)``:
  a checkpoint is data, never code. Remote paths (URLs) are refused.

Accepted layouts: a plain ``state_dict``; a Lightning checkpoint (``state_dict`` keys under
``model.``, which is stripped, and ``hyper_parameters``); the file of :func:`save_weights`
(``{"state_dict", "hyper_parameters": {"arch", "arch_kwargs"}, "metadata"}``).
``hyper_parameters["arch"]`` / ``["arch_kwargs"]`` name the builder and its arguments, so
:func:`load_model` rebuilds the network from the file alone.
"""
from __future__ import annotations

import enum
import importlib
import os
import pickle
import re
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Mapping, NamedTuple

from ..core._lazy import lazy_torch
from .._compat import renamed_in
from .._shipped import DEFAULT_PRETRAINED  # the default shipped model's name (torch-free, for the CLI)

if TYPE_CHECKING:
    from torch import nn

#: imported at its first use (:mod:`hiseg.core._lazy`): the registry's names (``Weights``, the
#: command line's help) need no torch; reading a checkpoint imports it
torch = lazy_torch()

__all__ = ["CheckpointError", "ArchitectureMismatchError", "DEFAULT_PRETRAINED", "Weights", "WeightsEntry", "Checkpoint", "register_model",
           "list_models", "get_model", "refuse_remote_checkpoint", "load_checkpoint_file", "read_checkpoint",
           "checkpoint_of", "checked_arch_kwargs", "check_architecture", "NOT_ARCH_KWARGS",
           "load_weights", "save_weights", "load_model"]


class CheckpointError(RuntimeError):
    """A checkpoint file exists but cannot be used (corrupt, unsafe, remote, wrong layout)."""


class ArchitectureMismatchError(CheckpointError):
    """A checkpoint's tensors do not fit the model they are loaded into."""


# --------------------------------------------------------------------------- builders
_BUILDERS: dict[str, Callable[..., nn.Module] | str] = {  # "module:function": imported on first use
    "compact_boundary_net": "hiseg.models.boundary_net:compact_boundary_net",
    "pdc_boundary_net": "hiseg.models.pdc_net:pdc_boundary_net",
    "vgg16_boundary_net": "hiseg.models.backbone_net:vgg16_boundary_net",
    "resnet18_boundary_net": "hiseg.models.backbone_net:resnet18_boundary_net",
    "mean_probability_ensemble": "hiseg.models.ensemble:mean_probability_ensemble",
}


def register_model(name: str, builder: Callable[..., nn.Module], *, overwrite: bool = False) -> None:
    """Add a builder ``builder(weights=None, **kwargs) -> nn.Module``; ValueError if ``name`` is taken."""
    if name in _BUILDERS and not overwrite:
        raise ValueError(f"a model builder named {name!r} is already registered")
    _BUILDERS[name] = builder


def list_models() -> list[str]:
    """Sorted names of the registered builders."""
    return sorted(_BUILDERS)


def get_model(name: str, weights: Any = None, **kwargs: Any) -> nn.Module:
    """Build architecture ``name`` (random init, or ``weights``: a :class:`Weights` entry or
    a checkpoint path). ``kwargs`` go to the builder. ValueError for an unknown name."""
    if name not in _BUILDERS:
        raise ValueError(f"unknown model {name!r}; known models: {', '.join(list_models())}")
    b = _BUILDERS[name]
    if isinstance(b, str):
        module, fn = b.split(":")
        b = _BUILDERS[name] = getattr(importlib.import_module(module), fn)
    return b(weights=weights, **kwargs)


# --------------------------------------------------------------------------- shipped weights
@dataclass(frozen=True)
class WeightsEntry:
    """A shipped checkpoint: ``file`` (searched in ``$HISEG_WEIGHTS_DIR``, ``hiseg/weights/``
    and the repository's ``models/``), its ``builder``, the :class:`~hiseg.segmentation.Pipeline`
    settings and input ``preprocessing`` it was measured with, and ``meta``."""

    file: str
    builder: str
    pipeline: Mapping[str, Any]
    preprocessing: str
    meta: Mapping[str, Any] = field(default_factory=dict)




class Weights(enum.Enum):
    """Shipped weights. ``Weights.from_name("bsds500").path()``; the card is ``models/README.md``."""

    BSDS500 = WeightsEntry(
        file="hiseg_bsds500.ckpt", builder="compact_boundary_net",
        pipeline={"superpixels": "boundary_watershed", "linkage": "average", "region_size": 8.0, "sigma": 1.0,
                  "scales": [1.0]},
        preprocessing="float RGB in [0, 1], any size; images above 500,000 pixels are reduced (Pipeline.max_pixels)",
        meta={"parameters": 329_000, "data": "BSDS500 train (200 images), all annotators",
              "bsds500_val": {"ods": 0.7309, "ois": 0.7417, "ap": 0.7686, "covering_ods": 0.6283, "pri_ods": 0.8206,
                              "vi_ods": 1.5394},
              "licence": "trained on BSDS500: non-commercial research and education", "card": "models/README.md"})
    BSDS500_MERGE = WeightsEntry(
        file="hiseg_bsds500_merge.ckpt", builder="compact_boundary_net",
        pipeline={"superpixels": "boundary_watershed", "linkage": "average", "region_size": 8.0, "sigma": 1.0,
                  "scales": [0.5, 1.0], "flip": True, "merge_head": "learned (14 edge features, MLP 32-32)"},
        preprocessing="float RGB in [0, 1], any size; images above 500,000 pixels are reduced (Pipeline.max_pixels)",
        meta={"parameters": 329_000, "data": "BSDS500 train (200 images); the merging head trained on train with the "
                                             "network frozen, its settings chosen on val",
              "bsds500_val": {"ods": 0.7527, "ois": 0.7651, "ap": 0.8057, "covering_ods": 0.6462, "pri_ods": 0.8318,
                              "vi_ods": 1.4665, "fop_ods": 0.3993, "fop_ois": 0.4532, "fop_ap": 0.3068},
              "licence": "trained on BSDS500: non-commercial research and education", "card": "models/README.md"})

    BSDS500_ENSEMBLE = WeightsEntry(
        file="hiseg_bsds500_ensemble.ckpt", builder="mean_probability_ensemble",
        pipeline={"superpixels": "boundary_watershed", "linkage": "average", "region_size": 8.0, "sigma": 1.0,
                  "scales": [0.5, 1.0], "flip": False,
                  "merge_head": "learned (14 edge features, MLP 32-32) on the ensemble's maps"},
        preprocessing="float RGB in [0, 1], any size; images above 500,000 pixels are reduced (Pipeline.max_pixels)",
        meta={"parameters": 1_004_000,
              "data": "BSDS500 train (200 images): two networks (bsds500's, 329k parameters, and the GPU recipe's "
                      "train-only twin at step 5,721, 675k) averaged; the merging head trained on train with both "
                      "frozen, its recipe chosen on val",
              "bsds500_val": {"ods": 0.7543, "ois": 0.7718, "ap": 0.8091, "covering_ods": 0.6484, "pri_ods": 0.8321,
                              "vi_ods": 1.4602, "fop_ods": 0.4039, "fop_ois": 0.4565, "fop_ap": 0.3162},
              "licence": "trained on BSDS500: non-commercial research and education", "card": "models/README.md"})

    @classmethod
    def default(cls) -> "Weights":
        """The shipped model ``Segmenter.from_pretrained()`` loads: :data:`DEFAULT_PRETRAINED`."""
        return cls.from_name(DEFAULT_PRETRAINED)

    @classmethod
    def from_name(cls, name: str) -> "Weights":
        """The entry called ``name`` (case-insensitive); ValueError listing the names otherwise."""
        try:
            return cls[str(name).upper()]
        except KeyError:
            raise ValueError(f"unknown pretrained model {name!r}; available: {cls.names()}") from None

    @classmethod
    def names(cls) -> list[str]:
        return [w.name.lower() for w in cls]

    @classmethod
    def resolve(cls, spec: Any) -> Any:
        """What ``--checkpoint`` / ``init_from`` / an experiment's member means: an existing file
        is itself; otherwise a shipped model's name (case-insensitive) is its file
        (:meth:`path`); anything else is returned as is, for the loader to name the missing file."""
        if not Path(str(spec)).expanduser().exists() and str(spec).lower() in cls.names():
            return cls.from_name(str(spec)).path()
        return spec

    def path(self) -> Path:
        """The checkpoint file; FileNotFoundError saying where it looked when it is absent, or
        when ``$HISEG_WEIGHTS_DIR`` names no folder. A ``$HISEG_WEIGHTS_DIR`` folder without
        this model's file (empty, say) warns that the shipped copy is used instead."""
        dirs = weights_dirs()
        own = _env_weights_dir()
        for d in dirs:
            if (d / self.value.file).is_file():
                if own is not None and d != own:
                    import warnings

                    warnings.warn(f"HISEG_WEIGHTS_DIR={str(own)!r} holds no {self.value.file} "
                                  f"({'an empty folder' if not any(own.iterdir()) else 'other files only'}): using "
                                  f"the copy in {d}", UserWarning, stacklevel=2)
                return d / self.value.file
        raise FileNotFoundError(
            f"pretrained model {self.name.lower()!r} ({self.value.file}) not found in {[str(d) for d in dirs]}: "
            "a wheel or `pip install .` carries it in hiseg/weights/, an editable install (`pip install -e .`) reads "
            "the repository's models/; or set HISEG_WEIGHTS_DIR to the folder holding it")


def weights_dirs() -> list[Path]:
    """Where shipped weights are looked for: ``$HISEG_WEIGHTS_DIR`` (your own copies), the package
    data ``hiseg/weights/`` (a wheel, or ``pip install .``: ``setup.py`` copies ``models/*.ckpt``
    there), then the repository's ``models/`` (an editable install). FileNotFoundError when
    ``$HISEG_WEIGHTS_DIR`` is set to something that is not a folder."""
    own = _env_weights_dir()
    pkg = Path(__file__).resolve().parents[1]
    return ([own] if own is not None else []) + [pkg / "weights", pkg.parent / "models"]


def _env_weights_dir():
    """``$HISEG_WEIGHTS_DIR`` as a Path (None when unset or empty); FileNotFoundError naming the
    variable when it is not a folder: a mistyped path would otherwise fall back silently."""
    value = os.environ.get("HISEG_WEIGHTS_DIR")
    if not value:
        return None
    d = Path(value).expanduser()
    if not d.is_dir():
        raise FileNotFoundError(f"HISEG_WEIGHTS_DIR={value!r} is {'a file, not a folder' if d.exists() else 'missing'}:"
                                " set it to the folder holding your .ckpt copies, or unset it for the shipped ones")
    return d


# --------------------------------------------------------------------------- loading
_URL = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*://")


def refuse_remote_checkpoint(path: Any, what: str = "checkpoint") -> None:
    """CheckpointError when ``path`` is a URL: a checkpoint is unpickled, and Lightning loads
    URLs with ``weights_only=False`` (it would run what the file pickles)."""
    if path is not None and _URL.match(str(path)):
        raise CheckpointError(
            f"{what} {path}: remote checkpoints are refused (a checkpoint is unpickled, and one "
            f"from a URL can run code). Download it, check where it comes from, and pass the local file.")


_GLOBAL = re.compile(r"unsupported global", re.IGNORECASE)


def _without_rerun_hint(text: str) -> str:
    """torch's message minus its advice to re-run with ``weights_only=False`` (which would run
    the file's code): hiseg never gives that advice."""
    if "weights_only" in text and ("False" in text or "arbitrary code" in text):
        return "refused by a weights-only load"
    return text


def _not_a_shipped_name(spec) -> str:
    """For a bare word that is neither a file nor a shipped model's name (a typo of one, most
    likely): the shipped names, and the closest one if any; '' for anything that looks like a path."""
    import difflib

    text = str(spec)
    if any(c in text for c in "/\\") or Path(text).suffix:
        return ""
    names = Weights.names()
    close = difflib.get_close_matches(text.lower(), names, n=1)
    return ("; nor a shipped model's name" + (f" (did you mean {close[0]!r}?)" if close else "")
            + f": shipped models are {', '.join(names)}")


def load_checkpoint_file(path, map_location: Any = "cpu") -> Any:
    """``torch.load(path, weights_only=True)``: the raw object. FileNotFoundError; CheckpointError
    for a URL, a corrupt file, or one that pickles classes (the message says how to allow
    trusted ones: ``with torch.serialization.safe_globals([...]):``)."""
    refuse_remote_checkpoint(path)
    p = Path(path).expanduser()
    if p.is_dir():
        if (p / "manifest.json").is_file():  # hiseg.export.manifest.MANIFEST (export sits above models)
            raise CheckpointError(f"{p.resolve()} is a folder written by hiseg export, not a checkpoint: run it "
                                  "with Segmenter.from_checkpoint(folder) or hiseg predict --checkpoint folder "
                                  "(onnxruntime, no torch)")
        raise FileNotFoundError(f"checkpoint {p.resolve()} is a folder, not a checkpoint file (a .ckpt or .pt)")
    if not p.is_file():
        raise FileNotFoundError(f"checkpoint file not found: {p.resolve()}{_not_a_shipped_name(path)}")
    try:
        return torch.load(p, map_location=map_location, weights_only=True)
    except pickle.UnpicklingError as e:
        msg = re.sub(r"\x1b\[[0-9;]*m", "", str(e))
        # only a refused *global* (a class or function to import) means "code in the file";
        # torch words it "Unsupported global" or "unsupported GLOBAL" depending on the version
        detail = next((ln.strip() for ln in msg.splitlines() if _GLOBAL.search(ln)), None)
        if detail is not None:
            raise CheckpointError(
                f"checkpoint {p} was refused as unsafe: it holds pickled Python code or objects (untrusted "
                f"pickled code could run when the file is read), and a checkpoint is read as data only. "
                f"Use a checkpoint holding tensors only (re-save its state_dict where you made it); if it is "
                f"your own file with trusted classes, allow them with "
                f"`with torch.serialization.safe_globals([...]):` around the call. "
                f"Refused: {_without_rerun_hint(detail)}") from e
        raise CheckpointError(f"checkpoint {p} is corrupted or not a torch checkpoint: "
                              f"{_without_rerun_hint(msg.splitlines()[0] if msg else '')}") from e
    except Exception as e:  # zip / EOF / decode errors: all mean "not a usable checkpoint"
        first = str(e).splitlines()[0] if str(e) else ""
        raise CheckpointError(f"checkpoint {p} is corrupted or not a torch checkpoint: "
                              f"{type(e).__name__}: {_without_rerun_hint(first)}") from e


class Checkpoint(NamedTuple):
    """A checkpoint file's content, read once (:func:`read_checkpoint`); builders and
    :func:`load_model` accept it wherever they accept a path."""

    state_dict: dict
    hyper_parameters: dict
    metadata: dict
    path: Path


def read_checkpoint(path, map_location: Any = "cpu") -> Checkpoint:
    """``(state_dict, hyper_parameters, metadata, path)`` of a checkpoint file, read once.

    Accepted: Lightning checkpoints, slim ones (:func:`save_weights`), plain state dicts and
    the ``state.pt`` files of hiseg's former pixel-stage script (``{"model": ..., "opt": ...,
    "step": ...}``). The state dict keeps the network's keys: Lightning's ``model.`` prefix, and a
    ``module.`` (DataParallel) or ``_orig_mod.`` (torch.compile) prefix on every key, are
    stripped; other entries (loss buffers) are dropped. CheckpointError when it holds no tensors.
    """
    return checkpoint_of(load_checkpoint_file(path, map_location), path)


def checkpoint_of(ck: Any, path) -> Checkpoint:
    """The :class:`Checkpoint` of an object read from file ``path`` (:func:`load_checkpoint_file`):
    :func:`read_checkpoint` without the reading. CheckpointError as there."""
    if not isinstance(ck, Mapping):
        raise CheckpointError(f"checkpoint {path} holds a {type(ck).__name__}, not a state dict")
    nested = isinstance(ck.get("state_dict"), Mapping)
    if not nested and isinstance(ck.get("model"), Mapping) and "step" in ck:
        ck = {"state_dict": ck["model"]}  # a state.pt of the former pixel-stage script (model, opt, step...)
        nested = True
    sd = {k: v for k, v in (ck["state_dict"] if nested else ck).items()
          if isinstance(k, str) and torch.is_tensor(v)}
    if not sd:
        raise CheckpointError(f"checkpoint {path} contains no tensors (keys: {list(ck)[:8]})")
    if any(k.startswith("model.") for k in sd):
        sd = {k[6:]: v for k, v in sd.items() if k.startswith("model.")}
    for p in ("module.", "_orig_mod."):
        if all(k.startswith(p) for k in sd):
            sd = {k[len(p):]: v for k, v in sd.items()}
    hp = ck.get("hyper_parameters") if nested else None
    meta = ck.get("metadata") if nested else None
    hp = renamed_in(dict(hp)) if isinstance(hp, Mapping) else {}  # class paths of older versions' modules
    return Checkpoint(sd, hp, dict(meta) if isinstance(meta, Mapping) else {}, Path(path))


def _read(weights: Any) -> Checkpoint:
    """A :class:`Weights` entry, a path or an already read :class:`Checkpoint`, read."""
    if isinstance(weights, Checkpoint):
        return weights
    if isinstance(weights, Weights):
        return read_checkpoint(weights.path())
    if isinstance(weights, (str, os.PathLike)):
        refuse_remote_checkpoint(weights, "weights")
        return read_checkpoint(Path(weights).expanduser())
    raise TypeError(f"weights must be None, a hiseg.models.Weights entry, a Checkpoint or a checkpoint path, "
                    f"got {type(weights).__name__}")


def _arch_of_keys(state_dict: Mapping[str, torch.Tensor]) -> str | None:
    """The builder whose default key set overlaps the checkpoint's best (Jaccard >= 0.5);
    each is built on the meta device (no memory, no I/O)."""
    best, best_score = None, 0.5
    for name in list_models():
        try:
            with torch.device("meta"):
                own = set(get_model(name).state_dict())
        except Exception:  # noqa: BLE001 - a user builder that cannot build on meta: no hint
            continue
        score = len(own & set(state_dict)) / max(1, len(own | set(state_dict)))
        if score >= best_score:
            best, best_score = name, score
    return best


#: Keys a checkpoint's ``arch_kwargs`` may not hold: a config's class path, or arguments the
#: loader sets itself (the weights; an ImageNet backbone, which trained weights replace).
NOT_ARCH_KWARGS = ("class_path", "init_args", "weights", "pretrained_backbone")


def checked_arch_kwargs(hyper_parameters: Mapping[str, Any], source: Any) -> dict:
    """A checkpoint's ``arch_kwargs`` as a dict of builder arguments (``{}`` when absent);
    CheckpointError in one line for anything else: not a dict (a string, a list), a config's
    ``class_path`` / ``init_args``, a key that is not a name, or one of :data:`NOT_ARCH_KWARGS`."""
    kw = hyper_parameters.get("arch_kwargs")
    if kw is None:
        return {}
    if not isinstance(kw, Mapping):
        raise CheckpointError(f"checkpoint {source}: hyper_parameters['arch_kwargs'] must be a dict of the "
                              f"builder's arguments, got a {type(kw).__name__}")
    bad = [k for k in kw if not (isinstance(k, str) and k.isidentifier())]
    if bad:
        raise CheckpointError(f"checkpoint {source}: hyper_parameters['arch_kwargs'] has keys that are not argument "
                              f"names: {bad[:5]}")
    taken = [k for k in NOT_ARCH_KWARGS if k in kw]
    if taken:
        raise CheckpointError(f"checkpoint {source}: hyper_parameters['arch_kwargs'] sets {taken}, which "
                              + ("is a config's class path, not the builder's arguments"
                                 if {"class_path", "init_args"} & set(taken) else
                                 "the loader sets itself (the trained weights replace them)"))
    return dict(kw)


class _TooLarge(Exception):
    pass


def check_architecture(arch: str, arch_kwargs: Mapping[str, Any], state_dict: Mapping[str, torch.Tensor],
                       source: Any, hyper_parameters: Mapping[str, Any] | None = None, bounded: bool = True) -> None:
    """Check that ``get_model(arch, **arch_kwargs)`` fits ``state_dict`` *before* building it:
    the network is built on the meta device (no memory, no I/O), and the build is stopped as soon
    as it makes far more parameters, parameter values or modules than the state dict can fill (a
    checkpoint whose ``arch_kwargs`` ask for 100,000 blocks, a width of 200,000 or 2,000 members is
    refused within a second). CheckpointError in one line when it cannot be built from these
    arguments or is larger than the state dict; ArchitectureMismatchError (listing the keys) when
    the keys or shapes differ. Cost: O(tensors of the state dict) whatever the arguments
    (``bounded=False``, for arguments that are the caller's own, not the file's: no bound, the
    mismatch listed in full)."""
    if arch not in _BUILDERS:
        raise CheckpointError(f"checkpoint {source} names architecture {arch!r}, which is not one of "
                              f"{', '.join(list_models())}")
    n = len(state_dict)
    values = sum(int(t.numel()) for t in state_dict.values())
    made = {"params": 0, "values": 0, "modules": 0}
    me = threading.get_ident()

    def param(module, name, p):
        if p is not None and threading.get_ident() == me:
            made["params"] += 1
            made["values"] += int(p.numel())
            if made["params"] > 2 * n + 64 or made["values"] > 2 * values + (1 << 20):  # slack: a builder may
                raise _TooLarge  # make layers it drops (a backbone's classifier); a fit is checked after

    def module(parent, name, sub):
        if threading.get_ident() == me:
            made["modules"] += 1
            if made["modules"] > 8 * n + 256:
                raise _TooLarge

    from torch.nn.modules.module import (register_module_module_registration_hook,
                                         register_module_parameter_registration_hook)

    shown = _short(dict(arch_kwargs))
    hooks = ([register_module_parameter_registration_hook(param), register_module_module_registration_hook(module)]
             if bounded else [])
    try:
        with torch.device("meta"):
            model = get_model(arch, **arch_kwargs)
    except _TooLarge:
        raise ArchitectureMismatchError(f"checkpoint {source}: {arch!r} with arch_kwargs {shown} is larger than the {n} "
                              f"tensors ({values:,} values) the file holds; refused before building it") from None
    except (TypeError, ValueError, RuntimeError, KeyError, IndexError, AttributeError) as e:
        first = str(e).splitlines()[0] if str(e) else type(e).__name__
        raise CheckpointError(f"checkpoint {source}: {arch!r} cannot be built with its arch_kwargs {shown}: "
                              f"{first}") from None
    finally:
        for h in hooks:
            h.remove()
    _check_fit(model, state_dict, source, hyper_parameters)


def _short(obj: Any, limit: int = 160) -> str:
    text = repr(obj)
    return text if len(text) <= limit else text[:limit] + "...}"


def _check_fit(model: nn.Module, state_dict: Mapping[str, torch.Tensor], source: Any,
               hyper_parameters: Mapping[str, Any] | None = None, listed: int = 5) -> dict:
    """``model``'s state dict (on any device, meta included) when ``state_dict`` has its keys and
    shapes; ArchitectureMismatchError listing missing, unexpected and mis-shaped keys and the
    architecture the checkpoint names otherwise."""
    own = model.state_dict()
    missing = [k for k in own if k not in state_dict]
    unexpected = [k for k in state_dict if k not in own]
    shapes = [f"{k}: checkpoint {tuple(state_dict[k].shape)} vs model {tuple(v.shape)}" for k, v in own.items()
              if k in state_dict and state_dict[k].shape != v.shape]
    if missing or unexpected or shapes:
        arch = getattr(model, "arch", None) or type(model).__name__
        parts = [f"{len(x)} {what}, e.g. {x[:listed]}" for x, what in
                 ((missing, "missing key(s)"), (unexpected, "unexpected key(s)"), (shapes, "shape mismatch(es)")) if x]
        hp = hyper_parameters or {}
        if isinstance(hp.get("arch"), str):
            parts.append(f"the checkpoint says it was made for {hp['arch']!r} with {hp.get('arch_kwargs', {})}")
        elif (guess := _arch_of_keys(state_dict)) not in (None, arch):
            parts.append(f"its keys look like architecture {guess!r}")
        elif shapes and not missing and not unexpected:
            parts.append("same layers, other sizes: was it built with other keyword arguments (e.g. width)?")
        raise ArchitectureMismatchError(f"checkpoint {source} does not fit architecture {arch!r}: " + "; ".join(parts))
    return own


def load_state_dict_checked(model: nn.Module, state_dict: Mapping[str, torch.Tensor], source: Any,
                            hyper_parameters: Mapping[str, Any] | None = None, listed: int = 5) -> nn.Module:
    """``model.load_state_dict(strict=True)``; ArchitectureMismatchError listing missing,
    unexpected and mis-shaped keys and the architecture the checkpoint names; CheckpointError
    when a floating-point tensor holds NaN or infinite values (a diverged run)."""
    own = _check_fit(model, state_dict, source, hyper_parameters, listed)
    bad = [k for k in own if state_dict[k].is_floating_point() and not bool(torch.isfinite(state_dict[k]).all())]
    if bad:
        raise CheckpointError(
            f"checkpoint {source} has NaN or infinite values in {len(bad)} tensor(s), e.g. {bad[:listed]}: "
            "its training diverged or the file is damaged; use an earlier checkpoint of the run")
    model.load_state_dict(state_dict, strict=True)
    return model


def builder_weights(builder: str, weights: Any, kwargs: Mapping[str, Any]):
    """For builders: ``(kwargs, load)``. ``kwargs``: the checkpoint's ``arch_kwargs`` (when it
    was made by ``builder``) overridden by the caller's non-None ones; ``load(model)`` copies
    the checkpoint's tensors in (a no-op without ``weights``). ValueError for weights of
    another builder."""
    given = {k: v for k, v in kwargs.items() if v is not None}
    if weights is None:
        return given, lambda model: model
    if isinstance(weights, Weights) and weights.value.builder != builder:
        raise ValueError(f"weights {weights.name} are for {weights.value.builder!r}, not {builder!r}")
    ck = _read(weights)
    hp = ck.hyper_parameters
    own = hp.get("arch") == builder  # the file's arch_kwargs are used: their cost is bounded
    merged = {**checked_arch_kwargs(hp, ck.path), **given} if own else given
    check_architecture(builder, merged, ck.state_dict, ck.path, hp, bounded=own)  # before anything is built
    return merged, lambda model: load_state_dict_checked(model, ck.state_dict, ck.path, hp)


def load_weights(model: nn.Module, weights: Any) -> nn.Module:
    """Load ``weights`` (a :class:`Weights` entry, a path or a :class:`Checkpoint`) into ``model``."""
    ck = _read(weights)
    return load_state_dict_checked(model, ck.state_dict, ck.path, ck.hyper_parameters)


def save_weights(model: nn.Module, path, *, metadata: Mapping[str, Any] | None = None) -> Path:
    """Save ``model`` as a self-describing checkpoint (``arch`` and ``arch_kwargs`` from the
    model) that :func:`load_model` rebuilds. ValueError when ``metadata`` holds anything but
    plain values (str, numbers, bool, None, lists, dicts): it must load with ``weights_only``."""
    def check(obj, where):
        if isinstance(obj, (list, tuple)):
            return [check(v, f"{where}[{i}]") for i, v in enumerate(obj)]
        if isinstance(obj, dict):
            return [check(v, f"{where}[{k!r}]") for k, v in obj.items()]
        if not (obj is None or isinstance(obj, (str, int, float, bool))):
            raise ValueError(f"{where} holds a {type(obj).__name__}; only plain values load with weights_only=True")
    check(dict(metadata or {}), "metadata")
    if getattr(model, "hiseg_fingerprint", None) is not None:  # hiseg.segmentation.segmenter.fold_for_inference
        raise ValueError("the network's BatchNorm layers are folded into its convolutions (a Segmenter's, for "
                         "inference): its state dict no longer fits its architecture; save the network as trained "
                         "(Segmenter(..., fold=False), or load_model)")
    hp = {"arch": model.arch, "arch_kwargs": dict(getattr(model, "arch_kwargs", {}))} if getattr(model, "arch", None) else {}
    p = Path(path).expanduser()
    p.parent.mkdir(parents=True, exist_ok=True)
    torch.save({"state_dict": model.state_dict(), "hyper_parameters": hp, "metadata": dict(metadata or {})}, p)
    return p


def load_model(weights: Any, **kwargs: Any) -> nn.Module:
    """Rebuild the network a checkpoint names (``hyper_parameters["arch"]``) and load it.
    CheckpointError when the file does not name its architecture."""
    ck = _read(weights)
    arch = ck.hyper_parameters.get("arch")
    if not isinstance(arch, str):
        raise CheckpointError(f"checkpoint {ck.path} does not name its architecture (no hyper_parameters['arch']); "
                              f"use get_model(<name>, weights=...) with one of {list_models()}")
    return get_model(arch, weights=ck, **kwargs)
