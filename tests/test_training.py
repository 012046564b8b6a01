"""LightningModule, train.py (LightningCLI), checkpoints, resume, DDP on CPU."""
import json

import numpy as np
import pytest
import torch
from _train import csv_rows, load_ckpt, run_train

from hiseg.data.collate import SegmentationGraphDataset, collate_graph_batch
from hiseg.segmentation.superpixels import Superpixels
from hiseg.data.synthetic import SyntheticSegmentation
from hiseg.lightning import HierarchicalSegmentationModule, sample_batch_triplets
from hiseg.ultrametric import subdominant_ultrametric


@pytest.fixture(scope="module")
def batch():
    raw = SyntheticSegmentation(3, size=48, seed=1)
    ds = SegmentationGraphDataset(raw, None, Superpixels(region_size=6.0))
    return collate_graph_batch([ds[i] for i in range(3)])


@pytest.mark.parametrize("linkage", ["average", "single"])
def test_training_step_gradients(batch, linkage):
    from hiseg.ultrametric import average_linkage_ultrametric

    m = HierarchicalSegmentationModule(arch_kwargs={"width": 8},
                                       pipeline={"superpixels": "color_watershed", "linkage": linkage})
    out, u, h = m.compute_losses(batch)
    assert set(out) == {"closest", "triplet", "pixel", "loss"}
    assert torch.isfinite(out["loss"])
    # the ultrametric is the pipeline's linkage on the pooled weights (frontier lengths for average)
    w, _ = m.edge_weights(batch)
    lengths = np.concatenate([r.frontier_lengths() for r in batch.rags])
    ref = (average_linkage_ultrametric(batch.graph, w, lengths) if linkage == "average"
           else subdominant_ultrametric(batch.graph, w))
    torch.testing.assert_close(u, ref)
    out["loss"].backward()
    grads = [p.grad for p in m.parameters() if p.requires_grad]
    assert all(g is not None for g in grads) and sum(float(g.abs().sum()) for g in grads) > 0


def test_boundary_following_superpixels_are_rebuilt_in_the_step(batch):
    """With the inference pipeline's superpixels, the losses see graphs built from the
    network's own boundary map, the same as `hiseg predict` builds."""
    from hiseg.segmentation import Pipeline

    m = HierarchicalSegmentationModule(arch_kwargs={"width": 8},
                                       pipeline={"superpixels": "boundary_watershed", "region_size": 6.0})
    out, u, h = m.compute_losses(batch)
    used = m._last_batch
    with torch.no_grad():
        prob = torch.sigmoid(m(batch.images))[:, 0].numpy()
    for b, rag in enumerate(used.rags):
        hb, wb = batch.image_sizes[b]
        np.testing.assert_array_equal(rag.labels, Pipeline(region_size=6.0).make_superpixels(prob[b, :hb, :wb]))
    out["loss"].backward()
    assert sum(float(p.grad.abs().sum()) for p in m.parameters() if p.grad is not None) > 0


def test_edge_pixel_loss_is_the_pixel_stage_loss(batch):
    """pixel_loss='edge': the pixel term equals edge_training.edge_loss on consensus labels
    of one-pixel-wide annotator boundaries, with the side outputs supervised too."""
    from hiseg.data.targets import mean_boundary
    from hiseg.edge_training import edge_loss

    torch.manual_seed(0)
    m = HierarchicalSegmentationModule(arch_kwargs={"width": 8}, pixel_loss="edge",
                                       closest_weight=0.0, triplet_weight=0.0, pixel_weight=1.0)
    out, _, _ = m.compute_losses(batch)
    fused, sides = m.model(batch.images, return_side_outputs=True)
    cons = torch.from_numpy(np.stack([mean_boundary(s, thick=False) for s in batch.segmentations]))
    # independent labels: >= 30% of annotators positive, none negative
    ref = edge_loss(fused, sides, cons >= 0.3, cons == 0)
    torch.testing.assert_close(out["pixel"], ref)
    out["loss"].backward()
    side_head = [p for n, p in m.model.named_parameters() if "side" in n or "head" in n]
    assert side_head and any(float(p.grad.abs().sum()) > 0 for p in side_head if p.grad is not None)
    with pytest.raises(ValueError, match="pixel_loss"):
        HierarchicalSegmentationModule(arch_kwargs={"width": 8}, pixel_loss="dice")


def test_bf16_logits_give_float32_pooling_trees_and_losses(batch):
    """Under bf16-mixed the network's logits are bf16; pooling, trees and losses stay float32."""
    m = HierarchicalSegmentationModule(arch_kwargs={"width": 8})
    logits = m(batch.images).to(torch.bfloat16)
    out, u, h = m.compute_losses(batch, logits=logits)
    assert u.dtype == torch.float32 and all(v.dtype == torch.float32 for v in out.values())
    ref, _ = m.compute_losses(batch, logits=logits.float())[0], None
    torch.testing.assert_close(out["closest"], ref["closest"])


def test_ultrametric_terms_alone_train_the_network(batch):
    """With the pixel term off, the gradient still reaches the network through the layer."""
    m = HierarchicalSegmentationModule(arch_kwargs={"width": 8}, pixel_weight=0.0)
    out, _, _ = m.compute_losses(batch)
    out["loss"].backward()
    assert sum(float(p.grad.abs().sum()) for p in m.parameters() if p.grad is not None) > 0


def test_triplets_stay_within_images(batch):
    rng = np.random.default_rng(0)
    r, p, n = sample_batch_triplets(batch.sp_labels.numpy(), batch.graph.vertex_ptr, 300, rng)
    gi = batch.graph.vertex_graph_index()
    assert np.all(gi[r] == gi[p]) and np.all(gi[r] == gi[n])
    lab = batch.sp_labels.numpy()
    # for some annotator, ref and pos share a label and neg has another one
    ok = np.zeros(len(r), bool)
    for a in range(lab.shape[0]):
        ok |= (lab[a, r] == lab[a, p]) & (lab[a, r] != lab[a, n]) & (lab[a, r] >= 0)
    assert ok.all()


def test_validation_metrics(batch):
    m = HierarchicalSegmentationModule(arch_kwargs={"width": 8})
    with torch.no_grad():
        res, counts = m._evaluate_batch(batch)
    assert counts.shape == (10, 4) and np.all(counts[:, 0] <= counts[:, 1]) and np.all(counts[:, 2] <= counts[:, 3])
    summ = m._summarise([(res, counts, 3)])
    assert 0 <= summ["boundary_f"] <= 1 and 0 <= summ["boundary_f_ods"] <= 1


def test_test_step_logs_the_validation_metrics_as_test(tmp_path):
    """``train.py test``: the same evaluation as validation, logged under test/."""
    import pytorch_lightning as pl

    from hiseg.data import SyntheticDataModule

    dm = SyntheticDataModule(n_train=2, n_val=3, size=48, val_batch_size=2, superpixel_size=6.0)
    dm.setup("validate")
    dm.test_set = dm.val_set
    m = HierarchicalSegmentationModule(arch_kwargs={"width": 8}, val_threshold=0.45)
    trainer = pl.Trainer(accelerator="cpu", logger=False, enable_progress_bar=False, enable_model_summary=False,
                         default_root_dir=tmp_path)
    (val,) = trainer.validate(m, dm, verbose=False)
    (test,) = trainer.test(m, dm, verbose=False)
    assert val["val/boundary_f"] > 0.2
    for k in ("boundary_f", "boundary_f_ods", "boundary_precision", "boundary_recall", "closest", "pixel"):
        assert test[f"test/{k}"] == val[f"val/{k}"], k


def test_nan_loss_is_a_clear_error(batch):
    m = HierarchicalSegmentationModule(arch_kwargs={"width": 8})
    with torch.no_grad():
        for p in m.parameters():
            p.fill_(float("nan"))
    with pytest.raises((FloatingPointError, ValueError), match="NaN|non-finite"):
        loss = m.training_step(batch, 0)


@pytest.mark.slow
def test_train_py_checkpoints_and_resume(tmp_path):
    r = run_train(tmp_path, "--trainer.max_epochs", "1")
    assert r.returncode == 0, r.stderr[-3000:]
    assert "validation before training" in r.stdout
    lasts = sorted(tmp_path.glob("runs/**/last.ckpt"))
    assert len(lasts) == 1 and list(tmp_path.glob("runs/**/best-*.ckpt"))
    last = lasts[0]
    assert list(tmp_path.glob("runs/synthetic/csv/**/metrics.csv"))
    assert list(tmp_path.glob("runs/synthetic/tensorboard/**/events.*"))
    # the checkpoint carries its hyper-parameters and loads as data
    ck = torch.load(last, map_location="cpu", weights_only=True)
    assert ck["hyper_parameters"]["arch"] == "compact_boundary_net"
    m = HierarchicalSegmentationModule.load_from_checkpoint(last, map_location="cpu", weights_only=True)
    assert m.hparams.arch_kwargs == {"width": 8}
    # resume for one more epoch from a checkpoint written before the random generators and
    # the sampler position were saved (tests/test_resume.py: exact resume of today's checkpoints)
    assert {"hiseg", "SyntheticDataModule"} <= set(ck)
    legacy = {k: v for k, v in ck.items() if k not in ("hiseg", "SyntheticDataModule")}
    legacy["loops"]["fit_loop"]["state_dict"].pop("combined_loader", None)
    torch.save(legacy, tmp_path / "legacy.ckpt")
    r2 = run_train(tmp_path, "--trainer.max_epochs", "2", "--ckpt_path", str(tmp_path / "legacy.ckpt"))
    assert r2.returncode == 0, r2.stderr[-3000:]
    last2 = max(tmp_path.glob("runs/**/last.ckpt"), key=lambda p: p.stat().st_mtime)
    ck2 = load_ckpt(last2)
    assert ck2["epoch"] == 1 and ck2["global_step"] > ck["global_step"]
    # fine-tuning from another run's weights
    r3 = run_train(tmp_path, "--trainer.max_steps", "1", "--model.init_from", str(last))
    assert r3.returncode == 0, r3.stderr[-3000:]


@pytest.mark.slow
def test_ddp_two_cpu_processes(tmp_path):
    """fit under DDP (gloo): 3 validation images shared 2 + 1, the ranks' counts summed."""
    r = run_train(tmp_path, "--trainer.max_steps", "2", "--trainer.accelerator", "cpu",
                  "--trainer.devices", "2", "--trainer.strategy", "ddp",
                  "--data.init_args.n_val", "3", "--data.init_args.val_batch_size", "1",
                  "--model.validate_at_start", "false")
    assert r.returncode == 0, r.stderr[-3000:]
    assert "GLOBAL_RANK: 1" in r.stderr + r.stdout or "ddp" in (r.stderr + r.stdout).lower()
    # 4 training images per rank: one step per epoch, a validation after each
    rows = csv_rows(next(tmp_path.glob("runs/synthetic/csv/*/metrics.csv")))
    f = [float(row["val/boundary_f"]) for row in rows if row.get("val/boundary_f")]
    callbacks = load_ckpt(next(tmp_path.glob("runs/**/last.ckpt")))["callbacks"]
    best = next(v for k, v in callbacks.items() if "val/boundary_f" in k)["best_model_score"]
    assert len(f) == 2 and float(best) == pytest.approx(max(f))  # ModelCheckpoint selects on the logged F


@pytest.mark.slow
def test_ddp_validation_f_is_the_single_process_f(tmp_path):
    """Two CPU processes (gloo, DDP) validate their shares of 5 images (3 and 2, batches of
    2: uneven); the logged boundary F / precision / recall are those of the counts summed
    over the ranks, equal to one process's on all 5 images (the same seeded weights)."""
    common = ("--data.init_args.n_val", "5", "--data.init_args.val_batch_size", "2",
              "--model.val_threshold", "0.45", "--trainer.accelerator", "cpu")
    res = {}
    for devices, extra in (("1", ()), ("2", ("--trainer.strategy", "ddp"))):
        logger = json.dumps({"class_path": "hiseg.lightning.CSVLogger",
                             "init_args": {"save_dir": str(tmp_path), "name": f"devices{devices}"}})
        r = run_train(tmp_path, *common, "--trainer.devices", devices, *extra, "--trainer.logger", logger,
                      sub="validate")
        assert r.returncode == 0, r.stderr[-3000:]
        (row,) = csv_rows(tmp_path / f"devices{devices}/version_0/metrics.csv")
        res[devices] = {k: float(v) for k, v in row.items() if k.startswith("val/")}
    one, two = res["1"], res["2"]
    assert one["val/boundary_f"] > 0.2 and one["val/boundary_f_ods"] > 0.2
    # (the losses are means over batches, which differ: not compared)
    for k in ("boundary_f", "boundary_f_ods", "boundary_precision", "boundary_recall"):
        assert two[f"val/{k}"] == pytest.approx(one[f"val/{k}"], rel=1e-6), k


def test_train_py_starts_clean_and_ends_with_a_summary(tmp_path):
    """No promotional or contradictory start-up messages; a closing summary with F before
    and after, the best checkpoint (which exists) and the next command."""
    import os
    import subprocess
    import sys

    from _train import ROOT, TINY

    cmd = [sys.executable, str(ROOT / "train.py"), "--trainer.default_root_dir", str(tmp_path), *TINY,
           "--trainer.max_epochs", "1"]
    env = {k: v for k, v in os.environ.items() if k != "PYTHONWARNINGS"}
    r = subprocess.run(cmd, cwd=tmp_path, capture_output=True, text=True, timeout=600, env=env)
    out = r.stdout + r.stderr
    assert r.returncode == 0, out[-3000:]
    for noise in ("Tip:", "litlogger", "args parameter is intended", "ckpt_path=None", "no last checkpoint",
                  "LeafSpec", "transfer_batch_to_device", "(best threshold:"):
        assert noise not in out, noise
    assert "validation boundary F before:" in out and "validation boundary F after:" in out
    best = [ln.split(": ", 1)[1] for ln in r.stdout.splitlines() if ln.strip().startswith("best checkpoint")]
    assert best and (tmp_path / best[0]).is_file()
    assert f"next: hiseg predict IMAGE --checkpoint {best[0]}" in r.stdout
    # and that next command works: the checkpoint carries its segmentation pipeline
    from hiseg.inference import Segmenter

    seg = Segmenter.from_checkpoint(tmp_path / best[0])
    assert seg.pipeline.superpixels == "color_watershed" and seg.pipeline.linkage == "average"
    assert seg.segment(np.random.default_rng(0).random((40, 50, 3))).saliency.shape == (40, 50)
    h = subprocess.run([sys.executable, str(ROOT / "train.py"), "--help"], capture_output=True, text=True)
    assert "With no arguments: fit on the embedded synthetic dataset" in h.stdout
