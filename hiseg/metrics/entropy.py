r"""Structural entropy (Li & Pan, 2016) of a hierarchy on a weighted graph.

The cost HypCSE (Zeng et al., AAAI 2026) minimises and the label-free rule by which it reports
an epoch: the number of bits needed to name the vertex reached by a random walk's step, given
the hierarchy as a code (lower is better). For a tree :math:`T` whose leaves are the vertices
of :math:`G` (similarity weights :math:`w`, degrees :math:`d_x`, volumes
:math:`\mathrm{vol}(\alpha) = \sum_{x \in \alpha} d_x`):

.. math::
    H^T(G) = -\sum_{\alpha \ne \mathrm{root}} \frac{g_\alpha}{\mathrm{vol}(G)}
             \log_2 \frac{\mathrm{vol}(\alpha)}{\mathrm{vol}(\alpha^-)}

with :math:`\alpha^-` the parent of node :math:`\alpha` and :math:`g_\alpha` the weight of the
edges leaving :math:`\alpha`. An edge ``{x, y}`` leaves exactly the nodes on the two paths from
``x`` and ``y`` up to (not including) their lowest common ancestor, so the sum telescopes:

.. math::
    H^T(G) = \frac{1}{\mathrm{vol}(G)} \Big( 2 \sum_{\{x,y\} \in E} w_{xy}
             \log_2 \mathrm{vol}(\mathrm{lca}(x, y)) - \sum_x d_x \log_2 d_x \Big),

Dasgupta's cost with the size of the lca replaced by the log of its volume. That is what this
module computes, in O(N + |E|), and what :func:`hiseg.core.losses.structural_entropy` relaxes.
Bounds: :math:`0 \le H^T(G) \le H^1(G) = -\sum_x \frac{d_x}{\mathrm{vol}(G)} \log_2
\frac{d_x}{\mathrm{vol}(G)}`, the flat tree's (every lca the root) and the largest.

Core-level code (numpy, higra, :mod:`hiseg.core.graph` and :mod:`hiseg.metrics.hierarchy`),
ranked with :mod:`hiseg.metrics.hierarchy` below :mod:`hiseg.clustering`, whose estimator
chooses among its hierarchies by it.
"""
from __future__ import annotations

import numpy as np

from .hierarchy import as_tree, graph_similarities

__all__ = ["structural_entropy"]


def structural_entropy(hierarchy, graph, similarities) -> float:
    r"""Structural entropy :math:`H^T(G)` (Li & Pan 2016), in bits, of ``hierarchy`` on ``graph``.

    See the module's docstring for the definition and the telescoped form computed here.
    Lower is better; 0 <= result <= the flat tree's. Non-binary trees are measured as they
    are; parallel edges add up.
    O(N + |E|) after higra's lca preprocessing.

    Parameters
    ----------
    hierarchy : higra Tree, hiseg Hierarchy, fitted UltrametricClustering, scipy linkage
        matrix or parent array (:func:`hiseg.metrics.hierarchy.as_tree`); its leaves are the
        graph's vertices, in order.
    graph : higra UndirectedGraph, (sources, targets, num_vertices) or
        :class:`hiseg.core.graph.EdgeList`.
    similarities : array (n_edges,)
        Nonnegative finite weight of each edge (for distances, e.g. ``exp(-(d / mean d)^2)``).

    Returns
    -------
    float, bits.

    Raises
    ------
    ValueError
        A graph whose vertex count is not the hierarchy's leaf count, similarities of the
        wrong length, negative or not finite, all zero (no random walk), a hierarchy that is
        not a tree, a graph with self-loops.
    TypeError
        Something that is not a hierarchy.
    """
    import higra as hg

    tree = as_tree(hierarchy)
    n = tree.num_leaves()
    g, s = graph_similarities(graph, similarities, n, "structural entropy")
    degrees = np.bincount(g.sources, s, n) + np.bincount(g.targets, s, n)
    total = float(degrees.sum())
    if not total > 0:
        raise ValueError("the graph's similarities are all 0: structural entropy needs a positive total weight")
    volumes = hg.accumulate_sequential(tree, degrees, hg.Accumulators.sum)
    used = s > 0  # an edge of weight 0 adds nothing (and its lca's volume may be 0)
    lca = tree.lowest_common_ancestor(g.sources[used], g.targets[used])
    edges = 2.0 * float(np.dot(s[used], np.log2(volumes[lca])))
    d = degrees[degrees > 0]
    return (edges - float(np.dot(d, np.log2(d)))) / total
