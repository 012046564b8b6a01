"""UltrametricClustering: scikit-learn contract, cuts, partial labels, bad input; plotting."""
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.optimize import linear_sum_assignment
from sklearn.base import clone
from sklearn.datasets import make_blobs
from sklearn.utils.estimator_checks import parametrize_with_checks

from hiseg import UltrametricClustering
from hiseg.core.cuts import cut_hierarchy


def _accuracy(y, labels):
    """Accuracy under the best one-to-one matching of clusters to classes (Hungarian)."""
    k = max(y.max(), labels.max()) + 1
    C = np.zeros((k, k), dtype=np.int64)
    np.add.at(C, (labels, y), 1)
    r, c = linear_sum_assignment(-C)
    return C[r, c].sum() / y.size


@pytest.fixture(scope="module")
def blobs():
    X, y = make_blobs(90, centers=[[0, 0], [8, 0], [0, 8]], cluster_std=0.7, random_state=0)
    return X, y


# the estimator checks fit many times on small data: fewer iterations keep them short
@parametrize_with_checks([UltrametricClustering(max_iter=15),
                          UltrametricClustering(max_iter=15, dissimilarity="ward", n_neighbors=5)])
def test_sklearn_estimator_checks(estimator, check):
    check(estimator)


def test_registered_lazily_on_the_package():
    import hiseg

    assert hiseg.UltrametricClustering is UltrametricClustering


def test_well_separated_blobs_are_found(blobs):
    X, y = blobs
    est = UltrametricClustering(n_clusters=3, max_iter=60).fit(X)
    assert _accuracy(y, est.labels_) == 1.0
    E = est.graph_.num_edges
    assert est.ultrametric_.shape == (E,) and est.edge_weights_.shape == (E,)
    assert est.altitudes_.shape == (2 * len(X) - 1,) and est.parents_.shape == (2 * len(X) - 1,)
    assert est.tree_.num_leaves() == len(X)
    assert est.n_features_in_ == 2 and est.n_iter_ == len(est.loss_history_) >= 1
    # the ultrametric on each edge is the altitude of the lca of its ends
    lca = est.tree_.lowest_common_ancestor_preprocess().lca(est.graph_.sources, est.graph_.targets)
    np.testing.assert_allclose(est.altitudes_[lca], est.ultrametric_)
    # fit_predict returns the same labels (deterministic)
    np.testing.assert_array_equal(clone(est).fit_predict(X), est.labels_)


@pytest.mark.parametrize("k", [1, 2, 3, 7, 89, 90])
def test_plain_labels_are_scipys_maxclust_cut_of_the_fitted_hierarchy(blobs, k):
    """labels_ of the plain cut (min_size=0) against an independent cut of the same
    hierarchy: scipy's fcluster(maxclust) on its linkage matrix, whose altitudes have no
    tie at the cut (asserted), renumbered by the smallest sample index as labels_ is."""
    from scipy.cluster.hierarchy import fcluster

    X, _ = blobs
    est = UltrametricClustering(n_clusters=k, loss="closest", max_iter=5, min_size=0,
                                dissimilarity="euclidean").fit(X)
    Z = est.linkage_matrix()
    n = len(X)
    if 1 < k < n:
        assert Z[n - k - 1, 2] < Z[n - k, 2]  # the kept merges lie strictly below the undone ones
    ref = fcluster(Z, k, criterion="maxclust")
    _, first, inverse = np.unique(ref, return_index=True, return_inverse=True)
    rank = np.argsort(np.argsort(first))
    np.testing.assert_array_equal(est.labels_, rank[inverse])


def test_cut_with_tied_altitudes_has_exactly_k_clusters():
    # all points equidistant on a line: every merge at the same altitude
    X = np.arange(12, dtype=float)[:, None]
    est = UltrametricClustering(loss="closest", max_iter=1, n_neighbors=2, init="input",
                                dissimilarity="euclidean").fit(X)
    assert np.unique(est.altitudes_[12:]).size == 1
    for k in range(1, 13):
        lab = cut_hierarchy(est.parents_, k)
        assert np.unique(lab).size == k
        # clusters of a cut of a tree are nested: k + 1 refines k
        if k > 1:
            prev = cut_hierarchy(est.parents_, k - 1)
            assert all(np.unique(prev[lab == c]).size == 1 for c in range(k))


def test_cut_against_scipy_fcluster():
    from scipy.cluster.hierarchy import fcluster
    from sklearn.metrics import adjusted_rand_score

    X, _ = make_blobs(40, centers=4, random_state=3)
    est = UltrametricClustering(n_clusters=4, max_iter=20).fit(X)
    Z = est.linkage_matrix()
    for k in (2, 3, 4, 6):
        ref = fcluster(Z, k, criterion="maxclust")
        assert adjusted_rand_score(ref, cut_hierarchy(est.parents_, k)) == 1.0


def test_partial_labels_are_used():
    # two moons: the unsupervised closest fit cuts off a few outliers at the top, 20% of
    # labelled samples make the top split separate the moons
    from sklearn.datasets import make_moons

    rng = np.random.default_rng(0)
    X, y = make_moons(120, noise=0.1, random_state=0)
    partial = np.full(120, -1)
    idx = rng.choice(120, 24, replace=False)
    partial[idx] = y[idx]
    # the plain cut (min_size=0) shows the hierarchy itself: the labels change its top
    unsup = UltrametricClustering(2, loss="closest", max_iter=80, min_size=0,
                                  dissimilarity="euclidean").fit(X)
    semi = UltrametricClustering(2, loss="closest+triplet", margin=1.0, triplet_weight=1.0,
                                 max_iter=80, min_size=0).fit(X, partial)
    assert _accuracy(y, semi.labels_) > 0.95
    assert _accuracy(y, semi.labels_) > _accuracy(y, unsup.labels_) + 0.2
    # the size term can be added to the semi-supervised loss
    both = UltrametricClustering(2, loss="closest+size+triplet", size_weight=1.0, margin=1.0,
                                 max_iter=80).fit(X, partial)
    assert _accuracy(y, both.labels_) > 0.95
    # string labels with "-1" for the unlabelled samples give the same fit
    strs = np.where(partial < 0, "-1", np.where(partial == 0, "a", "b")).astype(object)
    semi2 = UltrametricClustering(2, loss="closest+triplet", margin=1.0, max_iter=80).fit(X, strs)
    np.testing.assert_array_equal(semi2.labels_, semi.labels_)


def test_pandas_input(blobs):
    pd = pytest.importorskip("pandas")
    X, y = blobs
    df = pd.DataFrame(X, columns=["a", "b"])
    est = UltrametricClustering(n_clusters=3, max_iter=30).fit(df, pd.Series(y))
    np.testing.assert_array_equal(est.feature_names_in_, ["a", "b"])
    ref = UltrametricClustering(n_clusters=3, max_iter=30).fit(X)
    np.testing.assert_array_equal(est.labels_, ref.labels_)
    partial = pd.Series(np.where(np.arange(len(y)) % 5 == 0, y, -1))
    UltrametricClustering(3, loss="closest+triplet", max_iter=5).fit(df, partial)


def test_dasgupta_losses_run(blobs):
    X, y = blobs
    for loss in ("dasgupta", "dasgupta+size"):
        est = UltrametricClustering(3, loss=loss, max_iter=15).fit(X)
        assert np.unique(est.labels_).size == 3
    # duplicated samples (zero distances) are fine for the dissimilarity mode
    Xd = np.concatenate([X[:20], X[:20]])
    UltrametricClustering(2, loss="dasgupta", max_iter=3).fit(Xd)


@pytest.mark.parametrize("make, err, msg", [
    (lambda X, y: (np.where(np.arange(X.size).reshape(X.shape) == 3, np.nan, X), None, {}),
     ValueError, "NaN"),
    (lambda X, y: (np.where(np.arange(X.size).reshape(X.shape) == 3, np.inf, X), None, {}),
     ValueError, "infinity"),
    (lambda X, y: (X[:5], None, {}), ValueError, r"n_samples >= n_neighbors \+ 1 = 6, got n_samples = 5"),
    (lambda X, y: (X[:10], None, dict(n_clusters=11, n_neighbors=3)), ValueError,
     r"n_clusters must be in \[1, n_samples = 10\], got 11"),
    (lambda X, y: (X, y[:-1], {}), ValueError, "y has 89 labels but X has 90 samples"),
    (lambda X, y: (X, None, dict(loss="closest+triplet")), ValueError, "needs partial labels"),
    (lambda X, y: (X, np.where(y == 0, 0, -1), dict(loss="closest+triplet")), ValueError,
     "at least two classes.*1 class"),
    (lambda X, y: (X, np.full(len(y), -1), dict(loss="closest+triplet")), ValueError,
     "at least two classes.*0 classes"),
    (lambda X, y: (X, np.where(np.arange(len(y)) < 2, np.arange(len(y)), -1), dict(loss="closest+triplet")),
     ValueError, "at least two labelled samples"),
    (lambda X, y: (X, y - 2, dict(loss="closest+triplet")), ValueError, "other than -1"),
    (lambda X, y: (X, y + 0.5, dict(loss="closest+triplet")), ValueError, "non-integer"),
    (lambda X, y: (X, None, dict(loss="ward")), ValueError, "loss must be one of"),
    (lambda X, y: (X, None, dict(n_clusters=0)), ValueError, "n_clusters must be an integer >= 1"),
    (lambda X, y: (X, None, dict(n_clusters=2.5)), TypeError, "n_clusters must be an integer"),
    (lambda X, y: (X, None, dict(n_neighbors=0)), ValueError, "n_neighbors must be >= 1"),
    (lambda X, y: (X, None, dict(lr=-1.0)), ValueError, "lr must be > 0"),
    (lambda X, y: (X, None, dict(positivity="abs")), ValueError, "positivity"),
    (lambda X, y: (X, None, dict(optimizer="lbfgs")), ValueError, "optimizer"),
    (lambda X, y: (X[:, :0], None, {}), ValueError, "0 feature"),
    (lambda X, y: (X[0], None, {}), ValueError, "Expected 2D array"),
])
def test_bad_input_gives_a_clear_error(blobs, make, err, msg):
    X, y = blobs
    Xb, yb, params = make(X, y)
    with pytest.raises(err, match=msg):
        UltrametricClustering(max_iter=2, **params).fit(Xb, yb)


@pytest.mark.parametrize("loss", ["auto", "closest+size"])
@pytest.mark.parametrize("factor", [1e300, 1e-300])
def test_extreme_scales_give_the_same_clustering(blobs, factor, loss):
    X, _ = blobs
    ref = UltrametricClustering(3, loss=loss, max_iter=30).fit(X)
    est = UltrametricClustering(3, loss=loss, max_iter=30).fit(X * factor)
    np.testing.assert_array_equal(est.labels_, ref.labels_)
    if loss == "auto":
        # the same starts and hierarchies: the exact Dasgupta costs that chose agree (the
        # relaxed cost sees how a rounding breaks the ties of Ward's heights)
        for a, b in zip(est.candidates_, ref.candidates_):
            assert a["score"][0] == pytest.approx(b["score"][0], rel=1e-9)
    else:
        # the fit sees the same normalised distances (up to rounding: near-ties may flip later)
        assert est.loss_history_[0] == pytest.approx(ref.loss_history_[0], rel=1e-12)
    # altitudes in the data's unit
    assert 0.5 < est.altitudes_[-1] / (ref.altitudes_[-1] * factor) < 2
    np.testing.assert_allclose(est.edge_weights_, ref.edge_weights_ * factor, rtol=1e-12)


@pytest.mark.filterwarnings("ignore:invalid value:RuntimeWarning")  # scikit-learn's finiteness check sums X
def test_distances_beyond_float64_are_refused():
    X = np.array([[-1e308, 0.0], [1e308, 0.0]] * 5) + np.arange(10)[:, None] * [0.0, 1e300]
    with pytest.raises(ValueError, match="float64 range"):
        UltrametricClustering(2, max_iter=2, n_neighbors=2).fit(X)


@pytest.fixture(scope="module")
def blobs_with_outliers():
    """Three blobs of 60 points and two far outliers (labels: the blob, -1 for the outliers)."""
    X, y = make_blobs(180, centers=[[0, 0], [8, 0], [0, 8]], cluster_std=0.8, random_state=1)
    X = np.concatenate([X, [[30.0, 30.0], [-25.0, 20.0]]])
    y = np.concatenate([y, [-1, -1]])
    return X, y


def test_outliers_merged_last_do_not_become_clusters(blobs_with_outliers):
    X, y = blobs_with_outliers
    blob = y >= 0
    plain = UltrametricClustering(3, loss="closest", min_size=0, max_iter=50,
                                  dissimilarity="euclidean").fit(X)
    assert np.bincount(plain.labels_).min() <= 2  # the plain cut isolates the outliers
    est = UltrametricClustering(3, loss="closest", min_size="auto", max_iter=50,
                                dissimilarity="euclidean").fit(X)
    assert est.min_size_ == pytest.approx(0.1 * len(X) / 3)
    assert _accuracy(y[blob], est.labels_[blob]) == 1.0
    assert np.bincount(est.labels_).min() >= est.min_size_
    np.testing.assert_array_equal(est.parents_, plain.parents_)  # same hierarchy, another cut
    # semi-supervised: the minimum size is half the smallest labelled class share
    partial = np.where(np.arange(len(y)) % 6 == 0, y, -1)
    partial[-2:] = -1
    semi = UltrametricClustering(3, loss="closest+triplet", max_iter=50).fit(X, partial)
    counts = np.bincount(partial[partial >= 0])
    assert semi.min_size_ == pytest.approx(0.5 * counts.min() / counts.sum() * len(X))
    assert _accuracy(y[blob], semi.labels_[blob]) == 1.0


def test_auto_start_is_chosen_on_the_labelled_samples(blobs_with_outliers):
    X, y = blobs_with_outliers
    partial = np.where(np.arange(len(y)) % 9 == 0, y, -1)
    lab = partial >= 0
    est = UltrametricClustering(3, loss="closest+triplet", max_iter=40).fit(X, partial)
    fits = {s: UltrametricClustering(3, loss="closest+triplet", max_iter=40, init=s).fit(X, partial)
            for s in ("average", "input")}
    scores = {s: _accuracy(y[lab], f.labels_[lab]) for s, f in fits.items()}
    expected = "average" if scores["average"] >= scores["input"] else "input"
    assert est.init_ == expected
    np.testing.assert_array_equal(est.labels_, fits[expected].labels_)
    # no labels: one start
    assert UltrametricClustering(3, max_iter=5, dissimilarity="euclidean").fit(X).init_ == "average"


def test_min_size_falls_back_to_k_clusters(blobs):
    X, y = blobs
    # no three clusters of 40 samples in 90: halved until the cut has three clusters
    est = UltrametricClustering(3, min_size=40, max_iter=30).fit(X)
    assert np.unique(est.labels_).size == 3
    assert _accuracy(y, est.labels_) == 1.0
    frac = UltrametricClustering(3, min_size=0.2, max_iter=30).fit(X)
    assert frac.min_size_ == pytest.approx(18)
    np.testing.assert_array_equal(frac.labels_, est.labels_)


def test_min_size_has_one_name(blobs):
    X, _ = blobs
    assert "min_cluster_size" not in UltrametricClustering().get_params()
    with pytest.raises(TypeError, match="min_cluster_size"):
        UltrametricClustering(3, min_cluster_size=40)
    with pytest.raises(ValueError, match="min_size must be"):
        UltrametricClustering(3, min_size=-1, max_iter=2).fit(X)


@pytest.mark.parametrize("params, msg", [
    (dict(knn="kd_tree"), "knn must be"),
    (dict(connect="full"), "connect must be"),
    (dict(init="ward"), "init must be"),
    (dict(dissimilarity="cosine"), "dissimilarity must be one of"),
    (dict(min_size=-1), "min_size must be"),
    (dict(min_size=float("nan")), "min_size must be"),
    (dict(min_size="big"), "min_size must be"),
])
def test_bad_graph_and_cut_options(blobs, params, msg):
    with pytest.raises(ValueError, match=msg):
        UltrametricClustering(max_iter=2, **params).fit(blobs[0])


def test_sparse_input_is_refused(blobs):
    from scipy.sparse import csr_matrix

    with pytest.raises(TypeError, match="[Ss]parse"):
        UltrametricClustering(max_iter=2).fit(csr_matrix(blobs[0]))


def test_no_predict_and_not_fitted_errors():
    from sklearn.exceptions import NotFittedError

    est = UltrametricClustering()
    assert not hasattr(est, "predict")
    with pytest.raises(NotFittedError):
        est.tree_
    with pytest.raises(NotFittedError):
        est.linkage_matrix()


# ----------------------------------------------------------------------------- plotting
def test_plotting_helpers(blobs, tmp_path):
    from scipy.cluster.hierarchy import is_valid_linkage, linkage

    from hiseg.clustering.plotting import plot_hierarchies_grid, plot_hierarchy_and_clusters, to_linkage

    X, y = blobs
    est = UltrametricClustering(3, max_iter=20).fit(X)
    Z = to_linkage(est.parents_, est.altitudes_)
    assert is_valid_linkage(Z) and Z.shape == (len(X) - 1, 4) and Z[-1, 3] == len(X)
    path = tmp_path / "fig.png"
    fig = plot_hierarchy_and_clusters(X, est, labelled=np.arange(0, 90, 9), title="blobs", path=path)
    assert path.stat().st_size > 1000 and len(fig.axes) == 2
    cell = dict(X=X, parents=est.parents_, altitudes=est.altitudes_, labels=est.labels_)
    flat = dict(X=X, labels=y)
    ward = dict(X=X, labels=y, linkage=linkage(X, "ward"))
    fig2 = plot_hierarchies_grid([dict(name="a", cells=[cell, flat, ward])], columns=["one", "two", "three"])
    assert len(fig2.axes) == 6
    with pytest.raises(ValueError, match="decrease"):
        alt = est.altitudes_.copy()
        alt[-1] = -1
        to_linkage(est.parents_, alt)
    with pytest.raises(ValueError, match="2-D points"):
        plot_hierarchy_and_clusters(np.c_[X, X], est)


# ----------------------------------------------------------------------------- fitting options
@pytest.fixture(scope="module")
def coins_rag():
    """A ~300-superpixel RAG of scikit-image's coins, mean Sobel gradient per frontier."""
    skimage = pytest.importorskip("skimage")
    from skimage.filters import sobel
    from skimage.segmentation import slic

    from hiseg.core.builders import grid_graph
    from hiseg.core.graph import region_adjacency_graph

    im = skimage.util.img_as_float(skimage.data.coins())
    grad = sobel(im).ravel()
    rag = region_adjacency_graph(slic(im, n_segments=300, compactness=0.1, start_label=0, channel_axis=None))
    px = grid_graph(im.shape)
    fe = rag.frontier_edges
    vals = 0.5 * (grad[px.sources[fe]] + grad[px.targets[fe]])
    w = np.add.reduceat(vals, rag.frontier_ptr[:-1]) / np.diff(rag.frontier_ptr)
    return rag.graph, w


def test_newton_fit_ends_below_average_linkage(coins_rag):
    import higra as hg
    import torch

    from hiseg.core.fitting import fit_ultrametric

    from tests.core.test_ultrametric import is_ultrametric_on_graph

    g, w = coins_rag
    tree, alt = hg.binary_partition_tree_average_linkage(g.to_higra(), w)
    al = alt[tree.lowest_common_ancestor_preprocess().lca(g.sources, g.targets)]
    res = fit_ultrametric(g, torch.tensor(w), optimizer="newton", max_iter=100)
    u = res.ultrametric.numpy()
    assert is_ultrametric_on_graph(g, u) and np.all(u >= 0)
    assert np.mean((u - w) ** 2) < 0.97 * np.mean((al - w) ** 2)
    assert res.best_iter < 60
    # AMSGrad in log space (positivity="exp") also runs and improves on the start
    res2 = fit_ultrametric(g, torch.tensor(w), positivity="exp", max_iter=30)
    assert res2.loss < res2.history[0]
    with pytest.raises(ValueError, match="no closest term"):
        fit_ultrametric(g, torch.tensor(w), loss="dasgupta", optimizer="newton")
    with pytest.raises(ValueError, match="needs a closest term"):
        UltrametricClustering(loss="dasgupta", optimizer="newton").fit(np.random.default_rng(0).random((20, 2)))


# ----------------------------------------------------------------------------- Ward's heights
def test_ward_heights_on_a_complete_graph_give_scipys_ward():
    """dissimilarity="ward" on the complete graph: the closest fit starts at its optimum, so
    the hierarchy and its plain k-cuts are scipy's Ward linkage's."""
    from scipy.cluster.hierarchy import fcluster, linkage
    from sklearn.metrics import adjusted_rand_score

    X, _ = make_blobs(50, centers=4, cluster_std=2.0, random_state=5)
    est = UltrametricClustering(4, loss="closest", dissimilarity="ward", n_neighbors=49,
                                min_size=0, max_iter=20).fit(X)
    assert est.dissimilarity_ == "ward" and est.init_ == "input"
    Z = linkage(X, "ward")
    for k in (2, 3, 4, 7):
        ref = fcluster(Z, k, criterion="maxclust")
        assert adjusted_rand_score(ref, cut_hierarchy(est.parents_, k)) == 1.0
    np.testing.assert_allclose(np.sort(est.altitudes_[50:]), np.sort(Z[:, 2]), rtol=1e-9)


def _unequal_mixture(n, k, seed):
    """k Gaussian classes in 64-d, centres in [-2, 2]^64, standard deviations in [1, 2]."""
    std = np.random.default_rng(seed).uniform(1.0, 2.0, k)
    return make_blobs(n, n_features=64, centers=k, cluster_std=std, center_box=(-2, 2), random_state=seed)


def test_ward_heights_where_distances_fail():
    # 64-d classes of unequal spreads: the 5-NN graph's distances mix classes, Ward's heights do not
    X, y = _unequal_mixture(300, 6, 4)
    eu = UltrametricClustering(6, loss="closest+size", dissimilarity="euclidean").fit(X)
    wa = UltrametricClustering(6, loss="closest+size", dissimilarity="ward").fit(X)
    assert _accuracy(y, wa.labels_) > 0.95
    assert _accuracy(y, wa.labels_) > _accuracy(y, eu.labels_) + 0.1
    assert wa.graph_.num_edges > eu.graph_.num_edges  # 15 neighbours, not 5


@pytest.mark.parametrize("data, expected", [("circles", "euclidean"), ("mixture", "ward")])
def test_auto_dissimilarity_is_chosen_on_the_labelled_samples(data, expected):
    from sklearn.datasets import make_circles

    if data == "circles":  # nested rings: Ward cannot separate them
        X, y = make_circles(200, factor=0.5, noise=0.05, random_state=1)
    else:
        X, y = _unequal_mixture(300, 6, 4)
    rng = np.random.default_rng(0)
    partial = np.full(len(y), -1)
    idx = rng.choice(len(y), len(y) // 10, replace=False)
    partial[idx] = y[idx]
    k = len(np.unique(y))
    est = UltrametricClustering(k, loss="closest+triplet", max_iter=60).fit(X, partial)
    assert est.dissimilarity_ == expected
    single = UltrametricClustering(k, loss="closest+triplet", max_iter=60, dissimilarity=expected).fit(X, partial)
    np.testing.assert_array_equal(est.labels_, single.labels_)
    assert _accuracy(y, est.labels_) > 0.95
    # without labels the paper's losses choose by the normalised cut on the 5-NN graph, the
    # same way here: edge lengths for the rings, Ward's heights for the compact classes
    auto = UltrametricClustering(k, loss="closest+size", max_iter=60).fit(X)
    assert auto.dissimilarity_ == expected
    assert [(c["dissimilarity"], c["n_neighbors"]) for c in auto.candidates_] == [
        ("euclidean", 5), ("euclidean", 10), ("ward", 15)]
    assert max(c["score"] for c in auto.candidates_) == next(
        c["score"] for c in auto.candidates_ if (c["dissimilarity"], c["n_neighbors"]) ==
        (auto.dissimilarity_, auto.n_neighbors_))
    ref = UltrametricClustering(k, loss="closest+size", max_iter=60, dissimilarity=expected,
                                n_neighbors=auto.n_neighbors_).fit(X)
    np.testing.assert_array_equal(auto.labels_, ref.labels_)
    assert _accuracy(y, auto.labels_) > 0.95


def test_internal_score_is_the_normalised_cut():
    # against a dense brute force: sum over clusters of cut(C, rest) / vol(C) on the
    # similarity matrix of the 5-NN graph
    from hiseg.core.builders import knn_graph
    from hiseg.core.ultrametric import build_hierarchy

    rng = np.random.default_rng(4)
    X = rng.normal(size=(40, 2))
    labels = rng.integers(0, 3, 40)
    g, d = knn_graph(X, 5)
    sim = np.exp(-(d / d.mean()) ** 2)
    W = np.zeros((40, 40))
    W[g.sources, g.targets] = W[g.targets, g.sources] = sim
    ncut = sum(W[labels == c][:, labels != c].sum() / W[labels == c].sum() for c in range(3))
    import torch

    h = build_hierarchy(g, torch.as_tensor(d))
    from hiseg.clustering.auto import internal_score

    score = internal_score(labels, h, (g, d))
    assert -score[0] == pytest.approx(ncut, abs=1e-9)
    from hiseg.metrics import dasgupta_cost

    assert -score[1] == pytest.approx(dasgupta_cost(h, g, sim, normalize=True))


def test_ward_needs_its_neighbours():
    X, _ = make_blobs(12, centers=2, random_state=0)
    with pytest.raises(ValueError, match=r"n_samples >= n_neighbors \+ 1 = 16, got n_samples = 12"):
        UltrametricClustering(2, loss="closest+size", dissimilarity="ward").fit(X)
    # "auto" with or without labels on so few samples fits the Euclidean distances only
    assert UltrametricClustering(2, loss="closest+size", max_iter=5).fit(X).dissimilarity_ == "euclidean"
    partial = np.full(12, -1)
    partial[:4] = [0, 0, 1, 1]
    est = UltrametricClustering(2, loss="closest+triplet", max_iter=5).fit(X, partial)
    assert est.dissimilarity_ == "euclidean"


def test_missing_labels_nan_none_and_pandas_na_are_unlabelled():
    # issue 19 item 5: string labels with NaN (the pandas way), None or pandas' NA for the
    # missing ones are unlabelled samples, exactly as -1 (NaN used to become a class)
    pd = pytest.importorskip("pandas")
    from sklearn.datasets import make_moons

    X, y = make_moons(90, noise=0.08, random_state=1)
    partial = np.where(np.arange(90) % 6 == 0, y, -1)
    kw = dict(loss="closest+triplet", max_iter=25, dissimilarity="euclidean", init="average", random_state=0)
    ref = UltrametricClustering(2, **kw).fit(X, partial).labels_
    names = np.array(["left", "right"], dtype=object)
    strs = [names[v] if v >= 0 else np.nan for v in partial]
    variants = {
        "list, np.nan": strs,
        "object array, None": np.array([v if isinstance(v, str) else None for v in strs], dtype=object),
        "Series, NaN": pd.Series(strs),
        "string Series, pd.NA": pd.Series(strs, dtype="string"),
        "nullable Int64, pd.NA": pd.Series([v if v >= 0 else None for v in partial], dtype="Int64"),
        "float array, NaN": np.where(partial >= 0, partial, np.nan).astype(float),
        "numpy str array, 'nan'": np.array(strs, dtype=str),
    }
    for name, labels in variants.items():
        est = UltrametricClustering(2, **kw).fit(X, labels)
        np.testing.assert_array_equal(est.labels_, ref, err_msg=name)
    # infinite values are still refused
    with pytest.raises(ValueError, match="infinite"):
        UltrametricClustering(2, **kw).fit(X, np.where(partial >= 0, partial, np.inf).astype(float))


# ----------------------------------------------------------------------------- the default: loss="auto"
@pytest.fixture(scope="module")
def moons():
    from sklearn.datasets import make_moons

    return make_moons(120, noise=0.08, random_state=3)


def _start_hierarchies(est, X):
    """The hierarchies of the default's two starts on its graph, and the graph's similarities."""
    import torch

    from hiseg.clustering import refine
    from hiseg.core.ultrametric import build_hierarchy

    sim = refine.gaussian_similarities(est.edge_weights_)
    return {s: build_hierarchy(est.graph_, torch.as_tensor(refine.start_ultrametric(s, est.graph_, est.edge_weights_,
                                                                                     X)[0]))
            for s in ("ward", "average")}, sim


def test_default_improves_on_its_starts(moons):
    """Both starts are refined; the kept fit has the lowest exact Dasgupta cost, no higher than
    either start's, and here a purity at least its starts' and scipy's Ward and average."""
    from scipy.cluster.hierarchy import linkage

    from hiseg.clustering import refine
    from hiseg.metrics import dasgupta_cost, dendrogram_purity

    X, y = moons
    est = UltrametricClustering(2, random_state=0).fit(X)
    assert [c["init"] for c in est.candidates_] == ["ward", "average"]
    assert est.n_neighbors_ == 10 and est.n_iter_ == len(est.loss_history_) <= 100
    kept = max(est.candidates_, key=lambda c: c["score"])
    assert est.init_ == kept["init"] and est.dissimilarity_ == kept["dissimilarity"]
    starts, sim = _start_hierarchies(est, X)
    cost = dasgupta_cost(est, est.graph_, sim, normalize=True)
    assert cost == pytest.approx(-kept["score"][0], rel=1e-12)  # the exact cost on the graph
    for h in starts.values():
        assert cost <= refine.exact_dasgupta(h, sim) + 1e-12
    purity = dendrogram_purity(est, y)
    assert purity >= max(dendrogram_purity(h.parents, y) for h in starts.values())
    assert purity >= max(dendrogram_purity(linkage(X, m), y) for m in ("ward", "average"))
    # the fitted ultrametric is the altitude of every edge's lca, in the unit of X
    lca = est.tree_.lowest_common_ancestor_preprocess().lca(est.graph_.sources, est.graph_.targets)
    np.testing.assert_allclose(est.altitudes_[lca], est.ultrametric_)


def test_default_reads_no_labels(moons):
    """Labels never choose anything in the default: fitted without y, with y and with y
    shuffled, the hierarchy, the cut and the candidates' scores are the same."""
    X, y = moons
    ref = UltrametricClustering(2, random_state=0).fit(X)
    shuffled = np.random.default_rng(0).permutation(y)
    for labels in (y, shuffled, np.where(np.arange(len(y)) % 3 == 0, y, -1)):
        est = UltrametricClustering(2, random_state=0).fit(X, labels)
        np.testing.assert_array_equal(est.parents_, ref.parents_)
        np.testing.assert_array_equal(est.labels_, ref.labels_)
        assert est.candidates_ == ref.candidates_


def test_default_starts_and_options(blobs):
    X, _ = blobs
    single = {d: UltrametricClustering(3, dissimilarity=d, max_iter=20).fit(X) for d in ("ward", "euclidean")}
    assert [c["init"] for c in single["ward"].candidates_] == ["ward"]
    assert [c["init"] for c in single["euclidean"].candidates_] == ["average"]
    both = UltrametricClustering(3, max_iter=20).fit(X)
    kept = "ward" if single["ward"].candidates_[0]["score"] >= single["euclidean"].candidates_[0]["score"] else "euclidean"
    np.testing.assert_array_equal(both.parents_, single[kept].parents_)
    # an array start on the default's graph, and its errors
    start = single["euclidean"].ultrametric_
    est = UltrametricClustering(3, dissimilarity="euclidean", init=start, max_iter=20).fit(X)
    assert est.init_ is start or np.array_equal(est.init_, start)
    with pytest.raises(ValueError, match="init has 3 values but the graph has"):
        UltrametricClustering(3, dissimilarity="euclidean", init=np.ones(3), max_iter=2).fit(X)
    with pytest.raises(ValueError, match="init contains negative"):
        UltrametricClustering(3, dissimilarity="euclidean", init=-start, max_iter=2).fit(X)
    with pytest.raises(ValueError, match="needs a closest term"):
        UltrametricClustering(3, optimizer="newton").fit(X)
    # few samples: the graph joins every sample to every other, down to 5 neighbours
    assert UltrametricClustering(2, max_iter=3).fit(X[:8]).n_neighbors_ == 7
    with pytest.raises(ValueError, match=r"n_samples >= n_neighbors \+ 1 = 11, got n_samples = 8"):
        UltrametricClustering(2, n_neighbors=10, max_iter=3).fit(X[:8])


def test_default_above_its_size_limit_fits_closest_size(monkeypatch, blobs):
    from hiseg.clustering import auto

    X, _ = blobs
    monkeypatch.setattr(auto, "REFINE_MAX_POINTS", 50)
    est = UltrametricClustering(3, max_iter=20).fit(X)
    ref = UltrametricClustering(3, loss="closest+size", max_iter=20).fit(X)
    np.testing.assert_array_equal(est.parents_, ref.parents_)


@settings(max_examples=12, deadline=None)
@given(seed=st.integers(0, 10 ** 6), n=st.integers(12, 40), d=st.integers(1, 3), k=st.integers(1, 4))
def test_refinement_never_raises_the_exact_cost_of_its_start(seed, n, d, k):
    """On any point set: every start's refined hierarchy has an exact Dasgupta cost no higher
    than the start's, the kept one is the lowest, and the cut has k clusters."""
    import warnings

    from hiseg.clustering import refine

    X = np.random.default_rng(seed).normal(size=(n, d)).round(1)  # rounding makes duplicates and ties
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # duplicated samples: fewer distinct rows than k
        est = UltrametricClustering(k, max_iter=15).fit(X)
    starts, sim = _start_hierarchies(est, X)
    costs = {c["init"]: -c["score"][0] for c in est.candidates_}
    for s, h in starts.items():
        assert costs[s] <= refine.exact_dasgupta(h, sim) + 1e-12
    assert -max(c["score"] for c in est.candidates_)[0] == min(costs.values())
    assert np.unique(est.labels_).size == min(k, np.unique(X, axis=0).shape[0])


@pytest.mark.parametrize("loss", ["auto", "dasgupta", "closest+size"])
@pytest.mark.parametrize("copies", [(30, 30), (5, 40), (20, 20, 20)])
def test_duplicated_points_cluster_correctly(loss, copies):
    """Distinct points each repeated: every copy of a point in its own cluster (issue 52: the
    default's start, divided by its mean, reached 500 times the mean on the one edge between the
    copies, beyond the sigmoid expansion's 4096 terms)."""
    points = np.array([[0.0, 0.0], [1.0, 1.0], [5.0, -3.0]])[:len(copies)]
    X = np.repeat(points, copies, axis=0)
    y = np.repeat(np.arange(len(copies)), copies)
    labels = UltrametricClustering(len(copies), loss=loss).fit_predict(X)
    assert _accuracy(y, labels) == 1.0


def test_a_long_fit_says_what_it_will_take_before_the_work(monkeypatch):
    """A 1e6 x 2 clustering warns with its estimated duration before any graph is built (the
    work is replaced by an error here: the warning comes first); a small fit says nothing."""
    import warnings

    from hiseg.clustering import estimator

    def no_work(*args, **kwargs):
        raise RuntimeError("the work would start here")

    monkeypatch.setattr(estimator, "fit_candidates", no_work)
    monkeypatch.setattr(estimator, "fit_refined", no_work)
    X = np.random.default_rng(0).random((10 ** 6, 2))
    with pytest.warns(estimator.LongFitWarning, match=r"fitting 1,000,000 samples x 2 features will take about"), \
            pytest.raises(RuntimeError, match="the work would start here"):
        UltrametricClustering(5).fit(X)
    with warnings.catch_warnings():
        warnings.simplefilter("error", estimator.LongFitWarning)
        with pytest.raises(RuntimeError, match="the work would start here"):
            UltrametricClustering(3).fit(X[:300])
    monkeypatch.setattr(estimator, "LONG_FIT_SECONDS", 0.0)  # any fit is long: the same line
    with pytest.warns(estimator.LongFitWarning, match="300 samples x 2 features"), pytest.raises(RuntimeError):
        UltrametricClustering(3).fit(X[:300])


def test_selection_by_structural_entropy_keeps_the_lowest(blobs):
    """``selection="entropy"``: every start and its refinement are candidates, and the kept
    hierarchy has the lowest structural entropy among them, measured here by the metric on the
    estimator's graph; ``"dasgupta"`` (the default) is today's choice; a bad value is refused."""
    from hiseg.clustering import refine
    from hiseg.metrics import structural_entropy

    X, _ = blobs
    est = UltrametricClustering(3, max_iter=20, selection="entropy").fit(X)
    sim = refine.gaussian_similarities(est.edge_weights_)
    assert [(c["init"], c["refined"]) for c in est.candidates_] == [
        ("ward", False), ("ward", True), ("average", False), ("average", True)]
    kept = structural_entropy(est, est.graph_, sim)
    assert kept == pytest.approx(min(-c["score"][0] for c in est.candidates_), abs=1e-12)
    starts, _ = _start_hierarchies(est, X)
    assert kept <= min(structural_entropy(h, est.graph_, sim) for h in starts.values()) + 1e-12
    default = UltrametricClustering(3, max_iter=20).fit(X)
    explicit = UltrametricClustering(3, max_iter=20, selection="dasgupta").fit(X)
    np.testing.assert_array_equal(default.parents_, explicit.parents_)
    with pytest.raises(ValueError, match=r"selection must be one of \('dasgupta', 'entropy'\), got 'purity'"):
        UltrametricClustering(3, selection="purity").fit(X)
