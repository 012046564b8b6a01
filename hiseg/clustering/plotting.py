"""Figures for hierarchies: dendrogram of the top nodes next to the flat clusters of 2-D data.

matplotlib is imported lazily with the non-interactive ``Agg`` backend selected when no
backend has been chosen yet, so these helpers work on headless machines; every function
returns the matplotlib ``Figure`` (and saves it when ``path`` is given).
"""
from __future__ import annotations

from typing import Optional, Sequence

import numpy as np

__all__ = ["to_linkage", "plot_dendrogram", "plot_clustering", "plot_hierarchy_and_clusters",
           "plot_hierarchies_grid"]


def _pyplot():
    import matplotlib

    if "matplotlib.pyplot" not in __import__("sys").modules:
        matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def to_linkage(parents, altitudes) -> np.ndarray:
    """Convert a binary hierarchy (parent array + node altitudes) to a scipy linkage matrix.

    Parameters
    ----------
    parents : int array (2N - 1,) or higra ``Tree``
        Binary tree whose parents have larger ids than their children (higra's
        ``bpt_canonical`` / :func:`hiseg.build_hierarchy` numbering): leaves ``0..N-1``,
        internal node ``N + i`` is the ``i``-th merge.
    altitudes : float array (2N - 1,)
        Node altitudes, non-decreasing from children to parents (leaves' values unused).

    Returns
    -------
    Z : float64 array (N - 1, 4): ``[child 1, child 2, altitude, size]`` per merge, the
        format of :func:`scipy.cluster.hierarchy.linkage` (node ids coincide: scipy also
        numbers the ``i``-th merge ``N + i``).

    Cost: O(N).

    Raises
    ------
    ValueError
        The tree is not binary, its numbering is not children-before-parents, or the
        altitudes have the wrong length or decrease from a child to its parent.
    """
    if hasattr(parents, "parents") and callable(parents.parents):
        parents = parents.parents()
    parents = np.asarray(parents, dtype=np.int64)
    altitudes = np.asarray(altitudes, dtype=np.float64)
    m = parents.shape[0]
    n = (m + 1) // 2
    if m != 2 * n - 1 or n < 1:
        raise ValueError(f"a binary tree has 2N - 1 nodes, got {m}")
    if altitudes.shape != (m,):
        raise ValueError(f"altitudes must have one value per node ({m}), got shape {altitudes.shape}")
    child = np.arange(m - 1)
    if np.any(parents[:-1] <= child) or parents[-1] != m - 1:
        raise ValueError("parents must number children before their parents, with the root last")
    counts = np.bincount(parents[:-1] - n, minlength=n - 1)
    if n > 1 and np.any(counts != 2):
        raise ValueError("the tree is not binary: every internal node needs exactly two children")
    if n == 1:
        return np.zeros((0, 4))
    # an internal node's altitude above its parent's (leaves excluded) is not a dendrogram
    parent_alt = altitudes[parents[n:-1]]
    if np.any(altitudes[n:-1] > parent_alt + 1e-12 * np.maximum(1, np.abs(parent_alt))):
        raise ValueError("altitudes decrease from a child to its parent: not a valid dendrogram")
    import higra as hg

    return hg.binary_hierarchy_to_scipy_linkage_matrix(hg.Tree(parents), altitudes)


def plot_dendrogram(parents=None, altitudes=None, *, linkage=None, top_nodes: int = 30, ax=None,
                    color_threshold=None, n_clusters: Optional[int] = None, title: Optional[str] = None):
    """Dendrogram of the ``top_nodes`` highest merges of a hierarchy, on ``ax``.

    The hierarchy is ``parents`` + ``altitudes`` (see :func:`to_linkage`) or a scipy
    ``linkage`` matrix. ``n_clusters``: colour the clusters of the cut with that many
    clusters (the threshold is set between the ``n_clusters``-th and the
    ``n_clusters - 1``-th highest merges). Returns the scipy ``dendrogram`` dictionary.
    Cost O(N). Raises as :func:`to_linkage`, or ValueError when no hierarchy is given.
    """
    from scipy.cluster.hierarchy import dendrogram

    plt = _pyplot()
    if linkage is not None:
        Z = np.asarray(linkage, dtype=np.float64)
    elif parents is not None and altitudes is not None:
        Z = to_linkage(parents, altitudes)
    else:
        raise ValueError("plot_dendrogram needs parents and altitudes, or a linkage matrix")
    if ax is None:
        _, ax = plt.subplots()
    if n_clusters is not None and color_threshold is None and 1 < n_clusters <= Z.shape[0]:
        h = Z[:, 2]
        color_threshold = 0.5 * (h[-n_clusters] + h[-n_clusters + 1])
    p = max(1, min(int(top_nodes), Z.shape[0] + 1))
    d = dendrogram(Z, truncate_mode="lastp", p=p, ax=ax, no_labels=True,
                   color_threshold=color_threshold if color_threshold is not None else 0,
                   above_threshold_color="0.5")
    ax.set_yticks([])
    for side in ("top", "right", "left"):
        ax.spines[side].set_visible(False)
    if title:
        ax.set_title(title, fontsize=9)
    return d


def plot_clustering(X, labels, *, ax=None, labelled=None, title: Optional[str] = None, s: float = 8):
    """Scatter plot of 2-D points coloured by ``labels``; ``labelled`` (bool mask or
    indices) are drawn with a black edge. Returns the axes. Raises ValueError for non 2-D X."""
    plt = _pyplot()
    X = np.asarray(X)
    if X.ndim != 2 or X.shape[1] != 2:
        raise ValueError(f"plot_clustering draws 2-D points, got X of shape {X.shape}")
    labels = np.asarray(labels)
    if ax is None:
        _, ax = plt.subplots()
    ax.scatter(X[:, 0], X[:, 1], c=labels, cmap="tab10", s=s, vmin=0, vmax=9, linewidths=0)
    if labelled is not None:
        idx = np.asarray(labelled)
        if idx.dtype == bool:
            idx = np.flatnonzero(idx)
        ax.scatter(X[idx, 0], X[idx, 1], c=labels[idx], cmap="tab10", vmin=0, vmax=9, s=s * 2.5,
                   edgecolors="k", linewidths=0.8)
    ax.set_xticks([])
    ax.set_yticks([])
    ax.set_aspect("equal", adjustable="datalim")
    if title:
        ax.set_title(title, fontsize=9)
    return ax


def _hierarchy_of(est_or_parents, altitudes=None):
    if altitudes is None:
        return est_or_parents.parents_, est_or_parents.altitudes_
    return est_or_parents, altitudes


def plot_hierarchy_and_clusters(X, hierarchy, labels=None, altitudes=None, *, n_clusters=None,
                                top_nodes: int = 30, labelled=None, title: Optional[str] = None,
                                path=None, figsize=(6.0, 2.8)):
    """The paper's Figure 2 layout for one data set: dendrogram (top nodes) | flat clusters.

    Parameters
    ----------
    X : (N, 2) points.
    hierarchy : a fitted :class:`~hiseg.clustering.UltrametricClustering` (its
        ``parents_``, ``altitudes_`` and ``labels_`` are used), or a parent array with
        ``altitudes`` given.
    labels : (N,) flat clusters (default: the estimator's ``labels_``).
    n_clusters : number of clusters coloured in the dendrogram (default: ``max(labels) + 1``).
    top_nodes : merges shown in the dendrogram.
    labelled : samples whose label was given (drawn with an edge).
    path : save the figure there (any matplotlib format) when given.

    Returns
    -------
    matplotlib ``Figure``. Cost O(N) + drawing.
    """
    plt = _pyplot()
    parents, alt = _hierarchy_of(hierarchy, altitudes)
    if labels is None:
        labels = hierarchy.labels_
    labels = np.asarray(labels)
    if n_clusters is None:
        n_clusters = int(labels.max()) + 1
    fig, (a0, a1) = plt.subplots(1, 2, figsize=figsize)
    plot_dendrogram(parents, alt, top_nodes=top_nodes, ax=a0, n_clusters=n_clusters)
    plot_clustering(X, labels, ax=a1, labelled=labelled)
    if title:
        fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    if path is not None:
        fig.savefig(path, dpi=110)
    return fig


def plot_hierarchies_grid(rows: Sequence[dict], *, columns: Sequence[str], top_nodes: int = 30,
                          path=None, cell=(1.9, 1.6)):
    """A grid of (dendrogram, clusters) pairs: one row per method, one column pair per data set.

    ``rows``: dicts with ``"name"`` and ``"cells"``, a list (one per data set, in the order
    of ``columns``) of dicts ``{"X", "parents", "altitudes", "labels", "labelled"(opt.)}``
    (or ``"linkage"``, a scipy linkage matrix, instead of parents/altitudes); a cell
    without a hierarchy (a flat method) draws only the clusters.
    Returns the ``Figure``; saved at ``path`` when given.
    """
    plt = _pyplot()
    nr, nc = len(rows), len(columns)
    fig, axes = plt.subplots(nr, 2 * nc, figsize=(cell[0] * 2 * nc, cell[1] * nr), squeeze=False)
    for i, row in enumerate(rows):
        for j, c in enumerate(row["cells"]):
            a0, a1 = axes[i, 2 * j], axes[i, 2 * j + 1]
            labels = np.asarray(c["labels"])
            if c.get("parents") is not None or c.get("linkage") is not None:
                plot_dendrogram(c.get("parents"), c.get("altitudes"), linkage=c.get("linkage"),
                                top_nodes=top_nodes, ax=a0, n_clusters=int(labels.max()) + 1)
            else:
                a0.set_xticks([])
                a0.set_yticks([])
                for side in a0.spines.values():
                    side.set_visible(False)
            plot_clustering(c["X"], labels, ax=a1, labelled=c.get("labelled"), s=4)
            if i == 0:
                a1.set_title(columns[j], fontsize=9)
        axes[i, 0].set_ylabel(row["name"], fontsize=9)
        axes[i, 0].yaxis.set_visible(True)
        axes[i, 0].set_yticks([])
    fig.tight_layout()
    if path is not None:
        fig.savefig(path, dpi=100)
    return fig
