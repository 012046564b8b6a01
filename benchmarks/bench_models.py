"""Speed of the boundary networks on the CPU; prints a markdown table.

For each model: parameter count, forward time (eval mode, no grad) and forward+backward
time (train mode, loss on the fused and side outputs) for two workloads:

* ``8x128x128``: a small training batch (the CPU training target of the compact net);
* ``8x320x320``: a training batch of 8 crops of 320 x 320;
* ``1x321x481``: one full BSDS500 image (H x W = 321 x 481).

Times are wall-clock medians of ``--repeats`` runs after one warm-up; ``CPU s`` is the
process CPU time (all threads) of one forward+backward, which other processes on the
machine inflate much less than wall time.  The ``floor`` column is a
single 3x3 convolution 3 -> 16 channels on the same input (forward), measured in the same
run, so the ``x floor`` ratios compare across machines.

Usage::

    python benchmarks/bench_models.py [--threads 2] [--repeats 3] [--models compact_boundary_net ...]
"""
from __future__ import annotations

import argparse
import os
import statistics
import time

import torch

from hiseg.models import get_model, list_models
from provenance import stamp

WORKLOADS = {"8x128x128": (8, 128, 128), "8x320x320": (8, 320, 320), "1x321x481": (1, 321, 481)}


def _median_time(fn, repeats: int) -> tuple[float, float]:
    """(median wall seconds, median process CPU seconds) of ``fn()``."""
    fn()  # warm-up
    ts, cs = [], []
    for _ in range(repeats):
        c = time.process_time()
        t = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t)
        cs.append(time.process_time() - c)
    return statistics.median(ts), statistics.median(cs)


def bench(model: torch.nn.Module, x: torch.Tensor, repeats: int) -> tuple[float, float, float]:
    """(forward s, forward+backward s, forward+backward CPU s) for input ``x``."""

    def fwd():
        model.eval()
        with torch.no_grad():
            model(x)

    def fwd_bwd():
        model.train()
        model.zero_grad(set_to_none=True)
        fused, sides = model(x, return_side_outputs=True)
        (fused.mean() + sum(s.mean() for s in sides)).backward()

    tf, _ = _median_time(fwd, repeats)
    tfb, cfb = _median_time(fwd_bwd, repeats)
    return tf, tfb, cfb


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--models", nargs="*", default=list_models())
    ap.add_argument("--workloads", nargs="*", default=list(WORKLOADS), choices=list(WORKLOADS))
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)

    floor_conv = torch.nn.Conv2d(3, 16, 3, padding=1)
    inputs = {k: torch.rand(b, 3, h, w) for k, (b, h, w) in WORKLOADS.items() if k in args.workloads}
    floors = {}
    with torch.no_grad():
        for k, x in inputs.items():
            floors[k] = _median_time(lambda: floor_conv(x), max(args.repeats, 5))[0]

    print(
        f"CPU, torch {torch.__version__}, {torch.get_num_threads()} threads, median of {args.repeats} runs "
        f"after one warm-up; load average at start {os.getloadavg()[0]:.2f} (other processes skew times)\n"
    )
    print("| model | params | input | fwd (ms) | fwd+bwd (ms) | fwd+bwd / image (ms) | fwd+bwd CPU s | fwd x floor | fwd+bwd x floor |")
    print("|---|---:|---|---:|---:|---:|---:|---:|---:|")
    for k, fl in floors.items():
        print(f"| floor: conv3x3 3->16 | 448 | {k} | {fl * 1e3:.1f} | | | | 1 | |")
    for name in args.models:
        model = get_model(name)
        n = sum(p.numel() for p in model.parameters())
        for k, x in inputs.items():
            tf, tfb, cfb = bench(model, x, args.repeats)
            b = x.shape[0]
            print(
                f"| {name} | {n / 1e6:.3f} M | {k} | {tf * 1e3:.0f} | {tfb * 1e3:.0f} | {tfb * 1e3 / b:.0f} | {cfb:.2f} "
                f"| {tf / floors[k]:.0f} | {tfb / floors[k]:.0f} |",
                flush=True,
            )
    print(f"\nload average at end {os.getloadavg()[0]:.2f}\n\n{stamp()}")


if __name__ == "__main__":
    main()
