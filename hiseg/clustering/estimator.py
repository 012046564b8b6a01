"""The scikit-learn estimator :class:`UltrametricClustering` (see :mod:`hiseg.clustering`).

Its automatic choices (which fits, which to keep) are :mod:`hiseg.clustering.auto`, the
reading of partial labels :mod:`hiseg.clustering.labels`, the measures of its hierarchy
:mod:`hiseg.metrics.hierarchy`.
"""
from __future__ import annotations

import numbers
import time

import numpy as np
from sklearn.base import BaseEstimator, ClusterMixin
from sklearn.utils import check_random_state
from sklearn.utils.validation import check_is_fitted

from ..core import losses
from ..core.cuts import AUTO_MIN_CLUSTER_FRACTION, check_count, cut_hierarchy, resolve_min_size
from ..core.fitting import INITS, LOSSES, OPTIMIZERS, POSITIVITY, fit_ultrametric
from ..metrics.hierarchy import dendrogram_purity
from . import auto, refine
from .labels import label_array, partial_labels

__all__ = ["UltrametricClustering"]

#: ``max_iter=None`` for the paper's losses (``loss="auto"``: :data:`hiseg.clustering.refine.REFINE_MAX_ITER`)
PAPER_MAX_ITER = 200
_LOSS_CHOICES = (auto.AUTO_LOSS,) + LOSSES


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

    The default (``loss="auto"``, up to 2e4 samples) refines linkages by gradient descent
    on the relaxed Dasgupta cost (:mod:`hiseg.clustering.refine`): Ward's hierarchy and
    average linkage, both constrained to a 10-NN + MST graph, are each the start of a
    descent on the paper's soft-cardinal relaxation of Dasgupta's cost with similarities
    ``exp(-(d / mean d)^2)`` on the graph's edges; the iterate of lowest *exact* cost is
    kept, and the start of lowest cost among the fits (``candidates_``). No label is read:
    the closest+size default it replaces stayed at Ward's hierarchy where it chose Ward's
    heights, and its other candidates started from the poor average linkage of a 5-NN
    graph (``experiments/clustering/``). Above 2e4 samples ``"auto"`` fits the paper's
    closest+size as described next.

    The samples are the vertices of a graph: every sample is joined to its
    ``n_neighbors`` nearest neighbours and spanning edges are added so that the graph is
    connected (:func:`hiseg.core.graph.knn_graph`: the exact Euclidean MST up to 2e4 samples,
    the paper's construction; edges joining the kNN graph's components above); edge
    weights are the input dissimilarity (``dissimilarity``: Euclidean distances, the
    paper's choice, or Ward's heights on the graph), divided by their mean for the fit
    (the losses and their settings are then unit-free: ``X * 1e300`` and ``X * 1e-300``
    give the same clustering). An ultrametric on that graph is fitted by gradient descent
    (:func:`hiseg.core.fitting.fit_ultrametric`, AMSGrad on :math:`J(\Phi(\tilde w))`); its
    single-linkage tree is the hierarchy, cut into ``n_clusters`` clusters by a
    size-aware cut (:func:`hiseg.core.cuts.cut_hierarchy`): groups smaller than
    ``min_size`` merged last (outliers) are not split off as clusters of their
    own but stay with the cluster they merged into.

    Parameters
    ----------
    n_clusters : int, default=2
        Number of flat clusters of ``labels_``.
    loss : {"auto", "closest+size", "closest", "closest+triplet", "closest+size+triplet", \
            "dasgupta", "dasgupta+size"}, default="auto"
        The cost function. ``"auto"``: the refinement described above (labels ignored;
        ``sigmoid_slope``, ``lr``, ``max_iter``, ``patience``, ``positivity`` set its descent,
        ``dissimilarity`` and ``init`` its starts, ``n_neighbors`` its graph). The paper's:
        closest ultrametric (mean squared error to the input distances), plus the
        cluster-size regularisation (``size``), plus the triplet term built from the
        partial labels ``y`` (``triplet``), or the relaxed Dasgupta cost (with the edge
        weights as dissimilarities).
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
        Slope :math:`\lambda` of the soft cardinal of the Dasgupta losses and of
        ``loss="auto"`` (altitudes in units of the start's mean).
    dissimilarity : {"auto", "euclidean", "ward"}, default="auto"
        What the fit sees on each edge of the graph. ``"euclidean"``: the distance of its
        two samples (the paper). ``"ward"``: the height at which Ward's hierarchy,
        constrained to the graph, first joins them
        (:func:`hiseg.core.ultrametric.ward_linkage_ultrametric`, O(E log E)); an ultrametric
        already, so the closest term alone returns Ward's hierarchy and the size,
        triplet or Dasgupta terms reshape it from there (``init="auto"`` starts at it).
        Choose ``"ward"`` for compact classes in many dimensions: on 64-d Gaussian
        mixtures of unequal spreads, 15% of the 5 nearest neighbours of a sample belong
        to another class, and no ultrametric fitted to the distances of such a graph
        comes near Ward (``experiments/paper/results/real.md``); choose ``"euclidean"`` for
        elongated or nested classes (circles, moons), which Ward cannot separate.
        ``"auto"``: with partial labels (triplet losses) both are fitted, each on its own
        graph, and the one whose cut agrees best with the labelled samples is kept
        (``dissimilarity_``; ties: Euclidean), a choice made on the labelled samples only.
        Without labels, up to 2e4 samples (``auto.AUTO_SELECT_MAX_POINTS``), three fits: edge
        lengths on the 5-NN and the 10-NN graphs and Ward's heights on the 15-NN graph
        (with ``n_neighbors`` given: edge lengths and Ward's heights on that graph); the
        one whose ``n_clusters`` cut has the lowest normalised cut on the 5-NN graph
        (similarities ``exp(-(d / mean d)^2)``; ties: the lower Dasgupta cost of the
        hierarchy there) is kept (``dissimilarity_``, ``n_neighbors_``, ``candidates_``).
        That label-free rule was chosen on pilot draws of the toy sets and 64-d mixtures
        (``experiments/paper/hierarchies.py --pilot``): it keeps edge lengths where Ward fails
        (circles, moons) and Ward's heights on compact classes
        (``experiments/paper/results/hierarchies.md``). Above 2e4 samples: edge lengths. An
        array ``init`` is for the Euclidean graph (and disables the choice).
        With ``loss="auto"`` the dissimilarity is what the refinement starts from (its
        graph and similarities are always the edge lengths'): ``"ward"``, Ward's heights;
        ``"euclidean"``, ``init``; ``"auto"``, both Ward's heights and average linkage (the
        lower exact Dasgupta cost kept).
    n_neighbors : int or None, default=None
        Number of nearest neighbours of the graph; None: 5 for ``"euclidean"`` (the
        paper), 15 for ``"ward"`` (on a sparser graph Ward's constrained hierarchy drifts
        from the unconstrained one), 10 for ``loss="auto"`` (``n - 1`` for fewer samples,
        at least 5).
    knn : {"auto", "exact", "approximate"}, default="auto"
        Neighbour search (``method`` of :func:`hiseg.core.graph.knn_graph`): exact up to 2e4
        samples (or in at most 3 dimensions), a random-projection forest with NN-descent
        above.
    connect : {"auto", "mst", "components"}, default="auto"
        Spanning edges of the graph (:func:`hiseg.core.graph.knn_graph`): the exact Euclidean
        MST (``"mst"``, O(n^2) time, O(n) memory) up to 2e4 samples, edges joining the
        kNN graph's components above.
    init : {"auto", "input", "average"} or array, default="auto"
        Start of the descent: the input distances, the average-linkage ultrametric of
        the graph (``"average"``), or an (E,) array in units of the mean distance;
        ``"auto"``: ``"input"`` for ``dissimilarity="ward"``; otherwise ``"average"`` up to
        2e4 samples, ``"input"`` above (higra's graph average linkage is quadratic at
        worst), chosen on the toy sets' pilot draws
        (``experiments/paper/toy.py``); with partial labels (triplet losses, up to 2e4
        samples) both starts are fitted and the one whose cut agrees best with the
        labelled samples is kept (``init_``; ties: average linkage), a choice made on the
        labelled samples only (wine, 10% labelled: 0.90 from average linkage, 0.93 from
        the input, 0.94 chosen; ``experiments/paper/real.py``). With ``loss="auto"`` and
        ``dissimilarity="euclidean"``: the start of the refinement (``"auto"``: average
        linkage; ``"input"``: single linkage; an array: any nonnegative (E,) values).
    min_size : "auto", float or 0, default="auto"
        Smallest cluster the cut splits off (:func:`hiseg.core.cuts.cut_hierarchy`): a number
        of samples (>= 1), a fraction of the samples (in (0, 1)) or 0 (plain cut: the
        ``n_clusters - 1`` highest merges undone, ties broken by the merge order).
        ``"auto"``: with partial labels, half the smallest labelled class share of the
        samples; without, :data:`hiseg.core.cuts.AUTO_MIN_CLUSTER_FRACTION` (10%) of an even
        share (``0.1 n / n_clusters``). When the hierarchy has fewer than
        ``n_clusters`` clusters of that size, the size is halved until it has them:
        ``labels_`` always has ``n_clusters`` clusters. Without a minimum size, outliers
        merged last become clusters of their own (closest+triplet stayed at .63 on
        breast cancer, ``experiments/paper/real.py``).
    lr : float or None, default=None
        Step size; None: 0.3 for ``loss="auto"``, otherwise 0.1 for AMSGrad/Adam/SGD (the
        paper's value), 1.0 for ``optimizer="newton"``.
    max_iter : int or None, default=None
        Maximum number of gradient iterations; None: 100 for ``loss="auto"``, 200 for the
        paper's losses.
    positivity : {"softplus", "relu", "exp"} or None, default="softplus"
        Reparametrisation keeping the fitted weights nonnegative (``"exp"``: steps in
        log space).
    patience : int or None, default=50
        Stop after that many iterations without improvement of the loss.
    optimizer : {"amsgrad", "adam", "sgd", "newton"}, default="amsgrad"
        ``"newton"``: gradient steps preconditioned by the closest term's curvature (see
        :func:`hiseg.core.fitting.fit_ultrametric`); closest losses only (not ``"auto"``).
    random_state : int, RandomState instance or None, default=None
        Seeds the approximate neighbour search (seed 0 when None) and the triplet
        sampling.

    Attributes
    ----------
    labels_ : int64 ndarray (n_samples,)
        Cluster of every sample, ``0..n_clusters-1``, numbered by smallest sample index
        (fewer clusters, identical samples together, when ``X`` has fewer distinct rows
        than ``n_clusters``: a ``ConvergenceWarning`` says so).
    graph_ : :class:`hiseg.core.graph.EdgeList`
        The kNN graph with its spanning edges (``num_vertices = n_samples``).
    edge_weights_ : float64 ndarray (n_edges,)
        The input dissimilarity on each edge of ``graph_``: its Euclidean length, or
        Ward's height (``dissimilarity="ward"``).
    weight_scale_ : float
        Their mean: the fit sees ``edge_weights_ / weight_scale_`` (``loss="auto"``: the
        mean of the kept start, which the refinement sees divided by it).
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
        the Dasgupta cost; empty when there was no choice; ``loss="auto"``: minus the
        kept iterate's exact normalised Dasgupta cost on ``graph_``, one entry per start).
    init_ : str or array
        The start of the kept fit.
    min_size_ : float
        The minimum cluster size asked of the cut (samples), before any halving.
    loss_history_ : list of float
        Loss value at every iteration (``loss="auto"``: the relaxed Dasgupta cost).
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
    :func:`hiseg.core._neighbors.approximate_knn`), O(n (k + d)) memory in both cases; then at
    most ``max_iter`` iterations of O(E log E) (one canonical BPT, its lcas, the loss,
    one AMSGrad step), plus O(|T|) for the triplet term or O(n K) for Dasgupta (K ~ 20-200
    sigmoid terms; ``loss="auto"``: two such fits of 100 iterations, 1-3 s of CPU on 150-600
    samples, ``benchmarks/results/clustering_purity.md``); the cut O(n log n). Measured
    (``benchmarks/results/clustering_scale.md``, closest+size): 1e5 points in
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

    def __init__(self, n_clusters=2, loss="auto", *, size_weight=10.0, top_nodes=10,
                 triplet_weight=1.0, margin=1.0, max_triplets=100000, sigmoid_slope=5.0,
                 dissimilarity="auto", n_neighbors=None, knn="auto", connect="auto", init="auto",
                 min_size="auto",
                 lr=None, max_iter=None, positivity="softplus", patience=50,
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
            raise ValueError(f"loss must be one of {_LOSS_CHOICES} (or a '+' combination of registered "
                             f"terms), got {self.loss!r}")
        if self.loss != auto.AUTO_LOSS:
            try:
                losses.parse_loss(self.loss)
            except ValueError as e:
                raise ValueError(f"loss must be one of {_LOSS_CHOICES} (or a '+' combination of registered "
                                 f"terms), got {self.loss!r}: {e}") from None
        check_count(self.n_clusters)
        integer("n_neighbors", 1, allow_none=True)
        if self.dissimilarity not in auto.DISSIMILARITIES:
            raise ValueError(f"dissimilarity must be one of {auto.DISSIMILARITIES}, got {self.dissimilarity!r}")
        integer("top_nodes", 0)
        integer("max_iter", 1, allow_none=True)
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
        closest = self.loss != auto.AUTO_LOSS and "closest" in losses.parse_loss(self.loss)
        if self.optimizer == "newton" and not closest:
            raise ValueError("optimizer='newton' needs a closest term; use it with the closest losses")

    def _check_y(self, y, n_samples):
        """Partial labels for the triplet term: (n_samples,) ints (or any labels); unlabelled:
        -1, NaN, None or pandas' NA (see :func:`hiseg.clustering.labels.partial_labels`)."""
        uses_y = self.loss != auto.AUTO_LOSS and bool({"labels", "triplets"} & losses.Objective(self.loss).needs)
        if y is None:
            if uses_y:
                raise ValueError(f"loss {self.loss!r} needs partial labels: call fit(X, y) with y of "
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
        self._check_params()
        X = _validate_data(self, X, reset=True)
        n = X.shape[0]
        check_count(self.n_clusters, n)
        y = self._check_y(y, n)
        loss = auto.resolved_loss(self.loss, n)
        if loss == auto.AUTO_LOSS:
            best, self.candidates_, self.timings_ = self._fit_refined(X)
        else:
            best, self.candidates_, self.timings_ = self._fit_candidates(X, y, loss)
        self._set_fitted(X, best)
        return self

    def _seed(self):
        """``random_state`` as an int or None (a RandomState instance draws one)."""
        seed = self.random_state
        if seed is not None and not isinstance(seed, numbers.Integral):
            seed = int(check_random_state(seed).randint(np.iinfo(np.int32).max))
        return seed

    def _fit_refined(self, X):
        """``loss="auto"``: refine each start (:func:`hiseg.clustering.auto.refine_starts`) on
        the Euclidean graph and keep the lowest exact Dasgupta cost (ties: the first start).
        Returns what :meth:`_fit_candidates` returns; reads no label."""
        n = X.shape[0]
        seed = self._seed()
        k = auto.refine_neighbours(self.n_neighbors, n, type(self).__name__)
        timings = dict(graph=0.0, fit=0.0, cut=0.0)
        t0 = time.perf_counter()
        graph, w = self._graph(X, "euclidean", k, seed, {})
        similarities = refine.gaussian_similarities(w)
        timings["graph"] += time.perf_counter() - t0
        min_size = self._min_size(None, n)
        settings = dict(sigmoid_slope=float(self.sigmoid_slope), patience=self.patience, positivity=self.positivity,
                        optimizer=self.optimizer,
                        lr=refine.REFINE_LR if self.lr is None else float(self.lr),
                        max_iter=refine.REFINE_MAX_ITER if self.max_iter is None else int(self.max_iter))
        best, candidates = None, []
        for start in auto.refine_starts(self.dissimilarity, self.init, n):
            t = time.perf_counter()
            u0, scale = refine.start_ultrametric(start, graph, w, X)
            name = start if isinstance(start, str) else "array"
            fit = refine.refine(graph, similarities, u0, start_name=name, **settings)
            t2 = time.perf_counter()
            labels = cut_hierarchy(fit.hierarchy, int(self.n_clusters), min_size)
            timings["fit"] += t2 - t
            timings["cut"] += time.perf_counter() - t2
            dissimilarity = "ward" if name == "ward" else "euclidean"
            candidates.append(dict(dissimilarity=dissimilarity, n_neighbors=k, init=name, score=(-fit.cost,)))
            if best is None or fit.cost < best["res"].cost:  # ties: the first start
                best = dict(dissimilarity=dissimilarity, k=k, init=start, res=fit, labels=labels, graph=graph,
                            w=w, scale=scale, min_size=min_size)
        return best, candidates, timings

    def _fit_candidates(self, X, y, loss):
        """Fit every candidate (:mod:`hiseg.clustering.auto`: graphs, then starts) of one of
        the paper's ``loss`` and keep the best score (ties: the first). Returns (the kept fit
        as a dict, the candidates' records, the seconds spent on graphs, fits and cuts)."""
        import torch

        n = X.shape[0]
        seed = self._seed()
        # every setting goes to the loss (the registry's terms read theirs); labels where a term needs them
        needs = losses.Objective(loss).needs
        kw = dict(size_weight=float(self.size_weight), top_nodes=int(self.top_nodes),
                  triplet_weight=float(self.triplet_weight), margin=float(self.margin),
                  max_triplets=self.max_triplets, random_state=seed, sigmoid_slope=float(self.sigmoid_slope),
                  labels=y if {"labels", "triplets"} & needs else None)
        min_size = self._min_size(y, n)
        lr = None if self.lr is None else float(self.lr)
        max_iter = PAPER_MAX_ITER if self.max_iter is None else int(self.max_iter)
        graphs = auto.candidate_graphs(self.dissimilarity, self.n_neighbors, self.init, n, y is not None,
                                       type(self).__name__)
        best, candidates, timings = None, [], dict(graph=0.0, fit=0.0, cut=0.0)
        knn = {}  # neighbour count -> (graph, edge lengths): built once when both fits share it
        for dissimilarity, k in graphs:
            t0 = time.perf_counter()
            graph, w = self._graph(X, dissimilarity, k, seed, knn)
            timings["graph"] += time.perf_counter() - t0
            # the fit sees distances in units of their mean: scale-free losses and settings
            scale = float(w.mean()) if w.size and w.max() > 0 else 1.0
            fit_w = w / scale
            if "graph_weights" in needs:
                # duplicated samples give zero distances, which the dissimilarity mode divides by
                fit_w = np.maximum(fit_w, 1e-9 * fit_w.max()) if fit_w.max() > 0 else np.ones_like(fit_w)
            with torch.no_grad():
                wt = torch.as_tensor(fit_w, dtype=torch.float64)
            for init in auto.candidate_starts(self.init, n, y is not None, dissimilarity):
                t = time.perf_counter()
                res = fit_ultrametric(graph, wt, loss=loss, lr=lr, max_iter=max_iter,
                                      positivity=self.positivity, patience=self.patience, init=init,
                                      optimizer=self.optimizer, **kw)
                t2 = time.perf_counter()
                labels = cut_hierarchy(res.hierarchy, int(self.n_clusters), min_size)
                timings["fit"] += t2 - t
                timings["cut"] += time.perf_counter() - t2
                score = auto.candidate_score(labels, res.hierarchy, y, knn.get(graphs[0][1]), len(graphs))
                candidates.append(dict(dissimilarity=dissimilarity, n_neighbors=k,
                                       init=init if isinstance(init, str) else "array", score=score))
                if best is None or score > best["score"]:  # ties: the first candidate
                    best = dict(score=score, dissimilarity=dissimilarity, k=k, init=init, res=res, labels=labels,
                                graph=graph, w=w, scale=scale, min_size=min_size)
        return best, candidates, timings

    def _set_fitted(self, X, best):
        """The fitted attributes of the kept fit."""
        res, scale = best["res"], best["scale"]
        self.dissimilarity_, self.n_neighbors_, self.init_ = best["dissimilarity"], best["k"], best["init"]
        self.labels_ = _keep_duplicates_together(X, best["labels"], int(self.n_clusters))
        h = res.hierarchy
        u = res.ultrametric.detach()
        self.graph_ = best["graph"]
        self.edge_weights_ = best["w"]
        self.weight_scale_ = scale
        self.ultrametric_ = u.cpu().numpy().astype(np.float64) * scale
        self.parents_ = np.asarray(h.parents, dtype=np.int64)
        # node altitudes: the building (MST) edge of a node is its own pass edge, so the
        # ultrametric carries the best iterate's values there
        self.altitudes_ = h.node_altitudes(u).detach().cpu().numpy().astype(np.float64) * scale
        self.loss_history_ = list(res.history)
        self.n_iter_ = int(res.n_iter)
        self.min_size_ = best["min_size"]
        self._X_digest = _digest(X)

    def _graph(self, X, dissimilarity, k, seed, knn: dict):
        """The kNN + spanning-edges graph (``k`` neighbours) and the input dissimilarity on
        its edges; ``knn`` caches the graphs by neighbour count."""
        from ..core.graph import knn_graph

        if k not in knn:
            knn[k] = knn_graph(X, k, connect=self.connect, method=self.knn,
                               random_state=0 if seed is None else seed)
        graph, w = knn[k]
        if dissimilarity == "ward":
            from ..core.ultrametric import ward_linkage_ultrametric

            w = ward_linkage_ultrametric(graph, X)
        return graph, w

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
        """The fitted hierarchy as a scipy linkage matrix (see :func:`hiseg.clustering.plotting.to_linkage`)."""
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
