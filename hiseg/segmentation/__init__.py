"""Image side of hierarchical segmentation: frontier pooling, saliency maps (UCM), cuts."""
from .pipeline import Pipeline, PipelineError, boundary_watershed
from .pooling import frontier_mean, frontier_pixel_pairs, rag_frontier_mean
from .saliency import (cut_at_threshold, cut_num_regions, rag_hierarchy, saliency_from_ucm2, ucm2_from_rag)

__all__ = ["Pipeline", "PipelineError", "boundary_watershed", "frontier_mean", "frontier_pixel_pairs",
           "rag_frontier_mean", "ucm2_from_rag", "saliency_from_ucm2", "cut_at_threshold", "cut_num_regions",
           "rag_hierarchy"]
