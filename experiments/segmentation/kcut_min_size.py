"""Size-aware K-region cuts on BSDS500 val: the K-cut covering (K = median annotator
region count) and the specks, for several minimum region sizes, for hiseg's UCMs and
gPb-owt-ucm's, both cut by the same function (hiseg.metrics.kcut.ucm2_size_aware_cut).

    python experiments/segmentation/kcut_min_size.py --bsds ../shared/data --ucm runs/eval_abl_average/ucm2 \
        --out experiments/segmentation/results/kcut_min_size.md

The minimum size is FRACTION / K of the image (FRACTION = 0: the plain cut). Used to
choose hiseg's default for images (hiseg.core.cuts.AUTO_MIN_REGION_FRACTION) on val; train and val
are all it reads.
"""
from __future__ import annotations

import argparse
from pathlib import Path

import scipy.io

from tables import emit, region_shares
from hiseg.data.bsds import find_bsds_root
from hiseg.io import load_ground_truth
from hiseg.metrics.kcut import kcut_counts, median_region_count, ucm2_cut_k, ucm2_size_aware_cut


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--bsds", required=True)
    ap.add_argument("--ucm", required=True, help="folder of hiseg's ucm2 .mat files (val)")
    ap.add_argument("--fractions", type=float, nargs="+", default=[0.0, 0.02, 0.05, 0.1, 0.2, 0.3, 0.5])
    ap.add_argument("--speck", type=float, default=0.005, help="a region below this fraction of the image is a speck")
    ap.add_argument("--out", default=None)
    ap.add_argument("--n-images", type=int, default=100)
    a = ap.parse_args(argv)
    root = find_bsds_root(a.bsds)
    gpb_dir = root.parent / "ucm2" / "val" if (root.parent / "ucm2").is_dir() else root / "ucm2" / "val"
    names = sorted(p.stem for p in Path(a.ucm).glob("*.mat"))[: a.n_images]
    rows = {}
    for n in names:
        segs = load_ground_truth(root / "groundTruth" / "val" / f"{n}.mat")[0]
        k = median_region_count(segs)
        for method, d in (("hiseg", Path(a.ucm)), ("gPb-owt-ucm", gpb_dir)):
            ucm2 = scipy.io.loadmat(d / f"{n}.mat")["ucm2"]
            cuts = {"closest level (no size rule)": ucm2_cut_k(ucm2, k)}
            for f in a.fractions:
                cuts[f"size-aware, min {f:g}/K"] = ucm2_size_aware_cut(ucm2, k, f / k)
            for setting, lab in cuts.items():
                r = rows.setdefault((method, setting), [0.0, 0.0, 0, 0, 0])
                c, t = kcut_counts(lab, segs)
                area = region_shares(lab)
                r[0] += c
                r[1] += t
                r[2] += int((area < a.speck).sum())
                r[3] += len(area)
                r[4] += int(len(area) == k)
    lines = [f"BSDS500 val, {len(names)} images; K = median annotator region count; a speck is a region "
             f"< {a.speck:.1%} of the image\n",
             "| UCM | cut | K-cut covering | specks per image | regions per image | images with exactly K |",
             "|---|---|---|---|---|---|"]
    for (method, setting), (c, t, sp, nr, ex) in rows.items():
        lines.append(f"| {method} | {setting} | {c / t:.4f} | {sp / len(names):.2f} | {nr / len(names):.1f} | {ex} |")
    emit(lines, a.out)


if __name__ == "__main__":
    main()
