r"""The LightningModule of both training stages: image -> boundary map -> RAG edge weights ->
ultrametric -> losses.

One training step on a :class:`~hiseg.data.collate.GraphBatch` of B images:

1. ``logits = model(images)`` on the device, ``p = sigmoid(logits)``;
2. ``w = frontier_mean(p)``: the mean boundary probability along every RAG frontier,
   for all B graphs at once (a scatter on the device, divided by the frontier lengths
   the batch carries: nothing counted, nothing read back);
3. the pixel term on the logits (HED's balanced BCE, or the pixel stage's ``edge``
   loss), and triplets of superpixels sampled per image and annotator with torch on the
   device (:func:`hiseg.losses.sample_batch_triplets_torch`);
4. ``w`` (and the pixel term's value) go to the host in **the step's one device-to-host
   copy**, where they are checked finite; one batched tree construction on the CPU
   (``u = average_linkage_ultrametric(batch.graph, w)``, the pipeline's linkage;
   ``single`` gives the subdominant ultrametric); every index the device needs (the
   tree's gathers, the leaf-lca tables of the triplets) comes back in **the step's one
   host-to-device copy** (:func:`hiseg.ultrametric.upload_indices`);
5. losses on the device: closest :math:`\mathrm{mean}(u - t)^2` against the fraction
   ``t`` of annotators separating the two superpixels, triplet
   :math:`\mathrm{mean}\max(0, \alpha + d_u(r,p) - d_u(r,n))` (the lcas of all
   triplets in one batched lookup on the device), plus the pixel term.

With a pipeline that builds the superpixels from the prediction (``boundary_watershed``)
the step first rebuilds the batch's superpixels, RAGs and targets on the CPU
(:meth:`HierarchicalSegmentationModule.rebuild_graphs`): the boundary maps' copy to the
host and the new graph's copy to the device are a second copy each way.

The pixel stage of the BSDS recipe is the same module with ``closest_weight`` and
``triplet_weight`` 0 and ``pixel_loss: edge``, fed by
:class:`hiseg.data.edges.BSDS500PixelDataModule`, whose training batches are
:class:`~hiseg.data.edges.PixelBatch` es of device-augmented crops (no superpixels, no
trees: the step is the network and :func:`hiseg.losses.edge_loss`); its validation is the
hierarchy's, as for the fine-tuning (``configs/bsds500_pixel.yaml``, then
``configs/bsds500_finetune.yaml`` with ``--model.init_from`` the pixel stage's checkpoint).
"""
from __future__ import annotations

import math
import random
import time
import warnings
from typing import NamedTuple, Optional

import numpy as np
import pytorch_lightning as pl
import torch
import torch.nn.functional as F
import torchmetrics

from . import losses
from .callbacks import CSVLogger, LastCheckpoint, TensorBoardLogger  # noqa: F401 (configs name them here too)
from .models import get_model
from .segmentation.pooling import frontier_mean
from .segmentation.saliency import ucm2_from_rag
from .ultrametric import build_average_linkage_hierarchy, build_hierarchy, upload_indices

__all__ = ["HierarchicalSegmentationModule", "SegmentationMetrics", "LossResult", "LastCheckpoint", "CSVLogger",
           "TensorBoardLogger"]

VAL_THRESHOLDS = np.linspace(0.1, 0.9, 9)
PIXEL_LOSSES = ("balanced_bce", "edge")
LOSS_KEYS = ("closest", "triplet", "pixel", "loss")


class SegmentationMetrics(torchmetrics.Metric):
    """Validation / test numbers of a whole set: losses and boundary precision, recall, F.

    :meth:`update` takes one batch's loss values, its boundary counts and its number of
    images; the states are sums (images, loss sums weighted by the batch size, images
    with each loss, boundary counts per threshold), which torchmetrics adds up over the
    processes (DDP) in :meth:`compute`; every process must call :meth:`compute`.

    :meth:`compute` returns ``{}`` when no image was seen, else floats: each loss (mean
    per image; a loss missing from some images, e.g. no triplet, counts as 0 there, as
    in the training step), ``boundary_f`` / ``boundary_precision`` / ``boundary_recall``
    at the fixed threshold and ``boundary_f_ods``, the best F over
    :data:`VAL_THRESHOLDS`: the F of the counts summed over the set (not a mean of
    per-image Fs). Counts per threshold are ``(matched GT, GT, matched predicted,
    predicted)`` boundary pixels (:meth:`hiseg.metrics.boundary.BoundaryMatcher.counts`).
    """

    full_state_update = False

    def __init__(self, n_thresholds: int = 1 + VAL_THRESHOLDS.size, **kwargs):
        super().__init__(**kwargs)
        # float64 holds the integer counts exactly (and every backend reduces it)
        f64 = dict(dtype=torch.float64)
        self.add_state("images", torch.zeros((), **f64), dist_reduce_fx="sum")
        self.add_state("loss_sums", torch.zeros(len(LOSS_KEYS), **f64), dist_reduce_fx="sum")
        self.add_state("loss_images", torch.zeros(len(LOSS_KEYS), **f64), dist_reduce_fx="sum")
        self.add_state("counts", torch.zeros(int(n_thresholds), 4, **f64), dist_reduce_fx="sum")

    def update(self, loss_values: dict, counts, batch_size: int) -> None:
        """One batch: ``loss_values`` (name -> float, names in :data:`LOSS_KEYS`), ``counts``
        (n_thresholds, 4) summed over its images, ``batch_size`` images."""
        counts = torch.as_tensor(np.asarray(counts, dtype=np.float64), device=self.counts.device)
        if counts.shape != self.counts.shape:
            raise ValueError(f"boundary counts of shape {tuple(counts.shape)}, expected {tuple(self.counts.shape)}")
        unknown = set(loss_values) - set(LOSS_KEYS)
        if unknown:
            raise ValueError(f"unknown losses {sorted(unknown)}; expected some of {LOSS_KEYS}")
        self.images += batch_size
        for i, k in enumerate(LOSS_KEYS):
            if k in loss_values:
                self.loss_sums[i] += float(loss_values[k]) * batch_size
                self.loss_images[i] += batch_size
        self.counts += counts

    def compute(self) -> dict:
        n = float(self.images)
        if n == 0:
            return {}
        sums, seen, c = self.loss_sums.cpu().numpy(), self.loss_images.cpu().numpy(), self.counts.cpu().numpy()
        summ = {k: float(sums[i] / n) for i, k in enumerate(LOSS_KEYS) if seen[i] > 0}
        rec = c[:, 0] / np.maximum(c[:, 1], 1)
        prec = c[:, 2] / np.maximum(c[:, 3], 1)
        f = np.where(prec + rec > 0, 2 * prec * rec / np.maximum(prec + rec, 1e-12), 0.0)
        summ["boundary_f"] = float(f[0])  # at the fixed threshold
        summ["boundary_precision"], summ["boundary_recall"] = float(prec[0]), float(rec[0])
        summ["boundary_f_ods"] = float(f[1:].max())  # best of the other thresholds over the set
        return summ


_NO_SUPERPIXELS = ("the batch has no superpixels, but model.pipeline.superpixels is 'color_watershed', which "
                   "trains on the loaders' superpixels: hiseg's data modules compute them when the model hands "
                   "them its pipeline (use_pipeline, in setup); another loader must give batches with a graph "
                   "(hiseg.data.collate), or use a pipeline that builds them from the prediction "
                   "(boundary_watershed, all_minima)")


class LossResult(NamedTuple):
    """What :meth:`HierarchicalSegmentationModule.compute_losses` computed: the losses
    (name -> scalar tensor, ``"loss"`` their weighted sum), the ultrametric (E_total,) and
    its hierarchy, and the batch whose graphs they are on (rebuilt by the pipeline from
    the prediction, for ``boundary_watershed``)."""

    losses: dict
    ultrametric: torch.Tensor
    hierarchy: object
    batch: object


_PIXEL_BATCH = ("the data module gives pixel-stage batches (crops with consensus labels, no regions): the model "
                "needs closest_weight: 0, triplet_weight: 0, pixel_loss: edge and pixel_weight > 0 "
                "(configs/bsds500_pixel.yaml)")

_DIVERGED = ("non-finite boundary map (NaN or infinite network output): the network diverged; the last "
             "checkpoint stays loadable; lower the learning rate or check the data")

_POOL = None


def _thread_pool():
    """One process-wide thread pool for the per-image CPU work of a batch."""
    global _POOL
    if _POOL is None:
        import os
        from concurrent.futures import ThreadPoolExecutor

        _POOL = ThreadPoolExecutor(max_workers=max(1, min(16, len(os.sched_getaffinity(0)))),
                                   thread_name_prefix="hiseg-rebuild")
    return _POOL


class HierarchicalSegmentationModule(pl.LightningModule):
    """Learned hierarchical segmentation by ultrametric fitting.

    Parameters
    ----------
    arch : str
        Boundary network name in :func:`hiseg.models.list_models`.
    arch_kwargs : dict, optional
        Keyword arguments of the builder (e.g. ``{"width": 16}``, ``{"pretrained_backbone": "auto"}``).
    lr, weight_decay : float
        AdamW parameters; the step size follows a linear warm-up then a cosine decay over
        the run (:meth:`configure_optimizers`).
    warmup : float
        Length of the warm-up: a fraction of the run's steps when below 1, else a number
        of steps.
    final_lr : float
        The step size at the end of the run, as a fraction of ``lr``.
    closest_weight, triplet_weight, pixel_weight : float
        Weights of the closest, triplet and pixel terms. The pixel stage (training batches
        of :class:`~hiseg.data.edges.PixelBatch`, which carry no annotations per region)
        needs ``closest_weight = triplet_weight = 0`` and ``pixel_loss: edge``.
    margin : float
        Triplet margin alpha (edge weights are probabilities in [0, 1]).
    triplets_per_image : int
        Triplets sampled per image and step (split over annotators).
    val_threshold : float
        Threshold of the saliency map for the validation boundary F-measure.
    validate_at_start : bool
        Evaluate the validation set once before training (logged as step 0), so that the
        run shows its improvement.
    init_from : str, optional
        Path of a checkpoint (Lightning, slim or plain state dict), or the name of shipped
        weights (``bsds500``), whose model weights start the run (fine-tuning), loaded with
        ``weights_only=True``. Without ``arch_kwargs``, the network takes the architecture the
        checkpoint names (when it was made by ``arch``).
    pipeline : dict, optional
        Settings of the :class:`hiseg.segmentation.Pipeline` (superpixels, linkage, ...)
        that the losses, validation and ``hiseg predict`` all use; stored in the
        checkpoint. Default: :data:`hiseg.data.datamodule.TRAINING_PIPELINE`, colour-watershed
        superpixels (of ``region_size`` 8, computed by the loaders) with average linkage. With ``superpixels: boundary_watershed`` the superpixels of every
        training and validation image are rebuilt at each step from the network's
        current (detached) boundary map, exactly as at inference.
    pixel_loss : ``"balanced_bce"`` (default) or ``"edge"``
        The pixel term: ``balanced_bce`` is a class-balanced BCE of the fused logits
        against the thick mean annotator boundary; ``edge`` is the pixel stage's own loss
        (:func:`hiseg.losses.edge_loss`: consensus labels from one-pixel-wide annotator
        boundaries, positive where at least ``positive_threshold`` of the annotators agree,
        ignored between, balanced BCE on the fused and side outputs plus ``dice_weight``
        times Dice), so that fine-tuning does not pull the network away from the pixel
        stage's optimum.
    positive_threshold, dice_weight : float
        Of the ``edge`` pixel loss.
    head_lr_scale : float
        With a pipeline holding a learned merging head (``pipeline.merge_head``, e.g.
        ``init_from: bsds500_merge``): the head's learning rate as a multiple of ``lr``; the
        head is then trained jointly with the network, on its features computed in torch from
        the pipeline's map (its scales and flip, as at inference), and saved back into the
        checkpoint's pipeline with the fingerprint of the fine-tuned network. 0 freezes the
        head (the network still learns through it). The head must have been fitted on this
        network's maps (``merge_head.network``; refused by name otherwise).
    pipeline_from_init : bool
        Take the pipeline of ``init_from``'s checkpoint (with its merging head, if any), e.g.
        ``init_from: bsds500_merge`` for the joint fine-tuning of ``configs/bsds500_joint.yaml``.

    Randomness and resume: the triplets of a training step are drawn from
    ``default_rng([seed, 0, rank, global_step, batch_idx])`` (validation / test:
    ``[seed, 1 or 2, rank, batch_idx]``), with ``seed`` the run's seed
    (:func:`hiseg.data.datamodule.run_seed`), so a resumed run draws what the
    uninterrupted run drew. Checkpoints hold ``checkpoint["hiseg"]``: that seed, the
    torch (CPU and CUDA), numpy and Python global generator states (restored when a fit
    resumes) and the loggers' versions (``train.py`` resumes into the same log folders).
    Validation and test metrics (:class:`SegmentationMetrics`, a torchmetrics ``Metric``)
    are computed from boundary counts and loss sums summed over all processes (DDP), so
    every process logs, and ``ModelCheckpoint`` selects on, the F-measure of the whole set.

    Superpixels: the pipeline owns them, for training as for inference. :meth:`setup`
    hands it to the data module (``use_pipeline``, hiseg's data modules): with
    ``pipeline.superpixels: color_watershed`` the loaders compute exactly its
    ``make_superpixels`` (and the losses use them); with any other setting the loaders
    compute none and the step rebuilds them from the prediction (:meth:`rebuild_graphs`).
    """

    def __init__(self, arch: str = "compact_boundary_net", arch_kwargs: Optional[dict] = None,
                 lr: float = 2e-3, weight_decay: float = 1e-4, closest_weight: float = 1.0,
                 triplet_weight: float = 0.5, pixel_weight: float = 0.1, margin: float = 0.2,
                 triplets_per_image: int = 2000, val_threshold: float = 0.5,
                 validate_at_start: bool = True, init_from: Optional[str] = None,
                 pipeline: Optional[dict] = None, pixel_loss: str = "balanced_bce", warmup: float = 0.05,
                 final_lr: float = 0.05, positive_threshold: float = 0.3, dice_weight: float = 1.0,
                 head_lr_scale: float = 1.0, pipeline_from_init: bool = False):
        super().__init__()
        if pixel_loss not in PIXEL_LOSSES:
            raise ValueError(f"model.pixel_loss must be one of {PIXEL_LOSSES}, got {pixel_loss!r}")
        if not warmup >= 0:
            raise ValueError(f"model.warmup must be >= 0 (a fraction of the steps below 1, else steps), got {warmup}")
        if not 0 <= final_lr <= 1:
            raise ValueError(f"model.final_lr must be in [0, 1] (a fraction of lr), got {final_lr}")
        if not 0 < positive_threshold <= 1:
            raise ValueError(f"model.positive_threshold must be in (0, 1], got {positive_threshold}")
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
        self.pipeline = Pipeline.from_dict(pipeline, source="model.pipeline") if not isinstance(
            pipeline, Pipeline) else pipeline
        if self.pipeline.linkage == "closest":
            raise ValueError("model.pipeline.linkage 'closest' is a fit, not a differentiable layer (inference "
                             "only): train with linkage 'average' or 'single'")
        if not head_lr_scale >= 0:
            raise ValueError(f"model.head_lr_scale must be >= 0 (0: the merging head frozen), got {head_lr_scale}")
        pipeline = self.pipeline.to_dict()  # save_hyperparameters reads this local: the full settings
        self.save_hyperparameters()
        # LightningCLI records the parsed config instead of the locals (pipeline: None when the
        # config leaves it out): store the settings actually used, which `hiseg predict` reads
        self.hparams["pipeline"] = pipeline
        if start is not None:
            made = start.hyper_parameters
            if arch_kwargs is None and made.get("arch") == arch and isinstance(made.get("arch_kwargs"), dict):
                # the checkpoint's architecture, unless the config gives one (then it must fit)
                arch_kwargs = dict(made["arch_kwargs"])
                self.hparams["arch_kwargs"] = arch_kwargs
        self.model = get_model(arch, **(arch_kwargs or {}))
        if start is not None:
            from .models.weights import load_weights

            load_weights(self.model, start)
        # a pipeline with a learned merging head: the head is trained jointly with the network (its
        # features in torch, differentiable in the map), from the network whose maps it was fitted on
        self.merge_head = None
        if self.pipeline.merge_head is not None:
            from .segmentation.merging import MergeHead

            self.merge_head = MergeHead.from_spec(self.pipeline.merge_head)  # its own copy: trained
            self.merge_head.check_network(self.model)
            self.merge_head.requires_grad_(head_lr_scale > 0)
        self._rng = np.random.default_rng(0)
        self._seed: Optional[int] = None  # the run's seed (restored from checkpoints)
        self._first_bad_step: Optional[torch.Tensor] = None  # the pixel stage's finite guard (on the device)
        self._bad_losses: dict = {}
        # validation / test sums (not saved in checkpoints: torchmetrics states are not persistent)
        self.val_metrics = SegmentationMetrics()
        self.test_metrics = SegmentationMetrics()
        self.timings = {}

    # ------------------------------------------------------------------ randomness, checkpoints
    @property
    def seed(self) -> int:
        """The run's seed: the checkpoint's when resumed, else ``seed_everything``'s."""
        from .data.datamodule import run_seed

        return run_seed() if self._seed is None else self._seed

    def _rank(self) -> int:
        return self.global_rank if self._trainer is not None else 0

    def on_train_batch_start(self, batch, batch_idx):
        # the triplets' torch generator (on the device) is seeded from this generator's draws
        self._rng = np.random.default_rng([self.seed, 0, self._rank(), self.global_step, batch_idx])

    def on_validation_batch_start(self, batch, batch_idx, dataloader_idx=0):
        self._rng = np.random.default_rng([self.seed, 1, self._rank(), batch_idx])

    def on_test_batch_start(self, batch, batch_idx, dataloader_idx=0):
        self._rng = np.random.default_rng([self.seed, 2, self._rank(), batch_idx])

    def on_save_checkpoint(self, checkpoint: dict) -> None:
        """Add ``checkpoint["hiseg"]``: the seed, the global generators, the loggers' versions
        (plain types and tensors only: the checkpoint loads with ``weights_only=True``).
        Refuses to write weights that a non-finite pixel-stage loss has already reached."""
        self._raise_if_not_finite()
        np_state = np.random.get_state(legacy=False)
        rng = {"torch": torch.get_rng_state(),
               "numpy": {"state": {k: (v.tolist() if isinstance(v, np.ndarray) else v)
                                   for k, v in np_state["state"].items()},
                         **{k: v for k, v in np_state.items() if k != "state"}},
               "python": random.getstate()}
        if torch.cuda.is_available() and torch.cuda.is_initialized():
            rng["cuda"] = torch.cuda.get_rng_state_all()
        loggers = [{"class": type(lg).__name__, "name": lg.name, "version": lg.version}
                   for lg in (self.loggers if self._trainer is not None else [])]
        checkpoint["hiseg"] = {"seed": self.seed, "rng": rng, "loggers": loggers}
        if self.merge_head is not None:  # the trained head, for the network it now runs with
            self.refresh_merge_head()
            if isinstance(checkpoint.get("hyper_parameters"), dict):
                checkpoint["hyper_parameters"]["pipeline"] = dict(self.hparams["pipeline"])

    def refresh_merge_head(self) -> None:
        """Store the merging head's current weights, with the fingerprint of the network it
        now runs with, in the pipeline settings (``hparams["pipeline"]``, read by ``hiseg
        predict``)."""
        from .segmentation.merging import network_fingerprint

        self.merge_head.network = network_fingerprint(self.model)
        self.pipeline = self.pipeline.with_overrides(merge_head=self.merge_head.to_spec())
        self.hparams["pipeline"] = self.pipeline.to_dict()

    def on_load_checkpoint(self, checkpoint: dict) -> None:
        """Restore the seed, and the global generators when a fit resumes (not when a model
        is only loaded). A checkpoint written before they were saved still loads: the run's
        seed is used and a warning says the resumed run is not the original one."""
        state = checkpoint.get("hiseg")
        fitting = self._trainer is not None and self.trainer.state.fn == "fit"
        if state is None:
            if fitting:
                warnings.warn("the checkpoint holds no random generator states (written by an older "
                              "hiseg): the run resumes with this run's seed, and is not exactly the "
                              "run that was interrupted", stacklevel=2)
            return
        self._seed = int(state["seed"])
        if not fitting:
            return
        rng = state["rng"]
        torch.set_rng_state(rng["torch"])
        np_state = dict(rng["numpy"])
        np_state["state"] = {k: (np.asarray(v, dtype=np.uint32) if isinstance(v, list) else v)
                             for k, v in np_state["state"].items()}
        np.random.set_state(np_state)
        py = rng["python"]
        random.setstate((py[0], tuple(py[1]), py[2]))
        if "cuda" in rng and torch.cuda.is_available() and len(rng["cuda"]) == torch.cuda.device_count():
            torch.cuda.set_rng_state_all(rng["cuda"])

    # ------------------------------------------------------------------ superpixels
    @property
    def rebuilds_superpixels(self) -> bool:
        """Whether the pipeline builds the superpixels of every batch from the prediction
        (anything but ``color_watershed``, which uses the data module's)."""
        return self.pipeline.superpixels != "color_watershed"

    def setup(self, stage: str) -> None:
        """Hand the pipeline to the data module (``use_pipeline``: hiseg's data modules), so
        that its loaders compute exactly the superpixels the pipeline trains on (its
        ``make_superpixels`` for ``color_watershed``), or none when the step rebuilds them."""
        dm = self.trainer.datamodule if self._trainer is not None else None
        use = getattr(dm, "use_pipeline", None)
        if use is not None:
            use(self.pipeline)

    # ------------------------------------------------------------------ core step
    def forward(self, images: torch.Tensor) -> torch.Tensor:
        """Boundary logits (B, 1, H, W)."""
        return self.model(images)

    def edge_weights(self, batch, logits=None):
        """``(w, logits)``: the RAG edge weights (E_total,) of a batch, float32, as the pipeline
        makes them at inference: the mean boundary probability along each frontier of the
        pipeline's map (:meth:`training_map`: its scales and flip), or the learned merging
        head's weights on that map (:meth:`head_weights`); and the network's logits at scale 1
        (computed unless given). With scales or flip, a pipeline that rebuilds the superpixels
        computes the map twice (once without gradient, for the superpixels)."""
        if logits is None:
            logits = self(batch.images)
        # pooling, trees and losses run in float32 whatever the network's dtype (bf16-mixed)
        prob = self.training_map(batch.images, torch.sigmoid(logits[:, 0].float()))
        if self.merge_head is not None:
            return self.head_weights(batch, prob), logits
        return frontier_mean(prob, batch.frontier_pixels_a, batch.frontier_pixels_b, batch.frontier_edge,
                             batch.graph.num_edges, getattr(batch, "frontier_count", None)), logits

    def training_map(self, images: torch.Tensor, prob: torch.Tensor) -> torch.Tensor:
        """The boundary map the pipeline's test-time setting makes (:meth:`Pipeline.boundary_map`:
        the mean over ``scales`` of the network's maps, each averaged with its mirror's with
        ``flip``), differentiable, batched; ``prob``: the scale-1 map, reused."""
        pipe = self.pipeline
        if tuple(pipe.scales) == (1.0,) and not pipe.flip:
            return prob
        h, w = images.shape[-2:]
        acc = 0
        for s in pipe.scales:
            xs = images if s == 1.0 else F.interpolate(images, scale_factor=s, mode="bilinear", align_corners=False,
                                                      recompute_scale_factor=False)
            p = prob[:, None] if s == 1.0 else torch.sigmoid(self.model(xs).float())
            if pipe.flip:
                p = 0.5 * (p + torch.sigmoid(self.model(xs.flip(-1)).float()).flip(-1))
            if p.shape[-2:] != (h, w):
                p = F.interpolate(p, size=(h, w), mode="bilinear", align_corners=False)
            acc = acc + p
        return (acc / len(pipe.scales))[:, 0]

    def head_weights(self, batch, prob: torch.Tensor) -> torch.Tensor:
        """Edge weights of the learned merging head (float32), from its features computed in
        torch on the pipeline's map ``prob`` (:meth:`training_map`) (:class:`hiseg.segmentation.merging.TorchEdgeFeatures`),
        differentiable in the head and in the network. The colour and texture features read
        the images on the host: one more device-to-host copy per step in this mode."""
        from .segmentation.merging import TorchEdgeFeatures

        head = self.merge_head
        pmap = prob
        imgs = batch.images.detach().float().cpu().numpy()
        images = [np.ascontiguousarray(imgs[b, :, :hb, :wb].transpose(1, 2, 0))
                  for b, (hb, wb) in enumerate(batch.image_sizes)]
        feats = TorchEdgeFeatures(batch.rags, head.features, images=images, shape=tuple(pmap.shape[-2:]),
                                  device=pmap.device)
        return head(feats(pmap), feats.graph if head.context else None).float()

    def rebuild_graphs(self, batch, logits):
        """The batch with superpixels rebuilt from the predicted (detached) boundary maps,
        by the pipeline, as at inference; targets recomputed from the ground truths.
        The images of the batch are processed by a process-wide thread pool of one thread
        per core this process may run on (``os.sched_getaffinity``, at most 16): the
        watershed and the RAG release the GIL for most of their work
        (``benchmarks/results/training.md``). Copies: the maps to the host, the new graph
        tensors to the device in one packed copy."""
        from .data.collate import with_superpixels

        with torch.no_grad():  # the superpixels of the pipeline's map (its scales and flip), as at inference
            prob = self.training_map(batch.images, torch.sigmoid(logits[:, 0].detach().float())).cpu().numpy()
        if not np.isfinite(prob).all():
            raise FloatingPointError(_DIVERGED)
        crops = [prob[b, :hb, :wb] for b, (hb, wb) in enumerate(batch.image_sizes)]
        return with_superpixels(batch, list(_thread_pool().map(self.pipeline.make_superpixels, crops)),
                                map_fn=_thread_pool().map)

    def consensus_targets(self, batch):
        """(pos, neg) masks (B, H, W) of the ``edge`` pixel loss on the batch's device:
        one-pixel-wide annotator boundaries, positive where >= 30% of the annotators
        mark a pixel, negative where none does; padding and the rest ignored."""
        from .data.targets import mean_boundary

        b, hp, wp = batch.boundary.shape
        cons = np.full((b, hp, wp), -1.0, np.float32)
        for i, (seg, (h, w)) in enumerate(zip(batch.segmentations, batch.image_sizes)):
            if len(seg):
                cons[i, :h, :w] = mean_boundary(seg, thick=False)
        cons = torch.from_numpy(cons).to(batch.boundary.device, non_blocking=True)
        return losses.consensus_targets(cons, cons >= 0, self.hparams.positive_threshold)

    def compute_losses(self, batch, logits=None, timings: Optional[dict] = None) -> LossResult:
        """The losses of a batch (:class:`LossResult`: losses, ultrametric, hierarchy and the
        batch they were computed on). ``timings`` (a dict), if given, receives the seconds
        spent in: ``superpixels`` (rebuilding the superpixels, RAGs and targets from the
        prediction, CPU; 0 with ``color_watershed``), ``pooling``, ``tree`` (the weights'
        copy to the host, the tree, the indices' copy to the device), ``loss`` (pixel term,
        triplet sampling, closest and triplet terms; the network's forward pass is not
        timed when ``logits`` are given), ``pixel`` (the pixel term alone, part of ``loss``).
        On CUDA, timing synchronises the device at every stage boundary.

        Host synchronisation, per step: one device-to-host copy (the edge weights, with the
        pixel term's value) and one host-to-device copy (the tree's indices); a pipeline
        that rebuilds the superpixels adds one each way (the boundary maps, the new graph),
        ``pixel_loss: edge`` one host-to-device copy (the consensus labels, made on the host
        from the ground truths: :meth:`consensus_targets`).
        """
        hp = self.hparams
        sides = []

        def clock():  # with timings on an accelerator, wait for its work so that each stage gets its own
            if timings is not None and batch.images.device.type == "cuda":
                torch.cuda.synchronize(batch.images.device)
            return time.perf_counter()

        if logits is None and hp.pixel_weight and hp.pixel_loss == "edge":
            logits, sides = self.model(batch.images, return_side_outputs=True)
        elif logits is None and self.rebuilds_superpixels:
            logits = self(batch.images)
        ts = clock()
        if self.rebuilds_superpixels:
            batch = self.rebuild_graphs(batch, logits)
        elif not batch.has_graph:
            raise ValueError(_NO_SUPERPIXELS)
        t0 = clock()
        w, logits = self.edge_weights(batch, logits)
        t1 = clock()
        out = {}
        if hp.pixel_weight and hp.pixel_loss == "edge":
            out["pixel"] = self.pixel_edge_loss(logits, sides, *self.consensus_targets(batch))
        elif hp.pixel_weight:
            out["pixel"] = losses.balanced_bce(logits[:, 0].float(), batch.boundary.float())
        tp = clock()
        trip = self._sample_triplets(batch, w.device) if hp.triplet_weight else None
        t2 = clock()
        # the step's one device-to-host copy: the weights for the tree, the pixel term for its check
        pix = out["pixel"].detach().reshape(1).to(w.dtype) if "pixel" in out else w.new_zeros(1)
        host = torch.cat([w.detach(), pix]).cpu().numpy()
        if not np.isfinite(host[:-1]).all():
            raise FloatingPointError(_DIVERGED)
        if not np.isfinite(host[-1]):  # closest and triplet are finite with finite weights
            raise FloatingPointError(f"non-finite training loss at step {self.global_step} (pixel term "
                                     f"{host[-1]}); the last checkpoint stays loadable; lower the learning rate "
                                     "or check the data")
        lengths = (np.concatenate([r.frontier_lengths() for r in batch.rags]).astype(np.float64)
                   if self.pipeline.linkage == "average" else None)
        h = self._build_tree(batch.graph, host[:-1], lengths)
        # the step's one host-to-device copy: every index of the tree's gathers and lookups
        upload_indices(h, w.device, lca=trip is not None)
        u = h.ultrametric(w)
        t3 = clock()
        total = w.new_zeros(())
        if hp.closest_weight:
            out["closest"] = losses.closest(u, batch.edge_target.to(w.dtype))
            total = total + hp.closest_weight * out["closest"]
        if trip is not None:
            out["triplet"] = losses.triplet(h, w, trip[:3], valid=trip[3], margin=hp.margin)
            total = total + hp.triplet_weight * out["triplet"]
        if "pixel" in out:
            total = total + hp.pixel_weight * out["pixel"]
        out["loss"] = total
        if timings is not None:
            t4 = clock()
            timings.update(superpixels=t0 - ts, pooling=t1 - t0, tree=t3 - t2, loss=(t2 - t1) + (t4 - t3),
                           pixel=tp - t1)
        return LossResult(out, u, h, batch)

    def _build_tree(self, graph, weights: np.ndarray, lengths):
        """The pipeline's hierarchy (:meth:`hiseg.segmentation.Pipeline.ultrametric`'s linkage:
        average with frontier lengths, or single) of host weights, built on the host only
        (the pipeline's method would also gather an ultrametric there)."""
        if self.pipeline.linkage == "average":
            return build_average_linkage_hierarchy(graph, weights, lengths)
        return build_hierarchy(graph, weights)

    def _sample_triplets(self, batch, device):
        """(ref, pos, neg, valid) on the device (:func:`hiseg.losses.sample_batch_triplets_torch`),
        from a torch generator seeded by this step's draw of the module's generator."""
        gen = torch.Generator(device=device)
        gen.manual_seed(int(self._rng.integers(2 ** 63 - 1)))
        ptr = batch.vertex_offsets
        if ptr is None:  # a batch made without the field: one more (small) copy
            ptr = torch.as_tensor(np.asarray(batch.graph.vertex_ptr, dtype=np.int64), device=device)
        num_labels = batch.num_labels or int(batch.sp_labels.max()) + 1
        return losses.sample_batch_triplets_torch(batch.sp_labels, ptr, int(self.hparams.triplets_per_image),
                                                  num_labels, gen)

    def pixel_edge_loss(self, fused, sides, pos, neg):
        """:func:`hiseg.losses.edge_loss` with this module's ``dice_weight``."""
        return losses.edge_loss(fused, sides, pos, neg, dice_weight=float(self.hparams.get("dice_weight", 1.0)))

    def pixel_stage_losses(self, batch):
        """Losses of a :class:`~hiseg.data.edges.PixelBatch` (the pixel stage): the ``edge``
        loss on the fused and side outputs, against the batch's consensus labels."""
        hp = self.hparams
        if hp.closest_weight or hp.triplet_weight or hp.pixel_loss != "edge" or not hp.pixel_weight:
            raise ValueError(_PIXEL_BATCH)
        images = batch.images
        if images.device.type == "cuda":
            images = images.contiguous(memory_format=torch.channels_last)
        fused, sides = self.model(images, return_side_outputs=True)
        pos, neg = losses.consensus_targets(batch.consensus, batch.valid, hp.positive_threshold)
        pixel = self.pixel_edge_loss(fused, sides, pos, neg)
        return {"pixel": pixel, "loss": hp.pixel_weight * pixel}

    def training_step(self, batch, batch_idx):
        if hasattr(batch, "consensus"):  # a PixelBatch: the pixel stage
            out = self.pixel_stage_losses(batch)
            self._watch_finite(out)
        else:  # checked on the host by compute_losses, with its one copy (no other synchronisation)
            out = self.compute_losses(batch).losses
        bs = batch.batch_size
        for k, v in out.items():
            self.log(f"train/{k}", v, batch_size=bs, prog_bar=(k == "loss"))
        return out["loss"]

    def _watch_finite(self, out: dict) -> None:
        """The pixel stage's guard against a non-finite loss, without a host synchronisation
        per step on a GPU: the first bad step is recorded on the device and checked on the
        host every ``trainer.log_every_n_steps`` steps and before any checkpoint is written
        (:meth:`_raise_if_not_finite`), so that no checkpoint ever holds the diverged weights.
        On the CPU the check costs nothing and runs at every step."""
        loss = out["loss"].detach()
        step = torch.full((), self.global_step, dtype=torch.long, device=loss.device)
        first = step.where(~torch.isfinite(loss), torch.full_like(step, -1))
        if self._first_bad_step is None:
            self._first_bad_step = first
        else:  # the earliest bad step, or -1 (no synchronisation: device ops only)
            prev = self._first_bad_step
            self._first_bad_step = torch.where(prev >= 0, prev, first)
        self._bad_losses = {k: v.detach() for k, v in out.items()}  # for the message only: no graph kept
        if self._check_finite_now(loss):
            self._raise_if_not_finite()

    def _check_finite_now(self, loss: torch.Tensor) -> bool:
        every = int(getattr(self._trainer, "log_every_n_steps", 1) or 1) if self._trainer is not None else 1
        return loss.device.type == "cpu" or (self.global_step + 1) % every == 0

    def _raise_if_not_finite(self) -> None:
        if self._first_bad_step is None:
            return
        step = int(self._first_bad_step)  # the one host synchronisation of the guard
        if step >= 0:
            losses = {k: float(v.detach()) for k, v in self._bad_losses.items()}
            raise FloatingPointError(
                f"non-finite training loss at step {step} (last losses {losses}); the last checkpoint "
                "stays loadable; lower the learning rate or check the data")

    # ------------------------------------------------------------------ validation
    def _evaluate_batch(self, batch):
        """Per-image validation numbers: losses, boundary counts at the fixed threshold."""
        from .metrics.matching import BoundaryMatcher, seg_to_boundaries, thin_boundaries

        out, u, _, batch = self.compute_losses(batch)  # batch: the graphs the losses used (maybe rebuilt)
        res = {k: float(v) for k, v in out.items()}
        u_np = u.detach().cpu().numpy()
        thr = np.concatenate([[self.hparams.val_threshold], VAL_THRESHOLDS])
        counts = np.zeros((thr.size, 4), dtype=np.int64)
        for b, rag in enumerate(batch.rags):
            e0, e1 = batch.graph.edge_ptr[b], batch.graph.edge_ptr[b + 1]
            sal = ucm2_from_rag(rag, u_np[e0:e1])[2::2, 2::2]
            h_b, w_b = batch.image_sizes[b]
            sal = sal[:h_b, :w_b]
            matcher = BoundaryMatcher([seg_to_boundaries(s) for s in batch.segmentations[b]])
            for i, t in enumerate(thr):
                counts[i] += np.array(matcher.counts(thin_boundaries(sal > t)))
        return res, counts

    def on_validation_epoch_start(self):
        self.val_metrics.reset()

    def validation_step(self, batch, batch_idx):
        res, counts = self._evaluate_batch(batch)
        self.val_metrics.update(res, counts, batch.batch_size)

    def on_test_epoch_start(self):
        self.test_metrics.reset()

    def test_step(self, batch, batch_idx):
        """The validation metrics on the test set (``train.py test``), logged as ``test/...``."""
        res, counts = self._evaluate_batch(batch)
        self.test_metrics.update(res, counts, batch.batch_size)

    def _log_summary(self, prefix: str, metrics: SegmentationMetrics):
        summ = metrics.compute()  # summed over the processes: every process calls it
        metrics.reset()
        for k, v in summ.items():
            # the values are already global (equal on every process): sync_dist's mean keeps them
            self.log(f"{prefix}/{k}", float(v), prog_bar=(k in ("boundary_f", "boundary_f_ods", "loss")),
                     batch_size=1, sync_dist=True)

    def on_validation_epoch_end(self):
        self._log_summary("val", self.val_metrics)

    def on_test_epoch_end(self):
        self._log_summary("test", self.test_metrics)

    def on_fit_start(self):
        if self.device.type == "cuda":  # convolutions in channels-last, as cuDNN prefers (bf16 too)
            self.model.to(memory_format=torch.channels_last)
        if not self.hparams.validate_at_start or self.trainer.datamodule is None:
            return
        if self.trainer.ckpt_path or self.global_step > 0:
            return  # resuming: no new step-0 evaluation
        dm = self.trainer.datamodule
        try:
            dm.setup("validate")
            loader = dm.val_dataloader()  # this process's share of the images under DDP
        except Exception:  # pragma: no cover - datamodules without validation
            return
        was_training = self.training
        self.eval()
        metrics = SegmentationMetrics().to(self.device)
        with torch.no_grad():
            for batch_idx, batch in enumerate(loader):
                batch = batch.to(self.device)
                self.on_validation_batch_start(batch, batch_idx)
                res, counts = self._evaluate_batch(batch)
                metrics.update(res, counts, batch.batch_size)
        self.train(was_training)
        summ = metrics.compute()
        if not summ:
            return
        self.initial_validation = summ
        for lg in self.loggers:
            lg.log_metrics({f"val_start/{k}": float(v) for k, v in summ.items()}, step=0)
        if self.trainer.is_global_zero:
            print(f"[hiseg] validation before training: boundary F {summ['boundary_f']:.4f} at threshold "
                  f"{self.hparams.val_threshold:g} ({summ['boundary_f_ods']:.4f} at the best of "
                  f"{len(VAL_THRESHOLDS)} thresholds), loss {summ['loss']:.4f}")

    # ------------------------------------------------------------------ optimisation
    def configure_optimizers(self):
        """AdamW with a linear warm-up (``warmup``) then a cosine decay to ``final_lr * lr``.

        The schedule reads the trainer's total number of steps at every step, so a run
        resumed with a larger ``max_steps`` / ``max_epochs`` stretches it instead of failing.
        """
        groups = [{"params": list(self.model.parameters())}]
        if self.merge_head is not None and self.hparams.get("head_lr_scale", 1.0) > 0:
            groups.append({"params": list(self.merge_head.parameters()),
                           "lr": self.hparams.lr * self.hparams.get("head_lr_scale", 1.0)})
        opt = torch.optim.AdamW(groups, lr=self.hparams.lr, weight_decay=self.hparams.weight_decay)
        sched = torch.optim.lr_scheduler.LambdaLR(opt, self.lr_factor)
        return {"optimizer": opt, "lr_scheduler": {"scheduler": sched, "interval": "step"}}

    def lr_factor(self, step: int) -> float:
        """The step size of optimiser step ``step`` as a fraction of ``lr``."""
        total = self.trainer.estimated_stepping_batches if self._trainer is not None else None
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

