"""Images in: decoding (OpenCV, then scikit-image), EXIF orientation, conversion to float32 RGB in
[0, 1] and band-wise reduction of large images (see :mod:`hiseg.io` for the conversion rules)."""
from __future__ import annotations

import os
import threading
from pathlib import Path

import numpy as np

from .errors import DataError, display_path

__all__ = ["IMAGE_EXTENSIONS", "FLOAT_TOLERANCE", "PIXEL_LIMIT", "PIXEL_LIMIT_ENV", "pixel_limit", "check_pixels",
           "decode_image", "image_header", "image_size", "exif_orientation",
           "to_float_rgb", "rgb_view", "reduce_image", "read_image", "read_gray_image"]

#: How far outside [0, 1] a float image may go and still be clipped (resize rounding).
FLOAT_TOLERANCE = 0.01

IMAGE_EXTENSIONS = (".jpg", ".jpeg", ".png", ".bmp", ".tif", ".tiff", ".webp", ".ppm", ".pgm")

#: The most pixels (height x width) an image file may declare: 2**28 (268,435,456, e.g. 16384 x
#: 16384; about 0.8 GB decoded as 8-bit RGB). It is checked from the file's header, before any
#: pixel is decoded, so that a few-KB file declaring 50000 x 50000 is refused in one line instead
#: of being decoded (a "decompression bomb"). Raise it with the environment variable
#: :data:`PIXEL_LIMIT_ENV` or the commands' ``--pixel-limit N`` (0: no limit).
PIXEL_LIMIT = 1 << 28
#: The environment variable that sets the pixel limit (:func:`pixel_limit`).
PIXEL_LIMIT_ENV = "HISEG_PIXEL_LIMIT"


def pixel_limit() -> int:
    """The pixel limit in force: ``$HISEG_PIXEL_LIMIT`` (an integer >= 0; 0: none) or
    :data:`PIXEL_LIMIT`. ValueError naming the variable for another value."""
    import os

    text = os.environ.get(PIXEL_LIMIT_ENV, "").strip()
    if not text:
        return PIXEL_LIMIT
    try:
        v = int(text)
    except ValueError:
        v = -1
    if v < 0:
        raise ValueError(f"{PIXEL_LIMIT_ENV} must be an integer >= 0 (0: no limit), got {text!r}")
    return v


def check_pixels(height: int, width: int, path, what: str = "image") -> None:
    """DataError naming ``path`` when a ``height`` x ``width`` image is over :func:`pixel_limit`;
    ``what``: the kind of file, as the message names it (a ``ucm2`` is held to the same limit)."""
    limit = pixel_limit()
    if limit and int(height) * int(width) > limit:
        raise DataError(f"cannot read {what} {display_path(path)}: it declares {int(width)} x {int(height)} pixels "
                        f"({int(height) * int(width):,}), over the limit of {limit:,} (raise it with --pixel-limit N "
                        f"or {PIXEL_LIMIT_ENV}=N; 0: no limit)")


def _header_size(src):
    """(H, W, several frames?) of an image as stored, from its header (Pillow, its own pixel
    limit off: ours is :func:`check_pixels`), or None where Pillow cannot read the header.
    Several frames: an animated GIF, PNG or WebP, a multi-page TIFF (of which only the first is
    decoded)."""
    try:
        from PIL import Image

        with _pillow_unlimited(), Image.open(src) as im:
            return im.size[1], im.size[0], bool(getattr(im, "is_animated", False))
    except Exception:  # noqa: BLE001 - a format Pillow does not know: OpenCV's own limit then applies
        return None


#: The warning for a file of several frames (:func:`decode_image`).
MULTI_FRAME = ("it holds several frames (an animated image or a multi-page TIFF): only the first frame is "
               "segmented")


_PILLOW = {"depth": 0, "was": None}
_PILLOW_LOCK = threading.Lock()


class _pillow_unlimited:
    """Pillow's decompression-bomb check off inside the block (hiseg checks its own limit first;
    blocks in several threads nest: the outermost restores Pillow's setting)."""

    def __enter__(self):
        from PIL import Image

        with _PILLOW_LOCK:
            if _PILLOW["depth"] == 0:
                _PILLOW["was"], Image.MAX_IMAGE_PIXELS = Image.MAX_IMAGE_PIXELS, None
            _PILLOW["depth"] += 1
        return self

    def __exit__(self, *exc):
        from PIL import Image

        with _PILLOW_LOCK:
            _PILLOW["depth"] -= 1
            if _PILLOW["depth"] == 0:
                Image.MAX_IMAGE_PIXELS = _PILLOW["was"]
        return False



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

    import io as _io

    path = Path(path)
    _check_regular(path)
    with open(path, "rb") as fh:  # Python reads any name; OpenCV decodes the bytes
        data = fh.read()
    if not data:
        raise DataError(f"cannot read image {display_path(path)}: not an image (0 bytes)")
    header = _header_size(_io.BytesIO(data))
    size = None if header is None else header[:2]
    if size is not None:
        check_pixels(*size, path)  # before any pixel is decoded
        if header[2]:
            import warnings

            warnings.warn(f"{display_path(path)}: {MULTI_FRAME}", UserWarning, stacklevel=2)
    try:
        arr = cv2.imdecode(np.frombuffer(data, np.uint8), cv2.IMREAD_UNCHANGED | cv2.IMREAD_IGNORE_ORIENTATION)
    except cv2.error as e:  # OpenCV's own limits (CV_IO_MAX_IMAGE_PIXELS, ...): the next decoder, or one line
        if size is None:
            raise DataError(f"cannot read image {display_path(path)}: "
                            f"{str(e).strip().splitlines()[-1]} (OpenCV)") from None
        arr = None
    if arr is not None:
        return _orient(arr, path), True
    bad = (f"cannot read image {display_path(path)}: not a readable image (a format neither OpenCV nor "
           "scikit-image decodes, or a corrupt or truncated file)")
    try:
        import warnings

        from skimage.io import imread

        with warnings.catch_warnings(), _pillow_unlimited():  # its plugins' deprecation notices; our limit held
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
    _check_regular(Path(path))
    try:
        from PIL import Image

        with _pillow_unlimited(), Image.open(path) as im:
            w, h = im.size
            o, mode = _orientation_of(im), im.mode
    except FileNotFoundError:
        raise FileNotFoundError(f"image file not found: {display_path(path)}") from None
    except Exception:  # noqa: BLE001 - not Pillow's: decode it
        return (*decode_image(path)[0].shape[:2], "")
    check_pixels(h, w, path)
    return (w, h, mode) if o in (5, 6, 7, 8) else (h, w, mode)


def _check_regular(path: Path) -> None:
    """FileNotFoundError for a missing image file, DataError for one that is not a regular
    file (a folder, a FIFO, a device: never opened, which would block on a FIFO)."""
    if not path.exists():
        if path.is_symlink():  # a link whose target is gone (a relative link moved with its folder, say)
            raise FileNotFoundError(f"image file not found: {display_path(path)} is a symbolic link to "
                                    f"{os.readlink(path)}, which does not exist")
        raise FileNotFoundError(f"image file not found: {display_path(path)}")
    if not path.is_file():
        kind = "a folder" if path.is_dir() else "not a regular file (a FIFO, socket or device)"
        raise DataError(f"cannot read image {display_path(path)}: it is {kind}")


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
