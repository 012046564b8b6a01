"""LAPJVsp: the minimum-cost perfect matching of a square sparse bipartite graph.

A port of the shortest augmenting path algorithm of Jonker & Volgenant (Computing 38, 1987;
Volgenant's sparse Pascal code) that takes the same decision at every step as
:func:`scipy.sparse.csgraph.min_weight_full_bipartite_matching` does on the same CSR graph
(hence the same tie-breaking): column reduction and reduction transfer, two rounds of
augmenting row reduction, then one shortest augmenting path per row left free.

Why only the touched columns are reset
--------------------------------------
Volgenant's code resets the distance of every column before each augmenting path and
scans every column for the next minimum; the columns never reached keep an infinite
distance and are skipped. Resetting and scanning only the columns the path search
reached (and ordering tied columns by index) takes the same decisions in
O(columns reached) instead of O(all columns).
"""
from __future__ import annotations

from typing import NamedTuple

import numpy as np

from ._jit import njit

__all__ = ["lapjvsp"]

_INF = np.inf


class Csr(NamedTuple):
    """The graph in CSR form: ``first`` (indptr, int64), ``kk`` (column indices, int64, sorted
    within each row) and ``cc`` (float64 costs)."""

    first: np.ndarray
    kk: np.ndarray
    cc: np.ndarray


class Duals(NamedTuple):
    """The state the steps refine: the column prices ``v`` (float64), the column of each row
    ``x`` and the row of each column ``y`` (int64, -1 = unassigned), and ``ycost``, the cost of
    the entry ``(y[j], j)`` (saves a search of the row)."""

    v: np.ndarray
    x: np.ndarray
    y: np.ndarray
    ycost: np.ndarray


class Work(NamedTuple):
    """The work arrays of :func:`_augment`, allocated once per :func:`lapjvsp`."""

    d: np.ndarray  #: distance of a reached column (float64, inf when not reached)
    scanned: np.ndarray  #: bool
    lab: np.ndarray  #: the row a column is reached from ...
    labc: np.ndarray  #: ... and the cost of that entry
    todo: np.ndarray  #: columns to scan (bottom), scanned (top)
    reached: np.ndarray  #: the columns whose d is finite
    front: np.ndarray  #: reached columns, maybe scanned since


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
def _reduce_columns(g, n, s, free):
    """Column reduction and reduction transfer of graph ``g`` (:class:`Csr`) into state ``s``
    (:class:`Duals`); returns the number of free rows (listed in ``free``, increasing)."""
    first, kk, cc = g
    v, x, y, ycost = s
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
def _reduce_rows(g, s, free, nfree):
    """Two rounds of augmenting row reduction of graph ``g`` (:class:`Csr`) on state ``s``
    (:class:`Duals`); returns the number of rows left free."""
    first, kk, cc = g
    v, x, y, ycost = s
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
def _augment(i0, g, n, s, w):
    """One shortest augmenting path from the free row ``i0`` (Dijkstra on reduced costs) in
    graph ``g`` (:class:`Csr`), then the price update of the columns scanned before the last
    minimum and the flip of the path, in state ``s`` (:class:`Duals`). ``w``: the work arrays
    (:class:`Work`)."""
    first, kk, cc = g
    v, x, y, ycost = s
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
    g = Csr(first, kk, cc)
    s = Duals(np.full(n, _INF), np.full(n, -1, dtype=np.int64), np.full(n, -1, dtype=np.int64), np.empty(n))
    free = np.empty(n, dtype=np.int64)
    nfree = _reduce_columns(g, n, s, free)
    nfree = _reduce_rows(g, s, free, nfree)
    work = Work(np.full(n, _INF), np.zeros(n, dtype=np.bool_), np.zeros(n, dtype=np.int64), np.empty(n),
                np.empty(n, dtype=np.int64), np.empty(n, dtype=np.int64), np.empty(n, dtype=np.int64))
    for f in range(nfree):
        _augment(free[f], g, n, s, work)
    return s.x
