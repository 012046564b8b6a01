"""A user's own images and label images as a segmentation dataset.

Layout of a folder dataset (``root`` is any directory)::

    root/images/NAME.jpg            any of .jpg .jpeg .png .bmp .tif .tiff .webp .ppm .pgm
    root/labels/NAME.png            one annotator: an integer label image (same H, W), or
    root/labels/NAME.npy            an int array (H, W) or (A, H, W) (A annotators), or
    root/labels/NAME_0.png          several annotators, one file each (``NAME_*.png`` /
    root/labels/NAME_1.png          ``NAME_*.npy``, in sorted order of the suffix)

Images are read by :func:`hiseg.io.read_image` (float32 RGB in [0, 1]). Label images
(:func:`read_labels`): a single-channel PNG (8 or 16 bit) is used as is; a colour PNG
(3 or 4 channels) is turned into labels by giving each distinct colour its own id
(alpha ignored). Every pixel is a labelled pixel (0 is an ordinary label).
"""
from __future__ import annotations

from pathlib import Path
from typing import Sequence

import numpy as np

from ..io import IMAGE_EXTENSIONS, DataError, decode_image, image_header, image_size, read_image

__all__ = ["read_labels", "FolderSegmentation"]

LABEL_EXTENSIONS = (".png", ".npy", ".tif", ".tiff", ".pgm", ".bmp")


def _colour_to_ids(a: np.ndarray) -> np.ndarray:
    a = a[:, :, :3].astype(np.int64)
    key = (a[:, :, 0] << 32) | (a[:, :, 1] << 16) | a[:, :, 2]
    _, inv = np.unique(key, return_inverse=True)
    return inv.reshape(key.shape).astype(np.int64)


def read_labels(path) -> np.ndarray:
    """Read one label file as an int64 array (H, W) or, for ``.npy``, (H, W) / (A, H, W).

    Single-channel images are used as they are; colour label images get one id per
    distinct colour. ``.npy`` files must hold an integer array.

    Raises
    ------
    FileNotFoundError
        Missing file.
    DataError
        Unreadable file, non-integer ``.npy`` content, bad number of dimensions.
    """
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"label file not found: {path}")
    if path.suffix.lower() == ".npy":
        try:
            a = np.load(path, allow_pickle=False)
        except Exception as e:  # noqa: BLE001
            raise DataError(f"cannot read labels {path}: {type(e).__name__}: {e}") from e
        if not (np.issubdtype(a.dtype, np.integer) or a.dtype == np.bool_):
            raise DataError(f"labels {path}: expected an integer array, got dtype {a.dtype}")
        if a.ndim not in (2, 3):
            raise DataError(f"labels {path}: expected shape (H, W) or (A, H, W), got {a.shape}")
        return a.astype(np.int64)
    a, _ = decode_image(path)
    a = np.asarray(a)
    if a.ndim == 3 and a.shape[2] == 1:
        a = a[:, :, 0]
    if a.ndim == 3:
        return _colour_to_ids(a)
    if a.ndim != 2 or not (np.issubdtype(a.dtype, np.integer) or a.dtype == np.bool_):
        raise DataError(f"labels {path}: expected an integer label image, got shape {a.shape} dtype {a.dtype}")
    return a.astype(np.int64)


class FolderSegmentation:
    """Images and (one or several annotators') label images from a folder.

    Parameters
    ----------
    root : str or Path
        Directory holding ``images/`` and ``labels/`` (see the module docstring).
    images_dir, labels_dir : str
        Sub-directory names.
    allow_unlabelled : bool
        If False (default) an image without a label file is an error; if True its
        sample has ``segmentations`` of shape (0, H, W).
    names : sequence of str, optional
        Restrict to these image names (file stems), in this order.

    Samples (``dataset[i]``) are dicts: ``image`` float32 (H, W, 3) in [0, 1],
    ``segmentations`` int64 (A, H, W), ``name`` (the file stem).

    Raises
    ------
    FileNotFoundError
        ``root`` or ``root/images`` missing (the message shows the expected layout),
        no image in it, an image without labels (named), an unknown name in ``names``.
    DataError
        (when a sample is read) corrupt image or label file, label shape different
        from the image shape — the message names the files.
    """

    def __init__(self, root, images_dir: str = "images", labels_dir: str = "labels", *,
                 allow_unlabelled: bool = False, names: Sequence[str] | None = None):
        self.root = Path(root)
        layout = (f"expected layout: {self.root}/{images_dir}/NAME.jpg|png|... and "
                  f"{self.root}/{labels_dir}/NAME.png|NAME.npy|NAME_*.png (see hiseg.data.folder)")
        if not self.root.is_dir():
            raise FileNotFoundError(f"dataset folder not found: {self.root}; {layout}")
        self.images_dir = self.root / images_dir
        self.labels_dir = self.root / labels_dir
        if not self.images_dir.is_dir():
            raise FileNotFoundError(f"no '{images_dir}' folder in {self.root}; {layout}")
        images = {}
        for p in sorted(self.images_dir.iterdir()):
            if p.is_file() and p.suffix.lower() in IMAGE_EXTENSIONS:
                images.setdefault(p.stem, p)
        if not images:
            raise FileNotFoundError(f"no image file ({', '.join(IMAGE_EXTENSIONS)}) in {self.images_dir}; {layout}")
        label_files: dict[str, list[Path]] = {}
        if self.labels_dir.is_dir():
            all_labels = sorted(p for p in self.labels_dir.iterdir()
                                if p.is_file() and p.suffix.lower() in LABEL_EXTENSIONS)
            by_stem: dict[str, list[Path]] = {}
            multi: dict[str, list[tuple[str, Path]]] = {}
            for p in all_labels:
                by_stem.setdefault(p.stem, []).append(p)
                if p.stem in images:
                    continue
                # NAME_<suffix>: the longest prefix before an underscore that names an image
                cuts = [k for k, ch in enumerate(p.stem) if ch == "_" and 0 < k < len(p.stem) - 1]
                for k in reversed(cuts):
                    if p.stem[:k] in images:
                        multi.setdefault(p.stem[:k], []).append((p.stem[k + 1:], p))
                        break
            for name in images:
                if name in by_stem:  # NAME.ext wins over NAME_*.ext
                    label_files[name] = by_stem[name][:1]
                elif name in multi:
                    label_files[name] = [q for _, q in sorted(multi[name], key=lambda t: _natural_key(t[0]))]
        elif not allow_unlabelled:
            raise FileNotFoundError(f"no '{labels_dir}' folder in {self.root}; {layout}")
        if names is not None:
            missing = [n for n in names if n not in images]
            if missing:
                raise FileNotFoundError(f"images not found in {self.images_dir}: {', '.join(missing[:10])}")
            keep = list(names)
        else:
            keep = list(images)
        unlabelled = [n for n in keep if n not in label_files]
        if unlabelled and not allow_unlabelled:
            shown = ", ".join(str(images[n].name) for n in unlabelled[:10])
            more = f" (and {len(unlabelled) - 10} more)" if len(unlabelled) > 10 else ""
            raise FileNotFoundError(f"no label file in {self.labels_dir} for image(s) {shown}{more}; "
                                    f"expected {self.labels_dir}/NAME.png, NAME.npy or NAME_*.png")
        self.names = keep
        self._images = {n: images[n] for n in keep}
        self._labels = {n: label_files.get(n, []) for n in keep}

    def __len__(self) -> int:
        return len(self.names)

    def image_path(self, index: int) -> Path:
        return self._images[self.names[index]]

    def label_paths(self, index: int) -> list[Path]:
        return list(self._labels[self.names[index]])

    def check_labels(self, indices: Sequence[int] | None = None) -> None:
        """Check every label file of the samples ``indices`` (all: None) before training reads
        them: a header pass (each file's dtype, dimensions and size against its image's size,
        read from the headers: no image is decoded), then a values pass (no negative label in
        a ``.npy``; image files hold non-negative labels by their type). Costs a few file
        headers per sample and one read of each ``.npy`` (``benchmarks/bench_data.py``).

        Raises
        ------
        DataError
            The first bad file, named, with what is wrong (float or negative labels, a label
            image of another size than its image, an unreadable header).
        """
        order = range(len(self)) if indices is None else indices
        arrays = []
        for i in order:  # 1: headers
            name = self.names[i]
            h, w = image_size(self._images[name])
            for p in self._labels[name]:
                if p.suffix.lower() == ".npy":
                    a = _npy_header(p)
                    arrays.append((p, a))
                    shape = a.shape[-2:]
                else:
                    shape = _label_image_header(p)
                if tuple(shape) != (h, w):
                    raise DataError(f"labels {p} have shape {tuple(shape)} but image {self._images[name]} has "
                                    f"shape {(h, w)}: a label image has its image's size")
        for p, a in arrays:  # 2: values
            if a.dtype.kind == "i" and a.size and int(a.min()) < 0:
                raise DataError(f"labels {p}: negative labels (min {int(a.min())}); labels are whole numbers >= 0, "
                                "one per region (hiseg.data.folder)")

    def __getitem__(self, index: int) -> dict:
        if not -len(self) <= index < len(self):
            raise IndexError(f"index {index} out of range for a dataset of {len(self)} images")
        name = self.names[index]
        image = read_image(self._images[name])
        h, w = image.shape[:2]
        segs = []
        for p in self._labels[name]:
            lab = read_labels(p)
            lab = lab[None] if lab.ndim == 2 else lab
            if lab.shape[1:] != (h, w):
                raise DataError(f"labels {p} have shape {lab.shape[1:]} but image "
                                f"{self._images[name]} has shape {(h, w)}")
            segs.append(lab)
        seg = np.concatenate(segs, axis=0) if segs else np.zeros((0, h, w), np.int64)
        return {"image": image, "segmentations": seg, "name": name}


def _npy_header(path: Path) -> np.ndarray:
    """A ``.npy`` label file memory-mapped (its header read, its values on demand), checked
    like :func:`read_labels`: an integer or boolean array (H, W) or (A, H, W)."""
    try:
        a = np.load(path, mmap_mode="r", allow_pickle=False)
    except Exception as e:  # noqa: BLE001 - any reader failure means "unreadable"
        raise DataError(f"cannot read labels {path}: {type(e).__name__}: {e}") from e
    if not (np.issubdtype(a.dtype, np.integer) or a.dtype == np.bool_):
        raise DataError(f"labels {path}: expected an integer array, got dtype {a.dtype}")
    if a.ndim not in (2, 3):
        raise DataError(f"labels {path}: expected shape (H, W) or (A, H, W), got {a.shape}")
    return a


def _label_image_header(path: Path) -> tuple:
    """(H, W) of a label image from its header; a float image (32-bit TIFF) is refused as
    :func:`read_labels` refuses it."""
    h, w, mode = image_header(path)
    if mode == "F":
        raise DataError(f"labels {path}: expected an integer label image, got a float image")
    return h, w


def _natural_key(s: str):
    return (0, int(s), "") if s.isdigit() else (1, 0, s)
