"""The helpers the clustering experiments share (``experiments/clustering/measure.py``, ``sets.py``),
against brute force: the geodesic distances of ``geometry.md`` and ``starts_and_costs.md`` and
the gap columns of their tables."""
import sys
from pathlib import Path

import numpy as np
import pytest

HERE = Path(__file__).resolve().parents[1] / "experiments" / "clustering"


@pytest.fixture
def measure(monkeypatch):
    monkeypatch.setattr(sys, "path", [str(HERE)] + sys.path)
    monkeypatch.delitem(sys.modules, "measure", raising=False)
    import measure

    return measure


def _floyd_warshall(n, sources, targets, lengths):
    D = np.full((n, n), np.inf)
    np.fill_diagonal(D, 0.0)
    for s, t, d in zip(sources, targets, lengths):
        D[s, t] = D[t, s] = min(D[s, t], d)
    for k in range(n):
        D = np.minimum(D, D[:, [k]] + D[[k], :])
    return D


@pytest.mark.parametrize("seed", [0, 1])
def test_geodesic_distances_are_shortest_paths_on_the_knn_graph(measure, seed):
    from hiseg import knn_graph

    # two far groups: the kNN graph alone is disconnected, the MST edge joins them
    rng = np.random.default_rng(seed)
    X = np.concatenate([rng.normal(size=(15, 3)), rng.normal(size=(12, 3)) + 20])
    D = measure.geodesic_distances(X, 4)
    g, d = knn_graph(X, 4)
    np.testing.assert_allclose(D, _floyd_warshall(len(X), g.sources, g.targets, d), rtol=1e-12)
    assert np.isfinite(D).all() and D[0, -1] > 20


def test_gap_summary_against_the_better_linkage(measure):
    cells = measure.gap_summary([0.9, 0.8, 0.7], [0.85, 0.8, 0.75])
    assert cells == "0.800 | +0.000 | 1 | -0.050"


def test_extra_sets_are_scaled_and_labelled(monkeypatch):
    monkeypatch.setattr(sys, "path", [str(HERE)] + sys.path)
    monkeypatch.delitem(sys.modules, "sets", raising=False)
    from sets import extra_sets

    for name, (X, y) in extra_sets().items():
        np.testing.assert_allclose(X.min(axis=0), -1, atol=1e-12, err_msg=name)  # every feature
        np.testing.assert_allclose(X.max(axis=0), 1, atol=1e-12, err_msg=name)
        assert len(np.unique(y)) in (3, 5) and len(y) == len(X), name
