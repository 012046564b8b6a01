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


class _RecordingKMeans:
    """A stand-in for scikit-learn's KMeans: random labels, and every run's rows and labels kept."""

    runs = []

    def __init__(self, n_clusters, n_init, random_state):
        self.k, self.rng = n_clusters, np.random.default_rng(random_state)

    def fit_predict(self, A):
        rows = np.floor(A[:, 0]).astype(int)  # X[i, j] = i + j / 100: any column names the row
        labels = self.rng.integers(0, self.k, len(rows))
        _RecordingKMeans.runs.append((rows, labels, self.k, A.shape[1]))
        return labels


@pytest.mark.parametrize("features,subsample", [(1.0, 1.0), (0.5, 0.7)])
def test_co_association_against_a_count_over_the_runs(measure, monkeypatch, features, subsample):
    import sklearn.cluster

    monkeypatch.setattr(sklearn.cluster, "KMeans", _RecordingKMeans)
    monkeypatch.setattr(_RecordingKMeans, "runs", [])
    n, d = 12, 6
    X = np.arange(n)[:, None] + np.arange(d)[None, :] / 100
    C = measure.co_association(X, 30, (2, 4), features=features, subsample=subsample, seed=3)
    together, drawn = np.zeros((n, n)), np.zeros((n, n))
    for rows, labels, k, cols in _RecordingKMeans.runs:
        assert 2 <= k <= 4 and cols == max(1, round(features * d)) and len(rows) == max(k, round(subsample * n))
        for a, i in enumerate(rows):
            for b, j in enumerate(rows):
                drawn[i, j] += 1
                together[i, j] += labels[a] == labels[b]
    expected = np.where(drawn > 0, together / np.maximum(drawn, 1), 0.0)
    np.fill_diagonal(expected, 1.0)
    assert len(_RecordingKMeans.runs) == 30
    np.testing.assert_allclose(C, expected, atol=1e-12)
    assert np.allclose(C, C.T) and 0 < C[~np.eye(n, dtype=bool)].mean() < 1


def test_co_association_of_two_far_groups_is_their_blocks(measure):
    rng = np.random.default_rng(0)
    X = np.concatenate([rng.normal(size=(10, 2)), rng.normal(size=(8, 2)) + 50])
    C = measure.co_association(X, 5, (2, 2))
    same = np.arange(18)[:, None] // 10 == np.arange(18)[None, :] // 10
    np.testing.assert_array_equal(C, same.astype(float))


def test_co_association_refuses_a_k_range_outside_2_to_n(measure):
    with pytest.raises(ValueError, match="k_range must satisfy"):
        measure.co_association(np.zeros((5, 2)), 3, (1, 3))
    with pytest.raises(ValueError, match="k_range must satisfy"):
        measure.co_association(np.zeros((5, 2)), 3, (2, 6))
