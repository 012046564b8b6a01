"""The BSDS500 benchmark of a folder of predictions: per image, then the dataset.

:func:`evaluate` pairs prediction files with ground-truth files by stem
(:func:`hiseg.metrics.predictions.discover_pairs`), evaluates every image in a process
pool (:func:`evaluate_image`: boundary counts of :mod:`hiseg.metrics.matching`, region
counts of :mod:`hiseg.metrics.region`) and collects the dataset figures exactly as the
official MATLAB benchmark (``allBench`` / ``boundaryBench`` + ``collect_eval_bdry`` /
``collect_eval_reg``, in :mod:`hiseg.metrics.summary`). :mod:`hiseg.metrics.report`
writes the official ``eval_*.txt`` files. Prediction formats: :mod:`hiseg.metrics.predictions`.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Callable

import numpy as np

from .._lifetime import process_pool
from ..io import DataError, load_ground_truth
from .matching import DEFAULT_MAX_DIST, BoundaryImageResult, BoundaryMatcher, boundary_counts, thin_boundaries
from .predictions import FIRST_LABELS, KINDS, discover_pairs, load_prediction, names_list
from .region import NestedUcmLabels, RegionImageResult, region_counts
from .tables import contingency
from .summary import collect_boundary, collect_fop, collect_region

__all__ = ["evaluate", "evaluate_image"]

# ----------------------------------------------------------------------------
# per image
# ----------------------------------------------------------------------------
def evaluate_image(
    name: str,
    pred_path,
    gt_path,
    n_thresholds: int = 99,
    kind: str = "auto",
    boundary: bool = True,
    region: bool = True,
    max_dist: float = DEFAULT_MAX_DIST,
    fop: bool = True,
    first_label=1,
) -> dict:
    """Evaluate one image (``evaluation_bdry_image`` + ``evaluation_reg_image``).

    Parameters
    ----------
    name : str
        Image name (stored in the results).
    pred_path, gt_path : str or Path
        Prediction and ground-truth files.
    n_thresholds : int
        Number of thresholds for ucm2 / soft boundary maps.
    kind : str
        Prediction format (see :func:`load_prediction`).
    boundary, region : bool
        Which benchmarks to run (region is skipped for soft boundary maps).
    max_dist : float
        Boundary tolerance as a fraction of the diagonal.
    fop : bool
        With ``region``, also Fop (objects and parts, :mod:`hiseg.metrics.fop`), on the
        same contingency tables.
    first_label : {1, 0, "auto"}
        First region label of label-image predictions (see :func:`load_prediction`).

    Returns
    -------
    dict
        ``{"name", "kind", "boundary": BoundaryImageResult | None, "region":
        RegionImageResult | None (its ``fop`` rows with ``fop``), "time_boundary",
        "time_region"}``.

    Raises
    ------
    FileNotFoundError, ValueError
        On missing/unreadable files or prediction vs ground-truth shape
        mismatch; messages name the files.
    """
    pred = load_prediction(pred_path, kind, first_label)
    gt_segs, gt_bdrys = load_ground_truth(gt_path)
    if pred.shape != gt_segs[0].shape:
        raise ValueError(
            f"size mismatch for image {name!r}: prediction {pred_path} is {pred.shape[0]}x{pred.shape[1]}"
            f" but ground truth {gt_path} is {gt_segs[0].shape[0]}x{gt_segs[0].shape[1]}"
        )
    thresh = pred.thresholds(n_thresholds)
    out = {"name": name, "kind": pred.kind, "boundary": None, "region": None,
           "time_boundary": 0.0, "time_region": 0.0, "cpu_boundary": 0.0, "cpu_region": 0.0}
    if boundary:
        t0, c0 = time.perf_counter(), time.process_time()
        matcher = BoundaryMatcher(gt_bdrys, max_dist=max_dist)
        out["boundary"] = boundary_counts(pred.boundary_maps(thresh), matcher, thresh, name=name)
        out["time_boundary"] = time.perf_counter() - t0
        out["cpu_boundary"] = time.process_time() - c0
    if region and pred.has_regions:
        t0, c0 = time.perf_counter(), time.process_time()
        out["region"] = region_counts(pred.segmentations(thresh, fop=fop), gt_segs, thresh, name=name, fop=fop)
        out["time_region"] = time.perf_counter() - t0
        out["cpu_region"] = time.process_time() - c0
    return out


def _warm_up() -> None:
    """Compile (or load from numba's on-disk cache) every kernel of
    :mod:`hiseg.metrics.kernels` on tiny inputs, before the worker processes start: forked
    workers inherit the compiled code instead of compiling it each (seconds of CPU the first
    time after an install or a change of the kernels, well under a second once cached:
    ``benchmarks/results/evaluate.md``)."""
    gt = np.zeros((8, 8), dtype=bool)
    gt[3, :] = True
    BoundaryMatcher([gt]).counts(thin_boundaries(gt | np.roll(gt, 1, axis=0)))
    NestedUcmLabels(np.zeros((5, 5))).labels(0.5)
    NestedUcmLabels(np.zeros((5, 5)), seism=True).labels(0.5)
    contingency(np.zeros((2, 2), dtype=np.int64), np.ones((2, 2), dtype=np.int64))


def _evaluate_task(args, skip_failed: bool = False) -> dict:
    """:func:`evaluate_image` of one task; with ``skip_failed``, an image that cannot be read
    (:class:`~hiseg.io.DataError`: a corrupt, truncated or oversized file; a missing one) comes
    back as ``{"name", "failed": message}`` instead of stopping the run; a file that is read
    but wrong (a label 0, a ucm2 of the wrong shape) still stops it."""
    if not skip_failed:
        return evaluate_image(*args)
    try:
        return evaluate_image(*args)
    except (DataError, FileNotFoundError) as e:
        return {"name": args[0], "failed": str(e)}


def _skipping_task(args) -> dict:
    return _evaluate_task(args, True)


# ----------------------------------------------------------------------------
# dataset
# ----------------------------------------------------------------------------
def evaluate(
    pred_dir,
    gt_dir,
    n_thresholds: int = 99,
    kind: str = "auto",
    workers: int | None = None,
    boundary: bool = True,
    region: bool = True,
    max_dist: float = DEFAULT_MAX_DIST,
    official_rounding: bool = True,
    progress: Callable[[int, int, str], None] | None = None,
    fop: bool = True,
    first_label=1,
    subset: str = "all",
    skip_failed: bool = False,
) -> dict:
    """Run the BSDS500 benchmark on a folder of predictions.

    Parameters
    ----------
    pred_dir, gt_dir : str or Path
        Prediction and ground-truth folders, paired by file stem.
    n_thresholds : int, default 99
        Number of thresholds for ucm2 / soft boundary inputs (ignored for
        label images: one threshold per segmentation).
    kind : {"auto", "ucm2", "segs", "pb", "labels"}
        Prediction format.
    workers : int, optional
        Processes evaluating images in parallel (default: CPU count, at most
        the number of images); ``1`` runs in-process.
    boundary, region : bool
        Which benchmarks to run.
    max_dist : float, default 0.0075
        Boundary tolerance as a fraction of the image diagonal.
    official_rounding : bool, default True
        Emulate the official ``%10g`` round-trip of per-image tables.
    progress : callable, optional
        Called as ``progress(done, total, name)`` after each image.
    fop : bool, default True
        With ``region``, also the precision-recall for objects and parts (Fop) of
        Pont-Tuset & Marques, aggregated as SEISM does (:func:`collect_fop`).
    first_label : {1, 0, "auto"}, default 1
        First region label of label-image predictions: 1 in the BSDS format (a 0 is
        an error), 0 for 0-based images such as ``hiseg predict``'s ``_labels.png``,
        ``"auto"`` (``hiseg evaluate``'s default): 0 for an image that holds a 0, else 1.
    subset : {"all", "predicted"}, default "all"
        ``"all"``: every ground-truth file needs a prediction (the benchmark's set);
        ``"predicted"``: only the images with a prediction are scored (:func:`discover_pairs`).
    skip_failed : bool, default False
        An image whose files cannot be read (missing, corrupt, truncated, over the pixel
        limit: :class:`~hiseg.io.DataError`) is left out and listed in ``failed`` [{image, error}] instead of
        stopping the run (``hiseg evaluate`` does so, reporting them); ValueError when
        every image fails.

    Returns
    -------
    dict (JSON-serialisable)
        ``images`` (names), ``kind``, ``n_images`` (scored), ``n_ground_truth`` (the
        ground-truth files in ``gt_dir``), ``subset``, ``thresholds``;
        ``boundary`` {ods {threshold, recall, precision, f}, ois {recall,
        precision, f}, ap, per_threshold, per_image}; for region-capable
        inputs ``covering`` {ods, ods_threshold, ois, best, per_threshold,
        per_image}, ``pri`` and ``vi`` {ods, ods_threshold, ois,
        per_threshold}, and with ``fop`` ``fop`` {ods {threshold, f, precision,
        recall}, ois {f, precision, recall}, ap, per_threshold, per_image}; ``per_image_counts`` (the official per-image tables:
        ``bdry`` rows [thresh cntR sumR cntP sumP], ``reg`` rows [thresh
        cntR sumR cntP sumP], ``reg_best`` cntR_best, ``ri_vi`` rows [thresh
        RI VI]); ``timing`` {total_s (wall clock), boundary_s, region_s (wall
        clock summed over images), boundary_cpu_s, region_cpu_s (CPU time of
        the worker processes, summed over images), fop_cpu_s (the part of region_cpu_s
        spent on Fop, the contingency tables excepted: they are shared), workers}.

    Raises
    ------
    FileNotFoundError, ValueError
        Missing folders, empty folders, mismatched names or sizes,
        unreadable files, inconsistent numbers of segmentations; messages
        name the files involved.

    Notes
    -----
    Cost per image: one thinning plus one sparse assignment per annotator
    for each distinct thresholded map, plus O(K N) per distinct segmentation.
    """
    if kind not in KINDS:
        raise ValueError(f"unknown prediction kind {kind!r}; expected one of {KINDS}")
    n_thresholds = int(n_thresholds)
    if n_thresholds < 1:
        raise ValueError(f"the number of thresholds must be >= 1, got {n_thresholds}")
    if not (boundary or region):
        raise ValueError("nothing to evaluate: both boundary and region are disabled")
    pairs = discover_pairs(pred_dir, gt_dir, kind, subset)
    if workers is None:
        workers = os.cpu_count() or 1
    workers = max(1, min(int(workers), len(pairs)))
    if first_label not in FIRST_LABELS:
        raise ValueError(f"first_label must be 1, 0 or 'auto', got {first_label!r}")
    if not (isinstance(max_dist, (int, float)) and 0 < max_dist <= 1):  # also refuses nan
        raise ValueError(f"max_dist is a fraction of the image diagonal and must be in (0, 1], got {max_dist!r}")
    tasks = [(s, str(p), str(g), n_thresholds, kind, boundary, region, max_dist, fop, first_label)
             for s, p, g in pairs]
    t_start = time.perf_counter()
    per_image = _run(tasks, workers, progress, skip_failed)
    total = time.perf_counter() - t_start
    failed = [{"image": r["name"], "error": r["failed"]} for r in per_image if "failed" in r]
    per_image = [r for r in per_image if "failed" not in r]
    if not per_image:
        raise ValueError(f"every image failed, e.g. {failed[0]['image']}: {failed[0]['error']}")
    _check_results(per_image, pred_dir)
    out = _collect(per_image, boundary, region, fop, official_rounding)
    out["timing"] = _timing(per_image, total, workers)
    out["subset"] = subset
    out["n_ground_truth"] = sum(1 for p in Path(gt_dir).iterdir() if p.is_file() and p.suffix.lower() == ".mat")
    if skip_failed:
        out["failed"] = failed
    return out


def _run(tasks: list, workers: int, progress, skip_failed: bool = False) -> list[dict]:
    """:func:`evaluate_image` of every task, in a pool of ``workers`` processes (in this one
    for 1), in task order."""
    _warm_up()  # compiled once here, inherited by forked workers
    per_image: list[dict] = []
    if workers == 1:
        for i, task in enumerate(tasks):
            per_image.append(_evaluate_task(task, skip_failed))
            if progress:
                progress(i + 1, len(tasks), task[0])
        return per_image
    with process_pool(workers) as pool:  # forked (the compiled code inherited); they end with this process
        for i, res in enumerate(pool.map(_skipping_task if skip_failed else _evaluate_task, tasks, chunksize=1)):
            per_image.append(res)
            if progress:
                progress(i + 1, len(tasks), res["name"])
    return per_image


def _check_results(per_image: list[dict], pred_dir) -> None:
    """ValueError when there was nothing to evaluate, or the predictions mix kinds or
    numbers of segmentations."""
    if all(r["boundary"] is None and r["region"] is None for r in per_image):
        raise ValueError(f"nothing to evaluate: predictions in {pred_dir} are soft boundary maps "
                         "(no regions) and the boundary benchmark is disabled")
    kinds = {r["kind"] for r in per_image}
    if len(kinds) > 1:
        raise ValueError(f"predictions of mixed kinds in {pred_dir}: {sorted(kinds)}")
    if kinds & {"segs", "labels"}:
        counts = {r["name"]: (r["boundary"] or r["region"]).thresholds.size for r in per_image}
        if len(set(counts.values())) > 1:
            first = per_image[0]["name"]
            odd = [n for n, c in counts.items() if c != counts[first]]
            raise ValueError(
                f"images have different numbers of segmentations ({counts[first]} for {first!r}, "
                f"different for: {names_list(odd)})"
            )


def _collect(per_image: list[dict], boundary: bool, region: bool, fop: bool, official_rounding: bool) -> dict:
    """The dataset figures of :func:`evaluate`'s per-image results (all but ``timing``)."""
    out: dict = {
        "images": [r["name"] for r in per_image],
        "kind": per_image[0]["kind"],
        "n_images": len(per_image),
    }
    any_res = per_image[0]["boundary"] or per_image[0]["region"]
    out["thresholds"] = [float(t) for t in any_res.thresholds]
    counts_tab: dict = {}
    if boundary:
        bres: list[BoundaryImageResult] = [r["boundary"] for r in per_image]
        out["boundary"] = collect_boundary(bres, official_rounding=official_rounding)
        counts_tab["bdry"] = {b.name: b.as_table().tolist() for b in bres}
    if region and per_image[0]["region"] is not None:
        rres: list[RegionImageResult] = [r["region"] for r in per_image]
        out.update(collect_region(rres, official_rounding=official_rounding))
        if fop:
            out["fop"] = collect_fop(rres, official_rounding=official_rounding)
            counts_tab["fop"] = {r.name: np.column_stack([r.thresholds, r.fop]).tolist() for r in rres}
        counts_tab["reg"] = {
            r.name: np.column_stack([r.thresholds, r.cnt_r, r.sum_r, r.cnt_p, r.sum_p]).tolist() for r in rres
        }
        counts_tab["reg_best"] = {r.name: r.cnt_r_best for r in rres}
        counts_tab["ri_vi"] = {r.name: np.column_stack([r.thresholds, r.ri, r.vi]).tolist() for r in rres}
    out["per_image_counts"] = counts_tab
    return out


def _timing(per_image: list[dict], total: float, workers: int) -> dict:
    """:func:`evaluate`'s ``timing``: the wall clock ``total``, and the per-image times summed."""
    return {
        "total_s": total,
        "boundary_s": float(sum(r["time_boundary"] for r in per_image)),
        "region_s": float(sum(r["time_region"] for r in per_image)),
        "boundary_cpu_s": float(sum(r["cpu_boundary"] for r in per_image)),
        "region_cpu_s": float(sum(r["cpu_region"] for r in per_image)),
        "fop_cpu_s": float(sum((r["region"].extra.get("fop_cpu_s", 0.0) if r["region"] is not None else 0.0)
                               for r in per_image)),
        "workers": workers,
    }
