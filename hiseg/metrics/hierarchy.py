r"""Measures of a whole hierarchy: dendrogram purity and Dasgupta's cost.

Both take any hierarchy hiseg meets: a higra ``Tree``, a :class:`hiseg.core.ultrametric.Hierarchy`
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

Core-level code (numpy, higra and :mod:`hiseg.core.graph` only): the one module of
:mod:`hiseg.metrics` that ranks below :mod:`hiseg.clustering` in hiseg's layers
(``tests/package/test_layers.py``), because the estimator's ``score_hierarchy`` and its label-free
choice of fit (:mod:`hiseg.clustering.auto`) measure hierarchies with it.
"""
from __future__ import annotations

import numbers

import numpy as np

__all__ = ["as_tree", "dendrogram_purity", "dasgupta_cost", "graph_similarities"]


def _check_parents(parents) -> np.ndarray:
    p = np.asarray(parents)
    if p.ndim != 1 or p.size == 0:
        raise ValueError(f"a parent array must be a non-empty 1-D array, got shape {p.shape}")
    if not np.issubdtype(p.dtype, np.integer):
        raise TypeError(f"a parent array must hold integers, got dtype {p.dtype}")
    p = p.astype(np.int64)
    m = p.size
    if p[-1] != m - 1:
        raise ValueError("not a tree: the last node must be the root (its own parent), "
                         f"got parent {p[-1]} for node {m - 1}")
    if np.any(p[:-1] <= np.arange(m - 1)) or np.any(p >= m):
        raise ValueError("not a tree: every node but the root must have a parent with a larger id "
                         "(children numbered before their parents; a cycle or a second root otherwise)")
    n_children = np.bincount(p[:-1], minlength=m)
    leaves = np.flatnonzero(n_children == 0)
    if np.any(leaves != np.arange(leaves.size)):
        raise ValueError("not a tree in leaves-first order: nodes without children must come first")
    return p


def _linkage_parents(Z) -> np.ndarray:
    from scipy.cluster.hierarchy import is_valid_linkage

    Z = np.asarray(Z, dtype=np.float64)
    try:
        is_valid_linkage(Z, throw=True, name="linkage matrix")
    except (ValueError, TypeError) as e:
        raise ValueError(f"not a valid scipy linkage matrix: {e}") from e
    n = Z.shape[0] + 1
    parents = np.empty(2 * n - 1, dtype=np.int64)
    parents[Z[:, 0].astype(np.int64)] = np.arange(n, 2 * n - 1)
    parents[Z[:, 1].astype(np.int64)] = np.arange(n, 2 * n - 1)
    parents[-1] = 2 * n - 2
    return parents


def as_tree(hierarchy):
    """The higra ``Tree`` of a hierarchy given in any of the forms of this module.

    Raises
    ------
    ValueError
        A linkage matrix scipy rejects, or a parent array that is not a tree in
        children-before-parents, leaves-first order.
    TypeError
        Anything else.
    """
    import higra as hg

    if isinstance(hierarchy, hg.Tree):
        return hierarchy
    if hasattr(hierarchy, "parents_") and not callable(hierarchy.parents_):  # a fitted estimator
        return hg.Tree(_check_parents(hierarchy.parents_))
    if hasattr(hierarchy, "parents") and hasattr(hierarchy, "mst_edge_map"):  # hiseg Hierarchy
        if getattr(hierarchy, "batch", None) is not None:
            raise ValueError("a batched hierarchy joins several graphs; measure each graph's hierarchy")
        return hg.Tree(_check_parents(hierarchy.parents))
    if hasattr(hierarchy, "detach"):
        hierarchy = hierarchy.detach().cpu().numpy()
    try:
        a = np.asarray(hierarchy)
    except Exception as e:  # pragma: no cover - exotic objects
        raise TypeError(f"not a hierarchy: {type(hierarchy).__name__}") from e
    if a.dtype == object:
        raise TypeError(f"not a hierarchy: {type(hierarchy).__name__}")
    if a.ndim == 2:
        return hg.Tree(_linkage_parents(a))
    if a.ndim == 1:
        return hg.Tree(_check_parents(a))
    raise TypeError("a hierarchy is a higra Tree, a hiseg Hierarchy, a fitted UltrametricClustering, "
                    f"a scipy linkage matrix or a parent array; got {type(hierarchy).__name__} "
                    f"of shape {a.shape}")


def _class_codes(labels, n_leaves) -> tuple[np.ndarray, int]:
    """Class labels -> codes 0..K-1 (any hashable labels; ``None`` / NaN refused)."""
    y = np.asarray(labels)
    if y.ndim != 1:
        raise ValueError(f"labels must be a 1-D array, got shape {y.shape}")
    if y.shape[0] != n_leaves:
        raise ValueError(f"the hierarchy has {n_leaves} leaves but labels has {y.shape[0]} entries "
                         "(one label per sample, in leaf order)")
    if y.dtype.kind == "f" and not np.all(np.isfinite(y)):
        raise ValueError("labels contain NaN or infinite values; purity needs a class for every sample "
                         "(measure the labelled samples' subtree instead)")
    if y.dtype == object and any(v is None or type(v).__name__ in ("NAType", "NaTType")
                                 or (isinstance(v, float) and v != v) for v in y):
        raise ValueError("labels contain None, NaN or NA; purity needs a class for every sample")
    _, codes = np.unique(y if y.dtype != object else y.astype(str), return_inverse=True)
    codes = codes.ravel().astype(np.int64)
    return codes, int(codes.max()) + 1 if codes.size else 0


def dendrogram_purity(hierarchy, labels, *, n_pairs: int | None = None, random_state=0,
                      chunk_classes: int = 64) -> float:
    r"""Dendrogram purity (Heller & Ghahramani 2005) of a hierarchy for class ``labels``.

    .. math::
        \mathrm{DP}(T) = \frac{1}{|P|} \sum_{\{x,y\} \in P}
            \frac{|\mathrm{leaves}(\mathrm{lca}(x,y)) \cap C(x)|}{|\mathrm{leaves}(\mathrm{lca}(x,y))|}

    with :math:`P` the pairs of distinct samples of the same class :math:`C(x) = C(y)`.

    Exact (``n_pairs=None``): for every node ``v`` and class ``c`` the number of pairs of
    class ``c`` whose lca is ``v`` is :math:`\binom{n_c(v)}{2} - \sum_{u \in
    \mathrm{children}(v)} \binom{n_c(u)}{2}`; O(N K) time, the class counts accumulated
    ``chunk_classes`` classes at a time (memory O(N min(K, chunk_classes))).

    Sampled (``n_pairs=m``): the mean over ``m`` same-class pairs drawn uniformly with
    replacement from :math:`P` (a class with probability proportional to its pair count,
    then two distinct samples of it), seeded by ``random_state``; its standard error is
    at most :math:`0.5/\sqrt{m}`. The large-scale literature reports this estimate.

    Parameters
    ----------
    hierarchy : higra Tree, hiseg Hierarchy, fitted UltrametricClustering, scipy linkage
        matrix or parent array (see :func:`as_tree`); its leaves are the samples.
    labels : array (n_leaves,)
        Class of every sample (any values; NaN / None refused).
    n_pairs : int or None
        None: exact; otherwise the number of sampled pairs.
    random_state : int or numpy Generator
        Seed of the pair sample.

    Returns
    -------
    float in (0, 1] (a hierarchy in which every class is a node scores 1).

    Raises
    ------
    ValueError
        Labels of the wrong length or with NaN, no class with two samples, a hierarchy
        that is not a tree, ``n_pairs`` < 1.
    """
    import higra as hg

    tree = as_tree(hierarchy)
    codes, k = _class_codes(labels, tree.num_leaves())
    class_sizes = np.bincount(codes, minlength=k).astype(np.float64)
    class_pairs = class_sizes * (class_sizes - 1) / 2
    if class_pairs.sum() == 0:
        raise ValueError("no class has two samples: dendrogram purity measures same-class pairs")
    area = hg.attribute_area(tree).astype(np.float64)
    if n_pairs is None:
        return _exact_purity(tree, codes, k, area, chunk_classes) / class_pairs.sum()
    if isinstance(n_pairs, bool) or not isinstance(n_pairs, numbers.Integral) or n_pairs < 1:
        raise ValueError(f"n_pairs must be a positive integer or None, got {n_pairs!r}")
    return _sampled_purity(tree, codes, class_sizes, class_pairs, area, int(n_pairs), random_state)


def _exact_purity(tree, codes, k, area, chunk_classes) -> float:
    """Sum over same-class pairs of their lca's purity, exactly: per node and class, the
    pairs whose lca is the node (the pairs under it less those under its children)."""
    import higra as hg

    parents = tree.parents()
    acc = 0.0
    for c0 in range(0, k, chunk_classes):
        cs = np.arange(c0, min(k, c0 + chunk_classes))
        leaf = (codes[:, None] == cs[None, :]).astype(np.float64)
        counts = hg.accumulate_sequential(tree, leaf, hg.Accumulators.sum)  # (N, chunk)
        pairs = counts * (counts - 1) / 2
        below = np.zeros_like(pairs)
        np.add.at(below, parents[:-1], pairs[:-1])  # pairs already joined in a child
        at_node = pairs - below  # pairs whose lca is the node (0 on the leaves)
        acc += float(np.sum(at_node * counts / area[:, None]))
    return acc


def _sampled_purity(tree, codes, class_sizes, class_pairs, area, n_pairs: int, random_state) -> float:
    """Mean lca purity of ``n_pairs`` same-class pairs drawn uniformly with replacement (a
    class with probability proportional to its pair count, then two distinct samples)."""
    import higra as hg

    rng = np.random.default_rng(random_state)
    cls = rng.choice(class_sizes.size, size=n_pairs, p=class_pairs / class_pairs.sum())
    order = np.argsort(codes, kind="stable")
    start = np.concatenate([[0], np.cumsum(class_sizes).astype(np.int64)])
    sz = class_sizes[cls].astype(np.int64)
    i = rng.integers(0, sz)
    j = rng.integers(0, sz - 1)
    j = j + (j >= i)  # a second, distinct sample of the class
    a, b = order[start[cls] + i], order[start[cls] + j]
    lca = tree.lowest_common_ancestor(a, b)
    num = np.empty(lca.size)
    for c in np.unique(cls):  # the count of class c under each sampled lca
        sel = cls == c
        counts = hg.accumulate_sequential(tree, (codes == c).astype(np.float64), hg.Accumulators.sum)
        num[sel] = counts[lca[sel]]
    return float(np.mean(num / area[lca]))


def graph_similarities(graph, similarities, n_leaves: int, measure: str):
    """(the :class:`hiseg.core.graph.EdgeList` of ``graph``, its ``similarities`` as float64),
    checked for a measure of a hierarchy of ``n_leaves`` leaves named ``measure``: ValueError
    for a vertex count that is not the leaf count, or similarities of the wrong length,
    negative or not finite. O(E)."""
    from ..core.graph import as_edge_list

    g = as_edge_list(graph)
    if g.num_vertices != n_leaves:
        raise ValueError(f"the graph has {g.num_vertices} vertices but the hierarchy has {n_leaves} leaves")
    s = np.asarray(similarities, dtype=np.float64)
    if s.shape != (g.num_edges,):
        raise ValueError(f"similarities must have one value per edge ({g.num_edges}), got shape {s.shape}")
    if not np.all(np.isfinite(s)) or np.any(s < 0):
        raise ValueError(f"similarities must be finite and nonnegative ({measure} takes similarities, "
                         "not distances)")
    return g, s


def dasgupta_cost(hierarchy, graph, similarities, *, normalize: bool = False) -> float:
    r"""Dasgupta's cost (Dasgupta 2016) of a hierarchy on a graph with similarity weights.

    .. math::
        \mathrm{cost}(T) = \sum_{\{x, y\} \in E} s_{xy}\, |\mathrm{leaves}(\mathrm{lca}_T(x, y))|

    Lower is better: similar samples should be joined low in the tree. O(N + |E|) after
    higra's lca preprocessing.

    Parameters
    ----------
    hierarchy : see :func:`as_tree`; its leaves are the graph's vertices.
    graph : higra UndirectedGraph, (sources, targets, num_vertices) or
        :class:`hiseg.core.graph.EdgeList`.
    similarities : array (n_edges,)
        Nonnegative finite similarity of each edge (for distances, pass e.g.
        ``np.exp(-d**2 / sigma**2)``; higra's ``dasgupta_cost`` also has a
        ``1 / dissimilarity`` mode).
    normalize : bool
        Divide by :math:`N \sum_E s`, the cost of the flat tree: a number in (0, 1].

    Raises
    ------
    ValueError
        A graph whose vertex count is not the hierarchy's leaf count, similarities of the
        wrong length, negative or not finite, a hierarchy that is not a tree.
    """
    import higra as hg

    tree = as_tree(hierarchy)
    g, s = graph_similarities(graph, similarities, tree.num_leaves(), "Dasgupta's cost")
    n = tree.num_leaves()
    area = hg.attribute_area(tree).astype(np.float64)
    lca = tree.lowest_common_ancestor(g.sources, g.targets)
    cost = float(np.sum(s * area[lca]))
    if normalize:
        total = n * s.sum()
        return cost / total if total > 0 else 0.0
    return cost
