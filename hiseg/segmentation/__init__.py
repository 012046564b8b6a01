"""Image side of hierarchical segmentation, in the order an image flows through it.

:mod:`~hiseg.segmentation.superpixels` (over-segmentations of an image or of a boundary
map, and their quality measures) -> the region adjacency graph
(:func:`hiseg.core.graph.region_adjacency_graph`) -> :mod:`~hiseg.segmentation.pooling`
(boundary map to RAG edge weights) -> the hierarchy (:mod:`hiseg.core.ultrametric`) ->
:mod:`~hiseg.segmentation.saliency` (UCM rendering and cuts). :class:`Pipeline`
(:mod:`~hiseg.segmentation.pipeline`) is the one configurable object of that chain.
"""
from ..core._lazy import lazy_names

from .saliency import cut_at_threshold, cut_num_regions, rag_hierarchy, saliency_from_ucm2, ucm2_from_rag
from .superpixels import (Superpixels, achievable_segmentation_accuracy, all_minima_watershed, boundary_recall,
                          boundary_watershed, label_boundaries, slic_superpixels, superpixels, watershed_superpixels)

#: name -> the module of this package that defines it, imported when the name is first used (they
#: need torch): ``import hiseg.segmentation.saliency`` (the onnxruntime path's UCMs and cuts) costs none
_WHERE = {**{n: "pipeline" for n in ("Pipeline", "PipelineError")},
          **{n: "pooling" for n in ("frontier_mean", "frontier_pixel_pairs", "rag_frontier_mean")}}

__all__ = ["Pipeline", "PipelineError", "frontier_mean", "frontier_pixel_pairs", "rag_frontier_mean",
           "ucm2_from_rag", "saliency_from_ucm2", "cut_at_threshold", "cut_num_regions", "rag_hierarchy",
           "Superpixels", "superpixels", "watershed_superpixels", "slic_superpixels", "boundary_watershed",
           "all_minima_watershed", "label_boundaries", "boundary_recall", "achievable_segmentation_accuracy"]

__getattr__, __dir__ = lazy_names(__name__, _WHERE)
