"""The parameter checks of :class:`~hiseg.clustering.UltrametricClustering`, apart from it: the
estimator's class reads as what it does (graph, fit, cut), this module as what it accepts.
scikit-learn checks parameters at ``fit``, not in ``__init__``; these functions are what
``fit`` calls first (one TypeError / ValueError naming the parameter)."""
from __future__ import annotations

import numbers

import numpy as np

from ..core import losses
from ..core.cuts import check_count
from ..core.fitting import INITS, LOSSES, OPTIMIZERS, POSITIVITY
from . import auto
from .labels import label_array, partial_labels
from .refine import SELECTIONS

__all__ = ["check_params", "check_partial_labels", "validate_data"]

_LOSS_CHOICES = (auto.AUTO_LOSS,) + LOSSES


def validate_data(est, X, reset: bool = True):
    """``sklearn.utils.validation.validate_data`` (>= 1.6) or the estimator method before."""
    kw = dict(accept_sparse=False, dtype=np.float64, ensure_min_samples=1, ensure_min_features=1)
    try:
        from sklearn.utils.validation import validate_data
    except ImportError:  # scikit-learn < 1.6
        return est._validate_data(X, reset=reset, **kw)
    return validate_data(est, X, reset=reset, **kw)


def check_params(est) -> None:
    """Every parameter of ``est`` (an :class:`~hiseg.clustering.UltrametricClustering`) checked at
    ``fit``, as scikit-learn asks: TypeError / ValueError naming the parameter."""
    def integer(name, low, allow_none=False):
        v = getattr(est, name)
        if v is None and allow_none:
            return
        if isinstance(v, bool) or not isinstance(v, numbers.Integral):
            raise TypeError(f"{name} must be an integer, got {v!r} ({type(v).__name__})")
        if v < low:
            raise ValueError(f"{name} must be >= {low}, got {v}")

    def real(name, positive=False):
        v = getattr(est, name)
        if isinstance(v, bool) or not isinstance(v, numbers.Real) or not np.isfinite(v):
            raise TypeError(f"{name} must be a finite real number, got {v!r}")
        if positive and not v > 0:
            raise ValueError(f"{name} must be > 0, got {v}")
        if not positive and v < 0:
            raise ValueError(f"{name} must be >= 0, got {v}")

    if not isinstance(est.loss, str):
        raise ValueError(f"loss must be one of {_LOSS_CHOICES} (or a '+' combination of registered "
                         f"terms), got {est.loss!r}")
    if est.loss != auto.AUTO_LOSS:
        try:
            losses.parse_loss(est.loss)
        except ValueError as e:
            raise ValueError(f"loss must be one of {_LOSS_CHOICES} (or a '+' combination of registered "
                             f"terms), got {est.loss!r}: {e}") from None
    check_count(est.n_clusters)
    integer("n_neighbors", 1, allow_none=True)
    if est.dissimilarity not in auto.DISSIMILARITIES:
        raise ValueError(f"dissimilarity must be one of {auto.DISSIMILARITIES}, got {est.dissimilarity!r}")
    integer("top_nodes", 0)
    integer("max_iter", 1, allow_none=True)
    integer("patience", 1, allow_none=True)
    integer("max_triplets", 1, allow_none=True)
    if est.lr is not None:
        real("lr", positive=True)
    real("sigmoid_slope", positive=True)
    for name in ("size_weight", "triplet_weight", "margin"):
        real(name)
    if est.knn not in ("auto", "exact", "approximate"):
        raise ValueError(f"knn must be 'auto', 'exact' or 'approximate', got {est.knn!r}")
    if est.connect not in ("auto", "mst", "components", True):
        raise ValueError(f"connect must be 'auto', 'mst' or 'components', got {est.connect!r}")
    if isinstance(est.init, str) and est.init not in INITS + ("auto",):
        raise ValueError(f"init must be 'auto', 'input' or 'average', got {est.init!r}")
    m = est.min_size
    if not (m == "auto" if isinstance(m, str) else isinstance(m, numbers.Real) and not isinstance(m, bool)
            and np.isfinite(m) and m >= 0):
        raise ValueError(f"min_size must be 'auto', a number of samples >= 1, a fraction of "
                         f"the samples in [0, 1) or 0, got {m!r}")
    if est.positivity not in POSITIVITY:
        raise ValueError(f"positivity must be 'softplus', 'relu', 'exp' or None, got {est.positivity!r}")
    if est.optimizer not in OPTIMIZERS:
        raise ValueError(f"optimizer must be 'amsgrad', 'adam', 'sgd' or 'newton', got {est.optimizer!r}")
    if not isinstance(est.selection, str) or est.selection not in SELECTIONS:
        raise ValueError(f"selection must be one of {SELECTIONS}, got {est.selection!r}")
    closest = est.loss != auto.AUTO_LOSS and "closest" in losses.parse_loss(est.loss)
    if est.optimizer == "newton" and not closest:
        raise ValueError("optimizer='newton' needs a closest term; use it with the closest losses")


def check_partial_labels(est, y, n_samples):
    """Partial labels for the triplet term: (n_samples,) ints (or any labels); unlabelled:
    -1, NaN, None or pandas' NA (see :func:`hiseg.clustering.labels.partial_labels`)."""
    uses_y = est.loss != auto.AUTO_LOSS and bool({"labels", "triplets"} & losses.Objective(est.loss).needs)
    if y is None:
        if uses_y:
            raise ValueError(f"loss {est.loss!r} needs partial labels: call fit(X, y) with y of "
                             "length n_samples and -1 (or NaN / None) for the unlabelled samples")
        return None
    y = label_array(y)
    if y.shape[0] != n_samples:
        raise ValueError(f"y has {y.shape[0]} labels but X has {n_samples} samples "
                         "(give -1 for the unlabelled samples)")
    if not uses_y:
        return None  # accepted for API compatibility (pipelines, cross-validation), unused
    y = partial_labels(y)
    lab = y[y >= 0]
    classes, counts = np.unique(lab, return_counts=True)
    if classes.size < 2:
        raise ValueError(f"loss {est.loss!r} needs labelled samples of at least two classes; the "
                         f"labelled part of y has {classes.size} class"
                         + ("" if classes.size == 1 else "es"))
    if counts.max() < 2:
        raise ValueError(f"loss {est.loss!r} needs a class with at least two labelled samples")
    return y
