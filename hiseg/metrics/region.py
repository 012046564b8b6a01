"""Region benchmark of BSDS500, per image: segmentation covering, PRI and VI.

Reimplements the behaviour of the official ``evaluation_reg_image``,
``match_segmentations`` (covering), ``match_segmentations2`` (probabilistic
Rand index and variation of information) and ``collect_eval_reg``:

* covering: for every region of the segmentation (label ``>= 1``) the best
  intersection-over-union with any region of any annotator; for every region
  of every annotator the best IoU with a region of the segmentation. Per
  threshold ``cntR = sum(area_gt * best_iou_gt)``, ``sumR = sum(area_gt)`` (all
  annotators), ``cntP``/``sumP`` likewise over segmentation regions;
  ``cntR_best`` uses, for every annotator region, its best IoU over all
  thresholds;
* PRI / VI: the Rand index and the variation of information (in bits, ``log2``) of
  the contingency table (labels 0 included) between the segmentation and
  each annotator, averaged over annotators;
* dataset (:func:`hiseg.metrics.summary.collect_region`): covering ODS = best ``sum cntR / sum sumR`` over thresholds, OIS =
  counts summed at each image's (last) best threshold, best = ``sum cntR_best
  / sum sumR``; PRI and VI are averaged over images per threshold, ODS is the
  best average (max for PRI, min for VI), OIS the average of per-image bests.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Iterable, Sequence

import numpy as np
from scipy import ndimage

from .fop import fop_from_tables
from .tables import contingency, gt_tables  # noqa: F401 (contingency re-exported: hiseg.metrics.region.contingency)


__all__ = [
    "NestedUcmLabels",
    "RegionImageResult",
    "contingency",
    "covering_matches",
    "gt_tables",
    "rand_index",
    "region_counts",
    "ucm_to_labels",
    "variation_of_information",
]

_EIGHT = np.ones((3, 3), dtype=bool)


def ucm_to_labels(ucm2: np.ndarray, t: float) -> np.ndarray:
    """Regions of a doubled-grid ultrametric contour map at threshold ``t``.

    The 8-connected components of ``ucm2 <= t`` (MATLAB ``bwlabel``), read at
    the pixel positions ``[1::2, 1::2]``.

    Parameters
    ----------
    ucm2 : numpy.ndarray, shape (2H+1, 2W+1)
    t : float

    Returns
    -------
    numpy.ndarray of int32, shape (H, W)
        Labels ``>= 1`` (0 where a pixel position itself is above ``t``).
        Cost O(H W).
    """
    lab, _ = ndimage.label(np.asarray(ucm2) <= t, structure=_EIGHT)
    return lab[1::2, 1::2]


class NestedUcmLabels:
    """The partitions of one ucm2 at increasing thresholds, each grown from the last.

    ``labels(t)`` equals :func:`ucm_to_labels` ``(ucm2, t)`` (or, with ``seism``,
    :func:`hiseg.metrics.fop.seism_ucm_labels` ``(ucm2, t)``) label for label, but the
    components of ``ucm2 <= t`` are kept between calls in a union-find forest
    (:func:`hiseg.metrics.kernels.ucm_labels_advance`): a call costs a scan of the
    doubled grid and a find per pixel instead of a full labelling. A threshold below the
    previous one starts again from scratch. Memory: four int64 arrays of the doubled
    grid's size.

    Parameters
    ----------
    ucm2 : numpy.ndarray, shape (2H+1, 2W+1)
    seism : bool, default False
        Cut as SEISM does (4-connected, grid vertices always boundary) instead of the
        BSDS benchmark's 8-connected components.
    """

    def __init__(self, ucm2: np.ndarray, seism: bool = False):
        self.ucm2 = np.ascontiguousarray(ucm2, dtype=np.float64)
        self.seism = bool(seism)
        self._t = np.inf

    def labels(self, t: float) -> np.ndarray:
        """Label image (int32, shape (H, W)) at threshold ``t``."""
        from .kernels import ucm_labels_advance

        t = float(t)
        if t < self._t:
            n = self.ucm2.size
            self._state = (np.full(n, -1, dtype=np.int64), np.zeros(n, dtype=np.int64),
                           np.zeros(n + 1, dtype=np.int64), np.full(n, -1, dtype=np.int64))
            self._t = -np.inf
        out = ucm_labels_advance(self.ucm2, self._t, t, not self.seism, self.seism, *self._state)
        self._t = t
        return out


def _ri_vi(n: np.ndarray, na: np.ndarray, nb: np.ndarray) -> tuple[float, float]:
    """Rand index and variation of information from a contingency table."""
    n = n.astype(np.float64)
    na = na.astype(np.float64)
    nb = nb.astype(np.float64)
    total = n.sum()
    pairs = total * (total - 1) / 2.0
    dis = (na * na).sum() / 2.0 + (nb * nb).sum() / 2.0 - (n * n).sum()
    ri = 1.0 - dis / pairs if pairs > 0 else 1.0
    pa = na[na > 0] / total
    pb = nb[nb > 0] / total
    h1 = -(pa * np.log2(pa)).sum()
    h2 = -(pb * np.log2(pb)).sum()
    pj = n / total
    return float(ri), float(h1 + h2 - 2.0 * (h1 + h2 + (pj * np.log2(pj)).sum()))


def rand_index(a: np.ndarray, b: np.ndarray) -> float:
    """Rand index of two label images (fraction of pixel pairs on which the
    two partitions agree). Cost O(N)."""
    ia, ib, n, na, nb = contingency(a, b)
    return _ri_vi(n, na, nb)[0]


def variation_of_information(a: np.ndarray, b: np.ndarray) -> float:
    """Variation of information ``H(A) + H(B) - 2 I(A; B)`` (in bits) of
    two label images. Cost O(N)."""
    ia, ib, n, na, nb = contingency(a, b)
    return _ri_vi(n, na, nb)[1]


def covering_matches(seg: np.ndarray, gt_segs: Sequence[np.ndarray], tables=None):
    """Best IoU of each region with the other side (``match_segmentations``).

    Parameters
    ----------
    seg : numpy.ndarray, shape (H, W)
        Segmentation, labels ``>= 0`` (0 = unlabelled, excluded).
    gt_segs : sequence of numpy.ndarray, shape (H, W)
        Annotators' segmentations (labels ``>= 1``).
    tables : list, optional
        :func:`gt_tables` ``(seg, gt_segs)`` when already computed.

    Returns
    -------
    match_seg : numpy.ndarray, shape (max(seg),)
        For labels ``1..max(seg)``, best IoU with any region of any annotator.
    match_gt : list of numpy.ndarray
        Per annotator, for labels ``1..max(gt)``, best IoU with a region of
        ``seg``.
    area_seg : numpy.ndarray, area of labels ``1..max(seg)``.
    area_gt : list of numpy.ndarray, areas of labels ``1..max(gt)``.
    ri, vi : float
        Rand index and VI averaged over annotators (computed on the same
        contingency tables).
    """
    seg = np.asarray(seg)
    if tables is None:
        tables = gt_tables(seg, gt_segs)
    ks = int(seg.max()) if seg.size else 0
    match_seg = np.zeros(ks, dtype=np.float64)
    match_gt, area_gt = [], []
    area_seg = None
    ri_sum = vi_sum = 0.0
    for ig, is_, n, ng, ns in tables:
        ri, vi = _ri_vi(n, ng, ns)
        ri_sum += ri
        vi_sum += vi
        if area_seg is None:
            area_seg = ns[1:].astype(np.float64)
        kg = ng.size - 1
        keep = (ig > 0) & (is_ > 0)
        ig, is_, n = ig[keep], is_[keep], n[keep].astype(np.float64)
        iou = n / (ng[ig] + ns[is_] - n)
        mg = np.zeros(kg + 1)
        np.maximum.at(mg, ig, iou)
        ms = np.zeros(ks + 1)
        np.maximum.at(ms, is_, iou)
        match_seg = np.maximum(match_seg, ms[1:])
        match_gt.append(mg[1:])
        area_gt.append(ng[1:].astype(np.float64))
    k = max(len(tables), 1)
    if area_seg is None:
        area_seg = np.zeros(ks)
    return match_seg, match_gt, area_seg, area_gt, ri_sum / k, vi_sum / k


@dataclass
class RegionImageResult:
    """Per-threshold region figures of one image (``*_ev2/3/4.txt``), and, unless it was
    switched off, Fop: ``fop`` rows ``[F, precision, recall]`` per threshold."""

    thresholds: np.ndarray
    cnt_r: np.ndarray
    sum_r: np.ndarray
    cnt_p: np.ndarray
    sum_p: np.ndarray
    cnt_r_best: float
    ri: np.ndarray
    vi: np.ndarray
    name: str = ""
    extra: dict = field(default_factory=dict)
    fop: np.ndarray | None = None


def _segmentation_counts(seg, fop_seg, gt_segs, fop: bool) -> tuple:
    """:func:`region_counts`' figures of one distinct segmentation: (cntR, sumR, cntP,
    sumP, RI, VI, best covering of each annotator region, their areas, the Fop row or
    None, the CPU seconds of Fop). ``fop_seg``: the segmentation Fop scores, when it is
    not ``seg`` (SEISM's labelling)."""
    tables = gt_tables(seg, gt_segs)
    ms, mg, a_s, a_g, r_i, v_i = covering_matches(seg, gt_segs, tables)
    mg_all = np.concatenate(mg) if mg else np.zeros(0)
    a_g_all = np.concatenate(a_g) if a_g else np.zeros(0)
    f_row, fop_cpu = None, 0.0
    if fop:
        c0 = time.process_time()
        if fop_seg is None:
            f = fop_from_tables(tables, seg, gt_segs)
        else:
            f = fop_from_tables(gt_tables(fop_seg, gt_segs), fop_seg, gt_segs)
        f_row = (f.f, f.precision, f.recall)
        fop_cpu = time.process_time() - c0
    return (float((a_g_all * mg_all).sum()), float(a_g_all.sum()), float((a_s * ms).sum()), float(a_s.sum()),
            r_i, v_i, mg_all, a_g_all, f_row, fop_cpu)


def region_counts(
    segs: Iterable[tuple],
    gt_segs: Sequence[np.ndarray],
    thresh: Sequence[float],
    name: str = "",
    fop: bool = True,
) -> RegionImageResult:
    """Region benchmark figures of one image (``evaluation_reg_image``), and Fop.

    Parameters
    ----------
    segs : iterable of (key, seg) or (key, seg, fop_seg)
        One label image per threshold, in threshold order; equal non-None
        keys promise equal segmentations (the result is reused). ``fop_seg``:
        the partition Fop is computed on where it is not ``seg`` (a ucm2 that
        SEISM cuts differently from the BSDS benchmark); ``None`` or absent:
        ``seg``, and the contingency tables are shared.
    gt_segs : sequence of numpy.ndarray
        Annotators' segmentations.
    thresh : sequence of float
        Threshold values (same length as ``segs``).
    name : str
        Image name stored in the result.
    fop : bool, default True
        Also compute Fop (:mod:`hiseg.metrics.fop`) on the same tables.

    Returns
    -------
    RegionImageResult
        Cost O(K N) per distinct segmentation (K annotators, N pixels): one
        contingency table per annotator, shared by covering, PRI, VI and Fop.

    Raises
    ------
    ValueError
        On shape mismatch or a segs/thresholds length mismatch.
    """
    fop_cpu = 0.0
    gt_segs = [np.ascontiguousarray(g, dtype=np.int64) for g in gt_segs]  # converted once, not per table
    thresh = np.asarray(thresh, dtype=np.float64)
    nt = thresh.size
    cnt_r = np.zeros(nt)
    sum_r = np.zeros(nt)
    cnt_p = np.zeros(nt)
    sum_p = np.zeros(nt)
    ri = np.zeros(nt)
    vi = np.zeros(nt)
    fop_rows = np.zeros((nt, 3)) if fop else None
    best_gt = None
    area_gt_all = None
    cache_key = object()
    cache = None
    n = 0
    for t, item in enumerate(segs):
        if t >= nt:
            raise ValueError("more segmentations than thresholds")
        key, seg = item[0], item[1]
        fop_seg = item[2] if len(item) > 2 else None
        n += 1
        if key is None or key != cache_key:
            cache = _segmentation_counts(seg, fop_seg, gt_segs, fop)
            fop_cpu += cache[-1]
            cache_key = key
        cnt_r[t], sum_r[t], cnt_p[t], sum_p[t], ri[t], vi[t], mg_all, a_g_all, f_row, _ = cache
        if fop:
            fop_rows[t] = f_row
        best_gt = mg_all if best_gt is None else np.maximum(best_gt, mg_all)
        area_gt_all = a_g_all
    if n != nt:
        raise ValueError(f"got {n} segmentations for {nt} thresholds")
    cnt_r_best = float((area_gt_all * best_gt).sum()) if best_gt is not None else 0.0
    return RegionImageResult(thresh, cnt_r, sum_r, cnt_p, sum_p, cnt_r_best, ri, vi, name=name, fop=fop_rows,
                             extra={"fop_cpu_s": fop_cpu} if fop else {})
