r"""Measures of a whole hierarchy: dendrogram purity and Dasgupta's cost.

Both take any hierarchy hiseg meets: a higra ``Tree``, a :class:`hiseg.ultrametric.Hierarchy`
(:func:`hiseg.build_hierarchy`), a fitted :class:`hiseg.UltrametricClustering`, a scipy
linkage matrix (:func:`scipy.cluster.hierarchy.linkage`) or a parent array (children
numbered before their parents, leaves first, the root last: higra's convention). The leaves
are the samples, in order.

* :func:`dendrogram_purity` (Heller & Ghahramani, ICML 2005): the mean, over all pairs of
  distinct samples of the same class, of the purity of their lowest common ancestor
  (the share of its leaves in that class). 1 for a hierarchy in which every class is a
  node. Computed exactly in O(N K) time (N nodes, K classes) and O(N) extra memory, or on a
  seeded random sample of pairs (``n_pairs``), the convention of the large-scale literature.
* :func:`dasgupta_cost` (Dasgupta, STOC 2016): :math:`\sum_{\{x,y\}\in E} s_{xy}\,
  |\mathrm{leaves}(\mathrm{lca}(x, y))|` on a graph with *similarity* weights ``s`` (lower
  is better); ``normalize=True`` divides by :math:`N \sum s`, the cost of the flat tree
  (every pair joined at the root), giving a number in (0, 1].

The implementation lives in :mod:`hiseg.clustering` (below this package in hiseg's layers,
so that :meth:`hiseg.UltrametricClustering.score_hierarchy` and its label-free choice of
fit can use it); this module is its home in :mod:`hiseg.metrics`.
"""
from __future__ import annotations

from ..clustering import as_tree, dasgupta_cost, dendrogram_purity

__all__ = ["as_tree", "dendrogram_purity", "dasgupta_cost"]
