"""``hiseg export``: a shipped model or a checkpoint as a folder of ONNX files and a manifest
(:mod:`hiseg.export.onnx`), for ``hiseg predict --checkpoint DIR`` and
``Segmenter.from_checkpoint(DIR)`` with onnxruntime, without torch (:mod:`hiseg.export.runtime`)."""
from __future__ import annotations

import argparse
from pathlib import Path

from .options import add_overwrite, default_text
from .predict import add_pipeline_overrides

__all__ = ["add_arguments", "run", "HELP"]

HELP = "a model as ONNX files and a manifest, for onnxruntime inference without torch"


def add_arguments(p: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """Add ``hiseg export``'s options to ``p`` and return it."""
    from .options import default_model

    p.description = ("Export a shipped model or a checkpoint into a folder: its boundary network(s) as ONNX "
                     "(BatchNorm folded, any image size, scales and flips inside), its learned merging head as "
                     "ONNX, and manifest.json (settings, versions, sha256 of each file). Predict from it with "
                     "`hiseg predict --checkpoint DIR` (onnxruntime).")
    p.add_argument("model", nargs="?", default=None, metavar="MODEL",
                   help="a checkpoint (.ckpt) or a shipped model's name" + default_text(default_model()))
    p.add_argument("-o", "--out", required=True, metavar="DIR", type=Path, help="the folder to write")
    add_pipeline_overrides(p)
    add_overwrite(p, "export files")
    p.add_argument("-q", "--quiet", action="store_true", help="no closing line")
    return p


def run(args) -> int:
    """``hiseg export`` with parsed ``args``: 0, or ExportError / FileNotFoundError /
    CheckpointError before anything is written."""
    from ..export.onnx import export_model
    from .options import default_model

    m = export_model(args.model or default_model(), args.out, overwrite=args.overwrite,
                     scales=args.scales, flip=args.flip, linkage=args.linkage)
    if not args.quiet:
        print(f"wrote {args.out}: model {m['model']}, {', '.join(m['files'])} and manifest.json "
              f"(scales {m['network']['scales']}, flip {m['network']['flip']})")
    return 0
