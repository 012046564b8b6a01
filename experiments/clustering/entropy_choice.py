"""Structural entropy as a cost and as a label-free choice, on the nine sets of issue 56.

Every hierarchy the default builds, and the same starts refined on the relaxed structural
entropy, on the default's graph (10-NN + MST of the samples, similarities
``exp(-(d / mean d)^2)``):

* ``ward (graph)``, ``average (graph)``: the two starts (Ward's and average linkage constrained
  to the graph, :func:`hiseg.clustering.refine.start_ultrametric`);
* ``dasgupta <- ward`` / ``<- average``: each refined on the relaxed Dasgupta cost, the lowest
  exact cost kept (what the default computes);
* ``entropy <- ward`` / ``<- average``: each refined on the relaxed structural entropy
  (:func:`hiseg.core.losses.structural_entropy`), the lowest exact entropy kept;
* scipy's Ward and average linkage on all pairs (the issue's baselines).

Then label-free rules, each keeping one hierarchy of a pool: the lowest exact Dasgupta cost of
the two Dasgupta refinements (today's default), and the lowest structural entropy
(:func:`hiseg.metrics.structural_entropy`, on the same graph) over several pools. Purity is
exact dendrogram purity; seconds are CPU seconds of one thread (a rule's: the sum of its fits).
Last, the kernel's width: each cost with similarities ``exp(-(d / (c mean d))^2)``, c = 1
(the default's) to 3. No setting is chosen here on anything but these nine sets (the issue's
rule; the others are held out). Writes ``entropy_choice.md`` next to this script. Usage:
``python experiments/clustering/entropy_choice.py [--sets "iris (sklearn),zoo (HypCSE)"]``.
"""
from __future__ import annotations

import argparse
import sys
import time
import warnings
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

import measure  # noqa: E402  (sets the one-thread environment before torch loads)
from sets import HYPCSE_MEASURED, hypcse_sets  # noqa: E402

from hiseg import UltrametricClustering, knn_graph  # noqa: E402
from hiseg.clustering import refine  # noqa: E402
from hiseg.core.ultrametric import build_hierarchy  # noqa: E402
from hiseg.metrics import dasgupta_cost, dendrogram_purity, structural_entropy  # noqa: E402

#: the label-free rules: name -> (the cost that keeps one, the pool it keeps one of)
STARTS = ("ward (graph)", "average (graph)")
DASGUPTA = ("dasgupta <- ward", "dasgupta <- average")
ENTROPY = ("entropy <- ward", "entropy <- average")
RULES = {
    "lowest Dasgupta of the Dasgupta refinements (today's default)": ("dasgupta", DASGUPTA),
    "lowest entropy of the starts and Dasgupta refinements": ("entropy", STARTS + DASGUPTA),
    "lowest entropy of the entropy refinements": ("entropy", ENTROPY),
    "lowest entropy of the starts and both refinements": ("entropy", STARTS + DASGUPTA + ENTROPY),
    "lowest entropy of all, scipy's linkages too": ("entropy", STARTS + DASGUPTA + ENTROPY + ("ward", "average")),
}


#: the estimator's fits measured: the default, and its choice by structural entropy
ESTIMATORS = {"hiseg default": {}, "hiseg, selection='entropy'": dict(selection="entropy")}


def cpu(fn):
    """(result, CPU seconds)."""
    t = time.process_time()
    out = fn()
    return out, time.process_time() - t


def timed_fit(X, k: int, **params):
    """(the fitted default estimator with ``params``, CPU seconds, wall seconds)."""
    w = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        est, t = cpu(lambda: UltrametricClustering(n_clusters=k, random_state=0, **params).fit(X))
    return est, t, time.perf_counter() - w


def hierarchies(X) -> tuple:
    """(name -> (parent array, CPU s), graph, similarities) of every hierarchy compared."""
    n = X.shape[0]
    k = max(5, min(refine.REFINE_NEIGHBORS, n - 1))
    (graph, w), t_graph = cpu(lambda: knn_graph(X, k))
    s = refine.gaussian_similarities(w)
    out = {}
    for start, name in zip(refine.REFINE_STARTS, STARTS):
        (u0, _), t0 = cpu(lambda st=start: refine.start_ultrametric(st, graph, w, X))
        out[name] = (np.asarray(build_hierarchy(graph, u0).parents), t_graph + t0)
        for cost in refine.REFINE_COSTS:
            fit, t = cpu(lambda c=cost: refine.refine(graph, s, u0, cost=c))
            out[f"{cost} <- {start}"] = (np.asarray(fit.hierarchy.parents), t_graph + t0 + t)
    for m in ("ward", "average"):
        out[m] = cpu(lambda m=m: np.asarray(measure.linkage_tree(X, m)))
    return out, graph, s


def measure_set(X, y) -> dict:
    """name -> dict(purity, dasgupta, entropy, cpu) of every hierarchy and rule, and the default's."""
    trees, graph, s = hierarchies(X)
    rows = {}
    for name, (tree, t) in trees.items():
        rows[name] = dict(purity=dendrogram_purity(tree, y), dasgupta=dasgupta_cost(tree, graph, s, normalize=True),
                          entropy=structural_entropy(tree, graph, s), cpu=t)
    for rule, (cost, pool) in RULES.items():
        kept = min(pool, key=lambda m: rows[m][cost])  # ties: the first of the pool
        rows[rule] = dict(rows[kept], cpu=sum(rows[m]["cpu"] for m in pool), kept=kept)
    for name, params in ESTIMATORS.items():
        est, t, wall = timed_fit(X, len(np.unique(y)), **params)
        rows[name] = dict(purity=est.score_hierarchy(X, y), dasgupta=dasgupta_cost(est, graph, s, normalize=True),
                          entropy=structural_entropy(est, graph, s), cpu=t, wall=wall)
    return rows


#: widths ``c`` of the similarity kernel ``exp(-(d / (c mean d))^2)`` tried for the refinement (1: the default's)
WIDTHS = (1.0, 1.5, 2.0, 3.0)


def width_rows(X, y) -> dict:
    """(c, cost, kept) -> purity: each start refined on ``cost`` with the kernel ``c`` times
    wider, and the lower exact cost of the two kept ("lowest"); the graph is the default's."""
    n = X.shape[0]
    graph, w = knn_graph(X, max(5, min(refine.REFINE_NEIGHBORS, n - 1)))
    starts = {st: refine.start_ultrametric(st, graph, w, X)[0] for st in refine.REFINE_STARTS}
    out = {}
    for c in WIDTHS:
        s = np.exp(-(w / (c * w.mean())) ** 2)
        for cost in refine.REFINE_COSTS:
            fits = {st: refine.refine(graph, s, u0, cost=cost) for st, u0 in starts.items()}
            for st, fit in fits.items():
                out[(c, cost, f"<- {st}")] = dendrogram_purity(np.asarray(fit.hierarchy.parents), y)
            kept = min(fits, key=lambda st: fits[st].cost)
            out[(c, cost, "lowest")] = out[(c, cost, f"<- {kept}")]
    return out


def width_table(widths: dict, results: dict) -> list:
    """Purity of every width, cost and start (or the lowest cost kept), the counts of the goals."""
    names = list(widths)
    lines = ["", "## The kernel's width", "",
             "Each start refined with similarities `exp(-(d / (c mean d))^2)` (c = 1: the default's) on the "
             "relaxed Dasgupta cost or structural entropy, and the one of lower exact cost kept (`lowest`).", "",
             "| c | cost | hierarchy | " + " | ".join(names) + " | below the better linkage | below HypCSE (measured) |",
             "|---:|---|---|" + "---:|" * (len(names) + 2)]
    for key in widths[names[0]]:
        cells = [widths[n][key] for n in names]
        below = sum(p < max(results[n]["ward"]["purity"], results[n]["average"]["purity"]) - 0.005
                    for n, p in zip(names, cells))
        short = sum(n in HYPCSE_MEASURED and p < HYPCSE_MEASURED[n] for n, p in zip(names, cells))
        lines.append(f"| {key[0]:g} | {key[1]} | {key[2]} | " + " | ".join(f"{p:.3f}" for p in cells)
                     + f" | {below} | {short} of {sum(n in HYPCSE_MEASURED for n in names)} |")
    return lines


def table(results: dict) -> list:
    lines = ["# Structural entropy as a cost and as a label-free choice (issue 56)", "",
             "Written by `experiments/clustering/entropy_choice.py` (its docstring: the hierarchies, the rules). "
             "Dendrogram purity (exact); Dasgupta's cost (normalised) and structural entropy (bits) on the "
             "default's 10-NN + MST graph; CPU seconds of one thread.", "",
             "## Purity of each rule", "",
             "| rule | " + " | ".join(results) + " | below the better linkage | below HypCSE (measured) |",
             "|---|" + "---:|" * (len(results) + 2)]
    for rule in [*ESTIMATORS, *RULES, *STARTS, *DASGUPTA, *ENTROPY, "ward", "average"]:
        cells, below, short = [], 0, 0
        for name, rows in results.items():
            p = rows[rule]["purity"]
            cells.append(f"{p:.3f}")
            below += p < max(rows["ward"]["purity"], rows["average"]["purity"]) - 0.005
            short += name in HYPCSE_MEASURED and p < HYPCSE_MEASURED[name]
        lines.append(f"| {rule} | " + " | ".join(cells) + f" | {below} | {short} of {sum(n in HYPCSE_MEASURED for n in results)} |")
    lines.append("| HypCSE (measured) | " + " | ".join(f"{HYPCSE_MEASURED[n]:.3f}" if n in HYPCSE_MEASURED else "-"
                                                   for n in results) + " | | |")
    lines += ["", "## Every hierarchy", "", "| set | hierarchy | purity | Dasgupta | entropy (bits) | CPU s | kept |",
              "|---|---|---:|---:|---:|---:|---|"]
    for name, rows in results.items():
        for m, r in rows.items():
            lines.append(f"| {name} | {m} | {r['purity']:.3f} | {r['dasgupta']:.4f} | {r['entropy']:.4f} | "
                         f"{r['cpu']:.2f} | {r.get('kept', '')} |")
    return lines


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sets", default=None, help="comma-separated subset of the nine sets")
    args = ap.parse_args()
    data = hypcse_sets()
    names = args.sets.split(",") if args.sets else list(data)
    results, widths = {}, {}
    for name in names:
        X, y = data[name]
        results[name] = measure_set(X, y)
        widths[name] = width_rows(X, y)
        print(name, "done", flush=True)
    lines = table(results) + width_table(widths, results)
    if args.sets:
        print("\n".join(lines))
    else:
        measure.write_table(lines, __file__)


if __name__ == "__main__":
    main()
