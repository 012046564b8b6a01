"""Structural entropy (Li & Pan 2016): the exact measure against a brute force written from the
definition, its bounds and invariances, its bad inputs; the relaxed cost against a naive sum
and its gradient against finite differences."""
import math

import numpy as np
import pytest
import torch
from hypothesis import given, settings, strategies as st
from scipy.cluster.hierarchy import linkage

from hiseg.core.graph import EdgeList
from hiseg.metrics import structural_entropy


def brute_force_entropy(parents, sources, targets, weights) -> float:
    """sum over non-root nodes a of -(g_a / vol G) log2(vol a / vol parent(a)), every quantity
    from its definition: a node's leaves by walking up from every leaf, g_a the weight of the
    edges with exactly one end among them, vol the sum of the leaves' degrees."""
    parents = list(parents)
    n_nodes = len(parents)
    is_parent = set(parents[:-1])
    leaves = [v for v in range(n_nodes) if v not in is_parent]
    members = {v: set() for v in range(n_nodes)}
    for leaf in leaves:
        v = leaf
        while True:
            members[v].add(leaf)
            if parents[v] == v:
                break
            v = parents[v]
    degree = {leaf: 0.0 for leaf in leaves}
    for s, t, w in zip(sources, targets, weights):
        degree[s] += w
        degree[t] += w
    vol_g = sum(degree.values())

    def vol(node):
        return sum(degree[x] for x in members[node])

    total = 0.0
    for a in range(n_nodes):
        if parents[a] == a:
            continue
        leaving = sum(w for s, t, w in zip(sources, targets, weights) if (s in members[a]) != (t in members[a]))
        if leaving > 0:
            total -= leaving / vol_g * math.log2(vol(a) / vol(parents[a]))
    return total


def random_tree(rng, n, binary=True):
    """A parent array, leaves 0..n-1 first, children before parents, root last (merges of
    random pairs of the current roots; ``binary=False`` merges up to 4 at once)."""
    roots = list(range(n))
    parents = list(range(n))
    while len(roots) > 1:
        k = 2 if binary else int(rng.integers(2, min(4, len(roots)) + 1))
        pick = rng.choice(len(roots), k, replace=False)
        new = len(parents)
        parents.append(new)
        for i in pick:
            parents[roots[i]] = new
        roots = [r for i, r in enumerate(roots) if i not in set(pick)] + [new]
    return np.array(parents)


def random_graph(rng, n, m):
    """``m`` random edges (no self-loop, parallel edges allowed) and positive weights."""
    s = rng.integers(0, n, m)
    t = (s + rng.integers(1, n, m)) % n
    return s, t, rng.random(m) + 0.05


@settings(max_examples=60, deadline=None)
@given(st.integers(2, 9), st.integers(1, 20), st.booleans(), st.integers(0, 2**31))
def test_equals_the_brute_force(n, m, binary, seed):
    rng = np.random.default_rng(seed)
    s, t, w = random_graph(rng, n, m)
    parents = random_tree(rng, n, binary)
    got = structural_entropy(parents, (s, t, n), w)
    assert got == pytest.approx(brute_force_entropy(parents, s, t, w), rel=1e-12, abs=1e-12)


@settings(max_examples=40, deadline=None)
@given(st.integers(2, 9), st.integers(1, 20), st.integers(0, 2**31), st.floats(1e-6, 1e6))
def test_bounds_and_scale(n, m, seed, scale):
    """0 <= H^T <= the flat tree's (one-level) entropy, which every tree reaches when it is flat;
    multiplying every weight by a constant changes nothing."""
    rng = np.random.default_rng(seed)
    s, t, w = random_graph(rng, n, m)
    parents = random_tree(rng, n)
    got = structural_entropy(parents, (s, t, n), w)
    d = np.bincount(s, w, n) + np.bincount(t, w, n)
    p = d[d > 0] / d.sum()
    one_level = float(-(p * np.log2(p)).sum())
    flat = np.array(list(np.full(n, n)) + [n])
    assert structural_entropy(flat, (s, t, n), w) == pytest.approx(one_level, rel=1e-12, abs=1e-12)
    assert -1e-12 <= got <= one_level + 1e-12
    assert structural_entropy(parents, (s, t, n), w * scale) == pytest.approx(got, rel=1e-9, abs=1e-12)


def test_zero_weights_and_isolated_vertices():
    """Edges of weight 0 and vertices of degree 0 add nothing (no log of 0)."""
    s, t = np.array([0, 1, 2, 3]), np.array([1, 2, 3, 4])
    w = np.array([1.0, 0.0, 2.0, 0.0])  # vertex 4 has degree 0
    rng = np.random.default_rng(0)
    for _ in range(5):
        parents = random_tree(rng, 5)
        assert structural_entropy(parents, (s, t, 5), w) == pytest.approx(brute_force_entropy(parents, s, t, w))


def test_every_form_of_a_hierarchy_agrees():
    """A scipy linkage matrix, its parent array and its higra tree measure alike, and two
    clusters joined at the top beat the hierarchies that split them."""
    from hiseg.metrics.hierarchy import as_tree

    rng = np.random.default_rng(1)
    X = np.concatenate([rng.normal(0, 0.1, (10, 2)), rng.normal(3, 0.1, (10, 2))])
    s, t = np.triu_indices(20, 1)
    w = np.exp(-((X[s] - X[t]) ** 2).sum(1))
    Z = linkage(X, "average")
    tree = as_tree(Z)
    values = [structural_entropy(x, EdgeList(s, t, 20), w) for x in (Z, tree, tree.parents())]
    assert values[0] == values[1] == values[2]
    assert values[0] == pytest.approx(brute_force_entropy(tree.parents(), s, t, w))
    mixed = random_tree(np.random.default_rng(2), 20)
    assert values[0] < structural_entropy(mixed, (s, t, 20), w)


@pytest.mark.parametrize("similarities, graph, match", [
    (np.array([1.0, -1.0]), (np.array([0, 1]), np.array([1, 2]), 3), "nonnegative"),
    (np.array([1.0, np.nan]), (np.array([0, 1]), np.array([1, 2]), 3), "finite"),
    (np.array([1.0]), (np.array([0, 1]), np.array([1, 2]), 3), "one value per edge"),
    (np.array([0.0, 0.0]), (np.array([0, 1]), np.array([1, 2]), 3), "all 0"),
    (np.array([1.0, 1.0]), (np.array([0, 1]), np.array([1, 3]), 4), "4 vertices but the hierarchy has 3"),
])
def test_bad_inputs(similarities, graph, match):
    with pytest.raises(ValueError, match=match):
        structural_entropy(np.array([3, 3, 4, 4, 4]), graph, similarities)


def test_not_a_hierarchy():
    g = (np.array([0]), np.array([1]), 2)
    with pytest.raises(ValueError, match="not a tree"):
        structural_entropy(np.array([1, 0, 2]), g, np.ones(1))
    with pytest.raises(TypeError, match="not a hierarchy"):
        structural_entropy({"a": 1}, g, np.ones(1))


# ----------------------------------------------------------------------------- the relaxed cost
def naive_relaxed_entropy(g, w, h, s, lam):
    """The relaxation by its definition: each internal node's soft volume, sum over all
    vertices z of d_z sigma(lam (a_r - d_u(x, z))) averaged over the two ends x of the node's
    building edge (all-pairs ultrametric distances by min-max paths), times 4/3."""
    from scipy.special import expit

    from tests.core.test_losses import naive_distances

    n = g.num_vertices
    D = naive_distances(g, w)
    d = np.bincount(g.sources, s, n) + np.bincount(g.targets, s, n)
    alt = h.node_altitudes(torch.tensor(w)).numpy()
    volume = np.array([np.mean([np.dot(d, expit(lam * (alt[n + i] - D[x]))) for x in (g.sources[e], g.targets[e])])
                       for i, e in enumerate(h.mst_edge_map)]) * 4 / 3
    lca = h.edge_lca - n
    return (2 * np.dot(s, np.log2(volume[lca])) - np.dot(d, np.log2(d))) / d.sum()


@pytest.mark.parametrize("lam", [0.5, 3.0, 20.0])
def test_relaxed_entropy_naive_and_gradient(lam, rng):
    from hiseg.core import losses
    from hiseg.core.ultrametric import build_hierarchy

    from tests.core.test_ultrametric import random_connected_graph

    g = random_connected_graph(rng, 16, 16)
    s = rng.random(g.num_edges) + 0.05
    w = torch.tensor(rng.random(g.num_edges) + 0.1, requires_grad=True)
    h = build_hierarchy(g, w)
    val = losses.structural_entropy(h, w, s, lam=lam)
    assert val.item() == pytest.approx(naive_relaxed_entropy(g, w.detach().numpy(), h, s, lam), rel=1e-9)
    # finite differences (torch's gradcheck) with the hierarchy held fixed: smooth in the altitudes
    assert torch.autograd.gradcheck(lambda x: losses.structural_entropy(h, x, s, lam=lam), (w,), eps=1e-6, atol=1e-6)


def test_relaxed_entropy_tends_to_the_exact_one(rng):
    """Distinct altitudes at least 1 apart and a steep sigmoid: the soft volumes are the volumes."""
    from hiseg.core import losses
    from hiseg.core.ultrametric import build_hierarchy

    from tests.core.test_ultrametric import random_connected_graph

    g = random_connected_graph(rng, 30, 30)
    w = rng.permutation(g.num_edges) + 1.0
    s = rng.random(g.num_edges) + 0.05
    h = build_hierarchy(g, w)
    exact = structural_entropy(h, g, s)
    assert losses.structural_entropy(h, torch.tensor(w), s, lam=40.0).item() == pytest.approx(exact, abs=1e-6)


def test_relaxed_entropy_is_a_registered_term(rng):
    """``loss="entropy"`` fits through the registry (Gaussian similarities of the input
    distances) and lowers the relaxed cost from its start."""
    from hiseg import fit_ultrametric
    from hiseg.core import losses

    from tests.core.test_ultrametric import random_connected_graph

    assert "entropy" in losses.TERMS
    g = random_connected_graph(rng, 40, 60)
    w = torch.tensor(rng.random(g.num_edges) + 0.1)
    fit = fit_ultrametric(g, w, loss="entropy", max_iter=30, init="average", lr=0.05)
    assert fit.history[fit.best_iter] <= fit.history[0]
    with pytest.raises(ValueError, match="entropy_weights"):
        losses.Objective("entropy", entropy_weights="cosine")(losses.LossInputs(
            hierarchy=fit.hierarchy, weights=w, graph_weights=w))


def test_relaxed_entropy_bad_inputs(rng):
    from hiseg.core import losses
    from hiseg.core.builders import grid_graph
    from hiseg.core.ultrametric import build_hierarchy

    g = grid_graph((3, 3))
    w = torch.rand(g.num_edges, dtype=torch.float64)
    h = build_hierarchy(g, w)
    s = np.ones(g.num_edges)
    with pytest.raises(ValueError, match="negative"):
        losses.structural_entropy(h, w, -s)
    with pytest.raises(ValueError, match="all 0"):
        losses.structural_entropy(h, w, 0 * s)
    with pytest.raises(ValueError, match="positive"):
        losses.structural_entropy(h, w, s, lam=0)
    with pytest.raises(ValueError, match="leaf_weights"):
        losses.soft_cardinal(h, w, leaf_weights=np.ones(3))
