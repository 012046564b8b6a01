"""Tests of the CPU pilot's helpers (experiments/pilot_pdc.sh, experiments/pilot_pdc_curves.py)."""
from __future__ import annotations

import csv
import importlib.util
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
HEADER = "epoch,lr-AdamW,step,train/loss,train/pixel,val/boundary_f,val/boundary_f_ods,val/loss,val/pixel\n"


def _curves_module():
    spec = importlib.util.spec_from_file_location("pilot_pdc_curves", ROOT / "experiments" / "pilot_pdc_curves.py")
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
    subprocess.run(["bash", "-n", str(ROOT / "experiments" / "pilot_pdc.sh")], check=True)
