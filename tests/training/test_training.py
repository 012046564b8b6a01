"""LightningModule, train.py (LightningCLI), checkpoints, resume, DDP on CPU."""
import json

import numpy as np
import pytest
import torch
from _train import csv_rows, load_ckpt, run_train

from hiseg.data.collate import collate_graph_batch
from hiseg.data.graphs import SegmentationGraphDataset
from hiseg.segmentation.superpixels import Superpixels
from hiseg.data.synthetic import SyntheticSegmentation
from hiseg.training.module import HierarchicalSegmentationModule
from hiseg.core.losses import sample_batch_triplets


@pytest.fixture(scope="module")
def batch():
    raw = SyntheticSegmentation(3, size=48, seed=1)
    ds = SegmentationGraphDataset(raw, None, Superpixels(region_size=6.0))
    return collate_graph_batch([ds[i] for i in range(3)])


def _brute_pooled_weights(batch, prob):
    """Mean of 0.5 (p_a + p_b) over the 4-adjacent pixel pairs of every pair of adjacent
    superpixels, by a loop over the pixels (independent of the frontier index tensors)."""
    w = np.zeros(batch.graph.num_edges)
    for b, rag in enumerate(batch.rags):
        lab, p = rag.labels, prob[b, :rag.labels.shape[0], :rag.labels.shape[1]]
        vals = {}
        for la, lb, pa, pb in ((lab[:, :-1], lab[:, 1:], p[:, :-1], p[:, 1:]),
                               (lab[:-1], lab[1:], p[:-1], p[1:])):
            for i, j, x, y in zip(la.ravel(), lb.ravel(), pa.ravel(), pb.ravel()):
                if i != j:
                    vals.setdefault((min(i, j), max(i, j)), []).append(0.5 * (x + y))
        g = rag.graph
        for e, (i, j) in enumerate(zip(g.sources, g.targets)):
            w[batch.graph.edge_ptr[b] + e] = np.mean(vals[(min(i, j), max(i, j))])
    return w


def _brute_linkage(src, dst, n, w, lengths, linkage):
    """Agglomerate adjacent clusters, the pair of smallest linkage first (single: the
    smallest edge between them; average: the length-weighted mean edge); an edge's value
    is the linkage at which its two ends join."""
    lab, u, open_ = np.arange(n), np.zeros(len(w)), np.ones(len(w), bool)
    while True:
        a, b = lab[src], lab[dst]
        cross = np.flatnonzero(a != b)
        if cross.size == 0:
            break
        link = {}
        for e in cross:
            k = (min(a[e], b[e]), max(a[e], b[e]))
            num, den, lo = link.get(k, (0.0, 0.0, np.inf))
            link[k] = (num + lengths[e] * w[e], den + lengths[e], min(lo, w[e]))
        value = {k: (v[2] if linkage == "single" else v[0] / v[1]) for k, v in link.items()}
        (ca, cb), level = min(value.items(), key=lambda kv: kv[1])
        lab[lab == cb] = ca
        joined = open_ & (lab[src] == lab[dst])
        u[joined], open_[joined] = level, False
    return u


@pytest.mark.parametrize("linkage", ["average", "single"])
def test_training_step_gradients(batch, linkage):
    m = HierarchicalSegmentationModule(arch_kwargs={"width": 8},
                                       pipeline={"superpixels": "color_watershed", "linkage": linkage})
    out, u, h, _ = m.compute_losses(batch)
    assert set(out) == {"closest", "triplet", "pixel", "loss"}
    assert torch.isfinite(out["loss"])
    # the ultrametric is the pipeline's linkage (frontier lengths for average) on the
    # frontier means of the network's boundary map: both recomputed by brute force
    with torch.no_grad():
        prob = torch.sigmoid(m(batch.images))[:, 0].double().numpy()
    w = _brute_pooled_weights(batch, prob)
    lengths = np.concatenate([np.diff(r.frontier_ptr) for r in batch.rags]).astype(float)
    ref = _brute_linkage(batch.graph.sources, batch.graph.targets, batch.graph.num_vertices, w, lengths, linkage)
    np.testing.assert_allclose(u.detach().double().numpy(), ref, rtol=1e-5, atol=1e-6)
    # closest term: mean squared distance to the annotators' fraction
    torch.testing.assert_close(out["closest"].double(), ((u.double() - batch.edge_target.double()) ** 2).mean())
    out["loss"].backward()
    grads = [p.grad for p in m.parameters() if p.requires_grad]
    assert all(g is not None for g in grads) and sum(float(g.abs().sum()) for g in grads) > 0


def test_boundary_following_superpixels_are_rebuilt_in_the_step(batch):
    """With the inference pipeline's superpixels, the losses see graphs built from the
    network's own boundary map, the same as `hiseg predict` builds."""
    from hiseg.segmentation import Pipeline

    m = HierarchicalSegmentationModule(arch_kwargs={"width": 8},
                                       pipeline={"superpixels": "boundary_watershed", "region_size": 6.0})
    out, u, h, used = m.compute_losses(batch)  # the graphs the losses were computed on
    with torch.no_grad():
        prob = torch.sigmoid(m(batch.images))[:, 0].numpy()
    for b, rag in enumerate(used.rags):
        hb, wb = batch.image_sizes[b]
        np.testing.assert_array_equal(rag.labels, Pipeline(region_size=6.0).make_superpixels(prob[b, :hb, :wb]))
    out["loss"].backward()
    assert sum(float(p.grad.abs().sum()) for p in m.parameters() if p.grad is not None) > 0


def test_a_model_that_rebuilds_superpixels_switches_the_loaders_off(tmp_path):
    """The model hands its pipeline to the data module: one that builds the superpixels from
    the prediction makes the loaders compute none, and the losses equal those of a batch
    that had them (the step rebuilds them)."""
    import pytorch_lightning as pl

    from hiseg.data import SyntheticDataModule

    kw = dict(n_train=2, n_val=2, size=48, batch_size=2, val_batch_size=2)
    m = HierarchicalSegmentationModule(arch_kwargs={"width": 8}, validate_at_start=False,
                                       pipeline={"superpixels": "boundary_watershed", "region_size": 6.0})
    dm = SyntheticDataModule(**kw)
    trainer = pl.Trainer(accelerator="cpu", max_steps=1, logger=False, enable_checkpointing=False,
                         enable_progress_bar=False, enable_model_summary=False, default_root_dir=tmp_path)
    trainer.fit(m, dm)
    assert dm.pipeline is m.pipeline
    assert not dm.computes_superpixels and not next(iter(dm.train_dataloader())).has_graph
    lean = next(iter(dm.val_dataloader()))
    full = next(iter(SyntheticDataModule(**kw).val_dataloader()))
    assert full.has_graph and not lean.has_graph
    m.eval()
    out = []
    with torch.no_grad():
        for x in (lean, full):
            m.on_validation_batch_start(x, 0)  # the same triplets
            out.append(m.compute_losses(x).losses)
    a, b = out
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def test_the_loaders_compute_the_pipelines_superpixels(tmp_path):
    """An image-based pipeline: the loaders' superpixels are exactly its make_superpixels
    (8 px for the default pipeline, whatever the data module's former default of 12 px)."""
    import pytorch_lightning as pl

    from hiseg.data import BSDS500DataModule, SyntheticDataModule

    m = HierarchicalSegmentationModule(arch_kwargs={"width": 8}, validate_at_start=False,
                                       pipeline={"superpixels": "color_watershed", "region_size": 6.0})
    dm = SyntheticDataModule(n_train=2, n_val=2, size=48, batch_size=2, val_batch_size=2)
    trainer = pl.Trainer(accelerator="cpu", max_steps=1, logger=False, enable_checkpointing=False,
                         enable_progress_bar=False, enable_model_summary=False, default_root_dir=tmp_path)
    trainer.fit(m, dm)
    val = next(iter(dm.val_dataloader()))
    for b, labels in enumerate(val.superpixels):
        image = val.images[b].permute(1, 2, 0).numpy()
        np.testing.assert_array_equal(labels, m.pipeline.make_superpixels(image[..., 0], image))
    assert BSDS500DataModule().superpixel_fn.pipeline.region_size == 8.0  # the default model's


def test_color_superpixel_pipeline_needs_loader_superpixels(batch, tmp_path):
    import pytorch_lightning as pl

    from hiseg.data import SyntheticDataModule

    from hiseg.segmentation import Pipeline

    m = HierarchicalSegmentationModule(arch_kwargs={"width": 8}, validate_at_start=False)
    dm = SyntheticDataModule(n_train=2, n_val=2, size=48, batch_size=2)
    dm.use_pipeline(Pipeline(superpixels="boundary_watershed"))  # loaders without superpixels
    dm.setup("validate")
    with pytest.raises(ValueError, match="no superpixels"):
        m.compute_losses(next(iter(dm.val_dataloader())))


def test_edge_pixel_loss_is_the_pixel_stage_loss(batch):
    """pixel_loss='edge': the pixel term equals hiseg.core.losses.edge_loss on consensus labels
    of one-pixel-wide annotator boundaries, with the side outputs supervised too."""
    from hiseg.data.targets import mean_boundary
    from hiseg.core.losses import edge_loss

    torch.manual_seed(0)
    m = HierarchicalSegmentationModule(arch_kwargs={"width": 8}, pixel_loss="edge",
                                       closest_weight=0.0, triplet_weight=0.0, pixel_weight=1.0)
    out = m.compute_losses(batch).losses
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
    out, u, h, _ = m.compute_losses(batch, logits=logits)
    assert u.dtype == torch.float32 and all(v.dtype == torch.float32 for v in out.values())
    ref = m.compute_losses(batch, logits=logits.float()).losses
    torch.testing.assert_close(out["closest"], ref["closest"])


def test_ultrametric_terms_alone_train_the_network(batch):
    """With the pixel term off, the gradient still reaches the network through the layer."""
    m = HierarchicalSegmentationModule(arch_kwargs={"width": 8}, pixel_weight=0.0)
    out = m.compute_losses(batch).losses
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
    """The module's validation counts against independent truths: the BSDS benchmark's own
    reading (hiseg.metrics: the ucm2 as a prediction file, its >= thresholds, thinning and
    matching) of the same ucm2 at the same thresholds; the ground-truth partition's ucm2 has
    precision 1 at every threshold; an all-zero ultrametric has F = 0 against the
    annotators' boundary pixels counted by hand."""
    from hiseg.data.graphs import make_graph_sample
    from hiseg.training.module import VAL_THRESHOLDS, LossResult
    from hiseg.metrics.matching import BoundaryMatcher, boundary_counts, seg_to_boundaries
    from hiseg.metrics.predictions import Prediction
    from hiseg.segmentation.saliency import ucm2_from_rag
    from hiseg.segmentation.superpixels import make_connected

    m = HierarchicalSegmentationModule(arch_kwargs={"width": 8}, val_threshold=0.3)
    with torch.no_grad():
        res, counts = m.evaluate_batch(batch)
        u = m.compute_losses(batch).ultrametric.numpy()
    thr = np.concatenate([[0.3], VAL_THRESHOLDS])
    ref = np.zeros_like(counts)
    for b, rag in enumerate(batch.rags):
        ucm2 = ucm2_from_rag(rag, u[batch.graph.edge_ptr[b]:batch.graph.edge_ptr[b + 1]])
        matcher = BoundaryMatcher([seg_to_boundaries(s) for s in batch.segmentations[b]])
        table = boundary_counts(Prediction("ucm2", ucm2).boundary_maps(thr), matcher, thr).as_table()
        ref += table[:, 1:].astype(np.int64)
    np.testing.assert_array_equal(counts, ref)
    assert counts[:, 1].min() > 0 and counts[:, 3].max() > 0  # ground-truth and predicted boundary pixels
    m.val_metrics.update(res, counts, 3)
    summ = m.val_metrics.compute()
    p, r = counts[0, 2] / counts[0, 3], counts[0, 0] / counts[0, 1]
    assert summ["boundary_f"] == pytest.approx(2 * p * r / (p + r))
    # superpixels = one annotator's regions: u = 1 on every edge draws that partition
    raw = SyntheticSegmentation(2, size=48, n_annotators=1, seed=3)
    gt = collate_graph_batch([make_graph_sample(dict(raw[i], superpixels=make_connected(raw[i]["segmentations"][0])),
                                                None) for i in range(2)])
    n_gt = sum(int(seg_to_boundaries(s[0]).sum()) for s in gt.segmentations)
    for u_const, want in ((1.0, "precision 1"), (0.0, "F 0")):
        m.compute_losses = lambda b, c=u_const: LossResult({"loss": torch.zeros(())},
                                                           torch.full_like(b.edge_target, c), None, b)
        res, c = m.evaluate_batch(gt)
        m.val_metrics.reset()
        m.val_metrics.update(res, c, 2)
        summ = m.val_metrics.compute()
        assert np.all(c[:, 1] == n_gt)
        if want == "F 0":
            assert np.all(c[:, [0, 2, 3]] == 0) and summ["boundary_f"] == summ["boundary_f_ods"] == 0
        else:
            assert np.all(c[:, 2] == c[:, 3]) and c[0, 3] > 0 and summ["boundary_precision"] == 1


def test_segmentation_metrics_are_f_of_summed_counts():
    """F of the counts summed over batches (not the mean of the batches' Fs), losses as
    means per image, a loss missing from a batch counted as 0 there; empty: no numbers."""
    from hiseg.training.module import SegmentationMetrics

    met = SegmentationMetrics(n_thresholds=3)
    # counts per threshold: (matched GT, GT, matched predicted, predicted)
    c1 = np.array([[10, 20, 30, 40], [5, 20, 6, 10], [0, 20, 0, 0]])
    c2 = np.array([[30, 40, 10, 10], [10, 40, 2, 10], [0, 40, 0, 0]])
    met.update({"closest": 0.5, "triplet": 0.2, "loss": 1.0}, c1, 2)
    met.update({"closest": 0.8, "loss": 2.0}, c2, 1)
    out = met.compute()
    rec, prec = np.array([40 / 60, 15 / 60, 0.0]), np.array([40 / 50, 8 / 20, 0.0])
    f = [2 * p * r / (p + r) if p + r else 0.0 for p, r in zip(prec, rec)]
    assert out["boundary_f"] == pytest.approx(f[0])
    assert out["boundary_precision"] == pytest.approx(prec[0]) and out["boundary_recall"] == pytest.approx(rec[0])
    assert out["boundary_f_ods"] == pytest.approx(max(f[1:]))
    assert out["closest"] == pytest.approx((0.5 * 2 + 0.8) / 3) and out["loss"] == pytest.approx(4 / 3)
    assert out["triplet"] == pytest.approx(0.4 / 3) and "pixel" not in out
    met.reset()
    with pytest.warns(UserWarning, match="compute"):
        assert met.compute() == {}
    with pytest.raises(ValueError, match="boundary counts of shape"):
        met.update({}, np.zeros((2, 4)), 1)
    with pytest.raises(ValueError, match="unknown losses"):
        met.update({"dice": 1.0}, c1, 1)


def test_test_step_logs_the_validation_metrics_as_test(tmp_path):
    """``train.py test``: the same evaluation as validation, logged under test/."""
    import pytorch_lightning as pl

    from hiseg.data import SyntheticDataModule

    dm = SyntheticDataModule(n_train=2, n_val=3, size=48, val_batch_size=2)
    dm.setup("validate")
    dm.test_set = dm.val_set
    m = HierarchicalSegmentationModule(arch_kwargs={"width": 8}, val_threshold=0.45,
                                       pipeline={"superpixels": "color_watershed", "region_size": 6.0})
    trainer = pl.Trainer(accelerator="cpu", logger=False, enable_progress_bar=False, enable_model_summary=False,
                         default_root_dir=tmp_path)
    (val,) = trainer.validate(m, dm, verbose=False)
    (test,) = trainer.test(m, dm, verbose=False)
    assert val["val/boundary_f"] > 0.2
    for k in ("boundary_f", "boundary_f_ods", "boundary_precision", "boundary_recall", "closest", "pixel"):
        assert test[f"test/{k}"] == val[f"val/{k}"], k


def test_non_finite_loss_stops_the_step(batch):
    """Finite edge weights but a NaN pixel target: the loss guard fires (on the host, from
    the step's one copy: the closest and triplet terms are finite with finite weights)."""
    from dataclasses import replace

    m = HierarchicalSegmentationModule(arch_kwargs={"width": 8})
    bad = replace(batch, boundary=torch.full_like(batch.boundary, float("nan")))
    assert torch.isfinite(m.compute_losses(batch).losses["loss"])
    with pytest.raises(FloatingPointError, match="non-finite training loss at step 0"):
        m.training_step(bad, 0)


@pytest.mark.parametrize("superpixels", ["color_watershed", "boundary_watershed"])
def test_diverged_network_is_a_clear_error(batch, superpixels):
    m = HierarchicalSegmentationModule(arch_kwargs={"width": 8}, pipeline={"superpixels": superpixels})
    with torch.no_grad():
        for p in m.parameters():
            p.fill_(float("nan"))
    with pytest.raises(FloatingPointError, match="non-finite boundary map .* the network diverged"):
        m.training_step(batch, 0)


@pytest.mark.slow
def test_train_py_checkpoints_and_resume(tmp_path):
    r = run_train(tmp_path, "--trainer.max_epochs", "1")
    assert r.returncode == 0, r.stderr[-3000:]
    assert "validation before training" in r.stdout
    lasts = sorted(tmp_path.glob("**/last.ckpt"))
    assert len(lasts) == 1 and list(tmp_path.glob("**/best-*.ckpt"))
    last = lasts[0]
    assert list(tmp_path.glob("csv/**/metrics.csv"))
    assert list(tmp_path.glob("tensorboard/**/events.*"))
    # the checkpoint carries its hyper-parameters and loads as data
    ck = torch.load(last, map_location="cpu", weights_only=True)
    assert ck["hyper_parameters"]["arch"] == "compact_boundary_net"
    m = HierarchicalSegmentationModule.load_from_checkpoint(last, map_location="cpu", weights_only=True)
    assert m.hparams.arch_kwargs == {"width": 8}
    # resume for one more epoch from a checkpoint written before the random generators and
    # the sampler position were saved (tests/training/test_resume.py: exact resume of today's checkpoints)
    assert {"hiseg", "SyntheticDataModule"} <= set(ck)
    legacy = {k: v for k, v in ck.items() if k not in ("hiseg", "SyntheticDataModule")}
    legacy["loops"]["fit_loop"]["state_dict"].pop("combined_loader", None)
    torch.save(legacy, tmp_path / "legacy.ckpt")
    r2 = run_train(tmp_path, "--trainer.max_epochs", "2", "--ckpt_path", str(tmp_path / "legacy.ckpt"))
    assert r2.returncode == 0, r2.stderr[-3000:]
    last2 = max(tmp_path.glob("**/last.ckpt"), key=lambda p: p.stat().st_mtime)
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
    # 8 training images in batches of 4 shared by 2 processes: one step per epoch (one
    # process would take 2), so the 2 steps span 2 epochs, with a validation after each
    last = load_ckpt(next(tmp_path.glob("**/last.ckpt")))
    assert (last["epoch"], last["global_step"]) == (1, 2)
    rows = csv_rows(next(tmp_path.glob("csv/*/metrics.csv")))
    f = [float(row["val/boundary_f_ods"]) for row in rows if row.get("val/boundary_f_ods")]
    callbacks = last["callbacks"]
    best = next(v for k, v in callbacks.items() if "val/boundary_f_ods" in k)["best_model_score"]
    assert len(f) == 2 and float(best) == pytest.approx(max(f))  # ModelCheckpoint selects on the logged ODS F


@pytest.mark.slow
def test_ddp_validation_f_is_the_single_process_f(tmp_path):
    """Two CPU processes (gloo, DDP) validate their shares of 5 images (3 and 2, batches of
    2: uneven); the logged boundary F / precision / recall are those of the counts summed
    over the ranks, equal to one process's on all 5 images (the same seeded weights)."""
    common = ("--data.init_args.n_val", "5", "--data.init_args.val_batch_size", "2",
              "--model.val_threshold", "0.45", "--trainer.accelerator", "cpu")
    res = {}
    for devices, extra in (("1", ()), ("2", ("--trainer.strategy", "ddp"))):
        logger = json.dumps({"class_path": "hiseg.training.module.CSVLogger",
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


@pytest.mark.slow
def test_train_py_starts_clean_and_ends_with_a_summary(tmp_path):
    """No promotional or contradictory start-up messages; a closing summary with F before
    and after, the checkpoints, and either the next command (F > 0) or, for a run whose F ends
    at 0 (this 2-step run from scratch), a warning with what to try and no recommended checkpoint."""
    import os
    import re
    import subprocess
    import sys

    from _train import ROOT, TINY

    cmd = [sys.executable, str(ROOT / "train.py"), "--config", str(ROOT / "configs" / "synthetic.yaml"),
           "--trainer.default_root_dir", str(tmp_path), *TINY, "--trainer.max_epochs", "1"]
    env = {k: v for k, v in os.environ.items() if k != "PYTHONWARNINGS"}
    r = subprocess.run(cmd, cwd=tmp_path, capture_output=True, text=True, timeout=600, env=env)
    out = r.stdout + r.stderr
    assert r.returncode == 0, out[-3000:]
    for noise in ("Tip:", "litlogger", "args parameter is intended", "ckpt_path=None", "no last checkpoint",
                  "LeafSpec", "transfer_batch_to_device", "(best threshold:"):
        assert noise not in out, noise
    assert "validation boundary F of the starting model:" in out and "validation boundary F at the last step:" in out
    f_after = float(re.search(r"validation boundary F at the last step: +([0-9.]+)", r.stdout).group(1))
    best = [ln.split(": ", 1)[1] for ln in r.stdout.splitlines() if ln.strip().startswith("best checkpoint")]
    last = [ln.split(": ", 1)[1] for ln in r.stdout.splitlines() if ln.strip().startswith("last checkpoint")]
    assert best and last and (tmp_path / last[0]).is_file()
    # the summary's figures are metrics.csv's: the start (val_start/, step 0), the best checkpoint's
    # monitored figure (the highest val/boundary_f_ods) and the last validation
    from _train import csv_rows

    rows = csv_rows(next(tmp_path.rglob("metrics.csv")))
    start = [float(x["val_start/boundary_f"]) for x in rows if x.get("val_start/boundary_f")]
    vals = [(float(x["val/boundary_f"]), float(x["val/boundary_f_ods"])) for x in rows if x.get("val/boundary_f")]
    assert len(start) == 1 and vals
    assert f"validation boundary F of the starting model: {start[0]:.4f} at threshold 0.5" in r.stdout
    assert f"validation boundary F at the last step:         {vals[-1][0]:.4f} at threshold 0.5, " \
           f"{vals[-1][1]:.4f} at the best of 9 thresholds" in r.stdout
    # synthetic.yaml chooses its best checkpoint on the F at the best threshold (val/boundary_f_ods)
    assert f"best checkpoint (val/boundary_f_ods = {max(v[1] for v in vals):.4f})" in r.stdout
    if "NOT IMPROVED" in r.stdout:  # no better than the start: no new checkpoint recommended
        assert "next:" not in r.stdout
    elif f_after > 0:
        assert f"next: hiseg predict IMAGE --checkpoint {best[0]} -o predictions/" in r.stdout and "WARNING" not in r.stdout
    else:
        assert "WARNING: validation boundary F ended at 0" in r.stdout and "configs/folder_finetune.yaml" in r.stdout
        # the best checkpoint is marked unusable when its monitored F (at the best threshold) is 0 too
        assert best[0].endswith("(F 0: not worth using)") == (max(v[1] for v in vals) == 0) and "next:" not in r.stdout
    # the checkpoint carries its segmentation pipeline: hiseg predict can use it
    from hiseg.segmentation.segmenter import Segmenter

    seg = Segmenter.from_checkpoint(tmp_path / last[0])
    assert seg.pipeline.superpixels == "color_watershed" and seg.pipeline.linkage == "average"
    assert seg.segment(np.random.default_rng(0).random((40, 50, 3))).saliency.shape == (40, 50)
    h = subprocess.run([sys.executable, str(ROOT / "train.py"), "--help"], capture_output=True, text=True)
    assert "With no arguments: fit on the embedded synthetic dataset" in h.stdout
    # whole sentences: no subcommand help cut at the end of its docstring's first line
    assert "make sure you never run on your\n" not in h.stdout and h.stdout.rstrip().endswith(".")
    h = subprocess.run([sys.executable, str(ROOT / "train.py"), "fit", "--help"], capture_output=True, text=True)
    ckpt_help = h.stdout[h.stdout.index("--ckpt_path CKPT_PATH\n"):]
    assert "Path/URL" not in h.stdout and "URLs are refused" in ckpt_help.split("--", 2)[1].replace("\n", " ")


def _fake_fit(f_after, best_score, tmp_path, f_before=0.07, init_from=None, monitor="val/boundary_f", mode="max",
              ods_before=0.2, ods_after=0.3, loss_before=0.9, loss_after=0.8):
    """(trainer, model) stand-ins for :func:`hiseg.training.summary.fit_summary`: the starting model's
    validation figures (``initial_validation``), the last step's (``callback_metrics``) and the
    best checkpoint's score on ``monitor``."""
    from types import SimpleNamespace

    from pytorch_lightning.callbacks import ModelCheckpoint

    best = ModelCheckpoint(dirpath=tmp_path, monitor=monitor, mode=mode)
    best.best_model_path, best.best_model_score = str(tmp_path / "best.ckpt"), torch.tensor(best_score)
    last = SimpleNamespace(last_model_path=str(tmp_path / "last.ckpt"))
    trainer = SimpleNamespace(current_epoch=3, global_step=12, callbacks=[best, last],
                              callback_metrics={"val/boundary_f": torch.tensor(f_after),
                                                "val/boundary_f_ods": torch.tensor(ods_after),
                                                "val/loss": torch.tensor(loss_after)})
    model = SimpleNamespace(initial_validation={"boundary_f": f_before, "boundary_f_ods": ods_before,
                                                "loss": loss_before},
                            hparams=SimpleNamespace(val_threshold=0.5, init_from=init_from))
    return trainer, model


def test_fit_summary_recommends_no_degenerate_checkpoint(tmp_path):
    from hiseg.training.summary import fit_summary

    good = fit_summary(*_fake_fit(0.4, 0.45, tmp_path))
    assert f"next: hiseg predict IMAGE --checkpoint {tmp_path / 'best.ckpt'} -o predictions/" in good
    assert "WARNING" not in good and "NOT IMPROVED" not in good
    assert ("validation boundary F of the starting model: 0.0700 at threshold 0.5, 0.2000 at the best of 9 "
            "thresholds") in good
    assert "validation boundary F at threshold 0.5 of the best checkpoint: 0.4500" in good
    assert "validation boundary F at the last step:         0.4000 at threshold 0.5, 0.3000 at the best" in good
    assert "IMPROVED on the starting model: validation boundary F at threshold 0.5 0.0700 before, 0.4500" in good
    # the run: F from .07 to 0, the "best" checkpoint at F 0
    zero = fit_summary(*_fake_fit(0.0, 0.0, tmp_path))
    assert "WARNING: validation boundary F ended at 0 (threshold 0.5)" in zero
    assert "best of 9 thresholds: 0.3000" in zero and "folder_finetune.yaml" in zero and "--model.lr" in zero
    assert "(F 0: not worth using)" in zero and "next:" not in zero


def test_fit_summary_says_when_the_run_made_the_starting_model_worse(tmp_path):
    """Issue 31's own-folder fine-tune: validation F .5646 before, .5309 at best: the summary
    says so, points back at the starting model and recommends no new checkpoint."""
    from hiseg.training.summary import fit_summary

    worse = fit_summary(*_fake_fit(0.5309, 0.5309, tmp_path, f_before=0.5646, init_from="bsds500"))
    assert "validation boundary F of the starting model (bsds500): 0.5646" in worse
    assert "validation boundary F at threshold 0.5 of the best checkpoint: 0.5309" in worse
    assert ("NOT IMPROVED: this run did not improve on the starting model (validation boundary F at threshold 0.5 "
            "0.5646 before, 0.5309 at best): keep using it (hiseg predict IMAGE --checkpoint bsds500)") in worse
    assert "next:" not in worse
    same = fit_summary(*_fake_fit(0.5, 0.5646, tmp_path, f_before=0.5646))  # equal is not better
    assert "NOT IMPROVED" in same and "next:" not in same
    better = fit_summary(*_fake_fit(0.5, 0.5700, tmp_path, f_before=0.5646, init_from="bsds500"))
    assert "NOT IMPROVED" not in better and "next: hiseg predict IMAGE --checkpoint" in better


# (monitor, mode, the starting model's figures, the last step's, the best checkpoint's score, improved)
_MONITORED = {
    # issue 42's fine-tune: F at 0.5 fell (0.7001 -> 0.6895) but the best checkpoint, chosen on the ODS
    # figure, rose above the start's (0.7427 -> 0.7483): improved, and the best checkpoint is named
    "ods improved": ("val/boundary_f_ods", "max", dict(f_before=0.7001, ods_before=0.7427),
                     dict(f_after=0.6895, ods_after=0.7300), 0.7483, True),
    "ods not improved": ("val/boundary_f_ods", "max", dict(f_before=0.6000, ods_before=0.7427),
                         dict(f_after=0.6900, ods_after=0.7300), 0.7400, False),
    "f improved": ("val/boundary_f", "max", dict(f_before=0.6000, ods_before=0.7427),
                   dict(f_after=0.6100, ods_after=0.7000), 0.6200, True),
    "f not improved": ("val/boundary_f", "max", dict(f_before=0.7001, ods_before=0.5000),
                       dict(f_after=0.6895, ods_after=0.7483), 0.6990, False),
    "loss improved": ("val/loss", "min", dict(loss_before=0.90), dict(loss_after=0.85), 0.80, True),
    "loss not improved": ("val/loss", "min", dict(loss_before=0.80), dict(loss_after=0.85), 0.82, False),
}


@pytest.mark.parametrize("case", list(_MONITORED))
def test_fit_summary_compares_the_monitored_figure(case, tmp_path):
    """Issue 42: the summary compares the figure the best checkpoint is chosen on (its monitor,
    in its mode), before and at the best checkpoint, and names the best checkpoint when it improved."""
    from hiseg.training.summary import fit_summary

    monitor, mode, before, after, score, improved = _MONITORED[case]
    kw = dict(f_before=0.5, ods_before=0.6, loss_before=0.9, f_after=0.5, ods_after=0.6, loss_after=0.9)
    kw.update(before), kw.update(after)
    f_after = kw.pop("f_after")
    out = fit_summary(*_fake_fit(f_after, score, tmp_path, monitor=monitor, mode=mode, **kw))
    key = monitor[len("val/"):]
    name = {"boundary_f": "validation boundary F at threshold 0.5",
            "boundary_f_ods": "validation boundary F at the best of 9 thresholds", "loss": "validation loss"}[key]
    start = {"boundary_f": kw["f_before"], "boundary_f_ods": kw["ods_before"], "loss": kw["loss_before"]}[key]
    assert f"compared on the {name}, at the best checkpoint ({monitor}, {'lowest' if mode == 'min' else 'highest'})" in out
    assert f"{name} of the best checkpoint: {score:.4f}" in out
    assert f"best checkpoint ({monitor} = {score:.4f}): {tmp_path / 'best.ckpt'}" in out
    if improved:
        assert f"IMPROVED on the starting model: {name} {start:.4f} before, {score:.4f} at the best checkpoint" in out
        assert f"next: hiseg predict IMAGE --checkpoint {tmp_path / 'best.ckpt'} -o predictions/" in out
        assert "NOT IMPROVED" not in out
    else:
        assert f"NOT IMPROVED: this run did not improve on the starting model ({name} {start:.4f} before, " \
               f"{score:.4f} at best)" in out
        assert "next:" not in out


@pytest.mark.parametrize("start, noted", [("bsds500", True), ("bsds500_merge", True), ("bsds500_ensemble", False),
                                          (None, False), ("runs/x/last.ckpt", False)])
def test_fit_summary_says_what_a_fine_tune_replaces(start, noted, tmp_path):
    """Issue 42: a fine-tune of a shipped model other than the default (bsds500_ensemble) says
    that its figures compare with that model only and that its checkpoints replace it, not the default."""
    from hiseg.training.summary import fit_summary

    out = fit_summary(*_fake_fit(0.5, 0.57, tmp_path, f_before=0.56, init_from=start))
    assert ("compared to: the starting model" in out) == noted
    if noted:
        assert (f"hiseg predict's default model is bsds500_ensemble (BSDS500 val ODS 0.7543, against" in out
                and f"its checkpoints replace {start}, not the default" in out)


def test_synthetic_config_applies_only_without_arguments(tmp_path, monkeypatch):
    """The default run unless the command names a config or a data module; then only what it
    names, and a clear error when that gives no data; --trainer.default_root_dir moves logs and
    checkpoints."""
    from _train import ROOT

    from hiseg.training.cli import main

    monkeypatch.setattr("sys.argv", ["train.py"])
    default = ROOT / "configs" / "synthetic.yaml"
    cli = main([], default_config=default, run=False)  # `python train.py`: the synthetic default
    assert type(cli.datamodule).__name__ == "SyntheticDataModule" and cli.trainer.max_epochs == 10
    # an override keeps the default run (issue 32); a config without data is refused, naming what to give
    cli = main(["--trainer.max_epochs", "1"], default_config=default, run=False)
    assert type(cli.datamodule).__name__ == "SyntheticDataModule" and cli.trainer.max_epochs == 1
    with pytest.raises(SystemExit, match=r"fit: no data\. A command that names a config .*folder_finetune"):
        main(["fit", "--config", str(ROOT / "configs" / "ddp.yaml"), "--trainer.max_steps", "20"],
             default_config=default)
    data = tmp_path / "my_data"
    _write_folder(data, 3)
    cli = main(["--config", str(ROOT / "configs" / "folder.yaml"), "--data.init_args.data_root", str(data),
                "--trainer.max_steps", "20", "--trainer.default_root_dir", str(tmp_path / "mine")],
               default_config=default, run=False)
    assert not cli.datamodule.hparams.vflip and "superpixel_size" not in cli.datamodule.hparams  # the pipeline's
    # max_steps rules alone (Lightning: max_epochs -1 when only max_steps is given)
    assert cli.trainer.max_steps == 20 and cli.trainer.max_epochs in (None, -1)  # no epoch limit
    assert {lg.save_dir for lg in cli.trainer.loggers} == {str(tmp_path / "mine")}
    assert cli.trainer.log_dir.startswith(str(tmp_path / "mine"))  # where ModelCheckpoint writes


def _write_folder(root, n, size=(40, 48)):
    """A user's folder: n images of two colour halves, a label PNG each (the README layout)."""
    import cv2

    (root / "images").mkdir(parents=True)
    (root / "labels").mkdir()
    rng = np.random.default_rng(0)
    for i in range(n):
        img = np.zeros((*size, 3), np.uint8)
        lab = np.zeros(size, np.uint8)
        c = int(rng.integers(10, size[1] - 10))
        img[:, c:] = (200, 60, 30)
        lab[:, c:] = 1
        cv2.imwrite(str(root / "images" / f"im{i}.png"), img)
        cv2.imwrite(str(root / "labels" / f"im{i}.png"), lab)


def test_init_from_accepts_the_shipped_model_name():
    from hiseg.models import Weights, read_checkpoint

    m = HierarchicalSegmentationModule(init_from="bsds500")  # the checkpoint's architecture (width 32)
    ck = read_checkpoint(Weights.BSDS500.path())
    assert m.hparams.arch_kwargs == ck.hyper_parameters["arch_kwargs"]
    for k, v in ck.state_dict.items():
        torch.testing.assert_close(m.model.state_dict()[k], v, rtol=0, atol=0)
    with pytest.raises(Exception, match="does not fit architecture"):  # an explicit architecture must fit
        HierarchicalSegmentationModule(init_from="bsds500", arch_kwargs={"width": 8})


@pytest.mark.slow
def test_a_refused_start_leaves_no_log_folder(tmp_path):
    """--ckpt_path with a slim checkpoint: a clear error naming --model.init_from (was KeyError
    'pytorch-lightning_version'); a data root that does not exist: its error. Neither leaves a
    version_N folder behind."""
    from _train import ROOT

    r = run_train(tmp_path, "--ckpt_path", str(ROOT / "models" / "hiseg_bsds500.ckpt"))
    assert r.returncode != 0 and "KeyError" not in r.stderr
    assert "is not a Lightning training checkpoint" in r.stderr and "--model.init_from" in r.stderr
    r = run_train(tmp_path, "--config", str(ROOT / "configs" / "folder.yaml"),
                  "--data.init_args.data_root", str(tmp_path / "nowhere"), "--data.init_args.num_workers", "0")
    assert r.returncode != 0 and "nowhere" in r.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == []


@pytest.mark.filterwarnings("ignore:LightningCLI's args parameter")
def test_finetune_configs_log_under_their_root_dir_and_skip_loader_superpixels(tmp_path):
    """bsds500_finetune*.yaml: hiseg's appending CSVLogger under trainer.default_root_dir
    (runs/cpu_finetune for the CPU run, which resumes there), no loader superpixels."""
    from _train import ROOT

    from hiseg.training.callbacks import LastCheckpoint
    from hiseg.training.cli import main
    from hiseg.training.module import CSVLogger

    cfg = ROOT / "configs"
    base = ("--config", str(cfg / "bsds500_finetune.yaml"), "--data.init_args.data_root", str(tmp_path))
    for extra, root in (((), "runs/bsds500_finetune"), (("--config", str(cfg / "bsds500_finetune_cpu.yaml")),
                                                        "runs/cpu_finetune"),
                        (("--trainer.default_root_dir", str(tmp_path / "elsewhere")), str(tmp_path / "elsewhere"))):
        cli = main([*base, *extra], run=False)
        (logger,) = cli.trainer.loggers
        assert type(logger) is CSVLogger and logger.save_dir == root and logger.name == "csv"
        cli.datamodule.use_pipeline(cli.model.pipeline)  # what the model's setup does
        assert cli.datamodule.superpixel_mode == "none" and cli.model.rebuilds_superpixels
        if root == "runs/cpu_finetune":  # exact resume where experiments/bsds_recipe/cpu_finetune.sh looks for last.ckpt
            (cb,) = cli.trainer.checkpoint_callbacks
            assert type(cb) is LastCheckpoint and cb.dirpath.endswith("runs/cpu_finetune/checkpoints")
    ckpt_dirs = [cb.dirpath for cb in cli.trainer.checkpoint_callbacks]
    assert ckpt_dirs == [None]  # the base config's: under the logger's version folder


@pytest.mark.slow
def test_csv_logger_without_save_dir_follows_default_root_dir(tmp_path):
    logger = json.dumps({"class_path": "hiseg.training.module.CSVLogger", "init_args": {"name": "follow"}})
    r = run_train(tmp_path, "--trainer.default_root_dir", str(tmp_path / "elsewhere"), "--trainer.logger", logger,
                  sub="validate")
    assert r.returncode == 0, r.stderr[-3000:]
    (row,) = csv_rows(tmp_path / "elsewhere/follow/version_0/metrics.csv")
    assert 0 <= float(row["val/boundary_f"]) <= 1 and not (tmp_path / "follow").exists()


@pytest.mark.slow
def test_bf16_mixed_training_runs(tmp_path):
    """``--trainer.precision bf16-mixed``: training and validation go through (here on the
    CPU), and the weights stay float32."""
    r = run_train(tmp_path, "--trainer.max_steps", "3", "--trainer.precision", "bf16-mixed")
    assert r.returncode == 0, r.stderr[-3000:]
    ck = load_ckpt(max(tmp_path.glob("**/last.ckpt"), key=lambda p: p.stat().st_mtime))
    assert ck["global_step"] == 3
    assert all(v.dtype == torch.float32 for k, v in ck["state_dict"].items() if v.is_floating_point())
    rows = [r for r in csv_rows(next(tmp_path.glob("**/metrics.csv"))) if r.get("val/boundary_f")]
    assert rows and all(0 <= float(r["val/boundary_f"]) <= 1 for r in rows)


def test_closest_linkage_is_refused_for_training():
    with pytest.raises(ValueError, match="linkage 'closest' is a fit"):
        HierarchicalSegmentationModule(arch_kwargs={"width": 8}, pipeline={"linkage": "closest",
                                                                          "superpixels": "color_watershed"})


class _LayoutBug(torch.autograd.Function):
    """The identity, whose backward scales the gradient by ``factor`` when its input is in the
    channels-last layout (a kernel that fails in one memory layout only)."""

    @staticmethod
    def forward(ctx, x, factor):
        ctx.channels_last = x.is_contiguous(memory_format=torch.channels_last) and not x.is_contiguous()
        ctx.factor = factor
        return x.clone()

    @staticmethod
    def backward(ctx, g):
        return (g * ctx.factor if ctx.channels_last else g), None


class _Net(torch.nn.Module):
    def __init__(self, factor):
        super().__init__()
        self.conv, self.head, self.factor = torch.nn.Conv2d(3, 4, 3, padding=1), torch.nn.Conv2d(4, 1, 1), factor

    def forward(self, x):
        return self.head(_LayoutBug.apply(self.conv(x), self.factor))


def test_channels_last_check_passes_the_networks_and_changes_nothing():
    from hiseg.models import get_model, pdc_boundary_net
    from hiseg.training.steps import channels_last_agrees

    torch.manual_seed(0)
    for net in (pdc_boundary_net(width=8, blocks=(1, 1, 1, 1)), get_model("compact_boundary_net", width=8),
                _Net(1.0)):
        before = {k: v.clone() for k, v in net.state_dict().items()}
        assert channels_last_agrees(net, "cpu", size=32)
        assert all(torch.equal(v, before[k]) for k, v in net.state_dict().items())
        assert all(p.grad is None and p.is_contiguous() for p in net.parameters())


class _DictNet(_Net):
    def forward(self, x):
        return {"edges": super().forward(x), "side": [self.conv(x)]}


def test_channels_last_check_reads_dict_outputs_and_bf16_networks():
    """A network returning a dict (its tensors all count: the bug behind the conv of the dict's
    first entry is caught too), and one in bf16 throughout (Lightning's bf16-true: the images
    take its dtype)."""
    from hiseg.training.steps import channels_last_agrees

    torch.manual_seed(0)
    assert channels_last_agrees(_DictNet(1.0), "cpu", size=16)
    assert not channels_last_agrees(_DictNet(1e20), "cpu", size=16)
    assert not channels_last_agrees(_DictNet(3.0), "cpu", size=16)
    assert channels_last_agrees(_Net(1.0).to(torch.bfloat16), "cpu", torch.bfloat16, size=16)
    assert not channels_last_agrees(_Net(1e20).to(torch.bfloat16), "cpu", torch.bfloat16, size=16)


@pytest.mark.parametrize("factor", [1e20, float("nan"), 0.0, 3.0])
def test_channels_last_check_catches_a_kernel_that_fails_in_one_layout(factor):
    """Gradients scaled by 1e20, NaN, zero or 3x in channels-last are caught in fp32, the first two
    in bf16 too (its tolerance lets rounding through, not blow-ups); the frozen network (nothing
    to train) passes."""
    from hiseg.training.steps import channels_last_agrees

    torch.manual_seed(0)
    net = _Net(factor)
    assert not channels_last_agrees(net, "cpu", size=16)
    if factor != factor or factor > 1e3:  # NaN or a blow-up
        assert not channels_last_agrees(net, "cpu", torch.bfloat16, size=16)
    net.requires_grad_(False)
    assert channels_last_agrees(net, "cpu", size=16)


@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=pytest.mark.skipif(
    not torch.cuda.is_available(), reason="needs CUDA"))])
@pytest.mark.parametrize("optimizer", ["adamw", "amsgrad"])
def test_optimizer_is_fused_on_cuda_only(device, optimizer):
    """Fused on CUDA, PyTorch's default elsewhere; a resumed run's saved optimizer groups take this
    run's choice before torch loads them (a state saved on the CPU resumes fused on CUDA, and the
    other way round), and the run goes on training."""
    m = HierarchicalSegmentationModule(arch_kwargs={"width": 8}, optimizer=optimizer).to(device)
    opt = m.configure_optimizers()["optimizer"]
    assert bool(opt.param_groups[0].get("fused")) == (device == "cuda")
    assert isinstance(opt, torch.optim.AdamW if optimizer == "adamw" else torch.optim.Adam)
    other = HierarchicalSegmentationModule(arch_kwargs={"width": 8}, optimizer=optimizer)
    other_opt = other.configure_optimizers()["optimizer"]
    for q in other.parameters():
        q.grad = torch.ones_like(q)
    other_opt.step()
    saved = {"optimizer_states": [other_opt.state_dict()]}
    for g in saved["optimizer_states"][0]["param_groups"]:
        g["fused"] = device != "cuda" or None  # saved by the other kind of run
    m.on_load_checkpoint(saved)
    opt.load_state_dict(saved["optimizer_states"][0])
    assert bool(opt.param_groups[0]["fused"]) == (device == "cuda")
    for q in m.parameters():
        q.grad = torch.ones_like(q)
    opt.step()
    step = next(iter(opt.state.values()))["step"]
    assert float(step) == 2 and (device != "cuda" or step.device.type == "cuda")


@pytest.mark.slow
def test_hiseg_lines_start_lines_of_their_own_beside_progress_bars(tmp_path):
    """Issue 42: in a log of stdout and stderr together, with the progress bars on, the
    validation before training and the closing summary each start a line (not the end of a bar's)."""
    import os
    import subprocess
    import sys

    from _train import ROOT, TINY

    cmd = [sys.executable, str(ROOT / "train.py"), "fit", "--config", str(ROOT / "configs" / "synthetic.yaml"),
           "--trainer.default_root_dir", str(tmp_path), *TINY, "--trainer.max_epochs", "1",
           "--trainer.enable_progress_bar", "true"]
    r = subprocess.run(cmd, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=600,
                       env=dict(os.environ, PYTHONWARNINGS="ignore"))
    assert r.returncode == 0, r.stdout[-3000:]
    lines = r.stdout.split("\n")
    for what in ("[hiseg] validation before training:", "[hiseg] training finished:"):
        assert [ln for ln in lines if what in ln] and all(ln.startswith(what) for ln in lines if what in ln), \
            [ln[-200:] for ln in lines if what in ln]


def test_every_config_chooses_its_best_checkpoint_on_the_ods_figure():
    """Issue 53, item 10: the synthetic run's "best" checkpoint was chosen on F at threshold 0.5 (.548,
    its ODS .652) below the last step's ODS (.675); every config's ModelCheckpoint monitors
    val/boundary_f_ods, the figure hiseg evaluate ranks by."""
    import yaml
    from _train import ROOT

    monitors = {}
    for path in sorted((ROOT / "configs").glob("*.yaml")):
        for cb in (yaml.safe_load(path.read_text()).get("trainer") or {}).get("callbacks") or []:
            if isinstance(cb, dict) and cb.get("class_path", "").endswith("ModelCheckpoint"):
                monitors[path.name] = (cb.get("init_args") or {}).get("monitor")
    assert "synthetic.yaml" in monitors and set(monitors.values()) == {"val/boundary_f_ods"}, monitors


def test_fit_summary_names_the_metrics_csv_row_of_the_best_checkpoint(tmp_path):
    """Issue 53, item 10: a checkpoint named step=144 holds the weights after 144 steps, which
    metrics.csv logs as step 143 (its step column counts from 0): the summary says which row; a
    monitor of F at one threshold is said to be one."""
    from hiseg.training.summary import fit_summary

    trainer, model = _fake_fit(0.55, 0.5484, tmp_path)
    trainer.callbacks[0].best_model_path = str(tmp_path / "best-epoch=5-step=144.ckpt")
    out = fit_summary(trainer, model)
    assert "best-epoch=5-step=144.ckpt (after 144 steps: metrics.csv's row of step 143" in out
    assert "chosen on F at one threshold" in out
    ods = fit_summary(*_fake_fit(0.55, 0.66, tmp_path, monitor="val/boundary_f_ods"))
    assert "metrics.csv's row" not in ods and "chosen on F at one threshold" not in ods
