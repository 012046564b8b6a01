"""Time the BSDS500 benchmark (hiseg.metrics) on the val gPb-owt-ucm results.

Usage::

    python benchmarks/bench_evaluate.py                      # 100 val images, 99 thresholds, 2 workers
    python benchmarks/bench_evaluate.py --n-images 10 --thresholds 25
    python benchmarks/bench_evaluate.py --pred DIR --gt DIR  # other data
    python benchmarks/bench_evaluate.py --baseline none      # the current code only

Evaluates the gPb-owt-ucm ``ucm2`` maps of ``../shared/data/BSDS500/ucm2/val``
against ``../shared/data/BSDS500/data/groundTruth/val`` (boundary and region
benchmarks) with :func:`hiseg.metrics.bsds.evaluate` and prints two markdown
tables: the timing (wall clock of the whole run; CPU time of the worker
processes split into boundary and region parts, which stays meaningful on a
machine shared with other jobs) and the benchmark figures next to the
published gPb-owt-ucm figures (Arbelaez et al., TPAMI 2011, BSDS500 *test*
set; the val figures are expected to be close, not equal). ``--out DIR``
also writes the ``hiseg evaluate`` outputs (results.md/json, PR curve,
official eval_*.txt) there. Exits cleanly (status 0, with a message) when
the data are absent.

Before / after: ``--baseline REV`` (default :data:`BASELINE_REV`, the code before the
compiled kernels of issue 30) first runs the same evaluation with the ``hiseg`` package
of git revision REV (``git archive``, in a subprocess), then the current code, and
prints a table of both runs (wall clock, CPU per image, their ratio) and the largest
absolute difference of every figure between the two (ODS / OIS / AP, per threshold, per
image, the official per-image counts).
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from hiseg.io import atomic_write_files  # noqa: E402
from hiseg.metrics.bsds import evaluate  # noqa: E402
from hiseg.metrics.report import official_txt_files  # noqa: E402
from hiseg.metrics.report import format_table, pr_curve_png, results_markdown  # noqa: E402
from provenance import stamp, stamped  # noqa: E402

SHARED_BSDS = ROOT.parent / "shared" / "data" / "BSDS500"

#: The revision whose evaluation is the "before": the last one with scipy's LAPJVsp on
#: the whole candidate graph, skimage's thinning and ndimage's labelling.
BASELINE_REV = "2fb77e5"

#: Runs ``hiseg.metrics.bsds.evaluate`` from the package unpacked in argv[1] (not the
#: installed one), keyword arguments in argv[2] (JSON), the result (JSON) to argv[3].
_BASELINE_SCRIPT = """
import json, sys, time
sys.path.insert(0, sys.argv[1])
from hiseg.metrics.bsds import evaluate
t0 = time.perf_counter()
res = evaluate(**json.loads(sys.argv[2]))
res["wall_s"] = time.perf_counter() - t0
with open(sys.argv[3], "w") as f:
    json.dump(res, f)
"""

#: Published gPb-owt-ucm figures (Arbelaez et al., TPAMI 2011, Tables 1-2):
#: BSDS300 test = the 100 BSDS500 val images evaluated here, and BSDS500 test.
PUBLISHED = {
    "boundary F": ((0.71, 0.74, "AP 0.73"), (0.73, 0.76, "AP 0.73")),
    "covering": ((0.59, 0.65, "best 0.75"), (0.59, 0.65, "best 0.74")),
    "PRI": ((0.81, 0.85, ""), (0.83, 0.86, "")),
    "VI": ((1.65, 1.47, ""), (1.69, 1.48, "")),
}


def _subset(src: Path, names: list[str], dst: Path) -> Path:
    dst.mkdir()
    for n in names:
        os.symlink(src / n, dst / n)
    return dst


def run_baseline(rev: str, kwargs: dict, tmp: Path) -> dict:
    """The evaluation by revision ``rev``'s hiseg package (the result of its ``evaluate``
    plus ``wall_s``). Raises RuntimeError naming the revision when git or the run fails."""
    src = tmp / f"hiseg-{rev}"
    src.mkdir()
    archive = subprocess.run(["git", "-C", str(ROOT), "archive", rev, "hiseg"], capture_output=True)
    if archive.returncode != 0:
        raise RuntimeError(f"git archive {rev} failed: {archive.stderr.decode().strip()}")
    subprocess.run(["tar", "-x", "-C", str(src)], input=archive.stdout, check=True)
    out = tmp / f"baseline-{rev}.json"
    run = subprocess.run([sys.executable, "-c", _BASELINE_SCRIPT, str(src), json.dumps(kwargs), str(out)],
                         cwd=tmp, capture_output=True, text=True)
    if run.returncode != 0:
        raise RuntimeError(f"the evaluation of revision {rev} failed:\n{run.stderr[-2000:]}")
    return json.loads(out.read_text())


def _numbers(x, path=()):
    """``(path, value)`` of every number in a JSON tree (lists by position)."""
    if isinstance(x, dict):
        for k, v in x.items():
            yield from _numbers(v, path + (str(k),))
    elif isinstance(x, (list, tuple)):
        for i, v in enumerate(x):
            yield from _numbers(v, path + (i,))
    elif isinstance(x, (int, float)) and not isinstance(x, bool):
        yield path, float(x)


#: Result keys that are not figures.
_NOT_FIGURES = {"timing", "wall_s", "images", "kind", "n_images", "thresholds"}


def figure_differences(old: dict, new: dict) -> dict:
    """Largest absolute difference per figure group (``boundary/ods``, ``covering/per_image``,
    ``per_image_counts/bdry`` ...) between two results of ``evaluate``; a group whose
    numbers or shapes differ reads ``inf``."""
    def groups(res):
        out: dict = {}
        for path, v in _numbers({k: x for k, x in res.items() if k not in _NOT_FIGURES}):
            out.setdefault("/".join(str(p) for p in path[:2] if isinstance(p, str)), {})[path] = v
        return out

    a, b = groups(old), groups(new)
    diff = {}
    for g in sorted(set(a) | set(b)):
        x, y = a.get(g, {}), b.get(g, {})
        diff[g] = max((abs(x[k] - y[k]) for k in x), default=0.0) if x.keys() == y.keys() else float("inf")
    return diff


def _cpu(res: dict) -> tuple[float, float]:
    tm = res["timing"]
    return tm["boundary_cpu_s"], tm["region_cpu_s"]


def before_after_table(old: dict, new: dict, rev: str) -> str:
    """Markdown: wall clock and CPU per image of both runs, the ratios, and the largest
    difference of every figure group."""
    n = new["n_images"]
    rows = []
    for label, res in ((f"before (git {rev})", old), ("after (this tree)", new)):
        b, r = _cpu(res)
        rows.append((label, res["wall_s"], b / n, r / n, (b + r) / n))
    ratio = tuple(o / max(x, 1e-12) for o, x in zip(rows[0][1:], rows[1][1:]))
    lines = ["| run | wall clock (s) | CPU boundary / image (s) | CPU region / image (s) | CPU total / image (s) |",
             "|---|---|---|---|---|"]
    lines += [f"| {r[0]} | {r[1]:.1f} | {r[2]:.3f} | {r[3]:.3f} | {r[4]:.3f} |" for r in rows]
    lines.append("| ratio before / after | " + " | ".join(f"{x:.2f}x" for x in ratio) + " |")
    lines += ["", "| figure group | max abs difference, before vs after |", "|---|---|"]
    lines += [f"| {g} | {d:.3g} |" for g, d in figure_differences(old, new).items()]
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--pred", type=Path, default=SHARED_BSDS / "ucm2" / "val")
    ap.add_argument("--gt", type=Path, default=SHARED_BSDS / "data" / "groundTruth" / "val")
    ap.add_argument("--n-images", type=int, default=None, help="first N images (sorted by name); default all")
    ap.add_argument("--thresholds", type=int, default=99)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--no-region", action="store_true")
    ap.add_argument("--out", type=Path, default=None)
    ap.add_argument("--baseline", default=BASELINE_REV,
                    help=f"git revision evaluated first, for the before / after table (default {BASELINE_REV}; "
                         "'none': skip)")
    args = ap.parse_args(argv)

    if not args.pred.is_dir() or not args.gt.is_dir():
        print(f"data not found ({args.pred}, {args.gt}); nothing to benchmark")
        return 0
    with tempfile.TemporaryDirectory() as tmp:
        pred, gt = args.pred, args.gt
        if args.n_images is not None:
            preds = sorted(p.name for p in pred.iterdir() if p.suffix == ".mat")[: args.n_images]
            pred = _subset(args.pred, preds, Path(tmp) / "pred")
            gt = _subset(args.gt, [Path(p).stem + ".mat" for p in preds], Path(tmp) / "gt")
        kwargs = {"pred_dir": str(pred), "gt_dir": str(gt), "n_thresholds": args.thresholds,
                  "workers": args.workers, "region": not args.no_region}
        load = os.getloadavg()[0]
        old = None if args.baseline == "none" else run_baseline(args.baseline, kwargs, Path(tmp))
        t0 = time.perf_counter()
        res = evaluate(**kwargs)
        wall = time.perf_counter() - t0
        res["wall_s"] = wall

    n = res["n_images"]
    tm = res["timing"]
    cpu_b, cpu_r, cpu_f = tm["boundary_cpu_s"], tm["region_cpu_s"], tm.get("fop_cpu_s", 0.0)
    print(f"## hiseg.metrics on {n} BSDS500 val gPb-owt-ucm images, {args.thresholds} thresholds, "
          f"{tm['workers']} worker(s), {os.cpu_count()} CPU(s)\n")
    print(f"Load average (1 min) {load:.1f} at the start, {os.getloadavg()[0]:.1f} at the end.\n\n{stamp()}\n")
    if old is not None:
        print("### Before / after\n")
        print(before_after_table(old, res, args.baseline))
        print("### After\n")
    print("| quantity | total (s) | per image (s) |")
    print("|---|---|---|")
    print(f"| wall clock, whole run | {wall:.1f} | {wall / n:.2f} |")
    print(f"| CPU, boundary benchmark | {cpu_b:.1f} | {cpu_b / n:.2f} |")
    print(f"| CPU, region benchmark (covering, PRI, VI, Fop) | {cpu_r:.1f} | {cpu_r / n:.2f} |")
    print(f"| CPU, of which Fop (its own cut and scoring; the tables are shared) | {cpu_f:.1f} | {cpu_f / n:.3f} |")
    print(f"| CPU, both | {cpu_b + cpu_r:.1f} | {(cpu_b + cpu_r) / n:.2f} |")
    print(f"\nFop's share: {100 * cpu_f / max(cpu_b + cpu_r, 1e-9):.1f} % of the CPU time, "
          f"{100 * cpu_f / max(cpu_r, 1e-9):.1f} % of the region benchmark's.\n")
    print("### Benchmark figures\n")
    print(format_table(res))
    seism_dir = SHARED_BSDS.parent / "bench" / "seism" / "gPb-UCM"
    if seism_dir.is_dir() and args.pred == SHARED_BSDS / "ucm2" / "val" and args.n_images is None:
        from hiseg.metrics.seism import read_seism

        ref = read_seism(seism_dir)["fop"]
        print(f"SEISM's own Fop of these ucm2 (its per-image files): ODS {ref['ods']['f']:.4f}, "
              f"OIS {ref['ois']['f']:.4f}, AP {ref['ap']:.4f}\n")
    print("Published gPb-owt-ucm (TPAMI 2011); BSDS300 test = these 100 val images:\n")
    print("| measure | BSDS300 ODS | OIS | AP / best | BSDS500 test ODS | OIS | AP / best |")
    print("|---|---|---|---|---|---|---|")
    for k, ((o, i, x), (o5, i5, x5)) in PUBLISHED.items():
        print(f"| {k} | {o:.2f} | {i:.2f} | {x} | {o5:.2f} | {i5:.2f} | {x5} |")
    if args.out is not None:
        files = {"results.md": stamped(results_markdown(res))}
        files.update(official_txt_files(res))
        if res.get("boundary"):
            files["pr_curve.png"] = pr_curve_png(res)
        files["results.json"] = json.dumps({k: v for k, v in res.items() if k != "wall_s"}, indent=1) + "\n"
        atomic_write_files(args.out, files)
        print(f"\nwrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
