"""Every ```python block of the README and of the docs pages it links runs as written, on its
own, from an empty folder; so do the commands of its "Your own images" section, on a tiny
folder; the README stays short and links every docs page."""
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
BLOCKS = [b for page in PAGES for b in re.findall(r"```python\n(.*?)```", page.read_text(), flags=re.S)]


def test_readme_has_python_blocks():
    assert len(BLOCKS) >= 6 and len(re.findall("```python", (ROOT / "README.md").read_text())) >= 2


def test_readme_is_short_links_every_docs_page_and_predicts_before_training_at_scale():
    text = (ROOT / "README.md").read_text()
    assert len(text.splitlines()) <= 150
    for page in PAGES[1:]:
        assert f"(docs/{page.name})" in text, page.name
    assert (ROOT / "docs" / "overview.png").is_file() and "(docs/overview.png)" in text
    assert text.index("hiseg predict") < min(text.index(w) for w in ("DDP", "GPU"))
    assert "version_0" not in text and "--pred " not in text


@pytest.mark.parametrize("i", range(len(BLOCKS)))
@pytest.mark.slow
def test_readme_python_block_runs(tmp_path, i):
    r = subprocess.run([sys.executable, "-c", BLOCKS[i]], cwd=tmp_path, capture_output=True, text=True,
                       timeout=600, env={"PATH": "/usr/bin:/bin", "OMP_NUM_THREADS": "1", "HOME": str(tmp_path)})
    assert r.returncode == 0, f"README block {i} failed:\n{BLOCKS[i]}\n{r.stderr[-3000:]}"


def test_from_pretrained_by_name_and_errors(tmp_path, monkeypatch):
    from hiseg.segmentation.segmenter import Segmenter
    from hiseg.models import Weights, read_checkpoint
    from hiseg.models import weights as W

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


def _own_data_commands():
    """The commands of the README's "Your own images" block (comments dropped)."""
    section = (ROOT / "README.md").read_text().split("### Your own images", 1)[1].split("\n## ", 1)[0]
    (block,) = re.findall(r"```bash\n(.*?)```", section, flags=re.S)
    return [ln.strip() for ln in block.splitlines() if ln.strip() and not ln.strip().startswith("#")]


@pytest.mark.slow
def test_readme_own_data_commands_run_as_written(tmp_path):
    """The README's own-data commands on a tiny folder in the layout it gives: fine-tuning the
    shipped model and training from scratch (2 steps each, logs under tmp_path), then hiseg
    predict with the checkpoint path the README shows."""
    import shlex

    import cv2
    import numpy as np

    data = tmp_path / "my_data"
    (data / "images").mkdir(parents=True)
    (data / "labels").mkdir()
    rng = np.random.default_rng(0)
    for i in range(5):  # two colour halves each, split at a random column; two annotators
        img = (rng.random((48, 64, 3)) * 30).astype(np.uint8)
        c = int(rng.integers(16, 48))
        img[:, c:] += np.array([180, 60, 20], np.uint8)
        lab = np.zeros((48, 64), np.uint8)
        lab[:, c:] = 1
        cv2.imwrite(str(data / "images" / f"im{i}.png"), img)
        cv2.imwrite(str(data / "labels" / f"im{i}_0.png"), lab)
        cv2.imwrite(str(data / "labels" / f"im{i}_1.png"), lab * 7)
    cv2.imwrite(str(tmp_path / "photo.jpg"), img)
    commands = _own_data_commands()
    assert [c.split()[:4] for c in commands] == [["python", "train.py", "fit", "--config"]] * 2 + [
        ["hiseg", "predict", "photo.jpg", "--checkpoint"]]
    checkpoints = []
    budget = ["--trainer.max_steps", "2", "--data.init_args.crop_size", "48", "--data.init_args.num_workers", "0",
              "--trainer.enable_progress_bar", "false"]
    for cmd in commands[:2]:
        argv = [a.replace("my_data", str(data)) for a in shlex.split(cmd)]
        root = tmp_path / "runs" / Path(argv[argv.index("--config") + 1]).stem  # the config's default_root_dir
        r = subprocess.run([sys.executable, *argv[1:], *budget, "--trainer.default_root_dir", str(root)], cwd=ROOT,
                           capture_output=True, text=True, timeout=600, env={**os.environ, "PYTHONWARNINGS": "ignore"})
        assert r.returncode == 0, f"{cmd}\n{r.stderr[-3000:]}"
        assert "[hiseg] training finished: " in r.stdout and "2 step(s)" in r.stdout
        assert "validation boundary F of the starting model" in r.stdout
        named = re.findall(r"next: hiseg predict IMAGE --checkpoint (\S+)", r.stdout) or \
            re.findall(r"last checkpoint \(resume with --ckpt_path\): (\S+)", r.stdout)  # not improved: the last
        checkpoints.append(named[0])
    argv = [checkpoints[0] if a == "CKPT" else a for a in shlex.split(commands[2])]  # the first run's, as named
    r = subprocess.run([str(Path(sys.executable).parent / "hiseg"), *argv[1:]], cwd=tmp_path, capture_output=True,
                       text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    assert (tmp_path / "out" / "photo.mat").is_file()


def _scripts_listed(folder: Path) -> list[str]:
    """The scripts of ``folder`` that its README.md does not name (one line each)."""
    index = (folder / "README.md").read_text()
    return [p.name for p in sorted(folder.iterdir()) if p.suffix in (".py", ".sh") and f"`{p.name}`" not in index]


def test_every_benchmark_is_listed_in_its_index():
    assert not _scripts_listed(ROOT / "benchmarks"), "benchmarks/README.md does not list them"


def test_experiments_are_folders_each_with_its_index():
    """experiments/ holds folders only (torchvision's references/ style), each with a README.md that lists
    every script of the folder, and experiments/README.md names every folder."""
    exp = ROOT / "experiments"
    assert [p.name for p in exp.iterdir() if p.is_file()] == ["README.md"]
    index = (exp / "README.md").read_text()
    folders = sorted(p for p in exp.iterdir() if p.is_dir())
    assert folders
    for folder in folders:
        assert (folder / "README.md").is_file(), f"{folder.name}/ has no README.md"
        assert f"`{folder.name}/`" in index, f"experiments/README.md does not name {folder.name}/"
        assert not _scripts_listed(folder), f"experiments/{folder.name}/README.md does not list {_scripts_listed(folder)}"


def test_no_shell_script_in_experiments_is_longer_than_60_lines():
    """Longer runs are Python programs with arguments (issue 40): a shell script under experiments/ stays a
    short list of commands."""
    long = {str(p.relative_to(ROOT)): n for p in sorted((ROOT / "experiments").rglob("*.sh"))
            if (n := len(p.read_text().splitlines())) > 60}
    assert not long, f"shell scripts over 60 lines: {long}"


@pytest.mark.slow
def test_readme_first_segmentation_runs_as_written(tmp_path):
    """Issue 42: the README's quick first segmentation (after the set-up commands) runs as
    written, in an empty folder, and writes the page it names."""
    import shlex

    section = (ROOT / "README.md").read_text().split("## Set up", 1)[1].split("\n## ", 1)[0]
    block = re.findall(r"```bash\n(.*?)```", section, flags=re.S)[1]
    commands = [ln.strip() for ln in block.splitlines() if ln.strip()]
    assert [c.split()[0] for c in commands] == ["python", "hiseg"]
    for cmd in commands:
        argv = shlex.split(cmd)
        exe = sys.executable if argv[0] == "python" else str(Path(sys.executable).parent / "hiseg")
        r = subprocess.run([exe, *argv[1:]], cwd=tmp_path, capture_output=True, text=True, timeout=600)
        assert r.returncode == 0, f"{cmd}\n{r.stderr[-3000:]}"
    assert (tmp_path / "first" / "astronaut.html").is_file() and "first/astronaut.html" in section


def _photo_commands():
    """The commands of the README's "Segment your photos" block (comments dropped), then its
    ``hiseg view`` of the text after it."""
    section = (ROOT / "README.md").read_text().split("## Segment your photos", 1)[1].split("\n## ", 1)[0]
    (block,) = re.findall(r"```bash\n(.*?)```", section, flags=re.S)
    cmds = [ln.split("#")[0].strip() for ln in block.splitlines() if ln.split("#")[0].strip()]
    return cmds + re.findall(r"`(hiseg view [^`]*)`", section)


@pytest.mark.slow
def test_readme_photo_commands_run_in_order_as_written(tmp_path):
    """Issue 42: the README's predict commands, then its view, run one after the other in one
    folder as written (each into a folder of its own: none is refused for the files of another)."""
    import shlex

    import cv2
    import numpy as np

    rng = np.random.default_rng(0)
    img = (rng.random((40, 56, 3)) * 40).astype(np.uint8)
    img[:, 28:] += 150
    (tmp_path / "my_folder").mkdir()
    cv2.imwrite(str(tmp_path / "photo.jpg"), img)
    cv2.imwrite(str(tmp_path / "my_folder" / "other.png"), img[:, ::-1])
    commands = _photo_commands()
    assert len(commands) == 4 and all(c.startswith("hiseg ") for c in commands)
    hiseg = str(Path(sys.executable).parent / "hiseg")
    for cmd in commands:
        r = subprocess.run([hiseg, *shlex.split(cmd)[1:]], cwd=tmp_path, capture_output=True, text=True, timeout=600)
        assert r.returncode == 0, f"{cmd}\n{r.stderr[-3000:]}"
    assert (tmp_path / "out" / "photo_labels.png").is_file() and (tmp_path / "pages" / "photo.html").is_file()


def test_a_refusal_names_only_the_files_this_run_would_write(tmp_path, capsys):
    """Issue 42: predict without a cut refuses for its own files only (not a former run's
    _labels.png / _overlay.png, which it does not write)."""
    import cv2
    import numpy as np

    from hiseg.cli import main

    cv2.imwrite(str(tmp_path / "photo.png"), np.zeros((8, 8, 3), np.uint8))
    out = tmp_path / "out"
    out.mkdir()
    (out / "photo_labels.png").write_bytes(b"x")
    (out / "photo_ucm.png").write_bytes(b"x")
    assert main(["predict", str(tmp_path / "photo.png"), "-o", str(out), "--classical"]) == 2
    err = capsys.readouterr().err
    assert "photo_ucm.png" in err and "photo_labels.png" not in err and "_overlay" not in err
