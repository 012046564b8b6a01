"""Joint geometric augmentations of an image and all its annotators' segmentations.

A *sample* is a dict with ``image`` float32 (H, W, 3) and ``segmentations`` int
(A, H, W) (other keys are passed through untouched, except ``fine_labels`` of the
synthetic set and ``superpixels`` (H, W) (cached superpixels, see :mod:`hiseg.data.cache`),
which are transformed like a segmentation when present). A transform is a callable
``t(sample, rng) -> sample`` where ``rng`` is a ``numpy.random.Generator`` (or a
``torch.Generator``, from which a numpy generator is seeded): the same sample
and the same generator state give the same result.

Geometry: the image is resampled bilinearly (area averaging when shrinking), label
images by nearest neighbour, both with the same half-pixel-centre convention, so a
label pixel and the image pixel at the same position stay aligned.

Inside :class:`Compose` the label images are gathered only once, at the end: each
step edits the source row / column index of every output pixel, which gives exactly
the result of resampling after every step, for the price of one gather.

Images smaller than a crop: :class:`RandomCrop` first **upscales** the sample (keeping
its aspect ratio) so that its short side reaches the crop size, then crops. No pixel
is ever padded, so every pixel of a crop is labelled.
"""
from __future__ import annotations

from typing import Callable, Sequence

import numpy as np

__all__ = [
    "Compose",
    "RandomFlip",
    "RandomRescale",
    "RandomCrop",
    "CenterCrop",
    "as_numpy_generator",
    "resize_sample",
    "resize_labels",
    "flip_sample",
    "crop_sample",
]

_LABEL_KEYS = ("segmentations", "fine_labels", "superpixels")


def as_numpy_generator(rng) -> np.random.Generator:
    """A numpy Generator from a Generator, a ``torch.Generator``, an int seed or None.

    ``None`` draws a seed from torch's global generator (so ``torch.manual_seed`` /
    ``pytorch_lightning.seed_everything`` and the loader's per-worker seeding make it
    reproducible).
    """
    if isinstance(rng, np.random.Generator):
        return rng
    if rng is None or rng.__class__.__name__ == "Generator":
        import torch

        seed = int(torch.randint(0, 2**62, (1,), generator=rng).item())
        return np.random.default_rng(seed)
    if isinstance(rng, (int, np.integer)):
        return np.random.default_rng(int(rng))
    raise TypeError(f"rng must be a numpy Generator, torch Generator, int or None, got {type(rng).__name__}")


def _check(sample: dict):
    img = sample.get("image")
    seg = sample.get("segmentations")
    if img is None or np.ndim(img) != 3 or np.shape(img)[2] != 3:
        raise ValueError(f"sample['image'] must be an (H, W, 3) array, got shape {np.shape(img)}")
    if seg is not None and (np.ndim(seg) != 3 or tuple(np.shape(seg)[1:]) != tuple(np.shape(img)[:2])):
        raise ValueError(f"sample['segmentations'] must be (A, H, W) with the image's H, W; "
                         f"image {np.shape(img)}, segmentations {np.shape(seg)}")


def _nearest_index(n_in: int, n_out: int) -> np.ndarray:
    """Source index of each output pixel of a nearest resize ``n_in -> n_out`` (half-pixel centres)."""
    return np.minimum(((np.arange(n_out) + 0.5) * n_in / n_out).astype(np.int64), n_in - 1)


def resize_labels(labels: np.ndarray, out_hw: tuple[int, int]) -> np.ndarray:
    """Nearest-neighbour resize of label images (..., H, W) to (..., H', W').

    Output pixel ``i`` takes input pixel ``floor((i + 0.5) * H / H')`` (half-pixel
    centres, as OpenCV's bilinear resize of the image). Cost O(output size).
    """
    h, w = labels.shape[-2:]
    return np.take(np.take(labels, _nearest_index(h, out_hw[0]), axis=-2), _nearest_index(w, out_hw[1]), axis=-1)


# Label images are not resampled at every step: a sample in flight carries, for its
# label images, the source row and column of every current pixel ("_rows", "_cols");
# flips, crops and resizes only edit these two index vectors, and the label images are
# gathered once at the end (one nearest resampling, whatever the chain of transforms).
def _lazy(sample: dict) -> dict:
    _check(sample)
    if "_rows" in sample:
        return sample
    out = dict(sample)
    h, w = sample["image"].shape[:2]
    out["_rows"] = np.arange(h, dtype=np.int64)
    out["_cols"] = np.arange(w, dtype=np.int64)
    return out


def _materialise(sample: dict) -> dict:
    if "_rows" not in sample:
        return sample
    out = dict(sample)
    rows, cols = out.pop("_rows"), out.pop("_cols")
    out["image"] = np.ascontiguousarray(out["image"], dtype=np.float32)
    for k in _LABEL_KEYS:
        if k in out and out[k] is not None:
            lab = np.asarray(out[k])
            h, w = lab.shape[-2:]
            if rows.size != h or cols.size != w or np.any(rows != np.arange(h)) or np.any(cols != np.arange(w)):
                lab = np.take(np.take(lab, rows, axis=-2), cols, axis=-1)
            out[k] = np.ascontiguousarray(lab)
    return out


def _resize(sample: dict, out_hw) -> dict:
    import cv2

    oh, ow = int(out_hw[0]), int(out_hw[1])
    if oh < 1 or ow < 1:
        raise ValueError(f"output size must be positive, got {(oh, ow)}")
    img = sample["image"]
    h, w = img.shape[:2]
    if (oh, ow) == (h, w):
        return sample
    interp = cv2.INTER_AREA if oh < h and ow < w else cv2.INTER_LINEAR
    out = dict(sample)
    out["image"] = cv2.resize(np.ascontiguousarray(img, dtype=np.float32), (ow, oh), interpolation=interp)
    out["_rows"] = sample["_rows"][_nearest_index(h, oh)]
    out["_cols"] = sample["_cols"][_nearest_index(w, ow)]
    return out


def _flip(sample: dict, horizontal: bool, vertical: bool) -> dict:
    out = dict(sample)
    if horizontal:
        out["image"] = out["image"][:, ::-1]
        out["_cols"] = out["_cols"][::-1]
    if vertical:
        out["image"] = out["image"][::-1]
        out["_rows"] = out["_rows"][::-1]
    return out


def _crop(sample: dict, top: int, left: int, height: int, width: int) -> dict:
    h, w = sample["image"].shape[:2]
    if top < 0 or left < 0 or top + height > h or left + width > w or height < 1 or width < 1:
        raise ValueError(f"crop window ({top}, {left}, {height}, {width}) outside an image of size {(h, w)}")
    out = dict(sample)
    out["image"] = sample["image"][top:top + height, left:left + width]
    out["_rows"] = sample["_rows"][top:top + height]
    out["_cols"] = sample["_cols"][left:left + width]
    return out


def resize_sample(sample: dict, out_hw: tuple[int, int]) -> dict:
    """Resize image (bilinear, area when shrinking) and label images (nearest) to ``out_hw = (H', W')``.

    Returns a new dict (contiguous arrays). Raises ValueError for a bad sample or size.
    """
    return _materialise(_resize(_lazy(sample), out_hw))


def flip_sample(sample: dict, horizontal: bool = False, vertical: bool = False) -> dict:
    """Mirror image and label images left-right and/or up-down (copies)."""
    return _materialise(_flip(_lazy(sample), horizontal, vertical))


def crop_sample(sample: dict, top: int, left: int, height: int, width: int) -> dict:
    """Crop image and label images to rows ``top:top+height``, columns ``left:left+width``.

    Raises ValueError when the window leaves the image.
    """
    return _materialise(_crop(_lazy(sample), top, left, height, width))


class _Transform:
    """Base: ``__call__`` = lazy ``_apply`` then one label gather; Compose chains ``_apply``."""

    def _apply(self, sample: dict, rng: np.random.Generator) -> dict:  # pragma: no cover
        raise NotImplementedError

    def __call__(self, sample: dict, rng=None) -> dict:
        return _materialise(self._apply(_lazy(sample), as_numpy_generator(rng)))


class Compose(_Transform):
    """Apply transforms in order, all drawing from the same generator.

    Label images are resampled once, at the end of the chain (see the module notes);
    a member without the lazy interface (any callable ``t(sample, rng)``) is given a
    materialised sample.
    """

    def __init__(self, transforms: Sequence[Callable]):
        self.transforms = list(transforms)

    def _apply(self, sample: dict, rng: np.random.Generator) -> dict:
        for t in self.transforms:
            if isinstance(t, _Transform):
                sample = t._apply(sample, rng)
            else:
                sample = _lazy(t(_materialise(sample), rng))
        return sample

    def __repr__(self) -> str:
        return f"Compose({self.transforms!r})"


class RandomFlip(_Transform):
    """Flip left-right with probability ``p_horizontal`` and up-down with ``p_vertical``."""

    def __init__(self, p_horizontal: float = 0.5, p_vertical: float = 0.0):
        self.p_horizontal = float(p_horizontal)
        self.p_vertical = float(p_vertical)

    def _apply(self, sample: dict, rng: np.random.Generator) -> dict:
        hf = bool(rng.random() < self.p_horizontal)
        vf = bool(rng.random() < self.p_vertical)
        return _flip(sample, hf, vf)

    def __repr__(self) -> str:
        return f"RandomFlip(p_horizontal={self.p_horizontal}, p_vertical={self.p_vertical})"


class RandomRescale(_Transform):
    """Rescale by a factor drawn log-uniformly in ``scale_range`` (same factor on both axes)."""

    def __init__(self, scale_range: tuple[float, float] = (0.75, 1.25)):
        lo, hi = float(scale_range[0]), float(scale_range[1])
        if not 0 < lo <= hi:
            raise ValueError(f"scale_range must satisfy 0 < low <= high, got {scale_range}")
        self.scale_range = (lo, hi)

    def _apply(self, sample: dict, rng: np.random.Generator) -> dict:
        lo, hi = self.scale_range
        s = float(np.exp(rng.uniform(np.log(lo), np.log(hi)))) if hi > lo else lo
        h, w = sample["image"].shape[:2]
        return _resize(sample, (max(1, int(round(h * s))), max(1, int(round(w * s)))))

    def __repr__(self) -> str:
        return f"RandomRescale(scale_range={self.scale_range})"


def _upscale_to(sample: dict, size: tuple[int, int]) -> dict:
    h, w = sample["image"].shape[:2]
    ch, cw = size
    if h >= ch and w >= cw:
        return sample
    s = max(ch / h, cw / w)
    return _resize(sample, (max(ch, int(np.ceil(h * s))), max(cw, int(np.ceil(w * s)))))


class RandomCrop(_Transform):
    """Crop a random ``size = (H, W)`` window (uniform position).

    A sample smaller than the window on either side is first upscaled (aspect kept)
    so that it covers the window; see the module docstring.
    """

    def __init__(self, size):
        self.size = (int(size), int(size)) if np.isscalar(size) else (int(size[0]), int(size[1]))
        if min(self.size) < 1:
            raise ValueError(f"crop size must be positive, got {size}")

    def _apply(self, sample: dict, rng: np.random.Generator) -> dict:
        sample = _upscale_to(sample, self.size)
        h, w = sample["image"].shape[:2]
        ch, cw = self.size
        top = int(rng.integers(0, h - ch + 1))
        left = int(rng.integers(0, w - cw + 1))
        return _crop(sample, top, left, ch, cw)

    def __repr__(self) -> str:
        return f"RandomCrop(size={self.size})"


class CenterCrop(RandomCrop):
    """Crop the central ``size`` window (upscaling small samples like :class:`RandomCrop`)."""

    def _apply(self, sample: dict, rng: np.random.Generator | None = None) -> dict:
        sample = _upscale_to(sample, self.size)
        h, w = sample["image"].shape[:2]
        ch, cw = self.size
        return _crop(sample, (h - ch) // 2, (w - cw) // 2, ch, cw)

    def __call__(self, sample: dict, rng=None) -> dict:
        return _materialise(self._apply(_lazy(sample)))

    def __repr__(self) -> str:
        return f"CenterCrop(size={self.size})"
