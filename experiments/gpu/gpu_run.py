"""The GPU run: one device command for a session lent a CUDA machine (issues 33, 45), resumable.

``session`` (the default):
  (a) the benchmark's checks this GPU kind has no result for yet (``--bench auto``; gpu_choices.py reads
      benchmarks/results/gpu_checks.md and pixel_stage.md), within ``--bench-seconds`` (120), in this
      order: ``eager`` benchmarks/bench_pixel_stage.py's crops/s of the real step next to its floor for
      pdc_boundary_net (width 40); ``sync`` tests/training/test_sync.py's CUDA check that ten steps through
      Trainer.fit never synchronise; ``host`` benchmarks/bench_training.py --host-workers 16 (the
      fine-tuning step's host pool); ``compile`` the network under torch.compile (``--compile auto``
      trains with it from then on where it measured >= 1.3x); ``compact`` compact_boundary_net (the
      shipped width 32). A check starts only where its expected time fits in what is left of the
      benchmark's time, except a command's first (compile, ~150 s, runs alone, as a command's first);
      the others wait for a later command. Each check writes a row of OUT/gpu_checks.md however it ended.
  (b) pdc_boundary_net's pixel stage (configs/bsds500_pdc_pixel.yaml, bf16-mixed, augmentation on the
      device) on ``--split`` train, resumed from the committed experiments/state/pdc_pixel_last.ckpt or
      this warm machine's last command (``--keep`` runs/gpu_session), whichever has more steps, for the time
      the command has left: it ends itself ``--end-seconds`` (30) before the command's end at a step's end
      with its final checkpoint (hiseg.training.callbacks.WallClockDeadline through $HISEG_STOP_AT,
      whatever its start-up took; Lightning's max_time bounds the fit's own time), a LastCheckpoint every
      500 steps; train.py runs under a hard timeout (its process group is killed).
  Where the stage trained with torch.compile and failed (not by the timeout), the rest of the time trains
  without it from its last periodic checkpoint; where that retry trains, KEEP/compile_failed keeps this
  machine's later commands off compile, and a 'failed' row in OUT/pixel_stage.md every later session on
  that GPU kind (where the retry fails too, the cause was not compile: nothing is marked).
  At most 8 files come back in OUT: summary.txt (its first line the stamp the rows carry once appended),
  bench.log (every check's output), pixel_stage.md and
  gpu_checks.md (the rows to append to benchmarks/results/), recipe.log, pixel_last.ckpt, pixel_metrics.csv
  (the whole curve so far; where the stage was cut before its end, the run's last periodic checkpoint and
  the curve up to its step).

``recipe``: issue 20's GPU recipe, the larger from-scratch pixel stage (configs/bsds500_pixel.yaml,
  compact_boundary_net width 48, the twin on ``--split train``) for ``--pixel-minutes`` (5), then, once its
  ``--pixel-steps`` (9000) are done, the learned-merging head (experiments/bsds_recipe/merge_recipe.py)
  into OUT/hiseg_gpu_merge.ckpt; ``--resume CKPT`` continues a stopped one.

``--dry-run``: the whole chain at a tiny size on the CPU (``--bsds``: a BSDS500-layout folder).

Before the session, here: ``python experiments/gpu/prepare_gpu.py`` (fills the git-ignored .gpu/); there:
  run(command="python3 experiments/gpu/gpu_run.py --out $OUT", carry=[".gpu"], timeout_s=590)
The CUDA machine lacks higra and jsonargparse: this program unpacks .gpu/site.tar.xz before anything needs
them (its top is the standard library only), and its Python has no numba (hiseg.metrics' numpy/scipy
twins run there; summary.txt's last lines say which). Every pixel stage runs train.py through gpu_phases.py:
its start-up phases, floor and rate in recipe.log, its speed row in summary.txt and OUT/pixel_stage.md. Steps and what to commit: experiments/gpu/README.md.
"""
from __future__ import annotations

import argparse
import datetime
import glob
import importlib.util
import json
import os
import shutil
import signal
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))

from provenance import append_rows, stamp  # noqa: E402 - the standard library only, as everything above

ITEMS = ("eager", "sync", "host", "compile", "compact")
PIXEL_HEAD = "| device | network | crops/s | floor crops/s | ratio |\n|---|---|---:|---:|---:|\n"  # OUT/pixel_stage.md's
PDC_CONFIG = "configs/bsds500_pdc_pixel.yaml"  # the session's stage (its network names the failed-compile row)
TINY_ARCH = '{"width": 8, "blocks": [1, 1, 1, 1], "side_channels": 4}'
TINY_DATA = ["--data.init_args.limit_images", "4", "--data.init_args.crop_size", "64",
             "--data.init_args.crops_per_epoch", "16", "--data.init_args.max_val_images", "2", "--model.warmup", "2"]


def parse(argv):
    argv = list(sys.argv[1:] if argv is None else argv)
    recipe = argv[:1] == ["recipe"]
    if argv[:1] in (["recipe"], ["session"]):
        argv = argv[1:]
    p = argparse.ArgumentParser(prog=f"gpu_run.py {'recipe' if recipe else 'session'}",
                                description=__doc__.split("\n\n")[0])
    p.add_argument("--out", required=True, help="the folder whose files come back (at most 8)")
    p.add_argument("--dry-run", action="store_true", help="the whole chain at a tiny size on the CPU")
    p.add_argument("--gpu-dir", default=".gpu", help="the carried folder (site.tar.xz, the packed data, BSDS500/)")
    p.add_argument("--bsds", help="a BSDS500-layout folder for validation (default GPU_DIR/BSDS500)")
    p.add_argument("--split", default="train" if not recipe else "train+val", choices=("train", "train+val"))
    p.add_argument("--curve", help="the resumed run's curve so far ('': none)")
    p.add_argument("--pixel-steps", type=int, help="the whole stage's steps (default 30000, recipe 9000; dry run 8)")
    p.add_argument("--workers", type=int, default=4 if not recipe else 8)
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--python", default=sys.executable, help="the Python of every subprocess")
    p.add_argument("--train-arg", action="append", default=[],
                   help="one more train.py argument, repeatable: --train-arg=--data.init_args.crop_size=64")
    if recipe:
        p.add_argument("--resume", default="", help="a pixel-stage checkpoint to continue")
        p.add_argument("--config", default="configs/bsds500_pixel.yaml")
        p.add_argument("--arch-kwargs", default='{"width": 48, "blocks": [1, 2, 2, 3], "side_channels": 16}',
                       help="JSON; '' keeps the config's network")
        p.add_argument("--pixel-minutes", type=float, default=5)
        p.add_argument("--merge-minutes", type=float, default=4,
                       help="the merging stage runs only when the command has that much left of its 9 minutes")
        p.add_argument("--no-merge", action="store_true", help="stop after the pixel stage")
        p.add_argument("--train-data", default="", help="a hiseg.data.edges.pack_edge_dataset file to train from")
    else:
        p.add_argument("--resume", help="the checkpoint to resume ('': afresh; default: the one of --state and "
                                        "KEEP/pixel_last.ckpt with more steps)")
        p.add_argument("--state", default="experiments/state/pdc_pixel_last.ckpt")
        p.add_argument("--keep", default="runs/gpu_session", help="what a warm machine keeps between commands")
        p.add_argument("--budget-seconds", type=int, default=570, help="the whole command")
        p.add_argument("--reserve-seconds", type=int, default=80, help="the stage's start and end")
        p.add_argument("--end-seconds", type=int, default=30, help="the stage stops this long before the end")
        p.add_argument("--bench", default="auto", choices=("auto", "all", "none"))
        p.add_argument("--bench-seconds", type=int, default=120)
        p.add_argument("--measure-seconds", type=int, default=8)
        p.add_argument("--compile", default="auto", choices=("auto", "on", "off"))
        p.add_argument("--compile-callback", default="hiseg.training.callbacks.CompileNetwork")
        p.add_argument("--arch-name", default="pdc_boundary_net")
        p.add_argument("--floor-seconds", type=float, default=3,
                       help="the stage's bare forward+backward timed this long before its first step (0: not)")
    a = p.parse_args(argv)
    a.recipe = recipe
    a.bsds = a.bsds or os.path.join(a.gpu_dir, "BSDS500")
    if a.pixel_steps is None:
        a.pixel_steps = 8 if a.dry_run else 9000 if recipe else 30000
    return a


class Log:
    def __init__(self, out: Path, start: float):
        self.path, self.start = out / "summary.txt", start

    def __call__(self, msg: str) -> None:
        line = f"[{time.strftime('%H:%M:%S', time.gmtime())} +{int(time.time() - self.start)}s] {msg}"
        print(line, flush=True)
        with open(self.path, "a") as f:
            f.write(line + "\n")


def setup_site(gpu_dir: str, log: Log) -> bool:
    """higra and jsonargparse from GPU_DIR/site.tar.xz where this Python lacks them (the CUDA machine; packed by
    prepare_gpu.py), and the checkout's hiseg, for this process and every subprocess."""
    paths = [str(ROOT)]
    if not all(importlib.util.find_spec(m) for m in ("higra", "jsonargparse")):
        tar, site = Path(gpu_dir) / "site.tar.xz", Path(gpu_dir).resolve() / "site"
        if not tar.is_file():
            log(f"no higra/jsonargparse and no {tar}: run experiments/gpu/prepare_gpu.py")
            return False
        try:
            with tarfile.open(tar) as t:
                try:
                    t.extractall(site, filter="data")
                except TypeError:  # a Python without extraction filters
                    t.extractall(site)
        except (OSError, tarfile.TarError) as e:
            log(f"could not unpack {tar} (this Python's lzma?): {e}")
            return False
        paths.insert(0, str(site))
    sys.path[:0] = paths
    importlib.invalidate_caches()
    os.environ["PYTHONPATH"] = os.pathsep.join(paths + [p for p in [os.environ.get("PYTHONPATH")] if p])
    return True


def run(cmd, seconds, log_file, *, env=None, cwd=None) -> int:
    """``cmd`` with its output appended to ``log_file``, in its own process group, for ``seconds`` at most:
    then SIGTERM (Lightning stops at a step's end), SIGKILL 15 s later; 124 / 137 as timeout(1) says."""
    with open(log_file, "a") as f:
        proc = subprocess.Popen([str(c) for c in cmd], stdout=f, stderr=subprocess.STDOUT, env=env, cwd=cwd,
                                start_new_session=True)
        try:
            return proc.wait(timeout=max(seconds, 1))
        except subprocess.TimeoutExpired:
            for sig, code, wait in ((signal.SIGTERM, 124, 15), (signal.SIGKILL, 137, None)):
                try:
                    os.killpg(proc.pid, sig)
                except ProcessLookupError:
                    pass
                try:
                    proc.wait(timeout=wait)
                    return code
                except subprocess.TimeoutExpired:
                    continue
    return 137


def last_periodic(work) -> str:
    found = sorted(glob.glob(os.path.join(work, "pixel", "csv", "version_*", "checkpoints", "last.ckpt")),
                   key=lambda p: int(Path(p).parents[1].name.split("_")[1]))
    return found[-1] if found else ""


def pixel_stage(a, out: Path, log: Log, g, *, config, arch_kwargs, seconds, resume, curve, work,
                train_args=(), stop_at=None, timeout=None, train_data="", cuda=False) -> int:
    """train.py fit of a pixel stage for ``seconds`` more training time (Lightning's max_time counts the
    whole run: a resumed run restores the time already spent from the checkpoint's Timer), its last
    checkpoint and its whole curve (``curve``, then this run's rows) into OUT; returns its exit status."""
    spent = 0
    if resume:  # read without torch (gpu_choices.ckpt_fields): this process never imports it
        ck = g.ckpt_fields(resume)
        spent = int(ck.get("callbacks", {}).get("Timer", {}).get("time_elapsed", {}).get("train", 0))
    limit = spent + int(seconds)
    max_time = f"00:{limit // 3600:02d}:{limit % 3600 // 60:02d}:{limit % 60:02d}"
    batch, workers, precision, extra = a.batch, a.workers, "bf16-mixed" if cuda else "32-true", []
    if a.dry_run:
        batch, workers, arch_kwargs, precision, extra = 4, 0, TINY_ARCH, "32-true", TINY_DATA
    # train.py through gpu_phases.py: its start-up phases, the floor and the rate in recipe.log ([gpu_phases] lines)
    cmd = [a.python, ROOT / "experiments" / "gpu" / "gpu_phases.py", "fit", "--config", config,
           "--data.init_args.data_root", a.bsds, "--data.init_args.train_split", a.split,
           "--data.init_args.batch_size", batch, "--data.init_args.num_workers", workers,
           "--trainer.precision", precision, "--trainer.max_steps", a.pixel_steps, "--trainer.max_time", max_time,
           "--trainer.limit_val_batches", 10, "--trainer.default_root_dir", os.path.join(work, "pixel"),
           "--trainer.enable_progress_bar", "false", *extra]
    cmd += ["--ckpt_path", resume] if resume else []
    cmd += ["--model.arch_kwargs", arch_kwargs] if arch_kwargs else []
    cmd += ["--data.init_args.train_data", train_data] if train_data else []
    cmd += list(train_args)
    curve = curve or (os.path.join(os.path.dirname(resume), "pixel_metrics.csv") if resume else "")
    env = dict(os.environ, **({"HISEG_STOP_AT": str(int(stop_at))} if stop_at else {}),
               GPU_PHASES_T0=repr(log.start), GPU_PHASES_FLOOR_SECONDS=str(min(getattr(a, "floor_seconds", 3), 0.5 if a.dry_run else 1e9)))
    t0 = time.time()
    rc = run(cmd, timeout or 10 ** 6, out / "recipe.log", env=env)
    speed_row(out, log)
    last = last_periodic(work)
    if rc == 0 and last:
        shutil.copy(last, out / "pixel_last.ckpt")
        g.join_curves(out / "pixel_metrics.csv", [curve, Path(last).parents[1] / "metrics.csv"])
        log(f"pixel stage: step {g._step(out / 'pixel_last.ckpt')} / {a.pixel_steps} after {int(time.time() - t0)} s "
            f"in this command (max_time {max_time}, {spent} s spent before)")
        return 0
    if last:  # stopped before its end: its last periodic checkpoint and the curve up to it
        shutil.copy(last, out / "pixel_last.ckpt")
        g.join_curves(out / "pixel_metrics.csv", [curve, Path(last).parents[1] / "metrics.csv"], until=g._step(last))
        log(f"pixel stage stopped (rc={rc}) before its end: its last periodic checkpoint (step {g._step(last)}) and "
            "the curve up to it are in OUT")
    else:
        log(f"pixel stage failed (rc={rc}; recipe.log)")
    return rc or 1


def speed_row(out: Path, log: Log) -> None:
    """The run's start-up phases and its row of pixel_stage.md from recipe.log's last run (gpu_phases.py):
    logged, and the row appended to OUT/pixel_stage.md (with the table's header where it is new)."""
    if str(Path(__file__).resolve().parent) not in sys.path:
        sys.path.insert(0, str(Path(__file__).resolve().parent))
    import gpu_phases

    try:
        text = (out / "recipe.log").read_text(errors="replace")
        phases = gpu_phases.phases_line(text)
        if phases:
            log(f"start-up: {phases}")
        row = gpu_phases.row(text, datetime.date.today().isoformat())
    except (OSError, ValueError) as e:
        log(f"no speed row: {e}")
        return
    append_rows(out / "pixel_stage.md", [row], PIXEL_HEAD)
    log(f"speed row (pixel_stage.md): {row}")


def device_info(a, background: bool = False):
    """{gpu (as torch.cuda names it; '' without CUDA), torch (its version), numba (which metrics run)} from a
    subprocess that imports torch and starts CUDA; ``background``: that subprocess started, to be read by
    :func:`device_info_result` (its seconds then overlap the training's start)."""
    code = ("import json, torch\ng = torch.cuda.get_device_name(0) if torch.cuda.is_available() else ''\n"
            "try:\n import hiseg.metrics.kernels as k\n"
            " n = 'numba' if k.HAVE_NUMBA else 'no numba: the numpy/scipy metrics'\n"
            "except Exception as e:\n n = repr(e)\n"
            "print(json.dumps({'gpu': g, 'torch': torch.__version__, 'numba': n}))")
    proc = subprocess.Popen([a.python, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            preexec_fn=(lambda: os.nice(19)) if background else None)  # behind the stage's start
    return proc if background else device_info_result(proc)


def device_info_result(proc) -> dict:
    stdout, stderr = proc.communicate()
    try:
        return json.loads(stdout.strip().splitlines()[-1])
    except (IndexError, ValueError):
        return {"gpu": "", "torch": "?", "numba": (stderr.strip().splitlines() or ["?"])[-1]}


def nvidia_smi() -> tuple[str, str]:
    """(nvidia-smi's line: name, memory, driver; the GPU's name, as torch.cuda gives it from the same driver),
    in a fraction of a second; ('no GPU', '') where nvidia-smi is missing or fails."""
    line = first_line(["nvidia-smi", "--query-gpu=name,memory.total,driver_version", "--format=csv,noheader"], "")
    if not line or line.lower().startswith(("no devices", "nvidia-smi has failed")):
        return "no GPU", ""
    return line, line.split(",")[0].strip()


def first_line(cmd, default) -> str:
    try:
        r = subprocess.run(cmd, capture_output=True, text=True)
        return r.stdout.strip().splitlines()[0] if r.returncode == 0 and r.stdout.strip() else default
    except OSError:
        return default


def benchmark(a, out: Path, log: Log, g, todo, device, bench_log) -> None:
    """The checks of ``todo`` within --bench-seconds, a row of OUT/gpu_checks.md each."""
    if a.dry_run:
        bench = ["--device", "cpu", "--batch", "2", "--crop", "32", "--warmup", "2", "--images", "3", "--seconds", "1"]
        net_kw, compact_kw = '{"width": 8, "blocks": [1, 1, 1, 1]}', '{"width": 8}'
    else:
        bench = ["--seconds", str(a.measure_seconds)]
        net_kw, compact_kw = '{"width": 40}', json.dumps(g.COMPACT[1])
    stage = [a.python, ROOT / "benchmarks" / "bench_pixel_stage.py"]
    commands = {
        "eager": stage + bench + ["--arch", a.arch_name, "--arch-kwargs", net_kw, "--results", out / "pixel_stage.md"],
        "compact": stage + bench + ["--arch", "compact_boundary_net", "--arch-kwargs", compact_kw,
                                    "--results", out / "pixel_stage.md"],
        "compile": stage + ["--seconds", "6", "--compile", "default", "--arch", a.arch_name, "--arch-kwargs", net_kw,
                            "--results", out / "pixel_stage.md"],
        "host": [a.python, ROOT / "benchmarks" / "bench_training.py", "--device", "cuda", "--threads", "16",
                 "--batch", "16", "--wall", "--host-workers", "16"],
        "sync": [a.python, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-o", "addopts=-ra",  # no xdist there
                 "-k", "cuda_pixel_stage", ROOT / "tests" / "training" / "test_sync.py"],
    }
    expected = {"compile": 150, "host": 75}
    t_bench, ran = time.time(), False
    for check in todo:
        left = int(a.bench_seconds - (time.time() - t_bench))
        need = 60 if a.dry_run else expected.get(check, 45)
        if ran and need > left:
            log(f"bench {check}: left for a later session (~{need} s expected, {left} s of "
                f"--bench-seconds {a.bench_seconds} left)")
            continue
        left = max(left, need)
        with open(bench_log, "a") as f:
            f.write(f"== {check} ({time.strftime('%H:%M:%S', time.gmtime())}, at most {left} s)\n")
        t0 = time.time()
        rc = run(commands[check], left, bench_log, cwd=ROOT if check == "sync" else None)
        if rc in (124, 137):
            result = f"timeout after {left} s"
        elif rc:
            result = f"failed (rc={rc})"
        elif check == "sync":
            result = f"rc=0: {(bench_log.read_text().strip().splitlines() or [''])[-1]}"
        elif check in ("eager", "compact", "compile"):
            table = out / "pixel_stage.md"
            rows = [ln for ln in table.read_text().splitlines() if ln.startswith("|")] if table.is_file() else []
            cells = [c.replace(" ", "") for c in rows[-1].split("|")] if rows else []  # the table's last row
            crops, ratio = (cells[3], cells[5]) if len(cells) > 5 else ("", "")
            result = f"crops/s {crops}, ratio {ratio} (pixel_stage.md)"
        else:
            result = "done"
        result, secs = result.replace("|", "/"), int(time.time() - t0)
        checks = out / "gpu_checks.md"
        with open(checks, "a") as f:
            if f.tell() == 0:
                f.write("| device | check | result | seconds | date |\n|---|---|---|---:|---|\n")
            f.write(f"| {device} | {check} | {result} | {secs} | {datetime.date.today().isoformat()} |\n")
        log(f"bench {check}: {result} ({secs} s)")
        ran = True



def compile_args(callback: str) -> list:
    """train.py's arguments adding the torch.compile callback; one of your own (not hiseg's) is code
    from outside hiseg, which train.py runs only with --trust-config."""
    args = [f"--trainer.callbacks+={callback}"]
    return args if callback.startswith("hiseg.") else ["--trust-config", *args]

def session(a, out: Path, log: Log, start: float) -> int:
    import gpu_choices as g

    keep = Path(a.keep)
    curve = a.curve
    resume = a.resume
    if resume is None:  # the committed state, or this machine's last command if it got further
        try:
            resume = g.newest([a.state, str(keep / "pixel_last.ckpt")])
        except Exception:  # unreadable: never start afresh by accident
            resume = a.state if Path(a.state).is_file() else ""
        if resume == str(keep / "pixel_last.ckpt") and curve is None:
            curve = str(keep / "pixel_metrics.csv")
    curve = "experiments/state/pdc_pixel_metrics.csv" if curve is None else curve
    # the GPU's name from nvidia-smi (a fraction of a second); torch's view of the machine (its name of the GPU,
    # its version, numba or not) comes from a subprocess run beside the stage's start, logged at the end
    info_proc = device_info(a, background=True)
    nvidia, gpu_name = nvidia_smi()
    device = gpu_name or "cpu"
    items = ["eager", "compact"] if a.dry_run else list(ITEMS)  # the CPU has no sync check, host pool or compile row
    results = ["benchmarks/results/pixel_stage.md", str(keep / "pixel_stage.md")]
    checks = ["benchmarks/results/gpu_checks.md", str(keep / "gpu_checks.md")]
    bench_log = out / "bench.log"
    todo = []
    if a.bench == "all":
        todo = items
    elif a.bench == "auto":  # each check once per GPU kind: later sessions train instead
        try:
            done = g.checks_done(g._read(checks), g._read(results), device, a.arch_name, {"width": 40})
            todo = [i for i in items if i not in done]
        except Exception as e:  # unreadable tables: train
            with open(bench_log, "a") as f:
                f.write(f"gpu_choices: {e!r}\n")
    log(f"gpu_run: {nvidia}; git {first_line(['git', 'rev-parse', '--short', 'HEAD'], '?')}; "
        f"resume={resume or 'none'} split={a.split} bench={a.bench} (checks to run: {' '.join(todo) or 'none'})")
    benchmark(a, out, log, g, todo, device, bench_log)
    keep.mkdir(parents=True, exist_ok=True)  # the next command on this machine reads what this one measured
    for name in ("pixel_stage.md", "gpu_checks.md"):
        if (out / name).is_file():
            rows = [ln for ln in (out / name).read_text().splitlines()
                    if ln.startswith("| ") and not ln.startswith("| device |")]
            with open(keep / name, "a") as f:
                f.write("".join(r + "\n" for r in rows))
    # ------------------------------------------------------------------------------------------ the pixel stage
    left = int(a.budget_seconds - (time.time() - start) - a.reserve_seconds)
    if left < 30 and not a.dry_run:
        log(f"only {left} s left for the pixel stage: not started")
        return 0
    if resume and not Path(resume).is_file():
        log(f"--resume {resume} does not exist")
        return 1
    compile_on = a.compile == "on"
    if a.compile == "auto":
        if (keep / "compile_failed").is_file():
            log(f"torch.compile: off (a training with it failed on this machine: {keep / 'compile_failed'})")
        elif not a.dry_run:
            try:
                compile_on = g.compile_pays(g.gpu_rows(g._read(results), a.arch_name, {"width": 40}, gpu_name), 1.3)
            except Exception:
                compile_on = False
    train_data = ""
    if not a.dry_run:  # train reads bsds500_train.npz, or the train images of bsds500_trainval.npz (it holds both)
        train_data = os.path.join(a.gpu_dir, "bsds500_trainval.npz")
        if a.split == "train" and Path(a.gpu_dir, "bsds500_train.npz").is_file():
            train_data = os.path.join(a.gpu_dir, "bsds500_train.npz")
    stop_at = start + a.budget_seconds - a.end_seconds

    def stage(compile_: bool, left: int, resume: str, curve: str) -> int:
        work = tempfile.mkdtemp()
        try:
            log(f"pixel stage: {left} s of training ({a.arch_name}, {a.split}"
                f"{' from ' + train_data if train_data else ''}, torch.compile: {'on' if compile_ else 'off'}, "
                f"resume={resume or 'none'})")
            for name in ("pixel_last.ckpt", "pixel_metrics.csv"):
                (out / name).unlink(missing_ok=True)
            # the stage ends itself at the slot's end less --end-seconds, its start-up whatever it took
            # (WallClockDeadline); max_time only bounds the fit's own time; the timeout is the hard limit
            return pixel_stage(a, out, log, g, config=str(ROOT / PDC_CONFIG), arch_kwargs="",
                               seconds=left + a.reserve_seconds, resume=resume, curve=curve, work=work,
                               stop_at=stop_at, train_data=train_data, cuda=bool(gpu_name),
                               train_args=(compile_args(a.compile_callback) if compile_ else []) + a.train_arg,
                               timeout=left + a.reserve_seconds - 10)
        finally:
            shutil.rmtree(work, ignore_errors=True)

    rc = stage(compile_on, left, resume, curve)
    # torch.compile failed (not the timeout): the rest of the time without it, from where it got to. Where that
    # retry trains, the failure was compile's: a 'failed' row for the committed table (--compile auto reads it on
    # every machine of this GPU kind afterwards) and KEEP/compile_failed for this machine's next commands; where
    # the retry fails too, the cause was something else and nothing is marked
    if compile_on and rc not in (0, 124, 137):
        compiled_rc = rc
        try:  # the row names the network as the config builds it (the key --compile auto reads on the next machines)
            import yaml

            config_kw = json.dumps(yaml.safe_load((ROOT / PDC_CONFIG).read_text())["model"]["arch_kwargs"])
        except Exception:
            config_kw = '{"width": 40}'
        left = int(a.budget_seconds - (time.time() - start) - a.reserve_seconds)
        rescued = keep / "rescued"
        shutil.rmtree(rescued, ignore_errors=True)
        if (out / "pixel_last.ckpt").is_file():
            rescued.mkdir(parents=True)
            shutil.copy(out / "pixel_last.ckpt", rescued)
            resume = str(rescued / "pixel_last.ckpt")
            if (out / "pixel_metrics.csv").is_file():
                shutil.copy(out / "pixel_metrics.csv", rescued)
                curve = str(rescued / "pixel_metrics.csv")
        if left >= 30 or (a.dry_run and left > 0):
            log(f"torch.compile's try failed (rc={compiled_rc}; recipe.log): retrying without it for {left} s")
            rc = stage(False, left, resume, curve)
            if not (out / "pixel_last.ckpt").is_file() and resume == str(rescued / "pixel_last.ckpt"):
                for f in rescued.iterdir():  # the retry got no checkpoint of its own: the compiled try's comes back
                    shutil.copy(f, out)
                log("the retry wrote no checkpoint: the compiled try's (rescued) is in OUT")
            if rc in (0, 124, 137):
                now = datetime.datetime.now(datetime.timezone.utc)
                (keep / "compile_failed").write_text(f"rc={compiled_rc} {now:%Y-%m-%dT%H:%M:%SZ}\n")
                append_rows(out / "pixel_stage.md", [
                    f"| {device} | {a.arch_name} `{config_kw}` training with torch.compile (gpu_run.py, "
                    f"{now:%Y-%m-%d}), compiled (default) | failed (rc={compiled_rc}, recipe.log) | – | – |"], PIXEL_HEAD)
            else:
                log(f"the retry without torch.compile failed too (rc={rc}): not compile's failure, nothing marked "
                    "(recipe.log)")
        else:
            log(f"torch.compile's try failed (rc={compiled_rc}; recipe.log), {left} s left: no retry, nothing marked")
    if (out / "pixel_last.ckpt").is_file() and (out / "pixel_metrics.csv").is_file():  # for this machine's next command
        for name in ("pixel_last.ckpt", "pixel_metrics.csv"):
            shutil.copy(out / name, keep / name)
    info = device_info_result(info_proc)
    log(f"torch {info['torch']} on {info['gpu'] or 'cpu'}; {info['numba']}" + (
        f" (nvidia-smi named it {gpu_name!r}: the rows above name it so)" if info["gpu"] != gpu_name else ""))
    log(f"pixel stage rc={rc}; files: {' '.join(sorted(p.name for p in out.iterdir()))}")
    return 0


def recipe(a, out: Path, log: Log, start: float) -> int:
    import gpu_choices as g

    info = device_info(a)
    log(f"gpu_run recipe: out={out} resume={a.resume or 'none'} split={a.split} {info['gpu'] or 'cpu'}")
    if a.resume and not Path(a.resume).is_file():
        log(f"--resume {a.resume} does not exist")
        return 1
    work = tempfile.mkdtemp()
    seconds = int(60 * a.pixel_minutes)
    rc = pixel_stage(a, out, log, g, config=a.config, arch_kwargs=a.arch_kwargs, seconds=seconds, resume=a.resume,
                     curve=a.curve or "", work=work, train_data=a.train_data, train_args=a.train_arg,
                     cuda=bool(info["gpu"]),
                     timeout=seconds + (900 if a.dry_run else 180))
    if rc == 0:
        step = g._step(out / "pixel_last.ckpt")
        if step < a.pixel_steps:
            log(f"pixel stage not finished: rerun with --resume {out / 'pixel_last.ckpt'} (carried back)")
        elif a.no_merge:
            log("pixel stage finished (--no-merge: no merging stage in this command)")
        elif not a.dry_run and time.time() - start + 60 * a.merge_minutes > 540:
            log(f"pixel stage finished; the merging stage needs ~{a.merge_minutes} min: rerun with --resume "
                f"{out / 'pixel_last.ckpt'}")
        else:  # the learned-merging head, the network frozen
            cmd = [a.python, ROOT / "experiments" / "bsds_recipe" / "merge_recipe.py", "--checkpoint",
                   out / "pixel_last.ckpt", "--bsds", a.bsds, "--work", os.path.join(work, "merge"),
                   "--out", out / "hiseg_gpu_merge.ckpt", "--splits", "train" if a.split == "train" else "train,val",
                   "--workers", a.workers] + (["--recipe", '{"steps": 4, "batch": 2}'] if a.dry_run else [])
            rc = run(cmd, 60 * a.merge_minutes + (900 if a.dry_run else 120), out / "recipe.log")
            log(f"merging head: {out / 'hiseg_gpu_merge.ckpt'} after {int(time.time() - start)} s in all" if rc == 0
                else f"merging stage failed (rc={rc}; recipe.log)")
    if rc == 0:
        shutil.rmtree(work, ignore_errors=True)
    else:  # its periodic checkpoints
        tail = (out / "recipe.log").read_text().splitlines()[-30:] if (out / "recipe.log").is_file() else []
        print("\n".join(tail + [f"gpu_run: the runs are kept in {work}"]), file=sys.stderr)
    return rc


def main(argv=None) -> int:
    start = time.time()
    a = parse(argv)
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    log = Log(out.resolve(), start)
    log(f"the rows of OUT/pixel_stage.md and OUT/gpu_checks.md, appended to benchmarks/results/, carry this "
        f"stamp: {stamp()}")
    os.environ["PYTHONUNBUFFERED"] = "1"
    # torch.compile's cache in the git-ignored runs/, which a warm machine keeps between calls (the carried .gpu/ is
    # replaced at each call): a second command compiles from it in seconds
    os.environ.setdefault("TORCHINDUCTOR_CACHE_DIR", str(ROOT / "runs" / "inductor_cache"))
    if not setup_site(a.gpu_dir, log):
        return 1
    return (recipe if a.recipe else session)(a, out.resolve(), log, start)


if __name__ == "__main__":
    sys.exit(main())
