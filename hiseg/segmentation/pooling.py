"""Pool a pixel boundary map onto the edges of region adjacency graphs (batched, on device)."""
from __future__ import annotations

import numpy as np

from ..core._lazy import is_tensor, lazy_torch
from ..core.graph import RegionAdjacencyGraph

__all__ = ["frontier_pixel_pairs", "batch_frontier_pixels", "frontier_mean", "rag_frontier_mean"]

#: imported at its first use (:mod:`hiseg.core._lazy`): the frontier pixel pairs need no torch
torch = lazy_torch()


def frontier_pixel_pairs(rag: RegionAdjacencyGraph) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The two pixels of every frontier pixel-edge of a RAG, grouped by RAG edge.

    Parameters
    ----------
    rag : RegionAdjacencyGraph
        Its ``frontier_edges`` are ids of edges of ``grid_graph(labels.shape)``
        (horizontal edges in raster order, then vertical edges in raster order).

    Returns
    -------
    pix_a, pix_b : int64 arrays (P,)
        Flat pixel indices (``row * W + col``) of the two end pixels of each frontier
        pixel-edge: ``pix_a`` is the left / upper pixel, ``pix_b`` the right / lower.
    edge : int64 array (P,)
        The RAG edge each pixel-edge lies on (non-decreasing, CSR order).

    Cost O(P).
    """
    h, w = rag.labels.shape
    fe = rag.frontier_edges.astype(np.int64)
    n_h = h * (w - 1)
    horiz = fe < n_h
    row = np.where(horiz, fe // max(w - 1, 1), 0)
    col = np.where(horiz, fe % max(w - 1, 1), 0)
    pa = np.where(horiz, row * w + col, fe - n_h)
    pb = np.where(horiz, pa + 1, fe - n_h + w)
    edge = np.repeat(np.arange(rag.graph.num_edges, dtype=np.int64), np.diff(rag.frontier_ptr))
    return pa, pb, edge


def batch_frontier_pixels(rags, shape) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """:func:`frontier_pixel_pairs` of B RAGs as flat ids into (B, H, W) maps of ``shape``
    (H, W) (RAG ``b`` covers the top-left ``rags[b].labels.shape`` of map ``b``, the layout of
    a collated batch) and global edge ids (RAG after RAG): three int64 arrays (P,). O(P)."""
    h, w = (int(x) for x in shape)
    pa, pb, pe, off = [], [], [], 0
    for b, r in enumerate(rags):
        a, c, e = frontier_pixel_pairs(r)
        wb = r.labels.shape[1]
        pa.append((a // wb) * w + a % wb + b * h * w)
        pb.append((c // wb) * w + c % wb + b * h * w)
        pe.append(e + off)
        off += r.graph.num_edges
    return tuple(np.concatenate(x).astype(np.int64) for x in (pa, pb, pe))


def frontier_mean(boundary: torch.Tensor, pix_a: torch.Tensor, pix_b: torch.Tensor,
                  edge: torch.Tensor, num_edges: int, counts: torch.Tensor | None = None) -> torch.Tensor:
    r"""Mean of a boundary map along each RAG frontier: the RAG edge weights.

    .. math:: w(e) = \frac{1}{|F_e|}\sum_{(p, q) \in F_e} \frac{b(p) + b(q)}{2}

    Parameters
    ----------
    boundary : tensor of any shape, flattened (e.g. (B, H, W) probabilities); pixel ids
        index the flattened tensor (``b * H * W + p`` in a batch).
    pix_a, pix_b : (F,) int64 tensors, the two pixels of each frontier pixel-edge.
    edge : (F,) int64 tensor, the RAG edge (global in a batch) of each pixel-edge.
    num_edges : number of RAG edges (every one must have at least one pixel-edge).
    counts : (num_edges,) tensor on ``boundary``'s device, optional
        The number of pixel-edges of every RAG edge (its frontier length, known from the
        RAGs: :class:`~hiseg.data.collate.GraphBatch`'s ``frontier_count``); then nothing
        is counted nor checked.

    Returns a (num_edges,) tensor on ``boundary``'s device, differentiable (scatter-add
    backward). O(F) on the device, with no host synchronisation: the sums (and the
    counts, without ``counts``) are ``index_add_`` (a CUDA ``bincount`` would read the
    maximum index back). Without ``counts``, the check that every edge has a frontier
    pixel is made where the indices are host tensors (ValueError); indices already on an
    accelerator come from RAGs, whose edges are made from their frontier pixels, and are
    not read back.
    """
    flat = boundary.reshape(-1)
    vals = 0.5 * (flat[pix_a] + flat[pix_b])
    s = flat.new_zeros(num_edges).index_add_(0, edge, vals)
    if counts is not None:
        return s / counts.to(flat.dtype)
    if edge.device.type == "cpu":  # host indices: count once, check for free
        cnt = torch.bincount(edge, minlength=num_edges)
        if num_edges and bool((cnt == 0).any()):
            raise ValueError("frontier_mean: some RAG edges have no frontier pixel")
        cnt = cnt.to(device=flat.device, dtype=flat.dtype)
    else:
        cnt = flat.new_zeros(num_edges).index_add_(0, edge, torch.ones_like(vals.detach()))
    return s / cnt


def rag_frontier_mean(rag: RegionAdjacencyGraph, boundary) -> torch.Tensor:
    """:func:`frontier_mean` of one (H, W) map (array or tensor) on one RAG, in float64."""
    b = boundary if is_tensor(boundary) else torch.from_numpy(np.asarray(boundary))
    pa, pb, e = frontier_pixel_pairs(rag)
    return frontier_mean(b.to(torch.float64), torch.from_numpy(pa), torch.from_numpy(pb), torch.from_numpy(e),
                         rag.graph.num_edges)
