"""One segmentation pipeline: image -> boundary map -> superpixels -> RAG with frontier
lengths -> edge weights -> hierarchy -> UCM and cuts.

:class:`Pipeline` is the one configurable object of that chain. It is stored in every
checkpoint (``metadata["pipeline"]`` of a slim checkpoint, the ``pipeline``
hyper-parameter of a Lightning one), and inference, validation and the training loss
all build their hierarchies through it, so a network is trained on the hierarchy it is
judged by.

Without a network (``Pipeline.classical()``, what ``Segmenter()`` uses) the boundary map
is the colour gradient of the image (:func:`~hiseg.segmentation.superpixels.color_gradient`,
``sigma``), on colour-watershed superpixels, with the closest linkage.

Settings
--------
superpixels : ``"boundary_watershed"`` (default)
    watershed of the (Gaussian-smoothed, ``sigma``) predicted boundary map from its
    local minima in windows of about ``region_size / 2`` px: regions follow the
    network's own contours, and the frontiers lie on the crests of the map, as in the
    oriented watershed of gPb-owt-ucm;
    ``"all_minima"``: the watershed of the map from every regional minimum (higra's
    ``labelisation_watershed`` on the 4-adjacency graph): the finest oversegmentation;
    ``"color_watershed"``: the image-gradient watershed superpixels of the first
    checkpoints (``region_size``), independent of the prediction.
linkage : ``"average"`` (default), ``"single"`` or ``"closest"``
    average: :func:`hiseg.average_linkage_ultrametric` with frontier lengths (the mean
    boundary strength between two regions decides when they merge); single:
    :func:`hiseg.subdominant_ultrametric` (min-max; leaks through one weak frontier pixel
    run, measured worse on BSDS val, see ``experiments/segmentation/results/hierarchy_variants``);
    closest: the weights scaled to a maximum of 1, then the closest ultrametric fitted
    by :func:`hiseg.fit_ultrametric` (``fit_iterations``; 0: single linkage of them) -- the
    classical path's hierarchy, not differentiable (inference only).
fit_iterations : int, default 50
    see ``linkage="closest"``.
scales : tuple of floats, default ``(1.0,)``
    multi-scale inference: the boundary map is the mean of the network's maps on the
    image resized by each scale (bilinear), resized back. Cost grows with sum(scale^2).
region_size, sigma : floats
    see ``superpixels``.
max_pixels : int, default 500,000
    working resolution: a larger image is resized (area interpolation, aspect kept) to
    at most this many pixels before the network, and its saliency map and cuts are
    brought back to the full resolution (nearest-neighbour labels: the UCM is drawn on
    the full-resolution frontiers). The network was trained at BSDS scale (0.15 Mpx),
    so this is also closer to its training distribution. 0: no limit.
flip : bool, default False
    test-time horizontal flip: the boundary map of every scale is the mean of the
    network's map on the image and its mirror (mirrored back). Doubles the network's cost.
merge_head : dict or None, default None
    a learned edge weighting (:class:`~hiseg.segmentation.merging.MergeHead`, stored as
    its plain-value spec): instead of the mean boundary along each frontier, the head's
    output on the frontier's features (boundary statistics, length, region sizes, colour
    and texture differences) is the weight average linkage merges on. It is tied to the
    network it was trained on (``merge_head["network"]``, a fingerprint of its weights):
    :meth:`Pipeline.boundary_map` refuses another one. None: the frontier mean.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, field, replace
from typing import Any, Mapping, Optional

import numpy as np

from ..core._lazy import lazy_torch
from ..core.graph import BatchedGraph, region_adjacency_graph
from ..core.average_linkage import build_average_linkage_hierarchy
from ..core.device import upload_indices
from ..core.ultrametric import build_hierarchy, subdominant_ultrametric
from .pooling import MergeHeadError, TorchEdgeFeatures, batch_frontier_pixels, edge_features, frontier_mean
from .superpixels import color_gradient, make_superpixels

#: imported at its first use (:mod:`hiseg.core._lazy`): the settings and the chain after the network
#: (:meth:`Pipeline.hierarchy_of_map`, numpy and higra) need none; the network's maps and the
#: differentiable twins of the training step do
torch = lazy_torch()

__all__ = ["Pipeline", "PipelineError", "SUPERPIXEL_METHODS", "LINKAGES", "tiled_forward"]

SUPERPIXEL_METHODS = ("boundary_watershed", "all_minima", "color_watershed")
LINKAGES = ("average", "single", "closest")


class PipelineError(ValueError):
    """Pipeline settings that are missing, unknown or do not fit the input."""


DIVERGED = ("non-finite boundary map (NaN or infinite network output): the network diverged; the last "
            "checkpoint stays loadable; lower the learning rate or check the data")


#: Context around each tile of :meth:`Pipeline.boundary_map` (pixels): the shipped networks'
#: receptive field. Measured on BSDS images enlarged to 900x700, tiles of 512: at 112 the tiled
#: map equals the whole-image pass exactly (both shipped networks and the 675k-parameter GPU
#: twin); at 96 within 2.1e-5; the former 48 left differences up to 0.2 in probability along
#: the tile seams of every image whose working size exceeds 512 pixels on a side. A multiple of
#: 8, the networks' stride, so that tiles keep the whole-image sampling grid.
TILE_MARGIN = 112


def tiled_forward(model: torch.nn.Module, x: torch.Tensor, tile: int = 512, margin: int = TILE_MARGIN) -> torch.Tensor:
    """``model(x)`` computed tile by tile (``tile`` x ``tile`` outputs, each from its tile
    plus ``margin`` pixels of context): peak memory of one tile, output equal to the
    whole-image pass up to the influence of pixels beyond the margin. ``tile`` 0 or an
    input no larger than one tile: one pass."""
    hh, ww = x.shape[-2:]
    if tile <= 0 or (hh <= tile and ww <= tile):
        return model(x)
    out = None
    for y0 in range(0, hh, tile):
        for x0 in range(0, ww, tile):
            y1, x1 = min(y0 + tile, hh), min(x0 + tile, ww)
            ya, xa = max(0, y0 - margin), max(0, x0 - margin)
            o = model(x[..., ya:min(hh, y1 + margin), xa:min(ww, x1 + margin)])
            if out is None:
                out = o.new_empty(x.shape[0], o.shape[1], hh, ww)
            out[..., y0:y1, x0:x1] = o[..., y0 - ya:y1 - ya, x0 - xa:x1 - xa]
    return out


def rescale(images: torch.Tensor, s: float) -> torch.Tensor:
    """The (B, C, H, W) batch bilinearly resized by ``s`` to ``floor(H*s)`` x ``floor(W*s)``, at
    least one pixel a side (torch refuses a 0 size: a 1-pixel-high image at 0.5 stays 1 high).
    Cost: one interpolation."""
    h, w = images.shape[-2:]
    F = torch.nn.functional
    if int(h * s) >= 1 and int(w * s) >= 1:
        return F.interpolate(images, scale_factor=s, mode="bilinear", align_corners=False,
                             recompute_scale_factor=False)
    return F.interpolate(images, size=(max(1, int(h * s)), max(1, int(w * s))), mode="bilinear", align_corners=False)


@dataclass(frozen=True)
class Pipeline:
    """The segmentation chain's settings and steps (see the module docstring)."""

    superpixels: str = "boundary_watershed"
    linkage: str = "average"
    region_size: float = 8.0
    sigma: float = 1.0
    scales: tuple = field(default=(1.0,))
    max_pixels: int = 500_000
    fit_iterations: int = 50
    flip: bool = False
    merge_head: Optional[dict] = None

    def __post_init__(self):
        if self.superpixels not in SUPERPIXEL_METHODS:
            raise PipelineError(f"unknown superpixels {self.superpixels!r}; expected one of {SUPERPIXEL_METHODS}")
        if self.linkage not in LINKAGES:
            raise PipelineError(f"unknown linkage {self.linkage!r}; expected one of {LINKAGES}")
        try:
            scales = tuple(float(s) for s in self.scales)
        except (TypeError, ValueError):
            raise PipelineError(f"scales must be a sequence of numbers, got {self.scales!r}") from None
        if not scales or not all(np.isfinite(s) and 0.1 <= s <= 4 for s in scales):
            raise PipelineError(f"scales must be non-empty, each in [0.1, 4], got {self.scales!r}")
        object.__setattr__(self, "scales", scales)
        mp = self.max_pixels
        if isinstance(mp, bool) or not isinstance(mp, (int, np.integer)) or not (mp == 0 or mp >= 4096):
            raise PipelineError(f"max_pixels must be an integer >= 4096, or 0 for no limit, got {mp!r}")
        object.__setattr__(self, "max_pixels", int(mp))
        fi = self.fit_iterations
        if isinstance(fi, bool) or not isinstance(fi, (int, np.integer)) or fi < 0:
            raise PipelineError(f"fit_iterations must be an integer >= 0, got {fi!r}")
        object.__setattr__(self, "fit_iterations", int(fi))
        for name in ("region_size", "sigma"):
            v = getattr(self, name)
            if not isinstance(v, (int, float)) or not np.isfinite(v) or v < 0 or (name == "region_size" and v < 2):
                raise PipelineError(f"{name} must be a finite number (region_size >= 2, sigma >= 0), got {v!r}")
        if not isinstance(self.flip, (bool, np.bool_)):
            raise PipelineError(f"flip must be True or False, got {self.flip!r}")
        object.__setattr__(self, "flip", bool(self.flip))
        head = None
        if self.merge_head is not None:
            from .merging import MergeHead  # a torch module: only a pipeline with a learned head imports torch

            if isinstance(self.merge_head, MergeHead):
                object.__setattr__(self, "merge_head", self.merge_head.to_spec())
            try:
                head = MergeHead.from_spec(self.merge_head)
            except MergeHeadError as e:
                raise PipelineError(str(e)) from None
            if self.linkage == "closest":
                raise PipelineError("merge_head needs linkage 'average' or 'single' (the closest fit rescales the weights)")
        object.__setattr__(self, "_head", head)

    def __repr__(self) -> str:
        parts = []
        for k in self.__dataclass_fields__:
            v = getattr(self, k)
            if k == "merge_head" and v is not None:
                v = f"MergeHead(features={v['features']}, hidden={v.get('hidden', [])}, network={v.get('network')})"
            else:
                v = repr(v)
            parts.append(f"{k}={v}")
        return f"Pipeline({', '.join(parts)})"

    @property
    def head(self) -> Optional[MergeHead]:
        """The :class:`~hiseg.segmentation.merging.MergeHead` of ``merge_head`` (None without one)."""
        return self._head

    def check_model(self, model: Optional[torch.nn.Module]) -> None:
        """PipelineError naming ``merge_head.network`` when the merge head was trained on
        another network's maps than ``model``'s."""
        if self._head is not None:
            try:
                self._head.check_network(model)
            except MergeHeadError as e:
                raise PipelineError(str(e)) from None

    @classmethod
    def classical(cls, region_size: float = 8.0, fit_iterations: int = 50, **settings) -> "Pipeline":
        """The chain without a network: colour gradient, colour-watershed superpixels, closest fit."""
        return cls(superpixels="color_watershed", linkage="closest", region_size=region_size,
                   fit_iterations=fit_iterations, **settings)

    # ------------------------------------------------------------------ storage
    def to_dict(self) -> dict:
        d = asdict(self)
        d["scales"] = list(self.scales)
        return d

    @classmethod
    def from_dict(cls, d: Optional[Mapping[str, Any]], *, source: str = "checkpoint") -> "Pipeline":
        """Rebuild from stored settings; missing or unknown settings raise :class:`PipelineError`."""
        if d is None:
            raise PipelineError(
                f"{source} has no pipeline settings (metadata['pipeline'] or the 'pipeline' hyper-parameter); "
                "it predates hiseg's segmentation pipeline: pass pipeline=hiseg.segmentation.Pipeline(...) "
                "explicitly, e.g. Pipeline(superpixels='color_watershed', linkage='single') for the old behaviour")
        if not isinstance(d, Mapping):
            raise PipelineError(f"{source}: pipeline settings must be a mapping, got {type(d).__name__}")
        known = set(cls.__dataclass_fields__)
        unknown = sorted(set(d) - known)
        if unknown:
            raise PipelineError(f"{source}: unknown pipeline setting(s) {unknown}; known: {sorted(known)}")
        return cls(**dict(d))

    def with_overrides(self, **settings) -> "Pipeline":
        """A copy with the settings that are not ``None`` replaced (command-line overrides)."""
        given = {k: v for k, v in settings.items() if v is not None}
        return replace(self, **given) if given else self

    # ------------------------------------------------------------------ steps
    def working_size(self, height: int, width: int) -> tuple[int, int]:
        """The (H, W) the chain runs at for an image of ``height`` x ``width`` (see ``max_pixels``)."""
        if self.max_pixels == 0 or height * width <= self.max_pixels:
            return int(height), int(width)
        f = (self.max_pixels / float(height * width)) ** 0.5
        return max(1, int(height * f)), max(1, int(width * f))

    def boundary_map(self, model: Optional[torch.nn.Module], image: np.ndarray, device="cpu",
                     tile: int = 512) -> np.ndarray:
        """(H, W) float32 boundary probability of ``model`` on an (H, W, 3) float image:
        :meth:`maps` of a batch of one, in ``torch.inference_mode``; without a model, the image's colour
        gradient (``sigma``). Inputs larger than ``tile`` x ``tile`` go through the network in
        tiles with a margin of :data:`TILE_MARGIN` pixels (the shipped networks' receptive
        field: the tiled map equals the whole-image pass), so memory stays bounded whatever
        the image size; 0 disables tiling."""
        self.check_model(model)
        if model is None:
            return color_gradient(image, self.sigma)
        return self.network_map(model, image, device, tile)

    def network_map(self, model: torch.nn.Module, image: np.ndarray, device="cpu", tile: int = 512) -> np.ndarray:
        """:meth:`boundary_map` of a network, without the check that the merge head was trained on
        its maps (a Segmenter makes it once, when it is given this pipeline)."""
        with torch.inference_mode():
            x = torch.from_numpy(np.ascontiguousarray(image.transpose(2, 0, 1)))[None].to(device)
            return self.maps(lambda t: tiled_forward(model, t, tile), x)[0].cpu().numpy()

    # ------------------------------------------------------------------ the batched, differentiable steps
    def maps(self, forward, images: torch.Tensor, prob: Optional[torch.Tensor] = None) -> torch.Tensor:
        """(B, H, W) float32 boundary maps of a batch of images (B, 3, H, W), differentiable, on
        the images' device: the mean over ``scales`` of ``sigmoid(forward(image at that scale))``
        (bilinear there and back), each averaged with its mirror's with ``flip``. ``forward``: the
        network (any callable of a batch to (B, 1, h, w) logits); ``prob``: the scale-1 map
        (B, H, W) when the caller already has it (the training step's, reused). Cost: the
        network on every scale (twice with ``flip``)."""
        h, w = images.shape[-2:]
        acc = None
        for s in self.scales:
            xs = images if s == 1.0 else rescale(images, s)
            p = prob[:, None] if s == 1.0 and prob is not None else torch.sigmoid(forward(xs).float())
            if self.flip:
                p = 0.5 * (p + torch.sigmoid(forward(xs.flip(-1)).float()).flip(-1))
            if p.shape[-2:] != (h, w):
                p = torch.nn.functional.interpolate(p, size=(h, w), mode="bilinear", align_corners=False)
            acc = p if acc is None else acc + p
        return (acc / len(self.scales))[:, 0]

    def batch_superpixels(self, maps: torch.Tensor, sizes, images=None, map_fn=map) -> list:
        """The superpixels (:meth:`make_superpixels`) of every map of a batch (B, H, W), image
        ``b`` being the top-left ``sizes[b]`` of its map, from the detached maps on the host
        (one copy); ``map_fn``: e.g. a thread pool's ``map`` (the watershed releases the GIL).
        FloatingPointError for a map holding NaN or infinite values (a diverged network)."""
        crops = self.host_maps(maps, sizes)
        if self.superpixels == "color_watershed":
            return list(map_fn(self.make_superpixels, crops, images))
        return list(map_fn(self.make_superpixels, crops))

    @staticmethod
    def host_maps(maps: torch.Tensor, sizes) -> list:
        """The detached (B, H, W) maps on the host (one copy), image ``b`` cropped to ``sizes[b]``:
        float32 views. FloatingPointError for a map holding NaN or infinite values."""
        prob = maps.detach().float().cpu().numpy()
        if not np.isfinite(prob).all():
            raise FloatingPointError(DIVERGED)
        return [prob[b, :hb, :wb] for b, (hb, wb) in enumerate(sizes)]

    def graph_weights(self, rags, maps: torch.Tensor, images=None, frontier=None, head=None) -> torch.Tensor:
        """(E_total,) weights of the edges of B RAGs (in batch order) from their maps (B, H, W),
        differentiable in the maps (and in the head), on the maps' device, in their dtype: the
        merging head's output on its features (:class:`~hiseg.segmentation.pooling.TorchEdgeFeatures`,
        ``images``: the B (H, W, 3) float images on the host, or a (B, 3, H, W) tensor, for the
        colour and texture features) or the mean boundary along each frontier
        (:func:`~hiseg.segmentation.pooling.frontier_mean`). ``frontier``: the batch's
        ``(pix_a, pix_b, edge, counts)`` index tensors on the maps' device (a
        :class:`~hiseg.data.collate.GraphBatch` carries them), else made from the RAGs;
        ``head``: a trained copy of the merging head (the Lightning module's), default the
        pipeline's own. Cost O(B H W + P) for P frontier pixel pairs (the head's features:
        :class:`TorchEdgeFeatures`)."""
        head = self._head if head is None else head
        if head is not None:
            if isinstance(images, torch.Tensor):
                imgs = images.detach().float().cpu().numpy()
                images = [np.ascontiguousarray(imgs[b, :, :r.labels.shape[0], :r.labels.shape[1]].transpose(1, 2, 0))
                          for b, r in enumerate(rags)]
            feats = TorchEdgeFeatures(rags, head.features, images=images, shape=tuple(maps.shape[-2:]),
                                      device=maps.device)
            return head(feats(maps), feats.graph if head.context else None).to(maps.dtype)
        if frontier is None:
            frontier = [torch.from_numpy(x).to(maps.device) for x in batch_frontier_pixels(rags, maps.shape[-2:])]
            frontier.append(None)
        pa, pb, edge, counts = frontier
        return frontier_mean(maps, pa, pb, edge, sum(r.graph.num_edges for r in rags), counts)

    def make_superpixels(self, boundary: np.ndarray, image: Optional[np.ndarray] = None) -> np.ndarray:
        """Superpixel labels (H, W) of a boundary map (and the image, for ``color_watershed``):
        :func:`~hiseg.segmentation.superpixels.make_superpixels` of the settings; PipelineError
        for a map or image that does not fit."""
        try:
            return make_superpixels(self.superpixels, boundary, image, self.region_size, self.sigma)
        except ValueError as e:
            raise PipelineError(str(e)) from None

    def ultrametric(self, graph, weights: torch.Tensor, lengths=None, *, host_weights=None, lca: bool = False):
        """(u, hierarchy) of one graph's configured linkage; ``u`` differentiable in ``weights``
        (except ``closest``, a fit), on their device. The tree is built on the host from
        ``host_weights`` (the weights already copied there) or from a copy of ``weights``; its
        gather indices (with ``lca`` the leaf-lca tables the triplet term queries) go to the
        weights' device in one copy (:func:`hiseg.core.device.upload_indices`).
        ``lengths``: the frontier lengths (average linkage). A training batch goes through
        :meth:`batch_ultrametric`."""
        if self.linkage == "closest":  # single linkage of the fitted ultrametric
            from ..core.fitting import fit_ultrametric

            weights = weights / weights.max().clamp_min(1e-12)
            check = self.fit_iterations == 0
            if not check:  # the fit checks the graph and the weights; its output needs no second check
                fit = fit_ultrametric(graph, weights, max_iter=self.fit_iterations)
                graph, weights = fit.hierarchy.graph, fit.ultrametric
            return subdominant_ultrametric(graph, weights, return_hierarchy=True, check=check)
        w = weights if host_weights is None else host_weights
        h = build_hierarchy(graph, w) if self.linkage == "single" else build_average_linkage_hierarchy(graph, w, lengths)
        upload_indices(h, weights.device, lca=lca)
        return h.ultrametric(weights), h

    def batch_ultrametric(self, graph, weights: torch.Tensor, lengths=None, *, host_weights=None, lca: bool = False,
                          pool=None):
        """:meth:`ultrametric` of a training step's batch of graphs: its average linkage is one
        tree per graph (:func:`hiseg.segmentation.hostpool.average_linkage_batch`), built by
        ``pool`` (a :class:`~hiseg.segmentation.hostpool.HostPool`; None: in process), the same
        arrays either way. Kept apart from the one image's path, which never needs a pool."""
        if self.linkage != "average" or not isinstance(graph, BatchedGraph):
            return self.ultrametric(graph, weights, lengths, host_weights=host_weights, lca=lca)
        from .hostpool import average_linkage_batch

        h = average_linkage_batch(graph, weights if host_weights is None else host_weights, lengths, pool, lca=lca)
        upload_indices(h, weights.device, lca=lca)
        return h.ultrametric(weights), h

    # ------------------------------------------------------------------ the chain after the network (numpy, higra)
    def hierarchy_of_map(self, boundary: np.ndarray, image: Optional[np.ndarray] = None, head=None):
        """(rag, ultrametric ndarray, hierarchy) of a boundary map: the one chain after the network,
        whatever backend made the map (torch, onnxruntime, another detector's): superpixels, their
        region adjacency graph, its edge weights (:meth:`edge_weights`), the hierarchy
        (:meth:`hierarchy`). numpy and higra only (the ``closest`` linkage's fit excepted). The
        hierarchy is None for a map of one region. ``head``: the backend's merge head (see
        :meth:`edge_weights`)."""
        rag = region_adjacency_graph(self.make_superpixels(boundary, image))
        if rag.graph.num_vertices == 1:
            return rag, np.zeros(0), None
        u, h = self.hierarchy(rag, self.edge_weights(rag, boundary, image, head))
        return rag, u, h

    def edge_weights(self, rag, boundary: np.ndarray, image: Optional[np.ndarray] = None, head=None) -> np.ndarray:
        """(E,) float64 weights of one RAG's edges: the merge head's output on the edge features
        (:func:`~hiseg.segmentation.pooling.edge_features`), or the mean boundary along each
        frontier without one. ``head``: an object with ``features`` (names) and
        ``edge_weights(features, rag) -> (E,)`` (an exported model's, run by onnxruntime); default
        the pipeline's own :class:`~hiseg.segmentation.merging.MergeHead` (torch). PipelineError for
        a map or image that does not fit the head's features."""
        head = self._head if head is None else head
        try:
            x = edge_features(rag, boundary, image, ("mean",) if head is None else head.features)
            return x[:, 0] if head is None else np.asarray(head.edge_weights(x, rag), np.float64)
        except MergeHeadError as e:
            raise PipelineError(str(e)) from None

    def hierarchy(self, rag, weights: np.ndarray):
        """(ultrametric ndarray, hierarchy) of one RAG's edge weights by the configured linkage
        (average: with the frontier lengths). The ``closest`` linkage fits by gradient descent
        (:meth:`ultrametric`, torch)."""
        if self.linkage == "closest":
            u, h = self.ultrametric(rag.graph, torch.from_numpy(np.asarray(weights, np.float64)))
            return u.numpy(), h
        if self.linkage == "single":
            h = build_hierarchy(rag.graph, weights)
        else:
            h = build_average_linkage_hierarchy(rag.graph, weights, rag.frontier_lengths().astype(np.float64))
        return h.ultrametric(weights), h
