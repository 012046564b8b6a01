"""K-cut covering: how well one cut of a hierarchy, with as many regions as a person drew,
covers the human segmentations.

For an image with annotators' segmentations ``G_1..G_m``, ``K`` is the median of their
region counts (rounded). The hierarchy (a BSDS ``ucm2``) is cut at the level whose
region count is closest to ``K`` (ties: the finer level), and that one segmentation ``S``
is scored with the benchmark's covering of the ground truth by ``S``:

.. math:: C = \\frac{\\sum_i \\sum_{R \\in G_i} |R| \\max_{R' \\in S} IoU(R, R')}{\\sum_i \\sum_{R \\in G_i} |R|}

summed over images before the division (as the benchmark sums its counts).  Unlike the
ODS/OIS coverings, no threshold is chosen on the ground truth: this is what a user who
asks ``--regions K`` gets.
"""
from __future__ import annotations

from typing import Sequence

import numpy as np

from .region import covering_matches, ucm_to_labels

__all__ = ["median_region_count", "ucm2_cut_k", "ucm2_size_aware_cut", "kcut_counts"]


def median_region_count(gt_segs: Sequence[np.ndarray]) -> int:
    """Median number of regions of the annotators (rounded, at least 1)."""
    counts = [len(np.unique(np.asarray(g))) for g in gt_segs]
    return max(1, int(round(float(np.median(counts)))))


def ucm2_cut_k(ucm2: np.ndarray, n_regions: int) -> np.ndarray:
    """The level of a ucm2 whose region count is closest to ``n_regions`` (finer on ties): labels (H, W).

    A threshold cut, not a cut into a number of regions (:func:`ucm2_size_aware_cut`): a
    level of the map, read as the benchmark reads it (:func:`~hiseg.metrics.region.ucm_to_labels`,
    the 8-connected components of ``ucm2 <= t``, MATLAB's ``bwlabel``), so that it cuts any
    method's ucm2 as the BSDS code would; higra's threshold cut works on a tree, not on a map.
    Binary search over the distinct levels (region counts decrease with the level):
    O(H W log L) for L levels.
    """
    ucm2 = np.asarray(ucm2, dtype=np.float64)
    levels = np.unique(ucm2)
    lo, hi = 0, levels.size - 1
    def count(i):
        return int(ucm_to_labels(ucm2, levels[i]).max())
    # largest level index with count >= n_regions
    if count(0) < n_regions:
        return ucm_to_labels(ucm2, levels[0])
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if count(mid) >= n_regions:
            lo = mid
        else:
            hi = mid - 1
    fine = ucm_to_labels(ucm2, levels[lo])
    if lo + 1 < levels.size:
        coarse = ucm_to_labels(ucm2, levels[lo + 1])
        if abs(int(coarse.max()) - n_regions) < abs(int(fine.max()) - n_regions):
            return coarse
    return fine


def ucm2_size_aware_cut(ucm2: np.ndarray, n_regions: int, min_size="auto") -> np.ndarray:
    """The size-aware cut with ``n_regions`` regions of any UCM (labels (H, W) from 1), by
    :func:`hiseg.core.cuts.cut_hierarchy` as hiseg's own hierarchies are cut
    (:meth:`hiseg.segmentation.result.SegmentationResult.cut`), so that hiseg's and another method's
    UCMs (gPb-owt-ucm) are cut the same way. ``min(n_regions, finest level's regions)``
    regions: when the map has fewer regions of ``min_size``, ``min_size`` is halved until
    it has them (:func:`~hiseg.core.cuts.cut_hierarchy`).

    The hierarchy is rebuilt from the map: the regions of its finest level, their
    4-adjacency graph weighted by the UCM value on each frontier (max), single linkage
    (which returns the UCM's own hierarchy, an ultrametric being its own subdominant).
    ``min_size``: pixels, a fraction of the image, or "auto" (:func:`hiseg.core.cuts.resolve_min_size`
    with :data:`~hiseg.core.cuts.AUTO_MIN_REGION_FRACTION`).
    """
    from ..core.graph import region_adjacency_graph
    from ..core.cuts import AUTO_MIN_REGION_FRACTION, resolve_min_size
    from ..segmentation.saliency import cut_num_regions, ucm2_edge_views
    from ..core.ultrametric import build_hierarchy

    ucm2 = np.asarray(ucm2, dtype=np.float64)
    if ucm2.ndim != 2 or ucm2.shape[0] % 2 == 0 or ucm2.shape[1] % 2 == 0:
        raise ValueError(f"ucm2 must be a (2H+1, 2W+1) map, got shape {ucm2.shape}")
    fine = ucm_to_labels(ucm2, float(ucm2.min()))
    rag = region_adjacency_graph(fine)
    n = rag.graph.num_vertices
    if n == 1:
        return np.ones(fine.shape, dtype=np.int64)
    val = np.concatenate([v.ravel() for v in ucm2_edge_views(ucm2)])
    on = rag.pixel_edge_map >= 0
    w = np.zeros(rag.graph.num_edges)
    np.maximum.at(w, rag.pixel_edge_map[on], val[on])
    import torch

    h = build_hierarchy(rag.graph, torch.from_numpy(w))
    px = resolve_min_size(min_size, n_regions, fine.size, AUTO_MIN_REGION_FRACTION)
    return cut_num_regions(rag, h, min(int(n_regions), n), px) + 1


def kcut_counts(seg: np.ndarray, gt_segs: Sequence[np.ndarray]) -> tuple[float, float]:
    """(covered area, total area) of the ground truth by one segmentation (labels >= 1 or >= 0)."""
    seg = np.asarray(seg)
    if seg.min() == 0:
        seg = seg + 1
    _, match_gt, _, area_gt, _, _ = covering_matches(seg, gt_segs)
    cnt = sum(float((m * a).sum()) for m, a in zip(match_gt, area_gt))
    tot = sum(float(a.sum()) for a in area_gt)
    return cnt, tot
