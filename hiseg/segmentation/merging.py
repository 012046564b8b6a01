"""Learned region merging: a small head that maps per-edge features of a region adjacency
graph to the weight that average linkage merges on.

The default pipeline weighs a RAG edge by the mean predicted boundary along its frontier.
With a merge head (``Pipeline(merge_head=...)``) the weight is instead

.. math:: w(e) = \\sigma(\\mathrm{MLP}((x(e) - \\mu) / s))

(``output="sigmoid"``; ``"linear"`` drops the sigmoid), where :math:`x(e)` are cheap
features of the edge (:data:`FEATURES`): statistics of the boundary map along the
frontier, at the map's own smoothing and coarser ones, the frontier's length, the sizes
of the two regions, their colour (CIE Lab) and texture differences. With ``context=c``
the MLP also sees one round of message passing over the RAG: each edge's hidden state
:math:`h(e) = \\mathrm{ReLU}(A z(e) + a)` (:math:`c` values, :math:`z` the standardised
features) is averaged over the edges incident to each region, :math:`\\bar h(r)`, and the
MLP reads :math:`[z(e), \\bar h(r_1) + \\bar h(r_2), |\\bar h(r_1) - \\bar h(r_2)|]` for the
edge's regions :math:`r_1, r_2` (symmetric in them). The head is trained
through :func:`hiseg.average_linkage_ultrametric` with the network frozen
(``experiments/bsds_recipe/merge_head.py``).

A head is stored as plain values (:meth:`MergeHead.to_spec`: feature names, the
normalisation, the layer weights as nested lists, and the fingerprint of the network it
was trained on), inside the pipeline settings of a checkpoint: it travels with the
pipeline wherever the pipeline goes. :func:`network_fingerprint` identifies a network by
its weights, so a head is refused on the maps of another network.

The features have one implementation, :class:`TorchEdgeFeatures`: differentiable with
respect to the boundary map, on the map's device (CPU or CUDA), batched over the RAGs of a
batch; the features of the RAG and the image alone (length, sizes, colour, texture) are
computed once per RAG on the host. Inference (:meth:`hiseg.segmentation.Pipeline.graph_weights`,
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

import hashlib
from typing import Any, Mapping, Optional, Sequence

import numpy as np
import torch

from ..core.graph import RegionAdjacencyGraph, as_edge_list, batch_graphs
from ..core.ultrametric import packed_copy
from .features import FEATURES, MergeHeadError, _check_names, _Ctx, _gaussian_taps, _reflect101  # noqa: F401
from .pooling import batch_frontier_pixels

__all__ = ["FEATURES", "MergeHead", "MergeHeadError", "TorchEdgeFeatures", "edge_features", "edge_features_torch",
           "network_fingerprint"]


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


# --------------------------------------------------------------------------- network identity
def network_fingerprint(model: torch.nn.Module) -> str:
    """A short hash (16 hex digits) of a network's parameters and buffers (names, shapes
    and values, float32 on the CPU): the identity a merge head is tied to. O(parameters).
    A network whose weights were rewritten for inference (BatchNorm folded,
    :func:`hiseg.segmentation.segmenter.fold_for_inference`) carries the fingerprint of
    the weights it was made from as ``hiseg_fingerprint``: that one is returned."""
    kept = getattr(model, "hiseg_fingerprint", None)
    if isinstance(kept, str):
        return kept
    h = hashlib.sha256()
    for k, v in sorted(model.state_dict().items()):
        h.update(k.encode())
        h.update(str(tuple(v.shape)).encode())
        h.update(v.detach().to("cpu", torch.float32).contiguous().numpy().tobytes())
    return h.hexdigest()[:16]


# --------------------------------------------------------------------------- the head
_SPEC_KEYS = {"features", "hidden", "output", "mean", "std", "weights", "network", "version", "context",
              "context_weights"}
#: 1: the MLP on the edge features; 2: adds ``context`` (one round of message passing).
SPEC_VERSIONS = (1, 2)
OUTPUTS = ("sigmoid", "linear")


class MergeHead(torch.nn.Module):
    """MLP from standardised edge features to edge weights.

    Parameters
    ----------
    features : names from :data:`FEATURES`.
    hidden : widths of the hidden layers (ReLU); ``()`` for a linear model.
    output : ``"sigmoid"`` (weights in (0, 1), the UCM's range) or ``"linear"``.
    mean, std : per-feature normalisation (default 0 and 1).
    network : the :func:`network_fingerprint` of the boundary network whose maps it was
        trained on (``None``: any).
    context : width of the message-passing layer over the RAG (module docstring); 0 (the
        default): none, the weight of an edge depends on its own features only.
    normalise_on_first_batch : a new head to train: ``mean`` and ``std`` are set from the
        features of its first forward pass in training mode (their mean and standard
        deviation + 1e-6, as ``experiments/bsds_recipe/merge_head.py`` set them from its whole training
        set); a persistent ``pending`` buffer says whether that is still to come (resumes keep it).

    ``forward(x, graph)`` takes (E, F) raw features (and, with ``context``, the graph whose
    edges they describe, any form :func:`hiseg.core.graph.as_edge_list` takes, batched graphs
    included: regions of different graphs never exchange messages) and returns (E,)
    weights, differentiable in the head's parameters.
    """

    def __init__(self, features: Sequence[str], hidden: Sequence[int] = (32,), output: str = "sigmoid",
                 mean=None, std=None, network: Optional[str] = None, context: int = 0,
                 normalise_on_first_batch: bool = False):
        super().__init__()
        features = list(features)
        if not features or not all(isinstance(n, str) for n in features):
            raise MergeHeadError(f"merge_head.features must be a non-empty list of names, got {features!r}")
        unknown = [n for n in features if n not in FEATURES]
        if unknown:
            raise MergeHeadError(f"merge_head.features: unknown feature(s) {unknown}; known: {sorted(FEATURES)}")
        if output not in OUTPUTS:
            raise MergeHeadError(f"merge_head.output: unknown output {output!r}; expected one of {OUTPUTS}")
        try:
            hidden = [int(h) for h in hidden]
        except (TypeError, ValueError):
            raise MergeHeadError(f"merge_head.hidden must be a list of positive integers, got {hidden!r}") from None
        if any(h < 1 for h in hidden):
            raise MergeHeadError(f"merge_head.hidden must be a list of positive integers, got {hidden!r}")
        if network is not None and not isinstance(network, str):
            raise MergeHeadError(f"merge_head.network must be a fingerprint string or None, got {network!r}")
        if isinstance(context, bool) or not isinstance(context, (int, np.integer)) or context < 0:
            raise MergeHeadError(f"merge_head.context must be a non-negative integer, got {context!r}")
        self.features, self.hidden, self.output, self.network = features, hidden, output, network
        self.context = int(context)
        nf = len(features)
        self.context_layer = torch.nn.Linear(nf, self.context, dtype=torch.float64) if self.context else None
        widths = [nf + 2 * self.context] + hidden + [1]
        self.layers = torch.nn.ModuleList(torch.nn.Linear(a, b, dtype=torch.float64)
                                          for a, b in zip(widths[:-1], widths[1:]))
        m = torch.zeros(nf, dtype=torch.float64) if mean is None else torch.as_tensor(mean, dtype=torch.float64)
        s = torch.ones(nf, dtype=torch.float64) if std is None else torch.as_tensor(std, dtype=torch.float64)
        if m.shape != (nf,) or s.shape != (nf,) or not bool((s > 0).all()) or not bool(torch.isfinite(m).all()):
            raise MergeHeadError(f"merge_head.mean / merge_head.std must be {nf} finite numbers (std > 0)")
        self.register_buffer("mean", m)
        self.register_buffer("std", s)
        if normalise_on_first_batch:
            self.register_buffer("pending", torch.tensor(True))
        self._pending = bool(normalise_on_first_batch)  # the buffer's host copy: no device read per step

    def forward(self, x, graph=None) -> torch.Tensor:
        x = torch.as_tensor(x).to(self.mean.dtype)
        if x.ndim != 2 or x.shape[1] != len(self.features):
            raise MergeHeadError(f"merge head expects (E, {len(self.features)}) features, got {tuple(x.shape)}")
        if self.training and self._pending:
            with torch.no_grad():  # the first training batch standardises the features
                self.mean.copy_(x.mean(0))
                self.std.copy_(x.std(0, unbiased=False) + 1e-6)
                self.pending.fill_(False)
            self._pending = False
        z = (x - self.mean) / self.std
        if self.context:
            z = torch.cat([z, self._messages(z, graph)], 1)
        for i, layer in enumerate(self.layers):
            z = layer(z)
            if i < len(self.layers) - 1:
                z = torch.relu(z)
        z = z[:, 0]
        return torch.sigmoid(z) if self.output == "sigmoid" else z

    def _load_from_state_dict(self, state_dict, prefix, *args, **kwargs):
        # a trained head read back from its spec has no ``pending`` buffer: the state of the
        # run that trained it (a standardised head) loads into it
        if "pending" not in self._buffers:
            state_dict.pop(prefix + "pending", None)
        elif prefix + "pending" in state_dict:  # a resumed run: read once here, not at every step
            self._pending = bool(state_dict[prefix + "pending"])
        super()._load_from_state_dict(state_dict, prefix, *args, **kwargs)

    def _messages(self, z: torch.Tensor, graph) -> torch.Tensor:
        """(E, 2 c): per edge, the sum and absolute difference of its two regions' mean
        incident-edge states. O(E c)."""
        if graph is None:
            raise MergeHeadError("merge_head.context: this head reads the graph (one round of message passing); "
                                 "call it as head(features, graph)")
        el = as_edge_list(graph)
        if el.num_edges != z.shape[0]:
            raise MergeHeadError(f"merge head: {z.shape[0]} edge feature rows for a graph of {el.num_edges} edges")
        src, dst = torch.from_numpy(el.sources), torch.from_numpy(el.targets)
        idx = torch.cat([src, dst])
        deg = torch.bincount(idx, minlength=el.num_vertices).clamp_min(1).to(z.device, z.dtype)  # on the host
        src, dst, idx = src.to(z.device), dst.to(z.device), idx.to(z.device)
        h = torch.relu(self.context_layer(z))
        agg = h.new_zeros(el.num_vertices, self.context).index_add_(0, idx, torch.cat([h, h]))
        hr = agg / deg[:, None]
        a, b = hr[src], hr[dst]
        return torch.cat([a + b, (a - b).abs()], 1)

    def weights(self, rag: RegionAdjacencyGraph, boundary, image=None) -> torch.Tensor:
        """(E,) float64 edge weights of one RAG (no gradient)."""
        with torch.no_grad():
            return self(torch.from_numpy(edge_features(rag, boundary, image, self.features)),
                        rag.graph if self.context else None)

    # ------------------------------------------------------------------ storage
    def to_spec(self) -> dict:
        """The head as plain values (lists, floats, strings): loads with ``weights_only``.
        Version 1 without ``context`` (as before it existed), 2 with it."""
        spec = {"version": 1, "features": list(self.features), "hidden": list(self.hidden), "output": self.output,
                "mean": self.mean.tolist(), "std": self.std.tolist(), "network": self.network,
                "weights": [{"weight": l.weight.detach().tolist(), "bias": l.bias.detach().tolist()}
                            for l in self.layers]}
        if self.context:
            spec.update(version=2, context=self.context,
                        context_weights={"weight": self.context_layer.weight.detach().tolist(),
                                         "bias": self.context_layer.bias.detach().tolist()})
        return spec

    @classmethod
    def from_spec(cls, spec: Mapping[str, Any]) -> "MergeHead":
        """Rebuild from :meth:`to_spec`'s output; MergeHeadError naming the setting that is
        unknown, missing or does not fit."""
        if not isinstance(spec, Mapping):
            raise MergeHeadError(f"merge_head must be a mapping, got {type(spec).__name__}")
        unknown = sorted(set(spec) - _SPEC_KEYS)
        if unknown:
            raise MergeHeadError(f"merge_head: unknown setting(s) {unknown}; known: {sorted(_SPEC_KEYS)}")
        version = spec.get("version", 1)
        if version not in SPEC_VERSIONS:
            raise MergeHeadError(f"merge_head.version {version!r} is not supported {SPEC_VERSIONS}")
        missing = [k for k in ("features", "weights") if k not in spec]
        if version == 2:
            missing += [k for k in ("context", "context_weights") if k not in spec]
        elif "context" in spec or "context_weights" in spec:
            raise MergeHeadError("merge_head.context needs merge_head.version 2 (version 1 heads have no context)")
        if missing:
            raise MergeHeadError(f"merge_head: missing setting(s) {missing}")
        context = spec.get("context", 0)
        if version == 2 and (isinstance(context, bool) or not isinstance(context, int) or context < 1):
            raise MergeHeadError(f"merge_head.context must be a positive integer in a version 2 head, got {context!r}")
        head = cls(spec["features"], spec.get("hidden", ()), spec.get("output", "sigmoid"), spec.get("mean"),
                   spec.get("std"), spec.get("network"), context)
        ws = spec["weights"]
        if not isinstance(ws, Sequence) or len(ws) != len(head.layers):
            raise MergeHeadError(f"merge_head.weights: {len(head.layers)} layers expected for hidden={head.hidden}")
        pairs = [(f"weights[{i}]", layer, w) for i, (layer, w) in enumerate(zip(head.layers, ws))]
        if head.context:
            pairs.append(("context_weights", head.context_layer, spec["context_weights"]))
        with torch.no_grad():
            for what, layer, w in pairs:
                try:
                    wt = torch.as_tensor(w["weight"], dtype=torch.float64)
                    bt = torch.as_tensor(w["bias"], dtype=torch.float64)
                except (KeyError, TypeError, ValueError) as e:
                    raise MergeHeadError(f"merge_head.{what}: needs 'weight' and 'bias' number lists ({e})") from None
                if wt.shape != layer.weight.shape or bt.shape != layer.bias.shape:
                    raise MergeHeadError(f"merge_head.{what}: shapes {tuple(wt.shape)}/{tuple(bt.shape)}, "
                                         f"expected {tuple(layer.weight.shape)}/{tuple(layer.bias.shape)}")
                layer.weight.copy_(wt)
                layer.bias.copy_(bt)
        return head

    def check_network(self, model: Optional[torch.nn.Module]) -> None:
        """MergeHeadError (naming ``merge_head.network``) when the head was trained on
        another network's maps than ``model``'s (or on a network's, and ``model`` is None)."""
        if self.network is None:
            return
        got = None if model is None else network_fingerprint(model)
        if got != self.network:
            what = "no network (the classical colour gradient)" if model is None else f"network {got}"
            raise MergeHeadError(
                f"merge_head.network: this head was trained on the boundary maps of network {self.network}, "
                f"but the pipeline runs {what}; use the checkpoint the head was saved with, or a pipeline "
                f"without merge_head")
