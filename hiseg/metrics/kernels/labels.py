"""Region labels of a ucm2 at increasing thresholds.

:func:`ucm_labels_advance` grows the components of ``ucm2 <= t`` from one threshold to the
next (a union-find forest; ``scipy.ndimage.label``'s numbering read from a Fenwick tree over
the components' first sites).
"""
from __future__ import annotations

import numpy as np

from ._jit import njit

__all__ = ["ucm_labels_advance"]


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
