r"""Hierarchical clustering by ultrametric fitting: a scikit-learn style estimator.

:class:`UltrametricClustering` builds the paper's graph on the samples (k nearest
neighbours made connected by spanning edges, :func:`hiseg.graph.knn_graph`, without n^2
memory), fits an ultrametric on its edges with :func:`hiseg.fitting.fit_ultrametric`
(closest, cluster size, triplet or Dasgupta losses), and cuts the resulting hierarchy
into ``n_clusters`` flat clusters with a size-aware cut (:mod:`hiseg.cuts`).

Partial labels ``y`` (``-1`` = unlabelled) feed the triplet term of the semi-supervised
losses ``"closest+triplet"`` and ``"closest+size+triplet"`` and set the cut's minimum
cluster size; the other losses ignore them. There is no ``predict``: the hierarchy is
defined on the fitted samples only.

The measures of a whole hierarchy, :func:`dendrogram_purity` and :func:`dasgupta_cost`
(for any hiseg hierarchy, fitted estimator, scipy linkage matrix or higra tree), live here,
below :mod:`hiseg.metrics` in the package's layers, and are public there
(:mod:`hiseg.metrics.hierarchy`).
"""
from __future__ import annotations

import numbers
import time

import numpy as np
from sklearn.base import BaseEstimator, ClusterMixin
from sklearn.utils import check_random_state
from sklearn.utils.validation import check_is_fitted, column_or_1d

from . import losses
from .cuts import AUTO_MIN_CLUSTER_FRACTION, check_count, cut_hierarchy, resolve_min_size
from .fitting import INITS, LOSSES, OPTIMIZERS, POSITIVITY, fit_ultrametric

__all__ = ["UltrametricClustering", "cut_hierarchy", "as_tree", "dendrogram_purity", "dasgupta_cost"]


#: ``init="auto"`` starts from the average-linkage ultrametric up to this many samples and
#: from the input distances above (higra's graph average linkage is quadratic at worst:
#: 277 s for 1e5 points on a 5-NN graph of blobs, against 3 s for 1e4)
AUTO_AVERAGE_START_MAX_POINTS = 20000

#: input dissimilarities of the fit (``dissimilarity``) and the graph's default neighbour count for
#: each (``n_neighbors=None``): Ward's heights need a denser graph to follow the unconstrained
#: Ward hierarchy (64-d mixtures, pilot draws: 5-NN 0.965, 10-NN 0.980, 15-NN 0.988 accuracy,
#: against 0.996 for scikit-learn's Ward on all pairs)
DISSIMILARITIES = ("auto", "euclidean", "ward")
DEFAULT_NEIGHBORS = {"euclidean": 5, "ward": 15}

#: ``dissimilarity="auto"`` without labels, up to this many samples: the candidate fits
#: (dissimilarity, neighbour count), the one whose cut has the lowest normalised cut on the
#: 5-NN graph kept (:meth:`UltrametricClustering._internal_score`); chosen on pilot draws
#: (toy seeds 100-104, mixture seeds 11-13; ``experiments/hierarchies.py --pilot``)
AUTO_UNSUPERVISED = (("euclidean", 5), ("euclidean", 10), ("ward", 15))
AUTO_SELECT_MAX_POINTS = 20000

# ``min_size="auto"`` without labels: AUTO_MIN_CLUSTER_FRACTION of an even share (hiseg.cuts)


def _labelled_accuracy(labels, y) -> float:
    """Accuracy of the clusters on the labelled samples (``y >= 0``) under the best
    one-to-one matching of clusters to classes."""
    from scipy.optimize import linear_sum_assignment

    m = y >= 0
    _, c = np.unique(labels[m], return_inverse=True)
    _, t = np.unique(y[m], return_inverse=True)
    C = np.zeros((c.max() + 1, t.max() + 1), dtype=np.int64)
    np.add.at(C, (c, t), 1)
    r, col = linear_sum_assignment(-C)
    return C[r, col].sum() / m.sum()


#: string labels that mark an unlabelled sample, compared after stripping blanks and in lower
#: case: the empty string, "-1", and the missing-value spellings that pandas' ``read_csv``
#: reads as NaN ("nan" is also what numpy makes of np.nan in an array of strings)
_UNLABELLED_STRINGS = ("", "-1", "-1.0", "nan", "-nan", "none", "null", "na", "n/a", "<na>", "#n/a")


def _is_missing(v) -> bool:
    """None, a float NaN, pandas' NA or NaT."""
    if v is None or type(v).__name__ in ("NAType", "NaTType"):
        return True
    return isinstance(v, (float, np.floating)) and v != v


def _label_array(y) -> np.ndarray:
    """Labels as a 1-D numpy array; lists, tuples and pandas objects become object arrays so
    that NaN / None / pandas' NA among strings survive as such (numpy would turn NaN into
    the string "nan")."""
    if hasattr(y, "to_numpy") and not isinstance(y, np.ndarray):  # pandas Series / one-column frame
        y = y.to_numpy(dtype=object)
    elif not isinstance(y, np.ndarray):
        y = np.asarray(y, dtype=object)
    return column_or_1d(y, warn=True)


def _partial_labels(y: np.ndarray) -> np.ndarray:
    """Partial labels -> int64 codes, ``-1`` for the unlabelled samples.

    Unlabelled: ``-1`` (scikit-learn's semi-supervised convention), NaN, None, pandas' NA
    or NaT, and among strings (compared blank-stripped, in any case) the empty string, ``"-1"``
    and the missing-value spellings ``"NaN"``, ``"None"``, ``"NULL"``, ``"NA"``, ``"N/A"``,
    ``"<NA>"``, ``"#N/A"`` (those pandas' ``read_csv`` reads as NaN). Other labels: integers
    (>= 0, kept as they are) or any values (strings, ...: numbered in sorted order of their
    text).
    """
    if y.dtype.kind in "OUS":
        missing = np.fromiter((_is_missing(v) for v in y), dtype=bool, count=y.shape[0])
        values = y[~missing]
        if all(isinstance(v, numbers.Real) and not isinstance(v, (bool, np.bool_)) for v in values):
            num = np.full(y.shape[0], -1.0)  # numbers in an object array: the numeric path below
            num[~missing] = values.astype(np.float64)
            y = num
        else:
            text = y.astype(str)
            unl = missing | np.isin(np.char.lower(np.char.strip(text)), _UNLABELLED_STRINGS)
            codes = np.full(y.shape[0], -1, dtype=np.int64)
            if (~unl).any():
                _, codes[~unl] = np.unique(text[~unl], return_inverse=True)
            return codes
    if y.dtype.kind == "f":
        if np.any(np.isinf(y)):
            raise ValueError("y contains infinite values; mark unlabelled samples with -1 or NaN")
        y = np.where(np.isnan(y), -1.0, y)
        if np.any(y != np.round(y)):
            raise ValueError("y must hold class labels (integers, -1 or NaN = unlabelled), "
                             "got non-integer values")
    y = y.astype(np.int64)
    if np.any(y < -1):
        raise ValueError("y holds negative labels other than -1 (the unlabelled marker)")
    return y


def _keep_duplicates_together(X, labels, n_clusters) -> np.ndarray:
    """``labels``, or with fewer distinct rows of ``X`` than ``n_clusters`` one cluster per
    distinct row (numbered by smallest sample index) and a ``ConvergenceWarning``, as
    scikit-learn's ``KMeans`` does; O(n d log n)."""
    if n_clusters <= 1:
        return labels
    _, first, inverse = np.unique(X, axis=0, return_index=True, return_inverse=True)
    if first.shape[0] >= n_clusters:
        return labels
    import warnings

    from sklearn.exceptions import ConvergenceWarning

    warnings.warn(f"Number of distinct samples ({first.shape[0]}) is smaller than n_clusters "
                  f"({n_clusters}): the samples are duplicated; labels_ has {first.shape[0]} "
                  f"cluster(s), identical samples together", ConvergenceWarning, stacklevel=3)
    rank = np.empty(first.shape[0], dtype=np.int64)  # number clusters by smallest sample index
    rank[np.argsort(first, kind="stable")] = np.arange(first.shape[0])
    return rank[inverse.reshape(-1)]


def _digest(X) -> str:
    """A fingerprint of the fitted samples (O(n d)), so that ``score_hierarchy`` refuses others."""
    import hashlib

    X = np.ascontiguousarray(X, dtype=np.float64)
    return hashlib.blake2b(X.tobytes(), digest_size=16).hexdigest() + str(X.shape)


def _validate_data(est, X, reset: bool = True):
    """``sklearn.utils.validation.validate_data`` (>= 1.6) or the estimator method before."""
    kw = dict(accept_sparse=False, dtype=np.float64, ensure_min_samples=1, ensure_min_features=1)
    try:
        from sklearn.utils.validation import validate_data
    except ImportError:  # scikit-learn < 1.6
        return est._validate_data(X, reset=reset, **kw)
    return validate_data(est, X, reset=reset, **kw)


class UltrametricClustering(ClusterMixin, BaseEstimator):
    r"""Hierarchical clustering by ultrametric fitting (Chierchia & Perret, NeurIPS 2019).

    The samples are the vertices of a graph: every sample is joined to its
    ``n_neighbors`` nearest neighbours and spanning edges are added so that the graph is
    connected (:func:`hiseg.graph.knn_graph`: the exact Euclidean MST up to 2e4 samples,
    the paper's construction; edges joining the kNN graph's components above); edge
    weights are the input dissimilarity (``dissimilarity``: Euclidean distances, the
    paper's choice, or Ward's heights on the graph), divided by their mean for the fit
    (the losses and their settings are then unit-free: ``X * 1e300`` and ``X * 1e-300``
    give the same clustering). An ultrametric on that graph is fitted by gradient descent
    (:func:`hiseg.fitting.fit_ultrametric`, AMSGrad on :math:`J(\Phi(\tilde w))`); its
    single-linkage tree is the hierarchy, cut into ``n_clusters`` clusters by a
    size-aware cut (:func:`hiseg.cuts.cut_hierarchy`): groups smaller than
    ``min_size`` merged last (outliers) are not split off as clusters of their
    own but stay with the cluster they merged into.

    Parameters
    ----------
    n_clusters : int, default=2
        Number of flat clusters of ``labels_``.
    loss : {"closest+size", "closest", "closest+triplet", "closest+size+triplet", "dasgupta", \
            "dasgupta+size"}, default="closest+size"
        The cost function: closest ultrametric (mean squared error to the input
        distances), plus the cluster-size regularisation (``size``), plus the triplet
        term built from the partial labels ``y`` (``triplet``), or the relaxed Dasgupta
        cost (with the edge weights as dissimilarities).
    size_weight : float, default=10.0
        Weight of the cluster-size term (distances in units of their mean).
    top_nodes : int, default=10
        Only the edges whose lca is one of the ``top_nodes`` highest nodes enter the
        cluster-size term (0: all of them).
    triplet_weight : float, default=1.0
        Weight of the triplet term.
    margin : float, default=1.0
        Margin :math:`\alpha` of the triplet term, in units of the mean edge length.
    max_triplets : int or None, default=100000
        At most that many triplets, drawn at random (``random_state``) when the labelled
        samples make more (None: all of them, O(L^3) for L labelled samples).
    sigmoid_slope : float, default=5.0
        Slope :math:`\lambda` of the soft cardinal of the Dasgupta losses.
    dissimilarity : {"auto", "euclidean", "ward"}, default="auto"
        What the fit sees on each edge of the graph. ``"euclidean"``: the distance of its
        two samples (the paper). ``"ward"``: the height at which Ward's hierarchy,
        constrained to the graph, first joins them
        (:func:`hiseg.ultrametric.ward_linkage_ultrametric`, O(E log E)); an ultrametric
        already, so the closest term alone returns Ward's hierarchy and the size,
        triplet or Dasgupta terms reshape it from there (``init="auto"`` starts at it).
        Choose ``"ward"`` for compact classes in many dimensions: on 64-d Gaussian
        mixtures of unequal spreads, 15% of the 5 nearest neighbours of a sample belong
        to another class, and no ultrametric fitted to the distances of such a graph
        comes near Ward (``experiments/results/real.md``); choose ``"euclidean"`` for
        elongated or nested classes (circles, moons), which Ward cannot separate.
        ``"auto"``: with partial labels (triplet losses) both are fitted, each on its own
        graph, and the one whose cut agrees best with the labelled samples is kept
        (``dissimilarity_``; ties: Euclidean), a choice made on the labelled samples only.
        Without labels, up to 2e4 samples (``AUTO_SELECT_MAX_POINTS``), three fits: edge
        lengths on the 5-NN and the 10-NN graphs and Ward's heights on the 15-NN graph
        (with ``n_neighbors`` given: edge lengths and Ward's heights on that graph); the
        one whose ``n_clusters`` cut has the lowest normalised cut on the 5-NN graph
        (similarities ``exp(-(d / mean d)^2)``; ties: the lower Dasgupta cost of the
        hierarchy there) is kept (``dissimilarity_``, ``n_neighbors_``, ``candidates_``).
        That label-free rule was chosen on pilot draws of the toy sets and 64-d mixtures
        (``experiments/hierarchies.py --pilot``): it keeps edge lengths where Ward fails
        (circles, moons) and Ward's heights on compact classes
        (``experiments/results/hierarchies.md``). Above 2e4 samples: edge lengths. An
        array ``init`` is for the Euclidean graph (and disables the choice).
    n_neighbors : int or None, default=None
        Number of nearest neighbours of the graph; None: 5 for ``"euclidean"`` (the
        paper), 15 for ``"ward"`` (on a sparser graph Ward's constrained hierarchy drifts
        from the unconstrained one).
    knn : {"auto", "exact", "approximate"}, default="auto"
        Neighbour search (``method`` of :func:`hiseg.graph.knn_graph`): exact up to 2e4
        samples (or in at most 3 dimensions), a random-projection forest with NN-descent
        above.
    connect : {"auto", "mst", "components"}, default="auto"
        Spanning edges of the graph (:func:`hiseg.graph.knn_graph`): the exact Euclidean
        MST (``"mst"``, O(n^2) time, O(n) memory) up to 2e4 samples, edges joining the
        kNN graph's components above.
    init : {"auto", "input", "average"} or array, default="auto"
        Start of the descent: the input distances, the average-linkage ultrametric of
        the graph (``"average"``), or an (E,) array in units of the mean distance;
        ``"auto"``: ``"input"`` for ``dissimilarity="ward"``; otherwise ``"average"`` up to
        2e4 samples, ``"input"`` above (higra's graph average linkage is quadratic at
        worst), chosen on the toy sets' pilot draws
        (``experiments/toy.py``); with partial labels (triplet losses, up to 2e4
        samples) both starts are fitted and the one whose cut agrees best with the
        labelled samples is kept (``init_``; ties: average linkage), a choice made on the
        labelled samples only (wine, 10% labelled: 0.90 from average linkage, 0.93 from
        the input, 0.94 chosen; ``experiments/real.py``).
    min_size : "auto", float or 0, default="auto"
        Smallest cluster the cut splits off (:func:`hiseg.cuts.cut_hierarchy`): a number
        of samples (>= 1), a fraction of the samples (in (0, 1)) or 0 (plain cut: the
        ``n_clusters - 1`` highest merges undone, ties broken by the merge order).
        ``"auto"``: with partial labels, half the smallest labelled class share of the
        samples; without, :data:`hiseg.cuts.AUTO_MIN_CLUSTER_FRACTION` (10%) of an even
        share (``0.1 n / n_clusters``). When the hierarchy has fewer than
        ``n_clusters`` clusters of that size, the size is halved until it has them:
        ``labels_`` always has ``n_clusters`` clusters. Without a minimum size, outliers
        merged last become clusters of their own (closest+triplet stayed at .63 on
        breast cancer, ``experiments/real.py``).
    lr : float or None, default=None
        Step size; None: 0.1 for AMSGrad/Adam/SGD (the paper's value), 1.0 for
        ``optimizer="newton"``.
    max_iter : int, default=200
        Maximum number of gradient iterations.
    positivity : {"softplus", "relu", "exp"} or None, default="softplus"
        Reparametrisation keeping the fitted weights nonnegative (``"exp"``: steps in
        log space).
    patience : int or None, default=50
        Stop after that many iterations without improvement of the loss.
    optimizer : {"amsgrad", "adam", "sgd", "newton"}, default="amsgrad"
        ``"newton"``: gradient steps preconditioned by the closest term's curvature (see
        :func:`hiseg.fitting.fit_ultrametric`); closest losses only.
    random_state : int, RandomState instance or None, default=None
        Seeds the approximate neighbour search (seed 0 when None) and the triplet
        sampling.

    Attributes
    ----------
    labels_ : int64 ndarray (n_samples,)
        Cluster of every sample, ``0..n_clusters-1``, numbered by smallest sample index
        (fewer clusters, identical samples together, when ``X`` has fewer distinct rows
        than ``n_clusters``: a ``ConvergenceWarning`` says so).
    graph_ : :class:`hiseg.graph.EdgeList`
        The kNN graph with its spanning edges (``num_vertices = n_samples``).
    edge_weights_ : float64 ndarray (n_edges,)
        The input dissimilarity on each edge of ``graph_``: its Euclidean length, or
        Ward's height (``dissimilarity="ward"``).
    weight_scale_ : float
        Their mean: the fit sees ``edge_weights_ / weight_scale_``.
    ultrametric_ : float64 ndarray (n_edges,)
        The fitted ultrametric on the edges of ``graph_`` (in the unit of ``X``).
    parents_ : int64 ndarray (2 n_samples - 1,)
        Parent array of the fitted binary hierarchy (leaves are the samples).
    tree_ : higra ``Tree``
        The same hierarchy as a higra tree (built from ``parents_``).
    altitudes_ : float64 ndarray (2 n_samples - 1,)
        Altitude of every node of ``tree_`` (0 for the leaves, unit of ``X``); the
        ultrametric distance of two samples is the altitude of their lowest common
        ancestor.
    dissimilarity_ : str
        The input dissimilarity of the kept fit (``"euclidean"`` or ``"ward"``).
    n_neighbors_ : int
        The neighbour count of its graph.
    candidates_ : list of dict
        The fits tried (``dissimilarity``, ``n_neighbors``, ``init``) and the score that chose
        between them (labelled accuracy; without labels minus the normalised cut and minus
        the Dasgupta cost; empty when there was no choice).
    init_ : str or array
        The start of the kept fit.
    min_size_ : float
        The minimum cluster size asked of the cut (samples), before any halving.
    loss_history_ : list of float
        Loss value at every iteration.
    n_iter_ : int
        Number of iterations run.
    timings_ : dict
        Seconds spent building the graph, fitting, and cutting (summed over the starts).
    n_features_in_ : int
    feature_names_in_ : ndarray of str (only when ``X`` has string column names)

    Notes
    -----
    Cost of ``fit``, n samples in d dimensions, E ~ 4 n edges: the graph in O(n^2 d) time
    up to 2e4 samples and about O(n (T L + R k^2) d) above (approximate search, see
    :func:`hiseg._neighbors.approximate_knn`), O(n (k + d)) memory in both cases; then at
    most ``max_iter`` iterations of O(E log E) (one canonical BPT, its lcas, the loss,
    one AMSGrad step), plus O(|T|) for the triplet term or O(n K) for Dasgupta; the cut
    O(n log n). Measured (``benchmarks/results/clustering_scale.md``): 1e5 points in
    about 15 s and 1.1 GB, 1e6 points in 16-d in minutes and under 3 GB; with
    ``dissimilarity="ward"`` (15 neighbours, then higra's graph Ward linkage, O(E log E))
    1e5 points in about 64 s and 2.1 GB (``clustering_scale_ward.md``).

    There is no ``predict``: a hierarchy is fitted on the given samples only.

    Examples
    --------
    >>> from sklearn.datasets import make_blobs
    >>> from hiseg import UltrametricClustering
    >>> X, _ = make_blobs(60, centers=3, random_state=0)
    >>> UltrametricClustering(n_clusters=3).fit(X).labels_.shape
    (60,)
    """

    def __init__(self, n_clusters=2, loss="closest+size", *, size_weight=10.0, top_nodes=10,
                 triplet_weight=1.0, margin=1.0, max_triplets=100000, sigmoid_slope=5.0,
                 dissimilarity="auto", n_neighbors=None, knn="auto", connect="auto", init="auto",
                 min_size="auto",
                 lr=None, max_iter=200, positivity="softplus", patience=50,
                 optimizer="amsgrad", random_state=None):
        self.n_clusters = n_clusters
        self.loss = loss
        self.size_weight = size_weight
        self.top_nodes = top_nodes
        self.triplet_weight = triplet_weight
        self.margin = margin
        self.max_triplets = max_triplets
        self.sigmoid_slope = sigmoid_slope
        self.dissimilarity = dissimilarity
        self.n_neighbors = n_neighbors
        self.knn = knn
        self.connect = connect
        self.init = init
        self.min_size = min_size
        self.lr = lr
        self.max_iter = max_iter
        self.positivity = positivity
        self.patience = patience
        self.optimizer = optimizer
        self.random_state = random_state

    # ------------------------------------------------------------------ validation
    def _check_params(self):
        def integer(name, low, allow_none=False):
            v = getattr(self, name)
            if v is None and allow_none:
                return
            if isinstance(v, bool) or not isinstance(v, numbers.Integral):
                raise TypeError(f"{name} must be an integer, got {v!r} ({type(v).__name__})")
            if v < low:
                raise ValueError(f"{name} must be >= {low}, got {v}")

        def real(name, positive=False):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, numbers.Real) or not np.isfinite(v):
                raise TypeError(f"{name} must be a finite real number, got {v!r}")
            if positive and not v > 0:
                raise ValueError(f"{name} must be > 0, got {v}")
            if not positive and v < 0:
                raise ValueError(f"{name} must be >= 0, got {v}")

        if not isinstance(self.loss, str):
            raise ValueError(f"loss must be one of {LOSSES} (or a '+' combination of registered terms), "
                             f"got {self.loss!r}")
        try:
            losses.parse_loss(self.loss)
        except ValueError as e:
            raise ValueError(f"loss must be one of {LOSSES} (or a '+' combination of registered terms), "
                             f"got {self.loss!r}: {e}") from None
        check_count(self.n_clusters)
        integer("n_neighbors", 1, allow_none=True)
        if self.dissimilarity not in DISSIMILARITIES:
            raise ValueError(f"dissimilarity must be one of {DISSIMILARITIES}, got {self.dissimilarity!r}")
        integer("top_nodes", 0)
        integer("max_iter", 1)
        integer("patience", 1, allow_none=True)
        integer("max_triplets", 1, allow_none=True)
        if self.lr is not None:
            real("lr", positive=True)
        real("sigmoid_slope", positive=True)
        for name in ("size_weight", "triplet_weight", "margin"):
            real(name)
        if self.knn not in ("auto", "exact", "approximate"):
            raise ValueError(f"knn must be 'auto', 'exact' or 'approximate', got {self.knn!r}")
        if self.connect not in ("auto", "mst", "components", True):
            raise ValueError(f"connect must be 'auto', 'mst' or 'components', got {self.connect!r}")
        if isinstance(self.init, str) and self.init not in INITS + ("auto",):
            raise ValueError(f"init must be 'auto', 'input' or 'average', got {self.init!r}")
        m = self.min_size
        if not (m == "auto" if isinstance(m, str) else isinstance(m, numbers.Real) and not isinstance(m, bool)
                and np.isfinite(m) and m >= 0):
            raise ValueError(f"min_size must be 'auto', a number of samples >= 1, a fraction of "
                             f"the samples in [0, 1) or 0, got {m!r}")
        if self.positivity not in POSITIVITY:
            raise ValueError(f"positivity must be 'softplus', 'relu', 'exp' or None, got {self.positivity!r}")
        if self.optimizer not in OPTIMIZERS:
            raise ValueError(f"optimizer must be 'amsgrad', 'adam', 'sgd' or 'newton', got {self.optimizer!r}")
        if self.optimizer == "newton" and "closest" not in losses.parse_loss(self.loss):
            raise ValueError("optimizer='newton' needs a closest term; use it with the closest losses")

    def _check_y(self, y, n_samples):
        """Partial labels for the triplet term: (n_samples,) ints (or any labels); unlabelled:
        -1, NaN, None or pandas' NA (see :func:`_partial_labels`)."""
        uses_y = bool({"labels", "triplets"} & losses.Objective(self.loss).needs)
        if y is None:
            if uses_y:
                raise ValueError(f"loss {self.loss!r} needs partial labels: call fit(X, y) with y of "
                                 "length n_samples and -1 (or NaN / None) for the unlabelled samples")
            return None
        y = _label_array(y)
        if y.shape[0] != n_samples:
            raise ValueError(f"y has {y.shape[0]} labels but X has {n_samples} samples "
                             "(give -1 for the unlabelled samples)")
        if not uses_y:
            return None  # accepted for API compatibility (pipelines, cross-validation), unused
        y = _partial_labels(y)
        lab = y[y >= 0]
        classes, counts = np.unique(lab, return_counts=True)
        if classes.size < 2:
            raise ValueError(f"loss {self.loss!r} needs labelled samples of at least two classes; the "
                             f"labelled part of y has {classes.size} class"
                             + ("" if classes.size == 1 else "es"))
        if counts.max() < 2:
            raise ValueError(f"loss {self.loss!r} needs a class with at least two labelled samples")
        return y

    # ------------------------------------------------------------------ fit
    def fit(self, X, y=None):
        """Fit the hierarchy and its ``n_clusters`` cut on the samples ``X``.

        Parameters
        ----------
        X : array-like or pandas DataFrame (n_samples, n_features), finite values.
        y : array-like or pandas Series (n_samples,) or None
            Partial labels (integers, strings or any values); unlabelled samples are ``-1``
            (scikit-learn's semi-supervised convention), NaN, None or pandas' NA (and the
            strings ``""``, ``"-1"``, ``"NaN"``, ``"None"``, ``"NULL"``, ``"NA"``, ``"N/A"``,
            in any case). Used by the triplet term of the triplet losses (required then),
            ignored by the other losses.

        Returns
        -------
        self

        Raises
        ------
        ValueError
            NaN or infinite values in ``X``, sparse or complex input, fewer than
            ``n_neighbors + 1`` samples, ``n_clusters`` > n_samples, ``y`` of the wrong
            length, labelled samples of a single class (triplet loss), bad parameters.
        TypeError
            Parameters of the wrong type.

        Warns
        -----
        sklearn.exceptions.ConvergenceWarning
            Fewer distinct samples than ``n_clusters`` (duplicated rows, as
            scikit-learn's ``KMeans`` warns): ``labels_`` then has one cluster per distinct
            sample, identical samples together (fewer than ``n_clusters`` clusters).
        """
        import torch

        self._check_params()
        X = _validate_data(self, X, reset=True)
        n = X.shape[0]
        check_count(self.n_clusters, n)
        y = self._check_y(y, n)
        dissimilarities = self._dissimilarities(n, y)
        seed = self.random_state
        if seed is not None and not isinstance(seed, numbers.Integral):  # a RandomState instance
            seed = int(check_random_state(seed).randint(np.iinfo(np.int32).max))
        # every setting goes to the loss (the registry's terms read theirs); labels where a term needs them
        needs = losses.Objective(self.loss).needs
        kw = dict(size_weight=float(self.size_weight), top_nodes=int(self.top_nodes),
                  triplet_weight=float(self.triplet_weight), margin=float(self.margin),
                  max_triplets=self.max_triplets, random_state=seed, sigmoid_slope=float(self.sigmoid_slope),
                  labels=y if {"labels", "triplets"} & needs else None)
        min_size = self._min_size(y, n)
        lr = None if self.lr is None else float(self.lr)
        best = None
        graph_s = fit_s = cut_s = 0.0
        knn = {}  # neighbour count -> (graph, edge lengths): built once when both fits share it
        candidates = []
        for dissimilarity, k in dissimilarities:
            t0 = time.perf_counter()
            graph, w = self._graph(X, dissimilarity, k, seed, knn)
            graph_s += time.perf_counter() - t0
            # the fit sees distances in units of their mean: scale-free losses and settings
            scale = float(w.mean()) if w.size and w.max() > 0 else 1.0
            fit_w = w / scale
            if "graph_weights" in needs:
                # duplicated samples give zero distances, which the dissimilarity mode divides by
                fit_w = np.maximum(fit_w, 1e-9 * fit_w.max()) if fit_w.max() > 0 else np.ones_like(fit_w)
            with torch.no_grad():
                wt = torch.as_tensor(fit_w, dtype=torch.float64)
            for init in self._starts(n, y, dissimilarity):
                t = time.perf_counter()
                res = fit_ultrametric(graph, wt, loss=self.loss, lr=lr, max_iter=int(self.max_iter),
                                      positivity=self.positivity, patience=self.patience, init=init,
                                      optimizer=self.optimizer, **kw)
                t2 = time.perf_counter()
                labels = self._cut(res.hierarchy, min_size)
                fit_s, cut_s = fit_s + t2 - t, cut_s + time.perf_counter() - t2
                if y is not None:
                    score = (float(_labelled_accuracy(labels, y)),)
                elif len(dissimilarities) > 1:
                    score = self._internal_score(labels, res.hierarchy, knn[dissimilarities[0][1]])
                else:
                    score = ()
                candidates.append(dict(dissimilarity=dissimilarity, n_neighbors=k,
                                       init=init if isinstance(init, str) else "array", score=score))
                if best is None or score > best[0]:  # ties: the first candidate
                    best = (score, dissimilarity, k, init, res, labels, graph, w, scale)
        _, self.dissimilarity_, self.n_neighbors_, self.init_, res, self.labels_, graph, w, scale = best
        self.labels_ = _keep_duplicates_together(X, self.labels_, int(self.n_clusters))
        self.candidates_ = candidates
        h = res.hierarchy
        u = res.ultrametric.detach()
        self.graph_ = graph
        self.edge_weights_ = w
        self.weight_scale_ = scale
        self.ultrametric_ = u.cpu().numpy().astype(np.float64) * scale
        self.parents_ = np.asarray(h.parents, dtype=np.int64)
        # node altitudes: the building (MST) edge of a node is its own pass edge, so the
        # ultrametric carries the best iterate's values there
        self.altitudes_ = h.node_altitudes(u).detach().cpu().numpy().astype(np.float64) * scale
        self.loss_history_ = list(res.history)
        self.n_iter_ = int(res.n_iter)
        self.min_size_ = min_size
        self.timings_ = dict(graph=graph_s, fit=fit_s, cut=cut_s)
        self._X_digest = _digest(X)
        return self

    def _dissimilarities(self, n, y):
        """The (input dissimilarity, neighbour count) pairs to fit: ``dissimilarity``, or for
        ``"auto"`` with partial labels Euclidean and Ward's heights (the cut that agrees best
        with the labelled samples is kept), without labels up to AUTO_SELECT_MAX_POINTS
        samples the AUTO_UNSUPERVISED candidates (lowest normalised cut kept), above
        Euclidean; checks that the graph can have its neighbours."""
        d = self.dissimilarity
        if d == "auto":
            d = "euclidean"
            if y is not None and isinstance(self.init, str) and n >= self._n_neighbors("ward") + 1:
                return [("euclidean", self._n_neighbors("euclidean")), ("ward", self._n_neighbors("ward"))]
            if y is None and isinstance(self.init, str) and n <= AUTO_SELECT_MAX_POINTS:
                cands = (AUTO_UNSUPERVISED if self.n_neighbors is None else
                         (("euclidean", int(self.n_neighbors)), ("ward", int(self.n_neighbors))))
                cands = [(c, k) for c, k in cands if n >= k + 1]
                if len(cands) > 1:
                    return cands
        k = self._n_neighbors(d)
        if n < k + 1:
            raise ValueError(f"{type(self).__name__} needs n_samples >= n_neighbors + 1 = "
                             f"{k + 1}, got n_samples = {n}; lower n_neighbors "
                             "or give more samples")
        return [(d, k)]

    def _graph(self, X, dissimilarity, k, seed, knn: dict):
        """The kNN + spanning-edges graph (``k`` neighbours) and the input dissimilarity on
        its edges; ``knn`` caches the graphs by neighbour count."""
        from .graph import knn_graph

        if k not in knn:
            knn[k] = knn_graph(X, k, connect=self.connect, method=self.knn,
                               random_state=0 if seed is None else seed)
        graph, w = knn[k]
        if dissimilarity == "ward":
            from .ultrametric import ward_linkage_ultrametric

            w = ward_linkage_ultrametric(graph, X)
        return graph, w

    def _starts(self, n, y, dissimilarity):
        """The starts to fit from: ``init``, or for ``"auto"`` average linkage (input above
        AUTO_AVERAGE_START_MAX_POINTS samples); with partial labels both, the cut that
        agrees best with the labelled samples is kept. Ward's heights: the input."""
        if not (isinstance(self.init, str) and self.init == "auto"):
            return [self.init]
        if dissimilarity == "ward":  # already an ultrametric: the closest term's optimum
            return ["input"]
        if n > AUTO_AVERAGE_START_MAX_POINTS:  # higra's average linkage is quadratic at worst
            return ["input"]
        return ["average", "input"] if y is not None else ["average"]

    @staticmethod
    def _internal_score(labels, h, knn_graph_lengths):
        """Label-free score of a candidate fit (higher is better): minus the normalised cut
        of its clusters on the Euclidean kNN graph with similarities exp(-(d / mean d)^2)
        (sum over clusters of cut / volume), ties (1e-9) broken by minus the hierarchy's
        normalised Dasgupta cost on the same graph."""
        g, d = knn_graph_lengths
        sim = np.exp(-(d / d.mean()) ** 2) if d.size and d.mean() > 0 else np.ones_like(d)
        a, b = labels[g.sources], labels[g.targets]
        k = int(labels.max()) + 1
        vol = np.bincount(a, sim, k) + np.bincount(b, sim, k)
        cut = a != b
        cuts = np.bincount(a[cut], sim[cut], k) + np.bincount(b[cut], sim[cut], k)
        ncut = float(np.sum(cuts / np.maximum(vol, np.finfo(float).tiny)))
        return (-round(ncut, 9), -float(dasgupta_cost(h.parents, g, sim, normalize=True)))

    def _n_neighbors(self, dissimilarity) -> int:
        """The graph's neighbour count: ``n_neighbors``, or the default of the dissimilarity."""
        return DEFAULT_NEIGHBORS[dissimilarity] if self.n_neighbors is None else int(self.n_neighbors)

    def _min_size(self, y, n):
        """The minimum cluster size of the cut (samples)."""
        m = self.min_size
        if isinstance(m, str) and y is not None and (y >= 0).any():  # "auto" with partial labels
            # half the smallest labelled class share, in samples
            counts = np.bincount(y[y >= 0])
            share = counts[counts > 0].min() / counts.sum()
            return max(1.0, 0.5 * share * n)
        v = resolve_min_size(m, int(self.n_clusters), n, AUTO_MIN_CLUSTER_FRACTION)
        return max(1.0, v) if isinstance(m, str) else v

    def _cut(self, h, min_size):
        """Labels of the cut into n_clusters (:func:`hiseg.cuts.cut_hierarchy`: size-aware,
        min_size halved until it has them all)."""
        return cut_hierarchy(h, int(self.n_clusters), min_size)

    def fit_predict(self, X, y=None):
        """Fit and return ``labels_`` (see :meth:`fit`)."""
        return self.fit(X, y).labels_

    @property
    def tree_(self):
        """The fitted hierarchy as a higra ``Tree`` (built from ``parents_``; O(n))."""
        check_is_fitted(self, "parents_")
        import higra as hg

        return hg.Tree(self.parents_)

    def linkage_matrix(self):
        """The fitted hierarchy as a scipy linkage matrix (see :func:`hiseg.plotting.to_linkage`)."""
        check_is_fitted(self, "parents_")
        from .plotting import to_linkage

        return to_linkage(self.parents_, self.altitudes_)

    def score_hierarchy(self, X, y, *, n_pairs=None, random_state=0) -> float:
        """Dendrogram purity of the fitted hierarchy for the classes ``y`` (higher is better).

        The mean, over all pairs of samples of the same class, of the share of that class
        among the leaves of their lowest common ancestor (Heller & Ghahramani 2005;
        :func:`hiseg.metrics.hierarchy.dendrogram_purity`): it judges the whole hierarchy,
        not one cut. 1 when every class is a node of the hierarchy.

        Parameters
        ----------
        X : array-like (n_samples, n_features)
            The samples the estimator was fitted on (the hierarchy is defined on them only;
            other samples are refused).
        y : array-like (n_samples,)
            The class of every sample (no unlabelled ones).
        n_pairs : int or None
            None: exact, O(n K) for K classes; an int: the mean over that many same-class
            pairs drawn at random (seeded by ``random_state``), as the large-scale
            literature reports it.

        Dasgupta's cost of the same hierarchy on a graph with similarity weights:
        ``hiseg.metrics.dasgupta_cost(est, est.graph_, similarities)``.

        Raises
        ------
        ValueError
            ``X`` is not the fitted data, ``y`` of the wrong length or with NaN.
        """
        check_is_fitted(self, "parents_")
        X = _validate_data(self, X, reset=False)
        if _digest(X) != getattr(self, "_X_digest", None):
            raise ValueError("score_hierarchy needs the samples the hierarchy was fitted on (it is "
                             "defined on them only); call fit(X) first")
        return dendrogram_purity(self, np.asarray(y), n_pairs=n_pairs, random_state=random_state)

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.input_tags.allow_nan = False
        tags.input_tags.sparse = False
        return tags

    def _more_tags(self):  # scikit-learn < 1.6
        return {"allow_nan": False}


# ------------------------------------------------------------------ measures of a hierarchy
# (public as hiseg.metrics.dendrogram_purity / dasgupta_cost; see hiseg/metrics/hierarchy.py)
def _check_parents(parents) -> np.ndarray:
    p = np.asarray(parents)
    if p.ndim != 1 or p.size == 0:
        raise ValueError(f"a parent array must be a non-empty 1-D array, got shape {p.shape}")
    if not np.issubdtype(p.dtype, np.integer):
        raise TypeError(f"a parent array must hold integers, got dtype {p.dtype}")
    p = p.astype(np.int64)
    m = p.size
    if p[-1] != m - 1:
        raise ValueError("not a tree: the last node must be the root (its own parent), "
                         f"got parent {p[-1]} for node {m - 1}")
    if np.any(p[:-1] <= np.arange(m - 1)) or np.any(p >= m):
        raise ValueError("not a tree: every node but the root must have a parent with a larger id "
                         "(children numbered before their parents; a cycle or a second root otherwise)")
    n_children = np.bincount(p[:-1], minlength=m)
    leaves = np.flatnonzero(n_children == 0)
    if np.any(leaves != np.arange(leaves.size)):
        raise ValueError("not a tree in leaves-first order: nodes without children must come first")
    return p


def _linkage_parents(Z) -> np.ndarray:
    from scipy.cluster.hierarchy import is_valid_linkage

    Z = np.asarray(Z, dtype=np.float64)
    try:
        is_valid_linkage(Z, throw=True, name="linkage matrix")
    except (ValueError, TypeError) as e:
        raise ValueError(f"not a valid scipy linkage matrix: {e}") from e
    n = Z.shape[0] + 1
    parents = np.empty(2 * n - 1, dtype=np.int64)
    parents[Z[:, 0].astype(np.int64)] = np.arange(n, 2 * n - 1)
    parents[Z[:, 1].astype(np.int64)] = np.arange(n, 2 * n - 1)
    parents[-1] = 2 * n - 2
    return parents


def as_tree(hierarchy):
    """The higra ``Tree`` of a hierarchy given in any of the forms of this module.

    Raises
    ------
    ValueError
        A linkage matrix scipy rejects, or a parent array that is not a tree in
        children-before-parents, leaves-first order.
    TypeError
        Anything else.
    """
    import higra as hg

    if isinstance(hierarchy, hg.Tree):
        return hierarchy
    if hasattr(hierarchy, "parents_") and not callable(hierarchy.parents_):  # a fitted estimator
        return hg.Tree(_check_parents(hierarchy.parents_))
    if hasattr(hierarchy, "parents") and hasattr(hierarchy, "mst_edge_map"):  # hiseg Hierarchy
        if getattr(hierarchy, "batch", None) is not None:
            raise ValueError("a batched hierarchy joins several graphs; measure each graph's hierarchy")
        return hg.Tree(_check_parents(hierarchy.parents))
    if hasattr(hierarchy, "detach"):
        hierarchy = hierarchy.detach().cpu().numpy()
    try:
        a = np.asarray(hierarchy)
    except Exception as e:  # pragma: no cover - exotic objects
        raise TypeError(f"not a hierarchy: {type(hierarchy).__name__}") from e
    if a.dtype == object:
        raise TypeError(f"not a hierarchy: {type(hierarchy).__name__}")
    if a.ndim == 2:
        return hg.Tree(_linkage_parents(a))
    if a.ndim == 1:
        return hg.Tree(_check_parents(a))
    raise TypeError("a hierarchy is a higra Tree, a hiseg Hierarchy, a fitted UltrametricClustering, "
                    f"a scipy linkage matrix or a parent array; got {type(hierarchy).__name__} "
                    f"of shape {a.shape}")


def _class_codes(labels, n_leaves) -> tuple[np.ndarray, int]:
    """Class labels -> codes 0..K-1 (any hashable labels; ``None`` / NaN refused)."""
    y = np.asarray(labels)
    if y.ndim != 1:
        raise ValueError(f"labels must be a 1-D array, got shape {y.shape}")
    if y.shape[0] != n_leaves:
        raise ValueError(f"the hierarchy has {n_leaves} leaves but labels has {y.shape[0]} entries "
                         "(one label per sample, in leaf order)")
    if y.dtype.kind == "f" and not np.all(np.isfinite(y)):
        raise ValueError("labels contain NaN or infinite values; purity needs a class for every sample "
                         "(measure the labelled samples' subtree instead)")
    if y.dtype == object and any(v is None or type(v).__name__ in ("NAType", "NaTType")
                                 or (isinstance(v, float) and v != v) for v in y):
        raise ValueError("labels contain None, NaN or NA; purity needs a class for every sample")
    _, codes = np.unique(y if y.dtype != object else y.astype(str), return_inverse=True)
    codes = codes.ravel().astype(np.int64)
    return codes, int(codes.max()) + 1 if codes.size else 0


def dendrogram_purity(hierarchy, labels, *, n_pairs: int | None = None, random_state=0,
                      chunk_classes: int = 64) -> float:
    r"""Dendrogram purity (Heller & Ghahramani 2005) of a hierarchy for class ``labels``.

    .. math::
        \mathrm{DP}(T) = \frac{1}{|P|} \sum_{\{x,y\} \in P}
            \frac{|\mathrm{leaves}(\mathrm{lca}(x,y)) \cap C(x)|}{|\mathrm{leaves}(\mathrm{lca}(x,y))|}

    with :math:`P` the pairs of distinct samples of the same class :math:`C(x) = C(y)`.

    Exact (``n_pairs=None``): for every node ``v`` and class ``c`` the number of pairs of
    class ``c`` whose lca is ``v`` is :math:`\binom{n_c(v)}{2} - \sum_{u \in
    \mathrm{children}(v)} \binom{n_c(u)}{2}`; O(N K) time, the class counts accumulated
    ``chunk_classes`` classes at a time (memory O(N min(K, chunk_classes))).

    Sampled (``n_pairs=m``): the mean over ``m`` same-class pairs drawn uniformly with
    replacement from :math:`P` (a class with probability proportional to its pair count,
    then two distinct samples of it), seeded by ``random_state``; its standard error is
    at most :math:`0.5/\sqrt{m}`. The large-scale literature reports this estimate.

    Parameters
    ----------
    hierarchy : higra Tree, hiseg Hierarchy, fitted UltrametricClustering, scipy linkage
        matrix or parent array (see :func:`as_tree`); its leaves are the samples.
    labels : array (n_leaves,)
        Class of every sample (any values; NaN / None refused).
    n_pairs : int or None
        None: exact; otherwise the number of sampled pairs.
    random_state : int or numpy Generator
        Seed of the pair sample.

    Returns
    -------
    float in (0, 1] (a hierarchy in which every class is a node scores 1).

    Raises
    ------
    ValueError
        Labels of the wrong length or with NaN, no class with two samples, a hierarchy
        that is not a tree, ``n_pairs`` < 1.
    """
    import higra as hg

    tree = as_tree(hierarchy)
    n = tree.num_leaves()
    codes, k = _class_codes(labels, n)
    class_sizes = np.bincount(codes, minlength=k).astype(np.float64)
    class_pairs = class_sizes * (class_sizes - 1) / 2
    total = class_pairs.sum()
    if total == 0:
        raise ValueError("no class has two samples: dendrogram purity measures same-class pairs")
    area = hg.attribute_area(tree).astype(np.float64)
    if n_pairs is not None:
        if isinstance(n_pairs, bool) or not isinstance(n_pairs, numbers.Integral) or n_pairs < 1:
            raise ValueError(f"n_pairs must be a positive integer or None, got {n_pairs!r}")
        rng = np.random.default_rng(random_state)
        cls = rng.choice(k, size=int(n_pairs), p=class_pairs / total)
        order = np.argsort(codes, kind="stable")
        start = np.concatenate([[0], np.cumsum(class_sizes).astype(np.int64)])
        sz = class_sizes[cls].astype(np.int64)
        i = rng.integers(0, sz)
        j = rng.integers(0, sz - 1)
        j = j + (j >= i)  # a second, distinct sample of the class
        a, b = order[start[cls] + i], order[start[cls] + j]
        lca = tree.lowest_common_ancestor(a, b)
        num = np.empty(lca.size)
        for c in np.unique(cls):  # the count of class c under each sampled lca
            sel = cls == c
            counts = hg.accumulate_sequential(tree, (codes == c).astype(np.float64), hg.Accumulators.sum)
            num[sel] = counts[lca[sel]]
        return float(np.mean(num / area[lca]))
    parents = tree.parents()
    acc = 0.0
    for c0 in range(0, k, chunk_classes):
        cs = np.arange(c0, min(k, c0 + chunk_classes))
        leaf = (codes[:, None] == cs[None, :]).astype(np.float64)
        counts = hg.accumulate_sequential(tree, leaf, hg.Accumulators.sum)  # (N, chunk)
        pairs = counts * (counts - 1) / 2
        below = np.zeros_like(pairs)
        np.add.at(below, parents[:-1], pairs[:-1])  # pairs already joined in a child
        at_node = pairs - below  # pairs whose lca is the node (0 on the leaves)
        acc += float(np.sum(at_node * counts / area[:, None]))
    return acc / total


def dasgupta_cost(hierarchy, graph, similarities, *, normalize: bool = False) -> float:
    r"""Dasgupta's cost (Dasgupta 2016) of a hierarchy on a graph with similarity weights.

    .. math::
        \mathrm{cost}(T) = \sum_{\{x, y\} \in E} s_{xy}\, |\mathrm{leaves}(\mathrm{lca}_T(x, y))|

    Lower is better: similar samples should be joined low in the tree. O(N + |E|) after
    higra's lca preprocessing.

    Parameters
    ----------
    hierarchy : see :func:`as_tree`; its leaves are the graph's vertices.
    graph : higra UndirectedGraph, (sources, targets, num_vertices) or
        :class:`hiseg.graph.EdgeList`.
    similarities : array (n_edges,)
        Nonnegative finite similarity of each edge (for distances, pass e.g.
        ``np.exp(-d**2 / sigma**2)``; higra's ``dasgupta_cost`` also has a
        ``1 / dissimilarity`` mode).
    normalize : bool
        Divide by :math:`N \sum_E s`, the cost of the flat tree: a number in (0, 1].

    Raises
    ------
    ValueError
        A graph whose vertex count is not the hierarchy's leaf count, similarities of the
        wrong length, negative or not finite, a hierarchy that is not a tree.
    """
    import higra as hg

    from .graph import as_edge_list

    tree = as_tree(hierarchy)
    g = as_edge_list(graph)
    n = tree.num_leaves()
    if g.num_vertices != n:
        raise ValueError(f"the graph has {g.num_vertices} vertices but the hierarchy has {n} leaves")
    s = np.asarray(similarities, dtype=np.float64)
    if s.shape != (g.num_edges,):
        raise ValueError(f"similarities must have one value per edge ({g.num_edges}), got shape {s.shape}")
    if not np.all(np.isfinite(s)) or np.any(s < 0):
        raise ValueError("similarities must be finite and nonnegative (Dasgupta's cost takes similarities, "
                         "not distances)")
    area = hg.attribute_area(tree).astype(np.float64)
    lca = tree.lowest_common_ancestor(g.sources, g.targets)
    cost = float(np.sum(s * area[lca]))
    if normalize:
        total = n * s.sum()
        return cost / total if total > 0 else 0.0
    return cost
