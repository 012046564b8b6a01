"""hiseg.core.cuts: the one cut of a hierarchy (plain and size-aware) against independent truths
(scipy's fcluster, a brute force on explicit sets), its callers, and one name per concept."""
import warnings

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from _graphs import complete_graph, random_connected_graph
from hiseg import build_hierarchy
from hiseg.core.cuts import (AUTO_MIN_CLUSTER_FRACTION, AUTO_MIN_REGION_FRACTION, cut_hierarchy,
                        kcut_merges, resolve_min_size)


def _leaf_sets(parents):
    """The leaves under every node, as Python sets (children have smaller ids than parents)."""
    n = (len(parents) + 1) // 2
    leaves = [{i} for i in range(n)] + [set() for _ in range(n - 1)]
    kids = [[] for _ in range(2 * n - 1)]
    for c, p in enumerate(parents[:-1]):
        kids[p].append(c)
        leaves[p] |= leaves[c]
    return leaves, kids


def brute_force_cut(h, n_clusters, min_size, leaf_size=None):
    """The cut by its definition: halve min_size until n_clusters - 1 merges join two groups
    of at least min_size; undo the highest n_clusters - 1 of them; clusters are the groups
    of a union-find over the kept merges' building edges, numbered by their smallest leaf."""
    n = h.num_leaves
    weight = np.ones(n) if leaf_size is None else np.asarray(leaf_size, float)
    leaves, kids = _leaf_sets(h.parents)
    lighter = [min(sum(weight[list(leaves[c])]) for c in kids[n + i]) for i in range(n - 1)]
    used = float(min_size)
    if used > 0 and n_clusters > 1:
        while sum(s >= used for s in lighter) < n_clusters - 1:
            used /= 2
        undo = [i for i in range(n - 2, -1, -1) if lighter[i] >= used][: n_clusters - 1]
    else:
        undo = list(range(n - n_clusters, n - 1))
    root = list(range(n))

    def find(x):
        while root[x] != x:
            x = root[x]
        return x
    for i in set(range(n - 1)) - set(undo):
        e = h.mst_edge_map[i]
        a, b = find(int(h.graph.sources[e])), find(int(h.graph.targets[e]))
        root[max(a, b)] = min(a, b)
    rep = [find(i) for i in range(n)]
    number = {}
    labels = np.array([number.setdefault(r, len(number)) for r in rep])
    return labels, used


@given(seed=st.integers(0, 10_000), n=st.integers(1, 40), ties=st.booleans(), frac=st.sampled_from([0, 0.05, 0.2, 0.6]))
@settings(max_examples=60, deadline=None)
def test_cut_hierarchy_against_brute_force(seed, n, ties, frac):
    rng = np.random.default_rng(seed)
    g = random_connected_graph(rng, n, int(rng.integers(0, 2 * n + 1)))
    w = rng.integers(0, 3, g.num_edges).astype(float) if ties else rng.random(g.num_edges)
    h = build_hierarchy(g, torch.from_numpy(w))
    leaf = rng.integers(1, 5, n).astype(float) if seed % 2 else None
    total = n if leaf is None else leaf.sum()
    for k in sorted({1, min(2, n), min(3, n), (n + 1) // 2, n}):
        labels, used = cut_hierarchy(h, k, frac * total, leaf_size=leaf, return_min_size=True)
        ref, ref_used = brute_force_cut(h, k, frac * total, leaf)
        np.testing.assert_array_equal(labels, ref)
        assert labels.dtype == np.int64 and used == ref_used
        assert np.array_equal(np.unique(labels), np.arange(k))  # always exactly k clusters
        weights = np.bincount(labels, weights=np.ones(n) if leaf is None else leaf)
        assert k == 1 or weights.min() >= used


def test_plain_cut_equals_scipy_fcluster(rng):
    """No tied altitudes: the plain cut into k clusters is scipy's maxclust cut of the same
    single-linkage hierarchy (complete graph of random points)."""
    import higra as hg
    from scipy.cluster.hierarchy import fcluster, linkage
    from sklearn.metrics import adjusted_rand_score

    X = rng.normal(size=(60, 3))
    g = complete_graph(60)
    h = build_hierarchy(g, torch.from_numpy(np.linalg.norm(X[g.sources] - X[g.targets], axis=1)))
    Z = linkage(X, "single")
    for k in (1, 2, 3, 5, 17, 59, 60):
        ref = fcluster(Z, k, criterion="maxclust")
        for hierarchy in (h, h.parents, hg.Tree(h.parents)):
            labels = cut_hierarchy(hierarchy, k)
            assert adjusted_rand_score(ref, labels) == 1.0 and np.unique(labels).size == k


def test_parent_array_cuts_and_what_needs_building_edges(rng):
    g = random_connected_graph(rng, 50, 60)
    h = build_hierarchy(g, torch.from_numpy(rng.random(g.num_edges)))
    for k in (1, 4, 50):  # the plain cut from the tree alone
        np.testing.assert_array_equal(cut_hierarchy(h.parents, k), cut_hierarchy(h, k))
    # a size-aware cut that keeps a small group's merge above an undone one needs the edges
    needs_edges = 0
    for k in range(2, 12):
        labels, used = cut_hierarchy(h, k, 8, return_min_size=True)
        keep = kcut_merges(h.parents, k, used)
        undone_parent = h.parents[50:-1][~keep[:-1]]
        if keep[undone_parent - 50].any():
            needs_edges += 1
            with pytest.raises(ValueError, match="building edge"):
                cut_hierarchy(h.parents, k, 8)
        else:
            np.testing.assert_array_equal(cut_hierarchy(h.parents, k, 8), labels)
    assert needs_edges > 0


def test_halving_when_too_few_clusters_are_large_enough():
    """Two groups of 5 ({0..4}, {5..9}, each two pairs and a single) and a speck 10 merged
    last: k = 2 splits the groups (the speck stays with 9); k = 3 has no third group of 5,
    min_size is halved to 1.25, where the pair merges count; k = 11 ends at the plain cut."""
    from hiseg.core.graph import EdgeList

    edges = [(0, 1, .1), (5, 6, .15), (2, 3, .2), (7, 8, .25), (1, 2, .3), (6, 7, .35), (3, 4, .4), (8, 9, .45),
             (4, 5, 5.), (9, 10, 10.)]
    s, t, w = (np.array(x) for x in zip(*edges))
    h = build_hierarchy(EdgeList(s.astype(np.int64), t.astype(np.int64), 11), torch.from_numpy(w))
    labels, used = cut_hierarchy(h, 2, 5, return_min_size=True)
    assert used == 5 and labels.tolist() == [0] * 5 + [1] * 6
    labels, used = cut_hierarchy(h, 3, 5, return_min_size=True)
    assert used == 1.25 and labels.tolist() == [0] * 5 + [1] * 2 + [2] * 4
    assert cut_hierarchy(h, 3, 0).tolist() == [0] * 5 + [1] * 5 + [2]  # the plain cut splits off the speck
    labels, used = cut_hierarchy(h, 11, 5, return_min_size=True)
    assert used <= 1 and labels.tolist() == list(range(11))


def test_kcut_merges_against_brute_force(rng):
    from scipy.sparse import coo_matrix
    from scipy.sparse.csgraph import connected_components

    from hiseg.core.builders import knn_graph

    X = rng.normal(size=(70, 2))
    X[:4] += 12  # a small far group
    g, w = knn_graph(X, 3)
    h = build_hierarchy(g, w)
    n = 70
    leaves, kids = _leaf_sets(h.parents)
    for min_size in (0, 3, 10):
        relevant = [min(len(leaves[c]) for c in kids[n + i]) >= min_size for i in range(n - 1)]
        for k in (1, 2, 4, 8):
            undo = [i for i in range(n - 2, -1, -1) if relevant[i]][: k - 1]
            expected = np.ones(n - 1, dtype=bool)
            expected[undo] = False
            keep = kcut_merges(h.parents, k, min_size)
            np.testing.assert_array_equal(keep, expected)
            e = h.mst_edge_map[keep]
            m = coo_matrix((np.ones(e.size), (g.sources[e], g.targets[e])), shape=(n, n))
            c, lab = connected_components(m, directed=False)
            assert c == min(k, 1 + sum(relevant))
            if k >= 2:
                assert np.bincount(lab).min() >= min_size
    with pytest.raises(ValueError, match="min_size"):
        kcut_merges(h.parents, 2, -1)
    with pytest.raises(ValueError, match="leaf_size"):
        kcut_merges(h.parents, 2, 2, np.ones(3))


def test_errors(rng):
    g = random_connected_graph(rng, 6, 4)
    h = build_hierarchy(g, torch.from_numpy(rng.random(g.num_edges)))
    with pytest.raises(ValueError, match=r"n_clusters must be in \[1, n_samples = 6\]"):
        cut_hierarchy(h, 7)
    with pytest.raises(ValueError, match="n_clusters"):
        cut_hierarchy(h, 0)
    with pytest.raises(TypeError, match="n_clusters must be an integer"):
        cut_hierarchy(h, 2.0)
    for bad in (-1, float("nan"), float("inf")):
        with pytest.raises(ValueError, match="min_size"):
            cut_hierarchy(h, 2, bad)
    with pytest.raises(ValueError, match="leaf_size"):
        cut_hierarchy(h, 2, 1, leaf_size=np.ones(5))
    with pytest.raises(ValueError, match="leaf_size"):
        cut_hierarchy(h, 2, 1, leaf_size=np.r_[np.ones(5), 0])
    with pytest.raises(ValueError, match="binary"):
        cut_hierarchy(np.array([2, 2, 2, 3]), 1)
    from hiseg.core.graph import batch_graphs

    hb = build_hierarchy(batch_graphs([g, g]), torch.from_numpy(rng.random(2 * g.num_edges)))
    with pytest.raises(ValueError, match="batched"):
        cut_hierarchy(hb, 2)


def test_resolve_min_size():
    assert resolve_min_size(0.5, 4, 100) == 50 and resolve_min_size(7, 4, 100) == 7 and resolve_min_size(0, 4, 100) == 0
    assert resolve_min_size("auto", 4, 100) == pytest.approx(AUTO_MIN_CLUSTER_FRACTION * 25)
    assert resolve_min_size("auto", 4, 100, AUTO_MIN_REGION_FRACTION) == pytest.approx(AUTO_MIN_REGION_FRACTION * 25)
    for bad in ("big", -1, float("nan")):
        with pytest.raises(ValueError, match="min_size"):
            resolve_min_size(bad, 3, 100)


def test_check_count():
    """The one check of a number of clusters or regions (estimator, cuts, images)."""
    from hiseg.core.cuts import check_count

    assert check_count(3, 5) == 3 and check_count(np.int64(5), 5) == 5 and check_count(10 ** 9) == 10 ** 9
    for bad, error, msg in ((0, ValueError, r"n_clusters must be an integer >= 1, got 0"),
                            (6, ValueError, r"n_clusters must be in \[1, n_samples = 5\], got 6"),
                            (2.0, TypeError, "n_clusters must be an integer >= 1, got 2.0 \\(float\\)"),
                            (True, TypeError, "got True \\(bool\\)"), ("3", TypeError, "str")):
        with pytest.raises(error, match=msg):
            check_count(bad, 5)
    with pytest.raises(ValueError, match=r"n_regions must be in \[1, the superpixels = 2\], got 3"):
        check_count(3, 2, name="n_regions", of="the superpixels")


def test_one_resolve_min_size_and_one_count_check():
    """resolve_min_size and the count check are defined once (hiseg.core.cuts), not per use."""
    import ast
    from pathlib import Path

    import hiseg

    defs = {}
    for f in Path(hiseg.__file__).parent.rglob("*.py"):
        for node in ast.walk(ast.parse(f.read_text())):
            if isinstance(node, ast.FunctionDef) and node.name in ("resolve_min_size", "check_count"):
                defs.setdefault(node.name, []).append(f.name)
    assert defs == {"resolve_min_size": ["cuts.py"], "check_count": ["cuts.py"]}


def test_one_auto_fraction_per_use():
    """The defaults are defined once, in hiseg.core.cuts; the modules using them hold no other name."""
    import hiseg.clustering as clustering
    import hiseg.segmentation.saliency as saliency

    assert (AUTO_MIN_CLUSTER_FRACTION, AUTO_MIN_REGION_FRACTION) == (0.1, 0.05)
    for module in (clustering, saliency):
        assert not hasattr(module, "AUTO_MIN_FRACTION")


def test_one_name_per_concept(rng):
    """The names of earlier releases are gone (no second name, no warning): ``k`` is
    ``n_clusters``, ``cut_num_clusters`` is ``cut_hierarchy``."""
    import hiseg.clustering as clustering
    import hiseg.core.cuts as cuts

    g = random_connected_graph(rng, 20, 10)
    h = build_hierarchy(g, torch.from_numpy(rng.random(g.num_edges)))
    assert not hasattr(cuts, "cut_num_clusters") and not hasattr(clustering, "cut_num_clusters")
    for call in (lambda: kcut_merges(h.parents, k=3), lambda: cut_hierarchy(h, k=3),
                 lambda: resolve_min_size("auto", k=2, total=10)):
        with pytest.raises(TypeError, match="'k'"):
            call()
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the names warn about nothing
        cut_hierarchy(h, n_clusters=3, min_size=2)
        kcut_merges(h.parents, n_clusters=3)


def test_explorer_page_takes_n_regions():
    from hiseg.explorer.page import start_of

    assert start_of(n_regions=5) == {"regions": 5} and start_of() == {"regions": 12}
    with pytest.raises(TypeError, match="'regions'"):
        start_of(regions=5)
