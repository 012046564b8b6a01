"""``hiseg ensemble``: the slim checkpoint of a mean-probability ensemble of trained networks
(how ``models/hiseg_bsds500_ensemble.ckpt`` is built before its merging head is trained:
``models/README.md``).

The checkpoint holds the members' weights (:class:`hiseg.models.ensemble.MeanProbabilityEnsemble`:
the mean of their boundary probabilities) and the first member's pipeline without its merging
head (a head is trained on the ensemble's own maps afterwards), with ``--scales`` / ``--flip`` /
``--linkage`` on top. It loads wherever a checkpoint does (``hiseg predict --checkpoint ENSEMBLE.ckpt``,
``--model.init_from``).
"""
from __future__ import annotations

import argparse
from pathlib import Path

from .options import add_out, add_overwrite, default_text
from .predict import add_pipeline_overrides

__all__ = ["add_arguments", "run", "HELP", "ensemble_file"]

HELP = "the checkpoint of an ensemble of trained networks (their boundary probabilities averaged)"


def add_arguments(p: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """Add ``hiseg ensemble``'s options to ``p`` and return it."""
    p.description = ("Write the checkpoint of a mean-probability ensemble of two or more trained networks: "
                     "their weights, and the first member's pipeline without its merging head (train one on "
                     "the ensemble's maps: configs/bsds500_merge_head.yaml, models/README.md).")
    p.add_argument("members", nargs="+", metavar="MEMBER",
                   help="checkpoint files (.ckpt) or shipped models' names, two or more")
    add_out(p, "folder of the ensemble's checkpoint, DIR/NAME.ckpt (-o FILE.ckpt, the former spelling, still "
               "names the file, with a deprecation note)")
    p.add_argument("--name", default="ensemble", metavar="NAME",
                   help="the checkpoint's file name in --out, without .ckpt" + default_text("ensemble"))
    add_pipeline_overrides(p)
    add_overwrite(p, "checkpoint file")
    return p


def run(args) -> int:
    """``hiseg ensemble`` with parsed ``args``: 0, or ValueError / FileNotFoundError /
    CheckpointError (fewer than two members, an existing output without --overwrite, an
    unreadable member) before anything is written."""
    from ..segmentation.segmenter import Segmenter
    from ..io import refuse_overwrite
    from ..models import load_model, save_weights
    from ..models.ensemble import MeanProbabilityEnsemble
    from ..models.weights import Weights
    from ..segmentation import Pipeline

    if len(args.members) < 2:
        raise ValueError(f"an ensemble needs two or more members, got {len(args.members)}")
    out = ensemble_file(args)
    refuse_overwrite([out], [Path(m) for m in args.members], overwrite=args.overwrite, command="hiseg ensemble")
    # its network as trained (saved again: not folded) and pipeline, read once, from the CPU
    first = Segmenter(args.members[0], device="cpu", fold=False, backend="torch")
    models = [first.model] + [load_model(Weights.resolve(m)) for m in args.members[1:]]
    pipeline = Pipeline.from_dict({**first.pipeline.to_dict(), "merge_head": None})
    pipeline = pipeline.with_overrides(scales=args.scales, flip=args.flip, linkage=args.linkage)
    path = save_weights(MeanProbabilityEnsemble.from_models(models), out,
                        metadata={"pipeline": pipeline.to_dict(), "members": list(args.members)})
    print(f"wrote {path}: {len(models)} members, pipeline {pipeline.to_dict()}")
    return 0


def ensemble_file(args) -> Path:
    """The checkpoint ``hiseg ensemble`` writes: ``--out DIR`` / ``--name NAME`` + ``.ckpt``; an
    ``--out`` ending in ``.ckpt`` (the former ``-o FILE``) is that file, with a deprecation note."""
    import sys

    if Path(args.out).suffix.lower() == ".ckpt":
        print(f"hiseg ensemble: warning: -o FILE.ckpt is deprecated: write -o DIR [--name NAME] (-o is a folder "
              f"in every hiseg command); writing {args.out}", file=sys.stderr)
        return Path(args.out)
    if "/" in args.name or "\\" in args.name or args.name in ("", ".", ".."):
        raise ValueError(f"--name is a file name without a folder, got {args.name!r}")
    return Path(args.out) / f"{args.name}.ckpt"
