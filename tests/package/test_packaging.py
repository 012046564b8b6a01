"""The package as a user installs it: the source archive holds what the tests need, and the wheel
built from it carries the shipped weights, so that ``Weights.BSDS500`` (``from_pretrained
("bsds500")``, ``--checkpoint bsds500``) loads from any folder without the repository."""
import os
import re
import shutil
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
# the files of a checkout that building needs (copied: building writes build/ and *.egg-info)
SOURCE = ["hiseg", "models", "configs", "tests", "datasets/README.md", "setup.py", "pyproject.toml", "MANIFEST.in",
          "README.md", "LICENSE", "train.py"]


@pytest.mark.slow
def test_sdist_and_wheel_carry_tests_configs_licence_and_weights(tmp_path):
    setuptools = pytest.importorskip("setuptools", reason="building the sdist and the wheel needs setuptools in this "
                                     "environment")
    # setup.py builds without isolation, with this environment's setuptools: an older one than pyproject.toml's
    # build-system asks for cannot read its metadata (the SPDX licence string needs setuptools >= 77)
    need = re.search(r'"setuptools>=(\d+)', (ROOT / "pyproject.toml").read_text()).group(1)
    if int(setuptools.__version__.split(".")[0]) < int(need):
        pytest.skip(f"setuptools {setuptools.__version__} here; pyproject.toml's build-system needs setuptools>={need} "
                    f"(pip install builds in isolation with it; this test builds with the environment's)")
    assert list((ROOT / "models").glob("*.ckpt")), "the shipped checkpoints (models/*.ckpt) are missing"
    src = tmp_path / "src"
    for name in SOURCE:
        (src / name).parent.mkdir(parents=True, exist_ok=True)
        if (ROOT / name).is_dir():
            shutil.copytree(ROOT / name, src / name, ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
        else:
            shutil.copyfile(ROOT / name, src / name)
    env = dict(os.environ, PYTHONWARNINGS="ignore")
    r = subprocess.run([sys.executable, "setup.py", "-q", "sdist", "-d", str(tmp_path / "dist")], cwd=src,
                       capture_output=True, text=True, env=env)
    assert r.returncode == 0, r.stderr[-3000:]
    (sdist,) = (tmp_path / "dist").glob("hiseg-*.tar.gz")
    with tarfile.open(sdist) as tar:
        names = {n.split("/", 1)[1] for n in tar.getnames() if "/" in n}
        tar.extractall(tmp_path / "unpacked", filter="data")
    for need in ("LICENSE", "train.py", "tests/conftest.py", "tests/_graphs.py", "tests/_train.py",
                 "tests/_interrupt.py", "tests/_children.py", "tests/_page_node.js", "configs/synthetic.yaml",
                 "configs/folder_finetune.yaml",
                 "models/hiseg_bsds500.ckpt", "models/README.md", "hiseg/explorer/view_page.html",
                 "hiseg/training/help_texts.json.xz"):
        assert need in names, need
    # the wheel, built from the source archive (as `python -m build` does)
    (unpacked,) = (tmp_path / "unpacked").iterdir()
    r = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", str(unpacked),
                        "-w", str(tmp_path / "wheel")], capture_output=True, text=True, env=env)
    assert r.returncode == 0, r.stderr[-3000:]
    (wheel,) = (tmp_path / "wheel").glob("hiseg-*.whl")
    with zipfile.ZipFile(wheel) as z:
        names = set(z.namelist())
        for ck in (ROOT / "models").glob("*.ckpt"):
            assert z.read(f"hiseg/weights/{ck.name}") == ck.read_bytes()
        assert any(n.endswith(".dist-info/licenses/LICENSE") for n in names)
        assert "hiseg/training/help_texts.json.xz" in names  # hiseg train's help without torch
        assert "BSD-3-Clause" in z.read(next(n for n in names if n.endswith(".dist-info/METADATA"))).decode()
        z.extractall(tmp_path / "site")
    # installed (here: the wheel's files first on the path), from another folder, no repository
    code = ("import hiseg, pathlib; from hiseg.models import Weights; from hiseg.segmentation.segmenter import Segmenter; "
            "p = Weights.from_name('bsds500').path(); assert pathlib.Path(hiseg.__file__).parent / 'weights' in "
            "p.parents, p; print(Segmenter.from_pretrained('bsds500').pipeline.linkage)")
    r = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True,
                       env=dict(env, PYTHONPATH=str(tmp_path / "site"), HISEG_WEIGHTS_DIR=""))
    assert r.returncode == 0 and r.stdout.strip() == "average", r.stderr[-3000:]


def test_licence_file_matches_the_metadata():
    text = (ROOT / "LICENSE").read_text()
    assert text.startswith("BSD 3-Clause License") and "hiseg developers" in text
    assert 'license = "BSD-3-Clause"' in (ROOT / "pyproject.toml").read_text()
