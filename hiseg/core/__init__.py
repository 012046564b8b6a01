"""The paper's layer (Chierchia & Perret, NeurIPS 2019): no I/O, no Lightning, no image code.

* :mod:`~hiseg.core.graph`: sparse graphs as edge lists, their checks (with their weights),
  batching, the region adjacency graph;
* :mod:`~hiseg.core.builders`: graphs of data (the pixel grid, kNN + spanning edges);
* :mod:`~hiseg.core.lca`: lowest common ancestors of a tree's leaves (a range-maximum query);
* :mod:`~hiseg.core.ultrametric`: the hierarchy and the differentiable subdominant (single-linkage) layer;
* :mod:`~hiseg.core.average_linkage`: the differentiable average-linkage layer;
* :mod:`~hiseg.core.device`: a training step's device copies (indices up in one copy, leaf lcas there);
* :mod:`~hiseg.core.ward`: Ward's hierarchy of points on a graph (a dissimilarity to fit, not a layer);
* :mod:`~hiseg.core.cuts`: cuts of a hierarchy into clusters;
* :mod:`~hiseg.core.losses`: closest, cluster-size, triplet and Dasgupta costs;
* :mod:`~hiseg.core.fitting`: Algorithm 1 (:func:`~hiseg.core.fitting.fit_ultrametric`).

Everything above (clustering, segmentation, training, metrics, cli) imports this package; it
imports none of them.
"""
from __future__ import annotations

import importlib

_MODULES = ("graph", "builders", "lca", "ultrametric", "average_linkage", "device", "ward", "cuts", "losses", "fitting")


def __getattr__(name):
    """``hiseg.core.losses`` and the others, imported when first used (as ``hiseg``'s names are)."""
    if name in _MODULES:
        return importlib.import_module(f"{__name__}.{name}")
    raise AttributeError(f"module 'hiseg.core' has no attribute {name!r}")


def __dir__():
    return sorted(set(globals()) | set(_MODULES))
