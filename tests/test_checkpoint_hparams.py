"""A checkpoint's hyper-parameters are checked before anything is built (issue 43, items 4-6):
``arch_kwargs`` asking for a network larger than the file's tensors (100,000 blocks, a width of
200,000, 2,000 ensemble members), malformed ones (a string, a config's ``class_path``, a
``pretrained_backbone`` the loader sets itself) and an unsafe ``--ckpt_path`` read with
``--weights_only false`` are refused in one line (CheckpointError), within a second, by
``load_model``, ``Segmenter``, ``hiseg predict`` and ``train.py``."""
from __future__ import annotations

import pathlib
import time

import cv2
import numpy as np
import pytest
import torch
from _faults import crafted_checkpoint
from test_checkpoint_safety import poisoned, train_py  # noqa: F401 - fixtures
from test_cli_faults import photos, run

from hiseg.models import get_model, load_model, save_weights
from hiseg.models.weights import ArchitectureMismatchError, CheckpointError
from hiseg.segmentation.segmenter import Segmenter

NET = {"width": 8}


@pytest.fixture(autouse=True)
def _argv(monkeypatch):
    monkeypatch.setattr("sys.argv", ["train.py"])


def crafted(tmp_path, name, arch_kwargs, arch="compact_boundary_net", lightning=False):
    """The tensors of a small compact_boundary_net with other hyper-parameters."""
    return crafted_checkpoint(tmp_path, name, arch_kwargs, arch, lightning, width=NET["width"])


BAD = {
    "blocks": ({**NET, "blocks": [100000, 2, 3, 3]}, "compact_boundary_net", "larger than the"),
    "width": ({"width": 200000}, "compact_boundary_net", "larger than the"),
    "members": ({"members": [{"arch": "compact_boundary_net", "arch_kwargs": NET}] * 2000},
                "mean_probability_ensemble", "larger than the"),
    "string": ("width=8", "compact_boundary_net", "must be a dict"),
    "class_path": ({"class_path": "hiseg.models.CompactBoundaryNet", "init_args": NET}, "compact_boundary_net",
                   "class path"),
    "pretrained_backbone": ({"pretrained_backbone": True}, "resnet18_boundary_net", "pretrained_backbone"),
    "negative": ({"width": -4}, "compact_boundary_net", "cannot be built"),
    "other_sizes": ({"width": 4}, "compact_boundary_net", "does not fit"),
}


@pytest.mark.parametrize("case", sorted(BAD))
def test_load_model_refuses_bad_hyper_parameters_before_building(tmp_path, case):
    kw, arch, words = BAD[case]
    path = crafted(tmp_path, case, kw, arch)
    t = time.perf_counter()
    with pytest.raises(CheckpointError, match=words) as e:
        load_model(path)
    assert time.perf_counter() - t < 1.0
    assert "\n" not in str(e.value) and len(str(e.value)) < 600
    with pytest.raises(CheckpointError, match=words):
        Segmenter(str(path), device="cpu")


def test_the_mismatch_is_still_listed(tmp_path):
    with pytest.raises(ArchitectureMismatchError, match="shape mismatch"):
        load_model(crafted(tmp_path, "w4", {"width": 4}))


def test_a_good_checkpoint_still_loads(tmp_path):
    net = get_model("compact_boundary_net", **NET)
    path = save_weights(net, tmp_path / "good.ckpt")
    again = load_model(path)
    assert all(torch.equal(a, b) for a, b in zip(net.state_dict().values(), again.state_dict().values()))
    ens = get_model("mean_probability_ensemble", members=[{"arch": "compact_boundary_net", "arch_kwargs": NET}] * 2)
    assert len(load_model(save_weights(ens, tmp_path / "ens.ckpt")).members) == 2


def test_hiseg_predict_refuses_in_one_line(tmp_path, capsys):
    d = photos(tmp_path, "a.png")
    rc, err = run(capsys, ["predict", str(d), "-o", str(tmp_path / "o"), "--checkpoint",
                           str(crafted(tmp_path, "big", {**NET, "blocks": [100000, 2, 3, 3]})), "--device", "cpu"])
    assert rc == 2 and "larger than the" in err and "Traceback" not in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "o").exists()


@pytest.mark.parametrize("case", ["blocks", "string", "class_path"])
def test_train_py_ckpt_path_refuses_bad_hyper_parameters_before_building(tmp_path, case):
    kw, arch, words = BAD[case]
    path = crafted(tmp_path, case, kw, arch, lightning=True)
    t = time.perf_counter()
    with pytest.raises(SystemExit, match=words):
        train_py(["fit", "--ckpt_path", str(path), "--trainer.default_root_dir", str(tmp_path)])
    assert time.perf_counter() - t < 20  # the parser's start included; the check itself is under a second


def test_train_py_init_from_refuses_bad_hyper_parameters_before_building(tmp_path):
    path = crafted(tmp_path, "big", {**NET, "blocks": [100000, 2, 3, 3]})
    with pytest.raises(SystemExit, match="larger than the"):
        train_py(["fit", "--model.init_from", str(path), "--trainer.default_root_dir", str(tmp_path)])


def test_an_unsafe_ckpt_path_with_weights_only_false_is_one_line(poisoned, tmp_path):  # noqa: F811
    ckpt, marker = poisoned
    with pytest.raises(SystemExit, match="not a safe checkpoint") as e:
        train_py(["fit", "--ckpt_path", str(ckpt), "--weights_only", "false",
                  "--trainer.default_root_dir", str(tmp_path)])
    assert "\n" not in str(e.value).strip()
    assert not marker.exists()
