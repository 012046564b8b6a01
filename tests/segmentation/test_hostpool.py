"""The host pool (hiseg.segmentation.hostpool): a batch's trees and superpixel rebuild in worker
processes give exactly what the same work gives in process, and the per-graph batched tree is
the per-graph trees (truth: higra's own lca on the assembled tree, and the one-call batched tree's
ultrametric)."""
import multiprocessing
import os

import higra as hg
import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import hiseg.segmentation.hostpool as hostpool
from hiseg.core.builders import grid_graph
from hiseg.core.graph import batch_graphs
from hiseg.core.losses import closest, triplet
from hiseg.segmentation import Pipeline
from hiseg.segmentation.hostpool import HostPool, average_linkage_batch, host_pool, resolve_workers
from hiseg.core.average_linkage import build_average_linkage_hierarchy
from hiseg.core.device import leaf_lca, upload_indices

ARRAYS = ("parents", "mst_edge_map", "edge_lca", "pass_edge")


@pytest.fixture(scope="module")
def pool():
    return host_pool(2)  # the process-wide pool: started once for the module


@pytest.fixture
def always_pool(monkeypatch):
    """Every batch goes to the pool, however small."""
    monkeypatch.setattr(hostpool, "MIN_POOL_EDGES", 0)
    monkeypatch.setattr(hostpool, "MIN_POOL_PIXELS", 0)


def _batch(shapes, seed, ties=False):
    rng = np.random.default_rng(seed)
    g = batch_graphs([grid_graph(s) for s in shapes])
    w = rng.integers(0, 3, g.num_edges).astype(np.float64) if ties else rng.random(g.num_edges)
    return g, w, rng.integers(1, 6, g.num_edges).astype(np.float64)


def _same_arrays(a, b):
    return all(np.array_equal(getattr(a, k), getattr(b, k)) for k in ARRAYS)


@settings(max_examples=40, deadline=None)
@given(shapes=st.lists(st.tuples(st.integers(1, 6), st.integers(1, 6)), min_size=1, max_size=5),
       seed=st.integers(0, 10**6), ties=st.booleans())
def test_batch_is_the_per_graph_trees(shapes, seed, ties):
    g, w, ln = _batch(shapes, seed, ties)
    h = average_linkage_batch(g, w, ln, lca=True)
    tree = hg.Tree(h.parents)  # a valid tree: leaves first, parents above children, root last
    assert tree.num_leaves() == g.num_vertices and h.num_nodes == 2 * g.num_vertices - 1
    n0 = g.num_vertices
    for b in range(g.num_graphs):  # graph b's nodes are its own tree's, shifted
        v0, n = int(g.vertex_ptr[b]), int(g.vertex_ptr[b + 1] - g.vertex_ptr[b])
        e0, e1 = int(g.edge_ptr[b]), int(g.edge_ptr[b + 1])
        own = build_average_linkage_hierarchy(g.graph(b), w[e0:e1], ln[e0:e1])
        shift = n0 - b - n + v0
        np.testing.assert_array_equal(h.edge_lca[e0:e1], own.edge_lca + shift)
        np.testing.assert_array_equal(h.mst_edge_map[v0 - b:v0 - b + n - 1], own.mst_edge_map + e0)
        if n > 1:
            np.testing.assert_array_equal(h.parents[v0:v0 + n], own.parents[:n] + shift)
    # lcas (host and device) against higra's on the assembled tree
    rng = np.random.default_rng(seed)
    a, c = rng.integers(0, n0, 200), rng.integers(0, n0, 200)
    truth = tree.lowest_common_ancestor(a, c)
    np.testing.assert_array_equal(h.lca(a, c), truth)
    np.testing.assert_array_equal(leaf_lca(h, torch.from_numpy(a), torch.from_numpy(c)).numpy(), truth)
    np.testing.assert_array_equal(h.edge_lca, tree.lowest_common_ancestor(g.sources, g.targets))
    # virtual edges E + j represent the nodes joining the graphs
    assert (h.mst_edge_map >= g.num_edges).sum() == g.num_graphs - 1
    if not ties:  # the one-call batched tree gives the same ultrametric
        wt = torch.from_numpy(w)
        one = build_average_linkage_hierarchy(g, w, ln)
        torch.testing.assert_close(h.ultrametric(wt), one.ultrametric(wt), rtol=0, atol=1e-12)


def test_pool_equals_in_process_bitwise(pool, always_pool):
    g, w, ln = _batch([(9, 7), (1, 1), (12, 5), (2, 1), (6, 6)], 3)
    for ties in (False, True):
        if ties:
            w = np.round(w * 3)
        ref = average_linkage_batch(g, w, ln, None, lca=True)
        got = average_linkage_batch(g, w, ln, pool, lca=True)
        assert _same_arrays(ref, got)
        np.testing.assert_array_equal(ref._lca.rank, got._lca.rank)
        np.testing.assert_array_equal(ref._lca.table, got._lca.table)
        a, b = upload_indices(ref, "cpu", lca=True), upload_indices(got, "cpu", lca=True)
        assert all(torch.equal(x, y) for x, y in zip(a, b))


def test_losses_equal_with_the_pool_float64(pool, always_pool):
    """closest + triplet through Pipeline.batch_ultrametric in float64: the pool's equal the in-process
    ones to 1e-12 (in fact bitwise), value and gradient."""
    g, w, ln = _batch([(10, 8), (7, 9), (1, 3), (8, 8)], 5)
    target = torch.from_numpy(np.random.default_rng(1).random(g.num_edges))
    rng = np.random.default_rng(2)
    trip = tuple(torch.from_numpy(rng.integers(0, 80, 300)) for _ in range(3))  # vertices of graph 0
    pipe = Pipeline(linkage="average")
    out = []
    for p in (None, pool):
        wt = torch.tensor(w, requires_grad=True)
        u, h = pipe.batch_ultrametric(g, wt, ln, lca=True, pool=p)
        loss = closest(u, target) + triplet(h, wt, trip, margin=0.2)
        loss.backward()
        out.append((loss.detach(), wt.grad))
    assert abs(float(out[0][0] - out[1][0])) <= 1e-12
    torch.testing.assert_close(out[0][1], out[1][1], rtol=0, atol=1e-12)


def test_disconnected_graph_is_named(pool, always_pool):
    good = grid_graph((3, 3))
    bad = (np.array([0, 2]), np.array([1, 3]), 4)  # two components
    g = batch_graphs([good, bad])
    for p in (None, pool):
        with pytest.raises(ValueError, match=r"graphs \[1\] of the batch are not connected"):
            average_linkage_batch(g, np.ones(g.num_edges), None, p)


def test_step_equals_with_the_pool(pool, always_pool):
    """A training step's losses and its rebuilt graphs (boundary_watershed) with the pool equal
    those in process, bitwise."""
    from hiseg.data.collate import collate_graph_batch
    from hiseg.data.graphs import SegmentationGraphDataset
    from hiseg.data.synthetic import SyntheticSegmentation
    from hiseg.training.module import HierarchicalSegmentationModule

    ds = SegmentationGraphDataset(SyntheticSegmentation(3, size=64, seed=0), None, None, superpixels="none")
    batch = collate_graph_batch([ds[i] for i in range(3)])
    res = {}
    for workers in (0, 2):
        torch.manual_seed(0)
        m = HierarchicalSegmentationModule(arch="compact_boundary_net", arch_kwargs={"width": 8},
                                           pipeline={"superpixels": "boundary_watershed", "region_size": 4.0},
                                           host_workers=workers)
        assert (m.host_pool is None) == (workers == 0)
        m.on_train_batch_start(batch, 0)
        res[workers] = m.compute_losses(batch)
    (a, ua, ha, ba), (b, ub, hb, bb) = res[0], res[2]
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    assert torch.equal(ua, ub) and _same_arrays(ha, hb)
    for k in ("frontier_pixels_a", "frontier_pixels_b", "frontier_edge", "edge_target", "sp_labels", "frontier_count"):
        assert torch.equal(getattr(ba, k), getattr(bb, k)), k
    assert all(np.array_equal(x.labels, y.labels) for x, y in zip(ba.rags, bb.rags))


def test_workers_setting(monkeypatch):
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "1")
    assert resolve_workers(None) == resolve_workers("auto") == (hostpool.available_cores()
                                                                if hostpool.available_cores() >= 2 else 0)
    monkeypatch.setenv("LOCAL_WORLD_SIZE", str(10**6))  # many processes on the host: in process
    assert resolve_workers(None) == 0 and host_pool(None) is None
    assert resolve_workers(0) == 0 and resolve_workers(3) == 3
    for bad in (-1, 1.5, "many", True):
        with pytest.raises(ValueError, match="host_workers must be an integer >= 0"):
            resolve_workers(bad)
    from hiseg.training.module import HierarchicalSegmentationModule

    with pytest.raises(ValueError, match="host_workers"):
        HierarchicalSegmentationModule(arch_kwargs={"width": 8}, host_workers=-2)
    with pytest.raises(ValueError, match="at least one worker"):
        HostPool(0)


def _dies_in_a_worker(x):
    if multiprocessing.current_process().name != "MainProcess":
        os._exit(3)
    return x * 2


def test_a_dead_worker_falls_back_in_process():
    p = HostPool(1)
    try:
        out = {}
        with pytest.warns(RuntimeWarning, match="lost a worker"):
            hostpool._run_jobs(_dies_in_a_worker, [(1,), (2,)], p, out.__setitem__)
        assert out == {0: 2, 1: 4} and p.disabled  # given up: the next batches run in process
        out.clear()
        hostpool._run_jobs(_dies_in_a_worker, [(5,)], p, out.__setitem__)
        assert out == {0: 10}
    finally:
        p.close()


@pytest.mark.parametrize("superpixels", ["color_watershed", "boundary_watershed"])
def test_the_pool_adds_no_copy(pool, always_pool, superpixels):
    """tests/training/test_sync.py's counts hold with the pool: it works on host arrays only."""
    from tests.training.test_sync import _count_step

    c = _count_step({"superpixels": superpixels, "region_size": 6.0}, host_workers=2)
    n = 1 if superpixels == "color_watershed" else 2
    assert c.d2h == ["cpu"] * n and c.h2d == ["to"] * n, (c.d2h, c.h2d)


def test_lca_of_a_leaf_with_itself_in_a_two_leaf_tree():
    """The leaf-lca query of (v, v) stays inside a one-entry table (it read past it for v = 1)."""
    from hiseg.core.ultrametric import build_hierarchy

    h = build_hierarchy((np.array([0]), np.array([1]), 2), np.array([0.5]))
    a = np.array([0, 1, 1, 0])
    b = np.array([0, 1, 0, 1])
    np.testing.assert_array_equal(h.lca(a, b), [0, 1, 2, 2])
    np.testing.assert_array_equal(leaf_lca(h, torch.from_numpy(a), torch.from_numpy(b)).numpy(), [0, 1, 2, 2])
