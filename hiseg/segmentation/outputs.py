"""The files of one image (``hiseg predict``): the ucm2 ``.mat``, the 8- and 16-bit saliency PNGs, the
labels and the colour overlay of a cut, written atomically and band by band for large images; which
files an image has, whether they are complete, and :func:`predict_file` (read, segment, write)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Optional

import numpy as np

from ..io import (AtomicFiles, display_path, file_complete, remove_stray_temps, to_float_rgb, write_png,
                  write_png_rows, write_ucm2_mat)
from .result import SegmentationResult
from .segmenter import BAND_PIXELS, Segmenter

__all__ = ["write_outputs", "output_paths", "image_outputs", "image_done", "predict_file", "region_colours",
           "MAX_LABELS", "OVERLAY_TINT"]

#: The most regions a label image (16-bit PNG, labels 0..65535) holds.
MAX_LABELS = 65536


def _quantise(x: np.ndarray, top: int, dtype) -> np.ndarray:
    """round(x * top) as ``dtype`` for x in [0, 1], with one float temporary."""
    y = x * np.float32(top)
    np.rint(y, out=y)
    return y.astype(dtype)


def _rgb8_rows(image: np.ndarray, r0: int, r1: int) -> np.ndarray:
    """Rows r0..r1-1 of an image (float RGB, or integer as :meth:`Segmenter.read` gives a
    reduced one) as uint8 RGB."""
    band = image[r0:r1]
    if band.dtype.kind in "ub":
        band = to_float_rgb(band)
    return (np.clip(band[..., :3], 0, 1) * 255 + 0.5).astype(np.uint8)


#: The share of a region's palette colour in the overlay (the image's: the rest): palette colours,
#: not the regions' mean colours, which are close to the image's own and read faintly.
OVERLAY_TINT = 0.5


def region_colours(k: int) -> np.ndarray:
    """(k, 3) uint8 RGB: a saturated colour per label, hues a golden angle apart (neighbouring
    labels far apart on the colour wheel), in two brightnesses; the same for any image."""
    import cv2

    i = np.arange(k)
    hsv = np.stack([(i * 0.6180339887 % 1.0) * 180, np.full(k, 200), np.where(i % 2, 200, 255)], axis=-1)
    return cv2.cvtColor(hsv.astype(np.uint8)[None], cv2.COLOR_HSV2RGB)[0]


def _overlay_rows(image: np.ndarray, label_rows, k: int, step: int):
    """The rows of :func:`_colour_overlay` (uint8 RGB) as a function ``(r0, r1) -> rows``, of
    label rows given the same way (:meth:`SegmentationResult.label_rows`)."""
    import cv2

    h = image.shape[0]
    lut = region_colours(k)

    def rows(r0, r1):
        r1 = min(h, r1)
        lo = max(0, r0 - 2)  # the outline of rows r0..r1-1 sees the labels two rows around them
        lab = label_rows(lo, min(h, r1 + 1))
        band = cv2.addWeighted(lut[lab[r0 - lo:r1 - lo]], OVERLAY_TINT, _rgb8_rows(image, r0, r1), 1 - OVERLAY_TINT, 0)
        line = np.zeros(lab.shape, np.uint8)
        line[:, 1:][lab[:, 1:] != lab[:, :-1]] = 1
        line[1:][lab[1:] != lab[:-1]] = 1
        band[cv2.dilate(line, np.ones((3, 3), np.uint8))[r0 - lo:r1 - lo] > 0] = 0  # the dark outline
        band[line[r0 - lo:r1 - lo] > 0] = 255
        return band
    return rows


def _colour_overlay(image: np.ndarray, labels: np.ndarray, rows: Optional[int] = None) -> np.ndarray:
    """A colour per region (:func:`region_colours`) blended with the image (:data:`OVERLAY_TINT`),
    region boundaries as a white line with a black outline on both sides (visible on light and
    dark areas alike; uint8 BGR).
    ``rows``: drawn that many rows at a time (default: all; the same image). uint8
    arithmetic: a few bytes per pixel for a photograph."""
    h = image.shape[0]
    step = max(1, int(rows or h))
    draw = _overlay_rows(image, lambda r0, r1: labels[r0:r1], int(labels.max()) + 1, step)
    return np.ascontiguousarray(np.concatenate([draw(r0, r0 + step) for r0 in range(0, h, step)])[..., ::-1])


def write_outputs(out_dir, stem: str, result: SegmentationResult, image: np.ndarray,
                  n_regions: Optional[int] = None, threshold: Optional[float] = None,
                  min_size="auto", overwrite: bool = True) -> list[Path]:
    """Write the files of one image into ``out_dir``, together (:class:`hiseg.io.AtomicFiles`:
    each to a temporary file, one at a time, then all moved into place; an error or a
    Ctrl-C leaves none of them half-written and no temporary file).

    ``{stem}_ucm.png`` (8-bit, the square root of the saliency drawn dark on white, as the README's
    figure and the explorer's panel: a view, whose weak edges show),
    ``{stem}_ucm16.png`` (16-bit, the saliency itself), ``{stem}.mat`` (BSDS ``ucm2``, double,
    exact), and with ``n_regions`` or ``threshold`` ``{stem}_labels.png``
    (uint16 labels) and ``{stem}_overlay.png`` (``min_size``: see
    :meth:`SegmentationResult.cut`). ``image``: the float RGB image, or what
    :meth:`Segmenter.read` returns for it. ``stem`` may hold any bytes a file name may (not
    only UTF-8). Returns the written paths. A cut of more than :data:`MAX_LABELS` regions
    does not fit a 16-bit label image: ValueError, nothing written. ``overwrite=False``: the
    files are created exclusively; when one exists, even made by another process meanwhile,
    FileExistsError names it and none of this image's files is left by this call.

    Memory: the full-size outputs are drawn from the cut and the hierarchy at the working
    resolution, :data:`BAND_PIXELS` at a time; an image above that size is encoded band by
    band (:func:`hiseg.io.write_png_rows`, the same pixels as OpenCV's whole-image PNG) and
    the ``.mat`` column block by column block: no full-size output array is ever whole
    (a 12000x9000 photograph: about 100 MB beyond the image).
    """
    out = Path(out_dir)
    names = output_paths(out, stem)
    cut = n_regions is not None or threshold is not None
    h, w = result.shape
    step = max(1, BAND_PIXELS // max(w, 1))
    labels = None
    if cut:
        labels = (result.working_cut(n_regions=n_regions, min_size=min_size) if n_regions is not None
                  else result.working_cut(threshold=threshold))
        k = int(labels.max()) + 1
        if k > MAX_LABELS:
            shown = display_path(stem)
            raise ValueError(f"{shown}: the cut has {k} regions, more than a 16-bit label image "
                             f"({display_path(names['labels'].name)}) holds ({MAX_LABELS}); choose a higher threshold "
                             f"or fewer regions (nothing of {shown} was written)")

    def png(rows_of, dtype):  # a large image's band by band, a small one's whole
        if h * w > BAND_PIXELS:
            return write_png_rows(rows_of, h, dtype, step)
        whole = np.asarray(rows_of(0, h)).astype(dtype)
        return write_png(np.ascontiguousarray(whole[..., ::-1]) if whole.ndim == 3 else whole)

    blocks = result.ucm2_blocks()

    def saliency(top, dtype, view=False):  # view: the square root, dark on white, for the eye (weak edges visible)
        def rows(r0, r1):
            s = np.clip(blocks[2 * r0 + 2:2 * min(h, r1) + 1, 2:2 * w + 1][::2, ::2], 0, 1).astype(np.float32)
            return top - _quantise(np.sqrt(s, out=s), top, dtype) if view else _quantise(s, top, dtype)
        return rows

    out.mkdir(parents=True, exist_ok=True)
    with AtomicFiles(overwrite) as files:
        if cut:
            label_rows = result.label_rows(labels)
            files.write(names["labels"], png(label_rows, np.uint16))
            files.write(names["overlay"], png(_overlay_rows(image, label_rows, k, step), np.uint8))
        files.write(names["ucm"], png(saliency(255, np.uint8, view=True), np.uint8))
        files.write(names["ucm16"], png(saliency(65535, np.uint16), np.uint16))
        files.write(names["mat"], lambda tmp: write_ucm2_mat(tmp, blocks))
        files.commit()
    return image_outputs(out, stem, cut)


def output_paths(out_dir, stem: str) -> dict:
    """The files :func:`write_outputs` may write for image ``stem``, by kind."""
    out = Path(out_dir)
    return {"ucm": out / f"{stem}_ucm.png", "ucm16": out / f"{stem}_ucm16.png", "mat": out / f"{stem}.mat",
            "labels": out / f"{stem}_labels.png", "overlay": out / f"{stem}_overlay.png"}


def image_outputs(out_dir, stem: str, cut: bool) -> list[Path]:
    """The files :func:`write_outputs` writes for image ``stem``: the saliency maps and the
    ``.mat``, and with a cut (``n_regions`` or ``threshold`` given) the labels and overlay."""
    names = output_paths(out_dir, stem)
    return [names[k] for k in ("ucm", "ucm16", "mat") + (("labels", "overlay") if cut else ())]


def image_done(out_dir, stem: str, cut: bool, also=()) -> bool:
    """Whether every file of image ``stem`` (:func:`image_outputs`, plus the paths ``also``,
    e.g. its ``--html`` page) is present and complete (:func:`hiseg.io.file_complete`: a few
    small reads per file): what ``hiseg predict --resume`` skips. It does not tell which
    options wrote them: ``hiseg predict`` and :func:`predict_file` check that against the
    folder's run record (:class:`hiseg.segmentation.record.RunRecord`) before they skip anything."""
    return all(file_complete(p) for p in [*image_outputs(out_dir, stem, cut), *also])


def predict_file(seg: Segmenter, path, out_dir, tile: int = 512, n_regions: Optional[int] = None,
                 threshold: Optional[float] = None, min_size="auto", boundary: Optional[np.ndarray] = None,
                 overwrite: bool = True, resume: bool = False, also=(), record: bool = True):
    """``hiseg predict``'s work on one image file: read it, segment it with ``seg`` and
    :func:`write_outputs` its files into ``out_dir``. ``boundary``: its boundary map at the
    working resolution, when the network ran elsewhere (``--workers``, :mod:`hiseg.segmentation.predict_ddp`);
    the result is the same as computing it here. Every path that writes ``hiseg predict``'s
    files goes through here.

    ``overwrite=False``: the files are created exclusively (FileExistsError naming one that
    exists, nothing of this image left: :func:`write_outputs`). ``resume=True``: an image
    whose files (and the paths ``also``) are all present and complete (:func:`image_done`)
    is skipped, returning None without reading it; one with some files only (an
    interrupted run) is done again, its files replaced and the interrupted run's temporary
    files removed.

    ``record``: keep the folder's run record (:class:`hiseg.segmentation.record.RunRecord`, the
    one ``hiseg predict`` keeps): the image is entered with this call's settings and model
    (:func:`~hiseg.segmentation.record.call_options`), and ``resume=True`` refuses (ValueError
    naming each setting that differs) an image whose files were made with others, as ``hiseg
    predict --resume`` does; one the record does not name is skipped with a warning. Calls into
    one folder from several processes at once may lose each other's entries (a resume then
    skips those images with that warning): use :func:`~hiseg.segmentation.predict_ddp.predict_files`
    or ``hiseg predict --workers``. False: the caller keeps the record (``hiseg predict``).

    Returns (image, result, the warnings' messages), or None for a skipped image; the image
    as :meth:`Segmenter.read` gives it (a large one: its decoded integer array, RGB order).
    """
    import warnings

    path = Path(path)
    cut = n_regions is not None or threshold is not None
    run = _Entry(seg, path, out_dir, n_regions, threshold, min_size, resume) if record else None
    if resume:
        mine = image_outputs(out_dir, path.stem, cut)
        if image_done(out_dir, path.stem, cut, also):
            if run is not None and run.unknown:
                warnings.warn(f"predict_file(resume=True): {display_path(out_dir)} has files of "
                              f"{display_path(path.name)} that its run record does not name: their settings cannot be "
                              "checked; skipped as they are (resume=False does it again)", stacklevel=2)
            return None
        for p in [*mine, *also]:
            remove_stray_temps(p)
        overwrite = overwrite or any(os.path.lexists(p) for p in mine)
    with warnings.catch_warnings(record=True) as read_notes:  # reported with the image's others (multi-frame files)
        warnings.simplefilter("always")
        work, out_shape, img = seg.read(path)
    from_files = getattr(seg.backend, "result_for", None)  # another segmenter's maps or masks, per image
    if from_files is not None:
        res = from_files(seg, path, work, out_shape)
    else:
        res = seg.finish(work, seg.network_map(work, tile) if boundary is None else boundary, out_shape)
    if run is not None:
        run.begin(overwrite)
    written = False
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            write_outputs(out_dir, path.stem, res, img, n_regions=n_regions, threshold=threshold, min_size=min_size,
                          overwrite=overwrite)
        written = True
    finally:
        if run is not None:
            run.end(written)
    return img, res, [str(w.message) for w in [*read_notes, *caught]]


class _Entry:
    """One image's entry in its folder's run record, as :func:`predict_file` keeps it: checked
    when made (``resume``: ValueError when the image's files there were made otherwise;
    ``unknown``: the record does not name them), :meth:`begin` before its files are written,
    :meth:`end` after."""

    def __init__(self, seg, path: Path, out_dir, n_regions, threshold, min_size, resume: bool):
        from .record import RunRecord, call_options

        self.out, self.stem, self.resume = Path(out_dir), path.stem, resume
        self.record, self.wanted = RunRecord(out_dir), call_options(seg, n_regions, threshold, min_size)
        self.present = {self.stem} if any(os.path.lexists(p) for p in output_paths(out_dir, self.stem).values()) \
            else set()
        self.unknown = bool(resume and self.present and
                            self.record.check_resume(self.wanted, [self.stem], self.out, call="predict_file"))

    def begin(self, overwrite: bool) -> None:
        self.before = self.record.entry(self.stem)
        self.record.assign(self.wanted, [self.stem], self.present, overwrite)
        self.record.save(clean=self.resume)

    def end(self, written: bool) -> None:
        """After the write: the image is this call's, or (it failed: its files untouched) as before."""
        if written:
            self.record.finish([self.stem], {self.stem})
        elif not self.record.found and not self.present:
            self.record.discard()  # nothing written into a folder without a record: none left
            return
        else:
            self.record.put_entry(self.stem, self.before)
        self.record.save(clean=False)
