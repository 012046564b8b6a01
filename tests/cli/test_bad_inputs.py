"""One bad input never stops a folder, and never gives a traceback (issue 43, items 2, 3 and 9):
an image declaring more pixels than the limit (read from its header, before decoding), a
symlink loop, a folder or FIFO named like an image; each is reported in one line naming it
and the other images are processed."""
from __future__ import annotations

import os
from pathlib import Path

import cv2
import numpy as np
import pytest
from _faults import block_ground_truth, declared_png
from scipy.io import savemat
from tests.cli.test_cli_faults import photos, run
from tests.metrics.test_metrics_bsds import blocks

from hiseg.io import DataError, PIXEL_LIMIT, decode_image, image_header, pixel_limit


def bomb(path: Path) -> Path:
    path = declared_png(path)
    assert path.stat().st_size < 4096
    return path


def _one_error_line(err: str, name: str, *needles: str) -> None:
    lines = [ln for ln in err.splitlines() if name in ln]
    assert len(lines) == 1, err
    assert all(n in lines[0] for n in needles), err
    assert "Traceback" not in err


@pytest.mark.parametrize("cmd", ["predict", "view"])
def test_an_image_declaring_50000x50000_is_refused_from_its_header_and_the_others_are_processed(tmp_path, capsys,
                                                                                               cmd):
    d = photos(tmp_path, "a.png", "c.png")
    bomb(d / "b.png")
    out = tmp_path / "o"
    rc, err = run(capsys, [cmd, "--classical", str(d), "--out", str(out), "--quiet", "--device", "cpu"])
    assert rc == 1
    _one_error_line(err, "b.png", "50000 x 50000", "--pixel-limit", "HISEG_PIXEL_LIMIT")
    names = {p.name for p in out.iterdir()}
    assert ({"a.mat", "c.mat"} <= names if cmd == "predict" else {"a.html", "c.html"} <= names)
    assert not any(n.startswith("b") or n.endswith(".tmp.png") for n in names)


def test_the_limit_is_checked_before_any_pixel_is_decoded(tmp_path, monkeypatch):
    path = bomb(tmp_path / "b.png")

    def no_decoding(*a, **k):
        raise AssertionError("decoded")

    monkeypatch.setattr(cv2, "imdecode", no_decoding)
    with pytest.raises(DataError, match="over the limit"):
        decode_image(path)
    with pytest.raises(DataError, match="over the limit"):
        image_header(path)


def test_the_limit_is_raised_or_lowered_by_option_and_environment(tmp_path, capsys, monkeypatch):
    d = photos(tmp_path, "a.png")
    assert pixel_limit() == PIXEL_LIMIT
    rc, err = run(capsys, ["predict", "--classical", str(d), "--out", str(tmp_path / "o1"), "-q", "--pixel-limit", "100"])
    assert rc == 1 and "over the limit of 100" in err
    assert "HISEG_PIXEL_LIMIT" not in os.environ  # the option holds for its run only
    monkeypatch.setenv("HISEG_PIXEL_LIMIT", "100")
    rc, err = run(capsys, ["view", "--classical", str(d), "--out", str(tmp_path / "o2"), "-q"])
    assert rc == 1 and "over the limit of 100" in err
    rc, err = run(capsys, ["predict", "--classical", str(d), "--out", str(tmp_path / "o3"), "-q", "--pixel-limit", "0"])
    assert rc == 0, err
    monkeypatch.setenv("HISEG_PIXEL_LIMIT", "lots")
    rc, err = run(capsys, ["predict", "--classical", str(d), "--out", str(tmp_path / "o4"), "-q"])
    assert rc == 2 and "HISEG_PIXEL_LIMIT must be an integer" in err and not (tmp_path / "o4").exists()
    rc, err = run(capsys, ["predict", "--classical", str(d), "--out", str(tmp_path / "o4"), "--pixel-limit", "-1"])
    assert rc == 2 and "--pixel-limit" in err


def test_evaluate_reports_an_oversized_prediction_and_scores_the_others(tmp_path, capsys):
    gt, pred, _ = block_ground_truth(tmp_path, 3, 40, 50)
    for k in range(3):
        b = np.zeros((40, 50), np.uint8)
        b[20, :] = b[:, 25] = 255
        cv2.imwrite(str(pred / f"im{k}.png"), b)
    bomb(pred / "im1.png")
    out = tmp_path / "res"
    rc = None
    try:
        from hiseg.cli import main

        rc = main(["evaluate", str(pred), "--gt", str(gt), "--workers", "1", "-q", "--thresholds", "3", "-o", str(out)])
    finally:
        cap = capsys.readouterr()
    assert rc == 1
    _one_error_line(cap.err, "im1.png", "50000 x 50000")
    assert "1 of 3 image(s) failed" in cap.err
    assert "2 image(s) (1 more failed: not counted)" in cap.out
    assert "im1" in (out / "results.json").read_text()


def test_a_folder_or_fifo_named_like_an_image_is_not_a_regular_file(tmp_path, capsys):
    d = photos(tmp_path, "a.png", "c.png")
    (d / "b.jpg").mkdir()
    os.mkfifo(d / "f.png")
    out = tmp_path / "o"
    rc, err = run(capsys, ["predict", "--classical", str(d), "--out", str(out), "-q"])
    assert rc == 1
    _one_error_line(err, "b.jpg", "it is a folder")
    _one_error_line(err, "f.png", "not a regular file")
    assert "not found" not in err
    assert {"a.mat", "c.mat"} <= {p.name for p in out.iterdir()}


def test_a_dangling_symlink_in_the_input_folder_names_its_target(tmp_path, capsys):
    """A link whose target is gone (a relative link moved with its folder) is reported in one line
    naming the missing target; the other images are processed."""
    d = photos(tmp_path, "a.png", "c.png")
    (d / "b.png").symlink_to("../elsewhere/b.png")
    out = tmp_path / "o"
    rc, err = run(capsys, ["predict", "--classical", str(d), "--out", str(out), "-q"])
    assert rc == 1
    _one_error_line(err, "b.png", "is a symbolic link to ../elsewhere/b.png, which does not exist")
    assert {"a.mat", "c.mat"} <= {p.name for p in out.iterdir()} and not (out / "b.mat").exists()


def test_a_symlink_loop_in_the_input_folder_is_reported_and_skipped(tmp_path, capsys):
    d = photos(tmp_path, "a.png", "c.png")
    os.symlink(d / "loop.png", d / "loop.png")
    os.symlink(d / "y.jpg", d / "x.jpg")
    os.symlink(d / "x.jpg", d / "y.jpg")
    out = tmp_path / "o"
    rc, err = run(capsys, ["predict", "--classical", str(d), "--out", str(out), "-q"])
    assert rc == 0, err
    _one_error_line(err, "loop.png", "symbolic link loop", "skipped")
    _one_error_line(err, "x.jpg", "symbolic link loop")
    assert {"a.mat", "c.mat"} <= {p.name for p in out.iterdir()}
    rc, err = run(capsys, ["view", "--classical", str(d / "loop.png"), "--out", str(tmp_path / "v"), "-q"])
    assert rc == 2 and "symbolic link loop" in err and "Traceback" not in err


def test_a_run_into_its_input_folder_can_be_resumed(tmp_path, capsys):
    d = photos(tmp_path, "a.png", "c.png")
    rc, err = run(capsys, ["predict", "--classical", str(d), "--out", str(d), "-q", "--regions", "3"])
    assert rc == 0, err
    (d / "c.mat").unlink()  # interrupted before c's files were all there
    rc, err = run(capsys, ["predict", "--classical", str(d), "--out", str(d), "-q", "--regions", "3", "--resume"])
    assert rc == 0, err
    assert (d / "c.mat").exists() and not (d / "a_ucm_ucm.png").exists()


def test_a_plain_rerun_into_a_folder_with_files_mentions_resume(tmp_path, capsys):
    d = photos(tmp_path, "a.png")
    out = tmp_path / "o"
    assert run(capsys, ["predict", "--classical", str(d), "--out", str(out), "-q"])[0] == 0
    rc, err = run(capsys, ["predict", "--classical", str(d), "--out", str(out), "-q"])
    assert rc == 2 and "--resume" in err and "--overwrite" in err


def test_a_folder_mixing_mat_and_png_predictions_says_so(tmp_path, capsys):
    from tests.metrics.test_metrics_bsds import seg_to_ucm2

    gt, pred, seg = block_ground_truth(tmp_path, 2, 20, 24)
    savemat(str(pred / "im0.mat"), {"ucm2": seg_to_ucm2(blocks(20, 24, 2, 2), 0.6)})
    cv2.imwrite(str(pred / "im1.png"), np.zeros((20, 24), np.uint8))
    rc, err = run(capsys, ["evaluate", str(pred), "--gt", str(gt), "--workers", "1", "-q"])
    assert rc == 2 and "mixes .mat and .png predictions" in err and "im1.png" in err
    assert "no prediction" not in err


def test_the_ddp_back_end_takes_the_folder_lock(tmp_path):
    """Issue 43, item 10: predict_files (the DDP back-end) refuses a folder another run writes into."""
    import fcntl

    from hiseg.models import get_model, save_weights
    from hiseg.segmentation.predict_ddp import predict_files
    from hiseg.segmentation.segmenter import Segmenter

    from hiseg.segmentation.pipeline import Pipeline

    seg = Segmenter(str(save_weights(get_model("compact_boundary_net", width=8), tmp_path / "m.ckpt")), device="cpu",
                    pipeline=Pipeline(superpixels="boundary_watershed", linkage="average"))
    d = photos(tmp_path, "a.png")
    out = tmp_path / "o"
    out.mkdir()
    fd = os.open(out, os.O_RDONLY)  # another run's lock
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        with pytest.raises(BlockingIOError, match="another hiseg predict is writing"):
            predict_files(seg, [d / "a.png"], out, trainer_kwargs=dict(accelerator="cpu", devices=1))
    finally:
        os.close(fd)
    assert list(out.iterdir()) == []


def test_view_ucm_of_another_size_is_refused_from_the_headers(tmp_path, capsys, monkeypatch):
    """Issue 43, item 10: ``hiseg view --ucm`` compares the ucm2's shape with the image's from the
    files' headers: a ucm2 of another (larger) image is not read, the other pages are written."""
    import scipy.io

    d = photos(tmp_path, "a.png", "b.png")
    h, w = cv2.imread(str(d / "a.png")).shape[:2]
    ucm = tmp_path / "ucm"
    ucm.mkdir()
    good = np.zeros((2 * h + 1, 2 * w + 1))
    good[2 * (h // 2), :] = 0.5
    savemat(str(ucm / "a.mat"), {"ucm2": good})
    savemat(str(ucm / "b.mat"), {"ucm2": np.zeros((4 * h + 1, 4 * w + 1))})
    real = scipy.io.loadmat

    def loadmat(path, *a, **k):
        assert "b.mat" not in str(path), "the ucm2 of another size was read"
        return real(path, *a, **k)

    monkeypatch.setattr(scipy.io, "loadmat", loadmat)
    rc, err = run(capsys, ["view", str(d), "--ucm", str(ucm), "--out", str(tmp_path / "o"), "-q"])
    assert rc == 1, err
    _one_error_line(err, "b.mat", "belongs to another image (not read)")
    assert (tmp_path / "o" / "a.html").exists()


def test_view_ucm_over_the_pixel_limit_is_refused_from_its_header(tmp_path, capsys, monkeypatch):
    """Issue 43, item 10: the ucm2 that ``hiseg view --ucm`` reads ((2H+1) x (2W+1) float64 values)
    is held to the pixel limit from the .mat file's header: over it, the file is named in one line
    with its size and how to raise the limit, and it is not read; the limit raised, it is."""
    import scipy.io

    d = photos(tmp_path, "a.png", "b.png")
    h, w = cv2.imread(str(d / "a.png")).shape[:2]
    ucm = tmp_path / "ucm"
    ucm.mkdir()
    for n in "ab":
        savemat(str(ucm / f"{n}.mat"), {"ucm2": np.zeros((2 * h + 1, 2 * w + 1))})
    real, read = scipy.io.loadmat, []

    def loadmat(path, *a, **k):
        read.append(os.path.basename(str(path)))
        return real(path, *a, **k)

    monkeypatch.setattr(scipy.io, "loadmat", loadmat)
    limit = (2 * h + 1) * (2 * w + 1) - 1  # the images are within it, their ucm2 one value over
    rc, err = run(capsys, ["view", str(d), "--ucm", str(ucm), "--out", str(tmp_path / "o"), "-q",
                           "--pixel-limit", str(limit)])
    assert rc == 1 and read == [], err
    _one_error_line(err, "a.mat", f"cannot read ucm2 {ucm / 'a.mat'} (for {d / 'a.png'}): it declares "
                                  f"{2 * w + 1} x {2 * h + 1} pixels ({limit + 1:,}), over the limit of {limit:,} "
                                  "(raise it with --pixel-limit N")
    assert not (tmp_path / "o").exists() or not list((tmp_path / "o").glob("*.html"))
    rc, err = run(capsys, ["view", str(d), "--ucm", str(ucm), "--out", str(tmp_path / "o"), "-q",
                           "--pixel-limit", str(limit + 1)])
    assert rc == 0 and sorted(read) == ["a.mat", "b.mat"], err


@pytest.mark.parametrize("spec, hint", [("bsds500_ensembel", "did you mean 'bsds500_ensemble'?"),
                                        ("BSDS500-merge", "did you mean 'bsds500_merge'?"),
                                        ("mymodel", "shipped models are bsds500, bsds500_merge, bsds500_ensemble"),
                                        ("runs/x.ckpt", None)])
def test_a_misspelt_shipped_model_is_named_with_the_shipped_names(tmp_path, capsys, monkeypatch, spec, hint):
    """--checkpoint takes a file or a shipped model's name: a bare word that is neither gets the
    shipped names (the closest one first) in its one line; a path is only a missing file. Nothing
    is written."""
    monkeypatch.chdir(tmp_path)
    d = photos(tmp_path, "a.png")
    rc, err = run(capsys, ["predict", str(d / "a.png"), "--checkpoint", spec, "--out", "o", "--quiet", "--device", "cpu"])
    assert rc == 2 and not (tmp_path / "o").exists()
    _one_error_line(err, "checkpoint file not found", spec)
    assert (hint in err) if hint else "shipped models are" not in err, err
