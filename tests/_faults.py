"""Helpers shared by the fault tests and ``benchmarks/fault_probe.py`` (issue 43): a tiny PNG that
declares a huge size, a checkpoint whose hyper-parameters do not fit its tensors, the processes a
process started, and a run killed with SIGKILL while its workers are busy (``tests/_slow_workers.py``)."""
from __future__ import annotations

import os
import signal
import struct
import subprocess
import sys
import time
import zlib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def declared_png(path: Path, width: int = 50000, height: int = 50000) -> Path:
    """A PNG of about 1 KB declaring ``width`` x ``height`` 8-bit gray pixels (a few rows of data)."""
    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)

    z = zlib.compressobj(9)
    rows = z.compress((b"\0" * (width + 1)) * 20) + z.flush(zlib.Z_SYNC_FLUSH)
    path.write_bytes(b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", width, height, 8, 0, 0, 0, 0))
                     + chunk(b"IDAT", rows) + chunk(b"IEND", b""))
    return path


def _stat_fields(pid: int) -> list:
    with open(f"/proc/{pid}/stat") as fh:
        return fh.read().rsplit(")", 1)[1].split()


def descendants(pid: int) -> set[int]:
    """The processes ``pid`` started, and theirs (Linux: /proc)."""
    parents = {}
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                parents[int(d)] = int(_stat_fields(int(d))[1])
            except (OSError, IndexError, ValueError):
                pass
    out, todo = set(), [pid]
    while todo:
        p = todo.pop()
        for k, pp in parents.items():
            if pp == p and k not in out:
                out.add(k)
                todo.append(k)
    return out


def alive(pid: int) -> bool:
    """Whether process ``pid`` runs (a zombie has ended)."""
    try:
        return _stat_fields(pid)[0] != "Z"
    except OSError:
        return False


def kill_busy_run(tmp: Path, argv: list, watch: Path | None = None, wait_s: float = 15.0) -> dict:
    """``python tests/_slow_workers.py ARGV`` (a hiseg command or a host pool whose worker jobs
    sleep), killed with SIGKILL once two workers are busy: {"started": pids it had started,
    "left": those alive ``wait_s`` later, "written": files that appeared in ``watch`` after the kill}."""
    marks = tmp / "marks"
    marks.mkdir()
    env = dict(os.environ, HISEG_TEST_MARKS=str(marks), PYTHONPATH=os.pathsep.join(
        [str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])]))
    proc = subprocess.Popen([sys.executable, str(ROOT / "tests" / "_slow_workers.py"), *map(str, argv)], env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 120
        while len(os.listdir(marks)) < 2:  # both workers busy
            if proc.poll() is not None:
                raise RuntimeError(f"the run ended first: {proc.stderr.read().decode()[-500:]}")
            if time.monotonic() > deadline:
                raise RuntimeError("the workers did not start")
            time.sleep(0.2)
        started = descendants(proc.pid)
        listing = (lambda: set(os.listdir(watch)) if watch is not None and watch.exists() else set())
        before = listing()
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        deadline = time.monotonic() + wait_s
        while any(alive(p) for p in started) and time.monotonic() < deadline:
            time.sleep(0.2)
        return {"started": started, "left": [p for p in started if alive(p)], "written": sorted(listing() - before)}
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        for p in descendants(proc.pid):
            if alive(p):
                os.kill(p, signal.SIGKILL)


def crafted_checkpoint(tmp: Path, name: str, arch_kwargs, arch: str = "compact_boundary_net",
                       lightning: bool = False, width: int = 8) -> Path:
    """The tensors of a small compact_boundary_net (``width``) saved with other hyper-parameters,
    slim or as a Lightning checkpoint (``lightning``)."""
    import torch

    from hiseg.models import get_model

    sd = get_model("compact_boundary_net", width=width).state_dict()
    hp = {"arch": arch, "arch_kwargs": arch_kwargs}
    path = Path(tmp) / f"{name}.ckpt"
    if lightning:
        torch.save({"state_dict": {f"model.{k}": v for k, v in sd.items()}, "hyper_parameters": hp, "epoch": 0,
                    "global_step": 0, "pytorch-lightning_version": "2.0.0", "optimizer_states": [],
                    "lr_schedulers": [], "loops": {}, "callbacks": {}}, path)
    else:
        torch.save({"state_dict": sd, "hyper_parameters": hp, "metadata": {}}, path)
    return path


def block_ground_truth(tmp: Path, n: int, height: int, width: int):
    """``tmp/gt`` with ``n`` ground truths of 2 x 2 blocks (``im0.mat``...) and an empty ``tmp/pred``:
    ``(gt, pred, seg)``, ``seg`` the blocks' label image."""
    from tests.metrics.test_metrics_bsds import blocks, write_gt

    gt, pred = Path(tmp) / "gt", Path(tmp) / "pred"
    gt.mkdir()
    pred.mkdir()
    seg = blocks(height, width, 2, 2)
    for k in range(n):
        write_gt(gt / f"im{k}.mat", [seg])
    return gt, pred, seg
