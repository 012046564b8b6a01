"""Pixel stage of the BSDS recipe: a boundary network trained on consensus labels with
augmentation done on the GPU (no superpixels, no trees).

The recipe (the standard one of from-scratch edge detectors, e.g. HED, RCF, PiDiNet):

* **labels** -- the consensus of the annotators: ``c(p)`` = fraction of annotators whose
  ``Boundaries`` map marks pixel ``p``; a pixel is positive where ``c >= 0.3``, negative
  where ``c == 0`` and ignored in between (``positive_threshold``);
* **augmentation** -- every crop is drawn with a random rotation (16 angles), a random
  horizontal flip, a random scale (log-uniform in ``scale_range``), a random centre and
  a small colour jitter.  The whole training set lives on the device and a batch of crops
  is one ``affine_grid`` + ``grid_sample`` call, so the CPU never limits the step;
  labels are resampled bilinearly (thin lines keep their peak; their neighbours become
  "ignored", a tolerance band), pixels drawn from outside the image are ignored;
* **loss** -- class-balanced binary cross-entropy (HED's weights, negatives weighted
  ``neg_weight`` times the positive fraction) on the fused output and on every side
  output (deep supervision), plus a Dice term on the fused output, which favours thin
  (crisp) maps;
* **optimiser** -- AdamW, linear warm-up then cosine decay over a step budget that is
  fixed at the start of a run (from a throughput measurement when ``--seconds`` is given).

A run is resumable: ``--out DIR`` holds ``state.pt`` (model, optimiser, step, every
random stream) written every ``--save-every`` seconds and at the end, and
``weights.pt`` (:func:`hiseg.models.save_weights`, loadable by every hiseg entry point).

    python -m hiseg.edge_training --data datasets/BSDS500 --out runs/edges --seconds 600

It runs on the CPU too (slowly); ``--device cuda`` is the intended use.
"""
from __future__ import annotations

import argparse
import json
import math
import time
from pathlib import Path
from typing import Sequence

import numpy as np
import torch
import torch.nn.functional as F

__all__ = [
    "load_edge_dataset",
    "GPUAugmenter",
    "consensus_targets",
    "edge_loss",
    "train_edges",
    "main",
]


def load_edge_dataset(root, split: str = "train", limit: int | None = None):
    """Images (uint8 (3, H, W)) and consensus maps (float32 (H, W), fraction of
    annotators marking each pixel) of a BSDS500 split; portrait images are transposed
    to landscape so that all share one size (rotation augmentation covers orientation).
    """
    from .data.bsds import BSDS500
    from .io import load_ground_truth, read_image

    ds = BSDS500(root, split)
    n = len(ds) if limit is None else min(limit, len(ds))
    images, cons = [], []
    for i in range(n):
        img = (read_image(ds.image_path(i)) * 255.0 + 0.5).astype(np.uint8)
        b = np.mean(load_ground_truth(ds.groundtruth_path(i))[1], axis=0).astype(np.float32)
        if img.shape[0] > img.shape[1]:
            img, b = img.transpose(1, 0, 2), b.T
        images.append(np.ascontiguousarray(img.transpose(2, 0, 1)))
        cons.append(np.ascontiguousarray(b))
    shapes = {im.shape for im in images}
    if len(shapes) != 1:  # pad to the largest (ignored in the loss)
        hh = max(s[1] for s in shapes)
        ww = max(s[2] for s in shapes)
        images = [np.pad(im, ((0, 0), (0, hh - im.shape[1]), (0, ww - im.shape[2])), mode="edge") for im in images]
        cons = [np.pad(c, ((0, hh - c.shape[0]), (0, ww - c.shape[1])), constant_values=-1.0) for c in cons]
    return np.stack(images), np.stack(cons)


class GPUAugmenter:
    """Random rotated/flipped/scaled crops of a device-resident image set.

    Parameters
    ----------
    images : uint8 array (N, 3, H, W)
    consensus : float array (N, H, W); negative values mark padding (ignored)
    crop : int
        Side of the square crops.
    n_angles : int
        Rotations drawn from ``k * 360 / n_angles``.
    scale_range : (float, float)
        Scale drawn log-uniformly (output pixels per input pixel).
    jitter : float
        Strength of the brightness / contrast / saturation jitter.
    """

    def __init__(self, images, consensus, *, crop: int = 320, n_angles: int = 16,
                 scale_range: Sequence[float] = (0.5, 1.5), jitter: float = 0.1, device="cpu") -> None:
        self.device = torch.device(device)
        self.images = torch.as_tensor(images).to(self.device)                      # uint8
        c = torch.as_tensor(consensus, dtype=torch.float32)
        valid = (c >= 0).float()
        self.extra = torch.stack([c.clamp(min=0), valid], 1).to(self.device)       # (N, 2, H, W)
        self.crop = int(crop)
        self.n_angles = int(n_angles)
        self.scale_range = (float(scale_range[0]), float(scale_range[1]))
        self.jitter = float(jitter)

    def sample(self, batch_size: int, generator: torch.Generator):
        """One batch: images (B, 3, S, S) in [0, 1], consensus (B, S, S), valid (B, S, S)."""
        g = generator
        n, _, h, w = self.images.shape
        b, s = int(batch_size), self.crop
        rnd = torch.rand(b, 8, generator=g)  # every random number of the batch, on the CPU
        idx = (rnd[:, 0] * n).long().clamp_max(n - 1)
        ang = torch.floor(rnd[:, 1] * self.n_angles) * (2 * math.pi / self.n_angles)
        lo, hi = math.log(self.scale_range[0]), math.log(self.scale_range[1])
        scale = torch.exp(lo + (hi - lo) * rnd[:, 2])
        flip = torch.where(rnd[:, 3] < 0.5, -1.0, 1.0)
        # crop centres drawn so that the unrotated crop stays inside the image where it fits
        half = s / 2.0
        my = torch.clamp(half / scale, max=(h - 1) / 2.0)
        mx = torch.clamp(half / scale, max=(w - 1) / 2.0)
        cy = my + rnd[:, 4] * (h - 1 - 2 * my)
        cx = mx + rnd[:, 5] * (w - 1 - 2 * mx)
        # output pixel offset (u, v) from the crop centre -> source offset R(ang) diag(flip, 1) / scale
        cos, sin = torch.cos(ang) / scale, torch.sin(ang) / scale
        # source x = cx + cos*fx*u - sin*v ; source y = cy + sin*fx*u + cos*v   (pixels)
        # normalised coordinates (align_corners=False): xn = (2x + 1) / W - 1
        theta = torch.zeros(b, 2, 3)
        theta[:, 0, 0] = cos * flip * half * 2 / w
        theta[:, 0, 1] = -sin * half * 2 / w
        theta[:, 0, 2] = (2 * cx + 1) / w - 1
        theta[:, 1, 0] = sin * flip * half * 2 / h
        theta[:, 1, 1] = cos * half * 2 / h
        theta[:, 1, 2] = (2 * cy + 1) / h - 1
        theta = theta.to(self.device)
        grid = F.affine_grid(theta, (b, 1, s, s), align_corners=False)
        idx_d = idx.to(self.device)
        img = F.grid_sample(self.images[idx_d].float() / 255.0, grid, mode="bilinear",
                            padding_mode="reflection", align_corners=False)
        ex = F.grid_sample(self.extra[idx_d], grid, mode="bilinear", padding_mode="zeros", align_corners=False)
        if self.jitter > 0:
            j = (torch.rand(b, 3, generator=g) * 2 - 1) * self.jitter
            j = j.to(self.device)
            mean = img.mean(dim=(1, 2, 3), keepdim=True)
            img = (img - mean) * (1 + j[:, 0, None, None, None]) + mean + j[:, 1, None, None, None]
            grey = img.mean(dim=1, keepdim=True)
            img = (img - grey) * (1 + j[:, 2, None, None, None]) + grey
            img = img.clamp(0, 1)
        return img, ex[:, 0], ex[:, 1] > 0.999


def consensus_targets(consensus: torch.Tensor, valid: torch.Tensor, positive_threshold: float = 0.3):
    """Positive / negative masks: ``c >= positive_threshold`` / ``c == 0``; the rest ignored."""
    pos = (consensus >= positive_threshold) & valid
    neg = (consensus <= 1e-6) & valid
    return pos, neg


def edge_loss(fused: torch.Tensor, sides: Sequence[torch.Tensor], pos: torch.Tensor, neg: torch.Tensor,
              *, neg_weight: float = 1.1, side_weight: float = 1.0, dice_weight: float = 1.0) -> torch.Tensor:
    """Class-balanced BCE on the fused and side logits plus Dice on the fused map (float32).

    ``pos``/``neg``: bool (B, H, W) masks; pixels in neither are ignored.  Per image,
    positives weigh ``|N| / (|P| + |N|)`` and negatives ``neg_weight * |P| / (|P| + |N|)``;
    the BCE is summed over pixels and divided by the number of counted pixels.
    """
    p, ng = pos.float(), neg.float()
    np_ = p.sum(dim=(1, 2), keepdim=True)
    nn_ = ng.sum(dim=(1, 2), keepdim=True)
    tot = (np_ + nn_).clamp_min(1.0)
    wmap = p * (nn_ / tot) + ng * (neg_weight * np_ / tot)
    denom = (p + ng).sum().clamp_min(1.0)

    def bce(logits):
        lg = logits.float().squeeze(1)
        return (F.binary_cross_entropy_with_logits(lg, p, reduction="none") * wmap).sum() / denom

    loss = bce(fused)
    for s in sides:
        loss = loss + side_weight * bce(s)
    if dice_weight > 0:
        prob = torch.sigmoid(fused.float().squeeze(1)) * (p + ng)
        inter = (prob * p).sum(dim=(1, 2))
        dice = 1 - (2 * inter + 1) / ((prob * prob).sum(dim=(1, 2)) + p.sum(dim=(1, 2)) + 1)
        loss = loss + dice_weight * dice.mean()
    return loss


def _lr_at(step: int, total: int, base: float, warmup: int) -> float:
    if step < warmup:
        return base * (step + 1) / warmup
    t = min(1.0, (step - warmup) / max(1, total - warmup))
    return base * (0.02 + 0.98 * 0.5 * (1 + math.cos(math.pi * t)))


def train_edges(args) -> dict:
    """Run (or resume) the pixel stage described in the module docstring; returns a summary."""
    from .io import atomic_write
    from .models import get_model, save_weights

    dev = torch.device(args.device)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    torch.manual_seed(args.seed)
    images, cons = load_edge_dataset(args.data, "train", limit=args.limit)
    aug = GPUAugmenter(images, cons, crop=args.crop, scale_range=args.scale_range, device=dev)
    arch_kwargs = json.loads(args.arch_kwargs)
    model = get_model(args.arch, **arch_kwargs).to(dev)
    if dev.type == "cuda":
        model = model.to(memory_format=torch.channels_last)
    opt = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=args.weight_decay)
    gen = torch.Generator().manual_seed(args.seed)
    step, total, log = 0, args.steps, []
    state_path = Path(args.resume) if args.resume else out / "state.pt"
    if state_path.is_file():
        st = torch.load(state_path, map_location="cpu", weights_only=True)
        model.load_state_dict(st["model"])
        opt.load_state_dict(st["opt"])
        gen.set_state(st["gen"])
        step, total, log = int(st["step"]), int(st["total"]), list(st.get("log", []))
        print(f"resumed from {state_path} at step {step}/{total}", flush=True)
    def save_state():
        state = {"model": model.state_dict(), "opt": opt.state_dict(), "gen": gen.get_state(),
                 "step": step, "total": total, "log": log}
        atomic_write(out / "state.pt", lambda tmp: torch.save(state, tmp))

    use_bf16 = args.bf16 and dev.type == "cuda"
    model.train()
    t_start = time.time()
    t_save = t_start
    run_seconds = args.seconds
    seen_this_run = 0
    t_measure = None
    ema = None
    while True:
        if total and step >= total:
            break
        if run_seconds and time.time() - t_start > run_seconds:
            break
        lr = _lr_at(step, total or 10 ** 9, args.lr, args.warmup)
        for gr in opt.param_groups:
            gr["lr"] = lr
        img, c, valid = aug.sample(args.batch_size, gen)
        pos, neg = consensus_targets(c, valid, args.positive_threshold)
        if dev.type == "cuda":
            img = img.contiguous(memory_format=torch.channels_last)
        with torch.autocast(dev.type, dtype=torch.bfloat16, enabled=use_bf16):
            fused, sides = model(img, return_side_outputs=True)
        loss = edge_loss(fused, sides, pos, neg, dice_weight=args.dice_weight)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        step += 1
        seen_this_run += args.batch_size
        if step % 50 == 0 or step == 1:
            lv = float(loss.detach())
            ema = lv if ema is None else 0.9 * ema + 0.1 * lv
            el = time.time() - t_start
            log.append([step, round(lv, 5), round(lr, 6), round(el, 1)])
            print(f"step {step}/{total or '?'} loss {lv:.4f} (ema {ema:.4f}) lr {lr:.2e} "
                  f"{seen_this_run / max(el, 1e-9):.0f} crops/s", flush=True)
        # fix the step budget from the measured throughput (first run only)
        if not total and args.plan_seconds:
            if t_measure is None and step >= 20:
                if dev.type == "cuda":
                    torch.cuda.synchronize()
                t_measure = (time.time(), step)
            elif t_measure is not None and step >= t_measure[1] + 100:
                if dev.type == "cuda":
                    torch.cuda.synchronize()
                rate = (step - t_measure[1]) / (time.time() - t_measure[0])
                total = int(rate * args.plan_seconds)
                print(f"throughput {rate * args.batch_size:.0f} crops/s: step budget {total} "
                      f"for {args.plan_seconds} s", flush=True)
        if time.time() - t_save > args.save_every:
            save_state()
            t_save = time.time()
    save_state()
    meta = {"recipe": "hiseg.edge_training", "steps": step, "total_steps": total, "batch_size": args.batch_size,
            "crop": args.crop, "image_passes": step * args.batch_size, "lr": args.lr}
    save_weights(model.float().cpu(), out / "weights.pt", metadata=meta)
    (out / "log.json").write_text(json.dumps(log))
    print(json.dumps(meta), flush=True)
    return meta


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m hiseg.edge_training", description=__doc__.split("\n\n")[0])
    p.add_argument("--data", required=True, help="BSDS500 root (with images/ and groundTruth/)")
    p.add_argument("--out", required=True, help="run folder: state.pt, weights.pt, log.json")
    p.add_argument("--resume", default=None, help="state.pt to resume from (default: OUT/state.pt if present)")
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu", help="torch device")
    p.add_argument("--arch", default="compact_boundary_net", help="registered model builder")
    p.add_argument("--arch-kwargs", default='{"width": 32, "blocks": [2, 2, 3, 3], "side_channels": 16}',
                   help="builder kwargs as JSON")
    p.add_argument("--batch-size", type=int, default=32, help="crops per step")
    p.add_argument("--crop", type=int, default=320, help="crop side in pixels")
    p.add_argument("--scale-range", type=float, nargs=2, default=(0.5, 1.5), help="log-uniform scale range")
    p.add_argument("--lr", type=float, default=2e-3, help="peak learning rate")
    p.add_argument("--weight-decay", type=float, default=1e-4, help="AdamW weight decay")
    p.add_argument("--warmup", type=int, default=300, help="linear warm-up steps")
    p.add_argument("--steps", type=int, default=0, help="step budget (0: from --plan-seconds)")
    p.add_argument("--plan-seconds", type=float, default=0, help="training time the step budget is sized for")
    p.add_argument("--seconds", type=float, default=0, help="stop this invocation after this many seconds")
    p.add_argument("--save-every", type=float, default=120, help="seconds between state.pt writes")
    p.add_argument("--positive-threshold", type=float, default=0.3, help="consensus above which a pixel is positive")
    p.add_argument("--dice-weight", type=float, default=1.0, help="weight of the Dice term")
    p.add_argument("--bf16", action="store_true", help="bf16 autocast on CUDA")
    p.add_argument("--limit", type=int, default=None, help="use the first N training images (tests)")
    p.add_argument("--seed", type=int, default=0, help="seed of every random stream")
    return p


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    if not args.steps and not args.plan_seconds:
        raise SystemExit("give --steps or --plan-seconds")
    train_edges(args)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
