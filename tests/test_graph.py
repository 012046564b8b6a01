"""Graph builders."""
import numpy as np
import pytest
import higra as hg
from scipy.sparse import coo_matrix
from scipy.sparse.csgraph import connected_components

from hiseg.graph import as_edge_list, batch_graphs, grid_graph, knn_graph, region_adjacency_graph


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


@pytest.mark.parametrize("X, k, msg", [
    (np.array([[0.0, np.nan], [1, 1]]), 1, "NaN"),
    (np.zeros((3, 2)), 5, "at least n_neighbors"),
    (np.zeros(3), 1, "2-D"),
    (np.zeros((4, 2)), 0, "positive integer"),
])
def test_knn_bad_input(X, k, msg):
    with pytest.raises(ValueError, match=msg):
        knn_graph(X, k)


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
    # against higra's RAG
    L = rng.integers(0, 6, (15, 17))
    rag = region_adjacency_graph(L)
    hgrag = hg.make_region_adjacency_graph_from_labelisation(hg.get_4_adjacency_graph(L.shape), L)
    hs, ht = hgrag.edge_list()
    vm = hg.get_attribute(hgrag, "vertex_map") if hasattr(hg, "get_attribute") else None
    assert rag.graph.num_edges <= hs.size  # higra splits disconnected regions, we don't


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
