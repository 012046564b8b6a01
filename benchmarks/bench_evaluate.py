"""Time the BSDS500 benchmark (hiseg.metrics) on the val gPb-owt-ucm results.

Usage::

    python benchmarks/bench_evaluate.py                      # 100 val images, 99 thresholds, 2 workers
    python benchmarks/bench_evaluate.py --n-images 10 --thresholds 25
    python benchmarks/bench_evaluate.py --pred DIR --gt DIR  # other data

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
"""
from __future__ import annotations

import argparse
import os
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

SHARED_BSDS = ROOT.parent / "shared" / "data" / "BSDS500"

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


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--pred", type=Path, default=SHARED_BSDS / "ucm2" / "val")
    ap.add_argument("--gt", type=Path, default=SHARED_BSDS / "data" / "groundTruth" / "val")
    ap.add_argument("--n-images", type=int, default=None, help="first N images (sorted by name); default all")
    ap.add_argument("--thresholds", type=int, default=99)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--no-region", action="store_true")
    ap.add_argument("--out", type=Path, default=None)
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
        t0 = time.perf_counter()
        res = evaluate(pred, gt, n_thresholds=args.thresholds, workers=args.workers, region=not args.no_region)
        wall = time.perf_counter() - t0

    n = res["n_images"]
    tm = res["timing"]
    cpu_b, cpu_r, cpu_f = tm["boundary_cpu_s"], tm["region_cpu_s"], tm.get("fop_cpu_s", 0.0)
    print(f"## hiseg.metrics on {n} BSDS500 val gPb-owt-ucm images, {args.thresholds} thresholds, "
          f"{tm['workers']} worker(s), {os.cpu_count()} CPU(s)\n")
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
        files = {"results.md": results_markdown(res)}
        files.update(official_txt_files(res))
        if res.get("boundary"):
            files["pr_curve.png"] = pr_curve_png(res)
        import json

        files["results.json"] = json.dumps(res, indent=1) + "\n"
        atomic_write_files(args.out, files)
        print(f"\nwrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
