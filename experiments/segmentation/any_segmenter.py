"""Hierarchies from any segmenter on BSDS500 val (issue 55): another detector's boundary maps and
masks through hiseg, scored with Fb and Fop, and the figures of docs/any_segmenter.md.

* **gPb-owt-ucm's maps through hiseg**: gPb's val ucm2, taken at pixel resolution
  (``ucm2[2::2, 2::2]``) as a boundary map, through the one chain (``hiseg predict --boundaries``:
  boundary watershed superpixels, frontier mean, average linkage), next to gPb's own UCM;
* **the human annotations as masks, all annotators pooled** (``hierarchy_from_masks`` of every
  annotator's segments): a ceiling for what masks can give: it is scored against the very
  annotations it is made of, so it is no method's figure;
* **time**: ``hierarchy_from_masks`` of 100 masks on a 481x321 image (median of 7), this machine.

All 100 val images, 99 thresholds, hiseg's benchmark (the official figures, SEISM's Fop). Writes
``experiments/segmentation/results/any_segmenter.md`` (stamped: revision, date, machine,
command), and with ``--figures`` the pictures of ``docs/any_segmenter.md``. Command::

    python experiments/segmentation/any_segmenter.py --figures
"""
from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))

from provenance import write_stamped  # noqa: E402

DATA = ROOT.parent / "shared" / "data" / "BSDS500"
OUT = ROOT / "experiments" / "segmentation" / "results" / "any_segmenter.md"
DOCS = ROOT / "docs"


def evaluate(pred: Path, gt: Path, n: int) -> dict:
    from hiseg.metrics import evaluate as bench

    r = bench(pred, gt, n_thresholds=99, workers=1, first_label="auto", subset="all" if n >= 100 else "predicted")

    def f(x):  # a figure, or the F of an (R, P, F) entry
        return float(x["f"] if isinstance(x, dict) else x)
    return {"Fb ODS": f(r["boundary"]["ods"]), "Fb OIS": f(r["boundary"]["ois"]), "Fb AP": f(r["boundary"]["ap"]),
            "Fop ODS": f(r["fop"]["ods"]), "Fop OIS": f(r["fop"]["ois"]), "Fop AP": f(r["fop"]["ap"]),
            "cover ODS": f(r["covering"]["ods"]), "VI ODS": f(r["vi"]["ods"])}


def annotations(gt_file: Path) -> list:
    """Every annotator's segmentation of one image (label images)."""
    import scipy.io

    gts = scipy.io.loadmat(gt_file)["groundTruth"][0]
    return [np.asarray(g["Segmentation"][0, 0], np.int64) for g in gts]


def time_masks(repeats: int = 7) -> float:
    """Median seconds of hierarchy_from_masks of 100 overlapping masks (rectangles and discs at
    several sizes) on a 481x321 image."""
    from hiseg import hierarchy_from_masks

    rng = np.random.default_rng(0)
    yy, xx = np.mgrid[:321, :481]
    masks = []
    for k in range(100):
        cy, cx, r = rng.integers(0, 321), rng.integers(0, 481), rng.integers(8, 160)
        masks.append((yy - cy) ** 2 + (xx - cx) ** 2 < r * r if k % 2 else
                     (abs(yy - cy) < r) & (abs(xx - cx) < 1.5 * r))
    masks = np.stack(masks)
    times = []
    for _ in range(repeats):
        t = time.perf_counter()
        hierarchy_from_masks(masks)
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def figures(stem: str, scratch: Path) -> None:
    """docs/any_segmenter_masks.png (an image's annotations pooled as masks: its saliency and two
    cuts) and docs/any_segmenter_gpb.png (gPb's map, hiseg's hierarchy of it, a cut)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from hiseg import hierarchy_from_boundary_map, hierarchy_from_masks
    from hiseg.io import read_image
    from hiseg.segmentation.external import read_boundary_map
    from skimage.segmentation import mark_boundaries

    img = read_image(DATA / "data" / "images" / "val" / f"{stem}.jpg")
    res = hierarchy_from_masks(annotations(DATA / "data" / "groundTruth" / "val" / f"{stem}.mat"), image=img)
    fig, ax = plt.subplots(1, 4, figsize=(16, 3.4))
    ax[0].imshow(img)
    ax[0].set_title("image (its 5-9 annotations: the masks)")
    ax[1].imshow(res.saliency, cmap="gray_r")
    ax[1].set_title("hierarchy_from_masks: saliency")
    for a, k in zip(ax[2:], (4, 12)):
        a.imshow(mark_boundaries(img, res.cut(n_regions=k), color=(1, 0, 0)))
        a.set_title(f"cut at {k} regions")
    for a in ax:
        a.axis("off")
    fig.tight_layout()
    fig.savefig(DOCS / "any_segmenter_masks.png", dpi=70)
    plt.close(fig)
    b = read_boundary_map(DATA / "ucm2" / "val" / f"{stem}.mat")
    res = hierarchy_from_boundary_map(b, image=img)
    fig, ax = plt.subplots(1, 3, figsize=(12, 3.4))
    ax[0].imshow(b, cmap="gray_r")
    ax[0].set_title("gPb-owt-ucm's map (pixel resolution)")
    ax[1].imshow(res.saliency, cmap="gray_r")
    ax[1].set_title("through hiseg's chain: saliency")
    ax[2].imshow(mark_boundaries(img, res.cut(n_regions=10), color=(1, 0, 0)))
    ax[2].set_title("cut at 10 regions")
    for a in ax:
        a.axis("off")
    fig.tight_layout()
    fig.savefig(DOCS / "any_segmenter_gpb.png", dpi=70)
    plt.close(fig)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--n", type=int, default=100, help="val images (the first N; 100: all)")
    p.add_argument("--figures", action="store_true", help="also draw docs/any_segmenter_*.png")
    p.add_argument("--figure-image", default="101087")
    a = p.parse_args(argv)
    images, gts = DATA / "data" / "images" / "val", DATA / "data" / "groundTruth" / "val"
    if not images.is_dir():
        p.error(f"{images}: BSDS500 val not found (../shared/data)")
    stems = sorted(f.stem for f in images.glob("*.jpg"))[:a.n]
    scratch = Path(tempfile.mkdtemp(prefix="any_segmenter-"))
    sub = scratch / "images"
    sub.mkdir()
    for s in stems:
        (sub / f"{s}.jpg").symlink_to(images / f"{s}.jpg")
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    cli = [sys.executable, "-m", "hiseg.cli", "predict", str(sub), "-q"]
    t = time.perf_counter()
    subprocess.run(cli + ["-o", str(scratch / "gpb_hiseg"), "--boundaries", str(DATA / "ucm2" / "val")], env=env,
                   check=True)
    gpb_time = (time.perf_counter() - t) / len(stems)
    own = scratch / "gpb_own"
    own.mkdir()
    for s in stems:
        (own / f"{s}.mat").symlink_to(DATA / "ucm2" / "val" / f"{s}.mat")
    from hiseg import hierarchy_from_masks
    from hiseg.io import read_image
    from hiseg.segmentation.outputs import write_outputs

    ceil = scratch / "annotations_as_masks"
    for s in stems:
        img = read_image(images / f"{s}.jpg")
        write_outputs(ceil, s, hierarchy_from_masks(annotations(gts / f"{s}.mat"), image=img), img)
    rows = {"gPb-owt-ucm (its own UCM)": evaluate(own, gts, a.n),
            "gPb-owt-ucm's maps through hiseg (`--boundaries`)": evaluate(scratch / "gpb_hiseg", gts, a.n),
            "the annotations as masks, pooled (a ceiling, scored on themselves)": evaluate(ceil, gts, a.n)}
    seconds = time_masks()
    if a.figures:
        figures(a.figure_image, scratch)
    keys = list(next(iter(rows.values())))
    lines = [
        "# Hierarchies from any segmenter on BSDS500 val", "",
        f"{len(stems)} val images, 99 thresholds, hiseg's benchmark; load average {os.getloadavg()[0]:.1f} at "
        "the end.", "",
        "| input | " + " | ".join(keys) + " |", "|---|" + "---:|" * len(keys),
        *[f"| {name} | " + " | ".join(f"{v:.4f}" for v in r.values()) + " |" for name, r in rows.items()], "",
        f"`hierarchy_from_masks` of 100 masks on a 481x321 image: {seconds:.3f} s (median of 7). "
        f"`hiseg predict --boundaries` of gPb's maps: {gpb_time:.2f} s per image, start-up and files included.", ""]
    print(write_stamped(OUT, "\n".join(lines)).read_text())
    return 0


if __name__ == "__main__":
    sys.exit(main())
