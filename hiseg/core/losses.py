r"""Cost functions on ultrametrics (Chierchia & Perret, NeurIPS 2019), differentiable.

Notation: graph :math:`G=(V,E)`, input weights :math:`w`, ultrametric :math:`u = \Phi(w~)`
(from :func:`hiseg.subdominant_ultrametric`), its :class:`~hiseg.core.ultrametric.Hierarchy`
``h``; :math:`\mathrm{lca}(e_{xy})` is the tree node where ``x`` and ``y`` merge and
:math:`d_u(x, y)` its altitude.

=================  ==================================================================
``closest``        :math:`\frac{1}{|E|}\sum_e (u(e) - t(e))^2`, ``t`` a target
``cluster_size``   :math:`\frac{1}{|E_k|}\sum_{e \in E_k} u(e) / \gamma(\mathrm{lca}(e))`,
                   :math:`E_k` the edges whose lca is one of the top-k nodes,
                   :math:`\gamma(n)` the size of the smallest child of ``n`` (constant)
``triplet``        :math:`\frac{1}{|T|}\sum_{(r,p,n)\in T}\max(0, \alpha + d_u(r,p) - d_u(r,n))`
``dasgupta``       :math:`\frac{1}{|E|}\sum_{e_{xy}} \widetilde{|\mathrm{lca}(x,y)|} / w(e_{xy})`
                   (dissimilarity) or :math:`\times w(e_{xy})` (similarity), with the soft
                   cardinal of :func:`soft_cardinal`
``entropy``        :math:`\frac{1}{\mathrm{vol}(G)}\big(2\sum_{e_{xy}} s_{xy}\log_2
                   \widetilde{\mathrm{vol}}(\mathrm{lca}(x,y)) - \sum_x d_x\log_2 d_x\big)`,
                   the structural entropy with soft volumes (:func:`structural_entropy`)
=================  ==================================================================

The triplets the triplet term reads are drawn by :mod:`hiseg.core.triplets`, the soft cardinal
under the Dasgupta cost is :mod:`hiseg.core.soft_cardinal`'s (their names are also importable
from here, as before they had modules of their own).

The terms are registered by name (:data:`TERMS`, :func:`register_loss`): ``closest``,
``size``, ``triplet``, ``dasgupta``, ``entropy`` and ``pixel`` (the network's pixel term); an
:class:`Objective` is a weighted sum of them, what :func:`hiseg.fit_ultrametric`,
:class:`hiseg.UltrametricClustering` and the Lightning module minimise. Adding a loss is
one function and one :func:`register_loss` line.

The ``mean`` normalisations are those of the paper's code, so that loss weights
(``lambda``) carry over. Everywhere here ``weights`` is the tensor being optimised
(whose hierarchy ``h`` is); targets and input graph weights have their own names
(``target``, ``graph_weights``).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Callable, Mapping, Optional

import numpy as np
import torch

# the triplets and the soft cardinal have their own modules; their names stay hiseg.core.losses.<name>
from .soft_cardinal import sigmoid_expansion, soft_cardinal, soft_cardinal_sum  # noqa: F401
from .triplets import make_triplets, sample_batch_triplets, sample_batch_triplets_torch  # noqa: F401
from .device import leaf_lca
from .graph import check_weights
from .ultrametric import Hierarchy

__all__ = ["closest", "cluster_size", "triplet", "make_triplets", "sample_batch_triplets",
           "sample_batch_triplets_torch", "dasgupta", "structural_entropy", "gaussian_similarities",
           "soft_cardinal", "sigmoid_expansion", "balanced_bce", "consensus_targets", "edge_loss",
           "NEEDS", "TERMS", "LossTerm", "LossInputs", "Lazy", "Objective", "register_loss", "unregister_loss",
           "parse_loss"]


def _reduce(x: torch.Tensor, reduction: str) -> torch.Tensor:
    if reduction == "mean":
        return x.mean() if x.numel() else x.sum()
    if reduction == "sum":
        return x.sum()
    if reduction == "none":
        return x
    raise ValueError(f"reduction must be 'mean', 'sum' or 'none', got {reduction!r}")


def closest(ultrametric: torch.Tensor, target: torch.Tensor, reduction: str = "mean") -> torch.Tensor:
    r"""Closest-ultrametric loss :math:`\frac{1}{|E|}\sum_e (u(e) - t(e))^2`.

    ``ultrametric`` and ``target`` are (E,) tensors on the same device (the target: the
    input weights the ultrametric should stay close to, or the annotators' fractions).
    O(E). Raises ValueError on shape mismatch.
    """
    if ultrametric.shape != target.shape:
        raise ValueError(f"closest: ultrametric {tuple(ultrametric.shape)} and target "
                         f"{tuple(target.shape)} differ in shape")
    return _reduce((ultrametric - target) ** 2, reduction)


def cluster_size(ultrametric: torch.Tensor, hierarchy: Hierarchy, top_nodes: int = 0,
                 reduction: str = "mean") -> torch.Tensor:
    r"""Cluster-size regularisation :math:`\mathrm{mean}_{e\in E_k}\, u(e)/\gamma(\mathrm{lca}(e))`.

    Parameters
    ----------
    ultrametric : (E,) tensor, ``hierarchy.ultrametric(w)``.
    hierarchy : the :class:`~hiseg.core.ultrametric.Hierarchy` of ``ultrametric``.
    top_nodes : k; only edges whose lca is one of the k highest nodes count (0: all).
        :math:`\gamma` (smallest child size) is a constant (no gradient), as in the paper.

    Cost O(E) (+ O(N) for node sizes, cached by the hierarchy).
    """
    if hierarchy.batch is not None and hierarchy.batch.num_graphs > 1:
        raise ValueError("cluster_size is defined per graph: call it on each graph of the batch")
    if top_nodes < 0:
        raise ValueError(f"top_nodes must be >= 0, got {top_nodes}")
    n, nl = hierarchy.num_nodes, hierarchy.num_leaves
    limit = nl if top_nodes == 0 else max(n - int(top_nodes), nl)
    sel = np.flatnonzero(hierarchy.edge_lca >= limit)
    gamma = hierarchy.min_child_size()[hierarchy.edge_lca[sel] - nl]
    dev = ultrametric.device
    sel_t = torch.from_numpy(sel).to(dev)
    gamma_t = torch.from_numpy(gamma).to(device=dev, dtype=ultrametric.dtype)
    return _reduce(ultrametric[sel_t] / gamma_t, reduction)


# ----------------------------------------------------------------------------- triplets
def triplet(hierarchy: Hierarchy, weights: torch.Tensor, triplets=None, *, labels=None,
            margin: float = 1.0, max_triplets: Optional[int] = None, random_state=None,
            reduction: str = "mean", valid=None) -> torch.Tensor:
    r"""Triplet loss :math:`\mathrm{mean}\max(0, \alpha + d_u(r,p) - d_u(r,n))`.

    Parameters
    ----------
    hierarchy : Hierarchy of the current ultrametric; ``d_u`` = altitude of the lca.
    weights : (E,) tensor whose subdominant ultrametric the hierarchy represents
        (gradients flow to its pass edges).
    triplets : tuple (ref, pos, neg) of vertex-id arrays, or
    labels : (N,) partial labels, -1 = unlabelled; triplets built by :func:`make_triplets`
        (all of them, or ``max_triplets`` sampled).
    margin : alpha.
    valid : (T,) bool, optional
        Only these triplets count (:func:`sample_batch_triplets_torch`'s mask); the mean
        is over them (0 when none is valid).

    Triplets as tensors on ``weights``' device are looked up there (:func:`hiseg.core.device.leaf_lca`,
    one batched call, no host synchronisation); others on the host. Cost O(N log N) once
    per hierarchy (lca preprocessing) + O(|T|).
    """
    if (triplets is None) == (labels is None):
        raise ValueError("triplet: give exactly one of `triplets` or `labels`")
    if triplets is None:
        if hasattr(labels, "__len__") and len(labels) != hierarchy.num_leaves:
            raise ValueError(f"labels has {len(labels)} entries for {hierarchy.num_leaves} vertices")
        triplets = make_triplets(labels, max_triplets=max_triplets, random_state=random_state)
    dev = weights.device
    if all(isinstance(t, torch.Tensor) and t.device == dev for t in triplets):
        # on the weights' device: one batched lca lookup there, nothing read back
        ref, pos, neg = triplets
        if not (ref.shape == pos.shape == neg.shape):
            raise ValueError("triplet: ref, pos and neg must have the same length")
        n_rp, n_rn = leaf_lca(hierarchy, torch.cat([ref, ref]), torch.cat([pos, neg])).chunk(2)
    else:
        ref, pos, neg = (np.asarray(t.detach().cpu().numpy() if hasattr(t, "detach") else t, dtype=np.int64)
                         for t in triplets)
        if not (ref.shape == pos.shape == neg.shape):
            raise ValueError("triplet: ref, pos and neg must have the same length")
        n_rp, n_rn = (torch.from_numpy(x).to(dev) for x in _triplet_lcas(hierarchy, ref, pos, neg))
    alt = hierarchy.node_altitudes(weights)
    loss = torch.relu(margin + alt[n_rp] - alt[n_rn])
    if valid is None:
        return _reduce(loss, reduction)
    valid = torch.as_tensor(valid, device=dev)
    if reduction == "none":
        return torch.where(valid, loss, torch.zeros_like(loss))
    total = torch.where(valid, loss, torch.zeros_like(loss)).sum()
    return total / valid.sum().clamp_min(1) if reduction == "mean" else _reduce(total, reduction)


def _triplet_lcas(h: Hierarchy, ref, pos, neg):
    """lca nodes of (ref, pos) and (ref, neg); through the few distinct vertices when possible."""
    verts, inv = np.unique(np.concatenate([ref, pos, neg]), return_inverse=True)
    k = verts.size
    if k * k <= 4 * ref.size and k <= 4096:
        a, b = np.triu_indices(k, 1)
        M = np.empty((k, k), dtype=np.int64)
        M[a, b] = M[b, a] = h.lca(verts[a], verts[b])
        M[np.arange(k), np.arange(k)] = verts
        r, p, n = np.split(inv, 3)
        return M[r, p], M[r, n]
    return h.lca(ref, pos), h.lca(ref, neg)


# ----------------------------------------------------------------------------- Dasgupta
def dasgupta(hierarchy: Hierarchy, weights: torch.Tensor, graph_weights, lam: float = 5.0,
             mode: str = "dissimilarity", tol: float = 1e-10, reduction: str = "mean") -> torch.Tensor:
    r"""Relaxed Dasgupta cost :math:`\mathrm{mean}_{e_{xy}}\ \widetilde{|\mathrm{lca}(x,y)|}\,/\,w(e_{xy})`.

    Parameters
    ----------
    hierarchy : Hierarchy of the current ultrametric (built from ``weights``).
    weights : (E,) tensor being optimised (gradients flow through the soft cardinals).
    graph_weights : (E,) the *input* graph weights: dissimilarities (``mode='dissimilarity'``,
        must be > 0) or similarities (``mode='similarity'``, >= 0); constants.
    lam : sigmoid slope lambda of the soft cardinal.

    Cost: O(E) + :func:`soft_cardinal`.
    """
    if mode not in ("dissimilarity", "similarity"):
        raise ValueError(f"mode must be 'dissimilarity' or 'similarity', got {mode!r}")
    gw = torch.as_tensor(graph_weights, dtype=weights.dtype, device=weights.device)
    check_weights(gw, hierarchy.num_edges, name="graph_weights", nonnegative=True)
    if mode == "dissimilarity" and bool((gw <= 0).any()):
        raise ValueError("graph_weights contains zeros: dissimilarity mode divides by them "
                         "(use strictly positive dissimilarities)")
    if reduction == "none":
        card = soft_cardinal(hierarchy, weights, lam=lam, tol=tol)
        node = torch.from_numpy(hierarchy.edge_lca - hierarchy.num_leaves).to(weights.device)
        ce = card[node]
        return ce / gw if mode == "dissimilarity" else ce * gw
    if reduction not in ("mean", "sum"):
        raise ValueError(f"reduction must be 'mean', 'sum' or 'none', got {reduction!r}")
    if hierarchy.batch is not None and hierarchy.batch.num_graphs > 1:
        raise ValueError("dasgupta is defined per graph, not on a batch")
    if not lam > 0:
        raise ValueError(f"lambda (sigmoid slope) must be positive, got {lam}")
    # the loss is linear in the cardinals: sum_r coef_r card_r, coef_r = sum of edge factors
    factor = gw.detach().cpu().double().numpy()
    factor = 1.0 / factor if mode == "dissimilarity" else factor
    if reduction == "mean":
        factor = factor / max(hierarchy.num_edges, 1)
    coef = np.bincount(hierarchy.edge_lca - hierarchy.num_leaves, weights=factor,
                       minlength=hierarchy.num_leaves - 1)
    alt_int = hierarchy.node_altitudes(weights)[hierarchy.num_leaves:]
    return soft_cardinal_sum(hierarchy, alt_int, float(lam), float(tol), coef)


# ----------------------------------------------------------------------------- structural entropy
def gaussian_similarities(distances: torch.Tensor) -> torch.Tensor:
    r"""``exp(-(d / mean d)^2)`` of nonnegative edge lengths ``d`` (all ones when they are all 0):
    HypCSE's Gaussian weights with the mean length as bandwidth, unit-free."""
    m = distances.mean() if distances.numel() else distances.new_zeros(())
    return torch.exp(-(distances / m) ** 2) if float(m) > 0 else torch.ones_like(distances)


def structural_entropy(hierarchy: Hierarchy, weights: torch.Tensor, similarities, lam: float = 5.0,
                       tol: float = 1e-10) -> torch.Tensor:
    r"""Relaxed structural entropy (Li & Pan 2016) of the hierarchy on its graph, in bits.

    The exact measure (:func:`hiseg.metrics.structural_entropy`) telescopes to
    :math:`\frac{1}{\mathrm{vol}(G)}\big(2\sum_{e_{xy}} s_{xy}\log_2\mathrm{vol}(\mathrm{lca}(x,y))
    - \sum_x d_x\log_2 d_x\big)`, Dasgupta's cost with the lca's size replaced by the log of
    its volume (:math:`d_x` the degree of ``x``, :math:`\mathrm{vol}` the sum of the degrees
    below a node). The relaxation replaces each volume by the soft cardinal with the degrees
    as leaf weights (:func:`soft_cardinal`), times 4/3: smooth in the altitudes, it tends to
    the exact entropy as ``lam`` grows when the altitudes are distinct (the soft cardinal
    tends to 3/4 of the size).

    Parameters
    ----------
    hierarchy : Hierarchy of the current ultrametric (built from ``weights``).
    weights : (E,) tensor being optimised (gradients flow through the soft volumes).
    similarities : (E,) nonnegative edge similarities, constants, not all 0.
    lam : sigmoid slope lambda of the soft cardinal.

    Cost: O(E) + two :func:`soft_cardinal` passes (value, then gradient). Raises ValueError for
    similarities of the wrong length, negative or all 0, a batch, ``lam`` <= 0.
    """
    if hierarchy.batch is not None and hierarchy.batch.num_graphs > 1:
        raise ValueError("structural_entropy is defined per graph, not on a batch")
    if not lam > 0:
        raise ValueError(f"lambda (sigmoid slope) must be positive, got {lam}")
    sim = torch.as_tensor(similarities, dtype=weights.dtype, device=weights.device)
    check_weights(sim, hierarchy.num_edges, name="similarities", nonnegative=True)
    s = sim.detach().cpu().double().numpy()
    g = hierarchy.graph
    n = hierarchy.num_leaves
    degrees = np.bincount(g.sources, s, n) + np.bincount(g.targets, s, n)
    total = float(degrees.sum())
    if not total > 0:
        raise ValueError("the similarities are all 0: structural entropy needs a positive total weight")
    coef = np.bincount(hierarchy.edge_lca - n, weights=s, minlength=n - 1)  # similarity joined at each node
    used = torch.from_numpy(np.flatnonzero(coef > 0)).to(weights.device)
    volume = soft_cardinal(hierarchy, weights, lam=lam, tol=tol, leaf_weights=degrees)[used] * (4.0 / 3.0)
    coef_t = torch.as_tensor(coef, dtype=weights.dtype, device=weights.device)[used]
    d = degrees[degrees > 0]
    constant = float(np.dot(d, np.log2(d)))
    return (2.0 * (coef_t * torch.log2(volume.clamp_min(np.finfo(np.float64).tiny))).sum() - constant) / total


# ----------------------------------------------------------------------------- pixel losses
def balanced_bce(logits: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """HED's class-balanced binary cross-entropy of one map; ``target`` in [0, 1] (soft labels
    allowed), positives weighted by the negative fraction and conversely."""
    pos = target.sum()
    total = float(target.numel())
    beta = (1.0 - pos / total).clamp(0.01, 0.99)
    weight = torch.where(target > 0, beta, 1 - beta)
    return torch.nn.functional.binary_cross_entropy_with_logits(logits, target, weight=weight, reduction="mean")


def consensus_targets(consensus: torch.Tensor, valid: torch.Tensor, positive_threshold: float = 0.3):
    """Positive / negative masks of the pixel stage from the annotators' consensus ``c`` (the
    fraction of annotators marking each pixel): ``c >= positive_threshold`` / ``c == 0``,
    both inside ``valid``; the pixels in between are ignored (a tolerance band)."""
    pos = (consensus >= positive_threshold) & valid
    neg = (consensus <= 1e-6) & valid
    return pos, neg


def edge_loss(fused: torch.Tensor, sides, pos: torch.Tensor, neg: torch.Tensor,
              *, neg_weight: float = 1.1, side_weight: float = 1.0, dice_weight: float = 1.0) -> torch.Tensor:
    """The pixel stage's loss: class-balanced BCE on the fused and side logits (deep
    supervision) plus Dice on the fused map, in float32.

    ``fused`` (B, 1, H, W) and every ``sides`` entry: logits; ``pos``/``neg``: bool (B, H, W)
    masks (:func:`consensus_targets`), pixels in neither are ignored. Per image, positives
    weigh ``|N| / (|P| + |N|)`` and negatives ``neg_weight * |P| / (|P| + |N|)``; the BCE is
    summed over pixels and divided by the number of counted pixels. The Dice term favours
    thin (crisp) maps.
    """
    p, ng = pos.float(), neg.float()
    np_ = p.sum(dim=(1, 2), keepdim=True)
    nn_ = ng.sum(dim=(1, 2), keepdim=True)
    tot = (np_ + nn_).clamp_min(1.0)
    wmap = p * (nn_ / tot) + ng * (neg_weight * np_ / tot)
    denom = (p + ng).sum().clamp_min(1.0)

    def bce(logits):
        lg = logits.float().squeeze(1)
        return (torch.nn.functional.binary_cross_entropy_with_logits(lg, p, reduction="none") * wmap).sum() / denom

    loss = bce(fused)
    for s in sides:
        loss = loss + side_weight * bce(s)
    if dice_weight > 0:
        prob = torch.sigmoid(fused.float().squeeze(1)) * (p + ng)
        inter = (prob * p).sum(dim=(1, 2))
        dice = 1 - (2 * inter + 1) / ((prob * prob).sum(dim=(1, 2)) + p.sum(dim=(1, 2)) + 1)
        loss = loss + dice_weight * dice.mean()
    return loss


# ----------------------------------------------------------------------------- the registry
#: What a term may read from :class:`LossInputs`: the ultrametric ``u`` and its hierarchy,
#: the optimised edge ``weights`` (``u``'s input), the closest ``target`` (the input weights of a
#: fit, the annotators' fractions in training), the Dasgupta ``graph_weights``, ``labels`` (partial,
#: -1 unlabelled) or ``triplets`` made from them, and the ``pixel_map`` (the network's logits).
NEEDS = ("ultrametric", "hierarchy", "weights", "target", "graph_weights", "labels", "triplets", "pixel_map")


class Lazy:
    """A :class:`LossInputs` field computed on first use (e.g. targets that cost a copy)."""

    def __init__(self, fn: Callable[[], object]):
        self.fn = fn


class LossInputs:
    """What the terms of an :class:`Objective` read, by name (:data:`NEEDS` and the fields
    particular to a term, e.g. ``side_maps``, ``consensus``); a :class:`Lazy` field is computed
    once, when a term first reads it. Reading a field that was not given raises ValueError
    naming it."""

    def __init__(self, **fields):
        self._fields = fields

    def update(self, **fields) -> None:
        """Add (or replace) fields, e.g. the ultrametric once the tree is built."""
        self._fields.update(fields)

    def __getattr__(self, name):
        fields = self.__dict__.get("_fields", {})
        if name not in fields:
            raise ValueError(f"the loss input {name!r} was not given (given: {sorted(fields)})")
        v = fields[name]
        if isinstance(v, Lazy):
            v = fields[name] = v.fn()
        return v


@dataclass(frozen=True)
class LossTerm:
    """A registered loss term: ``fn(inputs: LossInputs, **options) -> scalar tensor``, the
    inputs it ``needs`` (names in :data:`NEEDS`), its default ``weight`` in an objective and
    its ``options`` (name -> default)."""

    name: str
    fn: Callable
    needs: frozenset
    weight: float = 1.0
    options: Mapping = field(default_factory=dict)


#: The registered terms, by name (:func:`register_loss`).
TERMS: dict = {}


def register_loss(name: str, fn: Optional[Callable] = None, *, needs, weight: float = 1.0,
                  options: Optional[Mapping] = None, overwrite: bool = False):
    """Register ``fn(inputs, **options) -> scalar`` as the loss term ``name`` (usable as a
    decorator). ``fit_ultrametric`` / ``UltrametricClustering`` then accept it in a loss
    string (``"closest+name"``, weight ``name_weight=`` or the default ``weight``) and the
    Lightning module in ``model.losses: {name: weight}``. ValueError for a taken name (without
    ``overwrite``), a name with ``+``, or an unknown need."""
    def add(f):
        if not isinstance(name, str) or not name.isidentifier():
            raise ValueError(f"a loss term name must be an identifier (no '+'), got {name!r}")
        if name in TERMS and not overwrite:
            raise ValueError(f"a loss term named {name!r} is already registered")
        unknown = sorted(set(needs) - set(NEEDS))
        if unknown:
            raise ValueError(f"loss term {name!r}: unknown needs {unknown}; known: {NEEDS}")
        TERMS[name] = LossTerm(name, f, frozenset(needs), float(weight), dict(options or {}))
        return f
    return add(fn) if fn is not None else add


def unregister_loss(name: str) -> None:
    """Remove a registered term (tests); KeyError when absent."""
    del TERMS[name]


def parse_loss(spec) -> dict:
    """``{name: weight}`` of a loss: a string ``"a+b"`` (each term at its default weight) or a
    mapping name -> weight. ValueError naming an unknown term (and listing the known ones)."""
    if isinstance(spec, str):
        names = spec.split("+")
        weights = {n: (TERMS[n].weight if n in TERMS else None) for n in names}
    elif isinstance(spec, Mapping):
        weights = {str(n): w for n, w in spec.items()}
    else:
        raise TypeError(f"a loss is a string 'a+b' or a mapping name -> weight, got {type(spec).__name__}")
    unknown = [n for n in weights if n not in TERMS]
    if unknown or not weights:
        raise ValueError(f"unknown loss term(s) {unknown or [spec]}; registered: {sorted(TERMS)}")
    for n, w in weights.items():
        if isinstance(w, bool) or not isinstance(w, (int, float)) or not math.isfinite(w) or w < 0:
            raise ValueError(f"the weight of loss term {n!r} must be a finite number >= 0, got {w!r}")
    return {n: float(w) for n, w in weights.items()}


class Objective:
    """A weighted sum of registered terms: ``Objective({"closest": 1, "triplet": .5},
    margin=.2)``; ``objective(inputs) -> (total, {name: value})`` (terms of weight 0 are not
    computed). ``options`` go to the terms that declare them (ValueError for one that no term
    of the objective declares). :attr:`needs` is what the computed terms read."""

    def __init__(self, weights, **options):
        self.weights = parse_loss(weights)
        self.active = [n for n, w in self.weights.items() if w != 0]
        declared = {o for n in self.weights for o in TERMS[n].options}
        unknown = sorted(set(options) - declared)
        if unknown:
            raise ValueError(f"option(s) {unknown} belong to none of the loss terms {list(self.weights)}")
        self.options = {n: {o: options.get(o, d) for o, d in TERMS[n].options.items()} for n in self.weights}

    @property
    def needs(self) -> frozenset:
        return frozenset().union(*(TERMS[n].needs for n in self.active))

    def parts(self, inputs: LossInputs, names=None) -> dict:
        """``{name: value}`` of the active terms ``names`` (default: all of them)."""
        return {n: TERMS[n].fn(inputs, **self.options[n]) for n in (self.active if names is None else names)}

    def total(self, parts: dict, like: Optional[torch.Tensor] = None) -> torch.Tensor:
        """The weighted sum of the active terms' ``parts``, in the objective's order (0 like
        ``like`` when no term is active)."""
        total = None
        for n in self.active:
            term = self.weights[n] * parts[n]
            total = term if total is None else total + term
        return total if total is not None else (like.new_zeros(()) if like is not None else torch.zeros(()))

    def __call__(self, inputs: LossInputs):
        parts = self.parts(inputs)
        return self.total(parts), parts


register_loss("closest", lambda x: closest(x.ultrametric, x.target), needs=("ultrametric", "target"))
register_loss("size", lambda x, top_nodes=0: cluster_size(x.ultrametric, x.hierarchy, top_nodes=top_nodes),
              needs=("ultrametric", "hierarchy"), options={"top_nodes": 0})
@register_loss("triplet", needs=("hierarchy", "weights", "triplets"), options={"margin": 1.0})
def _triplet_term(x: LossInputs, margin: float = 1.0) -> torch.Tensor:
    t = x.triplets  # (ref, pos, neg) or, sampled on the device, (ref, pos, neg, valid)
    return triplet(x.hierarchy, x.weights, tuple(t[:3]), valid=t[3] if len(t) == 4 else None, margin=margin)
register_loss("dasgupta", lambda x, sigmoid_slope=5.0, dasgupta_mode="dissimilarity": dasgupta(
    x.hierarchy, x.weights, x.graph_weights, lam=sigmoid_slope, mode=dasgupta_mode),
    needs=("hierarchy", "weights", "graph_weights"), options={"sigmoid_slope": 5.0, "dasgupta_mode": "dissimilarity"})



@register_loss("entropy", needs=("hierarchy", "weights", "graph_weights"),
               options={"sigmoid_slope": 5.0, "entropy_weights": "gaussian"})
def _entropy_term(x: LossInputs, sigmoid_slope: float = 5.0, entropy_weights: str = "gaussian") -> torch.Tensor:
    """The relaxed structural entropy; ``entropy_weights="gaussian"`` reads the graph weights
    as distances (:func:`gaussian_similarities`, HypCSE's Gaussian weights), ``"similarity"``
    as the similarities themselves."""
    if entropy_weights not in ("gaussian", "similarity"):
        raise ValueError(f"entropy_weights must be 'gaussian' or 'similarity', got {entropy_weights!r}")
    gw = torch.as_tensor(x.graph_weights, dtype=x.weights.dtype, device=x.weights.device).detach()
    sim = gaussian_similarities(gw) if entropy_weights == "gaussian" else gw
    return structural_entropy(x.hierarchy, x.weights, sim, lam=sigmoid_slope)

def _pixel(x: LossInputs, pixel_loss: str = "balanced_bce", dice_weight: float = 1.0) -> torch.Tensor:
    """The pixel term: HED's balanced BCE of the fused logits against ``pixel_target`` (the
    thick mean annotator boundary), or the pixel stage's :func:`edge_loss` on the fused and
    ``side_maps`` logits against the ``consensus`` (pos, neg) masks."""
    if pixel_loss == "edge":
        return edge_loss(x.pixel_map, x.side_maps, *x.consensus, dice_weight=dice_weight)
    if pixel_loss != "balanced_bce":
        raise ValueError(f"pixel_loss must be 'balanced_bce' or 'edge', got {pixel_loss!r}")
    return balanced_bce(x.pixel_map[:, 0].float(), x.pixel_target.float())


register_loss("pixel", _pixel, needs=("pixel_map",), weight=0.1,
              options={"pixel_loss": "balanced_bce", "dice_weight": 1.0})
