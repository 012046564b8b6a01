"""The merging head's edge features (:data:`FEATURES`), defined without torch, and their numpy
computation for one RAG (:func:`numpy_edge_features`).

A feature is a statistic of the boundary map along a RAG edge's frontier (a
:class:`_MapFeature`: :class:`hiseg.segmentation.torch_features.TorchEdgeFeatures` computes those in
torch, differentiably, for training and the torch path) or a function of the RAG and the image
alone (length, region sizes, colour and texture differences: numpy, computed once per RAG
by both paths). :func:`numpy_edge_features` is the same computation in numpy (float64,
the same smoothing kernel and border, the same ranks) for the onnxruntime path, which
imports no torch (:mod:`hiseg.export.runtime`); ``tests/test_export.py`` checks it equals
:class:`~hiseg.segmentation.torch_features.TorchEdgeFeatures` to 1e-12 on real maps.
"""
from __future__ import annotations

from typing import Callable, Optional, Sequence

import numpy as np

from ..core.graph import RegionAdjacencyGraph

__all__ = ["FEATURES", "MergeHeadError", "numpy_edge_features"]


class MergeHeadError(ValueError):
    """A merge head's settings that are unknown, malformed or do not fit the network."""


# --------------------------------------------------------------------------- features
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



def numpy_edge_features(rag: RegionAdjacencyGraph, boundary, image=None, names: Sequence[str] = ("mean",)
                        ) -> np.ndarray:
    """(E, len(names)) float64 features of one RAG's edges (:data:`FEATURES`) from its (H, W)
    boundary map, in numpy: what :class:`~hiseg.segmentation.torch_features.TorchEdgeFeatures`
    computes (the same sums in the same order, to float64 rounding). ``image``: the (H, W, 3)
    float RGB image (colour and texture features). Cost O(H W k + P log P) for P frontier
    pixel pairs and smoothing kernels of k taps. MergeHeadError for an unknown name or a map
    of another size than the superpixels."""
    from .pooling import frontier_pixel_pairs

    _check_names(names)
    x = np.asarray(boundary, dtype=np.float64)
    if x.shape != rag.labels.shape:
        raise MergeHeadError(f"boundary map {x.shape} and superpixels {rag.labels.shape} differ in size")
    g, ne = rag.graph, int(rag.graph.num_edges)
    pa, pb, edge = frontier_pixel_pairs(rag)
    lengths = rag.frontier_lengths().astype(np.int64)
    start = np.concatenate([[0], np.cumsum(lengths)[:-1]]).astype(np.int64)
    ctx, cache = _Ctx(rag, image), {}

    def smooth(sigma):  # as TorchEdgeFeatures._smooth: reflected rows, taps summed in order, then columns
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

    def values(sigma):
        if ("v", sigma) not in cache:
            flat = (smooth(sigma) if sigma > 0 else x).reshape(-1)
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
