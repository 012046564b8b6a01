"""Precision-recall for objects and parts (Fop), per image, as SEISM computes it.

Pont-Tuset & Marques, "Supervised Evaluation of Image Segmentation and Object Proposal
Techniques", TPAMI 2016 (and CVPR 2013); reference implementation: SEISM's
``src/measures/fop.hpp``. hiseg's own code, written from the definition and checked
against SEISM's published per-image results on BSDS500 val (``tests/metrics/test_fop.py``).

The definition, for a partition P and the K annotations G_1..G_K of an image:

* **candidates**: in P, and separately in each G_k, the regions sorted by decreasing
  area (equal areas: the region met later in a row-major scan first) are candidates
  while the area before them is below 99 % of the image: the smallest regions, 1 % of
  the image in all, are left out of the classification (and of the denominators);
* for every overlapping pair (p, g) of candidates, with ``recall = |p & g| / |g|`` and
  ``precision = |p & g| / |p|``:

  - recall >= .9 and precision >= .9: p and g are **objects** (matched);
  - precision >= .9 and recall >= .25 (and not the above): p is a **part** of g;
  - recall >= .9 and precision >= .25 (and not the above): g is a **part** of p;

  a region of P is an object if it is one for any annotator, else a part if it is one
  for any annotator;
* **fragmentation** (all regions, candidates or not): a region g collects the recall of
  every region p that lies within it (precision >= .9, recall < .9) -- how much of g is
  covered by its over-segmenting pieces; a region p collects the precision of every
  region g that lies within it (recall >= .9, precision < .9), summed over annotators;
* ``precision = (objects(P) + under(P) / K + .1 parts(P)) / candidates(P)`` where
  ``under(P)`` sums the collected precision of P's unclassified candidates;
  ``recall = (objects(G) + over(G) + .1 parts(G)) / candidates(G)``, with every count
  and sum over the regions of all K annotations; ``F = 2 P R / (P + R)`` (0 if both 0).

Regions are the distinct labels (label 0 is a region like any other: SEISM's
intersection matrix numbers all values). A ucm2 is cut as SEISM's ``read_one_ucm``
does (:func:`seism_ucm_labels`). The dataset figures (ODS / OIS / AP over the mean
precision and recall of the images) are :func:`hiseg.metrics.summary.collect_fop`.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np
from scipy import ndimage

from .ratios import f_measure
from .tables import contingency

__all__ = [
    "AREA_PERCENTILE",
    "BETA",
    "GAMMA_OBJECT",
    "GAMMA_PART",
    "FopImage",
    "objects_and_parts",
    "fop_from_tables",
    "seism_ucm_labels",
]

#: A pair is an object match when recall and precision both reach this.
GAMMA_OBJECT = 0.9
#: A region is a part when it lies within another (GAMMA_OBJECT) and covers this much of it.
GAMMA_PART = 0.25
#: Weight of a part in the counts.
BETA = 0.1
#: Share of the image covered by the candidate regions (the largest first).
AREA_PERCENTILE = 0.99


@dataclass(frozen=True)
class FopImage:
    """Fop of one partition against an image's annotations."""

    f: float
    precision: float
    recall: float


def seism_ucm_labels(ucm2: np.ndarray, t: float) -> np.ndarray:
    """Partition of a doubled-grid ucm2 at ``t``, as SEISM reads it (``read_one_ucm`` +
    ``gridbmap2seg``): the elements ``> t`` and every grid vertex (even row, even column)
    are boundary; regions are the 4-connected components of the rest, read at the pixel
    positions ``[1::2, 1::2]``. The BSDS region benchmark instead takes the 8-connected
    components of ``ucm2 <= t``, vertices included
    (:func:`hiseg.metrics.region.ucm_to_labels`): these regions refine the BSDS ones, and
    the two are the same partition when every vertex is at least as high as its edges
    (gPb's ucm2, and hiseg's)."""
    ucm2 = np.asarray(ucm2)
    free = ucm2 <= t
    free[0::2, 0::2] = False
    return ndimage.label(free)[0][1::2, 1::2]


def _candidates(area: np.ndarray, present: np.ndarray, total: float, first) -> np.ndarray:
    """Boolean mask over labels: the candidates among the ``present`` labels (see the
    module docstring). ``first(labels)`` gives the row-major first-occurrence index of
    the given labels; it is called only where equal areas straddle the 99 % line."""
    labs = np.flatnonzero(present)
    frac = area[labs] / total
    order = np.argsort(-frac, kind="stable")
    frac_sorted = frac[order]
    before = np.concatenate(([0.0], np.cumsum(frac_sorted)[:-1]))  # sequential, as the C++ loop
    cand_sorted = before < AREA_PERCENTILE
    n_cand = int(cand_sorted.sum())
    if 0 < n_cand < labs.size and frac_sorted[n_cand - 1] == frac_sorted[n_cand]:
        # equal areas straddle the line: SEISM visits them latest-scanned first
        a = frac_sorted[n_cand]
        lo, hi = np.searchsorted(-frac_sorted, -a, "left"), np.searchsorted(-frac_sorted, -a, "right")
        tied = labs[order[lo:hi]]
        tied = tied[np.argsort(-first(tied), kind="stable")]
        order = order.copy()
        order[lo:hi] = np.searchsorted(labs, tied)
    cand = np.zeros(area.size, dtype=bool)
    cand[labs[order[cand_sorted]]] = True
    return cand


def _first_occurrence(labels: np.ndarray):
    """``first(subset)``: row-major index of the first pixel of each label in ``subset``
    (the image is read only when it is called)."""

    def first(subset):
        flat = labels.ravel()
        out = np.full(int(flat.max()) + 1, flat.size, dtype=np.int64)
        np.minimum.at(out, flat, np.arange(flat.size))
        return out[subset]

    return first


def fop_from_tables(tables, seg: np.ndarray, gt_segs: Sequence[np.ndarray]) -> FopImage:
    """Fop from the contingency tables of ``seg`` against each annotation.

    Parameters
    ----------
    tables : sequence of tuples
        Per annotation, ``(i_gt, i_seg, n, area_gt, area_seg)`` as returned by
        :func:`hiseg.metrics.region.contingency` ``(gt, seg)``: the overlapping label
        pairs, their overlap counts and the label areas. Shared with the covering, PRI
        and VI of the same threshold.
    seg, gt_segs : numpy.ndarray
        The label images the tables were made from (read only where equal areas need
        SEISM's scanning order).

    Returns
    -------
    FopImage
        Cost O(number of overlapping pairs), plus O(N) per image where tied areas
        straddle the 99 % line.
    """
    k = len(tables)
    if k == 0:
        raise ValueError("Fop needs at least one annotation")
    area_p = tables[0][4].astype(np.float64)
    total = float(area_p.sum())
    if total == 0:
        raise ValueError("Fop of an empty segmentation")
    cand_p = _candidates(area_p, area_p > 0, total, _first_occurrence(seg))
    obj_p = np.zeros(area_p.size, dtype=bool)
    part_p = np.zeros(area_p.size, dtype=bool)
    prec_p = np.zeros(area_p.size)
    n_obj_g = n_part_g = n_cand_g = 0
    over_g = 0.0
    for (ig, ip, n, area_g, area_p_k), gt in zip(tables, gt_segs):
        if area_p_k.size != area_p.size or not np.array_equal(area_p_k, tables[0][4]):
            raise ValueError("the contingency tables are not of one segmentation")
        area_g = area_g.astype(np.float64)
        cand_g = _candidates(area_g, area_g > 0, total, _first_occurrence(gt))
        n = n.astype(np.float64)
        rec = n / area_g[ig]
        prec = n / area_p[ip]
        both = cand_g[ig] & cand_p[ip]
        hi_r, hi_p = rec >= GAMMA_OBJECT, prec >= GAMMA_OBJECT
        obj = both & hi_r & hi_p
        p_in_g = both & ~obj & hi_p & (rec >= GAMMA_PART)  # p is a part of g
        g_in_p = both & ~obj & ~p_in_g & hi_r & (prec >= GAMMA_PART)  # g is a part of p
        obj_p[ip[obj]] = True
        part_p[ip[p_in_g]] = True
        g_obj = np.zeros(area_g.size, dtype=bool)
        g_obj[ig[obj]] = True
        g_part = np.zeros(area_g.size, dtype=bool)
        g_part[ig[g_in_p]] = True
        g_part &= ~g_obj
        frag = hi_p & ~hi_r  # p inside g: g collects p's recall
        rec_g = np.bincount(ig[frag], weights=rec[frag], minlength=area_g.size)
        under = hi_r & ~hi_p  # g inside p: p collects g's precision
        prec_p += np.bincount(ip[under], weights=prec[under], minlength=area_p.size)
        n_obj_g += int(g_obj.sum())
        n_part_g += int(g_part.sum())
        n_cand_g += int(cand_g.sum())
        over_g += float(rec_g[cand_g & ~g_obj & ~g_part].sum())
    part_p &= ~obj_p
    none_p = cand_p & ~obj_p & ~part_p
    precision = (obj_p.sum() + prec_p[none_p].sum() / k + BETA * part_p.sum()) / cand_p.sum()
    recall = (n_obj_g + over_g + BETA * n_part_g) / n_cand_g
    f = f_measure(recall, precision)
    return FopImage(float(f), float(precision), float(recall))


def _check_labels(seg, where: str) -> np.ndarray:
    seg = np.asarray(seg)
    if seg.ndim != 2 or seg.size == 0:
        raise ValueError(f"{where}: a segmentation must be a non-empty 2-D label image, got shape {seg.shape}")
    if seg.dtype.kind not in "iub":
        raise ValueError(f"{where}: labels must be integers, got {seg.dtype}")
    seg = seg.astype(np.int64)
    if seg.min() < 0:
        raise ValueError(f"{where}: labels must be non-negative")
    return seg


def objects_and_parts(seg: np.ndarray, gt_segs: Sequence[np.ndarray]) -> FopImage:
    """Fop of a label image against annotations (label images of the same size).

    Every distinct label is a region (0 included). Cost O(K N) for K annotations of N
    pixels. ValueError on an empty or non-integer image, shapes that differ, or no
    annotation.
    """
    seg = _check_labels(seg, "segmentation")
    if len(gt_segs) == 0:
        raise ValueError("Fop needs at least one annotation")
    gts = []
    for i, g in enumerate(gt_segs):
        g = _check_labels(g, f"annotation {i + 1}")
        if g.shape != seg.shape:
            raise ValueError(f"annotation {i + 1} is {g.shape[0]}x{g.shape[1]}, the segmentation "
                             f"{seg.shape[0]}x{seg.shape[1]}")
        gts.append(g)
    return fop_from_tables([contingency(g, seg) for g in gts], seg, gts)
