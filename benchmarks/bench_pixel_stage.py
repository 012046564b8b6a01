"""Speed of the pixel stage: crops/s of the real training step next to its floor.

**The real step** is the one training runs: Lightning's ``Trainer.fit`` of
:class:`hiseg.training.module.HierarchicalSegmentationModule` set up as the pixel stage
(``configs/bsds500_pixel.yaml``'s model settings, with ``--arch`` and ``--arch-kwargs``)
on :class:`hiseg.data.edges.BSDS500PixelDataModule`'s batch path: one key per step, the
crops' random numbers drawn on the device, 16 rotations, flips, log-uniform scales and
colour jitter cut from the device-resident uint8 image set, then forward, loss, backward,
AdamW step and learning-rate schedule, *with* the Trainer's per-step overhead (hooks,
logging, the finite-loss guard) and the module's channels-last on CUDA. No logger, no
checkpoint, no validation. The image set is synthetic (``--images`` random images of
BSDS500's 321x481 with random labels: the speed does not depend on the content), or real
with ``--data`` (a BSDS500 folder or a ``pack_edge_dataset`` file).

**The floor** is the same network's bare forward (with its side outputs) + backward on a
random device tensor of the batch's shape, in the same precision and memory format, no
data, no loss, no optimiser: what the step would cost if everything else were free. It is
measured before and after the real step; the faster of the two is the floor.

Both are timed wall-clock for ``--seconds`` each after ``--warmup`` steps, with the device
synchronised at both ends of the timed window only (the host may run ahead of the GPU in
between, as in training). Prints the table and appends one row to ``--results`` (default
``benchmarks/results/pixel_stage.md``): ``device | network | crops/s | floor crops/s | ratio``, its
stamp (revision, date, machine, command) in the list below the table.
Goal on one H100/H200 (issue 33): ratio >= 0.8 and >= 915 crops/s (3x the pace of the first GPU
sessions: ``benchmarks/results/gpu.md``). On the CPU the goal is only to run: ``--device cpu`` at a
tiny setting.

    python benchmarks/bench_pixel_stage.py [--device auto|cpu|cuda] [--arch compact_boundary_net]
        [--arch-kwargs JSON] [--batch 32] [--crop 320] [--seconds 15] [--precision bf16-mixed]
        [--warmup 10] [--images 200] [--data PATH] [--compile MODE] [--threads N] [--results FILE]

Cost: about ``3 * seconds`` plus the start (Lightning, the network, cuDNN's autotuning).
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np
import torch

from provenance import append_rows

RESULTS = Path(__file__).resolve().parent / "results" / "pixel_stage.md"
HEADER = """# Pixel stage speed (benchmarks/bench_pixel_stage.py)

crops/s: the real training step through Lightning's Trainer (device draws and augmentation, forward,
edge loss, backward, AdamW, schedule, the Trainer's per-step overhead); floor: the same network's
bare forward + backward on a random device tensor of the same shape and precision. One row per run;
CPU rows are tiny settings on a shared machine (noisy), GPU rows the settings named.

| device | network | crops/s | floor crops/s | ratio |
|---|---|---:|---:|---:|
"""
PRECISIONS = ("32-true", "bf16-mixed", "16-mixed")
#: the pixel stage's model settings (loss, optimiser, schedule, pipeline) are the config's
CONFIG = Path(__file__).resolve().parents[1] / "configs" / "bsds500_pixel.yaml"


def pixel_model_settings() -> dict:
    """``configs/bsds500_pixel.yaml``'s ``model`` section without the network."""
    import yaml

    model = dict(yaml.safe_load(CONFIG.read_text())["model"])
    for k in ("arch", "arch_kwargs"):
        model.pop(k, None)
    return model


def parse(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--device", default="auto", help="auto (cuda if available), cpu, cuda or cuda:N")
    p.add_argument("--arch", default="compact_boundary_net", help="a registered network (hiseg.models)")
    p.add_argument("--arch-kwargs", default='{"width": 32, "blocks": [2, 2, 3, 3], "side_channels": 16}',
                   help="the network's settings, JSON")
    p.add_argument("--batch", type=int, default=32, help="crops per step")
    p.add_argument("--crop", type=int, default=320, help="side of the crops")
    p.add_argument("--seconds", type=float, default=15.0, help="timed seconds of each measurement")
    p.add_argument("--warmup", type=int, default=10, help="steps before the timed window")
    p.add_argument("--precision", default=None, help=f"one of {PRECISIONS} (default: bf16-mixed on CUDA, else 32-true)")
    p.add_argument("--images", type=int, default=200, help="synthetic images (without --data)")
    p.add_argument("--data", default=None, help="BSDS500 folder or pack_edge_dataset file (train split)")
    p.add_argument("--compile", default=None, metavar="MODE",
                   help="torch.compile the network in place (default, reduce-overhead, max-autotune); off by default")
    p.add_argument("--threads", type=int, default=None, help="torch threads (CPU)")
    p.add_argument("--results", default=str(RESULTS), help="markdown table to append the row to ('' : none)")
    a = p.parse_args(argv)
    try:
        a.arch_kwargs = json.loads(a.arch_kwargs)
    except json.JSONDecodeError as e:
        p.error(f"--arch-kwargs is not JSON: {e}")
    if not isinstance(a.arch_kwargs, dict):
        p.error(f"--arch-kwargs must be a JSON object, got {a.arch_kwargs!r}")
    if a.device == "auto":
        a.device = "cuda" if torch.cuda.is_available() else "cpu"
    if a.device.startswith("cuda") and not torch.cuda.is_available():
        p.error(f"--device {a.device}: CUDA is not available here")
    if a.device != "cpu" and not a.device.startswith("cuda"):
        p.error(f"--device must be auto, cpu or cuda[:N], got {a.device!r}")
    a.precision = a.precision or ("bf16-mixed" if a.device.startswith("cuda") else "32-true")
    if a.precision not in PRECISIONS:
        p.error(f"--precision must be one of {PRECISIONS}, got {a.precision!r}")
    for name in ("batch", "crop", "warmup", "images"):
        if getattr(a, name) < 1:
            p.error(f"--{name} must be >= 1, got {getattr(a, name)}")
    if a.crop < 16:
        p.error(f"--crop must be >= 16, got {a.crop}")
    if not a.seconds > 0:
        p.error(f"--seconds must be > 0, got {a.seconds}")
    return a


def device_name(device: torch.device) -> str:
    """The device as ``torch.cuda`` names it, or ``cpu (N threads)``."""
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    return f"cpu ({torch.get_num_threads()} threads)"


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _autocast(device: torch.device, precision: str):
    if precision == "32-true":
        return torch.autocast(device.type, enabled=False)
    return torch.autocast(device.type, dtype=torch.bfloat16 if precision.startswith("bf16") else torch.float16)


def floor(args, device: torch.device) -> float:
    """crops/s of the network's bare forward + backward on a random device tensor."""
    from hiseg.models import get_model

    from hiseg.training.steps import channels_last_agrees, precision_dtype

    net = get_model(args.arch, **args.arch_kwargs).to(device).train()
    x = torch.rand(args.batch, 3, args.crop, args.crop, device=device)
    # channels-last on CUDA where the module's check (at its fit start) lets it run that layout
    if device.type == "cuda" and channels_last_agrees(net, device, precision_dtype(args.precision)):
        net, x = net.to(memory_format=torch.channels_last), x.contiguous(memory_format=torch.channels_last)
    elif device.type == "cuda":
        args.layout = "plain layout: channels-last failed hiseg.training.steps.channels_last_agrees"
    if args.compile:
        net.compile(mode=None if args.compile == "default" else args.compile)

    def step():
        net.zero_grad(set_to_none=True)
        with _autocast(device, args.precision):
            fused, sides = net(x, return_side_outputs=True)
        loss = fused.float().mean() + sum(s.float().mean() for s in sides)
        loss.backward()

    for _ in range(args.warmup):
        step()
    _sync(device)
    t0, n = time.perf_counter(), 0
    while time.perf_counter() - t0 < args.seconds:
        step()
        n += 1
    _sync(device)
    return n * args.batch / (time.perf_counter() - t0)


def real_step(args, device: torch.device) -> tuple[float, int]:
    """crops/s of the pixel stage's training step through ``Trainer.fit``; and its step count."""
    import pytorch_lightning as pl

    from hiseg.training.callbacks import CompileNetwork
    from hiseg.data.edges import BSDS500PixelDataModule, load_edge_dataset
    from hiseg.training.module import HierarchicalSegmentationModule

    if args.data:
        images, cons = load_edge_dataset(args.data, "train")
    else:  # BSDS500's size; labels: sparse random boundaries of 1..5 annotators out of 5
        rng = np.random.default_rng(0)
        images = rng.integers(0, 256, (args.images, 3, 321, 481), dtype=np.uint8)
        cons = (rng.random((args.images, 321, 481)) < 0.05) * rng.integers(1, 6, (args.images, 321, 481)) / 5.0
    dm = BSDS500PixelDataModule.from_arrays(images, cons.astype(np.float32), crop_size=args.crop,
                                            batch_size=args.batch, crops_per_epoch=args.batch * 100_000)
    module = HierarchicalSegmentationModule(arch=args.arch, arch_kwargs=args.arch_kwargs, **pixel_model_settings())

    class Clock(pl.Callback):
        steps, t0, rate = 0, None, None

        def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
            self.steps += 1
            if self.steps == args.warmup:
                _sync(device)
                self.t0, self.n0 = time.perf_counter(), self.steps
            elif self.t0 is not None and time.perf_counter() - self.t0 >= args.seconds:
                _sync(device)
                self.rate = (self.steps - self.n0) * args.batch / (time.perf_counter() - self.t0)
                trainer.should_stop = True

    clock = Clock()
    callbacks = [clock]
    if args.compile:  # the training option (off by default)
        callbacks.append(CompileNetwork(mode=None if args.compile == "default" else args.compile))
    trainer = pl.Trainer(accelerator=device.type, devices=[device.index or 0] if device.type == "cuda" else 1,
                         precision=args.precision, max_steps=10 ** 9, limit_val_batches=0, num_sanity_val_steps=0,
                         logger=False, enable_checkpointing=False, enable_progress_bar=False,
                         enable_model_summary=False, benchmark=True, callbacks=callbacks, log_every_n_steps=50)
    trainer.fit(module, datamodule=dm)
    if clock.rate is None:
        raise RuntimeError("the training run stopped before its timed window ended")
    return clock.rate, clock.steps


def network_cell(args, params: int) -> str:
    kw = json.dumps(args.arch_kwargs, separators=(", ", ": "))
    extra = f", compiled ({args.compile})" if args.compile else ""
    extra += f", {args.layout}" if getattr(args, "layout", None) else ""
    return (f"{args.arch} `{kw}` ({params / 1e3:.0f}k parameters); {args.batch} crops of {args.crop}x{args.crop}, "
            f"{args.precision}{extra}")


def append_row(path: Path, row: list) -> None:
    """Append ``row`` to the markdown table at ``path`` (written with its header if absent), its
    stamp in the list below the table (``provenance.append_rows``)."""
    append_rows(path, ["| " + " | ".join(str(c) for c in row) + " |"], HEADER)


def main(argv=None) -> int:
    import warnings

    args = parse(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    warnings.filterwarnings("ignore", module="pytorch_lightning")
    warnings.filterwarnings("ignore", message=".*(num_workers|does not have many workers|self.log).*")
    device = torch.device(args.device)
    if device.type == "cuda":
        torch.backends.cudnn.benchmark = True
    from hiseg.models import get_model

    params = sum(p.numel() for p in get_model(args.arch, **args.arch_kwargs).parameters())
    t0 = time.perf_counter()
    first = floor(args, device)
    real, steps = real_step(args, device)
    second = floor(args, device)
    best = max(first, second)
    row = [device_name(device), network_cell(args, params), f"{real:.1f}", f"{best:.1f}", f"{real / best:.2f}"]
    print(HEADER.splitlines()[-2])
    print(HEADER.splitlines()[-1])
    print("| " + " | ".join(row) + " |")
    print(f"\nfloor before / after the real step: {first:.1f} / {second:.1f} crops/s; real step: {steps} steps "
          f"({args.warmup} of warm-up); {time.perf_counter() - t0:.0f} s in all")
    if args.results:
        append_row(Path(args.results), row)
        print(f"row appended to {args.results}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
