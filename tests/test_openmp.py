"""The training commands' OpenMP threads sleep when they wait (issue 53, item 2): ``python train.py``
used 518 s of CPU at load 5 against 107 s quiet, torch's OpenMP threads spinning through the host
work between parallel regions. ``train.py`` and ``hiseg train`` set ``OMP_WAIT_POLICY=PASSIVE``
before torch loads OpenMP (a user's own setting kept): checked here on what libgomp itself reports
(``OMP_DISPLAY_ENV``: its spin count 0), with the training's CLI replaced by a stub that imports
torch, so no training runs. The CPU it saves is measured, not asserted (``benchmarks/results/training.md``)."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

RUNNER = """
import os, runpy, sys, types
stub = types.ModuleType("hiseg.training.cli")
def main(argv, default_config=None):
    import torch  # loads OpenMP, which reads its settings now
    torch.ones(64).sum()
    print("policy", os.environ.get("OMP_WAIT_POLICY"), flush=True)
stub.main = main
sys.modules["hiseg.training.cli"] = stub
if sys.argv[1] == "train.py":
    sys.argv = ["train.py", "fit"]
    runpy.run_path({train!r}, run_name="__main__")
else:
    from hiseg.cli import main as hiseg_main
    hiseg_main(["train", "fit"])
"""


def run(entry: str, policy=None):
    """(stdout, libgomp's spin count) of ``entry`` (``train.py`` or ``hiseg train``) with the stub CLI."""
    env = {k: v for k, v in os.environ.items() if k != "OMP_WAIT_POLICY"}
    env.update(OMP_DISPLAY_ENV="VERBOSE", PYTHONPATH=os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")]))
    if policy:
        env["OMP_WAIT_POLICY"] = policy
    code = RUNNER.format(train=str(ROOT / "train.py"))
    r = subprocess.run([sys.executable, "-c", code, entry], capture_output=True, text=True, env=env, cwd=ROOT,
                       timeout=600)
    assert r.returncode == 0, r.stderr[-2000:]
    spin = [ln.split("=")[1].strip().strip("'") for ln in r.stderr.splitlines() if "GOMP_SPINCOUNT" in ln]
    if not spin:
        pytest.skip("torch's OpenMP is not GNU libgomp here: it reports no spin count")
    return r.stdout, spin[0]


@pytest.mark.parametrize("entry", ["train.py", "hiseg train"])
def test_the_training_commands_openmp_threads_do_not_spin(entry):
    out, spin = run(entry)
    assert "policy PASSIVE" in out and spin == "0", (out, spin)


def test_a_users_own_wait_policy_is_kept():
    out, spin = run("train.py", policy="ACTIVE")
    assert "policy ACTIVE" in out and spin != "0"


def test_the_setting_says_when_torch_came_first():
    code = ("import os, sys, torch; from hiseg._openmp import passive_openmp_waits; "
            "print(passive_openmp_waits(), os.environ['OMP_WAIT_POLICY'])")
    env = {k: v for k, v in os.environ.items() if k != "OMP_WAIT_POLICY"}
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd=ROOT, timeout=300)
    assert r.stdout.split() == ["False", "PASSIVE"], r.stderr[-2000:]
