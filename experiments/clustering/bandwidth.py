"""The width of the similarity kernel of the default's Dasgupta cost (issue 44, the "never
below Ward or average" goal).

The default refines Ward's hierarchy and average linkage (both constrained to the 10-NN + MST
graph) on the relaxed Dasgupta cost with similarities ``exp(-(d / (c m))^2)``, ``m`` the mean
edge length, and keeps the lowest exact cost, with ``c = 1``. A wider kernel
(larger ``c``) flattens the similarities of the graph's longer edges, so that the cost weighs
a dense group's cohesion more than the chaining along its nearest neighbours. Each width is
used for both the descent and the choice of the start.

Per width and group: mean purity, mean gap to the better of Ward and average per set, sets
more than 0.005 below it, worst gap; a width would be chosen on the pilot group (the fewest
sets below, then the worst gap) and kept only if the held-out group confirms it. Then the per-set purities on
the benchmark and extra sets.

Writes ``bandwidth.md``. Usage: ``python experiments/clustering/bandwidth.py`` (~6 minutes on a shared 2-core machine).
"""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import numpy as np  # noqa: E402

import measure  # noqa: E402
from sets import groups  # noqa: E402

from hiseg import knn_graph  # noqa: E402
from hiseg.clustering import refine  # noqa: E402

WIDTHS = (1.0, 1.5, 2.0, 3.0)


def refined(X, y, width) -> float:
    """Purity of the default's refinement with the kernel width ``width`` (times the mean)."""
    graph, w = knn_graph(X, refine.REFINE_NEIGHBORS)
    s = np.exp(-(w / (width * w.mean())) ** 2)
    fits = [refine.refine(graph, s, refine.start_ultrametric(start, graph, w, X)[0]) for start in refine.REFINE_STARTS]
    return measure.purity(np.asarray(min(fits, key=lambda f: f.cost).hierarchy.parents), y)


def main():
    rows = {}
    for g, sets in groups().items():
        rows[g] = []
        for name, (X, y) in sets.items():
            rows[g].append((name, {c: refined(X, y, c) for c in WIDTHS}, measure.better_linkage(X, y)))
            print(name, round(rows[g][-1][2], 3), {c: round(p, 3) for c, p in rows[g][-1][1].items()}, flush=True)
    lines = ["# The width of the default's similarity kernel", "",
             "Written by `bandwidth.py` (its docstring says what each column is). Dendrogram purity; "
             "similarities `exp(-(d / (c m))^2)`, `m` the mean edge length of the 10-NN + MST graph.", "",
             "| c | group | mean | gap | below | worst |", "|---:|---|---:|---:|---:|---:|"]
    for c in WIDTHS:
        for g, rs in rows.items():
            cells = measure.gap_summary([r[c] for _, r, _ in rs], [b for *_, b in rs])
            lines.append(f"| {c:g} | {g} | {cells} |")
    lines += ["", "| set | better of Ward and average | " + " | ".join(f"c = {c:g}" for c in WIDTHS) + " |",
              "|---|---:|" + "---:|" * len(WIDTHS)]
    for name, r, best in rows["benchmark (6)"] + rows["extra (2)"]:
        lines.append(f"| {name} | {best:.3f} | " + " | ".join(f"{r[c]:.3f}" for c in WIDTHS) + " |")
    measure.write_table(lines, __file__)


if __name__ == "__main__":
    main()
