"""Evaluation metrics: a Python reimplementation of the official BSDS500 benchmark.

* :mod:`hiseg.metrics.boundary` -- boundary precision/recall (thinning,
  optimal pixel correspondence, ODS/OIS/AP);
* :mod:`hiseg.metrics.region` -- segmentation covering, probabilistic Rand
  index, variation of information;
* :mod:`hiseg.metrics.bsds` -- file I/O, dataset driver (:func:`evaluate`) and
  writers of the official ``eval_*.txt`` files;
* :mod:`hiseg.metrics.evaluate_cli` -- the ``hiseg evaluate`` command.

Submodules are imported lazily (``from hiseg.metrics import evaluate`` works
without importing matplotlib).
"""

from __future__ import annotations

import importlib

_LAZY = {
    "evaluate": ("bsds", "evaluate"),
    "evaluate_image": ("bsds", "evaluate_image"),
    "load_prediction": ("bsds", "load_prediction"),
    "load_ground_truth": ("bsds", "load_ground_truth"),
    "write_official_txt": ("bsds", "write_official_txt"),
    "BoundaryMatcher": ("boundary", "BoundaryMatcher"),
    "correspond_pixels": ("boundary", "correspond_pixels"),
    "thin_boundaries": ("boundary", "thin_boundaries"),
    "seg_to_boundaries": ("boundary", "seg_to_boundaries"),
    "thresholds": ("boundary", "thresholds"),
    "rand_index": ("region", "rand_index"),
    "variation_of_information": ("region", "variation_of_information"),
    "covering_matches": ("region", "covering_matches"),
}

__all__ = sorted(_LAZY) + ["boundary", "region", "bsds", "evaluate_cli"]


def __getattr__(name):
    if name in _LAZY:
        mod, attr = _LAZY[name]
        return getattr(importlib.import_module(f"{__name__}.{mod}"), attr)
    if name in ("boundary", "region", "bsds", "evaluate_cli"):
        return importlib.import_module(f"{__name__}.{name}")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
