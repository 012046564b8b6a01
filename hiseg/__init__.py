"""hiseg: hierarchical clustering and learned hierarchical image segmentation by ultrametric fitting.

Core (no I/O, no Lightning): :mod:`hiseg.graph`, :mod:`hiseg.ultrametric`, :mod:`hiseg.cuts`,
:mod:`hiseg.losses`, :mod:`hiseg.fitting`.
"""
from . import cuts, graph, losses, ultrametric
from .graph import (BatchedGraph, EdgeList, RegionAdjacencyGraph, batch_graphs, grid_graph,
                    knn_graph, region_adjacency_graph)
from .ultrametric import (AverageLinkageHierarchy, AverageLinkageUltrametric, Hierarchy, SubdominantUltrametric,
                          average_linkage_ultrametric, build_average_linkage_hierarchy, build_hierarchy,
                          subdominant_ultrametric, ward_linkage_ultrametric)

__version__ = "0.1.0"


def __getattr__(name):  # lazy: the estimator pulls in scikit-learn
    if name in ("fit_ultrametric", "FitResult"):
        from . import fitting
        return getattr(fitting, name)
    if name == "UltrametricClustering":
        from .clustering import UltrametricClustering
        return UltrametricClustering
    raise AttributeError(f"module 'hiseg' has no attribute {name!r}")
