"""Evaluation metrics: a Python reimplementation of the official BSDS500 benchmark.

In the order the numbers flow:

* :mod:`hiseg.metrics.summary` -- thresholds, F-measure, the official rounding and the
  dataset collectors (ODS / OIS / AP, covering, PRI, VI);
* :mod:`hiseg.metrics.matching` -- boundary thinning, pixel correspondence and
  per-image boundary counts;
* :mod:`hiseg.metrics.region` -- per-image covering, probabilistic Rand index,
  variation of information, on contingency tables computed once per threshold;
* :mod:`hiseg.metrics.fop` -- per-image precision-recall for objects and parts (Fop,
  Pont-Tuset & Marques), on the same tables, as SEISM computes it;
* :mod:`hiseg.metrics.seism` -- SEISM's published per-image result files (the gPb-owt-ucm
  and MCG baselines) read and aggregated the same way;
* :mod:`hiseg.metrics.predictions` -- prediction file formats, loading, pairing with
  ground truth (files are read through :mod:`hiseg.io`);
* :mod:`hiseg.metrics.bsds` -- the dataset driver (:func:`evaluate`);
* :mod:`hiseg.metrics.report` -- tables, ``results.md``, PR curve, JSON, official
  ``eval_*.txt`` files;
* :mod:`hiseg.metrics.kcut` -- covering of K-region cuts.

Measures of a whole hierarchy (clustering): :mod:`hiseg.metrics.hierarchy` (dendrogram purity,
Dasgupta's cost) and :mod:`hiseg.metrics.entropy` (Li & Pan's structural entropy).

The ``hiseg evaluate`` command is :mod:`hiseg.cli.evaluate`.

Submodules are imported lazily (``from hiseg.metrics import evaluate`` works
without importing matplotlib).
"""

from __future__ import annotations

import importlib

_LAZY = {
    "evaluate": ("bsds", "evaluate"),
    "evaluate_image": ("bsds", "evaluate_image"),
    "load_prediction": ("predictions", "load_prediction"),
    "write_official_txt": ("report", "write_official_txt"),
    "BoundaryMatcher": ("matching", "BoundaryMatcher"),
    "correspond_pixels": ("matching", "correspond_pixels"),
    "thin_boundaries": ("matching", "thin_boundaries"),
    "seg_to_boundaries": ("matching", "seg_to_boundaries"),
    "thresholds": ("summary", "thresholds"),
    "rand_index": ("region", "rand_index"),
    "variation_of_information": ("region", "variation_of_information"),
    "covering_matches": ("region", "covering_matches"),
    "objects_and_parts": ("fop", "objects_and_parts"),
    "seism_ucm_labels": ("fop", "seism_ucm_labels"),
    "dendrogram_purity": ("hierarchy", "dendrogram_purity"),
    "dasgupta_cost": ("hierarchy", "dasgupta_cost"),
    "structural_entropy": ("entropy", "structural_entropy"),
}

_SUBMODULES = ("summary", "matching", "region", "predictions", "bsds", "report", "kcut", "hierarchy", "fop",
               "seism", "entropy")

__all__ = sorted(_LAZY) + list(_SUBMODULES)


def __getattr__(name):
    if name in _LAZY:
        mod, attr = _LAZY[name]
        return getattr(importlib.import_module(f"{__name__}.{mod}"), attr)
    if name in _SUBMODULES:
        return importlib.import_module(f"{__name__}.{name}")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
