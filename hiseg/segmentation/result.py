"""What :meth:`Segmenter.segment <hiseg.segmentation.segmenter.Segmenter.segment>` returns: one image's
hierarchy and its views (the ultrametric contour map, the saliency map, cuts by region count or
threshold), at the working resolution and at the image's own."""

from __future__ import annotations

import numbers
from dataclasses import dataclass, field
from typing import Optional

import numpy as np

from ..core.graph import RegionAdjacencyGraph
from ..core.ultrametric import Hierarchy
from .saliency import (UCM2Blocks, cut_at_threshold, cut_num_regions, ucm2_from_labels, ucm2_from_rag,
                       upsample_labels)

__all__ = ["SegmentationResult"]


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
        (:func:`hiseg.core.cuts.check_count`) or a ``threshold`` that is not a number (``'0.3'``).
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
            if isinstance(threshold, bool) or not isinstance(threshold, numbers.Real):
                raise TypeError(f"cut: threshold must be a number in [0, 1] (the UCM's range), got {threshold!r} "
                                f"({type(threshold).__name__})")
            threshold = float(threshold)
            if not 0.0 <= threshold <= 1.0:  # also refuses nan
                raise ValueError(f"threshold must be in [0, 1] (the UCM's range), got {threshold!r}")
            labels = cut_at_threshold(self.rag, self.ultrametric, threshold)
        return labels

    def label_rows(self, labels: np.ndarray):
        """A function ``(r0, r1) -> rows r0..r1-1`` of ``labels`` (a :meth:`working_cut`)
        drawn at the image's resolution, as :meth:`cut` draws them (O(rows))."""
        if not self.upsampled:
            return lambda r0, r1: labels[r0:r1]
        return lambda r0, r1: upsample_labels(labels, self.shape, rows=(r0, r1))
