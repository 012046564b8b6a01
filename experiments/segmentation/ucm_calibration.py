"""Per-image calibration of the ultrametric contour map (issue 20: cover / VI / Fb ODS).

The ODS figures cut every image of the set at one common threshold; the OIS figures at each
image's best. A per-image *monotone* remapping of a ucm leaves its hierarchy and its OIS
figures unchanged and moves only what the common threshold means from image to image. This
experiment mixes each ucm value ``u`` with the image's scale in log-region count,

    f(u) = (1 - lam) * u + lam * (1 - log n(u) / log N),

where ``n(u)`` is the number of regions just after the merges at or below ``u`` and ``N``
the number of leaf regions (``f`` is increasing in ``u``, ``f(0) = 0``, ``f(top) <= 1``).
``lam = 0`` is the model's ucm; ``lam = 1`` cuts every image at the same fraction of its
log-region count.

1. ``hiseg``'s segmenter (default: the shipped ``bsds500_merge``) on every image of a split,
   kept as (ucm2, sorted merge altitudes, N) in ``WORK/<split>.npz`` files (one per image);
2. for each ``lam``: the remapped ucm2 files, then ``hiseg.metrics.bsds.evaluate`` on them;
3. a markdown table (``OUT``) of every figure per ``lam``.

Select ``lam`` on train, then measure it on val:

    python experiments/segmentation/ucm_calibration.py --split train --lams 0 0.1 0.2 0.3 0.5 --thresholds 33 \\
        --bsds ../shared/data/BSDS500 --work runs/calib --out experiments/segmentation/results/ucm_calibration/train.md
"""
import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))

from provenance import write_stamped  # noqa: E402


def region_scale(ucm2: np.ndarray, altitudes: np.ndarray, n_leaves: int, lam: float) -> np.ndarray:
    """``f(u)`` above on every positive value of ``ucm2`` (``altitudes``: the sorted merge
    altitudes of the image's hierarchy, ``n_leaves`` its leaf regions)."""
    if not 0 <= lam <= 1:
        raise ValueError(f"lam must be in [0, 1], got {lam}")
    out = np.array(ucm2, dtype=np.float64, copy=True)
    pos = out > 0
    if lam == 0 or n_leaves < 2 or not pos.any():
        return out
    u = out[pos]
    merged = np.searchsorted(altitudes, u, side="right")  # merges at or below u
    n = np.maximum(n_leaves - merged, 1)
    r = 1.0 - np.log(n) / np.log(n_leaves)
    out[pos] = (1 - lam) * u + lam * r
    return out


def link_ground_truth(images, gt_dir: Path, dest: Path) -> Path:
    """``dest``: links to the ground truth of ``images`` only (``hiseg.metrics.bsds.evaluate``
    pairs every ground-truth file of its folder with a prediction)."""
    dest.mkdir(parents=True, exist_ok=True)
    for f in images:
        link = dest / f"{f.stem}.mat"
        if not link.exists():
            link.symlink_to((gt_dir / f"{f.stem}.mat").resolve())
    return dest


def cache_split(seg, images, work: Path) -> list:
    from hiseg.io import read_image

    work.mkdir(parents=True, exist_ok=True)
    paths = []
    for i, f in enumerate(images):
        p = work / f"{f.stem}.npz"
        if not p.is_file():
            res = seg.segment(read_image(f))
            mst = res.hierarchy.mst_edge_map
            alt = np.sort(np.asarray(res.ultrametric, dtype=np.float64)[mst[mst < res.ultrametric.shape[0]]])
            u = res.ucm2
            # the ucm2's values are the hierarchy's altitudes (else the count n(u) would be wrong)
            vals = np.unique(u[u > 0])
            if vals.size and not np.isin(vals, alt).all():
                near = np.abs(vals[:, None] - alt[None, :]).min(1).max() if alt.size else np.inf
                if near > 1e-9:
                    raise RuntimeError(f"{f.stem}: ucm2 values are not the merge altitudes (off by {near:g})")
            np.savez_compressed(p, ucm2=u, alt=alt, n=res.hierarchy.num_leaves)
        paths.append(p)
        if (i + 1) % 20 == 0:
            print(f"  {i + 1}/{len(images)} segmented", flush=True)
    return paths


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--checkpoint", default="bsds500_merge", help="a shipped name or a checkpoint file")
    ap.add_argument("--bsds", required=True)
    ap.add_argument("--split", default="train", choices=["train", "val"])
    ap.add_argument("--lams", type=float, nargs="+", default=[0.0, 0.1, 0.2, 0.3, 0.5])
    ap.add_argument("--thresholds", type=int, default=33)
    ap.add_argument("--limit", type=int, default=0)
    ap.add_argument("--work", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--workers", type=int, default=1)
    args = ap.parse_args(argv)
    import torch

    from hiseg.data.bsds import find_bsds_root
    from hiseg.segmentation.segmenter import Segmenter
    from hiseg.io import write_ucm2_mat
    from hiseg.models import Weights
    from hiseg.metrics.bsds import evaluate

    torch.set_num_threads(1)
    root = find_bsds_root(args.bsds)
    images = sorted((root / "images" / args.split).glob("*.jpg"))
    if args.limit:
        images = images[: args.limit]
    gt = link_ground_truth(images, root / "groundTruth" / args.split, Path(args.work) / args.split / "gt")
    seg = Segmenter.from_checkpoint(Weights.resolve(args.checkpoint))
    work = Path(args.work) / args.split
    t0 = time.time()
    cached = cache_split(seg, images, work / "cache")
    print(f"segmented {len(cached)} images in {time.time() - t0:.0f} s", flush=True)
    rows = []
    for lam in args.lams:
        d = work / f"lam_{lam:g}"
        d.mkdir(parents=True, exist_ok=True)
        for p in cached:
            z = np.load(p)
            write_ucm2_mat(d / f"{p.stem}.mat", region_scale(z["ucm2"], z["alt"], int(z["n"]), lam))
        r = evaluate(d, gt, n_thresholds=args.thresholds, workers=args.workers)
        rows.append((lam, figures(r)))
        print(f"lam {lam:g}: {rows[-1][1]}", flush=True)
    keys = list(rows[0][1])
    lines = [f"BSDS500 {args.split}, {len(cached)} images, {args.thresholds} thresholds, {args.checkpoint}; "
             "f(u) = (1 - lam) u + lam (1 - log n(u) / log N) (experiments/segmentation/ucm_calibration.py)\n",
             "| lam | " + " | ".join(keys) + " |", "|---|" + "---|" * len(keys)]
    lines += [f"| {lam:g} | " + " | ".join(f"{v:.4f}" for v in f.values()) + " |" for lam, f in rows]
    print(write_stamped(args.out, "\n".join(lines)).read_text())
    Path(args.out).with_suffix(".json").write_text(json.dumps([{"lam": lam, **f} for lam, f in rows]))


def figures(r: dict) -> dict:
    """The dataset figures of ``hiseg.metrics.bsds.evaluate``'s result."""
    b, f = r["boundary"], r.get("fop")
    out = {"Fb ODS": b["ods"]["f"], "Fb OIS": b["ois"]["f"], "Fb AP": b["ap"]}
    if f:
        out.update({"Fop ODS": f["ods"]["f"], "Fop OIS": f["ois"]["f"]})
    out.update({"cover ODS": r["covering"]["ods"], "cover OIS": r["covering"]["ois"],
                "PRI ODS": r["pri"]["ods"], "VI ODS": r["vi"]["ods"], "VI OIS": r["vi"]["ois"]})
    return {k: float(v) for k, v in out.items()}


if __name__ == "__main__":
    main()
