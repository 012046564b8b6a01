"""Superpixels of whole images, computed once: the fast colour-superpixel data path.

The superpixels of a raw image do not depend on the augmentation drawn for it, so
:class:`SuperpixelCache` computes those of every image once, at full resolution and
before augmentation, and :class:`~hiseg.data.graphs.SegmentationGraphDataset`
(``superpixels="cached"``) hands them to the transform with the image and the
annotations: flips, rescaling and crops move them by nearest neighbour (see
:mod:`hiseg.data.transforms`), every label is then made one 4-connected region numbered
``0..R-1`` again (:func:`~hiseg.segmentation.superpixels.make_connected`: a crop or a
downscale can cut a region in pieces) and the RAG is built from that map. Per sample
this replaces the superpixel computation by a relabelling, many times cheaper;
``benchmarks/results/data.md`` has the measured costs.

What differs from superpixels computed on every augmented sample: the superpixels are
those of the whole image, so a rescaled sample's superpixels are rescaled with it (their
size follows the scale factor) and the regions cut by a crop's border are smaller.

Where they are kept:

- no ``cache_dir``: in memory, per process (each loader worker keeps the superpixels of
  the images it has seen; ``persistent_workers`` keeps them across epochs), as the
  smallest unsigned dtype that holds the labels (uint16 for fewer than 65,536 regions:
  ~0.3 MB per BSDS500 image, 60 MB per worker for the 200 training images);
- ``cache_dir``: on disk, one ``.npy`` file per image under
  ``cache_dir/superpixels-<settings key>/``, shared by the loader workers, DDP processes
  and later runs (files are written atomically; nothing is held in memory but the file
  name of each image).

Keys: the folder is named by the superpixel settings (the function's ``repr``, e.g.
``Superpixels(method='watershed', region_size=12.0, ...)``, and :data:`CACHE_VERSION`),
so changing a setting uses another folder; a file is named by the image's name and a
hash of its pixels, so an image that changed gets new superpixels. A file that cannot be
read, or does not fit its image, is recomputed and rewritten (with a warning).
"""
from __future__ import annotations

import dataclasses
import hashlib
import re
import warnings
from pathlib import Path
from typing import Callable, Hashable

import numpy as np

from ..io import atomic_write

__all__ = ["SuperpixelCache", "settings_key", "image_key", "CACHE_VERSION"]

#: Bumped when the superpixel code changes what it returns for the same settings.
CACHE_VERSION = 1


def settings_key(superpixel_fn: Callable) -> str:
    """A short hash of the superpixel settings: the ``repr`` of a dataclass function (such as
    :class:`~hiseg.segmentation.superpixels.Superpixels`) or the ``cache_key`` attribute of
    another callable, with :data:`CACHE_VERSION`.

    Raises TypeError for a callable that has neither (a lambda's ``repr`` names its memory
    address, not its settings: it cannot key files that outlive the process).
    """
    if dataclasses.is_dataclass(superpixel_fn) and not isinstance(superpixel_fn, type):
        desc = repr(superpixel_fn)
    elif getattr(superpixel_fn, "cache_key", None) is not None:
        desc = str(superpixel_fn.cache_key)
    else:
        raise TypeError(f"cannot key a superpixel cache on disk by {superpixel_fn!r}: use a dataclass such as "
                        "hiseg.segmentation.Superpixels, or give the callable a 'cache_key' string naming its settings")
    return hashlib.sha1(f"hiseg-superpixels-v{CACHE_VERSION} {desc}".encode()).hexdigest()[:16]


def image_key(image: np.ndarray, name: str = "") -> str:
    """Hash of an image's name, shape, dtype and pixels (BLAKE2b, 128 bits): small next to the
    superpixels it saves (``benchmarks/results/data.md``)."""
    image = np.ascontiguousarray(image)
    h = hashlib.blake2b(digest_size=16)
    h.update(repr((str(name), image.shape, str(image.dtype))).encode())
    h.update(memoryview(image).cast("B"))
    return h.hexdigest()


def _narrowest_dtype(labels: np.ndarray) -> np.ndarray:
    """Labels (>= 0) in the smallest unsigned dtype that holds them."""
    top = int(labels.max()) if labels.size else 0
    for dt in (np.uint16, np.uint32):
        if top <= np.iinfo(dt).max:
            return labels.astype(dt)
    return labels.astype(np.int64)


_UNSAFE = re.compile(r"[^A-Za-z0-9_.-]+")


class SuperpixelCache:
    """The superpixels of whole images, each computed once (see the module docstring).

    Parameters
    ----------
    superpixel_fn : callable ``image (H, W, 3) -> int labels (H, W)``
        Labels ``0..R-1``, each one 4-connected region.
    cache_dir : str or Path, optional
        Keep them on disk under ``cache_dir/superpixels-<settings key>/`` (created when
        needed); default: in this process's memory. A disk cache needs a function with
        stable settings (see :func:`settings_key`).

    Call ``cache(key, image, name)``: ``key`` identifies the image within this process
    (the data set index), ``name`` names it on disk; returns its labels (H, W) in an
    unsigned dtype (do not modify them: they are the cached array).
    """

    def __init__(self, superpixel_fn: Callable, cache_dir=None):
        if not callable(superpixel_fn):
            raise TypeError(f"superpixel_fn must be callable, got {type(superpixel_fn).__name__}")
        self.superpixel_fn = superpixel_fn
        self.dir = None if cache_dir is None else Path(cache_dir) / f"superpixels-{settings_key(superpixel_fn)}"
        self._memory: dict = {}  # key -> labels (no cache_dir) or file path (cache_dir)
        self.computed = 0  # superpixel maps this object computed (for tests and benchmarks)

    def __len__(self) -> int:
        return len(self._memory)

    def _compute(self, image: np.ndarray) -> np.ndarray:
        sp = np.asarray(self.superpixel_fn(image))
        if sp.shape != image.shape[:2]:
            raise ValueError(f"superpixel function returned shape {sp.shape} for an image of shape {image.shape[:2]}")
        if not np.issubdtype(sp.dtype, np.integer) or (sp.size and sp.min() < 0):
            raise ValueError(f"superpixel function must return labels >= 0, got dtype {sp.dtype}")
        self.computed += 1
        return _narrowest_dtype(sp)

    def __call__(self, key: Hashable, image: np.ndarray, name: str = "") -> np.ndarray:
        image = np.asarray(image)
        if self.dir is None:
            sp = self._memory.get(key)
            if sp is None or sp.shape != image.shape[:2]:
                sp = self._memory[key] = self._compute(image)
            return sp
        path = self._memory.get(key)
        if path is None:
            stem = _UNSAFE.sub("_", str(name))[:64]
            path = self._memory[key] = self.dir / f"{stem}-{image_key(image, name)}.npy"
        sp = self._read(path, image.shape[:2])
        if sp is None:
            sp = self._compute(image)
            self.dir.mkdir(parents=True, exist_ok=True)
            atomic_write(path, lambda tmp: _save_npy(tmp, sp))
        return sp

    @staticmethod
    def _read(path: Path, shape) -> np.ndarray | None:
        if not path.is_file():
            return None
        try:
            sp = np.load(path, allow_pickle=False)
        except Exception as e:  # noqa: BLE001 - a damaged file is recomputed
            warnings.warn(f"superpixel cache file {path} is unreadable ({type(e).__name__}: {e}): recomputed",
                          stacklevel=3)
            return None
        if sp.shape != tuple(shape) or not np.issubdtype(sp.dtype, np.integer):
            warnings.warn(f"superpixel cache file {path} holds {sp.dtype} {sp.shape}, not labels of the image's "
                          f"size {tuple(shape)}: recomputed", stacklevel=3)
            return None
        return sp


def _save_npy(path: str, array: np.ndarray) -> None:
    with open(path, "wb") as f:
        np.save(f, array, allow_pickle=False)
