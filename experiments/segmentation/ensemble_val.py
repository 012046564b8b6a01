"""Two networks' boundary maps averaged (a probe for issue 20: does a second, differently
trained network add to the shipped one?).

The ensemble (``hiseg.models.ensemble.MeanProbabilityEnsemble``: the logit of the mean of its
members' probabilities) runs
through a plain pipeline (no merging head: a head is fitted on one network's maps) on BSDS500
val; each member alone runs through the same pipeline as the reference. ``hiseg``'s benchmark
gives every figure.

    python experiments/segmentation/ensemble_val.py --members bsds500 experiments/state/gpu_twin_pixel_last.ckpt \\
        --bsds ../shared/data/BSDS500 --work runs/ensemble --out experiments/segmentation/results/ensemble_val/results.md
"""
import argparse
import json
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))

from provenance import write_stamped  # noqa: E402


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--members", nargs="+", required=True, help="shipped names or checkpoint files")
    ap.add_argument("--bsds", required=True)
    ap.add_argument("--work", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--thresholds", type=int, default=99)
    ap.add_argument("--limit", type=int, default=0)
    ap.add_argument("--alone", action="store_true", help="also each member alone")
    args = ap.parse_args(argv)
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from ucm_calibration import figures, link_ground_truth

    from hiseg.data.bsds import find_bsds_root
    from hiseg.segmentation.segmenter import Segmenter
    from hiseg.io import read_image, write_ucm2_mat
    from hiseg.metrics.bsds import evaluate
    from hiseg.models.ensemble import MeanProbabilityEnsemble
    from hiseg.segmentation import Pipeline

    torch.set_num_threads(1)
    root = find_bsds_root(args.bsds)
    images = sorted((root / "images" / "val").glob("*.jpg"))[: args.limit or None]
    gt = link_ground_truth(images, root / "groundTruth" / "val", Path(args.work) / "gt")
    segs = [Segmenter.from_checkpoint(m, backend="torch") for m in args.members]  # their torch networks, averaged
    pipeline = Pipeline(superpixels="boundary_watershed", linkage="average", region_size=8.0, scales=(1.0,))
    runs = {"ensemble": Segmenter(MeanProbabilityEnsemble.from_models([s.model for s in segs]), pipeline=pipeline)}
    if args.alone:
        runs.update({Path(m).stem: Segmenter(s.model, pipeline=pipeline) for m, s in zip(args.members, segs)})
    rows = []
    for name, seg in runs.items():
        d = Path(args.work) / name
        d.mkdir(parents=True, exist_ok=True)
        t = []
        for f in images:
            if not (d / f"{f.stem}.mat").exists():
                t0 = time.perf_counter()
                res = seg.segment(read_image(f))
                t.append(time.perf_counter() - t0)
                write_ucm2_mat(d / f"{f.stem}.mat", res.ucm2)
        r = figures(evaluate(d, gt, n_thresholds=args.thresholds, workers=1))
        rows.append((name, r, sorted(t)[len(t) // 2] if t else float("nan")))
        print(name, r, flush=True)
    keys = list(rows[0][1])
    lines = [f"BSDS500 val, {len(images)} images, {args.thresholds} thresholds; members {args.members}; pipeline "
             "boundary_watershed 8 px, average linkage, scale 1, no merging head (experiments/segmentation/ensemble_val.py)\n",
             "| run | " + " | ".join(keys) + " | s/img |", "|---|" + "---|" * (len(keys) + 1)]
    lines += [f"| {n} | " + " | ".join(f"{v:.4f}" for v in r.values()) + f" | {s:.2f} |" for n, r, s in rows]
    print(write_stamped(args.out, "\n".join(lines)).read_text())
    Path(args.out).with_suffix(".json").write_text(json.dumps({n: r for n, r, _ in rows}))


if __name__ == "__main__":
    main()
