"""Shared helpers of the paper's clustering experiments: scores and table formatting."""
import numpy as np
from scipy.optimize import linear_sum_assignment
from sklearn.metrics import adjusted_rand_score, normalized_mutual_info_score


def accuracy(y_true, y_pred, mask=None):
    """Accuracy under the best one-to-one matching of predicted clusters to classes (Hungarian).

    ``mask``: evaluate on those samples only (the matching is computed on them too).
    """
    y_true = np.asarray(y_true)
    y_pred = np.asarray(y_pred)
    if mask is not None:
        y_true, y_pred = y_true[mask], y_pred[mask]
    _, t = np.unique(y_true, return_inverse=True)
    _, p = np.unique(y_pred, return_inverse=True)
    k = max(t.max(), p.max()) + 1
    C = np.zeros((k, k), dtype=np.int64)
    np.add.at(C, (p, t), 1)
    r, c = linear_sum_assignment(-C)
    return C[r, c].sum() / t.size


def scores(y_true, y_pred, mask=None):
    """(accuracy, ARI, NMI)."""
    yt = np.asarray(y_true) if mask is None else np.asarray(y_true)[mask]
    yp = np.asarray(y_pred) if mask is None else np.asarray(y_pred)[mask]
    return (accuracy(yt, yp), adjusted_rand_score(yt, yp), normalized_mutual_info_score(yt, yp))


def fmt(values, digits=3):
    """'mean ± std' of a list of numbers."""
    v = np.asarray(values, dtype=float)
    if v.size == 1:
        return f"{v[0]:.{digits}f}"
    return f"{v.mean():.{digits}f} ± {v.std():.{digits}f}"
