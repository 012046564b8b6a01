"""Ward's hierarchy of points constrained to a graph, as an ultrametric on its edges: the input
dissimilarity of the clustering estimator's fits (``dissimilarity="ward"``), not a layer (it is not
differentiable), hence apart from :mod:`hiseg.core.ultrametric`."""
from __future__ import annotations

import numpy as np

from ._lazy import import_higra, lazy_torch
from .builders import normalised_points
from .graph import as_edge_list, connected_components

hg = import_higra()  # higra, its plotting imports deferred (hiseg.core._lazy.import_higra)

__all__ = ["ward_linkage_ultrametric"]

#: imported at its first use (:mod:`hiseg.core._lazy`): points given as a tensor are read detached
torch = lazy_torch()


def ward_linkage_ultrametric(graph, X) -> np.ndarray:
    r"""Ward's hierarchy of points constrained to a graph, as an ultrametric on its edges.

    Clusters joined by an edge of ``graph`` are merged in the order of Ward's cost
    :math:`\Delta(A,B) = \frac{|A||B|}{|A|+|B|}\|c_A - c_B\|^2` (higra's
    ``binary_partition_tree_ward_linkage``, heap-based, O(E log E)); a merge height is
    made at least the heights below it (higra's ``"max"`` correction: on a sparse graph
    Ward's costs need not increase). The value on edge ``(x, y)`` is the height of the
    merge that first joins ``x`` and ``y``, in the unit of ``X``:
    :math:`\sqrt{2\Delta}`, scipy's Ward height. On a complete graph the result is
    scipy's ``cophenet(linkage(X, "ward"))`` on every pair (up to ties).

    It is not differentiable (a tensor of ``X`` is detached); it serves as the input
    dissimilarity of the ultrametric fits (``UltrametricClustering(dissimilarity="ward")``).

    Parameters
    ----------
    graph : graph argument (connected), on ``len(X)`` vertices.
    X : (n, d) array of finite values, the points (vertex ``i`` is ``X[i]``).

    Returns
    -------
    u : float64 ndarray (E,), nonnegative, an ultrametric on the edges of ``graph``.

    Raises
    ------
    ValueError
        ``X`` not 2-D, non-finite, or not one point per vertex; a disconnected graph;
        heights beyond the float64 range.
    """
    el = as_edge_list(graph)
    if torch.is_tensor(X):
        X = X.detach().cpu().numpy()
    X = np.asarray(X, dtype=np.float64)
    if X.ndim != 2:
        raise ValueError(f"X must be a 2-D array (n_samples, n_features), got shape {X.shape}")
    if X.shape[0] != el.num_vertices:
        raise ValueError(f"X has {X.shape[0]} points for a graph of {el.num_vertices} vertices")
    if not np.all(np.isfinite(X)):
        raise ValueError("X contains NaN or infinite values")
    nc = connected_components(el)[0]
    if nc > 1:
        raise ValueError(f"the graph is not connected ({nc} components): Ward's hierarchy needs a "
                         "connected graph (knn_graph connects it)")
    if el.sources.size == 0:
        return np.zeros(0, dtype=np.float64)
    Z, scale = normalised_points(X)  # exact power-of-two rescaling: no overflow, no underflow
    tree, alt = hg.binary_partition_tree_ward_linkage(el.to_higra(), np.ascontiguousarray(Z),
                                                      altitude_correction="max")
    lca = tree.lowest_common_ancestor(el.sources, el.targets)
    with np.errstate(over="ignore"):
        u = np.sqrt(2.0 * np.maximum(np.asarray(alt, dtype=np.float64)[lca], 0.0)) * scale
    if not np.all(np.isfinite(u)):
        raise ValueError("Ward heights exceed the float64 range (about 1.8e308): rescale X")
    return u
