"""Train a hierarchical segmentation network: ``python train.py`` (LightningCLI).

``python train.py`` alone trains on the embedded synthetic dataset with
``configs/synthetic.yaml`` (only then: with arguments, name the configs);
``python train.py fit --config configs/bsds500.yaml`` trains on BSDS500;
``python train.py fit --config configs/folder_finetune.yaml --data.init_args.data_root DIR``
fine-tunes the shipped model on your own images; ``--ckpt_path runs/.../last.ckpt`` resumes;
``--model.init_from CKPT`` (or ``bsds500``) starts from other weights. All of LightningCLI's
options apply (``python train.py fit --help``).
"""
import sys
from pathlib import Path

from hiseg._openmp import passive_openmp_waits
from hiseg.training.help_texts import print_stored_help, print_stored_option_error

DEFAULT_CONFIG = Path(__file__).resolve().parent / "configs" / "synthetic.yaml"

if __name__ == "__main__":
    # a bare help request or an unknown option: the live parser's stored text or refusal (no torch);
    # anything else builds the parser
    prog = Path(sys.argv[0]).name
    if print_stored_option_error(sys.argv[1:], prog, DEFAULT_CONFIG):
        sys.exit(2)
    if not print_stored_help(sys.argv[1:], prog, DEFAULT_CONFIG):
        passive_openmp_waits()  # before torch: OpenMP threads that spin burn the CPU of a busy machine
        from hiseg.training.cli import main

        main(sys.argv[1:], default_config=DEFAULT_CONFIG)
