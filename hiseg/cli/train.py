"""``hiseg train``: ``python train.py`` as a subcommand (the same LightningCLI,
:mod:`hiseg.training.cli`; ``hiseg train fit --help`` lists every option).

In a folder holding ``configs/synthetic.yaml`` (the repository's root), ``hiseg train`` with
no arguments is ``python train.py``'s default run; elsewhere, name a config.
"""
from __future__ import annotations

from pathlib import Path
from typing import Sequence

__all__ = ["run", "HELP"]

HELP = "train a network (python train.py's LightningCLI: fit, validate, test; `hiseg train fit --help`)"


def run(argv: Sequence[str]) -> int:
    """Run ``python train.py ARGV``'s CLI; its exit status (LightningCLI exits itself on errors)."""
    import sys

    from ..training.cli import main

    default = Path.cwd() / "configs" / "synthetic.yaml"
    saved, sys.argv = sys.argv, [f"{Path(sys.argv[0]).name} train", *argv]  # LightningCLI reads sys.argv itself
    try:
        main(list(argv), default_config=default if default.is_file() else None)
    finally:
        sys.argv = saved
    return 0
