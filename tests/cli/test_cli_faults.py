"""hiseg predict / view and the Segmenter API on bad options and inputs (issue 19's fault
probe, issue 23's CLI items): a clear error naming the option or file, a correct result, or
a warning; never a silent wrong answer, a replaced file or a half-written output."""
import errno
import json
import os
import pickle
import re

import cv2
import numpy as np
import pytest
import torch
from tests.segmentation.test_inference import checker_image

from hiseg.cli import main as cli_main
from hiseg.io import DataError, atomic_write, read_image
from hiseg.models import get_model
from hiseg.models.weights import CheckpointError, read_checkpoint, save_weights
from hiseg.segmentation.outputs import MAX_LABELS, write_outputs
from hiseg.segmentation.result import SegmentationResult
from hiseg.segmentation.segmenter import Segmenter, resolve_device

PIPE = {"superpixels": "boundary_watershed", "linkage": "average", "region_size": 6.0}


def quadrants():
    """test_inference's three coloured quadrants as a uint8 image."""
    return (checker_image() * 255).astype(np.uint8)


def photos(tmp_path, *names):
    d = tmp_path / "photos"
    d.mkdir(exist_ok=True)
    for i, n in enumerate(names):
        cv2.imwrite(str(d / n), np.roll(quadrants(), 5 * i, axis=1))
    return d


def snapshot(folder):
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir())} if folder.exists() else None


def run(capsys, argv):
    """(exit status, stderr) of ``hiseg ARGV``; argparse errors give status 2 too."""
    try:
        rc = cli_main(argv)
    except SystemExit as e:
        rc = e.code
    return rc, capsys.readouterr().err


# ----------------------------------------------------------------------------- 1: > 65,535 regions
def test_a_cut_with_more_regions_than_a_16_bit_label_image_is_refused_not_wrapped(tmp_path):
    from hiseg.core.graph import region_adjacency_graph
    from hiseg.core.ultrametric import build_hierarchy

    h, w = 260, 260  # every pixel its own region: 67,600 regions > 65,536
    rag = region_adjacency_graph(np.arange(h * w).reshape(h, w))
    u = torch.rand(rag.graph.num_edges, dtype=torch.float64, generator=torch.Generator().manual_seed(0)) * 0.9 + 0.1
    res = SegmentationResult(rag, u.numpy(), build_hierarchy(rag.graph, u))
    img = np.zeros((h, w, 3), np.float32)
    assert int(res.cut(threshold=0.0).max()) + 1 == h * w > MAX_LABELS  # the API's labels are int64, exact
    out = tmp_path / "out"
    with pytest.raises(ValueError, match=r"67600 regions, more than a 16-bit label image .*nothing of x"):
        write_outputs(out, "x", res, img, threshold=0.0)
    assert not out.exists()
    # a cut that fits is written exactly
    lab = res.cut(threshold=0.5)
    assert 1 < int(lab.max()) + 1 <= MAX_LABELS
    write_outputs(out, "x", res, img, threshold=0.5)
    np.testing.assert_array_equal(cv2.imread(str(out / "x_labels.png"), cv2.IMREAD_UNCHANGED), lab)


# ----------------------------------------------------------------------------- 3: NaN weights
def test_a_checkpoint_with_nan_weights_is_refused_with_its_name(tmp_path, capsys):
    torch.manual_seed(0)
    net = get_model("compact_boundary_net", width=8)
    with torch.no_grad():
        next(net.parameters()).view(-1)[0] = float("nan")
    ckpt = save_weights(net, tmp_path / "nan.ckpt", metadata={"pipeline": PIPE})
    d = photos(tmp_path, "a.png")
    rc, err = run(capsys, ["predict", str(d), "--checkpoint", str(ckpt), "--out", str(tmp_path / "o"),
                           "--device", "cpu"])
    assert rc == 2 and "nan.ckpt" in err and "NaN or infinite" in err
    assert not (tmp_path / "o").exists()
    with pytest.raises(CheckpointError, match="NaN or infinite"):
        Segmenter.from_checkpoint(ckpt)


def test_a_network_whose_output_is_not_finite_is_an_error_not_a_flat_map():
    class Diverged(torch.nn.Module):
        def forward(self, x):
            return x[:, :1] * float("inf") - float("inf")  # NaN everywhere

    seg = Segmenter(Diverged(), pipeline=PIPE)
    with pytest.raises(ValueError, match="boundary map has .* NaN or infinite"):
        seg.segment(quadrants())


# ----------------------------------------------------------------------------- 4: a page's JSON
def test_a_page_title_with_script_markup_stays_valid_json(tmp_path, capsys):
    d = photos(tmp_path, "my<!--photo.png", "a<script>&b.png")
    out = tmp_path / "pages"
    assert run(capsys, ["view", "--classical", str(d), "--out", str(out), "--quiet", "--device", "cpu"])[0] == 0
    for stem in ("my<!--photo", "a<script>&b"):
        text = (out / f"{stem}.html").read_text()
        block = re.search(r'<script type="application/json" id="hiseg-data">(.*?)</script>', text, re.S).group(1)
        assert "<" not in block  # nothing the HTML parser could read as markup
        assert json.loads(block)["title"] == stem  # plain JSON, no unescaping


# ----------------------------------------------------------------------------- 6: capped options
def test_more_regions_than_the_hierarchy_has_warn_and_give_its_finest_cut(tmp_path, capsys):
    d = photos(tmp_path, "a.png")
    cv2.imwrite(str(d / "dot.png"), np.zeros((1, 1, 3), np.uint8))
    out = tmp_path / "o"
    rc, err = run(capsys, ["predict", "--classical", str(d), "--out", str(out), "--regions", "1000000000", "--quiet"])
    assert rc == 0
    assert re.search(r"warning: a\.png: n_regions=1000000000: the hierarchy has only \d+ region", err)
    assert "warning: dot.png: n_regions=1000000000: the hierarchy has only 1 region" in err
    res = Segmenter.classical().segment(np.zeros((1, 1, 3), np.float32))
    with pytest.warns(UserWarning, match="only 1 region"):
        assert res.cut(n_regions=3).tolist() == [[0]]
    res = Segmenter.classical().segment(quadrants())
    with pytest.warns(UserWarning, match=f"only {res.rag.num_regions} region"):
        assert int(res.cut(n_regions=10 ** 9, min_size=0).max()) + 1 == res.rag.num_regions
    with pytest.raises(ValueError, match="n_regions must be an integer >= 1"):
        res.cut(n_regions=0)


@pytest.mark.parametrize("opts", [["--scales", "0.5", "1"], ["--flip"], ["--no-flip"], ["--linkage", "single"]])
def test_network_options_with_classical_are_refused(tmp_path, capsys, opts):
    d = photos(tmp_path, "a.png")
    rc, err = run(capsys, ["predict", "--classical", str(d), "--out", str(tmp_path / "o"), *opts])
    assert rc == 2 and f"{opts[0]} set(s) the network's pipeline; --classical (the no-network baseline" in err
    assert not (tmp_path / "o").exists()


@pytest.mark.parametrize("name, flag, want", [("bsds500", "--flip", True), ("bsds500_merge", "--no-flip", False)])
def test_flip_overrides_the_checkpoints_setting(name, flag, want):
    """``--flip`` / ``--no-flip`` replace the checkpoint's mirror averaging (the "best quality"
    setting adds it to the default's scales); without the flag the checkpoint's setting stays."""
    import argparse

    from hiseg.cli import options, predict

    parser = predict.add_arguments(argparse.ArgumentParser())
    keep = options.make_segmenter(parser.parse_args(["x.png", "--checkpoint", name, "--out", "o", "--backend", "torch"]))
    assert keep.backend.name == "torch"
    seg = options.make_segmenter(parser.parse_args(["x.png", "--checkpoint", name, "--out", "o", flag]))
    assert keep.pipeline.flip is (not want) and seg.pipeline.flip is want
    assert seg.pipeline.scales == keep.pipeline.scales and seg.pipeline.merge_head == keep.pipeline.merge_head
    img = checker_image()
    mirrored = seg.pipeline.boundary_map(seg.model, img[:, ::-1].copy())[:, ::-1]
    if want:  # the flip-averaged map is mirror-symmetric by construction; the plain one is not
        np.testing.assert_allclose(seg.pipeline.boundary_map(seg.model, img), mirrored, atol=1e-5)
    else:
        assert np.abs(seg.pipeline.boundary_map(seg.model, img) - mirrored).max() > 1e-4


# ----------------------------------------------------------------------------- 8: image scale, EXIF
def test_a_float_image_outside_0_1_is_refused_not_clipped():
    img = quadrants().astype(np.float32)  # 0..255 floats
    with pytest.raises(DataError, match=r"must be in \[0, 1\], this one spans \[0, 255\] \(8-bit values"):
        Segmenter.classical().segment(img)
    # rounding overshoot of a resize is clipped; the result is the [0, 1] image's
    ok = quadrants().astype(np.float32) / 255
    near = ok * 1.004 - 0.002
    np.testing.assert_array_equal(Segmenter.classical().segment(near).ucm2, Segmenter.classical().segment(np.clip(near, 0, 1)).ucm2)


@pytest.mark.parametrize("orientation", range(1, 9))
def test_exif_orientation_is_applied_as_pillow_does(tmp_path, orientation):
    from PIL import Image, ImageOps

    rng = np.random.default_rng(orientation)
    a = (rng.random((30, 50, 3)) * 255).astype(np.uint8)
    exif = Image.Exif()
    exif[0x0112] = orientation
    path = tmp_path / "o.png"
    Image.fromarray(a).save(path, exif=exif)
    truth = np.asarray(ImageOps.exif_transpose(Image.open(path)).convert("RGB"))
    np.testing.assert_array_equal(np.rint(read_image(path) * 255).astype(np.uint8), truth)


def test_a_jpeg_taken_on_its_side_is_read_upright(tmp_path):
    from PIL import Image

    a = np.zeros((40, 60, 3), np.uint8)
    a[:10] = 255  # a white band at the top of the stored image
    exif = Image.Exif()
    exif[0x0112] = 6  # stored rotated: display turns it 90 degrees clockwise
    Image.fromarray(a).save(tmp_path / "p.jpg", exif=exif, quality=95)
    img = read_image(tmp_path / "p.jpg")
    assert img.shape == (60, 40, 3)
    assert img[:, -10:].mean() > 0.9 and img[:, :-12].mean() < 0.1  # the band is now on the right


# ----------------------------------------------------------------------------- 9: no file replaced
def test_predict_never_replaces_an_existing_file_without_overwrite(tmp_path, capsys):
    d = photos(tmp_path, "photo.png")
    (d / "photo.mat").write_bytes(b"ground truth, not ours")
    cv2.imwrite(str(d / "photo_ucm16.png"), np.full((5, 5), 7, np.uint16))
    before = snapshot(d)
    rc, err = run(capsys, ["predict", "--classical", str(d / "photo.png"), "--out", str(d), "--regions", "3", "--html"])
    assert rc == 2 and "2 output file(s) exist already" in err and "photo.mat" in err and "photo_ucm16.png" in err
    assert "--overwrite" in err
    assert snapshot(d) == before  # nothing written, nothing replaced
    assert run(capsys, ["predict", "--classical", str(d / "photo.png"), "--out", str(d), "--overwrite"])[0] == 0
    assert (d / "photo.mat").read_bytes() != before["photo.mat"]
    assert snapshot(d)["photo.png"] == before["photo.png"]  # the input, never
    # a second run into the same folder is refused too: the user re-runs with --overwrite
    rc, err = run(capsys, ["predict", "--classical", str(d / "photo.png"), "--out", str(d)])
    assert rc == 2 and "exist already" in err


def test_view_never_replaces_an_existing_page_without_overwrite(tmp_path, capsys):
    d = photos(tmp_path, "a.png")
    out = tmp_path / "pages"
    out.mkdir()
    (out / "a.html").write_text("my own notes")
    rc, err = run(capsys, ["view", "--classical", str(d), "--out", str(out), "--device", "cpu"])
    assert rc == 2 and "a.html" in err and "--overwrite" in err
    assert (out / "a.html").read_text() == "my own notes"
    assert run(capsys, ["view", "--classical", str(d), "--out", str(out), "--overwrite", "--device", "cpu"])[0] == 0
    assert "hiseg-data" in (out / "a.html").read_text()


def test_view_into_a_folder_another_run_writes_into_is_refused(tmp_path, capsys):
    """hiseg view holds the output folder's lock, the one hiseg predict takes (its --html writes
    the same pages): a second run is refused, naming the folder, before anything is written."""
    from hiseg.io import folder_lock

    d = photos(tmp_path, "a.png")
    out = tmp_path / "pages"
    out.mkdir()
    for holder in ("hiseg predict", "hiseg view"):
        with folder_lock(out, holder):
            rc, err = run(capsys, ["view", "--classical", str(d), "--out", str(out), "--device", "cpu"])
        assert rc == 2 and f"another hiseg predict or view is writing into {out}" in err, err
        assert list(out.iterdir()) == []
    assert run(capsys, ["view", "--classical", str(d), "--out", str(out), "--device", "cpu"])[0] == 0


def test_folder_lock_removes_only_the_folders_it_created_and_left_empty(tmp_path):
    from hiseg.io import folder_lock

    with folder_lock(tmp_path / "a" / "b" / "c"):
        pass
    assert list(tmp_path.iterdir()) == []
    with folder_lock(tmp_path / "a" / "b" / "c"):
        (tmp_path / "a" / "note.txt").write_text("kept")
    assert sorted(p.name for p in (tmp_path / "a").iterdir()) == ["note.txt"]  # b and c went, a holds a file
    (tmp_path / "x").mkdir()
    with folder_lock(tmp_path / "x"):
        pass
    assert (tmp_path / "x").is_dir()  # there before: kept


# ----------------------------------------------------------------------------- 10, 14 and the sweep
@pytest.mark.parametrize("cmd, opt, value", [
    ("predict", "--tile", "1"), ("predict", "--tile", "-5"), ("predict", "--tile", "abc"),
    ("predict", "--regions", "0"), ("predict", "--regions", "-3"), ("predict", "--regions", "2.5"),
    ("predict", "--max-pixels", "5"), ("predict", "--max-pixels", "-1"), ("predict", "--max-pixels", "1e9"),
    ("predict", "--scales", "0"), ("predict", "--scales", "nan"), ("predict", "--scales", "9"),
    ("predict", "--level", "inf"), ("predict", "--min-region-size", "-1"),
    ("view", "--max-pixels", "100"), ("view", "--max-pixels", "x"),
])
def test_every_numeric_option_is_checked_by_name(tmp_path, capsys, cmd, opt, value):
    d = photos(tmp_path, "a.png")
    out = tmp_path / "o"
    rc, err = run(capsys, [cmd, str(d), "--out", str(out), "--checkpoint", "bsds500", opt, value])
    assert rc == 2 and f"argument {opt}" in err, err
    assert not out.exists()


def test_the_api_checks_the_tile_too():
    for bad in (1, 63, -1, 2.5, True):
        with pytest.raises(ValueError, match="tile must be 0 .* or an integer >= 64"):
            Segmenter.classical().segment(quadrants(), tile=bad)


@pytest.mark.parametrize("device", ["meta", "cuda:99", "nonsense"])
def test_a_device_that_cannot_run_is_named(tmp_path, capsys, device):
    d = photos(tmp_path, "a.png")
    for cmd in ("predict", "view"):
        rc, err = run(capsys, [cmd, "--classical", str(d), "--out", str(tmp_path / "o"), "--device", device])
        assert rc == 2 and f"--device {device!r}" in err and "Traceback" not in err
    assert not (tmp_path / "o").exists()
    with pytest.raises(ValueError, match="device"):
        Segmenter(device=device)


def test_device_auto_is_the_default_and_picks_cuda_when_present(monkeypatch, capsys):
    import argparse

    from hiseg.cli import predict, view

    for add in (predict.add_arguments, view.add_arguments):
        p = argparse.ArgumentParser()
        add(p)
        assert p.parse_args(["x", "--out", "o"]).device == "auto"
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert resolve_device("auto") == torch.device("cuda")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert resolve_device("auto") == torch.device("cpu")
    with pytest.raises(SystemExit):
        cli_main(["predict", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "(default: auto)" in text and "(default: 512)" in text


# ----------------------------------------------------------------------------- 11: pickled code
def test_a_pickled_os_system_payload_is_refused_as_unsafe(tmp_path, capsys):
    class Payload:
        def __reduce__(self):
            return os.system, ("touch " + str(tmp_path / "ran"),)

    ckpt = tmp_path / "evil.ckpt"
    torch.save({"state_dict": get_model("compact_boundary_net", width=8).state_dict(), "x": Payload()}, ckpt)
    d = photos(tmp_path, "a.png")
    rc, err = run(capsys, ["predict", str(d), "--checkpoint", str(ckpt), "--out", str(tmp_path / "o")])
    assert rc == 2 and "evil.ckpt was refused as unsafe" in err and "untrusted pickled code" in err
    assert "weights_only=False" not in err and "weights_only` set to `False" not in err
    assert "corrupted" not in err and not (tmp_path / "ran").exists()


@pytest.mark.parametrize("torch_says", [
    "Weights only load failed. Re-running `torch.load` with `weights_only` set to `False` will likely succeed, "
    "but it can result in arbitrary code execution.\nUnsupported global: GLOBAL os.system was not an allowed global",
    "Weights only load failed. Re-running `torch.load` with `weights_only` set to `False` will likely succeed, "
    "but it can result in arbitrary code execution.\nTrying to load unsupported GLOBAL posix.system whose module "
    "posix is blocked.",
])
def test_torchs_wording_of_a_refused_global_is_matched_in_any_case(tmp_path, monkeypatch, torch_says):
    f = tmp_path / "x.ckpt"
    f.write_bytes(b"x")

    def refuse(*a, **k):
        raise pickle.UnpicklingError(torch_says)

    monkeypatch.setattr(torch, "load", refuse)
    with pytest.raises(CheckpointError) as e:
        read_checkpoint(f)
    assert "refused as unsafe" in str(e.value) and "system" in str(e.value)
    assert "weights_only" not in str(e.value).replace("safe_globals", "")


# ----------------------------------------------------------------------------- 17: write errors
def test_a_failed_write_names_the_file(tmp_path, monkeypatch, capsys):
    def too_large(tmp):
        raise OSError(errno.EFBIG, "File too large")

    with pytest.raises(OSError, match=r"\[Errno 27\] cannot write .*x\.mat: File too large") as e:
        atomic_write(tmp_path / "x.mat", too_large)
    assert e.value.errno == errno.EFBIG and list(tmp_path.iterdir()) == []
    # through the command: the .mat of image a
    import hiseg.segmentation.outputs

    monkeypatch.setattr(hiseg.segmentation.outputs, "write_ucm2_mat", lambda path, ucm2: too_large(path))
    d = photos(tmp_path, "a.png")
    rc, err = run(capsys, ["predict", "--classical", str(d), "--out", str(tmp_path / "o")])
    assert rc == 2 and f"cannot write {tmp_path / 'o' / 'a.mat'}: File too large" in err
    assert not (tmp_path / "o" / "a.mat").exists() and not list((tmp_path / "o").glob(".*tmp*"))
    # an encoder that fails (cv2.imencode returns False): the PNG's name, not its temporary file's
    monkeypatch.setattr(cv2, "imencode", lambda *a: (False, None))
    rc, err = run(capsys, ["predict", "--classical", str(d), "--out", str(tmp_path / "o2")])
    assert rc == 2 and f"cannot write {tmp_path / 'o2' / 'a_ucm.png'}" in err


# ----------------------------------------------------------------------------- issue 23
def test_a_file_and_its_folder_are_one_input(tmp_path, capsys):
    d = photos(tmp_path, "astronaut.png", "b.png")
    out = tmp_path / "o"
    rc, err = run(capsys, ["predict", "--classical", str(d / "astronaut.png"), str(d), str(d / "astronaut.png"), "--out", str(out),
                           "--quiet"])
    assert rc == 0, err
    assert sorted(p.name for p in out.glob("*.mat")) == ["astronaut.mat", "b.mat"]
    # two different files with one stem are still refused
    (tmp_path / "other").mkdir()
    cv2.imwrite(str(tmp_path / "other" / "b.png"), quadrants())
    rc, err = run(capsys, ["predict", "--classical", str(d), str(tmp_path / "other"), "--out", str(tmp_path / "o3")])
    assert rc == 2 and "share the output name" in err


@pytest.mark.parametrize("cmd", ["predict", "view"])
def test_a_bad_image_in_a_folder_does_not_stop_the_others(tmp_path, capsys, cmd):
    d = photos(tmp_path, "a.png", "c.png")
    (d / "b.png").write_bytes(b"not an image")
    out = tmp_path / "o"
    rc, err = run(capsys, [cmd, "--classical", str(d), "--out", str(out), "--quiet", "--device", "cpu"])
    assert rc == 1
    assert "1 of 3 image(s) failed" in err and "b.png: cannot read image" in err
    names = {p.name for p in out.iterdir()}
    if cmd == "predict":
        assert {"a.mat", "c.mat"} <= names and not any(n.startswith("b") for n in names)
    else:
        assert names == {"a.html", "c.html", "index.html"}
        assert re.findall(r'href="([^"]+)"', (out / "index.html").read_text()) == ["a.html", "c.html"]


def test_predict_html_pages_open_at_the_requested_cut(tmp_path, capsys):
    d = photos(tmp_path, "a.png")
    for opts, start in ((["--regions", "8"], {"regions": 8}), (["--level", "0.25"], {"level": 0.25}),
                        ([], {"regions": 12})):
        out = tmp_path / f"o{len(opts)}{opts[:1]}"
        assert run(capsys, ["predict", "--classical", str(d), "--out", str(out), "--html", *opts])[0] == 0
        text = (out / "a.html").read_text()
        block = re.search(r'id="hiseg-data">(.*?)</script>', text, re.S).group(1)
        assert json.loads(block)["start"] == start


@pytest.mark.parametrize("background", [0, 255])
def test_overlay_contours_stay_visible_on_light_and_dark_areas(tmp_path, capsys, background):
    from hiseg.segmentation.outputs import _colour_overlay

    img = np.full((40, 40, 3), background / 255, np.float32)
    labels = np.zeros((40, 40), np.int64)
    labels[:, 20:] = 1
    over = _colour_overlay(img, labels)
    row = over[20, :, 0].astype(int)  # across the frontier between columns 19 and 20
    line = row[20]
    beside = [row[19], row[21]]
    assert line == 255 and min(beside) == 0  # a white line with a dark outline
    # the contour differs from the area around it by most of the range, whatever the area
    assert max(abs(v - background) for v in [line] + beside) >= 200


def test_fit_result_prints_in_one_short_line():
    import hiseg

    g = hiseg.grid_graph((20, 20))
    fit = hiseg.fit_ultrametric(g, torch.rand(g.num_edges), max_iter=30)
    text = repr(fit)
    assert "\n" not in text and len(text) < 250
    assert f"n_iter={fit.n_iter}" in text and f"best_iter={fit.best_iter}" in text and "history=<30 losses>" in text


def test_overlay_tints_regions_of_one_colour_apart_and_the_ucm_view_is_dark_on_white(tmp_path):
    """Issue 53, item 7: the overlay blended each region's mean colour, near the image's own, so
    regions of similar colour read as one; each region now gets a colour of its own. NAME_ucm.png
    is drawn as the README's figure, boundaries dark on white."""
    from hiseg.segmentation.outputs import _colour_overlay, region_colours, write_outputs

    img = np.full((40, 60, 3), 0.5, np.float32)  # one grey: the mean colours were the image itself
    labels = np.zeros((40, 60), np.int64)
    labels[:, 20:40], labels[:, 40:] = 1, 2
    over = _colour_overlay(img, labels).astype(int)
    inside = [over[20, c] for c in (8, 30, 52)]  # away from the contours
    assert min(np.abs(a - b).sum() for i, a in enumerate(inside) for b in inside[i + 1:]) > 120
    assert all(np.abs(c - 128).max() > 40 for c in inside)  # tinted, not the grey image
    colours = region_colours(12).astype(int)
    assert len({tuple(c) for c in colours}) == 12 and (colours.max(1) - colours.min(1)).min() > 100
    res = Segmenter.classical(region_size=6.0, fit_iterations=5).segment(checker_image())
    write_outputs(tmp_path, "q", res, checker_image())
    view = cv2.imread(str(tmp_path / "q_ucm.png"), cv2.IMREAD_UNCHANGED)
    assert np.median(view) == 255 and view.min() < 128  # white, with dark boundaries
