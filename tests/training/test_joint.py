"""Joint fine-tuning of the network and a learned merging head (issue 20, item 1): a pipeline
with ``merge_head`` trains both through the ultrametric layer, on the pipeline's own map and
edge weights (those of ``hiseg predict``), and saves the head back for the fine-tuned network."""
import numpy as np
import pytest
import torch

from hiseg.data.collate import collate_graph_batch
from hiseg.data.graphs import SegmentationGraphDataset
from hiseg.data.synthetic import SyntheticSegmentation
from hiseg.training.module import HierarchicalSegmentationModule
from hiseg.models import get_model, save_weights
from hiseg.segmentation import Pipeline
from hiseg.segmentation.merging import MergeHead, network_fingerprint
from hiseg.segmentation.superpixels import Superpixels

FEATS = ["mean", "max", "q50", "mean_s2", "log_length", "lab_dist"]


@pytest.fixture(scope="module")
def batch():
    raw = SyntheticSegmentation(2, size=40, seed=3)
    ds = SegmentationGraphDataset(raw, None, Superpixels(region_size=6.0))
    return collate_graph_batch([ds[i] for i in range(2)])


def _setup(tmp_path, scales=(1.0,), flip=False, network=None):
    torch.manual_seed(0)
    net = get_model("compact_boundary_net", width=8)
    path = save_weights(net, tmp_path / "net.pt")
    rng = np.random.default_rng(0)
    head = MergeHead(FEATS, [8], "sigmoid", rng.normal(0, 0.1, len(FEATS)), np.ones(len(FEATS)),
                     network or network_fingerprint(net))
    pipe = {"superpixels": "color_watershed", "linkage": "average", "region_size": 6.0, "scales": list(scales),
            "flip": flip, "merge_head": head.to_spec()}
    return net, head, path, pipe


@pytest.mark.parametrize("scales, flip", [((1.0,), False), ((0.5, 1.0), True)])
def test_joint_weights_are_the_pipelines_and_train_both(tmp_path, batch, scales, flip):
    net, head, path, pipe = _setup(tmp_path, scales, flip)
    m = HierarchicalSegmentationModule(arch_kwargs={"width": 8}, init_from=str(path), pipeline=pipe,
                                       closest_weight=1.0, triplet_weight=0.5, pixel_weight=0.0)
    m.eval()
    with torch.no_grad():
        w = m.pipeline.graph_weights(batch.rags, m.pipeline.maps(m.model, batch.images), batch.images, head=m.merge_head)
    # independent path: hiseg predict's pipeline, image by image, numpy features
    p = Pipeline.from_dict(pipe)
    for b, rag in enumerate(batch.rags):
        hb, wb = batch.image_sizes[b]
        img = batch.images[b, :, :hb, :wb].permute(1, 2, 0).numpy().astype(np.float32)
        bmap = p.boundary_map(net.eval(), img)
        ref = head.weights(rag, bmap, img).numpy()
        e0, e1 = batch.graph.edge_ptr[b], batch.graph.edge_ptr[b + 1]
        np.testing.assert_allclose(w[e0:e1].numpy(), ref, atol=2e-5)
    m.train()
    out = m.compute_losses(batch).losses
    out["loss"].backward()
    assert any(float(q.grad.abs().sum()) > 0 for q in m.merge_head.parameters() if q.grad is not None)
    assert any(float(q.grad.abs().sum()) > 0 for q in m.model.parameters() if q.grad is not None)


def test_the_saved_head_runs_with_the_fine_tuned_network(tmp_path, batch):
    net, head, path, pipe = _setup(tmp_path)
    m = HierarchicalSegmentationModule(arch_kwargs={"width": 8}, init_from=str(path), pipeline=pipe,
                                       pixel_weight=0.0, lr=1e-2)
    opt = torch.optim.AdamW(m.parameters(), lr=1e-2)
    before = [q.detach().clone() for q in m.merge_head.parameters()]
    for _ in range(2):
        opt.zero_grad()
        m.compute_losses(batch).losses["loss"].backward()
        opt.step()
    assert any(not torch.equal(a, b) for a, b in zip(before, m.merge_head.parameters()))
    ck = {"hyper_parameters": dict(m.hparams)}
    m.on_save_checkpoint(ck)
    spec = ck["hyper_parameters"]["pipeline"]["merge_head"]
    assert spec["network"] == network_fingerprint(m.model) != head.network
    saved = MergeHead.from_spec(spec)
    for a, b in zip(saved.parameters(), m.merge_head.parameters()):
        torch.testing.assert_close(a, b.detach())
    Pipeline.from_dict(ck["hyper_parameters"]["pipeline"]).check_model(m.model)  # hiseg predict's check passes


def test_head_lr_scale_zero_freezes_the_head(tmp_path, batch):
    _, _, path, pipe = _setup(tmp_path)
    m = HierarchicalSegmentationModule(arch_kwargs={"width": 8}, init_from=str(path), pipeline=pipe,
                                       pixel_weight=0.0, head_lr_scale=0.0)
    m.compute_losses(batch).losses["loss"].backward()
    assert all(q.grad is None for q in m.merge_head.parameters())
    assert any(q.grad is not None for q in m.model.parameters())


def test_bad_inputs_are_named(tmp_path):
    _, _, path, pipe = _setup(tmp_path, network="0123456789abcdef")
    with pytest.raises(ValueError, match="merge_head.network"):
        HierarchicalSegmentationModule(arch_kwargs={"width": 8}, init_from=str(path), pipeline=pipe)
    _, _, path, pipe = _setup(tmp_path)
    with pytest.raises(ValueError, match="head_lr_scale"):
        HierarchicalSegmentationModule(arch_kwargs={"width": 8}, init_from=str(path), pipeline=pipe, head_lr_scale=-1)
    with pytest.raises(ValueError, match="pipeline_from_init"):
        HierarchicalSegmentationModule(arch_kwargs={"width": 8}, pipeline_from_init=True)
    with pytest.raises(ValueError, match="holds no pipeline"):
        HierarchicalSegmentationModule(arch_kwargs={"width": 8}, init_from=str(path), pipeline_from_init=True)
    bad = dict(pipe, merge_head=dict(pipe["merge_head"], features=["mean", "nonsense"]))
    with pytest.raises(ValueError, match="nonsense"):
        HierarchicalSegmentationModule(arch_kwargs={"width": 8}, init_from=str(path), pipeline=bad)


def test_pipeline_from_init_takes_the_shipped_merge_head():
    """init_from bsds500_merge with pipeline_from_init: the shipped head, its scales and flip."""
    m = HierarchicalSegmentationModule(init_from="bsds500_merge", pipeline_from_init=True)
    assert m.merge_head is not None and m.pipeline.flip and tuple(m.pipeline.scales) == (0.5, 1.0)
    assert m.hparams["arch_kwargs"]["width"] == 32
