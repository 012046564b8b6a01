"""Contingency tables of a segmentation against its annotations: the pairwise region
overlaps that covering, PRI, VI (:mod:`hiseg.metrics.region`) and Fop
(:mod:`hiseg.metrics.fop`) are all computed from, once per segmentation."""
from __future__ import annotations

from typing import Sequence

import numpy as np

__all__ = ["contingency", "gt_tables"]


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
    Cost O(N) with a dense ``bincount`` when ``(max a + 1)(max b + 1)`` is
    moderate, else O(N log N).
    """
    a = np.asarray(a).ravel().astype(np.int64)
    b = np.asarray(b).ravel().astype(np.int64)
    if a.size != b.size:
        raise ValueError("label images of different sizes")
    if a.size and (a.min() < 0 or b.min() < 0):
        raise ValueError("labels must be non-negative")
    ka = int(a.max()) + 1 if a.size else 1
    kb = int(b.max()) + 1 if b.size else 1
    if ka * kb <= max(4 * a.size, 1 << 22):
        dense = np.bincount(a * kb + b, minlength=ka * kb)
        nz = np.flatnonzero(dense)
        n = dense[nz]
        ia, ib = np.divmod(nz, kb)
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
    tables = []
    for i, gt in enumerate(gt_segs):
        gt = np.asarray(gt)
        if gt.shape != seg.shape:
            raise ValueError(f"segmentation shape {seg.shape} != ground-truth shape {gt.shape} (annotator {i + 1})")
        tables.append(contingency(gt, seg))
    return tables
