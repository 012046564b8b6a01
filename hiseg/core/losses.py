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
=================  ==================================================================

The terms are registered by name (:data:`TERMS`, :func:`register_loss`): ``closest``,
``size``, ``triplet``, ``dasgupta`` and ``pixel`` (the network's pixel term); an
:class:`Objective` is a weighted sum of them, what :func:`hiseg.fit_ultrametric`,
:class:`hiseg.UltrametricClustering` and the Lightning module minimise. Adding a loss is
one function and one :func:`register_loss` line.

The ``mean`` normalisations are those of the paper's code, so that loss weights
(``lambda``) carry over. Everywhere here ``weights`` is the tensor being optimised
(whose hierarchy ``h`` is); targets and input graph weights have their own names
(``target``, ``graph_weights``).
"""
from __future__ import annotations

import functools
import math
import warnings
from dataclasses import dataclass, field
from typing import Callable, Mapping, Optional

import higra as hg
import numpy as np
import torch

from .ultrametric import Hierarchy, check_weights, leaf_lca

__all__ = ["closest", "cluster_size", "triplet", "make_triplets", "sample_batch_triplets",
           "sample_batch_triplets_torch", "dasgupta",
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


def sample_batch_triplets(sp_labels: np.ndarray, vertex_ptr: np.ndarray, per_image: int,
                          rng: np.random.Generator):
    """Triplets of superpixels (global ids) drawn within each image of a batch, for each annotator.

    ``sp_labels`` (A, V_total) holds each annotator's region of every superpixel
    (-1: none); ``vertex_ptr`` (B + 1,) the first vertex of every image. Per image and
    annotator, ``per_image // A`` triplets are drawn uniformly (:func:`make_triplets`)
    from the set of (ref, pos, neg) with ref, pos in one region and neg in another.
    Images or annotators with a single region contribute none; ``None`` when no triplet
    exists. O(total triplets).
    """
    refs, poss, negs = [], [], []
    a_count = max(1, sp_labels.shape[0])
    m = max(1, per_image // a_count)
    for b in range(len(vertex_ptr) - 1):
        v0, v1 = int(vertex_ptr[b]), int(vertex_ptr[b + 1])
        for a in range(sp_labels.shape[0]):
            lab = sp_labels[a, v0:v1]
            if (lab < 0).all():
                continue
            uniq, counts = np.unique(lab[lab >= 0], return_counts=True)
            if uniq.size < 2 or counts.max() < 2:
                continue
            r, p, n = make_triplets(lab, max_triplets=m, random_state=rng)
            refs.append(r + v0); poss.append(p + v0); negs.append(n + v0)
    if not refs:
        return None
    return np.concatenate(refs), np.concatenate(poss), np.concatenate(negs)


def sample_batch_triplets_torch(sp_labels: torch.Tensor, vertex_ptr: torch.Tensor, per_image: int,
                                num_labels: int, generator: Optional[torch.Generator] = None):
    """:func:`sample_batch_triplets` with torch on ``sp_labels``' device, without host synchronisation.

    Same distribution: per image and annotator, ``max(1, per_image // A)`` triplets drawn
    uniformly with replacement from the (ref, pos, neg) with ``ref < pos`` in one region
    and ``neg`` in another (as :func:`make_triplets`). Every shape is known beforehand, so
    an image and annotator with no triplet (a single region, or no region of two
    superpixels) still gets its slots, marked invalid.

    Parameters
    ----------
    sp_labels : int64 tensor (A, V_total)
        Each annotator's region of every superpixel (-1: none); region ids unique across
        images and increasing with the image (as :class:`~hiseg.data.collate.GraphBatch`'s).
    vertex_ptr : int64 tensor (B + 1,), on the same device: first vertex of every image.
    per_image : int
    num_labels : int
        An upper bound of the region ids + 1 (known on the host: the batch's ``num_labels``).
    generator : torch.Generator on the device, optional

    Returns
    -------
    (ref, pos, neg, valid): (T,) int64 global vertex ids and a (T,) bool mask, T = A B m.

    How: region members are made contiguous by one sort of ``(annotator, region)`` keys
    (images follow each other since region ids increase with the image); a ref-or-pos
    vertex ``x`` is drawn within its image and annotator with probability proportional
    to ``(n_c - 1)(L - n_c)`` (inverse CDF by ``searchsorted``; ``n_c`` its region's size,
    ``L`` the labelled superpixels), its partner uniformly among the other ``n_c - 1``
    members and ``neg`` uniformly among the ``L - n_c`` others: every valid (ordered pair,
    neg) has the same probability, so every (ref < pos, neg) too. O(A V log(A V) + T).
    """
    dev = sp_labels.device
    n_ann, n_vert = int(sp_labels.shape[0]), int(sp_labels.shape[1])
    n_img = int(vertex_ptr.shape[0]) - 1
    m = max(1, per_image // max(1, n_ann))
    stride = int(num_labels) + 1
    n_groups = n_ann * n_img
    i64 = dict(dtype=torch.int64, device=dev)
    lab = sp_labels.to(torch.int64)
    valid_entry = lab >= 0
    ann = torch.arange(n_ann, **i64)[:, None]
    image = torch.searchsorted(vertex_ptr[1:].contiguous(), torch.arange(n_vert, **i64), right=True)
    sentinel_key, sentinel_group = n_ann * stride, n_groups
    key = torch.where(valid_entry, ann * stride + lab, torch.full_like(lab, sentinel_key)).reshape(-1)
    group = torch.where(valid_entry, ann * n_img + image[None, :],
                        torch.full_like(lab, sentinel_group)).reshape(-1)
    order = torch.sort(key, stable=True).indices  # region members, then images, contiguous
    skey, sgroup = key[order], group[order]
    ones = torch.ones_like(key)
    csize = torch.zeros(sentinel_key + 1, **i64).index_add_(0, key, ones)
    cstart = torch.cumsum(csize, 0) - csize
    gsize = torch.zeros(n_groups + 1, **i64).index_add_(0, group, ones)
    gstart = torch.cumsum(gsize, 0) - gsize
    n_c, n_l = csize[skey], gsize[sgroup]
    wx = torch.where(skey < sentinel_key, (n_c - 1) * (n_l - n_c), torch.zeros_like(n_c)).to(torch.float64)
    cw = torch.cumsum(wx, 0)
    total = torch.zeros(n_groups + 1, dtype=torch.float64, device=dev).index_add_(0, sgroup, wx)[:n_groups]
    base = torch.cumsum(total, 0) - total
    u = torch.rand(n_groups, 3, m, dtype=torch.float64, device=dev, generator=generator)
    gs, gl = gstart[:n_groups, None], gsize[:n_groups, None]
    x = torch.searchsorted(cw, base[:, None] + u[:, 0] * total[:, None], right=True)
    x = torch.minimum(torch.maximum(x, gs), gs + (gl - 1).clamp_min(0)).clamp(0, key.numel() - 1)
    c = skey[x]
    nc = csize[c].clamp_min(1)
    cs = cstart[c]
    partner = (x - cs + 1 + (u[:, 1] * (nc - 1)).floor().to(torch.int64)) % nc
    y = cs + partner
    k = torch.minimum((u[:, 2] * (gl - nc)).floor().to(torch.int64), (gl - nc - 1).clamp_min(0))
    neg = gs + k
    neg = torch.where(neg >= cs, neg + nc, neg).clamp(0, key.numel() - 1)
    vx, vy, vn = (order[i] % n_vert for i in (x, y, neg))
    ok = (total > 0)[:, None].expand(-1, m)
    return (torch.minimum(vx, vy).reshape(-1), torch.maximum(vx, vy).reshape(-1), vn.reshape(-1),
            ok.reshape(-1))


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

    Triplets as tensors on ``weights``' device are looked up there (:func:`hiseg.core.ultrametric.leaf_lca`,
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
                        grad_card: Optional[np.ndarray] = None, chunk_elems: int = 1 << 21):
    """Soft cardinal of internal nodes and (optionally) its vector-Jacobian product.

    Returns (card (N-1,), grad_alt_int (N-1,) or None, err_bound).
    """
    from scipy.sparse import csr_matrix

    nl, n = h.num_leaves, h.num_nodes
    tree = h.tree
    sizes = h.sizes.astype(np.float64)
    par = h.parents
    s_ends = h.graph.sources[h.mst_edge_map]
    t_ends = h.graph.targets[h.mst_edge_map]
    alt = np.concatenate([np.zeros(nl), alt_int])
    v = sizes[par] - sizes  # sibling area (root: 0)
    v[-1] = 0.0
    lo, hi = float(alt_int.min()), float(alt_int.max())
    H = hi - lo
    sa = 1.0 / (1.0 + np.exp(-lam * alt_int))
    card = sa.copy()  # from d(x, x) = 0, for both ends: 0.5 * (sa + sa)
    want_grad = grad_card is not None
    g_alt = grad_card * lam * sa * (1 - sa) if want_grad else None
    if H <= 0:  # all internal altitudes equal: every other term is sigma(0) = 1/2
        card += 0.5 * (nl - 1)
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
    return card, g_alt, err * nl


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
    return _DasguptaFn.apply(alt_int, hierarchy, float(lam), float(tol), coef)


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
