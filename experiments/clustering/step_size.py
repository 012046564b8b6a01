"""Step size and schedule of the descent (issue 44, finding 4).

closest+size on the 5-NN graph's edge lengths from average linkage (the default's
Euclidean candidate) and on Ward's heights (15-NN, its Ward candidate), AMSGrad with a
constant step of 0.01 to 1 (0.1: the paper's and the default), an exponential decay
(``lr_decay``), and the estimator's ``optimizer="newton"`` (steps preconditioned by the
closest term's curvature). 200 iterations at most, patience 50, the best iterate kept.
Cells: dendrogram purity (iteration kept).

Writes ``step_size.md``. Usage: ``python experiments/clustering/step_size.py`` (~1 min).
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
STEPS = {"0.01": dict(lr=0.01), "0.03": dict(lr=0.03), "0.1 (default)": dict(lr=0.1), "0.3": dict(lr=0.3),
         "1.0": dict(lr=1.0), "0.3, x0.98 per it.": dict(lr=0.3, lr_decay=0.98),
         "1.0, x0.97 per it.": dict(lr=1.0, lr_decay=0.97), "newton, 1.0": dict(optimizer="newton", lr=1.0)}
INPUTS = {"edge lengths, 5-NN, from average": dict(dissimilarity="euclidean", n_neighbors=5, init="average"),
          "Ward's heights, 15-NN": dict(dissimilarity="ward")}


def main():
    data = benchmark_sets()
    lines = ["# Step size and schedule", "",
             "closest+size (size weight 10, top 10 nodes); cells: purity (iteration kept).", "",
             "| set | input | " + " | ".join(STEPS) + " |", "|---|---|" + "---:|" * len(STEPS)]
    for name in SETS:
        X, y = data[name]
        k = len(np.unique(y))
        for label, inp in INPUTS.items():
            cells = []
            for step in STEPS.values():
                res, _, _ = descent(X, k, loss="closest+size", **inp, **step)
                cells.append(f"{measure.purity(np.asarray(res.hierarchy.parents), y):.3f} ({res.best_iter})")
            lines.append(f"| {name} | {label} | " + " | ".join(cells) + " |")
    measure.write_table(lines, __file__)


if __name__ == "__main__":
    main()
