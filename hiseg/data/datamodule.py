"""LightningDataModules: synthetic (the default), BSDS500 and a user's folder.

Constructor arguments are plain types (int, float, str, bool, tuple, None) so that
``LightningCLI`` builds the modules from YAML, e.g.::

    data:
      class_path: hiseg.data.BSDS500DataModule
      init_args: {data_root: datasets/BSDS500, crop_size: 320, batch_size: 8}

Training batches are random crops (BSDS500, folder) or whole synthetic images, with
flips (and rescaling for real images); validation uses whole images, no augmentation,
``val_batch_size = 1`` by default for real images (sizes differ; larger batches are
zero-padded, see :class:`hiseg.data.collate.GraphBatch`). Batches are
:class:`~hiseg.data.collate.GraphBatch` objects.

Exact resume: the training order and every sample's augmentation are functions of the
run's seed and the epoch (:class:`SeededSampler`), and the data module's ``state_dict``
(saved in Lightning checkpoints) holds the sampler's epoch and position, so a run resumed
at an epoch end or mid-epoch sees the samples the uninterrupted run would have seen.
Under DDP each process gets its shard of the training set (the sampler is a
``DistributedSampler``) and of the validation / test sets (no sample repeated, so
metrics summed over processes count every image once).

Superpixels belong to the model's :class:`~hiseg.segmentation.Pipeline`, for training as
for inference: :class:`~hiseg.training.module.HierarchicalSegmentationModule` hands its pipeline
to the data module when training starts (:meth:`GraphDataModule.use_pipeline`). An
image-based pipeline (``color_watershed``) makes the loaders compute exactly its
``make_superpixels`` (:class:`~hiseg.data.graphs.PipelineSuperpixels`); one that builds
them from the prediction (``boundary_watershed``, ``all_minima``) makes them compute none,
the training step rebuilds them. With ``superpixel_cache`` (the default) those of every
image are computed once, at full resolution, and augmented with the image
(:mod:`hiseg.data.cache`; in memory, or on disk under ``cache_dir``); otherwise they are
computed on every augmented sample. A data module used without a model computes the
default training pipeline's (:data:`TRAINING_PIPELINE`: colour watershed of 8 px).
"""
from __future__ import annotations

import os
import warnings
from typing import Optional

import numpy as np
import pytorch_lightning as pl
import torch
from pytorch_lightning.overrides.distributed import UnrepeatedDistributedSampler
from pytorch_lightning.trainer.states import TrainerFn
from torch.utils.data import DataLoader, DistributedSampler, Subset

from ..segmentation.pipeline import Pipeline
from .bsds import DEFAULT_BSDS_ROOT, BSDS500
from .collate import collate_graph_batch
from .graphs import SegmentationGraphDataset, loader_superpixels
from .folder import FolderSegmentation
from .synthetic import SyntheticSegmentation
from .transforms import Compose, RandomCrop, RandomFlip, RandomRescale

__all__ = ["SyntheticDataModule", "BSDS500DataModule", "FolderDataModule", "SeededSampler", "run_seed",
           "worker_init", "TRAINING_PIPELINE"]


#: The default pipeline of training (:class:`~hiseg.training.module.HierarchicalSegmentationModule`'s):
#: the loaders' colour-watershed superpixels, average linkage.
TRAINING_PIPELINE = {"superpixels": "color_watershed", "linkage": "average"}

def run_seed() -> int:
    """The run's seed: the one ``seed_everything`` exported (``PL_GLOBAL_SEED``; LightningCLI
    calls it with the config's ``seed_everything``), else 0."""
    return int(os.environ.get("PL_GLOBAL_SEED", 0))


class SeededSampler(DistributedSampler):
    """Training order and augmentation as functions of ``(seed, epoch)``, this process's shard.

    Yields ``(index, (seed, epoch))``: the order is ``DistributedSampler``'s permutation
    seeded with ``seed + epoch`` (Lightning calls :meth:`set_epoch` every epoch), and
    :class:`~hiseg.data.graphs.SegmentationGraphDataset` augments item ``index`` with
    ``default_rng([seed, epoch, index])``. Nothing depends on the loader workers or on
    what ran before, so a resumed run draws what the uninterrupted run drew. ``skip``
    samples of the first iteration are left out (a run resumed mid-epoch); ``len`` stays
    the full epoch's, as Lightning counts the epoch's batches from it. Being a
    ``DistributedSampler``, Lightning keeps it under DDP instead of wrapping it.
    """

    def __init__(self, dataset, seed: int, epoch: int = 0, skip: int = 0, num_replicas: int = 1,
                 rank: int = 0, shuffle: bool = True):
        super().__init__(dataset, num_replicas=num_replicas, rank=rank, shuffle=shuffle, seed=int(seed))
        self.epoch, self.skip = int(epoch), int(skip)

    def __iter__(self):
        order = list(super().__iter__())
        start, self.skip = self.skip, 0
        key = (self.seed, self.epoch)
        return iter([(i, key) for i in order[start:]])


def worker_init(worker_id: int) -> None:
    """Loader-worker initialiser: one thread per worker for OpenCV and torch.

    The workers already run in parallel; letting each one also spawn a thread pool
    oversubscribes the cores.
    """
    import cv2
    import torch

    cv2.setNumThreads(1)
    torch.set_num_threads(1)


class _TrainLoader(DataLoader):
    """The training loader. Its state is the sampler's position (the data module's
    ``state_dict``, which also covers runs resumed at an epoch end); Lightning saves it and
    restores it when a run resumes mid-epoch (and so knows the loader resumes there)."""

    datamodule = None

    def state_dict(self) -> dict:
        return self.datamodule.state_dict().get("train_sampler", {}) if self.datamodule is not None else {}

    def load_state_dict(self, state_dict: dict) -> None:
        if state_dict:
            self.sampler.epoch = int(state_dict["epoch"])
            self.sampler.skip = int(state_dict["batches_done"]) * self.batch_size


class GraphDataModule(pl.LightningDataModule):
    """Common loader logic (not for direct use)."""

    def _init_common(self, batch_size, val_batch_size, num_workers, pin_memory, superpixel_cache=True, cache_dir=None,
                     superpixels: bool = True):
        """The settings every data module shares; ``superpixels=False``: the loaders compute none
        (a data module whose samples have no graph), else :data:`TRAINING_PIPELINE`'s until a
        model's pipeline says otherwise (:meth:`use_pipeline`)."""
        if batch_size < 1 or val_batch_size < 1:
            raise ValueError(f"batch sizes must be >= 1, got {batch_size}, {val_batch_size}")
        if num_workers < 0:
            raise ValueError(f"num_workers must be >= 0, got {num_workers}")
        self.batch_size = int(batch_size)
        self.val_batch_size = int(val_batch_size)
        self.num_workers = int(num_workers)
        self.pin_memory = bool(pin_memory)
        self.superpixel_cache = bool(superpixel_cache)
        self.superpixel_cache_dir = None if cache_dir is None else str(cache_dir)
        self.pipeline: Optional[Pipeline] = None
        self.train_set = self.val_set = self.test_set = None
        self._train_sampler: Optional[SeededSampler] = None
        self._resume: Optional[dict] = None
        self._set_superpixels(loader_superpixels(Pipeline.from_dict(TRAINING_PIPELINE)) if superpixels else None)

    def _set_superpixels(self, fn) -> None:
        """Compute ``fn``'s superpixels in the loaders (None: none), in the data sets made already."""
        self.superpixel_fn = fn
        self.superpixel_mode = "none" if fn is None else ("cached" if self.superpixel_cache else "per_sample")
        cache_dir = self.superpixel_cache_dir if self.superpixel_mode == "cached" else None
        for ds in (self.train_set, self.val_set, self.test_set):
            if isinstance(ds, SegmentationGraphDataset):  # (a subclass's other data sets have no superpixels)
                ds.use_superpixels(fn, self.superpixel_mode, cache_dir)

    def use_pipeline(self, pipeline: Pipeline) -> None:
        """Make the loaders compute what ``pipeline`` trains on (called by the model in its
        ``setup``): its image superpixels (``color_watershed``: exactly
        ``pipeline.make_superpixels``), or none when it builds them from the prediction.
        Loaders made before the call keep their workers' settings.
        """
        fn = loader_superpixels(pipeline)
        self.pipeline = pipeline
        self._set_superpixels(fn)

    def _dataset(self, raw, transform=None, seed=None) -> SegmentationGraphDataset:
        """``raw`` as graph samples with this module's superpixel settings."""
        cached = self.superpixel_mode == "cached"
        return SegmentationGraphDataset(raw, transform, self.superpixel_fn, seed, superpixels=self.superpixel_mode,
                                        cache_dir=self.superpixel_cache_dir if cached else None)

    @property
    def computes_superpixels(self) -> bool:
        """Whether the loaders compute superpixels."""
        return self.superpixel_mode != "none"

    #: the training loader's collate function, worker count (None: ``num_workers``) and items per
    #: batch (None: ``batch_size``; 1 where one item is a whole step, as the pixel stage's)
    train_collate = staticmethod(collate_graph_batch)
    train_workers: Optional[int] = None
    train_items_per_batch: Optional[int] = None

    def _loader(self, dataset, *, sampler, batch_size: int, drop_last: bool = False,
                generator: Optional[torch.Generator] = None, cls=DataLoader, collate_fn=collate_graph_batch,
                num_workers: Optional[int] = None) -> DataLoader:
        workers = self.num_workers if num_workers is None else int(num_workers)
        return cls(dataset, batch_size=batch_size, sampler=sampler, drop_last=drop_last,
                   num_workers=workers, collate_fn=collate_fn, pin_memory=self.pin_memory,
                   persistent_workers=workers > 0, worker_init_fn=worker_init if workers > 0 else None,
                   generator=generator)

    def _need(self, name: str, stage: str):
        if getattr(self, name) is None:
            self.setup(stage)
        return getattr(self, name)

    def _ranks(self) -> tuple[int, int]:
        t = self.trainer
        return (t.world_size, t.global_rank) if t is not None else (1, 0)

    def train_dataloader(self) -> DataLoader:
        ds = self._need("train_set", "fit")
        world, rank = self._ranks()
        state, self._resume = self._resume, None
        if state is None:  # a new run, or reloaded dataloaders: the trainer's epoch
            state = {"seed": run_seed(), "epoch": self.trainer.current_epoch if self.trainer else 0,
                     "batches_done": 0}
        per_batch = self.train_items_per_batch or self.batch_size
        self._train_sampler = SeededSampler(ds, state["seed"], state["epoch"],
                                            state["batches_done"] * per_batch, world, rank)
        # the generator seeds the workers: the global torch generator is left alone
        loader = self._loader(ds, sampler=self._train_sampler, batch_size=per_batch,
                              drop_last=self._train_sampler.num_samples > per_batch,
                              generator=torch.Generator().manual_seed(int(state["seed"])), cls=_TrainLoader,
                              collate_fn=self.train_collate, num_workers=self.train_workers)
        loader.datamodule = self
        return loader

    def _eval_loader(self, dataset) -> DataLoader:
        world, rank = self._ranks()
        # under DDP every process evaluates its own images, none twice (metrics are summed)
        sampler = UnrepeatedDistributedSampler(dataset, num_replicas=world, rank=rank, shuffle=False) \
            if world > 1 else None
        return self._loader(dataset, sampler=sampler, batch_size=self.val_batch_size)

    def val_dataloader(self) -> DataLoader:
        return self._eval_loader(self._need("val_set", "validate"))

    def test_dataloader(self) -> DataLoader:
        return self._eval_loader(self._need("test_set", "test"))

    def state_dict(self) -> dict:
        """The training sampler's position (seed, the epoch to run, batches of it done),
        saved in Lightning checkpoints; empty outside training."""
        t, s = self.trainer, self._train_sampler
        if t is None or s is None or t.state.fn != TrainerFn.FITTING:
            return {}
        done, epoch = int(t.fit_loop.epoch_loop.batch_progress.current.processed), s.epoch
        if done >= t.num_training_batches:  # the epoch is over: the next one starts afresh
            epoch, done = epoch + 1, 0
        return {"train_sampler": {"seed": int(s.seed), "epoch": int(epoch), "batches_done": done}}

    def load_state_dict(self, state_dict: dict) -> None:
        """Restore :meth:`state_dict`; a checkpoint without it (older runs) resumes with the
        run's seed at the trainer's epoch (the order of that epoch is then not the original)."""
        state = state_dict.get("train_sampler")
        if state is None:
            return
        missing = {"seed", "epoch", "batches_done"} - set(state)
        if missing:
            raise ValueError(f"the checkpoint's data module state lacks {sorted(missing)}: {state}")
        if int(state["seed"]) != run_seed():
            warnings.warn(f"resuming with the checkpoint's seed {state['seed']} for the data order and "
                          f"augmentation (this run's seed_everything is {run_seed()})", stacklevel=2)
        self._resume = dict(state)


class SyntheticDataModule(GraphDataModule):
    """The synthetic hierarchical segmentation set (no files needed): the default data.

    Parameters
    ----------
    n_train, n_val, n_test : int
        Number of images per split (disjoint seeds per split).
    size : int
        Image side (square images).
    n_annotators : int
    seed : int
        Data seed (the samples), independent of the training seed.
    batch_size, val_batch_size : int
    num_workers : int
    hflip, vflip : bool
        Random flips of training images.
    n_regions : (int, int)
        Range of the number of finest regions per image.
    n_levels : int
        Number of nested levels of the hierarchy.
    jitter : float
        Annotator boundary jitter (pixels).
    noise, blur : float
        Rendering noise and blur (see :mod:`hiseg.data.synthetic`).
    cache_dir : str, optional
        Cache the generated samples (e.g. ``datasets/synthetic_cache``), and the cached
        superpixels (``superpixels-<key>/``).
    pin_memory : bool
    superpixel_cache : bool
        Compute each image's superpixels once and augment them with it (default), or
        compute them on every augmented sample.
    """

    def __init__(self, n_train: int = 256, n_val: int = 16, n_test: int = 16, size: int = 128,
                 n_annotators: int = 4, seed: int = 0, batch_size: int = 8, val_batch_size: int = 8,
                 num_workers: int = 0, hflip: bool = True, vflip: bool = True,
                 n_regions: tuple = (24, 48), n_levels: int = 4, jitter: float = 1.0,
                 noise: float = 0.02, blur: float = 0.8, cache_dir: Optional[str] = None, pin_memory: bool = False, superpixel_cache: bool = True):
        super().__init__()
        self.save_hyperparameters()
        self._init_common(batch_size, val_batch_size, num_workers, pin_memory, superpixel_cache, cache_dir)
        self.hflip, self.vflip = bool(hflip), bool(vflip)
        self._raw_kw = dict(size=int(size), n_annotators=int(n_annotators), seed=int(seed),
                            cache_dir=cache_dir, n_regions=tuple(int(x) for x in n_regions),
                            n_levels=int(n_levels), jitter=float(jitter), noise=float(noise), blur=float(blur))
        self.n_train, self.n_val, self.n_test = int(n_train), int(n_val), int(n_test)

    def raw_dataset(self, split: str) -> SyntheticSegmentation:
        """The raw (un-augmented) synthetic split: ``"train"``, ``"val"`` or ``"test"``."""
        n = {"train": self.n_train, "val": self.n_val, "test": self.n_test}[split]
        return SyntheticSegmentation(n, split=split, **self._raw_kw)

    def setup(self, stage: Optional[str] = None) -> None:
        flips = Compose([RandomFlip(0.5 if self.hflip else 0.0, 0.5 if self.vflip else 0.0)])
        if stage in (None, "fit") and self.train_set is None:
            self.train_set = self._dataset(self.raw_dataset("train"), flips)
        if stage in (None, "fit", "validate") and self.val_set is None:
            self.val_set = self._dataset(self.raw_dataset("val"), seed=0)
        if stage in (None, "test", "predict") and self.test_set is None:
            self.test_set = self._dataset(self.raw_dataset("test"), seed=0)


def _train_transform(crop_size: int, scale_range, hflip: bool, vflip: bool) -> Compose:
    ts = []
    if scale_range is not None and tuple(scale_range) != (1.0, 1.0):
        ts.append(RandomRescale(tuple(float(x) for x in scale_range)))
    ts.append(RandomFlip(0.5 if hflip else 0.0, 0.5 if vflip else 0.0))
    if crop_size and crop_size > 0:
        ts.append(RandomCrop(int(crop_size)))
    return Compose(ts)


class BSDS500DataModule(GraphDataModule):
    """BSDS500: random crops of the training split, whole validation images.

    Parameters
    ----------
    data_root : str
        See :mod:`hiseg.data.bsds` for the accepted layouts (default ``datasets/BSDS500``).
    crop_size : int
        Side of the square training crops (0: whole images, then ``batch_size`` must
        be 1 or the batch is zero-padded).
    batch_size, val_batch_size, num_workers : int
    train_split, val_split, test_split : str
        E.g. ``"train"``, ``"val"``, ``"train+val"``, ``"test"``.
    scale_range : (float, float)
        Random rescaling of training images before cropping.
    hflip, vflip : bool
    max_val_images : int
        Validate on the first ``max_val_images`` images only (0: all).
    pin_memory : bool
    superpixel_cache : bool
        Compute each image's superpixels once and augment them with it (default), or
        compute them on every augmented sample.
    cache_dir : str, optional
        Keep the cached superpixels on disk there (``superpixels-<key>/``), shared by the
        loader workers and later runs; default: in each worker's memory.

    Raises
    ------
    FileNotFoundError, hiseg.io.DataError
        In :meth:`setup`: missing data root / split / ground truth (see ``BSDS500``); a
        ground-truth file of the training or validation set that cannot be read or does not
        fit its image (every one is checked there, :meth:`hiseg.data.bsds.BSDS500.check_labels`).
    """

    def __init__(self, data_root: str = DEFAULT_BSDS_ROOT, crop_size: int = 320, batch_size: int = 8,
                 val_batch_size: int = 1, num_workers: int = 2, train_split: str = "train",
                 val_split: str = "val", test_split: str = "test", scale_range: tuple = (0.75, 1.25),
                 hflip: bool = True, vflip: bool = False, max_val_images: int = 0, pin_memory: bool = False,
                 superpixel_cache: bool = True, cache_dir: Optional[str] = None):
        # the arguments shared with FolderDataModule are spelled out in each signature (LightningCLI and
        # save_hyperparameters read each constructor's own): the same lines there, on purpose
        super().__init__()
        self.save_hyperparameters()
        self._init_common(batch_size, val_batch_size, num_workers, pin_memory, superpixel_cache, cache_dir)
        self.data_root = str(data_root)
        self.train_transform = _train_transform(crop_size, scale_range, hflip, vflip)
        self.train_split, self.val_split, self.test_split = train_split, val_split, test_split
        self.max_val_images = int(max_val_images)

    def setup(self, stage: Optional[str] = None) -> None:
        if stage in (None, "fit") and self.train_set is None:
            raw = BSDS500(self.data_root, self.train_split)
            _check_labels(raw)  # every ground truth, before the first step (not in a loader worker)
            self.train_set = self._dataset(raw, self.train_transform)
        self.setup_bsds_eval(stage)

    def setup_bsds_eval(self, stage: Optional[str]) -> None:
        """The validation set (first ``max_val_images``) and the test set of BSDS500, whole images."""
        if stage in (None, "fit", "validate") and self.val_set is None:
            raw = BSDS500(self.data_root, self.val_split)
            if self.max_val_images > 0:
                raw = Subset(raw, range(min(self.max_val_images, len(raw))))
            _check_labels(raw)
            self.val_set = self._dataset(raw, seed=0)
        if stage in ("test", "predict") and self.test_set is None:
            self.test_set = self._dataset(BSDS500(self.data_root, self.test_split), seed=0)


def _check_labels(raw) -> None:
    """The ``check_labels`` of a data set (:meth:`hiseg.data.folder.FolderSegmentation.check_labels`,
    :meth:`hiseg.data.bsds.BSDS500.check_labels`) or of a subset of one (a hold-out split, the
    first validation images): a bad label file is a DataError naming it at start-up."""
    if isinstance(raw, Subset):
        raw.dataset.check_labels(list(raw.indices))
    else:
        raw.check_labels()


class FolderDataModule(GraphDataModule):
    """A user's folder of images and label images (see :mod:`hiseg.data.folder`).

    Parameters
    ----------
    data_root : str
        Folder with ``images/`` and ``labels/``.
    val_root : str, optional
        A separate folder for validation; if None, ``val_fraction`` of ``data_root``'s
        images (a fixed random choice, ``split_seed``) are held out.
    val_fraction : float
    split_seed : int
    crop_size, batch_size, val_batch_size, num_workers, scale_range, hflip, vflip, pin_memory,
    superpixel_cache, cache_dir
        As in :class:`BSDS500DataModule`.

    Raises
    ------
    FileNotFoundError, hiseg.data.folder.DataError
        In :meth:`setup` (see ``FolderSegmentation``; every label file of both sets is
        checked there, :meth:`~hiseg.data.folder.FolderSegmentation.check_labels`); ValueError
        when the hold-out split would leave no training or no validation image.
    """

    def __init__(self, data_root: str, val_root: Optional[str] = None, val_fraction: float = 0.1,
                 split_seed: int = 0, crop_size: int = 320, batch_size: int = 8, val_batch_size: int = 1,
                 num_workers: int = 2, scale_range: tuple = (0.75, 1.25), hflip: bool = True,
                 vflip: bool = False, pin_memory: bool = False,
                 superpixel_cache: bool = True, cache_dir: Optional[str] = None):
        super().__init__()
        self.save_hyperparameters()
        self._init_common(batch_size, val_batch_size, num_workers, pin_memory, superpixel_cache, cache_dir)
        if not 0.0 <= val_fraction < 1.0:
            raise ValueError(f"val_fraction must be in [0, 1), got {val_fraction}")
        self.data_root, self.val_root = str(data_root), val_root
        self.val_fraction, self.split_seed = float(val_fraction), int(split_seed)
        self.train_transform = _train_transform(crop_size, scale_range, hflip, vflip)

    def _split(self):
        full = FolderSegmentation(self.data_root)
        if self.val_root is not None:
            return full, FolderSegmentation(self.val_root)
        n = len(full)
        n_val = int(round(n * self.val_fraction))
        if self.val_fraction > 0 and n_val == 0:
            n_val = 1
        if n_val >= n:
            raise ValueError(f"{self.data_root}: {n} image(s) cannot be split into training and "
                             f"validation with val_fraction={self.val_fraction}; give val_root")
        perm = np.random.default_rng(self.split_seed).permutation(n)
        return Subset(full, np.sort(perm[n_val:]).tolist()), Subset(full, np.sort(perm[:n_val]).tolist())

    def setup(self, stage: Optional[str] = None) -> None:
        if (stage in (None, "fit") and self.train_set is None) or \
           (stage in (None, "fit", "validate", "test", "predict") and self.val_set is None):
            train_raw, val_raw = self._split()
            if self.train_set is None:
                _check_labels(train_raw)  # every label, before the first step (not in a loader worker)
                self.train_set = self._dataset(train_raw, self.train_transform)
            if self.val_set is None:
                _check_labels(val_raw)
                self.val_set = self._dataset(val_raw, seed=0)
            if self.test_set is None:
                self.test_set = self.val_set
