"""Whole-process timings of train, predict and evaluate at two git revisions, paired.

Why: a restructuring (issue 40's layout) must not slow anything down, and this machine's speed
drifts up to 2x between days and with other jobs: only the two revisions run in turn, A B A B,
in the same call, give a ratio that means something. Each revision is checked out into a
temporary git worktree and run from there (``PYTHONPATH`` set to it, so the installed hiseg's
dependencies serve both); each run is a fresh process, start-up included. Per run: wall seconds,
CPU seconds (user + system of the process and its children, the kernel's accounting) and the
ratio after/before of the pair.

The workloads (the same arguments at both revisions):

* ``train``: ``python train.py fit --config configs/synthetic.yaml --trainer.max_epochs 1`` (the
  default run's first epoch, 24 steps, and its validations), logs in the worktree;
* ``predict``: ``hiseg predict`` of the first ``--n`` images of ``--images`` with the default
  model, one worker, into a fresh folder (BSDS500 val when present);
* ``evaluate``: ``hiseg evaluate`` of those predictions (made once, at ``--after``) against their
  ground truth in ``--gt``, one worker, 99 thresholds.

The outputs of predict are compared byte for byte between the revisions (the table says whether
they are identical). Command::

    python benchmarks/bench_revisions.py --before a76bd82 --after 3e6d459 --runs 5

appends its section to ``benchmarks/results/revisions.md`` (``--table``), earlier ones kept, stamped with
revision, date, machine and command (``provenance.py``).
"""
from __future__ import annotations

import argparse
import filecmp
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from provenance import append_stamped

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT.parent / "shared" / "data" / "BSDS500" / "data"


def timed(cmd: list, cwd: Path, env: dict) -> tuple:
    """(wall s, CPU s of the process and its children) of one fresh process; RuntimeError if it fails."""
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, cwd=cwd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - t0
    err = proc.stderr.read().decode(errors="replace")
    proc.stderr.close()
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(map(str, cmd))} (in {cwd}) exited {proc.returncode}:\n{err[-2000:]}")
    return wall, usage.ru_utime + usage.ru_stime


def workloads(images: Path, gt: Path, n: int, scratch: Path) -> dict:
    """name -> function(tree, run) -> the command line (run numbers keep output folders fresh)."""
    subset, truth = scratch / "images", scratch / "gt"
    subset.mkdir()
    truth.mkdir()
    for f in sorted(images.glob("*.jpg"))[:n]:
        (subset / f.name).symlink_to(f.resolve())
        if (gt / f"{f.stem}.mat").is_file():
            (truth / f"{f.stem}.mat").symlink_to((gt / f"{f.stem}.mat").resolve())
    py = sys.executable
    return {
        "train": lambda tree, run: [py, "train.py", "fit", "--config", "configs/synthetic.yaml",
                                    "--trainer.max_epochs", "1", "--trainer.default_root_dir",
                                    str(scratch / f"train-{tree.name}-{run}")],
        "predict": lambda tree, run: [py, "-m", "hiseg.cli", "predict", str(subset), "-o",
                                      str(scratch / f"pred-{tree.name}-{run}"), "-q", "--workers", "1"],
        "evaluate": lambda tree, run: [py, "-m", "hiseg.cli", "evaluate", str(scratch / "pred-after-0"),
                                       "--gt", str(truth), "-q", "--workers", "1"],
    }


def identical(a: Path, b: Path) -> bool:
    """Whether two folders hold the same file names with the same bytes."""
    names = sorted(p.name for p in a.iterdir())
    return names == sorted(p.name for p in b.iterdir()) and all(
        filecmp.cmp(a / x, b / x, shallow=False) for x in names)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--before", required=True, help="git revision (the baseline)")
    p.add_argument("--after", required=True, help="git revision")
    p.add_argument("--runs", type=int, default=5, help="pairs per workload (after one warm-up pair)")
    p.add_argument("--only", nargs="+", choices=("train", "predict", "evaluate"),
                   default=["train", "predict", "evaluate"])
    p.add_argument("--images", type=Path, default=DATA / "images" / "val")
    p.add_argument("--gt", type=Path, default=DATA / "groundTruth" / "val")
    p.add_argument("--n", type=int, default=5, help="images for predict and evaluate")
    p.add_argument("--table", type=Path, default=ROOT / "benchmarks" / "results" / "revisions.md")
    a = p.parse_args(argv)
    if {"predict", "evaluate"} & set(a.only) and not a.images.is_dir():
        p.error(f"--images {a.images} is not a folder (BSDS500 val, or give --only train)")
    scratch = Path(tempfile.mkdtemp(prefix="bench_revisions-"))
    trees = {}
    try:
        for tag, rev in (("before", a.before), ("after", a.after)):
            trees[tag] = scratch / tag
            subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "-q", "--detach", str(trees[tag]), rev],
                           check=True)
        env = {**os.environ, "PYTHONHASHSEED": "0"}
        jobs = workloads(a.images, a.gt, a.n, scratch)
        if "evaluate" in a.only and "predict" not in a.only:  # evaluate needs the after revision's predictions
            subprocess.run(jobs["predict"](trees["after"], 0), cwd=trees["after"],
                           env={**env, "PYTHONPATH": str(trees["after"])}, check=True)
        rows = []
        for name in [w for w in ("predict", "evaluate", "train") if w in a.only]:
            times = {"before": [], "after": []}
            for run in range(a.runs + 1):  # run 0: the warm-up pair (caches, the after's predictions)
                for tag in ("before", "after"):
                    e = {**env, "PYTHONPATH": str(trees[tag])}
                    wall, cpu = timed(jobs[name](trees[tag], run), trees[tag], e)
                    if run:
                        times[tag].append((wall, cpu))
                print(f"{name} pair {run}: " + ", ".join(f"{t} {times[t][-1][0]:.2f} s" if run else t
                                                           for t in times), flush=True)
            same = ""
            if name == "predict":
                same = "yes" if identical(scratch / "pred-before-0", scratch / "pred-after-0") else "NO"
            med = {t: (statistics.median(w for w, _ in v), statistics.median(c for _, c in v))
                   for t, v in times.items()}
            pairs = list(zip(times["after"], times["before"]))
            wall = [wa / wb for (wa, _), (wb, _) in pairs]
            cpu = [ca / cb for (_, ca), (_, cb) in pairs]
            rows.append(f"| {name} | {med['before'][0]:.2f} | {med['after'][0]:.2f} | "
                        f"{statistics.median(wall):.3f} ({min(wall):.3f}-{max(wall):.3f}) | {med['before'][1]:.2f} | "
                        f"{med['after'][1]:.2f} | {statistics.median(cpu):.3f} ({min(cpu):.3f}-{max(cpu):.3f}) | "
                        f"{same} |")
        load = os.getloadavg()[0]
        text = "\n".join([
            f"# {a.before} (before) against {a.after} (after): whole processes, paired",
            "",
            f"Load average {load:.1f} at the end. Medians of {a.runs} runs each, after a warm-up pair; ratios: after / before, "
            "the median of the pairs (min-max); below 1 is faster; CPU seconds count other jobs less than wall "
            f"seconds. predict and evaluate: {a.n} images, one worker.",
            "",
            "| workload | before wall s | after wall s | ratio (wall) | before CPU s | after CPU s | ratio (CPU) | "
            "outputs identical |",
            "|---|---:|---:|---:|---:|---:|---:|---|",
            *rows, ""])
        print(text)
        # one section per comparison, the newest last (a level down): earlier comparisons are kept, never overwritten
        append_stamped(a.table, f"#{text}" if a.table.is_file() and a.table.read_text().strip() else text)
    finally:
        for tree in trees.values():
            subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force", str(tree)],
                           capture_output=True)
        shutil.rmtree(scratch, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
