"""Training-step throughput and its split: CNN, RAG pooling, tree construction, loss.

Builds one batch (default 8 crops of 320x320 from the synthetic generator, or BSDS500
train crops with ``--bsds``) and times, over several steps, each stage of
:class:`hiseg.lightning.HierarchicalSegmentationModule`'s training step:

* CNN forward, then CNN backward (everything the loss backward spends in the network),
* RAG pooling (frontier mean on the device),
* tree construction (one batched ``build_hierarchy`` on the CPU, incl. transfers),
* loss (closest + triplet sampling + pixel term, forward),

and prints images/s with the share of each stage. Tree construction for the B graphs
is also timed per graph in a thread pool, to show whether it can run in parallel
(higra's core holds the GIL or not). Data loading (superpixels, RAG, targets) happens in
loader workers and is reported by ``benchmarks/bench_data.py``.

Usage: ``python benchmarks/bench_training.py [--batch 8] [--crop 320] [--steps 5]
[--threads 2] [--device cpu|cuda] [--bsds DIR]``
"""
import argparse
import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import torch

from hiseg.data.collate import SegmentationGraphDataset, collate_graph_batch
from hiseg.segmentation.superpixels import Superpixels
from hiseg.lightning import HierarchicalSegmentationModule
from hiseg.ultrametric import build_hierarchy


def make_batch(args):
    sp = Superpixels(method="watershed", region_size=args.region_size)
    if args.bsds:
        from hiseg.data.bsds import BSDS500
        from hiseg.data.transforms import RandomCrop

        raw = BSDS500(args.bsds, split="train")
        ds = SegmentationGraphDataset(raw, RandomCrop(args.crop), sp)
    else:
        from hiseg.data.synthetic import SyntheticSegmentation

        raw = SyntheticSegmentation(args.batch, size=args.crop, seed=0)
        ds = SegmentationGraphDataset(raw, None, sp)
    return collate_graph_batch([ds[i] for i in range(args.batch)])


def sync(dev):
    if dev.type == "cuda":
        torch.cuda.synchronize()


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--crop", type=int, default=320)
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--arch", default="compact_boundary_net")
    ap.add_argument("--region-size", type=float, default=12.0)
    ap.add_argument("--bsds", default=None, help="BSDS500 root (train crops instead of synthetic images)")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    dev = torch.device(args.device)
    batch = make_batch(args).to(dev)
    m = HierarchicalSegmentationModule(arch=args.arch).to(dev)
    opt = torch.optim.AdamW(m.parameters(), lr=1e-3)
    rows = []
    for step in range(args.steps + 1):
        opt.zero_grad(set_to_none=True)
        sync(dev)
        t0 = time.perf_counter()
        logits = m(batch.images)
        sync(dev)
        t1 = time.perf_counter()
        tim = {}
        out, _, _ = m.compute_losses(batch, logits, timings=tim)
        sync(dev)
        t2 = time.perf_counter()
        out["loss"].backward()
        sync(dev)
        t3 = time.perf_counter()
        opt.step()
        sync(dev)
        t4 = time.perf_counter()
        if step:  # skip warm-up
            rows.append(dict(forward=t1 - t0, pooling=tim["pooling"], tree=tim["tree"], loss=tim["loss"],
                             backward=t3 - t2, optimizer=t4 - t3, total=t4 - t0))
    med = {k: float(np.median([r[k] for r in rows])) for k in rows[0]}
    ips = args.batch / med["total"]
    print(f"# training step, batch {args.batch} x {args.crop}x{args.crop}, {args.arch}, device {dev}, "
          f"torch threads {args.threads}, {batch.graph.num_edges:,} RAG edges, "
          f"{batch.frontier_edge.numel():,} frontier pixel-edges\n")
    print(f"throughput: **{ips:.2f} images/s** ({med['total']:.3f} s per step)\n")
    print("| stage | seconds | share |")
    print("|---|---:|---:|")
    for k in ("forward", "backward", "optimizer", "pooling", "tree", "loss"):
        print(f"| {k} | {med[k]:.4f} | {100 * med[k] / med['total']:.1f}% |")
    graph_side = med["pooling"] + med["tree"] + med["loss"]
    print(f"| **pooling + tree + loss** | {graph_side:.4f} | **{100 * graph_side / med['total']:.1f}%** |")
    # parallel tree building across the batch
    w = torch.rand(batch.graph.num_edges, dtype=torch.float64)
    graphs = [batch.graph.graph(b) for b in range(batch.graph.num_graphs)]
    ws = [w[batch.graph.edge_ptr[b]:batch.graph.edge_ptr[b + 1]] for b in range(batch.graph.num_graphs)]

    def best(f, n=5):
        return min(_t(f) for _ in range(n))

    t_batched = best(lambda: build_hierarchy(batch.graph, w))
    t_loop = best(lambda: [build_hierarchy(g, x) for g, x in zip(graphs, ws)])
    with ThreadPoolExecutor(args.threads) as ex:
        t_thr = best(lambda: list(ex.map(lambda gx: build_hierarchy(*gx), zip(graphs, ws))))
    print(f"\nTree construction for the {len(graphs)} graphs: one batched call {t_batched * 1e3:.1f} ms, "
          f"loop {t_loop * 1e3:.1f} ms, {args.threads} threads {t_thr * 1e3:.1f} ms")


def _t(f):
    t0 = time.perf_counter()
    f()
    return time.perf_counter() - t0


if __name__ == "__main__":
    main()
