"""benchmarks/bench_pixel_step_host.py: the gathered pixel-difference kernels against those stacked from
views at the revision before them (2282d74), in one process: equal bit for bit, kernels and gradients, and
fewer aten calls per step (what the benchmark's table reports)."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
BEFORE = "2282d74"


def test_the_gather_equals_the_stacked_views_and_calls_less(capsys):
    if subprocess.run(["git", "-C", str(ROOT), "cat-file", "-e", f"{BEFORE}:hiseg/models/pdc_net.py"],
                      capture_output=True).returncode != 0:
        pytest.skip(f"no git history with {BEFORE} (a shallow clone or an unpacked sdist)")
    sys.path.insert(0, str(ROOT / "benchmarks"))
    try:
        import bench_pixel_step_host as bench
    finally:
        sys.path.pop(0)
    assert bench.main(["--before", BEFORE, "--runs", "1"]) == 0  # 1 when the kernels or gradients differ
    rows = [ln.split("|") for ln in capsys.readouterr().out.splitlines() if ln.startswith("| before") or
            ln.startswith("| this")]
    before, now = (int(r[2]) for r in rows)
    assert now < before, rows
