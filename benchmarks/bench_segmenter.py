"""One Segmenter (issue 51), paired against an earlier revision: the default model's speed, whole
processes, and what each backend's outputs are against the earlier paths.

Why: the default became the shipped model's exported form on onnxruntime; the figures to show
are the default ``hiseg predict`` and one image's start-up, at the two revisions run in turn
(A B A B: this machine's speed drifts up to 2x between days and with other jobs, so only a
ratio of the same call means something), and that the outputs did not move. Each revision runs
from a git worktree (``PYTHONPATH`` set to it, the installed dependencies serving both).

Timed, per pair (``--runs``; medians, the ratio after / before of each pair, min-max):

* ``predict N``: ``hiseg predict`` of the first ``--n`` val images with the default model, the
  default workers, into a fresh folder (start-up, writing and the worker pool included);
* ``one image``: ``hiseg predict`` of one image with the default model;
* ``import + load``: a fresh Python importing hiseg and building ``Segmenter()``, timed inside
  (the default at each revision; at this one also ``backend="torch"``).

Compared once: this revision's ``--backend torch`` against the earlier default (the torch path),
and its default (onnxruntime) against the earlier exported path (``--checkpoint`` the shipped
export folder): the largest ucm2 difference and whether the files are byte-identical.

Command::

    python benchmarks/bench_segmenter.py --before 444aeb2 --runs 5 --n 20

appends its section to ``benchmarks/results/segmenter.md``, stamped with the revisions, the date,
the machine and the command.
"""
from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_revisions import timed  # noqa: E402 - the paired runner, one copy
from provenance import append_stamped, revision  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT.parent / "shared" / "data" / "BSDS500" / "data"
EXPORT = ROOT / "models" / "hiseg_bsds500_ensemble_onnx"
STARTUP = ("import time; t = time.perf_counter(); from hiseg import Segmenter; s = Segmenter({}); "
           "print(time.perf_counter() - t)")


def startup(tree: Path, env: dict, arg: str = "") -> float:
    """Seconds to import hiseg and build ``Segmenter(arg)`` in a fresh process at ``tree``."""
    out = subprocess.run([sys.executable, "-c", STARTUP.format(arg)], cwd=tree, env=env, capture_output=True,
                         text=True, check=True)
    return float(out.stdout.split()[-1])


def same_files(a: Path, b: Path) -> bool:
    """Whether two prediction folders hold the same image files with the same bytes (their run
    records differ: they name the model each ran)."""
    import filecmp

    names = sorted(p.name for p in a.iterdir() if not p.name.startswith("."))
    return names == sorted(p.name for p in b.iterdir() if not p.name.startswith(".")) and all(
        filecmp.cmp(a / x, b / x, shallow=False) for x in names)


def ucm_difference(a: Path, b: Path) -> float:
    """The largest |ucm2 a - ucm2 b| over the .mat files of two prediction folders."""
    import scipy.io

    worst = 0.0
    for f in sorted(a.glob("*.mat")):
        x, y = scipy.io.loadmat(f)["ucm2"], scipy.io.loadmat(b / f.name)["ucm2"]
        worst = max(worst, float(np.abs(x.astype(np.float64) - y).max()))
    return worst


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--before", required=True, help="git revision (the baseline)")
    p.add_argument("--runs", type=int, default=5, help="pairs per figure (after one warm-up pair)")
    p.add_argument("--n", type=int, default=20, help="val images for the predict figure")
    p.add_argument("--images", type=Path, default=DATA / "images" / "val")
    p.add_argument("--table", type=Path, default=ROOT / "benchmarks" / "results" / "segmenter.md")
    a = p.parse_args(argv)
    if not a.images.is_dir():
        p.error(f"--images {a.images} is not a folder (BSDS500 val)")
    scratch = Path(tempfile.mkdtemp(prefix="bench_segmenter-"))
    before = scratch / "before"
    after_rev = revision(ROOT)
    try:
        subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "-q", "--detach", str(before), a.before], check=True)
        trees = {"before": before, "after": ROOT}
        env = {t: {**os.environ, "PYTHONHASHSEED": "0", "PYTHONPATH": str(tree)} for t, tree in trees.items()}
        subset = scratch / "images"
        subset.mkdir()
        files = sorted(a.images.glob("*.jpg"))[:a.n]
        for f in files:
            (subset / f.name).symlink_to(f.resolve())
        one = files[0]
        py = [sys.executable, "-m", "hiseg.cli", "predict"]
        jobs = {f"predict {a.n}": lambda t, r: py + [str(subset), "-o", str(scratch / f"p-{t}-{r}"), "-q"],
                "one image": lambda t, r: py + [str(one), "-o", str(scratch / f"o-{t}-{r}"), "-q"]}
        rows = []
        for name, job in jobs.items():
            times = {"before": [], "after": []}
            for run in range(a.runs + 1):  # run 0: a warm-up pair
                for tag in ("before", "after"):
                    wall, cpu = timed(job(tag, run), trees[tag], env[tag])
                    if run:
                        times[tag].append(wall)
                print(f"{name} pair {run}: " + ", ".join(f"{t} {v[-1]:.2f} s" for t, v in times.items() if run),
                      flush=True)
            ratio = [x / y for x, y in zip(times["after"], times["before"])]
            per = a.n if name.startswith("predict") else 1
            rows.append(f"| {name} (s{' per image' if per > 1 else ''}) | {statistics.median(times['before']) / per:.3f} "
                        f"| {statistics.median(times['after']) / per:.3f} | {statistics.median(ratio):.3f} "
                        f"({min(ratio):.3f}-{max(ratio):.3f}) |")
        loads = {"before": [], "after": [], "after, torch": []}
        for run in range(a.runs + 1):
            for tag, tree, arg in (("before", before, ""), ("after", ROOT, ""), ("after, torch", ROOT, "backend='torch'")):
                v = startup(tree, env["after" if tree == ROOT else "before"], arg)
                if run:
                    loads[tag].append(v)
        ratio = [x / y for x, y in zip(loads["after"], loads["before"])]
        rows.append(f"| import + load of Segmenter() (s) | {statistics.median(loads['before']):.3f} | "
                    f"{statistics.median(loads['after']):.3f} | {statistics.median(ratio):.3f} "
                    f"({min(ratio):.3f}-{max(ratio):.3f}) |")
        rows.append(f"| import + load of Segmenter(backend='torch') (s) | {statistics.median(loads['before']):.3f} | "
                    f"{statistics.median(loads['after, torch']):.3f} | "
                    f"{statistics.median(loads['after, torch']) / statistics.median(loads['before']):.3f} |")
        # outputs: this revision's torch backend against the earlier default, its onnxruntime against the earlier export
        subprocess.run(py + [str(subset), "-o", str(scratch / "torch-after"), "-q", "--backend", "torch"],
                       cwd=ROOT, env=env["after"], check=True)
        subprocess.run(py + [str(subset), "-o", str(scratch / "export-before"), "-q", "--checkpoint", str(EXPORT)],
                       cwd=before, env=env["before"], check=True)
        same = [
            ("torch backend vs the earlier default (torch)", scratch / "torch-after", scratch / "p-before-1"),
            ("default (onnxruntime) vs the earlier exported path", scratch / "p-after-1", scratch / "export-before")]
        eq = [f"| {what} | {'yes' if same_files(x, y) else 'no'} | {ucm_difference(x, y):.3g} |" for what, x, y in same]
        text = "\n".join([
            f"# The default model's speed, {a.before} against {after_rev}: whole processes, paired", "",
            f"Revisions {a.before} (before) and this checkout (after: the stamp's revision); load average "
            f"{os.getloadavg()[0]:.1f} at the end. Medians of the pairs after a warm-up pair; ratio after / before, "
            "median (min-max) of the pairs; below 1 is faster.", "",
            "| figure | before | after | ratio |", "|---|---:|---:|---:|", *rows, "",
            f"Outputs on the {a.n} images:", "",
            "| compared | files byte-identical | largest ucm2 difference |", "|---|---|---:|", *eq, ""])
        print(text)
        append_stamped(a.table, text)
    finally:
        subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force", str(before)], capture_output=True)
        shutil.rmtree(scratch, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
