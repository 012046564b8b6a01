"""From a boundary map to a hierarchy: the hierarchy constructions compared in
``experiments/hierarchy_variants.py`` (work in progress: the configurable pipeline object
comes on top of these)."""
from __future__ import annotations

import numpy as np
import torch

from ..graph import region_adjacency_graph
from .pooling import frontier_mean, frontier_pixel_pairs
from .saliency import ucm2_from_rag

VARIANTS = ("ws_single", "ws_average", "owt_average", "px_area", "px_dynamics", "px_volume")


def ucm2_from_khalimsky(khal: np.ndarray) -> np.ndarray:
    """BSDS ucm2 (2H+1, 2W+1) from a (2H-1, 2W-1) Khalimsky map (higra's layout)."""
    h2, w2 = khal.shape
    ucm2 = np.zeros((h2 + 2, w2 + 2))
    ucm2[1:-1, 1:-1] = khal
    ucm2[1::2, 1::2] = 0.0
    return ucm2


def _pixel_graph(pmap):
    import higra as hg

    g = hg.get_4_adjacency_graph(pmap.shape)
    ew = hg.weight_graph(g, pmap.astype(np.float64), hg.WeightFunction.mean)
    return g, ew


def _rag_average(labels, pmap, linkage):
    import higra as hg

    rag = region_adjacency_graph(labels)
    pa, pb, e = frontier_pixel_pairs(rag)
    E = rag.graph.num_edges
    w = frontier_mean(torch.from_numpy(pmap.astype(np.float64)), torch.from_numpy(pa), torch.from_numpy(pb),
                      torch.from_numpy(e), E).numpy()
    lengths = rag.frontier_lengths().astype(np.float64)
    g = hg.UndirectedGraph(rag.graph.num_vertices)
    g.add_edges(rag.graph.sources, rag.graph.targets)
    if linkage == "single":
        tree, alt = hg.bpt_canonical(g, w)
    else:
        tree, alt = hg.binary_partition_tree_average_linkage(g, w, lengths)
    lca = hg.make_lca_fast(tree)
    u = alt[lca.lca(rag.graph.sources, rag.graph.targets)]
    return ucm2_from_rag(rag, u)


def hierarchy_ucm2(pmap: np.ndarray, variant: str, region_size: float = 8.0) -> np.ndarray:
    import higra as hg

    pmap = np.asarray(pmap, dtype=np.float32)
    if variant in ("ws_single", "ws_average"):
        from ..inference import watershed_on_map

        sp = watershed_on_map(pmap, region_size)
        return _rag_average(sp, pmap, "single" if variant == "ws_single" else "average")
    g, ew = _pixel_graph(pmap)
    if variant == "owt_average":
        sp = hg.labelisation_watershed(g, ew)
        return _rag_average(np.asarray(sp), pmap, "average")
    fn = {"px_area": hg.watershed_hierarchy_by_area, "px_dynamics": hg.watershed_hierarchy_by_dynamics,
          "px_volume": hg.watershed_hierarchy_by_volume}[variant]
    tree, alt = fn(g, ew)
    sal = hg.saliency(tree, alt)
    khal = hg.graph_4_adjacency_2_khalimsky(g, sal)
    ucm2 = ucm2_from_khalimsky(np.asarray(khal, dtype=np.float64))
    m = ucm2.max()
    return ucm2 / m if m > 0 else ucm2
