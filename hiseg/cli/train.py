"""``hiseg train``: ``python train.py`` as a subcommand (the same LightningCLI,
:mod:`hiseg.training.cli`; ``hiseg train fit --help`` lists every option).

In a folder holding ``configs/synthetic.yaml`` (the repository's root), ``hiseg train`` with
no arguments is ``python train.py``'s default run; elsewhere, name a config. A bare help request
prints the live parser's stored text, and an unknown option or stray word its refusal
(:mod:`hiseg.training.help_texts`: no torch, well under a second); any other command line builds
the parser (seconds).
"""
from __future__ import annotations

from pathlib import Path
from typing import Sequence

__all__ = ["run", "HELP"]

HELP = "train a network (python train.py's LightningCLI: fit, validate, test; `hiseg train fit --help`)"


def run(argv: Sequence[str]) -> int:
    """Run ``python train.py ARGV``'s CLI; its exit status (LightningCLI exits itself on errors)."""
    import sys

    from ..training.help_texts import print_stored_help, print_stored_option_error

    default = Path.cwd() / "configs" / "synthetic.yaml"
    default = default if default.is_file() else None
    prog = f"{Path(sys.argv[0]).name} train"
    if print_stored_help(argv, prog, default):
        return 0
    if print_stored_option_error(argv, prog, default):  # an unknown option: the live parser's refusal
        return 2
    from .._openmp import passive_openmp_waits

    passive_openmp_waits()  # before torch (python train.py's setting)
    from ..training.cli import main

    saved, sys.argv = sys.argv, [prog, *argv]  # LightningCLI reads sys.argv itself
    try:
        main(list(argv), default_config=default)
    finally:
        sys.argv = saved
    return 0
