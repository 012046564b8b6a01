"""Measures and baselines shared by the clustering experiments.

* :func:`dasgupta_reference`: Dasgupta's cost of a hierarchy on the set's 10-NN + MST
  graph with similarities ``exp(-(d / mean d)^2)``, divided by the flat tree's cost (lower
  is better): the convention of ``experiments/paper/hierarchies.py``, kept so that the numbers
  compare;
* :func:`linkage_tree`: scipy's linkages on all pairs, what a user tries first;
* :func:`geodesic_distances`: shortest-path lengths on a kNN + MST graph, a graph-based geometry;
* :func:`co_association`: how often two points share a k-means cluster over many runs, the
  evidence-accumulation (consensus) geometry;
* :func:`gap_summary`: how a method's purities compare with the better of Ward and average;
* :func:`write_table`: print a markdown table and write it next to the script.
"""
from __future__ import annotations

import os
import time
from functools import lru_cache
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")

import numpy as np  # noqa: E402
import torch  # noqa: E402

torch.set_num_threads(1)

from hiseg import knn_graph  # noqa: E402
from hiseg.metrics import dasgupta_cost, dendrogram_purity  # noqa: E402

__all__ = ["dasgupta_reference", "purity", "linkage_tree", "geodesic_distances", "co_association", "gap_summary",
           "better_linkage", "timed", "write_table", "LINKAGES"]

LINKAGES = ("ward", "average", "complete", "single")


@lru_cache(maxsize=64)
def _reference_graph(key):
    X = np.frombuffer(key[0]).reshape(key[1])
    g, d = knn_graph(X, 10)
    return g, np.exp(-(d / d.mean()) ** 2)


def dasgupta_reference(tree, X) -> float:
    """Normalised Dasgupta cost of ``tree`` on the 10-NN + MST graph of ``X``."""
    X = np.ascontiguousarray(X, dtype=np.float64)
    g, s = _reference_graph((X.tobytes(), X.shape))
    return dasgupta_cost(tree, g, s, normalize=True)


def purity(tree, y) -> float:
    """Exact dendrogram purity."""
    return dendrogram_purity(tree, y)


def linkage_tree(X, method: str):
    """scipy's linkage matrix of ``X`` (all pairs, Euclidean)."""
    from scipy.cluster.hierarchy import linkage

    return linkage(X, method)


def geodesic_distances(X, k: int) -> np.ndarray:
    """(n, n) shortest-path lengths on the ``k``-NN + MST graph of ``X`` (Euclidean edge
    lengths; connected, so all finite): O(n^2) memory, for small sets only."""
    from scipy.sparse import coo_matrix
    from scipy.sparse.csgraph import shortest_path

    g, d = knn_graph(X, k)
    n = X.shape[0]
    return shortest_path(coo_matrix((d, (g.sources, g.targets)), shape=(n, n)).tocsr(), directed=False)


def co_association(X, runs: int, k_range, *, features: float = 1.0, subsample: float = 1.0, seed: int = 0):
    """(n, n) share of the k-means runs, among those that drew both points, in which ``i`` and
    ``j`` fall in one cluster (1 on the diagonal). Each run draws ``k`` uniformly in ``k_range``
    (inclusive), a ``features`` share of the columns and a ``subsample`` share of the rows
    (without replacement; at least one column and ``k`` rows), and runs one k-means++ start:
    no label is used, so the matrix is a label-free geometry. O(runs n k d) time, O(n^2) memory."""
    from sklearn.cluster import KMeans

    X = np.asarray(X, dtype=np.float64)
    n, d = X.shape
    lo, hi = int(k_range[0]), int(k_range[1])
    if not 2 <= lo <= hi <= n:
        raise ValueError(f"k_range must satisfy 2 <= low <= high <= n = {n}, got {tuple(k_range)}")
    rng = np.random.default_rng(seed)
    together, drawn = np.zeros((n, n)), np.zeros((n, n))
    for _ in range(int(runs)):
        k = int(rng.integers(lo, hi + 1))
        cols = np.sort(rng.choice(d, max(1, round(features * d)), replace=False))
        rows = np.sort(rng.choice(n, max(k, round(subsample * n)), replace=False))
        labels = KMeans(k, n_init=1, random_state=int(rng.integers(2**31))).fit_predict(X[np.ix_(rows, cols)])
        onehot = np.zeros((rows.size, k))
        onehot[np.arange(rows.size), labels] = 1.0
        together[np.ix_(rows, rows)] += onehot @ onehot.T
        drawn[np.ix_(rows, rows)] += 1.0
    C = np.divide(together, drawn, out=np.zeros_like(together), where=drawn > 0)
    np.fill_diagonal(C, 1.0)
    return C


def better_linkage(X, y) -> float:
    """The purity of the better of scipy's Ward and average linkage: the bar of issue 44."""
    return max(purity(linkage_tree(X, m), y) for m in ("ward", "average"))


def gap_summary(values, best_of_two) -> str:
    """``mean | mean gap | below | worst`` table cells: the mean purity, the mean gap to the
    better of Ward and average per set, the sets more than 0.005 below it, the worst gap."""
    v, g = np.asarray(values), np.asarray(values) - np.asarray(best_of_two)
    return f"{v.mean():.3f} | {g.mean():+.3f} | {(g < -0.005).sum()} | {g.min():+.3f}"


def timed(fn, *args, **kw):
    """(result, seconds)."""
    t = time.perf_counter()
    out = fn(*args, **kw)
    return out, time.perf_counter() - t


def write_table(lines, script_file: str, name: str | None = None) -> Path:
    """Print the markdown ``lines`` and write them to ``<script>.md`` (or ``name``) next to
    the script."""
    here = Path(script_file).resolve()
    out = here.with_name(name) if name else here.with_suffix(".md")
    text = "\n".join(lines) + "\n"
    print(text)
    out.write_text(text)
    return out
