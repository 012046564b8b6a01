"""Saliency maps (ultrametric contour maps) of RAG hierarchies, and their cuts.

An ultrametric ``u`` on the edges of a region adjacency graph is drawn as a *UCM*: every
boundary between two superpixels carries the altitude at which they merge. Thresholding
the UCM at ``t`` gives the segmentation whose regions merge every RAG edge with
``u <= t``; thresholds nest.

The BSDS ``ucm2`` format is the map on the doubled grid of shape ``(2H+1, 2W+1)``:
pixel ``(i, j)`` sits at ``(2i+1, 2j+1)``, the edge between horizontal neighbours at
``(2i+1, 2j+2)``, between vertical neighbours at ``(2i+2, 2j+1)``, and each grid corner
``(even, even)`` carries the max of its (up to four) incident edges. The benchmark reads
boundaries at ``ucm2[2::2, 2::2]`` and regions as the 8-connected components of
``ucm2 <= t`` at ``[1::2, 1::2]``.
"""
from __future__ import annotations

import numpy as np
import torch
from scipy.sparse import coo_matrix
from scipy.sparse.csgraph import connected_components

from ..graph import RegionAdjacencyGraph, grid_graph
from ..ultrametric import Hierarchy, build_hierarchy

__all__ = ["ucm2_from_rag", "saliency_from_ucm2", "cut_at_threshold", "cut_num_regions", "rag_hierarchy"]


def _np(x):
    return x.detach().cpu().numpy() if isinstance(x, torch.Tensor) else np.asarray(x)


def ucm2_from_rag(rag: RegionAdjacencyGraph, ultrametric) -> np.ndarray:
    """BSDS ``ucm2`` map (float64, (2H+1, 2W+1)) of an ultrametric on the RAG edges.

    O(H W). Raises ValueError if ``ultrametric`` has not one value per RAG edge.
    """
    u = _np(ultrametric).astype(np.float64)
    if u.shape != (rag.graph.num_edges,):
        raise ValueError(f"ultrametric has shape {u.shape}, expected ({rag.graph.num_edges},) "
                         "(one value per RAG edge)")
    h, w = rag.labels.shape
    px = grid_graph((h, w))
    val = np.zeros(px.num_edges)
    on = rag.pixel_edge_map >= 0
    val[on] = u[rag.pixel_edge_map[on]]
    ucm = np.zeros((2 * h + 1, 2 * w + 1))
    nh = h * (w - 1)
    ucm[1::2, 2:-1:2] = val[:nh].reshape(h, w - 1)  # horizontal neighbours
    ucm[2:-1:2, 1::2] = val[nh:].reshape(h - 1, w)  # vertical neighbours
    # corners: max of the incident edges
    ucm[::2, ::2] = np.maximum(_corner_from_rows(ucm), _corner_from_cols(ucm))
    return ucm


def _corner_from_rows(ucm):
    """For each corner (2i, 2j): max of the vertical-edge entries above and below it."""
    v = ucm[1::2, ::2]  # (H, W+1): entries at odd rows, even columns = vertical edges' rows
    out = np.zeros((v.shape[0] + 1, v.shape[1]))
    out[:-1] = np.maximum(out[:-1], v)
    out[1:] = np.maximum(out[1:], v)
    return out


def _corner_from_cols(ucm):
    """For each corner (2i, 2j): max of the entries left and right of it on its row."""
    hrow = ucm[::2, 1::2]  # (H+1, W)
    out = np.zeros((hrow.shape[0], hrow.shape[1] + 1))
    out[:, :-1] = np.maximum(out[:, :-1], hrow)
    out[:, 1:] = np.maximum(out[:, 1:], hrow)
    return out


def saliency_from_ucm2(ucm2: np.ndarray) -> np.ndarray:
    """The (H, W) saliency map read as the benchmark reads boundaries: ``ucm2[2::2, 2::2]``."""
    return ucm2[2::2, 2::2]


def rag_hierarchy(rag: RegionAdjacencyGraph, weights) -> tuple[torch.Tensor, Hierarchy]:
    """Subdominant ultrametric and hierarchy of RAG edge weights (no gradient)."""
    w = weights if isinstance(weights, torch.Tensor) else torch.as_tensor(np.asarray(weights, dtype=np.float64))
    h = build_hierarchy(rag.graph, w)
    return h.ultrametric(w.detach()), h


def _components(rag: RegionAdjacencyGraph, merge: np.ndarray) -> np.ndarray:
    n = rag.graph.num_vertices
    s, t = rag.graph.sources[merge], rag.graph.targets[merge]
    m = coo_matrix((np.ones(s.size), (s, t)), shape=(n, n))
    _, lab = connected_components(m, directed=False)
    return lab[rag.labels]


def cut_at_threshold(rag: RegionAdjacencyGraph, ultrametric, threshold: float) -> np.ndarray:
    """Segmentation (H, W) int64 labels 0..K-1 merging every RAG edge with ``u <= threshold``."""
    u = _np(ultrametric)
    return _components(rag, np.flatnonzero(u <= threshold))


def cut_num_regions(rag: RegionAdjacencyGraph, hierarchy: Hierarchy, k: int) -> np.ndarray:
    """Horizontal cut of the hierarchy with exactly ``k`` regions (k-1 top merges undone).

    Ties between altitudes are broken by the canonical (Kruskal) order, so the result
    always has exactly ``k`` regions. Raises ValueError for ``k`` outside ``1..R``.
    """
    n = rag.graph.num_vertices
    if not 1 <= int(k) <= n:
        raise ValueError(f"k must be between 1 and the number of superpixels ({n}), got {k}")
    merges = hierarchy.mst_edge_map[: n - int(k)]
    return _components(rag, merges)
