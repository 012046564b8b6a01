"""Synthetic hierarchical segmentation data: the project's embedded default data set.

Every image is drawn from a known hierarchy of nested partitions, so a method's output
can be compared with the truth that generated it, and nothing has to be downloaded.

How one sample is made (all from one random generator seeded by ``(seed, split,
index)``, so a sample depends on nothing else — not on the order of access nor on the
number of loader workers):

1. **Finest partition.** ``N`` seeds (``n_regions`` range) spread by Mitchell's
   best-candidate sampling; each pixel goes to its nearest seed after a smooth random
   warp of the coordinates (so cells are curved Voronoi cells).
2. **Hierarchy.** Cells are merged at random along their adjacencies (a random
   agglomeration that prefers small clusters), and the partition is recorded when the
   number of clusters reaches each of ``n_levels`` geometrically spaced counts, from
   ``N`` (level 0, the cells) down to ``coarsest`` (level ``L-1``). Every level is a
   union of regions of the level below: the levels are nested by construction.
3. **Rendering.** Colours are drawn top-down: each coarsest cluster gets a random RGB
   colour; a cluster of level ``l`` that was split at the level below hands its
   children its colour plus a random offset whose size shrinks by ``contrast_decay``
   at each finer level, so coarse boundaries have more contrast than fine ones. Each
   cell gets a texture (a linear shading and, for the cells of some coarse clusters,
   stripes of the cluster's orientation and period), then the image is blurred
   (Gaussian, ``blur`` pixels) and Gaussian noise of standard deviation ``noise`` is
   added; values are clipped to [0, 1].
4. **Annotators.** Each of ``n_annotators`` picks a level at random and labels the
   image with that level's partition; with ``jitter > 0`` an annotator sees the cell
   geometry through an extra smooth random warp of standard deviation ``jitter``
   pixels (boundaries move by one to a few pixels, as between human annotators; the
   partitions are then only nested up to that jitter).

A sample is a dict with ``image`` float32 (H, W, 3) in [0, 1], ``segmentations`` int32
(A, H, W) (labels ``0..K-1`` per annotator), ``name`` and, for tests and analysis,
``fine_labels`` int32 (H, W) (the cells before jitter), ``levels`` int32 (L, N)
(``levels[l, i]`` = cluster of cell ``i`` at level ``l``; level 0 is the identity) and
``annotator_levels`` int64 (A,).
"""
from __future__ import annotations

import hashlib
import os
import zlib
from pathlib import Path
from typing import Sequence

import numpy as np

from ..core.graph import region_adjacency_graph

__all__ = ["SyntheticSegmentation", "make_synthetic_sample"]


def _smooth_field(rng: np.random.Generator, shape, grid: int, channels: int = 1) -> np.ndarray:
    """Smooth random field of unit-ish amplitude: Gaussian noise on a coarse grid, upsampled."""
    import cv2

    h, w = shape
    g = rng.standard_normal((grid, grid, channels)).astype(np.float32)
    up = cv2.resize(g, (w, h), interpolation=cv2.INTER_CUBIC)
    return up.reshape(h, w, channels)


def _best_candidate_points(rng: np.random.Generator, n: int, shape, k: int = 8) -> np.ndarray:
    """``n`` points spread by Mitchell's best-candidate sampling, float (n, 2) as (y, x)."""
    h, w = shape
    pts = np.empty((n, 2), np.float64)
    pts[0] = rng.uniform((0, 0), (h, w))
    for i in range(1, n):
        cand = rng.uniform((0, 0), (h, w), size=(k, 2))
        d = ((cand[:, None, :] - pts[None, :i, :]) ** 2).sum(-1).min(1)
        pts[i] = cand[int(np.argmax(d))]
    return pts


def _voronoi(seeds: np.ndarray, yy: np.ndarray, xx: np.ndarray, margin: bool = False):
    """Index of the nearest seed of every (warped) pixel coordinate. O(H W N).

    With ``margin``, also returns ``d2 - d1`` (float32), the gap between the distances
    to the second nearest and the nearest seed: a displacement shorter than half of it
    cannot change the pixel's nearest seed (triangle inequality).
    """
    best = np.full(yy.shape, np.inf, np.float32)
    second = np.full(yy.shape, np.inf, np.float32) if margin else None
    lab = np.zeros(yy.shape, np.int32)
    d = np.empty(yy.shape, np.float32)
    tmp = np.empty(yy.shape, np.float32)
    for i, (sy, sx) in enumerate(seeds.astype(np.float32)):
        np.subtract(yy, sy, out=d)
        np.multiply(d, d, out=d)
        np.subtract(xx, sx, out=tmp)
        np.multiply(tmp, tmp, out=tmp)
        np.add(d, tmp, out=d)
        closer = d < best
        if margin:
            np.minimum(second, np.where(closer, best, d), out=second)
        np.copyto(best, d, where=closer)
        lab[closer] = i
    if margin:
        return lab, np.sqrt(second) - np.sqrt(best)
    return lab


def _random_hierarchy(rng: np.random.Generator, n: int, src: np.ndarray, dst: np.ndarray,
                      counts: Sequence[int]) -> np.ndarray:
    """Nested partitions of ``n`` cells by random merges along adjacency edges.

    Returns int32 (len(counts), n): the cluster of each cell (renumbered 0..K-1) when the
    number of clusters reached each target count (decreasing). Merges prefer small
    clusters (edge chosen with probability proportional to 1 / (size_a * size_b)).
    """
    cl = np.arange(n)
    size = np.ones(n)
    k = n
    levels = []
    for target in counts:
        while k > target:
            a, b = cl[src], cl[dst]
            live = np.flatnonzero(a != b)
            if live.size == 0:  # disconnected adjacency: cannot merge further
                break
            p = 1.0 / (size[a[live]] * size[b[live]])
            e = live[rng.choice(live.size, p=p / p.sum())]
            ca, cb = cl[src[e]], cl[dst[e]]
            cl[cl == cb] = ca
            size[ca] += size[cb]
            k -= 1
        _, inv = np.unique(cl, return_inverse=True)
        levels.append(inv.astype(np.int32))
    return np.stack(levels)


def _check_sample_args(size, n_annotators, n_regions, n_levels, coarsest):
    """((H, W), (min, max) cells) of :func:`make_synthetic_sample`'s arguments; ValueError naming a bad one."""
    h, w = (int(size), int(size)) if np.isscalar(size) else (int(size[0]), int(size[1]))
    if h < 4 or w < 4:
        raise ValueError(f"size must be at least 4x4, got {(h, w)}")
    if n_annotators < 1:
        raise ValueError(f"n_annotators must be >= 1, got {n_annotators}")
    lo, hi = int(n_regions[0]), int(n_regions[1])
    if not 1 <= lo <= hi:
        raise ValueError(f"n_regions must be a range (min, max) with 1 <= min <= max, got {n_regions}")
    if n_levels < 1 or coarsest < 1:
        raise ValueError(f"n_levels and coarsest must be >= 1, got {n_levels}, {coarsest}")
    return (h, w), (lo, hi)


def _annotations(rng, levels, ann_levels, fine, seeds, gap, warped, jitter: float) -> np.ndarray:
    """(A, H, W) int32: annotator ``a`` draws level ``ann_levels[a]`` of the cells, its cell
    boundaries jittered by its own smooth field of ``jitter`` pixels."""
    (h, w), (wy, wx) = fine.shape, warped
    segs = np.empty((len(ann_levels), h, w), np.int32)
    jgrid = max(3, int(round(max(h, w) / 12.0)))
    for a in range(len(ann_levels)):
        if jitter > 0:
            jd = _smooth_field(rng, (h, w), jgrid, 2) * np.float32(jitter)
            # only pixels whose nearest seed can change are recomputed (exact, see _voronoi)
            sel = np.flatnonzero(gap.ravel() <= 2.0 * np.sqrt((jd * jd).sum(-1)).ravel())
            fa = fine.copy()
            if sel.size:
                fa.ravel()[sel] = _voronoi(seeds, wy.ravel()[sel] + jd[..., 0].ravel()[sel],
                                           wx.ravel()[sel] + jd[..., 1].ravel()[sel])
        else:
            fa = fine
        segs[a] = levels[ann_levels[a]][fa]
    return segs


def _cell_colours(rng: np.random.Generator, levels: np.ndarray, contrast: float, contrast_decay: float):
    """(N, 3) colour of every cell, top-down: uniform at the coarsest level, then each child
    of a split cluster offset from its parent by ``contrast * contrast_decay**depth``."""
    n_lv = levels.shape[0]
    col = rng.uniform(0.1, 0.9, size=(int(levels[-1].max()) + 1, 3))
    for lv in range(n_lv - 2, -1, -1):
        child, parent = levels[lv], levels[lv + 1]
        k = int(child.max()) + 1
        par_of = np.zeros(k, np.int64)
        par_of[child] = parent
        n_children = np.bincount(par_of, minlength=col.shape[0])
        new = col[par_of].copy()
        split = n_children[par_of] > 1
        sigma = contrast * contrast_decay ** (n_lv - 2 - lv)
        d = rng.standard_normal((k, 3))
        d /= np.linalg.norm(d, axis=1, keepdims=True) + 1e-12
        d *= (sigma * rng.uniform(0.7, 1.0, size=(k, 1)))
        new[split] += d[split]
        col = np.clip(new, 0.03, 0.97)
    return col


def _cell_textures(rng: np.random.Generator, fine, top, seeds, grid, cell: float, texture: float):
    """(H, W) float32 texture: per cell a linear shading, plus stripes shared within a coarse cluster."""
    yy, xx = grid
    n = seeds.shape[0]
    phi = rng.uniform(0, 2 * np.pi, n)
    amp_g = rng.uniform(0.0, 0.05, n) * texture
    shade = amp_g[fine] * ((xx - seeds[fine, 1]) * np.cos(phi)[fine]
                           + (yy - seeds[fine, 0]) * np.sin(phi)[fine]) / cell
    k_top = int(top.max()) + 1
    has_st = rng.uniform(size=k_top) < 0.5
    theta = rng.uniform(0, np.pi, k_top)[top] + rng.normal(0, 0.15, n)
    period = rng.uniform(3.0, 9.0, k_top)[top] * rng.uniform(0.9, 1.1, n)
    amp_s = np.where(has_st[top], 0.035, 0.0) * texture
    phase = rng.uniform(0, 2 * np.pi, n)
    stripes = amp_s[fine] * np.sin(2 * np.pi * (xx * np.cos(theta)[fine] + yy * np.sin(theta)[fine])
                                   / period[fine] + phase[fine])
    return (shade + stripes).astype(np.float32)


def make_synthetic_sample(rng: np.random.Generator, size=(128, 128), n_annotators: int = 4,
                          n_regions=(24, 48), n_levels: int = 4, coarsest: int = 3,
                          contrast: float = 0.2, contrast_decay: float = 0.65, texture: float = 1.0,
                          warp: float = 0.35, jitter: float = 1.0, blur: float = 0.8,
                          noise: float = 0.02) -> dict:
    """Draw one synthetic sample (see the module docstring for the recipe).

    Parameters
    ----------
    rng : numpy Generator
        The only source of randomness.
    size : (H, W) or int
    n_annotators : int >= 1
    n_regions : (min, max)
        Range (inclusive) of the number of finest cells.
    n_levels : int >= 1
        Number of nested levels (level 0 = the cells).
    coarsest : int >= 1
        Number of regions of the coarsest level.
    contrast : float
        Size of the colour offset between sibling clusters just below the coarsest level
        (RGB units); the coarsest clusters themselves have uniform random colours.
    contrast_decay : float in (0, 1]
        Factor applied to ``contrast`` at each finer level.
    texture : float
        Scale of the per-cell textures (0: flat colours).
    warp : float
        Amplitude of the coordinate warp, in units of the mean cell side.
    jitter : float
        Per-annotator boundary jitter, in pixels (0: annotators exactly nested).
    blur, noise : float
        Gaussian blur sigma (pixels) and noise standard deviation.

    Returns
    -------
    dict: ``image``, ``segmentations``, ``name`` (empty), ``fine_labels``, ``levels``,
    ``annotator_levels``.

    Cost: O(H W N (1 + A)) with small constants (at 128x128: ``benchmarks/results/data.md``).
    """
    import cv2

    (h, w), (lo, hi) = _check_sample_args(size, n_annotators, n_regions, n_levels, coarsest)
    n = int(rng.integers(lo, hi + 1))
    n = min(n, h * w)
    cell = float(np.sqrt(h * w / n))
    seeds = _best_candidate_points(rng, n, (h, w))
    yy, xx = np.meshgrid(np.arange(h, dtype=np.float32), np.arange(w, dtype=np.float32), indexing="ij")
    grid = max(3, int(round(max(h, w) / (2.0 * cell))) + 2)
    disp = _smooth_field(rng, (h, w), grid, 2) * np.float32(warp * cell)
    wy, wx = yy + disp[..., 0], xx + disp[..., 1]
    fine, gap = _voronoi(seeds, wy, wx, margin=True)
    # drop seeds that own no pixel (the gap above stays a valid, conservative bound)
    present, fine = np.unique(fine, return_inverse=True)
    fine = fine.reshape(h, w).astype(np.int32)
    seeds = seeds[present]
    n = present.size

    # hierarchy
    rag = region_adjacency_graph(fine)
    counts = np.unique(np.round(np.geomspace(n, min(coarsest, n), max(n_levels, 1))).astype(int))[::-1]
    counts = list(counts[counts <= n])
    if counts[0] != n:
        counts = [n] + counts
    levels = _random_hierarchy(rng, n, rag.graph.sources, rag.graph.targets, counts)

    img = _cell_colours(rng, levels, contrast, contrast_decay)[fine].astype(np.float32)  # (H, W, 3)
    if texture > 0:
        img += _cell_textures(rng, fine, levels[-1], seeds, (yy, xx), cell, texture)[..., None]
    if blur > 0:
        img = cv2.GaussianBlur(img, (0, 0), float(blur))
    if noise > 0:
        img += rng.normal(0.0, noise, img.shape).astype(np.float32)
    img = np.clip(img, 0.0, 1.0).astype(np.float32)

    ann_levels = rng.integers(0, levels.shape[0], size=n_annotators)
    segs = _annotations(rng, levels, ann_levels, fine, seeds, gap, (wy, wx), jitter)
    return {"image": img, "segmentations": segs, "name": "", "fine_labels": fine,
            "levels": levels, "annotator_levels": ann_levels.astype(np.int64)}


class SyntheticSegmentation:
    """A seeded, deterministic set of synthetic hierarchical segmentation samples.

    Parameters
    ----------
    n_images : int
        Length of the data set.
    size : int or (H, W)
        Image size (default 128x128, small enough to train on a CPU).
    n_annotators : int
        Ground-truth partitions per image (each a cut of the image's hierarchy).
    seed : int
        Base seed. Sample ``i`` is drawn from ``SeedSequence([seed, crc32(split), i])``:
        identical for the same ``(seed, split, i)`` whatever the access order or the
        number of loader workers; different splits never share a sample.
    split : str
        Name mixed into the seed (``"train"``, ``"val"``, ...).
    cache_dir : str, optional
        If set, samples are stored as ``.npz`` under
        ``cache_dir/<hash of the parameters>/<index>.npz`` and read back from there
        (``datasets/synthetic_cache`` is the conventional place). Generation is fast,
        so the cache is off by default.
    **params
        Passed to :func:`make_synthetic_sample` (``n_regions``, ``n_levels``,
        ``coarsest``, ``contrast``, ``contrast_decay``, ``texture``, ``warp``,
        ``jitter``, ``blur``, ``noise``).

    Samples: see the module docstring. Cost per sample: ``benchmarks/results/data.md``
    (``benchmarks/bench_data.py``).

    Raises
    ------
    ValueError
        Bad parameters (checked once at construction by drawing sample 0).
    IndexError
        Index out of range.
    """

    def __init__(self, n_images: int = 100, size=128, n_annotators: int = 4, seed: int = 0, *,
                 split: str = "train", cache_dir: str | None = None, **params):
        if n_images < 0:
            raise ValueError(f"n_images must be >= 0, got {n_images}")
        self.n_images = int(n_images)
        self.size = (int(size), int(size)) if np.isscalar(size) else (int(size[0]), int(size[1]))
        self.n_annotators = int(n_annotators)
        self.seed = int(seed)
        self.split = str(split)
        self.params = dict(params)
        self.cache_dir = None
        if cache_dir is not None:
            key = hashlib.sha1(repr((self.size, self.n_annotators, self.seed, self.split,
                                     sorted(self.params.items()))).encode()).hexdigest()[:16]
            self.cache_dir = Path(cache_dir) / key
        # validate parameters early (cheap)
        make_synthetic_sample(np.random.default_rng(0), size=(8, 8), n_annotators=self.n_annotators,
                              **{**self.params, "n_regions": (2, 3)})

    def __len__(self) -> int:
        return self.n_images

    @property
    def names(self) -> list[str]:
        return [self._name(i) for i in range(self.n_images)]

    def _name(self, index: int) -> str:
        return f"synthetic_{self.split}_{self.seed}_{index:05d}"

    def rng(self, index: int) -> np.random.Generator:
        """The generator sample ``index`` is drawn from."""
        return np.random.default_rng(np.random.SeedSequence([self.seed, zlib.crc32(self.split.encode()), index]))

    def __getitem__(self, index: int) -> dict:
        if not -self.n_images <= index < self.n_images:
            raise IndexError(f"index {index} out of range for a synthetic set of {self.n_images} images")
        index = int(index) % self.n_images
        path = None
        if self.cache_dir is not None:
            path = self.cache_dir / f"{index:05d}.npz"
            if path.is_file():
                with np.load(path) as z:
                    out = {k: z[k] for k in z.files}
                out["name"] = self._name(index)
                return out
        out = make_synthetic_sample(self.rng(index), size=self.size, n_annotators=self.n_annotators,
                                    **self.params)
        out["name"] = self._name(index)
        if path is not None:
            path.parent.mkdir(parents=True, exist_ok=True)
            tmp = path.with_suffix(f".{os.getpid()}.tmp.npz")
            np.savez_compressed(tmp, **{k: v for k, v in out.items() if k != "name"})
            os.replace(tmp, path)
        return out
