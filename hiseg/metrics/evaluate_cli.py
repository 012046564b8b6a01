"""``hiseg evaluate``: BSDS500 benchmark of a folder of predictions.

Usage::

    hiseg evaluate --pred DIR --gt DIR [--thresholds N] [--out DIR] [--workers K]
                   [--kind {auto,ucm2,segs,pb,labels}] [--no-region] [--no-boundary]

Prints a table of the benchmark figures. With ``--out DIR`` it also writes
``results.md`` (the table plus the per-threshold curve), ``results.json``
(everything :func:`hiseg.metrics.bsds.evaluate` returns), ``pr_curve.png``
(precision-recall curve with iso-F lines) and the official benchmark's
``eval_*.txt`` files; all are written to temporary files first and moved in
place only once every one of them is ready, so an error leaves no partial
output.
"""

from __future__ import annotations

import argparse
import io
import json
import sys
from pathlib import Path
from typing import Mapping

from .boundary import DEFAULT_MAX_DIST
from ..io import atomic_write_files
from .bsds import KINDS, evaluate, official_txt_files

__all__ = ["add_arguments", "run", "format_table", "pr_curve_png", "results_markdown"]


def add_arguments(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """Add the ``evaluate`` options to ``parser`` and return it."""
    parser.add_argument("--pred", required=True, type=Path,
                        help="folder of predictions: ucm2/segs .mat files or boundary .png files")
    parser.add_argument("--gt", required=True, type=Path,
                        help="folder of BSDS ground-truth .mat files (matched to predictions by file stem)")
    parser.add_argument("--thresholds", type=int, default=99,
                        help="number of thresholds for ucm2 / soft boundary maps (default 99)")
    parser.add_argument("--kind", choices=KINDS, default="auto",
                        help="prediction format (default: from the file contents; label PNGs need 'labels')")
    parser.add_argument("--out", type=Path, default=None,
                        help="write results.md, results.json, pr_curve.png and eval_*.txt here")
    parser.add_argument("--workers", type=int, default=None,
                        help="processes evaluating images in parallel (default: number of CPUs)")
    parser.add_argument("--max-dist", type=float, default=DEFAULT_MAX_DIST,
                        help="boundary matching tolerance as a fraction of the image diagonal (default 0.0075)")
    parser.add_argument("--no-region", action="store_true", help="skip covering / PRI / VI")
    parser.add_argument("--no-boundary", action="store_true", help="skip the boundary benchmark")
    parser.add_argument("--quiet", action="store_true", help="no progress line")
    return parser


def _f(x, nd=4) -> str:
    return f"{x:.{nd}f}"


def format_table(res: Mapping) -> str:
    """Markdown table of the dataset figures of :func:`~hiseg.metrics.bsds.evaluate`."""
    lines = ["| measure | ODS | OIS | AP / best | ODS threshold |", "|---|---|---|---|---|"]
    b = res.get("boundary")
    if b:
        o, s = b["ods"], b["ois"]
        lines.append(f"| boundary F | {_f(o['f'])} | {_f(s['f'])} | AP {_f(b['ap'])} | {o['threshold']:.4g} |")
        lines.append(f"| boundary recall | {_f(o['recall'])} | {_f(s['recall'])} | | |")
        lines.append(f"| boundary precision | {_f(o['precision'])} | {_f(s['precision'])} | | |")
    c = res.get("covering")
    if c:
        lines.append(f"| covering | {_f(c['ods'])} | {_f(c['ois'])} | best {_f(c['best'])} | {c['ods_threshold']:.4g} |")
        p, v = res["pri"], res["vi"]
        lines.append(f"| PRI | {_f(p['ods'])} | {_f(p['ois'])} | | {p['ods_threshold']:.4g} |")
        lines.append(f"| VI | {_f(v['ods'])} | {_f(v['ois'])} | | {v['ods_threshold']:.4g} |")
    return "\n".join(lines) + "\n"


def _header(res: Mapping) -> str:
    t = res.get("timing", {})
    return (f"BSDS500 benchmark: {res['n_images']} image(s), kind {res['kind']}, "
            f"{len(res['thresholds'])} threshold(s), {t.get('workers', 1)} worker(s), "
            f"{t.get('total_s', 0.0):.1f} s")


def results_markdown(res: Mapping) -> str:
    """``results.md``: header, summary table, and the per-threshold curves."""
    out = [f"# {_header(res)}", "", format_table(res)]
    b = res.get("boundary")
    c = res.get("covering")
    if b or c:
        cols = ["threshold"]
        if b:
            cols += ["recall", "precision", "F"]
        if c:
            cols += ["covering", "PRI", "VI"]
        out += ["## Per threshold", "", "| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
        for i, t in enumerate(res["thresholds"]):
            row = [f"{t:.4g}"]
            if b:
                r = b["per_threshold"][i]
                row += [_f(r["recall"]), _f(r["precision"]), _f(r["f"])]
            if c:
                row += [_f(c["per_threshold"][i]["covering"]), _f(res["pri"]["per_threshold"][i]["pri"]),
                        _f(res["vi"]["per_threshold"][i]["vi"])]
            out.append("| " + " | ".join(row) + " |")
        out.append("")
    return "\n".join(out)


def pr_curve_png(res: Mapping) -> bytes:
    """Precision-recall curve with iso-F lines as PNG bytes (matplotlib, Agg)."""
    import numpy as np
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    b = res["boundary"]
    fig = Figure(figsize=(5.5, 5.5), dpi=100)
    FigureCanvasAgg(fig)
    ax = fig.add_subplot(1, 1, 1)
    r = np.linspace(0.005, 1, 400)
    for f in np.arange(0.1, 1.0, 0.1):
        with np.errstate(divide="ignore", invalid="ignore"):
            p = f * r / (2 * r - f)
        ok = (r > f / 2) & (p >= 0) & (p <= 1)
        ax.plot(r[ok], p[ok], color="0.8", lw=0.8)
        k = np.flatnonzero(ok)
        if k.size:
            ax.text(r[k[-1]], p[k[-1]], f"{f:.1f}", fontsize=7, color="0.55", va="bottom", ha="right")
    rr = [x["recall"] for x in b["per_threshold"]]
    pp = [x["precision"] for x in b["per_threshold"]]
    o = b["ods"]
    ax.plot(rr, pp, "-", color="tab:red", lw=1.8, label=f"ODS F={o['f']:.3f}, OIS F={b['ois']['f']:.3f}, AP={b['ap']:.3f}")
    ax.plot([o["recall"]], [o["precision"]], "o", color="tab:red", ms=6)
    ax.set_xlim(0, 1)
    ax.set_ylim(0, 1)
    ax.set_xlabel("Recall")
    ax.set_ylabel("Precision")
    ax.set_aspect("equal")
    ax.grid(True, color="0.92")
    ax.set_title(f"BSDS500 boundaries ({res['n_images']} images)")
    ax.legend(loc="lower left", fontsize=8)
    buf = io.BytesIO()
    fig.savefig(buf, format="png")
    return buf.getvalue()


def _progress(quiet: bool):
    if quiet:
        return None
    tty = sys.stderr.isatty()

    def cb(done: int, total: int, name: str) -> None:
        if tty:
            print(f"\r[{done}/{total}] {name}      ", end="" if done < total else "\n", file=sys.stderr, flush=True)
        elif done == total or done % 10 == 0:
            print(f"[{done}/{total}] {name}", file=sys.stderr, flush=True)

    return cb


def run(args: argparse.Namespace) -> int:
    """Run ``hiseg evaluate`` with parsed ``args``; returns the exit status.

    Returns 0 on success and 2 on bad input (missing or empty folders,
    mismatched names or sizes, unreadable files), with the error on stderr;
    an :class:`OSError` while writing ``--out`` returns 1 and leaves no
    partial file there.
    """
    try:
        res = evaluate(
            args.pred,
            args.gt,
            n_thresholds=args.thresholds,
            kind=args.kind,
            workers=args.workers,
            boundary=not args.no_boundary,
            region=not args.no_region,
            max_dist=args.max_dist,
            progress=_progress(getattr(args, "quiet", False)),
        )
    except (FileNotFoundError, NotADirectoryError, ValueError) as exc:
        print(f"hiseg evaluate: error: {exc}", file=sys.stderr)
        return 2
    print(_header(res))
    print(format_table(res), end="")
    if args.out is not None:
        try:
            files: dict[str, bytes | str] = {
                "results.md": results_markdown(res),
                "results.json": json.dumps(res, indent=1) + "\n",
            }
            files.update(official_txt_files(res))
            if res.get("boundary"):
                files["pr_curve.png"] = pr_curve_png(res)
            written = atomic_write_files(args.out, files)
        except OSError as exc:
            print(f"hiseg evaluate: error writing {args.out}: {exc}", file=sys.stderr)
            return 1
        print(f"wrote {', '.join(sorted(p.name for p in written))} to {args.out}")
    return 0


def main(argv=None) -> int:
    """Stand-alone entry point (``python -m hiseg.metrics.evaluate_cli``)."""
    parser = add_arguments(argparse.ArgumentParser(prog="hiseg evaluate", description=__doc__.split("\n\n")[0]))
    return run(parser.parse_args(argv))


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
