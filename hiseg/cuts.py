"""Horizontal cuts of binary hierarchies into k clusters, plain or size-aware.

A binary hierarchy here is a parent array whose leaves are ``0..N-1`` and whose internal
node ``N + i`` is made by merge ``i``, merges numbered in non-decreasing altitude order,
root last: the canonical binary partition tree of :func:`hiseg.build_hierarchy`
(``higra.bpt_canonical``) and higra's average-linkage tree are such trees.

* :func:`kcut_merges`: which merges a cut with ``k`` clusters keeps; with
  ``min_size = 0`` the ``N - k`` first ones (exactly ``k`` clusters), otherwise only the
  ``k - 1`` highest *relevant* merges (both children at least ``min_size``) are undone,
  so that no cluster smaller than ``min_size`` is split off.
* :func:`cut_num_clusters`: cluster labels of the plain cut (from the parent array alone).
* :func:`size_constrained_merges`: the building edges kept by the size-aware cut (for
  labels on a graph: the connected components of the kept edges).

Core module: numpy and higra only.
"""
from __future__ import annotations

import numbers

import numpy as np

__all__ = ["kcut_merges", "cut_num_clusters", "size_constrained_merges"]


def _binary_parents(parents) -> tuple[np.ndarray, int]:
    if hasattr(parents, "parents") and callable(parents.parents):
        parents = parents.parents()
    parents = np.asarray(parents, dtype=np.int64)
    n_nodes = parents.shape[0]
    n = (n_nodes + 1) // 2
    if parents.ndim != 1 or n_nodes != 2 * n - 1:
        raise ValueError(f"expected a binary tree (2N - 1 nodes), got {n_nodes} nodes")
    return parents, n


def _check_k(k, n: int, name: str = "n_clusters") -> int:
    if isinstance(k, bool) or not isinstance(k, numbers.Integral):
        raise TypeError(f"{name} must be an integer, got {type(k).__name__}")
    if not 1 <= k <= n:
        raise ValueError(f"{name} must be in [1, n_samples = {n}], got {k}")
    return int(k)


def kcut_merges(parents, k: int, min_size: float = 0.0, leaf_size=None) -> np.ndarray:
    """Boolean mask (N - 1,) of the merges kept by the cut of a binary hierarchy into ``k`` clusters.

    ``min_size = 0``: the ``N - k`` first merges are kept, the ``k - 1`` last undone:
    exactly ``k`` clusters (ties of altitude are broken by the merge order).

    ``min_size > 0``: a merge is *relevant* when both of its children weigh at least
    ``min_size`` (``leaf_size``: weight of every leaf, default 1, so a number of
    samples); the ``k - 1`` relevant merges of highest index are undone, every other one
    kept. No cluster of the result weighs less than ``min_size`` (for ``k >= 2``): take a
    cluster C and the undone merge of lowest index on its border; C contains that
    merge's child on its side whole, and that child weighs at least ``min_size``. Small
    groups (outliers merged last) are never split off: they stay with the cluster they
    merged into. Cuts stay nested in ``k``; there are ``min(k, 1 + relevant merges)``
    clusters. O(N log N).

    Raises ValueError for a tree that is not binary, ``k`` outside ``[1, N]``, a negative
    or non-finite ``min_size`` or a ``leaf_size`` of the wrong length.
    """
    parents, n = _binary_parents(parents)
    k = _check_k(k, n, "k")
    min_size = float(min_size)
    if not np.isfinite(min_size) or min_size < 0:
        raise ValueError(f"min_size must be a finite number >= 0, got {min_size}")
    keep = np.ones(n - 1, dtype=bool)
    if min_size == 0:
        keep[n - k:] = False
        return keep
    import higra as hg

    leaf = np.ones(n) if leaf_size is None else np.asarray(leaf_size, dtype=np.float64)
    if leaf.shape != (n,):
        raise ValueError(f"leaf_size has shape {leaf.shape}, expected ({n},) (one value per leaf)")
    size = hg.accumulate_sequential(hg.Tree(parents), leaf, hg.Accumulators.sum)
    child = np.argsort(parents[:-1], kind="stable").reshape(-1, 2)  # the two children of N, N+1, ...
    relevant = np.minimum(size[child[:, 0]], size[child[:, 1]]) >= min_size
    keep[np.flatnonzero(relevant)[::-1][: k - 1]] = False
    return keep


def size_constrained_merges(parents, mst_edge_map, leaf_area, k: int, min_area: float) -> np.ndarray:
    """The building edges (``mst_edge_map`` entries) kept by the size-aware cut with ``k``
    regions: ``mst_edge_map[kcut_merges(parents, k, min_area, leaf_area)]``.

    ``parents``: a binary tree whose internal node ``N + i`` is built by merge ``i``
    (edge ``mst_edge_map[i]``); labels are the connected components of the kept edges.
    Raises as :func:`kcut_merges`.
    """
    parents, n = _binary_parents(parents)
    leaf = np.asarray(leaf_area, dtype=np.float64)
    if leaf.shape != (n,):
        raise ValueError(f"parents has {parents.size} nodes, expected a binary tree on {leaf.size} leaves "
                         f"({2 * leaf.size - 1})")
    return np.asarray(mst_edge_map)[kcut_merges(parents, k, min_area, leaf)]


def cut_num_clusters(parents, n_clusters: int) -> np.ndarray:
    """Flat clustering with exactly ``n_clusters`` clusters from a binary hierarchy.

    The hierarchy is the canonical binary partition tree built by
    :func:`hiseg.build_hierarchy` / ``higra.bpt_canonical``: leaves ``0..N-1``, internal
    nodes numbered in the order of their merges (so altitudes never decrease with the
    node id), root last.  Removing the ``n_clusters - 1`` last merges (the internal nodes
    with the largest ids, hence the highest altitudes) leaves exactly ``n_clusters``
    subtrees; their leaves are the clusters (:func:`kcut_merges` with ``min_size = 0``).

    Ties: when several merges share the altitude of the cut, a cut *by altitude* could
    not give exactly ``n_clusters`` clusters; the merge order decides instead (merges at
    equal altitude are ordered by edge index, as Kruskal's algorithm in
    :func:`hiseg.ultrametric.canonical_edge_order` processes them), so the merges of the
    tie that Kruskal made last are undone first.  The result is deterministic.

    Parameters
    ----------
    parents : int array (2N - 1,) or higra ``Tree``
        Parent array of a binary tree whose parents have larger ids than their children.
    n_clusters : int in ``[1, N]``

    Returns
    -------
    labels : int64 array (N,) with values ``0..n_clusters-1``; clusters are numbered
        in the order of their smallest sample index.

    Cost: O(N).

    Raises
    ------
    ValueError
        ``n_clusters`` outside ``[1, N]`` or a tree that is not binary.
    """
    import higra as hg

    parents, n = _binary_parents(parents)
    n_clusters = _check_k(n_clusters, n)
    n_nodes = parents.shape[0]
    keep = kcut_merges(parents, n_clusters)
    # every node takes the value of its highest ancestor reached through kept merges (for
    # this cut, the kept merges are the n - k first ones: ancestors of kept nodes are kept
    # or undone, never again kept above an undone one)
    condition = np.zeros(n_nodes, dtype=bool)
    condition[:-1] = keep[parents[:-1] - n]
    rep = np.asarray(hg.propagate_sequential(hg.Tree(parents), np.arange(n_nodes, dtype=np.int64), condition),
                     dtype=np.int64)[:n]
    roots, first = np.unique(rep, return_index=True)
    lut = np.empty(n_nodes, dtype=np.int64)
    lut[roots[np.argsort(first, kind="stable")]] = np.arange(roots.size)
    return lut[rep]
