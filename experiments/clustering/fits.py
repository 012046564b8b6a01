"""The fits the clustering findings compare, and how far a fit moved from its start.

* :func:`estimator_fit`: :class:`hiseg.UltrametricClustering` with the given settings (its
  graph, scaling, descent and cut), timed;
* :func:`start_of`: the same settings stopped at the start (``max_iter=1``: the best
  iterate is the start's ultrametric);
* :func:`shared_clusters`: the share of one hierarchy's clusters that are clusters of
  another (1: the same hierarchy);
* :func:`refined_pool`: a linkage of another geometry as a third start of the default's
  refinement, the lowest exact cost kept; :func:`add_refined_pool` writes its purities into a
  row of an experiment's table.
"""
from __future__ import annotations

import time
import warnings

import numpy as np

from hiseg import UltrametricClustering

__all__ = ["estimator_fit", "start_of", "shared_clusters", "refined_pool", "add_refined_pool"]


def estimator_fit(X, n_clusters: int, **params):
    """(fitted estimator, seconds); ``random_state=0`` unless given."""
    params.setdefault("random_state", 0)
    est = UltrametricClustering(n_clusters=n_clusters, **params)
    t = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        est.fit(X)
    return est, time.perf_counter() - t


def start_of(X, n_clusters: int, **params):
    """The fitted estimator stopped at its start (one iteration: the start is the best iterate)."""
    return estimator_fit(X, n_clusters, **{**params, "max_iter": 1})[0]


def _clusters(parents) -> set:
    """The leaf sets of the internal nodes of a parent array (leaves first, root last)."""
    parents = np.asarray(parents)
    n = (parents.size + 1) // 2
    members = [frozenset([i]) for i in range(n)] + [frozenset() for _ in range(n - 1)]
    for child in range(parents.size - 1):
        p = parents[child]
        members[p] = members[p] | members[child]
    return set(members[n:])


def shared_clusters(parents_a, parents_b) -> float:
    """The share of the internal nodes of ``a`` whose leaf set is a node of ``b``. O(n^2)."""
    a, b = _clusters(parents_a), _clusters(parents_b)
    return len(a & b) / len(a)


def descent(X, n_clusters: int, *, record=(), **params):
    """The estimator's descent rerun with :func:`hiseg.fit_ultrametric`'s own options (``lr_decay``,
    a callback): ``params`` split into the estimator's (graph, dissimilarity, init, loss
    settings) and ``fit_ultrametric``'s (``lr``, ``lr_decay``, ``max_iter``, ``patience``,
    ``optimizer``). Returns (FitResult, {iteration: parents of that iterate's hierarchy} for
    the iterations in ``record``, seconds)."""
    import torch

    from hiseg import build_hierarchy, fit_ultrametric

    fit_keys = ("lr", "lr_decay", "max_iter", "patience", "optimizer")
    fit_kw = {k: params.pop(k) for k in fit_keys if k in params}
    start = start_of(X, n_clusters, **params)
    w = torch.as_tensor(start.edge_weights_ / start.weight_scale_)
    trees = {}

    def keep(it, loss, u):
        if it in record:
            trees[it] = np.asarray(build_hierarchy(start.graph_, u).parents)

    t = time.perf_counter()
    res = fit_ultrametric(start.graph_, w, loss=params.get("loss", "closest+size"), init=start.init_,
                          size_weight=float(params.get("size_weight", 10.0)), top_nodes=int(params.get("top_nodes", 10)),
                          callback=keep if record else None, **{"max_iter": 200, "patience": 50, **fit_kw})
    return res, trees, time.perf_counter() - t


def refined_per_start(X, n_clusters: int, **params) -> dict:
    """``loss="auto"`` from each of its default starts alone (``dissimilarity="ward"``: Ward's
    heights; ``"euclidean"``: average linkage), with the other settings ``params``; returns
    {start: (fitted estimator, CPU seconds)}. The default keeps the lower exact Dasgupta
    cost (``candidates_[0]["score"]``, minus the cost; ties: Ward's)."""
    out = {}
    for start, dissimilarity in (("ward", "ward"), ("average", "euclidean")):
        c = time.process_time()
        est, _ = estimator_fit(X, n_clusters, loss="auto", dissimilarity=dissimilarity, **params)
        out[start] = (est, time.process_time() - c)
    return out


def kept_start(per_start: dict) -> str:
    """The start the default keeps: the lowest exact Dasgupta cost, Ward's on ties."""
    return max(per_start, key=lambda s: (per_start[s][0].candidates_[0]["score"][0], s == "ward"))


def refined_pool(X, Z, name: str, *, heights: str = "cophenetic"):
    """The scipy linkage ``Z`` (another geometry's hierarchy, called ``name``) as a third start of
    the default's refinement (:mod:`hiseg.clustering.refine`: its cophenetic distances on the
    10-NN + MST graph's edges, over their mean), next to today's two. Returns ({"pool": the
    lowest exact cost of the three refined starts, "today": the lower of today's two, f"{name}
    refined"} -> parents, the start the pool kept, CPU seconds of the three refinements).

    ``heights="merge order"`` replaces ``Z``'s heights by its merges' ranks (1 .. n - 1), the same
    hierarchy: for geometries whose top merges are hundreds of times the typical edge's (cosine
    distances of separated clusters), where the relaxation's sigmoid expansion would need more
    terms than it allows."""
    from scipy.cluster.hierarchy import cophenet
    from scipy.spatial.distance import squareform

    from hiseg import knn_graph
    from hiseg.clustering import refine

    if heights not in ("cophenetic", "merge order"):
        raise ValueError(f"heights must be 'cophenetic' or 'merge order', got {heights!r}")
    if heights == "merge order":
        Z = np.column_stack([Z[:, :2], np.arange(1, len(Z) + 1), Z[:, 3]])
    t = time.process_time()
    graph, w = knn_graph(X, refine.REFINE_NEIGHBORS)
    s = refine.gaussian_similarities(w)
    u = squareform(cophenet(Z))[graph.sources, graph.targets]
    starts = {"ward (graph)": refine.start_ultrametric("ward", graph, w, X)[0],
              "average (graph)": refine.start_ultrametric("average", graph, w, X)[0],
              name: u / u.mean() if u.mean() > 0 else np.ones_like(u)}
    fits = {m: refine.refine(graph, s, v) for m, v in starts.items()}
    today = min(("ward (graph)", "average (graph)"), key=lambda m: fits[m].cost)
    best = min(fits, key=lambda m: fits[m].cost)
    return ({"pool": np.asarray(fits[best].hierarchy.parents), "today": np.asarray(fits[today].hierarchy.parents),
             f"{name} refined": np.asarray(fits[name].hierarchy.parents)}, best, time.process_time() - t)


def add_refined_pool(row, choice, name: str, **pool) -> None:
    """:func:`refined_pool` of ``row["trees"][choice][0]`` (``pool``: its options) written into
    ``row``: the purity and CPU seconds of ``"today"``, ``f"{name} refined"`` and ``"pool"`` (the
    last two with the choice's own seconds added), and the start the pool kept; printed."""
    from measure import purity

    parents, kept, s = refined_pool(row["X"], row["trees"][choice][0], name, **pool)
    for key, tree in parents.items():
        row["purity"][key] = purity(tree, row["y"])
        row["seconds"][key] = s + (row["seconds"][choice] if key != "today" else 0.0)
    row["kept"] = kept
    print(row["name"], {k: round(row["purity"][k], 3) for k in ("today", f"{name} refined", "pool")}, kept,
          flush=True)
