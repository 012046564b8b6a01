"""hiseg's canonical BPT (numpy sort + higra's public ``hg.bpt_canonical`` on the edge
arrays, ``hiseg.core.ultrametric._canonical_bpt``) against the private ``hg.cpp._bpt_canonical``
it wraps (the path that pinned higra < 0.7, which hiseg left for the public API) and the public call on a higra
graph object.

Graphs: symmetric 5-NN graphs of uniform random points in the unit square (plus a chain,
so they are connected), about 4 edges per vertex, weights = edge lengths. Each call
returns the parent array and the MST edge map; all paths are checked to give identical
ones. Median of ``--repeat`` calls, the paths alternating. The graph-object call needs a
higra graph, built outside the timing (as a fit would).

Writes ``benchmarks/results/bpt_canonical.md``, stamped (``provenance.py``). Usage:
``python benchmarks/bench_bpt_canonical.py``.
"""
import argparse
import time
from pathlib import Path

import higra as hg
import numpy as np

from hiseg.core.ultrametric import _canonical_bpt, canonical_edge_order
from provenance import write_stamped

OUT = Path(__file__).resolve().parent / "results" / "bpt_canonical.md"


def knn_chain_graph(n, seed=0):
    from scipy.spatial import cKDTree

    X = np.random.default_rng(seed).random((n, 2))
    _, nn = cKDTree(X).query(X, 6)
    s = np.concatenate([np.repeat(np.arange(n), 5), np.arange(n - 1)])
    t = np.concatenate([nn[:, 1:].ravel(), np.arange(1, n)])
    key = np.unique(np.minimum(s, t) * n + np.maximum(s, t))
    a, b = key // n, key % n
    return a, b, np.linalg.norm(X[a] - X[b], axis=1)


def _higra_version():
    from importlib.metadata import version

    return version("higra")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--vertices", default="75000,1000000")
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--out", default=str(OUT))
    args = ap.parse_args()
    rows = []
    for n in (int(float(v)) for v in args.vertices.split(",")):
        a, b, w = knn_chain_graph(n)
        g = hg.UndirectedGraph(n)
        g.add_edges(a, b)
        private = getattr(getattr(hg, "cpp", None), "_bpt_canonical", None)
        ours, priv, pub = [], [], []
        for _ in range(args.repeat):
            t0 = time.perf_counter()
            parents, mst = _canonical_bpt(a, b, canonical_edge_order(w), n)
            t1 = time.perf_counter()
            if private is not None:
                p_parents, p_mst = private(a, b, canonical_edge_order(w), n)
            t2 = time.perf_counter()
            tree, _ = hg.bpt_canonical(g, w, compute_mst=False)
            t3 = time.perf_counter()
            ours.append(t1 - t0)
            priv.append(t2 - t1)
            pub.append(t3 - t2)
        same = (np.array_equal(np.asarray(parents), tree.parents())
                and np.array_equal(np.asarray(mst), hg.get_attribute(tree, "mst_edge_map"))
                and (private is None or (np.array_equal(np.asarray(p_parents), parents)
                                         and np.array_equal(np.asarray(p_mst), mst))))
        rows.append((n, a.size, np.median(ours), np.median(priv) if private else float("nan"), np.median(pub), same))
        print(rows[-1], flush=True)
    lines = ["# Canonical binary partition tree: hiseg's path against higra's private and graph-object calls", "",
             f"higra {_higra_version()}; median of {args.repeat} calls; 5-NN + chain graphs of uniform points "
             "(`benchmarks/bench_bpt_canonical.py`). *hiseg*: `canonical_edge_order` (numpy sort, ties by "
             "edge index) + the public `hg.bpt_canonical((sources, targets, n), sorted_edge_indices=...)` "
             "(`hiseg.core.ultrametric._canonical_bpt`); *private*: the same order + `hg.cpp._bpt_canonical` "
             "(hiseg's path before, pinned `higra<0.7`); *public, graph*: `hg.bpt_canonical(graph, w, "
             "compute_mst=False)` on a prebuilt higra graph (its own sort).", "",
             "| vertices | edges | hiseg (ms) | private (ms) | public, graph (ms) | identical output |",
             "|---:|---:|---:|---:|---:|---|"]
    for n, e, p1, p2, p3, same in rows:
        lines.append(f"| {n:,} | {e:,} | {1e3 * p1:.0f} | {1e3 * p2:.0f} | {1e3 * p3:.0f} | {'yes' if same else 'NO'} |")
    lines += ["", "hiseg calls only higra's public API: the private call saves the tree object's construction "
              "(a few ms at 3e5 edges, a few % of a fit iteration, which also sorts and answers lcas), not "
              "enough to pin higra below its next release for."]
    print(write_stamped(args.out, "\n".join(lines)).read_text())


if __name__ == "__main__":
    main()
