"""Pixel stage of the BSDS recipe: consensus labels and crops augmented on the device.

The recipe is the standard one of from-scratch edge detectors (HED, RCF, PiDiNet):

* **labels** -- the consensus of the annotators: ``c(p)`` = fraction of annotators whose
  ``Boundaries`` map marks pixel ``p``; positive where ``c >= 0.3``, negative where
  ``c == 0``, ignored in between (:func:`hiseg.losses.consensus_targets`);
* **augmentation** -- every crop is drawn with a random rotation (16 angles), a random
  horizontal flip, a random scale (log-uniform in ``scale_range``), a random centre and
  a small colour jitter. The whole training set lives on the device and a batch of crops
  is one ``affine_grid`` + ``grid_sample`` call (:class:`GPUAugmenter`), so the CPU never
  limits the step; labels are resampled bilinearly (thin lines keep their peak, their
  neighbours fall in the ignored band), pixels drawn from outside the image are ignored.

:class:`BSDS500PixelDataModule` serves it to the same LightningModule as the fine-tuning
(:class:`hiseg.lightning.HierarchicalSegmentationModule`, with ``closest_weight`` and
``triplet_weight`` 0 and ``pixel_loss: edge``): its training loader yields only the random
numbers of every crop (a function of the run's seed, the epoch and the crop's index, as
:class:`~hiseg.data.datamodule.SeededSampler` orders them: resumes are exact), and
:meth:`~BSDS500PixelDataModule.on_after_batch_transfer` turns them into a
:class:`PixelBatch` on the device. Validation batches are whole val images with their
annotations (:class:`~hiseg.data.collate.GraphBatch` without superpixels): the model's
pipeline builds its hierarchies from the prediction, as ``hiseg predict`` does.

    python train.py fit --config configs/bsds500_pixel.yaml
"""
from __future__ import annotations

import math
from typing import NamedTuple, Optional, Sequence

import numpy as np
import torch
import torch.nn.functional as F

from .bsds import DEFAULT_BSDS_ROOT, BSDS500
from .datamodule import BSDS500DataModule, _GraphDataModule

__all__ = ["load_edge_dataset", "GPUAugmenter", "PixelBatch", "BSDS500PixelDataModule", "CROP_DRAWS"]

#: random numbers drawn per crop: image, angle, scale, flip, centre y, centre x, 3 jitter
CROP_DRAWS = 9


def load_edge_dataset(root, split: str = "train", limit: Optional[int] = None):
    """Images (uint8 (N, 3, H, W)) and consensus maps (float32 (N, H, W), fraction of
    annotators marking each pixel) of a BSDS500 split (``"train"``, ``"train+val"``...);
    portrait images are transposed to landscape so that all share one size (rotation
    augmentation covers orientation); other sizes are padded (consensus -1: ignored)."""
    from ..io import load_ground_truth, read_image

    ds = BSDS500(root, split)
    n = len(ds) if limit is None else min(int(limit), len(ds))
    if n < 1:
        raise ValueError(f"BSDS500 split {split!r} under {root} has no image to train on")
    images, cons = [], []
    for i in range(n):
        img = (read_image(ds.image_path(i)) * 255.0 + 0.5).astype(np.uint8)
        b = np.mean(load_ground_truth(ds.groundtruth_path(i))[1], axis=0).astype(np.float32)
        if img.shape[0] > img.shape[1]:
            img, b = img.transpose(1, 0, 2), b.T
        images.append(np.ascontiguousarray(img.transpose(2, 0, 1)))
        cons.append(np.ascontiguousarray(b))
    shapes = {im.shape for im in images}
    if len(shapes) != 1:  # pad to the largest (ignored in the loss)
        hh = max(s[1] for s in shapes)
        ww = max(s[2] for s in shapes)
        images = [np.pad(im, ((0, 0), (0, hh - im.shape[1]), (0, ww - im.shape[2])), mode="edge") for im in images]
        cons = [np.pad(c, ((0, hh - c.shape[0]), (0, ww - c.shape[1])), constant_values=-1.0) for c in cons]
    return np.stack(images), np.stack(cons)


class PixelBatch(NamedTuple):
    """A batch of the pixel stage: ``images`` (B, 3, S, S) in [0, 1], ``consensus`` (B, S, S)
    (fraction of annotators), ``valid`` bool (B, S, S) (False: drawn from outside the image)."""

    images: torch.Tensor
    consensus: torch.Tensor
    valid: torch.Tensor

    @property
    def batch_size(self) -> int:
        return int(self.images.shape[0])


class GPUAugmenter:
    """Random rotated / flipped / scaled crops of a device-resident image set.

    Parameters
    ----------
    images : uint8 array (N, 3, H, W)
    consensus : float array (N, H, W); negative values mark padding (ignored)
    crop : int
        Side of the square crops.
    n_angles : int
        Rotations drawn from ``k * 360 / n_angles``.
    scale_range : (float, float)
        Scale drawn log-uniformly (output pixels per input pixel).
    jitter : float
        Strength of the brightness / contrast / saturation jitter.
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

    def to(self, device) -> "GPUAugmenter":
        """The image set on ``device`` (moved once)."""
        device = torch.device(device)
        if device != self.device:
            self.images, self.extra, self.device = self.images.to(device), self.extra.to(device), device
        return self

    def sample(self, batch_size: int, generator: torch.Generator) -> PixelBatch:
        """A batch from ``generator``'s random numbers (:meth:`crops` of ``torch.rand``)."""
        return self.crops(torch.rand(int(batch_size), CROP_DRAWS, generator=generator))

    def crops(self, rnd: torch.Tensor) -> PixelBatch:
        """The crops of the random numbers ``rnd`` (B, :data:`CROP_DRAWS`) in [0, 1)."""
        rnd = rnd.detach().float().cpu()
        if rnd.ndim != 2 or rnd.shape[1] != CROP_DRAWS:
            raise ValueError(f"crop draws of shape {tuple(rnd.shape)}, expected (B, {CROP_DRAWS})")
        n, _, h, w = self.images.shape
        b, s = rnd.shape[0], self.crop
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
        theta = torch.zeros(b, 2, 3)
        theta[:, 0, 0] = cos * flip * half * 2 / w
        theta[:, 0, 1] = -sin * half * 2 / w
        theta[:, 0, 2] = (2 * cx + 1) / w - 1
        theta[:, 1, 0] = sin * flip * half * 2 / h
        theta[:, 1, 1] = cos * half * 2 / h
        theta[:, 1, 2] = (2 * cy + 1) / h - 1
        grid = F.affine_grid(theta.to(self.device), (b, 1, s, s), align_corners=False)
        idx_d = idx.to(self.device)
        img = F.grid_sample(self.images[idx_d].float() / 255.0, grid, mode="bilinear",
                            padding_mode="reflection", align_corners=False)
        ex = F.grid_sample(self.extra[idx_d], grid, mode="bilinear", padding_mode="zeros", align_corners=False)
        if self.jitter > 0:
            j = ((rnd[:, 6:9] * 2 - 1) * self.jitter).to(self.device)
            mean = img.mean(dim=(1, 2, 3), keepdim=True)
            img = (img - mean) * (1 + j[:, 0, None, None, None]) + mean + j[:, 1, None, None, None]
            grey = img.mean(dim=1, keepdim=True)
            img = (img - grey) * (1 + j[:, 2, None, None, None]) + grey
            img = img.clamp(0, 1)
        return PixelBatch(img, ex[:, 0], ex[:, 1] > 0.999)


class _CropDraws(torch.utils.data.Dataset):
    """``crops_per_epoch`` items; item ``(index, (seed, epoch))`` (from :class:`SeededSampler`)
    is the crop's :data:`CROP_DRAWS` random numbers, from ``default_rng([seed, epoch, index])``."""

    def __init__(self, crops_per_epoch: int):
        self.n = int(crops_per_epoch)

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, item):
        index, (seed, epoch) = item if isinstance(item, tuple) else (item, (0, 0))
        return torch.from_numpy(np.random.default_rng([int(seed), int(epoch), int(index)]).random(CROP_DRAWS))


def _stack(draws):
    return torch.stack(draws).float()


class BSDS500PixelDataModule(_GraphDataModule):
    """The pixel stage's data: device-augmented crops of BSDS500 (see the module docstring).

    Parameters
    ----------
    data_root : str
        See :mod:`hiseg.data.bsds` (default ``datasets/BSDS500``).
    train_split : str
        ``"train"``, or ``"train+val"`` for a shipped model (its validation figures are
        then not a measurement).
    val_split : str
    crop_size : int
        Side of the square training crops.
    batch_size : int
        Crops per step.
    crops_per_epoch : int
        Crops in one epoch (the validation interval and checkpoint rhythm; crops are drawn
        afresh every epoch).
    scale_range : (float, float)
        Log-uniform scale range of the crops.
    n_angles : int
        Rotations ``k * 360 / n_angles``.
    jitter : float
        Colour jitter strength.
    val_batch_size, num_workers, pin_memory
        Of the validation loader (whole images, no superpixels).
    max_val_images : int
        Validate on the first ``max_val_images`` images (0: all).
    limit_images : int
        Train on the first ``limit_images`` images of the split (0: all; tests).
    """

    def __init__(self, data_root: str = DEFAULT_BSDS_ROOT, train_split: str = "train", val_split: str = "val",
                 crop_size: int = 320, batch_size: int = 32, crops_per_epoch: int = 3200,
                 scale_range: tuple = (0.5, 1.5), n_angles: int = 16, jitter: float = 0.1,
                 val_batch_size: int = 1, num_workers: int = 1, pin_memory: bool = False, max_val_images: int = 0,
                 limit_images: int = 0):
        super().__init__()
        self.save_hyperparameters()
        self._init_common(batch_size, val_batch_size, num_workers, "none", 0.0, None, pin_memory, user_settings=False)
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
        self.train_split, self.val_split, self.test_split = train_split, val_split, "test"
        self.crop_size, self.crops_per_epoch = int(crop_size), int(crops_per_epoch)
        self.scale_range, self.n_angles, self.jitter = (lo, hi), int(n_angles), float(jitter)
        self.max_val_images, self.limit_images = int(max_val_images), int(limit_images)
        self.augmenter: Optional[GPUAugmenter] = None
        self.train_collate, self.train_workers = _stack, 0  # the draws are cheap: no worker process

    def skip_superpixels(self) -> None:  # never computes any
        return None

    def setup(self, stage: Optional[str] = None) -> None:
        if stage in (None, "fit") and self.train_set is None:
            images, cons = load_edge_dataset(self.data_root, self.train_split, limit=self.limit_images or None)
            self.augmenter = GPUAugmenter(images, cons, crop=self.crop_size, n_angles=self.n_angles,
                                          scale_range=self.scale_range, jitter=self.jitter)
            self.train_set = _CropDraws(self.crops_per_epoch)
        BSDS500DataModule.setup_bsds_eval(self, stage)  # whole val / test images, as the fine-tuning's

    def on_after_batch_transfer(self, batch, dataloader_idx: int):
        """Training batches (the crops' random numbers) become :class:`PixelBatch` es on the
        batch's device; the others pass unchanged."""
        if isinstance(batch, torch.Tensor):
            if self.augmenter is None:
                self.setup("fit")
            return self.augmenter.to(batch.device).crops(batch)
        return batch
