"""The paper's layer (Chierchia & Perret, NeurIPS 2019): no I/O, no Lightning, no image code.

* :mod:`~hiseg.core.graph`: sparse graphs as edge lists, batching, builders (grid, kNN + MST, RAG);
* :mod:`~hiseg.core.ultrametric`: the differentiable subdominant / average-linkage layer;
* :mod:`~hiseg.core.cuts`: cuts of a hierarchy into clusters;
* :mod:`~hiseg.core.losses`: closest, cluster-size, triplet and Dasgupta costs;
* :mod:`~hiseg.core.fitting`: Algorithm 1 (:func:`~hiseg.core.fitting.fit_ultrametric`).

Everything above (clustering, segmentation, training, metrics, cli) imports this package; it
imports none of them.
"""

import importlib as _importlib

_SUBMODULES = ("graph", "ultrametric", "cuts", "losses", "fitting")


def __getattr__(name):
    """``hiseg.core.losses`` (and the other modules) after a plain ``import hiseg``: imported on
    first use, as ``hiseg``'s own names are."""
    if name in _SUBMODULES:
        return _importlib.import_module(f"{__name__}.{name}")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__():
    return sorted(set(globals()) | set(_SUBMODULES))
