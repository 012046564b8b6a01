"""Data throughput per core of each data path, stage by stage; superpixel methods compared.

Usage::

    python benchmarks/bench_data.py                     # data paths (synthetic, and BSDS500 if present)
    python benchmarks/bench_data.py --superpixels       # SLIC vs watershed (BSDS500 crops, else synthetic)
    python benchmarks/bench_data.py --bsds-root PATH --n 24

The paths (what a loader worker does for one training sample,
:class:`hiseg.data.SegmentationGraphDataset`):

* ``per_sample``: colour superpixels computed on every augmented sample;
* ``cached``: colour superpixels of each whole image computed once (the first time a
  worker sees it; reported apart, as "first sight"), augmented with the image, relabelled
  connected, the RAG re-derived (:mod:`hiseg.data.cache`);
* ``none``: no superpixels in the loader (what ``use_pipeline`` sets for a pipeline that
  rebuilds them): the model's pipeline rebuilds them from its prediction inside the training step
  (``pipeline.superpixels: boundary_watershed``, the BSDS recipe). That rebuild is CPU
  work of the step; its cost per sample (``--rebuild``: on the boundary maps of the
  pixel-stage network ``models/pixel_stage.ckpt`` when present, else of an untrained one)
  is given too, as it bounds what a GPU run of that recipe is fed.

Prints markdown tables. The time of a stage on one sample is the minimum over
``--repeat`` calls of the process's CPU time (``--wall``: wall-clock time); everything
runs single-threaded (OpenCV and torch with one thread), so CPU time per sample is the
cost on one core and stays meaningful on a machine shared with other jobs. The ``end to
end`` line times the data set's own ``__getitem__`` (one call per sample, CPU time, the
cache warm; the stage sum is a check of it); samples/s per core = 1 / (end to end +
collate per sample).
"""
from __future__ import annotations

import argparse
import sys
import time
from collections import defaultdict
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from hiseg.data import (BSDS500, Compose, RandomCrop, RandomFlip, RandomRescale,  # noqa: E402
                        SegmentationGraphDataset, SyntheticSegmentation, collate_graph_batch, make_graph_sample)
from hiseg.data.cache import SuperpixelCache  # noqa: E402
from hiseg.data.graphs import graph_item  # noqa: E402
from hiseg.data.targets import graph_targets, mean_boundary  # noqa: E402
from hiseg.segmentation import (Superpixels, achievable_segmentation_accuracy, boundary_recall,  # noqa: E402
                                frontier_pixel_pairs, slic_superpixels, watershed_superpixels)
from hiseg.segmentation.superpixels import make_connected  # noqa: E402
from hiseg.core.graph import region_adjacency_graph  # noqa: E402
from provenance import stamp  # noqa: E402

SHARED_BSDS = ROOT.parent / "shared" / "data" / "BSDS500"
PATHS = ("per_sample", "cached", "none")


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


def _once(fn, *args):
    t = CLOCK()
    out = fn(*args)
    return out, CLOCK() - t


def _rag_and_frontier(sp):
    rag = region_adjacency_graph(sp)
    frontier_pixel_pairs(rag)
    return rag


STAGES = ("load (decode image + ground truth)", "cache lookup", "augment",
          "augment (image, annotations, superpixels)", "superpixels (colour watershed)",
          "relabel connected (make_connected)", "RAG + frontier", "graph targets (majority labels, edge targets)",
          "boundary map target", "collate (per sample)")


def path_stages(raw, transform, sp_fn, path: str, n: int, batch: int = 8) -> dict:
    """Per-sample CPU time of each stage of a data path on ``n`` samples (see the docstring)."""
    rows = defaultdict(list)
    first = []
    cache = SuperpixelCache(sp_fn) if path == "cached" else None
    items, n_sp = [], []
    for i in range(n):
        idx = i % len(raw)
        s, t = _timed(raw.__getitem__, idx)
        rows["load (decode image + ground truth)"].append(t)
        if path == "cached":
            _, t0 = _once(cache, idx, s["image"], s.get("name", ""))  # the first sight computes
            sp0, t = _timed(cache, idx, s["image"], s.get("name", ""))
            first.append(t0 - t)
            rows["cache lookup"].append(t)
            s = dict(s, superpixels=sp0)
        seed = [0, i]
        s, t = _timed(lambda: transform(s, np.random.default_rng(seed)) if transform else s)
        rows["augment" + (" (image, annotations, superpixels)" if path == "cached" else "")].append(t)
        seg = s["segmentations"]
        if path == "per_sample":
            sp, t = _timed(sp_fn, s["image"])
            rows["superpixels (colour watershed)"].append(t)
        elif path == "cached":
            sp, t = _timed(make_connected, s["superpixels"])
            rows["relabel connected (make_connected)"].append(t)
        if path != "none":
            rag, t = _timed(_rag_and_frontier, sp)
            rows["RAG + frontier"].append(t)
            _, t = _timed(graph_targets, rag, seg)
            rows["graph targets (majority labels, edge targets)"].append(t)
            n_sp.append(int(sp.max()) + 1)
            s = dict(s, superpixels=sp)
        _, t = _timed(mean_boundary, seg)
        rows["boundary map target"].append(t)
        items.append(make_graph_sample(s, None))
    for j in range(0, max(1, len(items) - batch + 1), batch):
        chunk = items[j:j + batch]
        _, t = _timed(collate_graph_batch, chunk)
        rows["collate (per sample)"].append(t / len(chunk))
    # end to end: the data set's own __getitem__, the cache warm
    ds = SegmentationGraphDataset(raw, transform, sp_fn, superpixels=path)
    if path == "cached":
        for i in range(n):
            ds[(i % len(raw), (0, 0))]
    t = CLOCK()
    for i in range(n):
        ds[(i % len(raw), (0, 1))]
    e2e = (CLOCK() - t) / n
    h, w = items[0]["image"].shape[-2:]
    return dict(rows=rows, first=first, e2e=e2e, size=(h, w), n_sp=n_sp)


def paths_table(title: str, raw, transform, sp_fn, n: int, rebuild: dict | None = None) -> dict:
    res = {p: path_stages(raw, transform, sp_fn, p, n) for p in PATHS}
    h, w = res["per_sample"]["size"]
    print(f"\n### {title}: {n} samples of {h}x{w}, {np.mean(res['per_sample']['n_sp']):.0f} colour superpixels "
          f"per sample ({np.mean(res['cached']['n_sp']):.0f} on the cached path)\n")
    stages = [k for k in STAGES if any(k in res[p]["rows"] for p in PATHS)]
    print("| stage (ms per sample, median) | " + " | ".join(PATHS) + " |")
    print("|---|" + "---:|" * len(PATHS))
    for k in stages:
        cells = []
        for p in PATHS:
            v = res[p]["rows"].get(k)
            cells.append(f"{1e3 * float(np.median(v)):.2f}" if v else "-")
        print(f"| {k} | " + " | ".join(cells) + " |")
    stage_sum = {p: sum(float(np.median(v)) for v in res[p]["rows"].values()) for p in PATHS}
    print("| sum of the stages | " + " | ".join(f"{1e3 * stage_sum[p]:.1f}" for p in PATHS) + " |")
    print("| end to end (`__getitem__`, mean) | " + " | ".join(f"{1e3 * res[p]['e2e']:.1f}" for p in PATHS) + " |")
    # what a worker sustains: its items (end to end) and their collation
    totals = {p: res[p]["e2e"] + float(np.median(res[p]["rows"]["collate (per sample)"])) for p in PATHS}
    print("| **samples/s per core** (end to end + collate) | " + " | ".join(f"**{1 / totals[p]:.0f}**"
                                                                        for p in PATHS) + " |")
    first = float(np.median(res["cached"]["first"]))
    print(f"\nCached path, first sight of an image (whole-image superpixels, once per image and worker, "
          f"or once per image with a cache_dir): +{1e3 * first:.1f} ms (median).")
    if rebuild is not None:
        per = rebuild["per_sample"]
        print(f"\n`none` path: the training step rebuilds the superpixels, RAG and targets from the prediction "
              f"on the CPU: {1e3 * per:.1f} ms per sample ({rebuild['what']}); loader + rebuild: "
              f"{1e3 * (totals['none'] + per):.1f} ms, **{1 / (totals['none'] + per):.0f} samples/s per core**.")
    return totals


def rebuild_cost(raw, transform, n: int, region_size: float = 8.0) -> dict:
    """CPU time per sample of the step's rebuild (boundary watershed + RAG + targets) on
    predicted boundary maps of ``n`` augmented samples."""
    import torch

    from hiseg.models import get_model
    from hiseg.segmentation import Pipeline

    ckpt = ROOT / "models" / "pixel_stage.ckpt"
    model = get_model("compact_boundary_net", width=32, blocks=[2, 2, 3, 3], side_channels=16)
    what = "boundary maps of an untrained network"
    if ckpt.is_file():
        from hiseg.models.weights import load_weights

        load_weights(model, ckpt)
        what = "boundary maps of the pixel-stage network, models/pixel_stage.ckpt"
    model.eval()
    pipe = Pipeline(superpixels="boundary_watershed", region_size=region_size)
    samples = [transform(raw[i % len(raw)], np.random.default_rng([0, i])) for i in range(n)]
    with torch.no_grad():
        prob = [torch.sigmoid(model(torch.from_numpy(s["image"].transpose(2, 0, 1).copy())[None]))[0, 0].numpy()
                for s in samples]
    times, n_sp = [], []
    for p, s in zip(prob, samples):
        def rebuild():  # what the step does per image (with_superpixels)
            sp = pipe.make_superpixels(p)
            return sp, graph_item(sp, s["segmentations"])["frontier"]
        (sp, _), t = _timed(rebuild)
        times.append(t)
        n_sp.append(int(sp.max()) + 1)
    what += f", {np.mean(n_sp):.0f} superpixels of region size {region_size:g}"
    return {"per_sample": float(np.median(times)), "what": what}


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
    p.add_argument("--crop", type=int, default=320, help="BSDS500 training crop side")
    p.add_argument("--superpixels", action="store_true", help="only the superpixel comparison table")
    p.add_argument("--no-rebuild", action="store_true", help="skip the rebuild cost of the none path")
    p.add_argument("--repeat", type=int, default=3, help="time of a step = min over this many calls")
    p.add_argument("--wall", action="store_true", help="wall-clock time instead of process CPU time")
    args = p.parse_args(argv)
    global REPEAT, CLOCK
    REPEAT = args.repeat
    if args.wall:
        CLOCK = time.perf_counter
    import cv2
    cv2.setNumThreads(1)
    import torch
    torch.set_num_threads(1)
    root = _bsds_root(args.bsds_root)
    print(f"{stamp()}\n")
    if args.superpixels:
        if root is None:
            print("(BSDS500 not found: superpixels compared on synthetic 320x320 images instead)")
        superpixel_table(root, args.n)
        return 0
    print(f"(times: {'wall-clock' if args.wall else 'process CPU time'}, one thread)")
    syn = SyntheticSegmentation(args.n, 128, 4, seed=0)
    flips = Compose([RandomFlip(0.5, 0.5)])
    paths_table("Synthetic (default data module: 128x128, flips, superpixels of 8 px)", syn, flips,
                Superpixels(region_size=8.0), args.n)
    if root is not None:
        raw = BSDS500(root, "train")
        tr = Compose([RandomRescale((0.75, 1.25)), RandomFlip(0.5), RandomCrop(args.crop)])
        rebuild = None if args.no_rebuild else rebuild_cost(raw, tr, args.n)
        paths_table(f"BSDS500 train, {args.crop}x{args.crop} crops (rescale 0.75-1.25, flips; colour superpixels "
                    "of 12 px)", raw, tr, Superpixels(region_size=12.0), args.n, rebuild)
    else:
        print("\n(BSDS500 not found: BSDS rows skipped)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
