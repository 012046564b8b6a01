"""Pixel stage of the BSDS recipe: consensus labels and crops augmented on the device.

The recipe is the standard one of from-scratch edge detectors (HED, RCF, PiDiNet):

* **labels** -- the consensus of the annotators: ``c(p)`` = fraction of annotators whose
  ``Boundaries`` map marks pixel ``p``; positive where ``c >= 0.3``, negative where
  ``c == 0``, ignored in between (:func:`hiseg.core.losses.consensus_targets`);
* **augmentation** -- every crop is drawn with a random rotation (16 angles), a random
  horizontal flip, a random scale (log-uniform in ``scale_range``), a random centre and
  a small colour jitter. The whole training set lives on the device and a batch of crops
  is one ``affine_grid`` + ``grid_sample`` call (:class:`GPUAugmenter`), so the CPU never
  limits the step; labels are resampled bilinearly (thin lines keep their peak, their
  neighbours fall in the ignored band), pixels drawn from outside the image are ignored.

:class:`BSDS500PixelDataModule` serves it to the same LightningModule as the fine-tuning
(:class:`hiseg.training.module.HierarchicalSegmentationModule`, with ``closest_weight`` and
``triplet_weight`` 0 and ``pixel_loss: edge``). Its training loader yields one small key per
step, :class:`PixelStep` (a Python int, no tensor: nothing is copied to the device), whose
seed is a function of the run's seed, the epoch and the step's index in it
(:func:`step_seed`, with :class:`~hiseg.data.datamodule.SeededSampler`'s bookkeeping: resumes
are exact); :meth:`~BSDS500PixelDataModule.on_after_batch_transfer` draws the step's random
numbers **on the device** from that seed and cuts the crops there (:meth:`GPUAugmenter.step`).
So the hot path has no loader worker, no per-crop Python and no host round trip: the host
only enqueues device work and can run ahead of the GPU. The random streams differ between
devices (a CUDA generator is not the CPU's): a run resumes exactly on the kind of device it
started on. Validation batches are whole val images with their annotations
(:class:`~hiseg.data.collate.GraphBatch` without superpixels): the model's pipeline builds its
hierarchies from the prediction, as ``hiseg predict`` does.

The training images can also come from one packed file (:func:`pack_edge_dataset`: the
split's original JPEG bytes and the annotators' boundary counts, about 16 MB for BSDS500
train), which is what a GPU machine is sent (``experiments/gpu/prepare_gpu.py``).

    python train.py fit --config configs/bsds500_pixel.yaml
"""
from __future__ import annotations

import math
import os
from pathlib import Path
from typing import NamedTuple, Optional, Sequence

import numpy as np
import torch
import torch.nn.functional as F

from .bsds import DEFAULT_BSDS_ROOT, BSDS500
from .datamodule import BSDS500DataModule, GraphDataModule

__all__ = ["load_edge_dataset", "pack_edge_dataset", "GPUAugmenter", "PixelBatch", "PixelStep", "step_seed",
           "BSDS500PixelDataModule", "CROP_DRAWS"]

#: random numbers drawn per crop: image, angle, scale, flip, centre y, centre x, 3 jitter
CROP_DRAWS = 9
#: the format tag of :func:`pack_edge_dataset` files
_PACK_FORMAT = "hiseg-edges-1"


def _bsds_items(root, split: str, limit: Optional[int]):
    """(RGB uint8 (H, W, 3), annotator boundary counts uint8 (H, W), annotators) of a BSDS folder."""
    from ..io import load_ground_truth, read_image

    ds = BSDS500(root, split)
    n = len(ds) if limit is None else min(int(limit), len(ds))
    for i in range(n):
        img = (read_image(ds.image_path(i)) * 255.0 + 0.5).astype(np.uint8)
        b = load_ground_truth(ds.groundtruth_path(i))[1]
        yield img, np.sum(b, axis=0, dtype=np.uint8), len(b)


def _packed_items(path: Path, split: str, limit: Optional[int]):
    """The same items, from a :func:`pack_edge_dataset` file (in the folder's order)."""
    import cv2

    from ..io import DataError, to_float_rgb

    with np.load(path, allow_pickle=False) as z:
        if "format" not in z.files or str(z["format"]) != _PACK_FORMAT:
            raise DataError(f"{path} is not a packed edge data set ({_PACK_FORMAT}; experiments/gpu/prepare_gpu.py "
                            "writes one with hiseg.data.edges.pack_edge_dataset)")
        splits, jpeg, jo = z["splits"], z["jpeg"], z["jpeg_offsets"]
        counts, co, shapes, annotators = z["counts"], z["count_offsets"], z["shapes"], z["annotators"]
    order = []
    for s in split.split("+"):
        sel = np.flatnonzero(splits == s)
        if sel.size == 0:
            raise FileNotFoundError(f"split {s!r} not in the packed edge data set {path} (it holds "
                                    f"{sorted(set(splits.tolist()))})")
        order.extend(sel.tolist())

    def item(i):
        arr = cv2.imdecode(jpeg[jo[i]:jo[i + 1]], cv2.IMREAD_UNCHANGED | cv2.IMREAD_IGNORE_ORIENTATION)
        img = (to_float_rgb(arr, bgr=True, name=f"{path}[{i}]") * 255.0 + 0.5).astype(np.uint8)
        return img, counts[co[i]:co[i + 1]].reshape(tuple(shapes[i])), int(annotators[i])

    # decoded by threads (OpenCV's decoder and numpy release the GIL), in the file's order: the same arrays,
    # a few times sooner on a machine with cores to spare (the GPU run's start)
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(max(1, min(8, len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity")
                                       else os.cpu_count() or 1))) as pool:
        yield from pool.map(item, order[:len(order) if limit is None else int(limit)])


_PRELOADS: dict = {}  # (file, split, limit) -> the Future of load_edge_dataset's arrays (preload_edge_dataset)


def _preload_key(root, split: str, limit: Optional[int]):
    return str(Path(root).resolve()), str(split), None if limit is None else int(limit)


def preload_edge_dataset(root, split: str = "train", limit: Optional[int] = None):
    """Start :func:`load_edge_dataset` ``(root, split, limit)`` in a thread of its own; the next call
    of :func:`load_edge_dataset` with the same arguments (the data module's setup) returns its arrays
    (the same arrays, read once), or raises its error. Why: the GPU run's start decodes the training
    images while the training's other imports run (``experiments/gpu/gpu_phases.py``). Returns the
    ``concurrent.futures.Future``."""
    import threading
    from concurrent.futures import Future, ThreadPoolExecutor  # noqa: F401  (the thread's decoders: imported here)

    key, fut = _preload_key(root, split, limit), Future()

    def work():
        try:
            fut.set_result(_load_edge_dataset(root, split, limit))
        except BaseException as e:  # handed to the caller of load_edge_dataset
            fut.set_exception(e)

    _PRELOADS[key] = fut
    threading.Thread(target=work, name="preload_edge_dataset", daemon=True).start()
    return fut


def load_edge_dataset(root, split: str = "train", limit: Optional[int] = None):
    """The training set of the pixel stage, as the device holds it.

    Parameters
    ----------
    root : path
        A BSDS500 folder (:class:`~hiseg.data.bsds.BSDS500`), or a file written by
        :func:`pack_edge_dataset` (``.npz``), which gives the same arrays.
    split : str
        ``"train"``, ``"val"``, ``"train+val"``...
    limit : int, optional
        Only the first ``limit`` images.

    Returns
    -------
    images : uint8 array (N, 3, H, W)
    consensus : float32 array (N, H, W)
        Fraction of annotators marking each pixel. Portrait images are transposed to
        landscape so that all share one size (rotation augmentation covers orientation);
        other sizes are padded (consensus -1: ignored). Cost: reading and decoding N images
        (about 4 s for BSDS500 train on one core).

    Raises
    ------
    FileNotFoundError
        Missing folder, file or split; ValueError: no image; hiseg.io.DataError: a file
        that is not a packed edge data set.
    """
    if _PRELOADS:
        fut = _PRELOADS.pop(_preload_key(root, split, limit), None)
        if fut is not None:
            return fut.result()
    return _load_edge_dataset(root, split, limit)


def _load_edge_dataset(root, split: str, limit: Optional[int]):
    path = Path(root)
    items = _packed_items(path, split, limit) if path.suffix == ".npz" else _bsds_items(root, split, limit)
    images, cons = [], []
    for img, count, k in items:
        b = (count / k).astype(np.float32)  # the annotators' mean, as np.mean of their maps gives
        if img.shape[0] > img.shape[1]:
            img, b = img.transpose(1, 0, 2), b.T
        images.append(np.ascontiguousarray(img.transpose(2, 0, 1)))
        cons.append(np.ascontiguousarray(b))
    if not images:
        raise ValueError(f"BSDS500 split {split!r} under {root} has no image to train on")
    shapes = {im.shape for im in images}
    if len(shapes) != 1:  # pad to the largest (ignored in the loss)
        hh = max(s[1] for s in shapes)
        ww = max(s[2] for s in shapes)
        images = [np.pad(im, ((0, 0), (0, hh - im.shape[1]), (0, ww - im.shape[2])), mode="edge") for im in images]
        cons = [np.pad(c, ((0, hh - c.shape[0]), (0, ww - c.shape[1])), constant_values=-1.0) for c in cons]
    return np.stack(images), np.stack(cons)


def pack_edge_dataset(root, splits: Sequence[str], path, limit: Optional[int] = None) -> Path:
    """Write the pixel stage's training data of ``splits`` of the BSDS500 folder ``root`` into
    one ``.npz`` file at ``path``: each image's original JPEG bytes (no re-encoding) and the
    number of annotators marking each pixel (uint8, compressed). :func:`load_edge_dataset` of
    the file gives exactly the arrays of the folder. About 16 MB for BSDS500 train (the JPEGs
    are 15 MB of it); cost: reading the split once.

    Returns the path written. Raises FileNotFoundError (missing folder or split), ValueError
    (``path`` not ending in ``.npz``); nothing is left at ``path`` on failure.
    """
    from ..io import load_ground_truth

    path = Path(path)
    if path.suffix != ".npz":
        raise ValueError(f"a packed edge data set is an .npz file, got {path}")
    names, split_of, jpegs, counts, shapes, annotators = [], [], [], [], [], []
    for s in splits:
        ds = BSDS500(root, s)
        n = len(ds) if limit is None else min(int(limit), len(ds))
        for i in range(n):
            jpegs.append(np.frombuffer(Path(ds.image_path(i)).read_bytes(), np.uint8))
            b = load_ground_truth(ds.groundtruth_path(i))[1]
            counts.append(np.sum(b, axis=0, dtype=np.uint8).ravel())
            shapes.append(b[0].shape)
            annotators.append(len(b))
            names.append(Path(ds.image_path(i)).stem)
            split_of.append(s)
    offsets = [np.concatenate([[0], np.cumsum([a.size for a in arrs])]).astype(np.int64) for arrs in (jpegs, counts)]
    tmp = path.with_name(path.name + ".part.npz")
    try:
        np.savez_compressed(tmp, format=np.array(_PACK_FORMAT), names=np.array(names), splits=np.array(split_of),
                            jpeg=np.concatenate(jpegs), jpeg_offsets=offsets[0], counts=np.concatenate(counts),
                            count_offsets=offsets[1], shapes=np.array(shapes, dtype=np.int64),
                            annotators=np.array(annotators, dtype=np.int64))
        tmp.replace(path)
    finally:
        tmp.unlink(missing_ok=True)
    return path


class PixelBatch(NamedTuple):
    """A batch of the pixel stage: ``images`` (B, 3, S, S) in [0, 1], ``consensus`` (B, S, S)
    (fraction of annotators), ``valid`` bool (B, S, S) (False: drawn from outside the image)."""

    images: torch.Tensor
    consensus: torch.Tensor
    valid: torch.Tensor

    @property
    def batch_size(self) -> int:
        return int(self.images.shape[0])


class PixelStep(NamedTuple):
    """The key of one training step of the pixel stage: its crops are drawn on the device from
    ``seed`` (:meth:`GPUAugmenter.step`). Plain ints: moving it to a device copies nothing."""

    seed: int


def step_seed(seed: int, epoch: int, index: int) -> int:
    """The seed of step ``index`` of ``epoch`` in a run seeded ``seed``: a 63-bit integer from
    numpy's ``SeedSequence([seed, epoch, index])`` (independent streams for distinct keys).
    Within one process the key is equivalent to ``(seed, global step)``; a run resumed
    mid-epoch draws what the uninterrupted one drew. Cost: a few microseconds."""
    state = np.random.SeedSequence([int(seed), int(epoch), int(index)]).generate_state(2, np.uint32)
    return (int(state[0]) << 31) ^ int(state[1])


class GPUAugmenter:
    """Random rotated / flipped / scaled crops of a device-resident image set.

    Parameters
    ----------
    images : uint8 array (N, 3, H, W)
        Kept as uint8 on the device (BSDS500 train: 93 MB).
    consensus : float array (N, H, W); negative values mark padding (ignored)
        Kept with its validity mask as float32 (N, 2, H, W) (BSDS500 train: 247 MB).
    crop : int
        Side of the square crops.
    n_angles : int
        Rotations drawn from ``k * 360 / n_angles``.
    scale_range : (float, float)
        Scale drawn log-uniformly (output pixels per input pixel).
    jitter : float
        Strength of the brightness / contrast / saturation jitter.
    device : torch device
    """

    def __init__(self, images, consensus, *, crop: int = 320, n_angles: int = 16,
                 scale_range: Sequence[float] = (0.5, 1.5), jitter: float = 0.1, device="cpu") -> None:
        self.device = torch.device(device)
        self.images = torch.as_tensor(images).to(self.device)                      # uint8
        c = torch.as_tensor(consensus, dtype=torch.float32)
        valid = (c >= 0).float()
        self.extra = torch.stack([c.clamp(min=0), valid], 1).to(self.device)       # (N, 2, H, W)
        self.crop = int(crop)
        self.n_angles = int(n_angles)
        self.scale_range = (float(scale_range[0]), float(scale_range[1]))
        self.jitter = float(jitter)
        self._generator: Optional[torch.Generator] = None

    def to(self, device) -> "GPUAugmenter":
        """The image set on ``device`` (moved once)."""
        device = torch.device(device)
        if device != self.device:
            self.images, self.extra, self.device = self.images.to(device), self.extra.to(device), device
            self._generator = None
        return self

    def draws(self, batch_size: int, seed: int) -> torch.Tensor:
        """The random numbers (``batch_size``, :data:`CROP_DRAWS`) in [0, 1) of the step keyed
        ``seed``, drawn on the device by a generator of the device (re-seeded: no host
        synchronisation, and the same numbers for the same seed on the same kind of device)."""
        if self._generator is None:
            self._generator = torch.Generator(device=self.device)
        self._generator.manual_seed(int(seed))
        return torch.rand((int(batch_size), CROP_DRAWS), generator=self._generator, device=self.device)

    def step(self, batch_size: int, seed: int) -> PixelBatch:
        """The crops of the step keyed ``seed``: :meth:`crops` of :meth:`draws`, all on the
        device. Cost: one ``grid_sample`` of the batch's images and one of their labels."""
        return self.crops(self.draws(batch_size, seed))

    def sample(self, batch_size: int, generator: torch.Generator) -> PixelBatch:
        """A batch from ``generator``'s random numbers (:meth:`crops` of ``torch.rand`` on the
        generator's device)."""
        return self.crops(torch.rand(int(batch_size), CROP_DRAWS, generator=generator, device=generator.device))

    def crops(self, rnd: torch.Tensor) -> PixelBatch:
        """The crops of the random numbers ``rnd`` (B, :data:`CROP_DRAWS`) in [0, 1), computed on
        the augmenter's device (``rnd`` is moved there; no copy back to the host).

        Raises ValueError when ``rnd`` is not (B, :data:`CROP_DRAWS`)."""
        if rnd.ndim != 2 or rnd.shape[1] != CROP_DRAWS:
            raise ValueError(f"crop draws of shape {tuple(rnd.shape)}, expected (B, {CROP_DRAWS})")
        rnd = rnd.detach().to(self.device, torch.float32)
        n, _, h, w = self.images.shape
        s = self.crop
        idx = (rnd[:, 0] * n).long().clamp_max(n - 1)
        ang = torch.floor(rnd[:, 1] * self.n_angles) * (2 * math.pi / self.n_angles)
        lo, hi = math.log(self.scale_range[0]), math.log(self.scale_range[1])
        scale = torch.exp(lo + (hi - lo) * rnd[:, 2])
        flip = torch.where(rnd[:, 3] < 0.5, -1.0, 1.0)
        # crop centres drawn so that the unrotated crop stays inside the image where it fits
        half = s / 2.0
        my = torch.clamp(half / scale, max=(h - 1) / 2.0)
        mx = torch.clamp(half / scale, max=(w - 1) / 2.0)
        cy = my + rnd[:, 4] * (h - 1 - 2 * my)
        cx = mx + rnd[:, 5] * (w - 1 - 2 * mx)
        # output pixel offset (u, v) from the crop centre -> source offset R(ang) diag(flip, 1) / scale
        cos, sin = torch.cos(ang) / scale, torch.sin(ang) / scale
        # source x = cx + cos*fx*u - sin*v ; source y = cy + sin*fx*u + cos*v   (pixels)
        # normalised coordinates (align_corners=False): xn = (2x + 1) / W - 1
        theta = torch.stack([torch.stack([cos * flip * (2 * half / w), -sin * (2 * half / w), (2 * cx + 1) / w - 1], 1),
                             torch.stack([sin * flip * (2 * half / h), cos * (2 * half / h), (2 * cy + 1) / h - 1], 1)],
                            1)
        grid = F.affine_grid(theta, (rnd.shape[0], 1, s, s), align_corners=False)
        img = F.grid_sample(self.images.index_select(0, idx).float().div_(255.0), grid, mode="bilinear",
                            padding_mode="reflection", align_corners=False)
        ex = F.grid_sample(self.extra.index_select(0, idx), grid, mode="bilinear", padding_mode="zeros",
                           align_corners=False)
        if self.jitter > 0:
            j = (rnd[:, 6:9] * 2 - 1) * self.jitter
            mean = img.mean(dim=(1, 2, 3), keepdim=True)
            img = (img - mean) * (1 + j[:, 0, None, None, None]) + mean + j[:, 1, None, None, None]
            grey = img.mean(dim=1, keepdim=True)
            img = (img - grey) * (1 + j[:, 2, None, None, None]) + grey
            img = img.clamp(0, 1)
        return PixelBatch(img, ex[:, 0], ex[:, 1] > 0.999)


class _CropSteps(torch.utils.data.Dataset):
    """``steps`` items; item ``(index, (seed, epoch))`` (from :class:`SeededSampler`) is the
    step's :class:`PixelStep`, keyed :func:`step_seed` ``(seed, epoch, index)``."""

    def __init__(self, steps: int):
        self.n = int(steps)

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, item) -> PixelStep:
        index, (seed, epoch) = item if isinstance(item, tuple) else (item, (0, 0))
        return PixelStep(step_seed(seed, epoch, index))


def _only(items):
    return items[0]


class BSDS500PixelDataModule(GraphDataModule):
    """The pixel stage's data: device-augmented crops of BSDS500 (see the module docstring).

    Parameters
    ----------
    data_root : str
        See :mod:`hiseg.data.bsds` (default ``datasets/BSDS500``): the validation images, and
        the training images unless ``train_data`` is given.
    train_split : str
        ``"train"``, or ``"train+val"`` for a shipped model (its validation figures are
        then not a measurement).
    val_split : str
    train_data : str, optional
        A :func:`pack_edge_dataset` file to read the training split from instead of
        ``data_root`` (the same arrays; what a GPU machine is sent).
    crop_size : int
        Side of the square training crops.
    batch_size : int
        Crops per step.
    crops_per_epoch : int
        Crops in one epoch (the validation interval and checkpoint rhythm; crops are drawn
        afresh every epoch); an epoch has ``crops_per_epoch // batch_size`` steps.
    scale_range : (float, float)
        Log-uniform scale range of the crops.
    n_angles : int
        Rotations ``k * 360 / n_angles``.
    jitter : float
        Colour jitter strength.
    val_batch_size, num_workers, pin_memory
        Of the validation loader (whole images, no superpixels); the training loader has no
        worker (see the module docstring).
    max_val_images : int
        Validate on the first ``max_val_images`` images (0: all).
    limit_images : int
        Train on the first ``limit_images`` images of the split (0: all; tests).

    Raises
    ------
    ValueError
        A bad setting (named); FileNotFoundError in :meth:`setup` (missing data).
    """

    def __init__(self, data_root: str = DEFAULT_BSDS_ROOT, train_split: str = "train", val_split: str = "val",
                 crop_size: int = 320, batch_size: int = 32, crops_per_epoch: int = 3200,
                 scale_range: tuple = (0.5, 1.5), n_angles: int = 16, jitter: float = 0.1,
                 val_batch_size: int = 1, num_workers: int = 1, pin_memory: bool = False, max_val_images: int = 0,
                 limit_images: int = 0, train_data: Optional[str] = None):
        super().__init__()
        self.save_hyperparameters()
        self._init_common(batch_size, val_batch_size, num_workers, pin_memory, superpixels=False)
        if crop_size < 16:
            raise ValueError(f"crop_size must be >= 16, got {crop_size}")
        if crops_per_epoch < batch_size:
            raise ValueError(f"crops_per_epoch ({crops_per_epoch}) must be >= batch_size ({batch_size})")
        lo, hi = (float(x) for x in scale_range)
        if not 0 < lo <= hi:
            raise ValueError(f"scale_range must be 0 < low <= high, got {tuple(scale_range)}")
        if n_angles < 1:
            raise ValueError(f"n_angles must be >= 1, got {n_angles}")
        self.data_root = str(data_root)
        self.train_data = None if train_data in (None, "") else str(train_data)
        self.train_split, self.val_split, self.test_split = train_split, val_split, "test"
        self.crop_size, self.crops_per_epoch = int(crop_size), int(crops_per_epoch)
        self.scale_range, self.n_angles, self.jitter = (lo, hi), int(n_angles), float(jitter)
        self.max_val_images, self.limit_images = int(max_val_images), int(limit_images)
        self.augmenter: Optional[GPUAugmenter] = None
        self._arrays = None  # (images, consensus) given to from_arrays: no validation set
        # one item per step (a PixelStep), no worker process: the crops are drawn on the device
        self.train_collate, self.train_workers, self.train_items_per_batch = _only, 0, 1

    @classmethod
    def from_arrays(cls, images, consensus, **kwargs) -> "BSDS500PixelDataModule":
        """A data module training on given arrays (``images`` uint8 (N, 3, H, W), ``consensus``
        (N, H, W), as :func:`load_edge_dataset` returns them), with no validation set
        (benchmarks, tests); ``kwargs`` as the constructor's (not ``data_root``)."""
        dm = cls(data_root="<arrays>", **kwargs)
        dm._arrays = (images, consensus)
        return dm

    @property
    def steps_per_epoch(self) -> int:
        """Training steps in one epoch (on one process)."""
        return self.crops_per_epoch // self.batch_size

    def setup(self, stage: Optional[str] = None) -> None:
        if stage in (None, "fit") and self.train_set is None:
            if self._arrays is not None:
                images, cons = self._arrays
            else:
                images, cons = load_edge_dataset(self.train_data or self.data_root, self.train_split,
                                                 limit=self.limit_images or None)
            self.augmenter = GPUAugmenter(images, cons, crop=self.crop_size, n_angles=self.n_angles,
                                          scale_range=self.scale_range, jitter=self.jitter)
            self.train_set = _CropSteps(self.steps_per_epoch)
        if self._arrays is None:
            BSDS500DataModule.setup_bsds_eval(self, stage)  # whole val / test images, as the fine-tuning's

    def val_dataloader(self):
        return [] if self._arrays is not None else super().val_dataloader()

    def on_after_batch_transfer(self, batch, dataloader_idx: int):
        """Training batches (a :class:`PixelStep`, or a tensor of crop draws) become
        :class:`PixelBatch` es drawn on the device of the model; the others pass unchanged."""
        if isinstance(batch, (PixelStep, torch.Tensor)):
            if self.augmenter is None:
                self.setup("fit")
            if isinstance(batch, torch.Tensor):
                return self.augmenter.to(batch.device).crops(batch)
            return self.augmenter.to(self._device()).step(self.batch_size, batch.seed)
        return batch

    def _device(self) -> torch.device:
        t = self.trainer
        return t.strategy.root_device if t is not None else self.augmenter.device
