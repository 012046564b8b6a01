"""The automatic choices of :class:`hiseg.UltrametricClustering`: which fits to make and which to keep.

``loss="auto"`` (the default) refines linkages by descent on the relaxed Dasgupta cost
(:mod:`hiseg.clustering.refine`):

* :func:`refine_neighbours`: the neighbour count of its graph;
* :func:`refine_starts`: the linkages it starts from (the lowest exact Dasgupta cost keeps one);
* :func:`resolved_loss`: the refinement up to :data:`REFINE_MAX_POINTS` samples, the paper's
  closest+size above.

For the paper's losses, ``dissimilarity="auto"`` and ``init="auto"`` fit several candidates
(input dissimilarity, neighbour count, start) and keep one:

* :func:`candidate_graphs`: the (dissimilarity, neighbour count) pairs to fit;
* :func:`candidate_starts`: the starts of the descent for one of them;
* :func:`candidate_score`: the score that picks the kept fit (higher is better): the
  accuracy on the labelled samples (:func:`labelled_accuracy`) with partial labels, the
  label-free :func:`internal_score` without.

The rules and their constants were chosen on pilot draws (``experiments/paper/hierarchies.py
--pilot``, ``experiments/paper/toy.py``, ``experiments/paper/real.py``); the estimator's docstring says
what each setting does.
"""
from __future__ import annotations

import numpy as np

from ..metrics.hierarchy import dasgupta_cost

__all__ = ["refine_neighbours", "refine_starts", "resolved_loss", "AUTO_LOSS", "REFINE_MAX_POINTS",
           "candidate_graphs", "candidate_starts", "candidate_score", "internal_score", "labelled_accuracy",
           "neighbour_count", "DISSIMILARITIES", "DEFAULT_NEIGHBORS", "AUTO_UNSUPERVISED",
           "AUTO_SELECT_MAX_POINTS", "AUTO_AVERAGE_START_MAX_POINTS"]

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
#: (toy seeds 100-104, mixture seeds 11-13; ``experiments/paper/hierarchies.py --pilot``)
AUTO_UNSUPERVISED = (("euclidean", 5), ("euclidean", 10), ("ward", 15))
AUTO_SELECT_MAX_POINTS = 20000

#: the default loss: the refinement of :mod:`hiseg.clustering.refine` up to
#: :data:`REFINE_MAX_POINTS` samples, the paper's closest+size above (its soft cardinals cost
#: O(N K) per iteration for K ~ 20-200 sigmoid terms, on top of the O(E log E) hierarchy)
AUTO_LOSS = "auto"
REFINE_MAX_POINTS = 20000
#: the fewest neighbours of the refinement's graph (with fewer samples than its
#: :data:`~hiseg.clustering.refine.REFINE_NEIGHBORS` + 1, every other sample down to this)
REFINE_MIN_NEIGHBORS = 5


def resolved_loss(loss: str, n: int) -> str:
    """The loss fitted on ``n`` samples: ``loss``, or for ``"auto"`` the refinement (itself
    ``"auto"``) up to :data:`REFINE_MAX_POINTS` samples and ``"closest+size"`` above."""
    if loss == AUTO_LOSS and n > REFINE_MAX_POINTS:
        return "closest+size"
    return loss


def refine_neighbours(n_neighbors, n: int, name: str) -> int:
    """The refinement graph's neighbour count: ``n_neighbors``, or
    :data:`~hiseg.clustering.refine.REFINE_NEIGHBORS` (at most ``n - 1``, at least
    :data:`REFINE_MIN_NEIGHBORS`). ValueError (naming the estimator) when ``n`` is too small
    for it."""
    from .refine import REFINE_NEIGHBORS

    k = int(n_neighbors) if n_neighbors is not None else max(REFINE_MIN_NEIGHBORS, min(REFINE_NEIGHBORS, n - 1))
    if n < k + 1:
        raise ValueError(f"{name} needs n_samples >= n_neighbors + 1 = {k + 1}, got n_samples = {n}; "
                         "lower n_neighbors or give more samples")
    return k


def refine_starts(dissimilarity: str, init, n: int) -> list:
    """The starts of the refinement (``loss="auto"``), each fitted, the lowest exact Dasgupta
    cost kept: ``dissimilarity="ward"``: Ward's heights; ``"euclidean"``: ``init`` (``"auto"``:
    average linkage); ``"auto"`` with ``init="auto"``: both Ward's heights and average
    linkage (:data:`~hiseg.clustering.refine.REFINE_STARTS`; Ward's alone above
    :data:`AUTO_AVERAGE_START_MAX_POINTS` samples), with another ``init``: that one. O(1)."""
    from .refine import REFINE_STARTS

    if dissimilarity == "ward":
        return ["ward"]
    if isinstance(init, str) and init == "auto":
        if dissimilarity == "euclidean":
            return ["average"]
        return [s for s in REFINE_STARTS if s != "average" or n <= AUTO_AVERAGE_START_MAX_POINTS]
    return [init]


def neighbour_count(dissimilarity: str, n_neighbors) -> int:
    """The graph's neighbour count: ``n_neighbors``, or the default of the dissimilarity."""
    return DEFAULT_NEIGHBORS[dissimilarity] if n_neighbors is None else int(n_neighbors)


def candidate_graphs(dissimilarity: str, n_neighbors, init, n: int, labelled: bool, name: str) -> list:
    """The (input dissimilarity, neighbour count) pairs to fit on ``n`` samples.

    ``dissimilarity``, or for ``"auto"``: with partial labels (``labelled``) Euclidean and
    Ward's heights (the cut that agrees best with the labelled samples is kept); without,
    up to :data:`AUTO_SELECT_MAX_POINTS` samples the :data:`AUTO_UNSUPERVISED` candidates
    (lowest normalised cut kept), above Euclidean only; an array ``init`` disables the
    choice. O(1). Raises ValueError (naming the estimator ``name``) when the single
    candidate's graph cannot have its neighbours (``n < k + 1``).
    """
    d = dissimilarity
    if d == "auto":
        d = "euclidean"
        ward_k = neighbour_count("ward", n_neighbors)
        if labelled and isinstance(init, str) and n >= ward_k + 1:
            return [("euclidean", neighbour_count("euclidean", n_neighbors)), ("ward", ward_k)]
        if not labelled and isinstance(init, str) and n <= AUTO_SELECT_MAX_POINTS:
            cands = (AUTO_UNSUPERVISED if n_neighbors is None else
                     (("euclidean", int(n_neighbors)), ("ward", int(n_neighbors))))
            cands = [(c, k) for c, k in cands if n >= k + 1]
            if len(cands) > 1:
                return cands
    k = neighbour_count(d, n_neighbors)
    if n < k + 1:
        raise ValueError(f"{name} needs n_samples >= n_neighbors + 1 = "
                         f"{k + 1}, got n_samples = {n}; lower n_neighbors "
                         "or give more samples")
    return [(d, k)]


def candidate_starts(init, n: int, labelled: bool, dissimilarity: str) -> list:
    """The starts to fit from: ``init``, or for ``"auto"`` average linkage (the input above
    :data:`AUTO_AVERAGE_START_MAX_POINTS` samples); with partial labels both, the cut that
    agrees best with the labelled samples is kept. Ward's heights: the input. O(1)."""
    if not (isinstance(init, str) and init == "auto"):
        return [init]
    if dissimilarity == "ward":  # already an ultrametric: the closest term's optimum
        return ["input"]
    if n > AUTO_AVERAGE_START_MAX_POINTS:  # higra's average linkage is quadratic at worst
        return ["input"]
    return ["average", "input"] if labelled else ["average"]


def candidate_score(labels, h, y, knn_graph_lengths, n_graphs: int) -> tuple:
    """The score of one candidate fit (tuples compare; higher is better): ``(accuracy,)``
    on the labelled samples with partial labels ``y``; without, :func:`internal_score`
    when there are several graphs to choose from, else ``()`` (no choice to make)."""
    if y is not None:
        return (float(labelled_accuracy(labels, y)),)
    if n_graphs > 1:
        return internal_score(labels, h, knn_graph_lengths)
    return ()


def internal_score(labels, h, knn_graph_lengths) -> tuple:
    """Label-free score of a candidate fit (higher is better): minus the normalised cut
    of its clusters on the Euclidean kNN graph with similarities exp(-(d / mean d)^2)
    (sum over clusters of cut / volume), ties (1e-9) broken by minus the hierarchy's
    normalised Dasgupta cost on the same graph. O(E + n)."""
    g, d = knn_graph_lengths
    sim = np.exp(-(d / d.mean()) ** 2) if d.size and d.mean() > 0 else np.ones_like(d)
    a, b = labels[g.sources], labels[g.targets]
    k = int(labels.max()) + 1
    vol = np.bincount(a, sim, k) + np.bincount(b, sim, k)
    cut = a != b
    cuts = np.bincount(a[cut], sim[cut], k) + np.bincount(b[cut], sim[cut], k)
    ncut = float(np.sum(cuts / np.maximum(vol, np.finfo(float).tiny)))
    return (-round(ncut, 9), -float(dasgupta_cost(h.parents, g, sim, normalize=True)))


def labelled_accuracy(labels, y) -> float:
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
