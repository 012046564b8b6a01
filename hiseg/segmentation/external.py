"""Hierarchies from any segmenter: another detector's boundary map, or masks (Segment Anything's
automatic masks, a stack of boolean masks, label images), made into the same result as
:meth:`Segmenter.segment <hiseg.segmentation.segmenter.Segmenter.segment>` gives: UCM, saliency,
cuts, files, the explorer.

>>> from hiseg import hierarchy_from_masks, hierarchy_from_boundary_map
>>> res = hierarchy_from_masks(sam_masks)               # SAM's list of dicts, (K, H, W) bools, label images
>>> res.cut(n_regions=2)                                # wholes, parts, subparts: their nesting
>>> res = hierarchy_from_boundary_map(pidinet_map)      # (H, W) in [0, 1]: the one chain after the network

A boundary map goes through the one chain (:meth:`hiseg.segmentation.Pipeline.hierarchy_of_map`:
superpixels on the map, the frontier mean, average linkage), as a network's map does.

Masks: the finest regions are the pixels that the same masks hold (connected); two regions are
together at the granularity of the smallest mask that holds both, ``log(area) / log(H W)`` in
(0, 1] (1: no mask holds both), and the hierarchy is the subdominant ultrametric of that
dissimilarity on the regions' adjacency graph (:func:`hiseg.subdominant_ultrametric`: the
largest ultrametric below it). Masks that nest give exactly their nesting: the smallest mask
holding two regions is their lowest common ancestor in the masks' tree, and its regions are
together below its level. Overlapping masks at several granularities give the hierarchy their
sizes order. Masks below ``min_score`` (SAM's ``predicted_iou`` times ``stability_score``) are
left out. Cost O(K H W) for K masks, memory O(H W + regions x masks held).
"""
from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Optional

import numpy as np

__all__ = ["hierarchy_from_masks", "hierarchy_from_boundary_map", "decode_rle", "read_boundary_map", "read_masks",
           "MAX_MASKS", "BOUNDARY_SUFFIXES", "MASK_SUFFIXES", "MaskError"]

#: More masks than this are refused (each is an (H, W) pass; SAM gives some tens to hundreds).
MAX_MASKS = 10_000
#: The files ``hiseg predict --boundaries DIR`` and ``--masks DIR`` read for an image NAME.
BOUNDARY_SUFFIXES = (".png", ".npy", ".mat")
MASK_SUFFIXES = (".npz", ".json")


class MaskError(ValueError):
    """Masks or a boundary map that cannot make a hierarchy (one line naming what is wrong)."""


# ----------------------------------------------------------------------------- COCO run-length encoding
def decode_rle(rle) -> np.ndarray:
    """The (H, W) bool mask of a COCO run-length encoding ``{"size": [H, W], "counts": ...}``:
    ``counts`` a list of run lengths, or the compressed string of ``pycocotools``
    (``mask.encode``: 6-bit groups from ``chr(48)``, each run after the second stored as the
    difference from the run two before). Runs alternate 0 and 1 from a 0 run, in column-major
    order. MaskError for anything else, or runs that do not add up to H W."""
    if not isinstance(rle, dict) or "size" not in rle or "counts" not in rle:
        raise MaskError(f"an RLE mask is a dict with 'size' and 'counts', got {type(rle).__name__}")
    try:
        h, w = (int(v) for v in rle["size"])
    except (TypeError, ValueError):
        raise MaskError(f"RLE size must be [H, W], got {rle['size']!r}") from None
    counts = rle["counts"]
    if isinstance(counts, bytes):
        counts = counts.decode("ascii", "replace")
    runs = _uncompress(counts) if isinstance(counts, str) else counts
    try:
        runs = np.asarray(runs, dtype=np.int64)
    except (TypeError, ValueError):
        raise MaskError("RLE counts must be a list of integers or a compressed string") from None
    if runs.ndim != 1 or (runs < 0).any() or int(runs.sum()) != h * w or h < 0 or w < 0:
        raise MaskError(f"RLE counts do not decode to a {h}x{w} mask (runs add up to {int(runs.sum())}, "
                        f"{'some negative' if runs.size and (runs < 0).any() else 'not H W'})")
    values = np.zeros(runs.size, bool)
    values[1::2] = True
    return np.repeat(values, runs).reshape(w, h).T


def _uncompress(s: str) -> list:
    """The run lengths of pycocotools' compressed RLE string (its ``rleFrString``)."""
    runs, i = [], 0
    while i < len(s):
        x, k, more = 0, 0, True
        while more:
            if i >= len(s):
                raise MaskError("RLE counts string ends inside a number: not a compressed COCO RLE")
            c = ord(s[i]) - 48
            if not 0 <= c < 64:
                raise MaskError(f"RLE counts string holds {s[i]!r}: not a compressed COCO RLE")
            x |= (c & 0x1F) << (5 * k)
            more = bool(c & 0x20)
            i += 1
            k += 1
            if not more and c & 0x10:
                x |= -1 << (5 * k)
        if len(runs) > 2:
            x += runs[-2]
        runs.append(x)
    return runs


# ----------------------------------------------------------------------------- reading inputs
def _as_masks(masks, scores=None):
    """(list of (H, W) bool masks, scores) of any accepted form (see :func:`hierarchy_from_masks`)."""
    if isinstance(masks, np.ndarray) and masks.ndim == 2:
        masks = [masks]  # one label image
    if isinstance(masks, np.ndarray) and masks.ndim == 3:
        if masks.dtype != bool:
            raise MaskError(f"a (K, H, W) mask array must be boolean, got {masks.dtype} (label images: give them "
                            "as a list of (H, W) integer arrays)")
        out = list(masks)
    elif isinstance(masks, (list, tuple)):
        if not masks:
            raise MaskError("no masks: give SAM's mask list, a (K, H, W) boolean array or label images")
        out, found = [], []
        for i, m in enumerate(masks):
            if isinstance(m, dict):  # SAM's automatic mask generator
                seg = m.get("segmentation")
                if seg is None:
                    raise MaskError(f"mask {i}: a dict without 'segmentation' (SAM's output has it)")
                mask = decode_rle(seg) if isinstance(seg, dict) else np.asarray(seg)
                if mask.dtype != bool:
                    raise MaskError(f"mask {i}: 'segmentation' must be a boolean (H, W) array or an RLE, got "
                                    f"{mask.dtype}")
                out.append(mask)
                found.append(float(m.get("predicted_iou", 1.0)) * float(m.get("stability_score", 1.0)))
            else:
                a = np.asarray(m)
                if a.ndim != 2:
                    raise MaskError(f"mask {i}: expected an (H, W) array, got shape {a.shape}")
                if a.dtype == bool:
                    out.append(a)
                elif a.dtype.kind in "iu":  # a label image: each label one mask
                    out.extend(a == v for v in np.unique(a))
                else:
                    raise MaskError(f"mask {i}: {a.dtype} values: give boolean masks or integer label images")
        if found and scores is None:
            scores = found if len(found) == len(out) else None
    else:
        raise MaskError(f"masks: expected SAM's list of dicts, a (K, H, W) boolean array or label images, "
                        f"got {type(masks).__name__}")
    if len(out) > MAX_MASKS:
        raise MaskError(f"{len(out)} masks, more than {MAX_MASKS} (each is a pass over the image): keep the best by "
                        "score, or raise hiseg.segmentation.external.MAX_MASKS")
    shapes = {m.shape for m in out}
    if len(shapes) > 1:
        raise MaskError(f"masks of different shapes: {sorted(shapes)[:3]}")
    s = np.ones(len(out)) if scores is None else np.asarray(scores, dtype=np.float64).ravel()
    if s.shape != (len(out),) or not np.isfinite(s).all():
        raise MaskError(f"scores: expected {len(out)} finite numbers, one per mask")
    return out, s


def read_masks(path) -> list:
    """The masks of one file: ``.npz`` (``masks``: (K, H, W) bool, optional ``scores``: (K,)),
    or SAM-style ``.json`` (a list of dicts with ``segmentation`` as an RLE). Returns SAM-style
    dicts for :func:`hierarchy_from_masks`. MaskError naming the file for anything else."""
    path = Path(path)
    try:
        if path.suffix.lower() == ".npz":
            with np.load(path, allow_pickle=False) as z:
                if "masks" not in z:
                    raise MaskError(f"{path.name}: no 'masks' array (K, H, W) in the .npz")
                masks, scores = z["masks"], z["scores"] if "scores" in z else np.ones(len(z["masks"]))
            if masks.ndim != 3 or masks.dtype != bool:
                raise MaskError(f"{path.name}: 'masks' must be a (K, H, W) boolean array, got {masks.dtype} "
                                f"{masks.shape}")
            return [{"segmentation": m, "predicted_iou": float(s)} for m, s in zip(masks, scores)]
        items = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError, UnicodeDecodeError) as e:
        if isinstance(e, MaskError):
            raise
        raise MaskError(f"{path.name}: not readable masks ({type(e).__name__}: {e})".splitlines()[0]) from None
    if isinstance(items, dict) and "annotations" in items:  # a COCO-style file
        items = items["annotations"]
    if not isinstance(items, list) or not all(isinstance(i, dict) for i in items):
        raise MaskError(f"{path.name}: expected a list of SAM-style dicts with 'segmentation'")
    return items


def read_boundary_map(path) -> np.ndarray:
    """(H, W) float32 boundary map in [0, 1] of another detector's file: an 8- or 16-bit PNG
    (value / 255 or / 65535), a ``.npy`` of floats in [0, 1] (or integers as the PNGs), or a
    ``.mat`` holding a BSDS ``ucm2`` ((2H+1, 2W+1): taken at pixel resolution, ``ucm2[2::2, 2::2]``)
    or one 2-D array. MaskError naming the file for anything else."""
    path = Path(path)
    suffix = path.suffix.lower()
    try:
        if suffix == ".png":
            import cv2

            a = cv2.imread(str(path), cv2.IMREAD_UNCHANGED)
            if a is None:
                raise MaskError(f"{path.name}: not a readable PNG")
            if a.ndim == 3:
                a = a[..., 0] if (a[..., :1] == a[..., :3]).all() else None
                if a is None:
                    raise MaskError(f"{path.name}: a colour PNG; a boundary map is one channel")
        elif suffix == ".npy":
            a = np.load(path, allow_pickle=False)
        elif suffix == ".mat":
            import scipy.io

            m = {k: v for k, v in scipy.io.loadmat(path).items() if not k.startswith("__")}
            if "ucm2" in m:
                a = np.asarray(m["ucm2"], np.float64)[2::2, 2::2]
            else:
                arrays = [v for v in m.values() if isinstance(v, np.ndarray) and v.ndim == 2 and v.dtype.kind in "fiub"]
                if len(arrays) != 1:
                    raise MaskError(f"{path.name}: expected a 'ucm2' or exactly one 2-D array, found {sorted(m)}")
                a = arrays[0]
        else:
            raise MaskError(f"{path.name}: boundary maps are {', '.join(BOUNDARY_SUFFIXES)} files")
    except (OSError, ValueError) as e:
        if isinstance(e, MaskError):
            raise
        raise MaskError(f"{path.name}: not a readable boundary map ({type(e).__name__}: {e})".splitlines()[0]) from None
    return _as_probability(a, path.name)


def _as_probability(a, name: str) -> np.ndarray:
    a = np.asarray(a)
    if a.ndim != 2 or a.size == 0:
        raise MaskError(f"{name}: a boundary map is (H, W), got shape {a.shape}")
    if a.dtype == np.uint8:
        return (a / 255.0).astype(np.float32)
    if a.dtype == np.uint16:
        return (a / 65535.0).astype(np.float32)
    if a.dtype.kind not in "fb":
        raise MaskError(f"{name}: {a.dtype} values: give floats in [0, 1] or 8- / 16-bit integers")
    a = a.astype(np.float32)
    if not np.isfinite(a).all() or a.min() < 0 or a.max() > 1:
        raise MaskError(f"{name}: a boundary map holds probabilities in [0, 1], got values in "
                        f"[{np.nanmin(a):.4g}, {np.nanmax(a):.4g}]" + (" and NaN" if np.isnan(a).any() else ""))
    return a


# ----------------------------------------------------------------------------- hierarchies
def hierarchy_from_boundary_map(boundary, image=None, pipeline=None):
    """The :class:`~hiseg.segmentation.result.SegmentationResult` of another detector's (H, W)
    boundary map (floats in [0, 1], or 8- / 16-bit integers), through the one chain after the
    network (``pipeline``: default :class:`~hiseg.segmentation.Pipeline`'s: boundary watershed
    superpixels, frontier mean, average linkage). ``image`` (H, W, 3): for the pipeline's colour
    steps, if any; it must be the map's size. MaskError for a map that is not one."""
    from .pipeline import Pipeline
    from .segmenter import Segmenter

    b = _as_probability(boundary, "boundary map")
    if image is not None and np.asarray(image).shape[:2] != b.shape:
        raise MaskError(f"the boundary map is {b.shape[0]}x{b.shape[1]} and the image "
                        f"{np.asarray(image).shape[0]}x{np.asarray(image).shape[1]}: they must be the same size")
    seg = Segmenter(None, pipeline=Pipeline() if pipeline is None else pipeline)
    img = None if image is None else seg.read(np.asarray(image))[0]
    return seg.finish(img, b)


def hierarchy_from_masks(masks, image=None, scores=None, min_score: float = 0.0):
    """The :class:`~hiseg.segmentation.result.SegmentationResult` of masks (see the module docstring).

    ``masks``: SAM's automatic mask generator output (a list of dicts: ``segmentation`` a bool
    (H, W) array or a COCO RLE, ``predicted_iou``, ``stability_score``), a (K, H, W) boolean
    array, or label images (a list of (H, W) integer arrays, or one: each label is a mask; a
    list of several annotators' segmentations pools them). ``scores``: one per mask (default:
    SAM's ``predicted_iou * stability_score``, else 1); masks below ``min_score`` are left out.
    ``image``: (H, W, 3), checked to be the masks' size (the explorer and overlays draw it).
    MaskError in one line for no masks, masks of different shapes or not boolean, an RLE that
    does not decode, an image of another size, more than :data:`MAX_MASKS` masks."""
    from ..core.graph import region_adjacency_graph
    from ..core.ultrametric import subdominant_ultrametric
    from .result import SegmentationResult

    t0 = time.perf_counter()
    ms, s = _as_masks(masks, scores)
    keep = s >= min_score
    ms = [m for m, k in zip(ms, keep) if k]
    if not ms:
        raise MaskError(f"no mask has a score of {min_score} or more")
    h, w = ms[0].shape
    if h * w == 0:
        raise MaskError("masks of no pixels")
    if image is not None and np.asarray(image).shape[:2] != (h, w):
        raise MaskError(f"the masks are {h}x{w} and the image {np.asarray(image).shape[0]}x"
                        f"{np.asarray(image).shape[1]}: they must be the same size")
    labels, member = _finest_regions(ms)
    rag = region_adjacency_graph(labels)
    g = rag.graph
    level = np.log(np.array([m.sum() for m in ms], np.float64).clip(1)) / np.log(max(h * w, 2))
    # dissimilarity of each RAG edge: the level of the smallest mask holding both regions (1: none)
    d = np.ones(g.num_edges)
    order = np.argsort(level)[::-1]  # coarse to fine: a finer mask overwrites
    for k in order:
        both = member[g.sources, k] & member[g.targets, k]
        d[both] = level[k]
    if g.num_vertices == 1:
        return SegmentationResult(rag, np.zeros(0), _single(rag), None, {"hierarchy": time.perf_counter() - t0})
    u, hierarchy = subdominant_ultrametric(g, d, return_hierarchy=True)
    return SegmentationResult(rag, np.asarray(u), hierarchy, None, {"hierarchy": time.perf_counter() - t0})


def _single(rag):
    from ..core.ultrametric import build_hierarchy

    return build_hierarchy(rag.graph, np.zeros(0, dtype=np.float64))


def _finest_regions(masks: list) -> tuple:
    """(labels (H, W) int64 of the connected regions of pixels held by the same masks, their
    membership (regions, K) bool). Pixels are told apart by a 64-bit hash of the masks holding
    them (a random key per mask, summed): two different sets collide with probability ~2^-64."""
    from scipy import sparse
    from scipy.sparse.csgraph import connected_components

    h, w = masks[0].shape
    keys = np.random.default_rng(0x5eed).integers(1, np.iinfo(np.int64).max, size=len(masks), dtype=np.int64)
    code = np.zeros((h, w), np.int64)
    for m, key in zip(masks, keys):
        code[m] += key  # wraps modulo 2^64: still a sum of keys
    # the 4-neighbours of equal signature joined: connected components of that pixel graph, O(H W)
    idx = np.arange(h * w).reshape(h, w)
    right, down = code[:, :-1] == code[:, 1:], code[:-1] == code[1:]
    a = np.concatenate([idx[:, :-1][right], idx[:-1][down]])
    b = np.concatenate([idx[:, 1:][right], idx[1:][down]])
    graph = sparse.coo_matrix((np.ones(a.size, np.int8), (a, b)), shape=(h * w, h * w))
    n, flat = connected_components(graph, directed=False)
    labels = flat.reshape(h, w).astype(np.int64)
    member = np.zeros((n, len(masks)), bool)
    first = np.full(n, -1, np.int64)
    first[labels.ravel()[::-1]] = np.arange(h * w - 1, -1, -1)  # one pixel of each region
    ys, xs = np.divmod(first, w)
    for k, m in enumerate(masks):
        member[:, k] = m[ys, xs]
    return labels, member


# ----------------------------------------------------------------------------- a Segmenter's backend
class ExternalFiles:
    """The backend of ``hiseg predict --boundaries DIR`` / ``--masks DIR``: each image NAME's
    boundary map (``DIR/NAME`` + one of :data:`BOUNDARY_SUFFIXES`) or masks (:data:`MASK_SUFFIXES`)
    from another segmenter, read when the image is (:meth:`result_for`), instead of a network."""

    fixed = ()
    head = None
    model = None
    device = "cpu"

    def __init__(self, folder, kind: str):
        if kind not in ("boundaries", "masks"):
            raise ValueError(f"kind must be 'boundaries' or 'masks', got {kind!r}")
        self.folder, self.name = Path(folder), kind
        if not self.folder.is_dir():
            raise FileNotFoundError(f"--{kind} {folder}: not a folder")

    def file_for(self, stem: str) -> Path:
        """``DIR/stem`` with the first suffix found; MaskError naming what was looked for."""
        suffixes = BOUNDARY_SUFFIXES if self.name == "boundaries" else MASK_SUFFIXES
        for s in suffixes:
            p = self.folder / f"{stem}{s}"
            if p.is_file():
                return p
        raise MaskError(f"no {self.name[:-1] if self.name == 'masks' else 'boundary map'} for it in {self.folder} "
                        f"({stem} + {' / '.join(suffixes)})")

    def result_for(self, seg, path, work: np.ndarray, out_shape):
        """The result of image ``path`` (its working image ``work``, full (H, W) ``out_shape`` or None)."""
        full = tuple(out_shape) if out_shape is not None else work.shape[:2]
        src = self.file_for(Path(path).stem)
        if self.name == "masks":
            masks = read_masks(src)
            first = masks[0].get("segmentation") if masks and isinstance(masks[0], dict) else None
            size = tuple(first["size"]) if isinstance(first, dict) else np.shape(first)
            if masks and tuple(size) != full:
                raise MaskError(f"{src.name}: masks of {size[0]}x{size[1]} for an image of {full[0]}x{full[1]}")
            res = hierarchy_from_masks(masks)
            if out_shape is not None:  # the masks are at the image's own size: so is the hierarchy
                res.output_shape = None
            return res
        b = read_boundary_map(src)
        if b.shape != full:
            raise MaskError(f"{src.name}: a boundary map of {b.shape[0]}x{b.shape[1]} for an image of "
                            f"{full[0]}x{full[1]}: they must be the same size")
        if b.shape != work.shape[:2]:  # a large image runs at its working resolution
            import cv2

            b = cv2.resize(b, (work.shape[1], work.shape[0]), interpolation=cv2.INTER_AREA)
        return seg.finish(work, b, out_shape)

    def boundary_map(self, image, pipeline=None, tile: int = 0):
        raise ValueError(f"the {self.name} come from files, one per image: use result_for")

    def worker_copy(self) -> "ExternalFiles":
        return self
