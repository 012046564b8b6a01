"""The fits :class:`~hiseg.clustering.UltrametricClustering` tries and the one it keeps: its graphs
(kNN + spanning edges, the input dissimilarity on them), the default's refinement of each start,
the paper's losses fitted on every candidate graph and start. Apart from the estimator so that
its class holds the scikit-learn surface (parameters, ``fit``, the fitted attributes) and this
module the work; which candidates and which score are :mod:`hiseg.clustering.auto`'s."""
from __future__ import annotations

import numbers
import time

import numpy as np
from sklearn.utils import check_random_state

from ..core import losses
from ..core.cuts import AUTO_MIN_CLUSTER_FRACTION, cut_hierarchy, resolve_min_size
from ..core.fitting import fit_ultrametric
from . import auto, refine

__all__ = ["fit_refined", "fit_candidates", "candidate_graph", "min_cluster_size", "seed_of", "PAPER_MAX_ITER"]

#: ``max_iter=None`` for the paper's losses (``loss="auto"``: :data:`hiseg.clustering.refine.REFINE_MAX_ITER`)
PAPER_MAX_ITER = 200


def seed_of(est):
    """``random_state`` as an int or None (a RandomState instance draws one)."""
    seed = est.random_state
    if seed is not None and not isinstance(seed, numbers.Integral):
        seed = int(check_random_state(seed).randint(np.iinfo(np.int32).max))
    return seed


def fit_refined(est, X):
    """``loss="auto"``: refine each start (:func:`hiseg.clustering.auto.refine_starts`) on
    the Euclidean graph and keep the lowest exact Dasgupta cost (ties: the first start), or
    with ``selection="entropy"`` the lowest structural entropy of the refined fits and their
    starts. Returns what :func:`fit_candidates` returns; reads no label."""
    n = X.shape[0]
    seed = seed_of(est)
    k = auto.refine_neighbours(est.n_neighbors, n, type(est).__name__)
    timings = dict(graph=0.0, fit=0.0, cut=0.0)
    t0 = time.perf_counter()
    graph, w = candidate_graph(est, X, "euclidean", k, seed, {})
    similarities = refine.gaussian_similarities(w)
    timings["graph"] += time.perf_counter() - t0
    min_size = min_cluster_size(est, None, n)
    settings = dict(sigmoid_slope=float(est.sigmoid_slope), patience=est.patience, positivity=est.positivity,
                    optimizer=est.optimizer,
                    lr=refine.REFINE_LR if est.lr is None else float(est.lr),
                    max_iter=refine.REFINE_MAX_ITER if est.max_iter is None else int(est.max_iter))
    best, candidates = None, []
    for start in auto.refine_starts(est.dissimilarity, est.init, n):
        t = time.perf_counter()
        u0, scale = refine.start_ultrametric(start, graph, w, X)
        name = start if isinstance(start, str) else "array"
        fits = [refine.refine(graph, similarities, u0, start_name=name, **settings)]
        if est.selection == "entropy":  # the start itself is a candidate too
            fits.insert(0, refine.unrefined(graph, similarities, u0, start_name=name))
        timings["fit"] += time.perf_counter() - t
        dissimilarity = "ward" if name == "ward" else "euclidean"
        for fit in fits:
            t2 = time.perf_counter()
            labels = cut_hierarchy(fit.hierarchy, int(est.n_clusters), min_size)
            timings["cut"] += time.perf_counter() - t2
            cost = fit.cost if est.selection == "dasgupta" else refine.exact_entropy(fit.hierarchy, similarities)
            candidates.append(dict(dissimilarity=dissimilarity, n_neighbors=k, init=name, refined=bool(fit.n_iter),
                                   score=(-cost,)))
            if best is None or -cost > best["score"][0]:  # ties: the first candidate
                best = dict(dissimilarity=dissimilarity, k=k, init=start, res=fit, labels=labels, graph=graph,
                            w=w, scale=scale, min_size=min_size, score=(-cost,))
    return best, candidates, timings


def fit_candidates(est, X, y, loss):
    """Fit every candidate (:mod:`hiseg.clustering.auto`: graphs, then starts) of one of
    the paper's ``loss`` and keep the best score (ties: the first). Returns (the kept fit
    as a dict, the candidates' records, the seconds spent on graphs, fits and cuts)."""
    import torch

    n = X.shape[0]
    seed = seed_of(est)
    # every setting goes to the loss (the registry's terms read theirs); labels where a term needs them
    needs = losses.Objective(loss).needs
    kw = dict(size_weight=float(est.size_weight), top_nodes=int(est.top_nodes),
              triplet_weight=float(est.triplet_weight), margin=float(est.margin),
              max_triplets=est.max_triplets, random_state=seed, sigmoid_slope=float(est.sigmoid_slope),
              labels=y if {"labels", "triplets"} & needs else None)
    min_size = min_cluster_size(est, y, n)
    lr = None if est.lr is None else float(est.lr)
    max_iter = PAPER_MAX_ITER if est.max_iter is None else int(est.max_iter)
    graphs = auto.candidate_graphs(est.dissimilarity, est.n_neighbors, est.init, n, y is not None,
                                   type(est).__name__)
    best, candidates, timings = None, [], dict(graph=0.0, fit=0.0, cut=0.0)
    knn = {}  # neighbour count -> (graph, edge lengths): built once when both fits share it
    for dissimilarity, k in graphs:
        t0 = time.perf_counter()
        graph, w = candidate_graph(est, X, dissimilarity, k, seed, knn)
        timings["graph"] += time.perf_counter() - t0
        # the fit sees distances in units of their mean: scale-free losses and settings
        scale = float(w.mean()) if w.size and w.max() > 0 else 1.0
        if "graph_weights" in needs:  # the soft cardinal's costs: a bounded altitude range (duplicates)
            scale = max(scale, float(w.max()) / refine.START_MAX_SPREAD)
        fit_w = w / scale
        if "graph_weights" in needs:
            # duplicated samples give zero distances, which the dissimilarity mode divides by
            fit_w = np.maximum(fit_w, 1e-9 * fit_w.max()) if fit_w.max() > 0 else np.ones_like(fit_w)
        with torch.no_grad():
            wt = torch.as_tensor(fit_w, dtype=torch.float64)
        for init in auto.candidate_starts(est.init, n, y is not None, dissimilarity):
            t = time.perf_counter()
            res = fit_ultrametric(graph, wt, loss=loss, lr=lr, max_iter=max_iter,
                                  positivity=est.positivity, patience=est.patience, init=init,
                                  optimizer=est.optimizer, **kw)
            t2 = time.perf_counter()
            labels = cut_hierarchy(res.hierarchy, int(est.n_clusters), min_size)
            timings["fit"] += t2 - t
            timings["cut"] += time.perf_counter() - t2
            score = auto.candidate_score(labels, res.hierarchy, y, knn.get(graphs[0][1]), len(graphs))
            candidates.append(dict(dissimilarity=dissimilarity, n_neighbors=k,
                                   init=init if isinstance(init, str) else "array", score=score))
            if best is None or score > best["score"]:  # ties: the first candidate
                best = dict(score=score, dissimilarity=dissimilarity, k=k, init=init, res=res, labels=labels,
                            graph=graph, w=w, scale=scale, min_size=min_size)
    return best, candidates, timings


def candidate_graph(est, X, dissimilarity, k, seed, knn: dict):
    """The kNN + spanning-edges graph (``k`` neighbours) and the input dissimilarity on
    its edges; ``knn`` caches the graphs by neighbour count."""
    from ..core.builders import knn_graph

    if k not in knn:
        knn[k] = knn_graph(X, k, connect=est.connect, method=est.knn,
                           random_state=0 if seed is None else seed)
    graph, w = knn[k]
    if dissimilarity == "ward":
        from ..core.ward import ward_linkage_ultrametric

        w = ward_linkage_ultrametric(graph, X)
    return graph, w


def min_cluster_size(est, y, n):
    """The minimum cluster size of the cut (samples)."""
    m = est.min_size
    if isinstance(m, str) and y is not None and (y >= 0).any():  # "auto" with partial labels
        # half the smallest labelled class share, in samples
        counts = np.bincount(y[y >= 0])
        share = counts[counts > 0].min() / counts.sum()
        return max(1.0, 0.5 * share * n)
    v = resolve_min_size(m, int(est.n_clusters), n, AUTO_MIN_CLUSTER_FRACTION)
    return max(1.0, v) if isinstance(m, str) else v
