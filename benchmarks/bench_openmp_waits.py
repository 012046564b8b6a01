"""OpenMP's wait policy and the CPU a training step burns (issue 53, item 2).

Runs the same steps of the synthetic default's network (forward, backward, AdamW on a batch of 8
128x128 images, then single-threaded host work, as a step's trees and targets) in two processes
started together: OpenMP's default (its threads spin ``GOMP_SPINCOUNT`` pauses after each parallel
region) and ``OMP_WAIT_POLICY=PASSIVE`` (what ``train.py`` sets), with ``--busy N`` processes
spinning beside them as another user's load. Prints each one's CPU time (user + system), wall time
and last loss: the same loss says the policy changed how threads wait, not the work.

    python benchmarks/bench_openmp_waits.py [--steps 30] [--busy 2]

Results: ``benchmarks/results/training.md``, "OpenMP waits".
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys

from provenance import stamp

STEPS = """
import resource, sys, time
import numpy as np, torch
from hiseg.models import get_model
torch.manual_seed(0)
net = get_model("compact_boundary_net")
x = torch.rand(8, 3, 128, 128)
opt = torch.optim.AdamW(net.parameters(), 1e-3)
a = np.random.default_rng(0).random((60, 60))
t0, r0 = time.time(), resource.getrusage(resource.RUSAGE_SELF)
for _ in range(int(sys.argv[1])):
    loss = net(x).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
    for _ in range(20):  # host work between the parallel regions
        np.linalg.svd(a)
        sorted(range(2000), key=lambda v: -v)
r1 = resource.getrusage(resource.RUSAGE_SELF)
print(r1.ru_utime - r0.ru_utime + r1.ru_stime - r0.ru_stime, time.time() - t0, repr(loss.item()))
"""


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--busy", type=int, default=0, help="processes spinning beside the two runs")
    a = ap.parse_args(argv)
    busy = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(a.busy)]
    try:
        base = {k: v for k, v in os.environ.items() if k != "OMP_WAIT_POLICY"}
        runs = {policy: subprocess.Popen([sys.executable, "-c", STEPS, str(a.steps)], stdout=subprocess.PIPE, text=True,
                                         env=dict(base, **({"OMP_WAIT_POLICY": policy} if policy else {})))
                for policy in (None, "PASSIVE")}
        out = {policy: p.communicate()[0].split() for policy, p in runs.items()}
    finally:
        for p in busy:
            p.kill()
            p.wait()
    print(f"| OpenMP wait policy | CPU s | wall s | last loss |  ({a.steps} steps, {a.busy} busy processes, "
          f"load {os.getloadavg()[0]:.1f})")
    print("|---|---|---|---|")
    for policy, (cpu, wall, loss) in out.items():
        print(f"| {policy or 'default (spin, then sleep)'} | {float(cpu):.1f} | {float(wall):.1f} | {loss} |")
    print(f"\n{stamp()}")


if __name__ == "__main__":
    main()
