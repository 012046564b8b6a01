"""Why the default fit stays at its initialisation (issue 44, finding 1).

The issue's setup: ``UltrametricClustering(loss="closest+size", n_clusters=k,
random_state=0)`` on iris, wine and breast cancer scaled to [-1, 1]. Its
``dissimilarity="auto"`` fits three candidates (edge lengths on the 5-NN and 10-NN graphs
from average linkage, Ward's heights on the 15-NN graph from the heights themselves) and
keeps the lowest normalised cut. For each candidate: its score, the dendrogram purity of
its start and of its fit, the closest term and the whole loss at the start and at the kept
iterate, the iterations, and the share of the fit's clusters that are clusters of the start
(1.000: the fit returned the start's hierarchy).

Writes ``stays_at_start.md``. Usage: ``python experiments/clustering/stays_at_start.py``
(~10 s).
"""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import numpy as np  # noqa: E402

import measure  # noqa: E402
from fits import estimator_fit, shared_clusters, start_of  # noqa: E402
from sets import benchmark_sets  # noqa: E402

SETS = ("iris", "wine", "breast cancer")


def closest_term(est) -> float:
    """Mean squared difference of the fitted ultrametric and the input, in units of its mean."""
    return float(np.mean(((est.ultrametric_ - est.edge_weights_) / est.weight_scale_) ** 2))


def main():
    data = benchmark_sets()
    lines = ["# Why the default fit stays at its start", "",
             "`UltrametricClustering(loss=\"closest+size\", n_clusters=k, random_state=0)`; one row per "
             "candidate of `dissimilarity=\"auto\"` (each refitted alone), **kept** = the one the default "
             "keeps (lowest normalised cut). *closest*: the closest term (mean squared difference to the "
             "input, in units of its mean); *loss*: closest + 10 x size term; *shared*: share of the "
             "fit's clusters that are clusters of the start's hierarchy.", "",
             "| set | candidate | normalised cut | purity start | purity fit | closest start -> fit "
             "| loss start -> fit | iterations (kept) | shared |", "|---|---|---:|---:|---:|---:|---:|---:|---:|"]
    for name in SETS:
        X, y = data[name]
        k = len(np.unique(y))
        default, _ = estimator_fit(X, k, loss="closest+size")
        for cand in default.candidates_:
            params = dict(loss="closest+size", dissimilarity=cand["dissimilarity"],
                          n_neighbors=cand["n_neighbors"], init=cand["init"])
            fit, _ = estimator_fit(X, k, **params)
            start = start_of(X, k, **params)
            kept = (cand["dissimilarity"], cand["n_neighbors"]) == (default.dissimilarity_, default.n_neighbors_)
            label = f"{cand['dissimilarity']} {cand['n_neighbors']}-NN from {cand['init']}" + (" **kept**" if kept else "")
            best = int(np.argmin(fit.loss_history_))
            lines.append(
                f"| {name} | {label} | {-cand['score'][0]:.3f} | {measure.purity(start, y):.3f} "
                f"| {measure.purity(fit, y):.3f} | {closest_term(start):.4f} -> {closest_term(fit):.4f} "
                f"| {fit.loss_history_[0]:.3f} -> {fit.loss_history_[best]:.3f} | {fit.n_iter_} ({best}) "
                f"| {shared_clusters(start.parents_, fit.parents_):.3f} |")
    measure.write_table(lines, __file__)


if __name__ == "__main__":
    main()
