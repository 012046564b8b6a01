"""Data layer of the segmentation framework: data sets, augmentation, targets, batches.

Raw data sets (items: ``image`` float32 (H, W, 3) in [0, 1], ``segmentations`` int
(A, H, W), ``name``):

- :class:`SyntheticSegmentation` — seeded synthetic images drawn from a known hierarchy
  of nested partitions (the default, no files needed);
- :class:`BSDS500` — the Berkeley Segmentation Data Set 500 with all annotators;
- :class:`FolderSegmentation` — a user's ``images/`` + ``labels/`` folder.

Per-image processing (in loader workers): :mod:`~hiseg.data.transforms` (joint flips,
rescale, crops), superpixels (:mod:`hiseg.segmentation.superpixels`; computed once per
image and augmented with it by :mod:`~hiseg.data.cache`, or on every sample, or not at
all when the model builds them from its prediction), :mod:`~hiseg.data.targets`
(majority labels, edge targets, boundary maps), all tied together by
:class:`SegmentationGraphDataset`; :func:`collate_graph_batch` makes a
:class:`GraphBatch`. LightningDataModules: :class:`SyntheticDataModule`,
:class:`BSDS500DataModule`, :class:`FolderDataModule` (imported lazily, as they pull in
Lightning).
"""
from .bsds import BSDS500, find_bsds_root
from .cache import SuperpixelCache
from .collate import GraphBatch, collate_graph_batch
from .folder import FolderSegmentation, read_labels
from .graphs import SegmentationGraphDataset, make_graph_sample
from .synthetic import SyntheticSegmentation, make_synthetic_sample
from .targets import boundary_maps, compute_targets, edge_targets, mean_boundary, superpixel_labels
from .transforms import (CenterCrop, Compose, RandomCrop, RandomFlip, RandomRescale, crop_sample, flip_sample,
                         resize_sample)

_LAZY = {"SyntheticDataModule", "BSDS500DataModule", "FolderDataModule"}

__all__ = [
    "BSDS500", "find_bsds_root", "SuperpixelCache",
    "GraphBatch", "SegmentationGraphDataset", "collate_graph_batch", "make_graph_sample",
    "FolderSegmentation", "read_labels",
    "SyntheticSegmentation", "make_synthetic_sample",
    "boundary_maps", "compute_targets", "edge_targets", "mean_boundary", "superpixel_labels",
    "CenterCrop", "Compose", "RandomCrop", "RandomFlip", "RandomRescale", "crop_sample", "flip_sample",
    "resize_sample",
    *sorted(_LAZY),
]


def __getattr__(name):
    if name in _LAZY:
        from . import datamodule

        return getattr(datamodule, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
