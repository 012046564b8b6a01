r"""The differentiable (length-weighted) average-linkage layer.

The tree is higra's average linkage, built on the CPU without gradient; the altitude of a
node is the length-weighted mean weight of the edges joining its two children, computed on
the weights' device, so the gradient of the ultrametric is that averaging
(:class:`AverageLinkageHierarchy`). The hierarchy shares :class:`~hiseg.core.ultrametric.Hierarchy`'s
structure (parents, sizes, lcas, cuts) with the single-linkage layer.
"""
from __future__ import annotations

from typing import Optional

import numpy as np

from ._lazy import import_higra, lazy_torch
from .graph import BatchedGraph, EdgeList, check_lengths, checked_input
from .lca import LeafLCA
from .ultrametric import GraphLike, Hierarchy, disconnected_message

hg = import_higra()  # higra, its plotting imports deferred (hiseg.core._lazy.import_higra)

__all__ = ["AverageLinkageHierarchy", "build_average_linkage_hierarchy", "average_linkage_ultrametric",
           "AverageLinkageUltrametric", "average_linkage", "checked_average_input"]

#: imported at its first use: building a hierarchy from numpy weights needs no torch
torch = lazy_torch()


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
        vs, vt = batch.chain_edges()
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



def _module_class():
    """The ``torch.nn.Module`` form, defined at its first use (module ``__getattr__``):
    importing this module costs no torch."""
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

    AverageLinkageUltrametric.__module__ = __name__
    return AverageLinkageUltrametric


def __getattr__(name):
    if name == "AverageLinkageUltrametric":
        globals()[name] = _module_class()
        return globals()[name]
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
