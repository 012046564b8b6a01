"""Which hierarchy to build on a predicted boundary map: variants measured on BSDS val.

    python experiments/segmentation/hierarchy_variants.py --weights W --bsds ../shared/data/BSDS500 \
        --n-images 25 --thresholds 33 --out experiments/segmentation/results/hierarchy_variants

For each val image: the network's boundary map, then each variant's ucm2 (.mat) in its
own folder, then the Python BSDS benchmark on each folder, and one table.
"""
import argparse
import shutil
import sys
import time
from pathlib import Path

import numpy as np
import scipy.io
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))

from provenance import write_stamped  # noqa: E402

# RAG hierarchies go through hiseg's Pipeline; the pixel-graph watershed hierarchies are
# higra's, kept here because only this comparison uses them.
RAG_VARIANTS = {
    "ws_single": dict(superpixels="boundary_watershed", linkage="single"),
    "ws_average": dict(superpixels="boundary_watershed", linkage="average"),
    "owt_average": dict(superpixels="all_minima", linkage="average"),
}
PIXEL_VARIANTS = ("px_area", "px_dynamics", "px_volume")
VARIANTS = tuple(RAG_VARIANTS) + PIXEL_VARIANTS


def hierarchy_ucm2(pmap, variant):
    """BSDS ucm2 of one boundary map by one variant."""
    import higra as hg

    from hiseg.segmentation import Pipeline, ucm2_from_rag

    if variant in RAG_VARIANTS:
        rag, u, _ = Pipeline(**RAG_VARIANTS[variant]).hierarchy_of_map(pmap)
        return ucm2_from_rag(rag, u)
    g = hg.get_4_adjacency_graph(pmap.shape)
    ew = hg.weight_graph(g, pmap.astype(np.float64), hg.WeightFunction.mean)
    fn = {"px_area": hg.watershed_hierarchy_by_area, "px_dynamics": hg.watershed_hierarchy_by_dynamics,
          "px_volume": hg.watershed_hierarchy_by_volume}[variant]
    tree, alt = fn(g, ew)
    khal = np.asarray(hg.graph_4_adjacency_2_khalimsky(g, hg.saliency(tree, alt)), dtype=np.float64)
    ucm2 = np.zeros((khal.shape[0] + 2, khal.shape[1] + 2))   # (2H-1, 2W-1) -> (2H+1, 2W+1)
    ucm2[1:-1, 1:-1] = khal
    ucm2[1::2, 1::2] = 0.0
    return ucm2 / ucm2.max() if ucm2.max() > 0 else ucm2


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--weights", required=True)
    ap.add_argument("--bsds", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--n-images", type=int, default=25)
    ap.add_argument("--thresholds", type=int, default=33)
    ap.add_argument("--variants", default="all")
    ap.add_argument("--workers", type=int, default=2)
    args = ap.parse_args()
    torch.set_num_threads(2)
    from hiseg.data.bsds import find_bsds_root
    from hiseg.io import read_image
    from hiseg.metrics.bsds import evaluate
    from hiseg.models import load_model

    root = find_bsds_root(args.bsds)
    out = Path(args.out)
    names = [p.stem for p in sorted((root / "images" / "val").glob("*.jpg"))][: args.n_images]
    gt = out / "gt"
    shutil.rmtree(gt, ignore_errors=True)
    gt.mkdir(parents=True)
    for n in names:
        (gt / f"{n}.mat").symlink_to((root / "groundTruth" / "val" / f"{n}.mat").resolve())
    model = load_model(args.weights).eval()
    variants = list(VARIANTS) if args.variants == "all" else args.variants.split(",")
    times = {v: [] for v in variants}
    for v in variants:
        shutil.rmtree(out / v, ignore_errors=True)
        (out / v).mkdir(parents=True)
    for n in names:
        img = read_image(root / "images" / "val" / f"{n}.jpg")
        with torch.no_grad():
            pmap = torch.sigmoid(model(torch.from_numpy(img.transpose(2, 0, 1).copy())[None]))[0, 0].numpy()
        for v in variants:
            t0 = time.perf_counter()
            ucm2 = hierarchy_ucm2(pmap, v)
            times[v].append(time.perf_counter() - t0)
            scipy.io.savemat(out / v / f"{n}.mat", {"ucm2": ucm2}, do_compression=True)
    rows = []
    res_all = {}
    for v in variants:
        r = evaluate(out / v, gt, n_thresholds=args.thresholds, workers=args.workers)
        res_all[v] = r
        b = r["boundary"]
        rows.append(f"| {v} | {b['ods']['f']:.4f} | {b['ois']['f']:.4f} | {b['ap']:.4f} | {r['covering']['ods']:.4f} | "
                    f"{r['covering']['ois']:.4f} | {r['pri']['ods']:.4f} | {r['vi']['ods']:.4f} | {np.median(times[v]):.3f} |")
        print(rows[-1], flush=True)
    hdr = (f"BSDS500 val, first {len(names)} images, {args.thresholds} thresholds\n\n"
           "| variant | ODS F | OIS F | AP | cover ODS | cover OIS | PRI ODS | VI ODS | s/img |\n|---|---|---|---|---|---|---|---|---|\n")
    print(write_stamped(out / "results.md", hdr + "\n".join(rows)).read_text())


if __name__ == "__main__":
    main()
