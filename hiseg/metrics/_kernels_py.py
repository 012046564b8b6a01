"""The kernels of :mod:`hiseg.metrics.kernels` in numpy and scipy, for a Python without numba.

numba is a dependency of hiseg and pip installs it everywhere a wheel exists; the CUDA machine
the project trains on cannot install anything, and its Python has no numba. There, and in any
such environment, :mod:`hiseg.metrics.kernels` takes these functions instead of its compiled
ones: the same signatures, the same results (``tests/metrics/test_metrics_kernels.py`` compares them
in a process where numba cannot be imported), several times slower (about what the benchmark
cost before the compiled kernels: ``benchmarks/results/evaluate.md``). Enough for a training
run's validation metric; an evaluation of the whole val set wants numba.

* :func:`thin`: :func:`skimage.morphology.thin`, which the compiled thinning equals;
* :func:`match_map`: scipy's LAPJVsp (:func:`scipy.sparse.csgraph.min_weight_full_bipartite_matching`)
  on the whole candidate graph, the construction the benchmark used before the compiled
  kernels (the per-component solution equals it: :mod:`hiseg.metrics.kernels`); it keeps no
  component from one call to the next;
* :func:`ucm_labels_advance`: :func:`scipy.ndimage.label` of the whole set at each threshold
  (the state arrays are left untouched);
* :func:`pair_counts`, :func:`label_range`, :func:`neighbourhoods`: numpy.
"""
from __future__ import annotations

import numpy as np
from scipy import ndimage
from scipy.sparse import csr_matrix
from scipy.sparse.csgraph import min_weight_full_bipartite_matching

__all__ = ["label_range", "match_map", "neighbourhoods", "pair_counts", "thin", "ucm_labels_advance"]


def thin(mask: np.ndarray) -> np.ndarray:
    """MATLAB's ``bwmorph(mask, 'thin', Inf)``: :func:`skimage.morphology.thin`."""
    from skimage.morphology import thin as sk_thin

    return np.asarray(sk_thin(np.asarray(mask, dtype=bool)), dtype=bool)


def neighbourhoods(glin, h, w, dy, dx, cost):
    """The in-image positions within the tolerance of every annotator pixel, as CSR lists
    ``(ptr, lin, lcost)`` (:func:`hiseg.metrics.kernels.neighbourhoods`)."""
    yy = (glin // w)[:, None] + dy[None, :]
    xx = (glin % w)[:, None] + dx[None, :]
    inside = (yy >= 0) & (yy < h) & (xx >= 0) & (xx < w)
    ptr = np.concatenate(([0], np.cumsum(inside.sum(axis=1)))).astype(np.int64)
    lin = (yy * w + xx)[inside].astype(np.int64)
    lcost = np.broadcast_to(cost[None, :], inside.shape)[inside].astype(np.int64)
    return ptr, lin, lcost


def match_map(pid, plin, nptr, nlin, ncost, ow, comp_of, prev_plin, comp_n, comp_ptr, comp_pos, comp_g):
    """:func:`hiseg.metrics.kernels.match_map` by scipy's LAPJVsp on the whole candidate
    graph: the same pairs; no component is kept for the next call (``comp_of`` stays as it
    is, all -1, and the components returned are none)."""
    none = np.zeros(0, dtype=np.int64)
    gidx = np.repeat(np.arange(nptr.size - 1, dtype=np.int64), np.diff(nptr))
    p = pid[nlin]
    keep = p >= 0
    ep, eg, ec = p[keep], gidx[keep], ncost[keep]
    if ep.size == 0:
        return none, none, none, np.zeros(1, dtype=np.int64), none, none
    used_p, ci = np.unique(ep, return_inverse=True)  # increasing pixel order, as the kernel numbers them
    used_g, cj = np.unique(eg, return_inverse=True)
    a, b = used_p.size, used_g.size
    # rows: predicted pixels, then the annotator pixels' outliers; columns: annotator pixels, then
    # the predicted pixels' outliers; outliers pair wherever their pixels may pair; every cost + 1
    rows = np.concatenate([ci, np.arange(a), a + np.arange(b), a + cj])
    cols = np.concatenate([cj, b + np.arange(a), np.arange(b), b + ci])
    wts = np.concatenate([ec + 1.0, np.full(a + b + ci.size, ow + 1.0)])
    graph = csr_matrix((wts, (rows, cols)), shape=(a + b, a + b))
    graph.sort_indices()
    r, c = min_weight_full_bipartite_matching(graph)
    real = (r < a) & (c < b)
    return used_p[r[real]], used_g[c[real]], none, np.zeros(1, dtype=np.int64), none, none


def ucm_labels_advance(ucm2, t_prev, t, eight, no_vertices, parent, minsite, bit, seen):
    """:func:`hiseg.metrics.kernels.ucm_labels_advance` by one labelling of ``ucm2 <= t``
    (8- or 4-connected, without the grid vertices for ``no_vertices``), numbered as
    :func:`scipy.ndimage.label` numbers it; the state arrays are not used."""
    free = ucm2 <= t
    if no_vertices:
        free[0::2, 0::2] = False
    structure = np.ones((3, 3), dtype=bool) if eight else None
    return ndimage.label(free, structure=structure)[0][1::2, 1::2].astype(np.int32)


def label_range(a, b):
    """``(min over both, max(a) + 1, max(b) + 1)`` of two non-empty label arrays."""
    return min(int(a.min()), int(b.min())), int(a.max()) + 1, int(b.max()) + 1


def pair_counts(a, b, ka, kb, dense):
    """The contingency table of :func:`hiseg.metrics.kernels.pair_counts` (``dense`` unused,
    left zeroed)."""
    keys, n = np.unique(a * kb + b, return_counts=True)
    return (keys.astype(np.int64), n.astype(np.int64), np.bincount(a, minlength=ka).astype(np.int64),
            np.bincount(b, minlength=kb).astype(np.int64))
