"""``hiseg evaluate``: BSDS500 benchmark of a folder of predictions.

Usage::

    hiseg evaluate DIR --gt DIR [--thresholds N] [-o DIR] [--workers N]
                   [--kind {auto,ucm2,segs,pb,labels}] [--first-label {auto,1,0}]
                   [--subset {all,predicted}] [--no-region] [--no-boundary] [--no-fop]

Prints a table of the benchmark figures: boundaries (Fb), covering, PRI, VI and the
precision-recall for objects and parts (Fop, as SEISM computes it). With ``--out DIR`` it also writes
``results.md`` (the table plus the per-threshold curve), ``results.json``
(everything :func:`hiseg.metrics.bsds.evaluate` returns; the writers are in :mod:`hiseg.metrics.report`), ``pr_curve.png``
(precision-recall curve with iso-F lines) and the official benchmark's
``eval_*.txt`` files; all are written to temporary files first and moved in
place only once every one of them is ready, so an error leaves no partial
output.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from .options import (add_out, add_overwrite, add_pixel_limit, add_quiet, add_workers, archive_layout, at_least_one,
                      default_text, default_workers, option_type)

__all__ = ["add_arguments", "run"]

HELP = "BSDS500 benchmark of predictions against ground truth"


def add_arguments(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """Add the ``evaluate`` options to ``parser`` and return it."""
    from ..metrics.matching import DEFAULT_MAX_DIST
    from ..metrics.predictions import KINDS

    parser.description = ("Score predictions (ucm2 .mat, segmentation .mat, boundary or label PNGs) against "
                          "BSDS-format ground truth: boundary ODS/OIS/AP, covering, PRI and VI, as the official "
                          "BSDS500 benchmark computes them, and Fop as SEISM does.")
    parser.add_argument("predictions", type=Path, metavar="DIR",
                        help="folder of predictions: ucm2/segs .mat files (as `hiseg predict` writes) or boundary "
                             "/ label .png files")
    parser.add_argument("--gt", required=True, type=Path, metavar="DIR",
                        help="folder of BSDS ground-truth .mat files (matched to predictions by file stem)")
    add_out(parser, "write results.md, results.json, pr_curve.png and eval_*.txt here", required=False)
    parser.add_argument("--thresholds", type=option_type(int, at_least_one), default=99, metavar="N",
                        help="number of thresholds for ucm2 / soft boundary maps" + default_text(99))
    parser.add_argument("--kind", choices=KINDS, default="auto",
                        help="prediction format; auto: from the file contents (label PNGs need 'labels')"
                             + default_text("auto"))
    add_workers(parser, "processes evaluating images in parallel", 2)
    parser.add_argument("--max-dist", type=_max_dist, default=DEFAULT_MAX_DIST, metavar="D",
                        help="boundary matching tolerance as a fraction of the image diagonal, in (0, 1]"
                             + default_text(DEFAULT_MAX_DIST))
    parser.add_argument("--first-label", type=_first_label, choices=("auto", 1, 0), default="auto",
                        help="first region label of label-image predictions: 1 in the BSDS format (a 0 is then "
                             "an error), 0 for 0-based images such as hiseg predict's _labels.png; auto: 0 for an "
                             "image that holds a 0, else 1 (exact either way)" + default_text("auto"))
    parser.add_argument("--subset", choices=("all", "predicted"), default="all",
                        help="all: every ground-truth image needs a prediction (the benchmark's set); predicted: "
                             "score only the images with a prediction (the first line says how many of --gt's)"
                             + default_text("all"))
    parser.add_argument("--no-region", action="store_true", help="skip covering / PRI / VI / Fop")
    parser.add_argument("--no-fop", action="store_true",
                        help="skip the precision-recall for objects and parts (Fop)")
    parser.add_argument("--no-boundary", action="store_true", help="skip the boundary benchmark")
    add_overwrite(parser, "result files")
    add_pixel_limit(parser)
    add_quiet(parser, "no progress bar")
    return parser


def _first_label(text: str):
    return text if text == "auto" else int(text) if text in ("0", "1") else text


def _max_dist(text: str) -> float:
    try:
        v = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"--max-dist must be a number, got {text!r}") from None
    if not (0 < v <= 1):  # also refuses nan
        raise argparse.ArgumentTypeError(
            f"--max-dist is a fraction of the image diagonal and must be in (0, 1], got {text} "
            "(the BSDS benchmark uses 0.0075)")
    return v


def _progress(quiet: bool):
    """A ``progress(done, total, name)`` callback drawing a tqdm bar on stderr (None when quiet)."""
    if quiet:
        return None
    from tqdm import tqdm

    bar = None

    def cb(done: int, total: int, name: str) -> None:
        nonlocal bar
        if bar is None:
            bar = tqdm(total=total, unit="image", desc="evaluate", file=sys.stderr)
        bar.set_postfix_str(name, refresh=False)
        bar.update(done - bar.n)
        if done >= total:
            bar.close()

    return cb


def run(args: argparse.Namespace) -> int:
    """Run ``hiseg evaluate`` with parsed ``args``; returns the exit status.

    Returns 0 on success; 1 when some images could not be read (corrupt, over the
    pixel limit: the figures are over the others, the failed ones listed
    after them on stderr); 2 on bad input (missing or empty folders, mismatched names
    or sizes, every image unreadable), with the error on stderr;
    an :class:`OSError` while writing ``--out`` returns 1 and leaves no
    partial file there.
    """
    from ..io import atomic_write_files, refuse_overwrite
    from ..metrics.bsds import evaluate
    from ..metrics.report import (OUTPUT_FILES, format_table, official_txt_files, pr_curve_png, report_header,
                                  results_markdown, results_to_json)

    args.gt = archive_layout(args.gt, "hiseg evaluate")
    if args.out is not None:
        try:  # before the (long) evaluation: never replace a file that exists, unless asked
            refuse_overwrite([args.out / n for n in OUTPUT_FILES], [], args.overwrite,
                             command="hiseg evaluate")
        except ValueError as exc:
            print(f"hiseg evaluate: error: {exc}", file=sys.stderr)
            return 2
    try:
        res = evaluate(
            args.predictions,
            args.gt,
            n_thresholds=args.thresholds,
            kind=args.kind,
            workers=default_workers() if args.workers == "auto" else max(1, args.workers),
            boundary=not args.no_boundary,
            region=not args.no_region,
            max_dist=args.max_dist,
            progress=_progress(args.quiet),
            fop=not args.no_fop,
            first_label=args.first_label,
            subset=args.subset,
            skip_failed=True,
        )
    except (FileNotFoundError, NotADirectoryError, ValueError) as exc:
        print(f"hiseg evaluate: error: {exc}", file=sys.stderr)
        return 2
    print(report_header(res))
    print(format_table(res), end="")
    if args.out is not None:
        try:
            files: dict[str, bytes | str] = {
                "results.md": results_markdown(res),
                "results.json": results_to_json(res),
            }
            files.update(official_txt_files(res))
            if res.get("boundary") or res.get("fop"):
                files["pr_curve.png"] = pr_curve_png(res)
            written = atomic_write_files(args.out, files)
        except OSError as exc:
            print(f"hiseg evaluate: error writing {args.out}: {exc}", file=sys.stderr)
            return 1
        print(f"wrote {', '.join(sorted(p.name for p in written))} to {args.out}")
    failed = res.get("failed") or []
    if failed:  # reported after the table, which says it covers the others only
        total = res["n_images"] + len(failed)
        print(f"hiseg evaluate: error: {len(failed)} of {total} image(s) failed and are not counted in the "
              "figures above:", file=sys.stderr)
        for f in failed:
            print(f"  {f['image']}: {f['error']}", file=sys.stderr)
        return 1
    return 0
