r"""Cost functions on ultrametrics (Chierchia & Perret, NeurIPS 2019), differentiable.

Notation: graph :math:`G=(V,E)`, input weights :math:`w`, ultrametric :math:`u = \Phi(w~)`
(from :func:`hiseg.subdominant_ultrametric`), its :class:`~hiseg.ultrametric.Hierarchy`
``h``; :math:`\mathrm{lca}(e_{xy})` is the tree node where ``x`` and ``y`` merge and
:math:`d_u(x, y)` its altitude.

=================  ==================================================================
``closest``        :math:`\frac{1}{|E|}\sum_e (u(e) - w(e))^2`
``cluster_size``   :math:`\frac{1}{|E_k|}\sum_{e \in E_k} u(e) / \gamma(\mathrm{lca}(e))`,
                   :math:`E_k` the edges whose lca is one of the top-k nodes,
                   :math:`\gamma(n)` the size of the smallest child of ``n`` (constant)
``triplet``        :math:`\frac{1}{|T|}\sum_{(r,p,n)\in T}\max(0, \alpha + d_u(r,p) - d_u(r,n))`
``dasgupta``       :math:`\frac{1}{|E|}\sum_{e_{xy}} \widetilde{|\mathrm{lca}(x,y)|} / w(e_{xy})`
                   (dissimilarity) or :math:`\times w(e_{xy})` (similarity), with the soft
                   cardinal of :func:`soft_cardinal`
=================  ==================================================================

The ``mean`` normalisations are those of the paper's code, so that loss weights
(``lambda``) carry over.
"""
from __future__ import annotations

import functools
import math
from typing import Optional

import higra as hg
import numpy as np
import torch

from .ultrametric import Hierarchy, check_weights

__all__ = ["closest", "cluster_size", "triplet", "make_triplets", "dasgupta", "soft_cardinal",
           "sigmoid_expansion"]


def _reduce(x: torch.Tensor, reduction: str) -> torch.Tensor:
    if reduction == "mean":
        return x.mean() if x.numel() else x.sum()
    if reduction == "sum":
        return x.sum()
    if reduction == "none":
        return x
    raise ValueError(f"reduction must be 'mean', 'sum' or 'none', got {reduction!r}")


def closest(ultrametric: torch.Tensor, weights: torch.Tensor, reduction: str = "mean") -> torch.Tensor:
    r"""Closest-ultrametric loss :math:`\frac{1}{|E|}\sum_e (u(e) - w(e))^2`.

    ``ultrametric`` and ``weights`` are (E,) tensors on the same device. O(E).
    Raises ValueError on shape mismatch.
    """
    if ultrametric.shape != weights.shape:
        raise ValueError(f"closest: ultrametric {tuple(ultrametric.shape)} and weights "
                         f"{tuple(weights.shape)} differ in shape")
    return _reduce((ultrametric - weights) ** 2, reduction)


def cluster_size(ultrametric: torch.Tensor, hierarchy: Hierarchy, top_nodes: int = 0,
                 reduction: str = "mean") -> torch.Tensor:
    r"""Cluster-size regularisation :math:`\mathrm{mean}_{e\in E_k}\, u(e)/\gamma(\mathrm{lca}(e))`.

    Parameters
    ----------
    ultrametric : (E,) tensor, ``hierarchy.ultrametric(w)``.
    hierarchy : the :class:`~hiseg.ultrametric.Hierarchy` of ``ultrametric``.
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
def make_triplets(labels, max_triplets: Optional[int] = None, random_state=None):
    """Triplets (ref, pos, neg) of vertex ids from partial labels (``-1`` = unlabelled).

    All triplets: ``ref < pos`` with the same label, ``neg`` with another label (the
    paper's construction); with ``max_triplets``, that many drawn uniformly with
    replacement from the same set instead (O(max_triplets) memory).

    Raises ValueError when fewer than two labelled classes exist or no class has two
    labelled vertices.
    """
    labels = np.asarray(labels.detach().cpu().numpy() if hasattr(labels, "detach") else labels)
    if labels.ndim != 1:
        raise ValueError(f"labels must be 1-D, got shape {labels.shape}")
    idx = np.flatnonzero(labels >= 0)
    lab = labels[idx]
    classes, counts = np.unique(lab, return_counts=True)
    if classes.size < 2:
        raise ValueError("triplets need labelled vertices of at least two classes "
                         f"(got {classes.size} class)")
    if counts.max() < 2:
        raise ValueError("triplets need a class with at least two labelled vertices")
    L = idx.size
    n_pairs = counts * (counts - 1) // 2
    n_trip = n_pairs * (L - counts)
    total = int(n_trip.sum())
    rng = np.random.default_rng(random_state)
    refs, poss, negs = [], [], []
    if max_triplets is not None and max_triplets < total:
        cls = rng.choice(classes.size, size=int(max_triplets), p=n_trip / total)
        for ci in np.unique(cls):
            m = int((cls == ci).sum())
            members = idx[lab == classes[ci]]
            others = idx[lab != classes[ci]]
            i = rng.integers(0, members.size, m)
            j = (i + rng.integers(1, members.size, m)) % members.size
            a, b = np.minimum(i, j), np.maximum(i, j)
            refs.append(members[a]); poss.append(members[b]); negs.append(others[rng.integers(0, others.size, m)])
    else:
        for c in classes:
            members = idx[lab == c]
            others = idx[lab != c]
            if members.size < 2:
                continue
            a, b = np.triu_indices(members.size, 1)
            refs.append(np.repeat(members[a], others.size))
            poss.append(np.repeat(members[b], others.size))
            negs.append(np.tile(others, a.size))
    return (np.concatenate(refs).astype(np.int64), np.concatenate(poss).astype(np.int64),
            np.concatenate(negs).astype(np.int64))


def triplet(hierarchy: Hierarchy, weights: torch.Tensor, triplets=None, *, labels=None,
            margin: float = 1.0, max_triplets: Optional[int] = None, random_state=None,
            reduction: str = "mean") -> torch.Tensor:
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

    Cost O(N log N) once per hierarchy (lca preprocessing) + O(|T|).
    """
    if (triplets is None) == (labels is None):
        raise ValueError("triplet: give exactly one of `triplets` or `labels`")
    if triplets is None:
        if hasattr(labels, "__len__") and len(labels) != hierarchy.num_leaves:
            raise ValueError(f"labels has {len(labels)} entries for {hierarchy.num_leaves} vertices")
        triplets = make_triplets(labels, max_triplets=max_triplets, random_state=random_state)
    ref, pos, neg = (np.asarray(t.detach().cpu().numpy() if hasattr(t, "detach") else t, dtype=np.int64)
                     for t in triplets)
    if not (ref.shape == pos.shape == neg.shape):
        raise ValueError("triplet: ref, pos and neg must have the same length")
    alt = hierarchy.node_altitudes(weights)
    dev = weights.device
    n_rp = torch.from_numpy(hierarchy.lca(ref, pos)).to(dev)
    n_rn = torch.from_numpy(hierarchy.lca(ref, neg)).to(dev)
    return _reduce(torch.relu(margin + alt[n_rp] - alt[n_rn]), reduction)


# ----------------------------------------------------------------------------- Dasgupta
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
                        grad_card: Optional[np.ndarray] = None, chunk_bytes: int = 64 << 20):
    """Soft cardinal of internal nodes and (optionally) its vector-Jacobian product.

    Returns (card (N-1,), grad_alt_int (N-1,) or None, err_bound).
    """
    nl, n = h.num_leaves, h.num_nodes
    tree = h.tree
    sizes = h.sizes.astype(np.float64)
    par = h.parents
    s_ends = h.graph.sources[h.mst_edge_map]
    t_ends = h.graph.targets[h.mst_edge_map]
    alt = np.concatenate([np.zeros(nl), alt_int])
    hp = alt[par]  # altitude of the parent, per node (root: itself)
    v = sizes[par] - sizes  # sibling area (root: 0)
    v[-1] = 0.0
    lo, hi = float(alt_int.min()), float(alt_int.max())
    H = hi - lo
    card = np.empty(n - nl)
    sa = 1.0 / (1.0 + np.exp(-lam * alt_int))
    card[:] = sa  # from d(x, x) = 0, for both ends: 0.5 * (sa + sa)
    want_grad = grad_card is not None
    g_alt = np.zeros(n - nl) if want_grad else None
    g_hp = np.zeros(n) if want_grad else None
    if want_grad:
        g_alt += grad_card * lam * sa * (1 - sa)
    if H <= 0:  # all internal altitudes equal: every term is sigma(0) = 1/2
        card += 0.5 * (nl - 1)
        return card, g_alt, 0.0
    L = lam * H
    c, beta, err = sigmoid_expansion(round(L, 12), tol)
    a = (alt_int - lo) / H  # in [0, 1]
    b = np.where(np.arange(n) < nl, 0.0, 0.0) + (hp - lo) / H  # parents' altitudes, shifted
    b[-1] = 0.0
    # ---- feature list: each is (phi(b), dphi/db, psi(a), dpsi/da) as callables on arrays
    deg = 2 * len(c) - 1
    # polynomial part: p(a - b) = sum_{i,l} C[i, l] a^i b^l
    C = np.zeros((deg + 1, deg + 1))
    for j, cj in enumerate(c):
        k = 2 * j + 1
        for i in range(k + 1):
            C[i, k - i] += cj * math.comb(k, i) * (-1) ** (k - i)
    C[0, 0] += 0.5
    feats = []  # (kind, index)
    for l_ in range(deg + 1):
        feats.append(("pow", l_))
    K = beta.size
    for k in range(1, K + 1):
        feats.append(("cos", k))
        feats.append(("sin", k))

    def phi(kind, k, x):
        if kind == "pow":
            return x ** k
        w = k * math.pi
        return np.cos(w * x) if kind == "cos" else np.sin(w * x)

    def dphi(kind, k, x):
        if kind == "pow":
            return k * x ** (k - 1) if k > 0 else np.zeros_like(x)
        w = k * math.pi
        return -w * np.sin(w * x) if kind == "cos" else w * np.cos(w * x)

    apow = [a ** i for i in range(deg + 1)]

    def psi(kind, k):
        if kind == "pow":
            return sum(C[i, k] * apow[i] for i in range(deg + 1))
        w = k * math.pi
        # sin(w(a-b)) = sin(wa) cos(wb) - cos(wa) sin(wb)
        return beta[k - 1] * np.sin(w * a) if kind == "cos" else -beta[k - 1] * np.cos(w * a)

    def dpsi(kind, k):
        if kind == "pow":
            return sum(C[i, k] * i * apow[i - 1] for i in range(1, deg + 1))
        w = k * math.pi
        return beta[k - 1] * w * np.cos(w * a) if kind == "cos" else beta[k - 1] * w * np.sin(w * a)

    per_chunk = max(1, int(chunk_bytes // (8 * n)))
    half_g = 0.5 * grad_card if want_grad else None
    for f0 in range(0, len(feats), per_chunk):
        fs = feats[f0:f0 + per_chunk]
        Phi = np.empty((n, len(fs)))
        for j, (kind, k) in enumerate(fs):
            Phi[:, j] = v * phi(kind, k, b)
        P = hg.propagate_sequential_and_accumulate(tree, Phi, hg.Accumulators.sum)
        Ps, Pt = P[s_ends], P[t_ends]
        Psum = Ps + Pt
        Psi = np.empty((n - nl, len(fs)))
        for j, (kind, k) in enumerate(fs):
            Psi[:, j] = psi(kind, k)
        card += 0.5 * np.einsum("ij,ij->i", Psi, Psum)
        if want_grad:
            dPsi = np.empty_like(Psi)
            for j, (kind, k) in enumerate(fs):
                dPsi[:, j] = dpsi(kind, k)
            g_alt += half_g * np.einsum("ij,ij->i", dPsi, Psum) / H
            # G(x) = sum over nodes r with x an end of r of 0.5 g_r psi(a_r)
            Gr = Psi * half_g[:, None]
            G = np.zeros((nl, len(fs)))
            np.add.at(G, s_ends, Gr)
            np.add.at(G, t_ends, Gr)
            S = hg.accumulate_sequential(tree, G, hg.Accumulators.sum)
            dPhi = np.empty((n, len(fs)))
            for j, (kind, k) in enumerate(fs):
                dPhi[:, j] = dphi(kind, k, b)
            g_hp += v * np.einsum("ij,ij->i", dPhi, S) / H
    if want_grad:
        g_hp[-1] = 0.0
        g_alt += np.bincount(par[:-1] - nl, weights=g_hp[:-1], minlength=n - nl)
    return card, g_alt, err * nl


class _SoftCardinal(torch.autograd.Function):
    @staticmethod
    def forward(ctx, alt_int, h, lam, tol):
        a = alt_int.detach().cpu().double().numpy()
        card, _, err = _soft_cardinal_core(h, a, lam, tol)
        ctx.h, ctx.lam, ctx.tol = h, lam, tol
        ctx.save_for_backward(alt_int)
        return torch.from_numpy(card).to(device=alt_int.device, dtype=alt_int.dtype)

    @staticmethod
    def backward(ctx, g):
        (alt_int,) = ctx.saved_tensors
        a = alt_int.detach().cpu().double().numpy()
        _, grad, _ = _soft_cardinal_core(ctx.h, a, ctx.lam, ctx.tol, g.detach().cpu().double().numpy())
        return torch.from_numpy(grad).to(device=alt_int.device, dtype=alt_int.dtype), None, None, None


def soft_cardinal(hierarchy: Hierarchy, weights: torch.Tensor, lam: float = 5.0, tol: float = 1e-10):
    r"""Soft cardinal of every internal node (the paper's sigmoid relaxation of its size).

    For internal node ``r`` at altitude :math:`a_r` built by MST edge :math:`(s_r, t_r)`:

    .. math:: \widetilde{|r|} = \frac12 \sum_{x\in\{s_r,t_r\}} \sum_{z\in V}
              \sigma\big(\lambda\,(a_r - d_u(x, z))\big),\qquad d_u(x,x)=0,

    which tends to the number of leaves of ``r`` as :math:`\lambda\to\infty`.

    Computed exactly up to a bounded error, in O(num_nodes * K) time instead of the
    O(sum of leaf depths) of a direct evaluation: with shifted, scaled altitudes,
    :math:`\sigma(\lambda\Delta)` is replaced by a *separable* expansion (odd polynomial +
    ``K`` sines, :func:`sigmoid_expansion`) whose sup error is below ``tol``; each term
    factorises into a function of :math:`a_r` times a function of the ancestor altitude,
    so the sum over ancestors is a root-to-leaf prefix sum (one higra sweep per term
    batch). The error on each cardinal is at most ``tol * |V|``. ``K`` grows linearly
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
    alt_int = hierarchy.node_altitudes(weights)[hierarchy.num_leaves:]
    return _SoftCardinal.apply(alt_int, hierarchy, float(lam), float(tol))


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
    card = soft_cardinal(hierarchy, weights, lam=lam, tol=tol)
    node = torch.from_numpy(hierarchy.edge_lca - hierarchy.num_leaves).to(weights.device)
    ce = card[node]
    return _reduce(ce / gw if mode == "dissimilarity" else ce * gw, reduction)
