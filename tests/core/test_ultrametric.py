"""The subdominant-ultrametric layer against independent truths."""

import higra as hg
import numpy as np
import pytest
import torch
from hypothesis import given, settings, strategies as st
from scipy.cluster.hierarchy import cophenet, linkage

import hiseg
from _graphs import complete_graph, random_connected_graph
from hiseg.core.builders import grid_graph
from hiseg.core.graph import EdgeList, batch_graphs
from hiseg.core.ultrametric import build_hierarchy, canonical_edge_order, subdominant_ultrametric


# ----------------------------------------------------------------------------- helpers
def brute_minmax(g: EdgeList, w: np.ndarray) -> np.ndarray:
    """min over paths of the max edge, by a Floyd-Warshall in the (min, max) semiring."""
    n = g.num_vertices
    D = np.full((n, n), np.inf)
    np.fill_diagonal(D, -np.inf)
    for s, t, x in zip(g.sources, g.targets, w):
        D[s, t] = min(D[s, t], x)
        D[t, s] = min(D[t, s], x)
    for k in range(n):
        D = np.minimum(D, np.maximum(D[:, k:k + 1], D[k:k + 1, :]))
    return D[g.sources, g.targets]


def is_ultrametric_on_graph(g, u):
    """u is an ultrametric on G iff u equals its own subdominant ultrametric (min-max closure)."""
    return np.allclose(brute_minmax(g, u), u)


# ----------------------------------------------------------------------------- truth
@pytest.mark.parametrize("n", [2, 3, 10, 40])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_complete_graph_equals_scipy_single_linkage(n, dtype, rng):
    g = complete_graph(n)
    d = rng.random(g.num_edges)
    w = torch.tensor(d, dtype=dtype)
    u = subdominant_ultrametric(g, w)
    # scipy's condensed distance order is exactly triu_indices order
    coph = cophenet(linkage(w.double().numpy(), method="single"))
    np.testing.assert_allclose(u.double().numpy(), coph, rtol=0, atol=0)
    assert u.dtype == dtype and u.shape == w.shape


@pytest.mark.parametrize("seed", range(6))
def test_sparse_graph_equals_brute_force(seed):
    rng = np.random.default_rng(seed)
    g = random_connected_graph(rng, 30, 40)
    w = rng.random(g.num_edges)
    u = subdominant_ultrametric(g, torch.tensor(w))
    np.testing.assert_array_equal(u.numpy(), brute_minmax(g, w))


def test_higra_graph_input_and_canonical_pass_edges(rng):
    g = grid_graph((17, 23))
    hgg = g.to_higra()
    w = rng.integers(0, 6, g.num_edges).astype(np.float64)  # many ties
    u, h = subdominant_ultrametric(hgg, torch.tensor(w), return_hierarchy=True)
    tree, alt = hg.bpt_canonical(hgg, w)
    lca = tree.lowest_common_ancestor_preprocess().lca(g.sources, g.targets)
    np.testing.assert_array_equal(u.numpy(), alt[lca])
    np.testing.assert_array_equal(h.parents, tree.parents())
    mst_map = hg.get_attribute(tree, "mst_edge_map")
    np.testing.assert_array_equal(h.pass_edge, mst_map[lca - g.num_vertices])
    np.testing.assert_array_equal(h.edge_lca, lca)


def test_canonical_order_is_stable_sort(rng):
    for w in [rng.random(1000), rng.integers(0, 4, 1000).astype(float), np.zeros(10), np.ones(1)]:
        np.testing.assert_array_equal(canonical_edge_order(w), np.argsort(w, kind="stable"))


def test_lca_matches_higra(rng):
    g = random_connected_graph(rng, 200, 300)
    w = rng.random(g.num_edges)
    h = build_hierarchy(g, w)
    tree = hg.Tree(h.parents)
    a, b = rng.integers(0, 200, 500), rng.integers(0, 200, 500)
    ref = tree.lowest_common_ancestor_preprocess().lca(a, b)
    np.testing.assert_array_equal(h.lca(a, b), ref)
    np.testing.assert_array_equal(h.lca([3], [3]), [3])


def test_node_sizes_and_altitudes(rng):
    g = random_connected_graph(rng, 50, 60)
    w = torch.tensor(rng.random(g.num_edges), requires_grad=True)
    h = build_hierarchy(g, w)
    tree = hg.Tree(h.parents)
    np.testing.assert_array_equal(h.sizes, hg.attribute_area(tree))
    alt = h.node_altitudes(w)
    assert alt.requires_grad
    np.testing.assert_array_equal(alt[:50].detach().numpy(), 0)
    # distance = altitude of the lca = ultrametric value on edges
    d = h.distance(g.sources, g.targets, w)
    np.testing.assert_array_equal(d.detach().numpy(), h.ultrametric(w).detach().numpy())
    gamma = h.min_child_size()
    ch = [[] for _ in range(h.num_nodes)]
    for c, p in enumerate(h.parents[:-1]):
        ch[p].append(c)
    assert all(gamma[i] == min(h.sizes[ch[50 + i]]) for i in range(49))
    # children(): (smaller id, larger id) of every internal node, as higra lists them
    small, big = h.children()
    ref = np.array([sorted(tree.children(50 + i)) for i in range(49)])
    np.testing.assert_array_equal(small, ref[:, 0])
    np.testing.assert_array_equal(big, ref[:, 1])


# ----------------------------------------------------------------------------- properties
graphs = st.integers(min_value=0, max_value=10**6).map(
    lambda s: (np.random.default_rng(s), s)).map(
    lambda r: (random_connected_graph(r[0], int(r[0].integers(2, 25)), int(r[0].integers(0, 30))), r[1]))


@settings(max_examples=60, deadline=None)
@given(graphs, st.sampled_from(["uniform", "ties", "signed"]))
def test_properties(gs, kind):
    g, seed = gs
    rng = np.random.default_rng(seed + 1)
    if kind == "uniform":
        w = rng.random(g.num_edges)
    elif kind == "ties":
        w = rng.integers(0, 3, g.num_edges).astype(float)
    else:
        w = rng.normal(size=g.num_edges)
    u = subdominant_ultrametric(g, torch.tensor(w)).numpy()
    # an ultrametric on the graph
    assert is_ultrametric_on_graph(g, u)
    # subdominance: below the input
    assert np.all(u <= w)
    # idempotent
    np.testing.assert_array_equal(subdominant_ultrametric(g, torch.tensor(u)).numpy(), u)
    # equivariant to vertex and edge permutations
    pv = rng.permutation(g.num_vertices)
    pe = rng.permutation(g.num_edges)
    g2 = EdgeList(pv[g.sources][pe], pv[g.targets][pe], g.num_vertices)
    u2 = subdominant_ultrametric(g2, torch.tensor(w[pe])).numpy()
    np.testing.assert_array_equal(u2, u[pe])
    # the largest ultrametric below w: another ultrametric below w (built from w' <= w) is below u
    v = subdominant_ultrametric(g, torch.tensor(w - rng.random(g.num_edges))).numpy()
    assert is_ultrametric_on_graph(g, v) and np.all(v <= u)


# ----------------------------------------------------------------------------- gradient
def test_jacobian_is_pass_edge_matrix(rng):
    g = random_connected_graph(rng, 12, 15)
    w = torch.tensor(rng.random(g.num_edges), requires_grad=True)
    u, h = subdominant_ultrametric(g, w, return_hierarchy=True)
    J = torch.autograd.functional.jacobian(lambda x: h.ultrametric(x), w)
    expected = np.zeros((g.num_edges, g.num_edges))
    expected[np.arange(g.num_edges), h.pass_edge] = 1
    np.testing.assert_array_equal(J.numpy(), expected)


@pytest.mark.parametrize("seed", range(3))
def test_gradient_equals_finite_differences(seed):
    rng = np.random.default_rng(seed)
    g = random_connected_graph(rng, 15, 20)
    w0 = rng.random(g.num_edges)  # distinct values: pass edges locally constant
    c = torch.tensor(rng.normal(size=g.num_edges))
    w = torch.tensor(w0, requires_grad=True)
    (subdominant_ultrametric(g, w) * c).sum().backward()
    eps = 1e-7
    num = np.empty(g.num_edges)
    for e in range(g.num_edges):
        wp, wm = w0.copy(), w0.copy()
        wp[e] += eps
        wm[e] -= eps
        fp = (subdominant_ultrametric(g, torch.tensor(wp)) * c).sum().item()
        fm = (subdominant_ultrametric(g, torch.tensor(wm)) * c).sum().item()
        num[e] = (fp - fm) / (2 * eps)
    np.testing.assert_allclose(w.grad.numpy(), num, atol=1e-6)


# ----------------------------------------------------------------------------- batching
def test_batched_equals_per_graph(rng):
    gs = [random_connected_graph(rng, int(rng.integers(1, 40)), int(rng.integers(0, 50))) for _ in range(12)]
    ws = [rng.integers(0, 4, g.num_edges).astype(float) for g in gs]  # ties across and within graphs
    bg = batch_graphs(gs)
    w = torch.tensor(np.concatenate(ws), requires_grad=True)
    u, h = subdominant_ultrametric(bg, w, return_hierarchy=True)
    parts = [subdominant_ultrametric(g, torch.tensor(x), return_hierarchy=True) for g, x in zip(gs, ws)]
    np.testing.assert_array_equal(u.detach().numpy(), np.concatenate([p[0].numpy() for p in parts]))
    pe = np.concatenate([p[1].pass_edge + bg.edge_ptr[i] for i, p in enumerate(parts)])
    np.testing.assert_array_equal(h.pass_edge, pe)
    u.sum().backward()
    assert w.grad.sum().item() == pytest.approx(bg.num_edges)


def test_batch_member_disconnected_is_named():
    ok = EdgeList(np.array([0]), np.array([1]), 2)
    bad = EdgeList(np.array([0]), np.array([1]), 3)
    with pytest.raises(ValueError, match=r"graphs \[1\] of the batch are not connected"):
        subdominant_ultrametric(batch_graphs([ok, bad]), torch.rand(2, dtype=torch.float64))


def test_module_form(rng):
    g = grid_graph((5, 6))
    m = hiseg.SubdominantUltrametric()
    w = torch.rand(g.num_edges)
    np.testing.assert_array_equal(m(g, w).numpy(), subdominant_ultrametric(g, w).numpy())
    assert m.hierarchy is not None


def test_single_vertex_and_single_edge():
    u = subdominant_ultrametric((np.zeros(0, np.int64), np.zeros(0, np.int64), 1), torch.zeros(0))
    assert u.shape == (0,)
    u = subdominant_ultrametric((np.array([0]), np.array([1]), 2), torch.tensor([0.3]))
    assert u.tolist() == pytest.approx([0.3])


# ----------------------------------------------------------------------------- bad input
@pytest.mark.parametrize("bad, err, msg", [
    (torch.tensor([0.1, float("nan"), 0.2]), ValueError, "NaN or infinite"),
    (torch.tensor([0.1, float("inf"), 0.2]), ValueError, "NaN or infinite"),
    (torch.tensor([0.1, 0.2]), ValueError, "2 values but the graph has 3 edges"),
    (torch.tensor([1, 2, 3]), TypeError, "floating point"),
    (torch.ones(3, 1), ValueError, "1-D"),
    (np.array([1, 2, 3]), TypeError, "floating point"),
])
def test_bad_weights(bad, err, msg):
    g = (np.array([0, 1, 0]), np.array([1, 2, 2]), 3)
    with pytest.raises(err, match=msg):
        subdominant_ultrametric(g, bad)


@pytest.mark.parametrize("graph, err, msg", [
    ((np.array([0, 2]), np.array([1, 3]), 4), ValueError, "not connected .2 connected components"),
    ((np.array([], dtype=np.int64), np.array([], dtype=np.int64), 0), ValueError, "empty"),
    ((np.array([0, 1]), np.array([1, 5]), 3), ValueError, "vertex id 5 out of range"),
    ((np.array([0, -1]), np.array([1, 2]), 3), ValueError, "negative vertex id"),
    ((np.array([0.0, 1.0]), np.array([1.0, 2.0]), 3), TypeError, "integer dtype"),
    ((np.array([0, 1]), np.array([1]), 3), ValueError, "differ in length"),
    ((np.array([0, 1]), np.array([0, 2]), 3), ValueError, "self-loop"),
    ("not a graph", TypeError, "graph must be"),
])
def test_bad_graphs(graph, err, msg):
    n = len(graph[0]) if isinstance(graph, tuple) else 2
    with pytest.raises(err, match=msg):
        subdominant_ultrametric(graph, torch.rand(max(n, 1), dtype=torch.float64)[:n] if n else torch.zeros(0))


def test_lca_bad_input(rng):
    g = grid_graph((3, 3))
    h = build_hierarchy(g, rng.random(g.num_edges))
    with pytest.raises(ValueError, match="out of range"):
        h.lca([0], [9])
    with pytest.raises(ValueError, match="differ in length"):
        h.lca([0, 1], [2])


# ----------------------------------------------------------------------------- devices
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_cuda_equals_cpu(rng):
    g = grid_graph((40, 50))
    w = torch.tensor(rng.random(g.num_edges), dtype=torch.float32)
    wc = w.cuda().requires_grad_(True)
    u = subdominant_ultrametric(g, wc)
    assert u.device.type == "cuda"
    np.testing.assert_array_equal(u.detach().cpu().numpy(), subdominant_ultrametric(g, w).numpy())
    (u * torch.arange(g.num_edges, device="cuda")).sum().backward()
    w2 = w.clone().requires_grad_(True)
    (subdominant_ultrametric(g, w2) * torch.arange(g.num_edges)).sum().backward()
    np.testing.assert_allclose(wc.grad.cpu().numpy(), w2.grad.numpy())


# ----------------------------------------------------------------------------- Ward
def brute_graph_ward(g: EdgeList, X: np.ndarray) -> np.ndarray:
    """Ward's hierarchy restricted to g, merge by merge: at each step the adjacent pair of
    clusters of least Ward cost |A||B|/(|A|+|B|) ||c_A - c_B||^2 is merged, at the largest
    cost met so far (monotone heights); the value of edge (x, y) is sqrt(2 height) of the
    merge that joins x and y."""
    n = g.num_vertices
    members = {i: [i] for i in range(n)}
    adj = {i: set() for i in range(n)}
    for s, t in zip(g.sources, g.targets):
        adj[s].add(t)
        adj[t].add(s)
    joined = np.full((n, n), np.nan)
    height = 0.0
    while len(members) > 1:
        best = None
        for a in members:
            for b in adj[a]:
                if a < b:
                    A, B = X[members[a]], X[members[b]]
                    cost = len(A) * len(B) / (len(A) + len(B)) * np.sum((A.mean(0) - B.mean(0)) ** 2)
                    if best is None or cost < best[0]:
                        best = (cost, a, b)
        cost, a, b = best
        height = max(height, cost)
        for i in members[a]:
            for j in members[b]:
                joined[i, j] = joined[j, i] = height
        members[a] += members.pop(b)
        adj[a] = (adj[a] | adj.pop(b)) - {a, b}
        for c in adj[a]:
            adj[c].discard(b)
            adj[c].add(a)
    return np.sqrt(2 * joined[g.sources, g.targets])


@pytest.mark.parametrize("n", [2, 3, 12, 40])
def test_ward_on_complete_graph_equals_scipy(n, rng):
    X = rng.normal(size=(n, 3))
    u = hiseg.ward_linkage_ultrametric(complete_graph(n), X)
    np.testing.assert_allclose(u, cophenet(linkage(X, "ward")), rtol=1e-12, atol=1e-12)


@settings(max_examples=40, deadline=None)
@given(graphs)
def test_ward_on_sparse_graphs_equals_brute_force(gs):
    g, seed = gs
    X = np.random.default_rng(seed + 2).normal(size=(g.num_vertices, 2))
    u = hiseg.ward_linkage_ultrametric(g, X)
    np.testing.assert_allclose(u, brute_graph_ward(g, X), rtol=1e-10, atol=1e-12)
    assert is_ultrametric_on_graph(g, u)


@pytest.mark.parametrize("factor", [1e300, 1e-300])
def test_ward_heights_scale_with_the_points(factor, rng):
    g = random_connected_graph(rng, 30, 40)
    X = rng.normal(size=(30, 4))
    u = hiseg.ward_linkage_ultrametric(g, X)
    np.testing.assert_allclose(hiseg.ward_linkage_ultrametric(g, X * factor) / factor, u, rtol=1e-12)


@pytest.mark.parametrize("X, graph, msg", [
    (np.zeros((3, 2)), EdgeList(np.array([0]), np.array([1]), 3), r"not connected \(2 components\)"),
    (np.zeros((4, 2)), EdgeList(np.array([0, 1]), np.array([1, 2]), 3), "4 points for a graph of 3 vertices"),
    (np.zeros(3), EdgeList(np.array([0, 1]), np.array([1, 2]), 3), "2-D array"),
    (np.array([[0.0], [np.nan], [1.0]]), EdgeList(np.array([0, 1]), np.array([1, 2]), 3), "NaN or infinite"),
    (np.array([[0.0], [1e308], [-1e308]]), EdgeList(np.array([0, 1]), np.array([1, 2]), 3), "float64 range"),
])
def test_ward_bad_input(X, graph, msg):
    with pytest.raises(ValueError, match=msg):
        hiseg.ward_linkage_ultrametric(graph, X)


def test_packed_copy_keeps_values_dtypes_and_shapes():
    """hiseg.core.device.packed_copy: one buffer viewed back with each array's dtype, shape and
    values (on the CPU too: tests/training/test_sync.py's CPU simulation counts its one ``.to``; the meta
    device: shapes and dtypes only); an unsupported dtype is refused, naming it."""
    from hiseg.core.device import packed_copy

    arrays = [np.arange(5, dtype=np.int64), np.arange(6, dtype=np.int32).reshape(2, 3),
              np.linspace(0, 1, 7), np.float32([[1.5]]), np.array([True, False, True]), np.zeros(0, np.int64),
              np.arange(10)[::2]]
    out = packed_copy(arrays, "cpu")
    for a, t in zip(arrays, out):
        np.testing.assert_array_equal(t.numpy(), a)
        assert t.numpy().dtype == a.dtype
    meta = packed_copy(arrays, "meta")
    assert [(tuple(t.shape), t.dtype) for t in meta] == [(tuple(t.shape), t.dtype) for t in out]
    assert all(t.device.type == "meta" for t in meta)
    with pytest.raises(TypeError, match="unsupported dtype uint16"):
        packed_copy([np.zeros(3, np.uint16)], "cpu")
