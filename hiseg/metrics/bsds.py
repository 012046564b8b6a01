"""Dataset-level BSDS500 benchmark: file discovery, I/O, parallel driver, writers.

:func:`evaluate` pairs prediction files with ground-truth files by stem,
evaluates every image in a process pool (boundary benchmark of
:mod:`hiseg.metrics.boundary`, region benchmark of :mod:`hiseg.metrics.region`)
and collects the dataset figures exactly as the official MATLAB benchmark
(``allBench`` / ``boundaryBench`` + ``collect_eval_bdry`` / ``collect_eval_reg``).
:func:`write_official_txt` writes the same ``eval_*.txt`` files so that the
outputs can be diffed against the official ones.

Prediction formats (``kind``)
-----------------------------
``"ucm2"``
    ``.mat`` with a variable ``ucm2`` of size (2H+1)x(2W+1) (doubled grid).
    Boundaries: ``ucm2[2::2, 2::2] >= t``; regions: 8-connected components of
    ``ucm2 <= t`` read at ``[1::2, 1::2]``. Thresholds
    ``linspace(1/(n+1), 1-1/(n+1), n)``.
``"segs"``
    ``.mat`` with a cell ``segs`` of label images. One "threshold" per
    segmentation, numbered ``1..len(segs)``: like the official code, the
    requested number of thresholds is ignored (it warns and uses
    ``numel(segs)``), which is why the reference ``test_3`` and ``test_4``
    agree. Boundaries are ``seg2bdry(seg, 'imageSize')``, thinned.
``"pb"``
    Soft boundary image (``.png`` 8-bit read as value/255, 16-bit as
    value/65535). Boundary benchmark only.
``"labels"``
    A label image (``.png``), a single segmentation (one threshold).
``"auto"``
    ``.mat`` files: ``ucm2`` or ``segs`` depending on the variable found;
    ``.png`` files: ``"pb"``. Label PNGs must be asked for with
    ``kind="labels"``.

Ground truth: ``.mat`` files with the 1xK cell ``groundTruth`` of structs with
``Segmentation`` and ``Boundaries``.
"""

from __future__ import annotations

import json
import os
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterator, Mapping, Sequence

import numpy as np

from .boundary import (
    DEFAULT_MAX_DIST,
    BoundaryImageResult,
    BoundaryMatcher,
    boundary_counts,
    collect_boundary,
    seg_to_boundaries,
    thresholds,
)
from .region import RegionImageResult, collect_region, region_counts, ucm_to_labels
from ..io import atomic_write_files, load_ground_truth, loadmat, read_gray_image

__all__ = [
    "KINDS",
    "Prediction",
    "discover_pairs",
    "evaluate",
    "evaluate_image",
    "load_prediction",
    "official_txt_files",
    "results_to_json",
    "write_official_txt",
]

KINDS = ("auto", "ucm2", "segs", "pb", "labels")
_PRED_EXTS = (".mat", ".png")


def _as_labels(x, where: str) -> np.ndarray:
    x = np.asarray(x)
    if x.ndim != 2:
        raise ValueError(f"{where}: label image must be 2-D, got shape {x.shape}")
    if x.dtype.kind == "b":
        x = x.astype(np.int64)
    if x.dtype.kind == "f":
        if not np.all(np.isfinite(x)) or not np.all(x == np.round(x)):
            raise ValueError(f"{where}: label image has non-integer values")
    elif x.dtype.kind not in "iu":
        raise ValueError(f"{where}: label image has dtype {x.dtype}")
    x = x.astype(np.int64)
    if x.size and x.min() < 0:
        raise ValueError(f"{where}: negative labels")
    return x


@dataclass
class Prediction:
    """A loaded prediction of one image.

    Attributes
    ----------
    kind : str
        ``"ucm2"``, ``"segs"``, ``"pb"`` or ``"labels"``.
    data : numpy.ndarray or list of numpy.ndarray
        The doubled-grid ucm, the soft boundary map in [0, 1], or the label
        images.
    path : str
        Source file (for messages).
    """

    kind: str
    data: object
    path: str = ""

    @property
    def shape(self) -> tuple[int, int]:
        """Image shape (H, W)."""
        if self.kind == "ucm2":
            h2, w2 = self.data.shape
            return ((h2 - 1) // 2, (w2 - 1) // 2)
        if self.kind == "pb":
            return tuple(self.data.shape)
        return tuple(self.data[0].shape)

    @property
    def has_regions(self) -> bool:
        return self.kind != "pb"

    def thresholds(self, n: int) -> np.ndarray:
        """Thresholds used for this prediction (``1..len(segs)`` for label images)."""
        if self.kind in ("segs", "labels"):
            return np.arange(1, len(self.data) + 1, dtype=np.float64)
        return thresholds(n)

    def boundary_maps(self, thresh) -> Iterator[tuple[object, np.ndarray]]:
        """Yield ``(key, binary map)`` per threshold (un-thinned)."""
        if self.kind in ("ucm2", "pb"):
            pb = self.data[2::2, 2::2] if self.kind == "ucm2" else self.data
            levels = np.unique(pb)
            for t in thresh:
                yield int(np.searchsorted(levels, t, side="left")), pb >= t
        else:
            for i, seg in enumerate(self.data):
                yield ("seg", i), seg_to_boundaries(seg)

    def segmentations(self, thresh) -> Iterator[tuple[object, np.ndarray]]:
        """Yield ``(key, label image)`` per threshold."""
        if self.kind == "ucm2":
            levels = np.unique(self.data)
            last_key, labels = None, None
            for t in thresh:
                key = int(np.searchsorted(levels, t, side="right"))
                if key != last_key:  # same key, same partition: label only once
                    last_key, labels = key, ucm_to_labels(self.data, t)
                yield key, labels
        elif self.kind in ("segs", "labels"):
            for i, seg in enumerate(self.data):
                yield ("seg", i), seg
        else:
            raise ValueError(f"{self.path}: a soft boundary map has no regions")


def load_prediction(path, kind: str = "auto") -> Prediction:
    """Load one prediction file.

    Parameters
    ----------
    path : str or Path
        ``.mat`` (``ucm2`` or ``segs``) or ``.png`` file.
    kind : {"auto", "ucm2", "segs", "pb", "labels"}
        Format (see module docstring).

    Returns
    -------
    Prediction

    Raises
    ------
    FileNotFoundError
        If the file does not exist.
    ValueError
        If it cannot be read or does not hold the expected content.
    """
    path = Path(path)
    if kind not in KINDS:
        raise ValueError(f"unknown prediction kind {kind!r}; expected one of {KINDS}")
    ext = path.suffix.lower()
    if ext == ".mat":
        if kind in ("pb", "labels"):
            raise ValueError(f"{path}: kind {kind!r} expects an image file, got a .mat file")
        m = loadmat(path)
        if kind in ("auto", "ucm2") and "ucm2" in m:
            ucm = np.asarray(m["ucm2"], dtype=np.float64)
            if ucm.ndim != 2 or ucm.shape[0] % 2 == 0 or ucm.shape[1] % 2 == 0 or min(ucm.shape) < 3:
                raise ValueError(f"{path}: 'ucm2' must be (2H+1)x(2W+1), got shape {ucm.shape}")
            if not np.all(np.isfinite(ucm)):
                raise ValueError(f"{path}: 'ucm2' has non-finite values")
            lo, hi = float(ucm.min()), float(ucm.max())
            if lo < 0 or hi > 1:
                raise ValueError(f"{path}: 'ucm2' values span [{lo:g}, {hi:g}], but the benchmark thresholds "
                                 "[0, 1]: rescale the map to [0, 1] (e.g. divide an 8-bit map by 255)")
            return Prediction("ucm2", ucm, str(path))
        if kind in ("auto", "segs") and "segs" in m:
            cell = np.asarray(m["segs"], dtype=object).ravel()
            segs = [_as_labels(s, f"{path} segs[{i}]") for i, s in enumerate(cell)]
            if not segs:
                raise ValueError(f"{path}: empty 'segs'")
            for s in segs:
                if s.shape != segs[0].shape:
                    raise ValueError(f"{path}: segmentations in 'segs' have different shapes")
            return Prediction("segs", segs, str(path))
        want = {"auto": "'ucm2' or 'segs'", "ucm2": "'ucm2'", "segs": "'segs'"}[kind]
        found = sorted(k for k in m if not k.startswith("__"))
        raise ValueError(f"{path}: no variable {want} (found {found})")
    if ext == ".png":
        if kind in ("ucm2", "segs"):
            raise ValueError(f"{path}: kind {kind!r} expects a .mat file")
        arr = read_gray_image(path)
        if kind == "labels":
            return Prediction("labels", [_as_labels(arr, str(path))], str(path))
        if arr.dtype == np.uint8:
            pb = arr.astype(np.float64) / 255.0
        elif arr.dtype == np.uint16:
            pb = arr.astype(np.float64) / 65535.0
        elif arr.dtype == bool:
            pb = arr.astype(np.float64)
        else:
            raise ValueError(f"{path}: unsupported image dtype {arr.dtype} for a boundary map")
        return Prediction("pb", pb, str(path))
    raise ValueError(f"{path}: unsupported prediction file type {ext!r} (expected .mat or .png)")


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

    Returns
    -------
    dict
        ``{"name", "kind", "boundary": BoundaryImageResult | None, "region":
        RegionImageResult | None, "time_boundary", "time_region"}``.

    Raises
    ------
    FileNotFoundError, ValueError
        On missing/unreadable files or prediction vs ground-truth shape
        mismatch; messages name the files.
    """
    pred = load_prediction(pred_path, kind)
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
        out["region"] = region_counts(pred.segmentations(thresh), gt_segs, thresh, name=name)
        out["time_region"] = time.perf_counter() - t0
        out["cpu_region"] = time.process_time() - c0
    return out


def _evaluate_task(args) -> dict:
    return evaluate_image(*args)


# ----------------------------------------------------------------------------
# dataset
# ----------------------------------------------------------------------------
def _names(items: Sequence[str], limit: int = 10) -> str:
    items = sorted(items)
    s = ", ".join(items[:limit])
    return s + (f", ... ({len(items)} in all)" if len(items) > limit else "")


def discover_pairs(pred_dir, gt_dir, kind: str = "auto") -> list[tuple[str, Path, Path]]:
    """Pair prediction and ground-truth files by stem.

    Parameters
    ----------
    pred_dir : str or Path
        Folder of predictions (``.mat`` and/or ``.png``; other files ignored).
    gt_dir : str or Path
        Folder of ground-truth ``.mat`` files.
    kind : str
        Prediction format; restricts the extensions looked at
        (``ucm2``/``segs``: ``.mat``; ``pb``/``labels``: ``.png``). With ``auto``, a
        folder that holds ``.mat`` files is read for those only (the PNG views that
        ``hiseg predict`` writes beside them are ignored).

    Returns
    -------
    list of (name, pred_path, gt_path)
        Sorted by name.

    Raises
    ------
    FileNotFoundError
        If a folder does not exist.
    ValueError
        If a folder holds no usable file, a stem has two prediction files, or
        the names do not match (the message lists the unmatched files).
    """
    pred_dir, gt_dir = Path(pred_dir), Path(gt_dir)
    for d, what in ((pred_dir, "prediction"), (gt_dir, "ground-truth")):
        if not d.exists():
            raise FileNotFoundError(f"{what} folder does not exist: {d}")
        if not d.is_dir():
            raise NotADirectoryError(f"{what} path is not a folder: {d}")
    exts = {"auto": _PRED_EXTS, "ucm2": (".mat",), "segs": (".mat",), "pb": (".png",), "labels": (".png",)}[kind]
    if kind == "auto" and any(p.suffix.lower() == ".mat" for p in pred_dir.iterdir() if p.is_file()):
        # a folder written by `hiseg predict` holds NAME.mat (ucm2) beside NAME_ucm.png etc.:
        # the .mat files are the predictions, the PNGs are views of them
        exts = (".mat",)
    preds: dict[str, Path] = {}
    for p in sorted(pred_dir.iterdir()):
        if p.is_file() and p.suffix.lower() in exts:
            if p.stem in preds:
                raise ValueError(f"two prediction files for image {p.stem!r}: {preds[p.stem].name} and {p.name}")
            preds[p.stem] = p
    gts = {p.stem: p for p in sorted(gt_dir.iterdir()) if p.is_file() and p.suffix.lower() == ".mat"}
    if not preds:
        raise ValueError(f"no prediction files ({'/'.join(exts)}) in {pred_dir}")
    if not gts:
        raise ValueError(f"no ground-truth .mat files in {gt_dir}")
    missing = set(gts) - set(preds)
    extra = set(preds) - set(gts)
    if missing or extra:
        parts = []
        if missing:
            parts.append(f"no prediction in {pred_dir} for ground truth: {_names([gts[s].name for s in missing])}")
        if extra:
            parts.append(f"no ground truth in {gt_dir} for prediction: {_names([preds[s].name for s in extra])}")
        raise ValueError("prediction and ground-truth file names do not match; " + "; ".join(parts))
    return [(s, preds[s], gts[s]) for s in sorted(gts)]


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

    Returns
    -------
    dict (JSON-serialisable)
        ``images`` (names), ``kind``, ``n_images``, ``thresholds``;
        ``boundary`` {ods {threshold, recall, precision, f}, ois {recall,
        precision, f}, ap, per_threshold, per_image}; for region-capable
        inputs ``covering`` {ods, ods_threshold, ois, best, per_threshold,
        per_image}, ``pri`` and ``vi`` {ods, ods_threshold, ois,
        per_threshold}; ``per_image_counts`` (the official per-image tables:
        ``bdry`` rows [thresh cntR sumR cntP sumP], ``reg`` rows [thresh
        cntR sumR cntP sumP], ``reg_best`` cntR_best, ``ri_vi`` rows [thresh
        RI VI]); ``timing`` {total_s (wall clock), boundary_s, region_s (wall
        clock summed over images), boundary_cpu_s, region_cpu_s (CPU time of
        the worker processes, summed over images), workers}.

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
    pairs = discover_pairs(pred_dir, gt_dir, kind)
    if workers is None:
        workers = os.cpu_count() or 1
    workers = max(1, min(int(workers), len(pairs)))
    tasks = [(s, str(p), str(g), n_thresholds, kind, boundary, region, max_dist) for s, p, g in pairs]
    t_start = time.perf_counter()
    per_image: list[dict] = []
    if workers == 1:
        for i, task in enumerate(tasks):
            per_image.append(_evaluate_task(task))
            if progress:
                progress(i + 1, len(tasks), task[0])
    else:
        with ProcessPoolExecutor(max_workers=workers) as pool:
            for i, res in enumerate(pool.map(_evaluate_task, tasks, chunksize=1)):
                per_image.append(res)
                if progress:
                    progress(i + 1, len(tasks), res["name"])
    total = time.perf_counter() - t_start

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
                f"different for: {_names(odd)})"
            )
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
        counts_tab["reg"] = {
            r.name: np.column_stack([r.thresholds, r.cnt_r, r.sum_r, r.cnt_p, r.sum_p]).tolist() for r in rres
        }
        counts_tab["reg_best"] = {r.name: r.cnt_r_best for r in rres}
        counts_tab["ri_vi"] = {r.name: np.column_stack([r.thresholds, r.ri, r.vi]).tolist() for r in rres}
    out["per_image_counts"] = counts_tab
    out["timing"] = {
        "total_s": total,
        "boundary_s": float(sum(r["time_boundary"] for r in per_image)),
        "region_s": float(sum(r["time_region"] for r in per_image)),
        "boundary_cpu_s": float(sum(r["cpu_boundary"] for r in per_image)),
        "region_cpu_s": float(sum(r["cpu_region"] for r in per_image)),
        "workers": workers,
    }
    return out


# ----------------------------------------------------------------------------
# writers
# ----------------------------------------------------------------------------
def _fmt_rows(rows, int_first: bool = False) -> str:
    lines = []
    for row in rows:
        cells = []
        for j, v in enumerate(row):
            cells.append("%10d" % int(v) if (int_first and j == 0) else "%10g" % float(v))
        lines.append(" ".join(cells) + "\n")
    return "".join(lines)


def official_txt_files(results: Mapping) -> dict[str, str]:
    """Contents of the official benchmark's summary files.

    Parameters
    ----------
    results : dict
        Output of :func:`evaluate`.

    Returns
    -------
    dict
        File name -> text, for ``eval_bdry.txt``, ``eval_bdry_thr.txt``,
        ``eval_bdry_img.txt`` and (with region results) ``eval_cover.txt``,
        ``eval_cover_th.txt``, ``eval_cover_img.txt``, ``eval_RI_VOI.txt``,
        ``eval_RI_VOI_thr.txt``, formatted like the official ``fprintf``
        (``%10g``; image indices ``%10d``, 1-based).
    """
    files: dict[str, str] = {}
    b = results.get("boundary")
    if b:
        o, s = b["ods"], b["ois"]
        files["eval_bdry.txt"] = _fmt_rows(
            [[o["threshold"], o["recall"], o["precision"], o["f"], s["recall"], s["precision"], s["f"], b["ap"]]]
        )
        files["eval_bdry_thr.txt"] = _fmt_rows(
            [[r["threshold"], r["recall"], r["precision"], r["f"]] for r in b["per_threshold"]]
        )
        files["eval_bdry_img.txt"] = _fmt_rows(
            [[i + 1, r["threshold"], r["recall"], r["precision"], r["f"]] for i, r in enumerate(b["per_image"])],
            int_first=True,
        )
    c = results.get("covering")
    if c:
        files["eval_cover.txt"] = _fmt_rows([[c["ods_threshold"], c["ods"], c["ois"], c["best"]]])
        files["eval_cover_th.txt"] = _fmt_rows([[r["threshold"], r["covering"]] for r in c["per_threshold"]])
        files["eval_cover_img.txt"] = _fmt_rows(
            [[i + 1, r["threshold"], r["covering"], r["precision"]] for i, r in enumerate(c["per_image"])],
            int_first=True,
        )
        p, v = results["pri"], results["vi"]
        files["eval_RI_VOI.txt"] = _fmt_rows(
            [[p["ods_threshold"], p["ods"], p["ois"], v["ods_threshold"], v["ods"], v["ois"]]]
        )
        files["eval_RI_VOI_thr.txt"] = _fmt_rows(
            [[a["threshold"], a["pri"], bb["vi"]] for a, bb in zip(p["per_threshold"], v["per_threshold"])]
        )
    return files


def write_official_txt(results: Mapping, out_dir) -> list[Path]:
    """Write the official ``eval_*.txt`` summary files into ``out_dir`` (atomically).

    Returns the written paths; see :func:`official_txt_files`.
    """
    return atomic_write_files(out_dir, official_txt_files(results))


def results_to_json(results: Mapping) -> str:
    """JSON text of :func:`evaluate`'s output."""
    return json.dumps(results, indent=1, sort_keys=False)
