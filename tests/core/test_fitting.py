"""Algorithm 1: fit_ultrametric."""
import numpy as np
import pytest
import torch
from sklearn.datasets import make_blobs

import hiseg
from hiseg.core.fitting import fit_ultrametric
from hiseg.core.builders import grid_graph, knn_graph

from tests.core.test_ultrametric import is_ultrametric_on_graph


@pytest.fixture(scope="module")
def blobs():
    X, y = make_blobs(80, centers=3, random_state=0)
    g, w = knn_graph(X, 5)
    return X, y, g, w


@pytest.mark.parametrize("loss", ["closest", "closest+size", "closest+triplet", "dasgupta", "dasgupta+size"])
def test_fit_returns_an_ultrametric_and_decreases_the_loss(blobs, loss):
    X, y, g, w = blobs
    kw = {}
    if "triplet" in loss:
        lab = np.full(len(y), -1)
        lab[::5] = y[::5]
        kw = dict(labels=lab, margin=1.0)
    res = fit_ultrametric(g, torch.tensor(w), loss=loss, max_iter=60, **kw)
    u = res.ultrametric.numpy()
    assert is_ultrametric_on_graph(g, u)
    assert np.all(u >= 0)
    assert res.loss <= res.history[0] + 1e-12
    assert res.loss == pytest.approx(min(res.history))


def test_closest_fit_beats_subdominant(blobs):
    _, _, g, w = blobs
    sub = hiseg.subdominant_ultrametric(g, torch.tensor(w)).numpy()
    res = fit_ultrametric(g, torch.tensor(w), max_iter=200)
    u, hist = res.ultrametric, res.history
    assert np.mean((u.numpy() - w) ** 2) < 0.5 * np.mean((sub - w) ** 2)
    assert hist[0] == pytest.approx(np.mean((sub - w) ** 2))


def test_best_iterate_and_early_stopping(blobs):
    _, _, g, w = blobs
    res = fit_ultrametric(g, torch.tensor(w), lr=0.05, max_iter=1000, patience=5, min_delta=1e-2)
    u, hist = res.ultrametric, res.history
    assert len(hist) < 1000
    # the returned ultrametric has the best recorded loss
    assert np.mean((u.numpy() - w) ** 2) == pytest.approx(min(hist))


def test_relu_and_custom_loss_and_init(blobs):
    _, _, g, w = blobs
    calls = []

    def J(h, u, wt, w0):
        calls.append(1)
        return ((u - w0) ** 2).sum()

    u = fit_ultrametric(g, w, loss=J, positivity="relu", max_iter=10, init=np.asarray(w) * 0.5,
                        callback=lambda i, v, uu: None).ultrametric
    assert len(calls) >= 10 and is_ultrametric_on_graph(g, u.numpy())


@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=pytest.mark.cuda)])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_float32_and_device_kept(blobs, device, dtype):
    if device == "cuda" and not torch.cuda.is_available():
        pytest.skip("needs a CUDA device")
    _, _, g, w = blobs
    x = torch.tensor(w, dtype=dtype, device=device)
    res = fit_ultrametric(g, x, max_iter=5)
    u = res.ultrametric
    assert u.dtype == dtype and u.device == x.device
    assert is_ultrametric_on_graph(g, u.detach().cpu().numpy().astype(np.float64))
    if device != "cpu" and dtype == torch.float64:
        # on a GPU, the CPU's fit in the same dtype. The first iterate must agree to rounding (the
        # input weights have no ties). Later ones need not: once a step has made weights equal (the
        # projected ultrametric has plateaus), the subgradient goes to whichever tied edge the tree
        # picks, and the GPU's summation order breaks the tie otherwise (seen on an H200: 16 of 251
        # values apart after 5 iterations). The subdominant ultrametric itself is unique, so the
        # losses of the two fits stay close.
        one = fit_ultrametric(g, x, max_iter=1).ultrametric
        ref1 = fit_ultrametric(g, torch.tensor(w, dtype=dtype), max_iter=1).ultrametric
        np.testing.assert_allclose(one.cpu().numpy(), ref1.numpy(), rtol=1e-9, atol=1e-12)
        ref = fit_ultrametric(g, torch.tensor(w, dtype=dtype), max_iter=5)
        assert res.loss == pytest.approx(ref.loss, rel=0.05)


@pytest.mark.parametrize("kw, err, msg", [
    (dict(loss="ward"), ValueError, "unknown loss"),
    (dict(loss="closest+triplet"), ValueError, "needs exactly one of"),
    (dict(positivity="abs"), ValueError, "positivity"),
    (dict(lr=0), ValueError, "lr must be positive"),
    (dict(max_iter=0), ValueError, "max_iter"),
    (dict(optimizer="lbfgs"), ValueError, "optimizer"),
    (dict(init="ward"), ValueError, "init"),
])
def test_bad_options(blobs, kw, err, msg):
    _, _, g, w = blobs
    with pytest.raises(err, match=msg):
        fit_ultrametric(g, torch.tensor(w), **kw)


def test_bad_weights():
    g = grid_graph((3, 3))
    w = torch.rand(g.num_edges, dtype=torch.float64)
    with pytest.raises(ValueError, match="negative"):
        fit_ultrametric(g, w - 2)
    with pytest.raises(ValueError, match="negative"):
        fit_ultrametric(g, w - 2, loss="dasgupta", positivity=None)
    fit_ultrametric(g, w - 2, positivity=None, max_iter=3)  # signed weights are fine without positivity
    with pytest.raises(ValueError, match="squares.*overflow float64; rescale"):
        fit_ultrametric(g, w * 1e300)
    with pytest.raises(ValueError, match="squares.*underflow float64; rescale"):
        fit_ultrametric(g, w * 1e-300)
    with pytest.raises(ValueError, match="underflow float32"):
        fit_ultrametric(g, (w * 1e-30).float())
    w[0] = float("inf")
    with pytest.raises(ValueError, match="infinite"):
        fit_ultrametric(g, w)
    w[0] = float("nan")
    with pytest.raises(ValueError, match="NaN"):
        fit_ultrametric(g, w)


@pytest.mark.parametrize("positivity", ["softplus", "relu", "exp", None])
def test_fit_does_not_depend_on_the_unit_of_the_weights(blobs, positivity):
    # a power of two rescales every float exactly: only the optimiser's epsilon could differ
    _, _, g, w = blobs
    c = 2.0 ** -12
    u = fit_ultrametric(g, torch.tensor(w), positivity=positivity, max_iter=40).ultrametric
    uc = fit_ultrametric(g, torch.tensor(w * c), positivity=positivity, max_iter=40).ultrametric
    np.testing.assert_allclose(uc.numpy(), u.numpy() * c, rtol=1e-6)


def test_average_linkage_start(blobs):
    import higra as hg

    _, _, g, w = blobs
    tree, alt = hg.binary_partition_tree_average_linkage(g.to_higra(), w)
    al = alt[tree.lowest_common_ancestor_preprocess().lca(g.sources, g.targets)]
    res = fit_ultrametric(g, torch.tensor(w), init="average", max_iter=30)
    assert res.history[0] == pytest.approx(np.mean((al - w) ** 2), rel=1e-9)
    assert res.loss <= res.history[0]
    with pytest.raises(ValueError, match="init must be"):
        fit_ultrametric(g, torch.tensor(w), init="ward")


@pytest.mark.parametrize("kind", ["amsgrad", "adam", "sgd"])
@pytest.mark.parametrize("decay", [None, 0.97])
def test_fitting_step_equals_torch_optim(kind, decay):
    """fit_ultrametric's step (hiseg.core.fitting._AdamStep: torch.optim's update functions on
    its own state) makes the updates of torch.optim's classes, bit for bit."""
    from hiseg.core.fitting import _AdamStep

    gen = torch.Generator().manual_seed(0)
    a = torch.randn(50, dtype=torch.float64, generator=gen)
    b = a.clone()
    ours = _AdamStep(a, 0.05, decay, kind, 1e-8)
    opt = (torch.optim.SGD([b], lr=0.05) if kind == "sgd"
           else torch.optim.Adam([b], lr=0.05, amsgrad=kind == "amsgrad", eps=1e-8))
    sched = torch.optim.lr_scheduler.ExponentialLR(opt, decay) if decay else None
    for i in range(30):
        g = torch.randn(50, dtype=torch.float64, generator=gen) * (10.0 ** (i % 3 - 1))
        a.grad, b.grad = g.clone(), g.clone()
        ours()
        opt.step()
        if sched:
            sched.step()
        np.testing.assert_array_equal(a.numpy(), b.numpy())
    a.grad = b.grad = None  # no gradient: no move (the step-size decay goes on)
    before = a.clone()
    ours()
    assert torch.equal(a, before)
