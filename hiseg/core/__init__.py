"""The paper's layer (Chierchia & Perret, NeurIPS 2019): no I/O, no Lightning, no image code.

* :mod:`~hiseg.core.graph`: sparse graphs as edge lists, batching, builders (grid, kNN + MST, RAG);
* :mod:`~hiseg.core.ultrametric`: the differentiable subdominant / average-linkage layer;
* :mod:`~hiseg.core.cuts`: cuts of a hierarchy into clusters;
* :mod:`~hiseg.core.losses`: closest, cluster-size, triplet and Dasgupta costs;
* :mod:`~hiseg.core.fitting`: Algorithm 1 (:func:`~hiseg.core.fitting.fit_ultrametric`).

Everything above (clustering, segmentation, training, metrics, cli) imports this package; it
imports none of them.
"""
