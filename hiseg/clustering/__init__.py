r"""Hierarchical clustering by ultrametric fitting: a scikit-learn style estimator.

:class:`UltrametricClustering` builds the paper's graph on the samples (k nearest
neighbours made connected by spanning edges, :func:`hiseg.core.builders.knn_graph`, without n^2
memory), fits an ultrametric on its edges and cuts the resulting hierarchy into
``n_clusters`` flat clusters with a size-aware cut (:mod:`hiseg.core.cuts`). The default
(``loss="auto"``) refines Ward's hierarchy and average linkage by descent on the relaxed
Dasgupta cost and keeps the lowest exact cost (:mod:`hiseg.clustering.refine`); the
paper's losses (closest, cluster size, triplet, Dasgupta) go through
:func:`hiseg.core.fitting.fit_ultrametric`.

Partial labels ``y`` (``-1`` = unlabelled) feed the triplet term of the semi-supervised
losses ``"closest+triplet"`` and ``"closest+size+triplet"`` and set the cut's minimum
cluster size; the other losses ignore them. There is no ``predict``: the hierarchy is
defined on the fitted samples only.

The package, in the order of a fit:

* :mod:`hiseg.clustering.labels` -- partial labels (any values) as int64 codes, ``-1`` unlabelled;
* :mod:`hiseg.clustering.refine` -- the default's refinement (Dasgupta relaxation, exact cost kept);
* :mod:`hiseg.clustering.auto` -- the automatic choices (which graphs and starts to fit,
  the score that keeps one);
* :mod:`hiseg.clustering.params` -- the estimator's parameter and partial-label checks;
* :mod:`hiseg.clustering.candidates` -- its graphs and the fits it tries and keeps;
* :mod:`hiseg.clustering.estimator` -- :class:`UltrametricClustering` itself (parameters,
  ``fit``, the fitted attributes).

The measures of a whole hierarchy, :func:`dendrogram_purity` and :func:`dasgupta_cost`
(for any hiseg hierarchy, fitted estimator, scipy linkage matrix or higra tree), are
:mod:`hiseg.metrics.hierarchy`'s; they and :func:`~hiseg.core.cuts.cut_hierarchy` are
re-exported here, as before the split.
"""
from __future__ import annotations

from ..core.cuts import cut_hierarchy
from ..metrics.hierarchy import as_tree, dasgupta_cost, dendrogram_purity
from .estimator import UltrametricClustering

__all__ = ["UltrametricClustering", "cut_hierarchy", "as_tree", "dendrogram_purity", "dasgupta_cost"]
