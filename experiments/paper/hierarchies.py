"""Hierarchies measured as a whole: dendrogram purity and Dasgupta's cost (issue 22).

Sets: iris, wine, breast cancer (scikit-learn's copies, every feature scaled to [-1, 1];
``real.load``), the 64-d Gaussian mixtures of ``real.py`` (its draw, seed 0), the five toy
sets of ``toy.py`` (seeds 0..S-1, mean ± std) and the scale set of
``benchmarks/bench_clustering_scale.py`` (``make_blobs(n, n_features=d, centers=5,
random_state=0)``, 1e5 points in 10-d; 1e6 in 16-d with ``--scale 1e5,1e6``).

Measures, on every hierarchy:

* *purity*: dendrogram purity (Heller & Ghahramani 2005,
  :func:`hiseg.metrics.dendrogram_purity`), exact (O(N K)); at scale also the mean over
  100,000 same-class pairs drawn at random (seed 0), the large-scale literature's estimate;
* *Dasgupta*: Dasgupta's cost (:func:`hiseg.metrics.dasgupta_cost`) on one similarity
  graph per data set, the same for every method: the 10-NN + MST graph
  (``hiseg.knn_graph(X, 10)``) with similarity ``exp(-(d / mean d)^2)``, divided by
  ``N * sum(s)`` (the flat tree's cost: 1; lower is better);
* *accuracy*: flat accuracy at the true number of classes (best cluster-to-class
  matching); for the linkages the plain cut (``fcluster(Z, k, "maxclust")``), for hiseg
  the estimator's ``labels_`` (its size-aware cut). All samples (the semi-supervised fit
  sees 10% of the labels: ``toy.labelled_subset``, seeded by the draw);
* *s*: wall time of the fit; *MB*: the peak resident memory of a process forked for the
  fit above its resident memory at the fork (peak reset through ``/proc/self/clear_refs``;
  imports and data excluded; pages the fit touches but the parent had already count 0);
  at scale a fresh process and its whole peak (imports included, as in
  ``benchmarks/results/clustering_scale.md``).

Methods: Ward, average, single and complete linkage (scipy, all pairs; at scale
scikit-learn's Ward with a 10-NN connectivity, what a user would pick at that size), and
:class:`hiseg.UltrametricClustering` with closest, closest+size, Dasgupta, Dasgupta+size
(size weight 1, from the input, as in ``real.py``), closest+triplet (10% labels), and the
unsupervised default (see ``--pilot``).

``--pilot``: the search for an unsupervised default (issue 22 item 3) on pilot draws only:
toy seeds 100-104 and mixture seeds 11-13 (``toy.py`` and ``real.py`` report seeds 0-9 and
seed 0). The real sets have a single draw each and are never used to choose.

Writes ``experiments/paper/results/hierarchies.md``. Usage: ``python experiments/paper/hierarchies.py
[--seeds 5] [--scale 1e5] [--sets ...]``; ``--pilot``.
"""
import os

os.environ.setdefault("OMP_NUM_THREADS", "1")

import argparse  # noqa: E402
import json  # noqa: E402
import pickle  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
import warnings  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402
import torch  # noqa: E402

torch.set_num_threads(1)
HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(ROOT / "benchmarks"))

import real  # noqa: E402
import toy  # noqa: E402
from common import accuracy  # noqa: E402
from provenance import write_stamped  # noqa: E402

from hiseg import UltrametricClustering, knn_graph  # noqa: E402
from hiseg.metrics import dasgupta_cost, dendrogram_purity  # noqa: E402

LINKAGES = ("ward", "average", "single", "complete")
#: hiseg's fits: (estimator options, uses the 10% labels)
HISEG = {
    "closest": (dict(loss="closest", dissimilarity="euclidean"), False),
    "closest+size": (dict(loss="closest+size", dissimilarity="euclidean"), False),
    "closest+size, Ward heights": (dict(loss="closest+size", dissimilarity="ward"), False),
    "dasgupta": (dict(loss="dasgupta", dissimilarity="euclidean", init="input"), False),
    "dasgupta+size": (dict(loss="dasgupta+size", dissimilarity="euclidean", size_weight=1.0, init="input"), False),
    "closest+triplet (10%)": (dict(loss="closest+triplet"), True),
}
REAL_SETS = list(real.REAL)
MIX_SETS = list(real.MIXTURES)
PILOT_TOY_SEEDS = (100, 101, 102, 103, 104)
PILOT_MIX_SEEDS = (11, 12, 13)
#: dendrogram purity (%) published in HypCSE's Table 1 (issue 22); preprocessing not stated
PUBLISHED = {"single linkage": (81.2, 67.9, 85.1), "UFit": (81.5, 78.9, 95.0), "HypHC": (76.0, 88.7, 96.5),
             "FPH": (85.3, 92.8, 92.6), "HypCSE": (95.1, 93.9, 96.8)}


def load(name, seed=0):
    """A data set: real (one draw), mixture (``seed`` draws it) or toy (``seed``)."""
    if name in real.REAL:
        return real.load(name)
    if name in real.MIXTURES:
        return real.mixture(*real.MIXTURES[name], seed=seed)
    return toy.make(name, seed)


def similarity_graph(X):
    """The graph Dasgupta's cost is measured on: 10-NN + MST, similarity exp(-(d / mean d)^2)."""
    g, d = knn_graph(X, 10)
    return g, np.exp(-(d / d.mean()) ** 2)


def measure(tree, labels, y, graph, n_pairs=None):
    out = dict(purity=dendrogram_purity(tree, y), dasgupta=dasgupta_cost(tree, *graph, normalize=True),
               accuracy=accuracy(y, labels))
    if n_pairs:
        out["purity_sampled"] = dendrogram_purity(tree, y, n_pairs=n_pairs, random_state=0)
    return out


def _status_mb(field):
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) / 1024 for line in f if line.startswith(field))


def forked(fn):
    """Run ``fn()`` in a forked child; return its result with ``MB``: the child's peak
    resident memory above its resident memory at the start (the peak is reset first through
    ``/proc/self/clear_refs``, so the parent's earlier peak does not count)."""
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # child
        os.close(r)
        try:
            with open("/proc/self/clear_refs", "w") as f:
                f.write("5")  # reset the peak RSS (VmHWM) to the current RSS
            base = _status_mb("VmRSS")
            res = fn()
            res["MB"] = _status_mb("VmHWM") - base
        except Exception as e:  # report, do not crash the run
            res = dict(error=f"{type(e).__name__}: {e}")
        with os.fdopen(w, "wb") as f:
            pickle.dump(res, f)
        os._exit(0)
    os.close(w)
    with os.fdopen(r, "rb") as f:
        data = f.read()
    os.waitpid(pid, 0)
    return pickle.loads(data) if data else dict(error="child died")


def linkage_fit(X, y, k, method, graph):
    from scipy.cluster.hierarchy import fcluster, linkage

    t = time.perf_counter()
    Z = linkage(X, method)
    s = time.perf_counter() - t
    res = measure(Z, fcluster(Z, k, criterion="maxclust"), y, graph)
    res["s"] = s
    return res


def hiseg_fit(X, y, k, kw, labelled, seed, graph):
    part = toy.labelled_subset(y, seed)[0] if labelled else None
    t = time.perf_counter()
    est = UltrametricClustering(k, random_state=seed, **kw).fit(X, part)
    s = time.perf_counter() - t
    res = measure(est, est.labels_, y, graph)
    res.update(s=s, choice=getattr(est, "dissimilarity_", ""))
    return res


def run_set(name, seed, methods):
    X, y = load(name, seed)
    k = len(np.unique(y))
    graph = similarity_graph(X)
    out = {}
    for m in LINKAGES:
        out[m] = forked(lambda: linkage_fit(X, y, k, m, graph))
    for m, (kw, labelled) in methods.items():
        t = time.perf_counter()
        out[m] = forked(lambda: hiseg_fit(X, y, k, kw, labelled, seed, graph))
        print(f"{name:>15} seed {seed:>3} {m:>24}: " + (out[m].get("error") or
              f"purity {out[m]['purity']:.3f} acc {out[m]['accuracy']:.3f} "
              f"dasgupta {out[m]['dasgupta']:.4f} ({time.perf_counter() - t:.1f} s)"), flush=True)
    return out


# ---------------------------------------------------------------------------------- scale
def scale_worker(method, n, d):
    """One fit on the scale set in this (fresh) process; prints a JSON line."""
    skip = Path(os.environ["HIER_TMP"]) / "skip_scale"  # the pids whose scale rows come from another run
    if skip.exists() and str(os.getppid()) in skip.read_text().split():
        sys.exit("skipped: the scale rows come from a separate run (runs/hierarchies_tmp/skip_scale)")
    from sklearn.datasets import make_blobs

    from bench_clustering_scale import K

    X, y = make_blobs(n, n_features=d, centers=K, random_state=0)
    out = {}
    t = time.perf_counter()
    if method == "ward":
        from sklearn.cluster import AgglomerativeClustering
        from sklearn.neighbors import kneighbors_graph

        conn = kneighbors_graph(X, 10, include_self=False)
        agg = AgglomerativeClustering(K, linkage="ward", connectivity=conn, compute_full_tree=True).fit(X)
        out["seconds"] = time.perf_counter() - t
        parents = np.empty(2 * n - 1, dtype=np.int64)
        parents[agg.children_.ravel()] = np.repeat(np.arange(n, 2 * n - 1), 2)
        parents[-1] = 2 * n - 2
        tree, labels = parents, agg.labels_
    else:
        kw = dict(HISEG, **DEFAULT_ROW)[method][0]
        est = UltrametricClustering(K, **kw).fit(X)
        out["seconds"] = time.perf_counter() - t
        out.update(iterations=est.n_iter_, edges=est.graph_.num_edges,
                   split={k: round(v, 1) for k, v in est.timings_.items()})
        tree, labels = est, est.labels_
    np.save(Path(os.environ["HIER_TMP"]) / f"{method}_{n}.npy", np.asarray(getattr(tree, "parents_", tree)))
    np.save(Path(os.environ["HIER_TMP"]) / f"{method}_{n}_labels.npy", labels)
    print(json.dumps(out))


def scale(n, d, methods, tmp):
    """Each method in a fresh process (peak RSS of its own), then the measures here."""
    from bench_clustering_scale import _popen_with_rusage
    from sklearn.datasets import make_blobs

    from bench_clustering_scale import K

    rows = {}
    for m in methods:
        cmd = [sys.executable, str(Path(__file__)), "--scale-worker", m, str(n), str(d)]
        os.environ["HIER_TMP"] = str(tmp)
        t = time.perf_counter()
        rc, out, err, peak, cpu = _popen_with_rusage(cmd)
        if rc:
            rows[m] = dict(error=(err.strip().splitlines() or [f"exit {rc}"])[-1])
            print(f"scale {n} {m}: {rows[m]['error']}", flush=True)
            continue
        rows[m] = json.loads(out.strip().splitlines()[-1])
        rows[m].update(peak_mb=peak, cpu_s=cpu)
        print(f"scale {n} {m}: {rows[m]} ({time.perf_counter() - t:.0f} s)", flush=True)
    X, y = make_blobs(n, n_features=d, centers=K, random_state=0)
    graph = similarity_graph(X)
    for m, r in rows.items():
        if "error" in r:
            continue
        parents = np.load(Path(tmp) / f"{m}_{n}.npy")
        labels = np.load(Path(tmp) / f"{m}_{n}_labels.npy")
        r.update(measure(parents, labels, y, graph, n_pairs=100000))
    return rows


# ---------------------------------------------------------------------------------- tables
def _agg(vals):
    v = np.asarray(vals, dtype=float)
    return f"{v.mean():.3f}" if v.size == 1 else f"{v.mean():.3f} ± {v.std():.3f}"


def table(results, sets, methods, key, digits=3):
    lines = ["| method | " + " | ".join(sets) + " |", "|---|" + "---:|" * len(sets)]
    for m in methods:
        cells = []
        for s in sets:
            vals = [r[m][key] for r in results[s] if key in r[m]]
            cells.append(_agg(vals) if vals else "failed")
        lines.append(f"| {m} | " + " | ".join(cells) + " |")
    return lines


def ncut(graph, sim, labels):
    """Normalised cut of a flat partition on a similarity graph: sum over clusters of
    cut(C) / vol(C)."""
    g = graph
    a, b = labels[g.sources], labels[g.targets]
    k = labels.max() + 1
    vol = np.bincount(a, sim, k) + np.bincount(b, sim, k)
    cut = np.bincount(a[a != b], sim[a != b], k) + np.bincount(b[a != b], sim[a != b], k)
    return float(np.sum(cut / np.maximum(vol, 1e-300)))


#: candidate unsupervised settings of the pilot search (estimator options)
PILOT_FITS = {
    "euclidean": dict(loss="closest+size", dissimilarity="euclidean"),
    "ward heights": dict(loss="closest+size", dissimilarity="ward"),
    "ward heights, closest": dict(loss="closest", dissimilarity="ward"),
    "euclidean, 10-NN": dict(loss="closest+size", dissimilarity="euclidean", n_neighbors=10),
}


def pilot():
    """Candidate unsupervised defaults on the pilot draws only: each fit's purity and accuracy,
    and label-free criteria (on the estimator's own Euclidean 5-NN + MST graph, similarity
    exp(-(d / mean d)^2)): the hierarchy's normalised Dasgupta cost and the cut's normalised cut."""
    sets = [(s, seed) for s in toy.SETS for seed in PILOT_TOY_SEEDS] + \
           [(s, seed) for s in MIX_SETS for seed in PILOT_MIX_SEEDS]
    rows = []
    for s, seed in sets:
        X, y = load(s, seed)
        k = len(np.unique(y))
        g5, d5 = knn_graph(X, 5)
        sim5 = np.exp(-(d5 / d5.mean()) ** 2)
        row = dict(set=s, seed=seed)
        from scipy.cluster.hierarchy import fcluster, linkage

        Z = linkage(X, "ward")
        lab = fcluster(Z, k, criterion="maxclust") - 1
        row["ward"] = dict(purity=dendrogram_purity(Z, y), accuracy=accuracy(y, lab),
                           dg=dasgupta_cost(Z, g5, sim5, normalize=True), ncut=ncut(g5, sim5, lab))
        for m, kw in PILOT_FITS.items():
            est = UltrametricClustering(k, random_state=seed, **kw).fit(X)
            row[m] = dict(purity=dendrogram_purity(est, y), accuracy=accuracy(y, est.labels_),
                          dg=dasgupta_cost(est, g5, sim5, normalize=True), ncut=ncut(g5, sim5, est.labels_))
        rows.append(row)
        print(json.dumps(row), flush=True)
    (ROOT / "runs").mkdir(exist_ok=True)
    (ROOT / "runs" / "hierarchies_pilot.json").write_text(json.dumps(rows))


#: the estimator's defaults before issue 44 (closest+size, ``dissimilarity="auto"``: the label-free choice)
DEFAULT_ROW = {"default (closest+size, auto)": (dict(loss="closest+size"), False)}


def pilot_summary():
    """The pilot search's table (mean over the pilot draws of each set), from the JSON that
    ``--pilot`` wrote, with the label-free rule applied: the fit of lowest normalised cut
    (ties 1e-9: lowest Dasgupta cost) among edge lengths 5-NN / 10-NN and Ward's heights."""
    path = ROOT / "runs" / "hierarchies_pilot.json"
    if not path.exists():
        return []
    rows = json.loads(path.read_text())
    cands = ["euclidean", "euclidean, 10-NN", "ward heights"]
    for r in rows:
        pick = min(cands, key=lambda m: (round(r[m]["ncut"], 9), r[m]["dg"]))
        r["rule"] = dict(r[pick], pick=pick)
    sets = list(dict.fromkeys(r["set"] for r in rows))
    names = ["ward", "euclidean", "euclidean, 10-NN", "ward heights", "ward heights, closest", "rule"]
    label = {"ward": "Ward (scipy)", "euclidean": "closest+size, 5-NN (the old default)",
             "euclidean, 10-NN": "closest+size, 10-NN", "ward heights": "closest+size, Ward heights (15-NN)",
             "ward heights, closest": "closest, Ward heights", "rule": "**lowest normalised cut (the new default)**"}
    out = []
    for key in ("purity", "accuracy"):
        out += [f"**{key}** (mean over the pilot draws)", "", "| fit | " + " | ".join(sets) + " |",
                "|---|" + "---:|" * len(sets)]
        for m in names:
            out.append(f"| {label[m]} | " + " | ".join(
                f"{np.mean([r[m][key] for r in rows if r['set'] == s]):.3f}" for s in sets) + " |")
        out.append("")
    worse = [(r["set"], r["seed"], r["rule"]["pick"], round(r["rule"][k] - r["ward"][k], 3), k)
             for r in rows for k in ("purity", "accuracy") if r["rule"][k] < r["ward"][k] - 0.005]
    out += ["Pilot draws where the rule's fit is more than .005 below Ward: "
            + ("; ".join(f"{s} {seed} ({p}): {k} {d:+.3f}" for s, seed, p, d, k in worse) or "none") + ".", ""]
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seeds", type=int, default=5, help="toy draws 0..S-1")
    ap.add_argument("--sets", default=",".join(REAL_SETS + MIX_SETS + toy.SETS))
    ap.add_argument("--scale", default="1e5", help="scale set sizes (comma-separated; '' skips them)")
    ap.add_argument("--scale-methods", default="closest+size,dasgupta,dasgupta+size,ward")
    ap.add_argument("--reuse-scale", action="store_true", help="take the scale rows from runs/hierarchies_tmp")
    ap.add_argument("--pilot", action="store_true")
    ap.add_argument("--scale-worker", nargs=3)
    ap.add_argument("--out", default=str(HERE / "results" / "hierarchies.md"))
    args = ap.parse_args()
    warnings.filterwarnings("ignore", category=UserWarning)
    if args.scale_worker:
        m, n, d = args.scale_worker
        return scale_worker(m, int(n), int(d))
    if args.pilot:
        return pilot()
    methods = dict(HISEG, **DEFAULT_ROW)
    res = {}
    for s in [s for s in args.sets.split(",") if s]:
        seeds = range(args.seeds) if s in toy.SETS else [0]
        res[s] = [run_set(s, seed, methods) for seed in seeds]
    scale_rows = {}
    tmp = ROOT / "runs" / "hierarchies_tmp"
    tmp.mkdir(parents=True, exist_ok=True)
    for n in [int(float(v)) for v in args.scale.split(",") if v]:
        d = 10 if n <= 100000 else 16
        cache = tmp / f"scale_{n}.json"
        if args.reuse_scale and cache.exists():  # a scale run made earlier (same code), not rerun
            scale_rows[(n, d)] = json.loads(cache.read_text())
        else:
            scale_rows[(n, d)] = scale(n, d, args.scale_methods.split(","), tmp)
            cache.write_text(json.dumps(scale_rows[(n, d)]))
    write(res, methods, scale_rows, args)


def write(res, methods, scale_rows, args):
    names = list(LINKAGES) + list(methods)
    groups = [("Real sets (one run each)", [s for s in REAL_SETS if s in res]),
              ("64-d mixtures (real.py's draw, seed 0)", [s for s in MIX_SETS if s in res]),
              (f"Toy sets (seeds 0-{args.seeds - 1}, mean ± std)", [s for s in toy.SETS if s in res])]
    out = ["# Hierarchies measured as a whole: dendrogram purity, Dasgupta's cost, flat accuracy", "",
           "Written by `experiments/paper/hierarchies.py` (its docstring: the data, the similarity graph, how "
           "time and memory are measured). *purity*: dendrogram purity, exact. *Dasgupta*: Dasgupta's cost "
           "on the set's 10-NN + MST graph with similarity exp(-(d / mean d)^2), divided by the flat "
           "tree's (lower is better). *accuracy*: the cut at the true number of classes (linkages: plain "
           "cut; hiseg: its size-aware cut). Linkages: scipy on all pairs. hiseg's Dasgupta fits: size "
           "weight 1, from the input (as in `real.py`); closest+triplet sees 10% of the labels, all "
           "scores on all samples.", ""]
    for title, sets in groups:
        if not sets:
            continue
        out += [f"## {title}", ""]
        for key, label in (("purity", "dendrogram purity"), ("accuracy", "flat accuracy"),
                           ("dasgupta", "Dasgupta's cost (normalised, lower is better)"),
                           ("s", "fit time (s)"), ("MB", "peak memory of the forked fit above its start (MB)")):
            out += [f"### {label}", ""] + table(res, sets, names, key) + [""]
    if scale_rows:
        out += ["## Scale set", "",
                "`make_blobs(n, n_features=d, centers=5, random_state=0)` (the set of "
                "`benchmarks/bench_clustering_scale.py`), cut into 5 clusters. Each fit in a fresh process: "
                "*s* its wall time, *peak MB* the process's peak resident memory (imports and data "
                "included; torch's import alone ~650 MB). Ward: scikit-learn with a 10-NN connectivity "
                "(graph included in its time). *purity (sampled)*: the mean over 100,000 same-class pairs "
                "drawn at random (seed 0); *purity*: exact.", "",
                "| n | d | method | s | process CPU s | peak MB | iterations | edges | purity | purity (sampled) "
                "| Dasgupta | accuracy |", "|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
        for (n, d), rows in scale_rows.items():
            for m, r in rows.items():
                if "error" in r:
                    out.append(f"| {n:,} | {d} | {m} | failed: {r['error']} | | | | | | | | |")
                    continue
                out.append(f"| {n:,} | {d} | {m} | {r['seconds']:.1f} | {r['cpu_s']:.0f} | {r['peak_mb']:.0f} | "
                           f"{r.get('iterations', '')} | {r.get('edges', '')} | {r['purity']:.4f} | "
                           f"{r['purity_sampled']:.4f} | {r['dasgupta']:.4f} | {r['accuracy']:.4f} |")
        out.append("")
    pil = pilot_summary()
    if pil:
        out += ["## The unsupervised default: pilot search (toy seeds 100-104, mixture seeds 11-13)", "",
                "Candidates fitted on the pilot draws only (`--pilot`); label-free criteria on the estimator's "
                "own 5-NN + MST graph (similarity exp(-(d / mean d)^2)): the normalised cut of the k-cut and "
                "the hierarchy's Dasgupta cost.", ""] + pil
    out += ["## Published dendrogram purity (HypCSE's Table 1, %; preprocessing not stated)", "",
            "| method | iris | wine | breast cancer |", "|---|---:|---:|---:|"]
    out += [f"| {m} | " + " | ".join(f"{v:.1f}" for v in vals) + " |" for m, vals in PUBLISHED.items()]
    print(write_stamped(args.out, "\n".join(out)).read_text())


if __name__ == "__main__":
    main()
