r"""Hierarchical clustering by ultrametric fitting: a scikit-learn style estimator.

:class:`UltrametricClustering` builds the paper's graph on the samples (k nearest
neighbours + the Euclidean minimum spanning tree, :func:`hiseg.graph.knn_graph`), fits an
ultrametric on its edges with :func:`hiseg.fitting.fit_ultrametric` (closest, cluster
size, triplet or Dasgupta losses), and cuts the resulting hierarchy into
``n_clusters`` flat clusters with :func:`cut_num_clusters`.

Partial labels ``y`` (``-1`` = unlabelled) feed the triplet term of the semi-supervised
losses ``"closest+triplet"`` and ``"closest+size+triplet"``; the others ignore them.
There is no ``predict``: the hierarchy is defined on the fitted samples only.
"""
from __future__ import annotations

import numbers
from typing import Optional

import numpy as np
from sklearn.base import BaseEstimator, ClusterMixin
from sklearn.utils import check_random_state
from sklearn.utils.validation import check_is_fitted, column_or_1d

__all__ = ["UltrametricClustering", "cut_num_clusters"]


def cut_num_clusters(parents, n_clusters: int) -> np.ndarray:
    """Flat clustering with exactly ``n_clusters`` clusters from a binary hierarchy.

    The hierarchy is the canonical binary partition tree built by
    :func:`hiseg.build_hierarchy` / ``higra.bpt_canonical``: leaves ``0..N-1``, internal
    nodes numbered in the order of their merges (so altitudes never decrease with the
    node id), root last.  Removing the ``n_clusters - 1`` last merges (the internal nodes
    with the largest ids, hence the highest altitudes) leaves exactly ``n_clusters``
    subtrees; their leaves are the clusters.

    Ties: when several merges share the altitude of the cut, a cut *by altitude* could
    not give exactly ``n_clusters`` clusters; the merge order decides instead (merges at
    equal altitude are ordered by edge index, as Kruskal's algorithm in
    :func:`hiseg.ultrametric.canonical_edge_order` processes them), so the merges of the
    tie that Kruskal made last are undone first.  The result is deterministic.

    Parameters
    ----------
    parents : int array (2N - 1,) or higra ``Tree``
        Parent array of a binary tree whose parents have larger ids than their children.
    n_clusters : int in ``[1, N]``

    Returns
    -------
    labels : int64 array (N,) with values ``0..n_clusters-1``; clusters are numbered
        in the order of their smallest sample index.

    Cost: O(N).

    Raises
    ------
    ValueError
        ``n_clusters`` outside ``[1, N]`` or a tree that is not binary.
    """
    if hasattr(parents, "parents") and callable(parents.parents):
        parents = parents.parents()
    parents = np.asarray(parents, dtype=np.int64)
    n_nodes = parents.shape[0]
    n = (n_nodes + 1) // 2
    if n_nodes != 2 * n - 1:
        raise ValueError(f"cut_num_clusters expects a binary tree (2N - 1 nodes), got {n_nodes} nodes")
    if isinstance(n_clusters, bool) or not isinstance(n_clusters, numbers.Integral):
        raise TypeError(f"n_clusters must be an integer, got {type(n_clusters).__name__}")
    if not 1 <= n_clusters <= n:
        raise ValueError(f"n_clusters must be in [1, n_samples = {n}], got {n_clusters}")
    keep = n_nodes - (int(n_clusters) - 1)  # nodes [0, keep) survive the cut
    rep = _cluster_roots(parents, keep)[:n]
    roots, first = np.unique(rep, return_index=True)
    lut = np.empty(n_nodes, dtype=np.int64)
    lut[roots[np.argsort(first, kind="stable")]] = np.arange(roots.size)
    return lut[rep]


def _cluster_roots(parents: np.ndarray, keep: int) -> np.ndarray:
    """For every node, its highest ancestor among the kept nodes ``[0, keep)``. O(N)."""
    import higra as hg

    tree = hg.Tree(parents)
    values = np.arange(parents.shape[0], dtype=np.int64)
    # condition[n]: n takes its parent's value (the parent is kept, n is not the root)
    condition = parents < keep
    condition[-1] = False
    return np.asarray(hg.propagate_sequential(tree, values, condition), dtype=np.int64)


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
    ``n_neighbors`` nearest neighbours and the edges of the Euclidean minimum spanning
    tree are added so that the graph is connected; edge weights are Euclidean
    distances.  An ultrametric on that graph is fitted by gradient descent
    (:func:`hiseg.fitting.fit_ultrametric`, AMSGrad on :math:`J(\Phi(\tilde w))`); its
    single-linkage tree is the hierarchy, cut into ``n_clusters`` clusters.

    Parameters
    ----------
    n_clusters : int, default=2
        Number of flat clusters of ``labels_`` (a cut of the hierarchy that removes its
        ``n_clusters - 1`` highest merges; see :func:`cut_num_clusters` for ties).
    loss : {"closest+size", "closest", "closest+triplet", "closest+size+triplet", "dasgupta", \
            "dasgupta+size"}, default="closest+size"
        The cost function: closest ultrametric (mean squared error to the input
        distances), plus the cluster-size regularisation (``size``), plus the triplet
        term built from the partial labels ``y`` (``triplet``), or the relaxed Dasgupta
        cost (with the kNN distances as dissimilarities). With the triplet term alone,
        the labelled classes are separated inside the hierarchy but unlabelled outliers
        may still be merged last, so that a cut into few clusters isolates them; adding
        ``size`` (``"closest+size+triplet"``) pushes such merges down
        (``experiments/real.py``, breast cancer).
    size_weight : float, default=10.0
        Weight of the cluster-size term (the paper's unsupervised setting: 10 with the
        top 10 nodes, for features scaled to [-1, 1]). The closest term scales as the
        square of the feature distances and the size term linearly: rescale it with the
        data.
    top_nodes : int, default=10
        Only the edges whose lca is one of the ``top_nodes`` highest nodes enter the
        cluster-size term (0: all of them).
    triplet_weight : float, default=1.0
        Weight of the triplet term.
    margin : float, default=1.0
        Margin :math:`\alpha` of the triplet term, in units of the feature distances.
    max_triplets : int or None, default=None
        Use that many triplets drawn at random (``random_state``) instead of all of
        them (all of them is O(L^3) for L labelled samples).
    sigmoid_slope : float, default=5.0
        Slope :math:`\lambda` of the soft cardinal of the Dasgupta losses.
    n_neighbors : int, default=5
        Number of nearest neighbours of the graph.
    lr : float or None, default=None
        Step size; None: 0.1 for AMSGrad/Adam/SGD (the paper's value, the softplus
        parametrisation makes it roughly a relative change of the weights), 1.0 for
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
        Seeds the triplet sampling (only used with ``max_triplets``).

    Attributes
    ----------
    labels_ : int64 ndarray (n_samples,)
        Cluster of every sample, ``0..n_clusters-1``.
    graph_ : :class:`hiseg.graph.EdgeList`
        The kNN + MST graph (``num_vertices = n_samples``).
    edge_weights_ : float64 ndarray (n_edges,)
        Euclidean length of each edge of ``graph_`` (the input of the fit).
    ultrametric_ : float64 ndarray (n_edges,)
        The fitted ultrametric on the edges of ``graph_``.
    parents_ : int64 ndarray (2 n_samples - 1,)
        Parent array of the fitted binary hierarchy (leaves are the samples).
    tree_ : higra ``Tree``
        The same hierarchy as a higra tree (built from ``parents_``).
    altitudes_ : float64 ndarray (2 n_samples - 1,)
        Altitude of every node of ``tree_`` (0 for the leaves); the ultrametric
        distance of two samples is the altitude of their lowest common ancestor.
    loss_history_ : list of float
        Loss value at every iteration.
    n_iter_ : int
        Number of iterations run.
    n_features_in_ : int
    feature_names_in_ : ndarray of str (only when ``X`` has string column names)

    Notes
    -----
    Cost of ``fit``: O(n^2) time and memory for the exact minimum spanning tree of the
    complete graph (see :func:`hiseg.graph.knn_graph`; fine up to ~2e4 samples), then
    ``max_iter`` iterations of O(E log E) each (E ~ n_neighbors * n edges) plus the
    loss: O(|T|) for the triplet term, O(n K) for Dasgupta.

    There is no ``predict``: a hierarchy is fitted on the given samples only.

    Examples
    --------
    >>> from sklearn.datasets import make_blobs
    >>> from hiseg import UltrametricClustering
    >>> X, _ = make_blobs(60, centers=3, random_state=0)
    >>> UltrametricClustering(n_clusters=3).fit(X).labels_.shape
    (60,)
    """

    _LOSSES = ("closest", "closest+size", "closest+triplet", "closest+size+triplet", "dasgupta", "dasgupta+size")

    def __init__(self, n_clusters=2, loss="closest+size", *, size_weight=10.0, top_nodes=10,
                 triplet_weight=1.0, margin=1.0, max_triplets=None, sigmoid_slope=5.0,
                 n_neighbors=5, lr=None, max_iter=200, positivity="softplus", patience=50,
                 optimizer="amsgrad", random_state=None):
        self.n_clusters = n_clusters
        self.loss = loss
        self.size_weight = size_weight
        self.top_nodes = top_nodes
        self.triplet_weight = triplet_weight
        self.margin = margin
        self.max_triplets = max_triplets
        self.sigmoid_slope = sigmoid_slope
        self.n_neighbors = n_neighbors
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

        if self.loss not in self._LOSSES:
            raise ValueError(f"loss must be one of {self._LOSSES}, got {self.loss!r}")
        integer("n_clusters", 1)
        integer("n_neighbors", 1)
        integer("top_nodes", 0)
        integer("max_iter", 1)
        integer("patience", 1, allow_none=True)
        integer("max_triplets", 1, allow_none=True)
        if self.lr is not None:
            real("lr", positive=True)
        real("sigmoid_slope", positive=True)
        for name in ("size_weight", "triplet_weight", "margin"):
            real(name)
        if self.positivity not in ("softplus", "relu", "exp", None):
            raise ValueError(f"positivity must be 'softplus', 'relu', 'exp' or None, got {self.positivity!r}")
        if self.optimizer not in ("amsgrad", "adam", "sgd", "newton"):
            raise ValueError(f"optimizer must be 'amsgrad', 'adam', 'sgd' or 'newton', got {self.optimizer!r}")
        if self.optimizer == "newton" and self.loss.startswith("dasgupta"):
            raise ValueError("optimizer='newton' needs a closest term; use it with the closest losses")

    def _check_y(self, y, n_samples):
        """Partial labels for the triplet term: (n_samples,) ints (or any labels), -1 = unlabelled."""
        uses_y = "triplet" in self.loss
        if y is None:
            if uses_y:
                raise ValueError(f"loss {self.loss!r} needs partial labels: call fit(X, y) with y of "
                                 "length n_samples and -1 for the unlabelled samples")
            return None
        y = column_or_1d(y, warn=True)
        if y.shape[0] != n_samples:
            raise ValueError(f"y has {y.shape[0]} labels but X has {n_samples} samples "
                             "(give -1 for the unlabelled samples)")
        if not uses_y:
            return None  # accepted for API compatibility (pipelines, cross-validation), unused
        if y.dtype.kind in "OUS":
            unl = np.array([v == -1 or v == "-1" or v is None for v in y])
            codes = np.full(n_samples, -1, dtype=np.int64)
            if (~unl).any():
                _, codes[~unl] = np.unique(y[~unl].astype(str), return_inverse=True)
            y = codes
        else:
            if y.dtype.kind == "f":
                if not np.all(np.isfinite(y)):
                    raise ValueError("y contains NaN or infinite values; mark unlabelled samples with -1")
                if np.any(y != np.round(y)):
                    raise ValueError("y must hold class labels (integers, -1 = unlabelled), "
                                     "got non-integer values")
            y = y.astype(np.int64)
            if np.any(y < -1):
                raise ValueError("y holds negative labels other than -1 (the unlabelled marker)")
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
        y : array-like (n_samples,) or None
            Partial labels, ``-1`` for the unlabelled samples; used by the triplet term of
            the triplet losses (required then), ignored by the other losses.

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
        """
        import torch

        from .fitting import fit_ultrametric
        from .graph import knn_graph

        self._check_params()
        X = _validate_data(self, X, reset=True)
        n = X.shape[0]
        if n < self.n_neighbors + 1:
            raise ValueError(f"{type(self).__name__} needs n_samples >= n_neighbors + 1 = "
                             f"{self.n_neighbors + 1}, got n_samples = {n}; lower n_neighbors "
                             "or give more samples")
        if self.n_clusters > n:
            raise ValueError(f"n_clusters = {self.n_clusters} is larger than n_samples = {n}")
        y = self._check_y(y, n)
        graph, w = knn_graph(X, self.n_neighbors)
        kw = {}
        terms = self.loss.split("+")
        if "size" in terms:
            kw.update(size_weight=float(self.size_weight), top_nodes=int(self.top_nodes))
        if "triplet" in terms:
            seed = self.random_state
            if seed is not None and not isinstance(seed, numbers.Integral):  # a RandomState instance
                seed = int(check_random_state(seed).randint(np.iinfo(np.int32).max))
            kw.update(labels=y, triplet_weight=float(self.triplet_weight), margin=float(self.margin),
                      max_triplets=self.max_triplets, random_state=seed)
        fit_w = w
        if terms[0] == "dasgupta":
            kw.update(sigmoid_slope=float(self.sigmoid_slope))
            # duplicated samples give zero distances, which the dissimilarity mode divides by
            if w.size and w.max() > 0:
                fit_w = np.maximum(w, 1e-9 * w.max())
            else:
                fit_w = np.ones_like(w)
        with torch.no_grad():
            wt = torch.as_tensor(fit_w, dtype=torch.float64)
        lr = None if self.lr is None else float(self.lr)
        res = fit_ultrametric(graph, wt, loss=self.loss, lr=lr, max_iter=int(self.max_iter),
                              positivity=self.positivity, patience=self.patience,
                              optimizer=self.optimizer, full_output=True, **kw)
        h = res.hierarchy
        best = res.ultrametric.detach()
        self.graph_ = graph
        self.edge_weights_ = w
        self.ultrametric_ = best.cpu().numpy().astype(np.float64)
        self.parents_ = np.asarray(h.parents, dtype=np.int64)
        # node altitudes: the building (MST) edge of a node is its own pass edge, so the
        # ultrametric carries the best iterate's values there
        self.altitudes_ = h.node_altitudes(best).detach().cpu().numpy().astype(np.float64)
        self.loss_history_ = list(res.history)
        self.n_iter_ = int(res.n_iter)
        self.labels_ = cut_num_clusters(self.parents_, int(self.n_clusters))
        return self

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

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.input_tags.allow_nan = False
        tags.input_tags.sparse = False
        return tags

    def _more_tags(self):  # scikit-learn < 1.6
        return {"allow_nan": False}
