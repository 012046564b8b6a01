"""Tests of the CPU pilot's helpers (experiments/pilots/pilot_pdc.sh, experiments/pilots/pilot_pdc_curves.py)."""
from __future__ import annotations

import csv
import importlib.util
import os
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
HEADER = "epoch,lr-AdamW,step,train/loss,train/pixel,val/boundary_f,val/boundary_f_ods,val/loss,val/pixel\n"


def _curves_module():
    spec = importlib.util.spec_from_file_location("pilot_pdc_curves", ROOT / "experiments" / "pilots" / "pilot_pdc_curves.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _metrics(path: Path, rows: list[str]) -> None:
    path.mkdir(parents=True)
    (path / "metrics.csv").write_text(HEADER + "".join(r + "\n" for r in rows))


def test_curves_merge_resumed_versions_by_step(tmp_path):
    runs = tmp_path / "runs"
    # pdc: version_0 up to step 124 then killed; version_1 (resumed from step 100) re-logs 124 and goes on;
    # version_10 sorts after version_1 numerically, not as text
    _metrics(runs / "pdc_boundary_net/csv/version_0", ["0,,24,1.0,1.0,,,,", "0,,124,0.9,0.9,,,,"])
    _metrics(runs / "pdc_boundary_net/csv/version_1", ["0,,124,0.8,0.8,,,,", "0,,249,,,0.5,0.6,0.7,0.7",
                                                       "0,,274,0.6,0.6,,,,"])
    _metrics(runs / "pdc_boundary_net/csv/version_10", ["0,,499,,,0.55,0.65,0.6,0.6"])
    _metrics(runs / "compact_boundary_net/csv/version_0", ["0,,249,,,0.4,0.55,0.8,0.8"])
    (runs / "eval_pdc_boundary_net").mkdir()  # an evaluation folder: no metrics, no rows
    out = tmp_path / "out"
    _curves_module().main(["--runs", str(runs), "--out", str(out), "--batch", "8"])
    rows = list(csv.DictReader(open(out / "curves.csv")))
    got = [(r["arch"], int(r["step"]), int(r["crops"]), r["val_boundary_f_ods"], r["train_loss"]) for r in rows]
    # the mean training loss since the previous validation: (1.0 + 0.8) / 2 for pdc's first row (124's last value)
    assert got == [("compact_boundary_net", 250, 2000, "0.5500", ""),
                   ("pdc_boundary_net", 250, 2000, "0.6000", "0.9000"),
                   ("pdc_boundary_net", 500, 4000, "0.6500", "0.6000")]
    md = (out / "curves.md").read_text()
    assert "| 250 | 2000 | 0.5500 |  | 0.6000 | 0.9000 |" in md
    assert "| 500 | 4000 |  |  | 0.6500 | 0.6000 |" in md


def test_curves_without_metrics_is_an_error(tmp_path):
    (tmp_path / "runs" / "x").mkdir(parents=True)
    with pytest.raises(FileNotFoundError, match="no validation rows"):
        _curves_module().main(["--runs", str(tmp_path / "runs"), "--out", str(tmp_path / "out")])
    assert not (tmp_path / "out").exists()  # nothing half-written


def test_pilot_script_parses():
    subprocess.run(["bash", "-n", str(ROOT / "experiments" / "pilots" / "pilot_pdc.sh")], check=True)


def test_pilot_state_saves_and_restores_the_runs(tmp_path):
    """STATE=... SAVE=1: each run's metrics (every version) and newest last.ckpt into STATE; the
    same STATE on a machine without the runs restores them, so the pilot resumes (here: both runs
    done, so it goes straight to the curves, equal to the original's)."""
    runs = tmp_path / "runs"
    _metrics(runs / "pdc_boundary_net/csv/version_0", ["0,,249,,,0.5,0.6,0.7,0.7"])
    _metrics(runs / "pdc_boundary_net/csv/version_1", ["0,,499,,,0.55,0.65,0.6,0.6"])
    for v, text in (("version_0", "old"), ("version_1", "newest")):
        (runs / f"pdc_boundary_net/csv/{v}/checkpoints").mkdir()
        (runs / f"pdc_boundary_net/csv/{v}/checkpoints/last.ckpt").write_text(text)
    (runs / "pdc_boundary_net/done").touch()
    _metrics(runs / "compact_boundary_net/csv/version_0", ["0,,249,,,0.4,0.55,0.8,0.8"])
    (runs / "compact_boundary_net/csv/version_0/checkpoints").mkdir()
    (runs / "compact_boundary_net/csv/version_0/checkpoints/last.ckpt").write_text("compact")
    state = tmp_path / "state"
    env = dict(os.environ, ROOT=str(runs), STATE=str(state), SAVE="1")
    script = str(ROOT / "experiments" / "pilots" / "pilot_pdc.sh")
    r = subprocess.run(["bash", script], env=env, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert (state / "pdc_boundary_net/last.ckpt").read_text() == "newest" and (state / "pdc_boundary_net/done").exists()
    assert sorted(p.name for p in (state / "pdc_boundary_net").iterdir()) == ["done", "last.ckpt", "version_0",
                                                                             "version_1"]
    assert not (state / "compact_boundary_net/done").exists()
    # another machine: nothing in ROOT; compact is not done, so make it done in STATE to keep training out
    (state / "compact_boundary_net/done").touch()
    fresh, out = tmp_path / "fresh", tmp_path / "out"
    env.update(ROOT=str(fresh), SAVE="0", OUT=str(out), EVAL_IMAGES="0")
    r = subprocess.run(["bash", script, str(tmp_path / "no-bsds")], env=env, capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "pdc_boundary_net restored from" in r.stdout and "already trained" in r.stdout
    assert (fresh / "pdc_boundary_net/csv/version_1/checkpoints/last.ckpt").read_text() == "newest"
    _curves_module().main(["--runs", str(runs), "--out", str(tmp_path / "orig")])
    assert (out / "curves.csv").read_text() == (tmp_path / "orig/curves.csv").read_text()


def test_pilot_archs_picks_the_designs(tmp_path):
    """ARCHS=compact_boundary_net trains and evaluates that design alone (the pdc run, not done, is
    left to its own process); an unknown design is refused before anything runs."""
    runs = tmp_path / "runs"
    _metrics(runs / "compact_boundary_net/csv/version_0", ["0,,249,,,0.4,0.55,0.8,0.8"])
    (runs / "compact_boundary_net/done").touch()
    (runs / "eval_compact_boundary_net").mkdir()
    (runs / "eval_compact_boundary_net/results.json").write_text("{}")
    script = str(ROOT / "experiments" / "pilots" / "pilot_pdc.sh")
    env = dict(os.environ, ROOT=str(runs), OUT=str(tmp_path / "out"), EVAL_IMAGES="1", ARCHS="compact_boundary_net")
    r = subprocess.run(["bash", script, str(tmp_path / "no-bsds")], env=env, capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "compact_boundary_net already trained" in r.stdout and "compact_boundary_net already evaluated" in r.stdout
    assert "pdc_boundary_net" not in r.stdout and not (runs / "pdc_boundary_net").exists()
    env["ARCHS"] = "pdc_boundary_net unet"
    r = subprocess.run(["bash", script, str(tmp_path / "no-bsds")], env=env, capture_output=True, text=True)
    assert r.returncode == 2 and "ARCHS: unknown design 'unet'" in r.stderr
    assert not (runs / "pdc_boundary_net").exists()
