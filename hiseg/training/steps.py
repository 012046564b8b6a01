"""What the training module (:class:`hiseg.training.module.HierarchicalSegmentationModule`) uses that is not orchestration.

* :data:`MODULE_CONSTRAINTS`: its constructor's checks, one declaration per parameter
  (:func:`hiseg._params.check_parameters`, scikit-learn's parameter-constraints shape);
* :func:`start_and_pipeline`: the checkpoint that starts a run and the pipeline it trains;
  :func:`merge_head_of`: the pipeline's merging head, checked against the network;
* :class:`LossResult`: what a step computed;
* :func:`batch_consensus` and :func:`step_triplets`: the step's targets made from a batch;
* :func:`check_finite`: the step's check of its one device-to-host copy;
* :class:`StageClock`: the stage timings of ``compute_losses``;
* :func:`warmup_cosine`: the learning-rate schedule (a linear warm-up, then a cosine decay);
* :func:`channels_last_agrees`: the check that the channels-last layout trains the network as
  the plain layout does, before a GPU run switches to it;
* the step's messages for batches the model cannot train on.
"""
from __future__ import annotations

import math
import time
from typing import NamedTuple, Optional

import numpy as np
import torch

from .._params import Interval, Options
from ..core import losses as loss_terms

__all__ = ["MODULE_CONSTRAINTS", "PIXEL_LOSSES", "start_and_pipeline", "merge_head_of", "LossResult",
           "batch_consensus", "step_triplets", "check_finite", "StageClock", "warmup_cosine",
           "NO_SUPERPIXELS", "PIXEL_BATCH", "channels_last_agrees", "precision_dtype"]

PIXEL_LOSSES = ("balanced_bce", "edge")

#: the module's constructor checks (``model.<name> must be ...``), one line per parameter
MODULE_CONSTRAINTS = {
    "lr": (Interval(0, None, "neither"), "the learning rate"),
    "weight_decay": (Interval(0, None, "left"), None),
    "margin": (Interval(0, None, "left"), "the triplet margin"),
    "triplets_per_image": (Interval(1, None, "left", integer=True), None),
    "val_threshold": (Interval(0, 1), "a level of the saliency map"),
    "pixel_loss": (Options(PIXEL_LOSSES), None),
    "warmup": (Interval(0, None, "left"), "a fraction of the steps below 1, else steps"),
    "final_lr": (Interval(0, 1), "a fraction of lr"),
    "positive_threshold": (Interval(0, 1, "right"), None),
    "dice_weight": (Interval(0, None, "left"), None),
    "head_lr_scale": (Interval(0, None, "left"), "0: the merging head frozen"),
    "optimizer": (Options(("adamw", "amsgrad")), "AdamW, or Adam with amsgrad and L2 weight decay"),
}

#: the settings of ``model.new_merge_head`` (a :class:`~hiseg.segmentation.merging.MergeHead`'s)
NEW_HEAD_KEYS = ("features", "hidden", "output", "context")

NO_SUPERPIXELS = ("the batch has no superpixels, but model.pipeline.superpixels is 'color_watershed', which "
                  "trains on the loaders' superpixels: hiseg's data modules compute them when the model hands "
                  "them its pipeline (use_pipeline, in setup); another loader must give batches with a graph "
                  "(hiseg.data.graphs), or use a pipeline that builds them from the prediction "
                  "(boundary_watershed, all_minima)")
PIXEL_BATCH = ("the data module gives pixel-stage batches (crops with consensus labels, no regions): the model "
               "needs closest_weight: 0, triplet_weight: 0, pixel_loss: edge and pixel_weight > 0 "
               "(configs/bsds500_pixel.yaml)")


class LossResult(NamedTuple):
    """What :meth:`HierarchicalSegmentationModule.compute_losses` computed: the losses (name ->
    scalar tensor, ``"loss"`` their weighted sum), the ultrametric (E_total,), its hierarchy,
    and the batch whose graphs they are on (rebuilt from the prediction when the pipeline
    builds the superpixels)."""

    losses: dict
    ultrametric: torch.Tensor
    hierarchy: object
    batch: object


def start_and_pipeline(init_from, pipeline, pipeline_from_init):
    """(the checkpoint that starts the run or None, the :class:`~hiseg.segmentation.Pipeline`)
    of the module's settings ``init_from`` (a file or a shipped name), ``pipeline`` (a dict,
    a Pipeline or None: :data:`hiseg.data.datamodule.TRAINING_PIPELINE`) and
    ``pipeline_from_init`` (the start's own pipeline). Reads the checkpoint once
    (``weights_only``). Raises ValueError for ``pipeline_from_init`` without ``init_from`` or
    with ``pipeline``, a start holding no pipeline, and the ``closest`` linkage (a fit, not a
    layer); the checkpoint reader's errors for a bad file."""
    from ..segmentation.pipeline import Pipeline

    start = None
    if init_from:
        from ..models.weights import Weights, read_checkpoint

        start = read_checkpoint(Weights.resolve(init_from))  # a file, or a shipped model's name
    if pipeline_from_init:
        if start is None or pipeline is not None:
            raise ValueError("model.pipeline_from_init takes the pipeline of model.init_from's checkpoint: give "
                             "model.init_from, and no model.pipeline")
        pipeline = start.metadata.get("pipeline") or start.hyper_parameters.get("pipeline")
        if not isinstance(pipeline, dict):
            raise ValueError(f"model.pipeline_from_init: checkpoint {init_from} holds no pipeline settings")
    if pipeline is None:
        from ..data.datamodule import TRAINING_PIPELINE

        pipeline = dict(TRAINING_PIPELINE)
    pipeline = pipeline if isinstance(pipeline, Pipeline) else Pipeline.from_dict(pipeline, source="model.pipeline")
    if pipeline.linkage == "closest":
        raise ValueError("model.pipeline.linkage 'closest' is a fit, not a differentiable layer (inference "
                         "only): train with linkage 'average' or 'single'")
    return start, pipeline


def merge_head_of(pipeline, model: torch.nn.Module, trainable: bool, freeze_network: bool, new=None):
    """The merging head to train, or None: a new one of the settings ``new`` (``features``,
    ``hidden``, ``output``, ``context``; standardised on its first training batch), else the
    pipeline's (its parameters trainable or not). Raises ValueError naming
    ``model.new_merge_head`` for bad settings or next to a pipeline's head, MergeHeadError when
    the pipeline's head was fitted on another network than ``model``, and ValueError for
    ``freeze_network`` without a head."""
    from ..segmentation.merging import MergeHead, MergeHeadError

    if new is not None:
        if not isinstance(new, dict):
            raise ValueError(f"model.new_merge_head must be a mapping of {NEW_HEAD_KEYS}, got {new!r}")
        unknown = sorted(set(new) - set(NEW_HEAD_KEYS))
        if unknown or "features" not in new:
            raise ValueError(f"model.new_merge_head: unknown setting(s) {unknown}; known: {NEW_HEAD_KEYS}" if unknown
                             else "model.new_merge_head needs its features (names of hiseg.segmentation.merging.FEATURES)")
        if pipeline.merge_head is not None:
            raise ValueError("model.new_merge_head: the pipeline already holds a merge_head; give one of them")
        try:
            return MergeHead(new["features"], new.get("hidden", (32,)), new.get("output", "sigmoid"),
                             context=new.get("context", 0), normalise_on_first_batch=True)
        except MergeHeadError as e:
            raise ValueError(f"model.new_merge_head: {e}") from None
    if pipeline.merge_head is None:
        if freeze_network:
            raise ValueError("model.freeze_network trains the merging head alone: the pipeline needs a merge_head")
        return None
    head = MergeHead.from_spec(pipeline.merge_head)
    head.check_network(model)
    return head.requires_grad_(trainable)


def batch_consensus(batch, positive_threshold: float):
    """(pos, neg) masks (B, H, W) of the ``edge`` pixel loss of a graph batch, on its device:
    the annotators' one-pixel-wide boundaries, made on the host (one copy)."""
    from ..data.targets import mean_boundary

    b, hp, wp = batch.boundary.shape
    cons = np.full((b, hp, wp), -1.0, np.float32)
    for i, (seg, (h, w)) in enumerate(zip(batch.segmentations, batch.image_sizes)):
        if len(seg):
            cons[i, :h, :w] = mean_boundary(seg, thick=False)
    cons = torch.from_numpy(cons).to(batch.boundary.device, non_blocking=True)
    return loss_terms.consensus_targets(cons, cons >= 0, positive_threshold)


def step_triplets(batch, device, rng: np.random.Generator, per_image: int):
    """(ref, pos, neg, valid) on the device (:func:`hiseg.core.losses.sample_batch_triplets_torch`),
    from a device generator seeded by one draw of the step's ``rng``."""
    gen = torch.Generator(device=device)
    gen.manual_seed(int(rng.integers(2 ** 63 - 1)))
    ptr = batch.vertex_offsets
    if ptr is None:  # a batch made without the field: one more (small) copy
        ptr = torch.as_tensor(np.asarray(batch.graph.vertex_ptr, dtype=np.int64), device=device)
    num_labels = batch.num_labels or int(batch.sp_labels.max()) + 1
    return loss_terms.sample_batch_triplets_torch(batch.sp_labels, ptr, int(per_image), num_labels, gen)


def check_finite(host: np.ndarray, n_weights: int, names, step: int) -> None:
    """FloatingPointError for non-finite edge weights (``host[:n_weights]``: a diverged
    network) or terms (``host[n_weights:]``, named ``names``) at ``step``."""
    from ..segmentation.pipeline import DIVERGED

    if not np.isfinite(host[:n_weights]).all():
        raise FloatingPointError(DIVERGED)
    bad = {n: float(v) for n, v in zip(names, host[n_weights:]) if not np.isfinite(v)}
    if bad:
        raise FloatingPointError(f"non-finite training loss at step {step} ({bad}); the last checkpoint stays "
                                 "loadable; lower the learning rate or check the data")


class StageClock:
    """Stage timings of ``compute_losses``: ``clock(stage)`` stores the seconds since the last
    call in ``timings[stage]``; nothing without ``timings``; on CUDA it waits for the device at
    each stage boundary (only when timings are asked for)."""

    def __init__(self, timings: Optional[dict], device):
        self.timings, self.cuda = timings, device.type == "cuda"
        self.device, self.last = device, time.perf_counter()

    def __call__(self, stage: str) -> None:
        if self.timings is None:
            return
        if self.cuda:
            torch.cuda.synchronize(self.device)
        now = time.perf_counter()
        self.timings[stage], self.last = now - self.last, now


def warmup_cosine(step: int, total, warmup: float, final_lr: float) -> float:
    """The step size of optimiser step ``step`` as a fraction of ``lr``: a linear warm-up over
    ``warmup`` steps (a fraction of ``total`` below 1), then a cosine decay to ``final_lr`` at
    step ``total`` (``warmup`` 0: the cosine from step 0, ``CosineAnnealingLR``'s); 1 when
    ``total`` is unknown (None, 0 or infinite). O(1)."""
    if not total or math.isinf(total):
        return 1.0
    warm = int(warmup * total) if warmup < 1 else int(warmup)
    if step < warm:
        return (step + 1) / warm
    prog = min(1.0, (step - warm) / max(1, total - warm))
    return final_lr + (1 - final_lr) * 0.5 * (1 + math.cos(math.pi * prog))


def precision_dtype(precision) -> Optional[torch.dtype]:
    """The 16-bit dtype of a Lightning ``precision`` (``bf16-mixed`` / ``bf16-true``: bfloat16;
    ``16-mixed`` / ``16-true``: float16), else None (32 or 64 bits)."""
    return {"bf16-mixed": torch.bfloat16, "bf16-true": torch.bfloat16, "16-mixed": torch.float16,
            "16-true": torch.float16}.get(str(precision))


def _tensors_of(out) -> list:
    """The tensors of a network's output (a tensor, or nested tuples, lists or dicts of them, a
    dict's in its keys' order)."""
    if isinstance(out, torch.Tensor):
        return [out]
    if isinstance(out, dict):
        out = list(out.values())
    return [t for o in (out if isinstance(out, (tuple, list)) else ()) for t in _tensors_of(o)]


def channels_last_agrees(model: torch.nn.Module, device, dtype: Optional[torch.dtype] = None, size: int = 64,
                         tolerance: Optional[float] = None) -> bool:
    """Whether a copy of ``model`` (training mode) gets the same parameter gradients in the
    channels-last memory layout as in the plain one, up to rounding: one forward (autocast to
    ``dtype`` where given, e.g. bf16-mixed) and backward of a fixed random projection of its
    outputs on two random ``size`` x ``size`` images, on ``device``. Every gradient must be
    finite and differ from the plain layout's by at most ``tolerance`` times the largest plain
    gradient magnitude over all parameters (default 1.0 in a 16-bit ``dtype``, whose rounding
    moves small gradients behind BatchNorm by up to a quarter of that scale, else 0.1). In fp32
    this catches gradients zeroed or off by a few times where they reach a tenth of the largest;
    in a 16-bit ``dtype`` only gradients that blow up or are not finite. That is the failure
    seen: a library kernel that fails in one layout only, PyTorch 2.x's oneDNN on the CPU gives
    gradients of 1e19 or more, or NaN, for depthwise dilated convolutions in bf16 channels-last
    (``pdc_boundary_net``'s side heads: 1e33 times the gradients' scale on 64 x 64 images). The images take the dtype of ``model``'s parameters (a network in bf16 throughout,
    Lightning's ``bf16-true``: pass its ``dtype`` too, for the 16-bit tolerance). ``model`` is not
    changed. Cost: two steps of the network on two small images."""
    import copy

    if not any(p.requires_grad for p in model.parameters()):
        return True  # nothing trains (a frozen network)
    device = torch.device(device)
    tol = tolerance if tolerance is not None else (1.0 if dtype in (torch.bfloat16, torch.float16) else 0.1)
    gen = torch.Generator().manual_seed(0)
    pdtype = next((p.dtype for p in model.parameters() if p.is_floating_point()), torch.float32)
    x = torch.rand(2, 3, size, size, generator=gen).to(device, pdtype)
    grads, proj = [], None
    for fmt in (torch.contiguous_format, torch.channels_last):
        net = copy.deepcopy(model).to(device).to(memory_format=fmt).train()
        with torch.autocast(device.type, dtype=dtype or torch.float32, enabled=dtype is not None):
            outs = [o.float() for o in _tensors_of(net(x.contiguous(memory_format=fmt)))]
        if proj is None:
            proj = [torch.randn(o.shape, generator=gen).to(device) for o in outs]
        sum((o * w).sum() for o, w in zip(outs, proj)).backward()
        grads.append([p.grad.float() for p in net.parameters() if p.grad is not None])
    if not all(bool(torch.isfinite(g).all()) for g in grads[0] + grads[1]):
        return False
    scale = max(float(g.abs().max()) for g in grads[0])
    return all(float((a - b).abs().max()) <= tol * max(scale, 1e-12) for a, b in zip(*grads))
