"""Seconds per image of ``hiseg predict``: network, superpixels/RAG, hierarchy, writing.

Runs the :class:`hiseg.inference.Segmenter` of a checkpoint (default: the shipped
``models/hiseg_bsds500.ckpt`` when present, else the classical path) on BSDS500 val
images (481x321) or on scikit-image sample images resized to 481x321, and prints a
markdown table of the median time per stage, plus the batched network time on the
device when ``--device cuda``.

Usage: ``python benchmarks/bench_predict.py [--checkpoint CKPT] [--images DIR] [--n 10]
[--threads 2] [--device cpu]``
"""
import argparse
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

from hiseg.inference import Segmenter, write_outputs

ROOT = Path(__file__).resolve().parents[1]


def images(args):
    if args.images:
        from hiseg.io import read_image

        files = sorted(Path(args.images).glob("*.jpg"))[: args.n]
        return [(f.stem, read_image(f)) for f in files]
    import skimage.data
    from skimage.transform import resize

    out = []
    for name in ["astronaut", "coffee", "chelsea", "rocket", "camera"][: args.n]:
        im = getattr(skimage.data, name)()
        if im.ndim == 2:
            im = np.repeat(im[..., None], 3, 2)
        out.append((name, resize(im, (321, 481), anti_aliasing=True).astype(np.float32)))
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    default = ROOT / "models" / "hiseg_bsds500.ckpt"
    ap.add_argument("--checkpoint", default=str(default) if default.is_file() else None)
    ap.add_argument("--images", default=None, help="folder of .jpg images (e.g. BSDS500 val)")
    ap.add_argument("--n", type=int, default=10)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--on-boundary", action="store_true")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    seg = (Segmenter.from_checkpoint(args.checkpoint, device=args.device)
           if args.checkpoint else Segmenter(device=args.device))
    ims = images(args)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        seg.segment(ims[0][1])  # warm-up
        for name, im in ims:
            t0 = time.perf_counter()
            res = seg.segment(im)
            t1 = time.perf_counter()
            write_outputs(tmp, name, res, im)
            t2 = time.perf_counter()
            rows.append(dict(res.timings, writing=t2 - t1, total=t2 - t0))
    med = {k: float(np.median([r[k] for r in rows])) for k in rows[0]}
    what = f"checkpoint {Path(args.checkpoint).name}" if args.checkpoint else "classical path (colour gradient + 50 fitting iterations)"
    print(f"# hiseg predict, {what}, {len(ims)} images {ims[0][1].shape[1]}x{ims[0][1].shape[0]}, "
          f"device {args.device}, torch threads {args.threads}\n")
    print("| stage | seconds per image |")
    print("|---|---:|")
    for k in ("network", "superpixels", "hierarchy", "writing", "total"):
        print(f"| {k} | {med.get(k, 0.0):.3f} |")
    if args.device.startswith("cuda") and seg.model is not None:
        x = torch.stack([torch.from_numpy(im.transpose(2, 0, 1)) for _, im in ims if im.shape == ims[0][1].shape])
        x = x.to(args.device)
        with torch.no_grad():
            seg.model(x)
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            for _ in range(5):
                seg.model(x)
            torch.cuda.synchronize()
        print(f"\nBatched network on {args.device}: {(time.perf_counter() - t0) / 5 / len(x) * 1e3:.1f} ms per image")


if __name__ == "__main__":
    main()
