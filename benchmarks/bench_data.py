"""Time per sample of each data stage; compare superpixel methods on BSDS500 crops.

Usage::

    python benchmarks/bench_data.py                     # stage timings (synthetic, BSDS if present)
    python benchmarks/bench_data.py --superpixels       # SLIC vs watershed (BSDS500 crops, else synthetic)
    python benchmarks/bench_data.py --bsds-root PATH --n 20

Prints markdown tables. The time of a step on one sample is the minimum over
``--repeat`` calls of the process's CPU time (``--wall``: wall-clock time); everything
runs single-threaded, so on an idle machine both agree, and CPU time stays meaningful
on a machine shared with other jobs. Tables give the
median (and mean) of that over ``--n`` samples, in one process (one core, OpenCV
single-threaded). The ``x floor`` column divides by the time of one pass over the
image's memory (``np.copy`` of the float32 image), measured in the same run.
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from hiseg.data import (BSDS500, Compose, RandomCrop, RandomFlip, RandomRescale,  # noqa: E402
                        SyntheticSegmentation, collate_graph_batch, compute_targets, make_graph_sample)
from hiseg.segmentation import (Superpixels, achievable_segmentation_accuracy, boundary_recall,  # noqa: E402
                                frontier_pixel_pairs, slic_superpixels, watershed_superpixels)
from hiseg.graph import region_adjacency_graph  # noqa: E402

SHARED_BSDS = ROOT.parent / "shared" / "data" / "BSDS500"


def _bsds_root(arg):
    for cand in ([arg] if arg else []) + [str(ROOT / "datasets" / "BSDS500"), str(SHARED_BSDS)]:
        if cand and Path(cand).exists():
            return cand
    return None


REPEAT = 3


CLOCK = time.process_time


def _timed(fn, *args):
    """Result and the minimum time over REPEAT calls (CPU time of the process by default)."""
    best = np.inf
    for _ in range(max(1, REPEAT)):
        t = CLOCK()
        out = fn(*args)
        best = min(best, CLOCK() - t)
    return out, best


def _rag_and_frontier(sp):
    rag = region_adjacency_graph(sp)
    frontier_pixel_pairs(rag)
    return rag


def stage_table(title: str, raw, transform, sp_fn, n: int, batch: int = 8):
    rng = np.random.default_rng(0)
    rows = {k: [] for k in ("load", "augment", "superpixels", "RAG + frontier", "targets", "collate (per sample)")}
    floor = []
    n_sp, n_edges = [], []
    items = []
    # warm-up (lazy imports, caches)
    s0 = raw[0]
    make_graph_sample(transform(s0, rng) if transform else s0, sp_fn)
    for i in range(n):
        s, t = _timed(raw.__getitem__, i % len(raw))
        rows["load"].append(t)
        if transform is not None:
            s, t = _timed(transform, s, rng)
        else:
            t = 0.0
        rows["augment"].append(t)
        _, t = _timed(np.copy, s["image"])
        floor.append(t)
        sp, t = _timed(sp_fn, s["image"])
        rows["superpixels"].append(t)
        rag, t = _timed(_rag_and_frontier, sp)
        rows["RAG + frontier"].append(t)
        _, t = _timed(compute_targets, rag, s["segmentations"])
        rows["targets"].append(t)
        n_sp.append(rag.num_regions)
        n_edges.append(rag.graph.num_edges)
        items.append(make_graph_sample(s, sp_fn))
    for j in range(0, len(items) - batch + 1, batch) or [0]:
        chunk = items[j:j + batch] or items
        _, t = _timed(collate_graph_batch, chunk)
        rows["collate (per sample)"].append(t / len(chunk))
    fl = float(np.median(floor))
    h, w = items[0]["image"].shape[-2:]
    print(f"\n### {title}: {n} samples of {h}x{w}, {np.mean(n_sp):.0f} superpixels and "
          f"{np.mean(n_edges):.0f} RAG edges on average\n")
    print("| stage | median ms / sample | mean ms | x floor |")
    print("|---|---:|---:|---:|")
    total = 0.0
    for k, v in rows.items():
        med = float(np.median(v))
        total += med
        print(f"| {k} | {1e3 * med:.2f} | {1e3 * float(np.mean(v)):.2f} | {med / fl:.0f} |")
    print(f"| **total** | {1e3 * total:.2f} | | {total / fl:.0f} |")
    print(f"| floor (np.copy of the image) | {1e3 * fl:.3f} | | 1 |")


def superpixel_table(root: str | None, n: int, crop: int = 320):
    if root is not None:
        raw, what = BSDS500(root, "train"), "BSDS500 train"
    else:
        raw, what = SyntheticSegmentation(n, crop, 4, seed=0, n_regions=(60, 120)), "synthetic"
    data = []
    for i in range(min(n, len(raw))):
        s = raw[i]
        data.append((np.ascontiguousarray(s["image"][:crop, :crop]), s["segmentations"][:, :crop, :crop]))
    methods = {
        "SLIC (skimage, compactness 10, 10 iters)": lambda im, rs: slic_superpixels(im, rs),
        "watershed, no distance term": lambda im, rs: watershed_superpixels(im, rs, compactness=0.0),
        "watershed + distance term 0.2 (default)": lambda im, rs: watershed_superpixels(im, rs),
        "watershed + distance term 1.0": lambda im, rs: watershed_superpixels(im, rs, compactness=1.0),
    }
    print(f"\n### Superpixels on {len(data)} {what} crops of {crop}x{crop} "
          "(boundary recall at 2 px, all annotators; ASA = achievable segmentation accuracy)\n")
    print("| method | region size (px) | superpixels | ms / crop (median) | boundary recall | ASA |")
    print("|---|---:|---:|---:|---:|---:|")
    for name, fn in methods.items():
        for rs in (18, 13, 10):
            ts, br, asa, r = [], [], [], []
            fn(data[0][0], rs)  # warm-up
            for im, seg in data:
                sp, t = _timed(fn, im, rs)
                ts.append(t)
                br.append(boundary_recall(sp, seg, 2.0))
                asa.append(achievable_segmentation_accuracy(sp, seg))
                r.append(sp.max() + 1)
            print(f"| {name} | {rs} | {np.mean(r):.0f} | {1e3 * np.median(ts):.1f} | "
                  f"{np.mean(br):.3f} | {np.mean(asa):.4f} |", flush=True)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--n", type=int, default=16, help="samples per table")
    p.add_argument("--bsds-root", default=None)
    p.add_argument("--superpixels", action="store_true", help="only the superpixel comparison table")
    p.add_argument("--repeat", type=int, default=3, help="time of a step = min over this many calls")
    p.add_argument("--wall", action="store_true", help="wall-clock time instead of process CPU time")
    args = p.parse_args(argv)
    p_wall = args.wall
    global REPEAT, CLOCK
    REPEAT = args.repeat
    if p_wall:
        CLOCK = time.perf_counter
    import cv2
    cv2.setNumThreads(1)
    import torch
    torch.set_num_threads(1)
    root = _bsds_root(args.bsds_root)
    if args.superpixels:
        if root is None:
            print("(BSDS500 not found: superpixels compared on synthetic 320x320 images instead)")
        superpixel_table(root, args.n)
        return 0
    stage_table("Synthetic (default data module)", SyntheticSegmentation(args.n, 128, 4, seed=0),
                Compose([RandomFlip(0.5, 0.5)]), Superpixels(region_size=8.0), args.n)
    if root is not None:
        tr = Compose([RandomRescale((0.75, 1.25)), RandomFlip(0.5), RandomCrop(320)])
        stage_table("BSDS500 train, 320x320 crops", BSDS500(root, "train"), tr, Superpixels(region_size=12.0), args.n)
    else:
        print("\n(BSDS500 not found: BSDS rows skipped)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
