"""Training config files are bounded before anything walks them (issue 52, item 3): a FIFO or a
device is refused without being opened (its reader would block, or never end), a file over
the size limit is refused, and so is YAML whose aliases expand to more nodes than a config
has (a 1.3 kB "billion laughs"), before any walk. Each refusal is one line, exit 2, with or
without ``--trust-config``."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

LAUGHS = "a: &a [lol, lol, lol, lol, lol, lol, lol, lol, lol]\n" + "".join(
    f"{chr(98 + i)}: &{chr(98 + i)} [{', '.join(['*' + chr(97 + i)] * 9)}]\n" for i in range(8)) + \
    "trainer:\n  callbacks: *i\n"


def _train(tmp_path, *argv, env=None, timeout=240):
    """``train.py ARGV`` in a new process (a hang fails by the generous timeout only)."""
    code = ("import sys; from hiseg.training.cli import main; "
            f"main(sys.argv[1:], default_config={str(ROOT / 'configs' / 'synthetic.yaml')!r})")
    return subprocess.run([sys.executable, "-c", code, *map(str, argv), "--trainer.default_root_dir",
                           str(tmp_path / "run")], capture_output=True, text=True, timeout=timeout,
                          env={**os.environ, **(env or {})}, cwd=tmp_path)


def _one_line(r, *needles):
    assert r.returncode == 2, (r.returncode, r.stderr[-800:])
    assert "Traceback" not in r.stderr, r.stderr[-800:]
    last = r.stderr.strip().splitlines()[-1]
    for n in needles:
        assert n in last, last


@pytest.mark.slow
def test_a_billion_laughs_is_refused_before_any_walk(tmp_path):
    from hiseg.training.config_files import ConfigFileError, load_config_yaml
    from hiseg.training.configs import check_config_text

    assert len(LAUGHS) < 1500
    cfg = tmp_path / "laughs.yaml"
    cfg.write_text(LAUGHS)
    with pytest.raises(ConfigFileError, match="more than 100000 YAML nodes"):
        load_config_yaml(LAUGHS, "config")
    with pytest.raises(ConfigFileError, match="laughs.yaml"):
        check_config_text(["--config", str(cfg)])
    with pytest.raises(ConfigFileError, match="YAML nodes"):
        check_config_text(["--trainer.callbacks", LAUGHS])  # inline too
    _one_line(_train(tmp_path, "fit", "--config", cfg, "--trust-config"), "laughs.yaml", "aliases")


def test_a_recursive_alias_is_refused(tmp_path):
    from hiseg.training.config_files import ConfigFileError, load_config_yaml

    with pytest.raises(ConfigFileError, match="recursive"):
        load_config_yaml("a: &a [1, *a]\n", "config")


def test_the_shipped_configs_are_well_within_the_bounds():
    from hiseg.training.config_files import MAX_CONFIG_BYTES, MAX_CONFIG_NODES, _expanded_nodes
    import yaml

    for cfg in sorted((ROOT / "configs").glob("*.yaml")):
        text = cfg.read_text()
        assert len(text) < MAX_CONFIG_BYTES // 100
        assert _expanded_nodes(yaml.compose(text), MAX_CONFIG_NODES) < MAX_CONFIG_NODES // 100


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no FIFOs here")
@pytest.mark.parametrize("form", [["--config", "{}", "--trust-config"], ["-c{}"], ["--data", "{}"]])
@pytest.mark.slow
def test_a_fifo_config_is_refused_without_being_opened(tmp_path, form):
    fifo = tmp_path / "cfg.yaml"
    os.mkfifo(fifo)
    _one_line(_train(tmp_path, "fit", *[a.format(fifo) for a in form]), "cfg.yaml", "not a regular file")


@pytest.mark.slow
def test_a_device_and_a_huge_config_are_refused(tmp_path):
    _one_line(_train(tmp_path, "fit", "--config", "/dev/zero"), "/dev/zero", "not a regular file")
    big = tmp_path / "big.yaml"
    big.write_text("# padding\n" * 200_000)
    _one_line(_train(tmp_path, "fit", "--config", big, "--trust-config"), "big.yaml", "larger than")
    link = tmp_path / "zero.yaml"
    link.symlink_to("/dev/zero")
    _one_line(_train(tmp_path, "fit", "--config", link), "zero.yaml", "not a regular file")


def test_a_data_file_named_by_an_option_is_not_read_as_a_config(tmp_path):
    """The pixel stage's packed data (``--data.init_args.train_data FILE.npz``, megabytes) is data,
    as a checkpoint is: the config check does not read it (it refused the GPU run's data as a
    config larger than 1024 KiB); a config file given under another option still is read."""
    from hiseg.training.configs import check_config_text
    from hiseg.training.config_files import ConfigFileError

    data = tmp_path / "bsds500_train.npz"
    data.write_bytes(b"\0" * (2 << 20))
    check_config_text(["fit", "--data.init_args.train_data", str(data)])
    with pytest.raises(ConfigFileError, match="larger than"):
        check_config_text(["fit", "--data", str(data)])
