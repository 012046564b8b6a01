"""The merge head's edge features in numpy, for the onnxruntime path (which imports no torch):
what :class:`~hiseg.segmentation.pooling.TorchEdgeFeatures` computes, the same sums in the
same order (float64, the same smoothing kernel and border, the same ranks);
``tests/test_export.py`` checks they agree to 1e-12 on real maps."""
from __future__ import annotations

from typing import Sequence

import numpy as np

from ..core.graph import RegionAdjacencyGraph
from ..segmentation.pooling import (FEATURES, MergeHeadError, _check_names, _Ctx, _gaussian_taps, _reflect101,
                                    frontier_pixel_pairs)

__all__ = ["numpy_edge_features"]


def numpy_edge_features(rag: RegionAdjacencyGraph, boundary, image=None, names: Sequence[str] = ("mean",)
                        ) -> np.ndarray:
    """(E, len(names)) float64 features of one RAG's edges (:data:`FEATURES`) from its (H, W)
    boundary map, in numpy: what :class:`~hiseg.segmentation.pooling.TorchEdgeFeatures`
    computes (the same sums in the same order, to float64 rounding). ``image``: the (H, W, 3)
    float RGB image (colour and texture features). Cost O(H W k + P log P) for P frontier
    pixel pairs and smoothing kernels of k taps. MergeHeadError for an unknown name or a map
    of another size than the superpixels."""
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
