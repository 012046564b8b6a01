"""Tests of hiseg.data: synthetic set, readers, transforms, superpixels, targets, collation."""
from __future__ import annotations

import pickle
from pathlib import Path

import numpy as np
import pytest
import torch

from hiseg.data import (BSDS500, CenterCrop, Compose, FolderSegmentation, RandomCrop, RandomFlip, RandomRescale,
                        SegmentationGraphDataset, SyntheticSegmentation, boundary_maps, collate_graph_batch,
                        crop_sample, edge_targets, flip_sample, make_graph_sample, mean_boundary, resize_sample,
                        superpixel_labels)
from hiseg.io import DataError, read_image
from hiseg.segmentation.superpixels import Superpixels, boundary_recall, make_connected
from hiseg.core.graph import region_adjacency_graph

def _bsds_root() -> Path:
    """BSDS500 where the README tells users to put it (datasets/BSDS500), else the shared copy."""
    repo = Path(__file__).resolve().parents[2]
    for cand in (repo / "datasets" / "BSDS500", repo.parent / "shared" / "data" / "BSDS500"):
        if any((cand / sub / "images" / "val").is_dir() for sub in ("", "data")):
            return cand
    return repo / "datasets" / "BSDS500"


SHARED_BSDS = _bsds_root()


def _cv2():
    import cv2

    return cv2


# ----------------------------------------------------------------------------- synthetic
def test_synthetic_is_deterministic_and_order_independent():
    a = SyntheticSegmentation(6, 48, 3, seed=7)
    b = SyntheticSegmentation(6, 48, 3, seed=7)
    for i in (5, 0, 3):  # any access order
        sa, sb = a[i], b[i]
        assert np.array_equal(sa["image"], sb["image"])
        assert np.array_equal(sa["segmentations"], sb["segmentations"])
        assert sa["name"] == sb["name"]
    s = a[2]
    assert s["image"].dtype == np.float32 and s["image"].shape == (48, 48, 3)
    assert 0.0 <= s["image"].min() and s["image"].max() <= 1.0
    assert s["segmentations"].shape == (3, 48, 48)
    assert not np.array_equal(a[1]["image"], a[2]["image"])
    assert not np.array_equal(SyntheticSegmentation(3, 48, 3, seed=8)[2]["image"], a[2]["image"])
    assert not np.array_equal(SyntheticSegmentation(3, 48, 3, seed=7, split="val")[2]["image"], a[2]["image"])
    assert a[-1]["name"] == a[5]["name"]
    with pytest.raises(IndexError):
        a[6]


def test_synthetic_annotators_are_cuts_of_the_hierarchy():
    ds = SyntheticSegmentation(4, 64, 5, seed=3, jitter=0.0)
    for i in range(len(ds)):
        s = ds[i]
        fine, levels, segs = s["fine_labels"], s["levels"], s["segmentations"]
        assert np.array_equal(levels[0], np.arange(levels.shape[1]))
        # levels nested: each cluster of level l lies in one cluster of level l + 1
        for lv in range(levels.shape[0] - 1):
            pairs = np.unique(np.stack([levels[lv], levels[lv + 1]]), axis=1)
            assert np.unique(pairs[0]).size == pairs.shape[1]
        for a, lv in enumerate(s["annotator_levels"]):
            assert np.array_equal(segs[a], levels[lv][fine])
        # finer annotators refine coarser ones (pixelwise)
        order = np.argsort(s["annotator_levels"], kind="stable")
        for x, y in zip(order[:-1], order[1:]):
            pairs = np.unique(np.stack([segs[x].ravel(), segs[y].ravel()]), axis=1)
            assert np.unique(pairs[0]).size == pairs.shape[1], "finer annotator must refine the coarser"


def test_synthetic_jitter_only_moves_boundaries_and_coarse_contrast_is_higher():
    ds = SyntheticSegmentation(4, 64, 4, seed=1, jitter=1.0)
    near = []
    for i in range(len(ds)):
        s = ds[i]
        exact = s["levels"][s["annotator_levels"]][:, s["fine_labels"]]
        diff = exact != s["segmentations"]
        assert diff.mean() < 0.1
        # disagreements lie next to a boundary of the exact partition (within a few pixels)
        from scipy.ndimage import binary_dilation

        bnd = boundary_maps(exact)
        band = np.stack([binary_dilation(b, iterations=6) for b in bnd])
        near.append(np.all(band[diff]))
    assert all(near)
    # contrast: colour steps across coarsest-level boundaries exceed those inside coarse regions
    flat = SyntheticSegmentation(6, 64, 1, seed=2, noise=0.0, blur=0.0, texture=0.0, jitter=0.0)
    coarse_steps, fine_steps = [], []
    for i in range(len(flat)):
        s = flat[i]
        img, fine, top = s["image"], s["fine_labels"], s["levels"][-1][s["fine_labels"]]
        dh = np.abs(img[:, 1:] - img[:, :-1]).sum(-1)
        cross_fine = fine[:, 1:] != fine[:, :-1]
        cross_top = top[:, 1:] != top[:, :-1]
        coarse_steps.append(dh[cross_top])
        fine_steps.append(dh[cross_fine & ~cross_top])
    assert np.concatenate(coarse_steps).mean() > 1.5 * np.concatenate(fine_steps).mean()


def test_synthetic_cache_roundtrip(tmp_path):
    ds = SyntheticSegmentation(2, 32, 2, seed=0, cache_dir=str(tmp_path))
    first = ds[1]
    files = list(tmp_path.rglob("*.npz"))
    assert len(files) == 1
    again = SyntheticSegmentation(2, 32, 2, seed=0, cache_dir=str(tmp_path))[1]
    assert np.array_equal(first["image"], again["image"]) and first["name"] == again["name"]


# ----------------------------------------------------------------------------- transforms
def _coded_sample(h=40, w=56, seed=0):
    """An image whose colour is a function of its label (in blocks), to check alignment."""
    rng = np.random.default_rng(seed)
    blocks = rng.integers(0, 20, size=(h // 8 + 1, w // 8 + 1))
    lab = np.kron(blocks, np.ones((8, 8), np.int64))[:h, :w]
    lut = rng.uniform(0, 1, size=(20, 3)).astype(np.float32)
    seg = np.stack([lab, lab // 2])
    return {"image": lut[lab], "segmentations": seg, "name": "x"}, lut


def _check_aligned(out, lut, radius=1):
    lab = out["segmentations"][0]
    assert np.array_equal(out["segmentations"][1], lab // 2)
    # interior pixels (a (2r+1)^2 neighbourhood of one label) carry exactly their label's
    # colour; r = 1 for one resampling, 2 after two (each resampling may shift by 1/2 pixel)
    p = np.pad(lab, radius, mode="edge")
    inner = np.ones(lab.shape, bool)
    for dy in range(-radius, radius + 1):
        for dx in range(-radius, radius + 1):
            inner &= p[radius + dy:radius + dy + lab.shape[0], radius + dx:radius + dx + lab.shape[1]] == lab
    assert inner.mean() > 0.2
    np.testing.assert_allclose(out["image"][inner], lut[lab[inner]], atol=1e-4)


@pytest.mark.parametrize("seed", [0, 1, 2, 3])
def test_transforms_keep_image_and_labels_aligned(seed):
    sample, lut = _coded_sample(seed=seed)
    t = Compose([RandomRescale((0.6, 1.8)), RandomFlip(0.5, 0.5), RandomCrop((32, 24))])
    out = t(sample, np.random.default_rng(seed))
    assert out["image"].shape == (32, 24, 3) and out["segmentations"].shape == (2, 32, 24)
    assert out["image"].flags.c_contiguous and out["segmentations"].flags.c_contiguous
    _check_aligned(out, lut, radius=2)  # a rescale may be followed by the crop's upscale
    for one in (RandomRescale((0.6, 1.8)), RandomFlip(0.5, 0.5), RandomCrop((32, 24))):
        _check_aligned(one(sample, np.random.default_rng(seed)), lut, radius=1)
    # same generator state, same result; the input is left untouched
    again = t(sample, np.random.default_rng(seed))
    assert np.array_equal(out["image"], again["image"])
    assert np.array_equal(out["segmentations"], again["segmentations"])
    assert sample["image"].shape == (40, 56, 3)


def test_lazy_chain_equals_step_by_step_and_small_images_are_upscaled():
    sample, lut = _coded_sample()
    chained = Compose([RandomFlip(1.0, 1.0), RandomRescale((0.5, 0.5)), CenterCrop(16)])(sample, 0)
    step = crop_sample(resize_sample(flip_sample(sample, True, True), (20, 28)), 2, 6, 16, 16)
    assert np.array_equal(chained["segmentations"], step["segmentations"])
    np.testing.assert_allclose(chained["image"], step["image"], atol=1e-6)
    big = RandomCrop(64)(sample, np.random.default_rng(0))  # 40x56 < 64: upscaled first
    assert big["image"].shape == (64, 64, 3)
    _check_aligned(big, lut)
    # torch generators are accepted and deterministic
    g1, g2 = torch.Generator().manual_seed(5), torch.Generator().manual_seed(5)
    t = Compose([RandomFlip(0.5, 0.5), RandomCrop(20)])
    assert np.array_equal(t(sample, g1)["segmentations"], t(sample, g2)["segmentations"])


# ----------------------------------------------------------------------------- superpixels
def _n_components(lab):
    from skimage.measure import label

    return int(label(lab + 1, background=0, connectivity=1).max())


@pytest.mark.parametrize("method", ["watershed", "slic"])
def test_superpixels_connected_and_covering(method):
    img = SyntheticSegmentation(1, 96, 1, seed=4)[0]["image"]
    noise = np.random.default_rng(0).uniform(0, 1, (50, 70, 3)).astype(np.float32)
    for im, rs in ((img, 8.0), (noise, 6.0), (img[:5, :7], 8.0)):
        sp = Superpixels(method, rs)(im)
        assert sp.dtype == np.int64 and sp.shape == im.shape[:2]
        r = int(sp.max()) + 1
        assert sp.min() == 0 and np.unique(sp).size == r  # covers the image with labels 0..R-1
        assert _n_components(sp) == r  # every label is one 4-connected region
    sp = Superpixels(method, 8.0)(img)
    assert 80 <= sp.max() + 1 <= 250  # ~96^2/8^2 = 144
    assert pickle.loads(pickle.dumps(Superpixels(method, 8.0)))(img).shape == (96, 96)


def test_superpixels_follow_boundaries_and_make_connected():
    s = SyntheticSegmentation(2, 96, 3, seed=5)[1]
    sp = Superpixels("watershed", 8.0)(s["image"])
    assert boundary_recall(sp, s["segmentations"], 2.0) > 0.8
    lab = np.array([[0, 1, 0], [1, 1, 1], [0, 1, 2]])
    out = make_connected(lab)
    assert out.max() + 1 == 5 and _n_components(out) == 5
    with pytest.raises(ValueError, match="unknown superpixel method"):
        Superpixels("quickshift")


# ----------------------------------------------------------------------------- targets
def test_targets_match_brute_force():
    rng = np.random.default_rng(0)
    sp = make_connected(np.kron(rng.integers(0, 6, (5, 6)), np.ones((3, 2), np.int64)))
    segs = np.stack([rng.integers(0, k, sp.shape) * 10 + 3 for k in (2, 3, 5)])
    rag = region_adjacency_graph(sp)
    lab = superpixel_labels(sp, segs)
    r = sp.max() + 1
    for a in range(segs.shape[0]):
        vals = np.unique(segs[a])
        for reg in range(r):
            counts = [(segs[a][sp == reg] == v).sum() for v in vals]
            best = int(np.argmax(counts))  # first maximum = smallest id on ties
            assert lab[a, reg] == best
    et = edge_targets(rag, lab)
    for e, (s_, t_) in enumerate(zip(rag.graph.sources, rag.graph.targets)):
        assert et[e] == pytest.approx(np.mean([lab[a, s_] != lab[a, t_] for a in range(3)]))
    bm = boundary_maps(segs)
    for a in range(3):
        for y in range(sp.shape[0]):
            for x in range(sp.shape[1]):
                nb = [(y + dy, x + dx) for dy, dx in ((0, 1), (1, 0), (0, -1), (-1, 0))
                      if 0 <= y + dy < sp.shape[0] and 0 <= x + dx < sp.shape[1]]
                assert bm[a, y, x] == any(segs[a][q] != segs[a, y, x] for q in nb)
    np.testing.assert_allclose(mean_boundary(segs), bm.mean(0))
    # the sparse path (large label ranges) agrees with the dense one
    import hiseg.data.targets as T

    old, T._DENSE_LIMIT = T._DENSE_LIMIT, 0
    try:
        assert np.array_equal(superpixel_labels(sp, segs * 1000003), lab)
    finally:
        T._DENSE_LIMIT = old


# ----------------------------------------------------------------------------- collate
def _brute_frontiers(labels):
    h, w = labels.shape
    out = set()
    for y in range(h):
        for x in range(w):
            for dy, dx in ((0, 1), (1, 0)):
                yy, xx = y + dy, x + dx
                if yy < h and xx < w and labels[y, x] != labels[yy, xx]:
                    out.add((y * w + x, yy * w + xx))
    return out


@pytest.mark.parametrize("sizes", [[(24, 30)] * 3, [(24, 30), (18, 33), (20, 12)]])
def test_collate_offsets_against_brute_force(sizes):
    raw = SyntheticSegmentation(3, 40, 3, seed=9)
    items = []
    for i, (h, w) in enumerate(sizes):
        s = crop_sample(raw[i], 0, 0, h, w)
        if i == 1:
            s["segmentations"] = s["segmentations"][:2]  # fewer annotators
        items.append(make_graph_sample(s, Superpixels("watershed", 5.0)))
    batch = collate_graph_batch(items)
    hp, wp = max(h for h, _ in sizes), max(w for _, w in sizes)
    assert batch.images.shape == (3, 3, hp, wp) and batch.boundary.shape == (3, hp, wp)
    g = batch.graph
    fa, fb, fe = batch.frontier_pixels_a.numpy(), batch.frontier_pixels_b.numpy(), batch.frontier_edge.numpy()
    assert np.all(np.diff(fe) >= 0) and fe.max() == g.num_edges - 1
    for b, it in enumerate(items):
        h, w = sizes[b]
        lab = it["rag"].labels
        img_a, img_b = fa // (hp * wp), fb // (hp * wp)
        sel = img_a == b
        assert np.array_equal(sel, img_b == b) and np.all((fe[sel] >= g.edge_ptr[b]) & (fe[sel] < g.edge_ptr[b + 1]))
        ra, ca = divmod(fa[sel] % (hp * wp), wp)
        rb, cb = divmod(fb[sel] % (hp * wp), wp)
        assert np.all(ra < h) and np.all(ca < w) and np.all(rb < h) and np.all(cb < w)
        got = set(zip((ra * w + ca).tolist(), (rb * w + cb).tolist()))
        assert got == _brute_frontiers(lab) and len(got) == sel.sum()
        # both pixels lie on the two sides of the right RAG edge
        e = fe[sel]
        es, et_ = g.sources[e] - g.vertex_ptr[b], g.targets[e] - g.vertex_ptr[b]
        la, lb = lab[ra, ca], lab[rb, cb]
        assert np.all(((la == es) & (lb == et_)) | ((la == et_) & (lb == es)))
        # images and boundaries at their place, zero padding
        assert torch.equal(batch.images[b, :, :h, :w], it["image"])
        assert float(batch.images[b, :, h:, :].abs().sum() + batch.images[b, :, :, w:].abs().sum()) == 0.0
        assert torch.equal(batch.edge_target[g.edge_ptr[b]:g.edge_ptr[b + 1]], it["edge_target"])
    # sp_labels: shifted per image (unique across images), -1 padding for missing annotators
    lab = batch.sp_labels.numpy()
    assert lab.shape == (3, g.num_vertices)
    v = g.vertex_ptr
    assert np.all(lab[2, v[1]:v[2]] == -1) and np.all(lab[:2, v[1]:v[2]] >= 0)
    for x in range(3):
        for y in range(x + 1, 3):
            ax, ay = lab[:, v[x]:v[x + 1]], lab[:, v[y]:v[y + 1]]
            assert not set(ax[ax >= 0].tolist()) & set(ay[ay >= 0].tolist())
    assert batch.names == [it["name"] for it in items] and batch.num_annotators == [3, 2, 3]


def test_graph_batch_moves_with_lightning_and_dataset_wrapper():
    from pytorch_lightning.utilities import move_data_to_device

    raw = SyntheticSegmentation(4, 32, 2, seed=0)
    ds = SegmentationGraphDataset(raw, Compose([RandomFlip(0.5, 0.5)]), Superpixels("watershed", 6.0), seed=3)
    a, b = ds[1], ds[1]
    assert torch.equal(a["image"], b["image"]) and a["image"].shape == (3, 32, 32)
    assert a["sp_labels"].shape == (2, a["rag"].num_regions)
    assert a["edge_target"].dtype == torch.float32 and a["boundary"].shape == (32, 32)
    loader = torch.utils.data.DataLoader(ds, batch_size=2, collate_fn=collate_graph_batch)
    batch = next(iter(loader))
    moved = move_data_to_device(batch, torch.device("cpu"))
    assert type(moved).__name__ == "GraphBatch" and moved.images.shape == (2, 3, 32, 32)
    assert moved.rags is batch.rags and len(moved) == 2
    assert moved.host_images is None and moved.images_on_host is moved.images


def test_graph_batch_keeps_its_host_images_when_moved():
    """GraphBatch.to another device keeps the collated host tensor (no copy) for the host-side
    merging-head features."""
    raw = SyntheticSegmentation(2, 32, 2, seed=0)
    ds = SegmentationGraphDataset(raw, None, Superpixels("watershed", 6.0))
    batch = collate_graph_batch([ds[0], ds[1]])
    there = batch.to("meta")
    assert there.images.device.type == "meta" and there.host_images is batch.images
    assert there.images_on_host is batch.images and there.to("meta").host_images is batch.images
    assert batch.to("cpu").host_images is None


# ----------------------------------------------------------------------------- superpixel paths
def _connected_and_numbered(sp: np.ndarray) -> bool:
    """Every label 0..R-1 present, each one 4-connected region (scipy, label by label)."""
    from scipy import ndimage

    r = int(sp.max()) + 1
    if set(np.unique(sp).tolist()) != set(range(r)):
        return False
    return all(ndimage.label(sp == k)[1] == 1 for k in range(r))


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_cached_superpixels_give_valid_graphs_and_targets(seed):
    """The cached path (whole-image superpixels augmented with the image): valid
    superpixels, the RAG of that map, and the targets computed directly on it."""
    from hiseg.data import compute_targets

    raw = SyntheticSegmentation(3, 64, 3, seed=4)
    tr = Compose([RandomRescale((0.6, 1.3)), RandomFlip(0.5, 0.5), RandomCrop(44)])
    ds = SegmentationGraphDataset(raw, tr, Superpixels("watershed", 6.0), superpixels="cached")
    for i in range(3):
        item = ds[(i, (seed, 0))]
        sp = item["superpixels"]
        assert sp.shape == (44, 44) and _connected_and_numbered(sp)
        ref = region_adjacency_graph(sp)
        for k in ("sources", "targets"):
            np.testing.assert_array_equal(getattr(item["rag"].graph, k), getattr(ref.graph, k))
        np.testing.assert_array_equal(item["rag"].frontier_ptr, ref.frontier_ptr)
        t = compute_targets(ref, item["segmentations"])
        np.testing.assert_array_equal(item["sp_labels"].numpy(), t["sp_labels"])
        np.testing.assert_array_equal(item["edge_target"].numpy(), t["edge_target"])
        np.testing.assert_array_equal(item["boundary"].numpy(), t["boundary"])
    assert ds.cache.computed == 3 and len(ds.cache) == 3
    ds[(0, (seed, 1))]  # another epoch: no new superpixels
    assert ds.cache.computed == 3


def test_cached_superpixels_move_with_the_image_and_annotations():
    """Flip then crop by hand: the item's image, annotations and superpixels are the
    flipped, cropped image, annotations and whole-image superpixels (relabelled connected)."""
    raw = SyntheticSegmentation(2, 64, 2, seed=5)
    fn = Superpixels("watershed", 6.0)

    def flip_crop(sample, rng):
        return crop_sample(flip_sample(sample, horizontal=True), 5, 7, 40, 44)

    ds = SegmentationGraphDataset(raw, flip_crop, fn, superpixels="cached")
    for i in range(2):
        s, item = raw[i], ds[i]
        np.testing.assert_array_equal(item["image"].numpy().transpose(1, 2, 0), s["image"][5:45, ::-1][:, 7:51])
        np.testing.assert_array_equal(item["segmentations"], s["segmentations"][:, 5:45, ::-1][:, :, 7:51])
        np.testing.assert_array_equal(item["superpixels"], make_connected(fn(s["image"])[5:45, ::-1][:, 7:51]))
    # without a transform (validation), cached superpixels are exactly the per-sample ones
    plain = SegmentationGraphDataset(raw, None, fn, superpixels="cached")
    direct = SegmentationGraphDataset(raw, None, fn)
    for i in range(2):
        np.testing.assert_array_equal(plain[i]["superpixels"], direct[i]["superpixels"])
        torch.testing.assert_close(plain[i]["edge_target"], direct[i]["edge_target"])


def test_superpixel_cache_on_disk_is_keyed_by_settings_and_image(tmp_path):
    from hiseg.data.cache import SuperpixelCache

    raw = SyntheticSegmentation(3, 40, 2, seed=6)
    fn = Superpixels("watershed", 6.0)
    first = SegmentationGraphDataset(raw, None, fn, superpixels="cached", cache_dir=tmp_path)
    items = [first[i] for i in range(3)]
    (folder,) = tmp_path.iterdir()
    assert first.cache.computed == 3 and len(list(folder.glob("*.npy"))) == 3
    # another process / run with the same settings: read back, nothing recomputed
    again = pickle.loads(pickle.dumps(SegmentationGraphDataset(raw, None, Superpixels("watershed", 6.0),
                                                               superpixels="cached", cache_dir=tmp_path)))
    for i in range(3):
        np.testing.assert_array_equal(again[i]["superpixels"], items[i]["superpixels"])
    assert again.cache.computed == 0
    # other settings: another folder, recomputed
    other = SegmentationGraphDataset(raw, None, Superpixels("watershed", 8.0), superpixels="cached", cache_dir=tmp_path)
    other[0]
    assert other.cache.computed == 1 and len(list(tmp_path.iterdir())) == 2
    assert other[0]["rag"].num_regions < items[0]["rag"].num_regions
    # a damaged file is recomputed (with a warning) and rewritten
    victim = sorted(folder.glob("*.npy"))[0]
    victim.write_bytes(b"not an array")
    fresh = SegmentationGraphDataset(raw, None, fn, superpixels="cached", cache_dir=tmp_path)
    with pytest.warns(UserWarning, match="unreadable"):
        got = [fresh[i]["superpixels"] for i in range(3)]
    assert fresh.cache.computed == 1
    for g, it in zip(got, items):
        np.testing.assert_array_equal(g, it["superpixels"])
    np.load(victim)  # rewritten
    # an image that changed under the same name gets its own superpixels
    img = raw[0]["image"]
    brighter = np.clip(img[::-1] * 1.1, 0, 1)
    np.testing.assert_array_equal(SuperpixelCache(fn, tmp_path)(0, brighter, raw[0]["name"]), fn(brighter))
    assert len(list(folder.glob("*.npy"))) == 4
    # settings that cannot key files
    with pytest.raises(TypeError, match="cache_key"):
        SuperpixelCache(lambda im: fn(im), tmp_path)


def test_superpixel_modes_errors():
    raw = SyntheticSegmentation(2, 32, 2, seed=0)
    with pytest.raises(ValueError, match="superpixels must be one of"):
        SegmentationGraphDataset(raw, superpixels="sometimes")
    with pytest.raises(ValueError, match="cache_dir is for superpixels='cached'"):
        SegmentationGraphDataset(raw, cache_dir="x")
    bad = SegmentationGraphDataset(raw, None, lambda im: np.zeros((3, 3), np.int64), superpixels="cached")
    with pytest.raises(ValueError, match="returned shape"):
        bad[0]


def test_items_without_superpixels_and_their_batches():
    from hiseg.data.graphs import with_superpixels

    raw = SyntheticSegmentation(3, 32, 2, seed=2)
    none = SegmentationGraphDataset(raw, None, superpixels="none")
    full = SegmentationGraphDataset(raw, None, Superpixels("watershed", 6.0))
    item = none[0]
    assert set(item) == {"image", "boundary", "segmentations", "name"}
    np.testing.assert_array_equal(item["boundary"].numpy(), mean_boundary(raw[0]["segmentations"]))
    batch = collate_graph_batch([none[i] for i in range(3)])
    assert not batch.has_graph and batch.rags == [] and batch.num_annotators == [2, 2, 2]
    assert batch.to("cpu").images.shape == (3, 3, 32, 32)
    # given superpixels, the batch equals the one made with them in the loader
    ref = collate_graph_batch([full[i] for i in range(3)])
    rebuilt = with_superpixels(batch, ref.superpixels)
    for k in ("frontier_pixels_a", "frontier_pixels_b", "frontier_edge", "edge_target", "sp_labels",
              "vertex_offsets", "frontier_count"):
        assert torch.equal(getattr(rebuilt, k), getattr(ref, k)), k
    assert rebuilt.num_labels == ref.num_labels == int(ref.sp_labels.max()) + 1
    np.testing.assert_array_equal(ref.vertex_offsets.numpy(), ref.graph.vertex_ptr)
    np.testing.assert_array_equal(ref.frontier_count.numpy(), np.bincount(ref.frontier_edge.numpy()))
    with pytest.raises(ValueError, match="some items have superpixels and others not"):
        collate_graph_batch([none[0], full[1]])


def test_datamodule_superpixel_settings():
    """The model's pipeline sets the loaders' superpixels (use_pipeline); a data module has no
    superpixel setting of its own."""
    import inspect

    from hiseg.data import BSDS500DataModule, FolderDataModule, SyntheticDataModule
    from hiseg.data.graphs import PipelineSuperpixels
    from hiseg.segmentation import Pipeline

    for cls in (SyntheticDataModule, BSDS500DataModule, FolderDataModule):
        assert not [p for p in inspect.signature(cls).parameters if p.startswith("superpixel_") and p != "superpixel_cache"]
    kw = dict(n_train=4, n_val=2, size=32, batch_size=2, val_batch_size=2)
    with pytest.raises(TypeError, match="superpixel_method"):
        SyntheticDataModule(**kw, superpixel_method="none")
    dm = SyntheticDataModule(**kw)  # the default training pipeline's, cached by default
    assert isinstance(dm.superpixel_fn, PipelineSuperpixels) and dm.superpixel_fn.pipeline.region_size == 8.0
    dm.setup("fit")
    assert dm.train_set.superpixels == "cached" and next(iter(dm.train_dataloader())).has_graph
    colour = Pipeline(superpixels="color_watershed", region_size=6.0)
    dm.use_pipeline(colour)  # the data sets made already follow
    batch = next(iter(dm.val_dataloader()))
    image = batch.images[0].permute(1, 2, 0).numpy()
    np.testing.assert_array_equal(batch.superpixels[0], colour.make_superpixels(image[..., 0], image))
    dm.use_pipeline(Pipeline(superpixels="boundary_watershed"))  # built from the prediction: none
    assert not dm.computes_superpixels
    assert not next(iter(dm.train_dataloader())).has_graph and not next(iter(dm.val_dataloader())).has_graph
    assert SyntheticDataModule(**kw, superpixel_cache=False).superpixel_mode == "per_sample"


def test_pipeline_superpixels_key_a_disk_cache_by_what_they_depend_on(tmp_path):
    from hiseg.data.cache import settings_key
    from hiseg.data.graphs import PipelineSuperpixels, loader_superpixels
    from hiseg.segmentation import Pipeline

    a = PipelineSuperpixels(Pipeline(superpixels="color_watershed", region_size=6.0))
    b = PipelineSuperpixels(Pipeline(superpixels="color_watershed", region_size=6.0, linkage="single"))
    c = PipelineSuperpixels(Pipeline(superpixels="color_watershed", region_size=7.0))
    assert settings_key(a) == settings_key(b) != settings_key(c)
    assert pickle.loads(pickle.dumps(a)).cache_key == a.cache_key
    assert loader_superpixels(Pipeline(superpixels="boundary_watershed")) is None
    with pytest.raises(ValueError, match="from the prediction"):
        PipelineSuperpixels(Pipeline(superpixels="all_minima"))


# ----------------------------------------------------------------------------- BSDS500
@pytest.mark.skipif(not SHARED_BSDS.is_dir(), reason="BSDS500 not in datasets/BSDS500 nor ../shared/data")
def test_bsds_reader_on_shared_data():
    ds = BSDS500(SHARED_BSDS, "val")  # the ROOT/data/images layout is detected
    assert len(ds) == 100
    s = ds[0]
    h, w = s["image"].shape[:2]
    assert {h, w} == {321, 481} and s["image"].dtype == np.float32
    assert s["segmentations"].shape[0] >= 4 and s["segmentations"].shape[1:] == (h, w)
    assert s["segmentations"].min() >= 1 and s["name"] == ds.names[0]
    assert len(BSDS500(SHARED_BSDS / "data", "train+val", names=["100075", ds.names[0]])) == 2
    with pytest.raises(FileNotFoundError, match="split 'test' not found"):
        BSDS500(SHARED_BSDS, "test")


def _write_mat(path, seg_list):
    import scipy.io

    gt = np.empty((1, len(seg_list)), dtype=object)
    for k, seg in enumerate(seg_list):
        gt[0, k] = {"Segmentation": seg.astype(np.uint16), "Boundaries": np.zeros(seg.shape, np.uint8)}
    scipy.io.savemat(str(path), {"groundTruth": gt})


def test_bsds_errors(tmp_path):
    cv2 = _cv2()
    with pytest.raises(FileNotFoundError, match="BSDS500 data root not found.*expected BSDS500 layout"):
        BSDS500(tmp_path / "nowhere")
    (tmp_path / "empty").mkdir()
    with pytest.raises(FileNotFoundError, match="no BSDS500 images folder"):
        BSDS500(tmp_path / "empty")
    root = tmp_path / "bsds"
    (root / "images" / "train").mkdir(parents=True)
    (root / "groundTruth" / "train").mkdir(parents=True)
    img = (np.random.default_rng(0).uniform(0, 255, (12, 16, 3))).astype(np.uint8)
    cv2.imwrite(str(root / "images" / "train" / "good.jpg"), img)
    seg = np.ones((12, 16), np.int64)
    seg[:, 8:] = 2
    _write_mat(root / "groundTruth" / "train" / "good.mat", [seg, seg * 0 + 1])
    ds = BSDS500(root, "train")
    s = ds[0]
    assert s["segmentations"].shape == (2, 12, 16) and s["image"].shape == (12, 16, 3)
    with pytest.raises(FileNotFoundError, match="split 'val' not found.*train"):
        BSDS500(root, "val")
    cv2.imwrite(str(root / "images" / "train" / "orphan.jpg"), img)
    with pytest.raises(FileNotFoundError, match="orphan.jpg"):
        BSDS500(root, "train")
    (root / "images" / "train" / "orphan.jpg").write_bytes(b"\xff\xd8\xff\xe0 this is not a jpeg")
    _write_mat(root / "groundTruth" / "train" / "orphan.mat", [seg])
    ds = BSDS500(root, "train")
    with pytest.raises(DataError, match="orphan.jpg"):
        ds[ds.names.index("orphan")]


# ----------------------------------------------------------------------------- folder
def test_folder_dataset_image_kinds_and_annotators(tmp_path):
    cv2 = _cv2()
    (tmp_path / "images").mkdir()
    (tmp_path / "labels").mkdir()
    rng = np.random.default_rng(0)
    gray = rng.integers(0, 256, (10, 14), dtype=np.uint8)
    rgba = rng.integers(0, 256, (10, 14, 4), dtype=np.uint8)
    deep = rng.integers(0, 65536, (10, 14, 3), dtype=np.uint16)
    cv2.imwrite(str(tmp_path / "images" / "gray.png"), gray)
    cv2.imwrite(str(tmp_path / "images" / "rgba.png"), rgba)
    cv2.imwrite(str(tmp_path / "images" / "deep.png"), deep)
    lab = (np.arange(140).reshape(10, 14) // 30).astype(np.uint8)
    cv2.imwrite(str(tmp_path / "labels" / "gray.png"), lab)
    cv2.imwrite(str(tmp_path / "labels" / "rgba_0.png"), lab)
    cv2.imwrite(str(tmp_path / "labels" / "rgba_1.png"), (lab // 2).astype(np.uint16))
    np.save(tmp_path / "labels" / "deep.npy", np.stack([lab, lab, lab]).astype(np.int32))
    ds = FolderSegmentation(tmp_path)
    assert ds.names == ["deep", "gray", "rgba"]
    g = ds[1]
    assert g["image"].shape == (10, 14, 3) and g["image"].dtype == np.float32
    np.testing.assert_allclose(g["image"][..., 0], gray / 255.0, atol=1e-6)
    assert np.array_equal(g["image"][..., 0], g["image"][..., 2])
    r = ds[2]
    np.testing.assert_allclose(r["image"], rgba[..., 2::-1] / 255.0, atol=1e-6)  # BGRA on disk -> RGB
    assert r["segmentations"].shape == (2, 10, 14) and np.array_equal(r["segmentations"][1], lab // 2)
    d = ds[0]
    np.testing.assert_allclose(d["image"], deep[..., ::-1] / 65535.0, atol=1e-6)
    assert d["segmentations"].shape == (3, 10, 14)
    # a colour label image: one id per colour
    cv2.imwrite(str(tmp_path / "labels" / "gray.png"), np.stack([lab * 40, lab * 0, 255 - lab * 40], -1))
    cl = ds[1]["segmentations"][0]
    assert np.unique(cl).size == np.unique(lab).size


def test_folder_dataset_errors(tmp_path):
    cv2 = _cv2()
    with pytest.raises(FileNotFoundError, match="dataset folder not found.*expected layout"):
        FolderSegmentation(tmp_path / "missing")
    with pytest.raises(FileNotFoundError, match="no 'images' folder"):
        FolderSegmentation(tmp_path)
    (tmp_path / "images").mkdir()
    (tmp_path / "labels").mkdir()
    img = np.zeros((8, 8, 3), np.uint8)
    cv2.imwrite(str(tmp_path / "images" / "a.png"), img)
    with pytest.raises(FileNotFoundError, match="no label file .* a.png"):
        FolderSegmentation(tmp_path)
    assert FolderSegmentation(tmp_path, allow_unlabelled=True)[0]["segmentations"].shape == (0, 8, 8)
    cv2.imwrite(str(tmp_path / "labels" / "a.png"), np.zeros((8, 9), np.uint8))
    with pytest.raises(DataError, match="a.png.*shape"):
        FolderSegmentation(tmp_path)[0]
    cv2.imwrite(str(tmp_path / "labels" / "a.png"), np.zeros((8, 8), np.uint8))
    (tmp_path / "images" / "a.png").write_bytes(b"\x89PNG\r\n\x1a\n garbage")
    with pytest.raises(DataError, match="cannot read image .*a.png"):
        FolderSegmentation(tmp_path)[0]
    with pytest.raises(FileNotFoundError):
        read_image(tmp_path / "nope.png")


# ----------------------------------------------------------------------------- data modules
def test_synthetic_datamodule_batches():
    from hiseg.data import SyntheticDataModule

    dm = SyntheticDataModule(n_train=4, n_val=2, size=48, batch_size=2, val_batch_size=2)
    assert dm.hparams["size"] == 48
    dm.setup("fit")
    tb = next(iter(dm.train_dataloader()))
    vb = next(iter(dm.val_dataloader()))
    assert tb.images.shape == (2, 3, 48, 48) and vb.images.shape == (2, 3, 48, 48)
    assert tb.edge_target.shape == (tb.graph.num_edges,)
    assert torch.all((tb.edge_target >= 0) & (tb.edge_target <= 1))


def test_folder_datamodule_split(tmp_path):
    from hiseg.data import FolderDataModule

    cv2 = _cv2()
    (tmp_path / "images").mkdir()
    (tmp_path / "labels").mkdir()
    raw = SyntheticSegmentation(5, 40, 1, seed=0)
    for i in range(5):
        s = raw[i]
        cv2.imwrite(str(tmp_path / "images" / f"im{i}.png"), (s["image"][..., ::-1] * 255).astype(np.uint8))
        cv2.imwrite(str(tmp_path / "labels" / f"im{i}.png"), s["segmentations"][0].astype(np.uint16))
    dm = FolderDataModule(str(tmp_path), val_fraction=0.4, crop_size=32, batch_size=2, num_workers=0)
    dm.setup("fit")
    assert len(dm.train_set) == 3 and len(dm.val_set) == 2
    assert next(iter(dm.train_dataloader())).images.shape == (2, 3, 32, 32)
    assert next(iter(dm.val_dataloader())).images.shape == (1, 3, 40, 40)


@pytest.mark.skipif(not SHARED_BSDS.is_dir(), reason="BSDS500 not in datasets/BSDS500 nor ../shared/data")
def test_bsds_datamodule_on_shared_data():
    from hiseg.data import BSDS500DataModule

    dm = BSDS500DataModule(str(SHARED_BSDS), crop_size=96, batch_size=2, num_workers=0, max_val_images=1)
    dm.setup("fit")
    tb = next(iter(dm.train_dataloader()))
    assert tb.images.shape == (2, 3, 96, 96) and tb.sp_labels.shape[0] >= 4
    vb = next(iter(dm.val_dataloader()))
    assert vb.images.shape[0] == 1 and sorted(vb.images.shape[2:]) == [321, 481]


@pytest.mark.parametrize("superpixels", ["per_sample", "cached"])
def test_samples_do_not_depend_on_worker_count(superpixels):
    raw = SyntheticSegmentation(4, 32, 2, seed=11)
    ds = SegmentationGraphDataset(raw, Compose([RandomFlip(0.5, 0.5)]), Superpixels("watershed", 6.0), seed=1,
                                  superpixels=superpixels)
    out = {}
    for nw in (0, 2):
        loader = torch.utils.data.DataLoader(ds, batch_size=2, num_workers=nw, collate_fn=collate_graph_batch)
        out[nw] = list(loader)
    for b0, b2 in zip(out[0], out[2]):
        assert torch.equal(b0.images, b2.images) and torch.equal(b0.edge_target, b2.edge_target)
        assert torch.equal(b0.frontier_pixels_a, b2.frontier_pixels_a) and b0.names == b2.names
