"""Time and peak memory of ``hiseg predict`` on a 4000x3000 photograph (the issue's target:
under 15 s and 2 GB), and with ``--big`` on a 12000x9000 one (issue 32 row 14: memory near
the 4000x3000 figure), against a floor measured in the same run.

The photograph: scikit-image's ``coffee`` (600x400) upscaled to 4000x3000 (bicubic) with
sensor-like noise (sigma 1%), saved as a quality-92 JPEG; the 12000x9000 one is that JPEG
upscaled again (bicubic, 8-bit) with the same noise, in row bands. Each configuration runs the
``hiseg predict`` command in a fresh process (imports, checkpoint, reading, segmenting,
writing the five outputs with ``--regions 8``); wall time and the process's peak RSS.
The floor is a process that imports hiseg (torch), reads the JPEG and writes one 8-bit
PNG of that size: what any tool in this stack pays before doing anything (at 4000x3000 it
reads the float image, as the earlier tables did; at 12000x9000 the decoded 8-bit one).
The 12000x9000 rows run the default model (``hiseg predict`` without ``--checkpoint``) and
``--classical``; ``--html`` adds a row of the default model with ``--html`` (the explorer
page too), and the table gives each run's page size. ``--big-size WxH`` makes the large
photograph another size (e.g. 6000x4500).

Usage: ``python benchmarks/bench_large.py [--checkpoint CKPT] [--full] [--big] [--threads 2]``
(``--full`` adds ``--max-pixels 0``, the whole image at full resolution: minutes, GBs;
``--big-only``: the 12000x9000 rows alone; ``--html``, ``--big-size``: above; ``--keep DIR``: work in DIR and keep the
photographs and outputs, e.g. to compare two versions' outputs).
"""
import argparse
import contextlib
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from provenance import stamp

ROOT = Path(__file__).resolve().parents[1]
FLOOR = ("import sys, cv2, hiseg.segmentation.segmenter; from hiseg.io import read_image; "
         "im = read_image(sys.argv[1]); cv2.imwrite(sys.argv[2], (im[..., 0] * 255).astype('uint8'))")
FLOOR8 = ("import sys, cv2, hiseg.segmentation.segmenter; from hiseg.io import decode_image; "
          "im = decode_image(sys.argv[1])[0]; cv2.imwrite(sys.argv[2], im[..., 0])")


def photograph(path: Path):
    import cv2
    import skimage.data
    from skimage.transform import resize

    big = resize(skimage.data.coffee(), (3000, 4000), order=3, anti_aliasing=False)
    big = np.clip(big + np.random.default_rng(0).normal(0, 0.01, big.shape), 0, 1)
    cv2.imwrite(str(path), (big[..., ::-1] * 255).round().astype(np.uint8), [cv2.IMWRITE_JPEG_QUALITY, 92])


def bigger(src: Path, path: Path, shape=(9000, 12000), band=1000):
    """``src`` (the 4000x3000 JPEG) upscaled to ``shape`` (bicubic, 8-bit) with noise (sigma
    1%), row band by row band (a few hundred MB), saved as a quality-92 JPEG."""
    import cv2

    big = cv2.resize(cv2.imread(str(src)), (shape[1], shape[0]), interpolation=cv2.INTER_CUBIC)
    rng = np.random.default_rng(1)
    for r0 in range(0, shape[0], band):
        rows = big[r0:r0 + band].astype(np.float32) + rng.normal(0, 2.55, big[r0:r0 + band].shape).astype(np.float32)
        big[r0:r0 + band] = np.clip(rows.round(), 0, 255).astype(np.uint8)
    cv2.imwrite(str(path), big, [cv2.IMWRITE_JPEG_QUALITY, 92])


WRAP = ("import resource, subprocess, sys, time; t = time.perf_counter(); "
        "r = subprocess.run(sys.argv[1:], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True); "
        "print(r.stderr[-2000:], file=sys.stderr); "
        "print(time.perf_counter() - t, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss, r.returncode)")


def measure(cmd, env):
    """(wall seconds, peak RSS in MB) of one child process, measured by a wrapper process
    (its RUSAGE_CHILDREN peak is this child's alone)."""
    r = subprocess.run([sys.executable, "-c", WRAP] + cmd, env=env, capture_output=True, text=True)
    wall, rss, rc = r.stdout.split()
    if int(rc):
        raise SystemExit(f"{' '.join(cmd)} failed:\n{r.stderr}")
    return float(wall), int(rss) / 1024


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--checkpoint", default=str(ROOT / "models" / "hiseg_bsds500.ckpt"))
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--full", action="store_true")
    ap.add_argument("--big", action="store_true", help="also the 12000x9000 rows")
    ap.add_argument("--big-only", action="store_true", help="the 12000x9000 rows alone")
    ap.add_argument("--keep", default=None, help="work in this folder and keep it (photographs, outputs)")
    ap.add_argument("--html", action="store_true", help="also the large photograph with --html (default model)")
    ap.add_argument("--big-size", default="12000x9000", metavar="WxH", help="the large photograph's size")
    args = ap.parse_args()
    big_w, big_h = (int(v) for v in args.big_size.lower().split("x"))
    env = dict(os.environ, OMP_NUM_THREADS=str(args.threads), MKL_NUM_THREADS=str(args.threads))
    hiseg = [sys.executable, "-m", "hiseg.cli"]
    tables = []
    with (contextlib.nullcontext(args.keep) if args.keep else tempfile.TemporaryDirectory()) as tmp:
        tmp = Path(tmp)
        tmp.mkdir(parents=True, exist_ok=True)
        photo = tmp / "photo.jpg"
        photograph(photo)
        if not args.big_only:
            configs = [("floor: import + read + write one PNG",
                        [sys.executable, "-c", FLOOR, str(photo), str(tmp / "f.png")])]
            for mp in ([500_000, 1_000_000] + ([0] if args.full else [])):
                configs.append((f"hiseg predict --regions 8, max_pixels {mp:,}" + (" (default)" if mp == 500_000 else ""),
                                hiseg + ["predict", str(photo), "-c", args.checkpoint, "-o", str(tmp / f"o{mp}"),
                                         "--regions", "8", "--max-pixels", str(mp)]))
            tables.append((f"4000x3000 photograph ({Path(args.checkpoint).name}, {args.threads} threads)",
                           "target 15 s / 2048 MB", lambda t, m: t < 15 and m < 2048,
                           [(name,) + measure(cmd, env) for name, cmd in configs]))
        if args.big or args.big_only:
            large = tmp / "large.jpg"
            bigger(photo, large, (big_h, big_w))
            configs = [("floor: import + decode (8-bit) + write one PNG",
                        [sys.executable, "-c", FLOOR8, str(large), str(tmp / "f8.png")]),
                       ("hiseg predict --regions 8 (default model)",
                        hiseg + ["predict", str(large), "-o", str(tmp / "big"), "--regions", "8"]),
                       ("hiseg predict --classical --regions 8",
                        hiseg + ["predict", str(large), "--classical", "-o", str(tmp / "bigc"), "--regions", "8"])]
            if args.html:
                configs.append(("hiseg predict --regions 8 --html (default model)",
                                hiseg + ["predict", str(large), "-o", str(tmp / "bigh"), "--regions", "8", "--html"]))
            tables.append((f"{big_w}x{big_h} photograph ({args.threads} threads)", "target 2048 MB",
                           lambda t, m: m < 2048,
                           [(name,) + measure(cmd, env) + (_page_mb(cmd),) for name, cmd in configs]))
    for title, target, met, rows in tables:
        floor_t, floor_m = rows[0][1], rows[0][2]
        pages = any(len(r) > 3 and r[3] for r in rows)
        print(f"# hiseg predict on a {title}\n")
        print(f"| run | seconds | x floor | peak RSS (MB) | x floor | {target} |" + (" page (MB) |" if pages else ""))
        print("|---|---:|---:|---:|---:|---|" + ("---:|" if pages else ""))
        for name, t, m, *page in rows:
            ok = "" if name.startswith("floor") else ("met" if met(t, m) else "missed")
            size = (f" {page[0]:.1f} |" if page and page[0] else " |") if pages else ""
            print(f"| {name} | {t:.1f} | {t / floor_t:.2f} | {m:.0f} | {m / floor_m:.2f} | {ok} |" + size)
        print(f"\n{stamp()}\n")


def _page_mb(cmd) -> float:
    """Size in MB of the explorer page a ``hiseg predict --html`` command wrote (0: none)."""
    if "--html" not in cmd:
        return 0.0
    out, image = Path(cmd[cmd.index("-o") + 1]), Path(cmd[cmd.index("predict") + 1])
    return (out / f"{image.stem}.html").stat().st_size / 2 ** 20


if __name__ == "__main__":
    main()
