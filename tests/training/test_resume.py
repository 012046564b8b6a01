"""Exact resume: a run resumed from a checkpoint written at an epoch end or mid-epoch ends
with the weights of the run done in one go, and logs into the same folders; last.ckpt is
written at every epoch end and every N steps whatever the monitor, and a run resumed from
each of the files LastCheckpoint writes (epoch end, every N steps, end of training) is the
uninterrupted run, with max_steps, max_epochs and limit_*_batches alike; the same for the pixel
stage of the BSDS recipe (configs/bsds500_pixel.yaml, device-augmented crops)."""
from pathlib import Path

import numpy as np
import pytest
import pytorch_lightning as pl
import torch
from _train import csv_rows, load_ckpt, run_train
from jsonargparse import Namespace

from hiseg.training.cli import _resume_log_versions
from hiseg.data.graphs import SegmentationGraphDataset
from hiseg.data.datamodule import SeededSampler
from hiseg.segmentation.superpixels import Superpixels
from hiseg.data.synthetic import SyntheticSegmentation
from hiseg.data.transforms import Compose, RandomFlip
from hiseg.training.module import LastCheckpoint

# 24 images, batches of 4: 6 steps per epoch, 12 in all
RUN = ("--data.init_args.n_train", "24", "--trainer.max_epochs", "2")
# keep every checkpoint of the run in one go: the end of epoch 0 (step 6, after its
# validation) and step 10 (4 batches into epoch 1)
KEEP = ("--trainer.callbacks+=pytorch_lightning.callbacks.ModelCheckpoint",
        "--trainer.callbacks.init_args.dirpath", "keep", "--trainer.callbacks.init_args.save_top_k", "-1",
        "--trainer.callbacks.init_args.filename", "end-{step}",
        "--trainer.callbacks+=pytorch_lightning.callbacks.ModelCheckpoint",
        "--trainer.callbacks.init_args.dirpath", "keep", "--trainer.callbacks.init_args.save_top_k", "-1",
        "--trainer.callbacks.init_args.every_n_train_steps", "10", "--trainer.callbacks.init_args.filename", "{step}")
LAST = "tensorboard/version_0/checkpoints/last.ckpt"  # under --trainer.default_root_dir
TESTS = Path(__file__).resolve().parents[1]  # _interrupt.KillAtStep: killed as by SIGKILL


def kill_at(step):
    return ("--trust-config", "--trainer.callbacks+=_interrupt.KillAtStep", "--trainer.callbacks.init_args.step", str(step))


def assert_same_weights(a, b, what):
    assert a["state_dict"].keys() == b["state_dict"].keys()
    for k, v in a["state_dict"].items():
        torch.testing.assert_close(b["state_dict"][k], v, rtol=0, atol=1e-6, msg=f"{what}: {k}")


@pytest.mark.slow
def test_resumed_runs_end_with_the_weights_of_the_run_in_one_go(tmp_path):
    r = run_train(tmp_path, *RUN, *KEEP)
    assert r.returncode == 0, r.stderr[-3000:]
    ref = load_ckpt(tmp_path / LAST)
    assert (ref["epoch"], ref["global_step"]) == (1, 12)  # last.ckpt is the final state
    at_epoch_end, mid_epoch = tmp_path / "keep/end-step=6.ckpt", tmp_path / "keep/step=10.ckpt"
    assert load_ckpt(at_epoch_end)["SyntheticDataModule"]["train_sampler"] == {
        "seed": 0, "epoch": 1, "batches_done": 0}
    assert load_ckpt(mid_epoch)["SyntheticDataModule"]["train_sampler"] == {
        "seed": 0, "epoch": 1, "batches_done": 4}
    for ckpt in (at_epoch_end, mid_epoch):  # stopped there, resumed to the end
        r = run_train(tmp_path, *RUN, "--ckpt_path", str(ckpt))
        assert r.returncode == 0, r.stderr[-3000:]
        out = load_ckpt(tmp_path / LAST)
        assert (out["epoch"], out["global_step"]) == (1, 12), ckpt.name
        assert_same_weights(ref, out, ckpt.name)
    # the resumed runs logged into the first run's folders, and metrics.csv kept its rows
    assert [p.name for p in (tmp_path / "csv").iterdir()] == ["version_0"]
    assert [p.name for p in (tmp_path / "tensorboard").iterdir()] == ["version_0"]
    rows = csv_rows(tmp_path / "csv/version_0/metrics.csv")
    assert sum(bool(r.get("val_start/boundary_f")) for r in rows) == 1  # the first run's only
    val_epochs = [int(r["epoch"]) for r in rows if r.get("val/boundary_f")]
    assert sorted(val_epochs) == [0, 1, 1, 1]  # run in one go: 0, 1; each resumed run: 1
    # LastCheckpoint's every-10-steps file (mid-epoch), the process killed right after it
    killed = tmp_path / "killed"
    killed.mkdir()
    r = run_train(killed, *RUN, *kill_at(10), pythonpath=TESTS)
    assert r.returncode != 0
    assert load_ckpt(killed / LAST)["SyntheticDataModule"]["train_sampler"] == {"seed": 0, "epoch": 1, "batches_done": 4}
    r = run_train(killed, *RUN, "--ckpt_path", str(killed / LAST))
    assert r.returncode == 0, r.stderr[-3000:]
    assert_same_weights(ref, load_ckpt(killed / LAST), "last.ckpt at step 10")


# 2 steps per epoch (8 images, batches of 4), 6 steps in all, budgets given in several ways
EPOCH_END_CASES = {
    # the case: max_steps and max_epochs both end the run at step 6
    "max_steps=max_epochs": ("--trainer.max_steps", "6", "--trainer.max_epochs", "3", "--trainer.limit_val_batches", "1"),
    "max_steps": ("--trainer.max_steps", "6", "--trainer.max_epochs", "-1", "--trainer.limit_val_batches", "0"),
    # 3 batches per epoch, 2 of them used
    "max_epochs, limit_train_batches": ("--data.init_args.n_train", "12", "--trainer.limit_train_batches", "2",
                                        "--trainer.max_epochs", "3"),
}


@pytest.mark.parametrize("case", list(EPOCH_END_CASES))
@pytest.mark.slow
def test_resume_from_the_epoch_end_last_ckpt_is_exact(tmp_path, case):
    """Killed once last.ckpt holds the end of epoch 1 (step 4), resumed from that file: the run
    ends at step 6 with the uninterrupted run's weights (it ended at step 4, or with other
    weights, when Lightning's half-finished epoch end was saved as is)."""
    budget = EPOCH_END_CASES[case]
    one, killed = tmp_path / "one", tmp_path / "killed"
    one.mkdir(), killed.mkdir()
    r = run_train(one, *budget)
    assert r.returncode == 0, r.stderr[-3000:]
    ref = load_ckpt(one / LAST)
    assert ref["global_step"] == 6
    r = run_train(killed, *budget, *kill_at(4), pythonpath=TESTS)
    assert r.returncode != 0 and "training finished" not in r.stdout
    end = load_ckpt(killed / LAST)  # LastCheckpoint's own epoch-end file (every_n_train_steps is 10)
    assert (end["epoch"], end["global_step"]) == (1, 4)
    assert end["SyntheticDataModule"]["train_sampler"] == {"seed": 0, "epoch": 2, "batches_done": 0}
    r = run_train(killed, *budget, "--ckpt_path", str(killed / LAST))
    assert r.returncode == 0, r.stderr[-3000:]
    out = load_ckpt(killed / LAST)
    assert out["global_step"] == 6 and "3 epoch(s), 6 step(s)" in r.stdout
    assert_same_weights(ref, out, case)


@pytest.mark.slow
def test_resume_from_the_end_of_training_continues_where_it_stopped(tmp_path):
    """max_steps 5 ends mid-epoch (3 steps per epoch): last.ckpt is the end of training; resumed
    with max_steps 8 it runs the 3 missing steps, from batch 2 of epoch 1: epochs 0 and 1 whole, 2
    batches of epoch 2."""
    three = ("--data.init_args.n_train", "12", "--trainer.max_epochs", "-1", "--trainer.limit_val_batches", "0")
    r = run_train(tmp_path, *three, "--trainer.max_steps", "5")
    assert r.returncode == 0, r.stderr[-3000:]
    end = load_ckpt(tmp_path / LAST)
    assert end["global_step"] == 5
    assert end["SyntheticDataModule"]["train_sampler"] == {"seed": 0, "epoch": 1, "batches_done": 2}
    r = run_train(tmp_path, *three, "--trainer.max_steps", "8", "--ckpt_path", str(tmp_path / LAST))
    assert r.returncode == 0, r.stderr[-3000:]
    out = load_ckpt(tmp_path / LAST)
    assert out["global_step"] == 8
    assert out["SyntheticDataModule"]["train_sampler"] == {"seed": 0, "epoch": 2, "batches_done": 2}


def test_resume_reuses_the_log_versions_of_loggers_that_append():
    """Lightning's CSVLogger deletes metrics.csv in a folder it resumes into: it gets a new version."""
    paths = ("pytorch_lightning.loggers.TensorBoardLogger", "pytorch_lightning.loggers.CSVLogger",
             "hiseg.training.module.CSVLogger", "hiseg.training.module.CSVLogger")
    cfg = Namespace(logger=[Namespace(class_path=p, init_args=Namespace(name=f"n{i}", version=None))
                            for i, p in enumerate(paths)])
    cfg.logger[3].init_args.version = "mine"  # set by the user: kept
    saved = [{"class": p.rsplit(".", 1)[1], "name": f"n{i}", "version": 3} for i, p in enumerate(paths)]
    with pytest.warns(UserWarning, match="CSVLogger would delete the logs of n1 version 3"):
        _resume_log_versions(cfg, {"hiseg": {"loggers": saved}})
    assert [e.init_args.version for e in cfg.logger] == [3, None, 3, "mine"]


class _Tiny(pl.LightningModule):
    def __init__(self):
        super().__init__()
        self.layer = torch.nn.Linear(2, 1)

    def training_step(self, batch, batch_idx):
        return self.layer(batch[0]).pow(2).mean()

    def validation_step(self, batch, batch_idx):
        self.log("score", -float(self.current_epoch))  # never improves after epoch 0

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)


class _Spy(pl.Callback):
    """Records last.ckpt's step before every epoch and step, and when training ends."""

    def __init__(self, path):
        self.path, self.seen = path, []

    def _look(self, trainer, when):
        step = load_ckpt(self.path)["global_step"] if self.path.exists() else None
        self.seen.append((when, trainer.global_step, step))

    def on_train_epoch_start(self, trainer, pl_module):
        self._look(trainer, "epoch")

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
        self._look(trainer, "batch")

    def on_fit_end(self, trainer, pl_module):
        self._look(trainer, "end")


def test_last_checkpoint_is_written_at_every_epoch_end_and_every_n_steps(tmp_path):
    data = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(torch.randn(12, 2)), batch_size=4)
    spy = _Spy(tmp_path / "ck" / "last.ckpt")
    monitored = pl.callbacks.ModelCheckpoint(dirpath=tmp_path / "ck", monitor="score", mode="max")
    trainer = pl.Trainer(max_epochs=3, logger=False, enable_progress_bar=False, enable_model_summary=False,
                         callbacks=[spy, monitored, LastCheckpoint(dirpath=tmp_path / "ck", every_n_train_steps=2)])
    trainer.fit(_Tiny(), data, data)
    # 3 steps per epoch: written at steps 2, 3 (epoch end), 4, 6 (both), 8, 9 (epoch end)
    expect = {0: None, 1: None, 2: 2, 3: 3, 4: 4, 5: 4, 6: 6, 7: 6, 8: 8}
    assert [(w, g, s) for w, g, s in spy.seen if w == "batch"] == [("batch", g, expect[g]) for g in range(9)]
    assert [(g, s) for w, g, s in spy.seen if w == "epoch"] == [(0, None), (3, 3), (6, 6)]
    assert spy.seen[-1] == ("end", 9, 9)
    assert monitored.best_model_path.endswith("epoch=0-step=3.ckpt")  # the monitor stayed at epoch 0


def test_seeded_sampler_and_augmentation_depend_on_seed_and_epoch_only():
    ds = SegmentationGraphDataset(SyntheticSegmentation(6, size=32, seed=3), Compose([RandomFlip(0.5, 0.5)]),
                                  Superpixels(region_size=6.0))
    a = list(SeededSampler(ds, seed=5, epoch=2))
    assert a == list(SeededSampler(ds, seed=5, epoch=2))
    assert sorted(i for i, _ in a) == list(range(6)) and {k for _, k in a} == {(5, 2)}
    assert [i for i, _ in SeededSampler(ds, seed=5, epoch=3)] != [i for i, _ in a]
    # resuming 4 samples into the epoch: the rest of the same order, once; len stays the epoch's
    s = SeededSampler(ds, seed=5, epoch=2, skip=4)
    assert len(s) == 6 and list(s) == a[4:] and list(s) == a
    # two DDP ranks: disjoint shards of the same permutation
    shards = [list(SeededSampler(ds, seed=5, epoch=2, num_replicas=2, rank=r)) for r in (0, 1)]
    assert sorted(i for sh in shards for i, _ in sh) == list(range(6))
    # an item's augmentation is a function of (seed, epoch, index), whatever was drawn before
    first = ds[a[0]]["image"]
    for key in a[1:]:
        ds[key]
    np.testing.assert_array_equal(ds[a[0]]["image"], first)
    assert len({ds[(0, (5, e))]["image"].numpy().tobytes() for e in range(8)}) > 1  # and with the epoch


@pytest.mark.slow
def test_pixel_stage_resume_is_exact(tmp_path):
    """Killed at step 6 (mid-epoch: 4 steps per epoch) and resumed from last.ckpt (written every
    2 steps), the pixel stage ends with the weights of the run done in one go."""
    from tests.training.test_recipe import make_bsds, pixel_args, run

    data = make_bsds(tmp_path / "bsds")
    every = ("--trainer.callbacks.init_args.every_n_train_steps", "2")
    r = run(tmp_path, "bsds500_pixel.yaml", *pixel_args(tmp_path / "ref", data), *every)
    assert r.returncode == 0, r.stderr[-3000:]
    ref = load_ckpt(tmp_path / "ref/csv/version_0/checkpoints/last.ckpt")
    r = run(tmp_path, "bsds500_pixel.yaml", *pixel_args(tmp_path / "cut", data), *every,
            "--trust-config", "--trainer.callbacks+=_interrupt.KillAtStep", "--trainer.callbacks.init_args.step", "7")
    assert r.returncode != 0
    last = tmp_path / "cut/csv/version_0/checkpoints/last.ckpt"
    assert load_ckpt(last)["global_step"] == 6
    r = run(tmp_path, "bsds500_pixel.yaml", *pixel_args(tmp_path / "cut", data), *every, "--ckpt_path", str(last))
    assert r.returncode == 0, r.stderr[-3000:]
    out = load_ckpt(last)
    assert out["global_step"] == 10
    for k, v in ref["state_dict"].items():
        torch.testing.assert_close(out["state_dict"][k], v, rtol=0, atol=1e-6, msg=k)


def test_wall_clock_deadline_stops_at_a_step_end(monkeypatch):
    """WallClockDeadline: a run given a fixed slot ends itself once the wall clock passes the
    deadline (argument, or $HISEG_STOP_AT), whatever its start-up took; without either it does nothing."""
    import time
    from types import SimpleNamespace

    from hiseg.training.callbacks import WallClockDeadline

    def step(callback):
        trainer = SimpleNamespace(should_stop=False, global_step=3)
        callback.on_train_batch_end(trainer, SimpleNamespace(print=lambda *a: None), None, None, 0)
        return trainer.should_stop

    monkeypatch.delenv("HISEG_STOP_AT", raising=False)
    assert not step(WallClockDeadline())
    assert step(WallClockDeadline(time.time() - 1)) and not step(WallClockDeadline(time.time() + 3600))
    monkeypatch.setenv("HISEG_STOP_AT", str(int(time.time()) - 1))
    assert step(WallClockDeadline())
    assert not step(WallClockDeadline(time.time() + 3600))  # the argument wins
    monkeypatch.setenv("HISEG_STOP_AT", "soon")
    with pytest.raises(ValueError, match="HISEG_STOP_AT must be a time in Unix seconds, got 'soon'"):
        WallClockDeadline()

    # the slot's rate, from the fit's first step to the stop: what sizes the next GPU session
    said, callback = [], WallClockDeadline(time.time() + 0.2)
    pl_module = SimpleNamespace(print=said.append)
    trainer = SimpleNamespace(should_stop=False, global_step=100)
    callback.on_train_batch_start(trainer, pl_module, None, 0)
    time.sleep(0.3)
    trainer.global_step = 130
    callback.on_train_batch_end(trainer, pl_module, None, None, 0)
    assert trainer.should_stop and said[0].startswith("[hiseg] first step (100) at ")
    rate = float(said[1].split(" since the first, ")[1].split(" steps/s")[0])
    assert "30 steps in 0 s" in said[1] and 30 / 0.5 < rate <= 30 / 0.3, said
