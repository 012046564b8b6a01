"""Reader of the Berkeley Segmentation Data Set 500 (BSDS500) with all its annotators.

Arbelaez, Maire, Fowlkes, Malik, "Contour Detection and Hierarchical Image
Segmentation", IEEE TPAMI 33(5), 2011 (and Martin et al., ICCV 2001). Free for
non-commercial research and education; cite these papers where it is used.

Accepted layouts (``root`` is detected in this order)::

    root/images/{train,val,test}/*.jpg        root/groundTruth/{split}/*.mat
    root/data/images/{split}/*.jpg            root/data/groundTruth/{split}/*.mat
    root/BSDS500/data/images/{split}/*.jpg    (the BSR tarball, root = BSR/)

Each ``.mat`` holds ``groundTruth``, a 1xK cell of structs whose ``Segmentation`` is a
uint16 label image (labels 1..n); all K (4 to 9) annotators are returned.
"""
from __future__ import annotations

from pathlib import Path
from typing import Sequence

import numpy as np

from ..io import DataError, image_size, load_ground_truth, read_image

__all__ = ["BSDS500", "find_bsds_root", "DEFAULT_BSDS_ROOT"]

DEFAULT_BSDS_ROOT = "datasets/BSDS500"

_LAYOUT = ("expected BSDS500 layout: ROOT/images/{train,val,test}/*.jpg and "
           "ROOT/groundTruth/{train,val,test}/*.mat (ROOT/data/images/... is accepted too); "
           "see datasets/README.md")


def find_bsds_root(root) -> Path:
    """The directory that directly holds ``images/`` and ``groundTruth/``.

    Parameters
    ----------
    root : str or Path
        ``ROOT``, ``ROOT/..`` with ``ROOT = X/data`` or the BSR tarball's top folder.

    Raises
    ------
    FileNotFoundError
        ``root`` does not exist or holds none of the accepted layouts (the message
        spells out the expected one).
    """
    root = Path(root).expanduser()
    if not root.exists():
        raise FileNotFoundError(f"BSDS500 data root not found: {root}; {_LAYOUT}")
    for cand in (root, root / "data", root / "BSDS500" / "data"):
        if (cand / "images").is_dir():
            if not (cand / "groundTruth").is_dir():
                raise FileNotFoundError(f"BSDS500: {cand / 'images'} exists but {cand / 'groundTruth'} "
                                        f"is missing; {_LAYOUT}")
            return cand
    raise FileNotFoundError(f"no BSDS500 images folder under {root}; {_LAYOUT}")


class BSDS500:
    """BSDS500 images with every annotator's segmentation.

    Parameters
    ----------
    root : str or Path
        Data root, default ``datasets/BSDS500`` (see the module docstring for layouts).
    split : str or sequence of str
        ``"train"``, ``"val"``, ``"test"``, a list of them, or ``"train+val"``.
    names : sequence of str, optional
        Restrict to these image ids (in this order).

    Samples (``dataset[i]``) are dicts: ``image`` float32 (H, W, 3) RGB in [0, 1],
    ``segmentations`` int32 (K, H, W) (labels 1..n per annotator), ``name`` (image id).
    Reading one sample decodes its JPEG and ``loadmat``s its ground truth (the cost, measured by
    ``benchmarks/bench_data.py``: ``benchmarks/results/data.md``).

    Raises
    ------
    FileNotFoundError
        Missing data root (message with the expected layout), missing split (message
        lists the splits found), an image without its ``.mat`` (named), an empty split.
    DataError
        (when a sample is read) corrupt image or ``.mat`` file (named), image and
        ground truth of different sizes.
    """

    def __init__(self, root=DEFAULT_BSDS_ROOT, split: str | Sequence[str] = "train", *,
                 names: Sequence[str] | None = None):
        self.root = find_bsds_root(root)
        splits = split.split("+") if isinstance(split, str) else list(split)
        if not splits:
            raise ValueError("split must name at least one split")
        self.splits = splits
        items: list[tuple[str, Path, Path]] = []
        available = sorted(p.name for p in (self.root / "images").iterdir() if p.is_dir())
        for s in splits:
            idir = self.root / "images" / s
            gdir = self.root / "groundTruth" / s
            if not idir.is_dir():
                raise FileNotFoundError(f"BSDS500 split {s!r} not found: no folder {idir} "
                                        f"(splits present: {', '.join(available) or 'none'})")
            imgs = sorted(p for p in idir.iterdir() if p.suffix.lower() in (".jpg", ".jpeg", ".png"))
            if not imgs:
                raise FileNotFoundError(f"BSDS500 split {s!r}: no image in {idir}")
            missing = [p.name for p in imgs if not (gdir / (p.stem + ".mat")).is_file()]
            if missing:
                shown = ", ".join(missing[:10]) + (f" (and {len(missing) - 10} more)" if len(missing) > 10 else "")
                raise FileNotFoundError(f"BSDS500 split {s!r}: no ground-truth file in {gdir} for image(s) "
                                        f"{shown}; expected {gdir}/NAME.mat next to {idir}/NAME.jpg")
            items += [(p.stem, p, gdir / (p.stem + ".mat")) for p in imgs]
        if names is not None:
            by_name = {it[0]: it for it in items}
            unknown = [n for n in names if n not in by_name]
            if unknown:
                raise FileNotFoundError(f"BSDS500 {'+'.join(splits)}: unknown image id(s) {', '.join(unknown[:10])}")
            items = [by_name[n] for n in names]
        self._items = items
        self.names = [n for n, _, _ in items]

    def __len__(self) -> int:
        return len(self._items)

    def image_path(self, index: int) -> Path:
        return self._items[index][1]

    def groundtruth_path(self, index: int) -> Path:
        return self._items[index][2]

    def check_labels(self, indices: Sequence[int] | None = None) -> None:
        """Check the ground truth of the samples ``indices`` (all: None) before training
        reads them: every ``.mat`` is read and its label images checked
        (:func:`hiseg.io.load_ground_truth`: readable, annotators present, whole
        non-negative labels, one shape), and that shape compared with its image's, read
        from the image's header (no image decoded). Its cost, measured by
        ``benchmarks/bench_label_check.py``: ``benchmarks/results/label_check.md``.

        Raises
        ------
        DataError
            The first bad file, named, with what is wrong.
        """
        for i in range(len(self)) if indices is None else indices:
            name, ipath, gpath = self._items[i]
            shape = load_ground_truth(gpath)[0][0].shape
            if shape != image_size(ipath):
                raise DataError(f"BSDS500 {name}: image {ipath} is {image_size(ipath)} but its ground truth "
                                f"{gpath} is {shape}")

    def __getitem__(self, index: int) -> dict:
        if not -len(self) <= index < len(self):
            raise IndexError(f"index {index} out of range for BSDS500 {'+'.join(self.splits)} "
                             f"({len(self)} images)")
        name, ipath, gpath = self._items[index]
        image = read_image(ipath)
        seg = np.stack(load_ground_truth(gpath)[0]).astype(np.int32)
        if seg.shape[1:] != image.shape[:2]:
            raise DataError(f"BSDS500 {name}: image {ipath} is {image.shape[:2]} but its ground truth "
                            f"{gpath} is {seg.shape[1:]}")
        return {"image": image, "segmentations": seg, "name": name}
