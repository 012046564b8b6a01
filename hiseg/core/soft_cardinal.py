r"""The paper's soft cardinal of the tree nodes (a sigmoid relaxation of a node's size), the
machinery under the relaxed Dasgupta cost (:func:`hiseg.core.losses.dasgupta`): a separable
expansion of the sigmoid (odd polynomial + sines, :func:`sigmoid_expansion`) that turns the sum
over ancestors into root-to-leaf prefix sums, and its vector-Jacobian product. Apart from the
losses because it is one algorithm of its own (about 250 lines of numerics), which the cost only
weights and sums.
"""
from __future__ import annotations

import functools
import math
from typing import Optional

import numpy as np
import torch

from ._lazy import import_higra
from .ultrametric import Hierarchy

hg = import_higra()  # higra, its plotting imports deferred (hiseg.core._lazy.import_higra)

__all__ = ["soft_cardinal", "soft_cardinal_sum", "sigmoid_expansion"]


def _sigmoid_derivatives_at(x: float, orders: int) -> np.ndarray:
    """sigma^(n)(x) for n = 0..orders, via sigma^(n) = P_n(sigma), P_{n+1} = P_n' s(1-s)."""
    P = np.polynomial.Polynomial
    s = 1.0 / (1.0 + math.exp(-x)) if x > -700 else 0.0
    p = P([0.0, 1.0])
    out = []
    for _ in range(orders + 1):
        out.append(p(s))
        p = p.deriv() * P([0.0, 1.0, -1.0])
    return np.array(out)


@functools.lru_cache(maxsize=64)
def sigmoid_expansion(L: float, tol: float = 1e-10, degree: int = 7, max_terms: int = 4096):
    r"""Separable expansion of :math:`\sigma(L\tau)` on :math:`\tau\in[-1,1]`.

    .. math:: \sigma(L\tau) \approx \tfrac12 + p(\tau) + \sum_{k=1}^{K}\beta_k \sin(k\pi\tau)

    where ``p`` is the odd polynomial of degree ``degree`` matching the even derivatives
    of :math:`\sigma(L\tau)-\tfrac12` at :math:`\tau=1` (so the remainder's odd periodic
    extension is smooth and its sine coefficients decay fast) and ``K`` is the smallest
    number of terms whose coefficient tail :math:`\sum_{k>K}|\beta_k|` — a bound on the
    sup-norm error — is below ``tol``.

    Returns ``(poly_coeffs, beta, err_bound)`` with ``poly_coeffs[j]`` the coefficient of
    :math:`\tau^{2j+1}`. Raises ValueError if ``max_terms`` do not reach ``tol``.
    """
    from scipy.fft import dst

    M = (degree - 1) // 2
    d = _sigmoid_derivatives_at(L, 2 * M)
    rhs = np.array([L ** (2 * m) * d[2 * m] for m in range(M + 1)])
    rhs[0] -= 0.5
    A = np.zeros((M + 1, M + 1))
    for m in range(M + 1):
        for j in range(M + 1):
            k = 2 * j + 1
            if k >= 2 * m:
                A[m, j] = math.factorial(k) / math.factorial(k - 2 * m)
    c = np.linalg.solve(A, rhs)
    Q = 1 << 16
    while Q < 16 * max(L, 1.0) and Q < (1 << 22):
        Q <<= 1
    tau = np.arange(1, Q) / Q
    f = 1.0 / (1.0 + np.exp(-L * tau)) - 0.5
    p = sum(c[j] * tau ** (2 * j + 1) for j in range(M + 1))
    beta = dst(f - p, type=1) / Q  # beta_k, k = 1..Q-1
    tail = np.cumsum(np.abs(beta)[::-1])[::-1]  # tail[k-1] = sum_{k' >= k} |beta|
    ok = np.flatnonzero(tail < tol)
    if ok.size == 0 or ok[0] > max_terms:
        raise ValueError(f"the sigmoid expansion needs more than {max_terms} terms for "
                         f"lambda * altitude range = {L:.4g}; lower lambda or rescale the weights")
    K = int(ok[0])  # keep beta_1..beta_K; the rest is below tol
    err = float(tail[K]) if K < tail.size else 0.0
    return c, beta[:K].copy(), err


def _soft_cardinal_core(h: Hierarchy, alt_int: np.ndarray, lam: float, tol: float,
                        grad_card: Optional[np.ndarray] = None, chunk_elems: int = 1 << 21,
                        leaf_weights: Optional[np.ndarray] = None):
    """Soft cardinal of internal nodes and (optionally) its vector-Jacobian product; with
    ``leaf_weights`` (N,) >= 0 every leaf counts its weight instead of 1 (the soft volume of
    the relaxed structural entropy).

    Returns (card (N-1,), grad_alt_int (N-1,) or None, err_bound).
    """
    from scipy.sparse import csr_matrix

    nl, n = h.num_leaves, h.num_nodes
    tree = h.tree
    par = h.parents
    s_ends = h.graph.sources[h.mst_edge_map]
    t_ends = h.graph.targets[h.mst_edge_map]
    sizes, end_weight, total = _leaf_measure(h, leaf_weights, s_ends, t_ends)
    alt = np.concatenate([np.zeros(nl), alt_int])
    v = sizes[par] - sizes  # sibling area (root: 0)
    v[-1] = 0.0
    lo, hi = float(alt_int.min()), float(alt_int.max())
    H = hi - lo
    sa = 1.0 / (1.0 + np.exp(-lam * alt_int))
    card = sa * end_weight  # from d(x, x) = 0, for both ends: 0.5 * (w_s sa + w_t sa)
    want_grad = grad_card is not None
    g_alt = grad_card * lam * sa * (1 - sa) * end_weight if want_grad else None
    if H <= 0:  # all internal altitudes equal: every other term is sigma(0) = 1/2
        card += 0.5 * (total - end_weight)
        return card, g_alt, 0.0
    # round lam * H up on a fine geometric grid (the expansion is cached per grid value):
    # a larger H only shrinks the range of tau = (a - b) / H inside [-1, 1]
    L = float(np.exp(np.ceil(np.log(lam * H) / 0.005) * 0.005))
    H = L / lam
    c, beta, err = sigmoid_expansion(L, tol)
    a = (alt_int - lo) / H  # query altitudes in [0, 1]
    b = (alt[par] - lo) / H  # altitude of each node's parent, in [0, 1]
    b[-1] = 0.0
    C = _polynomial_matrix(c)
    ends = None
    if want_grad:
        half_g = 0.5 * grad_card
        g_b = np.zeros(n)
        m = n - nl
        ends = csr_matrix((np.ones(2 * m), (np.concatenate([s_ends, t_ends]), np.tile(np.arange(m), 2))),
                          shape=(nl, m))

    def accumulate(Phi, Psi, dPhi, dPsi):
        """Add one batch of separable terms sum_j psi_j(a) * sum_{path} v phi_j(b)."""
        nonlocal card, g_alt
        P = hg.propagate_sequential_and_accumulate(tree, Phi, hg.Accumulators.sum)
        Psum = P[s_ends] + P[t_ends]
        card += 0.5 * np.einsum("ij,ij->i", Psi, Psum)
        if want_grad:
            g_alt += half_g * np.einsum("ij,ij->i", dPsi, Psum) / H
            G = ends @ (Psi * half_g[:, None])  # per leaf: sum over the nodes it ends
            S = hg.accumulate_sequential(tree, G, hg.Accumulators.sum)
            g_b[:] += np.einsum("ij,ij->i", dPhi, S) / H

    accumulate(*_polynomial_terms(a, b, v, C))
    # sine block: beta_k sin(w(a - b)) = beta_k [sin(wa) cos(wb) - cos(wa) sin(wb)], w = k pi.
    # cos/sin of k*theta by rotation recurrences (one multiply-add per entry, not a libm call)
    K = beta.size
    per = max(1, min(K, chunk_elems // n))
    cb1, sb1 = np.cos(math.pi * b), np.sin(math.pi * b)
    ca1, sa1 = np.cos(math.pi * a), np.sin(math.pi * a)
    cb_prev, sb_prev = np.ones(n), np.zeros(n)
    ca_prev, sa_prev = np.ones(n - nl), np.zeros(n - nl)
    for k0 in range(0, K, per):
        k = np.arange(k0 + 1, min(K, k0 + per) + 1)
        CB, SB = _harmonics(cb1, sb1, cb_prev, sb_prev, k.size)
        CA, SA = _harmonics(ca1, sa1, ca_prev, sa_prev, k.size)
        cb_prev, sb_prev, ca_prev, sa_prev = CB[-1], SB[-1], CA[-1], SA[-1]
        accumulate(*_sine_terms(beta[k - 1][:, None], (k * math.pi)[:, None], CB, SB, CA, SA, v, want_grad))
    if want_grad:
        g_b[-1] = 0.0
        g_alt += np.bincount(par[:-1] - nl, weights=g_b[:-1], minlength=n - nl)
    return card, g_alt, err * total


def _leaf_measure(h: Hierarchy, leaf_weights, s_ends, t_ends):
    """(the measure of every node, the mean weight of each internal node's two building ends, the
    total): the leaf counts, 1 and N without ``leaf_weights``; with them, their sums."""
    if leaf_weights is None:
        return h.sizes.astype(np.float64), 1.0, float(h.num_leaves)
    lw = np.asarray(leaf_weights, dtype=np.float64)
    sizes = hg.accumulate_sequential(h.tree, lw, hg.Accumulators.sum)
    return sizes, 0.5 * (lw[s_ends] + lw[t_ends]), float(lw.sum())


def _polynomial_matrix(c) -> np.ndarray:
    """C with 1/2 + p(a - b) = sum_{i,l} C[i, l] a^i b^l, p(t) = sum_j c_j t^(2j+1) (binomial expansion)."""
    deg = 2 * len(c) - 1
    C = np.zeros((deg + 1, deg + 1))
    for j, cj in enumerate(c):
        k = 2 * j + 1
        for i in range(k + 1):
            C[i, k - i] += cj * math.comb(k, i) * (-1) ** (k - i)
    C[0, 0] += 0.5
    return C


def _polynomial_terms(a, b, v, C):
    """The separable terms (Phi, Psi, dPhi, dPsi) of the polynomial part sum C[i, l] a^i b^l."""
    deg = C.shape[0] - 1
    bp = b[:, None] ** np.arange(deg + 1)[None, :]
    ap = a[:, None] ** np.arange(deg + 1)[None, :]
    dPhi = np.zeros_like(bp)
    dPhi[:, 1:] = bp[:, :-1] * np.arange(1, deg + 1)[None, :] * v[:, None]
    return bp * v[:, None], ap @ C, dPhi, (ap[:, :-1] * np.arange(1, deg + 1)[None, :]) @ C[1:, :]


def _harmonics(c1, s1, c_prev, s_prev, nk: int):
    """(cos, sin) of (m + 1..m + nk) theta, (nk, len) each, from those of theta (``c1``,
    ``s1``) and of m theta (``c_prev``, ``s_prev``): rotation recurrences, one multiply-add
    per entry instead of a libm call."""
    C, S = np.empty((nk, c1.size)), np.empty((nk, c1.size))
    for j in range(nk):
        C[j] = c_prev * c1 - s_prev * s1
        S[j] = s_prev * c1 + c_prev * s1
        c_prev, s_prev = C[j], S[j]
    return C, S


def _sine_terms(bk, w, CB, SB, CA, SA, v, want_grad: bool):
    """The separable terms (Phi, Psi, dPhi, dPsi) of beta_k sin(w (a - b)) =
    beta_k [sin(wa) cos(wb) - cos(wa) sin(wb)] for a chunk of frequencies ``w = k pi``."""
    Phi = np.ascontiguousarray((np.concatenate([CB, SB], axis=0) * v).T)
    Psi = np.ascontiguousarray(np.concatenate([bk * SA, -bk * CA], axis=0).T)
    if not want_grad:
        return Phi, Psi, None, None
    dPhi = (np.concatenate([-w * SB, w * CB], axis=0) * v).T
    dPsi = np.concatenate([bk * w * CA, bk * w * SA], axis=0).T
    return Phi, Psi, dPhi, dPsi


class _SoftCardinal(torch.autograd.Function):
    @staticmethod
    def forward(ctx, alt_int, h, lam, tol, leaf_weights):
        a = alt_int.detach().cpu().double().numpy()
        card, _, err = _soft_cardinal_core(h, a, lam, tol, leaf_weights=leaf_weights)
        ctx.h, ctx.lam, ctx.tol, ctx.leaf_weights = h, lam, tol, leaf_weights
        ctx.save_for_backward(alt_int)
        return torch.from_numpy(card).to(device=alt_int.device, dtype=alt_int.dtype)

    @staticmethod
    def backward(ctx, g):
        (alt_int,) = ctx.saved_tensors
        a = alt_int.detach().cpu().double().numpy()
        _, grad, _ = _soft_cardinal_core(ctx.h, a, ctx.lam, ctx.tol, g.detach().cpu().double().numpy(),
                                         leaf_weights=ctx.leaf_weights)
        return torch.from_numpy(grad).to(device=alt_int.device, dtype=alt_int.dtype), None, None, None, None


class _DasguptaFn(torch.autograd.Function):
    """sum_r coef_r * card_r with its gradient computed in the same pass (coef is constant)."""

    @staticmethod
    def forward(ctx, alt_int, h, lam, tol, coef):
        a = alt_int.detach().cpu().double().numpy()
        need = alt_int.requires_grad
        card, grad, _ = _soft_cardinal_core(h, a, lam, tol, coef if need else None)
        if need:
            ctx.save_for_backward(torch.from_numpy(grad).to(device=alt_int.device, dtype=alt_int.dtype))
        return alt_int.new_tensor(float(np.dot(coef, card)))

    @staticmethod
    def backward(ctx, g):
        (grad,) = ctx.saved_tensors
        return grad * g, None, None, None, None


def soft_cardinal_sum(hierarchy: Hierarchy, alt_int: torch.Tensor, lam: float, tol: float,
                      coef: np.ndarray) -> torch.Tensor:
    """``sum_r coef[r] * soft_cardinal(r)`` over the internal nodes of altitudes ``alt_int`` (the
    relaxed Dasgupta cost is this sum): differentiable in ``alt_int``, the gradient computed in the
    forward pass itself (``coef`` constant), so one pass instead of two."""
    return _DasguptaFn.apply(alt_int, hierarchy, lam, tol, coef)


def soft_cardinal(hierarchy: Hierarchy, weights: torch.Tensor, lam: float = 5.0, tol: float = 1e-10,
                  leaf_weights=None):
    r"""Soft cardinal of every internal node (the paper's sigmoid relaxation of its size).

    For internal node ``r`` at altitude :math:`a_r` built by MST edge :math:`(s_r, t_r)`:

    .. math:: \widetilde{|r|} = \frac12 \sum_{x\in\{s_r,t_r\}} \sum_{z\in V}
              \sigma\big(\lambda\,(a_r - d_u(x, z))\big),\qquad d_u(x,x)=0,

    which tends to 3/4 of the number of leaves of ``r`` as :math:`\lambda\to\infty` (from
    each end, the leaves of the other child are at distance exactly :math:`a_r` and count 1/2).
    With ``leaf_weights`` ((N,) nonnegative, constants) every leaf ``z`` counts its weight
    :math:`m_z` in the sum: a soft *volume* (the relaxed structural entropy's, with the
    degrees as weights).

    Computed exactly up to a bounded error, in O(num_nodes * K) time instead of the
    O(sum of leaf depths) of a direct evaluation: with shifted, scaled altitudes,
    :math:`\sigma(\lambda\Delta)` is replaced by a *separable* expansion (odd polynomial +
    ``K`` sines, :func:`sigmoid_expansion`) whose sup error is below ``tol``; each term
    factorises into a function of :math:`a_r` times a function of the ancestor altitude,
    so the sum over ancestors is a root-to-leaf prefix sum (one higra sweep per term
    batch). The error on each cardinal is at most ``tol * |V|`` (``tol * sum(m)``). ``K`` grows linearly
    with :math:`\lambda` times the altitude range (``K`` ~ 20 at 5, ~ 500 at 100).

    Returns a (N-1,) tensor (dtype/device of ``weights``), differentiable w.r.t. ``weights``
    through the altitudes (backward costs one more forward-sized pass).
    """
    if hierarchy.batch is not None and hierarchy.batch.num_graphs > 1:
        raise ValueError("soft_cardinal is defined per graph, not on a batch")
    if not lam > 0:
        raise ValueError(f"lambda (sigmoid slope) must be positive, got {lam}")
    if hierarchy.num_leaves < 2:
        return weights.new_zeros(0)
    if leaf_weights is not None:
        leaf_weights = np.asarray(leaf_weights.detach().cpu().numpy() if hasattr(leaf_weights, "detach")
                                  else leaf_weights, dtype=np.float64)
        if leaf_weights.shape != (hierarchy.num_leaves,) or not np.all(np.isfinite(leaf_weights)) \
                or np.any(leaf_weights < 0):
            raise ValueError(f"leaf_weights must be {hierarchy.num_leaves} finite nonnegative values (one per "
                             f"leaf), got shape {leaf_weights.shape}")
    alt_int = hierarchy.node_altitudes(weights)[hierarchy.num_leaves:]
    return _SoftCardinal.apply(alt_int, hierarchy, float(lam), float(tol), leaf_weights)
