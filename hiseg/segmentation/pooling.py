"""Pooling a boundary map onto the edges of region adjacency graphs: the RAG edge weights.

Two poolings, one module, because both read the same frontier pixel pairs of a RAG
(:func:`frontier_pixel_pairs`: the two pixels of every pixel-grid edge on a frontier):

* the mean boundary along each frontier: the edge weight of a pipeline without a merge head
  (the ``mean`` feature of :func:`edge_features`; batched and differentiable on the map's
  device for training, :func:`frontier_mean`);
* the merge head's edge features (:data:`FEATURES`): statistics of the (smoothed) map along
  each frontier (a :class:`_MapFeature`), or functions of the RAG and the image alone
  (length, region sizes, colour and texture differences), computed once per RAG on the
  host. The head itself (:mod:`hiseg.segmentation.merging`) reads them.

Two ways to the features of one RAG: :func:`edge_features`, numpy, no torch: the one chain's
after the network, whatever backend made the map (:meth:`hiseg.segmentation.Pipeline.hierarchy_of_map`);
and its differentiable twin in torch, :class:`TorchEdgeFeatures` (many maps of the same RAGs,
batched, on the maps' device; :func:`edge_features_torch` for one), which training needs for
gradients through the features. ``tests/segmentation/test_merge_head.py`` holds the two equal to 1e-12 on
real maps. torch is imported at its first use: the chain never imports it.

The smoothed statistics (``*_s2``, ``*_s4``) smooth in float64 with OpenCV's kernel and
border (``cv2.GaussianBlur``, which blurs float32 maps in float32, differs by < 3e-7); the
shipped heads' weights moved by at most 1.2e-8 when their former cv2 float32 implementation was
removed, and their benchmark figures did not change (``tests/models/test_shipped_figures.py``). The
shipped head's 14 features cost a few milliseconds once per RAG (indices and the constant
features), then a few times that per map, with or without the backward pass
(``benchmarks/results/training.md``, "The merging head's features").
"""
from __future__ import annotations

from typing import Callable, Optional, Sequence

import numpy as np

from ..core._lazy import lazy_torch
from ..core.graph import RegionAdjacencyGraph, batch_graphs
from ..core.device import packed_copy

__all__ = ["frontier_pixel_pairs", "batch_frontier_pixels", "frontier_mean", "rag_frontier_mean", "FEATURES",
           "MergeHeadError", "TorchEdgeFeatures", "edge_features_torch", "edge_features"]

#: imported at its first use (:mod:`hiseg.core._lazy`): the definitions and the frontier pixel pairs need no torch
torch = lazy_torch()


# --------------------------------------------------------------------------- frontier pixels and their mean
def frontier_pixel_pairs(rag: RegionAdjacencyGraph) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The two pixels of every frontier pixel-edge of a RAG, grouped by RAG edge.

    Parameters
    ----------
    rag : RegionAdjacencyGraph
        Its ``frontier_edges`` are ids of edges of ``grid_graph(labels.shape)``
        (horizontal edges in raster order, then vertical edges in raster order).

    Returns
    -------
    pix_a, pix_b : int64 arrays (P,)
        Flat pixel indices (``row * W + col``) of the two end pixels of each frontier
        pixel-edge: ``pix_a`` is the left / upper pixel, ``pix_b`` the right / lower.
    edge : int64 array (P,)
        The RAG edge each pixel-edge lies on (non-decreasing, CSR order).

    Cost O(P).
    """
    h, w = rag.labels.shape
    fe = rag.frontier_edges.astype(np.int64)
    n_h = h * (w - 1)
    horiz = fe < n_h
    row = np.where(horiz, fe // max(w - 1, 1), 0)
    col = np.where(horiz, fe % max(w - 1, 1), 0)
    pa = np.where(horiz, row * w + col, fe - n_h)
    pb = np.where(horiz, pa + 1, fe - n_h + w)
    edge = np.repeat(np.arange(rag.graph.num_edges, dtype=np.int64), np.diff(rag.frontier_ptr))
    return pa, pb, edge


def batch_frontier_pixels(rags, shape) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """:func:`frontier_pixel_pairs` of B RAGs as flat ids into (B, H, W) maps of ``shape``
    (H, W) (RAG ``b`` covers the top-left ``rags[b].labels.shape`` of map ``b``, the layout of
    a collated batch) and global edge ids (RAG after RAG): three int64 arrays (P,). O(P)."""
    h, w = (int(x) for x in shape)
    pa, pb, pe, off = [], [], [], 0
    for b, r in enumerate(rags):
        a, c, e = frontier_pixel_pairs(r)
        wb = r.labels.shape[1]
        pa.append((a // wb) * w + a % wb + b * h * w)
        pb.append((c // wb) * w + c % wb + b * h * w)
        pe.append(e + off)
        off += r.graph.num_edges
    return tuple(np.concatenate(x).astype(np.int64) for x in (pa, pb, pe))


def frontier_mean(boundary: torch.Tensor, pix_a: torch.Tensor, pix_b: torch.Tensor,
                  edge: torch.Tensor, num_edges: int, counts: torch.Tensor | None = None) -> torch.Tensor:
    r"""Mean of a boundary map along each RAG frontier: the RAG edge weights.

    .. math:: w(e) = \frac{1}{|F_e|}\sum_{(p, q) \in F_e} \frac{b(p) + b(q)}{2}

    Parameters
    ----------
    boundary : tensor of any shape, flattened (e.g. (B, H, W) probabilities); pixel ids
        index the flattened tensor (``b * H * W + p`` in a batch).
    pix_a, pix_b : (F,) int64 tensors, the two pixels of each frontier pixel-edge.
    edge : (F,) int64 tensor, the RAG edge (global in a batch) of each pixel-edge.
    num_edges : number of RAG edges (every one must have at least one pixel-edge).
    counts : (num_edges,) tensor on ``boundary``'s device, optional
        The number of pixel-edges of every RAG edge (its frontier length, known from the
        RAGs: :class:`~hiseg.data.collate.GraphBatch`'s ``frontier_count``); then nothing
        is counted nor checked.

    Returns a (num_edges,) tensor on ``boundary``'s device, differentiable (scatter-add
    backward). O(F) on the device, with no host synchronisation: the sums (and the
    counts, without ``counts``) are ``index_add_`` (a CUDA ``bincount`` would read the
    maximum index back). Without ``counts``, the check that every edge has a frontier
    pixel is made where the indices are host tensors (ValueError); indices already on an
    accelerator come from RAGs, whose edges are made from their frontier pixels, and are
    not read back.
    """
    flat = boundary.reshape(-1)
    vals = 0.5 * (flat[pix_a] + flat[pix_b])
    s = flat.new_zeros(num_edges).index_add_(0, edge, vals)
    if counts is not None:
        return s / counts.to(flat.dtype)
    if edge.device.type == "cpu":  # host indices: count once, check for free
        cnt = torch.bincount(edge, minlength=num_edges)
        if num_edges and bool((cnt == 0).any()):
            raise ValueError("frontier_mean: some RAG edges have no frontier pixel")
        cnt = cnt.to(device=flat.device, dtype=flat.dtype)
    else:
        cnt = flat.new_zeros(num_edges).index_add_(0, edge, torch.ones_like(vals.detach()))
    return s / cnt


def rag_frontier_mean(rag: RegionAdjacencyGraph, boundary) -> torch.Tensor:
    """:func:`frontier_mean` of one (H, W) map (array or tensor) on one RAG, in float64."""
    b = boundary if torch.is_tensor(boundary) else torch.from_numpy(np.asarray(boundary))
    pa, pb, e = frontier_pixel_pairs(rag)
    return frontier_mean(b.to(torch.float64), torch.from_numpy(pa), torch.from_numpy(pb), torch.from_numpy(e),
                         rag.graph.num_edges)


# --------------------------------------------------------------------------- the merge head's features
class MergeHeadError(ValueError):
    """A merge head's settings that are unknown, malformed or do not fit the network (defined
    here, below :mod:`hiseg.segmentation.merging`, which raises it too, because the feature
    names are checked here)."""


class _Ctx:
    """What the constant features of one RAG (those that do not read the boundary map) are
    computed from, on the host; each intermediate computed once."""

    def __init__(self, rag: RegionAdjacencyGraph, image: Optional[np.ndarray]):
        self.rag, self.image = rag, image
        self._cache: dict = {}

    def get(self, key, fn):
        if key not in self._cache:
            self._cache[key] = fn()
        return self._cache[key]

    @property
    def lengths(self) -> np.ndarray:
        return np.diff(self.rag.frontier_ptr).astype(np.float64)

    @property
    def sizes(self) -> np.ndarray:
        return self.get("sizes", lambda: self.rag.region_sizes.astype(np.float64))

    def region_mean(self, arr: np.ndarray, key) -> np.ndarray:
        """(R, C) mean of ``arr`` (H, W[, C]) over each region."""
        def f():
            lab = self.rag.labels.ravel()
            a = arr.reshape(lab.size, -1).astype(np.float64)
            cnt = np.maximum(self.sizes, 1)[:, None]
            return np.stack([np.bincount(lab, weights=a[:, c], minlength=self.rag.num_regions)
                             for c in range(a.shape[1])], 1) / cnt
        return self.get(("rmean", key), f)

    @property
    def lab(self) -> np.ndarray:
        def f():
            if self.image is None:
                raise MergeHeadError("merge_head.features: colour and texture features need the image")
            import cv2

            img = np.ascontiguousarray(np.asarray(self.image, np.float32)[..., :3])
            return cv2.cvtColor(img, cv2.COLOR_RGB2Lab)
        return self.get("lab", f)

    def ends(self, per_region: np.ndarray):
        g = self.rag.graph
        return per_region[g.sources], per_region[g.targets]


class _MapFeature:
    """A feature that reads the boundary map: what :class:`TorchEdgeFeatures` computes, in
    torch (``torch_spec``: ``("stat", kind, sigma, q)`` for a statistic of the (smoothed) map
    along the frontier, ``("interior", "min" | "max")`` for the mean map inside the two regions)."""

    def __init__(self, *spec):
        self.torch_spec = spec

    def __repr__(self) -> str:
        return f"_MapFeature{self.torch_spec}"


def _log_length(c: _Ctx) -> np.ndarray:
    return np.log(c.lengths)


def _size(which: str) -> Callable[[_Ctx], np.ndarray]:
    def f(c: _Ctx) -> np.ndarray:
        a, b = c.ends(c.sizes / c.rag.labels.size)
        return np.log(np.minimum(a, b) if which == "min" else np.maximum(a, b))
    return f


def _lab_dist(channels: slice) -> Callable[[_Ctx], np.ndarray]:
    def f(c: _Ctx) -> np.ndarray:
        m = c.region_mean(c.lab, "lab")[:, channels]
        a, b = c.ends(m)
        return np.sqrt(((a - b) ** 2).sum(1)) / 100.0
    return f


def _texture_diff(c: _Ctx) -> np.ndarray:
    """Difference of the two regions' standard deviations of L (a crude texture contrast)."""
    L = c.lab[..., 0]
    m1 = c.region_mean(L, "L")[:, 0]
    m2 = c.region_mean(L * L, "L2")[:, 0]
    sd = np.sqrt(np.maximum(m2 - m1 * m1, 0))
    a, b = c.ends(sd)
    return np.abs(a - b) / 100.0


def _stat(kind: str, sigma: float, q: float = 0.0) -> _MapFeature:
    return _MapFeature("stat", kind, sigma, q)


#: name -> the feature: a :class:`_MapFeature` (reads the boundary map; computed in torch) or a
#: function of the RAG and the image (constant per RAG, computed once on the host); the names a
#: head's ``features`` may use.
FEATURES: dict = {
    "mean": _stat("mean", 0), "max": _stat("max", 0),
    "q10": _stat("q", 0, 0.1), "q25": _stat("q", 0, 0.25), "q50": _stat("q", 0, 0.5), "q75": _stat("q", 0, 0.75),
    "q90": _stat("q", 0, 0.9),
    "mean_s2": _stat("mean", 2), "max_s2": _stat("max", 2), "q50_s2": _stat("q", 2, 0.5),
    "mean_s4": _stat("mean", 4), "q50_s4": _stat("q", 4, 0.5),
    "log_length": _log_length, "log_size_min": _size("min"), "log_size_max": _size("max"),
    "lab_dist": _lab_dist(slice(0, 3)), "l_dist": _lab_dist(slice(0, 1)), "ab_dist": _lab_dist(slice(1, 3)),
    "texture_diff": _texture_diff, "interior_min": _MapFeature("interior", "min"),
    "interior_max": _MapFeature("interior", "max"),
}


def _check_names(names) -> None:
    unknown = [n for n in names if n not in FEATURES]
    if unknown:
        raise MergeHeadError(f"merge_head.features: unknown feature(s) {unknown}; known: {sorted(FEATURES)}")


# --------------------------------------------------------------------------- the smoothing kernel (shared by
# edge_features and its torch twin, so that both smooth alike)
def _reflect101(p: np.ndarray, n: int) -> np.ndarray:
    """OpenCV's BORDER_REFLECT_101 (``cv2.GaussianBlur``'s default) of indices ``p`` into
    ``0..n-1``, any distance outside (the period is 2 n - 2): ``-1 -> 1``, ``n -> n - 2``."""
    if n == 1:
        return np.zeros_like(p)
    m = np.mod(p, 2 * (n - 1))
    return np.where(m < n, m, 2 * (n - 1) - m)


def _gaussian_taps(sigma: float) -> np.ndarray:
    """``cv2.GaussianBlur(..., (0, 0), sigma)``'s kernel on float images: 2 round(4 sigma) + 1
    taps (``cvRound(sigma * 8 + 1) | 1``), normalised to sum 1 (in float64 here)."""
    k = int(np.rint(sigma * 8 + 1)) | 1
    t = np.arange(k, dtype=np.float64) - k // 2
    g = np.exp(-t * t / (2.0 * sigma * sigma))
    return g / g.sum()


# --------------------------------------------------------------------------- the features in torch
class TorchEdgeFeatures:
    """The merging head's edge features, in torch, differentiable with respect to the boundary
    map: the building block of fine-tuning the network and a
    :class:`~hiseg.segmentation.merging.MergeHead` jointly through the ultrametric layer.

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
    dtype : of the features (None: float64, the head's); the map is cast to it first.

    Calling it on a map (H, W) (one RAG) or (B, H, W) returns (E_total, len(names)) features,
    rows in the order of the RAGs' edges, RAG after RAG (``graph``: their
    :class:`~hiseg.core.graph.BatchedGraph`, what a ``context`` head reads), differentiable
    almost everywhere (quantiles and max: the gradient goes to the order statistic; mean,
    smoothing, interior means: linear). Cost per call O(B H W k + P log P)
    for kernels of k taps and P frontier pixel pairs.
    """

    def __init__(self, rags, names: Sequence[str] = ("mean",), images=None, shape=None, device=None,
                 dtype: Optional[torch.dtype] = None):
        dtype = torch.float64 if dtype is None else dtype
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


def edge_features(rag: RegionAdjacencyGraph, boundary, image=None, names: Sequence[str] = ("mean",)) -> np.ndarray:
    """(E, len(names)) float64 features of one RAG's edges (:data:`FEATURES`) from its (H, W)
    boundary map, in numpy: the one chain's (every backend's inference), no torch.
    :class:`TorchEdgeFeatures` is its differentiable twin (the same sums, to float64 rounding;
    ``tests/segmentation/test_merge_head.py`` holds them equal to 1e-12 on real maps).

    ``image``: the (H, W, 3) float RGB image in [0, 1] (the colour and texture features).
    Cost O(H W k + P log P) for P frontier pixel pairs and smoothing kernels of k taps; a few ms
    for 481x321. MergeHeadError for an unknown name or a map of another size than the superpixels.
    """
    _check_names(names)
    x = np.asarray(boundary, dtype=np.float64)
    if x.shape != rag.labels.shape:
        raise MergeHeadError(f"boundary map {x.shape} and superpixels {rag.labels.shape} differ in size")
    g, ne = rag.graph, int(rag.graph.num_edges)
    pa, pb, edge = frontier_pixel_pairs(rag)
    lengths = rag.frontier_lengths().astype(np.int64)
    start = np.concatenate([[0], np.cumsum(lengths)[:-1]]).astype(np.int64)
    ctx, cache = _Ctx(rag, image), {}

    def values(sigma):  # the map (smoothed as TorchEdgeFeatures._smooth) at both pixels of each frontier pair
        if ("v", sigma) not in cache:
            flat = (_smooth_numpy(x, sigma) if sigma > 0 else x).reshape(-1)
            cache["v", sigma] = 0.5 * (flat[pa] + flat[pb])
        return cache["v", sigma]

    def sorted_values(sigma):
        if ("s", sigma) not in cache:
            v = values(sigma)
            cache["s", sigma] = v[np.lexsort((v, edge))]
        return cache["s", sigma]

    def interior(which):
        if "interior" not in cache:
            s = (np.bincount(rag.labels.ravel(), weights=x.ravel(), minlength=rag.num_regions)
                 / np.maximum(np.bincount(rag.labels.ravel(), minlength=rag.num_regions), 1))
            cache["interior"] = (s[g.sources], s[g.targets])
        a, b = cache["interior"]
        return np.minimum(a, b) if which == "min" else np.maximum(a, b)

    cols = []
    for n in names:
        spec = getattr(FEATURES[n], "torch_spec", None)
        if spec is None:
            cols.append(np.asarray(FEATURES[n](ctx), np.float64) if ne else np.zeros(0))
        elif spec[0] == "interior":
            cols.append(interior(spec[1]))
        elif spec[1] == "mean":
            cols.append(np.bincount(edge, weights=values(spec[2]), minlength=ne) / lengths)
        else:
            _, kind, sigma, q = spec
            rank = start + lengths - 1 if kind == "max" else start + np.floor(q * (lengths - 1) + 0.5).astype(np.int64)
            cols.append(sorted_values(sigma)[rank])
    return np.stack(cols, 1) if cols else np.zeros((ne, 0))


def _smooth_numpy(x: np.ndarray, sigma: float) -> np.ndarray:
    """As :meth:`TorchEdgeFeatures._smooth`: reflected rows, taps summed in order, then columns."""
    taps = _gaussian_taps(sigma)
    r = len(taps) // 2
    h, w = x.shape

    def conv(xp, axis, n):
        take = (lambda i: xp[i:i + n]) if axis == 0 else (lambda i: xp[:, i:i + n])
        y = take(0) * taps[0]
        for i in range(1, len(taps)):
            y = y + take(i) * taps[i]
        return y
    y = conv(x[_reflect101(np.arange(-r, h + r), h)], 0, h)
    return conv(y[:, _reflect101(np.arange(-r, w + r), w)], 1, w)
