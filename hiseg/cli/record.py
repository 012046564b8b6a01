"""The run record of ``hiseg predict`` (:data:`RECORD` in ``--out``): the options that made
each image's files, which ``--resume`` checks (:class:`RunRecord`, :func:`output_options`)."""
from __future__ import annotations

import contextlib
import json
from pathlib import Path

from .options import model_name

__all__ = ["RECORD", "RunRecord", "output_options"]

#: The run record in ``--out`` (:class:`RunRecord`): the options that made each image's files,
#: which ``--resume`` checks. Hidden, and never one of the outputs: not refused as an existing
#: file, not in the index, not a temporary file.
RECORD = ".hiseg-predict.json"

_FORMAT = "hiseg predict run record 1"

#: The pipeline settings that default to the model's own (None in an option set).
_MODELS_OWN = ("scales", "flip", "linkage", "max-pixels")


def output_options(args) -> dict:
    """The options of ``args`` that decide what ``hiseg predict`` writes, by option name, as
    :data:`RECORD` holds them: the model (``checkpoint``: ``classical``, a shipped model's name or
    a checkpoint's resolved path; ``sha256``: its file's), the pipeline settings given (None: the
    model's), the cut, ``html``. Not ``--tile``, ``--device``, ``--workers``, ``--devices``: they
    change how a map is computed, not what (within float rounding: tiles of 512 and 256 against
    one pass, 3e-7 at most on a 623x801 working image with the shipped models), so that a run that
    ran out of memory can be resumed with smaller tiles."""
    name = model_name(args)
    model = _checkpoint_identity(name) if name != "classical" else {"checkpoint": name, "sha256": None}
    return json.loads(json.dumps({  # as read back from the file (lists, floats)
        **model, "scales": args.scales, "flip": args.flip, "linkage": args.linkage, "max-pixels": args.max_pixels,
        "regions": args.regions, "level": args.level, "min-region-size": args.min_region_size,
        "html": bool(args.html), "models-own": _models_own(name)}))


def _models_own(spec: str):
    """The model's own values of the settings that default to it (:data:`_MODELS_OWN`): the
    pipeline its checkpoint holds, or the classical path's; None when the file cannot be read
    (loading it names why). An option given with the model's own value is then the same option
    as none given (:func:`_differences`)."""
    if Path(spec).is_dir():  # an exported model: its manifest's settings
        from ..export.manifest import ExportError, read_manifest

        try:
            m = read_manifest(spec, verify=False)
        except ExportError:
            return None
        p = m.get("pipeline") or {}
        return {"scales": [float(x) for x in m["network"].get("scales", [1.0])],
                "flip": bool(m["network"].get("flip", False)), "linkage": p.get("linkage"),
                "max-pixels": p.get("max_pixels")}
    import warnings

    from ..segmentation.segmenter import stored_pipeline
    from ..models.weights import CheckpointError, Weights, read_checkpoint
    from ..segmentation.pipeline import Pipeline, PipelineError

    try:
        if spec == "classical":
            pipe = Pipeline.classical()
        else:
            with warnings.catch_warnings():  # the loader's to give
                warnings.simplefilter("ignore")
                ck = read_checkpoint(Weights.resolve(spec))
            pipe = stored_pipeline(ck)
    except (OSError, ValueError, TypeError, KeyError, CheckpointError, PipelineError):
        return None
    return {"scales": [float(x) for x in pipe.scales], "flip": bool(pipe.flip), "linkage": pipe.linkage,
            "max-pixels": int(pipe.max_pixels)}


def _effective(opts: dict, k: str):
    """Option ``k`` of the option set ``opts``: as given, or the model's own where none was given
    and the set knows it (a record written before it did compares as given)."""
    v = opts.get(k)
    if v is None and k in _MODELS_OWN:
        return (opts.get("models-own") or {}).get(k)
    return v


def _checkpoint_identity(spec: str) -> dict:
    """``checkpoint``: a shipped model's name, or the checkpoint file's resolved path; ``sha256``:
    the file's digest (read in blocks; None when it cannot be read: loading it names why)."""
    import hashlib
    import warnings

    from ..models.weights import Weights

    try:
        with warnings.catch_warnings():  # the loader's to give ($HISEG_WEIGHTS_DIR)
            warnings.simplefilter("ignore")
            path = Weights.resolve(spec)
        name = spec.lower() if path is not spec else str(Path(spec).expanduser().resolve())
        if Path(path).is_dir():  # an exported model: its manifest holds every file's sha256
            from ..export.manifest import MANIFEST

            path = Path(path) / MANIFEST
        digest = hashlib.sha256()
        with open(path, "rb") as fh:
            for block in iter(lambda: fh.read(1 << 20), b""):
                digest.update(block)
    except OSError:
        return {"checkpoint": spec, "sha256": None}
    return {"checkpoint": name, "sha256": digest.hexdigest()}


def _differences(a: dict, b: dict) -> list:
    """The options in which the option sets ``a`` and ``b`` (:func:`output_options`) differ: the
    model by its file's digest where both have one, else by name; ``min-region-size`` only
    where both cut by ``regions`` (it sizes those cuts only); with one model, the settings that
    default to the model's (:data:`_MODELS_OWN`) by their values (given or the model's own)."""
    def same(k):
        if k == "checkpoint" and a.get("sha256") and b.get("sha256"):
            return a["sha256"] == b["sha256"]
        if k == "min-region-size" and (a.get("regions") is None or b.get("regions") is None):
            return True
        if k in _MODELS_OWN and a.get("models-own") and b.get("models-own") and same("checkpoint"):
            return _effective(a, k) == _effective(b, k)  # one model: its own settings given or not, the same
        return a.get(k) == b.get(k)
    return [k for k in dict.fromkeys([*a, *b]) if k not in ("sha256", "models-own") and not same(k)]


def _shown(opts: dict, keys: list, digest: bool = False) -> str:
    """The options ``keys`` of the option set ``opts`` as a command line gives them
    (``--regions 6``, ``no --html``), joined ("A, B and C"); ``digest``: with the model's
    digest."""
    from ..io import display_path

    def values(v) -> str:  # a setting's value(s) as typed: "0.5 1", "6", "average"
        return " ".join(f"{x:g}" if isinstance(x, float) else str(x) for x in (v if isinstance(v, list) else [v]))

    def one(k):
        v = opts.get(k)
        if k == "checkpoint":
            sha = opts.get("sha256")
            return "--classical" if v == "classical" else \
                f"--checkpoint {display_path(v)}" + (f" (sha256 {sha[:12]})" if digest and sha else "")
        if k == "flip" and v is not None:
            return "--flip" if v else "--no-flip"
        if v is None or v is False:
            name = "flip/--no-flip" if k == "flip" else k
            if k not in _MODELS_OWN:
                return f"no --{name}"
            own = _effective(opts, k) if v is None else None
            if own is None:
                return f"no --{name} (the model's)"
            return f"no --{name} (the model's: {('--flip' if own else '--no-flip') if k == 'flip' else values(own)})"
        if v is True:
            return f"--{k}"
        return f"--{k} {values(v)}"
    shown = [one(k) for k in keys]
    return shown[0] if len(shown) == 1 else ", ".join(shown[:-1]) + " and " + shown[-1]


class RunRecord:
    """The run record of ``hiseg predict`` in a folder (:data:`RECORD`, JSON): the option sets
    (:func:`output_options`) of the runs that wrote into it, and for each image (its stem) the
    one that made its files; [earlier, later] while an ``--overwrite`` run with other options
    than the earlier files' replaces them (earlier None: not recorded), until it ends (the image
    then holds one or the other's, :meth:`finish`). Read when made: ValueError naming the file
    when it is not such a record; ``found``: whether there was one then."""

    def __init__(self, out):
        from ..io import display_path

        self.path = Path(out) / RECORD
        self.options, self.images, self.text, self.made_folder = [], {}, None, False
        try:
            raw = self.path.read_bytes()
        except FileNotFoundError:
            self.found = False
            return
        self.found = True
        try:
            self.text = raw.decode("ascii")
            data = json.loads(self.text)
            if data.get("format") != _FORMAT:
                raise ValueError(f"format {data.get('format')!r}, expected {_FORMAT!r}")
            self.options, self.images = [dict(o) for o in data["options"]], dict(data["images"])
            n = len(self.options)
            if not all(0 <= i < n for v in self.images.values() for i in (v if isinstance(v, list) else [v])
                       if i is not None):
                raise ValueError("an image refers to no option set")
        except (ValueError, KeyError, TypeError, AttributeError) as e:
            raise ValueError(f"{display_path(self.path)} is not a hiseg predict run record ({e}): remove it, and "
                             "--resume goes on without checking the options of the images there") from None

    def _index(self, options: dict) -> int:
        """The index of the option set ``options`` (added when new)."""
        for i, o in enumerate(self.options):
            if not _differences(o, options):
                return i
        self.options.append(options)
        return len(self.options) - 1

    def check_resume(self, options: dict, present: list, out) -> list:
        """For ``--resume`` with ``options``, over the stems ``present`` (the images with files
        in ``out``): ValueError when one was made with other options (the message names each
        option that differs, with both values), or is between two runs (:class:`RunRecord`);
        else the stems the record does not name (their options cannot be checked)."""
        from ..io import display_path

        unknown, other, between = [], {}, []
        for s in present:
            v = self.images.get(s)
            if v is None:
                unknown.append(s)
            elif isinstance(v, list):
                between.append(s)
            elif _differences(self.options[v], options):
                other.setdefault(v, []).append(s)
        if other:
            i, stems = next(iter(other.items()))
            keys, was = _differences(self.options[i], options), self.options[i]
            digest = was.get("checkpoint") == options.get("checkpoint")
            where = display_path(out) + (" was" if len(stems) == len(present) else
                                         f" holds {len(stems)} image(s), e.g. {display_path(stems[0])}, that were")
            raise ValueError(f"--resume: {where} written with {_shown(was, keys, digest)}, this run asks for "
                             f"{_shown(options, keys, digest)}; rerun with the same options, or --overwrite")
        if between:
            raise ValueError(f"--resume: {len(between)} image(s) in {display_path(out)}, e.g. "
                             f"{display_path(between[0])}, were being replaced by an --overwrite run with other "
                             "options that did not finish: their files may be either run's; rerun with --overwrite")
        return unknown

    def assign(self, options: dict, stems: list, present: set, overwrite: bool) -> None:
        """The images ``stems``, which a run with ``options`` is about to write: theirs; with
        ``overwrite``, those ``present`` (files there) whose files were made with other options
        (or unrecorded ones) are between the two runs until :meth:`finish`."""
        i = self._index(options)
        for s in stems:
            v = self.images.get(s)
            self.images[s] = [v if isinstance(v, int) else None, i] if overwrite and s in present and v != i else i

    def finish(self, stems: list, written: set) -> None:
        """The run that :meth:`assign` ``stems`` ended: those ``written`` hold its files, the
        others (failed: their files untouched) the earlier ones'."""
        for s in stems:
            v = self.images.get(s)
            if isinstance(v, list):
                if s in written or v[0] is not None:
                    self.images[s] = v[1] if s in written else v[0]
                else:
                    del self.images[s]

    def save(self) -> None:
        """Write the record (atomically: :func:`hiseg.io.atomic_write`) when it changed; the
        option sets no image refers to are left out."""
        from ..io import atomic_write, remove_stray_temps

        used = sorted({i for v in self.images.values() for i in (v if isinstance(v, list) else [v]) if i is not None})
        new = {old: k for k, old in enumerate(used)}
        self.options = [self.options[i] for i in used]
        self.images = {s: [None if i is None else new[i] for i in v] if isinstance(v, list) else new[v]
                       for s, v in self.images.items()}
        text = json.dumps({"format": _FORMAT, "options": self.options, "images": self.images}, indent=1) + "\n"
        if text != self.text:
            if not self.path.parent.exists():  # a DDP run's --out (no folder lock made it)
                self.path.parent.mkdir(parents=True)
                self.made_folder = True
            remove_stray_temps(self.path)  # a killed run's
            atomic_write(self.path, lambda tmp: Path(tmp).write_text(text, encoding="ascii"))
            self.text = text

    def discard(self) -> None:
        """Remove the record, and the folder when :meth:`save` made it and it is empty (a run
        that wrote nothing leaves nothing)."""
        self.path.unlink(missing_ok=True)
        if self.made_folder:
            with contextlib.suppress(OSError):
                self.path.parent.rmdir()
