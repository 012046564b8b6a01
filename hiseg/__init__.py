"""hiseg: hierarchical clustering and learned hierarchical image segmentation by ultrametric fitting.

>>> from hiseg import Segmenter
>>> result = Segmenter().segment("photo.jpg")      # the shipped default model (bsds500_ensemble)
>>> result.cut(n_regions=8)                        # (H, W) labels

The product, importable from here (see ``__all__``):

* images: :class:`Segmenter` (``hiseg predict``), :class:`SegmentationResult`,
  :class:`Pipeline` (every choice from the image to the hierarchy), :class:`Weights` (the
  shipped models; ``ExportedSegmenter``, the former name of a Segmenter of an exported folder, is
  :class:`Segmenter` itself);
* other segmenters' outputs: :func:`hierarchy_from_masks` (SAM's masks, label images),
  :func:`hierarchy_from_boundary_map` (another detector's map);
* samples: :class:`UltrametricClustering` (a scikit-learn estimator);
* the core (no I/O, no Lightning): graphs (:func:`grid_graph`, :func:`knn_graph`,
  :func:`region_adjacency_graph`, :func:`batch_graphs`), the differentiable ultrametric layer
  (:func:`subdominant_ultrametric`, :func:`average_linkage_ultrametric`, ...), hierarchies
  (:func:`build_hierarchy`, :func:`cut_hierarchy`), fitting (:func:`fit_ultrametric`); the
  modules :mod:`hiseg.core.graph`, :mod:`hiseg.core.builders`, :mod:`hiseg.core.ultrametric`,
  :mod:`hiseg.core.average_linkage`, :mod:`hiseg.core.cuts`, :mod:`hiseg.core.losses`, :mod:`hiseg.core.fitting`.

Every name is imported when first used (``import hiseg`` alone costs no torch or higra).
"""
import importlib as _importlib

__version__ = "0.1.0"

#: name -> the module that defines it
_WHERE = {
    "Segmenter": "segmentation.segmenter", "SegmentationResult": "segmentation.result",
    "Pipeline": "segmentation.pipeline",
    "Weights": "models.weights",
    "ExportedSegmenter": "segmentation.segmenter",
    "UltrametricClustering": "clustering",
    "fit_ultrametric": "core.fitting", "FitResult": "core.fitting",
    "cut_hierarchy": "core.cuts",
    **{n: "core.graph" for n in ("EdgeList", "BatchedGraph", "RegionAdjacencyGraph", "batch_graphs",
                                 "region_adjacency_graph")},
    "grid_graph": "core.builders", "knn_graph": "core.builders",
    **{n: "core.ultrametric" for n in ("Hierarchy", "SubdominantUltrametric", "subdominant_ultrametric",
                                       "build_hierarchy")},
    **{n: "core.average_linkage" for n in ("AverageLinkageUltrametric", "AverageLinkageHierarchy",
                                           "average_linkage_ultrametric", "build_average_linkage_hierarchy")},
    "ward_linkage_ultrametric": "core.ward",
    "hierarchy_from_masks": "segmentation.external", "hierarchy_from_boundary_map": "segmentation.external",
}
_MODULES = ("core", "clustering", "io", "segmentation", "models", "metrics", "data", "training", "explorer", "export",
            "cli")

__all__ = list(_WHERE) + ["__version__"]


def __getattr__(name):
    if name in _WHERE or name in _MODULES:
        try:
            module = _importlib.import_module(f"{__name__}.{_WHERE.get(name, name)}")
        except ModuleNotFoundError as e:  # the torch-free install: one line saying what to install
            from .core._lazy import missing_package, needs

            if missing_package(e) is None:
                raise
            raise ModuleNotFoundError(needs(f"hiseg.{name}", missing_package(e)), name=e.name) from None
        if name in _MODULES:
            return module
        value = getattr(module, name)
        globals()[name] = value  # once
        return value
    raise AttributeError(f"module 'hiseg' has no attribute {name!r}")


def __dir__():
    """The public names (``__all__`` and the subpackages), with those already imported."""
    return sorted({n for n in globals() if not n.startswith("_")} | set(__all__) | set(_MODULES))
