"""The triplets (ref, pos, neg) that the triplet term (:func:`hiseg.core.losses.triplet`) reads:
made from partial labels (:func:`make_triplets`, the paper's construction) or drawn within the
images of a training batch from the annotators' regions, on the host or on the device without a
synchronisation. Apart from the losses because drawing them is sampling, not a cost: the same
distribution three ways, tested against each other.
"""
from __future__ import annotations

from typing import Optional

import numpy as np
import torch

__all__ = ["make_triplets", "sample_batch_triplets", "sample_batch_triplets_torch"]


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
