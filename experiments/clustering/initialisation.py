"""The start of the descent (issue 44, finding 3).

closest+size on the edge lengths of the 5-NN graph (the default's Euclidean candidate;
size weight 10, top 10 nodes) from: the input lengths (``init="input"``), the graph's
average-linkage ultrametric (``init="average"``, the default), Ward's heights on the same
graph (an array start: its hierarchy, rescaled to mean 1), and, for reference, the fit of
Ward's heights themselves on the 15-NN graph (the default's Ward candidate, whose closest
term is 0 at its start). Cells: dendrogram purity of the start -> of the fit.

Writes ``initialisation.md``. Usage: ``python experiments/clustering/initialisation.py`` (~10 s).
"""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import numpy as np  # noqa: E402

import measure  # noqa: E402
from fits import estimator_fit, start_of  # noqa: E402
from sets import benchmark_sets  # noqa: E402

from hiseg import knn_graph, ward_linkage_ultrametric  # noqa: E402

SETS = ("iris", "wine", "breast cancer")


def ward_start(X, k=5):
    """Ward's heights on the k-NN graph, mean 1 (the fit's unit is the mean edge length)."""
    g, _ = knn_graph(X, k)
    u = ward_linkage_ultrametric(g, X)
    return u / u.mean()


def main():
    data = benchmark_sets()
    starts = {"input lengths": dict(init="input"), "average linkage (default)": dict(init="average"),
              "Ward's heights (array)": None}
    lines = ["# The start of the descent", "",
             "closest+size on the 5-NN graph's edge lengths; cells: purity of the start -> of the fit. "
             "Last column: the default's Ward candidate (Ward's heights as the input, 15-NN graph).", "",
             "| set | " + " | ".join(starts) + " | Ward's heights as input | Ward (all pairs) | average (all pairs) |",
             "|---|" + "---:|" * (len(starts) + 3)]
    for name in SETS:
        X, y = data[name]
        k = len(np.unique(y))
        cells = []
        for label, params in starts.items():
            params = params or dict(init=ward_start(X))
            params = dict(loss="closest+size", dissimilarity="euclidean", n_neighbors=5, **params)
            fit, _ = estimator_fit(X, k, **params)
            cells.append(f"{measure.purity(start_of(X, k, **params), y):.3f} -> {measure.purity(fit, y):.3f}")
        params = dict(loss="closest+size", dissimilarity="ward")
        fit, _ = estimator_fit(X, k, **params)
        cells.append(f"{measure.purity(start_of(X, k, **params), y):.3f} -> {measure.purity(fit, y):.3f}")
        cells += [f"{measure.purity(measure.linkage_tree(X, m), y):.3f}" for m in ("ward", "average")]
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    measure.write_table(lines, __file__)


if __name__ == "__main__":
    main()
