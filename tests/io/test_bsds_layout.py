"""The BSDS500 layout (issue 53, item 6): ``datasets/README.md`` accepts a ``datasets/BSDS500``
that holds the official archive's ``data/``; the README's ``hiseg predict datasets/BSDS500/images/val``
and ``hiseg evaluate ... --gt datasets/BSDS500/groundTruth/val`` then read the archive's folders,
saying so in one line, as the training loaders do."""
from __future__ import annotations

import os

import cv2
import numpy as np
import pytest
from tests.cli.test_cli_faults import quadrants, run
from tests.metrics.test_metrics_bsds import write_gt

from hiseg.cli.options import collect_images
from hiseg.io import bsds_archive_path


def archive(tmp_path, top=("data",)):
    """datasets/BSDS500 holding the archive's data/ (``top``), one val image and its ground truth."""
    root = tmp_path / "datasets" / "BSDS500"
    data = root.joinpath(*top)
    (data / "images" / "val").mkdir(parents=True)
    (data / "groundTruth" / "val").mkdir(parents=True)
    img = quadrants()
    cv2.imwrite(str(data / "images" / "val" / "a.png"), img)
    seg = np.ones(img.shape[:2], np.uint16)
    seg[:, img.shape[1] // 2:] = 2
    write_gt(data / "groundTruth" / "val" / "a.mat", [seg])
    return root


@pytest.mark.parametrize("top", [("data",), ("BSDS500", "data")])
def test_a_missing_bsds_path_is_found_in_the_archives_layout(tmp_path, top):
    root = archive(tmp_path, top)
    twin = root.joinpath(*top)
    assert bsds_archive_path(root / "images" / "val") == twin / "images" / "val"
    assert bsds_archive_path(root / "groundTruth" / "val") == twin / "groundTruth" / "val"
    assert bsds_archive_path(root / "images" / "val" / "a.png") == twin / "images" / "val" / "a.png"
    assert bsds_archive_path(twin / "images" / "val") is None  # it exists
    assert bsds_archive_path(root / "images" / "test") is None  # no twin either
    assert bsds_archive_path(tmp_path / "elsewhere" / "val") is None  # not a BSDS500 folder
    cwd = os.getcwd()
    os.chdir(tmp_path)
    try:  # relative, as the README writes it
        from pathlib import Path

        assert bsds_archive_path("datasets/BSDS500/images/val") == Path("datasets/BSDS500", *top, "images/val")
    finally:
        os.chdir(cwd)


def test_readme_predict_and_evaluate_read_the_archives_layout(tmp_path, capsys):
    root = archive(tmp_path)
    pred, ev = tmp_path / "pred", tmp_path / "eval"
    rc, err = run(capsys, ["predict", str(root / "images" / "val"), "-o", str(pred), "--classical", "-q"])
    assert rc == 0, err
    note = [ln for ln in err.splitlines() if "not found" in ln]
    assert len(note) == 1 and str(root / "data" / "images" / "val") in note[0], err
    assert (pred / "a.mat").is_file()
    rc, err = run(capsys, ["evaluate", str(pred), "--gt", str(root / "groundTruth" / "val"), "-o", str(ev), "-q",
                           "--thresholds", "5", "--workers", "1"])
    assert rc == 0, err
    assert f"reading {root / 'data' / 'groundTruth' / 'val'}" in err and (ev / "results.json").is_file()


def test_a_path_in_neither_layout_is_still_refused_in_one_line(tmp_path, capsys):
    root = archive(tmp_path)
    rc, err = run(capsys, ["predict", str(root / "images" / "test"), "-o", str(tmp_path / "o"), "--classical"])
    assert rc == 2 and "input not found" in err and len(err.strip().splitlines()) == 1


def test_the_shared_bsds500_read_through_a_link_in_the_archives_layout(tmp_path, shared_data):
    """The shared copy is the archive's data/ under BSDS500/: linked as datasets/BSDS500, the README's
    path gives its 100 val images."""
    if not (shared_data / "BSDS500" / "data" / "images" / "val").is_dir():
        pytest.skip("no BSDS500 val images in the shared data")
    (tmp_path / "datasets").mkdir()
    (tmp_path / "datasets" / "BSDS500").symlink_to(shared_data / "BSDS500")
    files = collect_images([str(tmp_path / "datasets" / "BSDS500" / "images" / "val")], "hiseg predict")
    assert len(files) == 100 and all(f.suffix == ".jpg" for f in files)
