"""The stopping rule (issue 44, finding 6).

closest+size (size weight 10, top 10 nodes, step 0.1) run for 1000 iterations without early
stopping, for the default's two kinds of candidate (the 5-NN graph's edge lengths from
average linkage; Ward's heights on the 15-NN graph). Dendrogram purity of the iterate at
iterations 0 (the start) to 999, of the iterate of lowest loss in those 1000 iterations,
and of what the default rule keeps (200 iterations at most, stop after 50 without a
relative improvement of 1e-6, the best iterate kept).

Writes ``stopping.md``. Usage: ``python experiments/clustering/stopping.py`` (~2 min).
"""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import numpy as np  # noqa: E402

import measure  # noqa: E402
from fits import descent  # noqa: E402
from sets import benchmark_sets  # noqa: E402

SETS = ("iris", "wine", "breast cancer")
AT = (0, 25, 50, 100, 200, 400, 999)
INPUTS = {"edge lengths, 5-NN": dict(dissimilarity="euclidean", n_neighbors=5, init="average"),
          "Ward's heights, 15-NN": dict(dissimilarity="ward")}


def main():
    data = benchmark_sets()
    lines = ["# The stopping rule", "",
             "closest+size; cells: dendrogram purity of the iterate at that iteration; *lowest loss*: of the "
             "iterate of lowest loss in 1000 iterations (its iteration); *default rule*: what 200 iterations "
             "with patience 50 keep (its iteration).", "",
             "| set | input | " + " | ".join(f"it. {i}" for i in AT) + " | lowest loss | default rule |",
             "|---|---|" + "---:|" * (len(AT) + 2)]
    for name in SETS:
        X, y = data[name]
        k = len(np.unique(y))
        for label, inp in INPUTS.items():
            long, trees, _ = descent(X, k, loss="closest+size", max_iter=1000, patience=None, record=AT, **inp)
            rule, _, _ = descent(X, k, loss="closest+size", **inp)
            cells = [f"{measure.purity(trees[i], y):.3f}" for i in AT]
            cells.append(f"{measure.purity(np.asarray(long.hierarchy.parents), y):.3f} ({long.best_iter})")
            cells.append(f"{measure.purity(np.asarray(rule.hierarchy.parents), y):.3f} ({rule.best_iter})")
            lines.append(f"| {name} | {label} | " + " | ".join(cells) + " |")
    measure.write_table(lines, __file__)


if __name__ == "__main__":
    main()
