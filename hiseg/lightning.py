r"""The LightningModule of both training stages: orchestration only.

One training step on a :class:`~hiseg.data.collate.GraphBatch` (the walk of
``docs/architecture.md``): the network's logits; the checkpoint's
:class:`~hiseg.segmentation.Pipeline` makes the boundary maps (:meth:`Pipeline.maps`: its scales
and flip, differentiable), the superpixels when it builds them from the prediction
(:meth:`Pipeline.batch_superpixels`, then the batch's graphs and targets rebuilt), the edge
weights (:meth:`Pipeline.graph_weights`: frontier mean or the merging head) and the ultrametric
(:meth:`Pipeline.ultrametric`, the tree built on the host); the loss is the registry's
:class:`~hiseg.losses.Objective` of the configured terms; AdamW with a warm-up and a cosine
decay steps. Validation sums losses and boundary counts in a torchmetrics metric
(:class:`hiseg.metrics.validation.SegmentationMetrics`). Host synchronisation per step: one
device-to-host copy (the weights, with the values of the terms that do not read the tree) and
one host-to-device copy (the tree's indices); rebuilding the superpixels adds one each way, the
``edge`` pixel loss one host-to-device copy (its consensus labels).

The pixel stage (``configs/bsds500_pixel.yaml``) is the same module with the ``pixel`` term
only (``closest_weight`` and ``triplet_weight`` 0, ``pixel_loss: edge``), fed
:class:`~hiseg.data.edges.PixelBatch` es (no superpixels, no trees).
"""
from __future__ import annotations

import math
import time
from typing import NamedTuple, Optional

import numpy as np
import pytorch_lightning as pl
import torch

from . import losses as loss_terms
from .callbacks import (CSVLogger, FiniteLossGuard, LastCheckpoint, RandomStateCheckpoint,  # noqa: F401 (configs)
                        TensorBoardLogger, ValidateAtStart)
from .metrics.validation import VAL_THRESHOLDS, SegmentationMetrics, batch_boundary_counts
from .models import get_model
from .segmentation.hostpool import host_pool, resolve_workers

__all__ = ["HierarchicalSegmentationModule", "SegmentationMetrics", "LossResult", "LastCheckpoint", "CSVLogger",
           "TensorBoardLogger", "VAL_THRESHOLDS"]

PIXEL_LOSSES = ("balanced_bce", "edge")

_NO_SUPERPIXELS = ("the batch has no superpixels, but model.pipeline.superpixels is 'color_watershed', which "
                   "trains on the loaders' superpixels: hiseg's data modules compute them when the model hands "
                   "them its pipeline (use_pipeline, in setup); another loader must give batches with a graph "
                   "(hiseg.data.collate), or use a pipeline that builds them from the prediction "
                   "(boundary_watershed, all_minima)")
_PIXEL_BATCH = ("the data module gives pixel-stage batches (crops with consensus labels, no regions): the model "
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


def _start_and_pipeline(init_from, pipeline, pipeline_from_init):
    """(the checkpoint that starts the run or None, the Pipeline) of the module's settings."""
    from .segmentation.pipeline import Pipeline

    start = None
    if init_from:
        from .models.weights import Weights, read_checkpoint

        start = read_checkpoint(Weights.resolve(init_from))  # a file, or a shipped model's name
    if pipeline_from_init:
        if start is None or pipeline is not None:
            raise ValueError("model.pipeline_from_init takes the pipeline of model.init_from's checkpoint: give "
                             "model.init_from, and no model.pipeline")
        pipeline = start.metadata.get("pipeline") or start.hyper_parameters.get("pipeline")
        if not isinstance(pipeline, dict):
            raise ValueError(f"model.pipeline_from_init: checkpoint {init_from} holds no pipeline settings")
    if pipeline is None:
        from .data.datamodule import TRAINING_PIPELINE

        pipeline = dict(TRAINING_PIPELINE)
    pipeline = pipeline if isinstance(pipeline, Pipeline) else Pipeline.from_dict(pipeline, source="model.pipeline")
    if pipeline.linkage == "closest":
        raise ValueError("model.pipeline.linkage 'closest' is a fit, not a differentiable layer (inference "
                         "only): train with linkage 'average' or 'single'")
    return start, pipeline


class HierarchicalSegmentationModule(pl.LightningModule):
    """Learned hierarchical segmentation by ultrametric fitting.

    Parameters
    ----------
    arch, arch_kwargs : the boundary network (:func:`hiseg.models.get_model`); without
        ``arch_kwargs`` a network started from ``init_from`` takes the checkpoint's.
    lr, weight_decay, warmup, final_lr : AdamW; a linear warm-up (a fraction of the run's steps
        below 1, else steps) then a cosine decay to ``final_lr * lr``.
    closest_weight, triplet_weight, pixel_weight : weights of the registry's ``closest``,
        ``triplet`` and ``pixel`` terms (:data:`hiseg.losses.TERMS`).
    losses : dict, optional
        More terms of the registry, name -> weight (:func:`hiseg.losses.register_loss`).
    margin : the triplet margin; ``triplets_per_image`` triplets are drawn per image and step.
    pixel_loss : ``"balanced_bce"`` (HED's, against the thick mean annotator boundary) or
        ``"edge"`` (the pixel stage's :func:`hiseg.losses.edge_loss`: consensus labels, positive
        where at least ``positive_threshold`` of the annotators agree, plus ``dice_weight`` Dice).
    val_threshold : the saliency threshold of the validation boundary F.
    validate_at_start : evaluate the validation set once before training (logged at step 0).
    init_from : a checkpoint path or a shipped model's name whose network weights start the run
        (read with ``weights_only=True``).
    pipeline : dict, optional
        The :class:`hiseg.segmentation.Pipeline` settings that the step, validation and ``hiseg
        predict`` all use (stored in the checkpoint); default
        :data:`hiseg.data.datamodule.TRAINING_PIPELINE`. With ``color_watershed`` the loaders
        compute the superpixels (:meth:`setup` hands them the pipeline), otherwise the step
        rebuilds them from the network's current (detached) maps, as at inference.
    pipeline_from_init : take ``init_from``'s pipeline (with its merging head, if any).
    head_lr_scale : with a merging head in the pipeline, the head's learning rate as a multiple
        of ``lr`` (0 freezes it); it is saved back into the checkpoint's pipeline with the
        fingerprint of the network it now runs with, and must have been fitted on this
        network's maps (refused by name otherwise).
    freeze_network : train the merging head alone, the network frozen (``lr`` is then the
        head's; ``configs/bsds500_merge_head.yaml``).
    host_workers : processes that build a batch's trees and rebuild its superpixels
        (:mod:`hiseg.segmentation.hostpool`): None, the host's cores; 0, in process. The
        losses do not depend on it.

    Randomness: a step's triplets are drawn from ``default_rng([seed, 0, rank, global_step,
    batch_idx])`` (validation / test ``[seed, 1 or 2, rank, batch_idx]``), ``seed`` the run's
    (:func:`hiseg.data.datamodule.run_seed`, the checkpoint's when resumed), so a resumed run
    draws what the uninterrupted one drew (:class:`hiseg.callbacks.RandomStateCheckpoint`
    restores the global generators).
    """

    def __init__(self, arch: str = "compact_boundary_net", arch_kwargs: Optional[dict] = None,
                 lr: float = 2e-3, weight_decay: float = 1e-4, closest_weight: float = 1.0,
                 triplet_weight: float = 0.5, pixel_weight: float = 0.1, margin: float = 0.2,
                 triplets_per_image: int = 2000, val_threshold: float = 0.5,
                 validate_at_start: bool = True, init_from: Optional[str] = None,
                 pipeline: Optional[dict] = None, pixel_loss: str = "balanced_bce", warmup: float = 0.05,
                 final_lr: float = 0.05, positive_threshold: float = 0.3, dice_weight: float = 1.0,
                 head_lr_scale: float = 1.0, pipeline_from_init: bool = False, losses: Optional[dict] = None,
                 freeze_network: bool = False, host_workers: Optional[int] = None):
        super().__init__()
        checks = [(lr > 0, f"model.lr must be > 0 (the learning rate), got {lr}"),
                  (weight_decay >= 0, f"model.weight_decay must be >= 0, got {weight_decay}"),
                  (pixel_loss in PIXEL_LOSSES, f"model.pixel_loss must be one of {PIXEL_LOSSES}, got {pixel_loss!r}"),
                  (warmup >= 0, f"model.warmup must be >= 0 (a fraction of the steps below 1, else steps), got {warmup}"),
                  (0 <= final_lr <= 1, f"model.final_lr must be in [0, 1] (a fraction of lr), got {final_lr}"),
                  (0 < positive_threshold <= 1, f"model.positive_threshold must be in (0, 1], got {positive_threshold}"),
                  (head_lr_scale >= 0, f"model.head_lr_scale must be >= 0 (0: the merging head frozen), got "
                                       f"{head_lr_scale}")]
        for ok, message in checks:
            if not ok:
                raise ValueError(message)
        start, self.pipeline = _start_and_pipeline(init_from, pipeline, pipeline_from_init)
        self.objective = loss_terms.Objective({"closest": closest_weight, "triplet": triplet_weight,
                                               "pixel": pixel_weight, **(losses or {})},
                                              margin=margin, pixel_loss=pixel_loss, dice_weight=dice_weight)
        pipeline = self.pipeline.to_dict()  # save_hyperparameters reads this local: the full settings
        self.save_hyperparameters()
        # LightningCLI records the parsed config instead of the locals: store the settings used
        self.hparams["pipeline"] = pipeline
        if start is not None and arch_kwargs is None and start.hyper_parameters.get("arch") == arch \
                and isinstance(start.hyper_parameters.get("arch_kwargs"), dict):
            arch_kwargs = self.hparams["arch_kwargs"] = dict(start.hyper_parameters["arch_kwargs"])
        self.model = get_model(arch, **(arch_kwargs or {}))
        if start is not None:
            from .models.weights import load_weights

            load_weights(self.model, start)
        self.merge_head = None  # the pipeline's merging head: a trained copy, from the network it was fitted on
        if self.pipeline.merge_head is not None:
            from .segmentation.merging import MergeHead

            self.merge_head = MergeHead.from_spec(self.pipeline.merge_head)
            self.merge_head.check_network(self.model)
            self.merge_head.requires_grad_(head_lr_scale > 0)
        elif freeze_network:
            raise ValueError("model.freeze_network trains the merging head alone: the pipeline needs a merge_head")
        self.model.requires_grad_(not freeze_network)
        self._rng = np.random.default_rng(0)
        self._seed: Optional[int] = None  # the run's seed (restored from checkpoints)
        self.val_metrics, self.test_metrics = self.make_metrics(), self.make_metrics()
        self.finite_guard = FiniteLossGuard()  # the pixel stage's (the graph steps check on the host)
        resolve_workers(host_workers)  # a bad value fails here, not at the first step

    def make_metrics(self) -> SegmentationMetrics:
        """A fresh validation metric for this module's losses."""
        return SegmentationMetrics(loss_keys=(*self.objective.weights, "loss"))

    def configure_callbacks(self):
        """The callbacks every run of this module needs (added to the trainer's)."""
        extra = [ValidateAtStart()] if self.hparams.validate_at_start else []
        return [RandomStateCheckpoint(), self.finite_guard, *extra]

    # ------------------------------------------------------------------ randomness, checkpoints
    def _attached(self) -> Optional[pl.Trainer]:
        try:
            return self.trainer
        except RuntimeError:  # not attached to a Trainer (a module used on its own)
            return None

    @property
    def seed(self) -> int:
        """The run's seed: the checkpoint's when resumed, else ``seed_everything``'s."""
        from .data.datamodule import run_seed

        return run_seed() if self._seed is None else self._seed

    def _draw(self, kind: int, *ids) -> None:
        rank = self.global_rank if self._attached() is not None else 0
        self._rng = np.random.default_rng([self.seed, kind, rank, *ids])

    def on_train_batch_start(self, batch, batch_idx):
        self._draw(0, self.global_step, batch_idx)

    def on_validation_batch_start(self, batch, batch_idx, dataloader_idx=0):
        self._draw(1, batch_idx)

    def on_test_batch_start(self, batch, batch_idx, dataloader_idx=0):
        self._draw(2, batch_idx)

    def on_save_checkpoint(self, checkpoint: dict) -> None:
        """The trained merging head goes back into the pipeline settings, with the fingerprint
        of the network it now runs with (what ``hiseg predict`` reads)."""
        if self.merge_head is not None:
            from .segmentation.merging import network_fingerprint

            self.merge_head.network = network_fingerprint(self.model)
            self.pipeline = self.pipeline.with_overrides(merge_head=self.merge_head.to_spec())
            self.hparams["pipeline"] = self.pipeline.to_dict()
            if isinstance(checkpoint.get("hyper_parameters"), dict):
                checkpoint["hyper_parameters"]["pipeline"] = dict(self.hparams["pipeline"])

    def on_load_checkpoint(self, checkpoint: dict) -> None:
        if checkpoint.get("hiseg") is not None:
            self._seed = int(checkpoint["hiseg"]["seed"])

    # ------------------------------------------------------------------ the step
    @property
    def rebuilds_superpixels(self) -> bool:
        """Whether the step builds the superpixels from the prediction (all but ``color_watershed``)."""
        return self.pipeline.superpixels != "color_watershed"

    def setup(self, stage: str) -> None:
        """Hand the pipeline to the data module (``use_pipeline``), so that its loaders compute
        exactly the superpixels the pipeline trains on, or none when the step rebuilds them."""
        trainer = self._attached()
        use = getattr(trainer.datamodule if trainer is not None else None, "use_pipeline", None)
        if use is not None:
            use(self.pipeline)

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        """Boundary logits (B, 1, H, W)."""
        return self.model(images)

    def consensus_targets(self, batch):
        """(pos, neg) masks (B, H, W) of the ``edge`` pixel loss, on the batch's device: the
        annotators' one-pixel-wide boundaries, made on the host (one copy)."""
        from .data.targets import mean_boundary

        b, hp, wp = batch.boundary.shape
        cons = np.full((b, hp, wp), -1.0, np.float32)
        for i, (seg, (h, w)) in enumerate(zip(batch.segmentations, batch.image_sizes)):
            if len(seg):
                cons[i, :h, :w] = mean_boundary(seg, thick=False)
        cons = torch.from_numpy(cons).to(batch.boundary.device, non_blocking=True)
        return loss_terms.consensus_targets(cons, cons >= 0, self.hparams.positive_threshold)

    def _sample_triplets(self, batch, device):
        """(ref, pos, neg, valid) on the device, from a generator seeded by this step's draw."""
        gen = torch.Generator(device=device)
        gen.manual_seed(int(self._rng.integers(2 ** 63 - 1)))
        ptr = batch.vertex_offsets
        if ptr is None:  # a batch made without the field: one more (small) copy
            ptr = torch.as_tensor(np.asarray(batch.graph.vertex_ptr, dtype=np.int64), device=device)
        num_labels = batch.num_labels or int(batch.sp_labels.max()) + 1
        return loss_terms.sample_batch_triplets_torch(batch.sp_labels, ptr, int(self.hparams.triplets_per_image),
                                                      num_labels, gen)

    def _network(self, images):
        """(logits, side outputs): the side outputs only for the ``edge`` pixel term."""
        if "pixel" in self.objective.active and self.hparams.pixel_loss == "edge":
            return self.model(images, return_side_outputs=True)
        return self.model(images), []

    def pixel_stage_losses(self, batch) -> dict:
        """Losses of a :class:`~hiseg.data.edges.PixelBatch` (the pixel stage): the ``pixel``
        term alone, against the batch's consensus labels."""
        hp = self.hparams
        if set(self.objective.active) != {"pixel"} or hp.pixel_loss != "edge":
            raise ValueError(_PIXEL_BATCH)
        images = batch.images
        if images.device.type == "cuda":
            images = images.contiguous(memory_format=torch.channels_last)
        fused, sides = self._network(images)
        x = loss_terms.LossInputs(pixel_map=fused, side_maps=sides, consensus=loss_terms.consensus_targets(
            batch.consensus, batch.valid, hp.positive_threshold))
        total, parts = self.objective(x)
        return {**parts, "loss": total}

    @property
    def host_pool(self):
        """The process pool of the host's share of a step (:func:`hiseg.segmentation.hostpool.host_pool`
        of ``host_workers``), None in process."""
        return host_pool(self.hparams.get("host_workers"))

    def rebuild_graphs(self, batch, maps: torch.Tensor):
        """The batch with the pipeline's superpixels of its (B, H, W) maps (detached, on the
        host), its RAGs and targets rebuilt from the ground truths, one image per job of the
        host pool (:func:`hiseg.data.collate.rebuild_graphs`)."""
        from .data.collate import rebuild_graphs

        return rebuild_graphs(batch, maps, self.pipeline, self.host_pool)

    def compute_losses(self, batch, logits=None, timings: Optional[dict] = None) -> LossResult:
        """The losses of a :class:`~hiseg.data.collate.GraphBatch` through the pipeline
        (:class:`LossResult`). ``timings`` (a dict), if given, receives the seconds of:
        ``superpixels`` (rebuilt from the prediction; 0 with ``color_watershed``), ``pooling``
        (the edge weights), ``pixel`` (the terms that do not read the tree), ``tree`` (the
        weights' copy, the tree, the indices' copy) and ``loss`` (all the terms); the network is
        not timed when ``logits`` are given. FloatingPointError for non-finite weights or terms."""
        pipe, obj = self.pipeline, self.objective
        sides = []
        if logits is None:
            logits, sides = self._network(batch.images)
        clock = _Clock(timings, batch.images.device)
        # pooling, trees and losses run in float32 whatever the network's dtype (bf16-mixed)
        maps = pipe.maps(self.model, batch.images, torch.sigmoid(logits[:, 0].float()))
        if self.rebuilds_superpixels:
            batch = self.rebuild_graphs(batch, maps)
        elif not batch.has_graph:
            raise ValueError(_NO_SUPERPIXELS)
        clock("superpixels")
        w = pipe.graph_weights(batch.rags, maps, batch.images, head=self.merge_head, frontier=(
            batch.frontier_pixels_a, batch.frontier_pixels_b, batch.frontier_edge, batch.frontier_count))
        clock("pooling")
        x = loss_terms.LossInputs(
            weights=w, pixel_map=logits, side_maps=sides, pixel_target=loss_terms.Lazy(lambda: batch.boundary),
            consensus=loss_terms.Lazy(lambda: self.consensus_targets(batch)),
            target=loss_terms.Lazy(lambda: batch.edge_target.to(w.dtype)),
            triplets=loss_terms.Lazy(lambda: self._sample_triplets(batch, w.device)))
        early = [n for n in obj.active if not {"ultrametric", "hierarchy"} & loss_terms.TERMS[n].needs]
        parts = obj.parts(x, early)
        clock("pixel")
        # the step's one device-to-host copy: the weights for the tree, the early terms for their check
        host = torch.cat([w.detach(), *(parts[n].detach().reshape(1).to(w.dtype) for n in early)]).cpu().numpy()
        _check_finite(host, w.numel(), early, self.global_step)
        lengths = (np.concatenate([r.frontier_lengths() for r in batch.rags]).astype(np.float64)
                   if pipe.linkage == "average" else None)
        u, h = pipe.ultrametric(batch.graph, w, lengths, host_weights=host[:w.numel()], lca="triplets" in obj.needs,
                                pool=self.host_pool)
        clock("tree")
        x.update(ultrametric=u, hierarchy=h)
        parts.update(obj.parts(x, [n for n in obj.active if n not in parts]))
        out = {**parts, "loss": obj.total(parts, like=w)}
        clock("loss")
        return LossResult(out, u, h, batch)

    def training_step(self, batch, batch_idx):
        if hasattr(batch, "consensus"):  # a PixelBatch: checked on the device, read every log_every_n_steps
            out = self.pixel_stage_losses(batch)
            trainer = self._attached()
            self.finite_guard.watch(out, self.global_step, trainer.log_every_n_steps if trainer is not None else 1)
        else:
            out = self.compute_losses(batch).losses
        for k, v in out.items():
            self.log(f"train/{k}", v, batch_size=batch.batch_size, prog_bar=(k == "loss"))
        return out["loss"]

    # ------------------------------------------------------------------ validation
    def evaluate_batch(self, batch):
        """(loss values, boundary counts) of a validation batch: the losses of the step and the
        counts at ``val_threshold`` then :data:`VAL_THRESHOLDS` (:func:`batch_boundary_counts`)."""
        out, u, _, batch = self.compute_losses(batch)  # batch: the graphs the losses used (maybe rebuilt)
        thr = np.concatenate([[self.hparams.val_threshold], VAL_THRESHOLDS])
        counts = batch_boundary_counts(batch.rags, batch.graph.edge_ptr, u.detach().cpu().numpy(),
                                       batch.image_sizes, batch.segmentations, thr)
        return {k: float(v) for k, v in out.items()}, counts

    def validation_step(self, batch, batch_idx):
        self.val_metrics.update(*self.evaluate_batch(batch), batch.batch_size)

    def test_step(self, batch, batch_idx):
        """The validation metrics on the test set (``train.py test``), logged as ``test/...``."""
        self.test_metrics.update(*self.evaluate_batch(batch), batch.batch_size)

    def _log_summary(self, prefix: str, metrics: SegmentationMetrics):
        summ = metrics.compute()  # summed over the processes: every process calls it
        metrics.reset()
        for k, v in summ.items():  # already global: sync_dist's mean keeps them
            self.log(f"{prefix}/{k}", float(v), prog_bar=(k in ("boundary_f", "boundary_f_ods", "loss")),
                     batch_size=1, sync_dist=True)

    def on_validation_epoch_start(self):
        self.val_metrics.reset()

    def on_test_epoch_start(self):
        self.test_metrics.reset()

    def on_validation_epoch_end(self):
        self._log_summary("val", self.val_metrics)

    def on_test_epoch_end(self):
        self._log_summary("test", self.test_metrics)

    def on_fit_start(self):
        if self.device.type == "cuda":  # convolutions in channels-last, as cuDNN prefers (bf16 too)
            self.model.to(memory_format=torch.channels_last)

    # ------------------------------------------------------------------ optimisation
    def configure_optimizers(self):
        """AdamW with a linear warm-up then a cosine decay to ``final_lr * lr`` (:meth:`lr_factor`);
        the merging head at ``head_lr_scale * lr``, alone with ``freeze_network``."""
        hp = self.hparams
        groups = [] if hp.get("freeze_network") else [{"params": list(self.model.parameters())}]
        if self.merge_head is not None and hp.get("head_lr_scale", 1.0) > 0:
            groups.append({"params": list(self.merge_head.parameters()), "lr": hp.lr * hp.get("head_lr_scale", 1.0)})
        opt = torch.optim.AdamW(groups, lr=hp.lr, weight_decay=hp.weight_decay)
        sched = torch.optim.lr_scheduler.LambdaLR(opt, self.lr_factor)
        return {"optimizer": opt, "lr_scheduler": {"scheduler": sched, "interval": "step"}}

    def lr_factor(self, step: int) -> float:
        """The step size of optimiser step ``step`` as a fraction of ``lr``; the trainer's total
        number of steps is read at every step, so a resumed run with a larger ``max_steps``
        stretches the schedule."""
        trainer = self._attached()
        total = trainer.estimated_stepping_batches if trainer is not None else None
        if not total or math.isinf(total):
            return 1.0
        wu = float(self.hparams.get("warmup", 0.05))
        warm = max(1, int(wu * total) if wu < 1 else int(wu))
        if step < warm:
            return (step + 1) / warm
        prog = min(1.0, (step - warm) / max(1, total - warm))
        low = float(self.hparams.get("final_lr", 0.05))
        return low + (1 - low) * 0.5 * (1 + math.cos(math.pi * prog))

    def transfer_batch_to_device(self, batch, device, dataloader_idx):
        return batch.to(device) if hasattr(batch, "rags") else super().transfer_batch_to_device(
            batch, device, dataloader_idx)


def _check_finite(host: np.ndarray, n_weights: int, names, step: int) -> None:
    """FloatingPointError for non-finite edge weights (a diverged network) or terms."""
    from .segmentation.pipeline import DIVERGED

    if not np.isfinite(host[:n_weights]).all():
        raise FloatingPointError(DIVERGED)
    bad = {n: float(v) for n, v in zip(names, host[n_weights:]) if not np.isfinite(v)}
    if bad:
        raise FloatingPointError(f"non-finite training loss at step {step} ({bad}); the last checkpoint stays "
                                 "loadable; lower the learning rate or check the data")


class _Clock:
    """Stage timings of :meth:`HierarchicalSegmentationModule.compute_losses` (on CUDA it waits
    for the device at each stage boundary, only when timings are asked for)."""

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
