"""Checkpoints are data on every path: a pickled payload never runs, URLs are refused."""
import functools
import http.server
import pathlib
import threading

import pytest
import torch
from _train import ROOT, run_train

from hiseg.training.cli import main
from hiseg.models import get_model
from hiseg.models.weights import CheckpointError, load_weights



def train_py(argv):
    """``train.py ARGV`` in this process (every case here fails before training starts)."""
    return main(argv, default_config=ROOT / "configs" / "synthetic.yaml")


@pytest.fixture(autouse=True)
def _argv(monkeypatch):
    monkeypatch.setattr("sys.argv", ["train.py"])


class _Touch:
    """Unpickling this calls ``pathlib.Path(marker).touch()``: stands for any code."""

    def __init__(self, marker):
        self.marker = pathlib.Path(marker)

    def __reduce__(self):
        return pathlib.Path.touch, (self.marker,)


@pytest.fixture
def poisoned(tmp_path):
    """(checkpoint file, marker file): a Lightning-like checkpoint with a payload."""
    marker = tmp_path / "payload_ran"
    net = get_model("compact_boundary_net", width=8)
    ckpt = tmp_path / "x.ckpt"
    torch.save({"state_dict": {f"model.{k}": v for k, v in net.state_dict().items()},
                "hyper_parameters": {"arch": "compact_boundary_net", "arch_kwargs": {"width": 8}},
                "epoch": 0, "global_step": 0, "payload": _Touch(marker)}, ckpt)
    # the payload is real: a plain unpickling runs it
    torch.load(ckpt, weights_only=False)
    assert marker.exists()
    marker.unlink()
    return ckpt, marker


@pytest.fixture
def server(poisoned):
    """An HTTP server on 127.0.0.1 serving the poisoned checkpoint; yields (url, requests)."""
    requests = []

    class Handler(http.server.SimpleHTTPRequestHandler):
        def log_message(self, *args):
            requests.append(self.path)

    httpd = http.server.ThreadingHTTPServer(
        ("127.0.0.1", 0), functools.partial(Handler, directory=str(poisoned[0].parent)))
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}/{poisoned[0].name}", requests
    httpd.shutdown()
    thread.join()


@pytest.mark.slow
def test_train_py_refuses_a_checkpoint_url(tmp_path, poisoned, server):
    url, requests = server
    r = run_train(tmp_path, "--ckpt_path", url, timeout=300)
    assert r.returncode != 0
    assert f"--ckpt_path {url}: remote checkpoints are refused" in r.stderr
    assert not poisoned[1].exists() and requests == []  # nothing fetched, nothing ran


@pytest.mark.parametrize("args", [
    ["fit", "--ckpt_path", "s3://bucket/run/last.ckpt"],
    ["validate", "--ckpt_path", "https://example.org/x.ckpt"],
    ["test", "--ckpt_path", "file:///tmp/x.ckpt"],
    ["fit", "--model.init_from", "http://127.0.0.1:9/x.ckpt"],
])
def test_every_subcommand_refuses_remote_checkpoints(args):
    with pytest.raises(SystemExit, match="remote checkpoints are refused"):
        train_py(args)


@pytest.mark.parametrize("sub", ["fit", "validate", "test"])
def test_a_poisoned_local_checkpoint_is_refused_before_it_runs(poisoned, sub):
    ckpt, marker = poisoned
    with pytest.raises(SystemExit, match="refused as unsafe"):
        train_py([sub, "--ckpt_path", str(ckpt)])
    with pytest.raises(SystemExit, match="refused as unsafe"):
        train_py(["fit", "--model.init_from", str(ckpt)])
    with pytest.raises(CheckpointError, match="refused as unsafe"):
        load_weights(get_model("compact_boundary_net", width=8), ckpt)
    with pytest.raises(CheckpointError, match="remote checkpoints are refused"):
        load_weights(get_model("compact_boundary_net", width=8), "https://example.org/x.ckpt")
    assert not marker.exists()


def test_predict_is_not_a_train_py_subcommand():
    with pytest.raises(SystemExit, match="hiseg predict"):
        train_py(["predict"])
