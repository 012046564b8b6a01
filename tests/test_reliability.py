"""Issue 32's fault probe, one test per row: concurrent predicts, file names that are not
valid UTF-8, an interrupted predict resumed, training data checked at start-up, checkpoints
written atomically, degenerate clustering inputs, HISEG_WEIGHTS_DIR, unreadable images, a
very large photograph's memory. Each test failed on the code before the fix."""
import warnings

import numpy as np
import pytest
from sklearn.exceptions import ConvergenceWarning

from hiseg.clustering import UltrametricClustering


# ----------------------------------------------------------------------------- 10: duplicates
def test_fewer_distinct_points_than_clusters_warns_and_keeps_identical_points_together():
    with pytest.warns(ConvergenceWarning, match=r"distinct samples \(1\) is smaller than n_clusters \(3\)"):
        labels = UltrametricClustering(n_clusters=3).fit(np.ones((50, 3))).labels_
    np.testing.assert_array_equal(labels, np.zeros(50))
    # two distinct points, each repeated, asked for 3 clusters: one cluster per distinct point
    X = np.repeat(np.array([[0.0, 1.0], [4.0, 2.0]]), [7, 5], axis=0)[np.r_[0:3, 7:12, 3:7]]
    with pytest.warns(ConvergenceWarning):
        labels = UltrametricClustering(n_clusters=3).fit(X).labels_
    truth = (X[:, 0] > 2).astype(int)  # numbered by smallest sample index: sample 0 is cluster 0
    np.testing.assert_array_equal(labels, truth)
    # enough distinct points: no warning
    with warnings.catch_warnings():
        warnings.simplefilter("error", ConvergenceWarning)
        X = np.repeat(np.random.default_rng(0).normal(size=(6, 2)), 3, axis=0)
        labels = UltrametricClustering(n_clusters=3).fit(X).labels_
    assert (labels.reshape(6, 3) == labels.reshape(6, 3)[:, :1]).all()


# ----------------------------------------------------------------------------- 11: "NaN" / "" labels
@pytest.mark.parametrize("marker", ["NaN", "", " ", "None", "NA", "n/a", "NULL", "nan", "-1"])
def test_string_markers_of_a_missing_label_are_unlabelled_like_minus_one(marker):
    from sklearn.datasets import make_moons

    X, y = make_moons(60, noise=0.08, random_state=1)
    partial = np.where(np.arange(60) % 5 == 0, y, -1)
    kw = dict(loss="closest+triplet", max_iter=15, dissimilarity="euclidean", init="average", random_state=0)
    ref = UltrametricClustering(2, **kw).fit(X, partial).labels_
    names = ["left", "right"]
    strs = [names[v] if v >= 0 else marker for v in partial]
    np.testing.assert_array_equal(UltrametricClustering(2, **kw).fit(X, strs).labels_, ref)
    np.testing.assert_array_equal(UltrametricClustering(2, **kw).fit(X, np.array(strs)).labels_, ref)
    # the marker is no class: labelled samples of one class plus markers are refused as one class
    one = ["left" if v >= 0 else marker for v in partial]
    with pytest.raises(ValueError, match="labelled part of y has 1 class"):
        UltrametricClustering(2, **kw).fit(X, one)
