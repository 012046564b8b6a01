"""Worker processes end with the process that started them, ``kill -9`` included (issue 43,
item 1): ``hiseg predict --workers 2``, ``hiseg evaluate --workers 2`` and the training host pool
are killed with SIGKILL while their workers are busy; 15 s later none of the processes they
started is alive, and nothing was written after the kill."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from _faults import alive as _alive
from _faults import descendants as _descendants
from _faults import block_ground_truth, kill_busy_run

from hiseg import _lifetime

ROOT = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="lists a process's children from /proc, which only Linux has")


def _kill_and_check(tmp_path: Path, argv: list[str], watch: Path | None = None) -> None:
    run = kill_busy_run(tmp_path, argv, watch)
    assert len(run["started"]) >= 2
    assert not run["left"], f"processes left behind after kill -9: {run['left']}"
    assert not run["written"], f"written after the main process was gone: {run['written']}"


def _images(folder: Path, n: int) -> Path:
    import cv2

    folder.mkdir()
    for i in range(n):
        img = np.zeros((32, 40, 3), np.uint8)
        img[:16], img[:, 20:] = (200, 30, 30), (30, 200, 60)
        cv2.imwrite(str(folder / f"im{i}.png"), np.roll(img, i, axis=1))
    return folder


def test_predict_workers_end_with_a_killed_main_process(tmp_path):
    out = tmp_path / "out"
    _kill_and_check(tmp_path, ["predict", str(_images(tmp_path / "in", 4)), "-o", str(out), "--classical",
                               "--workers", "2", "-q"], watch=out)


def test_evaluate_workers_end_with_a_killed_main_process(tmp_path):
    from scipy.io import savemat

    from tests.metrics.test_metrics_bsds import seg_to_ucm2

    gt, pred, seg = block_ground_truth(tmp_path, 3, 20, 24)
    for k in range(3):
        savemat(str(pred / f"im{k}.mat"), {"ucm2": seg_to_ucm2(seg, 0.6)})
    _kill_and_check(tmp_path, ["evaluate", str(pred), "--gt", str(gt), "--workers", "2", "-q", "--no-fop",
                               "--thresholds", "3", "-o", str(tmp_path / "res")], watch=tmp_path / "res")


def test_host_pool_workers_end_with_a_killed_main_process(tmp_path):
    _kill_and_check(tmp_path, ["hostpool"])


def test_a_worker_ends_when_its_main_process_ends_and_leaves_no_temporary_file(tmp_path):
    """The watchdog itself, in one worker: its main process (a child of this test) ends, the
    worker removes the temporary file it was writing and ends."""
    code = f"""
import os, sys, time
from hiseg import _lifetime
from hiseg.io import files
def work(folder):
    tmp = files._temp_beside(__import__("pathlib").Path(folder) / "x.png")
    open(os.path.join(folder, "started"), "w").close()
    time.sleep(60)
if __name__ == "__main__":
    pool = _lifetime.process_pool(1)
    pool.submit(work, {str(tmp_path)!r})
    time.sleep(60)
"""
    script = tmp_path / "main.py"
    script.write_text(code)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])]))
    proc = subprocess.Popen([sys.executable, str(script)], env=env, cwd=tmp_path)
    try:
        deadline = time.monotonic() + 60
        while not (tmp_path / "started").exists():
            assert proc.poll() is None and time.monotonic() < deadline
            time.sleep(0.1)
        started = _descendants(proc.pid)
        assert any(n.startswith(".x.png.") for n in os.listdir(tmp_path))
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        deadline = time.monotonic() + 15
        while any(_alive(p) for p in started) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not [p for p in started if _alive(p)]
        assert not [n for n in os.listdir(tmp_path) if n.startswith(".x.png.")]
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_the_main_process_is_no_orphan():
    assert not _lifetime.orphaned()
    _lifetime.exit_if_orphaned()  # returns
