"""Callbacks and loggers of hiseg's training runs (``train.py``), for both stages.

* :class:`LastCheckpoint`: ``last.ckpt`` at every epoch end, every N steps and at the end of
  training, whatever any monitor, written so that a run resumed from it is exactly the run
  done in one go (``tests/training/test_resume.py``);
* :class:`CSVLogger`: Lightning's, appending to ``metrics.csv`` when a run resumes into its
  folder; :class:`TensorBoardLogger`: Lightning's; both log under the trainer's
  ``default_root_dir`` when no ``save_dir`` is given;
* :class:`CompileNetwork`: ``torch.compile`` of the network when a fit starts (off by default).

Lightning's private members touched here (``ModelCheckpoint._save_last_checkpoint``,
``_monitor_candidates``, ``_last_global_step_saved``; ``ExperimentWriter._check_log_dir_exists``)
and the loop-state layout edited by :func:`_epoch_end_loops` are not public:
``pyproject.toml`` bounds ``pytorch-lightning`` to the versions tested, and
``tests/training/test_resume.py::test_lightning_private_members_exist`` fails loudly when an upgrade
removes one of them.
"""
from __future__ import annotations

import os
import sys
import time
from typing import Optional

import pytorch_lightning as pl

__all__ = ["CompileNetwork", "LastCheckpoint", "CSVLogger", "TensorBoardLogger", "RandomStateCheckpoint",
           "ValidateAtStart", "FiniteLossGuard", "AtomicCheckpointIO", "use_atomic_checkpoints"]

# Lightning's private members this module relies on are listed, with why, in hiseg/_compat.py
# (tests/package/test_compat.py fails when the installed version lacks one).


def _epoch_end_loops(loops: dict, completed: bool = True) -> dict:
    """Make the loop state saved in ``on_train_epoch_end`` say "epoch completed, next not
    started" (``completed``), or, for an epoch that ``max_steps`` or a stop cut short,
    "epoch running, its first batches done" (as a checkpoint of ``on_train_batch_end``).

    Lightning (2.x) increments the fit loop's ``processed`` epochs before ``on_train_epoch_end``
    and ``completed`` after it, so a checkpoint written in that hook holds a half-finished
    epoch. Resumed with ``max_steps`` (or whenever Lightning treats the run as restarting), it
    re-runs the epoch's end, counts the epoch twice and skips the next epoch's data order: a
    4-step-per-epoch run of ``max_steps=40`` ended at step 36 on ``max_epochs`` with other
    weights. Saved as completed (``completed = processed``) with the epoch's batch counters
    cleared (as Lightning clears them when an epoch starts), the resumed run starts the next
    epoch exactly as the uninterrupted run did, with ``max_steps``, ``max_epochs`` or both
    (``tests/training/test_resume.py``). Only the ``current`` counters of this epoch are touched; the
    ``total`` counters (global step, batches seen) are kept. Lightning's loop state is not a
    public format: ``tests/training/test_resume.py`` checks every case against an uninterrupted run."""
    fit = loops.get("fit_loop")
    if not isinstance(fit, dict) or "epoch_progress" not in fit:
        return loops
    for part in ("total", "current"):
        p = fit["epoch_progress"][part]
        if not completed:  # the epoch goes on: a resumed run finishes its remaining batches
            p["processed"] = p["completed"] = p["started"] - 1
            continue
        p["ready"] = p["started"] = p["completed"] = p["processed"]
    if not completed:
        return loops

    def clear_current(d):
        if isinstance(d, dict):
            if isinstance(d.get("current"), dict):
                d["current"] = {k: 0 for k in d["current"]}
            for v in d.values():
                clear_current(v)
    for key in ("epoch_loop.batch_progress", "epoch_loop.scheduler_progress",
                "epoch_loop.automatic_optimization.optim_progress", "epoch_loop.manual_optimization.optim_step_progress"):
        clear_current(fit.get(key))
    if isinstance(fit.get("epoch_loop.batch_progress"), dict):
        fit["epoch_loop.batch_progress"]["is_last_batch"] = False
    return loops


class LastCheckpoint(pl.callbacks.ModelCheckpoint):
    """``last.ckpt``, rewritten at every epoch end (after its validation), every
    ``every_n_train_steps`` training steps (0: never) and when training ends, whatever any
    monitor: the checkpoint to resume from (``--ckpt_path .../last.ckpt``). Written atomically
    (:class:`AtomicCheckpointIO`): the previous ``last.ckpt`` stays whole until the new one is.

    ``save_last`` on a monitored ``ModelCheckpoint`` only rewrites ``last.ckpt`` when the
    monitored value improves (a 4-epoch run ended at step 24 with ``last.ckpt`` at step 6),
    so the configs leave ``save_last`` to this callback. ``dirpath`` defaults to
    ModelCheckpoint's (``<log dir>/checkpoints``); the file is overwritten in place.
    """

    def __init__(self, dirpath: Optional[str] = None, every_n_train_steps: int = 100):
        if every_n_train_steps < 0:
            raise ValueError(f"LastCheckpoint.every_n_train_steps must be >= 0, got {every_n_train_steps}")
        super().__init__(dirpath=dirpath, save_last=True, save_top_k=0, enable_version_counter=False,
                         every_n_train_steps=every_n_train_steps)

    def _save_last_now(self, trainer, epoch_end: bool = False) -> None:
        if trainer.fast_dev_run or trainer.sanity_checking or trainer.state.fn != "fit":
            return
        self._epoch_end_save = epoch_end
        try:
            self._save_last_checkpoint(trainer, self._monitor_candidates(trainer))
        finally:
            self._epoch_end_save = False

    def setup(self, trainer, pl_module, stage: str) -> None:
        super().setup(trainer, pl_module, stage)
        use_atomic_checkpoints(trainer)  # last.ckpt, and every other checkpoint of the run, never partial

    def on_train_epoch_end(self, trainer, pl_module) -> None:
        self._save_last_now(trainer, epoch_end=True)

    def on_save_checkpoint(self, trainer, pl_module, checkpoint: dict) -> None:
        """The ``last.ckpt`` written in ``on_train_epoch_end`` records the epoch as completed, or,
        when ``max_steps`` (or a stop) ended it early, as still running (:func:`_epoch_end_loops`)."""
        if getattr(self, "_epoch_end_save", False) and isinstance(checkpoint.get("loops"), dict):
            done = int(trainer.fit_loop.epoch_loop.batch_progress.current.completed)
            _epoch_end_loops(checkpoint["loops"], completed=done >= trainer.num_training_batches)

    def on_validation_end(self, trainer, pl_module) -> None:
        pass  # the epoch end follows its validation; mid-epoch: every_n_train_steps

    def on_train_end(self, trainer, pl_module) -> None:
        if self._last_global_step_saved != trainer.global_step:  # e.g. max_steps mid-epoch
            self._save_last_now(trainer)


class WallClockDeadline(pl.Callback):
    """Stop the fit at the end of the first step after a wall-clock deadline (Unix seconds;
    ``deadline=None`` reads ``$HISEG_STOP_AT``, and without either the callback does nothing).

    Why: a run given a fixed slot (a GPU lease of a few minutes) must end by itself, with its
    final checkpoint (:class:`LastCheckpoint` saves at the fit's end), however long its start
    took. Lightning's ``max_time`` counts the fit's own time only, so imports, CUDA start-up and
    data loading on a fresh machine pushed a run past its slot's end (the first GPU session of
    issue 45 was killed before its end and lost the steps after its last periodic checkpoint).
    """

    def __init__(self, deadline: Optional[float] = None):
        super().__init__()
        text = os.environ.get("HISEG_STOP_AT", "")
        if deadline is None and text:
            try:
                deadline = float(text)
            except ValueError:
                raise ValueError(f"HISEG_STOP_AT must be a time in Unix seconds, got {text!r}") from None
        self.deadline = deadline
        self._first = None  # (time, step) at the fit's first step: the slot's rate is measured from it

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
        if self.deadline is not None and self._first is None:
            self._first = (time.time(), trainer.global_step)
            pl_module.print(f"[hiseg] first step ({trainer.global_step}) at {time.strftime('%H:%M:%S')}, "
                            f"{self.deadline - self._first[0]:.0f} s before the deadline")

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        if self.deadline is not None and time.time() >= self.deadline and not trainer.should_stop:
            trainer.should_stop = True
            t0, s0 = self._first or (time.time(), trainer.global_step)
            spent, steps = time.time() - t0, trainer.global_step - s0
            pl_module.print(f"[hiseg] wall-clock deadline reached at step {trainer.global_step}: stopping "
                            f"({steps} steps in {spent:.0f} s since the first, {steps / max(spent, 1e-9):.2f} steps/s)")


class AtomicCheckpointIO(pl.plugins.io.TorchCheckpointIO):
    """Lightning's ``TorchCheckpointIO``, except that a local checkpoint is written to a
    temporary file in its own folder, flushed to the disk (``fsync``) and only then renamed to
    its name (:func:`hiseg.io.atomic_write`): no checkpoint on disk (``last.ckpt``, ``best-…``)
    is ever partial, even when the disk fills up or the run is killed during the write, and an
    existing ``last.ckpt`` stays whole until its successor is. A failed write raises OSError
    naming the checkpoint file ("the disk is full" for ENOSPC); its temporary file is removed.
    Remote paths (``s3://``, ...) go to Lightning's own writer.

    ``train.py`` uses it by default (``trainer.plugins``), and :class:`LastCheckpoint` puts it
    on a trainer that has Lightning's plain writer, so every checkpoint of such a run goes
    through it. Cost: the checkpoint serialised in memory (as Lightning's writer does), one
    ``fsync`` per checkpoint.
    """

    def save_checkpoint(self, checkpoint: dict, path, storage_options=None) -> None:
        import io
        import os
        import re

        if storage_options is not None or re.match(r"^[A-Za-z][A-Za-z0-9+.-]*://", str(path)):
            return super().save_checkpoint(checkpoint, path, storage_options)
        import torch

        from ..io import atomic_write, naming_the_file

        buf = io.BytesIO()  # serialised first (as Lightning does): a failed write is a plain OSError
        torch.save(checkpoint, buf)

        def write(tmp):
            with open(tmp, "wb") as fh:
                fh.write(buf.getbuffer())
                fh.flush()
                os.fsync(fh.fileno())
        with naming_the_file(path):
            os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
        atomic_write(path, write)


def use_atomic_checkpoints(trainer) -> None:
    """Give ``trainer`` an :class:`AtomicCheckpointIO` when it has Lightning's plain
    ``TorchCheckpointIO`` (a user's own ``CheckpointIO`` is kept)."""
    strategy = trainer.strategy
    if type(strategy.checkpoint_io) is pl.plugins.io.TorchCheckpointIO:
        strategy.checkpoint_io = AtomicCheckpointIO()


class _AppendingCSVWriter(pl.loggers.csv_logs.ExperimentWriter):
    """Lightning's CSV writer, except that an existing ``metrics.csv`` is kept and appended to."""

    def _check_log_dir_exists(self) -> None:  # Lightning's deletes metrics.csv here
        if self._fs.isfile(self.metrics_file_path):
            import csv

            with self._fs.open(self.metrics_file_path, "r", newline="") as f:
                self.metrics_keys = sorted(csv.DictReader(f).fieldnames or [])


class CSVLogger(pl.loggers.CSVLogger):
    """Lightning's ``CSVLogger``, except that a run resumed into its version folder
    (``train.py fit --ckpt_path``) appends to ``metrics.csv`` instead of deleting it, and
    that ``save_dir`` may be left out: ``train.py`` then uses the trainer's
    ``default_root_dir`` (elsewhere: the current folder, Lightning's default root)."""

    def __init__(self, save_dir=None, name: Optional[str] = "lightning_logs", version=None, prefix: str = "",
                 flush_logs_every_n_steps: int = 100):
        super().__init__("." if save_dir is None else save_dir, name=name, version=version, prefix=prefix,
                         flush_logs_every_n_steps=flush_logs_every_n_steps)

    @property
    @pl.loggers.logger.rank_zero_experiment
    def experiment(self):
        if self._experiment is None:
            self._fs.makedirs(self.root_dir, exist_ok=True)
            self._experiment = _AppendingCSVWriter(log_dir=self.log_dir)
        return self._experiment


class TensorBoardLogger(pl.loggers.TensorBoardLogger):
    """Lightning's ``TensorBoardLogger``, except that ``save_dir`` may be left out: ``train.py``
    then uses the trainer's ``default_root_dir`` (elsewhere: the current folder), so that
    ``--trainer.default_root_dir DIR`` moves a config's logs and checkpoints."""

    def __init__(self, save_dir=None, name: Optional[str] = "lightning_logs", version=None, **kwargs):
        super().__init__("." if save_dir is None else save_dir, name=name, version=version, **kwargs)


class RandomStateCheckpoint(pl.Callback):
    """Exact resume: every checkpoint holds ``checkpoint["hiseg"]``, the run's seed, the torch
    (CPU and CUDA), numpy and Python global generator states and the loggers' versions
    (``train.py`` resumes into the same log folders); plain types and tensors only (the
    checkpoint loads with ``weights_only=True``). The generators are restored when a fit
    resumes (not when a model is only loaded, nor for validate / test); a checkpoint without
    them (an older hiseg's) resumes with a warning that the run is not the one interrupted.
    The LightningModule adds it itself (``configure_callbacks``)."""

    def on_save_checkpoint(self, trainer, pl_module, checkpoint: dict) -> None:
        import random

        import numpy as np
        import torch

        np_state = np.random.get_state(legacy=False)
        rng = {"torch": torch.get_rng_state(),
               "numpy": {"state": {k: (v.tolist() if isinstance(v, np.ndarray) else v)
                                   for k, v in np_state["state"].items()},
                         **{k: v for k, v in np_state.items() if k != "state"}},
               "python": random.getstate()}
        if torch.cuda.is_available() and torch.cuda.is_initialized():
            rng["cuda"] = torch.cuda.get_rng_state_all()
        loggers = [{"class": type(lg).__name__, "name": lg.name, "version": lg.version} for lg in trainer.loggers]
        checkpoint["hiseg"] = {"seed": pl_module.seed, "rng": rng, "loggers": loggers}

    def on_load_checkpoint(self, trainer, pl_module, checkpoint: dict) -> None:
        import random
        import warnings

        import numpy as np
        import torch

        if trainer.state.fn != "fit":
            return
        state = checkpoint.get("hiseg")
        if state is None:
            warnings.warn("the checkpoint holds no random generator states (written by an older hiseg): the run "
                          "resumes with this run's seed, and is not exactly the run that was interrupted",
                          stacklevel=2)
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


class ValidateAtStart(pl.Callback):
    """Evaluate the validation set once before the first training step of a fresh run (not a
    resumed one), so that the run shows its improvement: the module's :meth:`evaluate_batch`
    over the data module's ``val_dataloader`` (this process's share under DDP), summed by a
    fresh metric of the module's (``make_metrics``), logged as ``val_start/...`` at step 0
    and kept in ``pl_module.initial_validation``. Public hooks and calls only."""

    def on_train_start(self, trainer, pl_module) -> None:
        import torch

        dm = trainer.datamodule
        if dm is None or trainer.ckpt_path or trainer.global_step > 0:
            return
        try:
            dm.setup("validate")
            loader = dm.val_dataloader()
        except Exception:  # pragma: no cover - data modules without validation
            return
        was_training = pl_module.training
        pl_module.eval()
        metrics = pl_module.make_metrics().to(pl_module.device)
        with torch.no_grad():
            for batch_idx, batch in enumerate(loader):
                batch = pl_module.transfer_batch_to_device(batch, pl_module.device, 0)
                pl_module.on_validation_batch_start(batch, batch_idx)
                metrics.update(*pl_module.evaluate_batch(batch), batch.batch_size)
        pl_module.train(was_training)
        summ = metrics.compute()
        if not summ:
            return
        pl_module.initial_validation = summ
        for lg in trainer.loggers:
            lg.log_metrics({f"val_start/{k}": float(v) for k, v in summ.items()}, step=0)
        if trainer.is_global_zero:  # a line of its own, in order with the progress bars (stderr) in a log
            sys.stderr.flush()
            print(f"\n[hiseg] validation before training: boundary F {summ['boundary_f']:.4f} at threshold "
                  f"{pl_module.hparams.val_threshold:g} ({summ['boundary_f_ods']:.4f} at the best of the "
                  f"other thresholds), loss {summ['loss']:.4f}", flush=True)


class FiniteLossGuard(pl.Callback):
    """Stops a run whose training loss became NaN or infinite, without a host synchronisation
    per step on a GPU: the first bad step is recorded on the device (:meth:`watch`) and read on
    the host every ``trainer.log_every_n_steps`` steps (every step on the CPU, where it costs
    nothing) and before any checkpoint is written, so that no checkpoint ever holds the
    diverged weights (FloatingPointError naming the step and the last losses). The
    LightningModule holds one, watches its pixel-stage steps with it and adds it to the
    trainer (``configure_callbacks``)."""

    def __init__(self):
        self.first_bad_step = None  # a device tensor: the earliest bad step, or -1
        self.last_losses: dict = {}

    def watch(self, out: dict, step: int, every: int = 1) -> None:
        """Record one step's losses (``out["loss"]`` and the terms, tensors); check on the host
        when ``every`` says so."""
        import torch

        loss = out["loss"].detach()
        s = torch.full((), step, dtype=torch.long, device=loss.device)
        first = s.where(~torch.isfinite(loss), torch.full_like(s, -1))
        prev = self.first_bad_step
        self.first_bad_step = first if prev is None else torch.where(prev >= 0, prev, first)
        self.last_losses = {k: v.detach() for k, v in out.items()}  # for the message: no graph kept
        if self.due(loss, step, every):
            self.check()

    @staticmethod
    def due(loss, step: int, every: int) -> bool:
        """Whether to read the record now: on the CPU always, else every ``every`` steps."""
        return loss.device.type == "cpu" or (step + 1) % max(1, int(every)) == 0

    def check(self) -> None:
        if self.first_bad_step is None:
            return
        step = int(self.first_bad_step)  # the one host synchronisation of the guard
        if step >= 0:
            values = {k: float(v) for k, v in self.last_losses.items()}
            raise FloatingPointError(f"non-finite training loss at step {step} (last losses {values}); the last "
                                     "checkpoint stays loadable; lower the learning rate or check the data")

    def on_save_checkpoint(self, trainer, pl_module, checkpoint: dict) -> None:
        self.check()


class CompileNetwork(pl.Callback):
    """``torch.compile`` the module's network for its training steps when a fit starts
    (:meth:`~hiseg.training.module.HierarchicalSegmentationModule.compile_network`): an option of the
    pixel stage, **off by default** (not in any config), to be turned on only where
    ``benchmarks/bench_pixel_stage.py --compile MODE`` measured it to pay on that GPU
    (``mode="reduce-overhead"`` adds CUDA graphs; ``experiments/gpu/gpu_run.py`` decides from its
    rows). The state-dict keys, hence checkpoints, are unchanged. Validation runs the network
    uncompiled: its whole images have other shapes than the crops. When the fit ends, the module
    runs the network as it is again. In a config::

        trainer:
          callbacks:
            - class_path: hiseg.training.callbacks.CompileNetwork
              init_args: {mode: max-autotune}

    Parameters: ``mode``, ``backend``, ``dynamic``: as :func:`torch.compile`'s.
    """

    def __init__(self, mode: Optional[str] = None, backend: str = "inductor", dynamic: Optional[bool] = None):
        super().__init__()
        self.mode, self.backend, self.dynamic = mode, backend, dynamic

    def setup(self, trainer, pl_module, stage: str) -> None:
        if stage == "fit":
            pl_module.compile_network(mode=self.mode, backend=self.backend, dynamic=self.dynamic)

    def teardown(self, trainer, pl_module, stage: str) -> None:
        if stage == "fit":  # the fit is over: a later fit of the same module without this callback runs eagerly
            pl_module.compile_network(enabled=False)
