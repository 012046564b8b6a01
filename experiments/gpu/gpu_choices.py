"""What experiments/gpu/gpu_run.py decides from the committed benchmark rows
(benchmarks/results/pixel_stage.md, the rows benchmarks/bench_pixel_stage.py appends, and
benchmarks/results/gpu_checks.md, a row per check a session ran), so that a GPU session spends
its minutes on training once a measurement exists:

* ``todo``: the benchmark's checks that GPU ``--device`` has no result for yet, in the order a
  session runs them (``--items``; default ``eager sync host compile compact``), space-separated:
  ``eager`` (the network's pixel stage against its floor), ``sync`` (tests/training/test_sync.py's CUDA
  check), ``host`` (benchmarks/bench_training.py's host pool), ``compile`` (the network under
  ``torch.compile``), ``compact`` (compact_boundary_net at the shipped width). A check is done
  when a ``--checks`` table (benchmarks/results/gpu_checks.md: ``device | check | result |
  seconds | date``, one row per check a session ran, however it ended) has its row for that
  device, or, for the three pixel-stage checks, when a ``--results`` table has its GPU row;
* ``compile``: 1 when the newest GPU row of the network compiled with ``torch.compile``'s default
  mode is at least ``--gain`` (1.15) times the newest eager GPU row's crops/s on the same device
  (the pixel stage then trains with ``hiseg.training.callbacks.CompileNetwork``), else 0; a row whose
  crops/s says ``failed`` (gpu_run.py's, when a training with compile failed on that GPU)
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

    python experiments/gpu/gpu_choices.py compile [--results FILE ...] [--arch NAME]
        [--arch-kwargs JSON] [--gain 1.15] [--device NAME]
    python experiments/gpu/gpu_choices.py todo --device NAME [--results FILE ...] [--checks FILE ...]
        [--items "eager sync host compile compact"] [--arch NAME] [--arch-kwargs JSON]
    python experiments/gpu/gpu_choices.py newest CKPT [CKPT ...]
    python experiments/gpu/gpu_choices.py step CKPT
    python experiments/gpu/gpu_choices.py curve OUT [--until CKPT] CSV [CSV ...]
    python experiments/gpu/gpu_choices.py row LOG [LOG ...]

* ``row LOG...``: the row of benchmarks/results/pixel_stage.md of a pixel-stage run's log (gpu_run.py's
  OUT/recipe.log, the ``[gpu_phases]`` lines of experiments/gpu/gpu_phases.py: crops/s after the first
  step next to the floor measured in the same run), one per log, and on stderr its start-up phases.

(``--results`` and ``--checks`` may be given several times: their rows are read in that order, e.g.
the committed table and the rows a session has just measured.)

``compile`` prints the answer (0 or 1) and, on stderr, the rows it was read from.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

RESULTS = Path(__file__).resolve().parents[2] / "benchmarks" / "results" / "pixel_stage.md"
CHECKS = RESULTS.with_name("gpu_checks.md")
ITEMS = ("eager", "sync", "host", "compile", "compact")
# the shipped compact network's shape (bsds500's), the comparison row of the benchmark
COMPACT = ("compact_boundary_net", {"width": 32, "blocks": [2, 2, 3, 3], "side_channels": 16})


def gpu_rows(text: str, arch: str, arch_kwargs: dict, device: str = "") -> list[dict]:
    """The table's GPU rows of network ``arch`` with ``arch_kwargs`` (in file order), of GPU
    ``device`` only where one is named (as ``torch.cuda`` names it): dicts with ``device``,
    ``compiled`` (the mode, or None), ``crops`` (crops/s; 0 for a row whose crops/s cell says
    ``failed``), ``failed``."""
    kw = json.dumps(arch_kwargs, separators=(", ", ": "))
    head = f"{arch} `{kw}` "
    rows = []
    for line in text.splitlines():
        cells = _cells(line)
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


def _cells(line: str) -> list[str]:
    return [c.strip() for c in line.strip().strip("|").split("|")]


def checks_done(checks: str, pixel: str, device: str, arch: str, arch_kwargs: dict) -> set[str]:
    """The checks GPU ``device`` has a result for: a row of the ``checks`` table(s) (text), or for
    the pixel-stage checks a GPU row of the ``pixel`` table(s): the network's eager row
    (``eager``), its row compiled in the default mode, a failed training with compile included
    (``compile``), the shipped compact network's eager row (``compact``)."""
    done = {c[1] for c in map(_cells, checks.splitlines()) if len(c) == 5 and c[0] == device and c[1] in ITEMS}
    rows = gpu_rows(pixel, arch, arch_kwargs, device)
    if any(r["compiled"] is None for r in rows):
        done.add("eager")
    if any(r["compiled"] == "default" for r in rows):  # the mode COMPILE=auto reads (a failed training's too)
        done.add("compile")
    if any(r["compiled"] is None for r in gpu_rows(pixel, *COMPACT, device)):
        done.add("compact")
    return done


def compile_pays(rows: list[dict], gain: float = 1.15) -> bool:
    """The newest default-mode compiled row is ``gain`` times the newest eager row of its device
    (a row that says a training with compile ``failed``, written by gpu_run.py, is newest: no)."""
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
    return int(ckpt_fields(path).get("global_step", 0))


def ckpt_fields(path) -> dict:
    """A checkpoint's plain fields (``global_step``, the callbacks' states...) without torch: its
    ``data.pkl`` read with every class and function outside the builtins and ``collections`` taken
    as an inert stand-in and no tensor data (nothing is imported or run: torch's import costs seconds
    of a device command before its first step). A checkpoint not in torch's zip format: torch.load."""
    import builtins
    import pickle
    import zipfile

    class Inert:
        def __new__(cls, *args, **kwargs):
            return object.__new__(cls)

        def __init__(self, *args, **kwargs):
            pass

        def __setstate__(self, state):
            pass

        def __setitem__(self, key, value):
            pass

        def append(self, value):
            pass

        def extend(self, values):
            pass

    class Dict(dict):  # an OrderedDict (a state dict's)
        def __setstate__(self, state):
            pass

    class Reader(pickle.Unpickler):
        def find_class(self, module, name):
            if module == "collections" and name == "OrderedDict":
                return Dict
            if module == "builtins" and name in ("set", "frozenset", "tuple", "list", "dict", "slice", "complex"):
                return getattr(builtins, name)
            return Inert

        def persistent_load(self, pid):
            return None

    try:
        z = zipfile.ZipFile(path)
    except zipfile.BadZipFile:
        import torch

        return torch.load(path, map_location="cpu", weights_only=True)
    with z:
        name = next((n for n in z.namelist() if n.endswith("/data.pkl") or n == "data.pkl"), None)
        if name is None:
            raise ValueError(f"{path}: no data.pkl in it (not a torch checkpoint)")
        with z.open(name) as f:
            out = Reader(f).load()
    if not isinstance(out, dict):
        raise ValueError(f"{path}: not a checkpoint (a {type(out).__name__})")
    return out


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
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    verbs = p.add_subparsers(dest="verb", required=True, metavar="{todo,compile,newest,step,curve,row}")
    parsers = {}
    for verb, what in (("todo", "the checks this GPU kind has no result for yet, in their order"),
                       ("compile", "1 if the newest torch.compile row gains --gain over eager, else 0")):
        q = parsers[verb] = verbs.add_parser(verb, help=what, description=what)
        q.add_argument("--results", action="append", help=f"a table (repeatable; default {RESULTS})")
        q.add_argument("--arch", default="pdc_boundary_net")
        q.add_argument("--arch-kwargs", default='{"width": 40}', type=json.loads)
        q.add_argument("--device", default="", help="this GPU, as torch.cuda names it: only its rows count")
        if verb == "todo":
            q.add_argument("--checks", action="append", help=f"a checks table (repeatable; default {CHECKS})")
            q.add_argument("--items", default=" ".join(ITEMS), help="the checks to consider, in their order")
        else:
            q.add_argument("--gain", type=float, default=1.15)
    q = verbs.add_parser("newest", help="the checkpoint with the highest global_step ('' if none)")
    q.add_argument("paths", nargs="*")
    q = verbs.add_parser("step", help="a checkpoint's global_step")
    q.add_argument("path")
    q = verbs.add_parser("curve", help="CSV curves joined one after the other, with the union of their columns")
    q.add_argument("out")
    q.add_argument("--until", help="a checkpoint: the last file's rows of steps after it are left out")
    q.add_argument("parts", nargs="+")
    q = verbs.add_parser("row", help="the pixel_stage.md row of a pixel-stage run's log (gpu_run.py's recipe.log)")
    q.add_argument("logs", nargs="+")
    args = p.parse_args(sys.argv[1:] if argv is None else list(argv))
    if args.verb == "row":
        sys.path.insert(0, str(Path(__file__).resolve().parent))
        import gpu_phases

        for log in args.logs:
            text = Path(log).read_text(errors="replace")
            print(f"{log}: {gpu_phases.phases_line(text)}", file=sys.stderr)
            try:
                print(gpu_phases.row(text))
            except ValueError as e:
                print(f"gpu_choices row: {log}: {e}", file=sys.stderr)
                return 1
    elif args.verb == "newest":
        print(newest(args.paths))
    elif args.verb == "step":
        print(_step(args.path))
    elif args.verb == "curve":
        n = join_curves(args.out, args.parts, _step(args.until) if args.until else None)
        print(f"{n} rows", file=sys.stderr)
    elif args.verb == "todo":
        unknown = [i for i in args.items.split() if i not in ITEMS]
        if unknown or not args.device:
            parsers["todo"].error(f"todo needs --device, and --items among {' '.join(ITEMS)}" + (f" (not {unknown})" if unknown else ""))
        done = checks_done(_read(args.checks or [CHECKS]), _read(args.results or [RESULTS]), args.device, args.arch,
                           args.arch_kwargs)
        print(" ".join(i for i in args.items.split() if i not in done))
    else:
        rows = gpu_rows(_read(args.results or [RESULTS]), args.arch, args.arch_kwargs, args.device)
        for r in rows:
            print(r["line"], file=sys.stderr)
        print(int(compile_pays(rows, args.gain)))
    return 0


def _read(paths) -> str:
    return "\n".join(Path(f).read_text() for f in paths if Path(f).is_file())


if __name__ == "__main__":
    sys.exit(main())
