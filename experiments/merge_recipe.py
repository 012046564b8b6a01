"""Stage 2 of the GPU recipe (``experiments/gpu_recipe.sh``): the learned-merging head of a new
network, the network frozen, trained on BSDS500 train+val with the recipe selected on val by
``experiments/merge_head.py`` (with the shipped network), exported as one checkpoint that
``hiseg predict --checkpoint`` runs as is.

1. the network's boundary map of every train and val image with the recipe's test-time
   setting (``Pipeline.boundary_map`` with its scales and flip; on CUDA when there is one);
2. every image's superpixels, RAG, edge features and ground-truth targets (``graph_item``),
   train images also mirrored (the map of a mirrored image is the mirrored map: the setting
   averages each scale with its mirror), in ``--workers`` processes;
3. the head trained through ``average_linkage_ultrametric`` (``merge_head.train_head``);
4. the network with a pipeline holding the head, written by ``save_weights``.

    python experiments/merge_recipe.py --checkpoint PIXEL.ckpt --bsds BSDS500 --work /tmp/merge \
        --out hiseg_gpu_merge.ckpt [--workers 16] [--limit N]
"""
import argparse
import json
import sys
import time
from argparse import Namespace
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))

#: the head recipe selected on val with the train-only twin (experiments/results/merge_selection/)
RECIPE = {"scales": [0.5, 1.0], "flip": True,
          "features": ["mean", "max", "q10", "q50", "q90", "mean_s2", "mean_s4", "log_length", "log_size_min",
                       "log_size_max", "lab_dist", "texture_diff", "interior_min", "interior_max"],
          "hidden": [32, 32], "context": 0, "steps": 250, "batch": 8, "lr": 3e-3, "weight_decay": 1e-4,
          "closest": 1.0, "closest_weighting": "none", "triplet": 0.5, "triplets": 2000, "margin": 0.2,
          "direct": 0.0, "seed": 0}


def graph_item(task):
    """The training item of one image (``merge_head``'s format): superpixels of the map by the
    pipeline, RAG, features, targets; ``task`` = (image path, ground-truth path, map path,
    mirrored, feature names, pipeline settings)."""
    from hiseg.data.targets import graph_targets
    from hiseg.graph import region_adjacency_graph
    from hiseg.io import load_ground_truth, read_image
    from hiseg.segmentation import Pipeline
    from hiseg.segmentation.merging import edge_features

    torch.set_num_threads(1)
    image_path, gt_path, map_path, mirrored, names, pipeline = task
    b = np.load(map_path)["map"].astype(np.float32)
    img = read_image(image_path)
    segs = np.stack(load_ground_truth(gt_path)[0])
    if mirrored:  # (H, W), (H, W, 3), (A, H, W): mirror the columns
        b, img, segs = (np.ascontiguousarray(b[:, ::-1]), np.ascontiguousarray(img[:, ::-1]),
                        np.ascontiguousarray(segs[:, :, ::-1]))
    sp = Pipeline.from_dict(pipeline).make_superpixels(b, img)
    rag = region_adjacency_graph(sp)
    tg = graph_targets(rag, segs)
    return {"name": Path(image_path).stem, "mirrored": mirrored, "sp": sp.astype(np.int32),
            "src": rag.graph.sources, "dst": rag.graph.targets, "n": rag.graph.num_vertices,
            "lengths": rag.frontier_lengths().astype(np.float64), "X": edge_features(rag, b, img, names),
            "edge_target": tg["edge_target"], "sp_labels": tg["sp_labels"].astype(np.int32)}


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--checkpoint", required=True, help="the network (a train.py checkpoint or slim weights)")
    ap.add_argument("--bsds", required=True)
    ap.add_argument("--work", required=True, help="scratch folder (maps)")
    ap.add_argument("--out", required=True, help="the exported checkpoint")
    ap.add_argument("--splits", default="train,val", help="the head's training images")
    ap.add_argument("--workers", type=int, default=4)
    ap.add_argument("--limit", type=int, default=0, help="images per split (0: all; tests)")
    ap.add_argument("--recipe", default="{}", help="JSON overrides of RECIPE")
    args = ap.parse_args(argv)
    import merge_head

    from hiseg.data.bsds import find_bsds_root
    from hiseg.inference import Segmenter
    from hiseg.io import read_image
    from hiseg.models.weights import save_weights
    from hiseg.segmentation.merging import FEATURES, network_fingerprint

    recipe = {**RECIPE, **json.loads(args.recipe)}
    device = "cuda" if torch.cuda.is_available() else "cpu"
    seg = Segmenter.from_checkpoint(args.checkpoint, device=device)
    pipe = seg.pipeline.with_overrides(scales=tuple(recipe["scales"]), flip=bool(recipe["flip"]))
    root = find_bsds_root(args.bsds)
    work = Path(args.work)
    t0 = time.perf_counter()
    tasks = []
    names = sorted(FEATURES)
    for split in args.splits.split(","):
        (work / split).mkdir(parents=True, exist_ok=True)
        images = sorted((root / "images" / split).glob("*.jpg"))[: args.limit or None]
        for p in images:
            m = work / split / f"{p.stem}.npz"
            if not m.is_file():
                with torch.no_grad():
                    np.savez(m, map=pipe.boundary_map(seg.model, read_image(p), device).astype(np.float16))
            gt = root / "groundTruth" / split / f"{p.stem}.mat"
            for mirrored in ((False, True) if split == "train" else (False,)):
                tasks.append((str(p), str(gt), str(m), mirrored, names, pipe.to_dict()))
    print(f"maps: {len(tasks)} graphs to build, {time.perf_counter() - t0:.0f} s", flush=True)
    with ProcessPoolExecutor(max(1, args.workers)) as pool:
        items = list(pool.map(graph_item, tasks, chunksize=4))
    print(f"graphs and features: {time.perf_counter() - t0:.0f} s", flush=True)
    ns = Namespace(**{k: v for k, v in recipe.items() if k not in ("scales", "flip")},
                   network=network_fingerprint(seg.model))
    head = merge_head.train_head(ns, {"features": names, "items": items})
    print(f"head trained: {time.perf_counter() - t0:.0f} s", flush=True)
    final = pipe.with_overrides(merge_head=head.to_spec())
    meta = {"pipeline": final.to_dict(), "recipe": "experiments/gpu_recipe.sh (merge_recipe.py)",
            "merge_head_data": f"BSDS500 {args.splits}", "merge_recipe": recipe, "network": str(args.checkpoint)}
    p = save_weights(seg.model.float().cpu(), args.out, metadata=meta)
    print(f"wrote {p} ({p.stat().st_size / 1024:.0f} KiB) after {time.perf_counter() - t0:.0f} s", flush=True)


if __name__ == "__main__":
    main()
