"""Tests of hiseg.models: shapes, gradients, side outputs, no-network guarantee, weights."""
from __future__ import annotations

import socket
import urllib.request

import pytest
import torch

from hiseg.models import (
    ArchitectureMismatchError,
    BoundaryNetBase,
    CheckpointError,
    CompactBoundaryNet,
    PretrainedWeightsNotFoundError,
    compact_boundary_net,
    get_model,
    list_models,
    load_model,
    load_weights,
    pretrained_backbone_path,
    resnet18_boundary_net,
    save_weights,
    vgg16_boundary_net,
)
from hiseg.models import Checkpoint, read_checkpoint

ALL = ["compact_boundary_net", "pdc_boundary_net", "resnet18_boundary_net", "vgg16_boundary_net"]


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)


@pytest.fixture(scope="module")
def models():
    torch.manual_seed(0)
    return {name: get_model(name) for name in ALL}


@pytest.fixture
def no_network(monkeypatch, tmp_path):
    """Any attempt to reach the network fails loudly; the torch hub cache is empty."""

    def refuse(*args, **kwargs):
        raise AssertionError(f"network access attempted: {args[:1]}")

    monkeypatch.setenv("TORCH_HOME", str(tmp_path / "torch_home"))
    monkeypatch.setattr(torch.hub, "load_state_dict_from_url", refuse)
    monkeypatch.setattr(torch.hub, "download_url_to_file", refuse)
    import torchvision.models._api as tv_api  # torchvision's own binding of the hub loader

    if hasattr(tv_api, "load_state_dict_from_url"):
        monkeypatch.setattr(tv_api, "load_state_dict_from_url", refuse)
    monkeypatch.setattr(urllib.request, "urlopen", refuse)
    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(socket, "create_connection", refuse)
    return tmp_path / "torch_home"


def test_registry_lists_the_builders():
    # the four networks, and the ensemble of trained ones (tests/models/test_ensemble.py)
    assert list_models() == sorted(ALL + ["mean_probability_ensemble"])
    with pytest.raises(ValueError, match="known models"):
        get_model("nope_net")


@pytest.mark.parametrize("name", ALL)
def test_output_shape_any_size(models, name):
    m = models[name].eval()
    with torch.no_grad():
        for h, w in [(97, 131), (16, 16), (1, 5)]:
            y = m(torch.rand(2, 3, h, w))
            assert y.shape == (2, 1, h, w)
            assert torch.isfinite(y).all()
    m.train()
    y = m(torch.rand(1, 3, 3, 7))  # BatchNorm in training mode on a tiny single image
    assert y.shape == (1, 1, 3, 7)


@pytest.mark.parametrize("name", ALL)
def test_side_outputs_are_fused(models, name):
    m = models[name].eval()
    x = torch.rand(1, 3, 45, 61)
    with torch.no_grad():
        fused, sides = m(x, return_side_outputs=True)
        assert len(sides) == m.num_sides >= 4
        assert all(s.shape == (1, 1, 45, 61) for s in sides)
        torch.testing.assert_close(fused, m.fuse(torch.cat(sides, 1)))
        torch.testing.assert_close(fused, m(x))
        torch.testing.assert_close(m.boundary_probability(x), torch.sigmoid(fused))


@pytest.mark.parametrize("name", ALL)
def test_inference_gives_the_gradient_path_bits(models, name):
    """Without gradient (inference, validation) some blocks work in place: the same bits as with
    gradient, side outputs included, and the input untouched."""
    m = models[name].eval()
    x = torch.rand(2, 3, 45, 61)
    x0 = x.clone()
    ref, ref_sides = m(x, return_side_outputs=True)
    with torch.inference_mode():
        y, sides = m(x, return_side_outputs=True)
    assert torch.equal(y, ref.detach()) and all(torch.equal(s, r.detach()) for s, r in zip(sides, ref_sides))
    assert torch.equal(x, x0)


@pytest.mark.parametrize("name", ALL)
def test_gradient_reaches_every_parameter(models, name):
    m = models[name].train()
    m.zero_grad(set_to_none=True)
    fused, sides = m(torch.rand(2, 3, 40, 56), return_side_outputs=True)
    (fused.square().mean() + sum(s.square().mean() for s in sides)).backward()
    dead = [n for n, p in m.named_parameters() if p.grad is None or not p.grad.abs().sum() > 0]
    assert not dead, f"no gradient for {dead[:5]}"
    m.zero_grad(set_to_none=True)


def test_parameter_counts(models):
    n = {k: sum(p.numel() for p in m.parameters()) for k, m in models.items()}
    assert 50_000 <= n["compact_boundary_net"] <= 200_000
    assert 500_000 <= n["pdc_boundary_net"] <= 1_000_000  # issue 33: 0.5-1 M at the default width
    assert 14_000_000 <= n["vgg16_boundary_net"] <= 15_500_000  # VGG16 convs: 14.71 M
    assert 10_500_000 <= n["resnet18_boundary_net"] <= 12_000_000  # ResNet18 w/o fc: 11.18 M
    assert 20_000 <= sum(p.numel() for p in compact_boundary_net(width=8).parameters()) < n["compact_boundary_net"]


def test_input_validation(models):
    m = models["compact_boundary_net"]
    with pytest.raises(TypeError, match="uint8"):
        m(torch.zeros(1, 3, 8, 8, dtype=torch.uint8))
    with pytest.raises(ValueError, match=r"\(B, 3, H, W\)"):
        m(torch.zeros(1, 1, 8, 8))
    with pytest.raises(ValueError, match=r"\(B, 3, H, W\)"):
        m(torch.zeros(3, 8, 8))
    with pytest.raises(ValueError, match="pretrained_backbone"):
        vgg16_boundary_net(pretrained_backbone="yes")
    with pytest.raises(ValueError, match="blocks"):
        CompactBoundaryNet(blocks=(1, 2))


def test_frozen_batchnorm_stays_in_eval():
    m = resnet18_boundary_net(frozen_batchnorm=True).train()
    bns = [b for b in m.backbone.modules() if isinstance(b, torch.nn.BatchNorm2d)]
    assert bns and not any(b.training for b in bns)
    assert all(b.training for b in m.full_res.modules() if isinstance(b, torch.nn.BatchNorm2d))
    before = bns[0].running_mean.clone()
    m(torch.rand(2, 3, 32, 32))
    torch.testing.assert_close(bns[0].running_mean, before)


# ------------------------------------------------------------------ no network, backbones
def test_no_network_for_any_build(no_network):
    for name in ALL:
        assert isinstance(get_model(name), BoundaryNetBase)
    for name in ["vgg16_boundary_net", "resnet18_boundary_net"]:
        with pytest.warns(UserWarning, match="IMAGENET1K_V1"):
            m = get_model(name, pretrained_backbone="auto")
        assert not m.pretrained_loaded


@pytest.mark.parametrize("builder,fname", [(vgg16_boundary_net, "vgg16-397923af.pth"), (resnet18_boundary_net, "resnet18-f37072fd.pth")])
def test_pretrained_backbone_missing_gives_clear_error(no_network, builder, fname):
    expected = no_network / "hub" / "checkpoints" / fname
    assert pretrained_backbone_path(builder.__name__.split("_")[0]) == expected
    with pytest.raises(PretrainedWeightsNotFoundError) as e:
        builder(pretrained_backbone=True)
    msg = str(e.value)
    assert str(expected) in msg and "weights='IMAGENET1K_V1'" in msg and "never downloads" in msg


def _torchvision_shapes(name):
    """Key -> shape of torchvision's own model, built on the meta device (no memory)."""
    import torchvision

    with torch.device("meta"):
        tv = getattr(torchvision.models, name)(weights=None)
    return {k: tuple(v.shape) for k, v in tv.state_dict().items()}


@pytest.mark.parametrize("backbone", ["vgg16", "resnet18"])
def test_pretrained_backbone_present_is_loaded(no_network, backbone):
    tv = _torchvision_shapes(backbone)
    torch.manual_seed(1)
    m0 = get_model(f"{backbone}_boundary_net")
    own = m0.backbone.state_dict()
    # our backbone is torchvision's minus the classifier head, under the same names
    assert {k: tuple(v.shape) for k, v in own.items()} == {k: s for k, s in tv.items() if k in own}
    assert set(tv) - set(own) <= {k for k in tv if k.startswith(("classifier.", "fc."))}
    fake = {k: torch.randn(s) if torch.empty(s).is_floating_point() else torch.zeros(s, dtype=torch.long)
            for k, s in ((k, tv[k]) for k in own)}
    head = "fc.bias" if backbone == "resnet18" else "classifier.6.bias"
    fake[head] = torch.zeros(tv[head])  # extra keys of the full model are ignored
    path = pretrained_backbone_path(backbone)
    path.parent.mkdir(parents=True)
    torch.save(fake, path)
    m = get_model(f"{backbone}_boundary_net", pretrained_backbone=True)
    assert m.pretrained_loaded
    for k, v in m.backbone.state_dict().items():
        torch.testing.assert_close(v, fake[k].to(v.dtype), msg=k)
    # a cached file of another architecture is refused clearly
    torch.save({"features.0.weight": torch.zeros(2, 3, 3, 3)}, path)
    with pytest.raises(CheckpointError, match=f"not a torchvision {backbone}"):
        get_model(f"{backbone}_boundary_net", pretrained_backbone=True)


# ------------------------------------------------------------------ weights round trips
def _same_outputs(a, b, x):
    a.eval(), b.eval()
    with torch.no_grad():
        torch.testing.assert_close(a(x), b(x), rtol=0, atol=0)


def _trained_like(model):
    """Perturb parameters and BN statistics so a round trip is not trivially passed."""
    model.train()
    with torch.no_grad():
        model(torch.rand(2, 3, 24, 24))
        for p in model.parameters():
            p.add_(0.01 * torch.randn_like(p))
    return model


def test_plain_state_dict_round_trip(tmp_path):
    src = _trained_like(compact_boundary_net())
    path = tmp_path / "plain.pt"
    torch.save(src.state_dict(), path)
    x = torch.rand(1, 3, 33, 47)
    _same_outputs(src, compact_boundary_net(weights=path), x)
    _same_outputs(src, get_model("compact_boundary_net", weights=str(path)), x)
    _same_outputs(src, load_weights(compact_boundary_net(), path), x)


def test_lightning_checkpoint_round_trip(tmp_path):
    src = _trained_like(compact_boundary_net(width=8))
    ckpt = {
        "epoch": 3,
        "global_step": 120,
        "state_dict": {**{f"model.{k}": v for k, v in src.state_dict().items()}, "loss.pos_weight": torch.ones(1)},
        "hyper_parameters": {"arch": "compact_boundary_net", "arch_kwargs": {"width": 8}, "lr": 1e-3},
    }
    path = tmp_path / "epoch=3.ckpt"
    torch.save(ckpt, path)
    x = torch.rand(2, 3, 29, 30)
    m = compact_boundary_net(weights=path)  # width taken from the hyper-parameters
    assert m.arch_kwargs["width"] == 8
    _same_outputs(src, m, x)
    _same_outputs(src, load_model(path), x)


def test_save_weights_and_read_once(tmp_path):
    src = _trained_like(resnet18_boundary_net(full_resolution_side=False))
    save_weights(src, tmp_path / "r18.pt", metadata={"data": "synthetic", "metrics": {"ODS": 0.5}})
    ck = read_checkpoint(tmp_path / "r18.pt")
    assert isinstance(ck, Checkpoint) and ck.metadata == {"data": "synthetic", "metrics": {"ODS": 0.5}}
    assert ck.hyper_parameters == {"arch": "resnet18_boundary_net", "arch_kwargs": src.arch_kwargs}
    x = torch.rand(1, 3, 50, 41)
    _same_outputs(src, get_model("resnet18_boundary_net", weights=tmp_path / "r18.pt"), x)
    _same_outputs(src, load_model(ck), x)  # an already read checkpoint: no second read
    _same_outputs(src, load_model(tmp_path / "r18.pt"), x)  # architecture read from the file
    _same_outputs(src, load_weights(resnet18_boundary_net(full_resolution_side=False), ck), x)
    with pytest.raises(ArchitectureMismatchError, match="made for 'resnet18_boundary_net'"):
        vgg16_boundary_net(weights=ck)
    with pytest.raises(FileNotFoundError, match="no_such_weights"):
        compact_boundary_net(weights="no_such_weights")
    with pytest.raises(TypeError, match="weights must be None"):
        compact_boundary_net(weights=3)
    with pytest.raises(ValueError, match="only plain values"):
        save_weights(src, tmp_path / "bad.pt", metadata={"p": tmp_path})
    assert not (tmp_path / "bad.pt").exists()


# ------------------------------------------------------------------ bad checkpoints
def test_missing_and_corrupt_files(tmp_path):
    with pytest.raises(FileNotFoundError, match="nothere.pt"):
        compact_boundary_net(weights=tmp_path / "nothere.pt")
    good = tmp_path / "good.pt"
    torch.save(compact_boundary_net().state_dict(), good)
    data = good.read_bytes()
    for name, content in [("garbage.pt", b"this is not a checkpoint"), ("garbage2.ckpt", b"garbage"), ("empty.pt", b""), ("truncated.pt", data[: len(data) // 2])]:
        p = tmp_path / name
        p.write_bytes(content)
        with pytest.raises(CheckpointError, match=f"{name} is corrupted or not a torch checkpoint"):
            compact_boundary_net(weights=p)


class _Custom:  # a class a weights-only load must refuse to import
    pass


def test_checkpoint_with_code_is_refused(tmp_path):
    p = tmp_path / "pickled.ckpt"
    torch.save({"state_dict": compact_boundary_net().state_dict(), "hyper_parameters": {"obj": _Custom()}}, p)
    with pytest.raises(CheckpointError, match="safe_globals"):
        compact_boundary_net(weights=p)
    with torch.serialization.safe_globals([_Custom]):  # the documented opt-in for trusted files
        compact_boundary_net(weights=p)


def test_checkpoint_of_other_architecture(tmp_path):
    # other width: same keys, other shapes
    p = tmp_path / "w8.pt"
    torch.save(compact_boundary_net(width=8).state_dict(), p)
    with pytest.raises(ArchitectureMismatchError, match=r"shape mismatch.*width") as e:
        compact_boundary_net(weights=p)
    assert "stem.0.weight" in str(e.value) and str(p) in str(e.value)
    # other architecture named by the Lightning hyper-parameters
    p = tmp_path / "vgg.ckpt"
    torch.save({"state_dict": {"model.backbone.features.0.weight": torch.zeros(64, 3, 3, 3)},
                "hyper_parameters": {"arch": "vgg16_boundary_net"}}, p)
    with pytest.raises(ArchitectureMismatchError, match="made for 'vgg16_boundary_net'") as e:
        compact_boundary_net(weights=p)
    assert "missing key" in str(e.value) and "backbone.features.0.weight" in str(e.value)
    # other architecture recognised from its keys alone (plain state dict)
    p = tmp_path / "r18.pt"
    torch.save(resnet18_boundary_net().state_dict(), p)
    with pytest.raises(ArchitectureMismatchError, match="look like architecture 'resnet18_boundary_net'"):
        vgg16_boundary_net(weights=p)
    with pytest.raises(CheckpointError, match="does not name its architecture"):
        load_model(p)


def test_a_folded_network_is_not_saved_as_weights(tmp_path):
    """A Segmenter's network has its BatchNorm folded (issue 41): its state dict no longer fits its
    architecture, so save_weights refuses it, naming how to save the network as trained, and writes nothing."""
    from hiseg.models.weights import load_model, save_weights
    from hiseg.segmentation.segmenter import fold_for_inference

    net = get_model("compact_boundary_net", width=8).eval()
    save_weights(net, tmp_path / "as_trained.ckpt")
    assert load_model(tmp_path / "as_trained.ckpt") is not None
    with pytest.raises(ValueError, match=r"folded .*fold=False"):
        save_weights(fold_for_inference(net), tmp_path / "folded.ckpt")
    assert not (tmp_path / "folded.ckpt").exists()
