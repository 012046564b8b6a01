"""Lowest common ancestors of the leaves of a binary tree, on the host.

:class:`LeafLCA` answers ``lca(a_i, b_i)`` for arrays of leaf pairs by a range-maximum query
over the *split nodes* of the leaves in depth-first order (a sparse table of ``N - 1`` int32
entries per level), built in O(N log N) vectorised numpy instead of an Euler tour of all
``2N - 1`` nodes. Both linkages' builders use it for the lcas of the edges that are not
their own tree's; its tables also go to the device for the triplet term
(:func:`hiseg.core.device.leaf_lca`).
"""
from __future__ import annotations

import threading

import numpy as np

from ._lazy import import_higra

hg = import_higra()  # higra, its plotting imports deferred (hiseg.core._lazy.import_higra)

__all__ = ["LeafLCA"]

_tls = threading.local()


def _workspace(nbytes: int) -> np.ndarray:
    """A per-thread reusable byte buffer (avoids re-faulting large fresh pages every call)."""
    buf = getattr(_tls, "buf", None)
    if buf is None or buf.nbytes < nbytes:
        buf = np.empty(max(nbytes, 1), dtype=np.uint8)
        _tls.buf = buf
    return buf


class LeafLCA:
    """Lowest common ancestor of *leaves* of a binary tree whose parents have larger ids.

    Leaves get their rank in a depth-first order; between consecutive leaves sits the
    *split node* (their lca); the lca of two leaves is the highest (largest id) split
    node between their ranks: a range-maximum query answered by a sparse table.
    Preprocessing O(N log N) time, O(N log N) int32 memory; query O(1) per pair.
    """

    def __init__(self, tree: "hg.Tree", parents: np.ndarray, num_leaves: int, sizes: np.ndarray,
                 children: tuple[np.ndarray, np.ndarray], transient: bool = False):
        n = parents.shape[0]
        nl = num_leaves
        small, big = children
        off = np.zeros(n, dtype=np.int64)
        off[big] = sizes[small]  # the larger child is placed after the smaller one
        start = hg.propagate_sequential_and_accumulate(tree, off, hg.Accumulators.sum)
        self.rank = start[:nl]
        m = nl - 1
        self.m = m
        idt = np.int32 if n < 2**31 else np.int64
        if m == 0:
            self.table = np.zeros((1, 1), dtype=idt)
            return
        levels = max(1, int(m).bit_length())
        nbytes = levels * m * np.dtype(idt).itemsize
        # a transient table (used once, inside build_hierarchy) lives in a reused buffer
        buf = _workspace(nbytes)[:nbytes] if transient else np.empty(nbytes, dtype=np.uint8)
        table = buf.view(idt).reshape(levels, m)
        table[0, start[nl:] + sizes[small] - 1] = np.arange(nl, n, dtype=idt)
        self.table = _sparse_levels(table)

    @classmethod
    def from_split_nodes(cls, rank: np.ndarray, split: np.ndarray) -> "LeafLCA":
        """The query structure of leaves ranked ``rank`` in a depth-first order whose
        consecutive leaves have the split nodes ``split`` (N - 1,): e.g. per-graph orders
        concatenated (``hiseg.segmentation.hostpool``). O(N log N)."""
        self = cls.__new__(cls)
        self.rank, self.m = rank, int(split.shape[0])
        if self.m == 0:
            self.table = np.zeros((1, 1), dtype=split.dtype)
            return self
        table = np.zeros((max(1, self.m.bit_length()), self.m), dtype=split.dtype)  # deterministic tails
        table[0] = split
        self.table = _sparse_levels(table)
        return self

    def __call__(self, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        ra = self.rank[a]
        rb = self.rank[b]
        lo = np.minimum(ra, rb)
        hi = np.maximum(ra, rb)
        length = hi - lo
        same = length == 0
        length[same] = 1
        lo[same], hi[same] = 0, 1  # answered below; keeps the reads in the table (N = 2: one entry)
        k = np.frexp(length)[1] - 1
        flat = self.table.reshape(-1)
        base = k * self.m
        res = np.maximum(flat[base + lo], flat[base + hi - (1 << k)]).astype(np.int64)
        if same.any():
            res[same] = a[same]
        return res


def _sparse_levels(table: np.ndarray) -> np.ndarray:
    """Fill levels 1.. of a range-maximum sparse table from its level 0, in place."""
    m = table.shape[1]
    for k in range(1, table.shape[0]):
        h = 1 << (k - 1)
        np.maximum(table[k - 1, : m - h], table[k - 1, h:], out=table[k, : m - h])
    return table

