"""Run ``python train.py`` on a tiny synthetic set (shared by the training tests)."""
import csv
import os
import subprocess
import sys
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
TINY = ("--data.init_args.n_train", "8", "--data.init_args.n_val", "2",
        "--data.init_args.size", "48", "--data.init_args.batch_size", "4",
        "--model.pipeline", '{"superpixels": "color_watershed", "linkage": "average", "region_size": 6.0}',
        "--model.arch_kwargs", '{"width": 8}',
        "--trainer.enable_progress_bar", "false")


def run_train(tmp_path, *extra, sub="fit", pythonpath=None, timeout=600):
    """``python train.py SUB --config configs/synthetic.yaml`` in ``tmp_path`` (logs and checkpoints
    under ``tmp_path``, the default root dir); later ``extra`` options override the tiny defaults."""
    cmd = [sys.executable, str(ROOT / "train.py"), sub, "--config", str(ROOT / "configs" / "synthetic.yaml"),
           "--trainer.default_root_dir", str(tmp_path), *TINY, *extra]
    env = dict(os.environ, PYTHONWARNINGS="ignore")
    if pythonpath:
        env["PYTHONPATH"] = os.pathsep.join([str(pythonpath), env.get("PYTHONPATH", "")])
    return subprocess.run(cmd, cwd=tmp_path, capture_output=True, text=True, timeout=timeout, env=env)


def load_ckpt(path):
    return torch.load(path, map_location="cpu", weights_only=True)


def csv_rows(path):
    with open(path, newline="") as f:
        return list(csv.DictReader(f))
