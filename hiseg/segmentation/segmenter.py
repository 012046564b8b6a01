"""Inference: images -> hierarchies (:class:`~hiseg.segmentation.result.SegmentationResult`: saliency maps,
UCMs, cuts); their files are :mod:`hiseg.segmentation.outputs`.

>>> from hiseg.segmentation.segmenter import Segmenter
>>> seg = Segmenter()                   # the shipped default model; Segmenter("bsds500"), a .ckpt path,
>>>                                     # or Segmenter.classical() (no network)
>>> res = seg.segment(image)            # image: (H, W, 3) float in [0, 1], or a path
>>> res.saliency                        # (H, W) ultrametric contour map in [0, 1]
>>> res.cut(n_regions=10)               # (H, W) labels, exactly 10 regions
>>> res.cut(threshold=0.3)              # regions merged below 0.3 (nested in higher thresholds)

Without a checkpoint the classical path runs: the colour gradient magnitude (Scharr
derivatives of the smoothed Lab image) pooled along superpixel frontiers, then the closest ultrametric fitted by
:func:`hiseg.fit_ultrametric` — a saliency map for anyone, at once.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Optional, Union

import numpy as np

from ..core._lazy import lazy_torch
from ..core.ultrametric import build_hierarchy
from ..io import decode_image, display_path, reduce_image, rgb_view, to_float_rgb
from .result import SegmentationResult

__all__ = ["Segmenter", "check_tile", "MIN_TILE", "resolve_device", "fold_for_inference", "stored_pipeline",
           "BAND_PIXELS"]

#: imported at its first use (:mod:`hiseg.core._lazy`): reading images, the steps after the network
#: and the output files need no torch (the onnxruntime path, :mod:`hiseg.export.runtime`)
torch = lazy_torch()

#: Pixels of the image per band where a large image is reduced to the working resolution
#: (:meth:`Segmenter.read`) and its full-size outputs are drawn (:func:`~hiseg.segmentation.outputs.write_outputs`): a
#: band's float arrays take some tens of bytes a pixel (a ucm2 block: 32), so memory beyond
#: the decoded image and the one output image being encoded stays near 64 MB.
BAND_PIXELS = 1 << 21


def _release_heap() -> None:
    """Hand the C heap's free pages back to the system (glibc's ``malloc_trim``): the memory
    the network freed otherwise stays resident (410 MB after the default model on an
    816x612 working image, measured), under the full-size outputs drawn next. No-op where
    the C library has no ``malloc_trim``."""
    import ctypes

    try:
        ctypes.CDLL(None).malloc_trim(0)
    except (OSError, AttributeError, TypeError):
        pass


#: The smallest network tile (pixels a side) of :meth:`Segmenter.segment`: each tile also
#: computes a margin of context around it, so smaller tiles cost many times the image.
MIN_TILE = 64


def check_tile(tile, name: str = "tile") -> int:
    """``tile`` as an int: 0 (one pass) or at least :data:`MIN_TILE`; ValueError naming ``name``."""
    if isinstance(tile, bool) or not isinstance(tile, (int, np.integer)) or not (tile == 0 or tile >= MIN_TILE):
        raise ValueError(f"{name} must be 0 (one pass) or an integer >= {MIN_TILE} (pixels a side: each tile also "
                         f"computes a margin of context, so smaller tiles cost many times the image), got {tile!r}")
    return int(tile)


def resolve_device(device, name: str = "device") -> torch.device:
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


def _load_named(spec, pipeline=None):
    """(name, network, pipeline) of a shipped model's name, ``"default"`` or a checkpoint file;
    a file that is a shipped model's is named as that model. ``pipeline``: the one to use
    instead of the checkpoint's (which is then not read: an old checkpoint has none)."""
    from ..models.weights import Weights, load_model, read_checkpoint

    if str(spec) == "default":
        spec = Weights.default().name.lower()
    path = Weights.resolve(spec)
    name = str(spec).lower() if path is not spec else str(spec)
    if path is spec:  # a file: a shipped model's own is called by its name
        import warnings

        for w in Weights:
            try:
                with warnings.catch_warnings():  # a $HISEG_WEIGHTS_DIR without the other models: not this load's
                    warnings.simplefilter("ignore")
                    if Path(path).resolve() == w.path().resolve():
                        name = w.name.lower()
            except OSError:  # FileNotFoundError: that model is not here
                pass
    ck = read_checkpoint(path)  # read once
    if pipeline is not None:
        return name, load_model(ck), pipeline
    return name, load_model(ck), stored_pipeline(ck)


def fold_for_inference(model: torch.nn.Module, channels_last: bool = False) -> torch.nn.Module:
    """``model`` (in eval mode) with its BatchNorm layers folded into their convolutions
    (:func:`hiseg.models.fold.fold_batchnorm`, in place), keeping the identity a merge head
    checks (``hiseg_fingerprint``: the :func:`~hiseg.segmentation.merging.network_fingerprint`
    of the weights as trained, computed once here instead of at every image).
    ``channels_last``: its weights in the channels-last memory format, which oneDNN's CPU
    convolutions then use (measured on the default model, one thread, 481x321: 1.37 s
    against 1.56 s for the folded network's pass, best of 6, maps within 4e-7)."""
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


class Segmenter:
    """Turns images into hierarchies with a trained boundary network or the classical path.

    ``Segmenter()`` is the shipped default model (:meth:`hiseg.models.Weights.default`,
    ``bsds500_ensemble``), as ``hiseg predict`` without ``--checkpoint``;
    :meth:`classical` is the no-network baseline (``hiseg predict --classical``).

    Parameters
    ----------
    model : str, path, torch.nn.Module or None
        ``"default"`` (the default: the shipped default model), a shipped model's name
        (``"bsds500"``, ...), a checkpoint file (read as :meth:`from_checkpoint` does), a
        boundary network (logits), or ``None``: no network (the boundary map comes from the
        pipeline's classical path, ``Pipeline.classical``).
    device : str or torch.device
        ``"auto"`` (the default, as ``hiseg predict --device``'s: CUDA when present, else the CPU),
        ``"cpu"``, ``"cuda"``, ``"cuda:N"`` or ``"mps"``; a device unavailable here is a ValueError
        (:func:`resolve_device`).
    pipeline : Pipeline or dict, optional
        The :class:`~hiseg.segmentation.Pipeline` from the image to the hierarchy (default: the
        checkpoint's; ``Pipeline()`` for a bare network, ``Pipeline.classical()`` without one).

    fold : bool
        Fold the BatchNorm layers of a network this Segmenter loads (a name or a file) into
        their convolutions (:func:`fold_for_inference`: the same maps to float32 rounding,
        faster); a network passed as a module is used as given. Default True.

    Attributes: ``model``, ``device``, ``pipeline``, ``name`` (the shipped model's registered
    name, the checkpoint's path, ``"classical"`` without a network, else the network's class) and
    ``checkpoint`` (that name or path when this Segmenter loaded it, else None).
    Loading a checkpoint raises FileNotFoundError, CheckpointError, ArchitectureMismatchError,
    PipelineError (see :meth:`from_checkpoint`).
    """

    def __init__(self, model: Union[str, os.PathLike, torch.nn.Module, None] = "default",
                 device: Union[str, torch.device] = "auto", pipeline=None, fold: bool = True):
        from .pipeline import Pipeline

        self.device = resolve_device(device)
        name = None
        #: the shipped model's name or the checkpoint file it was loaded from (None: a network given as a
        #: module, or none): what the run record of a folder of its files names (hiseg.segmentation.record)
        self.checkpoint = None
        if isinstance(model, (str, os.PathLike)):
            name, model, pipeline = _load_named(model, pipeline)
            self.checkpoint = name
            if fold:
                model = fold_for_inference(model, channels_last=self.device.type == "cpu")
        self.model = model.to(self.device).eval() if model is not None else None
        self.name = name or ("classical" if model is None else type(model).__name__)
        if pipeline is None:
            pipeline = Pipeline() if model is not None else Pipeline.classical()
        elif not isinstance(pipeline, Pipeline):
            pipeline = Pipeline.from_dict(pipeline, source="pipeline argument")
        self.pipeline = pipeline

    def __repr__(self) -> str:
        """One line: the model's name, the device and the pipeline's settings that differ from
        ``Pipeline()``'s (a learned merging head shown as ``merge_head='learned'``)."""
        import dataclasses

        from .pipeline import Pipeline

        base = Pipeline()
        own = [f"{f.name}={'learned' if f.name == 'merge_head' else getattr(self.pipeline, f.name)!r}"
               for f in dataclasses.fields(self.pipeline)
               if f.name in {g.name for g in dataclasses.fields(base)}
               and getattr(self.pipeline, f.name) != getattr(base, f.name)]
        return f"Segmenter(model={self.name!r}, device={str(self.device)!r}, pipeline=Pipeline({', '.join(own)}))"

    @classmethod
    def classical(cls, region_size: float = 8.0, fit_iterations: int = 50,
                  device: Union[str, torch.device] = "auto") -> "Segmenter":
        """The no-network baseline: Scharr colour gradient, colour-watershed superpixels of
        about ``region_size`` pixels across, closest ultrametric fitted in ``fit_iterations``
        steps (0: single linkage) (``Pipeline.classical``; ``hiseg predict --classical``)."""
        from .pipeline import Pipeline

        return cls(None, device=device, pipeline=Pipeline.classical(region_size, fit_iterations))

    @classmethod
    def from_checkpoint(cls, path, device: Union[str, torch.device] = "auto", **kwargs) -> "Segmenter":
        """Load a checkpoint by path (Lightning or :func:`~hiseg.models.weights.save_weights` format).

        Read with ``weights_only=True`` (a checkpoint is data, never code), mapped to
        ``device``. The segmentation :class:`~hiseg.segmentation.Pipeline` comes from the
        checkpoint (``metadata["pipeline"]`` or the ``pipeline`` hyper-parameter) unless
        ``pipeline=`` is given. Raises FileNotFoundError, CheckpointError (corrupt, not a
        checkpoint, no architecture named), ArchitectureMismatchError, PipelineError (no
        pipeline settings, or unknown ones).
        """
        return cls(Path(path), device=device, **kwargs)

    @classmethod
    def from_pretrained(cls, name: Optional[str] = None, device: Union[str, torch.device] = "auto",
                        **kwargs) -> "Segmenter":
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
        """(H, W) boundary probability of the network (float32; multi-scale if the pipeline
        says so; in ``torch.inference_mode``); the colour gradient on the classical path."""
        return self.pipeline.boundary_map(self.model, image, self.device)

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
        pmap = self.pipeline.boundary_map(self.model, img, self.device, tile=tile)
        bad = int(np.count_nonzero(~np.isfinite(pmap)))
        if bad:
            raise ValueError(f"the network's boundary map has {bad} NaN or infinite values (of {pmap.size}): "
                             "the checkpoint's weights diverged or do not suit this image; use another checkpoint")
        return pmap

    def finish(self, img: np.ndarray, pmap: np.ndarray, out_shape=None, t: Optional[dict] = None) -> SegmentationResult:
        """The steps of :meth:`segment` after the network (superpixels, RAG, hierarchy): CPU
        only, no model needed (``hiseg predict --workers`` runs them in worker processes)."""
        t = {} if t is None else t
        if out_shape is not None:  # a large image's outputs come next: the network's freed memory back first
            _release_heap()
        t0 = time.perf_counter()
        rag, u, h = self.pipeline.hierarchy_of_map(pmap, img)
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
        pipeline without the network (the main process runs it: :meth:`network_map`)."""
        return Segmenter(None, device="cpu", pipeline=self.pipeline)
