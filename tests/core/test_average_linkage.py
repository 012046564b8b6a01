"""The differentiable average-linkage layer against independent truths: scipy's UPGMA,
a brute-force length-weighted average linkage, finite differences."""
import numpy as np
import pytest
import torch
from hypothesis import given, settings, strategies as st
from scipy.cluster.hierarchy import cophenet, linkage
from scipy.spatial.distance import pdist

import hiseg
from _graphs import complete_graph, random_connected_graph
from hiseg.core import losses
from hiseg.core.graph import EdgeList, batch_graphs
from hiseg.core.average_linkage import average_linkage_ultrametric, build_average_linkage_hierarchy


def brute_average_linkage(g: EdgeList, w, lengths=None):
    """Textbook agglomeration: merge the adjacent pair of clusters of smallest
    length-weighted mean inter-cluster weight; an edge's value is the merge joining its ends."""
    n = g.num_vertices
    ln = np.ones(g.num_edges) if lengths is None else np.asarray(lengths, float)
    cluster = list(range(n))
    u = np.full(g.num_edges, np.nan)
    for _ in range(n - 1):
        num, den = {}, {}
        for e, (a, b) in enumerate(zip(g.sources, g.targets)):
            ca, cb = cluster[a], cluster[b]
            if ca == cb:
                continue
            k = (min(ca, cb), max(ca, cb))
            num[k] = num.get(k, 0.0) + ln[e] * w[e]
            den[k] = den.get(k, 0.0) + ln[e]
        k = min(num, key=lambda kk: num[kk] / den[kk])
        alt = num[k] / den[k]
        for e, (a, b) in enumerate(zip(g.sources, g.targets)):
            if {cluster[a], cluster[b]} == set(k):
                u[e] = alt
        cluster = [k[0] if c == k[1] else c for c in cluster]
    return u


def test_equals_scipy_upgma_on_complete_graphs(rng):
    for n in (2, 3, 7, 25):
        X = rng.normal(size=(n, 3))
        d = pdist(X)
        g = complete_graph(n)
        u = average_linkage_ultrametric(g, torch.from_numpy(d))
        ref = cophenet(linkage(d, method="average"))
        np.testing.assert_allclose(u.numpy(), ref, rtol=1e-12, atol=1e-12)


@settings(max_examples=40, deadline=None)
@given(n=st.integers(2, 12), extra=st.integers(0, 20), seed=st.integers(0, 10 ** 6), weighted=st.booleans())
def test_equals_brute_force_on_sparse_graphs(n, extra, seed, weighted):
    rng = np.random.default_rng(seed)
    g = random_connected_graph(rng, n, extra)
    w = rng.random(g.num_edges)
    ln = rng.integers(1, 6, g.num_edges).astype(float) if weighted else None
    u = average_linkage_ultrametric(g, torch.from_numpy(w), ln)
    np.testing.assert_allclose(u.numpy(), brute_average_linkage(g, w, ln), rtol=1e-10, atol=1e-12)


def test_is_an_ultrametric_above_subdominant(rng):
    g = random_connected_graph(rng, 40, 80)
    w = torch.from_numpy(rng.random(g.num_edges))
    ua = average_linkage_ultrametric(g, w)
    us = hiseg.subdominant_ultrametric(g, w)
    # the subdominant ultrametric is the largest ultrametric below w, and the min-max of ua is ua
    assert torch.all(us <= ua + 1e-12)
    np.testing.assert_allclose(hiseg.subdominant_ultrametric(g, ua).numpy(), ua.numpy(), atol=1e-12)


def test_gradient_equals_finite_differences(rng):
    g = random_connected_graph(rng, 10, 15)
    w = torch.from_numpy(rng.random(g.num_edges)).requires_grad_(True)
    ln = rng.integers(1, 5, g.num_edges).astype(float)
    h = build_average_linkage_hierarchy(g, w, ln)  # the tree is fixed under small perturbations
    assert torch.autograd.gradcheck(lambda x: h.ultrametric(x), (w,), eps=1e-6, atol=1e-8)
    # and against finite differences of the whole layer (tree rebuilt every time)
    c = torch.from_numpy(rng.normal(size=g.num_edges))
    (average_linkage_ultrametric(g, w, ln) * c).sum().backward()
    eps = 1e-7
    for f in range(g.num_edges):
        wp, wm = w.detach().clone(), w.detach().clone()
        wp[f] += eps
        wm[f] -= eps
        fd = ((average_linkage_ultrametric(g, wp, ln) - average_linkage_ultrametric(g, wm, ln)) * c).sum() / (2 * eps)
        assert abs(float(fd) - float(w.grad[f])) < 1e-5


def test_gradient_is_the_length_weighted_averaging(rng):
    g = random_connected_graph(rng, 8, 10)
    w = torch.from_numpy(rng.random(g.num_edges)).requires_grad_(True)
    ln = rng.integers(1, 5, g.num_edges).astype(float)
    u, h = average_linkage_ultrametric(g, w, ln, return_hierarchy=True)
    J = torch.autograd.functional.jacobian(lambda x: h.ultrametric(x), w)
    lca = h.edge_lca
    for e in range(g.num_edges):
        same = lca == lca[e]
        expect = np.where(same, ln / ln[same].sum(), 0.0)
        np.testing.assert_allclose(J[e].numpy(), expect, atol=1e-12)


def test_batched_equals_per_graph(rng):
    graphs = [random_connected_graph(rng, n, n) for n in (5, 1, 9, 4)]
    ws = [rng.random(gg.num_edges) for gg in graphs]
    lns = [rng.integers(1, 4, gg.num_edges).astype(float) for gg in graphs]
    bg = batch_graphs(graphs)
    u = average_linkage_ultrametric(bg, torch.from_numpy(np.concatenate(ws)), np.concatenate(lns))
    ref = np.concatenate([average_linkage_ultrametric(gg, torch.from_numpy(w), ln).numpy()
                          for gg, w, ln in zip(graphs, ws, lns)])
    np.testing.assert_allclose(u.numpy(), ref, atol=1e-12)


def test_dtype_device_and_module(rng):
    g = random_connected_graph(rng, 12, 12)
    w = torch.rand(g.num_edges, dtype=torch.float32)
    m = hiseg.AverageLinkageUltrametric()
    u = m(g, w)
    assert u.dtype == torch.float32 and u.shape == w.shape
    assert m.hierarchy.num_leaves == 12


def test_cut_with_k_regions(rng):
    """The k-region cut of the average-linkage hierarchy is higra's horizontal cut with k
    regions of the same tree (random weights: no tied altitudes, so the cut is unique)."""
    import higra as hg

    from hiseg.core.graph import region_adjacency_graph
    from hiseg.segmentation.saliency import cut_num_regions

    labels = np.arange(36).reshape(6, 6)
    rag = region_adjacency_graph(labels)
    w = torch.from_numpy(rng.random(rag.graph.num_edges))
    _, h = average_linkage_ultrametric(rag.graph, w, return_hierarchy=True)
    tree, alt = hg.Tree(h.parents), h.node_altitudes(w).numpy()
    assert np.unique(alt[36:]).size == 35
    explorer = hg.HorizontalCutExplorer(tree, alt)
    for k in (1, 2, 5, 35, 36):
        ref = explorer.horizontal_cut_from_num_regions(k).labelisation_leaves(tree, rag.graph.to_higra())
        cut = cut_num_regions(rag, h, k)
        pairs = np.unique(np.stack([cut.ravel(), ref[rag.labels].ravel()]), axis=1)
        assert np.unique(cut).size == np.unique(ref).size == pairs.shape[1] == k


def test_losses_work_on_average_linkage(rng):
    g = random_connected_graph(rng, 30, 40)
    w = torch.from_numpy(rng.random(g.num_edges)).requires_grad_(True)
    u, h = average_linkage_ultrametric(g, w, return_hierarchy=True)
    labels = rng.integers(0, 3, 30)
    trip = losses.make_triplets(labels, 50, random_state=0)
    loss = (losses.closest(u, w.detach()) + losses.cluster_size(u, h, top_nodes=5)
            + losses.triplet(h, w, trip, margin=0.1))
    loss.backward()
    assert torch.isfinite(w.grad).all() and w.grad.abs().sum() > 0


@pytest.mark.parametrize("bad,err", [
    (np.ones(3), ValueError),                 # wrong length
    (np.array([1.0, 0.0, 1.0, 1.0]), ValueError),  # zero length
    (np.array([1.0, np.nan, 1.0, 1.0]), ValueError),
])
def test_bad_lengths(bad, err):
    g = EdgeList(np.array([0, 1, 2, 0]), np.array([1, 2, 3, 3]), 4)
    with pytest.raises(err, match="lengths"):
        average_linkage_ultrametric(g, torch.rand(4, dtype=torch.float64), bad)


def test_disconnected_graph_is_refused():
    g = EdgeList(np.array([0, 2]), np.array([1, 3]), 4)
    with pytest.raises(ValueError, match="not connected"):
        average_linkage_ultrametric(g, torch.rand(2, dtype=torch.float64))
