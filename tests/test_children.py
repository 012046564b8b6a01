"""Issue 42: the processes a test starts die with it, and with the run when the run is stopped
(``timeout``'s SIGTERM, Ctrl-C): ``tests/_children.py``, checked on an inner pytest run whose
test starts ``bash`` -> ``sleep`` (a child chain, as ``experiments/gpu/gpu_run.py`` ->
``train.py``)."""
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent

INNER = '''
import subprocess, time
from pathlib import Path

def test_starts_a_chain(tmp_path):
    subprocess.Popen(["bash", "-c", "sleep 300 & echo $! > {pidfile}.tmp; mv {pidfile}.tmp {pidfile}; wait"])
    while not Path("{pidfile}").exists():
        time.sleep(0.05)
    time.sleep({linger})

def test_run_times_out_on_the_chain():
    try:
        subprocess.run(["bash", "-c", "sleep 300 & echo $! > {pidfile}2; wait"], timeout=1)
    except subprocess.TimeoutExpired:
        pass  # subprocess.run killed bash, not its sleep
'''

#: the tests list a process's children from /proc, which only Linux has
NEEDS_PROC = pytest.mark.skipif(not Path("/proc").is_dir() or sys.platform != "linux",
                                reason="lists a process's children from /proc, which only Linux has")


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError):
        return False
    return state != "Z"


def _wait_gone(pid: int, seconds: float = 10.0) -> bool:
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        if not _alive(pid):
            return True
        time.sleep(0.05)
    return False


def _inner(tmp_path, linger: float, *args):
    pidfile = tmp_path / "sleep.pid"
    (tmp_path / "test_inner.py").write_text(INNER.format(pidfile=pidfile, linger=linger))
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(HERE), os.environ.get("PYTHONPATH", "")]))
    cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "_children", "-n0",
           str(tmp_path / "test_inner.py"), *args]
    return pidfile, subprocess.Popen(cmd, cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)


@NEEDS_PROC
def test_what_a_test_started_dies_when_it_ends(tmp_path):
    pidfile, p = _inner(tmp_path, 0.0)
    out = p.communicate(timeout=300)[0].decode()
    assert p.returncode == 0, out[-2000:]
    for f in (pidfile, Path(f"{pidfile}2")):
        pid = int(f.read_text())
        assert _wait_gone(pid), f"{f.name}: sleep {pid} outlived its test"


@NEEDS_PROC
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_what_a_test_started_dies_when_the_run_is_stopped(tmp_path, sig):
    pidfile, p = _inner(tmp_path, 300.0, "-k", "starts_a_chain")
    end = time.monotonic() + 120
    while not pidfile.exists():
        assert p.poll() is None and time.monotonic() < end, p.communicate()[0].decode()[-2000:]
        time.sleep(0.05)
    pid = int(pidfile.read_text())
    assert _alive(pid)
    p.send_signal(sig)  # as `timeout` or Ctrl-C would stop the run
    p.communicate(timeout=120)
    assert _wait_gone(pid), f"sleep {pid} outlived the stopped run"
