"""K-region cuts of everyday photographs (scikit-image's samples, not BSDS), as a new user
gets them with ``hiseg predict --regions K``: region sizes of the plain cut (min_size 0)
and of the default size-aware cut (min_size "auto" = 0.05/K of the image).

    python experiments/segmentation/photo_cuts.py [--checkpoint models/hiseg_bsds500.ckpt] [--k 8] [--out FILE]
"""
import argparse
from pathlib import Path

import numpy as np
import skimage.data

from tables import emit, region_shares
from hiseg.segmentation.segmenter import Segmenter

ROOT = Path(__file__).resolve().parents[2]
PHOTOS = ["astronaut", "coffee", "chelsea", "rocket", "camera", "hubble_deep_field", "immunohistochemistry"]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--checkpoint", default=str(ROOT / "models" / "hiseg_bsds500.ckpt"))
    ap.add_argument("--k", type=int, default=8)
    ap.add_argument("--out", default=None)
    a = ap.parse_args()
    seg = Segmenter.from_checkpoint(a.checkpoint)
    lines = [f"`--regions {a.k}` on scikit-image photographs ({Path(a.checkpoint).name}, default pipeline)\n",
             "| photo | size | cut | regions | largest | smallest | regions < 1% |", "|---|---|---|---|---|---|---|"]
    for name in PHOTOS:
        im = getattr(skimage.data, name)()
        im = np.repeat(im[..., None], 3, 2) if im.ndim == 2 else im[..., :3]
        res = seg.segment(im.astype(np.float32) / 255.0)
        for label, ms in (("plain (min_size 0)", 0), ("size-aware (auto)", "auto")):
            lab = res.cut(n_regions=a.k, min_size=ms)
            share = region_shares(lab)
            lines.append(f"| {name} | {im.shape[1]}x{im.shape[0]} | {label} | {share.size} | {share.max():.1%} | "
                         f"{share.min():.2%} | {(share < 0.01).sum()} |")
    emit(lines, a.out)


if __name__ == "__main__":
    main()
