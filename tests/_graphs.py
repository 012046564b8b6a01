"""Random and complete test graphs shared by the layer tests."""
import numpy as np

from hiseg.core.graph import EdgeList


def complete_graph(n):
    s, t = np.triu_indices(n, 1)
    return EdgeList(s.astype(np.int64), t.astype(np.int64), n)


def random_connected_graph(rng, n, extra):
    """A random spanning tree plus `extra` random non-duplicate edges (any n >= 1)."""
    perm = rng.permutation(n)
    edges = set()
    for i in range(1, n):
        j = rng.integers(0, i)
        a, b = perm[i], perm[j]
        edges.add((min(a, b), max(a, b)))
    for _ in range(extra):
        a, b = rng.integers(0, n, 2)
        if a != b:
            edges.add((min(a, b), max(a, b)))
    e = np.array(sorted(edges), dtype=np.int64).reshape(-1, 2)
    e = e[rng.permutation(len(e))]
    return EdgeList(e[:, 0], e[:, 1], n)
