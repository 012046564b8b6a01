"""Boundary benchmark of BSDS500, per image: thinning, pixel matching, counts.

This module reimplements, in numpy and compiled kernels, the behaviour of the official
BSDS500 boundary benchmark (``evaluation_bdry_image`` / ``correspondPixels`` /
``collect_eval_bdry``):

* a prediction thresholded at ``t`` is thinned to one-pixel width
  (MATLAB ``bwmorph(BW, 'thin', Inf)``; see :func:`thin_boundaries`);
* the thinned map is put in correspondence with every annotator's boundary map
  by a minimum-cost bipartite assignment in which two pixels may be paired only
  if their Euclidean distance is at most ``maxDist = 0.0075 * diag`` pixels, a
  pair costs its distance and every unpaired pixel costs
  ``outlierCost = 100 * maxDist`` (see :func:`correspond_pixels`);
* per threshold: ``cntR`` = annotator pixels paired (summed over annotators),
  ``sumR`` = annotator pixels, ``cntP`` = predicted pixels paired with at least
  one annotator, ``sumP`` = predicted pixels;
* dataset figures (ODS with interpolation between neighbouring thresholds, OIS,
  AP) are computed from those counts by :func:`hiseg.metrics.summary.collect_boundary`
  exactly as ``collect_eval_bdry``.

Assignment
----------
The official code builds a sparse bipartite graph with randomly wired outlier
nodes and solves it with the CSA algorithm, so its ties are broken at random
(about 1e-3 wobble in precision between runs). Here the same objective (integer
costs ``rint(100 * distance)``, outlier cost ``ceil(100 * outlierCost)``) is
solved *exactly* by LAPJVsp on the graph restricted to candidate pairs within
``maxDist``; every pixel is given a private outlier node and the outlier-outlier
edges mirror the real edges, which keeps a perfect matching feasible with
``2 E + n`` edges instead of a dense problem. Ties are broken deterministically,
as :func:`scipy.sparse.csgraph.min_weight_full_bipartite_matching` breaks them on
that graph (hiseg used it until the compiled kernels of :mod:`hiseg.metrics.kernels`:
one LAPJVsp per connected component of the candidate graph, the same pairs,
``tests/metrics/test_metrics_kernels.py``).

Thinning
--------
MATLAB's ``bwmorph(..., 'thin', Inf)`` documents the two-subiteration parallel
thinning of Guo & Hall (1989, as described by Lam, Lee & Suen 1992, p. 879);
:func:`skimage.morphology.thin` implements it (added to scikit-image to replicate
that MATLAB function, scikit-image PR #2294), pads with zeros outside the image
and iterates to convergence, like ``bwmorph``; :func:`hiseg.metrics.kernels.thin`
is a compiled version that visits only foreground pixels, equal to
scikit-image's. Checked against the official outputs: the ``segs`` references
(``test_3``, ``test_4``), whose ``seg2bdry`` maps have 2x2 blobs at junctions and
must be thinned, are reproduced within the same ~1e-3 tie-breaking noise as the
already-thin ucm2 maps (``test_1``). The input is never modified.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterable, Sequence

import numpy as np

__all__ = [
    "DEFAULT_MAX_DIST",
    "DEFAULT_OUTLIER_COST",
    "BoundaryImageResult",
    "BoundaryMatcher",
    "boundary_counts",
    "correspond_pixels",
    "max_distance_pixels",
    "seg_to_boundaries",
    "thin_boundaries",
]

#: Matching tolerance as a fraction of the image diagonal (official default).
DEFAULT_MAX_DIST = 0.0075
#: Cost of an unmatched pixel, in units of the tolerance (official default).
DEFAULT_OUTLIER_COST = 100.0
#: Fixed-point multiplier of the official ``match.cc`` (costs are integers).
_MULTIPLIER = 100


def max_distance_pixels(shape: Sequence[int], max_dist: float = DEFAULT_MAX_DIST) -> float:
    """Matching tolerance in pixels: ``max_dist * sqrt(H^2 + W^2)``."""
    h, w = int(shape[0]), int(shape[1])
    return float(max_dist) * float(np.sqrt(h * h + w * w))


def _offsets(radius: float):
    """Integer offsets ``(dy, dx)`` with ``dy^2 + dx^2 <= radius^2`` and their
    fixed-point costs ``rint(100 * sqrt(dy^2 + dx^2))``."""
    r = int(np.ceil(radius))
    dy, dx = np.mgrid[-r : r + 1, -r : r + 1]
    d2 = dy * dy + dx * dx
    keep = d2 <= radius * radius
    cost = np.rint(np.sqrt(d2[keep].astype(np.float64)) * _MULTIPLIER).astype(np.int64)
    return dy[keep].astype(np.int64), dx[keep].astype(np.int64), cost


# ----------------------------------------------------------------------------
# morphology
# ----------------------------------------------------------------------------
def thin_boundaries(bmap: np.ndarray) -> np.ndarray:
    """Thin a binary boundary map to one-pixel width.

    Equivalent of MATLAB ``bwmorph(bmap, 'thin', Inf)`` (same Guo-Hall
    two-subiteration lookup tables, zero padding, iterate until stable); the
    compiled :func:`hiseg.metrics.kernels.thin`, equal to :func:`skimage.morphology.thin`.

    Parameters
    ----------
    bmap : numpy.ndarray, shape (H, W)
        Boundary map; non-zero entries are boundary pixels.

    Returns
    -------
    numpy.ndarray of bool, shape (H, W)
        Cost O(H W) to list the foreground, then O(foreground) per thinning pass (a
        handful of passes for boundary maps).
    """
    from .kernels import thin

    bmap = np.asarray(bmap)
    if bmap.ndim != 2:
        raise ValueError(f"boundary map must be 2-D, got shape {bmap.shape}")
    return thin(bmap != 0)


def seg_to_boundaries(seg: np.ndarray) -> np.ndarray:
    """Boundary map of a label image, as the official ``seg2bdry(seg, 'imageSize')``.

    Pixel ``(i, j)`` (not on the last row/column) is a boundary pixel when its
    label differs from the pixel below or to the right of it, or when the pixel
    to its right differs from the one below-right, or the pixel below differs
    from the one below-right. On the last row the pixel is a boundary when it
    differs from its right neighbour; on the last column when it differs from
    the pixel below; the bottom-right corner is never a boundary.

    Parameters
    ----------
    seg : numpy.ndarray, shape (H, W)
        Integer label image.

    Returns
    -------
    numpy.ndarray of bool, shape (H, W)
        Cost O(H W).
    """
    seg = np.asarray(seg)
    if seg.ndim != 2:
        raise ValueError(f"label image must be 2-D, got shape {seg.shape}")
    h, w = seg.shape
    # ev[i, j]: seg[i, j] != seg[i+1, j] (last row padded 0)
    ev = np.zeros((h, w), dtype=bool)
    ev[:-1, :] = seg[:-1, :] != seg[1:, :]
    # eh[i, j]: seg[i, j] != seg[i, j+1] (last column padded 0)
    eh = np.zeros((h, w), dtype=bool)
    eh[:, :-1] = seg[:, :-1] != seg[:, 1:]
    out = np.zeros((h, w), dtype=bool)
    out[:-1, :-1] = (eh[:-1, :-1] | eh[1:, :-1]) | (ev[:-1, :-1] | ev[:-1, 1:])
    out[-1, :-1] = eh[-1, :-1]
    out[:-1, -1] = ev[:-1, -1]
    out[-1, -1] = False
    return out


# ----------------------------------------------------------------------------
# assignment
# ----------------------------------------------------------------------------
def _check_map(x, name):
    x = np.asarray(x)
    if x.ndim != 2:
        raise ValueError(f"{name} must be a 2-D map, got shape {x.shape}")
    return x != 0


class BoundaryMatcher:
    """Matches boundary maps of one image against all of its annotators.

    The positions within the tolerance of every annotator pixel are listed once
    (:func:`hiseg.metrics.kernels.neighbourhoods`), so that matching a predicted map
    costs, per annotator, a gather over those lists and one exact assignment per
    connected component of the candidate graph (:func:`hiseg.metrics.kernels.match_map`,
    compiled). The components of the last map matched are kept: a component of the next
    map with the same predicted pixels keeps its pairs instead of being solved again (the
    thresholded maps of a ucm2 nest, and most of one threshold's components are the
    previous one's). The pairs are those of a fresh matcher (the assignment of a component
    depends on its pixels only), in any order of calls.

    Parameters
    ----------
    gt_boundaries : sequence of numpy.ndarray, each (H, W)
        Annotators' boundary maps (non-zero = boundary), used as given (not
        thinned), as the official benchmark does.
    max_dist : float, default 0.0075
        Tolerance as a fraction of the image diagonal.
    outlier_cost : float, default 100
        Cost of an unmatched pixel in units of the tolerance.

    Raises
    ------
    ValueError
        If there is no annotator or their shapes differ.
    """

    def __init__(
        self,
        gt_boundaries: Sequence[np.ndarray],
        max_dist: float = DEFAULT_MAX_DIST,
        outlier_cost: float = DEFAULT_OUTLIER_COST,
    ):
        gts = [_check_map(g, "ground-truth boundary map") for g in gt_boundaries]
        if not gts:
            raise ValueError("no ground-truth boundary map given")
        shape = gts[0].shape
        for g in gts:
            if g.shape != shape:
                raise ValueError(f"ground-truth maps have different shapes: {shape} vs {g.shape}")
        if outlier_cost <= 1:
            raise ValueError("outlier_cost must be > 1 (in units of max_dist)")
        self.shape = shape
        self.max_dist_px = max_distance_pixels(shape, max_dist)
        self.outlier_px = outlier_cost * self.max_dist_px
        self.outlier_weight = int(np.ceil(self.outlier_px * _MULTIPLIER))
        from .kernels import neighbourhoods

        dy, dx, cost = _offsets(self.max_dist_px)
        self.gt_sizes = [int(g.sum()) for g in gts]
        # per annotator pixel, the positions within the tolerance and their costs
        self._hoods = [neighbourhoods(np.flatnonzero(g).astype(np.int64), *shape, dy, dx, cost) for g in gts]
        self._ids = np.full(gts[0].size, -1, dtype=np.int64)
        self._earlier: list = [None] * len(gts)  # per annotator, the last match's components

    @property
    def n_annotators(self) -> int:
        return len(self._hoods)

    def match(self, pred: np.ndarray) -> list[tuple[np.ndarray, np.ndarray]]:
        """Optimal correspondence of a predicted map with every annotator.

        Parameters
        ----------
        pred : numpy.ndarray, shape (H, W)
            Predicted (already thinned) boundary map.

        Returns
        -------
        list of (numpy.ndarray, numpy.ndarray)
            Per annotator, the indices (into ``np.flatnonzero(pred)`` and into
            the annotator's ``np.flatnonzero(gt)``) of the pixels paired by
            the optimal assignment, in increasing order of the first.

        Raises
        ------
        ValueError
            If ``pred`` is not 2-D or its shape differs from the annotators'.
        """
        from .kernels import match_map

        pred = _check_map(pred, "predicted boundary map")
        if pred.shape != self.shape:
            raise ValueError(f"predicted map shape {pred.shape} != ground-truth shape {self.shape}")
        plin = np.flatnonzero(pred).astype(np.int64)
        ids = self._ids
        ids[plin] = np.arange(plin.size, dtype=np.int64)
        try:
            out = []
            for k, hood in enumerate(self._hoods):
                earlier = self._earlier[k]
                if earlier is None:  # no earlier match with this annotator
                    none = np.zeros(0, dtype=np.int64)
                    earlier = (np.full(ids.size, -1, dtype=np.int64), none, none, np.zeros(1, dtype=np.int64),
                               none, none)
                self._earlier[k] = None  # until this match has updated its components (an error: none)
                mp, mg, *components = match_map(ids, plin, *hood, self.outlier_weight, *earlier)
                self._earlier[k] = (earlier[0], plin, *components)
                order = np.argsort(mp)
                out.append((mp[order], mg[order]))
        finally:
            ids[plin] = -1
        return out

    def counts(self, pred: np.ndarray) -> tuple[int, int, int, int]:
        """Benchmark counts of one (thinned) predicted map.

        Returns
        -------
        (cntR, sumR, cntP, sumP) : tuple of int
            Annotator pixels matched (summed over annotators), annotator
            pixels, predicted pixels matched to at least one annotator,
            predicted pixels.
        """
        pred = _check_map(pred, "predicted boundary map")
        n_pred = int(pred.sum())
        acc = np.zeros(n_pred, dtype=bool)
        cnt_r = 0
        for mp, mg in self.match(pred):
            acc[mp] = True
            cnt_r += int(mg.size)
        return cnt_r, int(sum(self.gt_sizes)), int(acc.sum()), n_pred


def correspond_pixels(
    pred: np.ndarray,
    gt: np.ndarray,
    max_dist: float = DEFAULT_MAX_DIST,
    outlier_cost: float = DEFAULT_OUTLIER_COST,
):
    """Optimal correspondence between two boundary maps (``correspondPixels``).

    Parameters
    ----------
    pred, gt : numpy.ndarray, shape (H, W)
        Boundary maps (non-zero = boundary pixel); used as given (no thinning).
    max_dist : float, default 0.0075
        Pairing tolerance as a fraction of the image diagonal.
    outlier_cost : float, default 100
        Cost of an unpaired pixel in units of the tolerance.

    Returns
    -------
    match1, match2 : numpy.ndarray of bool, shape (H, W)
        Pixels of ``pred`` / ``gt`` that are paired.
    cost : float
        Total cost in pixels: sum of paired distances plus ``outlier_cost *
        tolerance`` per unpaired pixel of either map.

    Raises
    ------
    ValueError
        On non-2-D inputs or shape mismatch.

    Notes
    -----
    Cost: O(N_gt * r^2) to list candidate pairs (``r`` = tolerance in
    pixels) and one sparse LAPJV assignment.
    """
    gt = _check_map(gt, "ground-truth boundary map")
    pred = _check_map(pred, "predicted boundary map")
    if pred.shape != gt.shape:
        raise ValueError(f"shape mismatch: {pred.shape} vs {gt.shape}")
    matcher = BoundaryMatcher([gt], max_dist, outlier_cost)
    mp, mg = matcher.match(pred)[0]
    m1 = np.zeros(pred.size, dtype=bool)
    m1[np.flatnonzero(pred)[mp]] = True
    m2 = np.zeros(gt.size, dtype=bool)
    m2[np.flatnonzero(gt)[mg]] = True
    # distances of the pairs: recompute exactly
    p_yx = np.column_stack(np.unravel_index(np.flatnonzero(pred)[mp], pred.shape))
    g_yx = np.column_stack(np.unravel_index(np.flatnonzero(gt)[mg], gt.shape))
    dist = np.sqrt(((p_yx - g_yx) ** 2).sum(axis=1)).sum() if mp.size else 0.0
    n_out = int(pred.sum()) + int(gt.sum()) - 2 * mp.size
    cost = float(dist) + n_out * matcher.outlier_px
    return m1.reshape(pred.shape), m2.reshape(gt.shape), cost


# ----------------------------------------------------------------------------
# per image
# ----------------------------------------------------------------------------
@dataclass
class BoundaryImageResult:
    """Per-threshold boundary counts of one image (``*_ev1.txt`` content)."""

    thresholds: np.ndarray
    cnt_r: np.ndarray
    sum_r: np.ndarray
    cnt_p: np.ndarray
    sum_p: np.ndarray
    name: str = ""
    extra: dict = field(default_factory=dict)

    def as_table(self) -> np.ndarray:
        """``[thresh cntR sumR cntP sumP]`` as an ``(n, 5)`` float array."""
        return np.column_stack(
            [self.thresholds, self.cnt_r, self.sum_r, self.cnt_p, self.sum_p]
        ).astype(np.float64)


def boundary_counts(
    maps: Iterable[tuple[object, np.ndarray]],
    matcher: BoundaryMatcher,
    thresh: Sequence[float],
    thin: bool = True,
    name: str = "",
) -> BoundaryImageResult:
    """Per-threshold counts of one image.

    Parameters
    ----------
    maps : iterable of (key, numpy.ndarray)
        One un-thinned binary boundary map per threshold, in threshold order.
        ``key`` identifies the map: equal keys promise equal maps, so the
        result is reused (``None`` disables that).
    matcher : BoundaryMatcher
        The image's annotators.
    thresh : sequence of float
        Threshold values, same length as ``maps``.
    thin : bool, default True
        Thin every map first (the official default).
    name : str
        Image name, stored in the result.

    Returns
    -------
    BoundaryImageResult
        Cost: one thinning and ``n_annotators`` assignments per distinct map.
    """
    thresh = np.asarray(thresh, dtype=np.float64)
    out = np.zeros((thresh.size, 4), dtype=np.int64)
    cache_key = object()
    cache_val = None
    prev_thin = None
    n = 0
    for t, (key, bmap) in enumerate(maps):
        if t >= thresh.size:
            raise ValueError("more boundary maps than thresholds")
        n += 1
        if key is not None and key == cache_key:
            out[t] = cache_val
            continue
        bm = thin_boundaries(bmap) if thin else (np.asarray(bmap) != 0)
        if prev_thin is not None and np.array_equal(bm, prev_thin):
            val = cache_val
        else:
            val = matcher.counts(bm)
        out[t] = val
        cache_key, cache_val, prev_thin = key, val, bm
    if n != thresh.size:
        raise ValueError(f"got {n} boundary maps for {thresh.size} thresholds")
    return BoundaryImageResult(thresh, out[:, 0], out[:, 1], out[:, 2], out[:, 3], name=name)


