"""The shipped checkpoint's recipe as two ``train.py`` commands (pixel stage, then ultrametric
fine-tuning), on a tiny BSDS500-like folder written here (CI needs no data), with an exact
resume of the pixel stage; the pixel stage's device augmentation and its data module."""
import math
from pathlib import Path

import numpy as np
import pytest
import torch
from _train import ROOT, load_ckpt

from hiseg.data.edges import (CROP_DRAWS, BSDS500PixelDataModule, GPUAugmenter, PixelBatch, PixelStep,
                              load_edge_dataset, pack_edge_dataset, step_seed)

TESTS = Path(__file__).resolve().parents[1]


def _boundaries(seg):
    """One-pixel boundaries of a label image (right / bottom neighbour differs)."""
    b = np.zeros(seg.shape, np.uint8)
    b[:, :-1] |= seg[:, :-1] != seg[:, 1:]
    b[:-1, :] |= seg[:-1, :] != seg[1:, :]
    return b


def make_bsds(root: Path, n_train: int = 3, n_val: int = 2, size=(40, 56)) -> Path:
    """A BSDS500-layout folder: random blocky images with 2 annotators each (one portrait
    image in train, as BSDS has)."""
    import cv2
    import scipy.io

    rng = np.random.default_rng(0)
    for split, n in (("train", n_train), ("val", n_val)):
        (root / "images" / split).mkdir(parents=True)
        (root / "groundTruth" / split).mkdir(parents=True)
        for i in range(n):
            h, w = size[::-1] if (split == "train" and i == 0) else size
            seg = 1 + (np.arange(h)[:, None] >= h // 2) + 2 * (np.arange(w)[None, :] >= rng.integers(w // 3, 2 * w // 3))
            colours = rng.uniform(30, 220, (5, 3))
            img = colours[seg] + rng.normal(0, 8, (h, w, 3))
            cv2.imwrite(str(root / "images" / split / f"{split}{i}.jpg"), np.clip(img, 0, 255).astype(np.uint8))
            segs = [seg, np.where(seg == 4, 3, seg)]
            gt = np.empty((1, 2), dtype=object)
            for k, s in enumerate(segs):
                gt[0, k] = {"Segmentation": s.astype(np.uint16), "Boundaries": _boundaries(s)}
            scipy.io.savemat(str(root / "groundTruth" / split / f"{split}{i}.mat"), {"groundTruth": gt})
    return root


def run(tmp_path, config, *extra, timeout=600):
    import os
    import subprocess
    import sys

    cmd = [sys.executable, str(ROOT / "train.py"), "fit", "--config", str(ROOT / "configs" / config), *extra,
           "--trainer.enable_progress_bar", "false"]
    env = dict(os.environ, PYTHONWARNINGS="ignore", PYTHONPATH=str(TESTS))
    return subprocess.run(cmd, cwd=tmp_path, capture_output=True, text=True, timeout=timeout, env=env)


def pixel_args(root, data, *extra):
    return ("--trainer.default_root_dir", str(root), "--data.init_args.data_root", str(data),
            "--data.init_args.crop_size", "32", "--data.init_args.batch_size", "4",
            "--data.init_args.crops_per_epoch", "16", "--data.init_args.num_workers", "0",
            "--model.arch_kwargs", '{"width": 8}', "--model.warmup", "2", "--trainer.max_steps", "10", *extra)


def finetune_args(root, data, *extra):
    return ("--trainer.default_root_dir", str(root), "--data.init_args.data_root", str(data),
            "--data.init_args.crop_size", "32", "--data.init_args.batch_size", "2",
            "--data.init_args.num_workers", "0", *extra)


PDC_TINY = '{"width": 8, "blocks": [1, 1, 1, 1]}'


def pdc_pixel_stage(tmp_path, data, steps: int):
    """configs/bsds500_pdc_pixel.yaml at a tiny width for ``steps`` steps on the CPU: its last.ckpt."""
    r = run(tmp_path, "bsds500_pdc_pixel.yaml", *pixel_args(tmp_path / "pixel", data, "--trainer.max_steps", str(steps)),
            "--model.arch_kwargs", PDC_TINY, "--trainer.precision", "32-true")
    assert r.returncode == 0, r.stderr[-3000:]
    return tmp_path / "pixel/csv/version_0/checkpoints/last.ckpt"


@pytest.mark.slow
def test_recipe_is_two_train_py_commands(tmp_path):
    """Pixel stage then fine-tuning from its last.ckpt; the result loads in hiseg predict's
    pipeline with the fine-tuning's settings, and its network moved in both stages."""
    data = make_bsds(tmp_path / "bsds")
    r = run(tmp_path, "bsds500_pixel.yaml", *pixel_args(tmp_path / "pixel", data))
    assert r.returncode == 0, r.stderr[-3000:]
    pixel = tmp_path / "pixel/csv/version_0/checkpoints/last.ckpt"
    ck = load_ckpt(pixel)
    assert ck["global_step"] == 10 and ck["hyper_parameters"]["pixel_loss"] == "edge"
    r = run(tmp_path, "bsds500_finetune.yaml", *finetune_args(tmp_path / "ft", data),
            "--model.arch_kwargs", '{"width": 8}', "--trainer.max_steps", "3",
            "--model.init_from", str(pixel))
    assert r.returncode == 0, r.stderr[-3000:]
    ft = load_ckpt(tmp_path / "ft/csv/version_0/checkpoints/last.ckpt")
    assert ft["global_step"] == 3
    moved = [k for k, v in ft["state_dict"].items() if v.is_floating_point()
             and not torch.equal(v, ck["state_dict"][k])]
    assert moved, "the fine-tuning did not change the pixel stage's weights"

    from hiseg.segmentation.segmenter import Segmenter

    seg = Segmenter.from_checkpoint(tmp_path / "ft/csv/version_0/checkpoints/last.ckpt")
    assert seg.pipeline.superpixels == "boundary_watershed" and seg.pipeline.linkage == "average"
    res = seg.segment(np.random.default_rng(0).uniform(0, 1, (40, 56, 3)).astype(np.float32))
    assert res.ucm2.shape == (81, 113)


def test_former_state_pt_and_weights_pt_start_a_run(tmp_path):
    """The former pixel-stage script's state.pt (model, opt, step...) and weights.pt still load
    as initial weights."""
    from hiseg.training.module import HierarchicalSegmentationModule
    from hiseg.models import get_model, save_weights

    net = get_model("compact_boundary_net", width=8)
    opt = torch.optim.AdamW(net.parameters())
    torch.save({"model": net.state_dict(), "opt": opt.state_dict(), "gen": torch.Generator().get_state(),
                "step": 5, "total": 10, "log": [[1, 0.5, 1e-3, 0.1]]}, tmp_path / "state.pt")
    save_weights(net, tmp_path / "weights.pt", metadata={"recipe": "hiseg.edge_training"})
    for f in ("state.pt", "weights.pt"):
        m = HierarchicalSegmentationModule(arch_kwargs={"width": 8}, init_from=str(tmp_path / f))
        for k, v in net.state_dict().items():
            assert torch.equal(m.model.state_dict()[k], v), (f, k)


def test_gpu_augmenter_crops_follow_the_draws(tmp_path):
    """Identity draws (no rotation, scale 1, no flip, centred, no jitter) cut the image's centre;
    a flip mirrors it; the batch only depends on the draws."""
    rng = np.random.default_rng(0)
    images = rng.integers(0, 256, (2, 3, 40, 60), dtype=np.uint8)
    cons = rng.uniform(0, 1, (2, 40, 60)).astype(np.float32)
    aug = GPUAugmenter(images, cons, crop=20, n_angles=16, scale_range=(1.0, 1.0), jitter=0.0)
    draws = torch.tensor([[0.0, 0.0, 0.5, 0.9, 0.5, 0.5, 0.5, 0.5, 0.5],
                          [0.0, 0.0, 0.5, 0.1, 0.5, 0.5, 0.5, 0.5, 0.5]])
    b = aug.crops(draws)
    assert isinstance(b, PixelBatch) and b.images.shape == (2, 3, 20, 20) and bool(b.valid.all())
    # the crop centre is the image centre (29.5, 19.5): pixels 20..39 x 10..29
    np.testing.assert_allclose(b.images[0].numpy(), images[0, :, 10:30, 20:40] / 255.0, atol=1e-5)
    np.testing.assert_allclose(b.consensus[0].numpy(), cons[0, 10:30, 20:40], atol=1e-5)
    np.testing.assert_allclose(b.images[1].numpy(), images[0, :, 10:30, 20:40][:, :, ::-1] / 255.0, atol=1e-5)
    # a quarter turn (angle index 4 of 16) is a 90-degree rotation of the centre square
    quarter = draws[:1].clone()
    quarter[0, 1] = 4 / 16 + 1e-6
    rot = aug.crops(quarter).images[0].numpy()
    centre = images[0, :, 10:30, 20:40] / 255.0
    assert min(np.abs(rot - np.rot90(centre, k, axes=(1, 2))).max() for k in (1, 3)) < 1e-5
    torch.testing.assert_close(aug.crops(draws).images, b.images)
    with pytest.raises(ValueError, match="crop draws of shape"):
        aug.crops(torch.zeros(2, CROP_DRAWS - 1))


def test_pixel_data_module_draws_and_errors(tmp_path):
    data = make_bsds(tmp_path / "bsds")
    images, cons = load_edge_dataset(data, "train")
    assert images.shape == (3, 3, 40, 56) and cons.shape == (3, 40, 56)  # the portrait one transposed
    assert set(np.unique(cons)) <= {0.0, 0.5, 1.0}
    assert load_edge_dataset(data, "train+val")[0].shape[0] == 5
    dm = BSDS500PixelDataModule(data, crop_size=16, batch_size=4, crops_per_epoch=10, num_workers=0)
    dm.setup("fit")
    # one item per step (2 steps of 4 crops), a seed keyed by (seed, epoch, index): no tensor, no worker
    assert len(dm.train_set) == dm.steps_per_epoch == 2
    steps = list(dm.train_dataloader())
    assert len(steps) == 2 and all(isinstance(s, PixelStep) for s in steps)
    assert {s.seed for s in steps} == {step_seed(0, 0, i) for i in range(2)}
    assert dm.train_set[(1, (0, 0))] == PixelStep(step_seed(0, 0, 1)) != dm.train_set[(1, (0, 1))]
    assert len({step_seed(*k) for k in ((0, 0, 1), (0, 1, 0), (1, 0, 0), (0, 0, 0))}) == 4
    batch = dm.on_after_batch_transfer(steps[0], 0)
    assert isinstance(batch, PixelBatch) and batch.images.shape == (4, 3, 16, 16)
    torch.testing.assert_close(dm.on_after_batch_transfer(steps[0], 0).images, batch.images, rtol=0, atol=0)
    assert not torch.equal(dm.on_after_batch_transfer(steps[1], 0).images, batch.images)
    # the step's draws are the augmenter's device draws of its seed; a tensor of draws is still accepted
    rnd = dm.augmenter.draws(4, steps[0].seed)
    assert rnd.shape == (4, CROP_DRAWS) and 0 <= float(rnd.min()) and float(rnd.max()) < 1
    torch.testing.assert_close(dm.on_after_batch_transfer(rnd, 0).images, batch.images, rtol=0, atol=0)
    for kwargs, msg in (({"crop_size": 8}, "crop_size"), ({"crops_per_epoch": 2}, "crops_per_epoch"),
                        ({"scale_range": (2.0, 1.0)}, "scale_range"), ({"n_angles": 0}, "n_angles")):
        with pytest.raises(ValueError, match=msg):
            BSDS500PixelDataModule(data, **kwargs)
    with pytest.raises(FileNotFoundError, match="BSDS500"):
        BSDS500PixelDataModule(tmp_path / "nowhere").setup("fit")



def test_packed_edge_dataset_gives_the_folders_arrays(tmp_path):
    """pack_edge_dataset (what a GPU machine is sent): load_edge_dataset of the file equals that
    of the folder, split by split and joined; bad paths and files are refused, nothing half-written."""
    from hiseg.io import DataError

    data = make_bsds(tmp_path / "bsds")
    packed = pack_edge_dataset(data, ["train", "val"], tmp_path / "edges.npz")
    for split, limit in (("train", None), ("val", None), ("train+val", None), ("train", 2)):
        for a, b in zip(load_edge_dataset(packed, split, limit=limit), load_edge_dataset(data, split, limit=limit)):
            np.testing.assert_array_equal(a, b)
    dm = BSDS500PixelDataModule(data, train_data=str(packed), crop_size=16, batch_size=4, crops_per_epoch=8)
    dm.setup("fit")
    np.testing.assert_array_equal(dm.augmenter.images.numpy(), load_edge_dataset(data, "train")[0])
    with pytest.raises(ValueError, match="an .npz file"):
        pack_edge_dataset(data, ["train"], tmp_path / "edges.bin")
    with pytest.raises(FileNotFoundError, match="'test'"):
        pack_edge_dataset(data, ["test"], tmp_path / "t.npz")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bsds", "edges.npz"]
    with pytest.raises(FileNotFoundError, match="split 'test' not in the packed"):
        load_edge_dataset(packed, "test")
    np.savez(tmp_path / "other.npz", x=np.zeros(3))
    with pytest.raises(DataError, match="not a packed edge data set"):
        load_edge_dataset(tmp_path / "other.npz")


def test_packed_edge_dataset_of_bsds500(tmp_path, shared_data):
    """The same on BSDS500 itself (its JPEGs, 4 to 9 annotators), where the data is at hand."""
    root = shared_data / "BSDS500"
    packed = pack_edge_dataset(root, ["train"], tmp_path / "edges.npz", limit=6)
    for a, b in zip(load_edge_dataset(packed, "train"), load_edge_dataset(root, "train", limit=6)):
        np.testing.assert_array_equal(a, b)

def _pixel_module():
    from hiseg.training.module import HierarchicalSegmentationModule

    return HierarchicalSegmentationModule(arch_kwargs={"width": 8}, closest_weight=0, triplet_weight=0,
                                          pixel_loss="edge", pixel_weight=1.0)


def test_pixel_stage_non_finite_loss_on_the_cpu_stops_at_its_step():
    m = _pixel_module()
    good = PixelBatch(torch.rand(2, 3, 16, 16), torch.zeros(2, 16, 16), torch.ones(2, 16, 16, dtype=torch.bool))
    assert math.isfinite(float(m.training_step(good, 0)))
    bad = good._replace(images=torch.full_like(good.images, float("nan")))
    with pytest.raises(FloatingPointError, match="non-finite training loss at step 0"):
        m.training_step(bad, 0)


def test_pixel_stage_deferred_finite_guard():
    """Where the check is deferred (a GPU: no host synchronisation per step), the first bad
    step is remembered on the device, reported at the next check, and no checkpoint is
    written after it (hiseg.training.callbacks.FiniteLossGuard, which the module watches its steps with)."""
    m = _pixel_module()
    g = m.finite_guard
    assert any(c is g for c in m.configure_callbacks())
    g.due = lambda loss, step, every: step == 4  # as on a GPU with log_every_n_steps 5
    losses = [1.0, 0.5, float("nan"), 0.7, 0.6]  # bad at step 2, checked at step 4
    for step in (0, 1):
        g.watch({"loss": torch.tensor(losses[step])}, step)
    g.on_save_checkpoint(None, m, {})  # no bad step yet: written
    g.watch({"loss": torch.tensor(losses[2])}, 2)  # not checked now
    with pytest.raises(FloatingPointError, match="non-finite training loss at step 2"):
        g.on_save_checkpoint(None, m, {})
    g.watch({"loss": torch.tensor(losses[3])}, 3)  # finite again: the first bad step stays
    with pytest.raises(FloatingPointError, match="non-finite training loss at step 2"):
        g.watch({"loss": torch.tensor(losses[4])}, 4)


def test_pixel_batches_need_a_pixel_stage_model():
    """Pixel-stage batches carry no regions: a model with hierarchy terms is refused, naming them."""
    from hiseg.training.module import HierarchicalSegmentationModule

    batch = PixelBatch(torch.rand(2, 3, 16, 16), torch.zeros(2, 16, 16), torch.ones(2, 16, 16, dtype=torch.bool))
    m = HierarchicalSegmentationModule(arch_kwargs={"width": 8})
    with pytest.raises(ValueError, match="closest_weight: 0, triplet_weight: 0, pixel_loss: edge"):
        m.training_step(batch, 0)
    m = HierarchicalSegmentationModule(arch_kwargs={"width": 8}, closest_weight=0, triplet_weight=0,
                                       pixel_loss="edge", pixel_weight=1.0)
    loss = m.pixel_stage_losses(batch)["loss"]
    assert loss.ndim == 0 and math.isfinite(float(loss))
    for kwargs, msg in (({"warmup": -1}, "warmup"), ({"final_lr": 2}, "final_lr"),
                        ({"positive_threshold": 0}, "positive_threshold")):
        with pytest.raises(ValueError, match=msg):
            HierarchicalSegmentationModule(arch_kwargs={"width": 8}, **kwargs)


def test_schedule_warmup_in_steps_or_fraction():
    from hiseg.training.module import HierarchicalSegmentationModule

    class T:
        estimated_stepping_batches = 100

    for warmup, warm_steps in ((0.05, 5), (10, 10)):
        m = HierarchicalSegmentationModule(arch_kwargs={"width": 8}, warmup=warmup, final_lr=0.02)
        m._trainer = T()
        f = [m.lr_factor(s) for s in range(101)]
        assert f[0] == pytest.approx(1 / warm_steps) and f[warm_steps - 1] == pytest.approx(1.0)
        assert f[warm_steps] == pytest.approx(1.0) and f[100] == pytest.approx(0.02)
        assert all(a >= b - 1e-12 for a, b in zip(f[warm_steps:], f[warm_steps + 1:]))


@pytest.mark.slow
def test_gpu_recipe_runs_end_to_end_at_a_tiny_setting(tmp_path):
    """experiments/gpu/gpu_run.py recipe (issue 20's GPU recipe) on the CPU, --dry-run: the pixel stage
    on train+val stops at its budget, resumes from the carried checkpoint, then the merging stage
    exports a checkpoint whose pipeline holds the head; at most 8 files come back."""
    import os
    import subprocess
    import sys

    data = make_bsds(tmp_path / "bsds")
    env = dict(os.environ, PYTHONWARNINGS="ignore")
    cmd = [sys.executable, "experiments/gpu/gpu_run.py", "recipe", "--dry-run", "--bsds", str(data)]
    first = subprocess.run(cmd + ["--out", str(tmp_path / "a"), "--pixel-steps", "4"], cwd=ROOT, env=env,
                           capture_output=True, text=True, timeout=900)
    assert first.returncode == 0, (first.stdout + first.stderr)[-3000:]
    assert load_ckpt(tmp_path / "a/pixel_last.ckpt")["global_step"] == 4
    second = subprocess.run(cmd + ["--out", str(tmp_path / "b"), "--pixel-steps", "6", "--resume",
                                   str(tmp_path / "a/pixel_last.ckpt")],
                            cwd=ROOT, env=env, capture_output=True, text=True, timeout=900)
    assert second.returncode == 0, (second.stdout + second.stderr)[-3000:]
    out = sorted(p.name for p in (tmp_path / "b").iterdir())
    assert len(out) <= 8 and "hiseg_gpu_merge.ckpt" in out, out
    assert load_ckpt(tmp_path / "b/pixel_last.ckpt")["global_step"] == 6
    # the time limit of a resumed command comes on top of the training time the checkpoint has spent
    # (Lightning's Timer restores it: a plain --pixel-minutes would stop the resumed run at once)
    import re

    spent = int(load_ckpt(tmp_path / "a/pixel_last.ckpt")["callbacks"]["Timer"]["time_elapsed"]["train"])
    d, h, mi, sec = map(int, re.search(r"max_time (\d+):(\d+):(\d+):(\d+), (\d+) s spent",
                                       (tmp_path / "b/summary.txt").read_text()).groups()[:4])
    assert ((d * 24 + h) * 60 + mi) * 60 + sec == spent + 5 * 60

    from hiseg.segmentation.segmenter import Segmenter

    seg = Segmenter.from_checkpoint(tmp_path / "b/hiseg_gpu_merge.ckpt")
    assert seg.pipeline.merge_head is not None and seg.pipeline.flip and tuple(seg.pipeline.scales) == (0.5, 1.0)
    res = seg.segment(np.random.default_rng(0).uniform(0, 1, (40, 56, 3)).astype(np.float32))
    assert res.ucm2.shape == (81, 113)


@pytest.mark.slow
def test_pdc_network_goes_through_the_rest_of_the_recipe(tmp_path, capsys):
    """The issue-33 network after its pixel stage (configs/bsds500_pdc_pixel.yaml): fine-tuning
    through average linkage from that checkpoint, then `hiseg ensemble` with the shipped
    `bsds500`; the ensemble runs the pdc member's folded kernels and its map is the mean of
    the members' probabilities, each member's computed by its own Segmenter."""
    from hiseg.cli import main
    from hiseg.segmentation.segmenter import Segmenter
    from hiseg.models import PDCBoundaryNet, load_model

    data = make_bsds(tmp_path / "bsds")
    pixel = pdc_pixel_stage(tmp_path, data, 4)
    arch = PDC_TINY
    ck = load_ckpt(pixel)
    assert ck["global_step"] == 4 and ck["hyper_parameters"]["arch"] == "pdc_boundary_net"
    r = run(tmp_path, "bsds500_finetune.yaml", *finetune_args(tmp_path / "ft", data), "--model.arch", "pdc_boundary_net",
            "--model.arch_kwargs", arch, "--trainer.max_steps", "2", "--model.init_from", str(pixel))
    assert r.returncode == 0, r.stderr[-3000:]
    ft_path = tmp_path / "ft/csv/version_0/checkpoints/last.ckpt"
    ft = load_ckpt(ft_path)
    assert ft["global_step"] == 2 and ft["hyper_parameters"]["arch"] == "pdc_boundary_net"
    assert [k for k, v in ft["state_dict"].items() if v.is_floating_point() and not torch.equal(v, ck["state_dict"][k])]

    out = tmp_path / "ens.ckpt"
    assert main(["ensemble", "bsds500", str(ft_path), "--scales", "1", "-o", str(out)]) == 0
    capsys.readouterr()
    ens = Segmenter.from_checkpoint(out)
    pdc = [m for m in ens.model.members if isinstance(m, PDCBoundaryNet)]
    assert len(pdc) == 1 and not pdc[0].training and load_model(out).arch == "mean_probability_ensemble"
    img = np.random.default_rng(1).uniform(0, 1, (40, 56, 3)).astype(np.float32)
    want = (Segmenter.from_checkpoint("bsds500").boundary_map(img) + Segmenter.from_checkpoint(ft_path).boundary_map(img)) / 2
    np.testing.assert_allclose(ens.boundary_map(img), want, atol=1e-4)
    assert ens.segment(img).ucm2.shape == (81, 113)
