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

The features are :mod:`hiseg.segmentation.pooling`'s (:func:`~hiseg.segmentation.pooling.edge_features`
in numpy for inference, :class:`~hiseg.segmentation.pooling.TorchEdgeFeatures` in torch for
training); this module is the head that reads them.
"""
from __future__ import annotations

import hashlib
from typing import Any, Mapping, Optional, Sequence

import numpy as np
import torch

from ..core.graph import RegionAdjacencyGraph, as_edge_list
from .pooling import FEATURES, MergeHeadError, edge_features

__all__ = ["FEATURES", "MergeHead", "MergeHeadError", "network_fingerprint"]


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

    def edge_weights(self, features: np.ndarray, rag: RegionAdjacencyGraph) -> np.ndarray:
        """(E,) float64 weights of one RAG's (E, F) edge features, numpy in and out, no gradient:
        the head as the one chain runs it (:meth:`hiseg.segmentation.Pipeline.edge_weights`;
        an exported model's head answers the same call with onnxruntime)."""
        with torch.no_grad():
            return self(torch.from_numpy(np.asarray(features, np.float64)),
                        rag.graph if self.context else None).numpy()

    def weights(self, rag: RegionAdjacencyGraph, boundary, image=None) -> torch.Tensor:
        """(E,) float64 edge weights of one RAG (no gradient)."""
        return torch.from_numpy(self.edge_weights(edge_features(rag, boundary, image, self.features), rag))

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
