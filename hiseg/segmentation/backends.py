"""What makes a Segmenter's boundary map: the network's backend. Everything after the map is
the one chain (:meth:`hiseg.segmentation.Pipeline.hierarchy_of_map`), whatever backend made it.

* :class:`TorchBackend`: a torch network (a checkpoint, a shipped model's ``.ckpt``, a module),
  BatchNorm folded, on any torch device; the training's backend, the reference;
* :class:`ClassicalBackend`: no network, the colour gradient of the image (``Segmenter.classical``);
* :class:`hiseg.export.runtime.OnnxBackend`: a folder written by ``hiseg export`` (or a shipped
  model's exported form), run by onnxruntime without torch: the fastest on a CPU.

:func:`choose_backend` picks one from what a model is and what is installed (``backend="auto"``).
A backend has ``name``, ``fixed`` (pipeline settings it holds inside its graph), ``head`` (its
merge head, or None: the pipeline's own), ``boundary_map(image, pipeline, tile)``,
``worker_copy()`` and, where it runs a network a pipeline's merge head may be tied to,
``check(pipeline)`` (made once, when the Segmenter is given the pipeline).
"""
from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Optional

import numpy as np

from .._shipped import BACKENDS
from ..core._lazy import installed, lazy_torch

__all__ = ["BACKENDS", "TorchBackend", "ClassicalBackend", "check_backend", "choose_backend", "shipped_export",
           "resolve_device", "fold_for_inference", "stored_pipeline", "load_named"]


torch = lazy_torch()


def check_backend(backend, name: str = "backend") -> str:
    """``backend`` lower-cased, or ValueError naming ``name`` and :data:`BACKENDS`."""
    b = str(backend).strip().lower()
    if b not in BACKENDS:
        raise ValueError(f"{name} {backend!r}: expected one of {', '.join(BACKENDS)}")
    return b


def resolve_device(device, name: str = "device"):
    """The torch device of a setting: ``"auto"`` is CUDA when present, else the CPU; a device
    that cannot run the network here (``meta``, CUDA or MPS without one, an index beyond the
    GPUs, an unknown name) is a ValueError naming ``name``."""
    if isinstance(device, torch.device):
        d = device
    elif str(device).strip().lower() == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    else:
        try:
            d = torch.device(str(device).strip())
        except (RuntimeError, ValueError, TypeError):
            raise ValueError(f"{name} {device!r} is not a torch device: use auto, cpu, cuda or cuda:N") from None
    if d.type == "cuda":
        n = torch.cuda.device_count() if torch.cuda.is_available() else 0
        if n == 0:
            raise ValueError(f"{name} {device!r}: CUDA is not available here (no GPU, or a CPU-only torch); "
                             "use auto or cpu")
        if d.index is not None and d.index >= n:
            raise ValueError(f"{name} {device!r}: this machine has {n} CUDA device(s), cuda:0 to cuda:{n - 1}")
    elif d.type == "mps":
        if not (getattr(torch.backends, "mps", None) and torch.backends.mps.is_available()):
            raise ValueError(f"{name} {device!r}: Apple's MPS is not available here; use auto or cpu")
    elif d.type != "cpu":
        raise ValueError(f"{name} {device!r}: hiseg runs on cpu, cuda (cuda:N) or mps"
                         + (" (meta tensors hold no data: nothing can be computed on them)" if d.type == "meta"
                            else "") + "; use auto for CUDA when present, else the CPU")
    return d


def fold_for_inference(model, channels_last: bool = False):
    """``model`` (in eval mode) with its BatchNorm layers folded into their convolutions
    (:func:`hiseg.models.fold.fold_batchnorm`, in place), keeping the identity a merge head
    checks (``hiseg_fingerprint``: the :func:`~hiseg.segmentation.merging.network_fingerprint`
    of the weights as trained, computed once here instead of at every image).
    ``channels_last``: its weights in the channels-last memory format, which oneDNN's CPU
    convolutions then use (faster on the CPU, maps within 4e-7)."""
    from ..models.fold import fold_batchnorm
    from .merging import network_fingerprint

    fingerprint = network_fingerprint(model)
    fold_batchnorm(model)
    if channels_last:
        model.to(memory_format=torch.channels_last)
    model.hiseg_fingerprint = fingerprint
    return model


def stored_pipeline(ck):
    """The :class:`~hiseg.segmentation.Pipeline` a read checkpoint holds (``metadata["pipeline"]``
    of a slim file, else the ``pipeline`` hyper-parameter; the defaults where it has none)."""
    from .pipeline import Pipeline

    stored = ck.metadata.get("pipeline")
    if stored is None:
        stored = ck.hyper_parameters.get("pipeline")
    return Pipeline.from_dict(stored, source=f"checkpoint {ck.path}")


def load_named(spec, pipeline=None):
    """(name, network, pipeline) of a shipped model's name or a checkpoint file; a file that is
    a shipped model's is named as that model. ``pipeline``: the one to use instead of the
    checkpoint's (which is then not read: an old checkpoint has none)."""
    import warnings

    from ..models.weights import Weights, load_model, read_checkpoint

    path = Weights.resolve(spec)
    name = str(spec).lower() if path is not spec else str(spec)
    if path is spec:  # a file: a shipped model's own is called by its name
        for w in Weights:
            try:
                with warnings.catch_warnings():  # a $HISEG_WEIGHTS_DIR without the other models: not this load's
                    warnings.simplefilter("ignore")
                    if Path(path).resolve() == w.path().resolve():
                        name = w.name.lower()
            except OSError:  # FileNotFoundError: that model is not here
                pass
    ck = read_checkpoint(path)  # read once
    return name, load_model(ck), (stored_pipeline(ck) if pipeline is None else pipeline)


class TorchBackend:
    """A torch boundary network on ``device`` (the pipeline's scales and flips applied in torch,
    in tiles: :meth:`hiseg.segmentation.Pipeline.boundary_map`)."""

    name = "torch"
    fixed = ()
    head = None  # the pipeline's own merge head (torch)

    def __init__(self, model, device):
        self.model, self.device = model.to(device).eval(), device

    def check(self, pipeline) -> None:
        """PipelineError when ``pipeline``'s merge head was trained on another network's maps."""
        pipeline.check_model(self.model)

    def boundary_map(self, image: np.ndarray, pipeline, tile: int = 512) -> np.ndarray:
        return pipeline.network_map(self.model, image, self.device, tile=tile)

    def worker_copy(self) -> "ClassicalBackend":
        """The workers of ``hiseg predict --workers`` run the chain only: no network there."""
        return ClassicalBackend()


class ClassicalBackend:
    """No network: the boundary map is the image's colour gradient (the pipeline's ``sigma``)."""

    name = "classical"
    fixed = ()
    head = None
    model = None
    device = "cpu"

    def check(self, pipeline) -> None:
        pipeline.check_model(None)

    def boundary_map(self, image: np.ndarray, pipeline, tile: int = 0) -> np.ndarray:
        return pipeline.boundary_map(None, image)

    def worker_copy(self) -> "ClassicalBackend":
        return self


def shipped_export(name: str) -> Optional[Path]:
    """The exported form of shipped model ``name`` (``hiseg export`` of its checkpoint, shipped
    beside it as ``<file stem>_onnx/``), or None when it is absent or was made from another
    file than the checkpoint found (its manifest's ``checkpoint.sha256``): a checkpoint replaced
    in ``$HISEG_WEIGHTS_DIR`` is never run from a stale export."""
    import warnings

    from ..export.manifest import is_exported, sha256_file
    from ..models.weights import Weights

    try:
        with warnings.catch_warnings():  # the torch loader's to give, if it comes to it
            warnings.simplefilter("ignore")
            ckpt = Weights.from_name(name).path()
    except (ValueError, OSError):
        return None
    folder = ckpt.with_name(ckpt.stem + "_onnx")
    if not is_exported(folder):
        return None
    import json

    try:
        made_from = json.loads((folder / "manifest.json").read_text(encoding="utf-8")).get("checkpoint") or {}
    except (OSError, ValueError, AttributeError):
        return folder  # a broken manifest: read_manifest names what is wrong with it
    return folder if isinstance(made_from, dict) and made_from.get("sha256") == sha256_file(ckpt) else None


def _gpu_present() -> bool:
    """Whether a CUDA GPU is likely here, without importing torch when it is not imported yet
    (a large share of a CPU start-up: ``benchmarks/results/predict_deploy.md``): torch's answer
    once imported, else the NVIDIA driver's files."""
    if sys.modules.get("torch") is not None:
        return bool(sys.modules["torch"].cuda.is_available())
    return os.path.exists("/proc/driver/nvidia/version") and installed("torch")


def choose_backend(model, backend: str, device) -> tuple[str, Optional[Path]]:
    """(``"torch"`` or ``"onnxruntime"``, the exported folder to run or None) for a model spec.

    An exported folder runs on onnxruntime. A shipped model's name runs its exported form on
    onnxruntime when ``backend`` is ``"onnxruntime"``, or ``"auto"`` with onnxruntime installed,
    a CPU device (``"cpu"``, or ``"auto"`` with no GPU here) and the exported form shipped;
    otherwise torch. A checkpoint file runs on torch. ValueError for a combination that cannot
    run (a folder with ``"torch"``, a checkpoint file with ``"onnxruntime"``)."""
    from ..export.manifest import is_exported
    from ..export.runtime import onnxruntime_available
    from ..models.weights import Weights

    p = Path(str(model)).expanduser()
    if p.is_dir() and is_exported(p):
        if backend == "torch":
            raise ValueError(f"{model} is a folder written by hiseg export: it runs on onnxruntime (backend auto or "
                             "onnxruntime); the torch backend runs its checkpoint")
        return "onnxruntime", p
    shipped = not p.exists() and str(model).lower() in Weights.names()
    if backend == "torch" or not shipped:
        if backend == "onnxruntime":
            raise ValueError(f"backend onnxruntime runs exported models: {model} is not one (export it with "
                             f"`hiseg export {model} -o DIR`, then give DIR)")
        return "torch", None
    folder = shipped_export(str(model))
    if backend == "onnxruntime":
        if folder is None:
            raise ValueError(f"shipped model {str(model).lower()!r} has no exported form here (or one made from "
                             "another checkpoint): use backend torch, or `hiseg export` it and give the folder")
        return "onnxruntime", folder
    on_cpu = str(device).strip().lower() == "cpu" or (str(device).strip().lower() == "auto" and not _gpu_present())
    if folder is not None and on_cpu and onnxruntime_available():
        return "onnxruntime", folder
    return "torch", None
