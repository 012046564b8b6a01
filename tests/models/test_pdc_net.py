"""Tests of hiseg.models.pdc_net: each pixel-difference convolution against a per-pixel
evaluation of its definition, gradients by finite differences, the fold (plain convolutions,
BatchNorm merged) against the trainable form, checkpoints, odd sizes and bad inputs."""
from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch import nn

from hiseg.models import ArchitectureMismatchError, PDCBoundaryNet, get_model, load_model, pdc_boundary_net, save_weights
from hiseg.models.pdc_net import PDC_KINDS, PixelDifferenceConv2d, pdc_kernel

# the 8 neighbours clockwise from the top-left corner, written out again here (the truth below
# does not use the module's RING)
CLOCKWISE = [(-1, -1), (-1, 0), (-1, 1), (0, 1), (1, 1), (1, 0), (1, -1), (0, -1)]


def brute_pdc(x: np.ndarray, w: np.ndarray, kind: str, stride: int = 1, groups: int = 1) -> np.ndarray:
    """The definition, pixel by pixel: x (B, C, H, W) zero-padded, w (O, C // groups, n)."""
    b, c, h, wd = x.shape
    o = w.shape[0]
    cpg, opg = c // groups, o // groups
    xp = np.pad(x, ((0, 0), (0, 0), (2, 2), (2, 2)))
    ho, wo = -(-h // stride), -(-wd // stride)
    y = np.zeros((b, o, ho, wo))
    for n in range(b):
        for oc in range(o):
            g = oc // opg
            for i in range(ho):
                for j in range(wo):
                    pi, pj = i * stride + 2, j * stride + 2
                    total = 0.0
                    for k in range(cpg):
                        X = lambda dy, dx: xp[n, g * cpg + k, pi + dy, pj + dx]  # noqa: E731
                        v = w[oc, k]
                        if kind == "cv":
                            total += sum(v[3 * (dy + 1) + dx + 1] * X(dy, dx) for dy in (-1, 0, 1) for dx in (-1, 0, 1))
                        elif kind == "cd":
                            total += sum(v[r] * (X(*CLOCKWISE[r]) - X(0, 0)) for r in range(8))
                        elif kind == "ad":
                            total += sum(v[r] * (X(*CLOCKWISE[r]) - X(*CLOCKWISE[(r + 1) % 8])) for r in range(8))
                        else:  # rd: outer ring pixel minus the inner ring pixel in the same direction
                            total += sum(v[r] * (X(2 * CLOCKWISE[r][0], 2 * CLOCKWISE[r][1]) - X(*CLOCKWISE[r]))
                                         for r in range(8))
                    y[n, oc, i, j] = total
    return y


@pytest.mark.parametrize("kind", PDC_KINDS)
@pytest.mark.parametrize("cin,cout,groups,stride,h,w", [(3, 4, 1, 1, 6, 7), (4, 4, 4, 1, 5, 5), (2, 4, 2, 2, 7, 6),
                                                        (1, 1, 1, 1, 1, 1), (3, 3, 3, 2, 1, 4)])
def test_pdc_equals_its_definition(kind, cin, cout, groups, stride, h, w):
    torch.manual_seed(1)
    conv = PixelDifferenceConv2d(cin, cout, kind, stride=stride, groups=groups).double()
    x = torch.randn(2, cin, h, w, dtype=torch.float64)
    y = conv(x).detach().numpy()
    truth = brute_pdc(x.numpy(), conv.weight.detach().numpy(), kind, stride, groups)
    assert y.shape == truth.shape
    np.testing.assert_allclose(y, truth, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("kind", PDC_KINDS)
def test_pdc_gradients_match_finite_differences(kind):
    torch.manual_seed(2)
    conv = PixelDifferenceConv2d(2, 3, kind).double()
    x = torch.randn(1, 2, 5, 6, dtype=torch.float64, requires_grad=True)
    w = conv.weight.detach().clone().requires_grad_(True)
    f = lambda x, w: torch.nn.functional.conv2d(x, pdc_kernel(w, kind), None, 1, conv.kernel_size // 2)  # noqa: E731
    assert torch.autograd.gradcheck(f, (x, w))
    dw = PixelDifferenceConv2d(3, 3, kind, groups=3).double()
    xd = torch.randn(1, 3, 5, 4, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda x: dw(x), (xd,))


def test_known_kernels():
    ones = torch.ones(1, 1, 8)
    # central differences with equal weights: the 8-neighbour Laplacian
    torch.testing.assert_close(pdc_kernel(ones, "cd")[0, 0],
                               torch.tensor([[1.0, 1, 1], [1, -8, 1], [1, 1, 1]]))
    # angular differences with equal weights telescope around the ring: nothing left
    assert not pdc_kernel(ones, "ad").any()
    rd = pdc_kernel(ones, "rd")[0, 0]
    assert rd.shape == (5, 5) and rd[2, 2] == 0 and rd.sum() == 0
    assert rd[0, 0] == rd[0, 2] == rd[4, 4] == 1 and rd[1, 1] == rd[1, 2] == rd[3, 3] == -1
    assert rd[0, 1] == rd[1, 0] == 0  # between the 8 directions: no weight
    # angular: a single weight at ring position 0 gives +w there and -w at position 1
    e0 = torch.zeros(1, 1, 8)
    e0[..., 0] = 2.0
    k = pdc_kernel(e0, "ad")[0, 0]
    assert k[0, 0] == 2 and k[0, 1] == -2 and k.abs().sum() == 4


@settings(max_examples=25, deadline=None)
@given(kind=st.sampled_from(["cd", "ad", "rd"]), value=st.floats(-3, 3), seed=st.integers(0, 2**16))
def test_differences_vanish_on_a_constant_image(kind, value, seed):
    # away from the zero-padded border, every difference of a constant image is 0
    torch.manual_seed(seed)
    conv = PixelDifferenceConv2d(2, 3, kind).double()
    y = conv(torch.full((1, 2, 9, 9), value, dtype=torch.float64)).detach()
    torch.testing.assert_close(y[..., 2:-2, 2:-2], torch.zeros_like(y[..., 2:-2, 2:-2]), atol=1e-12, rtol=0)


def _trained_like(net: PDCBoundaryNet, dtype=torch.float64) -> PDCBoundaryNet:
    """Random BatchNorm affine parameters and running statistics (as after training)."""
    net = net.to(dtype)
    g = torch.Generator().manual_seed(3)
    with torch.no_grad():
        for m in net.modules():
            if isinstance(m, nn.BatchNorm2d):
                m.weight.copy_(0.5 + torch.rand(m.weight.shape, generator=g, dtype=dtype))
                m.bias.copy_(0.2 * torch.randn(m.bias.shape, generator=g, dtype=dtype))
                m.running_mean.copy_(0.3 * torch.randn(m.running_mean.shape, generator=g, dtype=dtype))
                m.running_var.copy_(0.5 + torch.rand(m.running_var.shape, generator=g, dtype=dtype))
    return net.eval()


@pytest.mark.parametrize("hw", [(45, 61), (1, 5), (17, 8)])
def test_folded_network_equals_the_trainable_form(hw):
    torch.manual_seed(4)
    net = _trained_like(pdc_boundary_net(width=8))
    x = torch.rand(2, 3, *hw, dtype=torch.float64)
    with torch.no_grad():
        ref, ref_sides = net.set_fold_eval(False)(x, return_side_outputs=True)
        folded = net.set_fold_eval(True).fold()
        y, sides = folded(x, return_side_outputs=True)
        on_the_fly = net(x)
    scale = ref.abs().max()
    assert float((y - ref).abs().max() / scale) < 1e-12
    assert float((on_the_fly - ref).abs().max() / scale) < 1e-12
    for s, r in zip(sides, ref_sides):
        assert float((s - r).abs().max() / r.abs().max()) < 1e-12
    # float32: the same within 1e-5 of the output's scale
    net32, x32 = net.float(), x.float()
    with torch.no_grad():
        ref32 = net32.set_fold_eval(False)(x32)
        y32 = net32.set_fold_eval(True).fold()(x32)
    assert float((y32 - ref32).abs().max() / ref32.abs().max()) < 1e-5


def test_fold_makes_plain_convolutions_only():
    net = _trained_like(pdc_boundary_net(width=8), torch.float32)
    folded = net.fold()
    kinds = {type(m) for m in folded.modules()}
    assert not kinds & {PixelDifferenceConv2d, nn.BatchNorm2d}
    assert nn.Conv2d in kinds and folded.folded_ and not folded.training
    assert not net.folded_ and any(isinstance(m, PixelDifferenceConv2d) for m in net.modules())  # original kept
    assert {m.kernel_size for m in folded.modules() if isinstance(m, nn.Conv2d)} >= {(3, 3), (5, 5), (1, 1)}
    with pytest.raises(RuntimeError, match="folded"):
        folded.train()
    folded.eval()  # eval stays allowed
    assert folded.fold() is not folded and folded.fold().folded_
    with pytest.raises(TypeError, match="uint8"):
        folded(torch.zeros(1, 3, 8, 8, dtype=torch.uint8))


def test_checkpoint_holds_the_trainable_form(tmp_path):
    torch.manual_seed(5)
    net = _trained_like(pdc_boundary_net(width=8, blocks=(1, 2, 1, 1)), torch.float32)
    path = save_weights(net, tmp_path / "pdc.ckpt")
    x = torch.rand(1, 3, 33, 40)
    for loaded in (pdc_boundary_net(weights=path), load_model(path), get_model("pdc_boundary_net", weights=str(path))):
        assert isinstance(loaded, PDCBoundaryNet) and loaded.arch_kwargs == net.arch_kwargs and not loaded.folded_
        with torch.no_grad():
            torch.testing.assert_close(loaded.eval()(x), net(x))
            torch.testing.assert_close(loaded.fold()(x), net(x), rtol=1e-5, atol=1e-5)
    # a folded network's state dict is not a checkpoint of the architecture
    torch.save(net.fold().state_dict(), tmp_path / "folded.pt")
    with pytest.raises(ArchitectureMismatchError):
        pdc_boundary_net(weights=tmp_path / "folded.pt", width=8, blocks=(1, 2, 1, 1))


def test_segmenter_runs_the_folded_kernels(tmp_path):
    from hiseg.segmentation.segmenter import Segmenter

    torch.manual_seed(6)
    net = _trained_like(pdc_boundary_net(width=8), torch.float32)
    pipeline = {"superpixels": "boundary_watershed", "linkage": "average", "region_size": 8.0, "sigma": 1.0,
                "scales": [1.0]}
    path = save_weights(net, tmp_path / "pdc.ckpt", metadata={"pipeline": pipeline})
    seg = Segmenter.from_checkpoint(path)
    assert isinstance(seg.model, PDCBoundaryNet) and not seg.model.training
    img = np.random.default_rng(0).random((37, 52, 3)).astype(np.float32)
    pmap = seg.boundary_map(img)
    with torch.no_grad():
        want = torch.sigmoid(net.fold()(torch.from_numpy(img.transpose(2, 0, 1))[None]))[0, 0].numpy()
    np.testing.assert_allclose(pmap, want, atol=1e-5)
    res = seg.segment(img)
    assert res.saliency.shape == (37, 52)


def test_bad_arguments():
    with pytest.raises(ValueError, match="unknown pixel-difference kind 'xd'"):
        PixelDifferenceConv2d(2, 2, "xd")
    with pytest.raises(ValueError, match="groups dividing"):
        PixelDifferenceConv2d(3, 4, "cd", groups=2)
    with pytest.raises(ValueError, match="groups dividing"):
        PixelDifferenceConv2d(0, 4, "cd")
    with pytest.raises(ValueError, match=r"shape \(C_out, C_in, 8\)"):
        pdc_kernel(torch.zeros(2, 2, 9), "cd")
    with pytest.raises(ValueError, match=r"shape \(C_out, C_in, 9\)"):
        pdc_kernel(torch.zeros(2, 9), "cv")
    with pytest.raises(ValueError, match="unknown pixel-difference kind"):
        pdc_kernel(torch.zeros(2, 2, 8), "radial")
    with pytest.raises(ValueError, match="blocks"):
        PDCBoundaryNet(blocks=(1, 2, 3))
    with pytest.raises(ValueError, match="blocks"):
        PDCBoundaryNet(blocks=(1, 0, 1, 1))
    with pytest.raises(ValueError, match="kinds"):
        PDCBoundaryNet(kinds="cd")
    with pytest.raises(ValueError, match="unknown pixel-difference kind"):
        PDCBoundaryNet(kinds=("cd", "zz"))
    with pytest.raises(ValueError, match="width"):
        PDCBoundaryNet(width=0)
    with pytest.raises(ValueError, match="dilations"):
        PDCBoundaryNet(dilations=(1, 0))
    with pytest.raises(ValueError, match="multipliers"):
        PDCBoundaryNet(multipliers=(1, 2, 4))
    net = pdc_boundary_net(width=4)
    with pytest.raises(ValueError, match=r"\(B, 3, H, W\)"):
        net(torch.zeros(1, 4, 8, 8))
    with pytest.raises(TypeError, match="uint8"):
        net(torch.zeros(1, 3, 8, 8, dtype=torch.uint8))


def test_default_width_size_and_kind_cycle():
    net = pdc_boundary_net()
    n = sum(p.numel() for p in net.parameters())
    assert 500_000 <= n <= 1_000_000
    kinds = [m.kind for m in net.modules() if isinstance(m, PixelDifferenceConv2d)]
    assert len(kinds) == 1 + 3 + 4 + 4 + 4
    assert kinds[:4] == ["cd", "ad", "rd", "cv"] and kinds[4:8] == ["cd", "ad", "rd", "cv"]
    assert net.arch == "pdc_boundary_net" and net.arch_kwargs["width"] == 40


def test_forward_makes_no_index_tensor_after_the_first_call():
    """The kernels gather the weights through one index per kind and device, made at the first call
    and kept: no later call makes a tensor from host data (on a GPU, a copy the host would wait for at
    each pixel-difference convolution of every step), in training and in the folded eval form. The
    first call after the cache is emptied does make them: the check sees what it looks for."""
    from torch.utils._python_dispatch import TorchDispatchMode

    from hiseg.models.pdc_net import _cell_index

    class Ops(TorchDispatchMode):
        def __init__(self):
            super().__init__()
            self.names = set()

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            self.names.add(func.__name__)
            return func(*args, **(kwargs or {}))

    torch.manual_seed(0)
    net = pdc_boundary_net(width=8, blocks=(1, 1, 1, 1))
    x = torch.rand(1, 3, 24, 24)
    _cell_index.cache_clear()
    with Ops() as first:
        net(x)
    assert any(n.startswith("lift_fresh") for n in first.names), sorted(first.names)
    for mode in (net.train, net.eval):
        mode()
        net(x)
        with Ops() as ops:
            net(x)[0].sum()
        assert not {n for n in ops.names if n.startswith(("lift_fresh", "_index_put", "index_put"))}, sorted(ops.names)


def test_kernel_index_made_in_inference_mode_serves_training():
    """The gather's index is kept across calls: one first made under ``torch.inference_mode`` (a
    prediction or a validation before any training step) must still be savable for a training step's
    backward."""
    from hiseg.models.pdc_net import _cell_index

    torch.manual_seed(0)
    net = pdc_boundary_net(width=8, blocks=(1, 1, 1, 1))
    x = torch.rand(1, 3, 24, 24)
    _cell_index.cache_clear()
    with torch.inference_mode():
        net.eval()(x)
    net.train()(x)[0].sum().backward()
    assert all(p.grad is not None for p in net.parameters() if p.requires_grad)


@pytest.mark.parametrize("mode", ["no_grad", "inference_mode"])
def test_inference_in_place_path_gives_the_same_bits(mode):
    """Without gradient the blocks and side heads add, rectify and scale in place (fewer
    allocations): the outputs are bit for bit those of the gradient path, folded or not, and
    the input is left untouched."""
    torch.manual_seed(5)
    net = _trained_like(pdc_boundary_net(width=8))
    x = torch.rand(2, 3, 37, 53, dtype=torch.float64)
    x0 = x.clone()
    for fold_eval in (False, True):
        net.set_fold_eval(fold_eval)
        with torch.enable_grad():
            ref, ref_sides = net(x, return_side_outputs=True)
        with getattr(torch, mode)():
            y, sides = net(x, return_side_outputs=True)
        assert torch.equal(y, ref.detach()) and all(torch.equal(s, r.detach()) for s, r in zip(sides, ref_sides))
    assert torch.equal(x, x0)
