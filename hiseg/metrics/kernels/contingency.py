"""Contingency tables of two label arrays: :func:`pair_counts` counts the label pairs that
occur, :func:`label_range` bounds the labels (whether a dense table fits)."""
from __future__ import annotations

import numpy as np

from ._jit import njit

__all__ = ["label_range", "pair_counts"]


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
