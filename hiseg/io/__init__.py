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

from .errors import DataError, display_path
from .files import (AtomicFiles, atomic_write, atomic_write_files, file_complete, folder_lock, naming_the_file,
                    refuse_overwrite, remove_stray_temps, set_usual_mode, write_png, write_png_rows)
from .images import (FLOAT_TOLERANCE, IMAGE_EXTENSIONS, PIXEL_LIMIT, PIXEL_LIMIT_ENV, check_pixels, decode_image,
                     pixel_limit, exif_orientation, image_header, image_size,
                     read_gray_image, read_image, reduce_image, rgb_view, to_float_rgb)
from .labels import check_label_image, load_ground_truth, loadmat, write_ucm2_mat
from .layout import bsds_archive_path

__all__ = [
    "IMAGE_EXTENSIONS",
    "bsds_archive_path",
    "FLOAT_TOLERANCE",
    "PIXEL_LIMIT",
    "PIXEL_LIMIT_ENV",
    "pixel_limit",
    "check_pixels",
    "check_label_image",
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
