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
           "printable", "check_manifest", "MAX_SIGMA"]

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


# ----------------------------------------------------------------------------- the schema
#: The largest smoothing ``sigma`` an exported pipeline may ask for (its kernel is ~8 sigma wide;
#: the shipped models use 1.0): ``sigma: 1e9`` would ask numpy for 59.6 GiB.
MAX_SIGMA = 64.0
_NAME = r"a non-empty string of at most 200 characters"


def _is_number(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and v == v and abs(v) != float("inf")


def _is_int(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _text(v) -> bool:
    return isinstance(v, str) and 0 < len(v) <= 200


def _file_name(v) -> bool:
    return _text(v) and Path(v).name == v and v not in (".", "..")


def _scales(v) -> bool:
    return isinstance(v, list) and 1 <= len(v) <= 16 and all(_is_number(x) and 0.1 <= x <= 4 for x in v)


#: One declaration per field: (path, required, test, what a good value is). A section that is
#: absent or null skips its fields (the sections' own declarations say whether it may be).
_FIELDS = (
    ("hiseg_version", False, _text, _NAME),
    ("model", False, _text, _NAME),
    ("opset", False, lambda v: _is_int(v) and 7 <= v <= 100, "an integer in [7, 100]"),
    ("network", True, lambda v: isinstance(v, dict), "an object"),
    ("network.file", True, _file_name, "a file name of the folder"),
    ("network.input", False, _text, _NAME),
    ("network.output", False, _text, _NAME),
    ("network.scales", False, _scales, "a list of 1 to 16 numbers, each in [0.1, 4]"),
    ("network.flip", False, lambda v: isinstance(v, bool), "true or false"),
    ("network.pad_multiple", False, lambda v: _is_int(v) and 1 <= v <= 1024, "an integer in [1, 1024]"),
    ("network.min_side", False, lambda v: _is_int(v) and 1 <= v <= 4096, "an integer in [1, 4096]"),
    ("network.batchnorm_folded", False, lambda v: isinstance(v, bool), "true or false"),
    ("network.fingerprint", False, lambda v: v is None or _text(v), "null or " + _NAME),
    ("merge_head", False, lambda v: v is None or isinstance(v, dict), "null or an object"),
    ("merge_head.file", True, _file_name, "a file name of the folder"),
    ("merge_head.input", False, _text, _NAME),
    ("merge_head.output", False, _text, _NAME),
    ("merge_head.features", True, lambda v: isinstance(v, list) and 1 <= len(v) <= 64 and all(map(_text, v)),
     "a list of 1 to 64 feature names"),
    ("merge_head.output_kind", False, _text, _NAME),
    ("merge_head.network", False, lambda v: v is None or _text(v), "null or " + _NAME),
    ("pipeline", False, lambda v: v is None or isinstance(v, dict), "null or an object"),
    ("pipeline.superpixels", False, _text, _NAME),
    ("pipeline.linkage", False, _text, _NAME),
    ("pipeline.region_size", False, lambda v: _is_number(v) and 2 <= v <= 1e6, "a number in [2, 1e6]"),
    ("pipeline.sigma", False, lambda v: _is_number(v) and 0 <= v <= MAX_SIGMA, f"a number in [0, {MAX_SIGMA:g}]"),
    ("pipeline.scales", False, _scales, "a list of 1 to 16 numbers, each in [0.1, 4]"),
    ("pipeline.flip", False, lambda v: isinstance(v, bool), "true or false"),
    ("pipeline.max_pixels", False, lambda v: _is_int(v) and (v == 0 or 4096 <= v <= 1 << 40),
     "an integer >= 4096, or 0 for no limit"),
    ("pipeline.fit_iterations", False, lambda v: _is_int(v) and 0 <= v <= 100_000, "an integer in [0, 100000]"),
    ("pipeline.merge_head", False, lambda v: v is None, "null (the head is the merge_head section)"),
    ("checkpoint", False, lambda v: v is None or isinstance(v, dict), "null or an object"),
    ("checkpoint.file", True, _text, _NAME),
    ("checkpoint.sha256", False, lambda v: isinstance(v, str) and len(v) == 64, "a sha256 (64 hex digits)"),
    ("files", True, lambda v: isinstance(v, dict) and 1 <= len(v) <= 8 and all(
        _file_name(k) and isinstance(d, str) and len(d) == 64 for k, d in v.items()),
     "an object of 1 to 8 file names and their sha256"),
)
_MISSING = object()


def check_manifest(m: dict, where: str = "exported model") -> None:
    """ExportError, one line naming the field, its value and what it must be, for the first
    field of the manifest ``m`` of the wrong type or out of range (:data:`_FIELDS`: every field
    the readers use, e.g. ``merge_head`` a string, ``pipeline`` a list, ``scales`` a number, no
    ``features``, a negative ``max_pixels``, ``sigma: 1e9``), before anything is built from it. O(fields)."""
    for path, required, test, what in _FIELDS:
        section, _, key = path.rpartition(".")
        holder = m.get(section) if section else m
        if not isinstance(holder, dict):
            continue  # an absent or null section (its own declaration came first)
        v = holder.get(key, _MISSING)
        if v is _MISSING:
            if required:
                raise ExportError(f"{where}: {MANIFEST} has no {path!r} (it must be {what}); export the model again")
            continue
        if not test(v):
            shown = printable(json.dumps(v)[:60] if _jsonable(v) else repr(v)[:60])
            raise ExportError(f"{where}: {MANIFEST}'s {path!r} must be {what}, got {shown} (corrupt or edited); "
                              "export the model again")


def _jsonable(v) -> bool:
    try:
        json.dumps(v)
        return True
    except (TypeError, ValueError):
        return False


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
    check_manifest(m, where)
    files = m["files"]
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
