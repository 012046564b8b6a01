"""Renamed modules: configs and checkpoints of earlier versions still load through the one table
(:data:`hiseg._compat.RENAMED_MODULES`), no alias module stays at an old path, and nothing in
the repository names a former path."""
from __future__ import annotations

import importlib
import re
from pathlib import Path

import pytest
import torch

from hiseg._compat import RENAMED_MODULES, current_path, renamed_in

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("old", sorted(RENAMED_MODULES))
def test_old_module_is_gone_and_new_one_imports(old):
    importlib.import_module(RENAMED_MODULES[old])
    if old == "hiseg.training":  # now the training package: its old names live in hiseg.training.steps
        assert not hasattr(importlib.import_module(old), "LossResult")
        return
    with pytest.raises(ModuleNotFoundError):
        importlib.import_module(old)


def test_current_path_rewrites_class_paths_only():
    assert current_path("class_path: hiseg.callbacks.CSVLogger") == "class_path: hiseg.training.callbacks.CSVLogger"
    assert current_path("hiseg.lightning.HierarchicalSegmentationModule") == \
        "hiseg.training.module.HierarchicalSegmentationModule"
    assert current_path("hiseg.training.LossResult") == "hiseg.training.steps.LossResult"
    for today in ("hiseg.training.callbacks.CSVLogger", "hiseg.data.SyntheticDataModule", "my.graph.Thing",
                  "see hiseg.graph for graphs"):  # today's paths and prose stay
        assert current_path(today) == today
    assert renamed_in({"a": ["hiseg.cuts.X", ("hiseg.view.Y", 3)]}) == \
        {"a": ["hiseg.core.cuts.X", ("hiseg.explorer.page.Y", 3)]}


def test_every_class_path_in_the_repository_imports():
    """configs/ and the docs name today's paths, and each one imports."""
    names = set()
    for path in [*REPO.glob("configs/*.yaml"), *REPO.glob("docs/*.md"), REPO / "README.md"]:
        names |= set(re.findall(r"class_path:\s*(hiseg\.[\w.]+)", path.read_text(encoding="utf-8")))
    assert names
    for name in sorted(names):
        module, _, attr = name.rpartition(".")
        assert current_path(name) == name, f"{name} is a former path"
        assert hasattr(importlib.import_module(module), attr), name


def test_old_config_runs_with_a_warning(tmp_path, capsys):
    from hiseg.training.cli import main

    old = tmp_path / "old.yaml"
    old.write_text((REPO / "configs" / "synthetic.yaml").read_text().replace("hiseg.training.callbacks",
                                                                            "hiseg.callbacks"))
    before = old.read_text()
    with pytest.warns(FutureWarning, match="former paths"), pytest.raises(SystemExit) as e:
        main(["--config", str(old), "--print_config"])
    assert e.value.code in (0, None)
    printed = capsys.readouterr().out
    assert "hiseg.training.callbacks.CSVLogger" in printed and "hiseg.callbacks." not in printed
    assert old.read_text() == before  # the user's file is left as it is


def test_old_checkpoint_hyper_parameters_read_with_current_paths(tmp_path):
    from hiseg.models.weights import read_checkpoint

    path = tmp_path / "old.ckpt"
    torch.save({"state_dict": {"model.w": torch.zeros(2)},
                "hyper_parameters": {"losses": {"extra": "hiseg.losses.ClosestLoss"}, "lr": 0.1}}, path)
    ck = read_checkpoint(path)
    assert ck.hyper_parameters == {"losses": {"extra": "hiseg.core.losses.ClosestLoss"}, "lr": 0.1}
