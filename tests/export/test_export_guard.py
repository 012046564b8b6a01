"""Exported folders that were tampered with (issue 52, item 5): every manifest field of the
wrong type or out of range is refused in one line before anything is built; a graph that would
make onnxruntime allocate tens of GB is refused before a session opens, and onnxruntime's
allocations can be bounded for what only the image shapes; ``hiseg export`` checks its
destination before the export's ~20 s."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from _hostile_graphs import KINDS, hostile_graph

from hiseg.export.manifest import MANIFEST, ExportError, read_manifest, sha256_file

ROOT = Path(__file__).resolve().parents[2]
SHIPPED = ROOT / "models" / "hiseg_bsds500_merge_onnx"  # a network and a merge head


def _tampered(tmp_path, edit) -> Path:
    folder = tmp_path / "exported"
    shutil.copytree(SHIPPED, folder)
    m = json.loads((folder / MANIFEST).read_text())
    edit(m)
    (folder / MANIFEST).write_text(json.dumps(m))
    return folder


def _set(path, value):
    def edit(m):
        *head, last = path.split(".")
        holder = m
        for k in head:
            holder = holder[k]
        if value is KeyError:
            del holder[last]
        else:
            holder[last] = value
    return edit


CASES = [("merge_head", "sigmoid"), ("pipeline", [1, 2]), ("network.scales", 1.0), ("merge_head.features", KeyError),
         ("pipeline.max_pixels", -5), ("pipeline.sigma", 1e9), ("network", None), ("files", ["boundary.onnx"]),
         ("network.min_side", "16"), ("network.flip", "no"), ("network.file", "../boundary.onnx"),
         ("merge_head.features", ["mean", 3]), ("pipeline.region_size", float("nan")), ("model", 7),
         ("network.scales", [0.5, 1e6]), ("pipeline.fit_iterations", 1e12)]


@pytest.mark.parametrize("field,value", CASES, ids=[f"{f}={v!r}" for f, v in CASES])
def test_a_manifest_field_of_the_wrong_type_or_range_is_refused_in_one_line(tmp_path, field, value):
    folder = _tampered(tmp_path, _set(field, value))
    with pytest.raises(ExportError) as e:
        read_manifest(folder)
    msg = str(e.value)
    assert "\n" not in msg and repr(field) in msg and str(folder) in msg, msg


def test_hiseg_predict_on_a_tampered_manifest_exits_2_in_one_line(tmp_path, capsys):
    from hiseg.cli import main

    folder = _tampered(tmp_path, _set("pipeline.sigma", 1e9))
    img = tmp_path / "a.png"
    import numpy as np
    from PIL import Image

    Image.fromarray(np.zeros((40, 48, 3), np.uint8)).save(img)
    assert main(["predict", str(img), "--checkpoint", str(folder), "-o", str(tmp_path / "out"), "-q"]) == 2
    err = capsys.readouterr().err.strip()
    assert "Traceback" not in err and "'pipeline.sigma'" in err.splitlines()[-1], err
    assert not (tmp_path / "out").exists()


def test_the_shipped_manifests_and_graphs_pass():
    pytest.importorskip("onnx")
    from hiseg.export.guard import check_graph

    for folder in sorted((ROOT / "models").glob("*_onnx")):
        m = read_manifest(folder)
        for name in m["files"]:
            check_graph(folder / name)


@pytest.mark.parametrize("kind", KINDS)
def test_a_graph_that_would_allocate_40_gb_is_refused_before_a_session_opens(tmp_path, kind):
    pytest.importorskip("onnx")
    from hiseg.export.guard import check_graph

    path = tmp_path / "boundary.onnx"
    hostile_graph(kind, path)
    with pytest.raises(ExportError, match=r"100000|102400") as e:
        check_graph(path, "exported model X")
    assert "\n" not in str(e.value) and "boundary.onnx" in str(e.value)


def test_a_tensor_declaring_more_than_it_holds_is_refused(tmp_path):
    onnx = pytest.importorskip("onnx")
    from hiseg.export.guard import check_graph

    model = onnx.load(str(SHIPPED / "boundary.onnx"))
    t = next(t for t in model.graph.initializer if len(t.dims) == 4)
    t.dims[0] *= 2  # the file holds half of what it declares
    onnx.save(model, str(tmp_path / "boundary.onnx"))
    with pytest.raises(ExportError, match="declares shape"):
        check_graph(tmp_path / "boundary.onnx")


def test_onnxruntime_allocations_are_bounded(tmp_path):
    """The graph shaped by the image at run time, with the static check skipped: the bounded arena
    refuses the allocation (in a process of its own, under an address-space limit)."""
    pytest.importorskip("onnx")
    pytest.importorskip("onnxruntime")
    hostile_graph("from_image", tmp_path / "g.onnx")
    code = f"""
import resource, numpy as np, onnxruntime as ort
resource.setrlimit(resource.RLIMIT_AS, (6 << 30, 6 << 30))
from hiseg.export.guard import bound_allocations
so = ort.SessionOptions()
so.log_severity_level = 4
assert bound_allocations(ort, so, 256 << 20) == 256 << 20
s = ort.InferenceSession({str(tmp_path / 'g.onnx')!r}, so, providers=["CPUExecutionProvider"])
try:
    s.run(None, {{"image": np.zeros((1, 3, 64, 64), np.float32)}})
    print("ALLOCATED")
except Exception as e:
    print("REFUSED", "smaller than requested" in str(e))
"""
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert r.stdout.strip() == "REFUSED True", (r.stdout, r.stderr[-500:])


# ----------------------------------------------------------------------------- hiseg export's destination
def _no_load(monkeypatch):
    def loaded(*a, **k):
        raise AssertionError("the model was loaded before the destination was checked")
    monkeypatch.setattr("hiseg.export.onnx._load", loaded)


@pytest.mark.parametrize("kind", ["dangling", "proc", "file", "manifest_there", "under_a_file"])
def test_hiseg_export_checks_its_destination_before_exporting(tmp_path, monkeypatch, capsys, kind):
    pytest.importorskip("onnx")
    from hiseg.cli import main

    _no_load(monkeypatch)
    out = tmp_path / "out"
    if kind == "dangling":
        out.symlink_to(tmp_path / "gone")
    elif kind == "proc":
        out = Path("/proc/hiseg_export_test")
    elif kind == "file":
        out.write_text("x")
    elif kind == "manifest_there":
        out.mkdir()
        (out / MANIFEST).write_text("{}")
    else:
        (tmp_path / "f").write_text("x")
        out = tmp_path / "f" / "out"
    rc = main(["export", "bsds500", "-o", str(out), "-q"])
    err = capsys.readouterr().err.strip()
    assert rc == 2 and "Traceback" not in err and str(out) in err.splitlines()[-1], err
    assert not (tmp_path / "gone").exists()


def test_hiseg_export_destination_probe_leaves_nothing(tmp_path):
    from hiseg.export.onnx import check_destination

    check_destination(tmp_path / "new" / "deeper", overwrite=False)
    assert os.listdir(tmp_path) == []


def test_the_manifests_model_name_reaches_the_terminal_escaped(tmp_path, capsys):
    """An edited name (a newline, an ANSI escape) is printed with its control characters escaped."""
    from hiseg.cli import main

    folder = _tampered(tmp_path, _set("model", "evil\n\x1b[31mred"))
    import numpy as np
    from PIL import Image

    Image.fromarray(np.zeros((40, 48, 3), np.uint8)).save(tmp_path / "a.png")
    main(["predict", str(tmp_path / "a.png"), "--checkpoint", str(folder), "-o", str(tmp_path / "out")])
    out = capsys.readouterr()
    text = out.out + out.err
    assert "\x1b" not in text and "evil\n" not in text
    assert "evil\\n\\x1b[31mred" in text, text
