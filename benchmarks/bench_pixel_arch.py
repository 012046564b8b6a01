"""Candidate networks for the GPU recipe's pixel stage, chosen by training throughput on the CPU.

For each candidate ``compact_boundary_net`` setting: parameters, and the CPU time of one
training step of the pixel stage (forward with side outputs, :func:`hiseg.core.losses.edge_loss`,
backward) on a batch of 320x320 crops, as a ratio to the shipped network's step measured in
the same run. The last columns project a GPU budget from the shipped network's measured
H200 throughput (about 850 crops/s, bf16, ``models/README.md``), assuming the GPU step time
scales like the CPU's (both are dominated by the same convolutions; a rough guide, to be
checked by the first GPU run, which logs its own crops/s): crops/s and crops in the
recipe's pixel budget (``--minutes``).

    python benchmarks/bench_pixel_arch.py [--threads 1] [--batch 4] [--repeats 3] [--minutes 6]
"""
from __future__ import annotations

import argparse
import json
import statistics
import time

import torch

from hiseg.core.losses import edge_loss
from hiseg.models import get_model
from provenance import stamp

SHIPPED = {"width": 32, "blocks": [2, 2, 3, 3], "side_channels": 16}
CANDIDATES = [
    SHIPPED,
    {"width": 40, "blocks": [2, 2, 3, 3], "side_channels": 16},
    {"width": 48, "blocks": [2, 2, 3, 3], "side_channels": 16},
    {"width": 32, "blocks": [3, 3, 4, 4], "side_channels": 16},
    {"width": 40, "blocks": [3, 3, 4, 4], "side_channels": 16},
    {"width": 48, "blocks": [1, 2, 2, 3], "side_channels": 16},
]
H200_SHIPPED_CROPS_PER_S = 850.0


def step_seconds(kwargs, batch, repeats):
    torch.manual_seed(0)
    net = get_model("compact_boundary_net", **kwargs).train()
    x = torch.rand(batch, 3, 320, 320)
    pos = torch.rand(batch, 320, 320) > 0.9
    neg = ~pos
    times = []
    for i in range(repeats + 1):
        t = time.process_time()
        fused, sides = net(x, return_side_outputs=True)
        edge_loss(fused, sides, pos, neg).backward()
        if i:
            times.append(time.process_time() - t)
    return sum(p.numel() for p in net.parameters()), statistics.median(times)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--minutes", type=float, default=6.0, help="pixel-stage minutes of the GPU recipe")
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    rows = [(kw, *step_seconds(kw, args.batch, args.repeats)) for kw in CANDIDATES]
    base = rows[0][2]
    print(f"CPU: {args.threads} thread(s), batch {args.batch} x 320x320, median of {args.repeats} steps "
          f"(process CPU time); projection from the shipped network's {H200_SHIPPED_CROPS_PER_S:.0f} crops/s on "
          f"an H200, {args.minutes:g} min\n")
    print("| arch_kwargs | parameters | CPU s / step | x shipped | projected H200 crops/s | crops in budget |")
    print("|---|---|---|---|---|---|")
    for kw, n, t in rows:
        rate = H200_SHIPPED_CROPS_PER_S * base / t
        print(f"| `{json.dumps(kw)}` | {n:,} | {t:.2f} | {t / base:.2f} | {rate:.0f} | {rate * 60 * args.minutes:,.0f} |")
    print(f"\n{stamp()}")


if __name__ == "__main__":
    main()
