"""BSDS500 paths written in the layout ``datasets/README.md`` gives (``ROOT/images/val``,
``ROOT/groundTruth/val``) found in the official archive's, which that README accepts too
(``ROOT/data/images/val``, or ``ROOT/BSDS500/data/...`` for the archive's top folder ``BSR/``).

The training loaders find the archive's ``data/`` by themselves (:func:`hiseg.data.bsds.find_bsds_root`);
this lets ``hiseg predict``, ``view`` and ``evaluate`` read the README's commands
(``hiseg predict datasets/BSDS500/images/val``) on either layout."""
from __future__ import annotations

from pathlib import Path
from typing import Optional

__all__ = ["bsds_archive_path"]

#: The folders of the BSDS500 layout, right under its root.
_BSDS_FOLDERS = ("images", "groundTruth")
#: Where the official archive puts that root, below the folder a user names.
_ARCHIVE_ROOTS = (("data",), ("BSDS500", "data"))


def bsds_archive_path(path) -> Optional[Path]:
    """The existing path the missing ``path`` names in the archive's layout, or None.

    ``path`` = ``ROOT/images/...`` or ``ROOT/groundTruth/...`` that does not exist, where
    ``ROOT/data/images/...`` (or ``ROOT/BSDS500/data/...``) does: that path. None when ``path``
    exists, names no BSDS500 folder, or has no such twin. Cost: a few ``stat`` calls."""
    p = Path(path)
    if p.exists():
        return None
    parts = p.parts
    for i, part in enumerate(parts):
        if part not in _BSDS_FOLDERS:
            continue
        root, rest = Path(*parts[:i]) if i else Path("."), Path(*parts[i:])
        for extra in _ARCHIVE_ROOTS:
            twin = root.joinpath(*extra) / rest
            if twin.exists():
                return twin
    return None
