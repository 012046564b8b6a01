"""The graph the fit sees: k nearest neighbours (k = 5, 10, 15, 30) against the complete
graph (issue 44, finding 2).

``UltrametricClustering(loss="closest+size")`` with one dissimilarity and graph at a time:
edge lengths from average linkage (the Euclidean candidate of the default) and Ward's
heights (its Ward candidate). For each: dendrogram purity of the start (the graph's
average-linkage ultrametric; Ward's hierarchy constrained to the graph) and of the fit, and
the fit's seconds. The complete graph has n(n-1)/2 edges (161,596 on breast cancer).

Writes ``graph_choice.md``. Usage: ``python experiments/clustering/graph_choice.py`` (~1 min).
"""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import numpy as np  # noqa: E402

import measure  # noqa: E402
from fits import estimator_fit, start_of  # noqa: E402
from sets import benchmark_sets  # noqa: E402

SETS = ("iris", "wine", "breast cancer")
NEIGHBOURS = (5, 10, 15, 30, "complete")
STARTS = {"euclidean": "average", "ward": "input"}


def main():
    data = benchmark_sets()
    lines = ["# The graph: k nearest neighbours against the complete graph", "",
             "closest+size (size weight 10, top 10 nodes), one graph at a time. Cells: purity of the "
             "start -> of the fit (seconds of the fit). Linkages on all pairs for reference: "
             + ", ".join(f"{n} Ward {measure.purity(measure.linkage_tree(X, 'ward'), y):.3f} / average "
                         f"{measure.purity(measure.linkage_tree(X, 'average'), y):.3f}"
                         for n, (X, y) in data.items() if n in SETS) + ".", "",
             "| set | input | " + " | ".join(f"{k}-NN" if k != "complete" else k for k in NEIGHBOURS) + " |",
             "|---|---|" + "---:|" * len(NEIGHBOURS)]
    for name in SETS:
        X, y = data[name]
        n_clusters = len(np.unique(y))
        for dissimilarity, init in STARTS.items():
            cells = []
            for k in NEIGHBOURS:
                params = dict(loss="closest+size", dissimilarity=dissimilarity, init=init,
                              n_neighbors=len(X) - 1 if k == "complete" else k)
                fit, seconds = estimator_fit(X, n_clusters, **params)
                start = start_of(X, n_clusters, **params)
                cells.append(f"{measure.purity(start, y):.3f} -> {measure.purity(fit, y):.3f} ({seconds:.1f} s)")
            label = "edge lengths, from average" if dissimilarity == "euclidean" else "Ward's heights"
            lines.append(f"| {name} | {label} | " + " | ".join(cells) + " |")
    measure.write_table(lines, __file__)


if __name__ == "__main__":
    main()
