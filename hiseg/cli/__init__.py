"""The ``hiseg`` command: ``predict``, ``view``, ``evaluate``, ``ensemble`` and ``train``, one
module each (:mod:`hiseg.cli.predict`, :mod:`hiseg.cli.view`, :mod:`hiseg.cli.evaluate`,
:mod:`hiseg.cli.ensemble`, :mod:`hiseg.cli.train`), their shared options defined once in
:mod:`hiseg.cli.options`; ``predict``'s run record (what ``--resume`` checks) in :mod:`hiseg.cli.record`.

The vocabulary, the same in every subcommand (``tests/test_cli_help.py`` checks the help):

* **inputs are positional**: ``hiseg predict INPUT ...``, ``hiseg view INPUT ...`` (images or
  folders of images), ``hiseg evaluate DIR`` (the folder of predictions);
* ``-o/--out DIR``: the folder a command writes into (required where writing is the point,
  optional in ``evaluate``; ``-o FILE`` in ``ensemble``, which writes one file); ``--overwrite`` replaces files that exist there, otherwise the
  command refuses before writing anything, naming them;
* ``-c/--checkpoint CKPT``: a checkpoint file or a shipped model's name; without it the shipped
  default model (``hiseg.models.Weights.default()``), named on the first line of the output;
  ``--classical`` (or ``--checkpoint none``): the no-network baseline; ``--device DEVICE``;
* ``--workers N``: processes working on the images in parallel, ``auto`` by default (one per
  usable CPU, at most 8; none when there are too few images to pay for starting them);
* ``-q/--quiet``: no progress bar, no line naming the model;
* ``--pixel-limit N`` (predict, view, evaluate): an image file declaring more than ``N`` pixels is
  refused from its header, in one line, and the others processed (``HISEG_PIXEL_LIMIT``;
  :data:`hiseg.io.PIXEL_LIMIT` by default);
* cuts in the names of :mod:`hiseg.core.cuts`' vocabulary: ``--regions K`` (``n_regions``),
  ``--min-region-size SIZE`` (``min_size``); ``--level T``: the segmentation at level ``T`` of
  the saliency map (``SegmentationResult.cut(threshold=T)``); ``--thresholds N`` (``evaluate``)
  is a *number* of levels, never a level;
* every metavar is an upper-case word (``DIR``, ``N``, ``K``, ``T``), every default is shown
  as ``(default: VALUE)``; a value is checked when parsed and a bad one names its option;
* exit status 0: done; 1: some images failed (the others are written, the failures listed
  at the end); 2: nothing ran (a bad option, input or checkpoint, files in the way).

``hiseg --version`` prints the version.
"""
from __future__ import annotations

import argparse
import sys
from typing import Optional, Sequence

__all__ = ["main", "build_parser"]

_SUBCOMMANDS = ("predict", "view", "evaluate", "ensemble")


def build_parser() -> argparse.ArgumentParser:
    """The ``hiseg`` parser, every subcommand's options added."""
    from importlib import import_module

    from .. import __version__
    from . import train

    parser = argparse.ArgumentParser(prog="hiseg", description=(
        "hiseg: hierarchical image segmentation. `hiseg predict` writes saliency maps (ultrametric "
        "contour maps), ucm2 .mat files and cuts of images; `hiseg view` writes interactive explorer pages "
        "of their hierarchies; `hiseg evaluate` runs the BSDS500 benchmark; `hiseg ensemble` builds an ensemble's "
        "checkpoint; `hiseg train` trains."))
    parser.add_argument("--version", action="version", version=f"hiseg {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="{predict,view,evaluate,ensemble,train}")
    for name in _SUBCOMMANDS:
        mod = import_module(f"{__name__}.{name}")
        p = sub.add_parser(name, help=mod.HELP)
        mod.add_arguments(p)
        p.set_defaults(func=mod.run)
    sub.add_parser("train", help=train.HELP, add_help=False)  # run by main before parsing
    return parser


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Run ``hiseg ARGV``; the exit status (0, 1: some images failed, 2: nothing ran)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] == "train":  # LightningCLI parses its own arguments (and --help)
        from . import train

        return train.run(argv[1:])
    args = build_parser().parse_args(argv)
    from ..models.weights import CheckpointError

    from .options import pixel_limit_of

    try:
        with pixel_limit_of(args):
            return int(args.func(args) or 0)
    except (FileNotFoundError, ValueError, OSError, CheckpointError) as e:
        print(f"hiseg {args.command}: error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
