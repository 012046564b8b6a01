"""Stage 1 of the learned-merging experiment: the frozen shipped network's boundary maps.

    nohup nice -n 10 python experiments/bsds_recipe/merge_maps.py --bsds ../shared/data/BSDS500 \
        --out runs/merge_cache/maps > runs/merge_precompute.log 2>&1 &

For every BSDS500 train and val image, the sigmoid boundary map of ``bsds500`` at each
scale of ``--scales``, on the image and on its horizontal mirror (mirrored back), stored
as float16 ``NAME.npz`` (``s{scale}`` and ``s{scale}f`` arrays, (H, W)). Resumable: an
existing file is skipped. Nothing here is trained; the head's features and targets are
computed from these maps by ``experiments/bsds_recipe/merge_head.py``.
"""
import argparse
import time
from pathlib import Path

import numpy as np
import torch


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bsds", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--scales", type=float, nargs="+", default=[1.0, 0.5, 0.75, 1.5])
    ap.add_argument("--splits", nargs="+", default=["val", "train"])
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    from hiseg.data.bsds import find_bsds_root
    from hiseg.segmentation.segmenter import Segmenter
    from hiseg.io import read_image

    root = find_bsds_root(args.bsds)
    seg = Segmenter.from_pretrained("bsds500", backend="torch")  # its network, at each scale
    for split in args.splits:
        out = Path(args.out) / split
        out.mkdir(parents=True, exist_ok=True)
        for p in sorted((root / "images" / split).glob("*.jpg")):
            f = out / f"{p.stem}.npz"
            if f.is_file():
                continue
            t0 = time.perf_counter()
            img = read_image(p)
            maps = {}
            for s in args.scales:
                pl = seg.pipeline.with_overrides(scales=(s,))
                maps[f"s{s:g}"] = pl.boundary_map(seg.model, img).astype(np.float16)
                maps[f"s{s:g}f"] = pl.boundary_map(seg.model, np.ascontiguousarray(img[:, ::-1]))[:, ::-1].astype(np.float16)
            tmp = out / f"{p.stem}.tmp.npz"
            np.savez(tmp, **maps)
            tmp.rename(f)
            print(f"{split} {p.stem} {time.perf_counter() - t0:.2f}s", flush=True)


if __name__ == "__main__":
    main()
