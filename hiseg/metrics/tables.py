"""Contingency tables of a segmentation against its annotations: the pairwise region
overlaps that covering, PRI, VI (:mod:`hiseg.metrics.region`) and Fop
(:mod:`hiseg.metrics.fop`) are all computed from, once per segmentation."""
from __future__ import annotations

from typing import Sequence

import numpy as np

__all__ = ["contingency", "gt_tables"]

#: A zeroed scratch array of the compiled pair counts (given back zeroed), kept between
#: calls so that it is not allocated and cleared for every table.
_SCRATCH = [np.zeros(0, dtype=np.int64)]


def contingency(a: np.ndarray, b: np.ndarray):
    """Sparse contingency table of two non-negative integer label images.

    Parameters
    ----------
    a, b : numpy.ndarray, same shape
        Label images (non-negative integers).

    Returns
    -------
    ia, ib, n : numpy.ndarray
        Label pairs with a non-zero count and the counts.
    na, nb : numpy.ndarray
        Areas of the labels ``0..max(a)`` and ``0..max(b)``.

    Notes
    -----
    Cost O(N + U log U) for U distinct pairs (compiled,
    :func:`hiseg.metrics.kernels.pair_counts`) when ``(max a + 1)(max b + 1)`` is
    moderate, else O(N log N).
    """
    from .kernels import label_range, pair_counts

    a = np.asarray(a).ravel().astype(np.int64, copy=False)
    b = np.asarray(b).ravel().astype(np.int64, copy=False)
    if a.size != b.size:
        raise ValueError("label images of different sizes")
    lo, ka, kb = label_range(a, b) if a.size else (0, 1, 1)
    if lo < 0:
        raise ValueError("labels must be non-negative")
    if ka * kb <= max(4 * a.size, 1 << 22):
        if _SCRATCH[0].size < ka * kb:
            _SCRATCH[0] = np.zeros(max(ka * kb, 2 * _SCRATCH[0].size), dtype=np.int64)
        keys, n, na, nb = pair_counts(a, b, ka, kb, _SCRATCH[0])
        ia, ib = np.divmod(keys, kb)
    else:
        keys, n = np.unique(a * kb + b, return_counts=True)
        ia, ib = np.divmod(keys, kb)
        na = np.bincount(a, minlength=ka)
        nb = np.bincount(b, minlength=kb)
    return ia, ib, n, na, nb


def gt_tables(seg: np.ndarray, gt_segs: Sequence[np.ndarray]) -> list:
    """The contingency table (:func:`contingency` ``(gt, seg)``) of ``seg`` against each
    annotator: computed once per segmentation and shared by covering, PRI, VI and Fop.
    ValueError naming the annotator when a shape differs."""
    seg = np.asarray(seg)
    flat = seg.ravel().astype(np.int64, copy=False)  # once, not once per annotator
    tables = []
    for i, gt in enumerate(gt_segs):
        gt = np.asarray(gt)
        if gt.shape != seg.shape:
            raise ValueError(f"segmentation shape {seg.shape} != ground-truth shape {gt.shape} (annotator {i + 1})")
        tables.append(contingency(gt, flat))
    return tables
