"""Shipped weights by name, from any folder: ``Segmenter.from_pretrained("bsds500")``.

A name resolves to a checkpoint file found, in this order, in ``$HISEG_WEIGHTS_DIR``, in
the package (``hiseg/weights/``) and in the repository's ``models/`` folder (an editable
install, ``pip install -e .``, the README's). Nothing is downloaded.
"""
from __future__ import annotations

import os
from pathlib import Path

__all__ = ["PRETRAINED", "pretrained_path"]

#: name -> (file name, what it is)
PRETRAINED = {
    "bsds500": ("hiseg_bsds500.ckpt", "compact_boundary_net (329k parameters) trained on BSDS500 train, "
                                      "card: models/README.md"),
}


def _search_dirs() -> list[Path]:
    dirs = []
    if os.environ.get("HISEG_WEIGHTS_DIR"):
        dirs.append(Path(os.environ["HISEG_WEIGHTS_DIR"]))
    here = Path(__file__).resolve().parent
    return dirs + [here / "weights", here.parent / "models"]


def pretrained_path(name: str) -> Path:
    """The checkpoint file of a shipped model. Raises ValueError for an unknown name and
    FileNotFoundError (saying where it looked) when the file is not there."""
    if name not in PRETRAINED:
        raise ValueError(f"unknown pretrained model {name!r}; available: {sorted(PRETRAINED)}")
    fname = PRETRAINED[name][0]
    dirs = _search_dirs()
    for d in dirs:
        if (d / fname).is_file():
            return d / fname
    raise FileNotFoundError(
        f"pretrained model {name!r} ({fname}) not found in {[str(d) for d in dirs]}: install hiseg from its "
        f"repository with `pip install -e .` (the file ships in models/), or set HISEG_WEIGHTS_DIR to the "
        "folder holding it")
