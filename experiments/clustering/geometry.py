"""Geometry before linkage, and label-free rules that choose a hierarchy (issue 44, the
"never below Ward or average" goal).

Two tables, on every group of sets (pilot draws, seeds 100-102; held-out draws, seeds 0-2;
the two extra sets; the benchmark's six):

1. **Geometry.** Ward and average linkage on other geometries than the [-1, 1] scaling:
   standardised features, a spectral embedding of the 10-NN graph (``n_clusters``
   components), shortest-path (geodesic) distances on the 5-NN and 10-NN + MST graphs
   (average linkage), against the default (``UltrametricClustering(n_clusters=k)``).
2. **Choosing without labels.** Among Ward, average, the two geodesic average linkages and the
   default, the hierarchy each label-free criterion prefers: the lowest Dasgupta cost (the
   default's own rule, on the 10-NN + MST graph), the highest cophenetic correlation with the
   Euclidean or the geodesic (10-NN) distances, the highest silhouette of the ``n_clusters``
   cut (Euclidean, geodesic), the most stable ``n_clusters`` cut under 80% subsamples (mean
   adjusted Rand index over 5 draws; scipy's linkages only, the default too slow to refit).
   "agrees": the share of sets where the chosen hierarchy's purity is within 0.005 of the
   best candidate's.

Writes ``geometry.md``. Usage: ``python experiments/clustering/geometry.py`` (~5 minutes on a shared 2-core machine).
"""
import sys
import warnings
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import numpy as np  # noqa: E402
from scipy.cluster.hierarchy import cophenet, fcluster, linkage  # noqa: E402
from scipy.spatial.distance import pdist, squareform  # noqa: E402
from sklearn.manifold import SpectralEmbedding  # noqa: E402
from sklearn.metrics import adjusted_rand_score, silhouette_score  # noqa: E402
from sklearn.preprocessing import StandardScaler  # noqa: E402

import measure  # noqa: E402
from fits import estimator_fit  # noqa: E402
from sets import groups  # noqa: E402

from hiseg.clustering.plotting import to_linkage  # noqa: E402

GEOMETRY = ("ward", "average", "standardised ward", "standardised average", "spectral ward",
            "geodesic 5-NN average", "geodesic 10-NN average", "default")
POOL = ("ward", "average", "geodesic 5-NN average", "geodesic 10-NN average", "default")
CRITERIA = ("Dasgupta cost", "cophenetic corr. (Euclidean)", "cophenetic corr. (geodesic)",
            "silhouette (Euclidean)", "silhouette (geodesic)", "stability (subsamples)")


def _geodesic_average(X, k):
    return linkage(squareform(measure.geodesic_distances(X, k), checks=False), "average")


def hierarchies(X, k) -> dict:
    """method -> scipy linkage matrix."""
    Z = StandardScaler().fit_transform(X)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # spectral embedding: "graph not fully connected"
        E = SpectralEmbedding(k, affinity="nearest_neighbors", n_neighbors=10, random_state=0).fit_transform(X)
    est = estimator_fit(X, k)[0]
    return {"ward": linkage(X, "ward"), "average": linkage(X, "average"),
            "standardised ward": linkage(Z, "ward"), "standardised average": linkage(Z, "average"),
            "spectral ward": linkage(E, "ward"), "geodesic 5-NN average": _geodesic_average(X, 5),
            "geodesic 10-NN average": _geodesic_average(X, 10),
            "default": to_linkage(est.parents_, est.altitudes_)}


def _stability(X, k, method, draws=5):
    """Mean ARI of the ``k`` cut of 80% subsamples against the full set's cut on them."""
    fit = {"ward": lambda A: linkage(A, "ward"), "average": lambda A: linkage(A, "average"),
           "geodesic 5-NN average": lambda A: _geodesic_average(A, 5),
           "geodesic 10-NN average": lambda A: _geodesic_average(A, 10)}.get(method)
    if fit is None:
        return -np.inf
    rng = np.random.default_rng(0)
    full = fcluster(fit(X), k, "maxclust")
    out = []
    for _ in range(draws):
        idx = np.sort(rng.choice(len(X), int(0.8 * len(X)), replace=False))
        out.append(adjusted_rand_score(full[idx], fcluster(fit(X[idx]), k, "maxclust")))
    return float(np.mean(out))


def criteria(X, k, trees) -> dict:
    """method -> {criterion: value, higher is better}, for the methods of POOL."""
    de, D = pdist(X), measure.geodesic_distances(X, 10)
    dg = squareform(D, checks=False)
    out = {}
    for m in POOL:
        Z = trees[m]
        cut = fcluster(Z, k, "maxclust")
        several = len(set(cut)) > 1
        c = cophenet(Z)
        out[m] = {"Dasgupta cost": -measure.dasgupta_reference(Z, X),
                  "cophenetic corr. (Euclidean)": np.corrcoef(c, de)[0, 1],
                  "cophenetic corr. (geodesic)": np.corrcoef(c, dg)[0, 1],
                  "silhouette (Euclidean)": silhouette_score(X, cut) if several else -1.0,
                  "silhouette (geodesic)": silhouette_score(D, cut, metric="precomputed") if several else -1.0,
                  "stability (subsamples)": _stability(X, k, m)}
    return out


def measure_group(sets: dict) -> list:
    """One record per set: purities, the better of Ward and average, the criteria."""
    rows = []
    for name, (X, y) in sets.items():
        k = len(np.unique(y))
        trees = hierarchies(X, k)
        p = {m: measure.purity(Z, y) for m, Z in trees.items()}
        rows.append(dict(name=name, purity=p, best=max(p["ward"], p["average"]), crit=criteria(X, k, trees)))
        print(name, {m: round(v, 3) for m, v in p.items()}, flush=True)
    return rows


def chosen(row, criterion) -> str:
    return max(POOL, key=lambda m: row["crit"][m][criterion])


def main():
    rows = {g: measure_group(s) for g, s in groups().items()}
    named = rows["benchmark (6)"] + rows["extra (2)"]
    lines = ["# Geometry before linkage, and label-free choices among hierarchies", "",
             "Written by `geometry.py` (its docstring says what each column is). Dendrogram purity.", "",
             "## 1. Geometry", "", "| set | " + " | ".join(GEOMETRY) + " |", "|---|" + "---:|" * len(GEOMETRY)]
    for r in named:
        lines.append(f"| {r['name']} | " + " | ".join(f"{r['purity'][m]:.3f}" for m in GEOMETRY) + " |")
    lines += ["", "Per group: mean purity, mean gap to the better of Ward and average per set, sets more than "
              "0.005 below it, worst gap.", "", "| method | group | mean | gap | below | worst |",
              "|---|---|---:|---:|---:|---:|"]
    for m in GEOMETRY:
        for g, rs in rows.items():
            lines.append(f"| {m} | {g} | " + measure.gap_summary([r["purity"][m] for r in rs], [r["best"] for r in rs])
                         + " |")
    lines += ["", "## 2. Choosing among " + ", ".join(POOL) + " without labels", "",
              "| criterion | " + " | ".join(r["name"] for r in named) + " |", "|---|" + "---:|" * len(named)]
    for c in CRITERIA:
        lines.append(f"| {c} | " + " | ".join(f"{r['purity'][chosen(r, c)]:.3f} ({chosen(r, c).split()[0]})"
                                               for r in named) + " |")
    lines.append("| *better of Ward and average* | " + " | ".join(f"{r['best']:.3f}" for r in named) + " |")
    lines += ["", "| criterion | group | mean | gap | below | worst | agrees |", "|---|---|---:|---:|---:|---:|---:|"]
    for c in CRITERIA:
        for g, rs in rows.items():
            picked = [r["purity"][chosen(r, c)] for r in rs]
            agrees = np.mean([p >= max(r["purity"][m] for m in POOL) - 0.005 for p, r in zip(picked, rs)])
            cells = measure.gap_summary(picked, [r["best"] for r in rs])
            lines.append(f"| {c} | {g} | {cells} | {agrees:.0%} |")
    measure.write_table(lines, __file__)


if __name__ == "__main__":
    main()
