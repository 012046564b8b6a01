"""Host work of one pixel-stage step of pdc_boundary_net: this revision's kernels against another's, paired.

Why: on a GPU every aten call of a step is host time (dispatch, autograd, a kernel launch), and the
pixel stage's 32-crop steps are short enough on an H200 for the host to bound them once nothing
synchronises (issue 45). The 16 pixel-difference layers rebuild their kernels at every step; this
measures what that costs on the host, with the step's code otherwise unchanged: ``--before``'s
``pdc_kernel`` (read from git, patched in) and this tree's, alternated A B A B in one process.

Per version: aten calls of one whole step (forward, edge loss, backward, AdamW; counted at the
dispatcher, CPU, crops of 32 x 32 so that compute stays small), and the median milliseconds of the 16
kernels' construction and backward alone (one CPU thread). The kernels and their gradients are
checked equal bit for bit first. Command::

    python benchmarks/bench_pixel_step_host.py --before 2282d74 [--runs 7] [--table benchmarks/results/pixel_step_host.md]
"""
from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time
import types
import warnings
from pathlib import Path

import numpy as np
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from provenance import write_stamped

ROOT = Path(__file__).resolve().parents[1]


def kernel_at(rev: str):
    """``pdc_kernel`` as it was at git revision ``rev`` (its module run in hiseg.models' namespace)."""
    src = subprocess.run(["git", "-C", str(ROOT), "show", f"{rev}:hiseg/models/pdc_net.py"], check=True,
                         capture_output=True, text=True).stdout
    mod = types.ModuleType("hiseg.models._pdc_net_at_" + rev)
    mod.__package__ = "hiseg.models"
    exec(compile(src, f"{rev}:hiseg/models/pdc_net.py", "exec"), mod.__dict__)
    return mod.pdc_kernel


class _Calls(TorchDispatchMode):
    def __init__(self):
        super().__init__()
        self.n = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.n += 1
        return func(*args, **(kwargs or {}))


def step_fn():
    """One pixel-stage step of pdc_boundary_net width 40 (32 crops of 32 x 32), as the module runs it."""
    from hiseg.data.edges import BSDS500PixelDataModule
    from hiseg.training.module import HierarchicalSegmentationModule

    rng = np.random.default_rng(0)
    dm = BSDS500PixelDataModule.from_arrays(rng.integers(0, 256, (4, 3, 64, 64), dtype=np.uint8),
                                            rng.random((4, 64, 64)).astype(np.float32), crop_size=32, batch_size=32,
                                            crops_per_epoch=10 ** 6)
    m = HierarchicalSegmentationModule(arch="pdc_boundary_net", arch_kwargs={"width": 40}, closest_weight=0,
                                       triplet_weight=0, pixel_loss="edge", pixel_weight=1.0)
    m.finite_guard.due = lambda *a: False  # a GPU's step between checks
    opt = torch.optim.AdamW(m.parameters(), lr=1e-3)
    dm.setup("fit")
    keys = iter(dm.train_dataloader())

    def step():
        batch = dm.on_after_batch_transfer(next(keys), 0)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # self.log without a trainer
            loss = m.training_step(batch, 0)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    return m, step


def measure(before_fn, own, rev: str, runs: int):
    """(kernels and gradients equal, aten calls per step, kernel ms per run, layers) of both versions."""
    from hiseg.models import pdc_net

    versions = {f"before ({rev})": before_fn, "this tree": own}
    m, step = step_fn()
    convs = [c for c in m.modules() if isinstance(c, pdc_net.PixelDifferenceConv2d)]
    k0 = [before_fn(c.weight, c.kind) for c in convs]
    k1 = [own(c.weight, c.kind) for c in convs]
    g = [torch.randn(k.shape, generator=torch.Generator().manual_seed(i)) for i, k in enumerate(k0)]
    same = all(torch.equal(x, y) for x, y in zip(k0, k1)) and all(
        torch.equal(*(torch.autograd.grad(k, c.weight, gi)[0] for k in (x, y))) for x, y, c, gi in zip(k0, k1, convs, g))
    calls, times = {}, {v: [] for v in versions}
    for name, fn in versions.items():
        pdc_net.pdc_kernel = fn
        step()  # warm (and the gather's index made once)
        with _Calls() as c:
            step()
        calls[name] = c.n

    def kernels():
        s = sum(c.kernel().sum() for c in convs)
        s.backward()

    for _ in range(runs):  # A B A B
        for name, fn in versions.items():
            pdc_net.pdc_kernel = fn
            for _ in range(3):
                kernels()
            t = time.perf_counter()
            for _ in range(50):
                kernels()
            times[name].append((time.perf_counter() - t) / 50 * 1e3)
    return same, calls, times, len(convs)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--before", required=True, help="the git revision to compare with")
    p.add_argument("--runs", type=int, default=7)
    p.add_argument("--table", help="write the markdown table there too")
    a = p.parse_args(argv)
    from hiseg.models import pdc_net

    threads, own = torch.get_num_threads(), pdc_net.pdc_kernel
    torch.set_num_threads(1)
    try:
        same, calls, times, layers = measure(kernel_at(a.before), own, a.before, a.runs)
    finally:  # the process (a test's) gets its threads and its kernels back
        torch.set_num_threads(threads)
        pdc_net.pdc_kernel = own

    base = f"before ({a.before})"
    lines = ["| version | aten calls per step | kernels fwd+bwd, ms (median of %d) | ratio before / this |" % a.runs,
             "|---|---:|---:|---:|"]
    for name in times:
        med = statistics.median(times[name])
        lines.append(f"| {name} | {calls[name]} | {med:.2f} | "
                     f"{statistics.median(times[base]) / med:.2f} |")
    out = "\n".join(lines) + (f"\n\nKernels and gradients bit for bit equal: {'yes' if same else 'NO'}. "
                               f"pdc_boundary_net width 40, {layers} pixel-difference layers, one CPU thread, "
                               f"torch {torch.__version__}.")
    print(out)
    if a.table:
        write_stamped(a.table, "# Host work of a pixel-stage step (`benchmarks/bench_pixel_step_host.py`)\n\n" + out)
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
