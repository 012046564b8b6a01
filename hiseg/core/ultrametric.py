r"""The differentiable subdominant-ultrametric (min-max) layer.

For an edge-weighted connected graph :math:`G=(V,E,w)`, the subdominant ultrametric is

.. math::  \Phi(w)(e_{xy}) = \min_{\pi \in \Pi_{xy}} \max_{e \in \pi} w(e),

the largest ultrametric below :math:`w`.  It is read off the single-linkage tree
(canonical binary partition tree, Kruskal): :math:`\Phi(w)(e_{xy}) = w(\mathrm{pass}(e_{xy}))`
with :math:`\mathrm{pass}(e_{xy}) = \mathrm{mst\_edge\_map}[\mathrm{lca}(x, y)]`.  The layer is
therefore a *gather* ``u = w[pass_edge]``: the tree and the index are built on the CPU
without gradient; the gather runs on the weights' device and autograd's scatter-add is
exactly the paper's 0/1 Jacobian :math:`\partial u_e / \partial w_f = [f = \mathrm{pass}(e)]`.

Work that need not be done is not done:

* edges are ordered with a fast unstable sort whose ties are then re-ordered by edge
  index, giving exactly higra's stable (canonical) order;
* the tree is built by higra's public ``bpt_canonical`` on the edge arrays, without materialising the
  MST graph;
* an edge of the MST is its own pass edge, so only the other edges need an lca;
* lcas of leaves are answered by a range-maximum query over the *split nodes* of the
  leaves in depth-first order (a sparse table of ``N - 1`` int32 entries per level),
  built in O(N log N) vectorised numpy instead of an Euler tour of all ``2N - 1`` nodes.

The module is pure computation: no I/O, no Lightning, no image code.
"""
from __future__ import annotations

import threading
from typing import Optional, Union

import numpy as np

from ._lazy import import_higra, lazy_torch
from .device import leaf_lca, packed_copy, upload_indices  # noqa: F401 (their home is hiseg.core.device)
from .graph import BatchedGraph, EdgeList, as_edge_list

hg = import_higra()  # higra, its plotting imports deferred (hiseg.core._lazy.import_higra)

__all__ = [
    "Hierarchy",
    "build_hierarchy",
    "subdominant_ultrametric",
    "SubdominantUltrametric",
    "AverageLinkageHierarchy",
    "build_average_linkage_hierarchy",
    "average_linkage_ultrametric",
    "AverageLinkageUltrametric",
    "check_weights",
]

GraphLike = Union[EdgeList, BatchedGraph, tuple, "hg.UndirectedGraph"]

#: imported at its first use: building a hierarchy from numpy weights needs no torch
#: (:mod:`hiseg.core._lazy`; the onnxruntime path, :mod:`hiseg.export.runtime`)
torch = lazy_torch()


# ----------------------------------------------------------------------------- validation
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
    float64). The builders of checked arrays (:func:`single_linkage`, :func:`average_linkage`)
    take them as they are. ``tensor``: whether ``weights`` is a tensor, when the caller knows."""
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


# ----------------------------------------------------------------------------- workspace
_tls = threading.local()


def _workspace(nbytes: int) -> np.ndarray:
    """A per-thread reusable byte buffer (avoids re-faulting large fresh pages every call)."""
    buf = getattr(_tls, "buf", None)
    if buf is None or buf.nbytes < nbytes:
        buf = np.empty(max(nbytes, 1), dtype=np.uint8)
        _tls.buf = buf
    return buf


def canonical_edge_order(w: np.ndarray) -> np.ndarray:
    """Indices sorting ``w`` increasingly, ties by increasing edge index (= a stable sort).

    Uses numpy's (SIMD) quicksort, then re-sorts only the runs of tied values by index.
    Cost O(E log E) + O(T log T) for T tied entries.
    """
    order = np.argsort(w)
    if order.size < 2:
        return order
    ws = w[order]
    tie = ws[1:] == ws[:-1]
    if tie.any():
        in_run = np.zeros(order.size, dtype=bool)
        in_run[1:] |= tie
        in_run[:-1] |= tie
        pos = np.flatnonzero(in_run)
        # a run starts where the previous entry is not tied with this one
        starts = np.ones(pos.size, dtype=bool)
        starts[1:] = ~tie[pos[1:] - 1]
        run_id = np.cumsum(starts) - 1
        key = run_id.astype(np.int64) * order.size + order[pos]
        key.sort()
        order[pos] = key % order.size
    return order


# ----------------------------------------------------------------------------- lca
class LeafLCA:
    """Lowest common ancestor of *leaves* of a binary tree whose parents have larger ids.

    Leaves get their rank in a depth-first order; between consecutive leaves sits the
    *split node* (their lca); the lca of two leaves is the highest (largest id) split
    node between their ranks: a range-maximum query answered by a sparse table.
    Preprocessing O(N log N) time, O(N log N) int32 memory; query O(1) per pair.
    """

    def __init__(self, tree: "hg.Tree", parents: np.ndarray, num_leaves: int, sizes: np.ndarray,
                 children: tuple[np.ndarray, np.ndarray], transient: bool = False):
        n = parents.shape[0]
        nl = num_leaves
        small, big = children
        off = np.zeros(n, dtype=np.int64)
        off[big] = sizes[small]  # the larger child is placed after the smaller one
        start = hg.propagate_sequential_and_accumulate(tree, off, hg.Accumulators.sum)
        self.rank = start[:nl]
        m = nl - 1
        self.m = m
        idt = np.int32 if n < 2**31 else np.int64
        if m == 0:
            self.table = np.zeros((1, 1), dtype=idt)
            return
        levels = max(1, int(m).bit_length())
        nbytes = levels * m * np.dtype(idt).itemsize
        # a transient table (used once, inside build_hierarchy) lives in a reused buffer
        buf = _workspace(nbytes)[:nbytes] if transient else np.empty(nbytes, dtype=np.uint8)
        table = buf.view(idt).reshape(levels, m)
        table[0, start[nl:] + sizes[small] - 1] = np.arange(nl, n, dtype=idt)
        self.table = _sparse_levels(table)

    @classmethod
    def from_split_nodes(cls, rank: np.ndarray, split: np.ndarray) -> "LeafLCA":
        """The query structure of leaves ranked ``rank`` in a depth-first order whose
        consecutive leaves have the split nodes ``split`` (N - 1,): e.g. per-graph orders
        concatenated (``hiseg.segmentation.hostpool``). O(N log N)."""
        self = cls.__new__(cls)
        self.rank, self.m = rank, int(split.shape[0])
        if self.m == 0:
            self.table = np.zeros((1, 1), dtype=split.dtype)
            return self
        table = np.zeros((max(1, self.m.bit_length()), self.m), dtype=split.dtype)  # deterministic tails
        table[0] = split
        self.table = _sparse_levels(table)
        return self

    def __call__(self, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        ra = self.rank[a]
        rb = self.rank[b]
        lo = np.minimum(ra, rb)
        hi = np.maximum(ra, rb)
        length = hi - lo
        same = length == 0
        length[same] = 1
        lo[same], hi[same] = 0, 1  # answered below; keeps the reads in the table (N = 2: one entry)
        k = np.frexp(length)[1] - 1
        flat = self.table.reshape(-1)
        base = k * self.m
        res = np.maximum(flat[base + lo], flat[base + hi - (1 << k)]).astype(np.int64)
        if same.any():
            res[same] = a[same]
        return res


def _sparse_levels(table: np.ndarray) -> np.ndarray:
    """Fill levels 1.. of a range-maximum sparse table from its level 0, in place."""
    m = table.shape[1]
    for k in range(1, table.shape[0]):
        h = 1 << (k - 1)
        np.maximum(table[k - 1, : m - h], table[k - 1, h:], out=table[k, : m - h])
    return table


# ----------------------------------------------------------------------------- hierarchy
class Hierarchy:
    """The single-linkage hierarchy of an edge-weighted graph, with what losses need.

    Built by :func:`build_hierarchy` (no gradient); differentiable quantities are
    obtained by combining its integer index arrays with the weight tensor.

    Attributes
    ----------
    parents : int64 array (num_nodes,)
        higra's parent array: leaves ``0..N-1`` are the graph vertices, internal node
        ``N + i`` is created by the ``i``-th MST edge in Kruskal order; the root is last.
    mst_edge_map : int64 array (N - 1,)
        Building edge of each internal node. In a batched hierarchy the ``B - 1``
        top nodes join different graphs and map to *virtual* edges ``>= E``.
    pass_edge : int64 array (E,)
        ``mst_edge_map[lca(x, y) - N]`` for every edge ``(x, y)``.
    edge_lca : int64 array (E,)
        The lca node of every edge.
    num_leaves, num_edges : int
    batch : BatchedGraph or None
    """

    def __init__(self, graph: EdgeList, parents, mst_edge_map, pass_edge, edge_lca, batch=None):
        self.graph = graph
        self.parents = parents
        self.mst_edge_map = mst_edge_map
        self.pass_edge = pass_edge
        self.edge_lca = edge_lca
        self.num_leaves = graph.num_vertices
        self.num_edges = graph.num_edges
        self.batch = batch
        self._tree = None
        self._sizes = None
        self._lca = None
        self._index_cache = {}

    # -- structure -----------------------------------------------------------------
    @property
    def num_nodes(self) -> int:
        return int(self.parents.shape[0])

    @property
    def tree(self) -> "hg.Tree":
        """The higra ``Tree`` (built on first use, O(num_nodes))."""
        if self._tree is None:
            self._tree = hg.Tree(self.parents)
        return self._tree

    @property
    def sizes(self) -> np.ndarray:
        """Number of leaves below every node (int64, leaves have size 1). O(num_nodes)."""
        if self._sizes is None:
            self._sizes = hg.accumulate_sequential(
                self.tree, np.ones(self.num_leaves, dtype=np.int64), hg.Accumulators.sum
            )
        return self._sizes

    def children(self) -> tuple[np.ndarray, np.ndarray]:
        """The two children (smaller id, larger id) of every internal node.

        ``ufunc.at`` applies repeated indices one after the other (a plain fancy-index
        assignment leaves which write wins unspecified). O(N)."""
        if "children" not in self._index_cache:
            nl = self.num_leaves
            child = np.arange(self.num_nodes - 1)
            pc = self.parents[:-1] - nl
            small = np.full(self.num_nodes - nl, np.iinfo(np.int64).max, dtype=np.int64)
            np.minimum.at(small, pc, child)
            big = np.full(self.num_nodes - nl, -1, dtype=np.int64)
            np.maximum.at(big, pc, child)
            self._index_cache["children"] = (small, big)
        return self._index_cache["children"]

    def min_child_size(self) -> np.ndarray:
        """gamma(n): the size of the smallest child of every internal node (N-1,)."""
        small, big = self.children()
        s = self.sizes
        return np.minimum(s[small], s[big])

    def lca(self, a, b) -> np.ndarray:
        """Lowest common ancestors (node ids) of the vertex pairs ``(a[i], b[i])``.

        First call O(N log N) preprocessing, then O(1) per pair.
        Raises ValueError for out-of-range vertices or mismatched lengths.
        """
        a = np.asarray(a.detach().cpu().numpy() if hasattr(a, "detach") else a, dtype=np.int64).ravel()
        b = np.asarray(b.detach().cpu().numpy() if hasattr(b, "detach") else b, dtype=np.int64).ravel()
        if a.shape != b.shape:
            raise ValueError(f"lca: vertex arrays differ in length ({a.size} vs {b.size})")
        if a.size and (min(a.min(), b.min()) < 0 or max(a.max(), b.max()) >= self.num_leaves):
            raise ValueError(f"lca: vertex id out of range [0, {self.num_leaves})")
        return self.leaf_lcas()(a, b)

    def leaf_lcas(self) -> "LeafLCA":
        """The leaves' lca query structure (:class:`LeafLCA`: depth-first ranks, sparse table):
        built on first use (O(N log N)) unless given by :meth:`set_leaf_lcas`."""
        if self._lca is None:
            self._lca = LeafLCA(self.tree, self.parents, self.num_leaves, self.sizes, self.children())
        return self._lca

    def set_leaf_lcas(self, lcas: "LeafLCA") -> None:
        """Use ``lcas`` as the leaves' lca structure (one built elsewhere from the same tree, e.g.
        per-graph depth-first orders chained: ``hiseg.segmentation.hostpool``)."""
        self._lca = lcas

    # -- differentiable views ----------------------------------------------------------
    def _index(self, name, array, device):
        key = (name, str(device))
        t = self._index_cache.get(key)
        if t is None:
            t = torch.from_numpy(np.ascontiguousarray(array)).to(device)
            self._index_cache[key] = t
        return t

    def view_arrays(self) -> dict:
        """The index arrays that the differentiable views (:meth:`ultrametric`,
        :meth:`node_altitudes`) gather with, by the names their device copies are held under
        (what :func:`hiseg.core.device.upload_indices` sends in its one copy)."""
        return {"mst": self.mst_edge_map, "pass_edge": self.pass_edge}

    def device_index(self, name: str, device) -> Optional[torch.Tensor]:
        """The copy of index array ``name`` held for ``device``, or None."""
        return self._index_cache.get((name, str(device)))

    def set_device_index(self, name: str, device, tensor: torch.Tensor) -> None:
        """Hold ``tensor`` as the copy of index array ``name`` for ``device`` (the views then find
        it instead of copying the array: :func:`hiseg.core.device.upload_indices`)."""
        self._index_cache[(name, str(device))] = tensor

    def ultrametric(self, weights: torch.Tensor) -> torch.Tensor:
        """``weights[pass_edge]``: the subdominant ultrametric on the graph edges (a numpy
        array for numpy weights, no torch)."""
        if not torch.is_tensor(weights):
            return np.asarray(weights)[self.pass_edge]
        return self.device_ultrametric(weights)

    def device_ultrametric(self, weights: torch.Tensor) -> torch.Tensor:
        """:meth:`ultrametric` of a tensor, on its device (the caller knows it is one)."""
        return weights[self._index("pass_edge", self.pass_edge, weights.device)]

    def _extended(self, weights: torch.Tensor) -> torch.Tensor:
        nvirt = int(self.mst_edge_map.max(initial=-1)) + 1 - self.num_edges
        if nvirt <= 0:
            return weights
        top = weights.detach().max() + 1 if weights.numel() else weights.new_ones(())
        return torch.cat([weights, top.expand(nvirt)])

    def node_altitudes(self, weights: torch.Tensor) -> torch.Tensor:
        """Altitudes of all nodes (leaves 0, internal = weight of the building edge).

        Differentiable w.r.t. ``weights``. Virtual top nodes of a batched hierarchy get
        ``max(weights) + 1`` (constant). Numpy weights: a numpy array (no torch).
        """
        if not torch.is_tensor(weights):
            w = np.asarray(weights)
            nvirt = int(self.mst_edge_map.max(initial=-1)) + 1 - self.num_edges
            if nvirt > 0:
                w = np.concatenate([w, np.full(nvirt, w.max() + 1 if w.size else 1.0, w.dtype)])
            return np.concatenate([np.zeros(self.num_leaves, w.dtype), w[self.mst_edge_map]])
        inner = self._extended(weights)[self._index("mst", self.mst_edge_map, weights.device)]
        return torch.cat([weights.new_zeros(self.num_leaves), inner])

    def distance(self, a, b, weights: torch.Tensor) -> torch.Tensor:
        """Ultrametric distance ``d(a_i, b_i)`` = altitude of their lca (0 when a_i == b_i)."""
        nodes = self.lca(a, b)
        alt = self.node_altitudes(weights)
        return alt[torch.from_numpy(nodes).to(weights.device)]

    def __repr__(self):
        return (f"Hierarchy(num_leaves={self.num_leaves}, num_edges={self.num_edges}, "
                f"batched={self.batch is not None})")


def _connect_batch(bg: BatchedGraph):
    """Virtual edges chaining the first vertex of consecutive graphs."""
    firsts = bg.vertex_ptr[:-1]
    return firsts[:-1], firsts[1:]


def build_hierarchy(graph: GraphLike, weights, *, check: bool = True) -> Hierarchy:
    """Single-linkage hierarchy (canonical BPT) and pass edges of a graph or batch.

    Parameters
    ----------
    graph : graph argument (see :mod:`hiseg.core.graph`) or :class:`~hiseg.core.graph.BatchedGraph`
    weights : 1-D float tensor or array, one value per edge (only read, no gradient)
    check : validate the graph and the weights (O(E)).

    Returns
    -------
    Hierarchy

    Cost: O(E log E) time (sort), O(E) for the tree, O(E) for pass edges of MST edges,
    and O(N log N) + O(1) per non-MST edge for the lcas. Single-threaded.

    Raises
    ------
    ValueError
        Disconnected graph (or batch member), NaN/inf weights, length mismatch, empty graph.
    TypeError
        Non-float weights, non-integer vertex ids.
    """
    return single_linkage(*checked_input(graph, weights, check))


def single_linkage(el: EdgeList, w: np.ndarray, batch: Optional[BatchedGraph] = None) -> Hierarchy:
    """:func:`build_hierarchy` of a checked edge list and host weights (``batch``: the
    :class:`BatchedGraph` ``el`` is the edge list of, or None); nothing is checked again."""
    E, N = el.num_edges, el.num_vertices
    s, t = el.sources, el.targets
    if batch is not None and batch.num_graphs > 1:
        vs, vt = _connect_batch(batch)
        top = (w.max() + 1) if w.size else 1.0
        w_all = np.concatenate([w, np.full(vs.size, top, dtype=w.dtype)])
        s_all = np.concatenate([s, vs])
        t_all = np.concatenate([t, vt])
    else:
        w_all, s_all, t_all = w, s, t
    if N == 1:
        parents = np.zeros(1, dtype=np.int64)
        mst_edge_map = np.zeros(0, dtype=np.int64)
    else:
        if s_all.size < N - 1:
            raise ValueError(disconnected_message(el, batch))
        order = canonical_edge_order(w_all)
        try:
            parents, mst_edge_map = _canonical_bpt(s_all, t_all, order, N)
        except RuntimeError as e:
            if "connected" in str(e):
                raise ValueError(disconnected_message(el, batch)) from None
            raise
        parents = np.asarray(parents, dtype=np.int64)
        mst_edge_map = np.asarray(mst_edge_map, dtype=np.int64)
    # pass edges: an MST edge is its own; the others need an lca
    edge_lca = np.empty(E, dtype=np.int64)
    node_of_edge = np.full(w_all.size, -1, dtype=np.int64)
    node_of_edge[mst_edge_map] = np.arange(N, N + mst_edge_map.size)
    edge_lca[:] = node_of_edge[:E]
    h = Hierarchy(el, parents, mst_edge_map, None, edge_lca, batch)
    q = np.flatnonzero(edge_lca < 0)
    if q.size:
        edge_lca[q] = LeafLCA(h.tree, parents, N, h.sizes, h.children(), transient=True)(s[q], t[q])
    h.pass_edge = mst_edge_map[edge_lca - N] if E else np.zeros(0, dtype=np.int64)
    return h


def _canonical_bpt(sources: np.ndarray, targets: np.ndarray, order: np.ndarray, n: int):
    """(parents, mst_edge_map) of the canonical binary partition tree of the edges taken in
    ``order``: higra's public ``bpt_canonical`` on a ``(sources, targets, n)`` tuple (no
    graph object is built). higra's private ``hg.cpp._bpt_canonical``, which it wraps, was
    measured 10-15 % faster on the tree alone (40 vs 45 ms at 3e5 edges, a few % of a fit
    iteration), not enough to pin higra below its next release for; see
    ``benchmarks/results/bpt_canonical.md``."""
    tree = hg.bpt_canonical((sources, targets, n), sorted_edge_indices=order, return_altitudes=False,
                            compute_mst=False)
    return tree.parents(), hg.CptBinaryHierarchy.get_mst_edge_map(tree)


def disconnected_message(el: EdgeList, batch: Optional[BatchedGraph]) -> str:
    from ._neighbors import components

    n = el.num_vertices
    ncomp, lab = components(el.sources, el.targets, n)  # el is checked: no second normalisation
    if batch is not None:
        gi = batch.vertex_graph_index()
        bad = sorted({int(gi[v]) for v in range(n) if lab[v] != lab[batch.vertex_ptr[gi[v]]]})
        return (f"graphs {bad[:10]} of the batch are not connected: the subdominant ultrametric "
                "is defined on connected graphs (connect them, e.g. with MST edges, or split them)")
    return (f"the graph is not connected ({ncomp} connected components): the subdominant "
            "ultrametric is defined on connected graphs (connect it, e.g. with MST edges, "
            "or process each component separately)")


# ----------------------------------------------------------------------------- the layer
def subdominant_ultrametric(graph: GraphLike, weights: torch.Tensor, *, return_hierarchy: bool = False,
                            check: bool = True):
    r"""Subdominant ultrametric :math:`\Phi(w)` of an edge-weighted graph, differentiable.

    Parameters
    ----------
    graph : higra ``UndirectedGraph``, ``(sources, targets, num_vertices)`` or a
        :class:`~hiseg.core.graph.BatchedGraph` (many graphs concatenated with offsets; the
        result equals the per-graph results concatenated, exactly).
    weights : torch.Tensor (E,) floating point, any device (numpy arrays are converted).
    return_hierarchy : also return the :class:`Hierarchy`.

    Returns
    -------
    u : torch.Tensor, same shape, dtype and device as ``weights``: ``u = weights[pass_edge]``.
        Its gradient is the 0/1 pass-edge Jacobian (scatter-add on ``weights``' device).
    hierarchy : Hierarchy (if requested)

    Cost: see :func:`build_hierarchy` (CPU) + one O(E) gather on the device; two
    transfers (weights to the CPU, the index to the device, cached per hierarchy).

    Raises
    ------
    ValueError / TypeError as :func:`build_hierarchy`.
    """
    if not torch.is_tensor(weights):
        weights = torch.as_tensor(np.asarray(weights))
    h = single_linkage(*checked_input(graph, weights, check, tensor=True))
    u = h.device_ultrametric(weights)
    return (u, h) if return_hierarchy else u


# ----------------------------------------------------------------------------- average linkage
class AverageLinkageHierarchy(Hierarchy):
    r"""The (length-weighted) average-linkage hierarchy of an edge-weighted graph.

    Same attributes as :class:`Hierarchy`, with these meanings:

    * ``parents``: higra's parent array of the average-linkage binary partition tree
      (internal nodes in merge order, altitudes non-decreasing);
    * ``edge_lca``: the lca node of every edge -- the merge that first joins its ends;
    * ``mst_edge_map``: a *representative* edge of every internal node (the edge of
      smallest index among those whose lca it is; virtual ids ``>= E`` for the top nodes
      of a batch), so that undoing the last merges gives a cut with exactly ``k``
      regions as for single linkage;
    * ``pass_edge``: ``mst_edge_map[edge_lca - N]`` (representative, *not* a gradient path);
    * ``lengths``: the edge lengths (float64, ``None`` for all ones).

    The altitude of internal node ``n`` is the length-weighted mean weight of the edges
    whose lca is ``n``, i.e. of all edges joining its two children:

    .. math:: \alpha(n) = \frac{\sum_{f:\,\mathrm{lca}(f) = n} \ell_f w_f}{\sum_{f:\,\mathrm{lca}(f) = n} \ell_f}

    so :meth:`node_altitudes` and :meth:`ultrametric` are differentiable in ``w`` with
    :math:`\partial u_e / \partial w_f = \ell_f / \sum_{g:\,\mathrm{lca}(g)=\mathrm{lca}(e)} \ell_g`
    when ``lca(f) = lca(e)``, 0 otherwise.  For a fixed hierarchy these are the closest
    (least-squares, length-weighted) altitudes to ``w`` (the paper's appendix remark).
    """

    def __init__(self, graph, parents, mst_edge_map, edge_lca, lengths, batch=None):
        pass_edge = mst_edge_map[edge_lca - graph.num_vertices] if edge_lca.size else np.zeros(0, np.int64)
        super().__init__(graph, parents, mst_edge_map, pass_edge, edge_lca, batch)
        self.lengths = lengths

    def node_altitudes(self, weights: torch.Tensor) -> torch.Tensor:
        """Altitudes of all nodes: leaves 0, internal nodes the length-weighted mean of the
        edges joining their children (differentiable); virtual top nodes of a batch get
        ``max(weights) + 1`` (constant). Numpy weights: a float64 numpy array (no torch;
        the same sums, :func:`numpy.bincount` for ``index_add``)."""
        return self._device_altitudes(weights) if torch.is_tensor(weights) else self._host_altitudes(weights)

    def view_arrays(self) -> dict:
        """:meth:`Hierarchy.view_arrays` with those of the average-linkage altitudes."""
        arrays = super().view_arrays()
        arrays["edge_lca"] = self.edge_lca
        arrays["edge_lca_int"] = self.edge_lca - self.num_leaves
        if self.lengths is not None:
            arrays["lengths"] = self.lengths
        if self.batch is not None and self.batch.num_graphs > 1:
            arrays["virtual_nodes"] = self.mst_edge_map >= self.num_edges
        return arrays

    def _host_altitudes(self, weights) -> np.ndarray:
        """:meth:`node_altitudes` of numpy weights, in numpy."""
        n_int = self.num_nodes - self.num_leaves
        w = np.asarray(weights, np.float64)
        ln = np.ones(self.num_edges) if self.lengths is None else self.lengths
        lca = self.edge_lca - self.num_leaves
        num = np.bincount(lca, weights=ln * w, minlength=n_int)
        den = np.bincount(lca, weights=ln, minlength=n_int)
        if self.batch is not None and self.batch.num_graphs > 1:
            virt = self.mst_edge_map >= self.num_edges
            den[virt], num[virt] = 1.0, (w.max() + 1 if w.size else 1.0)
        return np.concatenate([np.zeros(self.num_leaves), num / den])

    def _device_altitudes(self, weights: torch.Tensor) -> torch.Tensor:
        """:meth:`node_altitudes` of a tensor, on its device, differentiable."""
        n_int = self.num_nodes - self.num_leaves
        lca = self._index("edge_lca_int", self.edge_lca - self.num_leaves, weights.device)
        ln = (weights.new_ones(self.num_edges) if self.lengths is None
              else self._index("lengths", self.lengths, weights.device).to(weights.dtype))
        num = weights.new_zeros(n_int).index_add(0, lca, ln * weights)
        den = weights.new_zeros(n_int).index_add(0, lca, ln)
        if self.batch is not None and self.batch.num_graphs > 1:  # virtual top nodes (known on the CPU)
            virt = self._index("virtual_nodes", self.mst_edge_map >= self.num_edges, weights.device)
            top = weights.detach().max() + 1 if weights.numel() else weights.new_ones(())
            den = torch.where(virt, torch.ones_like(den), den)
            num = torch.where(virt, top.expand_as(num), num)
        return torch.cat([weights.new_zeros(self.num_leaves), num / den])

    def ultrametric(self, weights: torch.Tensor) -> torch.Tensor:
        """The average-linkage ultrametric on the graph edges: ``altitude(lca(e))`` (a numpy
        array for numpy weights, no torch)."""
        if not torch.is_tensor(weights):
            return self._host_altitudes(weights)[self.edge_lca]
        return self.device_ultrametric(weights)

    def device_ultrametric(self, weights: torch.Tensor) -> torch.Tensor:
        return self._device_altitudes(weights)[self._index("edge_lca", self.edge_lca, weights.device)]


def check_lengths(lengths, num_edges: int):
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


def build_average_linkage_hierarchy(graph: GraphLike, weights, lengths=None, *,
                                    check: bool = True) -> AverageLinkageHierarchy:
    """Length-weighted average-linkage hierarchy of a graph or a batch (no gradient).

    Parameters
    ----------
    graph : graph argument or :class:`~hiseg.core.graph.BatchedGraph`
    weights : 1-D float tensor or array (E,): dissimilarities (only read).
    lengths : 1-D positive array (E,), optional: edge lengths (frontier lengths of a
        RAG, multiplicities); all ones when omitted.

    Returns
    -------
    AverageLinkageHierarchy

    Cost: higra's average linkage, O(E log E) time, plus O(N log N + E) for the lcas of
    all edges. In a batch the graphs are chained by virtual edges above every weight, so
    the result equals the per-graph hierarchies.

    Raises
    ------
    ValueError / TypeError
        As :func:`build_hierarchy`; lengths of the wrong shape, not finite, or <= 0.
    """
    return average_linkage(*checked_average_input(graph, weights, lengths, check))


def checked_average_input(graph, weights, lengths, check: bool, tensor: Optional[bool] = None):
    """:func:`checked_input` with the lengths checked too: ``(edge list, host weights, float64
    lengths or None, batch or None)``, what :func:`average_linkage` takes."""
    el, w, batch = checked_input(graph, weights, check, tensor)
    return el, w, check_lengths(lengths, el.num_edges), batch


def average_linkage(el: EdgeList, w: np.ndarray, ln: Optional[np.ndarray] = None,
                     batch: Optional[BatchedGraph] = None) -> "AverageLinkageHierarchy":
    """:func:`build_average_linkage_hierarchy` of a checked edge list, host weights and
    checked lengths (float64 or None); nothing is checked again."""
    E, N = el.num_edges, el.num_vertices
    w = np.asarray(w, dtype=np.float64)
    s, t = el.sources, el.targets
    if batch is not None and batch.num_graphs > 1:
        vs, vt = _connect_batch(batch)
        top = (w.max() + 1) if w.size else 1.0
        w_all = np.concatenate([w, np.full(vs.size, top)])
        s_all, t_all = np.concatenate([s, vs]), np.concatenate([t, vt])
        ln_all = np.concatenate([ln if ln is not None else np.ones(E), np.ones(vs.size)])
    else:
        w_all, s_all, t_all = w, s, t
        ln_all = ln if ln is not None else np.ones(E)
    if N == 1:
        return AverageLinkageHierarchy(el, np.zeros(1, np.int64), np.zeros(0, np.int64),
                                       np.zeros(0, np.int64), ln, batch)
    if s_all.size < N - 1:
        raise ValueError(disconnected_message(el, batch))
    g = hg.UndirectedGraph(N)
    g.add_edges(s_all, t_all)
    try:
        tree, _ = hg.binary_partition_tree_average_linkage(g, w_all, ln_all)
    except RuntimeError as e:  # pragma: no cover - higra's message for a disconnected graph
        raise ValueError(disconnected_message(el, batch)) from e
    parents = np.asarray(tree.parents(), dtype=np.int64)
    if parents.size != 2 * N - 1:
        raise ValueError(disconnected_message(el, batch))
    # a bare Hierarchy lends its size / children / lca machinery for the lcas of all edges
    h0 = Hierarchy(el, parents, np.zeros(N - 1, np.int64), None, None, batch)
    h0._tree = tree
    lca_all = LeafLCA(h0.tree, parents, N, h0.sizes, h0.children(), transient=True)(s_all, t_all)
    nodes, first = np.unique(lca_all, return_index=True)  # first edge of every internal node
    if nodes.size != N - 1:  # pragma: no cover - every merge joins adjacent clusters
        raise RuntimeError("average linkage produced a node with no edge between its children")
    mst_edge_map = np.empty(N - 1, dtype=np.int64)
    mst_edge_map[nodes - N] = first
    h = AverageLinkageHierarchy(el, parents, mst_edge_map, lca_all[:E].astype(np.int64), ln, batch)
    h._tree = h0._tree
    h._sizes = h0._sizes
    return h


def average_linkage_ultrametric(graph: GraphLike, weights: torch.Tensor, lengths=None, *,
                                return_hierarchy: bool = False, check: bool = True):
    r"""Average-linkage ultrametric of an edge-weighted graph, differentiable.

    The tree is length-weighted average linkage (UPGMA on a complete graph), built on
    the CPU with higra; an edge's value is the length-weighted mean weight of all the
    edges joining the two clusters that its ends first share, computed on ``weights``'
    device so that the gradient is that averaging (see :class:`AverageLinkageHierarchy`).

    Parameters
    ----------
    graph : higra ``UndirectedGraph``, ``(sources, targets, num_vertices)`` or a
        :class:`~hiseg.core.graph.BatchedGraph` (result equal to the per-graph results).
    weights : torch.Tensor (E,) floating point, any device.
    lengths : (E,) positive array or tensor, optional (frontier lengths of a RAG).
    return_hierarchy : also return the :class:`AverageLinkageHierarchy`.

    Returns
    -------
    u : torch.Tensor, same shape, dtype and device as ``weights``.
    hierarchy : AverageLinkageHierarchy (if requested)

    Raises
    ------
    ValueError / TypeError as :func:`build_average_linkage_hierarchy`.
    """
    if not torch.is_tensor(weights):
        weights = torch.as_tensor(np.asarray(weights))
    h = average_linkage(*checked_average_input(graph, weights, lengths, check, tensor=True))
    u = h.device_ultrametric(weights)
    return (u, h) if return_hierarchy else u


# ----------------------------------------------------------------------------- module forms
def _module_classes() -> dict:
    """The ``torch.nn.Module`` forms, defined at their first use (module ``__getattr__``):
    importing this module costs no torch."""
    class SubdominantUltrametric(torch.nn.Module):
        """Module form of :func:`subdominant_ultrametric`: ``forward(graph, weights)``.

        The last hierarchy is kept in ``self.hierarchy`` for losses that need it.
        """

        def __init__(self, check: bool = True):
            super().__init__()
            self.check = check
            self.hierarchy: Optional[Hierarchy] = None

        def forward(self, graph: GraphLike, weights: torch.Tensor) -> torch.Tensor:
            u, self.hierarchy = subdominant_ultrametric(graph, weights, return_hierarchy=True, check=self.check)
            return u

    class AverageLinkageUltrametric(torch.nn.Module):
        """Module form of :func:`average_linkage_ultrametric`: ``forward(graph, weights, lengths=None)``."""

        def __init__(self, check: bool = True):
            super().__init__()
            self.check = check
            self.hierarchy: Optional[AverageLinkageHierarchy] = None

        def forward(self, graph: GraphLike, weights: torch.Tensor, lengths=None) -> torch.Tensor:
            u, self.hierarchy = average_linkage_ultrametric(graph, weights, lengths, return_hierarchy=True,
                                                            check=self.check)
            return u

    classes = {"SubdominantUltrametric": SubdominantUltrametric, "AverageLinkageUltrametric": AverageLinkageUltrametric}
    for c in classes.values():
        c.__module__, c.__qualname__ = __name__, c.__name__
    return classes


def __getattr__(name):
    if name in ("SubdominantUltrametric", "AverageLinkageUltrametric"):
        globals().update(_module_classes())
        return globals()[name]
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
