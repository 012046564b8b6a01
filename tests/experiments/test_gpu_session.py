"""The GPU session's command (experiments/gpu/gpu_run.py) and the folder it carries
(experiments/gpu/prepare_gpu.py), end to end on the CPU at a tiny size (--dry-run): the benchmark's
rows for both networks, then the new network's pixel stage with its checkpoint and curve in OUT (at
most 8 files), and a second run that resumes from the first's checkpoint."""
import csv
import importlib.util
import io
import os
import subprocess
import sys
import tarfile
import time
import zipfile

import numpy as np
import pytest
from _train import ROOT, load_ckpt
from tests.training.test_recipe import make_bsds

from hiseg.data.edges import load_edge_dataset


def _env(**kw):
    return dict(os.environ, PYTHONWARNINGS="ignore", OMP_NUM_THREADS="1", **kw)


def _py(script, *args, env, timeout=900):
    return subprocess.run([sys.executable, str(ROOT / "experiments" / "gpu" / script), *map(str, args)], cwd=ROOT,
                          env=env, capture_output=True, text=True, timeout=timeout)


def _session(out, *args, env, dry=("--dry-run",)):
    """gpu_run.py --dry-run into ``out``; it succeeds."""
    r = _py("gpu_run.py", "--out", out, *dry, *args, env=env)
    assert r.returncode == 0, (r.stdout + r.stderr)[-3000:]
    return r


@pytest.mark.slow
def test_prepare_gpu_fills_the_carried_folder(tmp_path):
    data = make_bsds(tmp_path / "bsds")
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    with zipfile.ZipFile(wheels / "higra-0-py3-none-any.whl", "w") as z:
        z.writestr("higra/__init__.py", "X = 1\n")
        z.writestr("higra/lib/include/big.hpp", "// headers are left out\n")
        z.writestr("higra-0.dist-info/METADATA", "Name: higra\n")
    gpu = tmp_path / "gpu"
    env = _env()
    args = ["--gpu-dir", gpu, "--wheels", wheels, "--bsds", data, "--val-images", "1", "--limit-mib", "1000"]
    r = _py("prepare_gpu.py", *args, env=env)
    assert r.returncode == 0, (r.stdout + r.stderr)[-3000:]
    assert "a device call sends" in r.stdout
    with tarfile.open(gpu / "site.tar.xz") as t:
        assert sorted(t.getnames()) == ["higra-0.dist-info/METADATA", "higra/__init__.py"]
    for a, b in zip(load_edge_dataset(gpu / "bsds500_train.npz", "train"), load_edge_dataset(data, "train")):
        np.testing.assert_array_equal(a, b)
    assert [p.name for p in (gpu / "BSDS500/images/val").iterdir()] == ["val0.jpg"]
    # --splits train+val: one file holding both splits, from which gpu_run.py's --split train reads train alone
    r = _py("prepare_gpu.py", *args, "--splits", "train+val", env=env)
    assert r.returncode == 0, (r.stdout + r.stderr)[-3000:]
    for split in ("train", "train+val"):
        for a, b in zip(load_edge_dataset(gpu / "bsds500_trainval.npz", split), load_edge_dataset(data, split)):
            np.testing.assert_array_equal(a, b)
    assert not (gpu / "bsds500_train.npz").exists()  # one file serves both splits
    r = _py("prepare_gpu.py", *args, env=env)  # the default --splits train afterwards: the train+val file does
    assert r.returncode == 0 and "holds train too" in r.stdout and not (gpu / "bsds500_train.npz").exists()
    assert [p.name for p in (gpu / "BSDS500/groundTruth/val").iterdir()] == ["val0.mat"]
    # kept when present; over the size limit: refused, naming it
    before = (gpu / "site.tar.xz").stat().st_mtime_ns
    r = _py("prepare_gpu.py", *args, "--limit-mib", "0.001", env=env)
    assert r.returncode != 0 and "over the device tool's" in r.stderr
    assert (gpu / "site.tar.xz").stat().st_mtime_ns == before


def test_preloaded_edge_dataset_is_the_loaded_one(tmp_path):
    """hiseg.data.edges.preload_edge_dataset (the GPU run's start decodes the packed images in a thread
    while its imports run): the next load_edge_dataset of the same file, split and limit returns the
    same arrays as a plain load, once; a preloaded error is raised there; other arguments read afresh."""
    from hiseg.data import edges

    data = make_bsds(tmp_path / "bsds")
    packed = edges.pack_edge_dataset(data, ["train"], tmp_path / "p.npz")
    plain = edges.load_edge_dataset(packed, "train")
    fut = edges.preload_edge_dataset(packed, "train")
    fut.result()
    got = edges.load_edge_dataset(str(packed), "train", None)
    assert all(np.array_equal(a, b) for a, b in zip(got, plain))
    assert not edges._PRELOADS  # taken once
    edges.preload_edge_dataset(packed, "nosuchsplit")
    with pytest.raises(FileNotFoundError, match="nosuchsplit"):
        edges.load_edge_dataset(packed, "nosuchsplit")
    edges.preload_edge_dataset(packed, "train", 1)
    assert len(edges.load_edge_dataset(packed, "train")[0]) == len(plain[0])  # not the preloaded limit's
    edges._PRELOADS.clear()


def _curve(path):
    return list(csv.DictReader(io.StringIO(path.read_text())))


@pytest.mark.slow
def test_gpu_session_runs_and_resumes_at_a_tiny_setting(tmp_path):
    """Run where numba cannot be imported, as on the CUDA machine (its Python has none): the
    validation's boundary F comes from hiseg.metrics' numpy/scipy twins."""
    data = make_bsds(tmp_path / "bsds")
    hide = tmp_path / "no-numba" / "numba"
    hide.mkdir(parents=True)
    (hide / "__init__.py").write_text("raise ImportError('no numba here, as on the CUDA machine')\n")
    keep = tmp_path / "keep"  # what a warm device keeps between two commands (runs/gpu_session there)
    env = _env(PYTHONPATH=os.pathsep.join([str(hide.parent), str(ROOT)]))
    common = ["--bsds", data, "--keep", keep]
    # --bench-seconds 0: the first check runs, the other is left for a later command
    a = tmp_path / "a"
    _session(a, *common, "--resume", "", "--curve", "", "--pixel-steps", 4, "--bench-seconds", 0, env=env)
    summary = (a / "summary.txt").read_text()
    assert "no numba: the numpy/scipy metrics" in summary and "(checks to run: eager compact)" in summary
    assert "bench compact: left for a later session" in summary
    names = sorted(p.name for p in a.iterdir())
    assert len(names) <= 8 and {"summary.txt", "bench.log", "pixel_stage.md", "gpu_checks.md", "recipe.log",
                                "pixel_last.ckpt", "pixel_metrics.csv"} <= set(names), names
    rows = [ln for ln in (a / "pixel_stage.md").read_text().splitlines() if ln.startswith("| cpu")]
    bench = [r for r in rows if "training (gpu_run.py" not in r]
    assert len(bench) == 1 and "pdc_boundary_net" in bench[0]
    _speed_row(a, rows, 4)
    checks = [ln.split("|")[1:-1] for ln in (a / "gpu_checks.md").read_text().splitlines()[2:]]
    assert [c[:2] for c in checks] == [[" cpu ", " eager "]] and checks[0][2].strip().startswith("crops/s ")
    first = load_ckpt(a / "pixel_last.ckpt")
    assert first["global_step"] == 4 and first["hyper_parameters"]["arch"] == "pdc_boundary_net"
    curve_a = _curve(a / "pixel_metrics.csv")
    assert curve_a and any(row.get("val/boundary_f") for row in curve_a)
    # the next run resumes from the first's checkpoint and continues its curve
    b, curve_b = _resumed_run(tmp_path / "b", env, a / "pixel_last.ckpt", 8, curve_a, *common, "--resume",
                              a / "pixel_last.ckpt", "--curve", a / "pixel_metrics.csv", "--bench", "none")
    rows = [ln for ln in (b / "pixel_stage.md").read_text().splitlines() if ln.startswith("| ")]
    _speed_row(b, rows[1:], 8)  # --bench none: the training's row alone, under the table's header
    # --resume not given: the further of the committed state (here a's, step 4) and the machine's last command
    # (b's, step 8, kept in KEEP) is resumed, with its curve
    assert load_ckpt(keep / "pixel_last.ckpt")["global_step"] == 8
    # --bench auto again: the check the first command left (its own done, kept by the warm machine in KEEP)
    c, _ = _resumed_run(tmp_path / "c", env, keep / "pixel_last.ckpt", 12, curve_b, *common,
                        "--state", a / "pixel_last.ckpt", "--pixel-steps", 12)
    assert "(checks to run: compact)" in (c / "summary.txt").read_text()
    assert [ln.split("|")[2] for ln in (c / "gpu_checks.md").read_text().splitlines()[2:]] == [" compact "]
    assert [ln.split("|")[2].strip() for ln in (keep / "gpu_checks.md").read_text().splitlines()] == ["eager",
                                                                                                     "compact"]


def _speed_row(out, rows, step):
    """The command's log (recipe.log, gpu_phases.py's lines) gave one training row of pixel_stage.md, in
    the table's columns, up to ``step``: crops/s after the first step, the floor of the same run, their
    ratio; and its start-up phases, logged in summary.txt. ``gpu_choices.py row`` gives the same row."""
    training = [r for r in rows if "training (gpu_run.py" in r]
    assert len(training) == 1, rows
    cells = [c.strip() for c in training[0].strip("|").split("|")]
    assert len(cells) == 5 and cells[0].startswith("cpu") and cells[1].startswith("pdc_boundary_net `{")
    assert f"to step {step} in" in cells[1]
    crops, floor, ratio = float(cells[2]), float(cells[3]), float(cells[4])
    assert crops > 0 and floor > 0 and abs(ratio - crops / floor) <= 0.01
    summary = (out / "summary.txt").read_text()
    assert f"speed row (pixel_stage.md): {training[0]}" in summary
    phases = ("train.py started", "imports done", "built", "data ready", "model restored", "floor measured",
              "first step")
    start = summary.split("start-up: ", 1)[1].splitlines()[0]
    assert [p.rsplit(" ", 2)[0] for p in start.split(" (first step")[0].split("; ")
            if not p.startswith("checkpoint read")] == list(phases), start
    r = subprocess.run([sys.executable, str(ROOT / "experiments/gpu/gpu_choices.py"), "row", str(out / "recipe.log")],
                       capture_output=True, text=True)
    assert r.returncode == 0 and training[0].replace(f", {_today()}", "") in r.stdout, r.stdout + r.stderr


def _today():
    import datetime

    return datetime.date.today().isoformat()


LOG = """[gpu_phases] train.py started at +5.0 s (+5.0 s)
[gpu_phases] imports done at +12.0 s (+7.0 s)
[gpu_phases] device: NVIDIA H200
[gpu_phases] network: pdc_boundary_net `{"width": 40}` (578k parameters); 32 crops of 320x320, bf16-mixed
[gpu_phases] floor: 90 bare forward+backward steps of 32 crops of 320x320 (bf16-mixed, channels-last) in 3.00 s: 960.00 crops/s
[gpu_phases] first step at +30.0 s (+18.0 s) (step 8391)
[gpu_phases] rate: 500 steps (to step 8891) in 20.00 s after the first step (validation's 0.0 s left out): 25.0000 steps/s x 32 crops = 800.00 crops/s
"""


def test_gpu_phases_row_reads_the_last_run_of_a_log():
    """gpu_phases.row: the last train.py run of a log (a retry after a failed compiled try), its last rate
    line (a periodic one where the run was killed before its end); no rate line: ValueError."""
    gp = _module("gpu_phases")
    killed = LOG.replace("H200", "H100")  # a first try, cut after one periodic rate line
    retry = LOG + "Lightning's own lines\n" + LOG.replace("500 steps (to step 8891) in 20.00", "1000 steps (to step "
                                                                "9391) in 50.00").replace("= 800.00", "= 640.00")
    row = gp.row(killed + retry, "2026-11-29")
    cells = [c.strip() for c in row.strip("|").split("|")]
    assert cells[0] == "NVIDIA H200" and cells[2:] == ["640.0", "960.0", "0.67"], row
    assert "1000 steps to step 9391 in 50 s after the first step, which ended 30 s into the command" in cells[1]
    assert cells[1].startswith('pdc_boundary_net `{"width": 40}` (578k parameters); 32 crops of 320x320, bf16-mixed')
    # the table's readers take it for the network's eager GPU row
    g = _module("gpu_choices")
    rows = g.gpu_rows(_table(("NVIDIA H100 80GB HBM3", PDC, "1.0")) + row + "\n", "pdc_boundary_net", {"width": 40},
                      "NVIDIA H200")
    assert [(r["crops"], r["compiled"]) for r in rows] == [(640.0, None)]
    assert gp.phases_line(LOG) == "train.py started 5.0 s; imports done 7.0 s; first step 18.0 s (first step's end at +30.0 s)"
    with pytest.raises(ValueError, match="no \\[gpu_phases\\] rate"):
        gp.row(LOG.split("[gpu_phases] rate")[0])


def _resumed_run(out, env, resumed, step, curve_before, *args):
    """gpu_run.py --dry-run into ``out``: it resumed from ``resumed``, reached ``step``, and its curve
    continues ``curve_before``; returns (out, its curve)."""
    _session(out, "--pixel-steps", step, *args, env=env)
    assert f"resume={resumed} " in (out / "summary.txt").read_text()
    assert load_ckpt(out / "pixel_last.ckpt")["global_step"] == step
    curve = _curve(out / "pixel_metrics.csv")
    assert curve[:len(curve_before)] == curve_before and len(curve) > len(curve_before)
    return out, curve


def test_gpu_run_takes_arguments():
    """Every setting is an argument, none an environment variable."""
    r = _py("gpu_run.py", "--help", env=_env())
    assert r.returncode == 0
    for opt in ("--out", "--budget-seconds", "--bench {auto,all,none}", "--bench-seconds", "--compile {auto,on,off}",
                "--split", "--resume", "--gpu-dir", "--dry-run", "--end-seconds", "--keep", "--state"):
        assert opt in r.stdout, opt
    assert "--no-merge" in _py("gpu_run.py", "recipe", "--help", env=_env()).stdout



def _module(name):
    spec = importlib.util.spec_from_file_location(name, ROOT / "experiments" / "gpu" / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_gpu_run_unpacks_the_carried_site_where_higra_is_missing(tmp_path, monkeypatch):
    """Where this Python lacks higra or jsonargparse (the CUDA machine), the program unpacks the carried
    site.tar.xz and puts it first on its own path and its subprocesses'; without the file it says what
    to run."""
    run = _module("gpu_run")
    monkeypatch.setattr(sys, "path", list(sys.path))
    monkeypatch.setenv("PYTHONPATH", "elsewhere")
    monkeypatch.setattr(run.importlib.util, "find_spec", lambda name, *a: None)
    log = run.Log(tmp_path, 0.0)
    assert not run.setup_site(str(tmp_path / "gpu"), log)
    assert "run experiments/gpu/prepare_gpu.py" in (tmp_path / "summary.txt").read_text()
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    with zipfile.ZipFile(wheels / "higra-0-py3-none-any.whl", "w") as z:
        z.writestr("higra/__init__.py", "X = 1\n")
    (tmp_path / "gpu").mkdir()
    _module("prepare_gpu").pack_site(sorted(wheels.glob("*.whl")), tmp_path / "gpu" / "site.tar.xz")
    assert run.setup_site(str(tmp_path / "gpu"), log)
    site = str((tmp_path / "gpu" / "site").resolve())
    assert (tmp_path / "gpu/site/higra/__init__.py").is_file() and sys.path[:2] == [site, str(ROOT)]
    assert os.environ["PYTHONPATH"] == os.pathsep.join([site, str(ROOT), "elsewhere"])


def _gone(pid, seconds=10):
    """The process ``pid`` has ended (gone, or a zombie nobody reaps)."""
    end = time.time() + seconds
    while time.time() < end:
        try:
            with open(f"/proc/{pid}/status") as f:
                if any(ln.startswith("State:") and "Z" in ln.split()[1] for ln in f):
                    return True
        except FileNotFoundError:
            return True
        time.sleep(0.2)
    return False


def test_gpu_run_stage_ends_itself_under_a_hard_limit(tmp_path, monkeypatch):
    """A subprocess past its limit is ended with its whole process group (the data loader's workers too),
    as timeout(1) answers (124); the pixel stage's train.py gets the slot's end as $HISEG_STOP_AT
    (WallClockDeadline), its fit time as max_time, and the hard limit."""
    run = _module("gpu_run")
    pidfile = tmp_path / "pid"
    code = ("import os, subprocess, time; p = subprocess.Popen(['sleep', '60']); "
            f"open({str(pidfile)!r}, 'w').write(f'{{os.getpid()}} {{p.pid}}'); time.sleep(60)")
    assert run.run([sys.executable, "-c", code], 3, tmp_path / "log") == 124
    assert all(_gone(int(pid)) for pid in pidfile.read_text().split())  # both ended by the limit, not by their 60 s
    seen = {}

    def fake(cmd, seconds, log_file, env=None, cwd=None):
        seen.update(cmd=cmd, seconds=seconds, env=env)
        return 1

    monkeypatch.setattr(run, "run", fake)
    a = run.parse(["--out", str(tmp_path / "o"), "--dry-run"])
    rc = run.pixel_stage(a, tmp_path, run.Log(tmp_path, 0.0), None, config="c.yaml", arch_kwargs="", seconds=100,
                         resume="", curve="", work=str(tmp_path / "w"), stop_at=1234.5, timeout=90)
    assert rc == 1 and "pixel stage failed (rc=1" in (tmp_path / "summary.txt").read_text()
    assert seen["env"]["HISEG_STOP_AT"] == "1234" and seen["seconds"] == 90
    assert seen["cmd"][seen["cmd"].index("--trainer.max_time") + 1] == "00:00:01:40"


def _table(*rows):
    head = ("| device | network | crops/s | floor crops/s | ratio |\n|---|---|---:|---:|---:|\n")
    return head + "".join(f"| {d} | {n} | {c} | 1000.0 | 0.50 |\n" for d, n, c in rows)


PDC = 'pdc_boundary_net `{"width": 40}` (578k parameters); 32 crops of 320x320, bf16-mixed'


def test_gpu_choices_read_the_benchmark_rows(tmp_path):
    """experiments/gpu/gpu_choices.py: torch.compile is chosen only when its newest row is the gain
    above the newest eager row of the same GPU (CPU rows and other widths do not count); several
    tables are read in order."""
    sys.path.insert(0, str(ROOT / "experiments" / "gpu"))
    try:
        import gpu_choices as g
    finally:
        sys.path.pop(0)
    rows = lambda text: g.gpu_rows(text, "pdc_boundary_net", {"width": 40})  # noqa: E731
    cpu_only = _table(("cpu (1 threads)", PDC, "2.3"), ("NVIDIA H100 80GB HBM3", PDC.replace("40", "32"), "900"))
    assert rows(cpu_only) == []
    h100 = "NVIDIA H100 80GB HBM3"
    eager = _table((h100, PDC, "1000.0"))
    assert not g.compile_pays(rows(eager))
    compiled = _table((h100, PDC, "1000.0"), (h100, PDC + ", compiled (default)", "1400.0"))
    assert [r["compiled"] for r in rows(compiled)] == [None, "default"]
    assert g.compile_pays(rows(compiled), 1.3) and not g.compile_pays(rows(compiled), 1.5)
    only_compiled = _table((h100, PDC + ", compiled (default)", "1400.0"))
    assert not g.compile_pays(rows(only_compiled))
    other_gpu = _table(("NVIDIA H200", PDC, "1000.0"), (h100, PDC + ", compiled (default)", "1400.0"))
    assert not g.compile_pays(rows(other_gpu))
    # a GPU named: only its rows count (an H200 session does not reuse the H100's measurements)
    assert g.gpu_rows(eager, "pdc_boundary_net", {"width": 40}, "NVIDIA H200") == []
    assert not g.compile_pays(g.gpu_rows(compiled, "pdc_boundary_net", {"width": 40}, "NVIDIA H200"), 1.3)
    newest = _table((h100, PDC, "1000.0"), (h100, PDC + ", compiled (default)", "1400.0"), (h100, PDC, "1200.0"))
    assert not g.compile_pays(rows(newest), 1.3)
    # a training with compile failed on that GPU (gpu_run.py's row): off from then on, whatever the speed
    failed = compiled + _table((h100, PDC.split(" (")[0] + " training with torch.compile (gpu_run.py), "
                                       "compiled (default)", "failed (rc=1, recipe.log)"))
    assert [r["failed"] for r in rows(failed)] == [False, False, True]
    assert not g.compile_pays(rows(failed), 1.3)
    # the command line: the committed table, then a session's rows
    a, b = tmp_path / "a.md", tmp_path / "b.md"
    a.write_text(eager)
    b.write_text(_table((h100, PDC + ", compiled (default)", "1400.0")))
    ask = lambda *args: subprocess.run([sys.executable, str(ROOT / "experiments/gpu/gpu_choices.py"), *args],  # noqa: E731
                                       capture_output=True, text=True, check=True).stdout.strip()
    assert ask("compile", "--results", str(a)) == "0"
    assert ask("compile", "--gain", "1.3", "--results", str(a), "--results", str(b)) == "1"


def test_gpu_choices_todo_lists_the_checks_a_gpu_has_no_result_for(tmp_path):
    """experiments/gpu/gpu_choices.py todo: the checks in their order, less those with a row of this GPU
    in a checks table (however they ended) or, for the pixel-stage checks, a GPU row of theirs in
    pixel_stage.md; another GPU's rows do not count; bad --items or no --device are refused."""
    h100, h200 = "NVIDIA H100 80GB HBM3", "NVIDIA H200"
    pixel, checks = tmp_path / "pixel_stage.md", tmp_path / "gpu_checks.md"
    ask = lambda *args: subprocess.run([sys.executable, str(ROOT / "experiments/gpu/gpu_choices.py"), "todo",  # noqa: E731
                                        "--results", str(pixel), "--checks", str(checks), *args],
                                       capture_output=True, text=True)
    assert ask("--device", h100).stdout.strip() == "eager sync host compile compact"  # neither table exists
    compact = 'compact_boundary_net `{"width": 32, "blocks": [2, 2, 3, 3], "side_channels": 16}` (329k parameters)'
    pixel.write_text(_table((h100, PDC, "1000.0"), (h100, compact, "2000.0"), ("cpu (1 threads)", PDC, "2.0"),
                            (h200, PDC + ", compiled (default)", "1500.0")))
    checks.write_text("| device | check | result | seconds | date |\n|---|---|---|---:|---|\n"
                      f"| {h100} | sync | timeout after 45 s | 45 | 2026-11-28 |\n"
                      f"| {h200} | host | rc=0 | 70 | 2026-11-28 |\n")
    assert ask("--device", h100).stdout.strip() == "host compile"
    assert ask("--device", h200).stdout.strip() == "eager sync compact"
    assert ask("--device", "cpu", "--items", "eager compact").stdout.strip() == "eager compact"  # CPU rows: no
    # a failed training with compile on that GPU is its compile check's result
    with pixel.open("a") as f:
        f.write(f"| {h100} | {PDC.split(' (')[0]} training with torch.compile (gpu_run.py), compiled (default)"
                " | failed (rc=1, recipe.log) | – | – |\n")
    assert ask("--device", h100).stdout.strip() == "host"
    for bad in (("--device", h100, "--items", "eager warp"), ()):
        r = ask(*bad)
        assert r.returncode == 2 and "todo needs --device, and --items among" in r.stderr, r.stderr


def test_gpu_choices_newest_checkpoint(tmp_path):
    import torch

    paths = []
    for name, step in (("a", 5), ("b", 9), ("c", 9)):
        paths.append(str(tmp_path / f"{name}.ckpt"))
        torch.save({"global_step": step}, paths[-1])
    ask = lambda *args: subprocess.run([sys.executable, str(ROOT / "experiments/gpu/gpu_choices.py"), "newest", *args],  # noqa: E731
                                       capture_output=True, text=True, check=True).stdout.strip()
    assert ask(*paths) == paths[1] and ask(paths[2], paths[1]) == paths[2]  # the first of equals
    assert ask(str(tmp_path / "missing.ckpt"), paths[0]) == paths[0] and ask(str(tmp_path / "missing.ckpt")) == ""
    # read without torch (gpu_run.py never imports it): a Lightning checkpoint's plain fields as torch.load gives them
    state = ROOT / "experiments" / "state" / "pdc_pixel_last.ckpt"
    if state.is_file():
        fields, ck = _module("gpu_choices").ckpt_fields(state), load_ckpt(state)
        assert fields["global_step"] == ck["global_step"] and fields["callbacks"]["Timer"] == ck["callbacks"]["Timer"]


FAILING_COMPILE = '''
import pytorch_lightning as pl


class FailAt(pl.Callback):
    """Stands for a torch.compile that breaks mid-run (an inductor error at a recompilation)."""

    def on_train_batch_end(self, trainer, *args):
        if trainer.global_step >= 6:
            raise RuntimeError("inductor failed (the test's stand-in)")
'''


def _compiled_session(tmp_path, callbacks: str, callback: str):
    """gpu_run.py --dry-run --compile on, ``callback`` (a class of the module source ``callbacks``)
    standing for torch.compile, 8 steps, into tmp_path/a: (env, args, out, keep, summary)."""
    data = make_bsds(tmp_path / "bsds")
    (tmp_path / "mods").mkdir()
    (tmp_path / "mods" / "stand_in_compile.py").write_text(callbacks)
    keep = tmp_path / "keep"
    env = _env(BSDS=str(data), PYTHONPATH=os.pathsep.join([str(tmp_path / "mods"), str(ROOT)]))
    args = ["--bsds", data, "--keep", keep, "--bench", "none", "--compile-callback", f"stand_in_compile.{callback}"]
    out = tmp_path / "a"
    _session(out, *args, "--resume", "", "--curve", "", "--compile", "on", env=env)
    return env, args, out, keep, (out / "summary.txt").read_text()


@pytest.mark.slow
def test_gpu_session_retries_without_compile_from_where_the_compiled_try_got(tmp_path):
    """--compile on and the stage fails at step 6: its last periodic checkpoint (step 4, the first
    epoch's end) and the curve up to it are kept, the rest of the time trains without compile
    from there to the budget (8), and the machine's next --compile auto command stays off it."""
    env, args, out, keep, summary = _compiled_session(tmp_path, FAILING_COMPILE, "FailAt")
    assert "its last periodic checkpoint (step 4)" in summary, summary
    assert "retrying without it" in summary and "torch.compile: off, resume=" in summary, summary
    assert "inductor failed (the test's stand-in)" in (out / "recipe.log").read_text()
    assert (keep / "compile_failed").is_file()
    failed_rows = [ln for ln in (out / "pixel_stage.md").read_text().splitlines() if "failed (rc=1" in ln]
    assert len(failed_rows) == 1 and "pdc_boundary_net `{\"width\": 40}` training with torch.compile" in failed_rows[0]
    assert load_ckpt(out / "pixel_last.ckpt")["global_step"] == 8
    assert load_ckpt(keep / "pixel_last.ckpt")["global_step"] == 8
    # the curve: the failed try's rows up to step 4, then the retry's; each (step, figure) once
    curve = _curve(out / "pixel_metrics.csv")
    seen = [(row["step"], k) for row in curve for k, v in row.items() if v and k not in ("step", "epoch")]
    assert len(seen) == len(set(seen)), seen
    val_steps = [int(row["step"]) for row in curve if row.get("val/boundary_f")]
    assert val_steps[0] == 3 and len(val_steps) == 2 and val_steps == sorted(val_steps), val_steps
    assert len(list(out.iterdir())) <= 8
    # --compile auto on this machine afterwards: off, said so
    _session(tmp_path / "b", *args, "--state", out / "pixel_last.ckpt", env=env)
    assert "torch.compile: off (a training with it failed on this machine" in (tmp_path / "b/summary.txt").read_text()


FAILING_EVERYTHING = FAILING_COMPILE + '''

class FailAndBreakTheData(FailAt):
    """Fails like FailAt, and takes the validation images with it: the retry without compile
    cannot even start (a failure that is not compile's)."""

    def on_train_batch_end(self, trainer, *args):
        if trainer.global_step >= 6:
            import os
            import shutil
            shutil.rmtree(os.path.join(os.environ["BSDS"], "images", "val"))
        super().on_train_batch_end(trainer, *args)
'''


@pytest.mark.slow
def test_gpu_session_keeps_the_compiled_try_where_the_retry_fails_too(tmp_path):
    """--compile on, the stage fails at step 6 and the retry without compile fails before its first
    checkpoint: the compiled try's last periodic checkpoint (step 4) and its curve come back in
    OUT, and nothing marks compile as failed (the cause was something else)."""
    _, _, out, keep, summary = _compiled_session(tmp_path, FAILING_EVERYTHING, "FailAndBreakTheData")
    assert "retrying without it" in summary, summary
    assert "the retry wrote no checkpoint: the compiled try's (rescued) is in OUT" in summary, summary
    assert "the retry without torch.compile failed too" in summary, summary
    assert load_ckpt(out / "pixel_last.ckpt")["global_step"] == 4
    val_steps = [int(row["step"]) for row in _curve(out / "pixel_metrics.csv") if row.get("val/boundary_f")]
    assert val_steps == [3], val_steps
    assert not (keep / "compile_failed").exists()
    assert not (out / "pixel_stage.md").exists() or "failed (rc=" not in (out / "pixel_stage.md").read_text()
    assert len(list(out.iterdir())) <= 8


def test_gpu_choices_curve_joins_and_stops_at_the_checkpoint(tmp_path):
    """``gpu_choices.py curve``: the parts one after the other with the union of their columns;
    --until leaves out the last part's rows of steps after the checkpoint (logged again by the
    resumed run; Lightning logs the row of the step to N at N - 1, as the first epoch's
    validation of the retry test above shows), and a missing part is skipped."""
    import torch

    before, run = tmp_path / "before.csv", tmp_path / "run.csv"
    before.write_text("epoch,step,val/f\n0,99,0.5\n")
    run.write_text("epoch,step,train/loss\n1,100,1.0\n1,149,0.9\n1,150,0.8\n1,151,0.7\n")
    torch.save({"global_step": 150}, tmp_path / "last.ckpt")
    cmd = [sys.executable, str(ROOT / "experiments/gpu/gpu_choices.py"), "curve", str(tmp_path / "out.csv")]
    subprocess.run(cmd + ["--until", str(tmp_path / "last.ckpt"), str(before), str(tmp_path / "gone.csv"), str(run)],
                   check=True, capture_output=True)
    rows = _curve(tmp_path / "out.csv")
    assert list(rows[0]) == ["epoch", "step", "val/f", "train/loss"]
    assert [(r["step"], r["val/f"], r["train/loss"]) for r in rows] == [
        ("99", "0.5", ""), ("100", "", "1.0"), ("149", "", "0.9")]
    subprocess.run(cmd + [str(before), str(run)], check=True, capture_output=True)
    assert len(_curve(tmp_path / "out.csv")) == 5
