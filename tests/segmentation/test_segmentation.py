"""Frontier pooling, ucm2 maps and cuts against brute-force versions."""
import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import ndimage
from skimage.measure import label as cc_label

from hiseg.core.builders import grid_graph
from hiseg.core.graph import batch_graphs, region_adjacency_graph
from hiseg.segmentation import (cut_at_threshold, cut_num_regions, frontier_mean, frontier_pixel_pairs,
                                rag_hierarchy, ucm2_from_rag)


def voronoi_labels(rng, shape, n):
    pts = rng.random((n, 2)) * shape
    yy, xx = np.mgrid[: shape[0], : shape[1]]
    d = (yy[..., None] - pts[:, 0]) ** 2 + (xx[..., None] - pts[:, 1]) ** 2
    lab = d.argmin(-1)
    # split non-connected regions into connected ones (RAG vertices = connected regions)
    out = np.zeros_like(lab)
    k = 0
    for v in np.unique(lab):
        cc, m = ndimage.label(lab == v)
        out[cc > 0] = cc[cc > 0] + k - 1
        k += m
    return out


def same_partition(a, b):
    """Two label images describe the same partition."""
    pairs = np.unique(np.stack([a.ravel(), b.ravel()], 1), axis=0)
    return len(pairs) == len(np.unique(a)) == len(np.unique(b))


def test_frontier_mean_brute_force(rng):
    lab = voronoi_labels(rng, (20, 25), 12)
    rag = region_adjacency_graph(lab)
    bmap = rng.random(lab.shape)
    pa, pb, e = frontier_pixel_pairs(rag)
    w = frontier_mean(torch.tensor(bmap), torch.tensor(pa), torch.tensor(pb), torch.tensor(e), rag.graph.num_edges)
    flat = bmap.ravel()
    L = rag.labels.ravel()
    px = grid_graph(lab.shape)
    for i, (s, t) in enumerate(zip(rag.graph.sources, rag.graph.targets)):
        vals = [0.5 * (flat[p] + flat[q]) for p, q in zip(px.sources, px.targets)
                if {L[p], L[q]} == {s, t}]
        assert w[i].item() == pytest.approx(np.mean(vals))


def test_frontier_mean_is_differentiable_and_batched(rng):
    labs = [voronoi_labels(rng, (15, 15), 8) for _ in range(3)]
    rags = [region_adjacency_graph(x) for x in labs]
    bg = batch_graphs([r.graph for r in rags])
    b = torch.rand(3, 15, 15, dtype=torch.float64, requires_grad=True)
    fa, fb, fe = [], [], []
    for i, r in enumerate(rags):
        pa, pb, e = frontier_pixel_pairs(r)
        fa.append(pa + i * 225); fb.append(pb + i * 225); fe.append(e + bg.edge_ptr[i])
    w = frontier_mean(b, *(torch.tensor(np.concatenate(x)) for x in (fa, fb, fe)), bg.num_edges)
    for i, r in enumerate(rags):
        pa, pb, e = frontier_pixel_pairs(r)
        wi = frontier_mean(b[i], torch.tensor(pa), torch.tensor(pb), torch.tensor(e), r.graph.num_edges)
        torch.testing.assert_close(w[bg.edge_ptr[i]:bg.edge_ptr[i + 1]], wi)
    w.sum().backward()
    assert b.grad.abs().sum() > 0


def test_frontier_mean_refuses_an_edge_without_frontier_pixels():
    pa, pb, e = (torch.tensor(x) for x in ([0, 1], [1, 2], [0, 0]))
    with pytest.raises(ValueError, match="no frontier pixel"):
        frontier_mean(torch.rand(3), pa, pb, e, 2)  # edge 1 has none


@pytest.mark.cuda
def test_frontier_mean_on_cuda_never_synchronises(rng):
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA device")
    lab = voronoi_labels(rng, (20, 25), 12)
    rag = region_adjacency_graph(lab)
    pa, pb, e = (torch.tensor(x, device="cuda") for x in frontier_pixel_pairs(rag))
    b = torch.rand(lab.shape, dtype=torch.float64, device="cuda")
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        w = frontier_mean(b, pa, pb, e, rag.graph.num_edges)
    finally:
        torch.cuda.set_sync_debug_mode("default")
    ref = frontier_mean(b.cpu(), pa.cpu(), pb.cpu(), e.cpu(), rag.graph.num_edges)
    torch.testing.assert_close(w.cpu(), ref)


@pytest.mark.parametrize("seed", range(3))
def test_ucm2_regions_equal_cuts(seed):
    """The benchmark's reading of a ucm2 (8-connected components of ucm2 <= t) is our cut."""
    rng = np.random.default_rng(seed)
    lab = voronoi_labels(rng, (24, 30), 15)
    rag = region_adjacency_graph(lab)
    u, h = rag_hierarchy(rag, rng.random(rag.graph.num_edges))
    ucm2 = ucm2_from_rag(rag, u)
    assert ucm2.shape == (49, 61)
    levels = np.unique(u.numpy())
    prev = None
    for t in np.concatenate([[0.0], levels, [2.0]]):
        cut = cut_at_threshold(rag, u, t)
        regions = cc_label(ucm2 <= t, connectivity=2)[1::2, 1::2]
        assert same_partition(cut, regions)
        if prev is not None:  # nested: every region of the finer cut lies in one region of the coarser
            pairs = np.unique(np.stack([prev.ravel(), cut.ravel()], 1), axis=0)
            assert len(np.unique(pairs[:, 0])) == len(pairs)
        prev = cut
    # boundaries read at [2::2, 2::2] (the lower-right corner of each pixel) are non-zero
    # exactly where the 2x2 block of pixels around that corner holds two superpixels
    # (past the last row / column, the block is the edge pixels repeated)
    sal = ucm2[2::2, 2::2]
    assert sal.shape == lab.shape and sal.max() == pytest.approx(u.max().item())
    assert u.min().item() > 0  # every merge above 0: a frontier is never drawn at 0
    pad = np.pad(lab, ((0, 1), (0, 1)), mode="edge")
    block = np.stack([pad[:-1, :-1], pad[1:, :-1], pad[:-1, 1:], pad[1:, 1:]])
    np.testing.assert_array_equal(sal > 0, (block != block[0]).any(axis=0))


def test_cut_num_regions_exact(rng):
    lab = voronoi_labels(rng, (20, 20), 10)
    rag = region_adjacency_graph(lab)
    w = np.round(rng.random(rag.graph.num_edges), 1)  # ties
    u, h = rag_hierarchy(rag, w)
    for k in range(1, rag.num_regions + 1):
        assert len(np.unique(cut_num_regions(rag, h, k))) == k
    with pytest.raises(ValueError, match=r"n_regions must be in \[1, the number of superpixels = "):
        cut_num_regions(rag, h, rag.num_regions + 1)
    with pytest.raises(TypeError, match="'k'"):
        cut_num_regions(rag, h, k=3)


def test_ucm2_bad_length(rng):
    lab = voronoi_labels(rng, (10, 10), 4)
    rag = region_adjacency_graph(lab)
    with pytest.raises(ValueError, match="one value per RAG edge"):
        ucm2_from_rag(rag, np.zeros(rag.graph.num_edges + 1))


def _relevant_merges_brute_force(rag, h, min_size):
    """Replay the hierarchy's merges with a union-find holding cluster areas: merge i is
    relevant when both clusters it joins cover at least min_size pixels."""
    area = np.bincount(rag.labels.ravel(), minlength=rag.num_regions).astype(float)
    parent = list(range(rag.num_regions))

    def find(x):
        while parent[x] != x:
            x = parent[x]
        return x
    rel = []
    for i, e in enumerate(h.mst_edge_map):
        a, b = find(int(rag.graph.sources[e])), find(int(rag.graph.targets[e]))
        assert a != b
        rel.append(min(area[a], area[b]) >= min_size)
        parent[a] = b
        area[b] += area[a]
    return np.array(rel)


@pytest.mark.parametrize("linkage", ["single", "average"])
@given(seed=st.integers(0, 10_000), frac=st.floats(0.0, 0.3))
@settings(max_examples=25, deadline=None)
def test_size_aware_cut_against_brute_force(linkage, seed, frac):
    """Size-aware K cuts: min_size halved until k - 1 merges are relevant, the k-1 highest
    relevant merges undone (replayed independently), exactly k regions, every region >=
    the size used, connected; nested in k while no halving was needed."""
    from hiseg.core.average_linkage import average_linkage_ultrametric

    rng = np.random.default_rng(seed)
    lab = voronoi_labels(rng, (18, 22), 14)
    rag = region_adjacency_graph(lab)
    w = torch.tensor(rng.random(rag.graph.num_edges))
    if linkage == "single":
        _, h = rag_hierarchy(rag, w)
    else:
        _, h = average_linkage_ultrametric(rag.graph, w, rag.frontier_lengths().astype(float), return_hierarchy=True)
    min_size = frac * lab.size
    prev = None
    for k in range(1, rag.num_regions + 1):
        cut, used = cut_num_regions(rag, h, k, min_size=min_size, return_min_size=True)
        expected_used = min_size
        while k > 1 and expected_used > 0 and _relevant_merges_brute_force(rag, h, expected_used).sum() < k - 1:
            expected_used /= 2
        assert used == expected_used
        rel = _relevant_merges_brute_force(rag, h, used)
        undo = np.flatnonzero(rel)[::-1][: k - 1]
        keep = np.setdiff1d(np.arange(rag.num_regions - 1), undo)
        merges = h.mst_edge_map[keep]
        ref = cut_at_threshold(rag, np.where(np.isin(np.arange(rag.graph.num_edges), merges), 0.0, 1.0), 0.5)
        assert same_partition(cut, ref)
        assert np.array_equal(np.unique(cut), np.arange(k))
        sizes = np.bincount(cut.ravel())
        if k > 1:
            assert sizes.min() >= used
        for r in np.unique(cut):
            assert cc_label(cut == r, connectivity=1).max() == 1
        if prev is not None and used == min_size:  # nested: each finer region lies in one coarser region
            assert same_partition(np.stack([prev, cut]).reshape(2, -1).T @ [10**6, 1], cut)
        prev = cut if used == min_size else None


def test_size_aware_cut_of_a_ucm_equals_the_hierarchy_cut(rng):
    """ucm2_size_aware_cut rebuilds the hierarchy from the map: the plain cut is the RAG
    hierarchy's; with a minimum size, the same number of regions, none below it (a speck
    may join either side of a split: the map does not say which frontier it merged by)."""
    from hiseg.metrics.kcut import ucm2_size_aware_cut

    lab = voronoi_labels(rng, (24, 30), 20)
    rag = region_adjacency_graph(lab)
    u, h = rag_hierarchy(rag, rng.random(rag.graph.num_edges) + 0.01)
    ucm2 = ucm2_from_rag(rag, u)
    for k in (2, 5, 9):
        assert same_partition(ucm2_size_aware_cut(ucm2, k, 0.0), cut_num_regions(rag, h, k))
        for ms in (30.0, 0.1):
            px = ms * lab.size if ms < 1 else ms
            a, (b, used) = ucm2_size_aware_cut(ucm2, k, ms), cut_num_regions(rag, h, k, min_size=px,
                                                                            return_min_size=True)
            assert len(np.unique(a)) == len(np.unique(b)) == k
            assert np.bincount(a.ravel())[1:].min() >= used


def test_size_aware_cut_bad_input(rng):
    from hiseg.core.cuts import AUTO_MIN_REGION_FRACTION, resolve_min_size
    from hiseg.metrics.kcut import ucm2_size_aware_cut

    lab = voronoi_labels(rng, (10, 10), 5)
    rag = region_adjacency_graph(lab)
    _, h = rag_hierarchy(rag, rng.random(rag.graph.num_edges))
    with pytest.raises(ValueError, match="min_size"):
        cut_num_regions(rag, h, 2, min_size=-1)
    with pytest.raises(ValueError, match="min_size"):
        cut_num_regions(rag, h, 2, min_size=float("nan"))
    with pytest.raises(ValueError, match="ucm2"):
        ucm2_size_aware_cut(np.zeros((4, 5)), 2)
    for bad, error in ((0, ValueError), (len(np.unique(lab)) + 1, ValueError), (2.5, TypeError), (True, TypeError)):
        with pytest.raises(error, match="n_regions must be"):
            cut_num_regions(rag, h, bad)
    # the images' "auto" is the one resolve_min_size with the images' fraction
    assert resolve_min_size("auto", 4, 100, AUTO_MIN_REGION_FRACTION) == pytest.approx(AUTO_MIN_REGION_FRACTION * 25)


def test_kcut_functions_take_n_regions(rng):
    from hiseg.metrics.kcut import ucm2_cut_k, ucm2_size_aware_cut

    lab = voronoi_labels(rng, (12, 14), 8)
    rag = region_adjacency_graph(lab)
    u, _ = rag_hierarchy(rag, rng.random(rag.graph.num_edges) + 0.01)
    ucm2 = ucm2_from_rag(rag, u)
    for f in (ucm2_cut_k, ucm2_size_aware_cut):
        new = f(ucm2, n_regions=3)
        with pytest.raises(TypeError, match="'k'"):
            f(ucm2, k=3)
        assert len(np.unique(new)) == 3


# ----------------------------------------------------------------------------- higra's versions
def _random_rag(seed, h, w, n_labels, ties):
    """A RAG of the 4-connected components of random labels (1..R regions, any shape down to
    1 x 1) and its single-linkage ultrametric of random weights (with ties, or without)."""
    rng = np.random.default_rng(seed)
    rag = region_adjacency_graph(cc_label(rng.integers(0, n_labels, (h, w)), connectivity=1))
    wt = rng.integers(0, 3, rag.graph.num_edges).astype(float) if ties else rng.random(rag.graph.num_edges)
    u, _ = rag_hierarchy(rag, wt)
    return rag, wt, u.numpy()


@given(seed=st.integers(0, 10_000), h=st.integers(1, 12), w=st.integers(1, 12), n_labels=st.integers(1, 5),
       ties=st.booleans())
@settings(max_examples=60, deadline=None)
def test_ucm2_and_threshold_cuts_equal_higras(seed, h, w, n_labels, ties):
    """hiseg's ucm2 and threshold cuts are bit for bit higra's (graph_4_adjacency_2_khalimsky,
    the region adjacency graph's back projection, bpt_canonical and
    labelisation_horizontal_cut_from_threshold), which the benchmark times against them."""
    from hiseg.segmentation import saliency

    rag, wt, u = _random_rag(seed, h, w, n_labels, ties)
    ours = ucm2_from_rag(rag, u)
    theirs = saliency._ucm2_from_rag_higra(rag, u)
    assert ours.dtype == theirs.dtype == np.float64 and np.array_equal(ours, theirs)
    for shape in ((h, w), (3 * h - 1, 2 * w + 1)):  # as drawn, and upsampled as for a photograph
        big = saliency.upsample_labels(rag.labels, shape)
        ours = saliency.ucm2_from_labels(big, rag.graph, u)
        theirs = saliency._ucm2_from_labels_higra(big, rag.graph, u)
        assert ours.dtype == theirs.dtype and np.array_equal(ours, theirs)
    for values in (u, wt):  # the ultrametric, and weights that are not one
        for t in np.unique(np.r_[values, -1.0, 10.0]):
            ours, theirs = cut_at_threshold(rag, values, t), saliency._cut_at_threshold_higra(rag, values, t)
            assert ours.dtype == theirs.dtype and np.array_equal(ours, theirs)
