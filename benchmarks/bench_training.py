"""Training-step split: CNN, superpixel rebuild, RAG pooling, tree construction, loss.

Builds one batch (default 8 crops of 320x320: BSDS500 train crops with ``--bsds DIR``,
else synthetic images) and times, over several steps, each stage of
:class:`hiseg.lightning.HierarchicalSegmentationModule`'s training step, for three
pipelines:

* ``color_watershed``: the loader's colour superpixels, exactly the pipeline's
  (``hiseg.data.collate.loader_superpixels``; the batch carries the graph);
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

Then, for the rebuild (what a GPU run of the BSDS recipe waits on, as the device does
not do it): its time for the batch with a thread pool of 1 and 2 threads (wall-clock and
CPU), next to the same for a reference that certainly runs in parallel (``hashlib``
releases the GIL), so the speed-up can be read against what the machine allows; and a
GIL check that works even on one free core: the speed at which a competing pure-Python
thread runs while a function is called in a loop, relative to its speed alone (a
function that releases the GIL shares the core, ~0.5-0.7; one that holds it starves the
Python thread, ~0.2). Tree construction for the B graphs is also timed per graph in a
thread pool.

Usage: ``python benchmarks/bench_training.py [--batch 8] [--crop 320] [--steps 3]
[--threads 1] [--device cpu|cuda] [--bsds DIR] [--wall] [--region-size 12]``
"""
import argparse
import hashlib
import json
import statistics
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import torch

import hiseg.lightning as hl
from hiseg.data.collate import SegmentationGraphDataset, collate_graph_batch, loader_superpixels
from hiseg.lightning import HierarchicalSegmentationModule
from hiseg.segmentation import Pipeline
from hiseg.ultrametric import build_hierarchy

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


def step_split(args, dev, clock, pipeline: str) -> dict:
    batch = make_batch(args, "none" if pipeline == "boundary_watershed" else "per_sample").to(dev)
    torch.manual_seed(0)
    m = HierarchicalSegmentationModule(arch=args.arch, arch_kwargs=args.arch_kwargs,
                                       pipeline=pipelines(args.region_size)[pipeline]).to(dev)
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


def _pool_times(fn, n_threads: int, repeat: int = 3):
    """(wall, CPU) seconds of ``fn`` with hiseg's thread pool of ``n_threads`` (best of ``repeat``)."""
    saved = hl._POOL
    hl._POOL = ThreadPoolExecutor(n_threads)
    try:
        fn()  # warm-up
        best = (np.inf, np.inf)
        for _ in range(repeat):
            w, c = time.perf_counter(), time.process_time()
            fn()
            best = min(best, (time.perf_counter() - w, time.process_time() - c))
        return best
    finally:
        hl._POOL.shutdown()
        hl._POOL = saved


def rebuild_parallelism(res: dict, batch_size: int) -> None:
    m, batch, logits = res["module"], res["batch"], res["logits"]
    data = b"\x01" * 20_000_000

    def reference():
        list(hl._thread_pool().map(lambda _: hashlib.sha256(data).digest(), range(batch_size)))

    print(f"\nRebuild of the {batch_size} images' superpixels, RAGs and targets (`rebuild_graphs`) on hiseg's "
          "thread pool, against a reference that releases the GIL (sha256 of 20 MB per image):\n")
    print("| work | threads | wall s | CPU s | speed-up (wall) |")
    print("|---|---:|---:|---:|---:|")
    maps = m.pipeline.maps(m.model, batch.images, torch.sigmoid(logits[:, 0].float())).detach()
    for name, fn in (("rebuild_graphs", lambda: m.rebuild_graphs(batch, maps)), ("reference (sha256)", reference)):
        one = _pool_times(fn, 1)
        two = _pool_times(fn, 2)
        print(f"| {name} | 1 | {one[0]:.3f} | {one[1]:.3f} | |")
        print(f"| {name} | 2 | {two[0]:.3f} | {two[1]:.3f} | {one[0] / two[0]:.2f}x |")
    from hiseg.data.collate import _graph_item
    from hiseg.segmentation.superpixels import boundary_watershed

    prob = torch.sigmoid(logits[0, 0].float()).cpu().numpy()
    sp = m.pipeline.make_superpixels(prob)
    seg = batch.segmentations[0]
    objs = np.random.default_rng(0).permutation(300_000).tolist()  # a real sort (~30 ms), GIL held
    checks = {"reference that releases the GIL (sha256 of 20 MB)": lambda: hashlib.sha256(data).digest(),
              "reference that holds the GIL (sorted() of 300k shuffled ints)": lambda: sorted(objs),
              "boundary_watershed (scipy filters + skimage watershed + make_connected)":
                  lambda: boundary_watershed(prob, m.pipeline.region_size, m.pipeline.sigma),
              "RAG + targets (_graph_item)": lambda: _graph_item(sp, seg)}
    print("\nGIL check: speed of a competing pure-Python thread while the function runs in a loop, relative "
          "to its speed alone (~0.5-0.7: the function releases the GIL and shares the core; ~0.2: it holds it):\n")
    print("| function | Python thread's relative speed |")
    print("|---|---:|")
    for name, fn in checks.items():
        print(f"| {name} | {_python_thread_share(fn):.2f} |")


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
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    dev = torch.device(args.device)
    clock = time.perf_counter if args.wall or dev.type == "cuda" else time.process_time
    what = "BSDS500 train crops" if args.bsds else "synthetic images"
    res = {p: step_split(args, dev, clock, p) for p in pipelines(args.region_size)}
    print(f"# training step, batch {args.batch} x {args.crop}x{args.crop} ({what}), {args.arch} "
          f"{args.arch_kwargs or ''}, device {dev}, torch threads {args.threads}, "
          f"{'wall-clock' if clock is time.perf_counter else 'process CPU'} time\n")
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
    rebuild_parallelism(res["boundary_watershed"], args.batch)
    # parallel tree building across the batch
    batch = res["color_watershed"]["batch"]
    w = torch.rand(batch.graph.num_edges, dtype=torch.float64)
    graphs = [batch.graph.graph(b) for b in range(batch.graph.num_graphs)]
    ws = [w[batch.graph.edge_ptr[b]:batch.graph.edge_ptr[b + 1]] for b in range(batch.graph.num_graphs)]

    def best(f, n=5):
        return min(_t(f) for _ in range(n))

    t_batched = best(lambda: build_hierarchy(batch.graph, w))
    t_loop = best(lambda: [build_hierarchy(g, x) for g, x in zip(graphs, ws)])
    with ThreadPoolExecutor(2) as ex:
        t_thr = best(lambda: list(ex.map(lambda gx: build_hierarchy(*gx), zip(graphs, ws))))
    print(f"\nTree construction (single linkage) for the {len(graphs)} colour-superpixel graphs, wall-clock: one "
          f"batched call {t_batched * 1e3:.1f} ms, loop {t_loop * 1e3:.1f} ms, 2 threads {t_thr * 1e3:.1f} ms")


def _t(f):
    t0 = time.perf_counter()
    f()
    return time.perf_counter() - t0


if __name__ == "__main__":
    main()
