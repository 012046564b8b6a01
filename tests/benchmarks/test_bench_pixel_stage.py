"""benchmarks/bench_pixel_stage.py at a tiny CPU setting: it runs the real pixel-stage step through
the Trainer and the floor, prints the table and appends one row to a results table (the numbers
are not asserted: speed is measured by the script, not by tests); bad options are refused."""
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))

import bench_pixel_stage as bench  # noqa: E402

TINY = ["--device", "cpu", "--arch-kwargs", '{"width": 8}', "--batch", "2", "--crop", "32", "--seconds", "1",
        "--warmup", "2", "--images", "3", "--threads", "1"]


@pytest.mark.slow
def test_tiny_run_appends_one_row(tmp_path):
    results = tmp_path / "pixel_stage.md"
    results.write_text(bench.HEADER + "| earlier | row | 1.0 | 2.0 | 0.50 |\n")
    env = dict(os.environ, PYTHONWARNINGS="ignore", OMP_NUM_THREADS="1")
    r = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "bench_pixel_stage.py"), *TINY,
                        "--results", str(results)], cwd=tmp_path, capture_output=True, text=True, timeout=600, env=env)
    assert r.returncode == 0, (r.stdout + r.stderr)[-3000:]
    lines = results.read_text().splitlines()
    assert lines[:len(bench.HEADER.splitlines())] == bench.HEADER.splitlines()
    assert lines.count("| device | network | crops/s | floor crops/s | ratio |") == 1
    rows = [ln for ln in lines if ln.startswith("| ") and not ln.startswith("| device")]
    assert len(rows) == 2 and rows[0] == "| earlier | row | 1.0 | 2.0 | 0.50 |"
    cells = [c.strip() for c in rows[1].strip("|").split("|")]
    assert len(cells) == 5 and re.fullmatch(r"cpu \(1 threads\)", cells[0])
    assert cells[1].startswith("compact_boundary_net") and "2 crops of 32x32, 32-true" in cells[1]
    real, floor, ratio = map(float, cells[2:])
    assert real > 0 and floor > 0 and ratio == pytest.approx(real / floor, abs=0.006)
    assert rows[1] in r.stdout  # the printed table holds the appended row


@pytest.mark.parametrize("args, message", [
    (["--precision", "fp8"], "--precision must be one of"),
    (["--arch-kwargs", "{width: 8"], "--arch-kwargs is not JSON"),
    (["--arch-kwargs", "[8]"], "--arch-kwargs must be a JSON object"),
    (["--batch", "0"], "--batch must be >= 1"),
    (["--crop", "8"], "--crop must be >= 16"),
    (["--seconds", "0"], "--seconds must be > 0"),
    (["--device", "tpu"], "--device must be auto, cpu or cuda"),
])
def test_bad_options_are_refused(args, message, capsys):
    with pytest.raises(SystemExit):
        bench.parse(["--device", "cpu", *args])
    assert message in capsys.readouterr().err


def test_cuda_refused_without_cuda(capsys):
    import torch

    if torch.cuda.is_available():
        pytest.skip("CUDA is available here")
    with pytest.raises(SystemExit):
        bench.parse(["--device", "cuda"])
    assert "CUDA is not available" in capsys.readouterr().err


def test_unknown_network_is_named(tmp_path):
    with pytest.raises(Exception, match="no_such_net"):
        bench.main([*TINY, "--arch", "no_such_net", "--results", str(tmp_path / "r.md")])
    assert not (tmp_path / "r.md").exists()


def test_compile_network_option_keeps_outputs_and_keys():
    """hiseg.training.callbacks.CompileNetwork (off by default) compiles the network for the training
    steps only: the same outputs, the same state-dict keys (checkpoints unchanged), and eval
    mode (validation's whole images) runs the network uncompiled. The eager backend: no compiler."""
    import torch

    from hiseg.training.callbacks import CompileNetwork
    from hiseg.training.module import HierarchicalSegmentationModule

    m = HierarchicalSegmentationModule(arch_kwargs={"width": 8}, pixel_loss="edge")
    x = torch.rand(2, 3, 32, 32)
    keys = list(m.state_dict())
    with torch.no_grad():
        ref = m._network(x)
    CompileNetwork(backend="eager").setup(None, m, "validate")  # only a fit compiles
    assert m.__dict__.get("_train_network") is None
    CompileNetwork(backend="eager").setup(None, m, "fit")
    compiled = m.__dict__["_train_network"]
    assert compiled._orig_mod is m.model and list(m.state_dict()) == keys
    calls = []
    compiled.register_forward_pre_hook(lambda mod, args: calls.append(mod.training))  # the wrapper's own call
    with torch.no_grad():
        got = m._network(x)
        torch.testing.assert_close(got[0], ref[0])
        assert len(got[1]) == len(ref[1]) and calls == [True]
        m.eval()
        m._network(x)
    assert calls == [True]  # eval mode: the network itself
    # the fit over, the training steps run the network itself again (a later fit without the callback)
    CompileNetwork(backend="eager").teardown(None, m, "validate")
    assert m.__dict__["_train_network"] is compiled
    CompileNetwork(backend="eager").teardown(None, m, "fit")
    m.train()
    with torch.no_grad():
        m._network(x)
    assert calls == [True] and m.__dict__["_train_network"] is None
