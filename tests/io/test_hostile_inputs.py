"""Hostile files and misused calls around inference (issue 52, items 4 and 6): a run record that
is a link to ``/dev/zero`` (or any non-regular or huge file) is refused in one line, never read;
``cut(threshold='0.3')`` is a one-line TypeError naming the parameter; an image of several
frames (an animated GIF, a multi-page TIFF) says that its first frame is used."""
from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest
from PIL import Image

from hiseg.io.files import RECORD


def _hiseg(*argv, timeout=300):
    """``hiseg ARGV`` in a new process (a hang fails by the generous timeout only)."""
    return subprocess.run([sys.executable, "-m", "hiseg.cli", *map(str, argv)], capture_output=True, text=True,
                          timeout=timeout)


def _image(path):
    img = np.zeros((40, 48, 3), np.uint8)
    img[:20], img[20:, 24:] = (200, 30, 30), (20, 90, 200)
    Image.fromarray(img).save(path)
    return path


@pytest.mark.parametrize("kind", ["folder", "huge"])  # /dev/zero: in a process of its own, below
def test_a_run_record_that_is_no_regular_small_file_is_refused_in_one_line(tmp_path, kind, monkeypatch):
    from hiseg.segmentation import record as record_module
    from hiseg.segmentation.record import RunRecord

    out = tmp_path / "out"
    out.mkdir()
    if kind == "folder":
        (out / RECORD).mkdir()
    else:
        monkeypatch.setattr(record_module, "MAX_RECORD_BYTES", 100)
        (out / RECORD).write_text('{"format": "hiseg predict run record 1", "options": [], "images": {}}' + " " * 100)
    with pytest.raises(ValueError, match="not a hiseg predict run record") as e:
        RunRecord(out)
    assert "\n" not in str(e.value)


def test_predict_resume_with_a_record_linked_to_dev_zero(tmp_path):
    img = _image(tmp_path / "a.png")
    out = tmp_path / "out"
    out.mkdir()
    (out / RECORD).symlink_to("/dev/zero")
    r = _hiseg("predict", "--classical", "-q", img, "-o", out, "--resume")
    assert r.returncode == 2 and "Traceback" not in r.stderr and "MemoryError" not in r.stderr, r.stderr[-500:]
    last = r.stderr.strip().splitlines()[-1]
    assert RECORD in last and "not a regular file" in last, last


@pytest.fixture(scope="module")
def result():
    from hiseg import Segmenter
    from hiseg.data.synthetic import SyntheticSegmentation

    return Segmenter(None).segment(SyntheticSegmentation(n_images=1, size=48)[0]["image"])


@pytest.mark.parametrize("bad", ["0.3", b"0.3", None, [0.3], True])
def test_cut_with_a_threshold_that_is_not_a_number_is_a_one_line_type_error(result, bad):
    if bad is None:
        with pytest.raises(ValueError, match="exactly one"):
            result.cut(threshold=bad)
        return
    with pytest.raises(TypeError, match=r"^cut: threshold must be a number") as e:
        result.cut(threshold=bad)
    assert "\n" not in str(e.value)
    assert result.cut(threshold=np.float32(0.3)).shape == result.cut(threshold=0.3).shape


@pytest.mark.parametrize("suffix", [".gif", ".tif"])
def test_an_image_of_several_frames_says_its_first_frame_is_used(tmp_path, suffix):
    from hiseg.io import read_image

    frames = [Image.fromarray(np.full((32, 40, 3), v, np.uint8)) for v in (10, 200, 90)]
    path = tmp_path / f"anim{suffix}"
    frames[0].save(path, save_all=True, append_images=frames[1:])
    with pytest.warns(UserWarning, match="several frames.*only the first frame"):
        img = read_image(path)
    assert img.shape == (32, 40, 3) and abs(float(img.mean()) - 10 / 255) < 0.02
    single = tmp_path / f"one{suffix}"
    frames[0].save(single)
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        read_image(single)


def test_hiseg_predict_names_the_multi_frame_image(tmp_path):
    frames = [Image.fromarray(np.full((40, 48, 3), v, np.uint8)) for v in (10, 200)]
    frames[0].save(tmp_path / "anim.gif", save_all=True, append_images=frames[1:])
    r = _hiseg("predict", "--classical", "-q", tmp_path / "anim.gif", "-o", tmp_path / "out")
    assert r.returncode == 0, r.stderr[-500:]
    assert "anim.gif" in r.stderr and "only the first frame" in r.stderr, r.stderr
