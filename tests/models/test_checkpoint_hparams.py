"""A checkpoint's hyper-parameters are checked before anything is built (issue 43, items 4-6):
``arch_kwargs`` asking for a network larger than the file's tensors (100,000 blocks, a width of
200,000, 2,000 ensemble members), malformed ones (a string, a config's ``class_path``, a
``pretrained_backbone`` the loader sets itself) and an unsafe ``--ckpt_path`` read with
``--weights_only false`` are refused in one line (CheckpointError) before the network is built, by
``load_model``, ``Segmenter``, ``hiseg predict`` and ``train.py``: the parameters made meanwhile are
counted (:func:`parameters_made`), no clock is read (issue 53: a timed assert failed at load 10)."""
from __future__ import annotations

import contextlib
import pathlib

import cv2
import numpy as np
import pytest
import torch
from _faults import crafted_checkpoint
from tests.models.test_checkpoint_safety import poisoned, train_py  # noqa: F401 - fixtures
from tests.cli.test_cli_faults import photos, run

from hiseg.models import get_model, load_model, save_weights
from hiseg.models.weights import ArchitectureMismatchError, CheckpointError
from hiseg.segmentation.segmenter import Segmenter

NET = {"width": 8}
#: At most this many parameters (and values) may be made while a checkpoint is checked: the
#: architectures it may try on the meta device for a hint, a few times over. A refused network of
#: 100,000 blocks, a width of 200,000 or 2,000 members would make hundreds of thousands of
#: parameters or billions of values.
MADE_AT_MOST = {"params": 20_000, "values": 200_000_000}


@contextlib.contextmanager
def parameters_made():
    """The parameters every module makes inside the block, as a list of (device type, number of
    values): what building a network costs, counted instead of timed."""
    from torch.nn.modules.module import register_module_parameter_registration_hook

    made = []
    hook = register_module_parameter_registration_hook(
        lambda module, name, p: made.append((p.device.type, int(p.numel()))) if p is not None else None)
    try:
        yield made
    finally:
        hook.remove()


def built_before_refusal(made, real_values_at_most=0):
    """Whether ``made`` (:func:`parameters_made`) stays within what a check builds: nothing off the
    meta device beyond ``real_values_at_most`` values, and a bounded number on it."""
    real = sum(n for device, n in made if device != "meta")
    return (real <= real_values_at_most and len(made) <= MADE_AT_MOST["params"]
            and sum(n for _, n in made) <= MADE_AT_MOST["values"] + real_values_at_most)


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
    with parameters_made() as made, pytest.raises(CheckpointError, match=words) as e:
        load_model(path)
    assert built_before_refusal(made), (len(made), sum(n for _, n in made))
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
    with parameters_made() as made, pytest.raises(SystemExit, match=words):
        train_py(["fit", "--ckpt_path", str(path), "--trainer.default_root_dir", str(tmp_path)])
    config_model = sum(p.numel() for p in get_model("compact_boundary_net").parameters())  # synthetic.yaml's
    assert built_before_refusal(made, real_values_at_most=config_model), (len(made), sum(n for _, n in made))


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
