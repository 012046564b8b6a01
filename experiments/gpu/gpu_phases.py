"""train.py with the pixel stage's start-up phases, its rate and its floor in the log (issue 57):
what experiments/gpu/gpu_run.py runs instead of ``python train.py``, with the same arguments.

    python experiments/gpu/gpu_phases.py fit --config configs/bsds500_pdc_pixel.yaml ...

It runs :func:`hiseg.training.cli.main` as train.py does, with one more callback, :class:`Phases`
(``--trainer.callbacks+=gpu_phases.Phases``; a class from outside hiseg, hence ``--trust-config``),
which prints, in the run's output, one ``[gpu_phases]`` line per phase before the first step, each
with the seconds since the command started (``$GPU_PHASES_T0``, Unix seconds, set by gpu_run.py;
else this process's start) and since the previous phase:

* ``train.py started`` (the interpreter is up), ``imports done`` (torch, Lightning, hiseg's CLI),
  ``built`` (the options parsed, the network and the data module built), ``data ready`` (the data
  module's setup: the training images decoded, the validation set read), ``checkpoint read`` (a
  resume's file loaded), ``model restored`` (on the device, optimiser and loops restored, the fit's
  start hooks run: the module's channels-last check, run here with cuDNN's heuristics rather than its
  autotuning, which is back on before the floor and the training), ``floor measured``, ``first step`` (its end, the device synchronised once);
* ``floor:`` the network's bare forward + backward (with its side outputs) on a random tensor of
  the step's batch shape, in the run's precision and memory layout, no data, no loss, no optimiser
  (benchmarks/bench_pixel_stage.py's floor), timed for ``$GPU_PHASES_FLOOR_SECONDS`` (default 3;
  0: not measured) after two untimed steps, on a copy of the network in ``on_train_start`` (the
  trained network, its BatchNorm statistics and every random stream are left as they were; the
  untimed steps run cuDNN's autotuning that the first step would run anyway; a training under
  torch.compile is set against the eager network's floor);
* ``rate:`` the steps after the first one over their wall-clock seconds, validation left out,
  every ``$GPU_PHASES_EVERY`` (500) steps and at the fit's end (a command killed before its end
  keeps its last one).

:func:`row` turns such a log into a row of benchmarks/results/pixel_stage.md
(``gpu_choices.py row LOG`` prints it; gpu_run.py appends it to OUT/pixel_stage.md).
"""
from __future__ import annotations

import json
import os
import re
import sys
import time

from pathlib import Path

_STARTED = time.time()
ROOT = Path(__file__).resolve().parents[2]
PREFIX = "[gpu_phases]"


def _t0() -> float:
    try:
        return float(os.environ["GPU_PHASES_T0"])
    except (KeyError, ValueError):
        return _STARTED


class _Clock:
    """Prints the phases: seconds since the command's start, and since the previous phase."""

    def __init__(self):
        self.last = _t0()

    def __call__(self, phase: str, extra: str = "") -> None:
        now = time.time()
        print(f"{PREFIX} {phase} at +{now - _t0():.1f} s (+{now - self.last:.1f} s){extra}", flush=True)
        self.last = now


_clock = _Clock()


def __getattr__(name):  # Phases is built on first use: importing this module imports no Lightning
    if name == "Phases":
        globals()["Phases"] = _phases_class()
        return globals()["Phases"]
    raise AttributeError(name)


def _phases_class():
    import pytorch_lightning as pl

    class Phases(pl.Callback):
        """The phases, the floor and the rate (see the module docstring); changes nothing in the fit."""

        def __init__(self):
            super().__init__()
            self.clock = _clock
            self.floor_seconds = float(os.environ.get("GPU_PHASES_FLOOR_SECONDS", "3"))
            self.every = max(1, int(os.environ.get("GPU_PHASES_EVERY", "500")))
            self.first = None  # (time, global step) at the first step's end
            self.val_seconds, self._val_start = 0.0, None
            self.crops = None
            self.clock("built")

        def setup(self, trainer, pl_module, stage: str) -> None:
            self.clock("data ready")  # the data module's setup runs before the callbacks'

        def on_fit_start(self, trainer, pl_module) -> None:
            # the module's layout check (channels_last_agrees, in its on_fit_start, after this hook) runs its two
            # small copies with cuDNN's heuristics instead of autotuning every convolution of a shape the training
            # never runs, in both layouts; on_train_start turns the trainer's autotuning back on for the training
            import torch

            self._benchmark = torch.backends.cudnn.benchmark
            if pl_module.device.type == "cuda" and self._benchmark:
                torch.backends.cudnn.benchmark = False

        def on_load_checkpoint(self, trainer, pl_module, checkpoint) -> None:
            self.clock("checkpoint read", f" (step {checkpoint.get('global_step', '?')})")

        def on_train_start(self, trainer, pl_module) -> None:
            import torch

            torch.backends.cudnn.benchmark = getattr(self, "_benchmark", torch.backends.cudnn.benchmark)
            self.clock("model restored", f" (step {trainer.global_step})")
            dm = trainer.datamodule
            self.crops = int(getattr(dm, "batch_size", 0) or 0)
            crop = int(getattr(dm, "crop_size", 0) or 0)
            device = pl_module.device
            name = torch.cuda.get_device_name(device) if device.type == "cuda" else f"cpu ({torch.get_num_threads()} threads)"
            precision = str(trainer.precision)
            hp = pl_module.hparams
            kw = json.dumps(dict(hp.get("arch_kwargs") or {}), separators=(", ", ": "))
            params = sum(p.numel() for p in pl_module.model.parameters())
            compiled = pl_module.__dict__.get("_train_network") is not None
            layout = ", channels-last" if getattr(pl_module, "_channels_last", False) else ""
            print(f"{PREFIX} device: {name}", flush=True)
            print(f"{PREFIX} network: {hp.get('arch')} `{kw}` ({params / 1e3:.0f}k parameters); {self.crops} crops of "
                  f"{crop}x{crop}, {precision}{', compiled (default)' if compiled else ''}", flush=True)
            if self.floor_seconds > 0 and self.crops and crop:
                try:
                    n, secs = floor(pl_module.model, device, self.crops, crop, precision,
                                    getattr(pl_module, "_channels_last", False), self.floor_seconds)
                    print(f"{PREFIX} floor: {n} bare forward+backward steps of {self.crops} crops of {crop}x{crop} "
                          f"({precision}{layout}) in {secs:.2f} s: {n * self.crops / secs:.2f} crops/s", flush=True)
                except Exception as e:  # the floor is a measurement: the training goes on without it
                    print(f"{PREFIX} floor: failed ({type(e).__name__}: {e})", flush=True)
                self.clock("floor measured")

        def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
            if self.first is None:
                _sync(pl_module.device)
                self.first = (time.time(), trainer.global_step)
                self.clock("first step", f" (step {trainer.global_step})")
            elif (trainer.global_step - self.first[1]) % self.every == 0:
                self._rate(trainer)

        def on_validation_start(self, trainer, pl_module) -> None:
            if self.first is not None:
                _sync(pl_module.device)
                self._val_start = time.time()

        def on_validation_end(self, trainer, pl_module) -> None:
            if self._val_start is not None:
                self.val_seconds += time.time() - self._val_start
                self._val_start = None

        def on_train_end(self, trainer, pl_module) -> None:
            if self.first is not None:
                _sync(pl_module.device)
                self._rate(trainer)

        def _rate(self, trainer) -> None:
            t0, s0 = self.first
            steps = trainer.global_step - s0
            secs = time.time() - t0 - self.val_seconds
            if steps > 0 and secs > 0:
                print(f"{PREFIX} rate: {steps} steps (to step {trainer.global_step}) in {secs:.2f} s after the first step "
                      f"(validation's {self.val_seconds:.1f} s left out): {steps / secs:.4f} steps/s x {self.crops} crops "
                      f"= {steps / secs * self.crops:.2f} crops/s", flush=True)

    Phases.__module__, Phases.__qualname__ = "gpu_phases", "Phases"  # its class path
    return Phases


def _sync(device) -> None:
    import torch

    if device.type == "cuda":
        torch.cuda.synchronize(device)


def floor(model, device, batch: int, crop: int, precision: str, channels_last: bool, seconds: float):
    """(steps, seconds) of the bare forward (side outputs too) + backward of a copy of ``model`` on a
    random ``batch`` x 3 x ``crop`` x ``crop`` tensor of ``device``, two untimed steps first, then
    steps for ``seconds`` (at least two); every random stream of the process as it was before."""
    import copy

    import torch

    net = copy.deepcopy(model).to(device).train()
    fmt = torch.channels_last if channels_last else torch.contiguous_format
    net = net.to(memory_format=fmt)
    gen = torch.Generator(device=device).manual_seed(0)
    x = torch.rand(batch, 3, crop, crop, generator=gen, device=device).contiguous(memory_format=fmt)
    dtype = torch.bfloat16 if precision.startswith("bf16") else torch.float16 if precision.startswith("16") else None

    def step():
        net.zero_grad(set_to_none=True)
        with torch.autocast(device.type, dtype=dtype or torch.float32, enabled=dtype is not None):
            fused, sides = net(x, return_side_outputs=True)
        loss = fused.float().mean() + sum(s.float().mean() for s in sides)
        loss.backward()

    devices = [device.index or 0] if device.type == "cuda" else []
    with torch.random.fork_rng(devices=devices, device_type=device.type if device.type == "cuda" else "cuda"):
        for _ in range(2):
            step()
        _sync(device)
        t0, n = time.perf_counter(), 0
        while n < 2 or time.perf_counter() - t0 < seconds:
            step()
            n += 1
        _sync(device)
        secs = time.perf_counter() - t0
    del net, x
    if device.type == "cuda":
        torch.cuda.empty_cache()
    return n, secs


# ----------------------------------------------------------------------------------------------- the row
_RATE = re.compile(r"rate: (\d+) steps \(to step (\d+)\) in ([\d.]+) s .*?: ([\d.]+) steps/s x (\d+) crops = ([\d.]+)")
_FLOOR = re.compile(r"floor: (\d+) bare .* in ([\d.]+) s: ([\d.]+) crops/s")
_PHASE = re.compile(r"^(.*?) at \+([\d.]+) s \(\+([\d.]+) s\)")


def parse(text: str) -> dict:
    """The last train.py run's ``[gpu_phases]`` lines of a log: ``device``, ``network``, ``floor``
    (crops/s), ``rate`` (crops/s, its steps, last step, seconds), ``phases`` {name: (since the
    command's start, since the previous phase)}; keys without a line are absent."""
    lines = [ln.split(PREFIX, 1)[1].strip() for ln in text.splitlines() if PREFIX in ln]
    starts = [i for i, ln in enumerate(lines) if ln.startswith("train.py started")]
    lines = lines[starts[-1]:] if starts else lines
    out: dict = {"phases": {}}
    for ln in lines:
        if ln.startswith("device: "):
            out["device"] = ln[len("device: "):]
        elif ln.startswith("network: "):
            out["network"] = ln[len("network: "):]
        elif (m := _FLOOR.match(ln)):
            out["floor"] = float(m.group(3))
        elif (m := _RATE.match(ln)):
            out["rate"] = {"crops": float(m.group(6)), "steps": int(m.group(1)), "last": int(m.group(2)),
                           "seconds": float(m.group(3)), "steps_per_s": float(m.group(4)), "batch": int(m.group(5))}
        elif (m := _PHASE.match(ln)):
            out["phases"][m.group(1)] = (float(m.group(2)), float(m.group(3)))
    return out


def row(text: str, date: str = "") -> str:
    """The row of benchmarks/results/pixel_stage.md (``device | network | crops/s | floor crops/s |
    ratio``) of a log's last pixel-stage run (:func:`parse`): the training's crops/s after its first
    step, next to the floor measured in the same run. ValueError when the log has no rate."""
    p = parse(text)
    if "rate" not in p or "device" not in p or "network" not in p:
        raise ValueError("the log has no [gpu_phases] rate, device or network line (a run that did not "
                         "get past its first step, or not run through experiments/gpu/gpu_phases.py)")
    r = p["rate"]
    floor_ = p.get("floor")
    first = p["phases"].get("first step", (None,))[0]
    note = (f"training (gpu_run.py{', ' + date if date else ''}: {r['steps']} steps to step {r['last']} in "
            f"{r['seconds']:.0f} s after the first step{f', which ended {first:.0f} s into the command' if first else ''})")
    cells = [p["device"], f"{p['network']}, {note}", f"{r['crops']:.1f}",
             f"{floor_:.1f}" if floor_ else "–", f"{r['crops'] / floor_:.2f}" if floor_ else "–"]
    return "| " + " | ".join(c.replace("|", "/") for c in cells) + " |"


def phases_line(text: str) -> str:
    """The start-up phases of a log's last run, one line: ``name +s`` each (since the previous)."""
    ph = parse(text)["phases"]
    return "; ".join(f"{k} {v[1]:.1f} s" for k, v in ph.items()) + (
        f" (first step's end at +{ph['first step'][0]:.1f} s)" if "first step" in ph else "")


def _option(argv, name: str, default=None):
    """The value of ``--name V`` / ``--name=V`` in ``argv`` (the last given), else ``default``."""
    value = default
    for i, a in enumerate(argv):
        if a == name and i + 1 < len(argv):
            value = argv[i + 1]
        elif a.startswith(name + "="):
            value = a.split("=", 1)[1]
    return value


def _preload(argv) -> None:
    """The packed training images (``--data.init_args.train_data``) decoded in a thread while the rest
    of the training's imports run (hiseg.data.edges.preload_edge_dataset: the data module's setup then
    takes the same arrays); torch and hiseg.data.edges are imported first, here (no import runs in two
    threads at once). Nothing without that option (the split and limit as the command gives them, or
    the data module's defaults; none where ``$GPU_PHASES_PRELOAD`` is 0)."""
    data = _option(argv, "--data.init_args.train_data")
    if os.environ.get("GPU_PHASES_PRELOAD", "1") == "0" or not data or not data.endswith(".npz") or not os.path.isfile(data):
        return
    import cv2  # noqa: F401  (what the thread uses, imported here)

    from hiseg import io  # noqa: F401
    from hiseg.data import edges

    limit = int(_option(argv, "--data.init_args.limit_images", 0) or 0)
    edges.preload_edge_dataset(data, _option(argv, "--data.init_args.train_split", "train"), limit or None)
    _clock("data preload started")


def main(argv=None) -> int:
    """train.py's main with :class:`Phases` added."""
    argv = list(sys.argv[1:] if argv is None else argv)
    _clock("train.py started")
    try:  # as train.py does, before torch
        from hiseg._openmp import passive_openmp_waits

        passive_openmp_waits()
    except ImportError:  # a checkout from before it
        pass
    _preload(argv)
    from hiseg.training.cli import main as cli_main

    _clock("imports done")
    from hiseg.training import configs
    from hiseg.training.configs import TRUST_FLAG

    # the data module's train_data names a data file, not a config: a config check without it in its
    # _NOT_CONFIG_KEYS reads the packed .npz as a config and refuses the run ("larger than 1024 KiB"); this
    # run adds the key where it is missing (the key alone: every other value is checked as before)
    keys = getattr(configs, "_NOT_CONFIG_KEYS", None)
    if keys is not None and not keys.search("data.init_args.train_data"):
        configs._NOT_CONFIG_KEYS = re.compile(keys.pattern.replace("cache_dir)", "cache_dir|train_data)"))
        assert configs._NOT_CONFIG_KEYS.search("data.init_args.train_data")
    sys.modules.setdefault("gpu_phases", sys.modules[__name__])  # the callback's class path: this module
    sys.argv = sys.argv[:1] + argv + [TRUST_FLAG, "--trainer.callbacks+=gpu_phases.Phases"]
    cli_main(sys.argv[1:], default_config=ROOT / "configs" / "synthetic.yaml")  # as train.py
    return 0


if __name__ == "__main__":
    sys.exit(main())
