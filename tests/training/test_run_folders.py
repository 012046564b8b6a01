"""A configured writer never replaces a file that exists (issue 52, item 2): a logger whose
folder holds another run's ``config.yaml``, ``hparams.yaml`` or ``metrics.csv``
(``CSVLogger(save_dir=ANY, name="", version="")`` logs into ANY itself) is refused in one line
before anything is written, whatever its class; a resumed run logs into its own folder; the
saved config is written by exclusive creation."""
from __future__ import annotations

import json

import pytest
from _train import TINY
from tests.models.test_checkpoint_safety import train_py


@pytest.fixture(autouse=True)
def _argv(monkeypatch):
    monkeypatch.setattr("sys.argv", ["train.py"])


def _victim(tmp_path):
    victim = tmp_path / "someone_elses"
    victim.mkdir()
    for name in ("config.yaml", "hparams.yaml", "metrics.csv", "notes.txt"):
        (victim / name).write_text(f"precious {name}\n")
    return victim


@pytest.mark.parametrize("logger", ["hiseg.training.callbacks.CSVLogger", "pytorch_lightning.loggers.CSVLogger",
                                    "pytorch_lightning.loggers.TensorBoardLogger"])
def test_a_logger_aimed_at_another_runs_folder_is_refused_before_writing(tmp_path, logger):
    victim = _victim(tmp_path)
    spec = json.dumps([{"class_path": logger, "init_args": {"save_dir": str(victim), "name": "", "version": ""}}])
    with pytest.raises(SystemExit) as e:
        train_py(["fit", *TINY, "--trainer.max_steps", "1", "--trainer.logger", spec,
                  "--trainer.default_root_dir", str(tmp_path / "run")])
    msg = str(e.value).strip()
    assert "\n" not in msg and str(victim) in msg and "another run" in msg, msg
    assert sorted(p.name for p in victim.iterdir()) == ["config.yaml", "hparams.yaml", "metrics.csv", "notes.txt"]
    assert all(p.read_text() == f"precious {p.name}\n" for p in victim.iterdir())


def test_the_saved_config_never_overwrites(tmp_path):
    import pytorch_lightning as pl

    from hiseg.training.run_folders import ExclusiveSaveConfig

    class Parser:
        def dump(self, cfg, skip_none=False):
            return f"run: {cfg}\n"

    class Trainer:
        is_global_zero, log_dir = True, str(tmp_path)

    (tmp_path / "config.yaml").write_text("the first run's\n")
    for k in (1, 2):
        ExclusiveSaveConfig(Parser(), k).setup(Trainer(), pl.LightningModule(), "fit")
    assert (tmp_path / "config.yaml").read_text() == "the first run's\n"
    assert (tmp_path / "config-1.yaml").read_text() == "run: 1\n" and (tmp_path / "config-2.yaml").read_text() == \
        "run: 2\n"


def test_a_resumed_fit_logs_into_its_own_folder(tmp_path):
    from hiseg.training.run_folders import LogFolderInUseError, refuse_replacing_loggers

    class Logger:
        name, version, log_dir = "csv", 0, str(tmp_path)

    (tmp_path / "metrics.csv").write_text("step\n")
    refuse_replacing_loggers([Logger()], resumed=[("csv", 0)])
    with pytest.raises(LogFolderInUseError, match="metrics.csv"):
        refuse_replacing_loggers([Logger()])
