"""Nearest neighbours and spanning edges of point clouds, in O(n) memory (used by ``knn_graph``).

* :func:`exact_knn`: scikit-learn's ``NearestNeighbors`` (KD-tree, ball tree or chunked
  brute force, chosen by scikit-learn).
* :func:`approximate_knn`: a random-projection forest (every leaf solved by brute force
  on the CPU with torch's batched matrix products) refined by NN-descent rounds
  (neighbours of neighbours). O(n (T L + R k^2) d) time for T trees of leaves of L
  points and R rounds, O(n (k + d)) memory.
* :func:`euclidean_mst`: the exact Euclidean minimum spanning tree by Prim's algorithm,
  O(n^2 d) time, O(n d) memory.
* :func:`spanning_edges`: edges joining the connected components of a graph on points,
  Borůvka-style: every component is paired with the components of its nearest
  centroids, the closest pair of points of every pair is sought by alternating
  nearest-member searches, and a minimum spanning tree of the component graph keeps
  the edges that join everything; repeated until one component is left (each round at
  least halves the number of components).

All functions take float arrays already centred and rescaled by the caller
(:func:`hiseg.core.builders.knn_graph`), so squared norms neither overflow nor underflow.
"""
from __future__ import annotations

import numpy as np
from scipy.sparse import coo_matrix
from scipy.sparse.csgraph import connected_components, minimum_spanning_tree

__all__ = ["exact_knn", "approximate_knn", "euclidean_mst", "spanning_edges"]


def exact_knn(X: np.ndarray, k: int) -> np.ndarray:
    """Indices (n, k) of the k nearest other points of every point (exact)."""
    from sklearn.neighbors import NearestNeighbors

    nn = NearestNeighbors(n_neighbors=k + 1).fit(X)
    ind = nn.kneighbors(X, return_distance=False)
    return _drop_self(ind, k)


def _drop_self(ind: np.ndarray, k: int) -> np.ndarray:
    """Remove each row's own index (or, when duplicates hid it, the last column)."""
    n = ind.shape[0]
    own = ind == np.arange(n)[:, None]
    own[~own.any(axis=1), -1] = True  # a duplicated point may come first: drop the farthest
    first = np.argmax(own, axis=1)
    keep = np.ones_like(own)
    keep[np.arange(n), first] = False
    return ind[keep].reshape(n, k)


# ----------------------------------------------------------------------------- approximate kNN
def _merge(bi, bd, ci, cd, k):
    """Keep the k nearest distinct candidates of every row among (bi, bd) and (ci, cd)."""
    ind = np.concatenate([bi, ci], axis=1)
    dist = np.concatenate([bd, cd], axis=1)
    o = np.argsort(ind, axis=1, kind="stable")
    ind = np.take_along_axis(ind, o, 1)
    dist = np.take_along_axis(dist, o, 1)
    dup = np.zeros(ind.shape, dtype=bool)
    dup[:, 1:] = ind[:, 1:] == ind[:, :-1]
    dist[dup | (ind < 0)] = np.inf
    p = np.argpartition(dist, k - 1, axis=1)[:, :k]
    return np.take_along_axis(ind, p, 1), np.take_along_axis(dist, p, 1)


def _rp_leaves(X, leaf_size, rng):
    """A random-projection tree: a permutation of the points and the [start, end) of
    every leaf. Every node is split at the median of the points' projections on the
    difference of two of its points, until leaves hold at most ``leaf_size`` points."""
    n = X.shape[0]
    perm = np.arange(n)
    starts, ends = np.array([0]), np.array([n])
    while (ends - starts).max() > leaf_size:
        size = ends - starts
        a = starts + (rng.random(size.size) * size).astype(np.int64)
        b = starts + (rng.random(size.size) * size).astype(np.int64)
        direction = X[perm[a]] - X[perm[b]]
        block = np.repeat(np.arange(size.size), size)
        proj = np.einsum("ij,ij->i", X[perm], direction[block])
        perm = perm[np.lexsort((proj, block))]
        mid = (starts + ends) // 2
        split = size > leaf_size
        starts = np.where(split[:, None], np.stack([starts, mid], 1), np.stack([starts, ends], 1)).ravel()
        ends = np.where(split[:, None], np.stack([mid, ends], 1), np.stack([ends, ends], 1)).ravel()
        keep = ends > starts
        starts, ends = starts[keep], ends[keep]
    return perm, starts, ends


def _leaf_knn(X, sq, perm, starts, ends, k, chunk=1 << 23):
    """Brute-force k nearest neighbours inside every leaf (batched over leaves of equal padded size)."""
    import torch

    n = X.shape[0]
    size = ends - starts
    L = int(size.max())
    kk = min(k, L - 1)
    bi = np.full((n, k), -1, dtype=np.int64)
    bd = np.full((n, k), np.inf, dtype=np.float32)
    per = max(1, chunk // (L * L))
    Xt, sqt = torch.from_numpy(X), torch.from_numpy(sq)
    col = np.arange(L)
    with torch.no_grad():
        for c0 in range(0, size.size, per):
            m = size[c0:c0 + per]
            idx = perm[starts[c0:c0 + per, None] + np.minimum(col[None, :], m[:, None] - 1)]
            pad = col[None, :] >= m[:, None]
            it = torch.from_numpy(idx)
            Xl = Xt[it]
            sq_col = sqt[it].masked_fill(torch.from_numpy(pad), float("inf"))
            # |x_j|^2 - 2 x_i.x_j ranks the row i like the distance (|x_i|^2 is added back below)
            D = torch.bmm(Xl, Xl.transpose(1, 2)).mul_(-2).add_(sq_col[:, None, :])
            D.diagonal(dim1=1, dim2=2).fill_(float("inf"))
            d, p = torch.topk(D, kk, dim=2, largest=False, sorted=False)
            ind = torch.gather(it[:, None, :].expand(-1, L, -1), 2, p).numpy()
            d = (d + sqt[it][:, :, None]).numpy()
            valid = ~pad
            rows = idx[valid]
            bi[rows, :kk] = ind[valid]
            bd[rows, :kk] = d[valid]
    return bi, bd


def _descent_round(X, sq, bi, bd, k, chunk=20000):
    """One NN-descent round: every point's candidates are the neighbours of its
    neighbours and reverse neighbours. Returns the number of rows that changed."""
    n = X.shape[0]
    src = np.repeat(np.arange(n), k)
    dst = bi.ravel()
    ok = dst >= 0
    o = np.argsort(dst[ok], kind="stable")
    rs, rd = src[ok][o], dst[ok][o]
    ptr = np.concatenate([[0], np.cumsum(np.bincount(rd, minlength=n))])
    rank = np.arange(rd.size) - ptr[rd]
    rev = np.full((n, k), -1, dtype=np.int64)
    first = rank < k
    rev[rd[first], rank[first]] = rs[first]
    nbr = np.concatenate([bi, rev], axis=1)
    changed = 0
    for c0 in range(0, n, chunk):
        c1 = min(n, c0 + chunk)
        nb = nbr[c0:c1]
        cand = nbr[np.maximum(nb, 0)].reshape(c1 - c0, -1)
        cand[np.repeat(nb < 0, nbr.shape[1], axis=1)] = -1
        rows = np.arange(c0, c1)[:, None]
        cand[cand == rows] = -1
        cv = np.maximum(cand, 0)
        d = sq[cv] + sq[rows] - 2 * np.einsum("ijk,ik->ij", X[cv], X[c0:c1])
        d[cand < 0] = np.inf
        ni, nd = _merge(bi[c0:c1], bd[c0:c1], cand, d.astype(np.float32), k)
        changed += int((np.sort(ni, axis=1) != np.sort(bi[c0:c1], axis=1)).any(axis=1).sum())
        bi[c0:c1], bd[c0:c1] = ni, nd
    return changed


def approximate_knn(X: np.ndarray, k: int, *, n_trees: int = 6, leaf_size: int = 1024,
                    max_rounds: int = 2, random_state=0) -> np.ndarray:
    """Indices (n, k) of approximate k nearest neighbours of every point (float32 distances).

    ``n_trees`` random-projection trees with leaves of at most ``leaf_size`` points,
    solved by brute force, then up to ``max_rounds`` NN-descent rounds (stopping early
    when fewer than 0.1% of the points change neighbours).
    """
    rng = np.random.default_rng(random_state)
    X = np.ascontiguousarray(X, dtype=np.float32)
    sq = np.einsum("ij,ij->i", X, X)
    bi = bd = None
    leaf_size = max(int(leaf_size), k + 1)
    for _ in range(int(n_trees)):
        perm, starts, ends = _rp_leaves(X, leaf_size, rng)
        ci, cd = _leaf_knn(X, sq, perm, starts, ends, k)
        bi, bd = (ci, cd) if bi is None else _merge(bi, bd, ci, cd, k)
    for _ in range(int(max_rounds)):
        if _descent_round(X, sq, bi, bd, k) < 1e-3 * X.shape[0]:
            break
    if (bi < 0).any():  # pragma: no cover - every leaf holds more than k points
        raise RuntimeError("approximate_knn left a point with fewer than k neighbours")
    return bi


# ----------------------------------------------------------------------------- spanning edges
def euclidean_mst(X: np.ndarray):
    """Edges (a, b) of the exact Euclidean minimum spanning tree (Prim, O(n^2 d), O(n d) memory)."""
    n = X.shape[0]
    sq = np.einsum("ij,ij->i", X, X)
    # the vertices not yet in the tree, kept compact (swap-remove) with their data
    alive = np.arange(1, n)
    Xa, sqa = X[1:].copy(), sq[1:].copy()
    best = np.full(n - 1, np.inf)
    parent = np.zeros(n - 1, dtype=np.int64)
    cur = 0
    src, dst = np.empty(n - 1, dtype=np.int64), np.empty(n - 1, dtype=np.int64)
    for i in range(n - 1):
        m = n - 1 - i
        d = sqa[:m] - 2 * (Xa[:m] @ X[cur]) + sq[cur]
        upd = d < best[:m]
        best[:m][upd] = d[upd]
        parent[:m][upd] = cur
        j = int(np.argmin(best[:m]))
        cur = int(alive[j])
        src[i], dst[i] = parent[j], cur
        last = m - 1
        for arr in (alive, Xa, sqa, best, parent):
            arr[j] = arr[last]
    return src, dst


def components(s, t, n):
    """(number of connected components, component of each vertex) of the edges (s, t) on n vertices."""
    m = coo_matrix((np.ones(s.size, dtype=np.int8), (s, t)), shape=(n, n))
    return connected_components(m, directed=False)


def _nearest_members(X, order, ptr, groups, queries):
    """For each query point ``X[queries[i]]`` or coordinates, the member of ``groups[i]``
    nearest to it (brute force per group, a KD-tree for large batches)."""
    out = np.empty(groups.size, dtype=np.int64)
    q_order = np.argsort(groups, kind="stable")
    g_sorted = groups[q_order]
    bounds = np.flatnonzero(np.diff(g_sorted)) + 1
    for sel in np.split(q_order, bounds):
        if sel.size == 0:
            continue
        g = groups[sel[0]]
        members = order[ptr[g]:ptr[g + 1]]
        P = X[members]
        Q = queries[sel]
        if P.shape[0] * Q.shape[0] <= 1 << 24:
            d = np.einsum("ij,ij->i", P, P)[None, :] - 2 * Q @ P.T
            out[sel] = members[np.argmin(d, axis=1)]
        else:
            from sklearn.neighbors import KDTree

            out[sel] = members[KDTree(P).query(Q, k=1, return_distance=False)[:, 0]]
    return out


def spanning_edges(X: np.ndarray, s: np.ndarray, t: np.ndarray, n_partners: int = 5, rounds: int = 3):
    """Edges (a, b) that, added to the graph ``(s, t)`` on the points ``X``, make it connected.

    Per round: components, their centroids, ``n_partners`` nearest centroids per
    component; for every such pair, a close pair of points found by alternating
    nearest-member searches from the partner's centroid (``rounds`` times; the result is
    a pair of mutually nearest points across the two components, the closest pair for
    convex, well-separated components); the minimum spanning tree of the component graph
    weighted by those pair distances gives the edges added. Approximate (the exact
    answer is the Euclidean MST of the contracted graph), deterministic.
    """
    n = X.shape[0]
    c, labels = components(s, t, n)
    add_s, add_t = [], []
    while c > 1:
        order = np.argsort(labels, kind="stable")
        ptr = np.concatenate([[0], np.cumsum(np.bincount(labels, minlength=c))])
        count = np.diff(ptr).astype(np.float64)
        centroid = np.stack([np.bincount(labels, weights=X[:, j], minlength=c) for j in range(X.shape[1])], 1)
        centroid /= count[:, None]
        p = min(c - 1, int(n_partners))
        part = exact_knn(centroid, p)
        g = np.repeat(np.arange(c), p)
        h = part.ravel()
        key = np.unique(np.minimum(g, h) * c + np.maximum(g, h))
        g, h = key // c, key % c
        a = _nearest_members(X, order, ptr, g, centroid[h])
        b = _nearest_members(X, order, ptr, h, X[a])
        for _ in range(int(rounds)):
            a = _nearest_members(X, order, ptr, g, X[b])
            b = _nearest_members(X, order, ptr, h, X[a])
        d = np.linalg.norm(X[a] - X[b], axis=1)
        # the component graph's MST (zero distances nudged: a sparse matrix drops zeros)
        d = np.maximum(d, np.finfo(np.float64).tiny)
        tree = minimum_spanning_tree(coo_matrix((d, (g, h)), shape=(c, c))).tocoo()
        pos = {(int(i), int(j)): e for e, (i, j) in enumerate(zip(g, h))}
        sel = np.array([pos[(min(i, j), max(i, j))] for i, j in zip(tree.row, tree.col)], dtype=np.int64)
        add_s.append(a[sel])
        add_t.append(b[sel])
        c2, merged = components(g[sel], h[sel], c)
        labels = merged[labels]
        c = c2
    if not add_s:
        return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)
    return np.concatenate(add_s), np.concatenate(add_t)
