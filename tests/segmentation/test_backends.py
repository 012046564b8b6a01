"""One Segmenter for every model (issue 51): the network is a backend, the chain after the map is
one; the shipped models run exported on onnxruntime by default; an install without torch answers
every command and public entry point in one line.

The shipped models and their exported forms are in the repository (``models/``); nothing here
needs the BSDS500 data.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from hiseg.segmentation.segmenter import Segmenter
from tests.export.test_export import _synthetic  # blocks of colour with noise: one image maker for the deploy tests

ROOT = Path(__file__).resolve().parents[2]

#: What an install without torch lacks (the README's line installs none of them).
ABSENT = ("torch", "torchvision", "pytorch_lightning", "lightning", "lightning_fabric", "torchmetrics", "jsonargparse",
          "sklearn", "numba", "matplotlib", "tensorboard", "onnx", "pandas")

#: Prepended to a subprocess's code: those packages cannot be imported (as if not installed; a
#: finder that refuses them, not ``sys.modules[name] = None``, which other packages probe).
BLOCK = f"""
import importlib.abc, sys
class _Absent(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in {ABSENT!r}:
            raise ModuleNotFoundError(f"No module named {{name!r}}", name=name)
sys.meta_path.insert(0, _Absent())
"""


def _python(code: str, cwd=None, timeout: int = 300) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd=cwd,
                          timeout=timeout)


# ----------------------------------------------------------------------------- choosing the backend
def test_the_default_runs_its_shipped_export_on_onnxruntime():
    seg = Segmenter()
    assert seg.backend.name == "onnxruntime" and seg.model is None and str(seg.device) == "cpu"
    assert repr(seg).startswith("Segmenter(model='bsds500_ensemble', backend='onnxruntime', device='cpu'")
    assert seg.pipeline.scales == (0.5, 1.0) and seg.backend.head is not None
    torch_seg = Segmenter(backend="torch")
    assert torch_seg.backend.name == "torch" and torch_seg.model is not None
    assert repr(torch_seg).startswith("Segmenter(model='bsds500_ensemble', backend='torch'")
    import hiseg

    assert hiseg.ExportedSegmenter is hiseg.Segmenter


@pytest.mark.parametrize("name", ["bsds500", "bsds500_merge", "bsds500_ensemble"])
def test_each_shipped_export_is_its_checkpoint(name):
    """The exported form runs beside the very checkpoint it was made from, and makes its maps
    (within 1e-4, float32 kernels) and, given the same map, the same hierarchy."""
    from hiseg.export.manifest import read_manifest, sha256_file
    from hiseg.models.weights import Weights
    from hiseg.segmentation.backends import shipped_export

    ckpt = Weights.from_name(name).path()
    folder = shipped_export(name)
    assert folder == ckpt.with_name(ckpt.stem + "_onnx")
    m = read_manifest(folder)
    assert m["checkpoint"]["sha256"] == sha256_file(ckpt) and m["model"] == name
    onnx, ref = Segmenter(name), Segmenter(name, backend="torch")
    assert onnx.backend.name == "onnxruntime" and onnx.pipeline.to_dict() == {**ref.pipeline.to_dict(),
                                                                            "merge_head": None}
    img = _synthetic(90, 130, seed=4)
    a, b = onnx.boundary_map(img), ref.boundary_map(img)
    assert float(np.abs(a - b).max()) <= 1e-4
    x, y = onnx.finish(img, b), ref.finish(img, b)
    assert np.array_equal(x.hierarchy.parents, y.hierarchy.parents)
    assert float(np.abs(x.ucm2 - y.ucm2).max()) <= 1e-12


def test_a_stale_or_missing_export_falls_back_to_torch(tmp_path, monkeypatch):
    """A checkpoint replaced in $HISEG_WEIGHTS_DIR is never run from the export of the old one."""
    from hiseg.models.weights import Weights
    from hiseg.segmentation.backends import choose_backend, shipped_export

    ckpt = Weights.from_name("bsds500").path()
    shutil.copyfile(ckpt, tmp_path / ckpt.name)
    shutil.copytree(ckpt.with_name(ckpt.stem + "_onnx"), tmp_path / (ckpt.stem + "_onnx"))
    monkeypatch.setenv("HISEG_WEIGHTS_DIR", str(tmp_path))
    assert shipped_export("bsds500") == tmp_path / (ckpt.stem + "_onnx")
    with open(tmp_path / ckpt.name, "ab") as f:
        f.write(b"\0")  # another file than the export was made from
    assert shipped_export("bsds500") is None
    assert choose_backend("bsds500", "auto", "cpu") == ("torch", None)
    with pytest.raises(ValueError, match="no exported form here"):
        choose_backend("bsds500", "onnxruntime", "cpu")
    shutil.rmtree(tmp_path / (ckpt.stem + "_onnx"))
    assert shipped_export("bsds500") is None


def test_backend_choices_that_cannot_run_are_refused_in_one_line(tmp_path):
    from hiseg.models.weights import Weights
    from hiseg.segmentation.backends import choose_backend

    ckpt = Weights.from_name("bsds500").path()
    with pytest.raises(ValueError, match="backend onnxruntime runs exported models") as e:
        Segmenter(ckpt, backend="onnxruntime")
    assert "\n" not in str(e.value)
    with pytest.raises(ValueError, match="expected one of auto, torch, onnxruntime"):
        Segmenter("bsds500", backend="cuda")
    with pytest.raises(ValueError, match="onnxruntime backend runs on the CPU"):
        Segmenter("bsds500", backend="onnxruntime", device="cuda")
    assert choose_backend(ckpt, "auto", "cpu") == ("torch", None)  # a file: torch
    assert choose_backend("bsds500", "auto", "cuda")[0] == "torch"  # another device than the CPU: torch


def test_an_exported_network_holds_its_scales_but_the_chain_is_free():
    seg = Segmenter("bsds500")
    with pytest.raises(ValueError, match="fixed at export"):
        seg.pipeline = seg.pipeline.with_overrides(scales=(1.0, 2.0))
    seg.pipeline = seg.pipeline.with_overrides(linkage="single", max_pixels=20000)
    img = _synthetic(seed=2)
    res, ref = seg.segment(img), Segmenter("bsds500", backend="torch")
    ref.pipeline = ref.pipeline.with_overrides(linkage="single", max_pixels=20000)
    want = ref.finish(img, seg.boundary_map(img))
    assert np.array_equal(res.hierarchy.parents, want.hierarchy.parents)


def test_a_map_outside_probabilities_is_refused(monkeypatch):
    """An edited graph whose map is not a probability (-1000 everywhere) is refused, never an
    all-zero UCM; NaN too."""
    seg = Segmenter("bsds500")
    img = _synthetic(seed=1)
    monkeypatch.setattr(seg.backend, "boundary_map", lambda image, pipeline=None, tile=0:
                        np.full(image.shape[:2], -1000, np.float32))
    with pytest.raises(ValueError, match=r"ranges over \[-1000, -1000\], not probabilities in \[0, 1\]"):
        seg.segment(img)
    monkeypatch.setattr(seg.backend, "boundary_map", lambda image, pipeline=None, tile=0:
                        np.full(image.shape[:2], np.nan, np.float32))
    with pytest.raises(ValueError, match="NaN or infinite"):
        seg.segment(img)


def test_workers_get_the_chain_with_the_backend_head():
    import pickle

    seg = Segmenter()
    copy = pickle.loads(pickle.dumps(seg.worker_copy()))  # what a worker process receives
    img = _synthetic(seed=8)
    pmap = seg.boundary_map(img)
    a, b = copy.finish(img, pmap), seg.finish(img, pmap)
    assert np.array_equal(a.ucm2, b.ucm2)
    torch_copy = Segmenter("bsds500_merge", backend="torch").worker_copy()
    assert torch_copy.model is None and torch_copy.pipeline.head is not None


# ----------------------------------------------------------------------------- the one chain
def test_the_chain_needs_no_torch_and_equals_the_differentiable_twin():
    """Pipeline.edge_weights (numpy, every backend's inference) equals Pipeline.graph_weights (torch,
    the training's, differentiable) to 1e-12, with and without a merge head."""
    import torch

    for name in ("bsds500", "bsds500_merge"):
        seg = Segmenter(name, backend="torch")
        img = _synthetic(100, 140, seed=6)
        res = seg.segment(img)
        got = seg.pipeline.edge_weights(res.rag, res.boundary, img)
        ref = seg.pipeline.graph_weights([res.rag], torch.from_numpy(res.boundary).double()[None], [img])
        assert float(np.abs(got - ref.detach().numpy()).max()) <= 1e-12, name


def test_one_image_with_the_default_imports_no_torch_lightning_or_matplotlib(tmp_path):
    import cv2

    cv2.imwrite(str(tmp_path / "a.png"), (_synthetic(seed=3) * 255).astype(np.uint8))
    r = _python(f"""
import sys
from hiseg.cli import main
rc = main(["predict", {str(tmp_path / 'a.png')!r}, "-o", {str(tmp_path / 'out')!r}, "-q", "--regions", "3"])
heavy = [m for m in ("torch", "pytorch_lightning", "lightning", "torchmetrics", "jsonargparse", "matplotlib",
                     "scipy.cluster") if m in sys.modules]
print(rc, heavy)
""")
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip().splitlines()[-1] == "0 []", r.stdout + r.stderr
    assert (tmp_path / "out" / "a_ucm16.png").is_file()


def test_higra_plots_after_its_plotting_imports_were_deferred():
    r = _python("""
import sys
import numpy as np
from hiseg.core._lazy import import_higra
hg = import_higra()
print("matplotlib" in sys.modules, "scipy.cluster.hierarchy" in sys.modules)
import matplotlib
matplotlib.use("Agg")
hg.plot_partition_tree(hg.Tree((5, 5, 6, 6, 6, 6, 6)), altitudes=np.array([0, 0, 0, 0, 0, 1, 2.0]))
print("plotted")
""")
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["False", "False", "plotted"], r.stdout


# ----------------------------------------------------------------------------- an install without torch
def test_every_command_without_torch_runs_or_says_what_to_install(tmp_path):
    """With torch and the training stack not installed: predict, view and evaluate run the
    shipped default on onnxruntime; every command that needs torch answers in one line naming
    the install line, exit 2, no traceback, nothing written."""
    import cv2

    cv2.imwrite(str(tmp_path / "a.png"), (_synthetic(seed=5) * 255).astype(np.uint8))
    commands = {
        "predict": (["predict", "a.png", "-o", "p", "-q", "--workers", "1"], 0),
        "view": (["view", "a.png", "-o", "v", "-q"], 0),
        "predict --classical": (["predict", "a.png", "-o", "c", "-q", "--classical", "--workers", "1"], 2),
        "predict --backend torch": (["predict", "a.png", "-o", "t", "-q", "--backend", "torch"], 2),
        "predict a .ckpt": (["predict", "a.png", "-o", "k", "-q", "--checkpoint",
                             str(ROOT / "models" / "hiseg_bsds500.ckpt")], 2),
        "export": (["export", "-o", "e", "-q"], 2),
        "ensemble": (["ensemble", "bsds500", "bsds500_merge", "-o", "n"], 2),
        "train --help": (["train", "--help"], 2),
        "train": (["train"], 2),
    }
    code = BLOCK + f"""
from hiseg.cli import main
import json, contextlib, io
out = {{}}
for key, (argv, _) in {json.dumps(commands)}.items():
    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        try:
            rc = main(argv)
        except SystemExit as e:  # argparse's and LightningCLI's way out
            rc = e.code
    out[key] = [rc, err.getvalue()]
print(json.dumps(out))
"""
    r = _python(code, cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    got = json.loads(r.stdout.strip().splitlines()[-1])
    for key, (_, want) in commands.items():
        rc, err = got[key]
        assert rc == want, (key, rc, err)
        assert "Traceback" not in err, (key, err)
        if want == 2:
            lines = [ln for ln in err.splitlines() if ln.strip()]
            assert len(lines) == 1 and "pip install torch" in lines[0], (key, err)
    assert (tmp_path / "p" / "a_ucm16.png").is_file() and (tmp_path / "v" / "a.html").is_file()
    assert not any((tmp_path / d).exists() and any((tmp_path / d).glob("*.png")) for d in "ctk")
    assert not (tmp_path / "e").exists() and not (tmp_path / "n").exists()


def test_the_public_entry_points_without_torch(tmp_path):
    """``Segmenter()`` segments; the entry points that need torch raise one line naming the
    install line (an ImportError), not a traceback from deep inside."""
    code = BLOCK + """
import numpy as np, hiseg
res = hiseg.Segmenter().segment(np.random.default_rng(0).random((64, 80, 3), dtype=np.float32))
print("segmented", res.cut(n_regions=3).max() + 1)
calls = {
    "Segmenter(backend='torch')": lambda: hiseg.Segmenter(backend="torch"),
    "Segmenter.classical().segment": lambda: hiseg.Segmenter.classical().segment(np.zeros((40, 40, 3), np.float32)),
    "UltrametricClustering": lambda: hiseg.UltrametricClustering,
    "fit_ultrametric": lambda: hiseg.fit_ultrametric,
}
for name, call in calls.items():
    try:
        call()
        print(name, "ran")
    except ImportError as e:
        print(name, "ImportError", "pip install torch" in str(e) and "\\n" not in str(e))
"""
    r = _python(code, cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    lines = r.stdout.strip().splitlines()
    assert lines[0] == "segmented 3", r.stdout
    assert all(ln.endswith("ImportError True") for ln in lines[1:]), r.stdout
