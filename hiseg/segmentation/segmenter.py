"""Inference: images -> hierarchies (:class:`~hiseg.segmentation.result.SegmentationResult`: saliency maps,
UCMs, cuts); their files are :mod:`hiseg.segmentation.outputs`.

>>> from hiseg.segmentation.segmenter import Segmenter
>>> seg = Segmenter()                   # the shipped default model; Segmenter("bsds500"), a .ckpt path,
>>>                                     # a folder of `hiseg export`, or Segmenter.classical() (no network)
>>> res = seg.segment(image)            # image: (H, W, 3) float in [0, 1], or a path
>>> res.saliency                        # (H, W) ultrametric contour map in [0, 1]
>>> res.cut(n_regions=10)               # (H, W) labels, exactly 10 regions
>>> res.cut(threshold=0.3)              # regions merged below 0.3 (nested in higher thresholds)

One class for every model: the network is a backend (:mod:`hiseg.segmentation.backends`: torch,
onnxruntime, or none for the classical path), the only step that differs; the chain after the
boundary map is the pipeline's, the same for all (:meth:`hiseg.segmentation.Pipeline.hierarchy_of_map`).
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Optional, Union

import numpy as np

from ..core.ultrametric import build_hierarchy
from ..io import decode_image, display_path, reduce_image, rgb_view, to_float_rgb
from .backends import (BACKENDS, ClassicalBackend, TorchBackend, check_backend, choose_backend, fold_for_inference,
                       load_named, resolve_device, stored_pipeline)
from .result import SegmentationResult

__all__ = ["Segmenter", "ExportedSegmenter", "check_tile", "MIN_TILE", "resolve_device", "fold_for_inference",
           "stored_pipeline", "BAND_PIXELS", "BACKENDS"]

#: Pixels of the image per band where a large image is reduced to the working resolution
#: (:meth:`Segmenter.read`) and its full-size outputs are drawn (:func:`~hiseg.segmentation.outputs.write_outputs`): a
#: band's float arrays take some tens of bytes a pixel (a ucm2 block: 32), so memory beyond
#: the decoded image and the one output image being encoded stays near 64 MB.
BAND_PIXELS = 1 << 21


def _release_heap() -> None:
    """Hand the C heap's free pages back to the system (glibc's ``malloc_trim``): the memory
    the network freed otherwise stays resident (hundreds of MB after the default model on a
    large photograph, ``benchmarks/results/large.md``), under the full-size outputs drawn next. No-op where
    the C library has no ``malloc_trim``."""
    import ctypes

    try:
        ctypes.CDLL(None).malloc_trim(0)
    except (OSError, AttributeError, TypeError):
        pass


#: How far outside [0, 1] a boundary map may stray (float rounding of a sigmoid resized) before it is refused.
MAP_SLACK = 1e-4

#: The smallest network tile (pixels a side) of :meth:`Segmenter.segment`: each tile also
#: computes a margin of context around it, so smaller tiles cost many times the image.
MIN_TILE = 64


def check_tile(tile, name: str = "tile") -> int:
    """``tile`` as an int: 0 (one pass) or at least :data:`MIN_TILE`; ValueError naming ``name``."""
    if isinstance(tile, bool) or not isinstance(tile, (int, np.integer)) or not (tile == 0 or tile >= MIN_TILE):
        raise ValueError(f"{name} must be 0 (one pass) or an integer >= {MIN_TILE} (pixels a side: each tile also "
                         f"computes a margin of context, so smaller tiles cost many times the image), got {tile!r}")
    return int(tile)


class Segmenter:
    """Turns images into hierarchies: a boundary map from the model's backend, then the one chain
    (superpixels, region adjacency graph, edge weights, hierarchy) of its pipeline.

    ``Segmenter()`` is the shipped default model (:meth:`hiseg.models.Weights.default`,
    ``bsds500_ensemble``), as ``hiseg predict`` without ``--checkpoint``; :meth:`classical` is the
    no-network baseline (``hiseg predict --classical``).

    Parameters
    ----------
    model : str, path, torch.nn.Module or None
        ``"default"`` (the shipped default model), a shipped model's name (``"bsds500"``, ...), a
        checkpoint file, a folder written by ``hiseg export``, a boundary network (logits), or
        ``None``: no network (the pipeline's classical path, ``Pipeline.classical``).
    device : str or torch.device
        ``"auto"`` (the default: CUDA when present, else the CPU), ``"cpu"``, ``"cuda"``,
        ``"cuda:N"`` or ``"mps"``; a device unavailable here is a ValueError. onnxruntime runs on the CPU.
    pipeline : Pipeline or dict, optional
        The :class:`~hiseg.segmentation.Pipeline` from the image to the hierarchy (default: the
        model's; ``Pipeline()`` for a bare network, ``Pipeline.classical()`` without one).
    backend : ``"auto"`` (default), ``"torch"`` or ``"onnxruntime"``
        What runs the network (:func:`~hiseg.segmentation.backends.choose_backend`): ``auto`` runs
        an exported folder, and a shipped model on a CPU, on onnxruntime when it is installed (the
        shipped models ship exported: faster, no torch imported; ``benchmarks/results/segmenter.md``),
        anything else on torch.
        ``torch`` reproduces the training's maps exactly.
    fold : bool
        Fold the BatchNorm layers of a torch network this Segmenter loads into their convolutions
        (:func:`~hiseg.segmentation.backends.fold_for_inference`: the same maps to float32
        rounding, faster); a network passed as a module is used as given. Default True.
    threads : int, optional
        onnxruntime's intra-op threads (None: one per core).

    Attributes: ``backend`` (its ``name``: ``"torch"``, ``"onnxruntime"`` or ``"classical"``),
    ``model`` (the torch network, else None), ``device``, ``pipeline``, ``name`` (the shipped
    model's name, the checkpoint's or folder's path, ``"classical"``, else the network's class)
    and ``checkpoint`` (that name or path when this Segmenter loaded it, else None). Loading
    raises FileNotFoundError, CheckpointError, ArchitectureMismatchError, PipelineError,
    ExportError, ValueError (a backend that cannot run this model here).
    """

    def __init__(self, model="default", device="auto", pipeline=None, fold: bool = True,
                 backend: str = "auto", threads: Optional[int] = None):
        from .pipeline import Pipeline

        backend = check_backend(backend)
        #: the shipped model's name, the checkpoint file or the exported folder it was loaded from (None: a
        #: network given as a module, or none): what the run record of its files names (hiseg.segmentation.record)
        self.checkpoint = None
        #: the file whose digest identifies the model in a run record (None: the checkpoint's own file)
        self.checkpoint_file = None
        if isinstance(model, (str, os.PathLike)):
            if str(model) == "default":
                from .._shipped import DEFAULT_PRETRAINED as model
            kind, folder = choose_backend(model, backend, device)
            if kind == "onnxruntime":
                self._open_exported(model, folder, device, pipeline, threads)
                return
            self.device = resolve_device(device)
            name, net, pipeline = load_named(model, pipeline)
            self.checkpoint = name
            if fold:
                net = fold_for_inference(net, channels_last=self.device.type == "cpu")
            self.name = name
            self._backend = TorchBackend(net, self.device)
        elif model is not None:
            if backend == "onnxruntime":
                raise ValueError("backend onnxruntime runs exported models: a torch module runs on torch")
            self.device = resolve_device(device)
            self.name = type(model).__name__
            self._backend = TorchBackend(model, self.device)
        else:
            self.device = resolve_device(device) if str(device).strip().lower() != "auto" else "cpu"
            self.name = "classical"
            self._backend = ClassicalBackend()
        if pipeline is None:
            pipeline = Pipeline.classical() if model is None else Pipeline()
        self.pipeline = pipeline

    @classmethod
    def from_backend(cls, backend, pipeline=None, name: Optional[str] = None) -> "Segmenter":
        """A Segmenter whose boundary maps come from ``backend``, an object made elsewhere (another
        segmenter's files: :class:`~hiseg.segmentation.external.ExternalFiles`), with ``pipeline``
        after it (default ``Pipeline()``); ``name`` (default the backend's) names it in a run record."""
        from .pipeline import Pipeline

        self = cls.__new__(cls)
        self._backend, self.device, self.checkpoint_file = backend, backend.device, None
        self.name = self.checkpoint = name if name is not None else backend.name
        self.pipeline = Pipeline() if pipeline is None else pipeline
        return self

    def _open_exported(self, model, folder, device, pipeline, threads):
        """The onnxruntime backend of an exported folder (a shipped model's or given)."""
        from ..export.manifest import MANIFEST
        from ..export.runtime import OnnxBackend
        from .pipeline import Pipeline

        if str(device).strip().lower() not in ("auto", "cpu"):
            raise ValueError(f"{model}: the onnxruntime backend runs on the CPU; use device cpu or auto, or "
                             "backend torch for another device")
        shipped = not Path(str(model)).expanduser().exists()
        self._backend = OnnxBackend(folder, threads, trusted=shipped)  # a shipped form: matched by sha256 already
        self.device = "cpu"
        self.name = str(model).lower() if shipped else self._backend.model_name
        self.checkpoint = str(model).lower() if shipped else str(folder)
        self.checkpoint_file = folder / MANIFEST  # a run record names it by the manifest's digest
        stored = Pipeline.from_dict(self._backend.settings(), source=f"exported model {folder}")
        self.pipeline = stored if pipeline is None else pipeline

    @property
    def backend(self):
        """What makes the boundary map (:mod:`hiseg.segmentation.backends`)."""
        return self._backend

    @property
    def model(self):
        """The torch network (None on onnxruntime and on the classical path)."""
        return getattr(self._backend, "model", None)

    @property
    def pipeline(self):
        """The chain's settings (:class:`~hiseg.segmentation.Pipeline`); the ones an exported
        network holds inside its graph (``scales``, ``flip``) cannot be set to other values."""
        return self._pipeline

    @pipeline.setter
    def pipeline(self, pipeline):
        from .pipeline import Pipeline

        if not isinstance(pipeline, Pipeline):
            pipeline = Pipeline.from_dict(pipeline, source="pipeline argument")
        check = getattr(self._backend, "check", None)
        if check is not None:  # once per pipeline: a merge head trained on another network's maps is refused
            check(pipeline)
        old = getattr(self, "_pipeline", None)
        if old is not None:
            fixed = [k for k in self._backend.fixed if getattr(pipeline, k) != getattr(old, k)]
            if fixed:
                raise ValueError(f"{' and '.join(fixed)}: an exported model's network holds them (fixed at export); "
                                 "export it again with them (hiseg export MODEL --scales ... -o DIR) or use the "
                                 "torch backend")
        self._pipeline = pipeline

    def __repr__(self) -> str:
        """One line: the model's name, the backend, the device and the pipeline's settings that
        differ from ``Pipeline()``'s (a learned merging head shown as ``merge_head='learned'``)."""
        import dataclasses

        from .pipeline import Pipeline

        base = Pipeline()
        own = [f"{f.name}={'learned' if f.name == 'merge_head' else getattr(self.pipeline, f.name)!r}"
               for f in dataclasses.fields(self.pipeline)
               if f.name in {g.name for g in dataclasses.fields(base)}
               and getattr(self.pipeline, f.name) != getattr(base, f.name)]
        if self._backend.head is not None:
            own.append("merge_head='learned'")
        return (f"Segmenter(model={self.name!r}, backend={self._backend.name!r}, device={str(self.device)!r}, "
                f"pipeline=Pipeline({', '.join(own)}))")

    @classmethod
    def classical(cls, region_size: float = 8.0, fit_iterations: int = 50, device="auto") -> "Segmenter":
        """The no-network baseline: Scharr colour gradient, colour-watershed superpixels of
        about ``region_size`` pixels across, closest ultrametric fitted in ``fit_iterations``
        steps (0: single linkage) (``Pipeline.classical``; ``hiseg predict --classical``)."""
        from .pipeline import Pipeline

        return cls(None, device=device, pipeline=Pipeline.classical(region_size, fit_iterations))

    @classmethod
    def from_checkpoint(cls, path, device="auto", **kwargs) -> "Segmenter":
        """A checkpoint file (Lightning or :func:`~hiseg.models.weights.save_weights` format), a
        shipped model's name, or a folder written by ``hiseg export`` (see the class for
        ``backend``). A checkpoint is read with ``weights_only=True`` (data, never code); an
        exported folder's manifest and every file's sha256 are checked. The
        :class:`~hiseg.segmentation.Pipeline` is the model's unless ``pipeline=`` is given.
        Raises FileNotFoundError, CheckpointError (corrupt, not a checkpoint, no architecture
        named), ArchitectureMismatchError, PipelineError, ExportError.
        """
        return cls(path, device=device, **kwargs)

    @classmethod
    def from_exported(cls, folder, threads: Optional[int] = None, **kwargs) -> "Segmenter":
        """A folder written by ``hiseg export``, on onnxruntime: ``from_checkpoint(folder)``."""
        return cls(Path(folder), threads=threads, backend="onnxruntime", **kwargs)

    @classmethod
    def from_pretrained(cls, name: Optional[str] = None, device="auto", **kwargs) -> "Segmenter":
        """A shipped model by name (:class:`hiseg.models.Weights`), from any folder; no download.
        The default (``None``: :data:`hiseg.models.weights.DEFAULT_PRETRAINED`, what ``Segmenter()``
        and ``hiseg predict`` load), ``"bsds500_ensemble"``, is the best on every BSDS val figure
        within 1 s per 481x321 image on a CPU (two networks averaged, scales 0.5 and 1, learned
        merging); ``"bsds500_merge"`` (one network, scales 0.5 and 1 with flips, learned merging)
        and ``"bsds500"`` (single scale, frontier mean: about half the time) are the previous ones.
        ValueError for an unknown name, FileNotFoundError when absent."""
        from ..models.weights import Weights

        w = Weights.default() if name is None else Weights.from_name(name)
        return cls(w.name.lower(), device=device, **kwargs)

    # ------------------------------------------------------------------ steps
    def boundary_map(self, image: np.ndarray) -> np.ndarray:
        """(H, W) float32 boundary probability of the backend's network (multi-scale if the
        pipeline says so); the colour gradient on the classical path."""
        return self._backend.boundary_map(image, self.pipeline, 0 if self._backend.name == "onnxruntime" else 512)

    def segment(self, image, tile: int = 512) -> SegmentationResult:
        """Hierarchy of one image (array (H, W[, 3|4]) or path). See :class:`SegmentationResult`.

        An image above the pipeline's ``max_pixels`` is processed at a reduced working
        resolution and its outputs drawn back at full size; ``tile``: the network's tile
        size (memory bound; 0 for one pass, else at least :data:`MIN_TILE`). ValueError
        when the network's boundary map holds NaN or infinite values (diverged weights).
        """
        check_tile(tile)
        img, out_shape, _ = self.read(image)
        t = {}
        t0 = time.perf_counter()
        pmap = self.network_map(img, tile)
        t["network"] = time.perf_counter() - t0
        return self.finish(img, pmap, out_shape, t)

    def network_map(self, img: np.ndarray, tile: int = 512) -> np.ndarray:
        """The boundary map of :meth:`segment` on the working image ``img`` (the step that
        needs the network; ``hiseg predict --workers`` runs it in the main process)."""
        pmap = self._backend.boundary_map(img, self.pipeline, tile)
        bad = int(np.count_nonzero(~np.isfinite(pmap)))
        if bad:
            raise ValueError(f"the network's boundary map has {bad} NaN or infinite values (of {pmap.size}): "
                             "the checkpoint's weights diverged or do not suit this image; use another checkpoint")
        lo, hi = (float(pmap.min()), float(pmap.max())) if pmap.size else (0.0, 0.0)
        if self._backend.name != "classical" and (lo < -MAP_SLACK or hi > 1 + MAP_SLACK):  # a network's probability
            raise ValueError(f"the network's boundary map ranges over [{lo:.4g}, {hi:.4g}], not probabilities in "
                             "[0, 1]: the model is broken (an edited export?); export it again or use another")
        return pmap

    def finish(self, img: np.ndarray, pmap: np.ndarray, out_shape=None, t: Optional[dict] = None) -> SegmentationResult:
        """The steps of :meth:`segment` after the network (superpixels, RAG, hierarchy): CPU
        only, no model needed (``hiseg predict --workers`` runs them in worker processes)."""
        t = {} if t is None else t
        if out_shape is not None:  # a large image's outputs come next: the network's freed memory back first
            _release_heap()
        t0 = time.perf_counter()
        rag, u, h = self.pipeline.hierarchy_of_map(pmap, img, self._backend.head)
        t["hierarchy"] = time.perf_counter() - t0
        if h is None:
            return self._flat(rag, t, out_shape)
        return SegmentationResult(rag, u, h, pmap, t, output_shape=out_shape)

    def read(self, image, bgr: bool = False):
        """(working image, full (H, W) or None, image) of a path or an (H, W[, 1-4]) array
        (``bgr``: its colour channels in OpenCV's order): the float32 RGB image at the working
        resolution (:meth:`working_image`), and the image as :func:`write_outputs` takes it.

        An image at or below ``max_pixels`` is converted whole (:func:`hiseg.io.to_float_rgb`:
        the image returned is that float image). A larger 8- or 16-bit one is reduced band by
        band (:func:`hiseg.io.reduce_image`, :data:`BAND_PIXELS` at a time) and never held
        in float: the image returned is the decoded array, a view in RGB order
        (:func:`hiseg.io.rgb_view`; a 12000x9000 photograph: 324 MB instead of 1.3 GB).
        Raises FileNotFoundError, DataError (:func:`hiseg.io.read_image`'s)."""
        name = "image"
        if isinstance(image, (str, os.PathLike)):
            name = display_path(image)
            image, bgr = decode_image(image)
        arr = np.asarray(image)
        hw = self.pipeline.working_size(*arr.shape[:2]) if arr.ndim in (2, 3) else None
        if hw is None or hw == arr.shape[:2] or arr.dtype.kind not in "ub":
            full = to_float_rgb(arr, bgr=bgr, name=name)
            return (*self.working_image(full), full)
        return reduce_image(arr, hw, bgr=bgr, name=name, band=BAND_PIXELS), arr.shape[:2], rgb_view(arr, bgr)

    def working_image(self, img: np.ndarray):
        """(image at the working resolution, full (H, W) or None when unchanged) of a float
        RGB image (:meth:`read` reads and reduces a large one without a float copy)."""
        hw = self.pipeline.working_size(*img.shape[:2])
        if hw == img.shape[:2]:
            return img, None
        import cv2

        return cv2.resize(img, (hw[1], hw[0]), interpolation=cv2.INTER_AREA), img.shape[:2]

    def _flat(self, rag, t, out_shape=None):
        h = build_hierarchy(rag.graph, np.zeros(0, dtype=np.float64))
        return SegmentationResult(rag, np.zeros(0), h, None, t, output_shape=out_shape)

    def saliency(self, image) -> np.ndarray:
        """(H, W) saliency map (UCM) of an image, in [0, 1]."""
        return self.segment(image).saliency

    def worker_copy(self) -> "Segmenter":
        """What a worker process of ``hiseg predict --workers`` runs :meth:`finish` with: this
        pipeline and the backend's merge head, without the network (the main process runs it:
        :meth:`network_map`)."""
        copy = object.__new__(Segmenter)
        copy.__dict__.update(self.__dict__, _backend=self._backend.worker_copy(), device="cpu")
        return copy


#: The name of the exported models' Segmenter before there was one class (the same class).
ExportedSegmenter = Segmenter
