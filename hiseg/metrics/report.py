"""Reports of the BSDS500 benchmark results (:func:`hiseg.metrics.bsds.evaluate`): the summary
table, ``results.md``, the precision-recall curve, JSON, and the official ``eval_*.txt`` files."""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Mapping

from ..io import atomic_write_files

__all__ = ["OUTPUT_FILES", "format_table", "official_txt_files", "pr_curve_png", "report_header", "results_markdown", "results_to_json",
           "write_official_txt"]


#: Every file ``hiseg evaluate --out`` may write (which ones depends on the benchmarks run).
OUTPUT_FILES = ("results.md", "results.json", "pr_curve.png", "eval_bdry.txt", "eval_bdry_thr.txt",
                "eval_bdry_img.txt", "eval_cover.txt", "eval_cover_th.txt", "eval_cover_img.txt",
                "eval_RI_VOI.txt", "eval_RI_VOI_thr.txt")


def _fmt_rows(rows, int_first: bool = False) -> str:
    lines = []
    for row in rows:
        cells = []
        for j, v in enumerate(row):
            cells.append("%10d" % int(v) if (int_first and j == 0) else "%10g" % float(v))
        lines.append(" ".join(cells) + "\n")
    return "".join(lines)


def official_txt_files(results: Mapping) -> dict[str, str]:
    """Contents of the official benchmark's summary files.

    Parameters
    ----------
    results : dict
        Output of :func:`evaluate`.

    Returns
    -------
    dict
        File name -> text, for ``eval_bdry.txt``, ``eval_bdry_thr.txt``,
        ``eval_bdry_img.txt`` and (with region results) ``eval_cover.txt``,
        ``eval_cover_th.txt``, ``eval_cover_img.txt``, ``eval_RI_VOI.txt``,
        ``eval_RI_VOI_thr.txt``, formatted like the official ``fprintf``
        (``%10g``; image indices ``%10d``, 1-based).
    """
    files: dict[str, str] = {}
    b = results.get("boundary")
    if b:
        o, s = b["ods"], b["ois"]
        files["eval_bdry.txt"] = _fmt_rows(
            [[o["threshold"], o["recall"], o["precision"], o["f"], s["recall"], s["precision"], s["f"], b["ap"]]]
        )
        files["eval_bdry_thr.txt"] = _fmt_rows(
            [[r["threshold"], r["recall"], r["precision"], r["f"]] for r in b["per_threshold"]]
        )
        files["eval_bdry_img.txt"] = _fmt_rows(
            [[i + 1, r["threshold"], r["recall"], r["precision"], r["f"]] for i, r in enumerate(b["per_image"])],
            int_first=True,
        )
    c = results.get("covering")
    if c:
        files["eval_cover.txt"] = _fmt_rows([[c["ods_threshold"], c["ods"], c["ois"], c["best"]]])
        files["eval_cover_th.txt"] = _fmt_rows([[r["threshold"], r["covering"]] for r in c["per_threshold"]])
        files["eval_cover_img.txt"] = _fmt_rows(
            [[i + 1, r["threshold"], r["covering"], r["precision"]] for i, r in enumerate(c["per_image"])],
            int_first=True,
        )
        p, v = results["pri"], results["vi"]
        files["eval_RI_VOI.txt"] = _fmt_rows(
            [[p["ods_threshold"], p["ods"], p["ois"], v["ods_threshold"], v["ods"], v["ois"]]]
        )
        files["eval_RI_VOI_thr.txt"] = _fmt_rows(
            [[a["threshold"], a["pri"], bb["vi"]] for a, bb in zip(p["per_threshold"], v["per_threshold"])]
        )
    return files


def write_official_txt(results: Mapping, out_dir) -> list[Path]:
    """Write the official ``eval_*.txt`` summary files into ``out_dir`` (atomically).

    Returns the written paths; see :func:`official_txt_files`.
    """
    return atomic_write_files(out_dir, official_txt_files(results))


def results_to_json(results: Mapping) -> str:
    """JSON text (``results.json``) of :func:`hiseg.metrics.bsds.evaluate`'s output."""
    return json.dumps(results, indent=1, sort_keys=False) + "\n"


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
    fo = res.get("fop")
    if fo:
        o, s = fo["ods"], fo["ois"]
        lines.append(f"| objects and parts F (Fop) | {_f(o['f'])} | {_f(s['f'])} | AP {_f(fo['ap'])} "
                     f"| {o['threshold']:.4g} |")
        lines.append(f"| Fop recall | {_f(o['recall'])} | {_f(s['recall'])} | | |")
        lines.append(f"| Fop precision | {_f(o['precision'])} | {_f(s['precision'])} | | |")
    c = res.get("covering")
    if c:
        lines.append(f"| covering | {_f(c['ods'])} | {_f(c['ois'])} | best {_f(c['best'])} | {c['ods_threshold']:.4g} |")
        p, v = res["pri"], res["vi"]
        lines.append(f"| PRI | {_f(p['ods'])} | {_f(p['ois'])} | | {p['ods_threshold']:.4g} |")
        lines.append(f"| VI | {_f(v['ods'])} | {_f(v['ois'])} | | {v['ods_threshold']:.4g} |")
    return "\n".join(lines) + "\n"


def report_header(res: Mapping) -> str:
    t = res.get("timing", {})
    of = res.get("n_ground_truth")
    failed = len(res.get("failed") or [])
    subset = res.get("subset") == "predicted" and of is not None and of != res["n_images"] + failed
    scored = (f"{res['n_images']} of the {of} ground-truth image(s) (the predicted ones)" if subset else
              f"{res['n_images']} image(s)")
    return (f"BSDS500 benchmark: {scored}" + (f" ({failed} more failed: not counted)" if failed else "")
            + f", kind {res['kind']}, "
            f"{len(res['thresholds'])} threshold(s), {t.get('workers', 1)} worker(s), "
            f"{t.get('total_s', 0.0):.1f} s")


def results_markdown(res: Mapping) -> str:
    """``results.md``: header, summary table, and the per-threshold curves."""
    out = [f"# {report_header(res)}", "", format_table(res)]
    b = res.get("boundary")
    c = res.get("covering")
    fo = res.get("fop")
    if b or c:
        cols = ["threshold"]
        if b:
            cols += ["recall", "precision", "F"]
        if fo:
            cols += ["Fop recall", "Fop precision", "Fop"]
        if c:
            cols += ["covering", "PRI", "VI"]
        out += ["## Per threshold", "", "| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
        for i, t in enumerate(res["thresholds"]):
            row = [f"{t:.4g}"]
            if b:
                r = b["per_threshold"][i]
                row += [_f(r["recall"]), _f(r["precision"]), _f(r["f"])]
            if fo:
                r = fo["per_threshold"][i]
                row += [_f(r["recall"]), _f(r["precision"]), _f(r["f"])]
            if c:
                row += [_f(c["per_threshold"][i]["covering"]), _f(res["pri"]["per_threshold"][i]["pri"]),
                        _f(res["vi"]["per_threshold"][i]["vi"])]
            out.append("| " + " | ".join(row) + " |")
        out.append("")
    return "\n".join(out)


def pr_curve_png(res: Mapping) -> bytes:
    """Precision-recall curves with iso-F lines as PNG bytes (matplotlib, Agg): boundaries
    (Fb), and objects and parts (Fop) beside them when the results have it."""
    import numpy as np
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    panels = [(res[k], title) for k, title in (("boundary", "boundaries (Fb)"), ("fop", "objects and parts (Fop)"))
              if res.get(k)]
    fig = Figure(figsize=(5.5 * len(panels), 5.5), dpi=100)
    FigureCanvasAgg(fig)
    r = np.linspace(0.005, 1, 400)
    for j, (b, title) in enumerate(panels):
        ax = fig.add_subplot(1, len(panels), j + 1)
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
        ax.plot(rr, pp, "-", color="tab:red", lw=1.8,
                label=f"ODS F={o['f']:.3f}, OIS F={b['ois']['f']:.3f}, AP={b['ap']:.3f}")
        ax.plot([o["recall"]], [o["precision"]], "o", color="tab:red", ms=6)
        ax.set_xlim(0, 1)
        ax.set_ylim(0, 1)
        ax.set_xlabel("Recall")
        ax.set_ylabel("Precision")
        ax.set_aspect("equal")
        ax.grid(True, color="0.92")
        ax.set_title(f"BSDS500 {title}, {res['n_images']} images")
        ax.legend(loc="lower left", fontsize=8)
    buf = io.BytesIO()
    fig.savefig(buf, format="png")
    return buf.getvalue()
