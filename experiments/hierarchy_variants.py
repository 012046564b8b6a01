"""Which hierarchy to build on a predicted boundary map: variants measured on BSDS val.

    python experiments/hierarchy_variants.py --weights W --bsds ../shared/data/BSDS500 \
        --n-images 25 --thresholds 33 --out experiments/results/hierarchy_variants

For each val image: the network's boundary map, then each variant's ucm2 (.mat) in its
own folder, then the Python BSDS benchmark on each folder, and one table.
"""
import argparse
import json
import shutil
import time
from pathlib import Path

import numpy as np
import scipy.io
import torch


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
    from hiseg.data.folder import read_image
    from hiseg.metrics.bsds import evaluate
    from hiseg.models import load_model
    from hiseg.segmentation.pipeline import VARIANTS, hierarchy_ucm2

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
    (out / "results.md").write_text(hdr + "\n".join(rows) + "\n")
    print(hdr + "\n".join(rows))


if __name__ == "__main__":
    main()
