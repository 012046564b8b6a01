"""The minimum-cost assignment of a (thinned) predicted boundary map to one annotator's.

:func:`match_map` poses it as the official ``correspondPixels`` does, with outliers: pairs
within the tolerance cost ``rint(100 * distance)``, an unpaired pixel of either side costs the
outlier weight. The candidate graph (pairs within the tolerance, :func:`neighbourhoods`) is
split into its connected components and each is solved exactly by
:func:`~hiseg.metrics.kernels.lapjvsp.lapjvsp`.

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
are copied, not solved (:class:`Earlier`). On the 100 val gPb-owt-ucm maps at 99 thresholds
this cuts the boundary benchmark's CPU time by a sixth (the giant component of a low
threshold changes at almost every threshold; the small ones mostly do not).
"""
from __future__ import annotations

from typing import NamedTuple

import numpy as np

from ._jit import njit
from .lapjvsp import lapjvsp

__all__ = ["neighbourhoods", "match_map", "match_components", "Neighbourhoods", "Earlier"]


class Neighbourhoods(NamedTuple):
    """The candidate positions of every annotator pixel (:func:`neighbourhoods`): those of
    annotator pixel ``g`` are ``lin[ptr[g]:ptr[g + 1]]``, at costs ``cost[...]`` (int64 each)."""

    ptr: np.ndarray
    lin: np.ndarray
    cost: np.ndarray


class Earlier(NamedTuple):
    """The components of the previous :func:`match_components` call with the same annotator
    (all -1 and empty arrays for none), int64 arrays: ``comp_of`` (shape (h * w,)), the
    component of each of its predicted pixels (their positions ``prev_plin``), -1 elsewhere; per
    component, its number of predicted pixels ``comp_n`` and its pairs ``comp_pos`` (positions of
    predicted pixels) / ``comp_g`` (annotator pixels) in ``comp_ptr[c]:comp_ptr[c + 1]``."""

    comp_of: np.ndarray
    prev_plin: np.ndarray
    comp_n: np.ndarray
    comp_ptr: np.ndarray
    comp_pos: np.ndarray
    comp_g: np.ndarray


class Candidates(NamedTuple):
    """The candidate pairs from both sides: predicted pixel p -> its annotator pixels and their
    costs (``eg``/``ec`` in ``ptr[p]:ptr[p + 1]``, sorted by g since g is visited in increasing
    order), annotator pixel g -> its predicted pixels (``gadj`` in ``gptr[g]:gptr[g + 1]``,
    sorted by p)."""

    ptr: np.ndarray
    eg: np.ndarray
    ec: np.ndarray
    gptr: np.ndarray
    gadj: np.ndarray


class Pairs(NamedTuple):
    """The pairs found so far: predicted pixel indices ``mp``, annotator pixels ``mg``."""

    mp: np.ndarray
    mg: np.ndarray


class Local(NamedTuple):
    """Scratch of :func:`_solve_component`: each node's index inside its component."""

    loc_p: np.ndarray
    loc_g: np.ndarray


@njit(cache=True, nogil=True)
def _solve_component(pn, gn, cand, loc, ow, out, n_out):
    """Solve one component (predicted nodes ``pn``, annotator nodes ``gn``, both
    increasing) of the candidate pairs ``cand`` (:class:`Candidates`) and append its pairs to
    ``out`` (:class:`Pairs`) from ``n_out`` on; returns the new count. ``loc``: the
    :class:`Local` scratch, ``ow`` the outlier cost. The graph is the one :func:`match_map`
    describes."""
    ptr, eg, ec, gptr, gadj = cand
    loc_p, loc_g = loc
    mp, mg = out
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
    return Neighbourhoods(ptr, lin, lcost)


@njit(cache=True, nogil=True)
def _candidates(pid, n1, hood):
    """The :class:`Candidates` of :func:`match_map` from the annotator's
    :class:`Neighbourhoods` ``hood``."""
    nptr, nlin, ncost = hood
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
    return Candidates(ptr, eg, ec, gptr, gadj)


@njit(cache=True, nogil=True)
def _component(s, cand, seen_p, seen_g, queue):
    """The connected component of predicted pixel ``s`` in the candidate pairs ``cand``
    (:class:`Candidates`; breadth-first search, marking ``seen_p``/``seen_g``): its predicted and
    annotator nodes, each increasing."""
    ptr, eg, gptr, gadj = cand.ptr, cand.eg, cand.gptr, cand.gadj
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
def match_components(pid, plin, hood, ow, earlier):
    """Optimal correspondence of predicted boundary pixels with one annotator's.

    Parameters
    ----------
    pid : numpy.ndarray of int64, shape (h * w,)
        Index of the predicted pixel at each flat position (its rank in row-major
        order), -1 where there is none.
    plin : numpy.ndarray of int64
        Flat positions of the predicted pixels, increasing (``pid[plin[i]] == i``).
    hood : Neighbourhoods
        The annotator's :func:`neighbourhoods`.
    ow : int
        Cost of an unpaired pixel (``ceil(100 * outlier distance)``).
    earlier : Earlier
        The components of the previous call with the same annotator. A component of this call whose predicted pixels
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
    comp_of, prev_plin, comp_n, comp_ptr, comp_pos, comp_g = earlier
    n1 = plin.size
    n_gt = hood.ptr.size - 1
    cand = _candidates(pid, n1, hood)
    ptr = cand.ptr
    seen_p = np.zeros(n1, dtype=np.bool_)
    seen_g = np.zeros(n_gt, dtype=np.bool_)
    queue = np.empty(n1 + n_gt, dtype=np.int64)
    loc = Local(np.empty(n1, dtype=np.int64), np.empty(n_gt, dtype=np.int64))
    cap = min(n1, n_gt)
    mp = np.empty(cap, dtype=np.int64)
    mg = np.empty(cap, dtype=np.int64)
    out = Pairs(mp, mg)
    own = np.full(n1, -1, dtype=np.int64)  # this call's component of each predicted pixel
    new_n = np.empty(n1, dtype=np.int64)
    new_ptr = np.zeros(n1 + 1, dtype=np.int64)
    k = 0
    n_out = 0
    for s in range(n1):
        if seen_p[s] or ptr[s + 1] == ptr[s]:
            continue
        pn, gn = _component(s, cand, seen_p, seen_g, queue)
        c = _earlier_component(pn, plin, comp_of, comp_n)
        if c >= 0:
            for e in range(comp_ptr[c], comp_ptr[c + 1]):
                mp[n_out] = pid[comp_pos[e]]
                mg[n_out] = comp_g[e]
                n_out += 1
        else:
            n_out = _solve_component(pn, gn, cand, loc, ow, out, n_out)
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


@njit(cache=True, nogil=True)
def match_map(pid, plin, nptr, nlin, ncost, ow, comp_of, prev_plin, comp_n, comp_ptr, comp_pos, comp_g):
    """:func:`match_components` with its tuples spread out (``hood`` as ``nptr, nlin, ncost``,
    ``earlier`` as its six arrays): the form the caller (``match_map(ids, plin, *hood, ow,
    *earlier)``) and the numpy twin (:func:`hiseg.metrics._kernels_py.match_map`) share.
    Returns ``(mp, mg, comp_n, comp_ptr, comp_pos, comp_g)`` as :func:`match_components`."""
    return match_components(pid, plin, Neighbourhoods(nptr, nlin, ncost), ow,
                            Earlier(comp_of, prev_plin, comp_n, comp_ptr, comp_pos, comp_g))
