"""Training-step split: CNN, superpixel rebuild, RAG pooling, tree construction, loss.

Builds one batch (default 8 crops of 320x320: BSDS500 train crops with ``--bsds DIR``,
else synthetic images) and times, over several steps, each stage of
:class:`hiseg.training.module.HierarchicalSegmentationModule`'s training step, for three
pipelines:

* ``color_watershed``: the loader's colour superpixels, exactly the pipeline's
  (``hiseg.data.graphs.loader_superpixels``; the batch carries the graph);
* ``boundary_watershed`` (the BSDS recipe, ``configs/bsds500_finetune.yaml``): the loader
  computes no superpixels, the step rebuilds superpixels, RAGs and targets from the
  predicted boundary maps on the CPU (``superpixels`` stage) before pooling;
* ``color_watershed, single``: the first with single linkage (its tree is a canonical
  BPT, ~10x cheaper than higra's average linkage).

Stages: CNN forward, superpixels (rebuild), pooling (frontier mean), tree (the weights'
copy to the host, one batched linkage on the CPU, the indices' copy to the device), loss
(pixel term, triplet sampling on the device, closest and triplet terms, forward),
backward, optimizer. A second table gives, per image, the host-side time of pooling, tree,
loss and rebuild (on the CPU all of it is host work; the target is pooling + tree + loss
<= 1 ms per 320x320 image); on a GPU (``--device cuda``) the first table's shares are the
step's. Times are the process's CPU time with one torch thread
(``--wall``: wall-clock time), so that they measure work on a machine shared with other
jobs; the median over ``--steps`` steps after a warm-up.

Host pool (``hiseg.segmentation.hostpool``, issue 33 item 3): the steps above use
``--host-workers`` (default ``auto``: a worker process per core; 0: in process); with
workers, times are wall-clock (the workers' CPU time is not the process's). Then, same run:

* **pool speed-up**: hierarchy + superpixels (the ``tree`` and ``superpixels`` stages) per
  step and their share of the step, average linkage, colour and rebuilt superpixels, in
  process (``--host-workers 0``) vs the pool, wall-clock;
* the trees alone on the batch's graphs: higra's one call on the whole batch (the code before
  the pool), one call per graph in process, per graph in the pool; and the crossover of
  in process vs pool over 1, 2, 4, ... graphs (``MIN_POOL_EDGES``), the same for the rebuild
  (``MIN_POOL_PIXELS``);
* the GIL check: how long a Python thread waits, at most, while another thread makes one call
  (a call that holds the GIL blocks it for the whole call; one that releases it, a few ms),
  and the speed at which a competing pure-Python thread runs while the function is called in
  a loop, relative to its speed alone (~0.5-0.7 releases, ~0.2 holds; needs one core only).

Usage: ``python benchmarks/bench_training.py [--batch 8] [--crop 320] [--steps 3]
[--threads 1] [--device cpu|cuda] [--bsds DIR] [--wall] [--region-size 12] [--host-workers auto]``
"""
import argparse
import hashlib
import json
import statistics
import threading
import time

import numpy as np
import torch

import hiseg.segmentation.hostpool as hostpool
from hiseg.data.collate import collate_graph_batch
from hiseg.data.graphs import SegmentationGraphDataset, loader_superpixels, rebuild_graphs
from hiseg.core.builders import grid_graph
from hiseg.core.graph import batch_graphs
from hiseg.training.module import HierarchicalSegmentationModule
from hiseg.segmentation import Pipeline
from hiseg.segmentation.hostpool import average_linkage_batch, host_pool, resolve_workers
from hiseg.core.average_linkage import build_average_linkage_hierarchy
from provenance import stamp

STAGES = ("forward", "superpixels", "pooling", "tree", "loss", "backward", "optimizer")
HOST = ("pooling", "tree", "loss", "superpixels")


def pipelines(region_size: float) -> dict:
    colour = {"superpixels": "color_watershed", "linkage": "average", "region_size": region_size}
    return {"color_watershed": colour,
            "boundary_watershed": {"superpixels": "boundary_watershed", "linkage": "average", "region_size": 8.0},
            "color_watershed, single": dict(colour, linkage="single")}


def make_batch(args, superpixels: str):
    sp = loader_superpixels(Pipeline.from_dict(pipelines(args.region_size)["color_watershed"]))
    if args.bsds:
        from hiseg.data.bsds import BSDS500
        from hiseg.data.transforms import RandomCrop

        ds = SegmentationGraphDataset(BSDS500(args.bsds, split="train"), RandomCrop(args.crop), sp, seed=0,
                                      superpixels=superpixels)
    else:
        from hiseg.data.synthetic import SyntheticSegmentation

        ds = SegmentationGraphDataset(SyntheticSegmentation(args.batch, size=args.crop, seed=0), None, sp,
                                      superpixels=superpixels)
    return collate_graph_batch([ds[i] for i in range(args.batch)])


def sync(dev):
    if dev.type == "cuda":
        torch.cuda.synchronize()


def step_split(args, dev, clock, pipeline: str, host_workers=None) -> dict:
    batch = make_batch(args, "none" if pipeline == "boundary_watershed" else "per_sample").to(dev)
    torch.manual_seed(0)
    m = HierarchicalSegmentationModule(arch=args.arch, arch_kwargs=args.arch_kwargs,
                                       pipeline=pipelines(args.region_size)[pipeline],
                                       host_workers=args.host_workers if host_workers is None else host_workers).to(dev)
    opt = torch.optim.AdamW(m.parameters(), lr=1e-3)
    rows = []
    for step in range(args.steps + 1):
        m.on_train_batch_start(batch, step)
        opt.zero_grad(set_to_none=True)
        sync(dev)
        t0 = clock()
        logits = m(batch.images)
        sync(dev)
        t1 = clock()
        tim = {}
        res = m.compute_losses(batch, logits, timings=tim)
        out, used = res.losses, res.batch
        sync(dev)
        t2 = clock()
        out["loss"].backward()
        sync(dev)
        t3 = clock()
        opt.step()
        sync(dev)
        t4 = clock()
        if step:  # skip warm-up
            rows.append(dict(forward=t1 - t0, **tim, backward=t3 - t2, optimizer=t4 - t3, total=t4 - t0))
    med = {k: float(np.median([r[k] for r in rows])) for k in rows[0]}
    return dict(med=med, edges=used.graph.num_edges, frontier=int(used.frontier_edge.numel()), module=m,
                batch=batch, logits=logits.detach())


def _python_thread_share(fn, seconds: float = 0.5, reps: int = 3) -> float:
    """Speed of a pure-Python thread while ``fn`` runs in a loop in another thread,
    relative to its speed alone (median of ``reps``)."""
    def rate(busy, dur):
        stop, n = [False], [0]

        def spin():
            while not stop[0]:
                n[0] += 1

        def work():
            while not stop[0]:
                busy()
        threads = [threading.Thread(target=spin)] + ([threading.Thread(target=work)] if busy else [])
        for t in threads:
            t.start()
        time.sleep(dur)
        stop[0] = True
        for t in threads:
            t.join()
        return n[0] / dur
    return statistics.median(rate(fn, seconds) / rate(None, seconds * 0.6) for _ in range(reps))


def _longest_wait(fn) -> tuple:
    """(seconds of one call of ``fn`` in a thread, the longest a Python loop in this thread
    waited meanwhile): a call that holds the GIL blocks the loop for its whole length."""
    done, out = [False], [0.0]

    def work():
        t0 = time.perf_counter()
        fn()
        out[0] = time.perf_counter() - t0
        done[0] = True
    th = threading.Thread(target=work)
    last, gap = time.perf_counter(), 0.0
    th.start()
    while not done[0]:
        now = time.perf_counter()
        gap, last = max(gap, now - last), now
        sum(range(100))
    th.join()
    return out[0], gap


def gil_check(res: dict) -> None:
    """Which parts of the host work hold the GIL (see the module docstring)."""
    import higra as hg

    from hiseg.data.graphs import graph_item

    m, batch, logits = res["module"], res["batch"], res["logits"]
    prob = torch.sigmoid(logits[0, 0].float()).cpu().numpy()
    sp = m.pipeline.make_superpixels(prob)
    seg = batch.segmentations[0]
    big = grid_graph((150, 150))  # a call long enough to see (~0.3-1 s)
    rng = np.random.default_rng(0)
    w, ln = rng.random(big.num_edges), rng.integers(1, 9, big.num_edges).astype(np.float64)
    hgraph = big.to_higra()
    tree, _ = hg.binary_partition_tree_average_linkage(hgraph, w, ln)
    data = b"\x01" * 50_000_000
    objs = rng.permutation(1_000_000).tolist()
    checks = {"reference that releases the GIL (sha256 of 50 MB)": lambda: hashlib.sha256(data).digest(),
              "reference that holds the GIL (sorted() of 1M shuffled ints)": lambda: sorted(objs),
              "higra binary_partition_tree_average_linkage (150x150 grid)":
                  lambda: hg.binary_partition_tree_average_linkage(hgraph, w, ln),
              "higra lowest_common_ancestor (all edges of those)":
                  lambda: tree.lowest_common_ancestor(big.sources, big.targets),
              "boundary_watershed (scipy filters + skimage watershed + make_connected)":
                  lambda: m.pipeline.make_superpixels(prob),
              "RAG + targets + frontier (graph_item)": lambda: graph_item(sp, seg)}
    print("\nGIL check: the longest a Python thread waits during one call in another thread (a call that holds "
          "the GIL blocks it for the whole call), and the speed of a competing pure-Python thread while the "
          "function runs in a loop, relative to its speed alone (~0.5-0.7: releases the GIL; ~0.2: holds it):\n")
    print("| function | one call ms | longest wait ms | holds the GIL | Python thread's relative speed |")
    print("|---|---:|---:|---|---:|")
    for name, fn in checks.items():
        call, gap = min((_longest_wait(fn) for _ in range(3)), key=lambda x: x[1])
        print(f"| {name} | {1e3 * call:.0f} | {1e3 * gap:.0f} | {'**yes**' if gap > 0.5 * call else 'no'} | "
              f"{_python_thread_share(fn):.2f} |")


def _best(f, n=5):
    """Median wall-clock seconds of ``f`` over ``n`` calls."""
    times = []
    for _ in range(n):
        t0 = time.perf_counter()
        f()
        times.append(time.perf_counter() - t0)
    return float(np.median(times))


def pool_tables(args, dev, res: dict, workers: int) -> None:
    """Pool speed-up of the step, the trees alone, and the crossovers (same run)."""
    pool = host_pool(workers)
    graph = ("tree", "superpixels")
    print(f"\n## Host pool: in process vs {workers} worker processes (`--host-workers {workers}`), wall-clock\n")
    print("| pipeline (average linkage) | host workers | hierarchy + superpixels s/step | share of the step | "
          "step s | images/s |")
    print("|---|---:|---:|---:|---:|---:|")
    speed = {}
    for name in ("color_watershed", "boundary_watershed"):
        arms = {}
        for n in (0, workers):  # alternate arms, twice, keep the faster of each (a shared machine)
            arms[n] = min((step_split(args, dev, time.perf_counter, name, host_workers=n)["med"] for _ in range(2)),
                          key=lambda r: r["total"])
        for n, r in arms.items():
            hs = sum(r[k] for k in graph)
            print(f"| {name} | {n or 'in process'} | {hs:.4f} | {100 * hs / r['total']:.1f}% | {r['total']:.3f} | "
                  f"{args.batch / r['total']:.2f} |")
        speed[name] = sum(arms[0][k] for k in graph) / sum(arms[workers][k] for k in graph)
    print("| **pool speed-up** (hierarchy + superpixels, in process / pool) | | " + " / ".join(
        f"{k}: **{v:.2f}x**" for k, v in speed.items()) + " | | | |")

    # the trees alone, on the colour batch's graphs
    g, w, ln = res["graph"], res["w"], res["lengths"]
    t_one = _best(lambda: build_average_linkage_hierarchy(g, w, ln))
    t_in = _best(lambda: average_linkage_batch(g, w, ln, None, lca=True))
    t_pool = _best(lambda: average_linkage_batch(g, w, ln, pool, lca=True))
    print(f"\nThe average-linkage trees alone ({g.num_graphs} graphs, {g.num_edges:,} edges), wall-clock ms: "
          f"higra's one call on the whole batch (before the pool) {1e3 * t_one:.1f}; one call per graph in process "
          f"{1e3 * t_in:.1f} (with the leaf-lca tables); per graph in the pool {1e3 * t_pool:.1f} "
          f"(**{t_in / t_pool:.2f}x** in process, {t_one / t_pool:.2f}x the one call)\n")
    print("Crossover (in process vs pool, ms): trees per number of graphs, then the rebuild per number of images\n")
    print("| graphs | edges | trees in process | trees in pool | ratio | pixels | rebuild in process | "
          "rebuild in pool | ratio |")
    print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    rb = res["rebuild"]
    saved = hostpool.MIN_POOL_EDGES, hostpool.MIN_POOL_PIXELS
    hostpool.MIN_POOL_EDGES = hostpool.MIN_POOL_PIXELS = 0
    try:
        k = 1
        while k <= g.num_graphs:
            sub = batch_graphs(res["graphs"][:k])
            e = sub.num_edges
            a = _best(lambda: average_linkage_batch(sub, w[:e], ln[:e], None, lca=True))
            b = _best(lambda: average_linkage_batch(sub, w[:e], ln[:e], pool, lca=True))
            sub_batch, maps = _first_images(rb["batch"], rb["maps"], k)
            pipe = rb["pipeline"]
            c = _best(lambda: rebuild_graphs(sub_batch, maps, pipe, None), 3)
            d = _best(lambda: rebuild_graphs(sub_batch, maps, pipe, pool), 3)
            print(f"| {k} | {e:,} | {1e3 * a:.1f} | {1e3 * b:.1f} | {a / b:.2f} | {maps[0].numel() * k:,} | "
                  f"{1e3 * c:.1f} | {1e3 * d:.1f} | {c / d:.2f} |")
            k *= 2
    finally:
        hostpool.MIN_POOL_EDGES, hostpool.MIN_POOL_PIXELS = saved


def _first_images(batch, maps, k):
    """The first ``k`` images of a batch without graph (the rebuild's input) and their maps."""
    from dataclasses import replace

    return replace(batch, images=batch.images[:k], boundary=batch.boundary[:k], segmentations=batch.segmentations[:k],
                   names=batch.names[:k], image_sizes=batch.image_sizes[:k],
                   num_annotators=batch.num_annotators[:k]), maps[:k]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--crop", type=int, default=320)
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--threads", type=int, default=1, help="torch threads")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--arch", default="compact_boundary_net")
    ap.add_argument("--arch-kwargs", type=json.loads, default=None, help='e.g. \'{"width": 32}\'')
    ap.add_argument("--region-size", type=float, default=12.0,
                    help="region_size of the color_watershed pipeline (the loaders' superpixels)")
    ap.add_argument("--bsds", default=None, help="BSDS500 root (train crops instead of synthetic images)")
    ap.add_argument("--wall", action="store_true", help="wall-clock time instead of process CPU time")
    ap.add_argument("--host-workers", default="auto", type=lambda v: v if v == "auto" else int(v),
                    help="worker processes of the host pool (auto: one per core; 0: in process)")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    dev = torch.device(args.device)
    workers = resolve_workers(args.host_workers)
    clock = time.perf_counter if args.wall or dev.type == "cuda" or workers else time.process_time
    what = "BSDS500 train crops" if args.bsds else "synthetic images"
    res = {p: step_split(args, dev, clock, p) for p in pipelines(args.region_size)}
    print(f"# training step, batch {args.batch} x {args.crop}x{args.crop} ({what}), {args.arch} "
          f"{args.arch_kwargs or ''}, device {dev}, torch threads {args.threads}, host workers {workers}, "
          f"{'wall-clock' if clock is time.perf_counter else 'process CPU'} time\n\n{stamp()}\n")
    print("| stage (seconds per step) | " + " | ".join(res) + " |")
    print("|---|" + "---:|" * len(res))
    for k in STAGES:
        print(f"| {k} | " + " | ".join(f"{r['med'][k]:.4f} ({100 * r['med'][k] / r['med']['total']:.1f}%)"
                                       for r in res.values()) + " |")
    graph = ("superpixels", "pooling", "tree", "loss")
    print("| **superpixels + pooling + tree + loss** | " + " | ".join(
        f"**{sum(r['med'][k] for k in graph):.4f} ({100 * sum(r['med'][k] for k in graph) / r['med']['total']:.1f}%)**"
        for r in res.values()) + " |")
    print("| **total** | " + " | ".join(f"**{r['med']['total']:.3f}**" for r in res.values()) + " |")
    print("| images/s | " + " | ".join(f"{args.batch / r['med']['total']:.2f}" for r in res.values()) + " |")
    print("| RAG edges / frontier pixel-edges in the batch | " + " | ".join(
        f"{r['edges']:,} / {r['frontier']:,}" for r in res.values()) + " |")
    where = "host-side, CPU" if dev.type == "cpu" else f"on {dev.type}: not host-side only"
    print(f"\nPer {args.crop}x{args.crop} image ({where}), milliseconds (target at 320x320: pooling + tree + loss "
          "<= 1 ms):\n")
    print("| stage (ms per image) | " + " | ".join(res) + " |")
    print("|---|" + "---:|" * len(res))
    for k in HOST:
        name = "rebuild (superpixels, RAGs, targets)" if k == "superpixels" else k
        print(f"| {name} | " + " | ".join(f"{1e3 * r['med'][k] / args.batch:.2f}" for r in res.values()) + " |")
    print("| (of which the pixel term, device work on a GPU) | " + " | ".join(
        f"({1e3 * r['med'].get('pixel', float('nan')) / args.batch:.2f})" for r in res.values()) + " |")
    print("| **pooling + tree + loss** | " + " | ".join(
        f"**{1e3 * sum(r['med'][k] for k in HOST[:3]) / args.batch:.2f}**" for r in res.values()) + " |")
    col, bw = res["color_watershed"], res["boundary_watershed"]
    graphs = [col["batch"].graph.graph(b) for b in range(col["batch"].graph.num_graphs)]
    rng = np.random.default_rng(0)
    host = dict(graphs=graphs, graph=col["batch"].graph, w=rng.random(col["batch"].graph.num_edges),
                lengths=np.concatenate([r.frontier_lengths() for r in col["batch"].rags]).astype(np.float64),
                rebuild=dict(batch=bw["batch"], pipeline=bw["module"].pipeline, maps=bw["module"].pipeline.maps(
                    bw["module"].model, bw["batch"].images, torch.sigmoid(bw["logits"][:, 0].float())).detach()))
    if workers:
        pool_tables(args, dev, host, workers)
    else:
        print("\n(--host-workers 0: no pool to compare)")
    gil_check(bw)


if __name__ == "__main__":
    main()
