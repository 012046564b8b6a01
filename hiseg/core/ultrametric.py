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
* an edge of the MST is its own pass edge, so only the other edges need an lca
  (:class:`~hiseg.core.lca.LeafLCA`, a range-maximum query).

:class:`Hierarchy` is also the structure of the average-linkage layer
(:mod:`hiseg.core.average_linkage`); the graph and the weights are checked by
:func:`hiseg.core.graph.checked_input`; the device copies of a training step are
:mod:`hiseg.core.device`'s. The module is pure computation: no I/O, no Lightning, no image code.
"""
from __future__ import annotations

from typing import Optional, Union

import numpy as np

from ._lazy import import_higra, lazy_torch
from .graph import BatchedGraph, EdgeList, checked_input
from .lca import LeafLCA

hg = import_higra()  # higra, its plotting imports deferred (hiseg.core._lazy.import_higra)

__all__ = [
    "Hierarchy",
    "build_hierarchy",
    "subdominant_ultrametric",
    "SubdominantUltrametric",
    "single_linkage",
    "canonical_edge_order",
    "disconnected_message",
]

GraphLike = Union[EdgeList, BatchedGraph, tuple, "hg.UndirectedGraph"]

#: imported at its first use: building a hierarchy from numpy weights needs no torch
#: (:mod:`hiseg.core._lazy`; the onnxruntime path, :mod:`hiseg.export.runtime`)
torch = lazy_torch()


# ----------------------------------------------------------------------------- edge order
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
        vs, vt = batch.chain_edges()
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
    graph object is built). higra's private ``hg.cpp._bpt_canonical``, which it wraps, is a
    little faster on the tree alone, not enough to pin higra below its next release for
    (``benchmarks/results/bpt_canonical.md``)."""
    tree = hg.bpt_canonical((sources, targets, n), sorted_edge_indices=order, return_altitudes=False,
                            compute_mst=False)
    return tree.parents(), hg.CptBinaryHierarchy.get_mst_edge_map(tree)


def disconnected_message(el: EdgeList, batch: Optional[BatchedGraph]) -> str:
    """What a hierarchy builder says of a disconnected graph (or batch member): which, and what to do."""
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


# ----------------------------------------------------------------------------- module form
def _module_class():
    """The ``torch.nn.Module`` form, defined at its first use (module ``__getattr__``):
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

    SubdominantUltrametric.__module__ = __name__
    return SubdominantUltrametric


def __getattr__(name):
    if name == "SubdominantUltrametric":
        globals()[name] = _module_class()
        return globals()[name]
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
