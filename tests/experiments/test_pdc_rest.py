"""experiments/bsds_recipe/pdc_rest.py (issue 33, item 6: the rest of the recipe after pdc_boundary_net's
pixel stage) end to end at a tiny size on the CPU, and resumed: a second run redoes nothing."""
import os
import subprocess
import sys

import pytest

from _train import ROOT, load_ckpt
from tests.training.test_recipe import make_bsds, pdc_pixel_stage


@pytest.mark.slow
def test_pdc_rest_runs_the_recipe_and_resumes(tmp_path):
    data = make_bsds(tmp_path / "bsds")
    pixel = pdc_pixel_stage(tmp_path, data, 2)
    work, results = tmp_path / "work", tmp_path / "results"
    cmd = [sys.executable, str(ROOT / "experiments/bsds_recipe/pdc_rest.py"), "--tiny", "--pixel", str(pixel), "--bsds", str(data),
           "--work", str(work), "--results", str(results)]
    env = dict(os.environ, PYTHONWARNINGS="ignore", OMP_NUM_THREADS="1")
    first = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=1200)
    assert first.returncode == 0, (first.stdout + first.stderr)[-4000:]
    ft = load_ckpt(next(work.glob("finetune/csv/version_*/checkpoints/last.ckpt")))
    assert ft["global_step"] == 2 and ft["hyper_parameters"]["arch"] == "pdc_boundary_net"
    assert ft["hyper_parameters"]["arch_kwargs"] == {"width": 8, "blocks": [1, 1, 1, 1]}
    for name in ("pdc_finetune", "pdc_merge", "ensemble", "pdc_ensemble"):
        assert (work / f"{name}.ckpt").is_file(), name
    from hiseg.segmentation.segmenter import Segmenter

    merged = Segmenter.from_checkpoint(work / "pdc_merge.ckpt")
    assert merged.pipeline.merge_head is not None and merged.pipeline.flip
    ens = Segmenter.from_checkpoint(work / "pdc_ensemble.ckpt")
    assert ens.pipeline.merge_head is not None and not ens.pipeline.flip and tuple(ens.pipeline.scales) == (0.5, 1.0)
    readme = (results / "README.md").read_text()
    rows = [ln for ln in readme.splitlines() if ln.startswith("| ") and "goal" not in ln and "model" not in ln]
    assert len(rows) == 3 and all(len(ln.split("|")) == 13 for ln in rows), readme
    assert "2 images, 5 thresholds" in readme
    # resumed: every stage's output is there, nothing is run again
    second = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=600)
    assert second.returncode == 0, (second.stdout + second.stderr)[-4000:]
    assert first.stdout.count(sys.executable) == 7  # train.py, 3 bsds_eval.py, 2 merge_recipe.py, hiseg ensemble
    assert sys.executable not in second.stdout, second.stdout
    assert (results / "README.md").read_text().split("This run's")[0] == readme.split("This run's")[0]
    # the fine-tuning cut before its end (no mark): resumed from its last.ckpt, the stages after it kept
    (work / "finetune.done").unlink()
    third = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=600)
    assert third.returncode == 0, (third.stdout + third.stderr)[-4000:]
    assert "finetune: resuming from" in third.stdout and third.stdout.count(sys.executable) == 1, third.stdout
    assert (work / "finetune.done").is_file()
    # another pixel checkpoint or split into the same folder: refused, naming both
    other = subprocess.run(cmd + ["--split", "train+val"], capture_output=True, text=True, env=env, timeout=600)
    assert other.returncode != 0 and "give another --work" in other.stderr and "train+val" in other.stderr


def test_pdc_rest_refuses_a_missing_checkpoint(tmp_path):
    r = subprocess.run([sys.executable, str(ROOT / "experiments/bsds_recipe/pdc_rest.py"), "--pixel", str(tmp_path / "no.ckpt"),
                        "--bsds", str(tmp_path), "--work", str(tmp_path / "w")], capture_output=True, text=True)
    assert r.returncode == 2 and "no.ckpt: no such file" in r.stderr
    assert not (tmp_path / "w").exists()
