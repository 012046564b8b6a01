"""Callbacks and loggers of hiseg's training runs (``train.py``), for both stages.

* :class:`LastCheckpoint`: ``last.ckpt`` at every epoch end, every N steps and at the end of
  training, whatever any monitor, written so that a run resumed from it is exactly the run
  done in one go (``tests/test_resume.py``);
* :class:`CSVLogger`: Lightning's, appending to ``metrics.csv`` when a run resumes into its
  folder; :class:`TensorBoardLogger`: Lightning's; both log under the trainer's
  ``default_root_dir`` when no ``save_dir`` is given.

Lightning's private members touched here (``ModelCheckpoint._save_last_checkpoint``,
``_monitor_candidates``, ``_last_global_step_saved``; ``ExperimentWriter._check_log_dir_exists``)
and the loop-state layout edited by :func:`_epoch_end_loops` are not public:
``pyproject.toml`` bounds ``pytorch-lightning`` to the versions tested, and
``tests/test_resume.py::test_lightning_private_members_exist`` fails loudly when an upgrade
removes one of them.
"""
from __future__ import annotations

from typing import Optional

import pytorch_lightning as pl

__all__ = ["LastCheckpoint", "CSVLogger", "TensorBoardLogger", "LIGHTNING_PRIVATE_MEMBERS"]

#: (class, attribute) pairs of Lightning's private API that this module relies on
LIGHTNING_PRIVATE_MEMBERS = (
    (pl.callbacks.ModelCheckpoint, "_save_last_checkpoint"),
    (pl.callbacks.ModelCheckpoint, "_monitor_candidates"),
    (pl.loggers.csv_logs.ExperimentWriter, "_check_log_dir_exists"),
)


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
    (``tests/test_resume.py``). Only the ``current`` counters of this epoch are touched; the
    ``total`` counters (global step, batches seen) are kept. Lightning's loop state is not a
    public format: ``tests/test_resume.py`` checks every case against an uninterrupted run."""
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
    monitor: the checkpoint to resume from (``--ckpt_path .../last.ckpt``).

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
