"""The device copies of a training step: numpy arrays moved to a device in one copy, a hierarchy's
index arrays uploaded together, and the leaves' lcas queried on the device.

A training step makes two small transfers (the design notes' data flow): the weights down to the
host, the tree's indices up. :func:`packed_copy` packs any numpy arrays into one byte buffer and
copies it once; :func:`upload_indices` sends in that one copy every index array a hierarchy's
differentiable views gather with (:meth:`hiseg.core.ultrametric.Hierarchy.view_arrays`), with the
leaf-lca tables the triplet term queries (:func:`leaf_lca`: the range-maximum query of
:class:`hiseg.core.lca.LeafLCA` as a few gathers, no host synchronisation), and leaves
them in the hierarchy, where its views find them. One image's path (:meth:`Pipeline.hierarchy
<hiseg.segmentation.pipeline.Pipeline.hierarchy>`, numpy weights) makes none of these copies.

A hierarchy (:class:`hiseg.core.ultrametric.Hierarchy`) is read through its public methods only
(``view_arrays``, ``leaf_lcas``, ``device_index``, ``set_device_index``), so this module imports
nothing of :mod:`hiseg.core.ultrametric` (not even for annotations: no import circle) and sits
below it; the layers' callers import these names from here.
"""
from __future__ import annotations

import numpy as np

from ._lazy import lazy_torch

__all__ = ["packed_copy", "upload_indices", "leaf_lca"]

#: imported at its first use (:mod:`hiseg.core._lazy`): importing this module costs no torch
torch = lazy_torch()


def _torch_dtypes() -> dict:
    return {np.dtype(np.int64): torch.int64, np.dtype(np.int32): torch.int32,
            np.dtype(np.float64): torch.float64, np.dtype(np.float32): torch.float32,
            np.dtype(np.bool_): torch.bool}


def upload_indices(hierarchy, device, *, lca: bool = False, extra=()) -> list:
    """Move every index array a training step needs to ``device`` in **one** host-to-device copy.

    Packs into one byte buffer: the index arrays of the hierarchy's differentiable views
    (:meth:`Hierarchy.ultrametric`, :meth:`Hierarchy.node_altitudes`, which then find them
    in their cache instead of copying each one), with ``lca`` the leaf-lca tables that
    :func:`leaf_lca` queries on the device, and the ``extra`` numpy arrays; copies the
    buffer once (``non_blocking``) and returns the ``extra`` arrays as tensors on
    ``device`` (views of the copied buffer). ``device`` should be the weights'
    ``tensor.device`` (the cache is keyed by its string). Cost: O(E + N log N) bytes.
    """
    device = torch.device(device)
    arrays = dict(hierarchy.view_arrays())
    if lca:
        lcas = hierarchy.leaf_lcas()
        arrays["lca_rank"] = lcas.rank
        arrays["lca_table"] = lcas.table.reshape(-1)
    names = list(arrays) + [None] * len(extra)
    tensors = packed_copy(list(arrays.values()) + list(extra), device)
    for name, t in zip(names, tensors):
        if name is not None:
            hierarchy.set_device_index(name, device, t)
    return tensors[len(arrays):]


def packed_copy(arrays, device) -> list:
    """The numpy ``arrays`` as tensors on ``device``, moved in one copy: packed into one
    8-byte-aligned byte buffer, copied (``non_blocking``), viewed back with their dtypes
    and shapes (int64, int32, float64, float32, bool)."""
    layout, offset = [], 0
    for a in arrays:
        a = np.ascontiguousarray(a)
        if a.dtype not in _torch_dtypes():
            raise TypeError(f"packed_copy: unsupported dtype {a.dtype}")
        layout.append((a, offset))
        offset += -(-a.nbytes // 8) * 8
    buf = np.empty(max(offset, 8), dtype=np.uint8)
    for a, off in layout:
        buf[off:off + a.nbytes] = a.reshape(-1).view(np.uint8)
    dev_buf = torch.from_numpy(buf).to(device, non_blocking=True)  # the one copy
    return [dev_buf[off:off + a.nbytes].view(_torch_dtypes()[a.dtype]).reshape(a.shape) for a, off in layout]


def leaf_lca(hierarchy, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Lowest common ancestors of the leaf pairs ``(a[i], b[i])``, computed on the tensors'
    device: :meth:`Hierarchy.lca`'s range-maximum query as a few gathers, no host
    synchronisation. The tables come from :func:`upload_indices` (``lca=True``; uploaded
    here otherwise). Vertex ids are not range-checked (that would read them back).
    Returns int64 node ids, equal to ``hierarchy.lca(a, b)``."""
    dev = a.device
    if hierarchy.device_index("lca_table", dev) is None:
        upload_indices(hierarchy, dev, lca=True)
    rank = hierarchy.device_index("lca_rank", dev)
    table = hierarchy.device_index("lca_table", dev)
    m = hierarchy.leaf_lcas().m
    ra, rb = rank[a], rank[b]
    lo, hi = torch.minimum(ra, rb), torch.maximum(ra, rb)
    length = hi - lo
    same = length == 0
    length = torch.where(same, torch.ones_like(length), length)
    lo, hi = torch.where(same, torch.zeros_like(lo), lo), torch.where(same, torch.ones_like(hi), hi)  # in the table
    k = torch.log2(length.to(torch.float64)).floor().to(torch.int64)  # exact: lengths < 2**52
    res = torch.maximum(table[k * m + lo], table[k * m + hi - (torch.ones_like(k) << k)]).to(torch.int64)
    return torch.where(same, a.to(torch.int64), res)
