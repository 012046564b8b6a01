"""Label images and BSDS ground truth in (MATLAB ``.mat`` files), ultrametric contour maps out
(:func:`write_ucm2_mat`, streamed: the BSDS benchmark's ``ucm2`` variable)."""
from __future__ import annotations

from pathlib import Path

import numpy as np

from .errors import DataError

__all__ = ["loadmat", "check_label_image", "load_ground_truth", "write_ucm2_mat"]


def loadmat(path) -> dict:
    """``scipy.io.loadmat`` with clear errors (FileNotFoundError, DataError)."""
    from scipy.io import loadmat as _scipy_loadmat

    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"no such file: {path}")
    try:
        return _scipy_loadmat(str(path))
    except Exception as exc:  # scipy raises various errors on corrupt files
        raise DataError(f"cannot read MATLAB file {path}: {exc}") from exc


def check_label_image(seg, where: str) -> np.ndarray:
    """A label image as int64, checked: 2-D, non-empty, numeric, finite, whole and
    non-negative (else :class:`DataError` starting with ``where``). Labels beyond the pixel
    count (ids like 1e12) are renumbered in increasing order, 0 kept as 0: the partition is
    the same and every table indexed by label stays small."""
    seg = np.asarray(seg)
    if seg.dtype.kind == "b":
        seg = seg.astype(np.int64)
    if seg.dtype.kind not in "iuf" or seg.ndim != 2:
        raise DataError(f"{where}: a label image must be a 2-D array of whole numbers, "
                        f"got {seg.dtype} of shape {seg.shape}")
    if seg.size == 0:
        raise DataError(f"{where}: empty label image (no pixel)")
    if seg.dtype.kind == "f":
        if not np.all(np.isfinite(seg)):
            raise DataError(f"{where}: NaN or infinite labels")
        if not np.all(seg == np.round(seg)):
            raise DataError(f"{where}: non-integer labels (e.g. {seg[seg != np.round(seg)][0]:g}); "
                            "labels must be whole numbers (BSDS: 1..n)")
        if np.abs(seg).max() >= 2.0 ** 53:
            raise DataError(f"{where}: labels beyond 2^53 are not exact in floating point")
    if seg.min() < 0:
        raise DataError(f"{where}: negative labels (min {seg.min():g}); BSDS labels are 1..n")
    seg = seg.astype(np.int64)
    if seg.max() > seg.size:  # rare: a sort is fine
        seg = np.unique(seg, return_inverse=True)[1].reshape(seg.shape).astype(np.int64) + (1 if seg.min() > 0 else 0)
    return seg


def load_ground_truth(path) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """Read a BSDS ground-truth ``.mat`` file (the 1xK cell ``groundTruth`` of structs
    with ``Segmentation`` and ``Boundaries``).

    Returns
    -------
    segmentations, boundaries : list of numpy.ndarray
        K label images (int64, labels 1..n) and K boolean boundary maps, all (H, W).

    Raises
    ------
    FileNotFoundError
        The file does not exist.
    DataError
        It cannot be read, has no ``groundTruth``, no annotator, or inconsistent shapes.
    """
    path = Path(path)
    m = loadmat(path)
    if "groundTruth" not in m:
        raise DataError(f"{path}: no variable 'groundTruth' (found {sorted(k for k in m if not k.startswith('__'))})")
    cell = np.asarray(m["groundTruth"], dtype=object).ravel()
    if cell.size == 0:
        raise DataError(f"{path}: empty 'groundTruth' (no annotator)")
    segs, bdrys = [], []
    try:
        for g in cell:
            segs.append(check_label_image(g["Segmentation"][0, 0], f"{path}: annotator {len(segs) + 1}'s Segmentation"))
            bdrys.append(np.asarray(g["Boundaries"][0, 0]) != 0)
    except (KeyError, IndexError, ValueError, TypeError) as exc:
        if isinstance(exc, DataError):
            raise
        raise DataError(f"{path}: malformed 'groundTruth' ({type(exc).__name__}: {exc})") from exc
    shape = segs[0].shape
    for s, b in zip(segs, bdrys):
        if s.ndim != 2 or s.shape != shape or b.shape != shape:
            raise DataError(f"{path}: annotators of inconsistent shapes {[s.shape for s in segs]}")
    return segs, bdrys


def write_ucm2_mat(path, ucm2: np.ndarray, name: str = "ucm2", level: int = 1) -> None:
    """Write a 2-D float64 array as a compressed MATLAB (level 5) ``.mat`` variable,
    streaming: column blocks go through zlib one at a time, so a photograph's ucm2
    (48 M values for 4000x3000) needs no copy of the array in memory (scipy's
    ``savemat`` holds two). ``ucm2`` may also be any object with ``shape``, ``ndim`` and
    2-D slicing ``ucm2[:, c0:c1]`` that is not an array (e.g.
    :class:`hiseg.segmentation.saliency.UCM2Blocks`, which draws each block when asked:
    the map is never whole in memory). ``scipy.io.loadmat(path)[name]`` returns the
    array. Raises ValueError for a variable above the format's 4 GiB element limit.
    """
    import struct
    import zlib

    lazy = not isinstance(ucm2, np.ndarray) and hasattr(ucm2, "shape") and hasattr(ucm2, "__getitem__")
    a = ucm2 if lazy else np.asarray(ucm2, dtype=np.float64)
    if a.ndim != 2:
        raise ValueError(f"{name} must be 2-D, got shape {a.shape}")
    rows, cols = a.shape
    nbytes = 8 * rows * cols
    nm = name.encode("ascii")
    if len(nm) > 4:
        raise ValueError("variable names longer than 4 characters are not supported")
    if nbytes + 48 >= 2 ** 32:
        raise ValueError(f"{name} of shape {a.shape} exceeds the 4 GiB element limit of MAT version 5")
    head = (struct.pack("<II", 14, 48 + nbytes)  # miMATRIX
            + struct.pack("<IIII", 6, 8, 6, 0)  # array flags: mxDOUBLE_CLASS
            + struct.pack("<IIii", 5, 8, rows, cols)  # dimensions
            + struct.pack("<HH", 1, len(nm)) + nm.ljust(4, b"\0")  # name (small element)
            + struct.pack("<II", 9, nbytes))  # miDOUBLE real part, column-major
    with open(path, "wb") as f:
        text = b"MATLAB 5.0 MAT-file, written by hiseg"
        f.write(text.ljust(116, b" ") + b"\0" * 8 + struct.pack("<H", 0x0100) + b"IM")
        pos = f.tell()
        f.write(struct.pack("<II", 15, 0))  # miCOMPRESSED, size filled in below
        z = zlib.compressobj(level)
        size = f.write(z.compress(head))
        step = max(1, (1 << 22) // max(rows, 1))  # ~32 MB blocks of columns
        for c0 in range(0, cols, step):
            size += f.write(z.compress(np.ascontiguousarray(a[:, c0:c0 + step].T, dtype=np.float64).tobytes()))
        size += f.write(z.flush())
        f.seek(pos)
        f.write(struct.pack("<II", 15, size))
