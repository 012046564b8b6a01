"""Prediction files of the BSDS500 benchmark: formats, loading, pairing with ground truth.

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

from dataclasses import dataclass
from pathlib import Path
from typing import Iterator, Sequence

import numpy as np

from ..io import check_label_image, loadmat, read_gray_image
from .matching import seg_to_boundaries
from .summary import thresholds

__all__ = ["KINDS", "Prediction", "discover_pairs", "load_prediction", "names_list"]

KINDS = ("auto", "ucm2", "segs", "pb", "labels")
_PRED_EXTS = (".mat", ".png")


#: the values of ``first_label``: ``"auto"`` reads a label image holding a 0 as 0-based, one without as 1-based
FIRST_LABELS = ("auto", 1, 0)


def _as_labels(x, where: str, first_label=1) -> np.ndarray:
    """A prediction's label image, checked (:func:`hiseg.io.check_label_image`). BSDS label
    images number their regions from 1; ``first_label=0`` reads 0-based images (such as
    ``hiseg predict``'s ``_labels.png``) by adding 1; ``"auto"`` reads an image that holds a 0
    as 0-based and one that does not as 1-based (exact: a 1-based image has no 0, and the region
    figures do not depend on the labels' values). A 0 in a 1-based image is refused:
    the region benchmark would silently drop those pixels as unlabelled."""
    x = check_label_image(x, where)
    if first_label == 0 or (first_label == "auto" and x.min() == 0):
        return x + 1
    if first_label == "auto":
        return x
    if x.min() == 0:
        raise ValueError(f"{where}: label 0 in a label image, whose regions are numbered from 1 (BSDS format); "
                         "for a 0-based label image (such as hiseg predict's _labels.png) pass first_label=0 "
                         "(hiseg evaluate --first-label 0)")
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

    def segmentations(self, thresh, fop: bool = False) -> Iterator[tuple]:
        """Yield ``(key, label image)`` per threshold; with ``fop``, ``(key, label image,
        fop label image or None)``: a ucm2's partition as SEISM cuts it
        (:func:`hiseg.metrics.fop.seism_ucm_labels`) where it is not the BSDS one (None:
        the same partition). A ucm2's partitions (:func:`hiseg.metrics.region.ucm_to_labels`)
        are grown from one threshold to the next (:class:`NestedUcmLabels`)."""
        if self.kind == "ucm2":
            from .region import NestedUcmLabels  # scipy.ndimage: imported when a ucm2 is cut (not by the CLI's help)

            levels = np.unique(self.data)
            bsds, seism = NestedUcmLabels(self.data), NestedUcmLabels(self.data, seism=True)
            last_key, labels, other = None, None, None
            for t in thresh:
                key = int(np.searchsorted(levels, t, side="right"))
                if key != last_key:  # same key, same partition: label only once
                    last_key, labels = key, bsds.labels(t)
                    if fop:
                        other = seism.labels(t)
                        # SEISM's regions refine the BSDS ones: as many regions, same partition
                        if labels.min() > 0 and _n_labels(other) == _n_labels(labels):
                            other = None
                yield (key, labels, other) if fop else (key, labels)
        elif self.kind in ("segs", "labels"):
            for i, seg in enumerate(self.data):
                yield (("seg", i), seg, None) if fop else (("seg", i), seg)
        else:
            raise ValueError(f"{self.path}: a soft boundary map has no regions")


def _n_labels(labels: np.ndarray) -> int:
    return int(np.count_nonzero(np.bincount(labels.ravel())))


def load_prediction(path, kind: str = "auto", first_label=1) -> Prediction:
    """Load one prediction file.

    Parameters
    ----------
    path : str or Path
        ``.mat`` (``ucm2`` or ``segs``) or ``.png`` file.
    kind : {"auto", "ucm2", "segs", "pb", "labels"}
        Format (see module docstring).
    first_label : {1, 0, "auto"}
        The label of the first region in label images (``segs``, ``labels``): 1 in the
        BSDS format (a 0 is then an error), 0 for 0-based images, ``"auto"``: 0 for an image
        that holds a 0, else 1.

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
    if first_label not in FIRST_LABELS:
        raise ValueError(f"first_label must be 1, 0 or 'auto', got {first_label!r}")
    ext = path.suffix.lower()
    if ext == ".mat":
        if kind in ("pb", "labels"):
            raise ValueError(f"{path}: kind {kind!r} expects an image file, got a .mat file")
        m = loadmat(path)
        if kind in ("auto", "ucm2") and "ucm2" in m:
            try:
                ucm = np.asarray(m["ucm2"], dtype=np.float64)
            except (TypeError, ValueError):
                raise ValueError(f"{path}: 'ucm2' must be a numeric (2H+1)x(2W+1) array, "
                                 f"got {np.asarray(m['ucm2']).dtype}") from None
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
            segs = [_as_labels(s, f"{path} segs[{i}]", first_label) for i, s in enumerate(cell)]
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
            return Prediction("labels", [_as_labels(arr, str(path), first_label)], str(path))
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


def names_list(items: Sequence[str], limit: int = 10) -> str:
    items = sorted(items)
    s = ", ".join(items[:limit])
    return s + (f", ... ({len(items)} in all)" if len(items) > limit else "")


#: the values of ``subset``: every ground-truth image must have a prediction, or only the predicted ones are scored
SUBSETS = ("all", "predicted")


def discover_pairs(pred_dir, gt_dir, kind: str = "auto", subset: str = "all") -> list[tuple[str, Path, Path]]:
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
    subset : {"all", "predicted"}
        ``"all"``: every ground-truth file needs a prediction (the benchmark's set);
        ``"predicted"``: only the predicted images are paired (ground truth without a
        prediction is left out; a prediction without ground truth is still an error).

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
    if subset not in SUBSETS:
        raise ValueError(f"subset must be one of {SUBSETS}, got {subset!r}")
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
    missing = set(gts) - set(preds) if subset == "all" else set()
    extra = set(preds) - set(gts)
    if kind == "auto" and exts == (".mat",) and missing:  # PNG predictions ignored beside .mat ones
        pngs = {p.stem: p.name for p in pred_dir.iterdir() if p.is_file() and p.suffix.lower() == ".png"}
        mixed = sorted(s for s in missing if s in pngs)
        if mixed:
            raise ValueError(f"{pred_dir} mixes .mat and .png predictions: with .mat files there, the .png files "
                             f"are read as views of them, so {names_list([pngs[s] for s in mixed])} "
                             f"{'is' if len(mixed) == 1 else 'are'} not read; put one kind of prediction per folder "
                             "(or give --kind pb / labels for the PNGs)")
    if missing or extra:
        parts = []
        if missing:
            parts.append(f"no prediction in {pred_dir} for ground truth: {names_list([gts[s].name for s in missing])} "
                         f"({len(preds)} prediction(s) for {len(gts)} ground-truth file(s); to score only the "
                         "predicted images: subset='predicted', hiseg evaluate --subset predicted)")
        if extra:
            parts.append(f"no ground truth in {gt_dir} for prediction: {names_list([preds[s].name for s in extra])}")
        raise ValueError("prediction and ground-truth file names do not match; " + "; ".join(parts))
    return [(s, preds[s], gts[s]) for s in sorted(gts) if s in preds]
