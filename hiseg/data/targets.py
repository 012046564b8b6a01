"""Training targets on the superpixel graph from the annotators' segmentations.

- :func:`superpixel_labels`: per annotator and superpixel, the ground-truth region that
  covers most of the superpixel (majority vote), as compact ids;
- :func:`edge_targets`: per RAG edge, the fraction of annotators whose partition puts
  the two superpixels in different regions (the soft target of the closest loss);
- :func:`boundary_maps` / :func:`mean_boundary`: ground-truth boundary pixels per
  annotator and their mean over annotators (target of an optional pixel-level loss).

Everything is vectorised numpy (one ``bincount`` per annotator); no per-region loop.
Every pixel counts as labelled (there is no "ignore" label).
"""
from __future__ import annotations

import numpy as np

from ..core.graph import compact_labels
from ..segmentation.superpixels import label_boundaries

__all__ = ["superpixel_labels", "edge_targets", "boundary_maps", "mean_boundary", "graph_targets", "compute_targets"]

# above this many (superpixel, label) cells a dense bincount table would be too large
_DENSE_LIMIT = 1 << 22


def _check_sp_seg(superpixels, segmentations):
    sp = np.asarray(superpixels)
    seg = np.asarray(segmentations)
    if sp.ndim != 2:
        raise ValueError(f"superpixels must be (H, W), got shape {sp.shape}")
    if seg.ndim == 2:
        seg = seg[None]
    if seg.ndim != 3 or seg.shape[1:] != sp.shape:
        raise ValueError(f"segmentations must be (A, H, W) with H, W = {sp.shape}, got {seg.shape}")
    if not np.issubdtype(sp.dtype, np.integer) or not np.issubdtype(seg.dtype, np.integer):
        raise TypeError(f"labels must be integers, got {sp.dtype} and {seg.dtype}")
    if sp.size and sp.min() < 0:
        raise ValueError("superpixel labels must be >= 0")
    return sp.astype(np.int64, copy=False), seg


def superpixel_labels(superpixels, segmentations, num_regions: int | None = None) -> np.ndarray:
    """Majority ground-truth label of every superpixel, for every annotator.

    Parameters
    ----------
    superpixels : int array (H, W), labels ``0..R-1``
    segmentations : int array (A, H, W) (or (H, W) for one annotator), any label values
    num_regions : int, optional
        ``R``; default ``superpixels.max() + 1`` (a label with no pixel gets -1).

    Returns
    -------
    int64 array (A, R). Entry ``[a, r]`` is the *compact* id (rank among the sorted
    distinct labels of annotator ``a``, so ``0..K_a-1``) of the region of annotator
    ``a`` that covers most pixels of superpixel ``r``; ties go to the smaller id;
    -1 for a superpixel without pixels.

    Cost: O(A (H W + R K_a)) with a dense count table, or O(A H W log(H W)) when
    ``R K_a`` exceeds 4M cells (sparse path).
    """
    sp, seg = _check_sp_seg(superpixels, segmentations)
    r = int(sp.max()) + 1 if num_regions is None else int(num_regions)
    flat_sp = sp.ravel()
    out = np.full((seg.shape[0], r), -1, np.int64)
    for a in range(seg.shape[0]):
        g = compact_labels(seg[a].ravel())
        k = int(g.max()) + 1 if g.size else 1
        key = flat_sp * k + g
        if r * k <= _DENSE_LIMIT:
            counts = np.bincount(key, minlength=r * k).reshape(r, k)
            best = counts.argmax(1)
            has = counts[np.arange(r), best] > 0
            out[a, has] = best[has]
        else:
            ukey, cnt = np.unique(key, return_counts=True)
            usp, ug = ukey // k, ukey % k
            # sort by (superpixel, -count, label): first row of each superpixel wins
            order = np.lexsort((ug, -cnt, usp))
            usp, ug = usp[order], ug[order]
            first = np.ones(usp.size, bool)
            first[1:] = usp[1:] != usp[:-1]
            out[a, usp[first]] = ug[first]
    return out


def edge_targets(graph, sp_labels) -> np.ndarray:
    """Fraction of annotators separating the two end regions of every edge.

    Parameters
    ----------
    graph : EdgeList | RegionAdjacencyGraph | (sources, targets[, num_vertices])
        The RAG (its ``graph`` is used when a RegionAdjacencyGraph is given).
    sp_labels : int array (A, R)
        Output of :func:`superpixel_labels`.

    Returns
    -------
    float32 array (E,): ``mean_a [sp_labels[a, s_e] != sp_labels[a, t_e]]``, in [0, 1]
    (NaN everywhere when there is no annotator, ``A = 0``).

    Cost O(A E).
    """
    if hasattr(graph, "frontier_ptr"):
        graph = graph.graph
    src, dst = np.asarray(graph[0]), np.asarray(graph[1])
    lab = np.asarray(sp_labels)
    if lab.ndim != 2:
        raise ValueError(f"sp_labels must be (A, R), got shape {lab.shape}")
    if lab.shape[0] == 0:  # unlabelled image: no target
        return np.full(src.shape[0], np.nan, np.float32)
    return (lab[:, src] != lab[:, dst]).mean(0).astype(np.float32)


def boundary_maps(segmentations, thick: bool = True) -> np.ndarray:
    """Boundary pixels of every annotator's segmentation.

    Parameters
    ----------
    segmentations : int array (A, H, W)
    thick : bool
        True (default): a pixel is a boundary pixel when one of its 4 neighbours has
        another label, so both pixels of every frontier pixel pair are marked (the
        pixels that the frontier pooling reads). False: one-pixel-wide boundaries
        (right / bottom neighbour differs).

    Returns
    -------
    bool array (A, H, W). Cost O(A H W).
    """
    seg = np.asarray(segmentations)
    if seg.ndim != 3:
        raise ValueError(f"segmentations must be (A, H, W), got shape {seg.shape}")
    return label_boundaries(seg, thick=thick)


def mean_boundary(segmentations, thick: bool = True) -> np.ndarray:
    """Mean of :func:`boundary_maps` over annotators: float32 (H, W) in [0, 1].

    An image without annotator gives zeros.
    """
    seg = np.asarray(segmentations)
    if seg.ndim != 3:
        raise ValueError(f"segmentations must be (A, H, W), got shape {seg.shape}")
    if seg.shape[0] == 0:
        return np.zeros(seg.shape[1:], np.float32)
    return boundary_maps(seg, thick).mean(0, dtype=np.float32)


def graph_targets(rag, segmentations) -> dict:
    """The targets on the RAG: ``sp_labels`` int64 (A, R) and ``edge_target`` float32 (E,)."""
    sp_lab = superpixel_labels(rag.labels, segmentations, rag.num_regions)
    return {"sp_labels": sp_lab, "edge_target": edge_targets(rag.graph, sp_lab)}


def compute_targets(rag, segmentations) -> dict:
    """All targets of one image given its RAG (see the functions above).

    Parameters
    ----------
    rag : hiseg.core.graph.RegionAdjacencyGraph
        Built from the superpixels (its ``labels`` are the superpixels ``0..R-1``).
    segmentations : int array (A, H, W)

    Returns
    -------
    dict with ``sp_labels`` int64 (A, R), ``edge_target`` float32 (E,), ``boundary``
    float32 (H, W). Cost O(A H W).
    """
    return {**graph_targets(rag, segmentations), "boundary": mean_boundary(segmentations)}
