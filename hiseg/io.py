"""Files in and out: images, label images, BSDS ground truth, MATLAB files, atomic writes.

The one place where hiseg decodes and writes files; every other module reads and
writes through these functions (the bottom of the package: it imports nothing of hiseg).

Image conversion (:func:`read_image`, :func:`to_float_rgb`), always to float32 RGB in
[0, 1], shape (H, W, 3):

- 8-bit: divided by 255; 16-bit: divided by 65535 (the dtype's range, not the image's
  maximum); float images must be in [0, 1]: values within 0.01 of it are clipped (rounding
  of a resize), a float image further out (e.g. 0..255 values) is refused with a DataError
  rather than clipped into a wrong image; boolean images give 0 / 1;
- grayscale (H, W) or (H, W, 1): replicated to three channels; gray + alpha: the
  gray channel replicated; RGBA: the alpha channel is dropped (no compositing).

Decoding (:func:`decode_image`): OpenCV (unchanged depth and channels), and
``skimage.io.imread`` for what OpenCV cannot decode. A file's EXIF orientation (a phone's
JPEG taken upright) is applied, as image viewers and browsers show the file: the arrays, and
every map and cut computed from them, are the upright image.

Writing (:func:`atomic_write`, :func:`atomic_write_files`, :class:`AtomicFiles`): through a
temporary file in the destination folder, renamed into place, with the usual file mode
(``0666 & ~umask``): a killed run leaves the complete file or none, never a half-written one.
A failed write (a full disk, a file too large, no permission) raises OSError naming the
destination file. ``overwrite=False`` creates the destination exclusively (a hard link of the
complete temporary file, which fails when the name exists): two runs writing the same name
at once cannot replace each other's file; the second gets :class:`FileExistsError` naming it.
:func:`folder_lock` keeps a second run out of a folder for the whole run.

Large images, never whole in float: :func:`reduce_image` converts and area-resizes a decoded
image band by band (the working image of ``hiseg predict``), :func:`write_png_rows` encodes a
PNG from row bands and :func:`write_ucm2_mat` writes the ``.mat`` from column blocks.

File names: any name the file system allows, also bytes that are not valid UTF-8 (Python
holds them as surrogate escapes). OpenCV never sees a path: files are decoded and encoded in
memory (``cv2.imdecode`` / ``cv2.imencode``) and read and written by Python, and messages
show such a name with ``\\xNN`` escapes (:func:`display_path`).
"""
from __future__ import annotations

import contextlib
import errno
import os
import tempfile
from pathlib import Path
from typing import Callable, Mapping

import numpy as np

__all__ = [
    "IMAGE_EXTENSIONS",
    "DataError",
    "decode_image",
    "to_float_rgb",
    "read_image",
    "read_gray_image",
    "loadmat",
    "load_ground_truth",
    "atomic_write",
    "atomic_write_files",
    "AtomicFiles",
    "display_path",
    "folder_lock",
    "file_complete",
    "remove_stray_temps",
    "refuse_overwrite",
    "naming_the_file",
    "exif_orientation",
    "image_size",
    "image_header",
    "set_usual_mode",
    "write_png",
    "write_png_rows",
    "write_ucm2_mat",
    "reduce_image",
    "rgb_view",
]

#: How far outside [0, 1] a float image may go and still be clipped (resize rounding).
FLOAT_TOLERANCE = 0.01

IMAGE_EXTENSIONS = (".jpg", ".jpeg", ".png", ".bmp", ".tif", ".tiff", ".webp", ".ppm", ".pgm")


class DataError(ValueError):
    """A data file exists but cannot be used (unreadable, corrupt, inconsistent shapes)."""


def display_path(path) -> str:
    """``path`` as text that any terminal or UTF-8 file takes: bytes of the name that are
    not valid UTF-8 (surrogate escapes in a Python str) shown as ``\\xNN``. O(len)."""
    s = os.fsdecode(path) if isinstance(path, bytes) else str(path)
    try:
        s.encode("utf-8")
        return s
    except UnicodeEncodeError:
        return s.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")


# ----------------------------------------------------------------------------- reading
def decode_image(path) -> tuple[np.ndarray, bool]:
    """Decode an image file as it is stored: ``(array, bgr)``.

    ``array`` keeps the file's depth (uint8, uint16, ...) and channels; ``bgr`` tells
    whether colour channels are in OpenCV's BGR(A) order.

    Raises
    ------
    FileNotFoundError
        The file does not exist.
    DataError
        The file cannot be decoded: empty ("not an image (0 bytes)"), not an image format
        OpenCV or scikit-image decodes, corrupt or truncated ("not a readable image"); the
        message names it (:func:`display_path`).
    """
    import cv2

    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"image file not found: {display_path(path)}")
    with open(path, "rb") as fh:  # Python reads any name; OpenCV decodes the bytes
        data = fh.read()
    if not data:
        raise DataError(f"cannot read image {display_path(path)}: not an image (0 bytes)")
    arr = cv2.imdecode(np.frombuffer(data, np.uint8), cv2.IMREAD_UNCHANGED | cv2.IMREAD_IGNORE_ORIENTATION)
    if arr is not None:
        return _orient(arr, path), True
    bad = (f"cannot read image {display_path(path)}: not a readable image (a format neither OpenCV nor "
           "scikit-image decodes, or a corrupt or truncated file)")
    try:
        import io as _io
        import warnings

        from skimage.io import imread

        with warnings.catch_warnings():  # its plugins' deprecation notices, when they try the bytes
            warnings.simplefilter("ignore")
            arr = np.asarray(imread(_io.BytesIO(data)))
    except Exception as e:  # noqa: BLE001 - any decoder failure means "not readable"; its hints (plugins to install) mislead
        raise DataError(bad) from e
    if arr.size == 0 or arr.dtype == object:
        raise DataError(bad)
    return _orient(arr, path), False


def image_header(path) -> tuple[int, int, str]:
    """(H, W, Pillow mode) of an image file, (H, W) as :func:`read_image` returns it (EXIF
    orientation applied), from its header: no pixel is decoded (where Pillow cannot open the
    file, OpenCV decodes it; mode ``""`` then). Raises FileNotFoundError, DataError."""
    try:
        from PIL import Image

        with Image.open(path) as im:
            w, h = im.size
            o, mode = _orientation_of(im), im.mode
    except FileNotFoundError:
        raise FileNotFoundError(f"image file not found: {display_path(path)}") from None
    except Exception:  # noqa: BLE001 - not Pillow's: decode it
        return (*decode_image(path)[0].shape[:2], "")
    return (w, h, mode) if o in (5, 6, 7, 8) else (h, w, mode)


def image_size(path) -> tuple[int, int]:
    """(H, W) of an image file as :func:`read_image` returns it, from its header
    (:func:`image_header`)."""
    return image_header(path)[:2]


def _orientation_of(im) -> int:
    """The EXIF orientation (1-8) of an open Pillow image, read without decoding pixels: a PNG's
    EXIF is an eXIf chunk before its pixels (Pillow's ``getexif`` would decode the whole image
    to look after them)."""
    if im.format == "PNG" and "exif" not in im.info:
        return 1
    o = int(im.getexif().get(0x0112, 1))
    return o if 1 <= o <= 8 else 1


def exif_orientation(path) -> int:
    """The EXIF orientation tag (1-8) of an image file; 1 (as stored) when it has none."""
    try:
        from PIL import Image

        with Image.open(path) as im:
            return _orientation_of(im)
    except Exception:  # noqa: BLE001 - no Pillow, no EXIF, a format Pillow cannot open: as stored
        return 1


#: EXIF orientation -> (transpose, flip rows, flip columns) that turn the stored image upright
_EXIF_TURNS = {2: (False, False, True), 3: (False, True, True), 4: (False, True, False), 5: (True, False, False),
               6: (True, False, True), 7: (True, True, True), 8: (True, True, False)}


def _orient(arr: np.ndarray, path) -> np.ndarray:
    """``arr`` turned upright by the file's EXIF orientation (as ``PIL.ImageOps.exif_transpose``)."""
    o = exif_orientation(path)
    if o == 1:
        return arr
    transpose, flip_rows, flip_cols = _EXIF_TURNS[o]
    a = np.swapaxes(arr, 0, 1) if transpose else arr
    return np.ascontiguousarray(a[::-1 if flip_rows else 1, ::-1 if flip_cols else 1])


def to_float_rgb(arr, *, bgr: bool = False, name: str = "image") -> np.ndarray:
    """Convert an image array to float32 RGB in [0, 1], shape (H, W, 3).

    Parameters
    ----------
    arr : array (H, W), (H, W, 1), (H, W, 2), (H, W, 3) or (H, W, 4)
        uint8, uint16 (or other unsigned integer), float or bool.
    bgr : bool
        Channels are in OpenCV's BGR(A) order.
    name : str
        Used in error messages.

    Returns
    -------
    float32 array (H, W, 3). Cost O(H W).

    Raises
    ------
    DataError
        Unsupported shape or dtype, NaN / infinite values, or a float image outside [0, 1]
        by more than :data:`FLOAT_TOLERANCE` (e.g. values in [0, 255]).
    """
    a = _check_image_shape(arr, name)
    c = a.shape[2]
    if c in (1, 2):  # gray, gray + alpha
        a = np.repeat(a[:, :, :1], 3, axis=2)
    elif c == 4:  # drop alpha
        a = a[:, :, :3]
    if bgr and c >= 3:
        a = a[:, :, ::-1]
    if a.dtype == np.bool_:
        out = a.astype(np.float32)
    elif np.issubdtype(a.dtype, np.integer):
        info = np.iinfo(a.dtype)
        if info.min < 0:
            raise DataError(f"{name}: signed integer images ({a.dtype}) are not supported")
        out = a.astype(np.float32) / np.float32(info.max)
    elif np.issubdtype(a.dtype, np.floating):
        out = a.astype(np.float32)
        bad = int((~np.isfinite(out)).sum())
        if bad:
            raise DataError(f"{name} has {bad} NaN or infinite values: give a finite image "
                            "(float in [0, 1] or integers)")
        lo, hi = float(out.min()), float(out.max())
        if lo < -FLOAT_TOLERANCE or hi > 1 + FLOAT_TOLERANCE:
            hint = (" (8-bit values? divide by 255, or pass the uint8 array)" if hi <= 255 + FLOAT_TOLERANCE
                    else " (16-bit values? divide by 65535, or pass the uint16 array)" if hi <= 65535.5 else "")
            raise DataError(f"{name}: a float image must be in [0, 1], this one spans [{lo:g}, {hi:g}]{hint}; "
                            "it is not clipped, which would change the image")
        np.clip(out, 0.0, 1.0, out=out)
    else:
        raise DataError(f"{name}: unsupported image dtype {a.dtype}")
    return np.ascontiguousarray(out)


def _check_image_shape(arr, name: str) -> np.ndarray:
    """``arr`` as an (H, W, C) array (a view), C in 1..4, H and W > 0; DataError otherwise."""
    a = np.asarray(arr)
    if a.ndim == 2:
        a = a[:, :, None]
    if a.ndim != 3 or a.shape[2] not in (1, 2, 3, 4) or a.shape[0] == 0 or a.shape[1] == 0:
        raise DataError(f"{name}: unsupported image shape {np.asarray(arr).shape} "
                        "(expected (H, W), (H, W, 1), (H, W, 2), (H, W, 3) or (H, W, 4))")
    return a


def rgb_view(arr: np.ndarray, bgr: bool) -> np.ndarray:
    """A decoded image (:func:`decode_image`) as a view whose :func:`to_float_rgb` without
    ``bgr`` is ``to_float_rgb(arr, bgr=bgr)``: BGR(A) colour turned to RGB, no copy."""
    a = np.asarray(arr)
    return a[..., 2::-1] if bgr and a.ndim == 3 and a.shape[2] >= 3 else a


def reduce_image(arr: np.ndarray, size, *, bgr: bool = False, name: str = "image", band: int = 1 << 21) -> np.ndarray:
    """``cv2.resize(to_float_rgb(arr, bgr=bgr), size[::-1], interpolation=cv2.INTER_AREA)``
    (float32 RGB (h, w, 3)) for an integer or boolean image ``arr`` (H, W[, C]) reduced to
    ``size`` = (h, w) <= (H, W), without its full-size float copy: converted ``band``
    pixels at a time. Memory: O(band + H w). The same values as the whole-image resize
    except where OpenCV's area resize takes another path for the whole image than for its
    parts: for W/w a whole number >= 2 with H/h not one, each value may differ by a float32
    rounding (at most 3e-7 measured). Other dtypes: the whole-image resize itself. Raises
    DataError as :func:`to_float_rgb`."""
    import cv2

    a = _check_image_shape(arr, name)
    (H, W), (h, w) = a.shape[:2], (int(size[0]), int(size[1]))
    if not (1 <= h <= H and 1 <= w <= W):
        raise ValueError(f"reduce_image: size {size} must be at least 1 and at most the image's {(H, W)}")
    if a.dtype.kind not in "ub":
        return cv2.resize(to_float_rgb(a, bgr=bgr, name=name), (w, h), interpolation=cv2.INTER_AREA)
    rows = max(1, band // W)
    k = round(H / h)
    if abs(H / h - k) < np.finfo(float).eps:  # whole rows per output row: bands of k rows resize alone
        out = np.empty((h, w, 3), np.float32)
        step = max(1, rows // k) * k
        for r0 in range(0, H, step):
            part = to_float_rgb(a[r0:r0 + step], bgr=bgr, name=name)
            out[r0 // k:(r0 + part.shape[0]) // k] = cv2.resize(part, (w, part.shape[0] // k),
                                                                interpolation=cv2.INTER_AREA)
        return out
    # otherwise the area resize is a horizontal pass then a vertical one, as OpenCV's own
    across = np.empty((H, w, 3), np.float32)
    for r0 in range(0, H, rows):
        part = to_float_rgb(a[r0:r0 + rows], bgr=bgr, name=name)
        across[r0:r0 + part.shape[0]] = cv2.resize(part, (w, part.shape[0]), interpolation=cv2.INTER_AREA)
    return cv2.resize(across, (w, h), interpolation=cv2.INTER_AREA)


def read_image(path) -> np.ndarray:
    """Read an image file as float32 RGB in [0, 1], shape (H, W, 3) (rules: module docstring).

    Raises
    ------
    FileNotFoundError
        The file does not exist.
    DataError
        The file cannot be decoded; the message names it.
    """
    arr, bgr = decode_image(path)
    return to_float_rgb(arr, bgr=bgr, name=display_path(path))


def read_gray_image(path) -> np.ndarray:
    """Read a single-channel image file with its stored dtype (uint8, uint16, ...), (H, W).

    A colour file whose channels are all equal is accepted (its first channel).

    Raises
    ------
    FileNotFoundError, DataError
        Missing file; undecodable file or a true colour image.
    """
    arr, _ = decode_image(path)
    if arr.ndim == 3:
        c = arr.shape[2]
        if c == 1:
            arr = arr[..., 0]
        elif c in (3, 4) and np.array_equal(arr[..., 0], arr[..., 1]) and np.array_equal(arr[..., 0], arr[..., 2]):
            arr = arr[..., 0]
        else:
            raise DataError(f"{path}: expected a single-channel image, got shape {arr.shape}")
    if arr.ndim != 2:
        raise DataError(f"{path}: expected a 2-D image, got shape {arr.shape}")
    return arr


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


# ----------------------------------------------------------------------------- writing
def _umask() -> int:
    m = os.umask(0)
    os.umask(m)
    return m


def set_usual_mode(path) -> None:
    """Give a file made by ``mkstemp`` / ``mkdtemp`` (private, 0600) the mode a plain
    ``open`` would have: ``0666 & ~umask``."""
    os.chmod(path, 0o666 & ~_umask())


def refuse_overwrite(outputs, inputs, overwrite: bool = False, command: str = "hiseg") -> None:
    """ValueError, before anything is written, when one of the ``outputs`` paths is one of
    the ``inputs`` files, or (unless ``overwrite``) already exists: a command never replaces
    a file it was not asked to replace. The message names the files."""
    ins = {Path(p).resolve() for p in inputs}
    hit = sorted(display_path(p) for p in outputs if Path(p).resolve() in ins)
    if hit:
        raise ValueError(f"output file(s) {hit[:3]} would overwrite input files: choose another --out folder "
                         "(or move the inputs)")
    if overwrite:
        return
    there = sorted(display_path(p) for p in outputs if os.path.lexists(p))
    if there:
        raise ValueError(f"{len(there)} output file(s) exist already, e.g. {there[:5]}: {command} does not replace "
                         "files; choose another --out folder, or give --overwrite to replace them (nothing was "
                         "written)")


def _temp_beside(path: Path) -> str:
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp" + path.suffix)
    os.close(fd)
    return tmp


def _discard(tmp) -> None:
    try:
        os.remove(tmp)
    except FileNotFoundError:
        pass


def remove_stray_temps(path) -> int:
    """Remove the temporary files that a killed :func:`atomic_write` of ``path`` left beside
    it (named ``.NAME.<random>.tmpSUFFIX``; only those). Returns how many; O(files in the folder)."""
    path = Path(path)
    head, tail = f".{path.name}.", ".tmp" + path.suffix
    n = 0
    with contextlib.suppress(FileNotFoundError):
        for name in os.listdir(path.parent):
            if name.startswith(head) and name.endswith(tail) and len(name) == len(head) + 8 + len(tail):
                _discard(path.parent / name)
                n += 1
    return n


@contextlib.contextmanager
def naming_the_file(path):
    """Re-raise an OSError of the block as an OSError that names ``path`` (a full disk's
    "[Errno 27] File too large" carries no file name, nor does a failed encoder); the
    errno, and so the class (FileExistsError, ...), is kept."""
    try:
        yield
    except OSError as e:
        shown = display_path(path)
        if shown in str(e):
            raise
        what = e.strerror or str(e) or type(e).__name__
        if e.errno == errno.ENOSPC:
            what += " (the disk is full)"
        msg = f"cannot write {shown}: {what}"
        raise (OSError(e.errno, msg) if e.errno is not None else OSError(msg)) from e


#: errors of ``os.link`` on a file system without hard links (FAT, some network file systems)
_NO_LINKS = {errno.EPERM, errno.EXDEV, errno.EMLINK, errno.ENOSYS, getattr(errno, "ENOTSUP", -1),
             getattr(errno, "EOPNOTSUPP", -1)}


def _exists_error(path) -> FileExistsError:
    return FileExistsError(errno.EEXIST, f"{display_path(path)} exists already (written by another run at the same "
                                         "time?); it was not replaced")


def _commit(tmp: str, path: Path, overwrite: bool) -> None:
    """Give the complete temporary file ``tmp`` the name ``path``: ``os.replace``, or without
    ``overwrite`` a hard link, which fails when the name exists (no run replaces another's
    file, even at the same moment), then ``tmp`` removed. Where the file system has no hard
    links: a check, then the rename."""
    if overwrite:
        os.replace(tmp, path)
        return
    try:
        os.link(tmp, path)
    except FileExistsError:
        raise _exists_error(path) from None
    except OSError as e:
        if e.errno not in _NO_LINKS:
            raise
        if os.path.lexists(path):
            raise _exists_error(path) from None
        os.replace(tmp, path)
        return
    _discard(tmp)


class AtomicFiles:
    """Files that appear together, complete: :meth:`write` writes each one to a temporary
    file beside its destination (one at a time: large contents are never held together),
    :meth:`commit` then gives them all their names; leaving the ``with`` block by an
    exception (or a Ctrl-C) removes the temporary files, so nothing is half-written.

    ``overwrite=False``: each name is created exclusively (:func:`_commit`); when one exists
    already, the files this commit had created are removed again and
    :class:`FileExistsError` names the file: the image is all another run's or all this one's.
    """

    def __init__(self, overwrite: bool = True):
        self.overwrite = overwrite
        self._temps: list[tuple[Path, str]] = []

    def write(self, path, write: Callable[[str], object]) -> None:
        """``write(tmp_path)`` writes ``path``'s content to a temporary file (usual mode)."""
        path = Path(path)
        with naming_the_file(path):
            self._temps.append((path, _temp_beside(path)))
            write(self._temps[-1][1])
            set_usual_mode(self._temps[-1][1])

    def commit(self) -> list[Path]:
        """Move every written file into place; returns their paths. Raises OSError naming the
        file (FileExistsError without ``overwrite`` when one exists)."""
        done: list[Path] = []
        try:
            for dest, tmp in self._temps:
                with naming_the_file(dest):
                    _commit(tmp, dest, self.overwrite)
                done.append(dest)
        except BaseException:
            if not self.overwrite:  # exclusive: the names made here are this call's own
                for dest in done:
                    _discard(dest)
            self.discard()
            raise
        self._temps = []
        return done

    def discard(self) -> None:
        """Remove the temporary files not yet committed."""
        for _, tmp in self._temps:
            _discard(tmp)
        self._temps = []

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.discard()
        return False


def atomic_write(path, write: Callable[[str], object], overwrite: bool = True) -> None:
    """Write one file: ``write(tmp_path)`` writes the content to a temporary file in the
    same folder, which then gets the usual mode and is renamed to ``path``.

    A killed run leaves either the complete file or none (plus at most a stray ``.tmp``
    file, never under the final name, :func:`remove_stray_temps`); on error the temporary
    file is removed. ``overwrite=False``: FileExistsError when ``path`` exists, even when
    another process creates it meanwhile (:class:`AtomicFiles`).
    """
    with AtomicFiles(overwrite) as files:
        files.write(path, write)
        files.commit()


def atomic_write_files(out_dir, files: Mapping[str, bytes | str], overwrite: bool = True) -> list[Path]:
    """Write several files so that none is left half-written: all go to temporary files
    first, and only when every write succeeded are they renamed into place.

    Parameters
    ----------
    out_dir : str or Path
        Destination folder (created if missing).
    files : mapping of str to bytes or str
        File name (relative to ``out_dir``) -> content (str is written as UTF-8).
    overwrite : bool
        False: FileExistsError when one of them exists (:class:`AtomicFiles`).

    Returns
    -------
    list of Path: the written paths.
    """
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    with AtomicFiles(overwrite) as group:
        for name, content in files.items():
            data = content.encode("utf-8") if isinstance(content, str) else bytes(content)
            group.write(out_dir / name, lambda tmp, data=data: Path(tmp).write_bytes(data))
        return group.commit()


@contextlib.contextmanager
def folder_lock(folder, command: str = "hiseg"):
    """Hold an exclusive lock on ``folder`` (created if missing) for the block, so that a
    second run into the same folder refuses at once instead of mixing its files with this
    one's. The lock is the operating system's (``flock`` on the folder itself: no lock file,
    released when the process ends, even killed); where there is none (Windows, some network
    file systems) the block runs unlocked, and :class:`AtomicFiles` still keeps one run from
    replacing another's files. The folders this call created (``folder`` and its missing
    parents) are removed again when the block leaves them empty.

    Raises
    ------
    BlockingIOError
        Another process holds the lock; the message names the folder and ``command``.
    """
    folder = Path(folder)
    # the folders this call creates: ``folder`` and any missing parents, innermost first
    created = [d for d in (folder, *folder.parents) if not d.exists()]
    folder.mkdir(parents=True, exist_ok=True)
    fd = None
    try:
        import fcntl

        fd = os.open(folder, os.O_RDONLY)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            fd = None
            raise BlockingIOError(errno.EWOULDBLOCK, f"another {command} is writing into {display_path(folder)} at "
                                                     "this moment: wait for it to finish, or choose another --out "
                                                     "folder (nothing was written)") from None
        except OSError:  # no locks on this file system: unlocked
            os.close(fd)
            fd = None
    except ImportError:  # Windows
        pass
    try:
        yield folder
    finally:
        if fd is not None:
            os.close(fd)  # releases the lock
        for d in created:
            try:
                d.rmdir()  # only when empty
            except OSError:
                break


def file_complete(path) -> bool:
    """Whether ``path`` holds a whole file of its kind, as hiseg writes them (O(1) reads): a
    PNG that ends with its IEND chunk, a ``.mat`` whose compressed element (written by
    :func:`write_ucm2_mat`) fills the file to its end, an ``.html`` page that ends with
    ``</html>``; any other kind: a non-empty file. False for a missing file."""
    path = Path(path)
    try:
        size = path.stat().st_size
        if size == 0:
            return False
        suffix = path.suffix.lower()
        with open(path, "rb") as fh:
            if suffix == ".png":
                fh.seek(max(0, size - 12))
                return size >= 57 and fh.read(12) == b"\0\0\0\0IEND\xaeB`\x82"
            if suffix == ".mat":
                head = fh.read(136)
                if len(head) < 136 or not head.startswith(b"MATLAB 5.0"):
                    return False
                import struct

                kind, n = struct.unpack("<II", head[128:136])
                return kind != 15 or 136 + n == size  # other MAT writers: their own layout, taken as whole
            if suffix in (".html", ".htm"):
                fh.seek(max(0, size - 64))
                return fh.read().rstrip().endswith(b"</html>")
        return True
    except OSError:
        return False


def write_png(arr: np.ndarray) -> Callable[[str], None]:
    """A writer for :func:`atomic_write`: ``arr`` (uint8 / uint16, gray or BGR) as PNG."""
    import cv2

    def w(tmp):  # encoded in memory, written by Python: any file name (OpenCV's own writer crashes on some)
        ok, buf = cv2.imencode(".png", arr)
        if not ok:
            raise OSError(f"could not encode a PNG of shape {arr.shape}, dtype {arr.dtype}")
        with open(tmp, "wb") as fh:
            fh.write(buf.data)
    return w


def write_png_rows(rows_of: Callable[[int, int], np.ndarray], height: int, dtype, band: int) -> Callable[[str], None]:
    """A writer for :func:`atomic_write`: the PNG of an image of ``height`` rows given by
    ``rows_of(r0, r1)`` (its rows r0..r1-1: (n, W) gray or (n, W, 3) RGB, cast to ``dtype``,
    uint8 or uint16), encoded ``band`` rows at a time: the image is never whole in memory
    (:func:`write_png` holds it and its encoded copy). The same pixels as :func:`write_png`
    of the whole image (given there in BGR order), other bytes: each row filtered by the one
    above (PNG's "Up"), zlib level 1 with run-length matching (on a 12000x9000 overlay:
    84.6 MB in 4.9 s, OpenCV's encoder 89.2 MB in 5.6 s). Cost O(H W)."""
    import struct
    import zlib

    def chunk(f, kind: bytes, data: bytes) -> None:
        f.write(struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data)))

    def w(tmp):
        big = np.dtype(dtype).newbyteorder(">")  # PNG's samples are big-endian
        with open(tmp, "wb") as f:
            f.write(b"\x89PNG\r\n\x1a\n")
            z = zlib.compressobj(1, zlib.DEFLATED, 15, 9, zlib.Z_RLE)
            prev = None
            for r0 in range(0, height, band):
                rows = np.ascontiguousarray(rows_of(r0, min(height, r0 + band)), dtype=big)
                raw = rows.view(np.uint8).reshape(rows.shape[0], -1)
                if prev is None:  # the header, from the first rows' width and channels
                    chunk(f, b"IHDR", struct.pack(">IIBBBBB", rows.shape[1], height, 8 * big.itemsize,
                                                  0 if rows.ndim == 2 else 2, 0, 0, 0))
                    prev = np.zeros(raw.shape[1], np.uint8)  # the row above the first: zeros
                out = np.empty((raw.shape[0], raw.shape[1] + 1), np.uint8)
                out[:, 0] = 2  # filter "Up": each byte minus the one above it, modulo 256
                np.subtract(raw[:1], prev, out=out[:1, 1:])
                np.subtract(raw[1:], raw[:-1], out=out[1:, 1:])
                prev = raw[-1].copy()
                data = z.compress(out.tobytes())
                if data:
                    chunk(f, b"IDAT", data)
            chunk(f, b"IDAT", z.flush())
            chunk(f, b"IEND", b"")
    return w


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
