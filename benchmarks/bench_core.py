"""Per-iteration cost of ultrametric fitting against higra's bpt_canonical + lca floor.

Prints markdown tables:

1. time per gradient-descent iteration (forward, backward, AMSGrad step), single thread,
   on 4-adjacency grids with uniform random weights, for closest, closest+size,
   closest+triplet and dasgupta, next to the floor ``higra.bpt_canonical`` + lca of all
   edges (``tree.lowest_common_ancestor_preprocess().lca``) measured in the same run;
2. 64 RAG-sized graphs in one batched call vs the summed floor of the same graphs;
3. peak resident memory of the closest iteration at the largest size (fresh process).

``--optimiser`` prints only the optimiser step's table instead: the AMSGrad step of
``fit_ultrametric`` (``hiseg.core.fitting._AdamStep``: ``torch.optim.adam.adam`` on its own
state), the step it replaced (written out in the module, kept below as ``WrittenOutAdam``)
and ``torch.optim.Adam(amsgrad=True).step()``, per step on E weights next to the floor of
one in-place pass over them (``theta.add_(g)``), and the first step in a fresh process
after ``import torch`` (what the constructor's imports cost).

Usage: ``python benchmarks/bench_core.py [--sizes 3e3,3e4,3e5,2e6] [--repeat 3]
[--dasgupta-max 3e5] [--lam 5,50] [--optimiser]``. The timing figure of the paper (log-log time per
iteration vs edges) is drawn from this script's JSON output by
``experiments/paper/timing_figure.py``.
"""
import os

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("MKL_NUM_THREADS", "1")
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import argparse  # noqa: E402
import json  # noqa: E402
import resource  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402

import higra as hg  # noqa: E402
import numpy as np  # noqa: E402
import torch  # noqa: E402
from provenance import stamp  # noqa: E402

torch.set_num_threads(1)

import hiseg  # noqa: E402
from hiseg.core.fitting import make_loss  # noqa: E402
from hiseg.core.builders import grid_graph  # noqa: E402
from hiseg.core.graph import batch_graphs, region_adjacency_graph  # noqa: E402
from hiseg.core.ultrametric import build_hierarchy  # noqa: E402


def grid_for_edges(e):
    side = int(round((e / 2) ** 0.5))
    return grid_graph((side, side))


def floor_time(hgg, w, repeat):
    s, t = hgg.edge_list()
    best = np.inf
    for _ in range(repeat):
        t0 = time.perf_counter()
        tree, alt = hg.bpt_canonical(hgg, w)
        tree.lowest_common_ancestor_preprocess().lca(s, t)
        best = min(best, time.perf_counter() - t0)
    return best


def iteration_time(g, w, loss, repeat, **kw):
    """Median time of one fit iteration (forward, backward, optimiser step)."""
    J = make_loss(loss, **kw)
    wt0 = torch.tensor(w)
    theta = (wt0 + torch.log(-torch.expm1(-wt0.clamp_min(1e-12)))).requires_grad_(True)
    opt = torch.optim.Adam([theta], lr=0.1, amsgrad=True)
    times = []
    for _ in range(repeat + 1):  # first one warms up
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        wt = torch.nn.functional.softplus(theta)
        h = build_hierarchy(g, wt, check=False)
        u = h.ultrametric(wt)
        val = J(h, u, wt, wt0)
        val.backward()
        opt.step()
        times.append(time.perf_counter() - t0)
    return float(np.median(times[1:])) if repeat else times[0]


def breakdown(g, w):
    """Where the closest iteration's time goes (one run)."""
    from hiseg.core.ultrametric import canonical_edge_order

    out = {}
    t0 = time.perf_counter()
    order = canonical_edge_order(w)
    out["sort"] = time.perf_counter() - t0
    t0 = time.perf_counter()
    hg.cpp._bpt_canonical(g.sources, g.targets, order, g.num_vertices)
    out["union-find tree"] = time.perf_counter() - t0
    t0 = time.perf_counter()
    build_hierarchy(g, w, check=False)
    out["whole hierarchy + pass edges"] = time.perf_counter() - t0
    return out


def voronoi_rag(seed, shape=(160, 160), regions=1000):
    from scipy.spatial import cKDTree

    rng = np.random.default_rng(seed)
    pts = rng.random((regions, 2)) * shape
    yy, xx = np.mgrid[: shape[0], : shape[1]]
    _, lab = cKDTree(pts).query(np.stack([yy.ravel(), xx.ravel()], 1))
    return region_adjacency_graph(lab.reshape(shape)).graph


def _vm(field):
    import re

    with open("/proc/self/status") as f:
        return int(re.search(rf"{field}:\s+(\d+)", f.read()).group(1)) / 1024


def peak_memory_child(edges):
    g = grid_for_edges(edges)
    w = np.random.default_rng(0).random(g.num_edges)
    base = _vm("VmRSS")  # after imports and the graph: what the iteration adds is measured
    iteration_time(g, w, "closest", 2)
    peak = _vm("VmHWM")
    print(json.dumps({"edges": g.num_edges, "peak_rss_MiB": peak, "baseline_rss_MiB": base,
                      "iteration_peak_MiB": peak - base}))


class WrittenOutAdam:
    """The AMSGrad step fit_ultrametric used before issue 30 (torch.optim's update written
    out in hiseg.core.fitting), kept here as the reference of ``--optimiser``."""

    def __init__(self, theta, lr, eps=1e-8, b1=0.9, b2=0.999):
        self.theta, self.lr, self.eps, self.b1, self.b2, self.t = theta, lr, eps, b1, b2, 0
        self.m = self.v = self.vmax = None

    @torch.no_grad()
    def __call__(self):
        g = self.theta.grad
        if self.m is None:
            self.m, self.v, self.vmax = (torch.zeros_like(g) for _ in range(3))
        self.t += 1
        self.m.lerp_(g, 1 - self.b1)
        self.v.mul_(self.b2).addcmul_(g, g, value=1 - self.b2)
        torch.maximum(self.vmax, self.v, out=self.vmax)
        bc1, bc2 = 1 - self.b1 ** self.t, 1 - self.b2 ** self.t
        denom = (self.vmax.sqrt() / bc2 ** 0.5).add_(self.eps)
        self.theta.addcdiv_(self.m, denom, value=-self.lr / bc1)


def _steppers(theta):
    from hiseg.core.fitting import _AdamStep

    opt = None

    def torch_class():
        nonlocal opt
        opt = opt or torch.optim.Adam([theta], lr=0.1, amsgrad=True)
        opt.step()

    return {"written out (before)": WrittenOutAdam(theta, 0.1),
            "hiseg: torch.optim.adam.adam (now)": _AdamStep(theta, 0.1, None, "amsgrad", 1e-8),
            "torch.optim.Adam(amsgrad=True).step()": torch_class}


def optimiser_child(name):
    """In a fresh process: seconds of the first step after ``import torch`` (imports included)."""
    theta = torch.zeros(1000, dtype=torch.float64, requires_grad=True)
    theta.grad = torch.ones_like(theta)
    step = _steppers(theta)[name]
    t0 = time.perf_counter()
    step()
    print(json.dumps({"first_step_s": time.perf_counter() - t0, "dynamo": "torch._dynamo" in sys.modules}))


def optimiser_table(sizes, repeat):
    print(f"# The optimiser step of fit_ultrametric (single thread, torch {torch.__version__}, float64)\n\n"
          f"{stamp()}\n")
    names = list(_steppers(torch.zeros(1, requires_grad=True)))
    print("| edges | floor: theta.add_(g) (ms) | " + " | ".join(f"{n} (ms)" for n in names)
          + " | " + " | ".join(f"{n}: ratio" for n in names) + " |")
    print("|---:" * (2 + 2 * len(names)) + "|")
    n_steps = max(5, 20 * repeat)
    for e in sizes:
        e = int(e)
        gen = torch.Generator().manual_seed(0)
        theta = torch.randn(e, dtype=torch.float64, generator=gen).requires_grad_(True)
        theta.grad = torch.randn(e, dtype=torch.float64, generator=gen)

        def med(f):
            f()  # state allocated, imports done
            ts = []
            for _ in range(n_steps):
                t0 = time.perf_counter()
                f()
                ts.append(time.perf_counter() - t0)
            return float(np.median(ts))

        with torch.no_grad():
            fl = med(lambda: theta.add_(theta.grad, alpha=-1e-9))
        ts = [med(f) for f in _steppers(theta).values()]
        print(f"| {e:,} | {fl * 1e3:.4f} | " + " | ".join(f"{t * 1e3:.4f}" for t in ts) + " | "
              + " | ".join(f"{t / fl:.2f}x" for t in ts) + " |", flush=True)
    print("\nFirst step in a fresh process after `import torch` (1,000 weights; imports included):\n")
    print("| step | first step (s) | torch._dynamo imported |")
    print("|---|---:|---|")
    for n in names:
        out = subprocess.run([sys.executable, __file__, "--optimiser-child", n], capture_output=True, text=True,
                             check=True)
        r = json.loads(out.stdout.strip().splitlines()[-1])
        print(f"| {n} | {r['first_step_s']:.4f} | {'yes' if r['dynamo'] else 'no'} |", flush=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", default="3e3,3e4,3e5,2e6")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--dasgupta-max", type=float, default=2e6)
    ap.add_argument("--lam", default="5,50", help="sigmoid slopes for dasgupta (weights in [0,1])")
    ap.add_argument("--json", default=None, help="write the raw numbers here")
    ap.add_argument("--peak-memory-child", type=float, default=None, help=argparse.SUPPRESS)
    ap.add_argument("--optimiser", action="store_true", help="only the optimiser step's table")
    ap.add_argument("--optimiser-child", default=None, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.optimiser_child:
        optimiser_child(args.optimiser_child)
        return
    if args.optimiser:
        optimiser_table([float(x) for x in args.sizes.split(",")], args.repeat)
        return
    if args.peak_memory_child:
        peak_memory_child(args.peak_memory_child)
        return
    sizes = [float(x) for x in args.sizes.split(",")]
    lams = [float(x) for x in args.lam.split(",")]
    rows, raw = [], {"iteration": [], "stamp": stamp()}
    print(f"# hiseg core benchmark (single thread, torch {torch.__version__}, numpy {np.__version__})\n\n"
          f"{raw['stamp']}\n")
    print("| edges | floor: bpt_canonical + lca (s) | loss | iteration (s) | ratio to floor |")
    print("|---:|---:|---|---:|---:|")
    for e in sizes:
        g = grid_for_edges(e)
        hgg = g.to_higra()
        rng = np.random.default_rng(0)
        w = rng.random(g.num_edges)
        rep = args.repeat if g.num_edges < 1e6 else max(1, args.repeat - 1)
        fl = floor_time(hgg, w, rep)
        labels = np.full(g.num_vertices, -1)
        lab = rng.choice(g.num_vertices, 100, replace=False)
        labels[lab] = (lab % int(np.sqrt(g.num_vertices))) * 2 // int(np.sqrt(g.num_vertices))
        cases = [("closest", {}), ("closest+size", dict(top_nodes=100)),
                 ("closest+triplet", dict(labels=labels, margin=0.5))]
        if g.num_edges <= args.dasgupta_max * 1.01:
            cases += [(f"dasgupta (lambda={lam:g})", dict(sigmoid_slope=lam)) for lam in lams]
        for name, kw in cases:
            loss = name.split(" ")[0]
            r = 1 if loss == "dasgupta" and g.num_edges > 1e6 else rep
            t = iteration_time(g, w, loss, r, **kw)
            print(f"| {g.num_edges:,} | {fl:.4f} | {name} | {t:.4f} | {t / fl:.2f}x |", flush=True)
            raw["iteration"].append(dict(edges=g.num_edges, loss=name, seconds=t, floor=fl))
    # breakdown at the largest size
    g = grid_for_edges(sizes[-1])
    w = np.random.default_rng(0).random(g.num_edges)
    bd = breakdown(g, w)
    print(f"\nBreakdown of the hierarchy at {g.num_edges:,} edges: "
          + ", ".join(f"{k} {v:.3f} s" for k, v in bd.items()))
    # many small graphs
    graphs = [voronoi_rag(s) for s in range(64)]
    ws = [np.random.default_rng(100 + i).random(gg.num_edges) for i, gg in enumerate(graphs)]
    fl = sum(floor_time(gg.to_higra(), ww, args.repeat) for gg, ww in zip(graphs, ws))
    bg = batch_graphs(graphs)
    wcat = np.concatenate(ws)
    tb = iteration_time(bg, wcat, "closest", args.repeat)

    def loop():
        t0 = time.perf_counter()
        for gg, ww in zip(graphs, ws):
            iteration_time(gg, ww, "closest", 0)
        return time.perf_counter() - t0

    tl = min(loop() for _ in range(args.repeat))
    tu = min(_time(lambda: hiseg.subdominant_ultrametric(bg, torch.tensor(wcat))) for _ in range(args.repeat))
    mean_e = np.mean([gg.num_edges for gg in graphs])
    print(f"\n64 RAG graphs (~{mean_e:.0f} edges each, {bg.num_edges:,} in all)\n")
    print("| what | seconds | ratio to summed floor |")
    print("|---|---:|---:|")
    print(f"| floor: sum of 64 x (bpt_canonical + lca) | {fl:.4f} | 1.00x |")
    print(f"| subdominant_ultrametric, one batched call | {tu:.4f} | {tu / fl:.2f}x |")
    print(f"| closest iteration, one batched call (fwd+bwd+step) | {tb:.4f} | {tb / fl:.2f}x |")
    print(f"| closest iteration, loop over the 64 graphs | {tl:.4f} | {tl / fl:.2f}x |")
    raw["batched"] = dict(floor=fl, layer=tu, iteration=tb, loop=tl)
    # peak memory in a fresh process
    out = subprocess.run([sys.executable, __file__, "--peak-memory-child", str(sizes[-1])],
                         capture_output=True, text=True, check=True)
    mem = json.loads(out.stdout.strip().splitlines()[-1])
    print(f"\nPeak memory of the closest iteration (fwd + bwd + AMSGrad step, 3 iterations) at {mem['edges']:,} "
          f"edges: **{mem['iteration_peak_MiB']:.0f} MiB** above the process before it "
          f"(process peak {mem['peak_rss_MiB']:.0f} MiB, of which {mem['baseline_rss_MiB']:.0f} MiB are the "
          "imports of torch/numpy/higra and the graph itself)")
    raw["memory"] = mem
    if args.json:
        with open(args.json, "w") as f:
            json.dump(raw, f, indent=1)


def _time(f):
    t0 = time.perf_counter()
    f()
    return time.perf_counter() - t0


if __name__ == "__main__":
    main()
