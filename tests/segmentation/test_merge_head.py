"""Learned region merging (hiseg.segmentation.merging): features against brute force, the
head's gradient through average linkage against finite differences, the pipeline with a
head equal to today's, storage round-trip, flip, and bad input; heads with one round of
message passing (``context``): by hand, per graph of a batch, gradient, checkpoint, bad settings."""
from pathlib import Path

import numpy as np
import pytest
import torch

from hiseg.core import losses
from hiseg.core.graph import batch_graphs, region_adjacency_graph
from hiseg.segmentation.segmenter import Segmenter
from hiseg.models import get_model
from hiseg.models.weights import save_weights
from hiseg.segmentation import Pipeline, PipelineError
from hiseg.segmentation.merging import FEATURES, MergeHead, MergeHeadError, network_fingerprint
from hiseg.segmentation.pooling import TorchEdgeFeatures, edge_features, edge_features_torch, rag_frontier_mean
from hiseg.core.average_linkage import average_linkage_ultrametric


def scene(seed=0, h=40, w=56):
    rng = np.random.default_rng(seed)
    img = rng.random((h, w, 3)).astype(np.float32)
    img[:, w // 2:] *= 0.3
    b = rng.random((h, w)).astype(np.float32)
    b[:, w // 2 - 1: w // 2 + 1] += 1.0
    b /= b.max()
    return img, b


def mean_head():
    """A linear head whose output is the frontier mean itself."""
    head = MergeHead(["mean"], hidden=[], output="linear")
    with torch.no_grad():
        head.layers[0].weight.fill_(1.0)
        head.layers[0].bias.fill_(0.0)
    return head


def test_features_against_brute_force():
    import cv2

    img, b = scene()
    sp = Pipeline(region_size=6.0).make_superpixels(b)
    rag = region_adjacency_graph(sp)
    names = sorted(FEATURES)
    X = edge_features(rag, b, img, names)
    col = {n: X[:, i] for i, n in enumerate(names)}
    lab = rag.labels
    h, w = lab.shape
    lab_img = cv2.cvtColor(img, cv2.COLOR_RGB2Lab).astype(np.float64)
    b2 = cv2.GaussianBlur(b, (0, 0), 2)
    for e, (s, t) in enumerate(zip(rag.graph.sources, rag.graph.targets)):
        vals, vals2 = [], []
        for y in range(h):  # every 4-adjacent pixel pair with one pixel in s and one in t
            for x in range(w):
                for dy, dx in ((0, 1), (1, 0)):
                    yy, xx = y + dy, x + dx
                    if yy < h and xx < w and {lab[y, x], lab[yy, xx]} == {s, t}:
                        vals.append(0.5 * (float(b[y, x]) + float(b[yy, xx])))
                        vals2.append(0.5 * (float(b2[y, x]) + float(b2[yy, xx])))
        v = np.sort(vals)
        assert col["mean"][e] == pytest.approx(np.mean(v), abs=1e-6)
        assert col["mean_s2"][e] == pytest.approx(np.mean(vals2), abs=1e-6)
        assert col["max"][e] == pytest.approx(v[-1], abs=1e-6)
        assert col["q50"][e] == pytest.approx(v[int(np.floor(0.5 * (len(v) - 1) + 0.5))], abs=1e-6)
        assert col["log_length"][e] == pytest.approx(np.log(len(v)))
        ns, nt = (lab == s).sum(), (lab == t).sum()
        assert col["log_size_min"][e] == pytest.approx(np.log(min(ns, nt) / lab.size))
        assert col["log_size_max"][e] == pytest.approx(np.log(max(ns, nt) / lab.size))
        ms, mt = lab_img[lab == s].mean(0), lab_img[lab == t].mean(0)
        assert col["lab_dist"][e] == pytest.approx(np.linalg.norm(ms - mt) / 100, abs=1e-6)
        assert col["ab_dist"][e] == pytest.approx(np.linalg.norm(ms[1:] - mt[1:]) / 100, abs=1e-6)
        sd = abs(lab_img[lab == s][:, 0].std() - lab_img[lab == t][:, 0].std()) / 100
        assert col["texture_diff"][e] == pytest.approx(sd, abs=1e-5)
        bi = sorted([b[lab == s].mean(), b[lab == t].mean()])
        assert (col["interior_min"][e], col["interior_max"][e]) == pytest.approx(bi, abs=1e-6)


def test_head_gradient_through_average_linkage_matches_finite_differences():
    img, b = scene(1)
    rag = region_adjacency_graph(Pipeline(region_size=6.0).make_superpixels(b))
    feats = ["mean", "max", "log_length", "lab_dist"]
    x = torch.from_numpy(edge_features(rag, b, img, feats))
    torch.manual_seed(0)
    head = MergeHead(feats, hidden=[5], mean=x.mean(0), std=x.std(0) + 1e-3)
    lengths = rag.frontier_lengths().astype(np.float64)
    target = torch.from_numpy(np.random.default_rng(0).random(rag.graph.num_edges))

    def loss_of(params):
        with torch.no_grad():
            for p, v in zip(head.parameters(), params):
                p.copy_(v)
        w = head(x)
        u = average_linkage_ultrametric(rag.graph, w, lengths)
        return losses.closest(u, target)

    base = [p.detach().clone() for p in head.parameters()]
    loss = loss_of(base)
    grads = torch.autograd.grad(loss, list(head.parameters()))
    eps = 1e-6
    for k, (p0, g) in enumerate(zip(base, grads)):
        for i in range(p0.numel()):
            plus = [q.clone() for q in base]
            minus = [q.clone() for q in base]
            plus[k].view(-1)[i] += eps
            minus[k].view(-1)[i] -= eps
            # the tree is piecewise constant in the weights: a step this small keeps it
            fd = (loss_of(plus).item() - loss_of(minus).item()) / (2 * eps)
            assert g.view(-1)[i].item() == pytest.approx(fd, rel=1e-4, abs=1e-9)


def test_pipeline_with_a_mean_head_equals_the_default_pipeline():
    img, b = scene(2)
    ref = Pipeline(region_size=6.0)
    with_head = Pipeline(region_size=6.0, merge_head=mean_head().to_spec())
    rag, u0, h0 = ref.hierarchy_of_map(b, img)
    rag1, u1, h1 = with_head.hierarchy_of_map(b, img)
    np.testing.assert_array_equal(rag.labels, rag1.labels)
    np.testing.assert_allclose(u1, u0, rtol=0, atol=1e-12)
    np.testing.assert_allclose(with_head.edge_weights(rag, b, img), rag_frontier_mean(rag, b).numpy(), atol=1e-12)


def tiny_checkpoint(tmp_path, head_for_model=True, name="m.ckpt", seed=0, features=None):
    torch.manual_seed(seed)
    m = get_model("compact_boundary_net", width=8)
    torch.manual_seed(1)
    head = MergeHead(["mean", "max", "log_size_min", "lab_dist"], hidden=[4],
                     network=network_fingerprint(m) if head_for_model else "0123456789abcdef")
    spec = head.to_spec()
    if features is not None:
        spec["features"] = features
    pipe = {"superpixels": "boundary_watershed", "linkage": "average", "region_size": 6.0, "merge_head": spec}
    return m, head, save_weights(m, tmp_path / name, metadata={"pipeline": pipe})


def test_checkpoint_round_trip_uses_the_head(tmp_path):
    m, head, path = tiny_checkpoint(tmp_path)
    seg = Segmenter.from_checkpoint(path)
    assert seg.pipeline.merge_head == head.to_spec()
    assert "MergeHead(features=['mean', 'max', 'log_size_min', 'lab_dist']" in repr(seg.pipeline)
    img, _ = scene(3, 48, 64)
    res = seg.segment(img)
    # by hand: the network's map, the superpixels, the head's weights, average linkage
    bmap = Pipeline(region_size=6.0).boundary_map(m.eval(), img)
    rag = region_adjacency_graph(Pipeline(region_size=6.0).make_superpixels(bmap))
    with torch.no_grad():
        w = head(torch.from_numpy(edge_features(rag, bmap, img, head.features)))
    u = average_linkage_ultrametric(rag.graph, w, rag.frontier_lengths().astype(np.float64))
    np.testing.assert_array_equal(res.rag.labels, rag.labels)
    np.testing.assert_allclose(res.ultrametric, u.numpy(), atol=1e-12)
    # the head changes the hierarchy (it is not silently ignored)
    plain = Segmenter(m, pipeline=Pipeline(region_size=6.0)).segment(img)
    assert not np.allclose(plain.ultrametric, res.ultrametric)
    # pipeline -> dict -> pipeline
    assert Pipeline.from_dict(seg.pipeline.to_dict()) == seg.pipeline


def test_unknown_feature_setting_is_refused_by_name(tmp_path):
    _, _, path = tiny_checkpoint(tmp_path, features=["mean", "max", "log_size_min", "sift_distance"])
    with pytest.raises(PipelineError, match=r"merge_head\.features.*sift_distance"):
        Segmenter.from_checkpoint(path)
    bad = mean_head().to_spec()
    bad["colour_space"] = "hsv"
    with pytest.raises(PipelineError, match=r"merge_head: unknown setting.*colour_space"):
        Pipeline(merge_head=bad)
    bad = mean_head().to_spec()
    bad["hidden"] = [3]
    with pytest.raises(PipelineError, match=r"merge_head\.weights"):
        Pipeline(merge_head=bad)


def test_head_of_another_network_is_refused_by_name(tmp_path):
    _, _, path = tiny_checkpoint(tmp_path, head_for_model=False)
    with pytest.raises(PipelineError, match=r"merge_head\.network.*0123456789abcdef"):
        Segmenter.from_checkpoint(path)  # refused when loaded (checked once per pipeline), before any image
    seg = Segmenter.from_checkpoint(tiny_checkpoint(tmp_path, name="ok0.ckpt")[2])
    with pytest.raises(PipelineError, match=r"merge_head\.network.*0123456789abcdef"):
        seg.pipeline = Pipeline.from_dict(Segmenter.from_checkpoint(path, pipeline=seg.pipeline).pipeline.to_dict()
                                          | {"merge_head": {**seg.pipeline.merge_head, "network": "0123456789abcdef"}})
    # the same head on the classical path (no network) is refused too
    _, _, path = tiny_checkpoint(tmp_path, name="ok.ckpt")
    pipe = Segmenter.from_checkpoint(path).pipeline
    with pytest.raises(PipelineError, match=r"merge_head\.network.*no network"):
        Segmenter(None, pipeline=pipe).segment(scene()[0])


def test_flip_averages_the_mirrored_map():
    torch.manual_seed(0)
    m = get_model("compact_boundary_net", width=8).eval()
    img, _ = scene(4, 40, 56)
    x = torch.from_numpy(img.transpose(2, 0, 1))[None]
    with torch.no_grad():
        want = 0.5 * (torch.sigmoid(m(x)) + torch.sigmoid(m(x.flip(-1))).flip(-1))[0, 0].numpy()
    got = Pipeline(flip=True).boundary_map(m, img)
    np.testing.assert_allclose(got, want, atol=1e-6)
    with pytest.raises(PipelineError, match="flip"):
        Pipeline(flip="yes")


def test_previous_checkpoint_still_loads_by_name():
    seg = Segmenter.from_pretrained("bsds500")
    assert seg.pipeline.merge_head is None and seg.pipeline.flip is False


def test_shipped_merge_checkpoint_fits_the_shipped_network():
    from pathlib import Path

    path = Path(__file__).resolve().parents[2] / "models" / "hiseg_bsds500_merge.ckpt"  # shipped: must be there
    seg = Segmenter.from_checkpoint(path)
    head = seg.pipeline.head
    assert head is not None and seg.pipeline.flip and seg.pipeline.scales == (0.5, 1.0)
    assert head.network == network_fingerprint(seg.model)
    try:
        shipped = Segmenter.from_pretrained("bsds500", backend="torch")
    except FileNotFoundError:
        return
    assert network_fingerprint(shipped.model) == head.network  # the frozen network is the shipped one
    img, _ = scene(5, 64, 96)
    res = seg.segment(img)
    assert res.saliency.shape == (64, 96) and 0 <= res.saliency.min() and res.saliency.max() <= 1


def test_merge_checkpoint_loads_by_name_and_training_needs_the_heads_network():
    seg = Segmenter.from_pretrained("bsds500_merge", backend="torch")
    assert seg.pipeline.head is not None and seg.pipeline.flip and seg.pipeline.scales == (0.5, 1.0)
    # training trains the head jointly (tests/training/test_joint.py); a network other than the one the head
    # was fitted on (here a fresh one) is refused by name, not silently mismatched
    from hiseg.training.module import HierarchicalSegmentationModule

    with pytest.raises(ValueError, match="merge_head.network"):
        HierarchicalSegmentationModule(pipeline=seg.pipeline.to_dict())


# --------------------------------------------------------------------------- context (message passing) heads
def context_head(feats=("mean", "max", "log_size_min", "lab_dist"), network=None, seed=0):
    torch.manual_seed(seed)
    return MergeHead(list(feats), hidden=[5], context=3, network=network)


def test_context_head_by_hand_batch_independence_and_gradient():
    img, b = scene(6)
    rag = region_adjacency_graph(Pipeline(region_size=6.0).make_superpixels(b))
    head = context_head()
    x = torch.from_numpy(edge_features(rag, b, img, head.features))
    head.mean.copy_(x.mean(0))  # standardised features: no message unit is dead on every edge
    head.std.copy_(x.std(0) + 1e-3)
    # by hand: per region the mean state of its incident edges, then the MLP on [z, sum, |diff|]
    s, t, n = rag.graph.sources, rag.graph.targets, rag.graph.num_vertices
    with torch.no_grad():
        z = (x - head.mean) / head.std
        he = torch.relu(head.context_layer(z)).numpy()
        hr = np.zeros((n, 3))
        for r in range(n):
            inc = (s == r) | (t == r)
            hr[r] = he[inc].mean(0)
        zz = torch.cat([z, torch.from_numpy(hr[s] + hr[t]), torch.from_numpy(np.abs(hr[s] - hr[t]))], 1)
        want = torch.sigmoid(head.layers[1](torch.relu(head.layers[0](zz))))[:, 0]
        got = head(x, rag.graph)
    torch.testing.assert_close(got, want, rtol=0, atol=1e-12)
    # a batch of graphs: no message crosses from one graph to another
    img2, b2 = scene(7, 36, 48)
    rag2 = region_adjacency_graph(Pipeline(region_size=6.0).make_superpixels(b2))
    x2 = torch.from_numpy(edge_features(rag2, b2, img2, head.features))
    g = batch_graphs([rag.graph, rag2.graph])
    with torch.no_grad():
        torch.testing.assert_close(head(torch.cat([x, x2]), g), torch.cat([got, head(x2, rag2.graph)]),
                                   rtol=0, atol=1e-12)
    # every parameter, the message layer's included, gets a gradient through average linkage
    u = average_linkage_ultrametric(rag.graph, head(x, rag.graph), rag.frontier_lengths().astype(np.float64))
    losses.closest(u, torch.rand(rag.graph.num_edges, dtype=torch.float64)).backward()
    assert all(p.grad is not None and p.grad.abs().sum() > 0 for p in head.parameters())
    with pytest.raises(MergeHeadError, match="merge_head.context.*graph"):
        head(x)


def test_context_head_in_a_checkpoint(tmp_path):
    torch.manual_seed(0)
    m = get_model("compact_boundary_net", width=8)
    head = context_head(network=network_fingerprint(m), seed=1)
    spec = head.to_spec()
    assert spec["version"] == 2 and spec["context"] == 3
    assert MergeHead(["mean"], hidden=[2]).to_spec()["version"] == 1  # heads without context: as before
    pipe = {"superpixels": "boundary_watershed", "linkage": "average", "region_size": 6.0, "merge_head": spec}
    seg = Segmenter.from_checkpoint(save_weights(m, tmp_path / "c.ckpt", metadata={"pipeline": pipe}))
    assert seg.pipeline.merge_head == spec and seg.pipeline.head.context == 3
    img, _ = scene(3, 48, 64)
    res = seg.segment(img)
    bmap = Pipeline(region_size=6.0).boundary_map(m.eval(), img)
    rag = region_adjacency_graph(Pipeline(region_size=6.0).make_superpixels(bmap))
    with torch.no_grad():
        w = head(torch.from_numpy(edge_features(rag, bmap, img, head.features)), rag.graph)
    u = average_linkage_ultrametric(rag.graph, w, rag.frontier_lengths().astype(np.float64))
    np.testing.assert_allclose(res.ultrametric, u.numpy(), atol=1e-12)
    assert Pipeline.from_dict(seg.pipeline.to_dict()) == seg.pipeline


@pytest.mark.parametrize("change, match", [
    ({"version": 3}, r"merge_head\.version 3 is not supported"),
    ({"version": 1}, r"merge_head\.context needs merge_head\.version 2"),
    ({"context": 0}, r"merge_head\.context must be a positive integer"),
    ({"context": "wide"}, r"merge_head\.context must be a positive integer"),
    ({"context": 4}, r"merge_head\.(context_weights|weights\[0\]): shapes"),
    ({"context_weights": {"weight": [[1.0]]}}, r"merge_head\.context_weights: needs 'weight' and 'bias'"),
    ({"context_weights": None}, r"merge_head\.context_weights: needs 'weight' and 'bias'"),
])
def test_bad_context_settings_are_refused_by_name(change, match):
    spec = {**context_head().to_spec(), **change}
    with pytest.raises(PipelineError, match=match):
        Pipeline(merge_head=spec)
    missing = context_head().to_spec()
    del missing["context_weights"]
    with pytest.raises(PipelineError, match=r"missing setting.*context_weights"):
        Pipeline(merge_head=missing)



# --------------------------------------------------------------------------- features in torch (joint fine-tuning)
#: the features that read the boundary map (the others are constants of the RAG and the image)
MAP_FEATURES = [n for n in sorted(FEATURES) if hasattr(FEATURES[n], "torch_spec")]
SMOOTHED = {n for n in FEATURES if n.endswith(("_s2", "_s4"))}


def label_scene(seed, h, w):
    """Labels with regions of every size: blocks of a coarse random grid, one-pixel regions
    sprinkled in (one-pixel frontiers, regions touching the image border), an image and a map."""
    rng = np.random.default_rng(seed)
    cell = int(rng.integers(2, 6))
    coarse = rng.integers(0, 6, (h // cell + 1, w // cell + 1))
    lab = np.kron(coarse, np.ones((cell, cell), np.int64))[:h, :w] * 100
    spots = rng.random((h, w)) < 0.04
    lab[spots] = 1000 + np.arange(spots.sum())
    img = rng.random((h, w, 3)).astype(np.float32)
    return region_adjacency_graph(lab), img, rng.random((h, w)).astype(np.float32)


def assert_features_match(got: np.ndarray, want: np.ndarray, names):
    """Unsmoothed features: the same float64 sums (1e-12); smoothed ones: 1e-5 (the sums of
    the separable blur run in another order in a padded batch). Quantiles and max are
    1-Lipschitz in the values, so the bound holds for them even where a near-tie is ordered
    differently. (The features have one implementation, in torch: these tests check the
    one-RAG and the batched forms against each other; ``test_features_against_brute_force``
    checks them against pixel loops and OpenCV.)"""
    assert got.shape == want.shape
    for i, n in enumerate(names):
        np.testing.assert_allclose(got[:, i], want[:, i], rtol=0, atol=1e-5 if n in SMOOTHED else 1e-12, err_msg=n)


@pytest.mark.parametrize("seed, h, w", [(0, 23, 31), (1, 9, 5), (2, 3, 40), (3, 40, 2), (4, 17, 17)])
def test_torch_features_equal_numpy_on_random_rags(seed, h, w):
    rag, img, b = label_scene(seed, h, w)
    names = sorted(FEATURES)
    got = edge_features_torch(rag, torch.from_numpy(b), img, names)
    assert got.dtype == torch.float64 and got.shape == (rag.graph.num_edges, len(names))
    lengths = rag.frontier_lengths()
    if h * w > 200:
        assert (lengths == 1).any() and (lengths > 4).any()  # one-pixel frontiers and long ones
    assert_features_match(got.numpy(), edge_features(rag, b, img, names), names)


def test_torch_features_equal_numpy_on_pipeline_superpixels_and_a_padded_batch():
    """Watershed superpixels of two images of different sizes in one padded (B, H, W)
    batch (collate's layout): each RAG's rows equal its own numpy features; NaN padding is
    never read, the smoothing reflects at each image's own border."""
    items = []
    for seed, (h, w) in ((8, (40, 56)), (9, (33, 47))):
        img, b = scene(seed, h, w)
        items.append((region_adjacency_graph(Pipeline(region_size=4.0).make_superpixels(b)), img, b))
    names = sorted(FEATURES)
    maps = torch.full((2, 40, 56), float("nan"), dtype=torch.float32)
    for i, (_, _, b) in enumerate(items):
        maps[i, : b.shape[0], : b.shape[1]] = torch.from_numpy(b)
    feats = TorchEdgeFeatures([r for r, _, _ in items], names, [img for _, img, _ in items])
    assert feats.graph.num_edges == sum(r.graph.num_edges for r, _, _ in items)
    want = np.concatenate([edge_features(r, b, img, names) for r, img, b in items])
    assert_features_match(feats(maps).numpy(), want, names)
    # many maps, one precomputation: a second map, in float64 with a gradient
    maps2 = torch.rand(2, 40, 56, dtype=torch.float64, requires_grad=True)
    want2 = np.concatenate([edge_features(r, maps2[i].detach().numpy()[: r.labels.shape[0], : r.labels.shape[1]],
                                          img, names) for i, (r, img, _) in enumerate(items)])
    assert_features_match(feats(maps2.detach()).numpy(), want2, names)
    x = feats(maps2)
    assert x.requires_grad
    with pytest.raises(MergeHeadError, match=r"maps of shape"):
        feats(maps[0])
    with pytest.raises(MergeHeadError, match="unknown feature"):
        TorchEdgeFeatures(items[0][0], ["mean", "sift"])


def test_torch_features_gradcheck():
    """float64 gradcheck (finite differences, eps 1e-6) of every map-dependent feature on a
    tiny RAG: smoothing, means and interior means are linear in the map; quantiles and max
    route the gradient to their order statistic (a random map has no ties)."""
    rag, img, b = label_scene(5, 7, 9)
    feats = TorchEdgeFeatures(rag, MAP_FEATURES)
    x = torch.from_numpy(b.astype(np.float64)).requires_grad_()
    assert torch.autograd.gradcheck(feats, (x,), eps=1e-6, atol=1e-7, rtol=1e-5)


def test_head_on_torch_features_equals_the_pipeline_and_passes_gradients_to_the_map():
    img, b = scene(10, 48, 64)
    seg = Segmenter.from_checkpoint(Path(__file__).resolve().parents[2] / "models" / "hiseg_bsds500_merge.ckpt")
    pipe, head = seg.pipeline, seg.pipeline.head
    rag = region_adjacency_graph(pipe.make_superpixels(b, img))
    bt = torch.from_numpy(b).double().requires_grad_()
    feats = TorchEdgeFeatures(rag, head.features, img)
    w = head(feats(bt))
    want = torch.from_numpy(pipe.edge_weights(rag, b, img))
    torch.testing.assert_close(w.detach(), want, rtol=0, atol=1e-6)
    torch.testing.assert_close(head.weights(rag, b, img), want, rtol=0, atol=0)
    # the map gets a gradient through the head and average linkage (what joint fine-tuning needs)
    u = average_linkage_ultrametric(rag.graph, w, rag.frontier_lengths().astype(np.float64))
    losses.closest(u, torch.rand(rag.graph.num_edges, dtype=torch.float64)).backward()
    assert bt.grad is not None and torch.isfinite(bt.grad).all() and bt.grad.abs().sum() > 0
    # a context head on a batch of two RAGs reads the batched graph
    img2, b2 = scene(11, 48, 64)
    rag2 = region_adjacency_graph(pipe.make_superpixels(b2, img2))
    ch = context_head()
    both = TorchEdgeFeatures([rag, rag2], ch.features, [img, img2])
    with torch.no_grad():
        got = ch(both(torch.from_numpy(np.stack([b, b2]))), both.graph)
    torch.testing.assert_close(got, torch.cat([ch.weights(rag, b, img), ch.weights(rag2, b2, img2)]),
                               rtol=0, atol=1e-12)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_torch_features_on_cuda_without_host_synchronisation():
    img, b = scene(12, 48, 64)
    rag = region_adjacency_graph(Pipeline(region_size=4.0).make_superpixels(b))
    names = sorted(FEATURES)
    cpu = TorchEdgeFeatures(rag, names, img)
    gpu = TorchEdgeFeatures(rag, names, img, device="cuda")
    bc = torch.from_numpy(b).double().requires_grad_()
    bg = bc.detach().cuda().requires_grad_()
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")  # a host synchronisation in the map-dependent part raises
    try:
        xg = gpu(bg)
    finally:
        torch.cuda.set_sync_debug_mode("default")
    assert xg.device.type == "cuda"
    xc = cpu(bc)
    torch.testing.assert_close(xg.cpu(), xc, rtol=0, atol=1e-12)
    g = torch.randn_like(xc)
    xc.backward(g)
    xg.backward(g.cuda())
    torch.testing.assert_close(bg.grad.cpu(), bc.grad, rtol=0, atol=1e-12)
    head = context_head()
    want = head.weights(rag, b, img)
    with torch.no_grad():
        got = head.cuda()(xg[:, [names.index(n) for n in head.features]], rag.graph)  # messages on the device
    torch.testing.assert_close(got.cpu(), want, rtol=0, atol=1e-9)
