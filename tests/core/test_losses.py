"""Each loss against a naive O(N^2) (or worse) implementation on small graphs."""
import numpy as np
import pytest
import torch
from hypothesis import given, settings, strategies as st
from scipy.special import expit

from hiseg.core import losses
from hiseg.core.builders import grid_graph
from hiseg.core.soft_cardinal import _soft_cardinal_core
from hiseg.core.ultrametric import build_hierarchy, subdominant_ultrametric

from tests.core.test_ultrametric import random_connected_graph


def naive_distances(g, w):
    """All-pairs ultrametric distances d_u(x, y) by min-max paths (d(x, x) = 0)."""
    n = g.num_vertices
    D = np.full((n, n), np.inf)
    for s, t, x in zip(g.sources, g.targets, w):
        D[s, t] = min(D[s, t], x)
        D[t, s] = min(D[t, s], x)
    np.fill_diagonal(D, -np.inf)
    for k in range(n):
        D = np.minimum(D, np.maximum(D[:, k:k + 1], D[k:k + 1, :]))
    np.fill_diagonal(D, 0)
    return D


def naive_clusters(g, u):
    """For each edge, the set of vertices of the cluster lca(x, y) (connected at level u(e))."""
    D = naive_distances(g, u)
    return [np.flatnonzero(D[s] <= ue) for s, ue in zip(g.sources, u)]


def test_closest(rng):
    u = torch.tensor(rng.random(10))
    w = torch.tensor(rng.random(10))
    assert losses.closest(u, w).item() == pytest.approx(np.mean((u.numpy() - w.numpy()) ** 2))
    assert losses.closest(u, w, reduction="sum").item() == pytest.approx(np.sum((u.numpy() - w.numpy()) ** 2))
    with pytest.raises(ValueError, match="differ in shape"):
        losses.closest(u, w[:3])
    with pytest.raises(ValueError, match="reduction"):
        losses.closest(u, w, reduction="avg")
    # `target` is the argument's one name (`weights` names the optimised tensor in hiseg.core.losses)
    assert losses.closest(u, target=w).item() == losses.closest(u, w).item()
    with pytest.raises(TypeError, match="weights"):
        losses.closest(u, weights=w)


@pytest.mark.parametrize("top", [0, 1, 3, 10, 1000])
def test_cluster_size_naive(top, rng):
    g = random_connected_graph(rng, 25, 30)
    w = rng.random(g.num_edges)
    u, h = subdominant_ultrametric(g, torch.tensor(w), return_hierarchy=True)
    u = u.numpy()
    # naive: the cluster of edge e is lca(x, y); its children are the two clusters of x and y
    # just below level u(e) (distinct weights: exactly two)
    D = naive_distances(g, w)
    n = g.num_vertices
    node_levels = np.sort(np.unique(u))  # distinct altitudes, one per internal node here
    k = len(node_levels) if top == 0 else min(top, len(node_levels))
    top_levels = set(node_levels[len(node_levels) - k:])
    vals = []
    for s, t, ue in zip(g.sources, g.targets, u):
        if ue not in top_levels:
            continue
        cs = np.sum(D[s] < ue)
        ct = np.sum(D[t] < ue)
        vals.append(ue / min(cs, ct))
    expected = np.mean(vals)
    got = losses.cluster_size(torch.tensor(u), h, top_nodes=top).item()
    assert got == pytest.approx(expected)


def naive_triplet(D, labels, margin):
    vals = []
    lab = np.flatnonzero(labels >= 0)
    for i in lab:
        for j in lab:
            if j <= i or labels[j] != labels[i]:
                continue
            for k in lab:
                if labels[k] != labels[i]:
                    vals.append(max(0.0, margin + D[i, j] - D[i, k]))
    return np.mean(vals)


@pytest.mark.parametrize("seed", range(3))
def test_triplet_naive(seed):
    rng = np.random.default_rng(seed)
    g = random_connected_graph(rng, 20, 25)
    w = rng.random(g.num_edges)
    labels = np.full(20, -1)
    lab = rng.choice(20, 10, replace=False)
    labels[lab] = rng.integers(0, 3, 10)
    labels[lab[:2]] = 0  # at least a pair
    labels[lab[2]] = 1
    u, h = subdominant_ultrametric(g, torch.tensor(w), return_hierarchy=True)
    D = naive_distances(g, w)
    got = losses.triplet(h, torch.tensor(w), labels=labels, margin=0.3).item()
    assert got == pytest.approx(naive_triplet(D, labels, 0.3))
    # explicit triplets give the same
    trip = losses.make_triplets(labels)
    assert losses.triplet(h, torch.tensor(w), trip, margin=0.3).item() == pytest.approx(got)
    # subsampled triplets are valid triplets
    r, p, n = losses.make_triplets(labels, max_triplets=50, random_state=0)
    assert len(r) == 50 and np.all(labels[r] == labels[p]) and np.all(labels[r] != labels[n]) and np.all(r < p)


def _batch_labels():
    """Two images (7 and 6 superpixels), two annotators; region ids unique across images and
    increasing with the image, -1 unlabelled; image 1's second annotator has one region only."""
    lab = np.array([[0, 0, 1, 1, 1, 2, -1, 3, 3, 4, 4, 5, -1],
                    [0, 1, 1, 0, 2, 2, 2, 3, 3, 3, 3, -1, -1]])
    return lab, np.array([0, 7, 13])


def test_torch_triplet_sampler_matches_make_triplets():
    """Every drawn triplet is one of make_triplets' (same image, same annotator, ref < pos in
    one region, neg in another); per image and annotator the m draws are uniform over that
    set (chi-square against the enumeration); an image and
    annotator without triplets gets only invalid slots."""
    from scipy.stats import chisquare

    lab, ptr = _batch_labels()
    per_image = 2 * 20000
    g = torch.Generator().manual_seed(0)
    r, p, n, ok = losses.sample_batch_triplets_torch(torch.from_numpy(lab), torch.from_numpy(ptr), per_image,
                                                     int(lab.max()) + 1, g)
    m = per_image // lab.shape[0]
    assert r.shape == (2 * 2 * m,) and ok.dtype == torch.bool
    r, p, n, ok = r.numpy(), p.numpy(), n.numpy(), ok.numpy()
    for a in range(2):
        for b in range(2):
            v0, v1 = ptr[b], ptr[b + 1]
            sl = slice((a * 2 + b) * m, (a * 2 + b + 1) * m)
            local = lab[a, v0:v1]
            if a == 1 and b == 1:  # one region: no triplet
                assert not ok[sl].any()
                continue
            assert ok[sl].all()
            every = set(zip(*(x + v0 for x in losses.make_triplets(local))))
            drawn = list(zip(r[sl], p[sl], n[sl]))
            assert set(drawn) <= every
            counts = np.unique(np.array(drawn), axis=0, return_counts=True)[1]
            assert counts.size == len(every)  # every triplet drawn
            assert chisquare(counts).pvalue > 1e-3, (a, b)
    # and make_triplets' own frequencies on the same set agree (same distribution)
    local = lab[0, :7]
    mr, mp, mn = losses.make_triplets(local, max_triplets=20000, random_state=0)
    assert chisquare(np.unique(np.stack([mr, mp, mn], 1), axis=0, return_counts=True)[1]).pvalue > 1e-3


def test_torch_triplets_give_the_host_triplet_loss(rng):
    """The device path of `triplet` (tensors: one batched leaf_lca lookup) equals the host
    path on the same triplets; `valid` masks out slots."""
    from hiseg.core.average_linkage import average_linkage_ultrametric
    from hiseg.core.device import upload_indices

    g = grid_graph((4, 5))
    w = torch.tensor(rng.random(g.num_edges), requires_grad=True)
    labels = np.array([0] * 8 + [1] * 7 + [2] * 5)
    for h in (build_hierarchy(g, w), average_linkage_ultrametric(g, w, return_hierarchy=True)[1]):
        upload_indices(h, w.device, lca=True)
        r, p, n = (torch.from_numpy(x) for x in losses.make_triplets(labels, 300, 0))
        host = losses.triplet(h, w, (r.numpy(), p.numpy(), n.numpy()), margin=0.4)
        dev = losses.triplet(h, w, (r, p, n), margin=0.4)
        torch.testing.assert_close(dev, host)
        valid = torch.arange(300) < 100
        torch.testing.assert_close(losses.triplet(h, w, (r, p, n), margin=0.4, valid=valid),
                                   losses.triplet(h, w, (r[:100], p[:100], n[:100]), margin=0.4))
        assert losses.triplet(h, w, (r, p, n), valid=torch.zeros(300, dtype=torch.bool)).item() == 0


def test_triplet_gradient_flows_to_pass_edges(rng):
    g = grid_graph((4, 5))
    w = torch.tensor(rng.random(g.num_edges), requires_grad=True)
    h = build_hierarchy(g, w)
    labels = np.array([0] * 10 + [1] * 10)
    losses.triplet(h, w, labels=labels, margin=10.0).backward()
    nz = np.flatnonzero(w.grad.numpy())
    assert set(nz) <= set(h.mst_edge_map)


def test_triplet_bad_input(rng):
    g = grid_graph((3, 3))
    w = torch.rand(g.num_edges, dtype=torch.float64)
    h = build_hierarchy(g, w)
    with pytest.raises(ValueError, match="at least two classes"):
        losses.triplet(h, w, labels=np.array([0, 0, -1, -1, -1, -1, -1, -1, -1]))
    with pytest.raises(ValueError, match="9 vertices"):
        losses.triplet(h, w, labels=np.array([0, 1]))
    with pytest.raises(ValueError, match="exactly one"):
        losses.triplet(h, w)


def naive_soft_cardinal(g, w, h, lam):
    """The paper's soft cardinal by the sum over all vertex pairs."""
    D = naive_distances(g, w)
    n = g.num_vertices
    out = []
    alt = h.node_altitudes(torch.tensor(w)).numpy()
    for i, e in enumerate(h.mst_edge_map):
        a = alt[n + i]
        tot = 0.0
        for x in (g.sources[e], g.targets[e]):
            tot += np.sum(expit(lam * (a - D[x])))
        out.append(tot / 2)
    return np.array(out)


@pytest.mark.parametrize("lam", [0.1, 1.0, 5.0, 30.0, 200.0])
@pytest.mark.parametrize("scale", [0.01, 1.0, 7.0])
def test_soft_cardinal_naive(lam, scale, rng):
    g = random_connected_graph(rng, 30, 30)
    w = rng.random(g.num_edges) * scale
    h = build_hierarchy(g, w)
    got = losses.soft_cardinal(h, torch.tensor(w), lam=lam).numpy()
    ref = naive_soft_cardinal(g, w, h, lam)
    np.testing.assert_allclose(got, ref, atol=30 * 1e-10 * 10, rtol=0)


def test_soft_cardinal_chunks_of_frequencies_agree(rng):
    """The sine block in chunks of a few frequencies (the harmonics carried from chunk to
    chunk) gives the one-chunk values and gradients."""
    g = random_connected_graph(rng, 40, 40)
    h = build_hierarchy(g, rng.random(g.num_edges) * 5)
    alt = rng.random(h.num_nodes - h.num_leaves) * 5
    gc = rng.standard_normal(alt.size)
    one = _soft_cardinal_core(h, alt, 30.0, 1e-10, gc)
    chunked = _soft_cardinal_core(h, alt, 30.0, 1e-10, gc, chunk_elems=3 * h.num_nodes)
    for x, y in zip(one, chunked):
        np.testing.assert_allclose(x, y, rtol=1e-12, atol=1e-12)


def test_soft_cardinal_tends_to_size(rng):
    g = random_connected_graph(rng, 30, 30)
    w = rng.permutation(g.num_edges) + 1.0  # distinct altitudes, gaps >= 1
    h = build_hierarchy(g, w)
    # steep sigmoid: from end x in child c_x, the z of c_x count 1 and those of the other
    # child (at distance exactly a_r) count 1/2, so the limit is 3/4 of the node size
    got = losses.soft_cardinal(h, torch.tensor(w), lam=20.0).numpy()
    np.testing.assert_allclose(got, 0.75 * h.sizes[30:], atol=1e-6)


def test_dasgupta_naive_and_gradient(rng):
    g = random_connected_graph(rng, 16, 16)
    gw = rng.random(g.num_edges) + 0.1
    w = torch.tensor(rng.random(g.num_edges) + 0.1, requires_grad=True)
    h = build_hierarchy(g, w)
    lam = 3.0
    card = naive_soft_cardinal(g, w.detach().numpy(), h, lam)
    ref = np.mean(card[h.edge_lca - 16] / gw)
    val = losses.dasgupta(h, w, torch.tensor(gw), lam=lam)
    assert val.item() == pytest.approx(ref, rel=1e-9)
    ref_sim = np.mean(card[h.edge_lca - 16] * gw)
    assert losses.dasgupta(h, w, gw, lam=lam, mode="similarity").item() == pytest.approx(ref_sim, rel=1e-9)
    val.backward()
    # finite differences with the hierarchy held fixed (the loss is smooth in the altitudes)
    eps = 1e-6
    w0 = w.detach().numpy()
    for e in rng.choice(g.num_edges, 8, replace=False):
        wp, wm = w0.copy(), w0.copy()
        wp[e] += eps
        wm[e] -= eps
        fp = losses.dasgupta(h, torch.tensor(wp), gw, lam=lam).item()
        fm = losses.dasgupta(h, torch.tensor(wm), gw, lam=lam).item()
        assert w.grad[e].item() == pytest.approx((fp - fm) / (2 * eps), abs=1e-6)


def test_dasgupta_bad_input(rng):
    g = grid_graph((3, 3))
    w = torch.rand(g.num_edges, dtype=torch.float64)
    h = build_hierarchy(g, w)
    gw = torch.rand(g.num_edges, dtype=torch.float64)
    with pytest.raises(ValueError, match="negative"):
        losses.dasgupta(h, w, -gw)
    gw0 = gw.clone()
    gw0[0] = 0
    with pytest.raises(ValueError, match="zeros"):
        losses.dasgupta(h, w, gw0)
    with pytest.raises(ValueError, match="mode"):
        losses.dasgupta(h, w, gw, mode="distance")
    with pytest.raises(ValueError, match="positive"):
        losses.dasgupta(h, w, gw, lam=0)


@settings(max_examples=25, deadline=None)
@given(st.floats(0.05, 300))
def test_sigmoid_expansion_error_bound(lam_h):
    """The expansion's sup error on [-1, 1] is below its stated bound."""
    c, beta, err = losses.sigmoid_expansion(lam_h)
    tau = np.linspace(-1, 1, 20001)
    approx = 0.5 + sum(cj * tau ** (2 * j + 1) for j, cj in enumerate(c))
    approx = approx + np.sin(np.outer(tau, np.arange(1, beta.size + 1) * np.pi)) @ beta
    exact = 1 / (1 + np.exp(-lam_h * tau))
    assert np.abs(approx - exact).max() <= err + 1e-11
