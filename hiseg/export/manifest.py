"""The exported folder's manifest (``manifest.json``): what it holds and how to check it.

It imports the standard library only (no numpy, no torch, no onnx): the exporter
(:mod:`hiseg.export.onnx`) writes it, the runtime (:mod:`hiseg.export.runtime`) reads and
checks it before any ONNX file is opened.

Format version 1::

    {"format": "hiseg-export", "format_version": 1, "hiseg_version": "0.1.0",
     "model": "bsds500_ensemble", "opset": 17,
     "network": {"file": "boundary.onnx", "input": "image", "output": "boundary",
                 "scales": [0.5, 1.0], "flip": false, "pad_multiple": 8, "min_side": 32,
                 "batchnorm_folded": true, "fingerprint": "ee8de67c4333c4ad"},
     "merge_head": {"file": "merge_head.onnx", "input": "features", "output": "weights",
                    "features": [...], "output_kind": "sigmoid", "network": "ee8de67c4333c4ad"} | null,
     "pipeline": {... Pipeline.to_dict() without merge_head ...},
     "checkpoint": {"file": "hiseg_bsds500_ensemble.ckpt", "sha256": "<sha256>"},
     "files": {"boundary.onnx": "<sha256>", "merge_head.onnx": "<sha256>"}}

The network graph takes one float32 image ``(1, 3, H, W)`` in [0, 1] (H, W dynamic) and
returns the boundary probability ``(1, H, W)``: the pipeline's scales, flips and the
ensemble's mean are inside it, so its map is the torch path's ``Pipeline.maps``. ``checkpoint``
(optional) names the file it was made from: a shipped model's exported form runs only beside it.
"""
from __future__ import annotations

import hashlib
import json
from pathlib import Path

__all__ = ["FORMAT", "FORMAT_VERSION", "MANIFEST", "ExportError", "sha256_file", "sha256_bytes", "read_manifest", "is_exported",
           "printable"]

FORMAT = "hiseg-export"
#: The manifest layout this hiseg writes and the newest it reads.
FORMAT_VERSION = 1
MANIFEST = "manifest.json"


class ExportError(ValueError):
    """An export that cannot be made, or an exported folder that cannot be used (one line)."""


def printable(text: str) -> str:
    """``text`` with its control characters escaped (``\\n``, ``\\x1b``...): a manifest's strings
    reach the terminal, and an edited one must not move the cursor or recolour it."""
    return "".join(c if c.isprintable() else c.encode("unicode_escape").decode("ascii") for c in str(text))


def sha256_file(path) -> str:
    """The sha256 of a file's bytes (hex), read in 1 MiB blocks."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def sha256_bytes(data: bytes) -> str:
    """The sha256 of ``data`` (hex), as :func:`sha256_file` of a file holding them."""
    return hashlib.sha256(data).hexdigest()


def is_exported(path) -> bool:
    """Whether ``path`` is a folder holding a manifest (an exported model, maybe a broken one)."""
    p = Path(path)
    return p.is_dir() and (p / MANIFEST).is_file()


def read_manifest(folder, verify: bool = True) -> dict:
    """The checked manifest of an exported folder. ExportError, one line naming the folder,
    for: no manifest, one that is not JSON or not hiseg's, a newer format than this hiseg
    reads, a listed file missing or whose sha256 differs (corrupt or edited), a file the
    manifest's sections name that it does not list. ``verify=False`` skips the checksums."""
    folder = Path(folder)
    where = f"exported model {folder}"
    mpath = folder / MANIFEST
    if not folder.is_dir():
        raise ExportError(f"{where}: not a folder (export one with `hiseg export MODEL -o DIR`)")
    if not mpath.is_file():
        raise ExportError(f"{where}: no {MANIFEST} (not a folder written by `hiseg export`, or an interrupted one)")
    try:
        m = json.loads(mpath.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise ExportError(f"{where}: {MANIFEST} is not readable JSON ({e}); export the model again") from None
    if not isinstance(m, dict) or m.get("format") != FORMAT:
        raise ExportError(f"{where}: {MANIFEST} is not a hiseg export manifest (format {FORMAT!r})")
    version = m.get("format_version")
    if not isinstance(version, int) or isinstance(version, bool) or version < 1:
        raise ExportError(f"{where}: {MANIFEST} has no valid format_version ({version!r})")
    if version > FORMAT_VERSION:
        from .. import __version__

        raise ExportError(f"{where}: written by hiseg {m.get('hiseg_version', '?')} in export format {version}; "
                          f"this hiseg ({__version__}) reads format {FORMAT_VERSION} at most: upgrade hiseg, or "
                          "export the model again with this one")
    files = m.get("files")
    net = m.get("network")
    if not isinstance(files, dict) or not isinstance(net, dict) or "file" not in net:
        raise ExportError(f"{where}: {MANIFEST} lacks its 'files' or 'network' section")
    for section in ("network", "merge_head"):
        s = m.get(section)
        if s is not None and s.get("file") not in files:
            raise ExportError(f"{where}: {MANIFEST} names {s.get('file')!r} for {section} but lists no checksum of it")
    for name, digest in files.items():
        p = folder / name
        if Path(name).name != name:
            raise ExportError(f"{where}: {MANIFEST} lists {name!r}, not a file name of the folder")
        if not p.is_file():
            raise ExportError(f"{where}: {name} is missing; export the model again")
        if verify and sha256_file(p) != digest:
            raise ExportError(f"{where}: {name} does not match its sha256 in {MANIFEST} (corrupt or edited); "
                              "export the model again")
    return m
