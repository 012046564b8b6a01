"""Training configs are code (issue 43, item 7): a config naming a class outside hiseg, torch's
optimisers and layers and Lightning's callbacks and loggers, or a callable (LambdaCallback's
``on_fit_start: os.system``), is refused in one line before anything is built or called, unless
``--trust-config`` is given."""
from __future__ import annotations

import pytest
from tests.models.test_checkpoint_safety import train_py

from hiseg.training.configs import allowed_names, allowed_objects, check_config_text, trusted_class_path


@pytest.fixture(autouse=True)
def _argv(monkeypatch):
    monkeypatch.setattr("sys.argv", ["train.py"])


LAMBDA = """
trainer:
  callbacks:
    - class_path: pytorch_lightning.callbacks.LambdaCallback
      init_args:
        on_fit_start: os.system
"""


def test_a_lambda_callback_calling_os_system_is_refused(tmp_path, monkeypatch):
    cfg = tmp_path / "evil.yaml"
    cfg.write_text(LAMBDA)
    called = []
    monkeypatch.setattr("os.system", lambda *a: called.append(a))
    with pytest.raises(SystemExit, match="--trust-config") as e:
        train_py(["fit", "--config", str(cfg), "--trainer.default_root_dir", str(tmp_path)])
    msg = str(e.value).strip()
    assert "\n" not in msg and ("LambdaCallback" in msg or "os.system" in msg)
    assert not called and not (tmp_path / "lightning_logs").exists()


@pytest.mark.parametrize("argv", [
    ["--trainer.callbacks+=subprocess.Popen"],
    ["--trainer.callbacks", '[{"class_path": "os.system"}]'],
    ["--data", "shutil.rmtree"],
])
def test_class_paths_outside_the_allow_list_are_refused_from_the_command_line(tmp_path, argv):
    with pytest.raises(SystemExit, match="a config is code"):
        train_py(["fit", *argv, "--trainer.default_root_dir", str(tmp_path)])


def test_the_parsed_config_is_checked_too(tmp_path):
    """A callable the parser resolved (here from a config the text scan cannot read as YAML
    values: the check after parsing)."""
    from jsonargparse import Namespace

    from hiseg.training.configs import UntrustedConfigError, check_config_objects

    import os

    with pytest.raises(UntrustedConfigError, match="callable"):
        check_config_objects(Namespace(trainer=Namespace(callbacks=[Namespace(
            class_path="pytorch_lightning.callbacks.ModelCheckpoint", init_args=Namespace(f=os.system))])))
    with pytest.raises(UntrustedConfigError, match="class_path subprocess.Popen"):
        check_config_objects({"data": {"class_path": "subprocess.Popen"}})
    check_config_objects(Namespace(data=Namespace(class_path="hiseg.data.SyntheticDataModule", init_args=Namespace(
        n_train=3, name="last.ckpt"))))


def test_the_shipped_configs_and_hiseg_classes_pass():
    from pathlib import Path

    for cfg in sorted((Path(__file__).resolve().parents[2] / "configs").glob("*.yaml")):
        check_config_text(["--config", str(cfg)])
    check_config_text(["--trainer.callbacks+=hiseg.training.callbacks.CompileNetwork", "--trainer.precision",
                       "bf16-mixed", "--ckpt_path", "last.ckpt"])
    assert trusted_class_path("torch.optim.AdamW") and trusted_class_path("pytorch_lightning.callbacks.ModelCheckpoint")
    assert not trusted_class_path("pytorch_lightning.callbacks.LambdaCallback")
    assert trusted_class_path("hiseg.data.SyntheticDataModule") and not trusted_class_path("hiseg.")


def test_trust_config_lets_a_trusted_config_run_its_classes(tmp_path):
    """With --trust-config the class path is used: here it is then refused by Lightning itself
    (not a callback), which shows it got past hiseg's check."""
    with pytest.raises(BaseException) as e:
        train_py(["fit", "--trust-config", "--trainer.callbacks+=collections.OrderedDict",
                  "--trainer.default_root_dir", str(tmp_path), "--trainer.max_steps", "0"])
    assert "a config is code" not in str(e.value)


DTYPES = ["torch.float32", "torch.float16", "torch.bfloat16", "torch.float64", "torch.int64", "torch.uint8",
          "torch.bool"]


@pytest.mark.parametrize("value", DTYPES)
def test_a_torch_dtype_is_data_and_passes_without_trust_config(tmp_path, value):
    import torch

    from hiseg.training.configs import check_config_objects

    assert isinstance(getattr(torch, value.split(".")[1]), torch.dtype)  # the truth: a dtype, not code
    cfg = tmp_path / "c.yaml"
    cfg.write_text(f"model:\n  init_args:\n    dtype: {value}\n")
    check_config_text(["--config", str(cfg)])
    check_config_text(["--model.init_args.dtype", value])
    check_config_objects({"model": {"init_args": {"dtype": getattr(torch, value.split(".")[1])}}})  # as parsed


@pytest.mark.parametrize("value", ["os.system", "subprocess.run", "builtins.eval", "builtins.exec", "torch.load",
                                   "torch.Tensor", "torch.device", "torch.finfo", "torch.hub.load",
                                   "torch.float32.to", "torch.onnx", "torch._dynamo", "numpy.float32"])
def test_code_next_to_the_dtypes_is_still_refused(tmp_path, value):
    import sys

    from hiseg.training.configs import UntrustedConfigError

    cfg = tmp_path / "c.yaml"
    cfg.write_text(f"model:\n  init_args:\n    dtype: {value}\n")
    allowed_names()  # the registry imports its own modules once (hiseg's, torch's, Lightning's)
    before = set(sys.modules)
    with pytest.raises(UntrustedConfigError, match=rf"config {cfg}\.model\.init_args\.dtype names '{value}'"):
        check_config_text(["--config", str(cfg)])
    with pytest.raises(UntrustedConfigError, match="a config is code"):
        check_config_text(["--model.init_args.dtype", value])
    assert set(sys.modules) - before == set()  # nothing imported to tell


# issue 52: an exact allow-list, on every way a config arrives
FULL_PATH_LAMBDA = LAMBDA.replace("pytorch_lightning.callbacks.LambdaCallback",
                                  "pytorch_lightning.callbacks.lambda_function.LambdaCallback")


def _refused(tmp_path, monkeypatch, argv, needle="a config is code"):
    """``train.py ARGV`` refused in one line naming ``needle``, os.system never called, nothing written."""
    called = []
    monkeypatch.setattr("os.system", lambda *a: called.append(a))
    with pytest.raises(SystemExit) as e:
        train_py([*argv, "--trainer.default_root_dir", str(tmp_path / "run")])
    msg = str(e.value).strip()
    assert needle in msg and "\n" not in msg, msg
    assert not called and not (tmp_path / "run").exists()
    return msg


@pytest.mark.parametrize("form", ["--config", "--conf", "--con", "-c", "-cFILE", "--config=FILE", "-c=FILE"])
def test_lambda_callback_by_its_full_path_is_refused_in_every_config_spelling(tmp_path, monkeypatch, form):
    cfg = tmp_path / "evil.yaml"
    cfg.write_text(FULL_PATH_LAMBDA)
    argv = [form.replace("FILE", str(cfg))] if "FILE" in form else [form, str(cfg)]
    msg = _refused(tmp_path, monkeypatch, ["fit", *argv])
    assert "LambdaCallback" in msg


def test_a_name_under_hiseg_that_is_lightnings_base_class_is_refused(tmp_path, monkeypatch):
    msg = _refused(tmp_path, monkeypatch, ["fit", "--data", "hiseg.data.datamodule.pl.LightningDataModule"])
    assert "hiseg.data.datamodule.pl.LightningDataModule" in msg
    assert not trusted_class_path("hiseg.data.datamodule.pl.LightningDataModule")
    import pytorch_lightning as pl

    assert pl.LightningDataModule not in allowed_objects()


def test_the_parsers_environment_variables_are_checked(tmp_path, monkeypatch):
    monkeypatch.setenv("JSONARGPARSE_DEFAULT_ENV", "true")
    monkeypatch.setenv("PL_FIT__TRAINER__CALLBACKS", '[{"class_path": "pytorch_lightning.callbacks.LambdaCallback", '
                                                     '"init_args": {"on_fit_start": "os.system"}}]')
    msg = _refused(tmp_path, monkeypatch, ["fit"])
    assert "PL_FIT__TRAINER__CALLBACKS" in msg
    cfg = tmp_path / "evil.yaml"
    cfg.write_text(FULL_PATH_LAMBDA)
    monkeypatch.delenv("PL_FIT__TRAINER__CALLBACKS")
    monkeypatch.setenv("PL_FIT__CONFIG", str(cfg))
    _refused(tmp_path, monkeypatch, ["fit"])


def test_configs_included_by_path_are_checked(tmp_path, monkeypatch):
    (tmp_path / "cb.yaml").write_text("class_path: pytorch_lightning.callbacks.LambdaCallback\n"
                                      "init_args:\n  on_fit_start: os.system\n")
    (tmp_path / "data.yaml").write_text("class_path: subprocess.Popen\n")
    (tmp_path / "main.yaml").write_text("trainer:\n  callbacks:\n    - cb.yaml\n")  # relative to the config
    _refused(tmp_path, monkeypatch, ["fit", "--data", str(tmp_path / "data.yaml")])
    _refused(tmp_path, monkeypatch, ["fit", "--trainer.callbacks+", str(tmp_path / "cb.yaml")])
    from hiseg.training.configs import UntrustedConfigError

    with pytest.raises(UntrustedConfigError, match="LambdaCallback"):
        check_config_text(["--config", str(tmp_path / "main.yaml")])


def test_the_parser_takes_no_abbreviation(tmp_path):
    """``--conf`` is not ``--config``: the parser refuses it (its value is no config here)."""
    with pytest.raises(SystemExit) as e:
        train_py(["fit", "--conf", "trainer: {max_steps: 0}", "--trainer.default_root_dir", str(tmp_path)])
    assert e.value.code not in (0, None)


class _CallMe:
    def __call__(self, *a):
        return None


@pytest.mark.parametrize("value", ["numpy.add", "functools.partial", "instance", "function", "class", "builtin"])
def test_any_callable_value_of_the_parsed_config_is_refused(value):
    import functools
    import os

    import numpy as np
    from jsonargparse import Namespace

    from hiseg.training.configs import UntrustedConfigError, check_config_objects

    obj = {"numpy.add": np.add, "functools.partial": functools.partial(print, 1), "instance": _CallMe(),
           "function": os.system, "class": dict, "builtin": print}[value]
    with pytest.raises(UntrustedConfigError, match="callable"):
        check_config_objects(Namespace(trainer=Namespace(callbacks=[Namespace(
            class_path="pytorch_lightning.callbacks.ModelCheckpoint", init_args=Namespace(f=obj))])))


@pytest.mark.parametrize("path", ["pytorch_lightning.callbacks.lambda_function.LambdaCallback",
                                  "pytorch_lightning.callbacks.LambdaCallback",
                                  "hiseg.data.datamodule.pl.LightningDataModule", "hiseg.data.datamodule.torch.load",
                                  "torch.optim.Optimizer", "hiseg.io.atomic_write"])
def test_parsed_class_paths_are_resolved_and_compared_as_objects(path):
    from hiseg.training.configs import UntrustedConfigError, check_config_objects

    with pytest.raises(UntrustedConfigError, match="class_path"):
        check_config_objects({"data": {"class_path": path}})


def test_every_name_of_the_registry_resolves_to_an_allowed_class():
    import inspect

    objects = allowed_objects()
    names = allowed_names()
    assert {"hiseg.training.callbacks.CSVLogger", "pytorch_lightning.callbacks.ModelCheckpoint",
            "pytorch_lightning.callbacks.model_checkpoint.ModelCheckpoint", "hiseg.data.SyntheticDataModule",
            "hiseg.data.datamodule.SyntheticDataModule", "torch.optim.AdamW"} <= set(names)
    assert all(inspect.isclass(o) for o in objects)
    assert all(any(o is v for v in objects) for v in names.values() for o in [v])
