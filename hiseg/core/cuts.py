"""Horizontal cuts of binary hierarchies into a given number of clusters, plain or size-aware.

A binary hierarchy here is a parent array whose leaves are ``0..N-1`` and whose internal
node ``N + i`` is made by merge ``i``, merges numbered in non-decreasing altitude order,
root last: the canonical binary partition tree of :func:`hiseg.build_hierarchy`
(``higra.bpt_canonical``) and higra's average-linkage tree are such trees.

* :func:`cut_hierarchy`: **the** cut: cluster labels of a hierarchy cut into
  ``n_clusters`` clusters, none smaller than ``min_size`` (0: the plain cut). Every cut
  of hiseg goes through it: :class:`hiseg.UltrametricClustering` (``labels_``), the image
  side (:func:`hiseg.segmentation.saliency.cut_num_regions`, its thin wrapper for region
  adjacency graphs, hence :meth:`hiseg.segmentation.result.SegmentationResult.cut`, ``hiseg predict
  --regions``) and :func:`hiseg.metrics.kcut.ucm2_size_aware_cut`.
* :func:`kcut_merges`: the merges such a cut keeps, for one ``min_size`` (its building block).
* :func:`resolve_min_size`: a ``min_size`` setting (``"auto"``, a fraction or a size) as a
  size, for samples and images alike (the only one in hiseg).
* :func:`check_count`: the one check of a number of clusters or regions.

Vocabulary, one name per idea across the API and the command line:

=========================  ====================================  ===========================
idea                       Python                                ``hiseg`` command line
=========================  ====================================  ===========================
number of groups of a cut  ``n_clusters`` (samples: the
                           estimator, this module);
                           ``n_regions`` (images)                ``--regions K``
smallest group of a cut    ``min_size`` (samples, or pixels)     ``--min-region-size SIZE``
weight of a leaf           ``leaf_size`` (1 per sample, or a
                           superpixel's pixel count)
=========================  ====================================  ===========================

A cut at a level of an image's saliency map is ``threshold`` in Python
(``SegmentationResult.cut(threshold=T)``) and ``--level T`` on the command line, where
``--thresholds N`` (``hiseg evaluate``) is the number of levels the benchmark scores.

Core module: numpy, higra and :mod:`hiseg.core.graph` only.
"""
from __future__ import annotations

import numbers

import numpy as np
from ._lazy import import_higra

__all__ = ["cut_hierarchy", "kcut_merges", "resolve_min_size", "check_count",
           "AUTO_MIN_CLUSTER_FRACTION", "AUTO_MIN_REGION_FRACTION"]

# ``min_size="auto"`` is a fraction of an even share (the total size / the number of
# clusters). Two defaults, because the two uses differ in what the size rule is for
# (values of the callers before the cut was shared; neither was changed):
#: samples (:class:`hiseg.UltrametricClustering`, without labels): outliers merged last
#: must not become clusters of their own; 10% of an even share (``0.1 n / n_clusters``),
#: the estimator's value since its size-aware cut (the toy and real experiments ran with
#: it; no experiment compared it with the images' 0.05 on samples)
AUTO_MIN_CLUSTER_FRACTION = 0.1
#: images (``n_regions`` cuts, ``hiseg predict --regions``): people draw small regions too,
#: so the rule only removes specks. Chosen on BSDS500 val
#: (``experiments/segmentation/kcut_min_size.py``, ``experiments/segmentation/results/kcut_min_size.md``): 0.02 gives the
#: best K-cut covering (.621), 0.05 keeps most of it (.611, plain cut .598) with 40% fewer
#: regions under 0.5% of the image; 0.1, the samples' default, drops it to .587.
AUTO_MIN_REGION_FRACTION = 0.05


def _binary_parents(parents) -> tuple[np.ndarray, int]:
    if hasattr(parents, "parents") and callable(parents.parents):  # a higra Tree
        parents = parents.parents()
    parents = np.asarray(parents, dtype=np.int64)
    n_nodes = parents.shape[0]
    n = (n_nodes + 1) // 2
    if parents.ndim != 1 or n_nodes != 2 * n - 1:
        raise ValueError(f"expected a binary tree (2N - 1 nodes), got {n_nodes} nodes")
    return parents, n


def check_count(value, upper=None, *, name: str = "n_clusters", of: str = "n_samples") -> int:
    """The one check of a number of clusters or regions: ``value`` as an int in ``[1, upper]``.

    Used by every cut (:func:`cut_hierarchy`, :func:`kcut_merges`), the estimator
    (``UltrametricClustering(n_clusters=...)``), the region cut of an image
    (:func:`hiseg.segmentation.saliency.cut_num_regions`) and
    :meth:`hiseg.segmentation.result.SegmentationResult.cut` (``upper=None``: no upper bound, more
    regions than the hierarchy has is a warning there). ``name`` and ``of`` (what ``upper``
    counts) name the setting in the messages. O(1).

    Raises TypeError for a value that is not an integer (``bool`` included), ValueError
    for one below 1 or above ``upper``.
    """
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError(f"{name} must be an integer >= 1, got {value!r} ({type(value).__name__})")
    if value < 1:
        raise ValueError(f"{name} must be an integer >= 1, got {value}")
    if upper is not None and value > upper:
        raise ValueError(f"{name} must be in [1, {of} = {upper}], got {value}")
    return int(value)


def _check_min_size(min_size) -> float:
    if isinstance(min_size, bool) or not isinstance(min_size, numbers.Real):
        raise TypeError(f"min_size must be a number, got {type(min_size).__name__}")
    v = float(min_size)
    if not np.isfinite(v) or v < 0:
        raise ValueError(f"min_size must be a finite number >= 0, got {min_size}")
    return v


def _leaf_weights(leaf_size, n: int) -> np.ndarray:
    leaf = np.ones(n) if leaf_size is None else np.asarray(leaf_size, dtype=np.float64)
    if leaf.shape != (n,):
        raise ValueError(f"leaf_size has shape {leaf.shape}, expected ({n},) (one value per leaf)")
    if not np.all(np.isfinite(leaf)) or np.any(leaf <= 0):
        raise ValueError("leaf_size must hold finite values > 0")
    return leaf


def _smaller_child_size(parents: np.ndarray, leaf: np.ndarray) -> np.ndarray:
    """(N - 1,) weight of the lighter child of every merge."""
    hg = import_higra()

    size = hg.accumulate_sequential(hg.Tree(parents), leaf, hg.Accumulators.sum)
    child = np.argsort(parents[:-1], kind="stable").reshape(-1, 2)  # the two children of N, N+1, ...
    return np.minimum(size[child[:, 0]], size[child[:, 1]])


def kcut_merges(parents, n_clusters: int, min_size: float = 0.0, leaf_size=None) -> np.ndarray:
    """Boolean mask (N - 1,) of the merges kept by the cut of a binary hierarchy into ``n_clusters``.

    ``min_size = 0``: the ``N - n_clusters`` first merges are kept, the ``n_clusters - 1``
    last undone: exactly ``n_clusters`` clusters (ties of altitude are broken by the merge order).

    ``min_size > 0``: a merge is *relevant* when both of its children weigh at least
    ``min_size`` (``leaf_size``: weight of every leaf, default 1, so a number of
    samples); the ``n_clusters - 1`` relevant merges of highest index are undone, every
    other one kept. No cluster of the result weighs less than ``min_size`` (for
    ``n_clusters >= 2``): take a cluster C and the undone merge of lowest index on its
    border; C contains that merge's child on its side whole, and that child weighs at
    least ``min_size``. Small groups (outliers merged last) are never split off: they
    stay with the cluster they merged into. Cuts stay nested in ``n_clusters``; there are
    ``min(n_clusters, 1 + relevant merges)`` clusters (:func:`cut_hierarchy` lowers
    ``min_size`` until there are ``n_clusters``). O(N log N).

    Raises ValueError for a tree that is not binary, ``n_clusters`` outside ``[1, N]``, a
    negative or non-finite ``min_size`` or a ``leaf_size`` of the wrong length.
    """
    parents, n = _binary_parents(parents)
    n_clusters = check_count(n_clusters, n)
    min_size = _check_min_size(min_size)
    keep = np.ones(n - 1, dtype=bool)
    if min_size == 0:
        keep[n - n_clusters:] = False
        return keep
    relevant = _smaller_child_size(parents, _leaf_weights(leaf_size, n)) >= min_size
    keep[np.flatnonzero(relevant)[::-1][: n_clusters - 1]] = False
    return keep


def _building_edges(hierarchy):
    """(sources, targets) of the building edge of every merge of a hiseg ``Hierarchy``, or None."""
    if not (hasattr(hierarchy, "mst_edge_map") and hasattr(hierarchy, "graph")):
        return None
    if getattr(hierarchy, "batch", None) is not None:
        raise ValueError("a batched hierarchy joins several graphs; cut each graph's hierarchy")
    e = np.asarray(hierarchy.mst_edge_map, dtype=np.int64)
    g = hierarchy.graph
    return np.asarray(g.sources, np.int64)[e], np.asarray(g.targets, np.int64)[e]


def _labels_from_tree(parents: np.ndarray, n: int, keep: np.ndarray) -> np.ndarray:
    """Labels of a cut whose kept merges are closed downward (no kept merge above an undone
    one): every leaf takes its highest ancestor reached through kept merges. O(N)."""
    hg = import_higra()

    n_nodes = parents.shape[0]
    condition = np.zeros(n_nodes, dtype=bool)
    condition[:-1] = keep[parents[:-1] - n]
    rep = np.asarray(hg.propagate_sequential(hg.Tree(parents), np.arange(n_nodes, dtype=np.int64), condition),
                     dtype=np.int64)[:n]
    return first_occurrence_order(rep)


def first_occurrence_order(rep: np.ndarray) -> np.ndarray:
    """Relabel ``rep`` as 0..C-1 in the order of the smallest index of each value."""
    roots, first, inverse = np.unique(rep, return_index=True, return_inverse=True)
    rank = np.empty(roots.size, dtype=np.int64)
    rank[np.argsort(first, kind="stable")] = np.arange(roots.size)
    return rank[inverse.ravel()]


def cut_hierarchy(hierarchy, n_clusters: int, min_size: float = 0.0, *, leaf_size=None,
                  return_min_size: bool = False):
    """Cluster labels of a binary hierarchy cut into ``n_clusters`` clusters: the one cut of hiseg.

    Parameters
    ----------
    hierarchy : :class:`hiseg.core.ultrametric.Hierarchy`, int array (2N - 1,) or higra ``Tree``
        A binary tree whose internal node ``N + i`` is made by merge ``i``, merges in
        non-decreasing altitude order (:func:`hiseg.build_hierarchy`, ``higra.bpt_canonical``).
        A parent array or a higra tree has no building edges: it gives the cuts whose
        clusters are subtrees (always the plain cut; ValueError for a size-aware cut
        that keeps a small group's merge above an undone one, whose side only the
        building edge tells).
    n_clusters : int in ``[1, N]``
    min_size : float >= 0, default 0
        0: the plain cut, the ``n_clusters - 1`` last merges undone (ties of altitude
        broken by the merge order, so there are always exactly ``n_clusters`` clusters).
        Otherwise size-aware (:func:`kcut_merges`): only merges of two groups of at least
        ``min_size`` are undone, the ``n_clusters - 1`` highest of them, so that no
        cluster weighs less than ``min_size``; a group that merged last (an outlier, a
        speck) stays with the cluster it merged into.
    leaf_size : float array (N,) > 0 or None
        Weight of every leaf for ``min_size`` (None: 1, a number of samples; an image's
        superpixel areas make it a number of pixels).
    return_min_size : bool
        Also return the minimum size the cut used (see below).

    Returns
    -------
    labels : int64 array (N,) with values ``0..n_clusters-1``, clusters numbered in the
        order of their smallest leaf. With ``return_min_size``, ``(labels, used)``.

    When fewer than ``n_clusters`` clusters of at least ``min_size`` exist (fewer than
    ``n_clusters - 1`` relevant merges), ``min_size`` is halved until they do, and ``used``
    is the halved value (at worst the smallest leaf weight or below: every merge is then
    relevant and the cut is the plain one). So the result always has exactly
    ``n_clusters`` clusters, none lighter than ``used``; the caller warns when
    ``used < min_size`` if that matters to it. Cuts with the same ``min_size`` that need
    no halving are nested in ``n_clusters``.

    Cost: O(N log N) (O(N) for the plain cut).

    Raises
    ------
    ValueError
        ``n_clusters`` outside ``[1, N]``, a negative or non-finite ``min_size``, a
        ``leaf_size`` of the wrong length or not positive, a tree that is not binary, a
        batched hierarchy, or a size-aware cut that needs building edges the hierarchy
        does not have.
    TypeError
        ``n_clusters`` that is not an integer.
    """
    edges = _building_edges(hierarchy)
    parents, n = _binary_parents(hierarchy.parents if edges is not None else hierarchy)
    n_clusters = check_count(n_clusters, n)
    used = _check_min_size(min_size)
    if used > 0 and n_clusters > 1:
        leaf = _leaf_weights(leaf_size, n)
        # the largest size with n_clusters - 1 relevant merges: the (n_clusters - 1)-th
        # largest lighter child; halving stops at the first size at or below it
        floor = np.partition(_smaller_child_size(parents, leaf), n - n_clusters)[n - n_clusters]
        while used > floor:
            used /= 2
        keep = kcut_merges(parents, n_clusters, used, leaf)
    else:
        keep = kcut_merges(parents, n_clusters)
    undone_parent = parents[n:-1][~keep[:-1]]  # the parent node of every undone merge but the root's
    if not keep[undone_parent - n].any():  # clusters are subtrees: read them off the tree
        labels = _labels_from_tree(parents, n, keep)
    elif edges is None:
        raise ValueError("this size-aware cut keeps a small group's merge above an undone merge: which side the "
                         "group joins is given by the merge's building edge; pass the hiseg Hierarchy "
                         "(build_hierarchy) rather than its parent array")
    else:
        from .graph import connected_components

        s, t = edges
        _, comp = connected_components((s[keep], t[keep], n))
        labels = np.asarray(comp, dtype=np.int64)  # scipy numbers components by their smallest vertex
    return (labels, used) if return_min_size else labels


def resolve_min_size(min_size, n_clusters: int, total: float, auto_fraction: float = AUTO_MIN_CLUSTER_FRACTION) -> float:
    """The size of a ``min_size`` setting for a cut into ``n_clusters`` of ``total`` (samples or pixels).

    A number >= 1 is a size, a number in [0, 1) a fraction of ``total`` (0: the plain
    cut), ``"auto"`` ``auto_fraction`` of an even share, ``auto_fraction * total /
    n_clusters`` (:data:`AUTO_MIN_CLUSTER_FRACTION` for samples,
    :data:`AUTO_MIN_REGION_FRACTION` for images). ValueError for anything else.
    """
    if isinstance(min_size, str):
        if min_size != "auto":
            raise ValueError(f"min_size must be a size (>= 1), a fraction in [0, 1) or 'auto', got {min_size!r}")
        return auto_fraction * total / max(1, int(n_clusters))
    v = float(min_size)
    if not np.isfinite(v) or v < 0:
        raise ValueError(f"min_size must be >= 0, got {min_size!r}")
    return v * total if v < 1 else v

