"""The benchmark's compiled kernels before and after a change, paired in one run.

Usage::

    python benchmarks/bench_kernels.py                      # 8 val images, 25 thresholds, 5 rounds
    python benchmarks/bench_kernels.py --n-images 20 --thresholds 99 --rounds 7
    python benchmarks/bench_kernels.py --baseline REV       # another "before"

Loads :mod:`hiseg.metrics.kernels` twice: as the working tree has it ("after") and as the one
file ``hiseg/metrics/kernels.py`` of git revision ``--baseline`` (default :data:`BASELINE_REV`,
the last revision before the kernels became a package; ``git show``, imported under another
name), compiles both, then times the same calls with each, alternating within every round
(before, after, before, ...), so that a machine shared with other jobs loads both sides
alike. The calls are the BSDS benchmark's own, on the val gPb-owt-ucm ``ucm2`` maps of
``../shared/data/BSDS500`` against their annotators, at every threshold: thinning, the
annotators' neighbourhoods, the matching of every thinned map to every annotator (the
components of the last threshold kept, as :class:`hiseg.metrics.matching.BoundaryMatcher`
keeps them), the region labels grown over the thresholds and their contingency tables.
Prints a markdown table (``--write``: also to ``benchmarks/results/kernels.md``): per kernel,
the median over rounds of the CPU time of its calls, before and after, and their ratio
(after / before), with the revision, date, machine and command above it (``provenance.py``).
Both sides' outputs are compared (exits 1 on a difference). Exits cleanly
(status 0, with a message) when the data are absent.
"""
from __future__ import annotations

import argparse
import importlib.util
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from hiseg.io.labels import load_ground_truth, loadmat  # noqa: E402
from hiseg.metrics import kernels as after  # noqa: E402
from hiseg.metrics.matching import DEFAULT_MAX_DIST, DEFAULT_OUTLIER_COST, _offsets, max_distance_pixels  # noqa: E402
from provenance import stamp  # noqa: E402

SHARED_BSDS = ROOT.parent / "shared" / "data" / "BSDS500"
#: the last revision whose kernels are one file, hiseg/metrics/kernels.py
BASELINE_REV = "dd09d48"
KERNELS = ("thin", "neighbourhoods", "match_map", "ucm_labels_advance", "pair_counts")


def load_before(rev: str):
    """``hiseg/metrics/kernels.py`` of ``rev`` as a module of its own (compiled apart)."""
    text = subprocess.run(["git", "-C", str(ROOT), "show", f"{rev}:hiseg/metrics/kernels.py"], check=True,
                          capture_output=True, text=True).stdout
    folder = Path(tempfile.mkdtemp(prefix="hiseg-kernels-before-"))
    path = folder / "kernels_before.py"
    path.write_text(text)
    spec = importlib.util.spec_from_file_location("kernels_before", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def images(n: int):
    """(ucm2, annotators' boundary maps, annotators' segmentations) of the first ``n`` val images."""
    for f in sorted((SHARED_BSDS / "ucm2" / "val").glob("*.mat"))[:n]:
        ucm2 = np.ascontiguousarray(loadmat(f)["ucm2"], dtype=np.float64)
        segs, bounds = load_ground_truth(SHARED_BSDS / "data" / "groundTruth" / "val" / f.name)
        yield ucm2, [b != 0 for b in bounds], [np.asarray(s, np.int64) for s in segs]


def run_image(k, ucm2, gts, segs, thresholds, clock: dict, outputs: list) -> None:
    """One image's kernel calls with the kernels module ``k``; CPU seconds added to ``clock``."""
    def timed(name, fn, *args):
        t0 = time.process_time()
        res = fn(*args)
        clock[name] += time.process_time() - t0
        return res

    shape = gts[0].shape
    radius = max_distance_pixels(shape, DEFAULT_MAX_DIST)
    ow = int(np.ceil(DEFAULT_OUTLIER_COST * radius * 100))
    dy, dx, cost = _offsets(radius)
    hoods = [timed("neighbourhoods", k.neighbourhoods, np.flatnonzero(g).astype(np.int64), *shape, dy, dx, cost)
             for g in gts]
    ids = np.full(gts[0].size, -1, dtype=np.int64)
    none = np.zeros(0, dtype=np.int64)
    earlier = [(np.full(ids.size, -1, dtype=np.int64), none, none, np.zeros(1, dtype=np.int64), none, none)
               for _ in gts]
    n = ucm2.size
    state = (np.full(n, -1, dtype=np.int64), np.zeros(n, dtype=np.int64), np.zeros(n + 1, dtype=np.int64),
             np.full(n, -1, dtype=np.int64))
    t_prev = -np.inf
    for t in thresholds:
        pred = timed("thin", k.thin, ucm2[2::2, 2::2] >= t)
        plin = np.flatnonzero(pred).astype(np.int64)
        ids[plin] = np.arange(plin.size, dtype=np.int64)
        for a, hood in enumerate(hoods):
            mp, mg, *components = timed("match_map", k.match_map, ids, plin, *hood, ow, *earlier[a])
            earlier[a] = (earlier[a][0], plin, *components)
            outputs.append(int(mp.size))
        ids[plin] = -1
        labels = timed("ucm_labels_advance", k.ucm_labels_advance, ucm2, t_prev, t, True, False, *state)
        t_prev = t
        a_lab = labels.ravel().astype(np.int64)
        for s in segs:
            b_lab = s.ravel()
            lo, ka, kb = k.label_range(a_lab, b_lab)
            keys, cnt, na, nb = timed("pair_counts", k.pair_counts, a_lab, b_lab, ka, kb, np.zeros(ka * kb, np.int64))
            outputs.append(int(keys.size))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--n-images", type=int, default=8)
    ap.add_argument("--thresholds", type=int, default=25)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--baseline", default=BASELINE_REV)
    ap.add_argument("--write", action="store_true", help="also write the table to benchmarks/results/kernels.md")
    args = ap.parse_args(argv)
    if not (SHARED_BSDS / "ucm2" / "val").is_dir():
        print(f"no BSDS500 val ucm2 maps under {SHARED_BSDS}: nothing to time")
        return 0
    before = load_before(args.baseline)
    data = list(images(args.n_images))
    thresholds = np.linspace(1.0 / (args.thresholds + 1), 1.0 - 1.0 / (args.thresholds + 1), args.thresholds)
    for k in (before, after):  # compile (numba's cache may hold them already) and check the outputs agree
        run_image(k, *data[0], thresholds[:2], dict.fromkeys(KERNELS, 0.0), [])
    per_round = {side: {name: [] for name in KERNELS} for side in ("before", "after")}
    outs = {"before": [], "after": []}
    for r in range(args.rounds):
        for side, k in (("before", before), ("after", after)) if r % 2 == 0 else (("after", after), ("before", before)):
            clock = dict.fromkeys(KERNELS, 0.0)
            out = []
            for item in data:
                run_image(k, *item, thresholds, clock, out)
            outs[side] = out
            for name in KERNELS:
                per_round[side][name].append(clock[name])
    same = outs["before"] == outs["after"]
    lines = []
    say = lines.append
    say(f"{stamp()}\n")
    say(f"After: this tree (the stamp's revision); before: revision {args.baseline}; "
        f"Python {platform.python_version()}.")
    say(f"{len(data)} val images x {args.thresholds} thresholds; CPU seconds of each kernel's calls, median of "
          f"{args.rounds} rounds, sides alternating; outputs {'identical' if same else 'DIFFERENT'}\n")
    say("| kernel | before (s) | after (s) | after / before |")
    say("| --- | ---: | ---: | ---: |")
    tot = {"before": 0.0, "after": 0.0}
    for name in KERNELS:
        b, a = float(np.median(per_round["before"][name])), float(np.median(per_round["after"][name]))
        tot["before"] += b
        tot["after"] += a
        say(f"| {name} | {b:.3f} | {a:.3f} | {a / b:.3f} |" if b > 0 else f"| {name} | {b:.3f} | {a:.3f} | - |")
    say(f"| all | {tot['before']:.3f} | {tot['after']:.3f} | {tot['after'] / tot['before']:.3f} |")
    text = "\n".join(lines)
    print(text)
    if args.write:
        out = ROOT / "benchmarks" / "results" / "kernels.md"
        out.write_text(f"# The benchmark's kernels, before / after (`benchmarks/bench_kernels.py`)\n\n{text}\n")
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
