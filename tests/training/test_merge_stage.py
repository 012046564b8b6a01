"""The merging head trained by the training module, the network frozen (issue 30):
``configs/bsds500_merge_head.yaml`` on a tiny BSDS500-like folder (as tests/training/test_recipe.py),
and the module's ``freeze_network`` / ``new_merge_head`` / ``optimizer`` options in process."""
import copy

import numpy as np
import pytest
import torch
from _train import load_ckpt
from tests.training.test_recipe import make_bsds, run

from hiseg.models import get_model
from hiseg.models.weights import save_weights
from hiseg.segmentation.merging import network_fingerprint

FEATURES = ["mean", "max", "q50", "log_length", "lab_dist"]
PIPE = {"superpixels": "boundary_watershed", "linkage": "average", "region_size": 4.0, "sigma": 1.0,
        "scales": [0.5, 1.0], "flip": True}


@pytest.fixture(scope="module")
def start(tmp_path_factory):
    """A BSDS-like folder and a small network checkpoint to start from."""
    tmp = tmp_path_factory.mktemp("merge_stage")
    torch.manual_seed(0)
    net = get_model("compact_boundary_net", width=8)
    return make_bsds(tmp / "bsds", n_train=4), save_weights(net, tmp / "net.ckpt"), net


def test_frozen_network_trains_the_new_head_alone(start):
    import pytorch_lightning as pl

    from hiseg.data import BSDS500DataModule
    from hiseg.training.module import HierarchicalSegmentationModule

    data, ckpt, net = start
    pl.seed_everything(0)
    m = HierarchicalSegmentationModule(init_from=str(ckpt), freeze_network=True, pipeline=PIPE,
                                       new_merge_head={"features": FEATURES, "hidden": [8]}, optimizer="amsgrad",
                                       lr=0.01, pixel_weight=0.0, warmup=0, final_lr=0.0, validate_at_start=False,
                                       host_workers=0)
    head0 = copy.deepcopy(m.merge_head.state_dict())
    assert bool(m.merge_head.pending) and not any(p.requires_grad for p in m.model.parameters())
    dm = BSDS500DataModule(data_root=str(data), crop_size=0, batch_size=2, num_workers=0, scale_range=(1.0, 1.0),
                           max_val_images=1)
    trainer = pl.Trainer(max_steps=3, logger=False, enable_checkpointing=False, enable_progress_bar=False,
                         enable_model_summary=False, limit_val_batches=0, num_sanity_val_steps=0,
                         accelerator="cpu")
    trainer.fit(m, dm)
    # the network: every parameter and buffer (batch-norm statistics included) unchanged
    for k, v in net.state_dict().items():
        assert torch.equal(m.model.state_dict()[k], v), k
    assert not m.model.training and m.merge_head.training  # eval mode from the first step on
    # the head: standardised on its first batch, then trained
    assert not bool(m.merge_head.pending)
    assert not torch.equal(m.merge_head.mean, head0["mean"]) and bool((m.merge_head.std > 0).all())
    moved = [k for k, v in m.merge_head.state_dict().items() if k.startswith("layers") and not torch.equal(v, head0[k])]
    assert moved
    opt = trainer.optimizers[0]
    assert type(opt) is torch.optim.Adam and opt.param_groups[0]["amsgrad"]
    assert {id(p) for g in opt.param_groups for p in g["params"]} == {id(p) for p in m.merge_head.parameters()}


@pytest.mark.slow
def test_the_config_trains_a_head_fingerprinted_to_its_network(tmp_path, start):
    """train.py fit --config configs/bsds500_merge_head.yaml: the checkpoint's pipeline holds the
    head, tied to the (unchanged) network; hiseg's Segmenter runs it as it is."""
    from hiseg.segmentation.segmenter import Segmenter

    data, ckpt, net = start
    r = run(tmp_path, "bsds500_merge_head.yaml", "--trainer.default_root_dir", str(tmp_path / "mh"),
            "--data.init_args.data_root", str(data), "--data.init_args.num_workers", "0",
            "--data.init_args.batch_size", "2", "--trainer.max_steps", "3", "--model.init_from", str(ckpt),
            "--model.pipeline", str(PIPE).replace("'", '"').replace("True", "true"),
            "--model.new_merge_head", str({"features": FEATURES, "hidden": [8]}).replace("'", '"'),
            "--model.host_workers", "0")
    assert r.returncode == 0, r.stderr[-3000:]
    last = tmp_path / "mh/csv/version_0/checkpoints/last.ckpt"
    ck = load_ckpt(last)
    assert ck["global_step"] == 3
    for k, v in net.state_dict().items():
        assert torch.equal(ck["state_dict"][f"model.{k}"], v), k
    head = ck["hyper_parameters"]["pipeline"]["merge_head"]
    assert head["network"] == network_fingerprint(net) and head["features"] == FEATURES and head["hidden"] == [8]
    assert head["std"] != [1.0] * len(FEATURES)  # standardised on the data
    # the checkpoint loads back as a module (its head now the pipeline's)
    from hiseg.training.module import HierarchicalSegmentationModule

    back = HierarchicalSegmentationModule.load_from_checkpoint(last, map_location="cpu")
    assert back.merge_head.to_spec()["weights"] == head["weights"]
    seg = Segmenter.from_checkpoint(last)
    assert seg.pipeline.merge_head == head and seg.pipeline.flip and tuple(seg.pipeline.scales) == (0.5, 1.0)
    res = seg.segment(np.random.default_rng(0).uniform(0, 1, (40, 56, 3)).astype(np.float32))
    assert res.ucm2.shape == (81, 113)


@pytest.mark.parametrize("kwargs, message", [
    (dict(new_merge_head={"features": ["mean"], "depth": 3}), r"model\.new_merge_head: unknown setting"),
    (dict(new_merge_head={"features": ["nonsense"]}), r"model\.new_merge_head.*unknown feature"),
    (dict(new_merge_head={"hidden": [4]}), r"model\.new_merge_head needs its features"),
    (dict(new_merge_head=["mean"]), r"model\.new_merge_head must be a mapping"),
    (dict(freeze_network=True), r"model\.freeze_network trains the merging head alone"),
    (dict(optimizer="sgd"), r"model\.optimizer must be one of \('adamw', 'amsgrad'\)"),
])
def test_bad_head_settings_are_refused_by_name(kwargs, message):
    from hiseg.training.module import HierarchicalSegmentationModule

    with pytest.raises(ValueError, match=message):
        HierarchicalSegmentationModule(arch_kwargs={"width": 8}, **kwargs)


def test_new_head_with_a_pipeline_head_is_refused():
    from hiseg.training.module import HierarchicalSegmentationModule
    from hiseg.segmentation.merging import MergeHead

    pipe = dict(PIPE, merge_head=MergeHead(["mean"], [2]).to_spec())
    with pytest.raises(ValueError, match=r"model\.new_merge_head: the pipeline already holds a merge_head"):
        HierarchicalSegmentationModule(arch_kwargs={"width": 8}, pipeline=pipe, new_merge_head={"features": ["mean"]})
