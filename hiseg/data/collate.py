"""Collation: B graph items into one :class:`GraphBatch`, and nothing else.

:func:`collate_graph_batch` concatenates the items that :mod:`hiseg.data.graphs` made into one
:class:`GraphBatch`: one batched graph with vertex / edge offsets, and the index tensors that
let the device pool a boundary map onto the RAG edges::

    pix = boundary_maps.reshape(-1)                     # (B*H*W,)
    val = 0.5 * (pix[batch.frontier_pixels_a] + pix[batch.frontier_pixels_b])
    w = scatter_mean(val, batch.frontier_edge, E_total)  # one weight per RAG edge

:func:`with_graph_items` gives a batch the graph items rebuilt in the training step, collated
the same way. Everything graph-related stays numpy on the CPU (``graph``, ``rags``); only the
index tensors, the images and the targets are torch tensors moved by :meth:`GraphBatch.to`.
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any, Optional, Sequence

import numpy as np
import torch

from ..core.device import packed_copy
from ..core.graph import BatchedGraph, batch_graphs

__all__ = ["GraphBatch", "collate_graph_batch", "with_graph_items"]


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
    # stacking goes through numpy: cheaper copies than torch.stack on the CPU
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
    holding ``rag``, ``sp_labels``, ``edge_target`` and ``frontier``."""
    rags = [s["rag"] for s in samples]
    graph = batch_graphs([r.graph for r in rags])
    fa, fb, fe = [], [], []
    for i, s in enumerate(samples):
        pa, pb, e = s["frontier"]
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



def with_graph_items(batch: GraphBatch, items: Sequence[dict]) -> GraphBatch:
    """The batch with the graph fields of per-image items (``rag``, ``sp_labels``,
    ``edge_target``, ``frontier``: :func:`hiseg.data.graphs.graph_item`), collated and moved to
    the images' device in one copy."""
    hp, wp = batch.images.shape[-2:]
    fields = _graph_fields(items, batch.image_sizes, int(hp), int(wp))
    names = [k for k, v in fields.items() if isinstance(v, torch.Tensor)]
    moved = packed_copy([fields[k].numpy() for k in names], batch.images.device)
    return replace(batch, **{**fields, **dict(zip(names, moved))})

