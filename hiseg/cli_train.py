"""The LightningCLI behind ``train.py`` (kept in the package so it is importable and tested)."""
from __future__ import annotations

import sys
from pathlib import Path
from typing import Optional, Sequence

import pytorch_lightning as pl
from pytorch_lightning.cli import LightningCLI

from .lightning import HierarchicalSegmentationModule

SUBCOMMANDS = ("fit", "validate", "test", "predict")

def main(argv: Optional[Sequence[str]] = None, default_config: Optional[Path] = None, run: bool = True):
    """Run the CLI. With no subcommand, ``fit`` is implied; the default config applies to ``fit``."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] not in SUBCOMMANDS + ("-h", "--help", "--print_config"):
        argv = ["fit"] + argv
    parser_kwargs = {}
    if default_config is not None and Path(default_config).is_file():
        parser_kwargs = {sub: {"default_config_files": [str(default_config)]} for sub in SUBCOMMANDS}
    return LightningCLI(
        HierarchicalSegmentationModule,
        pl.LightningDataModule,
        subclass_mode_data=True,
        seed_everything_default=0,
        save_config_kwargs={"overwrite": True},
        parser_kwargs=parser_kwargs,
        args=argv,
        run=run,
    )
