"""The scikit-learn estimator :class:`UltrametricClustering` (see :mod:`hiseg.clustering`): its
parameters, ``fit`` and the fitted attributes.

What ``fit`` does is elsewhere, one module per concern: the parameter checks
:mod:`hiseg.clustering.params`, the fits tried and kept :mod:`hiseg.clustering.candidates`,
its automatic choices (which fits, which to keep) :mod:`hiseg.clustering.auto`, the reading
of partial labels :mod:`hiseg.clustering.labels`, the measures of its hierarchy
:mod:`hiseg.metrics.hierarchy`.
"""
from __future__ import annotations

import numpy as np
from sklearn.base import BaseEstimator, ClusterMixin
from sklearn.utils.validation import check_is_fitted

from ..core.cuts import check_count
from ..metrics.hierarchy import dendrogram_purity
from . import auto
from .candidates import fit_candidates, fit_refined
from .params import check_params, check_partial_labels, validate_data

__all__ = ["UltrametricClustering", "LongFitWarning", "estimated_fit_seconds", "LONG_FIT_SECONDS"]

#: ``fit`` warns before a fit estimated to take longer than this (:func:`estimated_fit_seconds`)
LONG_FIT_SECONDS = 60.0


class LongFitWarning(UserWarning):
    """``fit`` will take long: its estimated duration, said before the work starts."""


def estimated_fit_seconds(n: int, d: int, loss: str, max_iter, n_neighbors=None) -> tuple:
    """(graph seconds, fit seconds): a rough estimate of ``fit`` on ``n`` samples in ``d``
    dimensions, from the measured costs of ``benchmarks/results/clustering_scale.md`` (one CPU
    core: 1e6 points in 16-d, 100 s of graph and 161 iterations of ~1.5 s on 4e6 edges) and
    ``clustering_purity.md`` (the default's refinement: ~1 s per 100 iterations on 600 samples),
    every iteration run (``patience`` often stops earlier). Within a factor of a few; O(1)."""
    from .refine import REFINE_MAX_ITER

    refined = auto.resolved_loss(loss, n) == auto.AUTO_LOSS
    k = (10 if refined else 5) if n_neighbors is None else int(n_neighbors)
    edges = 0.78 * k * n  # the kNN graph, its pairs counted once, and the spanning edges (measured)
    if n <= auto.AUTO_SELECT_MAX_POINTS:  # exact neighbours and Prim's MST: n^2 d
        graph = 2e-9 * n * n * max(d, 1)
    else:  # a random-projection forest and NN-descent, or a KD-tree in few dimensions
        graph = 1e-4 * n * max(1.0, d / 16)
    iterations = (REFINE_MAX_ITER if refined else 200) if max_iter is None else int(max_iter)
    per_iteration = 3e-7 * edges  # one sort, one canonical BPT and its lcas
    if refined or "dasgupta" in loss or "entropy" in loss:  # the soft cardinals: ~30 sigmoid terms per node
        per_iteration += 3e-7 * 30 * n
    starts = 2 if refined else 1
    return graph, starts * iterations * per_iteration


def _announce_long_fit(est, n: int, d: int) -> None:
    """A :class:`LongFitWarning` (one line on stderr) when the fit is estimated above
    :data:`LONG_FIT_SECONDS`: the user learns what it will take before the work starts."""
    graph, fit = estimated_fit_seconds(n, d, est.loss, est.max_iter, est.n_neighbors)
    if graph + fit <= LONG_FIT_SECONDS:
        return
    import warnings

    def when(t):
        return f"{t / 60:.0f} min" if t >= 90 else f"{t:.0f} s"

    warnings.warn(f"{type(est).__name__}: fitting {n:,} samples x {d} features will take about "
                  f"{when(graph + fit)} on one core (graph ~{when(graph)}, fit up to ~{when(fit)}; a rough "
                  f"estimate)",
                  LongFitWarning, stacklevel=3)


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
    connected (:func:`hiseg.core.builders.knn_graph`: the exact Euclidean MST up to 2e4 samples,
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
        (:func:`hiseg.core.ward.ward_linkage_ultrametric`, O(E log E)); an ultrametric
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
        Neighbour search (``method`` of :func:`hiseg.core.builders.knn_graph`): exact up to 2e4
        samples (or in at most 3 dimensions), a random-projection forest with NN-descent
        above.
    connect : {"auto", "mst", "components"}, default="auto"
        Spanning edges of the graph (:func:`hiseg.core.builders.knn_graph`): the exact Euclidean
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
    selection : {"dasgupta", "entropy"}, default="dasgupta"
        ``loss="auto"``: the exact cost, measured on the refinement's graph and similarities,
        that keeps one hierarchy without labels. ``"dasgupta"``: the refined fit of lowest
        Dasgupta cost. ``"entropy"``: the hierarchy of lowest structural entropy (Li & Pan
        2016, :func:`hiseg.metrics.structural_entropy`; HypCSE's label-free rule) among the
        starts and their refined fits. On the nine sets of issue 56 neither reaches HypCSE's
        figures everywhere (``benchmarks/results/clustering_hypcse.md``): the default is
        unchanged. Ignored by the paper's losses.
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
    sigmoid terms; ``loss="auto"``: two such fits of 100 iterations); the cut O(n log n);
    ``dissimilarity="ward"`` adds 15 neighbours, then higra's graph Ward linkage, O(E log E).
    Measured: seconds on the small sets (``benchmarks/results/clustering_purity.md``), 1e5 to 1e6
    points (``benchmarks/results/clustering_scale.md``; with Ward's heights:
    ``clustering_scale_ward.md``).

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
                 optimizer="amsgrad", selection="dasgupta", random_state=None):
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
        self.selection = selection
        self.random_state = random_state

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
        LongFitWarning
            Before a fit estimated to take more than :data:`LONG_FIT_SECONDS` (60 s): its
            estimated duration (:func:`estimated_fit_seconds`).
        sklearn.exceptions.ConvergenceWarning
            Fewer distinct samples than ``n_clusters`` (duplicated rows, as
            scikit-learn's ``KMeans`` warns): ``labels_`` then has one cluster per distinct
            sample, identical samples together (fewer than ``n_clusters`` clusters).
        """
        check_params(self)
        X = validate_data(self, X, reset=True)
        n = X.shape[0]
        check_count(self.n_clusters, n)
        y = check_partial_labels(self, y, n)
        _announce_long_fit(self, n, X.shape[1])
        loss = auto.resolved_loss(self.loss, n)
        if loss == auto.AUTO_LOSS:
            best, self.candidates_, self.timings_ = fit_refined(self, X)
        else:
            best, self.candidates_, self.timings_ = fit_candidates(self, X, y, loss)
        self._set_fitted(X, best)
        return self

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
        X = validate_data(self, X, reset=False)
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
