"""Compatibility, both ways, each in one table.

* Other packages' private members that hiseg still uses, with why (:data:`PRIVATE_MEMBERS`).
  Each entry: (module, object path, private attribute, where hiseg uses it, why no public call
  does). ``tests/package/test_compat.py`` imports each object and fails when the installed (pinned)
  version lacks the attribute, and fails when ``hiseg/`` uses a private member of Lightning,
  argparse or scikit-learn that is not listed here.
* hiseg's own renamed modules (:data:`RENAMED_MODULES`), so that configs and checkpoints written
  by earlier versions still load: their class paths (``class_path: hiseg.callbacks.LastCheckpoint``)
  are read through :func:`current_path`. No alias module stays at an old path: an import of
  ``hiseg.callbacks`` fails, and a config naming it is read with the new path and a warning.
"""
from __future__ import annotations

import re
from typing import Any

__all__ = ["PRIVATE_MEMBERS", "PRIVATE_FORMATS", "RENAMED_MODULES", "current_path", "renamed_in"]

# rows of one shape by design (a table): `duplicates hiseg/` lists the pair of its halves
PRIVATE_MEMBERS = (
    ("pytorch_lightning.callbacks", "ModelCheckpoint", "_save_last_checkpoint", "hiseg/training/callbacks.py",
     "LastCheckpoint writes last.ckpt at every epoch end and every N steps whatever the monitor; the public "
     "save_last only follows the monitored saves"),
    ("pytorch_lightning.callbacks", "ModelCheckpoint", "_monitor_candidates", "hiseg/training/callbacks.py",
     "the metrics dict that _save_last_checkpoint takes (the same call Lightning makes)"),
    ("pytorch_lightning.callbacks", "ModelCheckpoint", "_last_global_step_saved", "hiseg/training/callbacks.py",
     "on_train_end: whether the final step is already saved (max_steps ending mid-epoch)"),
    ("pytorch_lightning.loggers.csv_logs", "ExperimentWriter", "_check_log_dir_exists", "hiseg/training/callbacks.py",
     "Lightning's deletes metrics.csv when a resumed run logs into its folder: overridden to append"),
    ("pytorch_lightning.loggers.csv_logs", "ExperimentWriter", "_fs", "hiseg/training/callbacks.py",
     "the writer's (and CSVLogger's) filesystem handle: the appending writer reads the existing metrics.csv "
     "through it, as Lightning's own writer does"),
    ("pytorch_lightning.loggers", "CSVLogger", "_experiment", "hiseg/training/callbacks.py",
     "CSVLogger.experiment is overridden to make the appending writer; Lightning caches it in _experiment"),
    ("pytorch_lightning.cli", "LightningCLI", "_subcommand_parsers", "hiseg/training/cli.py",
     "the subcommands' parsers, to give --ckpt_path a help saying what hiseg accepts (no public accessor)"),
    ("argparse", "ArgumentParser", "_actions", "hiseg/training/cli.py",
     "argparse has no public list of a parser's actions; used to reword generated help texts"),
    ("sklearn.base", "BaseEstimator", "_validate_data", "hiseg/clustering/params.py",
     "scikit-learn < 1.6 only (validate_data is public from 1.6 and used there): n_features_in_ bookkeeping"),
)
#: Not attributes but formats: the loop-state layout that ``hiseg.training.callbacks._epoch_end_loops``
#: edits in a saved checkpoint (``fit_loop.epoch_progress``), so that a run resumed from an
#: epoch-end checkpoint is exactly the uninterrupted run; ``tests/training/test_resume.py`` checks it.
PRIVATE_FORMATS = (("pytorch_lightning", "checkpoint['loops']['fit_loop']['epoch_progress']",
                    "hiseg/training/callbacks.py"),)


#: old dotted module -> its module today (the layout of issue 40)
RENAMED_MODULES = {
    "hiseg.graph": "hiseg.core.graph",
    "hiseg.ultrametric": "hiseg.core.ultrametric",
    "hiseg.cuts": "hiseg.core.cuts",
    "hiseg.losses": "hiseg.core.losses",
    "hiseg.fitting": "hiseg.core.fitting",
    "hiseg.inference": "hiseg.segmentation.segmenter",
    "hiseg.predict_ddp": "hiseg.segmentation.predict_ddp",
    "hiseg.training": "hiseg.training.steps",
    "hiseg.lightning": "hiseg.training.module",
    "hiseg.callbacks": "hiseg.training.callbacks",
    "hiseg.cli_train": "hiseg.training.cli",
    "hiseg.view": "hiseg.explorer.page",
    "hiseg.plotting": "hiseg.clustering.plotting",
}
_OLD = re.compile(r"\b(" + "|".join(re.escape(m) for m in sorted(RENAMED_MODULES, key=len, reverse=True))
                  + r")\.([A-Z]\w*)\b")


def current_path(text: str) -> str:
    """``text`` with every old class path (``hiseg.callbacks.CSVLogger``: a renamed module then a
    class name) replaced by today's; O(len(text))."""
    return _OLD.sub(lambda m: f"{RENAMED_MODULES[m.group(1)]}.{m.group(2)}", text)


def renamed_in(value: Any) -> Any:
    """``value`` (nested dicts, lists, tuples, strings) with :func:`current_path` applied to every string."""
    if isinstance(value, str):
        return current_path(value)
    if isinstance(value, dict):
        return {k: renamed_in(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(renamed_in(v) for v in value)
    return value
