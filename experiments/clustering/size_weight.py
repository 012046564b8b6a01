"""The size term's weight (issue 44, finding 5).

closest+size with size weight 0 (closest alone) to 100 (10: the default), on the size term's
top 10 nodes (the default) or on all nodes (``top_nodes=0``), for the default's two kinds
of candidate: the 5-NN graph's edge lengths from average linkage, and Ward's heights on the
15-NN graph. Cells: dendrogram purity.

Writes ``size_weight.md``. Usage: ``python experiments/clustering/size_weight.py`` (~1 min).
"""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import numpy as np  # noqa: E402

import measure  # noqa: E402
from fits import estimator_fit  # noqa: E402
from sets import benchmark_sets  # noqa: E402

SETS = ("iris", "wine", "breast cancer")
WEIGHTS = (0.0, 1.0, 3.0, 10.0, 30.0, 100.0)
INPUTS = {"edge lengths, 5-NN": dict(dissimilarity="euclidean", n_neighbors=5, init="average"),
          "Ward's heights, 15-NN": dict(dissimilarity="ward")}


def main():
    data = benchmark_sets()
    lines = ["# The size term's weight", "", "closest+size; cells: dendrogram purity. *top*: the nodes whose "
             "edges enter the size term.", "",
             "| set | input | top | " + " | ".join(f"{w:g}" + (" (default)" if w == 10 else "") for w in WEIGHTS)
             + " |",
             "|---|---|---|" + "---:|" * len(WEIGHTS)]
    for name in SETS:
        X, y = data[name]
        k = len(np.unique(y))
        for label, inp in INPUTS.items():
            for top in (10, 0):
                fits = [estimator_fit(X, k, loss="closest+size", size_weight=w, top_nodes=top, **inp)[0]
                        for w in WEIGHTS]
                cells = [f"{measure.purity(est, y):.3f}" for est in fits]
                lines.append(f"| {name} | {label} | {top or 'all'} | " + " | ".join(cells) + " |")
    measure.write_table(lines, __file__)


if __name__ == "__main__":
    main()
