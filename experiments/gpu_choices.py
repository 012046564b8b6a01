"""What experiments/gpu_session.sh decides from the committed benchmark rows
(benchmarks/results/pixel_stage.md, the rows benchmarks/bench_pixel_stage.py appends), so that a
GPU session spends its minutes on training once a measurement exists:

* ``bench``: 1 when the table has no GPU row (of ``--device``, the GPU at hand, where given) of
  the network in eager mode yet (the session then runs the benchmark first), else 0;
* ``compile``: 1 when the newest GPU row of the network compiled with ``torch.compile``'s default
  mode is at least ``--gain`` (1.15) times the newest eager GPU row's crops/s on the same device
  (the pixel stage then trains with ``hiseg.callbacks.CompileNetwork``), else 0; a row whose
  crops/s says ``failed`` (gpu_session.sh's, when a training with compile failed on that GPU)
  counts as the newest compiled one and answers 0;
* ``newest CKPT...``: the checkpoint with the most training steps (``global_step``; the first
  of equals), among those that exist: which one the pixel stage resumes from (the committed
  state, or the one the previous command left on a still-warm machine);
* ``step CKPT``: the checkpoint's ``global_step``;
* ``curve OUT [--until CKPT] CSV...``: the pixel stage's whole validation curve, the given
  ``metrics.csv`` files (the curve so far, then this run's) one after the other into ``OUT``
  (the union of their columns; missing files are skipped); with ``--until``, the last file's rows
  of steps after that checkpoint are left out (a run cut after its last periodic checkpoint: the
  resumed run logs those steps again; Lightning logs a step's row with the global step before it,
  so a checkpoint at step N keeps the rows of steps < N).

    python experiments/gpu_choices.py bench|compile [--results FILE ...] [--arch NAME]
        [--arch-kwargs JSON] [--gain 1.15]
    python experiments/gpu_choices.py newest CKPT [CKPT ...]
    python experiments/gpu_choices.py step CKPT
    python experiments/gpu_choices.py curve OUT [--until CKPT] CSV [CSV ...]

(``--results`` may be given several times: their rows are read in that order, e.g. the committed
table and the rows a session has just measured.)

Prints the answer (0 or 1) and, on stderr, the rows it was read from.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

RESULTS = Path(__file__).resolve().parents[1] / "benchmarks" / "results" / "pixel_stage.md"


def gpu_rows(text: str, arch: str, arch_kwargs: dict, device: str = "") -> list[dict]:
    """The table's GPU rows of network ``arch`` with ``arch_kwargs`` (in file order), of GPU
    ``device`` only where one is named (as ``torch.cuda`` names it): dicts with ``device``,
    ``compiled`` (the mode, or None), ``crops`` (crops/s; 0 for a row whose crops/s cell says
    ``failed``), ``failed``."""
    kw = json.dumps(arch_kwargs, separators=(", ", ": "))
    head = f"{arch} `{kw}` "
    rows = []
    for line in text.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) != 5 or cells[0].startswith("cpu") or not cells[1].startswith(head):
            continue
        if device and cells[0] != device:
            continue
        mode = cells[1].split(", compiled (", 1)[1].split(")", 1)[0] if ", compiled (" in cells[1] else None
        failed = cells[2].startswith("failed")
        try:
            crops = 0.0 if failed else float(cells[2])
        except ValueError:  # the header
            continue
        rows.append({"device": cells[0], "compiled": mode, "crops": crops, "failed": failed, "line": line.strip()})
    return rows


def needs_bench(rows: list[dict]) -> bool:
    """No eager GPU row yet."""
    return not any(r["compiled"] is None for r in rows)


def compile_pays(rows: list[dict], gain: float = 1.15) -> bool:
    """The newest default-mode compiled row is ``gain`` times the newest eager row of its device
    (a row that says a training with compile ``failed``, written by gpu_session.sh, is newest: no)."""
    compiled = [r for r in rows if r["compiled"] == "default"]
    if not compiled or compiled[-1]["failed"]:
        return False
    last = compiled[-1]
    eager = [r for r in rows if r["compiled"] is None and r["device"] == last["device"]]
    return bool(eager) and last["crops"] >= gain * eager[-1]["crops"]


def newest(paths) -> str:
    """The path among ``paths`` (existing files) with the highest ``global_step``; '' if none."""
    best, best_step = "", -1
    for path in paths:
        if Path(path).is_file():
            step = _step(path)
            if step > best_step:
                best, best_step = path, step
    return best


def _step(path) -> int:
    import torch

    return int(torch.load(path, map_location="cpu", weights_only=True).get("global_step", 0))


def join_curves(out, parts, until: int | None = None) -> int:
    """``parts`` (CSV files; missing ones skipped) one after the other into ``out``, with the
    union of their columns; rows whose ``step`` is ``until`` or more are left out of the last part
    (logged by steps after a checkpoint at ``until``; the curves before it end at their own
    checkpoints). Returns the number of rows written."""
    import csv

    rows, keys = [], []
    parts = list(parts)
    for i, f in enumerate(parts):
        try:
            with open(f, newline="") as fh:
                r = csv.DictReader(fh)
                keys += [k for k in (r.fieldnames or []) if k not in keys]
                part = list(r)
        except (FileNotFoundError, IsADirectoryError):
            continue
        if until is not None and i == len(parts) - 1:
            part = [row for row in part if not row.get("step") or int(float(row["step"])) < until]
        rows += part
    with open(out, "w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=keys)
        w.writeheader()
        w.writerows(rows)
    return len(rows)


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv[:1] == ["newest"]:
        print(newest(argv[1:]))
        return 0
    if argv[:1] == ["step"] and len(argv) == 2:
        print(_step(argv[1]))
        return 0
    if argv[:1] == ["curve"]:
        p = argparse.ArgumentParser(prog="gpu_choices.py curve")
        p.add_argument("out")
        p.add_argument("--until", help="a checkpoint: the last file's rows of steps after it are left out")
        p.add_argument("parts", nargs="+")
        args = p.parse_args(argv[1:])
        n = join_curves(args.out, args.parts, _step(args.until) if args.until else None)
        print(f"{n} rows", file=sys.stderr)
        return 0
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("question", choices=("bench", "compile"))
    p.add_argument("--results", action="append", help=f"a table (repeatable; default {RESULTS})")
    p.add_argument("--arch", default="pdc_boundary_net")
    p.add_argument("--arch-kwargs", default='{"width": 40}', type=json.loads)
    p.add_argument("--gain", type=float, default=1.15)
    p.add_argument("--device", default="", help="this GPU, as torch.cuda names it: only its rows count")
    args = p.parse_args(argv)
    paths = [Path(f) for f in (args.results or [RESULTS])]
    text = "\n".join(p.read_text() for p in paths if p.is_file())
    rows = gpu_rows(text, args.arch, args.arch_kwargs, args.device)
    for r in rows:
        print(r["line"], file=sys.stderr)
    answer = needs_bench(rows) if args.question == "bench" else compile_pays(rows, args.gain)
    print(int(answer))
    return 0


if __name__ == "__main__":
    sys.exit(main())
