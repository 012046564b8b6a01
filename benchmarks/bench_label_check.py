"""Cost of the start-up label check of a training set (issue 32: under 2 s for the 200 BSDS
train images), against a floor measured in the same run.

The 200 BSDS500 train images are laid out as a user's folder (``images/`` linked, the
annotators' label images written once as ``labels/NAME.npy``, (A, H, W) uint16, and as
``labels/NAME_k.png``, one 16-bit PNG per annotator); then
:meth:`hiseg.data.folder.FolderSegmentation.check_labels` (a header pass, then the values)
is timed on each layout; so is :meth:`hiseg.data.bsds.BSDS500.check_labels` on the BSDS500
layout itself (every ``.mat`` read and checked, the images' sizes from their headers). The
floor: decoding the 200 images once (what the first epoch's loaders pay in any case), and
reading every label file once (``read_labels``; for BSDS500 ``load_ground_truth``).

Usage: ``python benchmarks/bench_label_check.py [--bsds DIR] [--repeats 3]``; appends its
table to ``benchmarks/results/label_check.md``, stamped (``provenance.py``). Needs the BSDS500 data (``../shared/data``).
"""
import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from provenance import append_stamped

ROOT = Path(__file__).resolve().parents[1]


def layout(bsds: Path, out: Path, kind: str) -> Path:
    """A folder data set of BSDS train with labels as ``npy`` or ``png`` files."""
    import cv2

    from hiseg.io import load_ground_truth

    (out / "images").mkdir(parents=True)
    (out / "labels").mkdir()
    for img in sorted((bsds / "images" / "train").glob("*.jpg")):
        os.symlink(img, out / "images" / img.name)
        segs = np.stack(load_ground_truth(bsds / "groundTruth" / "train" / f"{img.stem}.mat")[0]).astype(np.uint16)
        if kind == "npy":
            np.save(out / "labels" / f"{img.stem}.npy", segs)
        else:
            for k, s in enumerate(segs):
                cv2.imwrite(str(out / "labels" / f"{img.stem}_{k}.png"), s)
    return out


def best_of(fn, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return min(times)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--bsds", default=str(ROOT.parent / "shared" / "data" / "BSDS500" / "data"))
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--table", default=str(ROOT / "benchmarks" / "results" / "label_check.md"))
    args = ap.parse_args(argv)
    bsds = Path(args.bsds)
    if not (bsds / "images" / "train").is_dir():
        sys.exit(f"BSDS500 not found at {bsds}")
    import torch

    torch.set_num_threads(1)
    from hiseg.data.folder import FolderSegmentation, read_labels
    from hiseg.io import read_image

    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for kind in ("npy", "png"):
            ds = FolderSegmentation(layout(bsds, Path(tmp) / kind, kind))
            files = [p for i in range(len(ds)) for p in ds.label_paths(i)]
            check = best_of(ds.check_labels, args.repeats)
            labels = best_of(lambda: [read_labels(p) for p in files], 1)
            images = best_of(lambda: [read_image(ds.image_path(i)) for i in range(len(ds))], 1)
            rows.append((kind, len(ds), len(files), check, labels, images))
        from hiseg.data.bsds import BSDS500
        from hiseg.io import load_ground_truth

        ds = BSDS500(bsds, "train")
        check = best_of(ds.check_labels, args.repeats)
        labels = best_of(lambda: [load_ground_truth(ds.groundtruth_path(i)) for i in range(len(ds))], 1)
        images = best_of(lambda: [read_image(ds.image_path(i)) for i in range(len(ds))], 1)
        rows.append(("BSDS500 .mat", len(ds), len(ds), check, labels, images))
    head = ("| labels | images | label files | check s | read every label s | decode every image s (floor) "
            "| check / floor |\n|---|---|---|---|---|---|---|")
    lines = [f"| {k} | {n} | {f} | {c:.3f} | {lab:.3f} | {im:.3f} | {c / im:.3f} |" for k, n, f, c, lab, im in rows]
    print(head)
    print("\n".join(lines))
    title = ("# Start-up label check of a folder data set (benchmarks/bench_label_check.py)\n\n"
             "BSDS500 train (200 images) as a folder; best of the repeats, one thread.\n\n")
    # one section per run, the newest last, each with its stamp (earlier runs kept)
    append_stamped(args.table, ("" if Path(args.table).exists() else title) + head + "\n" + "\n".join(lines))


if __name__ == "__main__":
    main()
