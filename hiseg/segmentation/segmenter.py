"""Inference: images -> hierarchies -> saliency maps (UCM), cuts, and their files.

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
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional, Union

import numpy as np

from .._lazy import lazy_torch
from ..core.graph import RegionAdjacencyGraph
from ..core.ultrametric import Hierarchy, build_hierarchy
from ..io import (AtomicFiles, decode_image, display_path, file_complete, reduce_image, remove_stray_temps, rgb_view,
                 to_float_rgb, write_png, write_png_rows, write_ucm2_mat)
from .saliency import (UCM2Blocks, cut_at_threshold, cut_num_regions, ucm2_from_labels, ucm2_from_rag,
                                   upsample_labels)

__all__ = ["Segmenter", "SegmentationResult", "write_outputs", "output_paths", "image_outputs", "image_done",
           "predict_file", "check_tile", "MIN_TILE", "resolve_device", "MAX_LABELS", "fold_for_inference"]

#: imported at its first use (:mod:`hiseg._lazy`): reading images, the steps after the network
#: and the output files need no torch (the onnxruntime path, :mod:`hiseg.export.runtime`)
torch = lazy_torch()

#: The most regions a label image (16-bit PNG, labels 0..65535) holds.
MAX_LABELS = 65536

#: Pixels of the image per band where a large image is reduced to the working resolution
#: (:meth:`Segmenter.read`) and its full-size outputs are drawn (:func:`write_outputs`): a
#: band's float arrays take some tens of bytes a pixel (a ucm2 block: 32), so memory beyond
#: the decoded image and the one output image being encoded stays near 64 MB.
BAND_PIXELS = 1 << 21


@dataclass
class SegmentationResult:
    """The hierarchy of one image and its views.

    ``rag``, ``hierarchy`` and ``boundary`` are at the working resolution (see
    ``Pipeline.max_pixels``); ``ucm2``, ``saliency`` and ``cut`` are at the image's own
    resolution, ``shape`` (``output_shape``, when it differs from the working one).
    """

    rag: RegionAdjacencyGraph
    ultrametric: np.ndarray
    hierarchy: Hierarchy
    boundary: Optional[np.ndarray] = None
    timings: dict = field(default_factory=dict)
    _ucm2: Optional[np.ndarray] = None
    output_shape: Optional[tuple] = None

    def __repr__(self) -> str:
        levels = int(np.unique(np.asarray(self.ultrametric)).size)
        return (f"SegmentationResult(shape={tuple(int(v) for v in self.shape)}, levels={levels}, "
                f"regions at finest={self.rag.num_regions})")

    @property
    def shape(self) -> tuple:
        """(H, W) of the image, of the saliency map and of the cuts."""
        return tuple(self.output_shape) if self.output_shape is not None else self.rag.labels.shape

    @property
    def upsampled(self) -> bool:
        return self.shape != self.rag.labels.shape

    @property
    def ucm2(self) -> np.ndarray:
        """BSDS ``ucm2`` map, (2H+1, 2W+1) float64 in [0, 1], at the image's resolution."""
        if self._ucm2 is None:
            if self.upsampled:
                self._ucm2 = ucm2_from_labels(upsample_labels(self.rag.labels, self.shape),
                                              self.rag.graph, self.ultrametric)
            else:
                self._ucm2 = ucm2_from_rag(self.rag, self.ultrametric)
        return self._ucm2

    @property
    def saliency(self) -> np.ndarray:
        """(H, W) saliency map (``ucm2[2::2, 2::2]``, as the benchmark reads boundaries)."""
        return self.ucm2[2::2, 2::2]

    def working_ucm2(self) -> np.ndarray:
        """BSDS ``ucm2`` at the working resolution, (2h+1, 2w+1) for ``rag.labels``' (h, w):
        its regions at each level are :meth:`working_cut` at that threshold. :attr:`ucm2`
        itself when the image was not reduced; else drawn anew (O(h w), not kept), without
        the full-size map (the explorer page of a large image, :mod:`hiseg.explorer.page`)."""
        if not self.upsampled:
            return self.ucm2
        return ucm2_from_rag(self.rag, self.ultrametric)

    def ucm2_blocks(self):
        """:attr:`ucm2` drawn a block at a time (:class:`~hiseg.segmentation.saliency.UCM2Blocks`:
        ``blocks[r0:r1, c0:c1]``, the same values), or :attr:`ucm2` itself once computed."""
        if self._ucm2 is not None:
            return self._ucm2
        return UCM2Blocks(self.rag.labels, self.rag.graph, self.ultrametric, self.shape)

    def cut(self, n_regions: Optional[int] = None, threshold: Optional[float] = None,
            min_size="auto") -> np.ndarray:
        """Segmentation (H, W) int32: ``n_regions`` regions, or merged below ``threshold``.

        A cut with ``n_regions`` (:func:`hiseg.core.cuts.cut_hierarchy`, through
        :func:`~hiseg.segmentation.saliency.cut_num_regions`) is size-aware: no region is
        smaller than ``min_size`` (pixels if >= 1, a fraction of the image if < 1,
        ``"auto"``: :data:`hiseg.core.cuts.AUTO_MIN_REGION_FRACTION` of an even share,
        ``0.05 / n_regions`` of the image; 0 for the plain cut, which may split off
        specks). A speck merged into a region stays with it. When the hierarchy has fewer
        than ``n_regions`` regions of that size, ``min_size`` is halved until it has them,
        with a warning; the cut always has ``n_regions`` regions, or the finest cut (the
        superpixels), with a warning, when ``n_regions`` exceeds them. ``min_size`` does
        not apply to ``threshold`` cuts. Raises ValueError for both or neither of
        ``n_regions`` and ``threshold``, an ``n_regions`` below 1, a ``threshold`` outside
        [0, 1] or a bad ``min_size``; TypeError for an ``n_regions`` that is not an integer
        (:func:`hiseg.core.cuts.check_count`).
        """
        labels = self.working_cut(n_regions, threshold, min_size)
        return upsample_labels(labels, self.shape) if self.upsampled else labels

    def working_cut(self, n_regions: Optional[int] = None, threshold: Optional[float] = None,
                    min_size="auto") -> np.ndarray:
        """:meth:`cut` at the working resolution (``rag.labels``' shape), before it is drawn at
        the image's (:func:`~hiseg.segmentation.saliency.upsample_labels`); same arguments
        (``min_size`` in pixels of the image) and errors."""
        if (n_regions is None) == (threshold is None):
            raise ValueError("cut: give exactly one of n_regions or threshold")
        if n_regions is not None:
            import warnings

            from ..core.cuts import AUTO_MIN_REGION_FRACTION, check_count, resolve_min_size

            n_regions = check_count(n_regions, name="n_regions")
            if n_regions > self.rag.num_regions:
                warnings.warn(f"n_regions={n_regions}: the hierarchy has only {self.rag.num_regions} region(s) "
                              f"(superpixels); returning the finest cut, {self.rag.num_regions}", stacklevel=3)
            n_regions = min(int(n_regions), self.rag.num_regions)
            # pixels of the image -> pixels of the working resolution
            scale = self.rag.labels.size / float(np.prod(self.shape))
            px = resolve_min_size(min_size, n_regions, int(np.prod(self.shape)), AUTO_MIN_REGION_FRACTION) * scale
            labels, used = cut_num_regions(self.rag, self.hierarchy, n_regions, px, return_min_size=True)
            if used < px:
                warnings.warn(f"the hierarchy has fewer than {n_regions} regions of at least {px / scale:.0f} pixels "
                              f"(min_size={min_size!r}); returning {n_regions} regions of at least "
                              f"{used / scale:.0f} pixels", stacklevel=3)
        else:
            if not 0.0 <= float(threshold) <= 1.0:  # also refuses nan
                raise ValueError(f"threshold must be in [0, 1] (the UCM's range), got {threshold!r}")
            labels = cut_at_threshold(self.rag, self.ultrametric, threshold)
        return labels

    def label_rows(self, labels: np.ndarray):
        """A function ``(r0, r1) -> rows r0..r1-1`` of ``labels`` (a :meth:`working_cut`)
        drawn at the image's resolution, as :meth:`cut` draws them (O(rows))."""
        if not self.upsampled:
            return lambda r0, r1: labels[r0:r1]
        return lambda r0, r1: upsample_labels(labels, self.shape, rows=(r0, r1))


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

    Attributes: ``model``, ``device``, ``pipeline`` and ``name`` (the shipped model's registered
    name, the checkpoint's path, ``"classical"`` without a network, else the network's class).
    Loading a checkpoint raises FileNotFoundError, CheckpointError, ArchitectureMismatchError,
    PipelineError (see :meth:`from_checkpoint`).
    """

    def __init__(self, model: Union[str, os.PathLike, torch.nn.Module, None] = "default",
                 device: Union[str, torch.device] = "auto", pipeline=None, fold: bool = True):
        from .pipeline import Pipeline

        self.device = resolve_device(device)
        name = None
        if isinstance(model, (str, os.PathLike)):
            name, model, pipeline = _load_named(model, pipeline)
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


def _quantise(x: np.ndarray, top: int, dtype) -> np.ndarray:
    """round(x * top) as ``dtype`` for x in [0, 1], with one float temporary."""
    y = x * np.float32(top)
    np.rint(y, out=y)
    return y.astype(dtype)


def _rgb8_rows(image: np.ndarray, r0: int, r1: int) -> np.ndarray:
    """Rows r0..r1-1 of an image (float RGB, or integer as :meth:`Segmenter.read` gives a
    reduced one) as uint8 RGB."""
    band = image[r0:r1]
    if band.dtype.kind in "ub":
        band = to_float_rgb(band)
    return (np.clip(band[..., :3], 0, 1) * 255 + 0.5).astype(np.uint8)


def _overlay_rows(image: np.ndarray, label_rows, k: int, step: int):
    """The rows of :func:`_colour_overlay` (uint8 RGB) as a function ``(r0, r1) -> rows``, of
    label rows given the same way (:meth:`SegmentationResult.label_rows`): the regions' mean
    colours are summed ``step`` rows at a time first (whole numbers: the same in any order)."""
    import cv2

    h = image.shape[0]
    cnt, sums = np.zeros(k, np.int64), np.zeros((k, 3))
    for r0 in range(0, h, step):
        flat, img8 = label_rows(r0, r0 + step).ravel(), _rgb8_rows(image, r0, r0 + step)
        cnt += np.bincount(flat, minlength=k)
        for c in range(3):
            sums[:, c] += np.bincount(flat, weights=img8[..., c].ravel(), minlength=k)
    lut = (sums / np.maximum(cnt, 1)[:, None] + 0.5).astype(np.uint8)

    def rows(r0, r1):
        r1 = min(h, r1)
        lo = max(0, r0 - 2)  # the outline of rows r0..r1-1 sees the labels two rows around them
        lab = label_rows(lo, min(h, r1 + 1))
        band = cv2.addWeighted(lut[lab[r0 - lo:r1 - lo]], 0.5, _rgb8_rows(image, r0, r1), 0.5, 0)
        line = np.zeros(lab.shape, np.uint8)
        line[:, 1:][lab[:, 1:] != lab[:, :-1]] = 1
        line[1:][lab[1:] != lab[:-1]] = 1
        band[cv2.dilate(line, np.ones((3, 3), np.uint8))[r0 - lo:r1 - lo] > 0] = 0  # the dark outline
        band[line[r0 - lo:r1 - lo] > 0] = 255
        return band
    return rows


def _colour_overlay(image: np.ndarray, labels: np.ndarray, rows: Optional[int] = None) -> np.ndarray:
    """Mean colour of each region blended with the image, region boundaries as a white line
    with a black outline on both sides (visible on light and dark areas alike; uint8 BGR).
    ``rows``: drawn that many rows at a time (default: all; the same image). uint8
    arithmetic: a few bytes per pixel for a photograph."""
    h = image.shape[0]
    step = max(1, int(rows or h))
    draw = _overlay_rows(image, lambda r0, r1: labels[r0:r1], int(labels.max()) + 1, step)
    return np.ascontiguousarray(np.concatenate([draw(r0, r0 + step) for r0 in range(0, h, step)])[..., ::-1])


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


def write_outputs(out_dir, stem: str, result: SegmentationResult, image: np.ndarray,
                  n_regions: Optional[int] = None, threshold: Optional[float] = None,
                  min_size="auto", overwrite: bool = True) -> list[Path]:
    """Write the files of one image into ``out_dir``, together (:class:`hiseg.io.AtomicFiles`:
    each to a temporary file, one at a time, then all moved into place; an error or a
    Ctrl-C leaves none of them half-written and no temporary file).

    ``{stem}_ucm.png`` (8-bit, the square root of the saliency: a view, whose weak edges show),
    ``{stem}_ucm16.png`` (16-bit, the saliency itself), ``{stem}.mat`` (BSDS ``ucm2``, double,
    exact), and with ``n_regions`` or ``threshold`` ``{stem}_labels.png``
    (uint16 labels) and ``{stem}_overlay.png`` (``min_size``: see
    :meth:`SegmentationResult.cut`). ``image``: the float RGB image, or what
    :meth:`Segmenter.read` returns for it. ``stem`` may hold any bytes a file name may (not
    only UTF-8). Returns the written paths. A cut of more than :data:`MAX_LABELS` regions
    does not fit a 16-bit label image: ValueError, nothing written. ``overwrite=False``: the
    files are created exclusively; when one exists, even made by another process meanwhile,
    FileExistsError names it and none of this image's files is left by this call.

    Memory: the full-size outputs are drawn from the cut and the hierarchy at the working
    resolution, :data:`BAND_PIXELS` at a time; an image above that size is encoded band by
    band (:func:`hiseg.io.write_png_rows`, the same pixels as OpenCV's whole-image PNG) and
    the ``.mat`` column block by column block: no full-size output array is ever whole
    (a 12000x9000 photograph: about 100 MB beyond the image).
    """
    out = Path(out_dir)
    names = output_paths(out, stem)
    cut = n_regions is not None or threshold is not None
    h, w = result.shape
    step = max(1, BAND_PIXELS // max(w, 1))
    labels = None
    if cut:
        labels = (result.working_cut(n_regions=n_regions, min_size=min_size) if n_regions is not None
                  else result.working_cut(threshold=threshold))
        k = int(labels.max()) + 1
        if k > MAX_LABELS:
            shown = display_path(stem)
            raise ValueError(f"{shown}: the cut has {k} regions, more than a 16-bit label image "
                             f"({display_path(names['labels'].name)}) holds ({MAX_LABELS}); choose a higher threshold "
                             f"or fewer regions (nothing of {shown} was written)")

    def png(rows_of, dtype):  # a large image's band by band, a small one's whole
        if h * w > BAND_PIXELS:
            return write_png_rows(rows_of, h, dtype, step)
        whole = np.asarray(rows_of(0, h)).astype(dtype)
        return write_png(np.ascontiguousarray(whole[..., ::-1]) if whole.ndim == 3 else whole)

    blocks = result.ucm2_blocks()

    def saliency(top, dtype, view=False):  # view: the square root, for the eye (weak edges visible)
        def rows(r0, r1):
            s = np.clip(blocks[2 * r0 + 2:2 * min(h, r1) + 1, 2:2 * w + 1][::2, ::2], 0, 1).astype(np.float32)
            return _quantise(np.sqrt(s, out=s) if view else s, top, dtype)
        return rows

    out.mkdir(parents=True, exist_ok=True)
    with AtomicFiles(overwrite) as files:
        if cut:
            label_rows = result.label_rows(labels)
            files.write(names["labels"], png(label_rows, np.uint16))
            files.write(names["overlay"], png(_overlay_rows(image, label_rows, k, step), np.uint8))
        files.write(names["ucm"], png(saliency(255, np.uint8, view=True), np.uint8))
        files.write(names["ucm16"], png(saliency(65535, np.uint16), np.uint16))
        files.write(names["mat"], lambda tmp: write_ucm2_mat(tmp, blocks))
        files.commit()
    return image_outputs(out, stem, cut)


def output_paths(out_dir, stem: str) -> dict:
    """The files :func:`write_outputs` may write for image ``stem``, by kind."""
    out = Path(out_dir)
    return {"ucm": out / f"{stem}_ucm.png", "ucm16": out / f"{stem}_ucm16.png", "mat": out / f"{stem}.mat",
            "labels": out / f"{stem}_labels.png", "overlay": out / f"{stem}_overlay.png"}


def image_outputs(out_dir, stem: str, cut: bool) -> list[Path]:
    """The files :func:`write_outputs` writes for image ``stem``: the saliency maps and the
    ``.mat``, and with a cut (``n_regions`` or ``threshold`` given) the labels and overlay."""
    names = output_paths(out_dir, stem)
    return [names[k] for k in ("ucm", "ucm16", "mat") + (("labels", "overlay") if cut else ())]


def image_done(out_dir, stem: str, cut: bool, also=()) -> bool:
    """Whether every file of image ``stem`` (:func:`image_outputs`, plus the paths ``also``,
    e.g. its ``--html`` page) is present and complete (:func:`hiseg.io.file_complete`: a few
    small reads per file): what ``hiseg predict --resume`` skips. It does not tell which
    options wrote them: ``hiseg predict`` checks that against its run record in the folder
    (:class:`hiseg.cli.record.RunRecord`) before it skips anything; a caller of this function
    (or of :func:`predict_file` with ``resume=True``) answers for that itself."""
    return all(file_complete(p) for p in [*image_outputs(out_dir, stem, cut), *also])


def predict_file(seg: Segmenter, path, out_dir, tile: int = 512, n_regions: Optional[int] = None,
                 threshold: Optional[float] = None, min_size="auto", boundary: Optional[np.ndarray] = None,
                 overwrite: bool = True, resume: bool = False, also=()):
    """``hiseg predict``'s work on one image file: read it, segment it with ``seg`` and
    :func:`write_outputs` its files into ``out_dir``. ``boundary``: its boundary map at the
    working resolution, when the network ran elsewhere (``--workers``, :mod:`hiseg.segmentation.predict_ddp`);
    the result is the same as computing it here. Every path that writes ``hiseg predict``'s
    files goes through here.

    ``overwrite=False``: the files are created exclusively (FileExistsError naming one that
    exists, nothing of this image left: :func:`write_outputs`). ``resume=True``: an image
    whose files (and the paths ``also``) are all present and complete (:func:`image_done`)
    is skipped, returning None without reading it; one with some files only (an
    interrupted run) is done again, its files replaced and the interrupted run's temporary
    files removed.

    Returns (image, result, the warnings' messages), or None for a skipped image; the image
    as :meth:`Segmenter.read` gives it (a large one: its decoded integer array, RGB order).
    """
    import warnings

    path = Path(path)
    cut = n_regions is not None or threshold is not None
    if resume:
        mine = image_outputs(out_dir, path.stem, cut)
        if image_done(out_dir, path.stem, cut, also):
            return None
        for p in [*mine, *also]:
            remove_stray_temps(p)
        overwrite = overwrite or any(os.path.lexists(p) for p in mine)
    work, out_shape, img = seg.read(path)
    res = seg.finish(work, seg.network_map(work, tile) if boundary is None else boundary, out_shape)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        write_outputs(out_dir, path.stem, res, img, n_regions=n_regions, threshold=threshold, min_size=min_size,
                      overwrite=overwrite)
    return img, res, [str(w.message) for w in caught]
