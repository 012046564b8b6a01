"""Graph builders."""
import numpy as np
import pytest
import higra as hg
from scipy.sparse import coo_matrix
from scipy.sparse.csgraph import connected_components

from hiseg.core.builders import grid_graph, knn_graph
from hiseg.core.graph import batch_graphs, region_adjacency_graph


def test_grid_graph_matches_higra_edge_set():
    g = grid_graph((4, 5))
    hgg = hg.get_4_adjacency_graph((4, 5))
    s, t = hgg.edge_list()
    assert set(zip(g.sources, g.targets)) == set(zip(s, t))
    assert g.num_edges == 4 * 4 + 3 * 5
    with pytest.raises(ValueError, match="2-D shape"):
        grid_graph((3,))
    with pytest.raises(ValueError, match="positive"):
        grid_graph((0, 3))


def test_knn_graph_is_knn_plus_mst(rng):
    X = rng.normal(size=(60, 2))
    X[:20] += 30  # two far apart groups: kNN alone is disconnected
    g, w = knn_graph(X, 5)
    n = 60
    m = coo_matrix((np.ones(g.num_edges), (g.sources, g.targets)), shape=(n, n))
    assert connected_components(m, directed=False)[0] == 1
    D = np.linalg.norm(X[:, None] - X[None], axis=2)
    np.testing.assert_allclose(w, D[g.sources, g.targets])
    edges = set(zip(g.sources.tolist(), g.targets.tolist()))
    # every point is linked to its 5 nearest neighbours (no halving, each edge once)
    for i in range(n):
        for j in np.argsort(D[i])[1:6]:
            assert (min(i, j), max(i, j)) in edges
    assert len(edges) == g.num_edges
    g2, _ = knn_graph(X, 5, connect=False)
    assert g2.num_edges < g.num_edges


def _components(g):
    m = coo_matrix((np.ones(g.num_edges), (g.sources, g.targets)), shape=(g.num_vertices,) * 2)
    return connected_components(m, directed=False)


def test_euclidean_mst_matches_scipy(rng):
    from scipy.sparse.csgraph import minimum_spanning_tree
    from scipy.spatial.distance import pdist, squareform

    from hiseg.core._neighbors import euclidean_mst

    X = rng.normal(size=(300, 7))
    D = squareform(pdist(X))
    ref = minimum_spanning_tree(D).tocoo()
    s, t = euclidean_mst(X)
    assert s.size == 299
    assert {tuple(sorted(e)) for e in zip(s, t)} == {tuple(sorted(e)) for e in zip(ref.row, ref.col)}


def _blobs(n, d, centers, seed):
    from sklearn.datasets import make_blobs

    return make_blobs(n, n_features=d, centers=centers, cluster_std=1.0, center_box=(-30, 30),
                      random_state=seed)


def test_approximate_knn_finds_most_true_neighbours():
    from sklearn.neighbors import NearestNeighbors

    X, _ = _blobs(4000, 16, 3, 0)
    g, w = knn_graph(X, 5, method="approximate", connect=False)
    true = NearestNeighbors(n_neighbors=6).fit(X).kneighbors(X, return_distance=False)[:, 1:]
    edges = set(zip(g.sources.tolist(), g.targets.tolist()))
    found = np.mean([(min(i, j), max(i, j)) in edges for i in range(len(X)) for j in true[i]])
    assert found > 0.9
    np.testing.assert_allclose(w, np.linalg.norm(X[g.sources] - X[g.targets], axis=1), rtol=1e-12)
    # every point keeps k edges of its own (the graph is symmetrised, not pruned)
    assert np.all(np.bincount(np.concatenate([g.sources, g.targets]), minlength=len(X)) >= 5)
    # deterministic for a seed
    g2, _ = knn_graph(X, 5, method="approximate", connect=False)
    np.testing.assert_array_equal(g.sources, g2.sources)


def test_component_edges_join_components_by_near_closest_pairs():
    from scipy.sparse.csgraph import minimum_spanning_tree
    from scipy.spatial.distance import cdist

    X, y = _blobs(1500, 8, 6, 1)
    g0, _ = knn_graph(X, 5, connect=False)
    c, lab = _components(g0)
    assert c >= 6  # far apart blobs: the kNN graph alone is disconnected
    g, w = knn_graph(X, 5, connect="components")
    assert _components(g)[0] == 1
    added = lab[g.sources] != lab[g.targets]
    assert added.sum() == c - 1
    # truth: the MST of the components weighted by their exact closest-pair distances
    C = np.zeros((c, c))
    for i in range(c):
        for j in range(i + 1, c):
            C[i, j] = cdist(X[lab == i], X[lab == j]).min()
    exact = minimum_spanning_tree(C).sum()
    assert exact <= w[added].sum() <= 1.05 * exact


@pytest.mark.parametrize("method", ["exact", "approximate"])
@pytest.mark.parametrize("factor", [1e300, 1e-300])
def test_knn_graph_is_scale_invariant(method, factor):
    X, _ = _blobs(600, 5, 3, 2)
    X = X + 100.0  # off-centre: the search centres the points first
    g, w = knn_graph(X, 5, method=method)
    gs, ws = knn_graph(X * factor, 5, method=method)
    np.testing.assert_array_equal(g.sources, gs.sources)
    np.testing.assert_array_equal(g.targets, gs.targets)
    np.testing.assert_allclose(ws, w * factor, rtol=1e-12)


@pytest.mark.parametrize("X, k, kw, msg", [
    (np.array([[0.0, np.nan], [1, 1]]), 1, {}, "NaN"),
    (np.array([[0.0, np.inf], [1, 1]]), 1, {}, "infinite"),
    (np.zeros((3, 2)), 5, {}, "at least n_neighbors"),
    (np.zeros(3), 1, {}, "2-D"),
    (np.zeros((4, 2)), 0, {}, "positive integer"),
    (np.array([[-1e308, 0], [1e308, 0], [0, 1e308]]), 1, {}, "float64 range"),
    (np.zeros((4, 2)), 1, dict(method="kd_tree"), "method must be"),
    (np.zeros((4, 2)), 1, dict(connect="full"), "connect must be"),
])
def test_knn_bad_input(X, k, kw, msg):
    with pytest.raises(ValueError, match=msg):
        knn_graph(X, k, **kw)


def test_knn_graph_of_identical_points():
    g, w = knn_graph(np.ones((8, 3)), 3)
    assert _components(g)[0] == 1 and np.all(w == 0)


def test_rag_and_frontiers(rng):
    labels = np.array([[5, 5, 7, 7],
                       [5, 5, 7, 7],
                       [9, 9, 9, 7]])
    rag = region_adjacency_graph(labels)
    assert rag.num_regions == 3
    assert set(zip(rag.graph.sources, rag.graph.targets)) == {(0, 1), (0, 2), (1, 2)}
    px = grid_graph(labels.shape)
    lab = rag.labels.ravel()
    for e in range(rag.graph.num_edges):
        fr = rag.frontier_edges[rag.frontier_ptr[e]:rag.frontier_ptr[e + 1]]
        assert fr.size > 0
        pairs = {tuple(sorted((lab[px.sources[f]], lab[px.targets[f]]))) for f in fr}
        assert pairs == {(rag.graph.sources[e], rag.graph.targets[e])}
        assert np.all(rag.pixel_edge_map[fr] == e)
    inner = np.flatnonzero(lab[px.sources] == lab[px.targets])
    assert np.all(rag.pixel_edge_map[inner] == -1)


@pytest.mark.parametrize("seed", range(5))
def test_rag_equals_higra_rag(seed):
    """Regions, region edges and the pixel-edge -> region-edge map equal higra's
    ``make_region_adjacency_graph_from_labelisation`` (connected regions: higra splits a
    disconnected label into several vertices, hiseg keeps it one)."""
    from skimage.measure import label

    rng = np.random.default_rng(seed)
    L = label(rng.integers(0, 5, (15, 17)), connectivity=1, background=-1) * 7 + 3  # sparse label ids
    rag = region_adjacency_graph(L)
    g4 = hg.get_4_adjacency_graph(L.shape)
    hr = hg.make_region_adjacency_graph_from_labelisation(g4, L)
    vmap = np.asarray(hg.CptRegionAdjacencyGraph.get_vertex_map(hr))
    emap = np.asarray(hg.CptRegionAdjacencyGraph.get_edge_map(hr))
    ours = rag.labels.ravel()
    # the same regions: a bijection between higra's vertices and ours
    pairs = np.unique(np.stack([vmap, ours], 1), axis=0)
    assert rag.num_regions == hr.num_vertices() == len(pairs) == len(np.unique(pairs[:, 0]))
    to_ours = dict(pairs.tolist())
    hs, ht = (np.asarray(x) for x in hr.edge_list())
    theirs = {tuple(sorted((to_ours[a], to_ours[b]))) for a, b in zip(hs, ht)}
    assert theirs == set(zip(rag.graph.sources.tolist(), rag.graph.targets.tolist()))
    assert rag.graph.num_edges == hr.num_edges()
    # every pixel edge: the region edge it crosses (or none), matched through the end points
    px = grid_graph(L.shape)
    gs, gt = (np.asarray(x) for x in g4.edge_list())
    higra_edge = {(min(a, b), max(a, b)): e for a, b, e in zip(gs.tolist(), gt.tolist(), emap.tolist())}
    for f, (a, b) in enumerate(zip(px.sources.tolist(), px.targets.tolist())):
        e_ours, e_h = rag.pixel_edge_map[f], higra_edge[(min(a, b), max(a, b))]
        if e_h < 0:
            assert e_ours == -1
        else:
            assert (rag.graph.sources[e_ours], rag.graph.targets[e_ours]) == tuple(
                sorted((to_ours[hs[e_h]], to_ours[ht[e_h]])))


def _rag_fields(rag):
    g = rag.graph
    return {"sources": g.sources, "targets": g.targets, "num_vertices": g.num_vertices, "labels": rag.labels,
            "pixel_edge_map": rag.pixel_edge_map, "frontier_ptr": rag.frontier_ptr,
            "frontier_edges": rag.frontier_edges, "frontier_lengths": rag.frontier_lengths(),
            "num_regions": rag.num_regions}


@pytest.mark.parametrize("seed", range(8))
def test_rag_built_from_higras_is_identical(seed):
    """``_region_adjacency_graph_higra`` (higra's RAG translated: benchmarks/bench_rag.py, which
    decided to keep hiseg's) gives every field of hiseg's RAG, same values and dtypes, on
    labels with disconnected regions (one vertex in hiseg, several components in higra),
    sparse and negative label values, one row / one column images and a single region; and
    the documented orders hold: edges ``a < b`` in lexicographic order, each frontier in
    increasing pixel-edge id."""
    from hiseg.core.graph import _region_adjacency_graph_higra

    rng = np.random.default_rng(seed)
    images = [rng.integers(-3, 4, (9, 11)) * [1, 7, 1_000_003][seed % 3],  # disconnected labels
              rng.integers(0, 3, (1, 13)), rng.integers(0, 3, (12, 1)).astype(np.uint8),
              np.full((3, 4), 5, np.int16), np.array([[2 ** 62, -2 ** 62, 0]])]
    for L in images:
        ours, theirs = region_adjacency_graph(L), _region_adjacency_graph_higra(L)
        for name, a in _rag_fields(ours).items():
            b = _rag_fields(theirs)[name]
            assert type(a) is type(b) and getattr(a, "dtype", None) == getattr(b, "dtype", None), name
            np.testing.assert_array_equal(a, b, err_msg=name)
        key = ours.graph.sources * ours.num_regions + ours.graph.targets
        assert np.all(ours.graph.sources < ours.graph.targets) and np.all(np.diff(key) > 0)
        for e in range(ours.graph.num_edges):
            assert np.all(np.diff(ours.frontier_edges[ours.frontier_ptr[e]:ours.frontier_ptr[e + 1]]) > 0)


def test_rag_bad_input():
    with pytest.raises(ValueError, match="2-D"):
        region_adjacency_graph(np.zeros((2, 2, 2), int))
    with pytest.raises(TypeError, match="integers"):
        region_adjacency_graph(np.zeros((2, 2)))


def test_batch_graphs_offsets(rng):
    gs = [grid_graph((2, 3)), grid_graph((3, 3))]
    bg = batch_graphs(gs)
    assert bg.num_graphs == 2 and bg.num_vertices == 15 and bg.num_edges == 7 + 12
    g1 = bg.graph(1)
    np.testing.assert_array_equal(g1.sources, gs[1].sources)
    with pytest.raises(ValueError, match="graph 1 of the batch"):
        batch_graphs([gs[0], (np.array([0]), np.array([4]), 2)])
    with pytest.raises(ValueError, match="at least one"):
        batch_graphs([])


def test_rag_is_taken_as_it_is_and_counts_its_regions_once():
    """The RAG is the one graph of the image pipeline: as_edge_list returns its edge list itself
    (no copy, no second check), and region_sizes is the pixel count of each region, computed once."""
    from hiseg.core.graph import as_edge_list, region_adjacency_graph

    labels = np.array([[5, 5, 7], [9, 7, 7], [9, 9, 7]])
    rag = region_adjacency_graph(labels)
    assert as_edge_list(rag) is rag.graph
    np.testing.assert_array_equal(rag.region_sizes, [2, 4, 3])  # labels 5, 7, 9 renumbered 0, 1, 2
    assert rag.region_sizes is rag.region_sizes
    assert rag.region_sizes.sum() == labels.size


def test_knn_graph_with_many_features_holds_no_edges_by_features_array():
    """Issue 43, item 8: the edge lengths are computed in blocks and the points normalised with
    one copy, so many features cost a few copies of X, not (edges x features) arrays (the peak
    was 27-31x the input)."""
    import tracemalloc

    import sklearn.neighbors  # noqa: F401 - its import is not the graph's memory

    from hiseg.core.builders import knn_graph

    X = np.random.default_rng(0).standard_normal((120, 20000))
    tracemalloc.start()
    try:
        graph, w = knn_graph(X, 5)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 3.0 * X.nbytes, peak / X.nbytes
    a, b = graph.sources, graph.targets
    whole = np.sqrt(((X[a] - X[b]) ** 2).sum(axis=1))
    np.testing.assert_allclose(w, whole, rtol=1e-12)
