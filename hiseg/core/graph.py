"""Sparse undirected graphs as plain edge arrays: their validation (with their edge weights),
batching, connectivity, and the region adjacency graph of a label image.

A *graph* argument anywhere in hiseg is either a higra ``UndirectedGraph`` or a tuple
``(sources, targets, num_vertices)`` of integer arrays / tensors (edge ``i`` joins
``sources[i]`` and ``targets[i]``; vertices are ``0 .. num_vertices - 1``).  Edge
weights are 1-D arrays indexed by edge id, as in higra.

Builders return :class:`EdgeList`, a named tuple, so their result *is* a valid graph
argument and also unpacks as ``sources, targets, num_vertices = g``.

Every builder of a hierarchy checks its arguments here, once (:func:`checked_input`). The
graphs of pixel grids and point clouds are built by :mod:`hiseg.core.builders`. This module has
no torch autograd (tensors are only read), no I/O and no image code.
"""
from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import NamedTuple, Optional, Sequence

import numpy as np
from ._lazy import import_higra, lazy_torch

__all__ = [
    "EdgeList",
    "BatchedGraph",
    "as_edge_list",
    "batch_graphs",
    "check_weights",
    "check_values",
    "check_lengths",
    "checked_input",
    "host_weights",
    "RegionAdjacencyGraph",
    "region_adjacency_graph",
    "compact_labels",
    "connected_components",
]

#: imported at its first use (:mod:`hiseg.core._lazy`): only weight tensors are read, for their checks
torch = lazy_torch()


class EdgeList(NamedTuple):
    """An undirected graph as two int64 arrays of edge end points and a vertex count."""

    sources: np.ndarray
    targets: np.ndarray
    num_vertices: int

    @property
    def num_edges(self) -> int:
        return int(self.sources.shape[0])

    def to_higra(self):
        """The same graph as a ``higra.UndirectedGraph`` (edge ids preserved)."""
        hg = import_higra()

        g = hg.UndirectedGraph(self.num_vertices)
        g.add_edges(self.sources, self.targets)
        return g


def _to_numpy_int(a, name: str) -> np.ndarray:
    if hasattr(a, "detach"):  # torch tensor
        a = a.detach().cpu().numpy()
    a = np.asarray(a)
    if a.ndim != 1:
        raise ValueError(f"{name} must be a 1-D array of vertex ids, got shape {a.shape}")
    if a.size and not np.issubdtype(a.dtype, np.integer):
        if np.issubdtype(a.dtype, np.floating) and np.all(np.mod(a, 1) == 0):
            raise TypeError(f"{name} must have an integer dtype, got {a.dtype} (cast it explicitly)")
        raise TypeError(f"{name} must have an integer dtype, got {a.dtype}")
    return a.astype(np.int64, copy=False)


def as_edge_list(graph, *, check: bool = True) -> EdgeList:
    """Normalise a graph argument to an :class:`EdgeList` of int64 numpy arrays.

    Parameters
    ----------
    graph : higra.UndirectedGraph | tuple(sources, targets, num_vertices) | EdgeList | BatchedGraph |
        RegionAdjacencyGraph
    check : bool
        Validate vertex ids (range, shape, dtype). O(|E|).

    Raises
    ------
    TypeError
        Non-integer vertex ids, or an object that is not a graph.
    ValueError
        Mismatched lengths, negative / out-of-range vertex ids, an empty graph
        (no vertex) or self-loops.
    """
    if isinstance(graph, EdgeList) and not check:
        return graph
    if isinstance(graph, BatchedGraph):
        return graph.edge_list
    if isinstance(graph, RegionAdjacencyGraph):  # valid by construction
        return graph.graph
    if hasattr(graph, "edge_list") and hasattr(graph, "num_vertices") and callable(graph.num_vertices):
        s, t = graph.edge_list()
        n = int(graph.num_vertices())
    else:
        try:
            s, t, n = graph
        except (TypeError, ValueError) as e:
            raise TypeError(
                "graph must be a higra UndirectedGraph or a tuple (sources, targets, num_vertices), "
                f"got {type(graph).__name__}"
            ) from e
    s = _to_numpy_int(s, "sources")
    t = _to_numpy_int(t, "targets")
    if hasattr(n, "item"):
        n = n.item()
    if not isinstance(n, (int, np.integer)) or isinstance(n, bool):
        raise TypeError(f"num_vertices must be an integer, got {type(n).__name__}")
    n = int(n)
    if check:
        if s.shape != t.shape:
            raise ValueError(f"sources and targets differ in length: {s.shape[0]} vs {t.shape[0]}")
        if n <= 0:
            raise ValueError("the graph is empty: num_vertices must be positive")
        if s.size:
            lo = min(s.min(), t.min())
            hi = max(s.max(), t.max())
            if lo < 0:
                raise ValueError(f"negative vertex id {lo} in the edge list")
            if hi >= n:
                raise ValueError(f"vertex id {hi} out of range for a graph of {n} vertices")
            if np.any(s == t):
                e = int(np.flatnonzero(s == t)[0])
                raise ValueError(f"self-loop at edge {e} (vertex {s[e]}): not allowed")
    return EdgeList(s, t, n)


@dataclass(frozen=True)
class BatchedGraph:
    """Many graphs concatenated into one, with offsets (a ``ptr`` array) per graph.

    Attributes
    ----------
    sources, targets : int64 arrays of length ``E_total``
        *Global* vertex ids (local id + ``vertex_ptr[g]``).
    vertex_ptr : int64 array of length ``B + 1``
        Graph ``g`` owns vertices ``vertex_ptr[g]:vertex_ptr[g+1]``.
    edge_ptr : int64 array of length ``B + 1``
        Graph ``g`` owns edges ``edge_ptr[g]:edge_ptr[g+1]``.
    """

    sources: np.ndarray
    targets: np.ndarray
    vertex_ptr: np.ndarray
    edge_ptr: np.ndarray

    @property
    def num_graphs(self) -> int:
        return int(self.vertex_ptr.shape[0] - 1)

    @property
    def num_vertices(self) -> int:
        return int(self.vertex_ptr[-1])

    @property
    def num_edges(self) -> int:
        return int(self.edge_ptr[-1])

    @property
    def edge_list(self) -> EdgeList:
        return EdgeList(self.sources, self.targets, self.num_vertices)

    def graph(self, g: int) -> EdgeList:
        """Graph ``g`` with local vertex ids."""
        e0, e1 = self.edge_ptr[g], self.edge_ptr[g + 1]
        v0 = self.vertex_ptr[g]
        return EdgeList(self.sources[e0:e1] - v0, self.targets[e0:e1] - v0,
                        int(self.vertex_ptr[g + 1] - v0))

    def edge_graph_index(self) -> np.ndarray:
        """For each edge, the index of the graph it belongs to."""
        return np.repeat(np.arange(self.num_graphs), np.diff(self.edge_ptr))

    def vertex_graph_index(self) -> np.ndarray:
        """For each vertex, the index of the graph it belongs to."""
        return np.repeat(np.arange(self.num_graphs), np.diff(self.vertex_ptr))

    def chain_edges(self) -> tuple[np.ndarray, np.ndarray]:
        """``(sources, targets)`` of the ``B - 1`` virtual edges that chain the first vertices of
        consecutive graphs: above every weight, they make the batch one connected graph whose
        hierarchy is the graphs' hierarchies joined at the top."""
        firsts = self.vertex_ptr[:-1]
        return firsts[:-1], firsts[1:]


def batch_graphs(graphs: Sequence) -> BatchedGraph:
    """Concatenate graphs into one :class:`BatchedGraph` (vertex ids shifted by offsets).

    Cost O(total edges). Raises like :func:`as_edge_list` for an invalid member, naming it.
    """
    if len(graphs) == 0:
        raise ValueError("batch_graphs needs at least one graph")
    els = []
    for i, g in enumerate(graphs):
        try:
            els.append(as_edge_list(g))
        except (TypeError, ValueError) as e:
            raise type(e)(f"graph {i} of the batch: {e}") from e
    nv = np.array([el.num_vertices for el in els], dtype=np.int64)
    ne = np.array([el.num_edges for el in els], dtype=np.int64)
    vptr = np.concatenate([[0], np.cumsum(nv)])
    eptr = np.concatenate([[0], np.cumsum(ne)])
    s = np.concatenate([el.sources + vptr[i] for i, el in enumerate(els)])
    t = np.concatenate([el.targets + vptr[i] for i, el in enumerate(els)])
    return BatchedGraph(s, t, vptr, eptr)


# ----------------------------------------------------------------------------- edge weights
def check_weights(weights, num_edges: int, *, name: str = "weights", nonnegative: bool = False):
    """Validate an edge-weight array/tensor; return it unchanged.

    Raises
    ------
    TypeError
        Not a tensor/array, or an integer/bool dtype (the layer is differentiable and
        ties of integer weights are better made explicit by the caller).
    ValueError
        Not 1-D, length differs from ``num_edges``, NaN or infinite values, or (with
        ``nonnegative``) negative values.
    """
    check_values(weights, torch.is_tensor(weights), num_edges, name=name, nonnegative=nonnegative)
    return weights


def check_values(weights, tensor: bool, num_edges: int, *, name: str = "weights", nonnegative: bool = False):
    """:func:`check_weights` once the caller has told a tensor (``tensor``) from an array
    (returns None; raises as :func:`check_weights`)."""
    if tensor:
        if weights.dtype in (torch.bool,) or not torch.is_floating_point(weights):
            raise TypeError(f"{name} must be a floating point tensor, got dtype {weights.dtype}")
        shape = tuple(weights.shape)
        finite = bool(torch.isfinite(weights).all())
        neg = bool((weights < 0).any()) if nonnegative else False
    else:
        arr = np.asarray(weights)
        if not np.issubdtype(arr.dtype, np.floating):
            raise TypeError(f"{name} must be a floating point array, got dtype {arr.dtype}")
        shape = arr.shape
        finite = bool(np.isfinite(arr).all())
        neg = bool((arr < 0).any()) if nonnegative else False
    if len(shape) != 1:
        raise ValueError(f"{name} must be 1-D (one value per edge), got shape {shape}")
    if shape[0] != num_edges:
        raise ValueError(f"{name} has {shape[0]} values but the graph has {num_edges} edges")
    if not finite:
        raise ValueError(f"{name} contains NaN or infinite values")
    if neg:
        raise ValueError(f"{name} contains negative values; this loss needs dissimilarities >= 0")


def checked_input(graph, weights, check: bool, tensor: Optional[bool] = None):
    """``(edge list, weights on the host, batch or None)`` of a public builder's arguments: the
    graph normalised and, with ``check``, the graph and the weights validated, here and only
    here; the host weights are numpy (a tensor detached and copied to the CPU, float32 or
    float64). The builders of checked arrays (:func:`hiseg.core.ultrametric.single_linkage`,
    :func:`hiseg.core.average_linkage.average_linkage`) take them as they are. ``tensor``: whether
    ``weights`` is a tensor, when the caller knows."""
    batch = graph if isinstance(graph, BatchedGraph) else None
    el = as_edge_list(graph, check=check)
    tensor = torch.is_tensor(weights) if tensor is None else tensor
    if check:
        check_values(weights, tensor, el.num_edges)
    return el, host_weights(weights) if tensor else np.asarray(weights), batch


def host_weights(weights: torch.Tensor) -> np.ndarray:
    """A weight tensor as the builders read it: detached, on the host, float32 or float64."""
    w = weights.detach()
    if w.device.type != "cpu":
        w = w.cpu()
    if w.dtype not in (torch.float32, torch.float64):
        w = w.float()
    return w.numpy()


def check_lengths(lengths, num_edges: int):
    """Edge lengths (frontier lengths, multiplicities) as float64, or None for all ones: one finite
    value > 0 per edge, else ValueError / TypeError naming the problem."""
    if lengths is None:
        return None
    ln = lengths.detach().cpu().numpy() if torch.is_tensor(lengths) else np.asarray(lengths)
    if ln.ndim != 1 or ln.shape[0] != num_edges:
        raise ValueError(f"lengths must have one value per edge ({num_edges}), got shape {ln.shape}")
    if not np.issubdtype(ln.dtype, np.number) or np.issubdtype(ln.dtype, np.bool_):
        raise TypeError(f"lengths must be numbers, got dtype {ln.dtype}")
    ln = ln.astype(np.float64)
    if not np.isfinite(ln).all() or (ln <= 0).any():
        raise ValueError("lengths must be finite and > 0 (frontier lengths, multiplicities)")
    return ln


def connected_components(graph) -> tuple:
    """``(count, labels)``: the number of connected components of a graph and the component
    of each vertex (scipy's ``connected_components``; isolated vertices are components)."""
    from ._neighbors import components

    el = as_edge_list(graph)
    return components(el.sources, el.targets, el.num_vertices)


@dataclass(frozen=True)
class RegionAdjacencyGraph:
    """Region adjacency graph of a label image, with the frontier of every RAG edge.

    Attributes
    ----------
    graph : EdgeList
        One vertex per region (regions renumbered ``0..R-1``), one edge per pair of
        4-adjacent regions.
    labels : int64 array (H, W)
        The renumbered label image (``vertex_map`` in higra's terms).
    pixel_edge_map : int64 array
        For each edge of ``grid_graph(labels.shape)``, the RAG edge it lies on, or -1
        when both pixels are in the same region.
    frontier_ptr, frontier_edges : int64 arrays
        CSR form of the inverse map: the pixel-grid edges of RAG edge ``i`` are
        ``frontier_edges[frontier_ptr[i]:frontier_ptr[i+1]]`` (never empty).

    Built once per image, it is the graph every later stage takes as it is (pooling, merging,
    the tree, the cuts): :func:`as_edge_list` returns its ``graph`` unchanged, and the region
    sizes are counted once (:attr:`region_sizes`).
    """

    graph: EdgeList
    labels: np.ndarray
    pixel_edge_map: np.ndarray
    frontier_ptr: np.ndarray
    frontier_edges: np.ndarray

    @property
    def num_regions(self) -> int:
        return self.graph.num_vertices

    def frontier_lengths(self) -> np.ndarray:
        return np.diff(self.frontier_ptr)

    @functools.cached_property
    def region_sizes(self) -> np.ndarray:
        """Pixels of each region, int64 (R,): counted once, O(H W)."""
        return np.bincount(self.labels.ravel(), minlength=self.num_regions)


def compact_labels(labels) -> np.ndarray:
    """Rank of every label among the sorted distinct labels (int64, same shape): labels
    renumbered ``0..K-1`` in increasing order. O(n) when the label range is at most about
    4 n (a bincount), else O(n log n) (a sort)."""
    labels = np.asarray(labels)
    if labels.size == 0:
        return labels.astype(np.int64)
    lo, hi = int(labels.min()), int(labels.max())
    if hi - lo <= 4 * labels.size + 1024:  # dense range: bincount + cumsum, no sort
        shifted = labels.astype(np.int64) - lo
        rank = np.cumsum(np.bincount(shifted.ravel(), minlength=hi - lo + 1) > 0) - 1
        return rank[shifted]
    return np.unique(labels, return_inverse=True)[1].astype(np.int64).reshape(labels.shape)


def region_adjacency_graph(labels) -> RegionAdjacencyGraph:
    """Build the 4-adjacency region adjacency graph of a 2-D label image.

    Regions are the distinct label values, renumbered ``0..R-1`` in increasing label
    order. A region that is not connected stays one vertex. RAG edges are the pairs
    ``(a, b)``, ``a < b``, in lexicographic order; the frontier of each edge lists its
    pixel-grid edges in increasing id. Cost O(H W + P log P) for P frontier pixel pairs
    (a label range much wider than H W adds a sort of the pixels).

    Not higra's ``make_region_adjacency_graph_from_labelisation`` (issue 24 item 6):
    :func:`_region_adjacency_graph_higra` builds this same RAG (every field, bit for bit:
    tests/core/test_graph.py) from higra's and is several times slower, at BSDS size and at
    12 megapixels (``benchmarks/results/rag.md``). higra's call alone, on a 4-adjacency graph
    built beforehand, is already slower than this whole function: it needs an explicit graph of
    the pixels (the implicit one is refused), and its RAG (one vertex per
    connected component in order of appearance, edges in order of discovery, pixel edges
    in its own order, no frontier lists) must then be translated, so hiseg keeps its own.

    Raises ValueError for a non 2-D or empty image, TypeError for non-integer labels.
    """
    lab = _checked_compact_labels(labels)
    r = int(lab.max()) + 1
    # the two ends of every edge of grid_graph(lab.shape): horizontal edges, then vertical
    ls = np.concatenate([lab[:, :-1].ravel(), lab[:-1, :].ravel()])
    lt = np.concatenate([lab[:, 1:].ravel(), lab[1:, :].ravel()])
    cross = np.flatnonzero(ls != lt)
    a = np.minimum(ls[cross], lt[cross])
    b = np.maximum(ls[cross], lt[cross])
    key = a * r + b
    # sort the P frontier pixel-edges by RAG edge (stable: raster order within an edge)
    order = np.argsort(key, kind="stable")
    sorted_key = key[order]
    first = np.ones(sorted_key.size, dtype=bool)
    first[1:] = sorted_key[1:] != sorted_key[:-1]
    uniq = sorted_key[first]
    edge_of_sorted = np.cumsum(first) - 1
    frontier_edges = cross[order]
    pixel_edge_map = np.full(ls.size, -1, dtype=np.int64)
    pixel_edge_map[frontier_edges] = edge_of_sorted
    counts = np.bincount(edge_of_sorted, minlength=uniq.size)
    frontier_ptr = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
    g = EdgeList((uniq // r).astype(np.int64), (uniq % r).astype(np.int64), r)
    return RegionAdjacencyGraph(g, lab, pixel_edge_map, frontier_ptr, frontier_edges)


def _checked_compact_labels(labels) -> np.ndarray:
    """:func:`compact_labels` of a label image, after the checks of :func:`region_adjacency_graph`.
    (Same shape as ``metrics.hierarchy._check_parents``' checks, on other data with other messages: kept apart.)"""
    labels = np.asarray(labels)
    if labels.ndim != 2 or labels.size == 0:
        raise ValueError(f"labels must be a non-empty 2-D image, got shape {labels.shape}")
    if not np.issubdtype(labels.dtype, np.integer):
        raise TypeError(f"labels must be integers, got {labels.dtype}")
    return compact_labels(labels)


def _region_adjacency_graph_higra(labels) -> RegionAdjacencyGraph:
    """:func:`region_adjacency_graph` through higra's ``make_region_adjacency_graph_from_labelisation``
    (the same output, every field bit for bit; for the benchmark and the tests only: slower).

    higra's RAG is translated into hiseg's: higra makes one vertex per connected component
    (numbered in raster order of appearance) and numbers edges in order of discovery; its
    4-adjacency graph lists each pixel's right then bottom edge where ``grid_graph`` lists
    all horizontal edges, then all vertical ones. Here its components are mapped to their
    label's rank (merging the components of a disconnected label), its edges renumbered in
    lexicographic order of those ranks, its edge map put in ``grid_graph``'s order.
    """
    hg = import_higra()

    lab = _checked_compact_labels(labels)
    h, w = lab.shape
    r = int(lab.max()) + 1
    g4 = hg.get_4_adjacency_graph((h, w))
    hrag = hg.make_region_adjacency_graph_from_labelisation(g4, lab.ravel())
    vmap = np.asarray(hg.CptRegionAdjacencyGraph.get_vertex_map(hrag))
    emap = np.asarray(hg.CptRegionAdjacencyGraph.get_edge_map(hrag)).astype(np.int64)
    rank = np.empty(hrag.num_vertices(), dtype=np.int64)  # higra component -> label rank
    rank[vmap] = lab.ravel()
    hs, ht = (rank[np.asarray(x, dtype=np.int64)] for x in hrag.edge_list())
    key = np.minimum(hs, ht) * r + np.maximum(hs, ht)
    uniq, new_id = np.unique(key, return_inverse=True)  # components of one label: duplicate pairs
    # higra's pixel edge (p, q), q = p + 1 or p + w, is grid_graph's edge ...
    ps, pt = (np.asarray(x, dtype=np.int64) for x in g4.edge_list())
    horiz = (pt == ps + 1) & (w > 1)  # one column: every edge is vertical (q = p + 1 = p + w)
    grid_id = np.where(horiz, ps - ps // w, h * (w - 1) + ps)
    pixel_edge_map = np.full(grid_id.size, -1, dtype=np.int64)
    on = emap >= 0
    pixel_edge_map[grid_id[on]] = new_id.reshape(-1)[emap[on]]
    frontier = np.flatnonzero(pixel_edge_map >= 0)
    frontier_edges = frontier[np.argsort(pixel_edge_map[frontier], kind="stable")]
    counts = np.bincount(pixel_edge_map[frontier], minlength=uniq.size)
    frontier_ptr = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
    g = EdgeList((uniq // r).astype(np.int64), (uniq % r).astype(np.int64), r)
    return RegionAdjacencyGraph(g, lab, pixel_edge_map, frontier_ptr, frontier_edges)
