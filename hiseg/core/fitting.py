r"""Ultrametric fitting by gradient descent (Algorithm 1 of Chierchia & Perret, 2019).

Minimise :math:`J(\Phi(\tilde w); w)` over :math:`\tilde w \in \mathbb{R}^E` with AMSGrad,
where :math:`\Phi` is the subdominant-ultrametric layer and positivity of
:math:`\tilde w` is enforced by a softplus (or relu) reparametrisation; return
:math:`\Phi` of the best iterate.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Callable, Optional, Union

import numpy as np
import torch

from . import losses
from .graph import as_edge_list
from .average_linkage import average_linkage
from .graph import check_values, host_weights
from .ultrametric import Hierarchy, single_linkage

__all__ = ["fit_ultrametric", "FitResult", "LOSSES", "OPTIMIZERS", "POSITIVITY", "INITS", "make_loss"]

#: The documented combinations (any "+" combination of registered terms is accepted: :data:`hiseg.core.losses.TERMS`).
LOSSES = ("closest", "closest+size", "closest+triplet", "closest+size+triplet", "dasgupta",
          "dasgupta+size")


def make_loss(loss: Union[str, Callable], *, size_weight: float = 1.0, top_nodes: int = 0,
              triplet_weight: float = 1.0, labels=None, triplets=None, margin: float = 1.0,
              max_triplets: Optional[int] = None, sigmoid_slope: float = 5.0,
              dasgupta_mode: str = "dissimilarity", random_state=None, **term_weights) -> Callable:
    """Build ``J(hierarchy, u, w_tilde, w) -> scalar`` from a loss name and its weights.

    ``loss``: terms of the registry (:data:`hiseg.core.losses.TERMS`) joined by ``+``, e.g.
    :data:`LOSSES`: ``"closest"``, ``"closest+size"`` (``size_weight``, ``top_nodes``),
    ``"closest+triplet"`` (``triplet_weight``, ``labels`` with -1 = unlabelled or
    ``triplets``, ``margin``, ``max_triplets``), ``"dasgupta"`` (``sigmoid_slope``,
    ``dasgupta_mode``) and ``"dasgupta+size"``; the first term has weight 1, every other its
    ``<name>_weight`` (a keyword) or its registered default. The closest target is ``w``, the
    Dasgupta graph weights too. A callable is returned unchanged. ValueError for an unknown
    term, or a triplet term without exactly one of ``labels`` / ``triplets``.
    """
    if callable(loss):
        return loss
    if not isinstance(loss, str):
        raise ValueError(f"unknown loss {loss!r}; choose a '+' combination of {sorted(losses.TERMS)} "
                         f"(e.g. {LOSSES}) or pass a callable J(hierarchy, ultrametric, w_tilde, weights)")
    try:
        names = list(losses.parse_loss(loss))
    except ValueError as e:
        raise ValueError(f"unknown loss {loss!r}: {e}; e.g. {LOSSES}, or pass a callable "
                         "J(hierarchy, ultrametric, w_tilde, weights)") from None
    term_weights.update(size_weight=size_weight, triplet_weight=triplet_weight)
    weights = {n: 1.0 if i == 0 else float(term_weights.get(f"{n}_weight", losses.TERMS[n].weight))
               for i, n in enumerate(names)}
    unknown = sorted(k for k in term_weights if k[:-len("_weight")] not in losses.TERMS or not k.endswith("_weight"))
    if unknown:
        raise TypeError(f"make_loss: unexpected keyword(s) {unknown}")
    options = dict(top_nodes=top_nodes, margin=margin, sigmoid_slope=sigmoid_slope, dasgupta_mode=dasgupta_mode)
    objective = losses.Objective(weights, **{k: v for k, v in options.items()
                                             if any(k in losses.TERMS[n].options for n in names)})
    needs = objective.needs
    if "triplets" in needs or "labels" in needs:
        if (labels is None) == (triplets is None):
            raise ValueError(f"loss {loss!r} needs exactly one of `labels` or `triplets`")
        if triplets is None and "triplets" in needs:
            triplets = losses.make_triplets(labels, max_triplets=max_triplets, random_state=random_state)

    def J(h: Hierarchy, u: torch.Tensor, wt: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        return objective(losses.LossInputs(hierarchy=h, ultrametric=u, weights=wt, target=w, graph_weights=w,
                                           labels=labels, triplets=triplets))[0]

    J.__name__ = loss
    J.objective = objective
    return J


#: options of :func:`fit_ultrametric` (and of the clustering estimator, which reuses them)
OPTIMIZERS = ("amsgrad", "adam", "sgd", "newton")
POSITIVITY = ("softplus", "relu", "exp", None)
INITS = ("input", "average")


@dataclass
class FitResult:
    """What :func:`fit_ultrametric` returns: the ultrametric of the best iterate, its
    hierarchy, its loss, the iterations run, the best one, and the loss per iteration."""

    ultrametric: torch.Tensor
    hierarchy: Hierarchy
    loss: float
    n_iter: int
    best_iter: int
    history: list = field(default_factory=list)

    def __repr__(self) -> str:  # one line: not the E weights nor the loss of every iteration
        u = self.ultrametric
        return (f"FitResult(ultrametric=<{tuple(u.shape)} {str(u.dtype).replace('torch.', '')} on {u.device}>, "
                f"hierarchy={self.hierarchy!r}, loss={self.loss:.6g}, "
                f"n_iter={self.n_iter}, best_iter={self.best_iter}, history=<{len(self.history)} losses>)")


def fit_ultrametric(graph, weights, loss: Union[str, Callable] = "closest", *, lr: Optional[float] = None,
                    max_iter: int = 500, positivity: Optional[str] = "softplus", init="input",
                    patience: Optional[int] = 50, min_delta: float = 1e-6, optimizer: str = "amsgrad",
                    lr_decay: Optional[float] = None, callback: Optional[Callable] = None,
                    dtype: Optional[torch.dtype] = None, **loss_kwargs):
    r"""Fit an ultrametric to an edge-weighted graph: Algorithm 1 (AMSGrad on J(Phi(w~))).

    Parameters
    ----------
    graph : graph argument (higra graph or ``(sources, targets, num_vertices)``), connected.
    weights : (E,) tensor or array of input weights ``w`` (dissimilarities for the
        Dasgupta losses). The device of a tensor is used for the optimisation.
    loss : one of :data:`LOSSES` or a callable ``J(hierarchy, u, w_tilde, w) -> scalar``;
        term weights and options via ``loss_kwargs`` (see :func:`make_loss`).
    lr : step size; default 0.1 (the paper's AMSGrad step) for ``"amsgrad"``, ``"adam"``
        and ``"sgd"``, 1.0 (the full Gauss-Newton step) for ``"newton"``.
    max_iter : maximum number of iterations.
    positivity : ``"softplus"`` (w~ = s softplus(theta)), ``"relu"``, ``"exp"`` (w~ = s exp(theta),
        steps in log space) or ``None`` (w~ = s theta), with ``s`` the mean of ``|w|``: a
        step of the optimiser moves the weights by the same relative amount whatever
        their unit (with the paper's ``softplus(theta)``, small weights such as mean
        image gradients of ~0.05 sit in softplus's exponential regime and AMSGrad ends
        above average linkage on some RAGs, ``experiments/paper/rag_fitting.py``). With
        ``optimizer="newton"`` the step is taken on w~ itself and any positivity other
        than ``None`` is a projection (clamp at 0).
    init : ``"input"`` (w~ starts at w), ``"average"`` (at the average-linkage ultrametric
        of ``w`` on the graph) or a (E,) tensor/array (e.g. another ultrametric).
    patience, min_delta : stop when the best loss has not decreased by more than
        ``min_delta`` (relative) for ``patience`` iterations (``None``: never).
    optimizer : ``"amsgrad"`` (the paper), ``"adam"``, ``"sgd"`` or ``"newton"``.
        ``"newton"`` is gradient descent on w~ preconditioned by the diagonal of the
        closest term's Hessian: every pass edge ``p`` moves by
        ``-lr * grad_p * |E| / (2 c_p)``, ``c_p`` the number of edges whose pass edge is
        ``p``. For the pure closest loss with ``lr=1`` this sets each node's altitude to
        the mean input weight of the edges it merges (the exact minimiser for the current
        hierarchy), the merge order then changes and the iteration goes on. On superpixel
        RAGs it ends below average linkage's error in ~50-150 iterations
        (``experiments/paper/rag_fitting.py``). Needs a closest term: refused for the Dasgupta
        losses.
    lr_decay : optional multiplicative decay of the step size per iteration.
    callback : called as ``callback(iteration, loss_value, u)`` after each iteration.
    dtype : computation dtype (default: that of ``weights``, float64 for integer input is refused).

    Returns
    -------
    FitResult: ``.ultrametric`` (tensor (E,)), the ultrametric :math:`\Phi(\tilde w^*)` of the
    best iterate, ``.hierarchy``, ``.loss``, ``.n_iter``, ``.best_iter``, ``.history``.

    Cost per iteration: one :func:`~hiseg.build_hierarchy` (CPU) + the loss + one
    optimiser step, O(E log E).

    Raises
    ------
    ValueError / TypeError: invalid graph, weights (NaN, inf, wrong length, integer
    dtype, negative values for a Dasgupta loss), unknown loss or options.
    """
    el, w = _check_graph_and_weights(graph, weights, loss, positivity, dtype)
    lr = _check_options(loss, positivity, optimizer, lr, max_iter)
    J = make_loss(loss, **loss_kwargs)
    theta, param, scale = _parametrisation(_start(init, el, w), w, positivity, newton=optimizer == "newton")
    step = _stepper(optimizer, theta, lr, lr_decay, project=positivity is not None, scale=scale)
    name = loss if isinstance(loss, str) else getattr(loss, "__name__", "callable")
    return _descend(el, w, J, theta, param, step, int(max_iter), _EarlyStopping(patience, min_delta),
                    callback, name)


# ----------------------------------------------------------------------------- validation
def _check_graph_and_weights(graph, weights, loss, positivity, dtype):
    """``(edge list, detached weights tensor)``: the one validation of a fit's graph and weights
    (the loop then builds its hierarchies from them unchecked)."""
    el = as_edge_list(graph)
    if not isinstance(weights, torch.Tensor):
        weights = torch.as_tensor(np.asarray(weights))
    check_values(weights, True, el.num_edges)
    if dtype is not None:
        weights = weights.to(dtype)
    w = weights.detach()
    if isinstance(loss, str) and "dasgupta" in loss.split("+"):  # in the fit's dtype
        check_values(w, True, el.num_edges, nonnegative=True)
    if positivity is not None and bool((w < 0).any()):
        raise ValueError("weights contain negative values but positivity is enforced "
                         f"({positivity!r}); pass positivity=None for signed weights")
    big = float(w.abs().max()) if w.numel() else 0.0
    mean = float(w.abs().mean()) if w.numel() else 0.0
    fi = torch.finfo(w.dtype)
    if big * big > fi.max or (mean > 0 and mean * mean < fi.tiny):
        raise ValueError(f"weights of magnitude {mean:.3g} (mean) / {big:.3g} (max): their squares, which "
                         f"the losses take, {'overflow' if big * big > fi.max else 'underflow'} "
                         f"{str(w.dtype).replace('torch.', '')}; rescale them (UltrametricClustering "
                         "divides the distances by their mean)")
    return el, w


def _check_options(loss, positivity, optimizer, lr, max_iter) -> float:
    """Validate the options; return the step size (the optimizer's default for None)."""
    if positivity not in POSITIVITY:
        raise ValueError(f"positivity must be 'softplus', 'relu', 'exp' or None, got {positivity!r}")
    if optimizer not in OPTIMIZERS:
        raise ValueError(f"optimizer must be 'amsgrad', 'adam', 'sgd' or 'newton', got {optimizer!r}")
    if optimizer == "newton" and isinstance(loss, str) and "closest" not in loss.split("+"):
        raise ValueError(f"optimizer='newton' preconditions with the closest term's curvature; loss "
                         f"{loss!r} has no closest term (use 'amsgrad')")
    if lr is None:
        lr = 1.0 if optimizer == "newton" else 0.1
    if not (lr > 0):
        raise ValueError(f"lr must be positive, got {lr}")
    if int(max_iter) < 1:
        raise ValueError(f"max_iter must be >= 1, got {max_iter}")
    return float(lr)


# ----------------------------------------------------------------------------- start, parametrisation
def _start(init, el, w: torch.Tensor) -> torch.Tensor:
    """The starting weights w~_0."""
    if isinstance(init, str):
        if init not in INITS:
            raise ValueError(f"init must be 'input', 'average' or a (E,) array/tensor, got {init!r}")
        if init == "average":  # el and w are checked: the builder of checked arrays
            return average_linkage(el, host_weights(w)).device_ultrametric(w).detach()
        return w.clone()
    start = torch.as_tensor(init, dtype=w.dtype, device=w.device).detach().clone()
    check_values(start, True, el.num_edges, name="init")
    return start


def _inv_softplus(x: torch.Tensor) -> torch.Tensor:
    # log(exp(x) - 1), stable for large x; tiny x clamped to keep it finite
    x = x.clamp_min(1e-12)
    return x + torch.log(-torch.expm1(-x))


def _parametrisation(start: torch.Tensor, w: torch.Tensor, positivity, newton: bool):
    """``(theta, param, s)``: the optimised tensor and ``w~ = param(theta)``, scale-free
    (``w~ = s f(theta)``, ``s`` the mean of ``|w|``); newton steps on w~ itself (s = 1)."""
    scale = float(w.abs().mean()) if w.numel() else 1.0
    scale = scale if np.isfinite(scale) and scale > 0 else 1.0
    if newton:
        theta0, f = (start.clamp_min(0) if positivity is not None else start), None
        scale = 1.0
    elif positivity == "softplus":
        theta0, f = _inv_softplus(start / scale), torch.nn.functional.softplus
    elif positivity == "exp":  # log space: a step changes the weights by a relative amount
        theta0, f = torch.log(start.clamp_min(1e-12 * scale) / scale), torch.exp
    elif positivity == "relu":
        theta0, f = start.clamp_min(0) / scale, torch.relu
    else:
        theta0, f = start / scale, None

    def param(theta):
        return scale * (theta if f is None else f(theta))

    return theta0.clone().requires_grad_(True), param, scale


# ----------------------------------------------------------------------------- steps
def _stepper(optimizer: str, theta: torch.Tensor, lr: float, lr_decay, project: bool, scale: float = 1.0):
    """``step(hierarchy)``: one update of ``theta`` from its gradient. Adam's epsilon is
    scaled by ``scale**2``, the unit of the closest term's gradient, so that the steps do
    not depend on the unit of the weights (a fixed 1e-8 dominates tiny gradients)."""
    if optimizer == "newton":
        state = {"lr": lr}

        def step(h):
            _newton_step(theta, h, state["lr"], project)
            if lr_decay:
                state["lr"] *= lr_decay

        return step
    fi = torch.finfo(theta.dtype)  # 0 < eps < inf: edges with no gradient, huge units
    eps = min(max(1e-8 * scale * scale, float(fi.tiny)), float(fi.max))
    return _AdamStep(theta, lr, lr_decay, optimizer, eps)


class _AdamStep:
    """Adam / AMSGrad / SGD on one tensor, with an exponential step-size decay: the update
    functions of ``torch.optim`` (``torch.optim.adam.adam``, ``torch.optim.sgd.sgd``: what
    ``torch.optim.Adam(amsgrad=...).step()`` / ``SGD.step()`` call on the CPU, betas .9, .999)
    on state held here, with ``ExponentialLR``'s decay. The functions, not the classes: a
    ``torch.optim`` optimiser's constructor imports ``torch._dynamo`` (seconds on a cold
    start, most of a small fit's time: ``benchmarks/results/core.md``), the
    functions import nothing. Tested against the classes (``tests/core/test_fitting.py``)."""

    def __init__(self, theta: torch.Tensor, lr: float, lr_decay, kind: str, eps: float,
                 betas: tuple = (0.9, 0.999)):
        self.theta, self.lr, self.decay, self.kind, self.eps = theta, lr, lr_decay, kind, eps
        self.b1, self.b2 = betas
        self.state = None  # (exp_avg, exp_avg_sq, max_exp_avg_sq, step) on the first gradient

    @torch.no_grad()
    def __call__(self, h=None) -> None:
        from torch.optim.adam import adam
        from torch.optim.sgd import sgd

        g = self.theta.grad
        if g is not None:
            if self.kind == "sgd":
                sgd([self.theta], [g], [None], foreach=False, weight_decay=0.0, momentum=0.0, lr=self.lr,
                    dampening=0.0, nesterov=False, maximize=False)
            else:
                if self.state is None:
                    z = [torch.zeros_like(g, memory_format=torch.preserve_format) for _ in range(3)]
                    self.state = (*z, torch.tensor(0.0, dtype=torch.float64))
                m, v, vmax, t = self.state
                adam([self.theta], [g], [m], [v], [vmax], [t], foreach=False, amsgrad=self.kind == "amsgrad",
                     beta1=self.b1, beta2=self.b2, lr=self.lr, weight_decay=0.0, eps=self.eps, maximize=False)
        if self.decay:
            self.lr *= self.decay


def _newton_step(theta: torch.Tensor, h: Hierarchy, lr: float, project: bool) -> None:
    """In place: theta_p -= lr * grad_p * |E| / (2 c_p) on pass edges (c_p edges map to p)."""
    g = theta.grad
    if g is None:
        return
    E = theta.numel()
    with torch.no_grad():
        counts = torch.from_numpy(np.bincount(h.pass_edge, minlength=E)).to(theta.device, theta.dtype)
        scale = torch.where(counts > 0, E / (2.0 * counts.clamp_min(1)), torch.zeros_like(counts))
        theta.sub_(lr * g * scale)
        if project:
            theta.clamp_(min=0)


class _EarlyStopping:
    """Tracks the best iterate; ``update`` says when ``patience`` iterations have passed
    without a relative improvement of ``min_delta`` of the best loss."""

    def __init__(self, patience: Optional[int], min_delta: float):
        self.patience, self.min_delta = patience, min_delta
        self.best_loss, self.best_weights, self.best_iter = math.inf, None, -1
        self.since_best = 0

    def update(self, it: int, loss: float, weights: torch.Tensor) -> bool:
        first = self.best_weights is None
        self.since_best = 0 if first or loss < self.best_loss - self.min_delta * abs(self.best_loss) \
            else self.since_best + 1
        if first or loss < self.best_loss:  # the best iterate itself is always kept
            self.best_loss, self.best_weights, self.best_iter = loss, weights.detach().clone(), it
        return self.patience is not None and self.since_best >= self.patience


def _descend(el, w, J, theta, param, step, max_iter: int, stopper: _EarlyStopping, callback, name) -> FitResult:
    """The optimisation loop; returns the best iterate's ultrametric and hierarchy."""
    history = []
    it = 0
    for it in range(max_iter):
        theta.grad = None
        wt = param(theta)
        h = single_linkage(el, host_weights(wt))
        u = h.device_ultrametric(wt)
        val = J(h, u, wt, w)
        if not torch.isfinite(val):
            raise FloatingPointError(f"loss {name!r} became {val.item()} at iteration {it}")
        lv = float(val.detach())
        history.append(lv)
        stop = stopper.update(it, lv, wt)
        if callback is not None:
            callback(it, lv, u.detach())
        if stop:
            break
        val.backward()
        step(h)
    # the final iterate has not been evaluated after its last step: keep the best seen
    h = single_linkage(el, host_weights(stopper.best_weights))
    return FitResult(h.device_ultrametric(stopper.best_weights), h, stopper.best_loss, it + 1, stopper.best_iter, history)
