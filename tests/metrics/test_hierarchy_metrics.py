"""hiseg.metrics.hierarchy: dendrogram purity and Dasgupta's cost against brute force,
higra and known values; the hierarchy forms it accepts; bad input."""
import itertools

import higra as hg
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.cluster.hierarchy import linkage

from hiseg.metrics import dasgupta_cost, dendrogram_purity
from hiseg.metrics.hierarchy import as_tree


def random_tree(n, seed, binary=False):
    """A random tree on n leaves, children numbered before parents: repeatedly join 2 (or,
    unless ``binary``, 2 or more) of the current roots under a new node."""
    rng = np.random.default_rng(seed)
    roots = list(range(n))
    parents = list(range(n))  # placeholders, overwritten
    nxt = n
    while len(roots) > 1:
        k = 2 if binary else int(rng.integers(2, min(4, len(roots)) + 1))
        pick = rng.choice(len(roots), k, replace=False)
        for i in sorted(pick, reverse=True):
            parents[roots.pop(i)] = nxt
        parents.append(nxt)
        roots.append(nxt)
        nxt += 1
    return np.array(parents, dtype=np.int64)


def leaf_sets(parents, n):
    """The set of leaves under every node, by walking up from each leaf."""
    sets = [set() for _ in parents]
    for leaf in range(n):
        v = leaf
        while True:
            sets[v].add(leaf)
            if parents[v] == v:
                break
            v = parents[v]
    return sets


def brute_lca(parents, a, b):
    anc = set()
    v = a
    while True:
        anc.add(v)
        if parents[v] == v:
            break
        v = parents[v]
    v = b
    while v not in anc:
        v = parents[v]
    return v


def brute_purity(parents, labels):
    n = len(labels)
    sets = leaf_sets(parents, n)
    vals = []
    for i, j in itertools.combinations(range(n), 2):
        if labels[i] == labels[j]:
            leaves = sets[brute_lca(parents, i, j)]
            vals.append(sum(labels[x] == labels[i] for x in leaves) / len(leaves))
    return np.mean(vals)


def brute_dasgupta(parents, n, sources, targets, s):
    sets = leaf_sets(parents, n)
    return sum(w * len(sets[brute_lca(parents, a, b)]) for a, b, w in zip(sources, targets, s))


@settings(max_examples=60, deadline=None)
@given(n=st.integers(2, 14), k=st.integers(1, 4), seed=st.integers(0, 2**31 - 1), binary=st.booleans(),
       chunk=st.sampled_from([1, 2, 64]))
def test_purity_matches_brute_force(n, k, seed, binary, chunk):
    parents = random_tree(n, seed, binary)
    labels = np.random.default_rng(seed + 1).integers(0, k, n)
    if np.bincount(labels).max() < 2:
        with pytest.raises(ValueError, match="no class has two samples"):
            dendrogram_purity(parents, labels)
        return
    got = dendrogram_purity(parents, labels, chunk_classes=chunk)
    assert got == pytest.approx(brute_purity(parents, labels), abs=1e-12)
    # string labels are classes too
    assert dendrogram_purity(parents, np.array(["c%d" % v for v in labels])) == pytest.approx(got, abs=1e-12)


@settings(max_examples=40, deadline=None)
@given(n=st.integers(2, 40), k=st.integers(1, 5), seed=st.integers(0, 2**31 - 1),
       method=st.sampled_from(["single", "average", "ward", "complete"]))
def test_purity_matches_higra_on_linkages(n, k, seed, method):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, 3))
    labels = rng.integers(0, k, n)
    if np.bincount(labels).max() < 2:
        return
    Z = linkage(X, method)
    ref = hg.dendrogram_purity(as_tree(Z), labels)
    assert dendrogram_purity(Z, labels) == pytest.approx(ref, abs=1e-12)


def test_linkage_conversion_is_scipys_tree():
    # the higra tree built from a linkage has scipy's lcas: cophenetic heights agree
    from scipy.cluster.hierarchy import cophenet

    rng = np.random.default_rng(3)
    X = rng.normal(size=(30, 2))
    Z = linkage(X, "average")
    t = as_tree(Z)
    alt = np.concatenate([np.zeros(30), Z[:, 2]])
    i, j = np.triu_indices(30, 1)
    np.testing.assert_allclose(alt[t.lowest_common_ancestor(i, j)], cophenet(Z))


@settings(max_examples=40, deadline=None)
@given(n=st.integers(2, 14), seed=st.integers(0, 2**31 - 1), binary=st.booleans())
def test_dasgupta_matches_brute_force_and_higra(n, seed, binary):
    rng = np.random.default_rng(seed)
    parents = random_tree(n, seed, binary)
    m = int(rng.integers(1, 3 * n))
    s = rng.integers(0, n, m)
    t = (s + rng.integers(1, n, m)) % n if n > 1 else s
    w = rng.uniform(0, 2, m)
    got = dasgupta_cost(parents, (s, t, n), w)
    assert got == pytest.approx(brute_dasgupta(parents, n, s, t, w), rel=1e-12)
    g = hg.UndirectedGraph(n)
    g.add_edges(s, t)
    assert dasgupta_cost(parents, g, w) == pytest.approx(
        hg.dasgupta_cost(hg.Tree(parents), w, g, mode="similarity"), rel=1e-12)
    assert dasgupta_cost(parents, g, w, normalize=True) == pytest.approx(got / (n * w.sum()), rel=1e-12)


def test_perfect_hierarchy_has_purity_one():
    # every class is a node: classes merged among themselves first, then together
    rng = np.random.default_rng(0)
    y = rng.integers(0, 4, 50)
    X = np.eye(4)[y] * 100 + rng.normal(size=(50, 4))
    Z = linkage(X, "single")
    assert dendrogram_purity(Z, y) == pytest.approx(1.0)
    assert dendrogram_purity(Z, y, n_pairs=500) == pytest.approx(1.0)
    # and a hierarchy that splits a class is below 1
    y2 = y.copy()
    y2[0] = (y[0] + 1) % 4
    assert dendrogram_purity(Z, y2) < 1.0


def test_sampled_purity_estimates_the_exact_one():
    rng = np.random.default_rng(1)
    X = rng.normal(size=(400, 2))
    y = (X[:, 0] + 0.8 * rng.normal(size=400) > 0).astype(int) + 2 * (X[:, 1] > 0)
    Z = linkage(X, "average")
    exact = dendrogram_purity(Z, y)
    a = dendrogram_purity(Z, y, n_pairs=20000, random_state=7)
    assert a == dendrogram_purity(Z, y, n_pairs=20000, random_state=7)  # seeded
    assert a != dendrogram_purity(Z, y, n_pairs=20000, random_state=8)
    assert abs(a - exact) < 5 * 0.5 / np.sqrt(20000)
    assert exact < 0.9  # not a trivial case


def test_every_hierarchy_form_gives_the_same_value():
    import torch

    from hiseg import UltrametricClustering, build_hierarchy, knn_graph

    rng = np.random.default_rng(2)
    X = rng.normal(size=(60, 2)) + np.repeat(np.eye(2) * 3, 30, axis=0)
    y = np.repeat([0, 1], 30)
    est = UltrametricClustering(2, max_iter=20).fit(X)
    ref = dendrogram_purity(est.tree_, y)
    assert dendrogram_purity(est, y) == ref
    assert dendrogram_purity(est.parents_, y) == ref
    assert dendrogram_purity(est.linkage_matrix(), y) == pytest.approx(ref, abs=1e-12)
    assert est.score_hierarchy(X, y) == ref
    assert est.score_hierarchy(X, y, n_pairs=100) == dendrogram_purity(est, y, n_pairs=100)
    g, w = knn_graph(X, 5)
    h = build_hierarchy(g, torch.as_tensor(w))
    assert dendrogram_purity(h, y) == pytest.approx(hg.dendrogram_purity(hg.Tree(h.parents), y), abs=1e-12)
    sim = np.exp(-(w / w.mean()) ** 2)
    assert dasgupta_cost(h, g, sim) == pytest.approx(brute_dasgupta(h.parents, 60, g.sources, g.targets, sim))


@pytest.mark.parametrize("hierarchy, labels, msg", [
    (np.array([3, 3, 4, 4, 4]), [0, 0], "3 leaves but labels has 2"),
    (np.array([3, 3, 4, 4, 4]), [0, 0, np.nan], "NaN"),
    (np.array([3, 3, 4, 4, 4]), [0, 1, 2], "no class has two samples"),
    (np.array([1, 0, 2]), [0, 0], "not a tree"),
    (np.array([2, 2, 3, 3, 3]), [0, 0, 0], "not a tree"),  # two roots
    (np.array([3, 3, 4, 4, 3]), [0, 0, 0], "not a tree"),  # root not last
    (np.array([1, 3, 3, 3]), [0, 0], "leaves-first"),
    (np.array([[0, 1, 1.0, 2], [0, 2, 2.0, 3]]), [0, 0, 0], "not a valid scipy linkage"),
])
def test_bad_inputs_give_clear_errors(hierarchy, labels, msg):
    with pytest.raises(ValueError, match=msg):
        dendrogram_purity(hierarchy, np.array(labels))


def test_bad_inputs_dasgupta_and_score():
    from hiseg import UltrametricClustering

    p = np.array([3, 3, 4, 4, 4])
    with pytest.raises(ValueError, match="4 vertices but the hierarchy has 3 leaves"):
        dasgupta_cost(p, (np.array([0]), np.array([1]), 4), [1.0])
    with pytest.raises(ValueError, match="one value per edge"):
        dasgupta_cost(p, (np.array([0]), np.array([1]), 3), [1.0, 2.0])
    with pytest.raises(ValueError, match="nonnegative"):
        dasgupta_cost(p, (np.array([0]), np.array([1]), 3), [-1.0])
    with pytest.raises(ValueError, match="n_pairs"):
        dendrogram_purity(p, [0, 0, 1], n_pairs=0)
    with pytest.raises(TypeError, match="not a hierarchy|a hierarchy is"):
        dendrogram_purity("tree", [0, 0, 1])
    X = np.random.default_rng(0).normal(size=(20, 2))
    est = UltrametricClustering(2, max_iter=3).fit(X)
    with pytest.raises(ValueError, match="fitted on"):
        est.score_hierarchy(X[::-1], np.arange(20) % 2)
    with pytest.raises(ValueError, match="20 leaves but labels has 19"):
        est.score_hierarchy(X, np.arange(19) % 2)
