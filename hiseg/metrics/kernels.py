"""Compiled kernels of the BSDS benchmark (numba): thinning, pixel assignment, region labels.

:mod:`hiseg.metrics.matching`, :mod:`hiseg.metrics.tables` and
:mod:`hiseg.metrics.region` call these; nothing here reads files. On the region side,
:func:`ucm_labels_advance` grows the components of ``ucm2 <= t`` from one threshold to
the next (a union-find forest; ``scipy.ndimage.label``'s numbering read from a Fenwick
tree over the components' first sites) and :func:`pair_counts` counts label pairs. On
the boundary side, two kernels:

* :func:`thin` -- MATLAB's ``bwmorph(BW, 'thin', Inf)``: the two-subiteration parallel
  thinning of Guo & Hall (1989) as Lam, Lee & Suen (1992, p. 879) state it, zero padding,
  iterated until a whole iteration deletes nothing. The deletion tables are built here
  from the paper's three conditions (:func:`thinning_tables`); the result equals
  :func:`skimage.morphology.thin`'s (``tests/test_metrics_bsds.py``), at a fraction of its
  cost because only foreground pixels are visited.
* :func:`match_map` -- the minimum-cost assignment of a (thinned) predicted boundary map
  to one annotator's boundary map, with outliers, as the official ``correspondPixels``
  poses it: pairs within the tolerance cost ``rint(100 * distance)``, an unpaired pixel of
  either side costs the outlier weight. The candidate graph (pairs within the tolerance)
  is split into its connected components and each is solved exactly by
  :func:`lapjvsp`, a port of the LAPJVsp shortest augmenting path algorithm (Jonker &
  Volgenant, Computing 38, 1987; Volgenant's sparse Pascal code) that takes the same
  decision at every step as :func:`scipy.sparse.csgraph.min_weight_full_bipartite_matching`
  does on the same CSR graph (hence the same tie-breaking, hence the same counts).

Why components give the same answer as the whole graph
------------------------------------------------------
Every step of LAPJVsp reads and writes only the prices, assignments and costs of one
row and its columns; rows are visited in index order (column reduction: columns in
decreasing order; augmenting row reduction and augmentation: the free rows in the order
they were freed) and ties go to the lowest index (or the first entry of a row in CSR
order). So on a graph made of several components, the steps that touch one component
are, in the same order, the steps LAPJVsp takes on that component alone, once its rows
and columns are renumbered in the same relative order. :func:`match_map` numbers each
component's nodes in increasing pixel order, as the whole graph does.

Why a component of the last threshold can be copied
---------------------------------------------------
By the same argument, a component's assignment depends only on its own predicted and
annotator pixels, in increasing order. When the next threshold's map has a component
whose predicted pixels are exactly those of one of the last map's components, its
annotator pixels (the candidates of those pixels) and hence its pairs are the same: they
are copied, not solved (:func:`match_map`'s ``comp_*`` arguments). On the 100 val
gPb-owt-ucm maps at 99 thresholds this cuts the boundary benchmark's CPU time by a sixth
(the giant component of a low threshold changes at almost every threshold; the small
ones mostly do not).

Without numba
-------------
A Python where numba cannot be imported (the CUDA machine the project trains on has none)
gets the numpy/scipy twins of :mod:`hiseg.metrics._kernels_py` under the same names: the same
results, several times slower (enough for a training run's validation metric).

Why only the touched columns are reset
--------------------------------------
Volgenant's code resets the distance of every column before each augmenting path and
scans every column for the next minimum; the columns never reached keep an infinite
distance and are skipped. Resetting and scanning only the columns the path search
reached (and ordering tied columns by index) takes the same decisions in
O(columns reached) instead of O(all columns).
"""
from __future__ import annotations

import numpy as np

try:
    from numba import njit

    HAVE_NUMBA = True
except ImportError:  # e.g. the CUDA machine's Python, which has no numba: the numpy/scipy twins (end of file)
    HAVE_NUMBA = False

    def njit(*args, **kwargs):
        return lambda f: f

__all__ = ["HAVE_NUMBA", "label_range", "lapjvsp", "match_map", "neighbourhoods", "pair_counts", "thin",
           "thinning_tables", "ucm_labels_advance"]

_INF = np.inf


# ----------------------------------------------------------------------------
# thinning
# ----------------------------------------------------------------------------
def thinning_tables() -> tuple[np.ndarray, np.ndarray]:
    """Deletion tables of the Guo-Hall two-subiteration thinning.

    Index ``code`` of a table is the 8-neighbourhood of a pixel, bit ``k`` set when
    neighbour ``x_{k+1}`` is foreground, the neighbours numbered counter-clockwise from
    the east: ``x1`` E, ``x2`` NE, ``x3`` N, ``x4`` NW, ``x5`` W, ``x6`` SW, ``x7`` S,
    ``x8`` SE. A foreground pixel is deleted in the first subiteration when

    * G1: ``X_H = 1``, ``X_H`` counting the ``i`` in 1..4 with ``x_{2i-1} = 0`` and
      (``x_{2i} = 1`` or ``x_{2i+1} = 1``) (``x9 = x1``);
    * G2: ``2 <= min(n1, n2) <= 3``, ``n1 = sum_k (x_{2k-1} or x_{2k})``,
      ``n2 = sum_k (x_{2k} or x_{2k+1})``, k in 1..4;
    * G3: ``(x2 or x3 or not x8) and x1`` is false;

    and in the second subiteration with G3': ``(x6 or x7 or not x4) and x5`` false.

    Returns
    -------
    (numpy.ndarray, numpy.ndarray)
        Two ``uint8`` tables of 256 entries (1 = delete). Cost O(256).
    """
    first = np.zeros(256, dtype=np.uint8)
    second = np.zeros(256, dtype=np.uint8)
    for code in range(256):
        x = [bool(code >> k & 1) for k in range(8)]  # x[0] is x1
        xs = x + x[:1]  # xs[8] is x9 = x1
        x_h = sum(1 for i in range(4) if not xs[2 * i] and (xs[2 * i + 1] or xs[2 * i + 2]))
        n1 = sum(1 for k in range(4) if xs[2 * k] or xs[2 * k + 1])
        n2 = sum(1 for k in range(4) if xs[2 * k + 1] or xs[2 * k + 2])
        if x_h != 1 or not 2 <= min(n1, n2) <= 3:
            continue
        first[code] = not ((x[1] or x[2] or not x[7]) and x[0])
        second[code] = not ((x[5] or x[6] or not x[3]) and x[4])
    return first, second


_TABLES = np.stack(thinning_tables())


@njit(cache=True, nogil=True)
def _thin(img, tables):
    h, w = img.shape
    out = img.copy()
    n = 0
    for y in range(h):
        for x in range(w):
            if out[y, x]:
                n += 1
    ys = np.empty(n, dtype=np.int64)
    xs = np.empty(n, dtype=np.int64)
    k = 0
    for y in range(h):
        for x in range(w):
            if out[y, x]:
                ys[k] = y
                xs[k] = x
                k += 1
    gone = np.empty(n, dtype=np.int64)
    deleted_any = True
    while deleted_any:  # one iteration = both subiterations
        deleted_any = False
        for sub in range(2):
            nd = 0
            for k in range(n):
                y, x = ys[k], xs[k]
                code = 0
                up, down, left, right = y > 0, y < h - 1, x > 0, x < w - 1
                if right and out[y, x + 1]:
                    code |= 1
                if up and right and out[y - 1, x + 1]:
                    code |= 2
                if up and out[y - 1, x]:
                    code |= 4
                if up and left and out[y - 1, x - 1]:
                    code |= 8
                if left and out[y, x - 1]:
                    code |= 16
                if down and left and out[y + 1, x - 1]:
                    code |= 32
                if down and out[y + 1, x]:
                    code |= 64
                if down and right and out[y + 1, x + 1]:
                    code |= 128
                if tables[sub, code]:
                    gone[nd] = k
                    nd += 1
            for q in range(nd):  # parallel: delete after the whole pass
                out[ys[gone[q]], xs[gone[q]]] = 0
            if nd:
                deleted_any = True
                keep = 0
                for k in range(n):
                    if out[ys[k], xs[k]]:
                        ys[keep] = ys[k]
                        xs[keep] = xs[k]
                        keep += 1
                n = keep
    return out


def thin(mask: np.ndarray) -> np.ndarray:
    """Guo-Hall thinning of a boolean map to convergence (see the module docstring).

    Parameters
    ----------
    mask : numpy.ndarray of bool, shape (H, W)

    Returns
    -------
    numpy.ndarray of bool, shape (H, W)
        A new array. Cost O(H W) to list the foreground, then O(foreground) per pass.
    """
    return _thin(np.ascontiguousarray(mask, dtype=bool).view(np.uint8), _TABLES).view(bool)


# ----------------------------------------------------------------------------
# LAPJVsp
# ----------------------------------------------------------------------------
@njit(cache=True, nogil=True)
def _augment_back(lab, labc, y, ycost, x, j, i0):
    """Flip the alternating path ending at free column ``j`` back to row ``i0``."""
    while True:
        i = lab[j]
        y[j] = i
        ycost[j] = labc[j]
        k = j
        j = x[i]
        x[i] = k
        if i == i0:
            return


@njit(cache=True, nogil=True)
def _entry(first, kk, i, j):
    """Position of column ``j`` in row ``i`` of the CSR graph."""
    t = first[i]
    while kk[t] != j:
        t += 1
    return t


@njit(cache=True, nogil=True)
def _reduce_columns(first, kk, cc, n, v, x, y, ycost, free):
    """Column reduction and reduction transfer; returns the number of free rows (listed
    in ``free``, increasing)."""
    several = np.zeros(n, dtype=np.bool_)  # row picked by more than one column
    # each column's cheapest row (the first one on ties), then each row keeps the
    # highest-numbered column that picked it
    for i in range(n):
        for t in range(first[i], first[i + 1]):
            j = kk[t]
            if cc[t] < v[j]:
                v[j] = cc[t]
                y[j] = i
                ycost[j] = cc[t]
    for j in range(n - 1, -1, -1):
        i = y[j]
        if x[i] == -1:
            x[i] = j
        else:
            y[j] = -1
            several[i] = True
    # reduction transfer to the rows with one column; the unassigned rows are free
    nfree = 0
    for i in range(n):
        if several[i]:
            continue
        if x[i] != -1:
            j1 = x[i]
            low = _INF
            for t in range(first[i], first[i + 1]):
                j = kk[t]
                if j != j1 and cc[t] - v[j] < low:
                    low = cc[t] - v[j]
            v[j1] = cc[_entry(first, kk, i, j1)] - low
        else:
            free[nfree] = i
            nfree += 1
    return nfree


@njit(cache=True, nogil=True)
def _reduce_rows(first, kk, cc, v, x, y, ycost, free, nfree):
    """Two rounds of augmenting row reduction; returns the number of rows left free."""
    for _ in range(2):
        h = 0
        n_round = nfree
        nfree = 0
        while h < n_round:
            i = free[h]
            h += 1
            j0 = -1
            j1 = -1
            c0 = 0.0
            c1 = 0.0
            u0 = _INF  # lowest reduced cost of the row
            u1 = _INF  # second lowest
            for t in range(first[i], first[i + 1]):
                j = kk[t]
                dj = cc[t] - v[j]
                if dj < u1:
                    if dj >= u0:
                        u1 = dj
                        j1 = j
                        c1 = cc[t]
                    else:
                        u1 = u0
                        u0 = dj
                        j1 = j0
                        c1 = c0
                        j0 = j
                        c0 = cc[t]
            i0 = y[j0]
            if u0 < u1:
                v[j0] += u0 - u1
            elif i0 != -1:
                j0 = j1
                c0 = c1
                i0 = y[j0]
            x[i] = j0
            y[j0] = i
            ycost[j0] = c0
            if i0 != -1:
                if u0 < u1:  # the displaced row is treated next
                    h -= 1
                    free[h] = i0
                else:  # ... or in the next round
                    free[nfree] = i0
                    nfree += 1
    return nfree


@njit(cache=True, nogil=True)
def _first_free(todo, top, y, scanned):
    """The first unassigned column of ``todo[0..top]``, or -1; the columns before it
    are marked scanned."""
    for q in range(top + 1):
        j = todo[q]
        if y[j] == -1:
            return j
        scanned[j] = True
    return -1


@njit(cache=True, nogil=True)
def _next_minimum(front, n_front, scanned, d, todo):
    """The least distance among the reached, unscanned columns (``front[:n_front]``,
    compacted in place); its columns go to ``todo[0..top]`` in increasing order (an
    insertion sort: ties are few). Returns ``(low, top, n_front)``."""
    low = _INF
    keep = 0
    for q in range(n_front):
        j = front[q]
        if not scanned[j]:
            front[keep] = j
            keep += 1
            if d[j] < low:
                low = d[j]
    top = -1
    for q in range(keep):
        j = front[q]
        if d[j] == low:
            top += 1
            r = top - 1
            while r >= 0 and todo[r] > j:
                todo[r + 1] = todo[r]
                r -= 1
            todo[r + 1] = j
    return low, top, keep


@njit(cache=True, nogil=True)
def _augment(i0, first, kk, cc, n, v, x, y, ycost, w):
    """One shortest augmenting path from the free row ``i0`` (Dijkstra on reduced costs),
    then the price update of the columns scanned before the last minimum and the flip
    of the path. ``w`` holds the work arrays (see :func:`lapjvsp`)."""
    d, scanned, lab, labc, todo, reached, front = w
    n_reached = 0
    low = _INF
    top = -1  # todo[0..top]: columns at distance `low`, not yet scanned
    for t in range(first[i0], first[i0 + 1]):
        j = kk[t]
        dj = cc[t] - v[j]
        reached[n_reached] = j
        front[n_reached] = j
        n_reached += 1
        d[j] = dj
        lab[j] = i0
        labc[j] = cc[t]
        if dj <= low:
            if dj < low:
                top = -1
                low = dj
            top += 1
            todo[top] = j
    n_front = n_reached
    last = n  # todo[last..n-1]: the columns scanned before the latest minimum
    end_col = _first_free(todo, top, y, scanned)
    update_prices = False
    bottom = n - 1
    while end_col < 0:
        j0 = todo[top]
        top -= 1
        i = y[j0]
        todo[bottom] = j0
        bottom -= 1
        hi = ycost[j0] - v[j0] - low
        for t in range(first[i], first[i + 1]):
            j = kk[t]
            if not scanned[j]:
                dj = cc[t] - v[j] - hi
                if dj < d[j]:
                    if d[j] == _INF:
                        reached[n_reached] = j
                        n_reached += 1
                        front[n_front] = j
                        n_front += 1
                    d[j] = dj
                    lab[j] = i
                    labc[j] = cc[t]
                    if dj == low:
                        if y[j] == -1:
                            end_col = j
                            break
                        top += 1
                        todo[top] = j
                        scanned[j] = True
        if end_col >= 0:
            update_prices = True
        elif top == -1:
            last = bottom + 1
            low, top, n_front = _next_minimum(front, n_front, scanned, d, todo)
            end_col = _first_free(todo, top, y, scanned)
            update_prices = end_col >= 0
    if update_prices:
        for q in range(last, n):
            j = todo[q]
            v[j] += d[j] - low
    _augment_back(lab, labc, y, ycost, x, end_col, i0)
    for q in range(n_reached):
        j = reached[q]
        d[j] = _INF
        scanned[j] = False


@njit(cache=True, nogil=True)
def lapjvsp(first, kk, cc, n):
    """Minimum-cost perfect matching of a square sparse bipartite graph (LAPJVsp).

    Parameters
    ----------
    first, kk, cc : numpy.ndarray
        The graph in CSR form (``indptr`` int64, ``indices`` int64 sorted within each
        row, ``data`` float64 costs).
    n : int
        Number of rows, and of columns.

    Returns
    -------
    numpy.ndarray of int64, shape (n,)
        The column assigned to each row; the same assignment as
        :func:`scipy.sparse.csgraph.min_weight_full_bipartite_matching` returns for the
        same CSR graph. The graph must hold a perfect matching (every caller here builds
        one that does; otherwise the result is undefined). Cost: column reduction and two
        rounds of augmenting row reduction, O(nnz), then one shortest augmenting path per
        row left free, each O(entries of the rows it reaches).
    """
    v = np.full(n, _INF)
    x = np.full(n, -1, dtype=np.int64)
    y = np.full(n, -1, dtype=np.int64)
    ycost = np.empty(n)  # cost of the entry (y[j], j): saves a search of the row
    free = np.empty(n, dtype=np.int64)
    nfree = _reduce_columns(first, kk, cc, n, v, x, y, ycost, free)
    nfree = _reduce_rows(first, kk, cc, v, x, y, ycost, free, nfree)
    work = (
        np.full(n, _INF),  # d: distance of a reached column
        np.zeros(n, dtype=np.bool_),  # scanned
        np.zeros(n, dtype=np.int64),  # lab: the row a column is reached from ...
        np.empty(n),  # labc: ... and the cost of that entry
        np.empty(n, dtype=np.int64),  # todo: columns to scan (bottom), scanned (top)
        np.empty(n, dtype=np.int64),  # reached: the columns whose d is finite
        np.empty(n, dtype=np.int64),  # front: reached columns, maybe scanned since
    )
    for f in range(nfree):
        _augment(free[f], first, kk, cc, n, v, x, y, ycost, work)
    return x


# ----------------------------------------------------------------------------
# assignment of a predicted map to one annotator
# ----------------------------------------------------------------------------
@njit(cache=True, nogil=True)
def _solve_component(pn, gn, ptr, eg, ec, gptr, gadj, loc_p, loc_g, ow, mp, mg, n_out):
    """Solve one component (predicted nodes ``pn``, annotator nodes ``gn``, both
    increasing) and append its pairs to ``mp``/``mg`` from ``n_out`` on; returns the new
    count. The graph is the one :func:`match_map` describes."""
    a = pn.size
    b = gn.size
    for i in range(a):
        loc_p[pn[i]] = i
    for j in range(b):
        loc_g[gn[j]] = j
    n = a + b
    nnz = n
    for i in range(a):
        nnz += 2 * (ptr[pn[i] + 1] - ptr[pn[i]])
    first = np.empty(n + 1, dtype=np.int64)
    kk = np.empty(nnz, dtype=np.int64)
    cc = np.empty(nnz, dtype=np.float64)
    wo = ow + 1.0
    t = 0
    for i in range(a):  # a predicted pixel: its candidates, then its own outlier
        first[i] = t
        p = pn[i]
        for e in range(ptr[p], ptr[p + 1]):  # candidates sorted by annotator index
            kk[t] = loc_g[eg[e]]
            cc[t] = ec[e] + 1.0
            t += 1
        kk[t] = b + i
        cc[t] = wo
        t += 1
    for j in range(b):  # an annotator pixel's outlier: the pixel, then the mirrored pairs
        first[a + j] = t
        kk[t] = j
        cc[t] = wo
        t += 1
        g = gn[j]
        for e in range(gptr[g], gptr[g + 1]):  # predicted pixels, increasing
            kk[t] = b + loc_p[gadj[e]]
            cc[t] = wo
            t += 1
    first[n] = t
    x = lapjvsp(first, kk, cc, n)
    for i in range(a):
        if x[i] < b:
            mp[n_out] = pn[i]
            mg[n_out] = gn[x[i]]
            n_out += 1
    return n_out


@njit(cache=True, nogil=True)
def neighbourhoods(glin, h, w, dy, dx, cost):
    """The candidate positions of every annotator pixel: those within the tolerance.

    Parameters
    ----------
    glin : numpy.ndarray of int64
        Flat positions (``y * w + x``) of the annotator's pixels, increasing.
    h, w : int
        Image shape.
    dy, dx, cost : numpy.ndarray of int64
        Offsets within the tolerance and their costs ``rint(100 * distance)``.

    Returns
    -------
    (ptr, lin, lcost) : numpy.ndarray of int64
        CSR lists: for annotator pixel ``g``, the in-image positions
        ``lin[ptr[g]:ptr[g + 1]]`` and their costs. Cost O(pixels * offsets).
    """
    n = glin.size
    nof = dy.size
    ptr = np.zeros(n + 1, dtype=np.int64)
    for g in range(n):
        yg = glin[g] // w
        xg = glin[g] - yg * w
        c = 0
        for k in range(nof):
            if 0 <= yg + dy[k] < h and 0 <= xg + dx[k] < w:
                c += 1
        ptr[g + 1] = ptr[g] + c
    lin = np.empty(ptr[n], dtype=np.int64)
    lcost = np.empty(ptr[n], dtype=np.int64)
    t = 0
    for g in range(n):
        yg = glin[g] // w
        xg = glin[g] - yg * w
        for k in range(nof):
            yy = yg + dy[k]
            xx = xg + dx[k]
            if 0 <= yy < h and 0 <= xx < w:
                lin[t] = yy * w + xx
                lcost[t] = cost[k]
                t += 1
    return ptr, lin, lcost


@njit(cache=True, nogil=True)
def _candidates(pid, n1, nptr, nlin, ncost):
    """The candidate pairs of :func:`match_map`, from both sides: annotator pixel g -> its
    predicted pixels (``gptr``/``gadj``, sorted by p), predicted pixel p -> its annotator
    pixels and their costs (``ptr``/``eg``/``ec``, sorted by g since g is visited in
    increasing order)."""
    n_gt = nptr.size - 1
    gptr = np.zeros(n_gt + 1, dtype=np.int64)
    deg = np.zeros(n1 + 1, dtype=np.int64)
    for g in range(n_gt):
        c = 0
        for e in range(nptr[g], nptr[g + 1]):
            p = pid[nlin[e]]
            if p >= 0:
                c += 1
                deg[p + 1] += 1
        gptr[g + 1] = gptr[g] + c
    ptr = np.cumsum(deg)
    ne = ptr[n1]
    eg = np.empty(ne, dtype=np.int64)
    ec = np.empty(ne, dtype=np.int64)
    gadj = np.empty(ne, dtype=np.int64)
    fill = ptr[:-1].copy()
    for g in range(n_gt):
        t = gptr[g]
        for e in range(nptr[g], nptr[g + 1]):
            p = pid[nlin[e]]
            if p >= 0:
                r = t - 1  # insertion into g's list, kept sorted by p
                while r >= gptr[g] and gadj[r] > p:
                    gadj[r + 1] = gadj[r]
                    r -= 1
                gadj[r + 1] = p
                t += 1
                eg[fill[p]] = g
                ec[fill[p]] = ncost[e]
                fill[p] += 1
    return ptr, eg, ec, gptr, gadj


@njit(cache=True, nogil=True)
def _component(s, ptr, eg, gptr, gadj, seen_p, seen_g, queue):
    """The connected component of predicted pixel ``s`` (breadth-first search, marking
    ``seen_p``/``seen_g``): its predicted and annotator nodes, each increasing."""
    seen_p[s] = True
    queue[0] = s  # p >= 0, annotator g as -(g + 1)
    head = 0
    tail = 1
    na = 0
    while head < tail:
        node = queue[head]
        head += 1
        if node >= 0:
            na += 1
            for e in range(ptr[node], ptr[node + 1]):
                g = eg[e]
                if not seen_g[g]:
                    seen_g[g] = True
                    queue[tail] = -(g + 1)
                    tail += 1
        else:
            g = -node - 1
            for e in range(gptr[g], gptr[g + 1]):
                p = gadj[e]
                if not seen_p[p]:
                    seen_p[p] = True
                    queue[tail] = p
                    tail += 1
    pn = np.empty(na, dtype=np.int64)
    gn = np.empty(tail - na, dtype=np.int64)
    ia = 0
    ib = 0
    for q in range(tail):
        if queue[q] >= 0:
            pn[ia] = queue[q]
            ia += 1
        else:
            gn[ib] = -queue[q] - 1
            ib += 1
    pn.sort()
    gn.sort()
    return pn, gn


@njit(cache=True, nogil=True)
def _earlier_component(pn, plin, comp_of, comp_n):
    """The component of the earlier call whose predicted pixels are exactly those of
    ``pn`` (same positions), or -1. Its annotator pixels are then the same too (the
    candidates of the same positions), so is its assignment."""
    c = comp_of[plin[pn[0]]]
    if c < 0 or comp_n[c] != pn.size:
        return -1
    for i in range(1, pn.size):
        if comp_of[plin[pn[i]]] != c:
            return -1
    return c


@njit(cache=True, nogil=True)
def match_map(pid, plin, nptr, nlin, ncost, ow, comp_of, prev_plin, comp_n, comp_ptr, comp_pos, comp_g):
    """Optimal correspondence of predicted boundary pixels with one annotator's.

    Parameters
    ----------
    pid : numpy.ndarray of int64, shape (h * w,)
        Index of the predicted pixel at each flat position (its rank in row-major
        order), -1 where there is none.
    plin : numpy.ndarray of int64
        Flat positions of the predicted pixels, increasing (``pid[plin[i]] == i``).
    nptr, nlin, ncost : numpy.ndarray of int64
        The annotator's :func:`neighbourhoods`.
    ow : int
        Cost of an unpaired pixel (``ceil(100 * outlier distance)``).
    comp_of, prev_plin, comp_n, comp_ptr, comp_pos, comp_g : numpy.ndarray of int64
        The components of the previous call with the same annotator (all -1 and empty
        arrays for none): ``comp_of`` (shape (h * w,)), the component of each of its
        predicted pixels (their positions ``prev_plin``), -1 elsewhere; per component,
        its number of predicted pixels ``comp_n`` and its pairs ``comp_pos`` (positions
        of predicted pixels) / ``comp_g`` (annotator pixels) in
        ``comp_ptr[c]:comp_ptr[c + 1]``. A component of this call whose predicted pixels
        are those of an earlier component has its pairs copied instead of solved (the
        thresholds of a ucm2 nest: most components of one threshold are the previous
        threshold's). ``comp_of`` is updated in place to this call's components.

    Returns
    -------
    (mp, mg, comp_n, comp_ptr, comp_pos, comp_g)
        Paired indices of predicted and annotator pixels, minimising
        ``sum(pair costs) + ow * (unpaired pixels)``; among optimal pairings, the one
        scipy's LAPJVsp picks on the graph of ``hiseg.metrics.matching`` (every pixel
        with a private outlier on the other side, outliers paired wherever their pixels
        may pair, every cost + 1); then this call's components, for the next call. Cost
        O(annotator pixels * offsets) for the candidates, then one :func:`lapjvsp` per
        connected component of the candidate graph that is not an earlier one.
    """
    n1 = plin.size
    n_gt = nptr.size - 1
    ptr, eg, ec, gptr, gadj = _candidates(pid, n1, nptr, nlin, ncost)
    seen_p = np.zeros(n1, dtype=np.bool_)
    seen_g = np.zeros(n_gt, dtype=np.bool_)
    queue = np.empty(n1 + n_gt, dtype=np.int64)
    loc_p = np.empty(n1, dtype=np.int64)
    loc_g = np.empty(n_gt, dtype=np.int64)
    cap = min(n1, n_gt)
    mp = np.empty(cap, dtype=np.int64)
    mg = np.empty(cap, dtype=np.int64)
    own = np.full(n1, -1, dtype=np.int64)  # this call's component of each predicted pixel
    new_n = np.empty(n1, dtype=np.int64)
    new_ptr = np.zeros(n1 + 1, dtype=np.int64)
    k = 0
    n_out = 0
    for s in range(n1):
        if seen_p[s] or ptr[s + 1] == ptr[s]:
            continue
        pn, gn = _component(s, ptr, eg, gptr, gadj, seen_p, seen_g, queue)
        c = _earlier_component(pn, plin, comp_of, comp_n)
        if c >= 0:
            for e in range(comp_ptr[c], comp_ptr[c + 1]):
                mp[n_out] = pid[comp_pos[e]]
                mg[n_out] = comp_g[e]
                n_out += 1
        else:
            n_out = _solve_component(pn, gn, ptr, eg, ec, gptr, gadj, loc_p, loc_g, ow, mp, mg, n_out)
        for i in range(pn.size):
            own[pn[i]] = k
        new_n[k] = pn.size
        new_ptr[k + 1] = n_out
        k += 1
    for i in range(prev_plin.size):
        comp_of[prev_plin[i]] = -1
    for i in range(n1):
        comp_of[plin[i]] = own[i]
    mp = mp[:n_out].copy()
    mg = mg[:n_out].copy()
    return mp, mg, new_n[:k].copy(), new_ptr[:k + 1].copy(), plin[mp], mg.copy()


# ----------------------------------------------------------------------------
# region labels of a ucm2 at increasing thresholds
# ----------------------------------------------------------------------------
@njit(cache=True, nogil=True)
def _find(parent, s):
    while parent[s] != s:
        parent[s] = parent[parent[s]]  # path halving
        s = parent[s]
    return s


@njit(cache=True, nogil=True)
def _bit_add(bit, k, delta):
    k += 1
    while k < bit.size:
        bit[k] += delta
        k += k & -k


@njit(cache=True, nogil=True)
def _bit_prefix(bit, k):
    """Sum of the entries ``0..k``."""
    k += 1
    out = 0
    while k > 0:
        out += bit[k]
        k -= k & -k
    return out


@njit(cache=True, nogil=True)
def ucm_labels_advance(ucm2, t_prev, t, eight, no_vertices, parent, minsite, bit, seen):
    """Grow the components of ``ucm2 <= t`` from those of ``ucm2 <= t_prev`` (``t_prev <
    t``; ``t_prev = -inf`` at the start) and return the label image of the pixel sites.

    Parameters
    ----------
    ucm2 : numpy.ndarray of float64, shape (2H+1, 2W+1)
    t_prev, t : float
    eight : bool
        8-connectivity (else 4).
    no_vertices : bool
        The grid vertices (even row, even column) never belong to a component.
    parent, minsite, bit, seen : numpy.ndarray of int64
        The state, sizes ``(2H+1)(2W+1)``, same, same + 1, same: the union-find forest
        (``parent = -1``: site not in the set), each root's first site in row-major
        order, a Fenwick tree counting the components by their first site, and a
        scratch array. Initialised by the caller to -1, anything, 0, -1.

    Returns
    -------
    numpy.ndarray of int32, shape (H, W)
        The components numbered from 1 in the row-major order of their first site
        (``scipy.ndimage.label``'s numbering), read at ``[1::2, 1::2]``; 0 where the
        pixel site is not in the set. Cost O(sites) for the scan, near O(1) per union,
        O(H W) finds and O(log(sites)) per component read.
    """
    h2, w2 = ucm2.shape
    for y in range(h2):
        for x in range(w2):
            val = ucm2[y, x]
            if not (t_prev < val <= t):
                continue
            if no_vertices and y % 2 == 0 and x % 2 == 0:
                continue
            s = y * w2 + x
            parent[s] = s
            minsite[s] = s
            _bit_add(bit, s, 1)
            for dy in range(-1, 2):
                for dx in range(-1, 2):
                    if (dy == 0 and dx == 0) or (not eight and dy != 0 and dx != 0):
                        continue
                    yy = y + dy
                    xx = x + dx
                    if yy < 0 or yy >= h2 or xx < 0 or xx >= w2:
                        continue
                    nb = yy * w2 + xx
                    if parent[nb] < 0:
                        continue
                    ra = _find(parent, s)
                    rb = _find(parent, nb)
                    if ra == rb:
                        continue
                    # the component with the later first site stops being counted
                    if minsite[ra] > minsite[rb]:
                        ra, rb = rb, ra
                    _bit_add(bit, minsite[rb], -1)
                    parent[rb] = ra
    h = (h2 - 1) // 2
    w = (w2 - 1) // 2
    out = np.zeros((h, w), dtype=np.int32)
    roots = np.empty(h * w, dtype=np.int64)
    n_roots = 0
    for i in range(h):
        for j in range(w):
            s = (2 * i + 1) * w2 + 2 * j + 1
            if parent[s] < 0:
                continue
            r = _find(parent, s)
            if seen[r] < 0:  # its label, read once per component
                seen[r] = _bit_prefix(bit, minsite[r])
                roots[n_roots] = r
                n_roots += 1
            out[i, j] = seen[r]
    for q in range(n_roots):
        seen[roots[q]] = -1
    return out


# ----------------------------------------------------------------------------
# contingency tables
# ----------------------------------------------------------------------------
@njit(cache=True, nogil=True)
def label_range(a, b):
    """``(min over both, max(a) + 1, max(b) + 1)`` of two non-empty label arrays."""
    lo = min(a[0], b[0])
    ha = a[0]
    hb = b[0]
    for q in range(a.size):
        if a[q] > ha:
            ha = a[q]
        if a[q] < lo:
            lo = a[q]
    for q in range(b.size):
        if b[q] > hb:
            hb = b[q]
        if b[q] < lo:
            lo = b[q]
    return lo, ha + 1, hb + 1


@njit(cache=True, nogil=True)
def pair_counts(a, b, ka, kb, dense):
    """Contingency table of two label arrays (same size, labels in ``[0, ka)`` and
    ``[0, kb)``).

    ``dense`` is a zeroed int64 scratch array of at least ``ka * kb`` entries, given
    back zeroed. Returns ``(keys, n, na, nb)``: the pairs ``a * kb + b`` that occur, in
    increasing order, their counts, and the label areas. Cost O(N + U log U) for U
    distinct pairs.
    """
    na = np.zeros(ka, dtype=np.int64)
    nb = np.zeros(kb, dtype=np.int64)
    touched = np.empty(min(a.size, ka * kb), dtype=np.int64)
    nt = 0
    for q in range(a.size):
        k = a[q] * kb + b[q]
        if dense[k] == 0:
            touched[nt] = k
            nt += 1
        dense[k] += 1
        na[a[q]] += 1
        nb[b[q]] += 1
    keys = np.sort(touched[:nt])
    n = np.empty(nt, dtype=np.int64)
    for q in range(nt):
        n[q] = dense[keys[q]]
        dense[keys[q]] = 0
    return keys, n, na, nb


if not HAVE_NUMBA:  # the same results from numpy and scipy, several times slower (hiseg.metrics._kernels_py)
    from ._kernels_py import label_range, match_map, neighbourhoods, pair_counts, thin, ucm_labels_advance  # noqa: F811
