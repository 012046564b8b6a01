"""Host-device traffic of one training step: exactly one device-to-host copy (the edge
weights for the tree) and one host-to-device copy (the tree's indices), and nothing else
that would make the host wait for the device.

On the CPU there is no device, so :class:`SyncCounter` (a ``TorchFunctionMode``) tracks
which tensors *would* be on it: the model's parameters, the batch's tensors (moved by
``GraphBatch.to``), tensors made with a ``device=`` argument, and everything computed from
them; tensors made from numpy and the results of ``.cpu()`` are on the host. It counts:

* device-to-host: ``.cpu()`` of a device tensor, and every read of one by the host
  (``item``, ``tolist``, ``bool``/``int``/``float``, ``numpy``, ``__array__``, formatting),
  and the ops whose output size depends on the values (``nonzero``, ``unique``, boolean
  masks, ``bincount``, ...), which read back a size;
* host-to-device: ``.to(device)`` / ``.cuda()`` of a host tensor, ``torch.tensor`` /
  ``torch.as_tensor`` of host data with a ``device=``.

Limit: ``.to("cpu")`` of a device tensor is taken for a no-op (the step writes its copy
as ``.cpu()``). On CUDA the same step runs under ``torch.cuda.set_sync_debug_mode``, which
reports every synchronising call (skipped without CUDA).
"""
from __future__ import annotations

import warnings
import weakref
from pathlib import Path

import numpy as np
import pytest
import torch
from torch.overrides import TorchFunctionMode

from hiseg.data.collate import collate_graph_batch
from hiseg.data.graphs import SegmentationGraphDataset
from hiseg.data.synthetic import SyntheticSegmentation
from hiseg.training.module import HierarchicalSegmentationModule
from hiseg.segmentation.superpixels import Superpixels

READS = {"cpu", "item", "tolist", "__bool__", "__int__", "__float__", "__index__", "numpy", "__array__",
         "__format__", "__repr__"}
DYNAMIC = {"nonzero", "argwhere", "unique", "unique_consecutive", "masked_select", "bincount", "repeat_interleave",
           "histc"}


def _tensors(x):
    if isinstance(x, torch.Tensor):
        yield x
    elif isinstance(x, (list, tuple)):
        for y in x:
            yield from _tensors(y)
    elif isinstance(x, dict):
        for y in x.values():
            yield from _tensors(y)


class SyncCounter(TorchFunctionMode):
    """See the module docstring. ``d2h`` / ``h2d``: lists of the counted calls' names."""

    def __init__(self, device_tensors=()):
        super().__init__()
        self._device = {}  # id -> weak reference (a WeakSet would compare tensors with ==)
        for t in device_tensors:
            self.add(t)
        self.d2h, self.h2d = [], []

    def add(self, t: torch.Tensor) -> None:
        self._device[id(t)] = weakref.ref(t)

    def has(self, t) -> bool:
        r = self._device.get(id(t))
        return r is not None and r() is t

    def on_device(self, x) -> bool:
        return any(self.has(t) for t in _tensors(x))

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        name = getattr(func, "__name__", "")
        inputs_on_device = self.on_device(args) or self.on_device(kwargs)
        out = func(*args, **kwargs)
        this = args[0] if args else None
        if name in READS and this is not None and self.has(this):
            self.d2h.append(name)
            if name == "cpu":  # its result is on the host
                return out.clone() if out is this else out
            return out
        if inputs_on_device and (name in DYNAMIC or (name == "where" and len(args) == 1)
                                 or (name in ("__getitem__", "__setitem__") and any(
                                     t.dtype == torch.bool for t in _tensors(args[1:2])))):
            self.d2h.append(name)
        moves = name in ("to", "cuda") and this is not None and not self.has(this) and (
            name == "cuda" or "device" in kwargs or any(isinstance(a, (str, torch.device, torch.Tensor))
                                                         for a in args[1:]))
        made_there = name in ("tensor", "as_tensor") and kwargs.get("device") is not None and not inputs_on_device
        if moves or made_there:
            self.h2d.append(name)
            out = out.clone() if out is this else out
            inputs_on_device = True
        elif kwargs.get("device") is not None:  # a factory (zeros, arange, rand...) on the device
            inputs_on_device = True
        if inputs_on_device:
            for t in _tensors(out):
                self.add(t)
        return out


def _batch(n=3, size=48):
    raw = SyntheticSegmentation(n, size=size, seed=1)
    ds = SegmentationGraphDataset(raw, None, Superpixels(region_size=6.0))
    return collate_graph_batch([ds[i] for i in range(n)])


def _count_step(pipeline: dict, **model_kw):
    torch.manual_seed(0)
    m = HierarchicalSegmentationModule(arch_kwargs={"width": 8}, pipeline=pipeline, **model_kw)
    batch = _batch()
    host = batch.images
    batch = batch.to("cpu")
    if model_kw.get("new_merge_head"):
        from dataclasses import replace

        # as GraphBatch.to leaves it for a device: the collated tensor kept on the host, not on the device list
        batch = replace(batch, images=host.clone(), host_images=host)
    if pipeline["superpixels"] != "color_watershed":
        from dataclasses import replace

        from hiseg.data.collate import _NO_GRAPH

        batch = replace(batch, **_NO_GRAPH, rags=[])  # what the loaders give such a pipeline
    on_device = [*m.parameters(), *(getattr(batch, k) for k in batch._TENSORS if getattr(batch, k) is not None)]
    m.on_train_batch_start(batch, 0)
    counter = SyncCounter(on_device)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # self.log without a trainer
        with counter:
            loss = m.training_step(batch, 0)
    loss.backward()  # and it trains
    return counter


@pytest.mark.parametrize("linkage", ["average", "single"])
def test_one_copy_each_way_per_step_with_loader_superpixels(linkage):
    c = _count_step({"superpixels": "color_watershed", "linkage": linkage, "region_size": 6.0})
    assert c.d2h == ["cpu"], c.d2h  # the weights (and the pixel term's value) for the tree
    assert c.h2d == ["to"], c.h2d  # the tree's indices, packed


def test_edge_pixel_loss_step_copies():
    """pixel_loss edge: the consensus labels are made on the host from the ground truths
    (one more host-to-device copy, documented in compute_losses)."""
    c = _count_step({"superpixels": "color_watershed", "region_size": 6.0}, pixel_loss="edge")
    assert c.d2h == ["cpu"] and len(c.h2d) == 2, (c.d2h, c.h2d)


def test_rebuilding_pipeline_adds_one_copy_each_way():
    """boundary_watershed: the boundary maps go to the host for the rebuild, its graph comes
    back in one packed copy; then the step's own two copies."""
    c = _count_step({"superpixels": "boundary_watershed", "region_size": 6.0})
    assert c.d2h == ["cpu", "cpu"], c.d2h
    assert c.h2d == ["to", "to"], c.h2d


def test_merge_head_step_reads_the_images_on_the_host():
    """A merging head with colour features reads the images the batch kept on the host
    (GraphBatch.host_images): no device-to-host copy of them. Its features' index tensors go
    to the device in one packed copy (TorchEdgeFeatures.to), then the step's own two copies."""
    head = {"features": ["mean", "max", "log_length", "lab_dist"], "hidden": [8]}
    c = _count_step({"superpixels": "color_watershed", "linkage": "average", "region_size": 6.0},
                    new_merge_head=head, freeze_network=True)
    assert c.d2h == ["cpu"], c.d2h
    assert c.h2d == ["to", "to"], c.h2d


def test_the_counter_sees_synchronising_calls():
    x = torch.rand(5)
    c = SyncCounter([x])
    with c:
        y = (x * 2).sum()
        float(y), bool(y > 0), y.item(), x[x > 0.5], torch.nonzero(x)
        h = x.cpu()
        h.numpy(), float(h.sum())  # on the host: free
        torch.from_numpy(np.zeros(3)).to(x.device), x.to(x.device), torch.as_tensor([1.0], device=x.device)
    assert c.d2h == ["__float__", "__bool__", "item", "__getitem__", "nonzero", "cpu"]
    assert c.h2d == ["to", "as_tensor"]


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_cuda_step_synchronises_once():
    """On CUDA: torch's sync debug mode reports every synchronising call of the step; the one
    allowed is the weights' copy (the indices' copy is non-blocking)."""
    torch.manual_seed(0)
    m = HierarchicalSegmentationModule(arch_kwargs={"width": 8},
                                       pipeline={"superpixels": "color_watershed", "region_size": 6.0}).cuda()
    batch = _batch().to("cuda")
    m.on_train_batch_start(batch, 0)
    m.training_step(batch, 0)  # warm-up (cuDNN choices, allocator)
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("warn")
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            m.training_step(batch, 0)
    finally:
        torch.cuda.set_sync_debug_mode("default")
    syncs = [w for w in caught if "synchroniz" in str(w.message).lower()]
    assert len(syncs) == 1, [str(w.message) for w in syncs]
    torch.cuda.set_sync_debug_mode("error")
    try:  # the one synchronising call is the weights' copy in compute_losses
        with pytest.raises(RuntimeError, match="synchroniz") as info:
            m.training_step(batch, 0)
    finally:
        torch.cuda.set_sync_debug_mode("default")
    ours = [f for f in info.traceback if "hiseg" in str(f.path)]
    assert ours[-1].name == "compute_losses" and ".cpu()" in str(ours[-1].statement)


PIXEL_NETS = [("compact_boundary_net", {"width": 8}), ("pdc_boundary_net", {"width": 8, "blocks": [1, 1, 1, 1]})]


def _pixel_stage(n_images=3, arch="compact_boundary_net", arch_kwargs=None):
    from hiseg.data.edges import BSDS500PixelDataModule

    rng = np.random.default_rng(0)
    dm = BSDS500PixelDataModule.from_arrays(rng.integers(0, 256, (n_images, 3, 40, 56), dtype=np.uint8),
                                            rng.random((n_images, 40, 56)).astype(np.float32), crop_size=16,
                                            batch_size=2, crops_per_epoch=400)
    m = HierarchicalSegmentationModule(arch=arch, arch_kwargs=arch_kwargs or {"width": 8}, closest_weight=0,
                                       triplet_weight=0, pixel_loss="edge", pixel_weight=1.0)
    return dm, m


@pytest.mark.parametrize("arch,arch_kwargs", PIXEL_NETS)
def test_pixel_stage_step_never_waits_for_the_device(monkeypatch, arch, arch_kwargs):
    """The pixel stage's step (hiseg.data.edges: the step's key -> draws, crops and labels on the
    device; the module's edge loss) copies nothing either way between the finite-loss checks: the
    host can run ahead of a GPU. (The key is a Python int: Lightning's transfer moves nothing.)"""
    dm, m = _pixel_stage(arch=arch, arch_kwargs=arch_kwargs)
    dm.setup("fit")
    step = next(iter(dm.train_dataloader()))
    monkeypatch.setattr(m.finite_guard, "due", lambda loss, step, every: False)  # a GPU's step between checks
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # self.log without a trainer
        # a first step fills the process's caches made once per device (pdc_net's kernel-cell indices): run
        # alone, the counted step would see them made; after another test, not
        m.training_step(dm.on_after_batch_transfer(step, 0), 0)
    counter = SyncCounter([*m.parameters(), *m.buffers(), dm.augmenter.images, dm.augmenter.extra])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # self.log without a trainer
        with counter:
            batch = dm.on_after_batch_transfer(step, 0)
            loss = m.training_step(batch, 0)
    loss.backward()
    assert counter.d2h == [] and counter.h2d == [], (counter.d2h, counter.h2d)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
@pytest.mark.parametrize("arch,arch_kwargs", PIXEL_NETS)
def test_cuda_pixel_stage_through_the_trainer_never_synchronises(arch, arch_kwargs):
    """On CUDA, through Trainer.fit (bf16-mixed, as the GPU recipe): torch's sync debug mode sees
    no synchronising call in steps 5 to 14 (no logging or finite check falls there)."""
    import pytorch_lightning as pl

    dm, m = _pixel_stage(arch=arch, arch_kwargs=arch_kwargs)
    caught = []

    class Watch(pl.Callback):
        def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
            if trainer.global_step == 5:
                torch.cuda.synchronize()
                torch.cuda.set_sync_debug_mode("warn")

        def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
            if trainer.global_step == 15:
                torch.cuda.set_sync_debug_mode("default")

    trainer = pl.Trainer(accelerator="cuda", devices=1, precision="bf16-mixed", max_steps=16, logger=False,
                         enable_checkpointing=False, enable_progress_bar=False, limit_val_batches=0,
                         log_every_n_steps=50, callbacks=[Watch()])
    import traceback

    def where(message, category, filename, lineno, file=None, line=None):
        """Each synchronising call with the Python lines that made it (torch's warning names
        only its own C++ file): what the next GPU session needs to remove it."""
        text = str(message)
        if "synchroniz" in text.lower() and "prototype feature" not in text:  # not the mode's own notice
            stack = [f for f in traceback.extract_stack()[:-1] if not f.filename.endswith("warnings.py")]
            caught.append(" <- ".join(f"{Path(f.filename).name}:{f.lineno} {f.line}" for f in reversed(stack[-5:])))

    try:
        with warnings.catch_warnings():
            warnings.simplefilter("always")
            warnings.showwarning = where
            trainer.fit(m, datamodule=dm)
    finally:
        torch.cuda.set_sync_debug_mode("default")
    assert not caught, sorted(set(caught))[:8]


def _fit_reads(progress_bar: bool, steps=(5, 15)):
    """Trainer.fit of the pixel stage on the CPU, as the GPU recipe runs it (no finite check falls in
    the window: a GPU reads it every log_every_n_steps); the device-to-host reads that Lightning's loop,
    the optimizer, the callbacks and the step make in steps ``steps[0]`` to ``steps[1] - 1``."""
    import pytorch_lightning as pl

    from hiseg.training.callbacks import WallClockDeadline

    dm, m = _pixel_stage(arch="pdc_boundary_net", arch_kwargs={"width": 8, "blocks": [1, 1, 1, 1]})
    m.finite_guard.due = lambda loss, step, every: False
    held = {}

    class Watch(pl.Callback):
        def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
            if trainer.global_step == steps[0]:
                state = [v for opt in trainer.optimizers for s in opt.state.values() for v in s.values()
                         if torch.is_tensor(v) and v.dim() > 0]  # AdamW's moments (its step counts live on the host)
                held["counter"] = SyncCounter([*pl_module.parameters(), *pl_module.buffers(), dm.augmenter.images,
                                               dm.augmenter.extra, *state]).__enter__()

        def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
            if trainer.global_step == steps[1] and "counter" in held:
                held["counter"].__exit__(None, None, None)

    trainer = pl.Trainer(accelerator="cpu", devices=1, max_steps=steps[1] + 1, logger=False, enable_checkpointing=False,
                         enable_progress_bar=progress_bar, enable_model_summary=False, limit_val_batches=0,
                         log_every_n_steps=50, callbacks=[Watch(), WallClockDeadline()])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        trainer.fit(m, datamodule=dm)
    return held["counter"].d2h, trainer


def test_pixel_stage_through_the_trainer_reads_nothing_on_the_host():
    """The whole loop, not only the step: Lightning reads every progress-bar value on the host at
    each step's end whether a bar is shown or not (``_ResultCollection.metrics``), so a loss logged
    with ``prog_bar=True`` was one device synchronisation per step on a GPU. Without a bar (the GPU
    recipe's configs) nothing is read; with one (a CPU run's default) the bar shows the loss."""
    d2h, _ = _fit_reads(progress_bar=False)
    assert d2h == [], d2h
    d2h, trainer = _fit_reads(progress_bar=True)
    assert "train/loss" in trainer.progress_bar_metrics and d2h, d2h
