"""Dataset figures of the BSDS500 benchmark from per-image counts, as the official code.

Thresholds (:func:`thresholds`, MATLAB's ``linspace`` arithmetic), F-measure and the
interpolated best F (``maxF``), the official ``%10g`` rounding of the per-image tables,
and the collectors: :func:`collect_boundary` (``collect_eval_bdry``: ODS, OIS, AP),
:func:`collect_region` (``collect_eval_reg``: covering, PRI, VI) and :func:`collect_fop`
(SEISM's aggregation of Fop: means of per-image precision and recall). Pure numpy; the
per-image counts come from :mod:`hiseg.metrics.matching` and :mod:`hiseg.metrics.region`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Sequence

import numpy as np

from .ratios import f_measure, ratio

if TYPE_CHECKING:  # types of the per-image results only
    from .matching import BoundaryImageResult
    from .region import RegionImageResult

__all__ = ["collect_boundary", "collect_fop", "collect_region", "fop_dataset", "average_precision", "f_measure", "matlab_linspace", "max_f", "official_round",
           "ratio", "thresholds"]


def matlab_linspace(d1: float, d2: float, n: int) -> np.ndarray:
    """``linspace`` with MATLAB's floating-point arithmetic.

    MATLAB computes ``d1 + ((0:n-1) * (d2 - d1)) / (n - 1)`` and pins both
    end points; numpy multiplies by a precomputed step, which can differ in the
    last bit. The difference matters for 8-bit soft boundary maps, whose values
    ``k/255`` can coincide with a threshold (e.g. ``85/255 == 1/3``).

    Parameters
    ----------
    d1, d2 : float
        End points.
    n : int
        Number of points (``n >= 1``).

    Returns
    -------
    numpy.ndarray
        ``float64`` array of shape ``(n,)``. Cost O(n).
    """
    n = int(n)
    if n < 1:
        raise ValueError(f"need at least one point, got n={n}")
    if n == 1:
        return np.array([float(d2)])
    y = d1 + (np.arange(n, dtype=np.float64) * (d2 - d1)) / (n - 1)
    y[0], y[-1] = d1, d2
    return y


def thresholds(n: int) -> np.ndarray:
    """Official benchmark thresholds ``linspace(1/(n+1), 1-1/(n+1), n)``.

    Parameters
    ----------
    n : int
        Number of thresholds, ``n >= 1``.

    Returns
    -------
    numpy.ndarray
        Increasing thresholds in ``(0, 1)``, shape ``(n,)``.

    Raises
    ------
    ValueError
        If ``n < 1``.
    """
    n = int(n)
    if n < 1:
        raise ValueError(f"the number of thresholds must be >= 1, got {n}")
    return matlab_linspace(1.0 / (n + 1), 1.0 - 1.0 / (n + 1), n)


def max_f(thresh, r, p):
    """Best F over a PR curve, interpolating linearly between thresholds.

    Reproduces the official ``maxF``: for every pair of neighbouring
    thresholds ``i-1, i`` and ``d`` in ``linspace(0, 1, 100)`` it evaluates
    ``t, r, p`` linearly interpolated and keeps the first strictly better F,
    starting from the first threshold.

    Parameters
    ----------
    thresh, r, p : array_like, shape (n,)
        Thresholds, recall and precision.

    Returns
    -------
    tuple of float
        ``(best_threshold, best_recall, best_precision, best_f)``. Cost O(100 n).
    """
    thresh = np.asarray(thresh, dtype=np.float64)
    r = np.asarray(r, dtype=np.float64)
    p = np.asarray(p, dtype=np.float64)
    best = (float(thresh[0]), float(r[0]), float(p[0]), float(f_measure(r[0], p[0])))
    if thresh.size < 2:
        return best
    d = np.arange(100, dtype=np.float64) / 99.0  # MATLAB linspace(0, 1)
    d = d[None, :]
    tt = thresh[1:, None] * d + thresh[:-1, None] * (1 - d)
    rr = r[1:, None] * d + r[:-1, None] * (1 - d)
    pp = p[1:, None] * d + p[:-1, None] * (1 - d)
    ff = f_measure(rr, pp).ravel()
    k = int(np.argmax(ff))  # first occurrence == first strict improvement
    if ff[k] > best[3]:
        best = (float(tt.ravel()[k]), float(rr.ravel()[k]), float(pp.ravel()[k]), float(ff[k]))
    return best


def average_precision(r, p) -> float:
    """Area under a precision-recall curve as the official benchmark and SEISM's
    ``general_ap`` take it: MATLAB ``unique(R)`` (sorted, first occurrence), precision
    linearly interpolated at recall 0, 0.01, ..., 1 within the range covered, summed
    times 0.01 (0 for fewer than two distinct recalls)."""
    r = np.asarray(r, dtype=np.float64)
    p = np.asarray(p, dtype=np.float64)
    ru, first = np.unique(r, return_index=True)
    if ru.size < 2:
        return 0.0
    ri = np.arange(101) * 0.01
    inside = (ri >= ru[0]) & (ri <= ru[-1])
    return float(np.where(inside, np.interp(ri, ru, p[first]), 0.0).sum() * 0.01)


def official_round(x) -> np.ndarray:
    """Round to 6 significant digits, as the official ``%10g`` text round-trip."""
    x = np.asarray(x, dtype=np.float64)
    return np.array([float("%g" % v) for v in x.ravel()], dtype=np.float64).reshape(x.shape)


def collect_boundary(
    results: Sequence[BoundaryImageResult], official_rounding: bool = True
) -> dict:
    """Dataset boundary figures, as the official ``collect_eval_bdry``.

    Parameters
    ----------
    results : sequence of BoundaryImageResult
        Per-image counts, all on the same thresholds, in image order.
    official_rounding : bool, default True
        Round the per-image tables to 6 significant digits first, as the
        official code does by writing them with ``%10g`` and reading them back
        (it changes figures by at most ~1e-6).

    Returns
    -------
    dict
        ``ods`` {threshold, recall, precision, f} (best F of the summed counts,
        interpolated between neighbouring thresholds), ``ois`` {recall,
        precision, f} (counts summed at each image's last best discrete
        threshold), ``ap`` (area under the dataset PR curve: precision linearly
        interpolated at recall 0, 0.01, ..., 1 over the recall range covered,
        0 outside, times 0.01), ``per_threshold`` (rows threshold, recall,
        precision, f) and ``per_image`` (rows name, threshold, recall,
        precision, f; best interpolated F of each image).

    Raises
    ------
    ValueError
        If ``results`` is empty or the thresholds differ between images.
    """
    if not results:
        raise ValueError("no image results to collect")
    tabs = [r.as_table() for r in results]
    for r, t in zip(results, tabs):
        if t.shape != tabs[0].shape or not np.allclose(t[:, 0], tabs[0][:, 0]):
            raise ValueError(
                f"image {r.name!r} was evaluated at different thresholds than {results[0].name!r}"
            )
    if official_rounding:
        tabs = [official_round(t) for t in tabs]
    thresh = tabs[0][:, 0]
    tot = np.zeros((thresh.size, 4))
    best_counts = np.zeros(4)
    per_image = []
    for r, tab in zip(results, tabs):
        cnt_r, sum_r, cnt_p, sum_p = tab[:, 1], tab[:, 2], tab[:, 3], tab[:, 4]
        rr = ratio(cnt_r, sum_r)
        pp = ratio(cnt_p, sum_p)
        ff = f_measure(rr, pp)
        bt, br, bp, bf = max_f(thresh, rr, pp)
        per_image.append({"image": r.name, "threshold": bt, "recall": br, "precision": bp, "f": bf})
        tot += tab[:, 1:]
        k = int(np.flatnonzero(ff == ff.max())[-1])
        best_counts += tab[k, 1:]
    rr = ratio(tot[:, 0], tot[:, 1])
    pp = ratio(tot[:, 2], tot[:, 3])
    ff = f_measure(rr, pp)
    bt, br, bp, bf = max_f(thresh, rr, pp)
    r_max = float(ratio(best_counts[0], best_counts[1]))
    p_max = float(ratio(best_counts[2], best_counts[3]))
    f_max = float(f_measure(r_max, p_max))
    ap = average_precision(rr, pp)
    return {
        "ods": {"threshold": bt, "recall": br, "precision": bp, "f": bf},
        "ois": {"recall": r_max, "precision": p_max, "f": f_max},
        "ap": ap,
        "per_threshold": [
            {"threshold": float(t), "recall": float(a), "precision": float(b), "f": float(c)}
            for t, a, b, c in zip(thresh, rr, pp, ff)
        ],
        "per_image": per_image,
    }


def _mean_figure(key: str, thresh: np.ndarray, avg: np.ndarray, ois: float, pick) -> dict:
    """PRI's or VI's dataset figure (``collect_eval_reg``): the per-threshold mean ``avg``
    over the images, its best (``pick``: argmax for PRI, argmin for VI) and ``ois``."""
    i = int(pick(avg))
    return {"ods": float(avg[i]), "ods_threshold": float(thresh[i]), "ois": float(ois),
            "per_threshold": [{"threshold": float(t), key: float(v)} for t, v in zip(thresh, avg)]}


def collect_region(results: Sequence[RegionImageResult], official_rounding: bool = True) -> dict:
    """Dataset region figures, as the official ``collect_eval_reg``.

    Parameters
    ----------
    results : sequence of RegionImageResult
        Per-image figures on identical thresholds, in image order.
    official_rounding : bool, default True
        Round per-image tables to 6 significant digits first, like the
        official ``%10g`` text round-trip.

    Returns
    -------
    dict
        ``covering`` {ods, ods_threshold, ois, best, per_threshold, per_image},
        ``pri`` {ods, ods_threshold, ois, per_threshold}, ``vi`` {ods,
        ods_threshold, ois, per_threshold}. Per-image covering rows hold the
        image's best threshold (first maximum), its covering there
        (``covering``) and the reverse covering of the annotations by the
        segmentation at that threshold (``precision``; the 4th column of
        ``eval_cover_img.txt``).

    Raises
    ------
    ValueError
        If ``results`` is empty or thresholds differ between images.
    """
    if not results:
        raise ValueError("no image results to collect")
    t0 = results[0].thresholds
    for r in results:
        if r.thresholds.shape != t0.shape or not np.allclose(r.thresholds, t0):
            raise ValueError(
                f"image {r.name!r} was evaluated at different thresholds than {results[0].name!r}"
            )
    rnd = official_round if official_rounding else (lambda x: np.asarray(x, dtype=np.float64))
    thresh = rnd(t0)
    nt = thresh.size
    tot = np.zeros((nt, 4))
    best = np.zeros(4)
    best_total = 0.0
    ri_sum = np.zeros(nt)
    vi_sum = np.zeros(nt)
    ri_best = vi_best = 0.0
    per_image = []
    for r in results:
        tab = rnd(np.column_stack([r.cnt_r, r.sum_r, r.cnt_p, r.sum_p]))
        rr = ratio(tab[:, 0], tab[:, 1])
        pp = ratio(tab[:, 2], tab[:, 3])
        i0 = int(np.argmax(rr))
        per_image.append(
            {"image": r.name, "threshold": float(thresh[i0]), "covering": float(rr[i0]), "precision": float(pp[i0])}
        )
        tot += tab
        k = int(np.flatnonzero(rr == rr.max())[-1])
        best += tab[k]
        best_total += float(rnd(r.cnt_r_best))
        ri_i = rnd(r.ri)
        vi_i = rnd(r.vi)
        ri_sum += ri_i
        vi_sum += vi_i
        ri_best += ri_i.max()
        vi_best += vi_i.min()
    m = len(results)
    cov = ratio(tot[:, 0], tot[:, 1])
    i_ods = int(np.argmax(cov))
    cover = {
        "ods": float(cov[i_ods]),
        "ods_threshold": float(thresh[i_ods]),
        "ois": float(ratio(best[0], best[1])),
        "best": float(ratio(best_total, tot[0, 1])),
        "per_threshold": [{"threshold": float(t), "covering": float(c)} for t, c in zip(thresh, cov)],
        "per_image": per_image,
    }
    pri = _mean_figure("pri", thresh, ri_sum / m, ri_best / m, np.argmax)
    vi = _mean_figure("vi", thresh, vi_sum / m, vi_best / m, np.argmin)
    return {"covering": cover, "pri": pri, "vi": vi}


def collect_fop(results: Sequence[RegionImageResult], official_rounding: bool = True) -> dict:
    """Dataset Fop figures, as SEISM's ``gather_measure`` / ``general_ods`` /
    ``general_ois`` / ``general_ap`` take them from the per-image values.

    Per threshold, precision and recall are the means over images of the per-image
    values and F is taken of those means; ODS is the threshold of the best such F
    (the first one); OIS picks each image's best threshold by its own F (the first
    one), averages precision and recall there and takes F of those; AP is the area
    under the mean curve (:func:`average_precision`).

    Parameters
    ----------
    results : sequence of RegionImageResult
        Per-image figures with ``fop`` rows, on identical thresholds.
    official_rounding : bool, default True
        Round the per-image values to 6 decimals first, as SEISM's result files
        (``%f``) hold them.

    Returns
    -------
    dict
        ``ods`` {threshold, f, precision, recall}, ``ois`` {f, precision, recall}, ``ap``,
        ``per_threshold`` (threshold, f, precision, recall), ``per_image`` (image,
        threshold, f, precision, recall at the image's best threshold).

    Raises
    ------
    ValueError
        If ``results`` is empty, lacks Fop, or the thresholds differ between images.
    """
    if not results:
        raise ValueError("no image results to collect")
    t0 = results[0].thresholds
    for r in results:
        if r.fop is None:
            raise ValueError(f"image {r.name!r} was evaluated without Fop")
        if r.thresholds.shape != t0.shape or not np.allclose(r.thresholds, t0):
            raise ValueError(f"image {r.name!r} was evaluated at different thresholds than {results[0].name!r}")
    return fop_dataset(t0, np.stack([r.fop for r in results]), [r.name for r in results], official_rounding)


def fop_dataset(thresh, tab, names: Sequence[str], official_rounding: bool = True) -> dict:
    """The dataset figures of :func:`collect_fop` from a table of per-image values.

    Parameters
    ----------
    thresh : array_like, shape (T,)
    tab : array_like, shape (images, T, 3)
        Per image and threshold: F, precision, recall.
    names : sequence of str
        Image names, in the order of ``tab``.
    official_rounding : bool
        Round the values to 6 decimals first (SEISM's ``%f`` files).
    """
    tab = np.asarray(tab, dtype=np.float64)
    thresh = np.asarray(thresh, dtype=np.float64)
    if tab.ndim != 3 or tab.shape[2] != 3 or tab.shape[1] != thresh.size or tab.shape[0] != len(names):
        raise ValueError(f"per-image Fop table of shape {tab.shape} does not fit {len(names)} image(s) "
                         f"x {thresh.size} threshold(s) x (F, precision, recall)")
    if official_rounding:
        tab = np.round(tab, 6)
    f_img, p_img, r_img = tab[..., 0], tab[..., 1], tab[..., 2]
    mp, mr = p_img.mean(0), r_img.mean(0)
    mf = f_measure(mr, mp)
    i = int(np.argmax(mf))
    best = np.argmax(f_img, axis=1)
    rows = np.arange(len(names))
    op, orr = float(p_img[rows, best].mean()), float(r_img[rows, best].mean())
    return {
        "ods": {"threshold": float(thresh[i]), "f": float(mf[i]), "precision": float(mp[i]), "recall": float(mr[i])},
        "ois": {"f": float(f_measure(orr, op)), "precision": op, "recall": orr},
        "ap": average_precision(mr, mp),
        "per_threshold": [
            {"threshold": float(t), "f": float(a), "precision": float(b), "recall": float(c)}
            for t, a, b, c in zip(thresh, mf, mp, mr)
        ],
        "per_image": [
            {"image": n, "threshold": float(thresh[k]), "f": float(f_img[j, k]),
             "precision": float(p_img[j, k]), "recall": float(r_img[j, k])}
            for j, (n, k) in enumerate(zip(names, best))
        ],
    }
