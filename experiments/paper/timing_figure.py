"""Time per iteration vs number of edges (the paper's Figure 4), from the core benchmark.

Reads the JSON written by ``python benchmarks/bench_core.py --json experiments/paper/results/timing.json``
(grids with uniform random weights; one fit iteration = forward, backward and optimiser
step, single thread) and draws a log-log plot per loss, with the floor (higra
``bpt_canonical`` + lca of all edges) measured in the same run. Writes
``experiments/paper/results/timing.png`` and ``timing.md`` (stamped, ``benchmarks/provenance.py``;
the JSON's own stamp, the timings' run, quoted in it).

Usage::

    python benchmarks/bench_core.py --sizes 3e3,3e4,3e5 --repeat 2 --json experiments/paper/results/timing.json
    python experiments/paper/timing_figure.py [--json experiments/paper/results/timing.json]
"""
import argparse
import json
import sys
from collections import defaultdict
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[1] / "benchmarks"))

from provenance import write_stamped  # noqa: E402


def load(path):
    raw = json.loads(Path(path).read_text())
    series = defaultdict(dict)
    floor = {}
    for r in raw["iteration"]:
        series[r["loss"]][r["edges"]] = r["seconds"]
        floor[r["edges"]] = r["floor"]
    return series, floor, raw


def slope(x, y):
    """Least-squares slope of log y against log x (the empirical complexity exponent)."""
    if len(x) < 2:
        return float("nan")
    return float(np.polyfit(np.log(x), np.log(y), 1)[0])


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--json", default=str(HERE / "results" / "timing.json"))
    ap.add_argument("--out", default=str(HERE / "results"))
    args = ap.parse_args()
    series, floor, raw = load(args.json)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(5.2, 4))
    marks = dict(zip(sorted(series), "osd^v<>p"))
    for name in sorted(series):
        e = np.array(sorted(series[name]))
        t = np.array([series[name][k] for k in e])
        ax.loglog(e, t, marker=marks[name], label=f"{name} (slope {slope(e, t):.2f})")
    e = np.array(sorted(floor))
    fl = [floor[k] for k in e]
    ax.loglog(e, fl, "k--", label=f"floor: bpt_canonical + lca (slope {slope(e, fl):.2f})")
    ax.set_xlabel("number of edges")
    ax.set_ylabel("seconds per iteration (1 thread)")
    ax.set_title("Ultrametric fitting: time per iteration")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(out / "timing.png", dpi=110)

    sizes = sorted(floor)
    lines = ["# Time per iteration (seconds, one thread) vs number of edges", "",
             "From `benchmarks/bench_core.py` (grid graphs, uniform random weights); *slope*: exponent "
             "of a power-law fit (1 = linear). The timings' own run: "
             + (raw.get("stamp") or "not recorded in the JSON (written before its stamp)."), "",
             "| loss | " + " | ".join(f"{s:,} edges" for s in sizes) + " | slope |",
             "|---|" + "---:|" * (len(sizes) + 1)]
    for name in sorted(series):
        cells = [f"{series[name][s]:.4f}" if s in series[name] else "-" for s in sizes]
        e = np.array(sorted(series[name]))
        lines.append(f"| {name} | " + " | ".join(cells) + f" | {slope(e, [series[name][k] for k in e]):.2f} |")
    lines.append("| floor (bpt_canonical + lca) | " + " | ".join(f"{floor[s]:.4f}" for s in sizes)
                 + f" | {slope(np.array(sizes), [floor[s] for s in sizes]):.2f} |")
    print(write_stamped(out / "timing.md", "\n".join(lines)).read_text())


if __name__ == "__main__":
    main()
