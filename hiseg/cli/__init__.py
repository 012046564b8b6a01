"""The ``hiseg`` command: ``predict``, ``view``, ``evaluate``, ``ensemble``, ``export`` and ``train``,
one module each (:mod:`hiseg.cli.predict`, :mod:`hiseg.cli.view`, :mod:`hiseg.cli.evaluate`,
:mod:`hiseg.cli.ensemble`, :mod:`hiseg.cli.export`, :mod:`hiseg.cli.train`), their shared options defined once in
:mod:`hiseg.cli.options`; ``predict``'s run record (what ``--resume`` checks) in :mod:`hiseg.cli.record`.

The vocabulary, the same in every subcommand (``tests/cli/test_cli_help.py`` checks the help; the
table is ``docs/cli.md``):

* **inputs are positional**: ``hiseg predict INPUT ...``, ``hiseg view INPUT ...`` (images or
  folders of images), ``hiseg evaluate DIR`` (the folder of predictions), ``hiseg ensemble MEMBER ...``;
* ``-o/--out DIR``: the folder a command writes into, in every command (required where writing
  is the point, optional in ``evaluate``; ``ensemble`` writes ``DIR/NAME.ckpt``, ``--name NAME``);
  ``--overwrite`` replaces files that exist there, otherwise the command refuses before writing
  anything, naming them;
* ``--checkpoint CKPT`` (no short flag: ``-c`` is ``--config`` in ``hiseg train``, LightningCLI's;
  ``-c`` still works in predict and view, with a deprecation note): a checkpoint file or a
  shipped model's name; without it the shipped default model (``hiseg.models.Weights.default()``),
  named on the first line of the output; ``--classical`` (or ``--checkpoint none``): the
  no-network baseline; ``--device DEVICE``, ``auto`` by default, as ``Segmenter(device="auto")``;
* ``--workers N``: processes working on the images in parallel, ``auto`` by default (one per
  usable CPU, at most 8; none when there are too few images to pay for starting them);
* ``-q/--quiet``: no progress bar (and, in predict and view, no line naming the model);
* ``--pixel-limit N`` (predict, view, evaluate): an image file declaring more than ``N`` pixels (a
  ``view --ucm`` ucm2: ``N`` values) is refused from its header, in one line, and the others processed (``HISEG_PIXEL_LIMIT``;
  :data:`hiseg.io.PIXEL_LIMIT` by default);
* cuts in the names of :mod:`hiseg.core.cuts`' vocabulary: ``--regions K`` (``n_regions``),
  ``--min-region-size SIZE`` (``min_size``); ``--level T``: the segmentation at level ``T`` of
  the saliency map (``SegmentationResult.cut(threshold=T)``); ``hiseg view``'s pages open at
  that cut; ``--thresholds N`` (``evaluate``) is a *number* of levels, never a level;
* labels are 0-based where hiseg writes them (``_labels.png``) and ``evaluate`` reads them as
  they are (``--first-label auto``);
* every metavar is an upper-case word (``DIR``, ``N``, ``K``, ``T``), every default is shown
  as ``(default: VALUE)``; a value is checked when parsed and a bad one names its option;
* exit status 0: done; 1: some images failed (the others are written, the failures listed
  at the end); 2: nothing ran (a bad option, input or checkpoint, files in the way).

``hiseg train`` is ``python train.py`` (LightningCLI's own conventions: ``-c/--config``,
``--trainer.X``, ``fit`` when no subcommand is given). Help, ``--version`` and option errors
import no torch (:func:`build_parser` adds only the running command's options; commands import
torch and Lightning when they run); ``hiseg train``'s help is the LightningCLI parser's text,
stored (:mod:`hiseg.training.help_texts`), and so is its refusal of an unknown option or a stray
word; other option errors (a bad value) need that parser (seconds).

``hiseg --version`` prints the version.
"""
from __future__ import annotations

import argparse
import sys
from typing import Optional, Sequence

__all__ = ["main", "build_parser"]

_SUBCOMMANDS = ("predict", "view", "evaluate", "ensemble", "export")
#: The options that choose what runs, named in a line saying what an install lacks.
SELECTORS = ("--classical", "--backend", "torch")


def build_parser(command: Optional[str] = None) -> argparse.ArgumentParser:
    """The ``hiseg`` parser, every subcommand's options added; with ``command``, only that
    subcommand's (``""``: none; the others listed with their one-line help): what :func:`main` parses with, so
    that ``hiseg --help``, ``--version`` and one command's help or option error import only what
    that command's options need (no torch, no Lightning: they are imported when a command runs)."""
    from importlib import import_module

    from .. import __version__
    from . import train

    parser = argparse.ArgumentParser(prog="hiseg", description=(
        "hiseg: hierarchical image segmentation. `hiseg predict` writes saliency maps (ultrametric "
        "contour maps), ucm2 .mat files and cuts of images; `hiseg view` writes interactive explorer pages "
        "of their hierarchies; `hiseg evaluate` runs the BSDS500 benchmark; `hiseg ensemble` builds an ensemble's "
        "checkpoint; `hiseg export` writes a model as ONNX for onnxruntime; `hiseg train` trains."))
    parser.add_argument("--version", action="version", version=f"hiseg {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="{predict,view,evaluate,ensemble,export,train}")
    for name in _SUBCOMMANDS:
        mod = import_module(f"{__name__}.{name}")
        p = sub.add_parser(name, help=mod.HELP)
        if command is None or command == name:
            mod.add_arguments(p)
        p.set_defaults(func=mod.run)
    sub.add_parser("train", help=train.HELP, add_help=False)  # run by main before parsing
    return parser


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Run ``hiseg ARGV``; the exit status (0, 1: some images failed, 2: nothing ran). A command
    that needs what this install lacks (torch, Lightning, ... in an install without torch) says
    so in one line, with the line that installs it, and exits 2."""
    from ..core._lazy import INSTALL_TORCH, missing_package, needs

    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        return _main(argv)
    except ModuleNotFoundError as e:
        package = missing_package(e)
        if package is None:
            raise
        command = next((a for a in argv if not a.startswith("-")), "")
        message = (str(e).replace("this needs", f"hiseg {' '.join(argv[:1] + [a for a in argv if a in SELECTORS])} "
                                  "needs", 1) if INSTALL_TORCH in str(e) else needs(f"hiseg {command}".strip(), package))
        print(f"hiseg {command}: error: {message}", file=sys.stderr)
        return 2


def _main(argv: list) -> int:
    if not argv:  # `hiseg` alone: what it can do, not only that a command is required
        build_parser("").print_help()
        return 2
    if argv and argv[0] == "train":  # LightningCLI parses its own arguments (and --help)
        from . import train

        return train.run(argv[1:])
    command = next((a for a in argv if not a.startswith("-")), None)  # the subcommand, if any
    args = build_parser(command if command in _SUBCOMMANDS else "").parse_args(argv)
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
