"""The run record of a folder of ``hiseg predict``'s files (:data:`RECORD`): which settings and
which model made each image's files, so that a resumed run (``hiseg predict --resume``,
:func:`~hiseg.segmentation.outputs.predict_file` and
:func:`~hiseg.segmentation.predict_ddp.predict_files` with ``resume=True``) refuses to skip
images made otherwise instead of mixing two runs' files. It is here, below the command line,
so that the library's resume checks the same record the command writes, and the other way round.

An option set is a plain dict keyed by ``hiseg predict``'s option names (the command builds it
from its options: :func:`hiseg.cli.record.output_options`; the library from a Segmenter and the
cut: :func:`call_options`); :class:`RunRecord` keeps one per image."""
from __future__ import annotations

import contextlib
import hashlib
import json
from pathlib import Path

from ..io.files import RECORD

__all__ = ["RECORD", "RunRecord", "call_options", "checkpoint_identity", "models_own", "MODELS_OWN"]

_FORMAT = "hiseg predict run record 1"

#: The pipeline settings that default to the model's own (None in an option set).
MODELS_OWN = ("scales", "flip", "linkage", "max-pixels")

#: How a library call names each option of an option set (the command line names them ``--KEY``).
_CALL_NAMES = {"regions": "n_regions", "level": "threshold", "min-region-size": "min_size",
               "scales": "pipeline.scales", "flip": "pipeline.flip", "linkage": "pipeline.linkage",
               "max-pixels": "pipeline.max_pixels"}


def call_options(seg, n_regions=None, threshold=None, min_size="auto") -> dict:
    """The option set (as :data:`RECORD` holds it) of a library call that writes ``hiseg predict``'s
    files with the Segmenter ``seg`` and this cut: the model as the command names it (a checkpoint
    or shipped model by its file's digest, :func:`checkpoint_identity`; a network given as a module
    by its weights' fingerprint), its pipeline's settings (the four the command can change as
    values; all of them as ``pipeline``, which the command does not record), the cut, no pages."""
    from .merging import network_fingerprint

    if getattr(seg, "checkpoint", None) is not None:  # loaded from a file, a shipped model's name, a folder
        model = checkpoint_identity(seg.checkpoint, getattr(seg, "checkpoint_file", None))
    elif seg.model is None:
        model = {"checkpoint": "classical", "sha256": None}
    else:
        model = {"checkpoint": seg.name, "sha256": None}
    if seg.model is not None:
        model["weights"] = network_fingerprint(seg.model)
    own = models_own(seg.pipeline)
    p = seg.pipeline.to_dict()
    head = p.pop("merge_head", None)  # its weights: by digest
    p["merge_head"] = None if head is None else \
        hashlib.sha256(json.dumps(head, sort_keys=True).encode()).hexdigest()[:16]
    return json.loads(json.dumps({  # as read back from the file (lists, floats)
        **model, **{k: None for k in MODELS_OWN}, "regions": n_regions, "level": threshold,
        "min-region-size": min_size, "html": False, "models-own": own,
        "pipeline": p}))


def models_own(pipeline) -> dict:
    """The values of :data:`MODELS_OWN` that ``pipeline`` (a :class:`~hiseg.segmentation.Pipeline`)
    holds, as an option set records them (``models-own``)."""
    return {"scales": [float(x) for x in pipeline.scales], "flip": bool(pipeline.flip), "linkage": pipeline.linkage,
            "max-pixels": int(pipeline.max_pixels)}


def checkpoint_identity(spec: str, file=None) -> dict:
    """``checkpoint``: a shipped model's name, or the checkpoint file's resolved path; ``sha256``:
    the digest (read in blocks; None when it cannot be read: loading it names why) of its file, or
    of ``file`` (an exported model's folder: its manifest, which holds every file's digest)."""
    import warnings

    from ..models.weights import Weights

    try:
        with warnings.catch_warnings():  # the loader's to give ($HISEG_WEIGHTS_DIR)
            warnings.simplefilter("ignore")
            path = Weights.resolve(spec)
        name = str(spec).lower() if path is not spec else str(Path(spec).expanduser().resolve())
        digest = hashlib.sha256()
        with open(path if file is None else file, "rb") as fh:
            for block in iter(lambda: fh.read(1 << 20), b""):
                digest.update(block)
    except OSError:
        return {"checkpoint": str(spec), "sha256": None}
    return {"checkpoint": name, "sha256": digest.hexdigest()}


def _effective(opts: dict, k: str):
    """Option ``k`` of the option set ``opts``: as given, or the model's own where none was given
    and the set knows it (a record written before it did compares as given)."""
    v = opts.get(k)
    if v is None and k in MODELS_OWN:
        return (opts.get("models-own") or {}).get(k)
    return v


def _differences(a: dict, b: dict) -> list:
    """The options in which the option sets ``a`` and ``b`` differ: the model by its file's digest
    where both have one, else by its weights' fingerprint where both have one (a library call's
    network), else by name; ``min-region-size`` only where both cut by ``regions`` (it sizes those
    cuts only); with one model, the settings that default to the model's (:data:`MODELS_OWN`) by
    their values (given or the model's own); the whole ``pipeline`` only where both hold it."""
    def same(k):
        if k == "checkpoint" and a.get("sha256") and b.get("sha256"):
            return a["sha256"] == b["sha256"]
        if k == "checkpoint" and a.get("weights") and b.get("weights"):
            return a["weights"] == b["weights"]
        if k == "min-region-size" and (a.get("regions") is None or b.get("regions") is None):
            return True
        if k == "pipeline" and (a.get(k) is None or b.get(k) is None):
            return True
        if k in MODELS_OWN and a.get("models-own") and b.get("models-own") and same("checkpoint"):
            return _effective(a, k) == _effective(b, k)  # one model: its own settings given or not, the same
        return a.get(k) == b.get(k)
    return [k for k in dict.fromkeys([*a, *b]) if k not in ("sha256", "weights", "models-own") and not same(k)]


def _shown(opts: dict, keys: list, digest: bool = False, call: bool = False, other: dict = None) -> str:
    """The options ``keys`` of the option set ``opts`` as a command line gives them
    (``--regions 6``, ``no --html``), or with ``call`` as a library call's arguments
    (``n_regions=6``; the pipeline's settings that differ from ``other``'s), joined
    ("A, B and C"); ``digest``: with the model's digest."""
    from ..io import display_path

    if call:
        return _joined([_call_shown(opts, k, digest, other or {}) for k in keys])

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
            if k not in MODELS_OWN:
                return f"no --{name}"
            own = _effective(opts, k) if v is None else None
            if own is None:
                return f"no --{name} (the model's)"
            return f"no --{name} (the model's: {('--flip' if own else '--no-flip') if k == 'flip' else values(own)})"
        if v is True:
            return f"--{k}"
        return f"--{k} {values(v)}"
    return _joined([one(k) for k in keys])


def _joined(shown: list) -> str:
    return shown[0] if len(shown) == 1 else ", ".join(shown[:-1]) + " and " + shown[-1]


def _call_shown(opts: dict, k: str, digest: bool, other: dict) -> str:
    """Option ``k`` of ``opts`` as a library call's argument (:func:`_shown`)."""
    from ..io import display_path

    v = opts.get(k)
    if k == "checkpoint":
        sha, weights = opts.get("sha256"), opts.get("weights")
        mark = f" (sha256 {sha[:12]})" if sha else f" (weights {weights})" if weights else ""
        return "the classical path" if v == "classical" else f"model {display_path(v)}" + (mark if digest else "")
    if k == "html":
        return "pages (hiseg predict --html)" if v else "no pages"
    if k == "pipeline":
        theirs = other.get("pipeline") or {}
        return ", ".join([f"pipeline.{f}={v.get(f)!r}" for f in v if v.get(f) != theirs.get(f)] or ["its pipeline"])
    if k in MODELS_OWN:
        v = _effective(opts, k)
        if v is None:
            return f"the model's {_CALL_NAMES[k]}"
    return f"{_CALL_NAMES.get(k, k)}={v!r}"


#: The largest run record read (about 40 bytes an image: a million images' record is under 64 MiB).
MAX_RECORD_BYTES = 64 << 20


def _read_record(path: Path) -> bytes:
    """The bytes of the run record ``path``, read only when it is a regular file of at most
    :data:`MAX_RECORD_BYTES` (``os.stat`` first: a link to ``/dev/zero`` or a FIFO is never
    opened); ValueError naming it otherwise, FileNotFoundError when there is none."""
    import os
    import stat

    from ..io import display_path

    st = os.stat(path)
    what = f"{display_path(path)} is not a hiseg predict run record"
    if not stat.S_ISREG(st.st_mode):
        raise ValueError(f"{what} (not a regular file: a folder, FIFO or device); remove it, and --resume goes on "
                         "without checking the options of the images there")
    with open(path, "rb") as fh:
        raw = fh.read(MAX_RECORD_BYTES + 1)
    if len(raw) > MAX_RECORD_BYTES:
        raise ValueError(f"{what} (larger than {MAX_RECORD_BYTES >> 20} MiB); remove it, and --resume goes on "
                         "without checking the options of the images there")
    return raw


class RunRecord:
    """The run record of ``hiseg predict`` in a folder (:data:`RECORD`, JSON): the option sets
    (:func:`call_options`, :func:`hiseg.cli.record.output_options`) of the runs that wrote into
    it, and for each image (its stem) the one that made its files; [earlier, later] while an
    ``--overwrite`` run with other options than the earlier files' replaces them (earlier None:
    not recorded), until it ends (the image then holds one or the other's, :meth:`finish`). Read
    when made: ValueError naming the file when it is not such a record; ``found``: whether there
    was one then. Also the library's (:func:`~hiseg.segmentation.outputs.predict_file`)."""

    def __init__(self, out):
        from ..io import display_path

        self.path = Path(out) / RECORD
        self.options, self.images, self.text, self.made_folder = [], {}, None, False
        try:
            raw = _read_record(self.path)
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

    def entry(self, stem: str):
        """Image ``stem``'s entry by option set: None, an option set, or [earlier, later] (what
        :meth:`put_entry` puts back; the indices change when :meth:`save` renumbers them)."""
        v = self.images.get(stem)
        return [None if i is None else self.options[i] for i in v] if isinstance(v, list) else \
            None if v is None else self.options[v]

    def put_entry(self, stem: str, entry) -> None:
        """Set image ``stem``'s entry back to ``entry`` (:meth:`entry`)."""
        if entry is None:
            self.images.pop(stem, None)
        else:
            self.images[stem] = [None if o is None else self._index(o) for o in entry] if isinstance(entry, list) \
                else self._index(entry)

    def check_resume(self, options: dict, present: list, out, call: str = None) -> list:
        """For ``--resume`` with ``options``, over the stems ``present`` (the images with files
        in ``out``): ValueError when one was made with other options (the message names each
        option that differs, with both values), or is between two runs (:class:`RunRecord`);
        else the stems the record does not name (their options cannot be checked). ``call``:
        the library function resuming (the message names its arguments), else ``hiseg predict``."""
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
            if call:
                raise ValueError(f"{call}(resume=True): {where} written with "
                                 f"{_shown(was, keys, digest, True, options)}, this call asks for "
                                 f"{_shown(options, keys, digest, True, was)}; call it with the same settings, "
                                 "or with resume=False to do them again")
            raise ValueError(f"--resume: {where} written with {_shown(was, keys, digest)}, this run asks for "
                             f"{_shown(options, keys, digest)}; rerun with the same options, or --overwrite")
        if between:
            again = "call it with resume=False" if call else "rerun with --overwrite"
            raise ValueError(f"{call + '(resume=True)' if call else '--resume'}: {len(between)} image(s) in "
                             f"{display_path(out)}, e.g. {display_path(between[0])}, were being replaced by "
                             f"{'a run' if call else 'an --overwrite run'} with other options that did not finish: "
                             f"their files may be either run's; {again}")
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

    def save(self, clean: bool = True) -> None:
        """Write the record (atomically: :func:`hiseg.io.atomic_write`) when it changed; the
        option sets no image refers to are left out. ``clean``: first remove the temporary files
        of a killed write (not while another process may be writing it: its live one would go)."""
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
            if clean:
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
