"""The merging head's edge features in torch (:class:`TorchEdgeFeatures`): differentiable with
respect to the boundary map, on the map's device (CPU or CUDA), batched over the RAGs of a
batch. Apart from the head (:mod:`hiseg.segmentation.merging`, the module that reads them)
because they are their own machinery: frontier pixel pairs, order statistics, Gaussian
smoothing, interior means; the features' definitions are :mod:`hiseg.segmentation.features`'s.

This is the features' one torch implementation; those of the RAG and the image alone (length,
sizes, colour, texture) are computed once per RAG on the host. Inference (:meth:`hiseg.segmentation.Pipeline.graph_weights`,
:func:`edge_features` for one RAG as a numpy array) and training (the Lightning module, the
head alone with the network frozen, or both jointly) call it. The smoothed statistics
(``*_s2``, ``*_s4``) smooth in float64 with OpenCV's kernel and border (``cv2.GaussianBlur``,
which blurs float32 maps in float32, differs by < 3e-7); the shipped heads' weights moved by
at most 1.2e-8 when their numpy twin (cv2 in float32) was removed, and their benchmark
figures did not change (``tests/test_shipped_figures.py``). On one 481x321 map with 1857
superpixels (one CPU thread, loaded machine) the shipped head's 14 features cost 5 ms once
per RAG (indices and the constant features) then 13 ms per map, 32 ms with the backward pass.
"""
from __future__ import annotations

from typing import Optional, Sequence

import numpy as np
import torch

from ..core.graph import RegionAdjacencyGraph, batch_graphs
from ..core.ultrametric import packed_copy
from .features import FEATURES, MergeHeadError, _check_names, _Ctx, _gaussian_taps, _reflect101
from .pooling import batch_frontier_pixels

__all__ = ["TorchEdgeFeatures", "edge_features", "edge_features_torch"]


# --------------------------------------------------------------------------- features
def edge_features(rag: RegionAdjacencyGraph, boundary, image=None, names: Sequence[str] = ("mean",)) -> np.ndarray:
    """(E, len(names)) float64 features of every RAG edge (see :data:`FEATURES`), without
    gradient: :class:`TorchEdgeFeatures` of one RAG on the CPU, as a numpy array.

    ``boundary``: the (H, W) map the superpixels were built from; ``image``: the (H, W, 3)
    float RGB image in [0, 1] (needed by the colour and texture features). Cost
    O(H W k + P log P) for P frontier pixel pairs and smoothing kernels of k taps; a few ms
    for 481x321. MergeHeadError for an unknown name or a map of another size.
    """
    _check_names(names)
    b = torch.as_tensor(np.asarray(boundary))
    if tuple(b.shape) != rag.labels.shape:
        raise MergeHeadError(f"boundary map {tuple(b.shape)} and superpixels {rag.labels.shape} differ in size")
    with torch.no_grad():
        return TorchEdgeFeatures(rag, names, image, shape=rag.labels.shape)(b).numpy()


# --------------------------------------------------------------------------- features in torch
class TorchEdgeFeatures:
    """The merging head's edge features, in torch, differentiable with respect to the boundary map: the
    building block of fine-tuning the network and a :class:`MergeHead` jointly through the
    ultrametric layer (module docstring).

    Everything that depends only on the RAGs and the images is computed once, on the host,
    when the object is made (frontier pixel pairs, the quantiles' ranks, the Gaussian
    kernels and their border indices, region ids of the pixels, and the constant features:
    lengths, sizes, colour, texture); a call then maps
    boundary maps to features with torch operations only, on the maps' device, with no
    host synchronisation.

    Parameters
    ----------
    rags : one :class:`~hiseg.core.graph.RegionAdjacencyGraph` or a sequence of B (a batch).
    names : names from :data:`FEATURES` (the columns, in this order).
    images : for one RAG its (H, W, 3) float RGB image in [0, 1]; for a sequence, one per
        RAG (or None). Needed by the colour and texture features only.
    shape : (H, W) of the maps the object will be applied to (default: the largest RAG's);
        RAG ``b`` covers the top-left ``rags[b].labels.shape`` of map ``b`` (the layout of
        :func:`hiseg.data.collate.collate_graph_batch`: padding at the bottom / right is
        never read, and the smoothing reflects at each image's own border, as at inference).
    device : where the index tensors live (``to`` moves them).
    dtype : of the features (float64, the head's, by default); the map is cast to it first.

    Calling it on a map (H, W) (one RAG) or (B, H, W) returns (E_total, len(names)) features,
    rows in the order of the RAGs' edges, RAG after RAG (``graph``: their
    :class:`~hiseg.core.graph.BatchedGraph`, what a ``context`` head reads), differentiable almost everywhere (quantiles and max: the gradient goes to the
    order statistic; mean, smoothing, interior means: linear). Cost per call O(B H W k + P log P)
    for kernels of k taps and P frontier pixel pairs.
    """

    def __init__(self, rags, names: Sequence[str] = ("mean",), images=None, shape=None, device=None,
                 dtype: torch.dtype = torch.float64):
        if isinstance(rags, RegionAdjacencyGraph):
            rags, images = [rags], [images]
        rags = list(rags)
        if not rags:
            raise MergeHeadError("TorchEdgeFeatures needs at least one RAG")
        images = [None] * len(rags) if images is None else list(images)
        if len(images) != len(rags):
            raise MergeHeadError(f"TorchEdgeFeatures: {len(images)} images for {len(rags)} RAGs")
        self.names = list(names)
        _check_names(self.names)
        sizes = [r.labels.shape for r in rags]
        h, w = shape if shape is not None else (max(s[0] for s in sizes), max(s[1] for s in sizes))
        self.shape, self.batch_size, self.dtype, self.device = (int(h), int(w)), len(rags), dtype, device
        if any(s[0] > h or s[1] > w for s in sizes):
            raise MergeHeadError(f"TorchEdgeFeatures: superpixels {sizes} do not fit maps of {self.shape}")
        self.graph = batch_graphs(rags)  # each RAG's graph as built (valid by construction: not checked again)
        self.num_edges = int(self.graph.num_edges)
        specs = {n: getattr(FEATURES[n], "torch_spec", None) for n in self.names}  # None: a constant
        t: dict = {}  # the index tensors (host numpy here, moved by ``to``)
        # frontier pixel pairs, as flat ids into the (B, H, W) maps, global edge ids
        t["pix_a"], t["pix_b"], t["edge"] = batch_frontier_pixels(rags, (h, w))
        lengths = np.concatenate([r.frontier_lengths() for r in rags]).astype(np.int64)
        start = np.concatenate([[0], np.cumsum(lengths)[:-1]]).astype(np.int64)
        t["lengths"] = lengths.astype(np.float64)
        self._columns: list = []  # per name: ("const", i) / ("stat", kind, sigma, rank key) / ("interior", which)
        consts = []
        for n in self.names:
            spec = specs[n]
            if spec is None:
                consts.append(n)
                self._columns.append(("const", len(consts) - 1))
            elif spec[0] == "stat":
                _, kind, sigma, q = spec
                key = None
                if kind == "max":
                    key = "rank_max"
                    t[key] = start + lengths - 1
                elif kind == "q":
                    key = f"rank_q{q!r}"
                    t[key] = start + np.floor(q * (lengths - 1) + 0.5).astype(np.int64)  # as _stat: nearest rank
                self._columns.append(("stat", kind, float(sigma), key))
            else:
                self._columns.append(spec)
        # Gaussian smoothing: taps and, per image, the reflected row / column indices
        for sigma in sorted({c[2] for c in self._columns if c[0] == "stat" and c[2] > 0}):
            g = _gaussian_taps(sigma)
            r = len(g) // 2
            t[f"taps{sigma!r}"] = g
            t[f"rows{sigma!r}"] = np.stack([_reflect101(np.arange(-r, h + r), s[0]) for s in sizes]).astype(np.int64)
            t[f"cols{sigma!r}"] = np.stack([_reflect101(np.arange(-r, w + r), s[1]) for s in sizes]).astype(np.int64)
        if any(c[0] == "interior" for c in self._columns):  # region of every pixel; padding: a spare region
            nv = int(self.graph.num_vertices)
            reg = np.full((len(rags), h, w), nv, np.int64)
            for b, r in enumerate(rags):
                reg[b, : sizes[b][0], : sizes[b][1]] = r.labels + self.graph.vertex_ptr[b]
            t["region"] = reg.ravel()
            cnt = np.bincount(t["region"], minlength=nv + 1)[:nv]
            t["region_size"] = np.maximum(cnt, 1).astype(np.float64)
            t["src"], t["dst"] = self.graph.sources.astype(np.int64), self.graph.targets.astype(np.int64)
        if consts:  # the features of the RAG and the image alone, once, on the host
            cols = []
            for r, img in zip(rags, images):
                c = _Ctx(r, img)
                cols.append(np.stack([FEATURES[n](c) for n in consts], 1).astype(np.float64)
                            if r.graph.num_edges else np.zeros((0, len(consts))))
            t["const"] = np.concatenate(cols)
        self._host = t
        self.to(device)

    def to(self, device=None, dtype: Optional[torch.dtype] = None) -> "TorchEdgeFeatures":
        """Move the index tensors to ``device`` (and the features to ``dtype``); returns self."""
        self.dtype = dtype or self.dtype
        device = torch.device("cpu") if device is None else torch.device(device)
        # the float arrays in the features' dtype (cast on the host where numpy has it), all moved in one copy
        cast = {torch.float32: np.float32, torch.float64: np.float64}.get(self.dtype, np.float32)
        arrays = [v.astype(cast, copy=False) if v.dtype == np.float64 else v for v in self._host.values()]
        moved = packed_copy(arrays, device)
        self._t = {k: x.to(self.dtype) if x.is_floating_point() else x for k, x in zip(self._host, moved)}
        self.device = self._t["edge"].device  # "cuda" resolved to "cuda:0"
        return self

    def _smooth(self, x: torch.Tensor, sigma: float) -> torch.Tensor:
        """(B, H, W) maps smoothed as ``cv2.GaussianBlur(map, (0, 0), sigma)`` does each one
        (reflect-101 at the image's own border): a gather of the reflected rows, the taps
        (host numbers) summed over shifted slices, then the same for the columns (in float64
        on a CPU this is several times faster than ``conv2d`` for 33 taps)."""
        taps, rows, cols = self._host[f"taps{sigma!r}"], self._t[f"rows{sigma!r}"], self._t[f"cols{sigma!r}"]
        b, h, w = x.shape

        def conv(xp, dim, n):
            y = xp.narrow(dim, 0, n) * float(taps[0])
            for i in range(1, len(taps)):
                y = torch.add(y, xp.narrow(dim, i, n), alpha=float(taps[i]))
            return y
        x = conv(x.gather(1, rows[:, :, None].expand(b, rows.shape[1], w)), 1, h)
        return conv(x.gather(2, cols[:, None, :].expand(b, h, cols.shape[1])), 2, w)

    def __call__(self, boundary: torch.Tensor) -> torch.Tensor:
        x = torch.as_tensor(boundary)
        if x.ndim == 2:
            x = x[None]
        if tuple(x.shape) != (self.batch_size, *self.shape):
            raise MergeHeadError(f"TorchEdgeFeatures: maps of shape {tuple(boundary.shape)}, expected "
                                 f"{(self.batch_size, *self.shape)} (or {self.shape} for one RAG)")
        if x.device != self.device:
            raise MergeHeadError(f"TorchEdgeFeatures: maps on {x.device}, index tensors on {self.device} "
                                 f"(use .to(device))")
        x = x.to(self.dtype)
        t, cache = self._t, {}

        def values(sigma):  # per frontier pixel pair, the mean of the (smoothed) map at its two pixels
            if ("v", sigma) not in cache:
                flat = (self._smooth(x, sigma) if sigma > 0 else x).reshape(-1)
                cache["v", sigma] = 0.5 * (flat[t["pix_a"]] + flat[t["pix_b"]])
            return cache["v", sigma]

        def sorted_values(sigma):  # sorted within each edge's run: lexsort on (edge, value), two stable sorts
            if ("s", sigma) not in cache:
                v = values(sigma)
                with torch.no_grad():
                    order = torch.sort(v.detach(), stable=True).indices
                    order = order[torch.sort(t["edge"][order], stable=True).indices]
                cache["s", sigma] = v[order]
            return cache["s", sigma]

        def ends(which):
            if "interior" not in cache:
                flat = x.reshape(-1)
                nv = t["region_size"].numel()
                s = flat.new_zeros(nv + 1).index_add_(0, t["region"], flat)[:nv] / t["region_size"]
                cache["interior"] = (s[t["src"]], s[t["dst"]])
            a, b = cache["interior"]
            return torch.minimum(a, b) if which == "min" else torch.maximum(a, b)

        out = []
        for c in self._columns:
            if c[0] == "const":
                out.append(t["const"][:, c[1]])
            elif c[0] == "interior":
                out.append(ends(c[1]))
            elif c[1] == "mean":
                v = values(c[2])
                out.append(v.new_zeros(self.num_edges).index_add_(0, t["edge"], v) / t["lengths"])
            else:
                out.append(sorted_values(c[2])[t[c[3]]])
        return torch.stack(out, 1)


def edge_features_torch(rag: RegionAdjacencyGraph, boundary: torch.Tensor, image=None,
                        names: Sequence[str] = ("mean",)) -> torch.Tensor:
    """(E, len(names)) features of one RAG's edges from an (H, W) map tensor, differentiable
    with respect to it, on its device (float64). For many
    maps of the same RAGs make one :class:`TorchEdgeFeatures` and call it."""
    boundary = torch.as_tensor(boundary)
    return TorchEdgeFeatures(rag, names, image, shape=tuple(boundary.shape[-2:]), device=boundary.device)(boundary)
