"""From raw samples to graph batches: the per-image work of loader workers, and collation.

:class:`SegmentationGraphDataset` wraps a raw data set (``SyntheticSegmentation``,
``BSDS500``, ``FolderSegmentation``, or anything whose items are dicts with ``image``
float (H, W, 3) and ``segmentations`` int (A, H, W)) and does, inside the loader worker,
everything that needs no network: augmentation, superpixels, region adjacency graph,
frontier pixel pairs and targets. :func:`collate_graph_batch` concatenates B such items
into one :class:`GraphBatch`: one batched graph with vertex / edge offsets, and the
index tensors that let the device pool a boundary map onto the RAG edges::

    pix = boundary_maps.reshape(-1)                     # (B*H*W,)
    val = 0.5 * (pix[batch.frontier_pixels_a] + pix[batch.frontier_pixels_b])
    w = scatter_mean(val, batch.frontier_edge, E_total)  # one weight per RAG edge

Everything graph-related stays numpy on the CPU (``graph``, ``rags``); only the index
tensors, the images and the targets are torch tensors moved by :meth:`GraphBatch.to`.
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any, Callable, Optional, Sequence

import numpy as np
import torch

from ..core.graph import BatchedGraph, batch_graphs, region_adjacency_graph
from ..core.device import packed_copy
from ..segmentation.pooling import frontier_pixel_pairs
from ..segmentation.superpixels import Superpixels, make_connected
from .cache import SuperpixelCache
from .targets import graph_targets, mean_boundary
from .transforms import as_numpy_generator

__all__ = ["SegmentationGraphDataset", "GraphBatch", "collate_graph_batch", "make_graph_sample", "with_superpixels",
           "SUPERPIXEL_MODES", "PipelineSuperpixels", "loader_superpixels", "rebuild_graphs", "rebuild_item"]


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

    Cost per item (CPU, one core; ``benchmarks/results/data.md``) for a 320x320 BSDS500
    crop: ~36 ms with per-sample superpixels (load 6, augmentation 3, superpixels 21,
    RAG + frontier 2, targets 3), ~16 ms cached (the superpixels replaced by a 1 ms
    relabelling), ~10 ms with none (no RAG, no graph targets either).
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
    item.update(_graph_item(sp, seg))
    item["superpixels"] = item["rag"].labels
    item["frontier"] = frontier_pixel_pairs(item["rag"])
    return item


@dataclass
class GraphBatch:
    """B images and their superpixel graphs as one batch.

    A batch of items without superpixels (``superpixels="none"``) has ``graph``,
    the frontier tensors, ``edge_target`` and ``sp_labels`` None and no ``rags``
    (:func:`with_superpixels` gives it a graph).

    Attributes
    ----------
    images : float32 tensor (B, 3, H, W)
        Images of different sizes are zero-padded at the bottom / right to the largest
        (H, W) (``image_sizes`` keeps the true sizes); validation with full images
        normally uses batch size 1, where no padding happens.
    graph : BatchedGraph
        The B RAGs, vertex ids shifted by ``graph.vertex_ptr``, edge ids by
        ``graph.edge_ptr`` (numpy, CPU).
    frontier_pixels_a, frontier_pixels_b : int64 tensors (P,)
        For every frontier pixel-edge of every RAG, its two pixels as flat indices
        into the (B, H, W) batch: ``b * H * W + row * W + col`` (padded H, W).
        ``a`` is the left / upper pixel.
    frontier_edge : int64 tensor (P,)
        Global RAG edge id of each pixel-edge (non-decreasing).
    edge_target : float32 tensor (E_total,)
        Fraction of annotators separating the two superpixels of each edge.
    sp_labels : int64 tensor (A_max, V_total)
        Majority ground-truth region of each superpixel for each annotator slot,
        made **unique across images** (image ``b``'s ids are shifted by the number of
        ids used by images ``0..b-1``), so equal labels imply the same image; -1 where
        an image has fewer than ``A_max`` annotators.
    boundary : float32 tensor (B, H, W)
        Mean annotator boundary map (0 in padding).
    segmentations : list of int numpy arrays (A_b, H_b, W_b)
        Unpadded ground truths, for validation metrics.
    names : list of str
    rags : list of RegionAdjacencyGraph
        Per-image RAGs (local ids); ``rags[b].labels`` are the superpixels.
    image_sizes : list of (H_b, W_b)
    num_annotators : list of int
    vertex_offsets : int64 tensor (B + 1,)
        ``graph.vertex_ptr`` as a tensor that travels with the batch (device-side
        sampling of triplets).
    frontier_count : float32 tensor (E_total,)
        Number of frontier pixel-edges of every RAG edge (its frontier length): the
        divisor of the frontier mean, known from the RAGs (no count on the device).
    num_labels : int
        An upper bound of ``sp_labels`` + 1 (the number of region ids used).
    host_images : float32 tensor (B, 3, H, W) or None
        The images on the host once :meth:`to` has moved ``images`` to another device: the
        collated CPU tensor itself (no copy), for the host-side features of a merging head
        (no device-to-host copy, hence no synchronisation, in the training step). None while
        ``images`` is on the host; :attr:`images_on_host` gives whichever holds them.
    """

    images: torch.Tensor
    graph: Optional[BatchedGraph]
    frontier_pixels_a: Optional[torch.Tensor]
    frontier_pixels_b: Optional[torch.Tensor]
    frontier_edge: Optional[torch.Tensor]
    edge_target: Optional[torch.Tensor]
    sp_labels: Optional[torch.Tensor]
    boundary: torch.Tensor
    segmentations: list = field(default_factory=list)
    names: list = field(default_factory=list)
    rags: list = field(default_factory=list)
    image_sizes: list = field(default_factory=list)
    num_annotators: list = field(default_factory=list)
    vertex_offsets: Optional[torch.Tensor] = None
    frontier_count: Optional[torch.Tensor] = None
    num_labels: int = 0
    host_images: Optional[torch.Tensor] = None

    _TENSORS = ("images", "frontier_pixels_a", "frontier_pixels_b", "frontier_edge",
                "edge_target", "sp_labels", "boundary", "vertex_offsets", "frontier_count")

    @property
    def batch_size(self) -> int:
        return int(self.images.shape[0])

    def __len__(self) -> int:
        return self.batch_size

    @property
    def has_graph(self) -> bool:
        """Whether the batch has superpixels (False for items made with ``superpixels="none"``)."""
        return self.graph is not None

    @property
    def superpixels(self) -> list[np.ndarray]:
        """Per-image superpixel label images (numpy, unpadded)."""
        return [r.labels for r in self.rags]

    def to(self, device: Any = None, non_blocking: bool = False, **kwargs) -> "GraphBatch":
        """A copy with the tensors moved to ``device`` (graph, rags, ground truths stay on the CPU).

        Accepts the arguments of ``torch.Tensor.to`` that make sense for a mixed batch
        (``device``, ``non_blocking``); dtypes are never changed.
        """
        moved = {k: getattr(self, k).to(device, non_blocking=non_blocking)
                 for k in self._TENSORS if getattr(self, k) is not None}
        host = self.images_on_host
        return replace(self, **moved, host_images=None if moved["images"].device.type == "cpu" else host)

    @property
    def images_on_host(self) -> torch.Tensor:
        """The (B, 3, H, W) images on the host: ``images`` itself, or the host tensor it was
        moved from (:attr:`host_images`)."""
        return self.images if self.host_images is None else self.host_images

    def pin_memory(self) -> "GraphBatch":
        """A copy with pinned tensors (called by ``DataLoader(pin_memory=True)``)."""
        return replace(self, **{k: getattr(self, k).pin_memory() for k in self._TENSORS
                                if getattr(self, k) is not None})


def _np(x) -> np.ndarray:
    return x.numpy() if isinstance(x, torch.Tensor) else np.asarray(x)


def collate_graph_batch(samples: Sequence[dict]) -> GraphBatch:
    """Collate items of :class:`SegmentationGraphDataset` into a :class:`GraphBatch`.

    Parameters
    ----------
    samples : non-empty sequence of item dicts

    Returns
    -------
    GraphBatch (see its attributes for offsets and padding).

    Cost: O(B H W + P + E_total) memory copies; no graph algorithm runs here.

    Raises
    ------
    ValueError
        Empty batch; items with and without superpixels mixed.
    """
    if len(samples) == 0:
        raise ValueError("collate_graph_batch needs at least one sample")
    with_graph = ["rag" in s for s in samples]
    if any(with_graph) and not all(with_graph):
        raise ValueError("collate_graph_batch: some items have superpixels and others not "
                         "(datasets with different superpixels settings in one batch)")
    b = len(samples)
    sizes = [tuple(s["image"].shape[-2:]) for s in samples]
    hp = max(h for h, _ in sizes)
    wp = max(w for _, w in sizes)
    # stacking goes through numpy: measurably faster than torch.stack for these copies on CPU
    if all(sz == (hp, wp) for sz in sizes):
        images = np.stack([_np(s["image"]) for s in samples])
        boundary = np.stack([_np(s["boundary"]) for s in samples])
    else:
        images = np.zeros((b, 3, hp, wp), dtype=np.float32)
        boundary = np.zeros((b, hp, wp), dtype=np.float32)
        for i, s in enumerate(samples):
            h, w = sizes[i]
            images[i, :, :h, :w] = _np(s["image"])
            boundary[i, :h, :w] = _np(s["boundary"])
    return GraphBatch(
        images=torch.from_numpy(images),
        boundary=torch.from_numpy(boundary),
        segmentations=[s["segmentations"] for s in samples],
        names=[s["name"] for s in samples],
        image_sizes=[tuple(int(x) for x in sz) for sz in sizes],
        **(_graph_fields(samples, sizes, hp, wp) if all(with_graph) else _NO_GRAPH),
        num_annotators=[int(np.shape(s["segmentations"])[0]) for s in samples],
    )


_NO_GRAPH = dict(graph=None, frontier_pixels_a=None, frontier_pixels_b=None, frontier_edge=None,
                 edge_target=None, sp_labels=None, vertex_offsets=None, frontier_count=None, num_labels=0)


def _graph_fields(samples: Sequence[dict], sizes, hp: int, wp: int) -> dict:
    """The graph part of a batch (RAGs, frontier pixels, targets) from per-image items
    holding ``rag``, ``sp_labels``, ``edge_target`` and optionally ``frontier``."""
    rags = [s["rag"] for s in samples]
    graph = batch_graphs([r.graph for r in rags])
    fa, fb, fe = [], [], []
    for i, s in enumerate(samples):
        pa, pb, e = s["frontier"] if "frontier" in s else frontier_pixel_pairs(s["rag"])
        h, w = sizes[i]
        if w != wp:
            pa = (pa // w) * wp + pa % w
            pb = (pb // w) * wp + pb % w
        off = i * hp * wp
        fa.append(pa + off)
        fb.append(pb + off)
        fe.append(e + graph.edge_ptr[i])
    n_ann = [int(s["sp_labels"].shape[0]) for s in samples]
    a_max = max(n_ann)
    sp_labels = np.full((a_max, graph.num_vertices), -1, dtype=np.int64)
    shift = 0
    for i, s in enumerate(samples):
        lab = _np(s["sp_labels"])
        v0, v1 = int(graph.vertex_ptr[i]), int(graph.vertex_ptr[i + 1])
        if lab.shape[0]:
            sp_labels[: lab.shape[0], v0:v1] = np.where(lab >= 0, lab + shift, lab)
            shift += int(lab.max()) + 1
    return dict(
        graph=graph,
        frontier_pixels_a=torch.from_numpy(np.concatenate(fa).astype(np.int64)),
        frontier_pixels_b=torch.from_numpy(np.concatenate(fb).astype(np.int64)),
        frontier_edge=torch.from_numpy(np.concatenate(fe).astype(np.int64)),
        edge_target=torch.from_numpy(np.concatenate([_np(s["edge_target"]) for s in samples])),
        sp_labels=torch.from_numpy(sp_labels),
        rags=rags,
        vertex_offsets=torch.from_numpy(np.asarray(graph.vertex_ptr, dtype=np.int64)),
        frontier_count=torch.from_numpy(np.concatenate([r.frontier_lengths() for r in rags]).astype(np.float32)),
        num_labels=int(shift),
    )


def _graph_item(sp: np.ndarray, seg) -> dict:
    """RAG and :func:`~hiseg.data.targets.graph_targets` of superpixels ``sp`` and ground
    truths ``seg`` (A, H, W)."""
    rag = region_adjacency_graph(sp)
    return {"rag": rag, **{k: torch.from_numpy(v) for k, v in graph_targets(rag, seg).items()}}


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
    return _with_items(batch, list(map_fn(_graph_item, superpixels, batch.segmentations)))


def _with_items(batch: GraphBatch, items: Sequence[dict]) -> GraphBatch:
    """The batch with the graph fields of per-image items (``rag``, ``sp_labels``,
    ``edge_target``, optionally ``frontier``), moved to the images' device in one copy."""
    hp, wp = batch.images.shape[-2:]
    fields = _graph_fields(items, batch.image_sizes, int(hp), int(wp))
    names = [k for k, v in fields.items() if isinstance(v, torch.Tensor)]
    moved = packed_copy([fields[k].numpy() for k in names], batch.images.device)
    return replace(batch, **{**fields, **dict(zip(names, moved))})


def rebuild_item(settings: tuple, boundary: np.ndarray, segmentations) -> dict:
    """One image's graph item rebuilt from its boundary map (a :class:`~hiseg.segmentation.hostpool.HostPool`
    job): the superpixels of ``Pipeline(superpixels, region_size, sigma)`` (``settings``, in that
    order), the RAG, the targets against ``segmentations`` and the frontier pixel pairs, as numpy
    arrays (what :func:`rebuild_graphs` assembles)."""
    from ..segmentation.pipeline import Pipeline

    sp = Pipeline(superpixels=settings[0], region_size=settings[1], sigma=settings[2]).make_superpixels(boundary)
    item = _graph_item(sp, segmentations)
    return {"rag": item["rag"], "sp_labels": item["sp_labels"].numpy(), "edge_target": item["edge_target"].numpy(),
            "frontier": frontier_pixel_pairs(item["rag"])}


def rebuild_graphs(batch: GraphBatch, maps: torch.Tensor, pipeline, pool=None) -> GraphBatch:
    """The batch with ``pipeline``'s superpixels of its (B, H, W) maps (detached, copied to the
    host once), its RAGs, frontiers and targets rebuilt from the ground truths: one job per image
    (:func:`rebuild_item`) in ``pool`` (a :class:`~hiseg.segmentation.hostpool.HostPool`), or, with
    ``pool`` None or fewer than :data:`~hiseg.segmentation.hostpool.MIN_POOL_PIXELS` pixels, in
    process on hiseg's thread pool (the watershed and the RAG release the GIL). The same batch
    either way. FloatingPointError for non-finite maps."""
    from ..segmentation.hostpool import MIN_POOL_PIXELS, thread_pool

    crops = pipeline.host_maps(maps, batch.image_sizes)
    if pool is None or pool.disabled or sum(c.size for c in crops) < MIN_POOL_PIXELS:
        threads = thread_pool().map
        return with_superpixels(batch, list(threads(pipeline.make_superpixels, crops)), map_fn=threads)
    settings = (pipeline.superpixels, pipeline.region_size, pipeline.sigma)
    return _with_items(batch, pool.map(rebuild_item, [settings] * len(crops), crops, batch.segmentations))
