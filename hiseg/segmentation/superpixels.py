"""Superpixels: the over-segmentation whose region adjacency graph the network weights.

Default: a marker watershed of the colour gradient with a small distance term
(``method="watershed"``, ``region_size=12``: ~730 superpixels on a 320x320 crop);
SLIC is available (``method="slic"``). The comparison that chose it (boundary recall,
ASA and time against SLIC and other watershed variants; the watershed is several times the
faster) is in
``benchmarks/results/superpixels.md`` (``python benchmarks/bench_data.py --superpixels``).

All functions return an int64 label image numbered ``0..R-1`` in which every label
is one 4-connected region (the contract that :func:`hiseg.core.graph.region_adjacency_graph`
and the frontier pooling rely on).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from ..core._lazy import import_higra

__all__ = [
    "make_superpixels",
    "Superpixels",
    "superpixels",
    "watershed_superpixels",
    "slic_superpixels",
    "color_gradient",
    "make_connected",
    "boundary_watershed",
    "all_minima_watershed",
    "boundary_recall",
    "achievable_segmentation_accuracy",
    "label_boundaries",
]


def _check_image(image) -> np.ndarray:
    image = np.asarray(image)
    if image.ndim != 3 or image.shape[2] != 3 or image.shape[0] < 1 or image.shape[1] < 1:
        raise ValueError(f"image must be an (H, W, 3) RGB array, got shape {image.shape}")
    if not np.issubdtype(image.dtype, np.floating):
        raise TypeError(f"image must be float in [0, 1], got dtype {image.dtype}")
    return np.ascontiguousarray(image, dtype=np.float32)


def _grid_markers(shape, region_size: float | None, n_segments: int | None):
    """Row and column coordinates of a regular grid of markers (at least one)."""
    h, w = shape
    if n_segments is not None:
        if n_segments < 1:
            raise ValueError(f"n_segments must be >= 1, got {n_segments}")
        step = float(np.sqrt(h * w / float(n_segments)))
    else:
        if region_size is None or region_size <= 0:
            raise ValueError(f"region_size must be positive, got {region_size}")
        step = float(region_size)
    ny = max(1, int(round(h / step)))
    nx = max(1, int(round(w / step)))
    # cell centres of an ny x nx partition of the image
    ys = np.minimum(((np.arange(ny) + 0.5) * h / ny).astype(np.int64), h - 1)
    xs = np.minimum(((np.arange(nx) + 0.5) * w / nx).astype(np.int64), w - 1)
    return ys, xs, h / ny, w / nx


def color_gradient(image, sigma: float = 1.0) -> np.ndarray:
    """Colour gradient magnitude of an RGB image, in Lab units per pixel.

    Parameters
    ----------
    image : float array (H, W, 3), RGB in [0, 1]
    sigma : float
        Standard deviation of the Gaussian smoothing applied before differentiation
        (0 disables it).

    Returns
    -------
    float32 array (H, W): ``sqrt(sum_c (d_x L_c)^2 + (d_y L_c)^2)`` over the Lab
    channels, derivatives by the Scharr operator normalised to unit gain.

    Cost: O(H W), a few milliseconds for 320x320 (OpenCV).
    """
    import cv2

    image = _check_image(image)
    img = np.clip(image, 0.0, 1.0)
    if sigma > 0:
        img = cv2.GaussianBlur(img, (0, 0), sigma)
    lab = cv2.cvtColor(img, cv2.COLOR_RGB2Lab)
    g = np.zeros(lab.shape[:2], np.float32)
    for c in range(3):
        ch = np.ascontiguousarray(lab[..., c])
        gx = cv2.Scharr(ch, cv2.CV_32F, 1, 0, borderType=cv2.BORDER_REFLECT)
        gy = cv2.Scharr(ch, cv2.CV_32F, 0, 1, borderType=cv2.BORDER_REFLECT)
        g += gx * gx + gy * gy
    return np.sqrt(g) / 32.0


def make_connected(labels) -> np.ndarray:
    """Relabel so that every label is one 4-connected region, numbered ``0..R-1``.

    A label whose pixels form several 4-connected pieces is split into one label per
    piece. Labels are renumbered in raster order of first appearance.

    Parameters
    ----------
    labels : int array (H, W)

    Returns
    -------
    int64 array (H, W)

    Cost: O(H W) (``skimage.measure.label``).
    """
    from skimage.measure import label as cc_label

    labels = np.asarray(labels)
    if labels.ndim != 2:
        raise ValueError(f"labels must be 2-D, got shape {labels.shape}")
    # shift so that no value equals the background value 0
    lab = labels.astype(np.int64) - int(labels.min()) + 1
    out = cc_label(lab, background=0, connectivity=1)
    return (out - 1).astype(np.int64)


def watershed_superpixels(image, region_size: float = 12.0, *, n_segments: int | None = None,
                          compactness: float = 0.2, sigma: float = 1.0,
                          move_markers: bool = True) -> np.ndarray:
    """Superpixels by a marker watershed of the colour gradient with a distance term.

    Markers are placed at the centres of a regular grid of cells of side
    ``region_size`` pixels (or so that there are about ``n_segments`` of them), each
    moved to the lowest gradient of its 3x3 neighbourhood when ``move_markers``; the
    relief ``color_gradient(image, sigma) + compactness * d(p)``, where ``d(p)`` is the
    Euclidean distance (pixels) from ``p`` to the nearest grid centre, is flooded from
    the markers (``skimage.segmentation.watershed``, 4-connectivity).

    Parameters
    ----------
    image : float array (H, W, 3), RGB in [0, 1]
    region_size : float
        Grid step in pixels: about ``H W / region_size**2`` superpixels.
    n_segments : int, optional
        Approximate number of superpixels; overrides ``region_size``.
    compactness : float
        Weight of the distance term, in Lab units per pixel of distance; 0 gives the
        plain watershed (irregular regions).
    sigma : float
        Gaussian smoothing of the image before the gradient.
    move_markers : bool

    Returns
    -------
    int64 array (H, W), labels ``0..R-1``, each one 4-connected region;
    ``R`` is the number of markers (``~H W / region_size**2``).

    Cost: O(H W log(H W)); measured in ``benchmarks/results/superpixels.md``.

    Raises
    ------
    ValueError, TypeError
        Image not (H, W, 3) float; non-positive ``region_size`` / ``n_segments``.
    """
    from skimage.segmentation import watershed

    image = _check_image(image)
    h, w = image.shape[:2]
    grad = color_gradient(image, sigma)
    ys, xs, sy, sx = _grid_markers((h, w), region_size, n_segments)
    if compactness > 0:
        # distance to the nearest grid centre, separable: nearest row centre and column centre
        iy = np.clip(np.round((np.arange(h) + 0.5) / sy - 0.5).astype(np.int64), 0, ys.size - 1)
        ix = np.clip(np.round((np.arange(w) + 0.5) / sx - 0.5).astype(np.int64), 0, xs.size - 1)
        dy = (np.arange(h) - ys[iy]).astype(np.float32)
        dx = (np.arange(w) - xs[ix]).astype(np.float32)
        relief = grad + np.float32(compactness) * np.sqrt(dy[:, None] ** 2 + dx[None, :] ** 2)
    else:
        relief = grad
    my, mx = np.meshgrid(ys, xs, indexing="ij")
    my, mx = my.ravel(), mx.ravel()
    if move_markers and h >= 3 and w >= 3:
        best = grad[my, mx]
        by, bx = my.copy(), mx.copy()
        for oy in (-1, 0, 1):
            for ox in (-1, 0, 1):
                cy = np.clip(my + oy, 0, h - 1)
                cx = np.clip(mx + ox, 0, w - 1)
                v = grad[cy, cx]
                better = v < best
                best = np.where(better, v, best)
                by = np.where(better, cy, by)
                bx = np.where(better, cx, bx)
        my, mx = by, bx
    markers = np.zeros((h, w), np.int32)
    markers[my, mx] = np.arange(1, my.size + 1, dtype=np.int32)
    lab = watershed(relief, markers, connectivity=1)
    return make_connected(lab)


def slic_superpixels(image, region_size: float = 12.0, *, n_segments: int | None = None,
                     compactness: float = 10.0, sigma: float = 1.0, max_num_iter: int = 10) -> np.ndarray:
    """SLIC superpixels (``skimage.segmentation.slic`` in Lab space).

    Parameters
    ----------
    image : float array (H, W, 3), RGB in [0, 1]
    region_size : float
        Approximate side of a superpixel in pixels (``n_segments = H W / region_size**2``).
    n_segments : int, optional
        Overrides ``region_size``.
    compactness, sigma, max_num_iter : as in ``skimage.segmentation.slic``.

    Returns
    -------
    int64 array (H, W), labels ``0..R-1``, each one 4-connected region.

    Cost: O(H W * max_num_iter); measured in ``benchmarks/results/superpixels.md``.
    """
    from skimage.segmentation import slic

    image = _check_image(image)
    h, w = image.shape[:2]
    if n_segments is None:
        if region_size is None or region_size <= 0:
            raise ValueError(f"region_size must be positive, got {region_size}")
        n_segments = max(1, int(round(h * w / float(region_size) ** 2)))
    lab = slic(np.clip(image, 0, 1), n_segments=int(n_segments), compactness=compactness, sigma=sigma,
               max_num_iter=max_num_iter, start_label=0, enforce_connectivity=True, channel_axis=-1)
    return make_connected(lab)


_METHODS = {"watershed": watershed_superpixels, "slic": slic_superpixels}


def superpixels(image, method: str = "watershed", region_size: float = 12.0, **kwargs) -> np.ndarray:
    """Superpixels of an RGB image by the named method (see the module docstring).

    Parameters
    ----------
    image : float array (H, W, 3), RGB in [0, 1]
    method : {"watershed", "slic"}
    region_size : float
        Approximate superpixel side in pixels.
    **kwargs : passed to :func:`watershed_superpixels` or :func:`slic_superpixels`.

    Returns
    -------
    int64 array (H, W), labels ``0..R-1``, each one 4-connected region.

    Raises
    ------
    ValueError
        Unknown method, bad image.
    """
    try:
        fn = _METHODS[method]
    except KeyError:
        raise ValueError(f"unknown superpixel method {method!r}; choose one of {sorted(_METHODS)}") from None
    return fn(image, region_size, **kwargs)


@dataclass
class Superpixels:
    """A picklable superpixel function with its parameters (for loader workers and configs).

    ``Superpixels(method="watershed", region_size=12.0, compactness=None)(image)``
    equals ``superpixels(image, method, region_size, compactness=...)``; ``compactness
    = None`` uses the method's default.

    Parameters
    ----------
    method : {"watershed", "slic"}
    region_size : float
        Approximate superpixel side in pixels (about 700 superpixels on 320x320 at 12).
    compactness : float, optional
    sigma : float, optional
    """

    method: str = "watershed"
    region_size: float = 12.0
    compactness: float | None = None
    sigma: float | None = None

    def __post_init__(self):
        if self.method not in _METHODS:
            raise ValueError(f"unknown superpixel method {self.method!r}; choose one of {sorted(_METHODS)}")
        if not self.region_size > 0:
            raise ValueError(f"region_size must be positive, got {self.region_size}")

    def __call__(self, image) -> np.ndarray:
        kw = {}
        if self.compactness is not None:
            kw["compactness"] = self.compactness
        if self.sigma is not None:
            kw["sigma"] = self.sigma
        return superpixels(image, self.method, self.region_size, **kw)


# ----------------------------------------------------------- superpixels of a boundary map
def boundary_watershed(boundary: np.ndarray, region_size: float = 8.0, sigma: float = 1.0) -> np.ndarray:
    """Superpixels aligned with a boundary map: watershed from its local minima.

    Markers are the minima of the Gaussian-smoothed map within windows of about
    ``region_size / 2`` pixels (one per plateau), so regions follow the map's own
    contours. Returns int64 labels 0..R-1, each 4-connected. O(H W log(H W)).
    """
    from scipy import ndimage
    from skimage.segmentation import watershed

    b = np.asarray(boundary, dtype=np.float32)
    if sigma > 0:
        b = ndimage.gaussian_filter(b, sigma)
    size = max(3, int(round(region_size / 2)) | 1)
    minima = b == ndimage.minimum_filter(b, size=size)
    markers, _ = ndimage.label(minima)
    return make_connected(watershed(b, markers, connectivity=1))


def all_minima_watershed(boundary: np.ndarray) -> np.ndarray:
    """The finest oversegmentation of a boundary map: its watershed from every regional
    minimum (higra's ``labelisation_watershed`` on the 4-adjacency graph), int64 labels."""
    hg = import_higra()

    b = np.asarray(boundary, dtype=np.float64)
    g = hg.get_4_adjacency_graph(b.shape)
    ew = hg.weight_graph(g, b, hg.WeightFunction.mean)
    return np.asarray(hg.labelisation_watershed(g, ew), dtype=np.int64)


# ----------------------------------------------------------- boundaries and quality measures
def label_boundaries(labels, thick: bool = True) -> np.ndarray:
    """Boundary pixels of a label image (4-adjacency).

    Parameters
    ----------
    labels : int array (..., H, W)
        Leading dimensions (e.g. annotators) are processed independently.
    thick : bool
        True: a pixel is a boundary pixel when any of its 4 neighbours has another
        label (both sides of every frontier are marked).  False: only when its right
        or bottom neighbour differs (one-pixel-wide boundaries, one side marked).

    Returns
    -------
    bool array, same shape as ``labels``. Cost O(size).
    """
    labels = np.asarray(labels)
    if labels.ndim < 2:
        raise ValueError(f"labels must be at least 2-D, got shape {labels.shape}")
    b = np.zeros(labels.shape, bool)
    dh = labels[..., :, 1:] != labels[..., :, :-1]
    dv = labels[..., 1:, :] != labels[..., :-1, :]
    b[..., :, :-1] |= dh
    b[..., :-1, :] |= dv
    if thick:
        b[..., :, 1:] |= dh
        b[..., 1:, :] |= dv
    return b


def boundary_recall(sp, segmentations, tolerance: float = 2.0) -> float:
    """Fraction of ground-truth boundary pixels within ``tolerance`` pixels of a superpixel boundary.

    Parameters
    ----------
    sp : int array (H, W)
        Superpixel labels.
    segmentations : int array (H, W) or (A, H, W)
        Ground-truth partitions; boundary pixels of all annotators are pooled.
    tolerance : float
        Euclidean distance in pixels.

    Returns
    -------
    float in [0, 1] (1.0 when the ground truth has no boundary).

    Cost: O(A H W) (one distance transform of the superpixel boundaries).
    """
    from scipy.ndimage import distance_transform_edt

    sp = np.asarray(sp)
    seg = np.asarray(segmentations)
    if seg.ndim == 2:
        seg = seg[None]
    if seg.shape[1:] != sp.shape:
        raise ValueError(f"shape mismatch: superpixels {sp.shape}, segmentations {seg.shape}")
    spb = label_boundaries(sp, thick=False)
    dist = distance_transform_edt(~spb)
    gtb = label_boundaries(seg, thick=False)
    n = int(gtb.sum())
    if n == 0:
        return 1.0
    hit = (dist[None] <= tolerance) & gtb
    return float(hit.sum()) / n


def achievable_segmentation_accuracy(sp, segmentations) -> float:
    """Achievable segmentation accuracy of superpixels, averaged over annotators.

    ``ASA = (1/N) sum_s max_g |s intersect g|``: the pixel accuracy of the best
    segmentation made of whole superpixels.

    Parameters
    ----------
    sp : int array (H, W), labels ``0..R-1``
    segmentations : int array (H, W) or (A, H, W)

    Returns
    -------
    float in (0, 1]. Cost O(A H W) (one bincount per annotator).
    """
    sp = np.asarray(sp).astype(np.int64)
    seg = np.asarray(segmentations)
    if seg.ndim == 2:
        seg = seg[None]
    r = int(sp.max()) + 1
    out = []
    for a in range(seg.shape[0]):
        _, g = np.unique(seg[a], return_inverse=True)
        g = g.reshape(sp.shape)
        k = int(g.max()) + 1
        counts = np.bincount((sp * k + g).ravel(), minlength=r * k).reshape(r, k)
        out.append(counts.max(1).sum() / sp.size)
    return float(np.mean(out))


def make_superpixels(method: str, boundary: np.ndarray, image=None, region_size: float = 8.0,
                     sigma: float = 1.0) -> np.ndarray:
    """Superpixel labels (H, W) of a boundary map by ``method`` (``boundary_watershed``,
    ``all_minima`` or ``color_watershed``, which reads the image): the one dispatch of
    :meth:`hiseg.segmentation.Pipeline.make_superpixels` and of the exported chain
    (:mod:`hiseg.export.runtime`). ValueError for a map that is not a non-empty (H, W) array,
    an image of another size, ``color_watershed`` without the image, an unknown method."""
    b = np.asarray(boundary)
    if b.ndim != 2 or b.size == 0:
        raise ValueError(f"boundary map must be a non-empty (H, W) array, got shape {b.shape}")
    if image is not None and np.asarray(image).shape[:2] != b.shape:
        raise ValueError(f"image {np.asarray(image).shape[:2]} and boundary map {b.shape} differ in size")
    if method == "boundary_watershed":
        return boundary_watershed(b, region_size, sigma)
    if method == "all_minima":
        return all_minima_watershed(b)
    if method != "color_watershed":
        raise ValueError(f"unknown superpixel method {method!r}")
    if image is None:
        raise ValueError("superpixels='color_watershed' needs the image")
    return Superpixels(region_size=region_size)(image)
