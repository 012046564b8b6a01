"""The helpers the clustering experiments share (``experiments/clustering/measure.py``, ``sets.py``,
``fits.py``), against brute force: the geodesic distances of ``geometry.md`` and
``starts_and_costs.md``, the co-association of ``consensus.md``, the NT-Xent loss and the views of
``contrastive.md``, the Poincaré ball's distances, loss and depths of ``hyperbolic.md``, and the gap
columns and the pilot's choice of their tables."""
import sys
from pathlib import Path

import numpy as np
import pytest

HERE = Path(__file__).resolve().parents[2] / "experiments" / "clustering"


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


def _nt_xent_brute_force(z1, z2, temperature):
    """SimCLR's loss written out: for each of the 2B rows, -log of its other view's share of
    exp(cosine / temperature) over the other 2B - 1 rows; the mean."""
    z = np.concatenate([z1, z2])
    z = z / np.linalg.norm(z, axis=1, keepdims=True)
    b, losses = len(z1), []
    for i in range(2 * b):
        j = (i + b) % (2 * b)
        others = [k for k in range(2 * b) if k != i]
        denominator = sum(np.exp(z[i] @ z[k] / temperature) for k in others)
        losses.append(-np.log(np.exp(z[i] @ z[j] / temperature) / denominator))
    return np.mean(losses)


@pytest.mark.parametrize("temperature", [0.1, 0.5, 2.0])
def test_nt_xent_against_the_loss_written_out(measure, temperature):
    import torch

    rng = np.random.default_rng(0)
    z1, z2 = rng.normal(size=(3, 4)), rng.normal(size=(3, 4))
    got = measure.nt_xent(torch.tensor(z1), torch.tensor(z2), temperature).item()
    assert got == pytest.approx(_nt_xent_brute_force(z1, z2, temperature), rel=1e-10)
    # views close to each other score lower than unrelated ones
    close = z1 + 0.01 * rng.normal(size=z1.shape)
    assert measure.nt_xent(torch.tensor(z1), torch.tensor(close), temperature).item() < got


def test_nt_xent_refuses_a_temperature_not_above_0(measure):
    import torch

    with pytest.raises(ValueError, match="temperature must be > 0"):
        measure.nt_xent(torch.ones(2, 2), torch.ones(2, 2), 0.0)


def _view(measure, X, k, **augmentation):
    import torch
    from sklearn.neighbors import NearestNeighbors

    T = torch.as_tensor(X)
    nb = NearestNeighbors(n_neighbors=k + 1).fit(X).kneighbors(X, return_distance=False)[:, 1:]
    rows = torch.arange(len(X))
    V = measure._views(T, rows, T.std(dim=0), torch.as_tensor(nb), torch.Generator().manual_seed(0), **augmentation)
    return V.numpy(), nb


def test_views_mix_moves_each_point_towards_one_of_its_neighbours(measure):
    X = np.random.default_rng(1).normal(size=(30, 3))
    V, nb = _view(measure, X, 4, noise=0.0, mask=0.0, mix=1.0)
    for i in range(len(X)):
        # v = x + a (x_j - x) with a in [0, 1] for some neighbour j: brute force over all rows
        fits = []
        for j in range(len(X)):
            step = X[j] - X[i]
            a = (V[i] - X[i]) @ step / (step @ step) if j != i else -1
            fits.append(j if 0 <= a <= 1 and np.allclose(X[i] + a * step, V[i], atol=1e-9) else None)
        assert set(fits) - {None} <= set(nb[i]) and set(fits) - {None}, i


def test_views_noise_and_mask_have_their_scale_and_share(measure):
    X = np.random.default_rng(2).normal(size=(4000, 3)) * np.array([1.0, 5.0, 0.2])
    V, _ = _view(measure, X, 3, noise=0.5, mask=0.0, mix=0.0)
    np.testing.assert_allclose((V - X).std(axis=0), 0.5 * X.std(axis=0, ddof=1), rtol=0.05)
    V, _ = _view(measure, X, 3, noise=0.0, mask=0.3, mix=0.0)
    kept = V == X
    assert np.all(kept | (V == 0)) and kept.mean() == pytest.approx(0.7, abs=0.02)


def test_contrastive_embedding_is_seeded_unit_and_separates_far_groups(measure):
    from scipy.cluster.hierarchy import fcluster, linkage

    rng = np.random.default_rng(0)
    X = np.concatenate([rng.normal(size=(20, 4)), rng.normal(size=(15, 4)) + 8])
    kw = dict(dim=8, steps=60, temperature=0.5, noise=0.3, mix=1.0, k=5)
    E = measure.contrastive_embedding(X, seed=3, **kw)
    assert E.shape == (35, 8)
    np.testing.assert_allclose(np.linalg.norm(E, axis=1), 1.0, rtol=1e-6)
    np.testing.assert_array_equal(E, measure.contrastive_embedding(X, seed=3, **kw))
    assert not np.allclose(E, measure.contrastive_embedding(X, seed=4, **kw))
    cut = fcluster(linkage(E, "average", metric="cosine"), 2, "maxclust")
    assert len(set(cut[:20])) == len(set(cut[20:])) == 1 and cut[0] != cut[-1]


@pytest.mark.parametrize("augmentation,message", [({}, "no augmentation"), ({"mask": 1.0}, "0 <= mask < 1"),
                                                  ({"noise": -1.0}, "noise >= 0")])
def test_contrastive_embedding_refuses_bad_augmentations(measure, augmentation, message):
    with pytest.raises(ValueError, match=message):
        measure.contrastive_embedding(np.zeros((5, 2)), **augmentation)


def _in_ball(rng, n, dim, largest=0.9):
    Z = rng.normal(size=(n, dim))
    return Z * (rng.uniform(0.02, largest, size=n) / np.linalg.norm(Z, axis=1))[:, None]


def test_poincare_distance_against_the_formula_and_is_a_metric(measure):
    import torch

    rng = np.random.default_rng(0)
    X, Y = _in_ball(rng, 6, 3, 0.999), _in_ball(rng, 5, 3, 0.999)
    got = measure.poincare_distance(torch.tensor(X), torch.tensor(Y)).numpy()
    for i, x in enumerate(X):
        for j, y in enumerate(Y):
            want = np.arccosh(1 + 2 * np.sum((x - y) ** 2) / ((1 - x @ x) * (1 - y @ y)))
            assert got[i, j] == pytest.approx(want, rel=1e-9), (i, j)
    # from the origin: 2 artanh |x|; symmetric; zero on the diagonal; the triangle inequality
    np.testing.assert_allclose(measure.poincare_distance(torch.zeros(1, 3, dtype=torch.float64),
                                                         torch.tensor(X)).numpy()[0],
                               2 * np.arctanh(np.linalg.norm(X, axis=1)), rtol=1e-9)
    P = _in_ball(rng, 30, 4, 0.99)
    D = measure.poincare_distance(torch.tensor(P), torch.tensor(P)).numpy()
    np.testing.assert_allclose(D, D.T, rtol=1e-9)
    assert np.all(np.abs(np.diag(D)) < 1e-5)
    assert np.all(D[:, :, None] <= D[:, None, :] + D.T[None, :, :] + 1e-9)


def test_to_poincare_ball_is_the_exponential_map_at_the_origin(measure):
    import torch

    v = torch.tensor(np.random.default_rng(1).normal(size=(20, 3)) * 0.7)
    z = measure.to_poincare_ball(v)
    # in the ball, along v, at Poincaré distance 2 |v| from the origin (the metric is 2 / (1 - |z|^2))
    cos = (z * v).sum(1) / (z.norm(dim=1) * v.norm(dim=1))
    np.testing.assert_allclose(cos.numpy(), 1.0, rtol=1e-12)
    np.testing.assert_allclose(2 * np.arctanh(z.norm(dim=1).numpy()), 2 * v.norm(dim=1).numpy(), rtol=1e-9)
    far = measure.to_poincare_ball(torch.tensor([[30.0, 40.0]], dtype=torch.float64), max_norm=0.99)
    np.testing.assert_allclose(far.numpy(), [[0.99 * 0.6, 0.99 * 0.8]], rtol=1e-12)
    with pytest.raises(ValueError, match="max_norm must be in"):
        measure.to_poincare_ball(v, max_norm=1.0)


@pytest.mark.parametrize("temperature", [0.1, 1.0])
def test_hyperbolic_nt_xent_against_the_loss_written_out(measure, temperature):
    import torch

    rng = np.random.default_rng(2)
    z1, z2 = _in_ball(rng, 3, 2), _in_ball(rng, 3, 2)
    z = np.concatenate([z1, z2])

    def d(x, y):
        return np.arccosh(1 + 2 * np.sum((x - y) ** 2) / ((1 - x @ x) * (1 - y @ y)))

    losses = []
    for i in range(6):
        denominator = sum(np.exp(-d(z[i], z[k]) / temperature) for k in range(6) if k != i)
        losses.append(-np.log(np.exp(-d(z[i], z[(i + 3) % 6]) / temperature) / denominator))
    t1 = torch.tensor(z1, requires_grad=True)
    got = measure.hyperbolic_nt_xent(t1, torch.tensor(z2), temperature)
    assert got.item() == pytest.approx(np.mean(losses), rel=1e-9)
    got.backward()  # the diagonal (x = x) leaves the gradient finite
    assert torch.isfinite(t1.grad).all()


def _mobius_add(x, y):
    xy, nx, ny = x @ y, x @ x, y @ y
    return ((1 + 2 * xy + ny) * x + (1 - nx) * y) / (1 + 2 * xy + nx * ny)


def test_lca_depth_is_the_geodesic_segments_nearest_approach_to_the_origin(measure):
    from scipy.optimize import minimize_scalar

    def depth(z):
        return 2 * np.arctanh(np.linalg.norm(z))

    def segment(x, y, t):  # the geodesic from x (t = 0) to y (t = 1), by Möbius addition and scaling
        w = _mobius_add(-x, y)
        r = np.linalg.norm(w)
        return _mobius_add(x, np.tanh(t * np.arctanh(r)) * w / r)

    rng = np.random.default_rng(3)
    Z = np.concatenate([_in_ball(rng, 8, 3), [[0.3, 0.0, 0.0], [0.6, 0.0, 0.0], [-0.5, 0.0, 0.0]]])
    got = measure.lca_depth(Z)
    for i, x in enumerate(Z):
        for j, y in enumerate(Z):
            want = depth(x) if i == j else minimize_scalar(lambda t: depth(segment(x, y, t)), bounds=(0, 1),
                                                           method="bounded", options={"xatol": 1e-12}).fun
            assert got[i, j] == pytest.approx(want, abs=1e-7), (i, j)
    # one ray: the inner point is the ancestor; opposite sides: the geodesic runs through the root
    assert got[-3, -2] == pytest.approx(depth(Z[-3])) and got[-2, -1] == pytest.approx(0.0, abs=1e-7)


def test_contrastive_embedding_in_the_ball_is_seeded_inside_and_separates_far_groups(measure):
    from scipy.cluster.hierarchy import fcluster, linkage

    rng = np.random.default_rng(0)
    X = np.concatenate([rng.normal(size=(20, 4)), rng.normal(size=(15, 4)) + 8])
    kw = dict(dim=2, steps=60, temperature=0.5, noise=0.3, mix=1.0, k=5, space="ball")
    Z = measure.contrastive_embedding(X, seed=3, **kw)
    assert Z.shape == (35, 2) and np.all(np.linalg.norm(Z, axis=1) <= 1 - 1e-5 + 1e-12)
    np.testing.assert_array_equal(Z, measure.contrastive_embedding(X, seed=3, **kw))
    cut = fcluster(linkage(Z, "average"), 2, "maxclust")
    assert len(set(cut[:20])) == len(set(cut[20:])) == 1 and cut[0] != cut[-1]
    with pytest.raises(ValueError, match="space must be 'sphere' or 'ball'"):
        measure.contrastive_embedding(X, noise=0.3, space="cube")
    with pytest.raises(ValueError, match="scale must be > 0"):
        measure.contrastive_embedding(X, noise=0.3, space="ball", scale=0.0)


def test_pilot_choice_puts_fewest_below_before_the_mean(measure):
    rows = [dict(best=0.8, purity={"steady": 0.8, "swinging": 0.95}, seconds={"steady": 1.0, "swinging": 3.0}),
            dict(best=0.8, purity={"steady": 0.79, "swinging": 0.7}, seconds={"steady": 2.0, "swinging": 1.0})]
    assert measure.pilot_choice(rows, ["swinging", "steady"]) == "steady"
    assert measure.row_summary(rows, "swinging") == "0.825 | +0.025 | 1 | -0.100 | 2.00 / 3.00"


def test_refined_pool_refuses_unknown_heights(monkeypatch):
    monkeypatch.setattr(sys, "path", [str(HERE)] + sys.path)
    monkeypatch.delitem(sys.modules, "fits", raising=False)
    import fits

    with pytest.raises(ValueError, match="heights must be 'cophenetic' or 'merge order'"):
        fits.refined_pool(np.zeros((3, 2)), np.zeros((2, 4)), "x", heights="ranks")


def test_geometry_trees_computes_each_geometry_once(measure):
    calls = []

    def geometry(a, b):
        calls.append((a, b))
        return np.full((3, 3), a + b)

    linkages = {"first": lambda G: G[0, 0] + 1, "second": lambda G: G[0, 0] + 2}
    methods = [(1, 2, "first"), (1, 2, "second"), (3, 4, "first")]
    out = measure.geometry_trees(methods, geometry, linkages)
    assert calls == [(1, 2), (3, 4)]
    assert {m: z for m, (z, _) in out.items()} == {(1, 2, "first"): 4, (1, 2, "second"): 5, (3, 4, "first"): 8}
    assert all(s >= 0 for _, s in out.values())
