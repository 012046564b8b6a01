"""Every ```python block of the README runs as written, on its own, from an empty folder."""
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
BLOCKS = re.findall(r"```python\n(.*?)```", (ROOT / "README.md").read_text(), flags=re.S)


def test_readme_has_python_blocks():
    assert len(BLOCKS) >= 3


@pytest.mark.parametrize("i", range(len(BLOCKS)))
def test_readme_python_block_runs(tmp_path, i):
    r = subprocess.run([sys.executable, "-c", BLOCKS[i]], cwd=tmp_path, capture_output=True, text=True,
                       timeout=600, env={"PATH": "/usr/bin:/bin", "OMP_NUM_THREADS": "1", "HOME": str(tmp_path)})
    assert r.returncode == 0, f"README block {i} failed:\n{BLOCKS[i]}\n{r.stderr[-3000:]}"


def test_from_pretrained_by_name_and_errors(tmp_path, monkeypatch):
    from hiseg.inference import Segmenter
    from hiseg.models import Weights, read_checkpoint
    from hiseg.models import weights as W

    if not (ROOT / "models" / "hiseg_bsds500.ckpt").is_file():
        pytest.skip("shipped checkpoint absent")
    monkeypatch.chdir(tmp_path)
    w = Weights.from_name("bsds500")
    assert w is Weights.BSDS500 and w.path() == ROOT / "models" / "hiseg_bsds500.ckpt"
    # the enum entry says what the file holds: its builder and the pipeline it was measured with
    ck = read_checkpoint(w.path())
    assert ck.hyper_parameters["arch"] == w.value.builder
    assert ck.metadata["pipeline"] == dict(w.value.pipeline)
    assert Segmenter.from_pretrained("bsds500").pipeline.linkage == "average"
    with pytest.raises(ValueError, match="unknown pretrained model 'nope'.*bsds500"):
        Weights.from_name("nope")
    monkeypatch.setattr(W, "weights_dirs", lambda: [tmp_path])
    with pytest.raises(FileNotFoundError, match="HISEG_WEIGHTS_DIR"):
        Weights.BSDS500.path()
