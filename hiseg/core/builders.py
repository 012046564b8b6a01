"""Graphs built from data: the 4-adjacency grid of an image and the k-nearest-neighbour graph
of points (made connected by spanning edges), as :class:`~hiseg.core.graph.EdgeList`.

The image chain builds its graphs from superpixels (:func:`hiseg.core.graph.region_adjacency_graph`);
these are the clustering's and the paper's experiments' graphs. No torch, no I/O.
"""
from __future__ import annotations

from typing import Sequence

import numpy as np

from .graph import EdgeList

__all__ = ["grid_graph", "knn_graph", "normalised_points", "EXACT_KNN_MAX_POINTS", "EXACT_KNN_MAX_DIM",
           "EXACT_MST_MAX_POINTS", "EDGE_BLOCK"]


def grid_graph(shape: Sequence[int]) -> EdgeList:
    """4-adjacency graph of a 2-D image of ``shape = (H, W)`` (row-major pixel ids).

    Edge order: all horizontal edges (pixel and its right neighbour, in raster order),
    then all vertical edges (pixel and its bottom neighbour, in raster order).
    ``E = H(W-1) + (H-1)W``.
    """
    if len(shape) != 2:
        raise ValueError(f"grid_graph expects a 2-D shape (H, W), got {tuple(shape)}")
    h, w = (int(x) for x in shape)
    if h <= 0 or w <= 0:
        raise ValueError(f"grid_graph: shape must be positive, got {(h, w)}")
    idx = np.arange(h * w, dtype=np.int64).reshape(h, w)
    s = np.concatenate([idx[:, :-1].ravel(), idx[:-1, :].ravel()])
    t = np.concatenate([idx[:, 1:].ravel(), idx[1:, :].ravel()])
    return EdgeList(s, t, h * w)


#: ``knn_graph(method="auto")`` searches exact neighbours up to this many points (or at
#: any size in at most :data:`EXACT_KNN_MAX_DIM` dimensions, where KD-trees stay fast)
EXACT_KNN_MAX_POINTS = 20000
EXACT_KNN_MAX_DIM = 3
#: ``knn_graph(connect="auto")`` adds the exact Euclidean MST up to this many points
EXACT_MST_MAX_POINTS = 20000


def knn_graph(X, n_neighbors: int = 5, *, connect="auto", method: str = "auto", random_state=0):
    """Symmetric k-nearest-neighbour graph of points, made connected by spanning edges.

    Every point is joined to its ``n_neighbors`` nearest neighbours (Euclidean); the
    edge set is symmetrised (an edge found from one side only is kept once, with no
    halving of its weight). Then, unless ``connect`` is false, edges are added so that
    the graph is connected:

    * ``"mst"``: the edges of the exact minimum spanning tree of the complete Euclidean
      graph (the paper's kNN + MST construction); Prim's algorithm, O(n^2 d) time but
      O(n d) memory;
    * ``"components"``: edges joining the connected components of the kNN graph, found
      by nearest-neighbour searches between components (Borůvka-style rounds; see
      :func:`hiseg.core._neighbors.spanning_edges`): nothing is added when the kNN graph is
      connected, otherwise about one edge per component, each a close pair of points
      of two nearby components; O(n) memory and time per round, at most
      log2(components) rounds;
    * ``"auto"`` (or ``True``): ``"mst"`` up to :data:`EXACT_MST_MAX_POINTS` points,
      ``"components"`` above.

    Parameters
    ----------
    X : (n, d) array of finite values.
    n_neighbors : int >= 1.
    connect : ``"auto"``, ``True``, ``"mst"``, ``"components"`` or ``False``.
    method : neighbour search: ``"exact"`` (scikit-learn's ``NearestNeighbors``: KD-tree,
        ball tree or chunked brute force), ``"approximate"`` (random-projection forest +
        NN-descent, :func:`hiseg.core._neighbors.approximate_knn`; about 90% of the true
        neighbours on 16-d Gaussian blobs, the others near ones) or ``"auto"``: exact up
        to :data:`EXACT_KNN_MAX_POINTS` points or in at most :data:`EXACT_KNN_MAX_DIM`
        dimensions, approximate otherwise.
    random_state : int, seed of the approximate search (deterministic for a given seed).

    Returns
    -------
    graph : EdgeList
    weights : float64 array, the Euclidean length of each edge.

    The search runs on the points centred and rescaled by a power of two, so the graph
    does not depend on the scale of ``X`` (``X * 1e300`` and ``X * 1e-300`` give the same
    edges; weights scale with ``X``). Memory O(n (k + d)) whatever the method: besides ``X``
    (as float64), one normalised copy of it, the search's own (the exact MST keeps a second
    copy), and the edge lengths computed :data:`EDGE_BLOCK` values at a time.

    Raises
    ------
    ValueError
        Non-finite coordinates, edge lengths beyond the float64 range, fewer than
        ``n_neighbors + 1`` points, bad ``n_neighbors``, ``connect`` or ``method``.
    """
    from . import _neighbors as nb

    X = np.asarray(X, dtype=np.float64)
    if X.ndim != 2:
        raise ValueError(f"X must be a 2-D array (n_samples, n_features), got shape {X.shape}")
    n, d = X.shape
    if not _all_finite(X):
        raise ValueError("X contains NaN or infinite values")
    if isinstance(n_neighbors, bool) or int(n_neighbors) != n_neighbors or n_neighbors < 1:
        raise ValueError(f"n_neighbors must be a positive integer, got {n_neighbors}")
    n_neighbors = int(n_neighbors)
    if n < n_neighbors + 1:
        raise ValueError(f"need at least n_neighbors + 1 = {n_neighbors + 1} samples, got {n}")
    if connect is True:
        connect = "auto"
    if connect not in ("auto", "mst", "components", False, None):
        raise ValueError(f"connect must be 'auto', 'mst', 'components' or False, got {connect!r}")
    if method not in ("auto", "exact", "approximate"):
        raise ValueError(f"method must be 'auto', 'exact' or 'approximate', got {method!r}")
    Xs, scale = normalised_points(X)
    if method == "auto":
        method = "exact" if n <= EXACT_KNN_MAX_POINTS or d <= EXACT_KNN_MAX_DIM else "approximate"
    if method == "exact":
        nn = nb.exact_knn(Xs, n_neighbors)
    else:
        nn = nb.approximate_knn(Xs, n_neighbors, random_state=random_state)
    src = np.repeat(np.arange(n), n_neighbors)
    dst = nn.ravel()
    if connect == "auto":
        connect = "mst" if n <= EXACT_MST_MAX_POINTS else "components"
    if connect == "mst":
        ms, mt = nb.euclidean_mst(Xs)
    elif connect == "components":
        ms, mt = nb.spanning_edges(Xs, src, dst)
    else:
        ms = mt = np.zeros(0, dtype=np.int64)
    src, dst = np.concatenate([src, ms]), np.concatenate([dst, mt])
    a = np.minimum(src, dst).astype(np.int64)
    b = np.maximum(src, dst).astype(np.int64)
    key = np.unique(a * n + b)
    a, b = key // n, key % n
    w = _edge_lengths(Xs, a, b) * scale
    if not np.all(np.isfinite(w)):
        raise ValueError("distances between samples exceed the float64 range (about 1.8e308): "
                         "rescale X")
    return EdgeList(a, b, n), w

#: The edge lengths of :func:`knn_graph` are computed this many coordinates at a time (a
#: block of edges' differences), so that many features cost no (edges x features) array.
EDGE_BLOCK = 1 << 20


def _all_finite(X: np.ndarray) -> bool:
    """``np.isfinite(X).all()`` a block of rows at a time (no full-size boolean array)."""
    rows = max(1, EDGE_BLOCK // max(1, X.shape[1]))
    return all(bool(np.isfinite(X[i:i + rows]).all()) for i in range(0, X.shape[0], rows))


def _edge_lengths(Z: np.ndarray, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """The Euclidean lengths of the edges (a, b) of points ``Z``, :data:`EDGE_BLOCK` values at a
    time: the same values as the whole-array expression, in O(EDGE_BLOCK) memory."""
    w = np.empty(len(a), np.float64)
    rows = max(1, EDGE_BLOCK // max(1, Z.shape[1]))
    for i in range(0, len(a), rows):
        diff = Z[a[i:i + rows]] - Z[b[i:i + rows]]
        w[i:i + rows] = np.sqrt(np.einsum("ij,ij->i", diff, diff))
    return w


def _abs_max(X: np.ndarray) -> float:
    """``np.abs(X).max()`` without the copy."""
    return max(float(X.max()), -float(X.min())) if X.size else 0.0


def normalised_points(X: np.ndarray):
    """``(Z, scale)`` with ``X = Z * scale + mean``: ``Z`` centred, its largest coordinate
    in [0.5, 1), ``scale`` a power of two (rescaling by powers of two is exact, and squared
    norms of ``Z`` neither overflow nor underflow whatever the scale of ``X``). One copy of
    ``X``, rescaled in place."""
    e1 = int(np.frexp(_abs_max(X))[1]) if X.size else 0
    Y = np.ldexp(X, -e1)
    Y -= Y.mean(axis=0)
    m = _abs_max(Y)
    if m == 0.0:  # all points equal
        return Y, 1.0
    e2 = int(np.frexp(m)[1])
    with np.errstate(over="ignore"):  # inf: distances beyond the float64 range (caller's error)
        return np.ldexp(Y, -e2, out=Y), float(np.ldexp(1.0, e1 + e2))
