"""Deployment (issue 41): BatchNorm folded at load, ``hiseg export`` to ONNX, the exported
folder run with onnxruntime and numpy without torch, and the bad inputs each refused in one
line with nothing written.

The shipped models are in the repository (``models/``); the BSDS500 val images, where
present (``../shared/data``), make the equality checks run on real images (skipped
otherwise). onnx and onnxruntime come with ``pip install "hiseg[onnx]"``: the export tests
skip without them.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from hiseg.export.manifest import MANIFEST, ExportError, read_manifest, sha256_file
from hiseg.models.fold import count_batchnorm, fold_batchnorm
from hiseg.segmentation.segmenter import Segmenter

ROOT = Path(__file__).resolve().parents[2]
VAL = ROOT.parent / "shared" / "data" / "BSDS500" / "data" / "images" / "val"
if not VAL.is_dir():  # a worktree beside the main checkout: the shared data is one level up
    VAL = Path("/work/shared/data/BSDS500/data/images/val")


def _val_images(n: int) -> list:
    files = sorted(VAL.glob("*.jpg"))[:n] if VAL.is_dir() else []
    if len(files) < n:
        pytest.skip("BSDS500 val images not found (../shared/data)")
    return files


def _synthetic(h: int = 96, w: int = 120, seed: int = 0) -> np.ndarray:
    """Blocks of colour with noise: an image with boundaries, float32 RGB in [0, 1]."""
    rng = np.random.default_rng(seed)
    img = np.zeros((h, w, 3), np.float32)
    for _ in range(6):
        y, x = rng.integers(0, h - 20), rng.integers(0, w - 20)
        img[y:y + rng.integers(15, 60), x:x + rng.integers(15, 70)] = rng.random(3)
    return np.clip(img + 0.03 * rng.standard_normal(img.shape).astype(np.float32), 0, 1)


@pytest.fixture(scope="module")
def segmenters():
    """(folded, unfolded) Segmenters of the shipped default model, on the torch backend."""
    return Segmenter(backend="torch"), Segmenter(fold=False, backend="torch")


# ----------------------------------------------------------------------------- BatchNorm folded
def test_fold_removes_every_batchnorm_and_keeps_the_map(segmenters):
    folded, plain = segmenters
    assert count_batchnorm(plain.model) > 0 and count_batchnorm(folded.model) == 0
    assert folded.model.hiseg_fingerprint == folded.pipeline.merge_head["network"]
    x = torch.from_numpy(_synthetic().transpose(2, 0, 1).copy())[None]
    with torch.inference_mode():
        a, b = torch.sigmoid(folded.model(x)), torch.sigmoid(plain.model(x))
    assert float((a - b).abs().max()) <= 1e-5


def test_fold_is_idempotent_and_in_eval_mode():
    from hiseg.models import get_model

    net = get_model("compact_boundary_net").eval()
    with torch.no_grad():  # statistics that are not the identity
        for m in net.modules():
            if isinstance(m, torch.nn.BatchNorm2d):
                m.running_mean.uniform_(-0.5, 0.5)
                m.running_var.uniform_(0.5, 2.0)
    x = torch.rand(1, 3, 40, 56)
    with torch.no_grad():
        ref = net(x)
        fold_batchnorm(net)
        once = net(x)
        fold_batchnorm(net)
        twice = net(x)
    assert not net.training and count_batchnorm(net) == 0
    assert float((once - ref).abs().max()) <= 1e-4 and torch.equal(once, twice)


def test_folded_maps_ucms_and_cuts_on_val_images(segmenters):
    """Maps within 1e-4 (float32); superpixels, trees and cuts identical; UCMs within 1e-6."""
    folded, plain = segmenters
    for f in _val_images(2):
        a, b = folded.segment(f), plain.segment(f)
        assert float(np.abs(a.boundary - b.boundary).max()) <= 1e-4
        assert np.array_equal(a.rag.labels, b.rag.labels)
        assert np.array_equal(a.hierarchy.parents, b.hierarchy.parents)
        assert float(np.abs(a.ucm2 - b.ucm2).max()) <= 1e-6
        for k in (3, 10, 30):
            assert np.array_equal(a.cut(n_regions=k), b.cut(n_regions=k))


def test_ensemble_members_are_read_unfolded():
    seg = Segmenter("bsds500", fold=False, backend="torch")
    assert count_batchnorm(seg.model) > 0


# ----------------------------------------------------------------------------- numpy features
def test_the_chain_features_equal_their_differentiable_twin(segmenters):
    """The one chain's edge features (numpy) and the training's twin (torch) agree to 1e-12."""
    from hiseg.segmentation.pooling import FEATURES, edge_features, edge_features_torch

    seg = segmenters[0]
    img = _synthetic(120, 150, seed=3)
    res = seg.segment(img)
    names = list(FEATURES)
    a = edge_features(res.rag, res.boundary, img, names)
    b = edge_features_torch(res.rag, torch.from_numpy(res.boundary).double(), img, names).numpy()
    assert a.shape == b.shape and float(np.abs(a - b).max()) <= 1e-12


def test_hierarchy_of_numpy_weights_equals_torch_one(segmenters):
    from hiseg.core.graph import region_adjacency_graph
    from hiseg.core.average_linkage import build_average_linkage_hierarchy

    res = segmenters[0].segment(_synthetic(seed=5))
    rag = res.rag
    w = np.random.default_rng(0).random(rag.graph.num_edges)
    h = build_average_linkage_hierarchy(rag.graph, w, rag.frontier_lengths().astype(np.float64))
    u_np = h.ultrametric(w)
    u_t = h.ultrametric(torch.from_numpy(w)).numpy()
    assert isinstance(u_np, np.ndarray) and float(np.abs(u_np - u_t).max()) <= 1e-15
    assert region_adjacency_graph(rag.labels).graph.num_edges == rag.graph.num_edges


# ----------------------------------------------------------------------------- export
@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    pytest.importorskip("onnx")
    pytest.importorskip("onnxruntime")
    from hiseg.export.onnx import export_model

    out = tmp_path_factory.mktemp("export") / "bsds500_ensemble"
    manifest = export_model("bsds500_ensemble", out)
    return out, manifest


def test_export_writes_graphs_and_manifest(exported):
    out, manifest = exported
    assert sorted(p.name for p in out.iterdir()) == ["boundary.onnx", MANIFEST, "merge_head.onnx"]
    m = read_manifest(out)
    assert m == manifest and m["model"] == "bsds500_ensemble" and m["format_version"] == 1
    assert m["network"]["scales"] == [0.5, 1.0] and m["network"]["batchnorm_folded"] is True
    assert m["merge_head"]["features"][0] == "mean" and m["pipeline"]["linkage"] == "average"
    assert all(sha256_file(out / n) == d for n, d in m["files"].items())
    from hiseg.models.weights import Weights

    ckpt = Weights.from_name("bsds500_ensemble").path()
    assert m["checkpoint"] == {"file": ckpt.name, "sha256": sha256_file(ckpt)}
    assert not [p for p in out.iterdir() if p.name.startswith(".")]  # no temporary file left


def test_exported_maps_equal_torch_ones(exported, segmenters):
    seg = Segmenter.from_checkpoint(exported[0], threads=1)
    assert seg.backend.name == "onnxruntime"
    images = [_synthetic(77, 131, seed=1)]
    if VAL.is_dir():
        from hiseg.io import read_image

        images += [read_image(f) for f in _val_images(2)]
    for img in images:
        got, ref = seg.boundary_map(img), segmenters[0].boundary_map(img)
        assert got.shape == ref.shape and float(np.abs(got - ref).max()) <= 1e-4


def test_exported_merge_head_equals_torch_one(exported, segmenters):
    from hiseg.export.runtime import OnnxBackend

    head = OnnxBackend(exported[0], threads=1).head
    img = _synthetic(seed=7)
    res = segmenters[0].segment(img)
    got = segmenters[0].pipeline.edge_weights(res.rag, res.boundary, img, head)
    ref = segmenters[0].pipeline.edge_weights(res.rag, res.boundary, img)
    assert float(np.abs(got - ref).max()) <= 1e-12


def test_exported_hierarchy_of_the_same_map_is_the_same(exported, segmenters):
    """Given one boundary map, the exported chain's superpixels, tree, UCM and cuts are the torch
    path's (the maps themselves differ by float32 rounding, ~1e-5)."""
    seg = Segmenter.from_checkpoint(exported[0], threads=1)
    img = _synthetic(110, 140, seed=11)
    pmap = segmenters[0].boundary_map(img)
    a, b = seg.finish(img, pmap), segmenters[0].finish(img, pmap)
    assert np.array_equal(a.rag.labels, b.rag.labels)
    assert np.array_equal(a.hierarchy.parents, b.hierarchy.parents)
    assert float(np.abs(a.ucm2 - b.ucm2).max()) <= 1e-12
    for k in (2, 5, 12):
        assert np.array_equal(a.cut(n_regions=k), b.cut(n_regions=k))


def _run_python(code: str, **env) -> subprocess.CompletedProcess:
    e = {**os.environ, "PYTHONPATH": str(ROOT), **env}
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=e, timeout=300)


def test_tensor_tests_import_no_torch_and_agree_with_torch_once_it_is_imported():
    """The lazy torch's ``torch.is_tensor`` (through the layer's module, which tests its weights with
    it): False for numpy without importing torch; once torch is imported (by anyone), True for a
    tensor and a Parameter and False for numpy, as ``torch.is_tensor`` says."""
    r = _run_python("""
import sys
import numpy as np
from hiseg.core._lazy import lazy_torch
from hiseg.core.ultrametric import torch as layer_torch
_is_tensor = layer_torch.is_tensor
lazy = lazy_torch()
before = [lazy.is_tensor(np.zeros(2)), _is_tensor(np.zeros(2)), 'torch' in sys.modules]
import torch
xs = [torch.zeros(2), torch.nn.Parameter(torch.zeros(1)), np.zeros(2), [1.0], 3.0]
after = [(lazy.is_tensor(x), _is_tensor(x), torch.is_tensor(x)) for x in xs]
print(before, after)
""")
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == ("[False, False, False] [(True, True, True), (True, True, True), (False, False, False), "
                                "(False, False, False), (False, False, False)]"), r.stdout


def test_exported_path_imports_no_torch(exported, tmp_path):
    import cv2

    img = tmp_path / "im.png"
    cv2.imwrite(str(img), (_synthetic(90, 110, seed=2) * 255).astype(np.uint8))
    code = f"""
import sys
from hiseg import Segmenter
from hiseg.segmentation.outputs import write_outputs
seg = Segmenter.from_checkpoint({str(exported[0])!r}, threads=1)
res = seg.segment({str(img)!r})
res.cut(n_regions=4)
write_outputs({str(tmp_path / 'out')!r}, "im", res, seg.read({str(img)!r})[2], n_regions=4)
print(res.saliency.shape, 'torch' in sys.modules)
"""
    r = _run_python(code)
    assert r.returncode == 0, r.stderr
    assert r.stdout.split()[-1] == "False", r.stdout
    assert len(list((tmp_path / "out").iterdir())) == 5


def test_cli_predict_of_an_exported_model_imports_no_torch(exported, tmp_path):
    """``hiseg predict --checkpoint DIR`` (``--device auto``, the default) runs without torch:
    importing it would add its 1.5 s to every start-up of the exported path."""
    import cv2

    cv2.imwrite(str(tmp_path / "a.png"), (_synthetic(90, 110, seed=3) * 255).astype(np.uint8))
    code = f"""
import sys
from hiseg.cli import main
rc = main(["predict", {str(tmp_path / 'a.png')!r}, "--checkpoint", {str(exported[0])!r},
           "-o", {str(tmp_path / 'out')!r}, "-q", "--workers", "1"])
print(rc, 'torch' in sys.modules)
"""
    r = _run_python(code)
    assert r.returncode == 0, r.stderr
    assert r.stdout.split()[-2:] == ["0", "False"], r.stdout + r.stderr
    r = _run_python(code.replace('"-q"', '"-q", "--device", "cuda"').replace("/out'", "/out2'"))
    assert "--device 'cuda'" in r.stderr and len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert not (tmp_path / "out2").exists()


def test_the_library_resume_of_an_exported_model_checks_the_run_record(exported, tmp_path):
    """predict_file(resume=True) with an exported model: the record names the folder's model by its
    manifest's sha256 and the cut, so the same call is skipped and another cut of the same image
    is refused in one line (the run record of hiseg.segmentation.record)."""
    import cv2

    from hiseg.segmentation.outputs import predict_file

    cv2.imwrite(str(tmp_path / "a.png"), (_synthetic(90, 110, seed=6) * 255).astype(np.uint8))
    seg, out = Segmenter.from_checkpoint(exported[0], threads=1), tmp_path / "out"
    assert predict_file(seg, tmp_path / "a.png", out, n_regions=4) is not None
    record = json.loads((out / ".hiseg-predict.json").read_text())
    assert record["options"][0]["checkpoint"] == str(exported[0]) and record["options"][0]["sha256"]
    assert predict_file(seg, tmp_path / "a.png", out, n_regions=4, resume=True) is None  # done: skipped
    with pytest.raises(ValueError, match=r"written with n_regions=4, this call asks for n_regions=5"):
        predict_file(seg, tmp_path / "a.png", out, n_regions=5, resume=True)


#: what an inference-only install leaves out (README, "Deploy": numpy, scipy, higra, scikit-image,
#: OpenCV, onnxruntime and tqdm only)
NOT_IN_A_RUNTIME_INSTALL = ("torch", "torchvision", "pytorch_lightning", "lightning", "lightning_fabric", "torchmetrics",
                            "jsonargparse", "sklearn", "numba", "matplotlib", "tensorboard", "onnx", "pandas")


def test_predict_view_and_evaluate_run_without_torch_and_the_training_stack(exported, tmp_path):
    """The README's inference-only install: with torch, Lightning, scikit-learn, numba, matplotlib
    and onnx unimportable, ``hiseg predict``, ``view`` and ``evaluate`` run an exported model."""
    import cv2

    cv2.imwrite(str(tmp_path / "a.png"), (_synthetic(90, 110, seed=5) * 255).astype(np.uint8))
    gt = (_synthetic(90, 110, seed=5)[..., 0] > 0.5).astype(np.uint16) + 1
    import scipy.io

    (tmp_path / "gt").mkdir()
    scipy.io.savemat(tmp_path / "gt" / "a.mat",
                     {"groundTruth": np.array([[{"Segmentation": gt, "Boundaries": np.zeros_like(gt, bool)}]],
                                              dtype=object)})
    code = f"""
import sys
for name in {NOT_IN_A_RUNTIME_INSTALL!r}:
    sys.modules[name] = None  # not installed: any import of it fails
from hiseg.cli import main
t, ex = {str(tmp_path)!r}, {str(exported[0])!r}
print(main(["predict", t + "/a.png", "--checkpoint", ex, "-o", t + "/out", "-q", "--workers", "1"]),
      main(["view", t + "/a.png", "--checkpoint", ex, "-o", t + "/pages", "-q"]),
      main(["evaluate", t + "/out", "--gt", t + "/gt", "-q", "--workers", "1"]))
"""
    r = _run_python(code)
    assert r.returncode == 0, r.stderr
    assert r.stdout.split()[-3:] == ["0", "0", "0"], r.stdout + r.stderr
    assert (tmp_path / "out" / "a_ucm16.png").is_file() and (tmp_path / "pages" / "a.html").is_file()


def test_cli_export_and_predict(exported, tmp_path):
    import cv2

    from hiseg.cli import main

    cv2.imwrite(str(tmp_path / "a.png"), (_synthetic(seed=4) * 255).astype(np.uint8))
    out = tmp_path / "pred"
    assert main(["predict", str(tmp_path / "a.png"), "-c", str(exported[0]), "-o", str(out), "--regions", "3",
                 "-q", "--workers", "1"]) == 0
    assert sorted(p.name for p in out.iterdir() if not p.name.startswith(".")) == [
        "a.mat", "a_labels.png", "a_overlay.png", "a_ucm.png", "a_ucm16.png"]
    # an existing export is not replaced without --overwrite, and nothing is written
    before = {p.name: p.stat().st_mtime_ns for p in exported[0].iterdir()}
    assert main(["export", "-o", str(exported[0]), "-q"]) == 2
    assert {p.name: p.stat().st_mtime_ns for p in exported[0].iterdir()} == before
    # the pipeline is fixed at export
    assert main(["predict", str(tmp_path / "a.png"), "-c", str(exported[0]), "-o", str(out), "--scales", "1",
                 "--overwrite", "-q"]) == 2


# ----------------------------------------------------------------------------- bad input
def _copy(src: Path, dst: Path) -> Path:
    dst.mkdir()
    for p in src.iterdir():
        (dst / p.name).write_bytes(p.read_bytes())
    return dst


def _rewrite_manifest(folder: Path, **changes) -> None:
    m = json.loads((folder / MANIFEST).read_text())
    m.update(changes)
    (folder / MANIFEST).write_text(json.dumps(m))


class _NotBoundary(torch.nn.Module):
    arch = "test_not_boundary"

    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 4, 1)
        self.arch_kwargs = {}

    def forward(self, x):
        return self.conv(x)


def test_export_refuses_a_checkpoint_that_is_no_boundary_model(tmp_path, monkeypatch):
    pytest.importorskip("onnxruntime")
    from hiseg.export.onnx import export_model
    from hiseg.models import weights
    from hiseg.models.weights import register_model, save_weights

    monkeypatch.setattr(weights, "_BUILDERS", dict(weights._BUILDERS))  # the test's builder leaves with the test
    register_model(_NotBoundary.arch, lambda weights=None, **kw: _load_into(_NotBoundary(), weights),
                   overwrite=True)
    ck = save_weights(_NotBoundary(), tmp_path / "not_boundary.ckpt", metadata={"pipeline": {}})
    with pytest.raises(ExportError, match="not a boundary model"):
        export_model(ck, tmp_path / "out")
    torch.save({"weights": torch.zeros(3)}, tmp_path / "bare.ckpt")
    with pytest.raises(ExportError, match="cannot export"):
        export_model(tmp_path / "bare.ckpt", tmp_path / "out")
    assert not (tmp_path / "out").exists()


def _load_into(model, weights):
    from hiseg.models.weights import load_weights

    return load_weights(model, weights) if weights is not None else model


@pytest.mark.parametrize("damage, message", [
    ("missing", "merge_head.onnx is missing"),
    ("edited", "does not match its sha256"),
    ("newer", "reads format 1 at most"),
    ("no manifest", "no manifest.json"),
    ("not json", "not readable JSON"),
])
def test_a_damaged_folder_is_refused_in_one_line(exported, tmp_path, damage, message):
    folder = _copy(exported[0], tmp_path / "copy")
    if damage == "missing":
        (folder / "merge_head.onnx").unlink()
    elif damage == "edited":
        data = bytearray((folder / "merge_head.onnx").read_bytes())
        data[-10] ^= 0xFF
        (folder / "merge_head.onnx").write_bytes(bytes(data))
    elif damage == "newer":
        _rewrite_manifest(folder, format_version=99, hiseg_version="9.0")
    elif damage == "no manifest":
        (folder / MANIFEST).unlink()
    else:
        (folder / MANIFEST).write_text("{ not json")
    with pytest.raises(ExportError, match=message) as e:
        read_manifest(folder)
    assert "\n" not in str(e.value)


def test_graph_inputs_that_do_not_match_the_manifest(exported, tmp_path):
    from hiseg.export.runtime import OnnxBackend

    folder = _copy(exported[0], tmp_path / "swapped")
    (folder / "merge_head.onnx").write_bytes((folder / "boundary.onnx").read_bytes())
    m = json.loads((folder / MANIFEST).read_text())
    m["files"]["merge_head.onnx"] = sha256_file(folder / "merge_head.onnx")
    (folder / MANIFEST).write_text(json.dumps(m))
    with pytest.raises(ExportError, match="merge_head.onnx's inputs are"):
        OnnxBackend(folder)


def test_onnxruntime_missing_names_the_extra(exported, tmp_path):
    code = f"""
import sys
sys.modules['onnxruntime'] = None  # not installed
from hiseg.cli import main
sys.exit(main(['predict', {str(tmp_path / 'x.png')!r}, '-c', {str(exported[0])!r}, '-o', {str(tmp_path / 'o')!r}]))
"""
    import cv2

    cv2.imwrite(str(tmp_path / "x.png"), (_synthetic(seed=9) * 255).astype(np.uint8))
    r = _run_python(code)
    assert r.returncode == 2
    lines = [ln for ln in r.stderr.splitlines() if "error" in ln]
    assert len(lines) == 1 and "pip install onnxruntime" in lines[0], r.stderr
    assert not (tmp_path / "o").exists() or not [p for p in (tmp_path / "o").iterdir() if p.suffix == ".png"]


def test_an_image_smaller_than_the_exported_graph_computes(exported):
    """Below the smallest side the graph computes (32 pixels), the image is mirrored out to it and the
    map cropped back: a map of the image's size, probabilities, a hierarchy."""
    seg = Segmenter.from_checkpoint(exported[0], threads=1)
    assert seg.backend.min_side == 32
    for shape in ((20, 80), (1, 1), (31, 5)):
        img = np.random.default_rng(0).random((*shape, 3), dtype=np.float32)
        pmap = seg.boundary_map(img)
        assert pmap.shape == shape and 0 <= pmap.min() and pmap.max() <= 1
        assert seg.segment(img).saliency.shape == shape


def test_an_exported_folder_given_as_a_checkpoint_runs_on_onnxruntime(exported, tmp_path):
    """``Segmenter.from_checkpoint(folder)`` runs an exported folder (one class for every model);
    the torch backend refuses it in one line; any other folder is named as a folder; the torch
    loader, given the folder, names the way to run it."""
    from hiseg.models.weights import CheckpointError, load_checkpoint_file

    assert MANIFEST == "manifest.json"  # the name hiseg.models.weights looks for (it may not import export)
    seg = Segmenter.from_checkpoint(exported[0])
    assert seg.backend.name == "onnxruntime" and seg.model is None and seg.name == "bsds500_ensemble"
    assert "backend='onnxruntime'" in repr(seg) and "model='bsds500_ensemble'" in repr(seg)
    with pytest.raises(ValueError, match="written by hiseg export: it runs on onnxruntime"):
        Segmenter.from_checkpoint(exported[0], backend="torch")
    with pytest.raises(CheckpointError, match=r"written by hiseg export.*Segmenter\.from_checkpoint"):
        load_checkpoint_file(exported[0])
    with pytest.raises(FileNotFoundError, match="is a folder, not a checkpoint file"):
        Segmenter.from_checkpoint(tmp_path)
