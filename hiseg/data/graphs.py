"""The superpixel graphs a training batch carries, built in one place.

Two moments build them, with the same per-image function (:func:`graph_item`: the region
adjacency graph of the superpixels, its targets against the ground truths, its frontier pixel
pairs):

* **in the loader workers**, for a pipeline whose superpixels come from the image
  (``color_watershed``): :class:`SegmentationGraphDataset` wraps a raw data set
  (``SyntheticSegmentation``, ``BSDS500``, ``FolderSegmentation``, or anything whose items are
  dicts with ``image`` float (H, W, 3) and ``segmentations`` int (A, H, W)) and does there
  everything that needs no network: augmentation, superpixels, :func:`make_graph_sample`;
* **in the training step**, for a pipeline whose superpixels come from the network's
  prediction (``boundary_watershed``): :func:`rebuild_graphs` builds them from the batch's
  maps, one image per job of the host pool.

:func:`hiseg.data.collate.collate_graph_batch` then concatenates the items into a
:class:`~hiseg.data.collate.GraphBatch`; collation builds nothing.
"""
from __future__ import annotations

from typing import Callable, Optional, Sequence

import numpy as np
import torch

from ..core.graph import region_adjacency_graph
from ..segmentation.hostpool import MIN_POOL_PIXELS, thread_pool
from ..segmentation.pipeline import Pipeline
from ..segmentation.pooling import frontier_pixel_pairs
from ..segmentation.superpixels import Superpixels, make_connected
from .cache import SuperpixelCache
from .collate import GraphBatch, with_graph_items
from .targets import graph_targets, mean_boundary
from .transforms import as_numpy_generator

__all__ = ["SegmentationGraphDataset", "make_graph_sample", "graph_item", "with_superpixels", "rebuild_item",
           "rebuild_graphs", "SUPERPIXEL_MODES", "PipelineSuperpixels", "loader_superpixels"]


SUPERPIXEL_MODES = ("per_sample", "cached", "none")


class PipelineSuperpixels:
    """The superpixels of an image-based :class:`~hiseg.segmentation.Pipeline` as a loader
    function ``image (H, W, 3) -> labels (H, W)``: exactly ``pipeline.make_superpixels`` (which
    reads the image, not the boundary map, for these pipelines). Picklable (loader
    workers); its ``cache_key`` names the settings the superpixels depend on, so a disk
    cache (:class:`~hiseg.data.cache.SuperpixelCache`) is shared by pipelines that differ
    only in later steps (linkage, scales...)."""

    def __init__(self, pipeline):
        if pipeline.superpixels != "color_watershed":
            raise ValueError(f"pipeline superpixels {pipeline.superpixels!r} are built from the prediction, "
                             "not from the image: the loaders compute none (loader_superpixels)")
        self.pipeline = pipeline
        self.cache_key = f"Pipeline.make_superpixels(superpixels='color_watershed', region_size={pipeline.region_size!r})"

    def __call__(self, image: np.ndarray) -> np.ndarray:
        image = np.asarray(image)
        return self.pipeline.make_superpixels(np.broadcast_to(np.float32(0), image.shape[:2]), image)

    def __repr__(self) -> str:
        return f"PipelineSuperpixels({self.cache_key})"


def loader_superpixels(pipeline) -> Optional[PipelineSuperpixels]:
    """What the loaders compute for a model's ``pipeline``: :class:`PipelineSuperpixels` for
    an image-based one (``color_watershed``), ``None`` (no superpixels, no graph) for one
    that builds them from the network's prediction (``boundary_watershed``, ``all_minima``),
    whose training step rebuilds them."""
    return PipelineSuperpixels(pipeline) if pipeline.superpixels == "color_watershed" else None


class SegmentationGraphDataset(torch.utils.data.Dataset):
    """Raw segmentation samples turned into graph samples (in the loader worker).

    Parameters
    ----------
    raw_dataset : indexable of dicts
        Items with ``image`` float32 (H, W, 3) in [0, 1], ``segmentations`` int
        (A, H, W) and ``name``.
    transform : callable ``(sample, rng) -> sample``, optional
        Joint augmentation (see :mod:`hiseg.data.transforms`).
    superpixel_fn : callable ``image -> int64 (H, W)``, optional
        Labels ``0..R-1``, each label a connected region; default
        ``Superpixels()`` (gradient watershed, ~12 px superpixels).
    seed : int, optional
        ``None`` (default): the augmentation generator of each item is seeded from
        torch's global generator, which the DataLoader seeds per worker and per epoch
        (reproducible under ``seed_everything`` for a fixed ``num_workers``, different
        at every epoch). An int: item ``i`` always gets ``default_rng([seed, i])``
        (same augmentation every epoch, whatever the workers).
    superpixels : ``"per_sample"`` (default), ``"cached"`` or ``"none"``
        Where an item's superpixels come from: ``per_sample``, ``superpixel_fn`` of the
        augmented image; ``cached``, ``superpixel_fn`` of the whole raw image computed once
        (:class:`~hiseg.data.cache.SuperpixelCache`), augmented with the image and its
        annotations, then relabelled into connected regions ``0..R-1`` (without a
        transform: exactly the ``per_sample`` superpixels); ``none``, no superpixels, no
        graph (for a model whose pipeline builds the superpixels of every batch from its
        own prediction, see :class:`hiseg.training.module.HierarchicalSegmentationModule`).
    cache_dir : str, optional
        ``cached`` only: keep the superpixels on disk there (default: in memory).

    An item may also be asked for as ``ds[(i, key)]`` with ``key`` a tuple of ints (what
    :class:`hiseg.data.datamodule.SeededSampler` yields, ``(seed, epoch)``): item ``i``
    is then augmented with ``default_rng([*key, i])``, a function of the run's seed and
    the epoch only (not of the loader workers, not of what ran before: exact resume).

    Items
    -----
    dict with ``image`` float32 tensor (3, H, W); ``superpixels`` int64 numpy (H, W);
    ``rag`` (RegionAdjacencyGraph); ``frontier`` (pix_a, pix_b, edge) of
    :func:`frontier_pixel_pairs`; ``edge_target`` float32 tensor (E,); ``sp_labels``
    int64 tensor (A, R); ``boundary`` float32 tensor (H, W) (mean annotator boundary,
    thick); ``segmentations`` int numpy (A, H, W); ``name`` str. With
    ``superpixels="none"``: only ``image``, ``boundary``, ``segmentations``, ``name``.

    Cost per item: the superpixels dominate with per-sample superpixels; cached, a relabelling
    replaces them; none is cheaper still (no RAG, no graph targets either). Stage by stage, for a
    320x320 BSDS500 crop on one core: ``benchmarks/results/data.md``.
    """

    def __init__(self, raw_dataset, transform: Callable | None = None,
                 superpixel_fn: Callable | None = None, seed: int | None = None, *,
                 superpixels: str = "per_sample", cache_dir=None):
        if superpixels not in SUPERPIXEL_MODES:
            raise ValueError(f"superpixels must be one of {SUPERPIXEL_MODES}, got {superpixels!r}")
        if cache_dir is not None and superpixels != "cached":
            raise ValueError(f"cache_dir is for superpixels='cached', not {superpixels!r}")
        self.raw = raw_dataset
        self.transform = transform
        self.superpixel_fn = superpixel_fn if superpixel_fn is not None else Superpixels()
        self.seed = seed
        self.superpixels = superpixels
        self.cache = SuperpixelCache(self.superpixel_fn, cache_dir) if superpixels == "cached" else None

    def __len__(self) -> int:
        return len(self.raw)

    def use_superpixels(self, superpixel_fn: Callable | None, superpixels: str, cache_dir=None) -> None:
        """Switch to other superpixels (``superpixel_fn`` None: ``superpixels`` must be
        ``"none"``); a cache is rebuilt only when the function's settings change."""
        if superpixels not in SUPERPIXEL_MODES or (superpixel_fn is None) != (superpixels == "none"):
            raise ValueError(f"superpixels {superpixels!r} with superpixel_fn {superpixel_fn!r}")
        same = self.cache is not None and repr(self.superpixel_fn) == repr(superpixel_fn) and \
            getattr(self.superpixel_fn, "cache_key", None) == getattr(superpixel_fn, "cache_key", None)
        if superpixel_fn is not None:
            self.superpixel_fn = superpixel_fn
        self.superpixels = superpixels
        if superpixels != "cached":
            self.cache = None
        elif not same:
            self.cache = SuperpixelCache(self.superpixel_fn, cache_dir)

    def _rng(self, index: int) -> np.random.Generator:
        if self.seed is None:
            return as_numpy_generator(None)
        return np.random.default_rng([int(self.seed), int(index)])

    def __getitem__(self, index) -> dict:
        if isinstance(index, tuple):
            index, key = index
            rng = np.random.default_rng([*(int(k) for k in key), int(index)])
        else:
            rng = self._rng(index) if self.transform is not None else None
        raw = self.raw[index]
        if self.superpixels == "cached":
            raw = dict(raw, superpixels=self.cache(int(index), raw["image"], raw.get("name", "")))
        sample = self.transform(raw, rng) if self.transform is not None else raw
        if self.superpixels == "cached" and self.transform is not None:
            # a crop or a downscale may cut a region in pieces: one label per piece, 0..R-1
            sample = dict(sample, superpixels=make_connected(sample["superpixels"]))
        return make_graph_sample(sample, self.superpixel_fn if self.superpixels == "per_sample" else None)


def make_graph_sample(sample: dict, superpixel_fn: Callable | None) -> dict:
    """Superpixels, RAG, frontier pairs and targets of one (augmented) raw sample.

    The superpixels are ``sample["superpixels"]`` when present (labels ``0..R-1``, each
    one 4-connected region), else ``superpixel_fn(image)``; with neither (``superpixel_fn``
    None), the item has no graph (only the image, boundary map and ground truths).
    Returns the item dict described in :class:`SegmentationGraphDataset`.
    Raises ValueError when the superpixel function returns a bad label image.
    """
    image = np.ascontiguousarray(sample["image"], dtype=np.float32)
    seg = np.asarray(sample["segmentations"])
    if seg.ndim == 2:
        seg = seg[None]
    item = {
        "image": torch.from_numpy(np.ascontiguousarray(image.transpose(2, 0, 1))),
        "boundary": torch.from_numpy(mean_boundary(seg)),
        "segmentations": seg,
        "name": sample.get("name", ""),
    }
    if "superpixels" in sample:
        sp = np.asarray(sample["superpixels"])
    elif superpixel_fn is not None:
        sp = np.asarray(superpixel_fn(image))
    else:
        return item
    if sp.shape != image.shape[:2]:
        raise ValueError(f"superpixels of shape {sp.shape} for an image of shape {image.shape[:2]}")
    graph = graph_item(sp, seg)
    item.update(graph, superpixels=graph["rag"].labels, sp_labels=torch.from_numpy(graph["sp_labels"]),
                edge_target=torch.from_numpy(graph["edge_target"]))
    return item



def graph_item(sp: np.ndarray, seg) -> dict:
    """One image's graph: the RAG of superpixels ``sp``, its targets against the ground truths
    ``seg`` (A, H, W) (:func:`~hiseg.data.targets.graph_targets`: ``sp_labels``, ``edge_target``,
    numpy) and its ``frontier`` pixel pairs (:func:`~hiseg.segmentation.pooling.frontier_pixel_pairs`)."""
    rag = region_adjacency_graph(sp)
    return {"rag": rag, **graph_targets(rag, seg), "frontier": frontier_pixel_pairs(rag)}


def with_superpixels(batch: GraphBatch, superpixels: Sequence[np.ndarray], map_fn=map) -> GraphBatch:
    """The batch with new superpixels: RAGs, frontiers and targets rebuilt from its ground
    truths; images, boundary maps and ground truths kept as they are (on their device).

    ``map_fn`` maps the per-image work (for example a thread pool's ``map``).
    Cost: the RAG and targets of every image on the CPU (O(A H W) each), and the graph
    tensors moved to the images' device in one copy (:func:`hiseg.core.device.packed_copy`);
    no image is copied.
    """
    if len(superpixels) != batch.batch_size:
        raise ValueError(f"{len(superpixels)} superpixel maps for a batch of {batch.batch_size}")
    return with_graph_items(batch, list(map_fn(graph_item, superpixels, batch.segmentations)))


def rebuild_item(settings: tuple, boundary: np.ndarray, segmentations) -> dict:
    """One image's graph item rebuilt from its boundary map (a :class:`~hiseg.segmentation.hostpool.HostPool`
    job): the superpixels of ``Pipeline(superpixels, region_size, sigma)`` (``settings``, in that
    order), the RAG, the targets against ``segmentations`` and the frontier pixel pairs, as numpy
    arrays (what :func:`rebuild_graphs` assembles)."""
    sp = Pipeline(superpixels=settings[0], region_size=settings[1], sigma=settings[2]).make_superpixels(boundary)
    return graph_item(sp, segmentations)


def rebuild_graphs(batch: GraphBatch, maps: torch.Tensor, pipeline, pool=None) -> GraphBatch:
    """The batch with ``pipeline``'s superpixels of its (B, H, W) maps (detached, copied to the
    host once), its RAGs, frontiers and targets rebuilt from the ground truths: one job per image
    (:func:`rebuild_item`) in ``pool`` (a :class:`~hiseg.segmentation.hostpool.HostPool`), or, with
    ``pool`` None or fewer than :data:`~hiseg.segmentation.hostpool.MIN_POOL_PIXELS` pixels, in
    process on hiseg's thread pool (the watershed and the RAG release the GIL). The same batch
    either way. FloatingPointError for non-finite maps."""
    crops = pipeline.host_maps(maps, batch.image_sizes)
    if pool is None or pool.disabled or sum(c.size for c in crops) < MIN_POOL_PIXELS:
        threads = thread_pool().map
        return with_superpixels(batch, list(threads(pipeline.make_superpixels, crops)), map_fn=threads)
    settings = (pipeline.superpixels, pipeline.region_size, pipeline.sigma)
    return with_graph_items(batch, pool.map(rebuild_item, [settings] * len(crops), crops, batch.segmentations))
