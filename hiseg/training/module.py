r"""The LightningModule of both training stages: orchestration only.

One training step on a :class:`~hiseg.data.collate.GraphBatch` (the walk of
``docs/architecture.md``): the network's logits; the checkpoint's
:class:`~hiseg.segmentation.Pipeline` makes the boundary maps (:meth:`Pipeline.maps`: its scales
and flip, differentiable), the superpixels when it builds them from the prediction
(:func:`hiseg.data.graphs.rebuild_graphs`: the batch's graphs and targets rebuilt), the edge
weights (:meth:`Pipeline.graph_weights`: frontier mean or the merging head) and the ultrametric
(:meth:`Pipeline.batch_ultrametric`, the trees built on the host); the loss is the registry's
:class:`~hiseg.core.losses.Objective` of the configured terms; AdamW with a warm-up and a cosine
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

import warnings
from typing import Optional

import numpy as np
import pytorch_lightning as pl
import torch

from .._params import check_parameters
from ..core import losses as loss_terms
from ..data.graphs import rebuild_graphs
from .callbacks import (CSVLogger, FiniteLossGuard, LastCheckpoint, RandomStateCheckpoint,  # noqa: F401 (configs)
                        TensorBoardLogger, ValidateAtStart)
from ..metrics.validation import VAL_THRESHOLDS, SegmentationMetrics, batch_boundary_counts
from ..models import get_model
from ..models.weights import check_architecture, checked_arch_kwargs
from ..segmentation.hostpool import host_pool, resolve_workers
from ..segmentation.pipeline import Pipeline
from .steps import (MODULE_CONSTRAINTS, NO_SUPERPIXELS, PIXEL_BATCH, LossResult, StageClock, batch_consensus,
                       channels_last_agrees, check_finite, merge_head_of, precision_dtype, start_and_pipeline,
                       step_triplets, warmup_cosine)

__all__ = ["HierarchicalSegmentationModule", "SegmentationMetrics", "LossResult", "LastCheckpoint", "CSVLogger",
           "TensorBoardLogger", "VAL_THRESHOLDS"]

class HierarchicalSegmentationModule(pl.LightningModule):
    """Learned hierarchical segmentation by ultrametric fitting.

    Parameters
    ----------
    arch, arch_kwargs : the boundary network (:func:`hiseg.models.get_model`); without
        ``arch_kwargs`` a network started from ``init_from`` takes the checkpoint's.
    lr, weight_decay, warmup, final_lr : AdamW; a linear warm-up (a fraction of the run's steps
        below 1, else steps) then a cosine decay to ``final_lr * lr``.
    closest_weight, triplet_weight, pixel_weight : weights of the registry's ``closest``,
        ``triplet`` and ``pixel`` terms (:data:`hiseg.core.losses.TERMS`).
    losses : dict, optional
        More terms of the registry, name -> weight (:func:`hiseg.core.losses.register_loss`).
    margin : the triplet margin; ``triplets_per_image`` triplets are drawn per image and step.
    pixel_loss : ``"balanced_bce"`` (HED's, against the thick mean annotator boundary) or
        ``"edge"`` (the pixel stage's :func:`hiseg.core.losses.edge_loss`: consensus labels, positive
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
    freeze_network : train the merging head alone, the network frozen and kept in eval mode
        (its batch-norm statistics unchanged; ``lr`` is then the head's;
        ``configs/bsds500_merge_head.yaml``).
    new_merge_head : a new merging head to train (``features``, ``hidden``, ``output``, ``context``;
        standardised on its first batch), saved into the pipeline with the network's fingerprint.
    optimizer : ``"adamw"``, or ``"amsgrad"`` (Adam, amsgrad, L2 weight decay: the head recipe's).
    Bad values are refused by name (ValueError ``model.<name> must be ...``; the table:
    :data:`hiseg.training.steps.MODULE_CONSTRAINTS`).
    host_workers : processes that build a batch's trees and rebuild its superpixels
        (:mod:`hiseg.segmentation.hostpool`): None, the host's cores; 0, in process. The
        losses do not depend on it.

    Randomness: a step's triplets are drawn from ``default_rng([seed, 0, rank, global_step,
    batch_idx])`` (validation / test ``[seed, 1 or 2, rank, batch_idx]``), ``seed`` the run's
    (:func:`hiseg.data.datamodule.run_seed`, the checkpoint's when resumed), so a resumed run
    draws what the uninterrupted one drew (:class:`hiseg.training.callbacks.RandomStateCheckpoint`
    restores the global generators).
    """

    #: the checkpoint's pipeline: the step's maps, graphs' rebuild settings, edge weights and trees
    pipeline: Pipeline

    def __init__(self, arch: str = "compact_boundary_net", arch_kwargs: Optional[dict] = None,
                 lr: float = 2e-3, weight_decay: float = 1e-4, closest_weight: float = 1.0,
                 triplet_weight: float = 0.5, pixel_weight: float = 0.1, margin: float = 0.2,
                 triplets_per_image: int = 2000, val_threshold: float = 0.5,
                 validate_at_start: bool = True, init_from: Optional[str] = None,
                 pipeline: Optional[dict] = None, pixel_loss: str = "balanced_bce", warmup: float = 0.05,
                 final_lr: float = 0.05, positive_threshold: float = 0.3, dice_weight: float = 1.0,
                 head_lr_scale: float = 1.0, pipeline_from_init: bool = False, losses: Optional[dict] = None,
                 freeze_network: bool = False, host_workers: Optional[int] = None,
                 new_merge_head: Optional[dict] = None, optimizer: str = "adamw"):
        check_parameters(MODULE_CONSTRAINTS, locals(), "model.")  # hiseg.training.steps: one line per parameter
        super().__init__()
        start, self.pipeline = start_and_pipeline(init_from, pipeline, pipeline_from_init)
        self.objective = loss_terms.Objective({"closest": closest_weight, "triplet": triplet_weight,
                                               "pixel": pixel_weight, **(losses or {})},
                                              margin=margin, pixel_loss=pixel_loss, dice_weight=dice_weight)
        pipeline = self.pipeline.to_dict()  # save_hyperparameters reads this local: the full settings
        self.save_hyperparameters()
        # LightningCLI records the parsed config instead of the locals: store the settings used
        self.hparams["pipeline"] = pipeline
        from_start = (start is not None and arch_kwargs is None and start.hyper_parameters.get("arch") == arch
                      and start.hyper_parameters.get("arch_kwargs") is not None)
        if from_start:
            arch_kwargs = self.hparams["arch_kwargs"] = checked_arch_kwargs(start.hyper_parameters, start.path)
        if start is not None:  # refused before it is built when it does not fit the start's tensors
            check_architecture(arch, arch_kwargs or {}, start.state_dict, start.path, start.hyper_parameters,
                               bounded=from_start)
        self.model = get_model(arch, **(arch_kwargs or {}))
        if start is not None:
            from ..models.weights import load_weights

            load_weights(self.model, start)
        self.merge_head = merge_head_of(self.pipeline, self.model, head_lr_scale > 0, freeze_network, new_merge_head)
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
        from ..data.datamodule import run_seed

        return run_seed() if self._seed is None else self._seed

    def _draw(self, kind: int, *ids) -> None:
        rank = self.global_rank if self._attached() is not None else 0
        self._rng = np.random.default_rng([self.seed, kind, rank, *ids])

    def on_train_batch_start(self, batch, batch_idx):
        self._draw(0, self.global_step, batch_idx)
        if self.hparams.get("freeze_network"):  # Lightning restores its submodules' modes one by one
            self.model.eval()

    def on_validation_batch_start(self, batch, batch_idx, dataloader_idx=0):
        self._draw(1, batch_idx)

    def on_test_batch_start(self, batch, batch_idx, dataloader_idx=0):
        self._draw(2, batch_idx)

    def on_save_checkpoint(self, checkpoint: dict) -> None:
        """The trained merging head goes back into the pipeline settings, with the fingerprint
        of the network it now runs with (what ``hiseg predict`` reads)."""
        if self.merge_head is not None:
            from ..segmentation.merging import network_fingerprint

            self.merge_head.network = network_fingerprint(self.model)
            self.pipeline = self.pipeline.with_overrides(merge_head=self.merge_head.to_spec())
            self.hparams["pipeline"] = self.pipeline.to_dict()
            if isinstance(checkpoint.get("hyper_parameters"), dict):  # the head is the pipeline's now
                checkpoint["hyper_parameters"].update(pipeline=dict(self.hparams["pipeline"]), new_merge_head=None)

    def on_load_checkpoint(self, checkpoint: dict) -> None:
        if checkpoint.get("hiseg") is not None:
            self._seed = int(checkpoint["hiseg"]["seed"])
        # the optimizer's saved groups replace its own when a run resumes, "fused" included, and torch places the
        # step counters by the saved value: this run's choice, so that a run saved on the CPU resumes fused on CUDA
        fused = self._fused_optimizer()
        for state in checkpoint.get("optimizer_states") or []:
            for group in state.get("param_groups", []):
                group["fused"] = fused

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

    def compile_network(self, enabled: bool = True, **compile_kwargs) -> None:
        """Run the training steps' network through ``torch.compile(self.model, **compile_kwargs)``
        (:class:`~hiseg.training.callbacks.CompileNetwork`). The compiled wrapper shares the network's
        parameters and is not a submodule (the state-dict keys, hence checkpoints, are
        unchanged); validation, prediction and anything in eval mode run the network as it is:
        whole images of other sizes would compile again each, with dynamic shapes, which
        TorchInductor failed to compile for ``pdc_boundary_net``'s folded eval-mode kernels
        (PyTorch 2.14 on the CPU: ``TensorReferenceAnalysis`` has no ``python_mod``).
        ``enabled=False``: the training steps run the network as it is again."""
        object.__setattr__(self, "_train_network", torch.compile(self.model, **compile_kwargs) if enabled else None)

    def _network(self, images):
        """(logits, side outputs): the side outputs only for the ``edge`` pixel term."""
        compiled = self.__dict__.get("_train_network")
        net = compiled if compiled is not None and self.training and self.model.training else self.model
        if "pixel" in self.objective.active and self.hparams.pixel_loss == "edge":
            return net(images, return_side_outputs=True)
        return net(images), []

    def pixel_stage_losses(self, batch) -> dict:
        """Losses of a :class:`~hiseg.data.edges.PixelBatch` (the pixel stage): the ``pixel``
        term alone, against the batch's consensus labels."""
        hp = self.hparams
        if set(self.objective.active) != {"pixel"} or hp.pixel_loss != "edge":
            raise ValueError(PIXEL_BATCH)
        images = batch.images
        if getattr(self, "_channels_last", False):
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

    def compute_losses(self, batch, logits=None, timings: Optional[dict] = None) -> LossResult:
        """The losses of a :class:`~hiseg.data.collate.GraphBatch` through the pipeline
        (:class:`LossResult`). ``timings`` (a dict), if given, receives the seconds of:
        ``superpixels`` (rebuilt from the prediction; 0 with ``color_watershed``), ``pooling``
        (the edge weights), ``pixel`` (the terms that do not read the tree), ``tree`` (the
        weights' copy, the tree, the indices' copy) and ``loss`` (all the terms); the network is
        not timed when ``logits`` are given. FloatingPointError for non-finite weights or terms."""
        obj = self.objective
        sides = []
        if logits is None:
            logits, sides = self._network(batch.images)
        clock = StageClock(timings, batch.images.device)
        # pooling, trees and losses run in float32 whatever the network's dtype (bf16-mixed)
        maps = self.pipeline.maps(self.model, batch.images, torch.sigmoid(logits[:, 0].float()))
        if self.rebuilds_superpixels:  # one image per job of the host pool
            batch = rebuild_graphs(batch, maps, self.pipeline, self.host_pool)
        elif not batch.has_graph:
            raise ValueError(NO_SUPERPIXELS)
        clock("superpixels")
        w = self.pipeline.graph_weights(batch.rags, maps, batch.images_on_host, head=self.merge_head, frontier=(
            batch.frontier_pixels_a, batch.frontier_pixels_b, batch.frontier_edge, batch.frontier_count))
        clock("pooling")
        x = loss_terms.LossInputs(
            weights=w, pixel_map=logits, side_maps=sides, pixel_target=loss_terms.Lazy(lambda: batch.boundary),
            consensus=loss_terms.Lazy(lambda: batch_consensus(batch, self.hparams.positive_threshold)),
            target=loss_terms.Lazy(lambda: batch.edge_target.to(w.dtype)),
            triplets=loss_terms.Lazy(lambda: step_triplets(batch, w.device, self._rng, self.hparams.triplets_per_image)))
        early = [n for n in obj.active if not {"ultrametric", "hierarchy"} & loss_terms.TERMS[n].needs]
        parts = obj.parts(x, early)
        clock("pixel")
        # the step's one device-to-host copy: the weights for the tree, the early terms for their check
        host = torch.cat([w.detach(), *(parts[n].detach().reshape(1).to(w.dtype) for n in early)]).cpu().numpy()
        check_finite(host, w.numel(), early, self.global_step)
        lengths = (np.concatenate([r.frontier_lengths() for r in batch.rags]).astype(np.float64)
                   if self.pipeline.linkage == "average" else None)
        u, h = self.pipeline.batch_ultrametric(batch.graph, w, lengths, host_weights=host[:w.numel()],
                                                lca="triplets" in obj.needs, pool=self.host_pool)
        clock("tree")
        x.update(ultrametric=u, hierarchy=h)
        parts.update(obj.parts(x, [n for n in obj.active if n not in parts]))
        out = {**parts, "loss": obj.total(parts, like=w)}
        clock("loss")
        return LossResult(out, u, h, batch)

    def training_step(self, batch, batch_idx):
        trainer = self._attached()
        if hasattr(batch, "consensus"):  # a PixelBatch: checked on the device, read every log_every_n_steps
            out = self.pixel_stage_losses(batch)
            self.finite_guard.watch(out, self.global_step, trainer.log_every_n_steps if trainer is not None else 1)
        else:
            out = self.compute_losses(batch).losses
        # Lightning reads every progress-bar value on the host at each step's end, shown or not (a
        # device sync per step on a GPU, the host unable to run ahead): only a shown bar gets the loss
        bar = trainer is not None and trainer.progress_bar_callback is not None
        for k, v in out.items():
            self.log(f"train/{k}", v, batch_size=batch.batch_size, prog_bar=bar and k == "loss")
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
        # convolutions in channels-last, as cuDNN prefers (bf16 too), where that layout trains the
        # network as the plain one does (a kernel bug in one layout would corrupt the run silently)
        self._channels_last = False
        if self.device.type == "cuda":
            precision = str(getattr(self.trainer, "precision", ""))
            self._channels_last = channels_last_agrees(self.model, self.device, precision_dtype(precision))
            self.model.to(memory_format=torch.channels_last if self._channels_last else torch.contiguous_format)
            if not self._channels_last:
                warnings.warn(f"channels-last gives other gradients than the plain layout for this network on "
                              f"{self.device} ({precision or 'fp32'}): training in the plain layout", stacklevel=2)

    # ------------------------------------------------------------------ optimisation
    def configure_optimizers(self):
        """AdamW (or Adam with amsgrad), a linear warm-up then a cosine decay to ``final_lr * lr``
        (:meth:`lr_factor`); the merging head at ``head_lr_scale * lr``, alone with ``freeze_network``."""
        hp = self.hparams
        groups = [] if hp.get("freeze_network") else [{"params": list(self.model.parameters())}]
        if self.merge_head is not None and hp.get("head_lr_scale", 1.0) > 0:
            groups.append({"params": list(self.merge_head.parameters()), "lr": hp.lr * hp.get("head_lr_scale", 1.0)})
        amsgrad = hp.get("optimizer", "adamw") == "amsgrad"  # Adam with L2 decay, else AdamW's decoupled decay
        opt = (torch.optim.Adam if amsgrad else torch.optim.AdamW)(groups, lr=hp.lr, weight_decay=hp.weight_decay,
                                                                   amsgrad=amsgrad, fused=self._fused_optimizer())
        sched = torch.optim.lr_scheduler.LambdaLR(opt, self.lr_factor)
        return {"optimizer": opt, "lr_scheduler": {"scheduler": sched, "interval": "step"}}

    def _fused_optimizer(self) -> Optional[bool]:
        """The optimizer's ``fused``: True where the run trains on CUDA (PyTorch's fused kernels, one
        launch for all parameters), else None (PyTorch's default); None with ``16-mixed`` and gradient
        clipping too (Lightning refuses to clip for an optimizer that unscales its own gradients)."""
        trainer = self._attached()
        if trainer is None:
            device, clip, precision = next(self.parameters()).device, None, ""
        else:
            device, clip, precision = trainer.strategy.root_device, trainer.gradient_clip_val, str(trainer.precision)
        return True if device.type == "cuda" and not (precision == "16-mixed" and clip) else None

    def lr_factor(self, step: int) -> float:
        """The step size of optimiser step ``step`` as a fraction of ``lr``; the trainer's total
        number of steps is read at every step, so a resumed run with a larger ``max_steps``
        stretches the schedule."""
        trainer = self._attached()
        return warmup_cosine(step, trainer.estimated_stepping_batches if trainer is not None else None,
                             float(self.hparams.get("warmup", 0.05)), float(self.hparams.get("final_lr", 0.05)))

    def transfer_batch_to_device(self, batch, device, dataloader_idx):
        return batch.to(device) if hasattr(batch, "rags") else super().transfer_batch_to_device(
            batch, device, dataloader_idx)
