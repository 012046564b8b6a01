"""A training run never replaces another run's files. A logger's folder is named by the config
(``save_dir``, ``name``, ``version``): ``CSVLogger(save_dir=ANY, name="", version="")`` logs into
``ANY`` itself, where Lightning would rewrite ``hparams.yaml`` and ``metrics.csv`` and
LightningCLI ``config.yaml``. So, without ``--trust-config``, a logger whose folder already
holds such a file is refused before anything is written (:func:`refuse_replacing_loggers`),
unless the run resumes into that very folder (``fit --ckpt_path``: the checkpoint names its
loggers' versions); and the run's config is saved by exclusive creation, never over a file
(:class:`ExclusiveSaveConfig`: ``config.yaml``, else ``config-1.yaml``, ...).
Checkpoints are safe already: ``ModelCheckpoint`` names a file that exists ``-v1``."""
from __future__ import annotations

import os
from typing import Iterable

from pytorch_lightning.cli import SaveConfigCallback

__all__ = ["LogFolderInUseError", "WRITTEN_BY_LOGGERS", "refuse_replacing_loggers", "ExclusiveSaveConfig"]

#: The files a logger or the config saver rewrites in its folder.
WRITTEN_BY_LOGGERS = ("config.yaml", "hparams.yaml", "metrics.csv")


class LogFolderInUseError(ValueError):
    """A logger would log into a folder holding another run's files (one line)."""


def refuse_replacing_loggers(loggers: Iterable, resumed: Iterable = ()) -> None:
    """LogFolderInUseError naming the first of ``loggers`` (Lightning loggers, built, nothing
    written yet) whose ``log_dir`` holds one of :data:`WRITTEN_BY_LOGGERS`, unless its
    ``(name, version)`` is one of ``resumed`` (the loggers of the checkpoint a fit resumes)."""
    resumed = {(str(n), str(v)) for n, v in resumed}
    for logger in loggers:
        log_dir = getattr(logger, "log_dir", None)
        if not log_dir or not os.path.isdir(log_dir):
            continue
        if (str(getattr(logger, "name", "")), str(getattr(logger, "version", ""))) in resumed:
            continue
        there = [f for f in WRITTEN_BY_LOGGERS if os.path.lexists(os.path.join(log_dir, f))]
        if there:
            raise LogFolderInUseError(
                f"logger {type(logger).__name__} would log into {log_dir}, which holds {' and '.join(there)} of "
                "another run, replaced by this one's; nothing was run. Leave its version out (a new version_N "
                "folder), give a new one, or resume that run with --ckpt_path (--trust-config to write there anyway)")


class ExclusiveSaveConfig(SaveConfigCallback):
    """LightningCLI's config saver, writing by exclusive creation: ``config.yaml`` in the run's
    log folder, or ``config-1.yaml``, ``config-2.yaml``, ... when it exists (a resumed run keeps
    the first run's config), never over a file."""

    def setup(self, trainer, pl_module, stage: str) -> None:
        if self.already_saved:
            return
        log_dir = trainer.log_dir  # on every rank: a broadcast under DDP (rank 0 alone would wait for the others)
        if trainer.is_global_zero:
            os.makedirs(log_dir, exist_ok=True)
            text = self.parser.dump(self.config, skip_none=False)
            stem, ext = os.path.splitext(self.config_filename)
            for k in range(10_000):
                path = os.path.join(log_dir, self.config_filename if k == 0 else f"{stem}-{k}{ext}")
                try:
                    with open(path, "x", encoding="utf-8") as fh:
                        fh.write(text)
                    break
                except FileExistsError:
                    continue
            self.save_config(trainer, pl_module, stage)
            self.already_saved = True
        # as Lightning's saver: every rank learns that it was saved (their next setup calls agree)
        strategy = getattr(trainer, "strategy", None)
        if strategy is not None:
            self.already_saved = strategy.broadcast(self.already_saved)
