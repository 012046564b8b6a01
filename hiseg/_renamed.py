"""The one table of hiseg's renamed modules, so that configs and checkpoints written by
earlier versions still load: their class paths (``class_path: hiseg.callbacks.LastCheckpoint``)
are read through :func:`current_path`. No alias module stays at an old path: an import of
``hiseg.callbacks`` fails, and a config naming it is read with the new path and a warning.
"""
from __future__ import annotations

import re
from typing import Any

__all__ = ["RENAMED_MODULES", "current_path", "renamed_in"]

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
