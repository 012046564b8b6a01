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

Cuts: :func:`cut_num_regions` (``n_regions`` regions, none under ``min_size`` pixels) is
the region adjacency graph's wrapper of :func:`hiseg.core.cuts.cut_hierarchy`, the one cut of
hiseg; :func:`cut_at_threshold` is the level ``t``. The maps and the threshold cut are
numpy: higra's ``graph_4_adjacency_2_khalimsky`` and
``labelisation_horizontal_cut_from_threshold`` give the same arrays bit for bit (tested
against the ``_..._higra`` versions here) but slower, measured by
``benchmarks/bench_saliency_higra.py`` (the ratios: ``benchmarks/results/saliency_higra.md``).
"""
from __future__ import annotations

import numpy as np

from ..core._lazy import import_higra, lazy_torch
from ..core.cuts import check_count, cut_hierarchy
from ..core.graph import EdgeList, RegionAdjacencyGraph, connected_components
from ..core.ultrametric import Hierarchy, build_hierarchy

__all__ = ["ucm2_from_rag", "saliency_from_ucm2", "cut_at_threshold", "cut_num_regions", "rag_hierarchy",
           "upsample_labels", "ucm2_from_labels", "UCM2Blocks",
           "ucm2_edge_views"]


#: imported at its first use (:mod:`hiseg.core._lazy`): UCMs and cuts of numpy arrays need no torch
torch = lazy_torch()


def _np(x):
    return x.detach().cpu().numpy() if torch.is_tensor(x) else np.asarray(x)


def ucm2_from_rag(rag: RegionAdjacencyGraph, ultrametric) -> np.ndarray:
    """BSDS ``ucm2`` map (float64, (2H+1, 2W+1)) of an ultrametric on the RAG edges.

    O(H W), numpy only: higra's ``graph_4_adjacency_2_khalimsky`` draws the same map
    (tested bit for bit, :func:`_ucm2_from_rag_higra`) but needs an explicit 4-adjacency
    graph of the pixels and its edge weights in its own order: an order of magnitude slower, at
    BSDS size and at 12 megapixels (``benchmarks/results/saliency_higra.md``), so hiseg keeps its own. Raises ValueError if ``ultrametric`` has
    not one value per RAG edge.
    """
    u = _check_ultrametric(ultrametric, rag.graph.num_edges)
    h, w = rag.labels.shape
    ucm = np.zeros((2 * h + 1, 2 * w + 1))
    pem = rag.pixel_edge_map  # grid_graph's order: horizontal edges first
    for view, edge in zip(ucm2_edge_views(ucm), (pem[: h * (w - 1)].reshape(h, w - 1), pem[h * (w - 1):].reshape(h - 1, w))):
        on = edge >= 0
        view[on] = u[edge[on]]
    _corners_in_place(ucm)
    return ucm


def _check_ultrametric(ultrametric, num_edges: int) -> np.ndarray:
    u = _np(ultrametric).astype(np.float64)
    if u.shape != (num_edges,):
        raise ValueError(f"ultrametric has shape {u.shape}, expected ({num_edges},) (one value per RAG edge)")
    return u


def _khalimsky(shape, horizontal: np.ndarray, vertical: np.ndarray) -> np.ndarray:
    """higra's ucm2 of pixel-edge values given as the two views of :func:`ucm2_edge_views`."""
    hg = import_higra()

    h, w = shape
    both = np.zeros((h, w, 2))  # higra's edge order: for every pixel, its right then its bottom edge
    both[:, :-1, 0] = horizontal
    both[:-1, :, 1] = vertical
    exists = np.ones((h, w, 2), dtype=bool)
    exists[:, -1, 0] = False
    exists[-1, :, 1] = False
    return hg.graph_4_adjacency_2_khalimsky(hg.get_4_adjacency_graph((h, w)), both[exists], (h, w),
                                            add_extra_border=True)


def _ucm2_from_rag_higra(rag: RegionAdjacencyGraph, ultrametric) -> np.ndarray:
    """:func:`ucm2_from_rag` drawn by higra (``graph_4_adjacency_2_khalimsky``): the same
    map, kept for the equality tests and the benchmark."""
    u = _check_ultrametric(ultrametric, rag.graph.num_edges)
    h, w = rag.labels.shape
    val = np.where(rag.pixel_edge_map >= 0, u[np.maximum(rag.pixel_edge_map, 0)] if u.size else 0.0, 0.0)
    return _khalimsky((h, w), val[: h * (w - 1)].reshape(h, w - 1), val[h * (w - 1):].reshape(h - 1, w))


def ucm2_edge_views(ucm2: np.ndarray):
    """Views of a ucm2's pixel-edge entries: (H, W-1) between horizontal neighbours
    ``(i, j), (i, j+1)`` at ``(2i+1, 2j+2)`` and (H-1, W) between vertical neighbours at
    ``(2i+2, 2j+1)``; raveled and concatenated, they follow ``grid_graph``'s edge order."""
    return ucm2[1::2, 2:-1:2], ucm2[2:-1:2, 1::2]


def upsample_labels(labels: np.ndarray, shape, rows=None, cols=None) -> np.ndarray:
    """Nearest-neighbour resize of a label image to ``shape`` (H, W): every output pixel
    takes the label under its centre. Upsampling keeps the 4-adjacency of regions.
    ``rows`` / ``cols``: ``(start, stop)`` of a window of the output, computed alone (the
    same values as ``[start:stop]`` of the whole, stops past the end clipped; O(window))."""
    lab = np.asarray(labels)
    h, w = lab.shape
    oh, ow = int(shape[0]), int(shape[1])
    r0, r1 = (max(0, rows[0]), min(oh, rows[1])) if rows is not None else (0, oh)
    c0, c1 = (max(0, cols[0]), min(ow, cols[1])) if cols is not None else (0, ow)
    r = np.minimum(((np.arange(r0, r1) + 0.5) * h / oh).astype(np.int64), h - 1)
    c = np.minimum(((np.arange(c0, c1) + 0.5) * w / ow).astype(np.int64), w - 1)
    if lab.dtype.itemsize > 4 and lab.size and lab.min() >= 0 and lab.max() < 2 ** 31:
        lab = lab.astype(np.int32)  # half the memory of a photograph-size label image
    return lab[r[:, None], c[None, :]]


class _EdgeValues:
    """The ultrametric value of the graph edge joining two labels, looked up by sorted key."""

    def __init__(self, graph, ultrametric):
        self.u = _np(ultrametric).astype(np.float64)
        self.n = int(graph.num_vertices)
        src, dst = np.asarray(graph.sources, np.int64), np.asarray(graph.targets, np.int64)
        key = np.minimum(src, dst) * self.n + np.maximum(src, dst)
        self.order = np.argsort(key)
        self.skey = key[self.order]

    def draw(self, view, a, b):
        """``view`` := the value of the edge between ``a`` and ``b`` where they differ."""
        rr, cc = np.nonzero(a != b)
        la, lb = a[rr, cc].astype(np.int64), b[rr, cc].astype(np.int64)
        k = np.minimum(la, lb) * self.n + np.maximum(la, lb)
        pos = np.minimum(np.searchsorted(self.skey, k), max(self.skey.size - 1, 0))
        if k.size and (self.skey.size == 0 or np.any(self.skey[pos] != k)):
            raise ValueError("labels have neighbouring regions that are not joined by an edge of the graph")
        view[rr, cc] = self.u[self.order[pos]]

    def ucm2(self, lab: np.ndarray) -> np.ndarray:
        h, w = lab.shape
        ucm = np.zeros((2 * h + 1, 2 * w + 1))
        horizontal, vertical = ucm2_edge_views(ucm)
        self.draw(horizontal, lab[:, :-1], lab[:, 1:])
        self.draw(vertical, lab[:-1], lab[1:])
        _corners_in_place(ucm)
        return ucm


def ucm2_from_labels(labels: np.ndarray, graph, ultrametric) -> np.ndarray:
    """BSDS ``ucm2`` (2H+1, 2W+1) of an ultrametric on the edges of ``graph`` (a RAG of
    regions ``0..R-1``) drawn on a label image of those regions, e.g. the superpixels
    upsampled to a photograph's full resolution (:func:`upsample_labels`). Every pair of
    4-neighbours with different labels must be an edge of the graph (ValueError if not).
    O(H W + B log E) for B frontier pixel pairs; the map is the only full-size float array
    (:class:`UCM2Blocks` draws it a block at a time).
    numpy only: higra draws the same map (tested bit for bit, :func:`_ucm2_from_labels_higra`:
    its region adjacency graph of ``labels``, ``rag_back_project_edge_weights``,
    ``graph_4_adjacency_2_khalimsky``) an order of magnitude slower, with a full-size pixel graph
    and weight array besides the map (``benchmarks/results/saliency_higra.md``), so hiseg keeps its own.
    """
    return _EdgeValues(graph, ultrametric).ucm2(np.asarray(labels))


class UCM2Blocks:
    """The ucm2 of :func:`ucm2_from_labels` of ``labels`` upsampled to ``shape``
    (:func:`upsample_labels`; ``shape=None``: ``labels`` as they are), drawn a block at a
    time: ``blocks[r0:r1, c0:c1]`` (steps of 1) is that block of the (2H+1, 2W+1) map,
    float64, the same values as the whole map's, from a window of the label image two
    pixels wider than the block. Memory: O(block); ``shape`` and ``ndim`` as an array's.
    :func:`hiseg.io.write_ucm2_mat` writes it column block by column block."""

    def __init__(self, labels: np.ndarray, graph, ultrametric, shape=None):
        self.labels = np.asarray(labels)
        self.full = tuple(int(v) for v in (shape if shape is not None else self.labels.shape))
        self.shape = (2 * self.full[0] + 1, 2 * self.full[1] + 1)
        self.ndim = 2
        self._edges = _EdgeValues(graph, ultrametric)

    def __getitem__(self, key) -> np.ndarray:
        if not (isinstance(key, tuple) and len(key) == 2 and all(isinstance(k, slice) for k in key)):
            raise TypeError("UCM2Blocks takes two slices: blocks[r0:r1, c0:c1]")
        (r0, r1, rs), (c0, c1, cs) = (k.indices(n) for k, n in zip(key, self.shape))
        if rs != 1 or cs != 1:
            raise ValueError("UCM2Blocks takes slices with a step of 1")
        r1, c1 = max(r0, r1), max(c0, c1)
        if r0 == r1 or c0 == c1:
            return np.zeros((r1 - r0, c1 - c0))
        # the pixels whose edges and corners make ucm2 rows r0..r1-1: (r0 // 2 - 1) .. ((r1 + 1) // 2)
        (a0, b0), (a1, b1) = ((max(0, lo // 2 - 1), min(n, (hi + 1) // 2 + 1))
                              for lo, hi, n in ((r0, r1, self.full[0]), (c0, c1, self.full[1])))
        if self.full == self.labels.shape:
            lab = self.labels[a0:b0, a1:b1]
        else:
            lab = upsample_labels(self.labels, self.full, rows=(a0, b0), cols=(a1, b1))
        return self._edges.ucm2(lab)[r0 - 2 * a0:r1 - 2 * a0, c0 - 2 * a1:c1 - 2 * a1]


def _ucm2_from_labels_higra(labels: np.ndarray, graph, ultrametric) -> np.ndarray:
    """:func:`ucm2_from_labels` by higra: the same map, kept for the equality tests and the benchmark."""
    hg = import_higra()

    lab = np.asarray(labels)
    h, w = lab.shape
    u = _check_ultrametric(ultrametric, int(graph.num_edges))
    n = int(graph.num_vertices)
    pixels = hg.get_4_adjacency_graph((h, w))
    rag = hg.make_region_adjacency_graph_from_labelisation(pixels, lab)
    first = np.empty(rag.num_vertices(), dtype=np.int64)  # one pixel of every higra region
    first[rag.vertex_map[::-1]] = np.arange(h * w - 1, -1, -1)
    value = lab.ravel()[first].astype(np.int64)
    rs, rt = (value[x] for x in rag.edge_list())
    src, dst = np.asarray(graph.sources, np.int64), np.asarray(graph.targets, np.int64)
    key = np.minimum(src, dst) * n + np.maximum(src, dst)
    order = np.argsort(key)
    want = np.minimum(rs, rt) * n + np.maximum(rs, rt)
    pos = np.minimum(np.searchsorted(key[order], want), max(key.size - 1, 0))
    if want.size and (key.size == 0 or np.any(key[order][pos] != want)):
        raise ValueError("labels have neighbouring regions that are not joined by an edge of the graph")
    weights = (hg.rag_back_project_edge_weights(rag, u[order[pos]]) if want.size
               else np.zeros(pixels.num_edges()))  # (higra refuses an empty array of RAG edge weights)
    return hg.graph_4_adjacency_2_khalimsky(pixels, weights, (h, w), add_extra_border=True)


def _corners_in_place(ucm):
    """Each grid corner (even, even) := max of its incident edge entries, without
    full-size temporaries (the corners start at 0 and no edge entry is a corner)."""
    c = ucm[::2, ::2]
    v = ucm[1::2, ::2]  # entries above / below each corner
    np.maximum(c[:-1], v, out=c[:-1])
    np.maximum(c[1:], v, out=c[1:])
    hrow = ucm[::2, 1::2]  # entries left / right of each corner
    np.maximum(c[:, :-1], hrow, out=c[:, :-1])
    np.maximum(c[:, 1:], hrow, out=c[:, 1:])


def saliency_from_ucm2(ucm2: np.ndarray) -> np.ndarray:
    """The (H, W) saliency map read as the benchmark reads boundaries: ``ucm2[2::2, 2::2]``."""
    return ucm2[2::2, 2::2]


def rag_hierarchy(rag: RegionAdjacencyGraph, weights) -> tuple[torch.Tensor, Hierarchy]:
    """Subdominant ultrametric and hierarchy of RAG edge weights (no gradient)."""
    w = weights if torch.is_tensor(weights) else torch.as_tensor(np.asarray(weights, dtype=np.float64))
    h = build_hierarchy(rag.graph, w)
    return h.ultrametric(w.detach()), h


def _components(rag: RegionAdjacencyGraph, merge: np.ndarray) -> np.ndarray:
    g = rag.graph
    _, lab = connected_components(EdgeList(g.sources[merge], g.targets[merge], g.num_vertices))
    return lab[rag.labels]


def cut_at_threshold(rag: RegionAdjacencyGraph, ultrametric, threshold: float) -> np.ndarray:
    """Segmentation (H, W) int32 labels 0..K-1 merging every RAG edge with ``u <= threshold``
    (regions numbered in the order of their smallest superpixel).

    The connected components of those edges (scipy), not higra's
    ``labelisation_horizontal_cut_from_threshold``, which needs the hierarchy's tree first
    (``bpt_canonical``, O(E log E)) and gives the same labels (tested,
    :func:`_cut_at_threshold_higra`) slower at BSDS size, no faster at 12 megapixels, where drawing
    the labels on the pixels dominates both (``benchmarks/results/saliency_higra.md``), so hiseg
    keeps its own.
    """
    u = _np(ultrametric)
    return _components(rag, np.flatnonzero(u <= threshold))


def _cut_at_threshold_higra(rag: RegionAdjacencyGraph, ultrametric, threshold: float) -> np.ndarray:
    """:func:`cut_at_threshold` by higra (the hierarchy of ``u``, then its horizontal cut):
    the same labels, kept for the equality tests and the benchmark."""
    hg = import_higra()

    from ..core.cuts import first_occurrence_order

    tree, alt = hg.bpt_canonical(rag.graph.to_higra(), _np(ultrametric).astype(np.float64))
    lab = first_occurrence_order(np.asarray(hg.labelisation_horizontal_cut_from_threshold(tree, alt, threshold)))
    return lab.astype(np.int32)[rag.labels]


def cut_num_regions(rag: RegionAdjacencyGraph, hierarchy: Hierarchy, n_regions: int, min_size: float = 0,
                    *, return_min_size: bool = False):
    """Segmentation (H, W) int32 of the hierarchy of a RAG cut into ``n_regions`` regions.

    A thin wrapper of :func:`hiseg.core.cuts.cut_hierarchy` for region adjacency graphs: the
    leaves are the superpixels, weighted by their pixel counts, and the labels of the
    superpixels are drawn on ``rag.labels`` (regions numbered in the order of their
    smallest superpixel). ``min_size`` (pixels; 0: the plain cut, the ``n_regions - 1``
    top merges undone, ties broken by the canonical order) makes the cut size-aware: no
    region smaller than ``min_size`` pixels, a speck stays with the region it merged
    into. When the hierarchy has fewer than ``n_regions`` regions of ``min_size``
    pixels, ``min_size`` is halved until it has them: the result always has exactly
    ``n_regions`` regions; ``return_min_size=True`` also returns the size used (pixels).
    Raises TypeError for an ``n_regions`` that is not an integer, ValueError for one
    outside ``1..R`` (:func:`hiseg.core.cuts.check_count`) or a negative ``min_size``. For a
    ``min_size`` setting (``"auto"``, a fraction): :func:`hiseg.core.cuts.resolve_min_size` with
    :data:`~hiseg.core.cuts.AUTO_MIN_REGION_FRACTION`.
    """
    n = rag.graph.num_vertices
    n_regions = check_count(n_regions, n, name="n_regions", of="the number of superpixels")
    labels, used = cut_hierarchy(hierarchy, int(n_regions), min_size, leaf_size=rag.region_sizes,
                                 return_min_size=True)
    image = labels.astype(np.int32)[rag.labels]
    return (image, used) if return_min_size else image
