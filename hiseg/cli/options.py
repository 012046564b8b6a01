"""The options the ``hiseg`` subcommands share, each defined once (see :mod:`hiseg.cli` for
the rules), and the steps every image command takes: collect the inputs, choose the worker
count, build the segmenter and name it, report the images that failed.

Importing this module costs no torch: the segmenter's modules are imported when one is built.
"""
from __future__ import annotations

import argparse
import contextlib
import os
import sys
from pathlib import Path
from typing import Sequence

from .._lifetime import first_process
from .._shipped import BACKENDS

__all__ = ["option_type", "at_least_one", "add_inputs", "add_out", "add_pixel_limit", "pixel_limit_of", "add_workers",
           "add_quiet", "add_overwrite", "add_model", "add_deprecated", "image_command", "add_regions", "add_level",
           "add_min_region_size", "EXIT_STATUS", "collect_images", "default_workers", "resolve_workers", "make_segmenter",
           "exported_folder", "external_source", "model_name", "model_backend", "announce",
           "first_process", "PER_FILE_ERRORS", "per_file", "report_failures"]

#: The epilog of the image commands (predict, view).
EXIT_STATUS = ("Exit status: 0 when every image was written; 1 when some images failed (unreadable, ...): the "
               "others are written and the failures listed at the end; 2 when nothing ran (a bad option, input "
               "or checkpoint, or output files that exist already, without --overwrite).")


def default_text(value) -> str:
    """The one way a default is shown in ``--help``: `` (default: VALUE)``."""
    return f" (default: {value})"


def _argument_error(e: Exception, text: str) -> argparse.ArgumentTypeError:
    return argparse.ArgumentTypeError(str(e) if "got" in str(e) else f"{e}, got {text!r}")


def option_type(convert, check=None):
    """An argparse ``type``: ``convert(text)`` then ``check(value)``; their ValueError becomes
    argparse's error, which names the option ("argument --tile: ..."); text that ``int`` or
    ``float`` cannot read is "expected an integer / a number, got 'TEXT'" (not int()'s wording)."""
    expected = {"int": "an integer", "float": "a number"}.get(getattr(convert, "__name__", ""))

    def parse(text):
        try:
            v = convert(text)
        except (ValueError, TypeError) as e:
            raise _argument_error(ValueError(f"expected {expected}") if expected else e, text) from None
        try:
            if check is not None:
                check(v)
        except (ValueError, TypeError) as e:
            raise _argument_error(e, text) from None
        return v
    parse.__name__ = getattr(convert, "__name__", "value")
    return parse


def at_least_one(v: int) -> None:
    if v < 1:
        raise ValueError("must be an integer >= 1")


# ----------------------------------------------------------------------------- the shared options
def image_command(p: argparse.ArgumentParser, description: str, out: str) -> None:
    """What the image commands (predict, view) open with: the description, the exit statuses,
    the positional inputs and ``-o/--out``."""
    p.description = description
    p.epilog = EXIT_STATUS
    add_inputs(p)
    add_out(p, out)
    add_pixel_limit(p)


def _at_least_zero_pixels(v: int) -> None:
    if v < 0:
        raise ValueError("must be an integer >= 0 (0: no limit)")


def add_pixel_limit(p: argparse.ArgumentParser) -> None:
    """``--pixel-limit N``: the most pixels an input image may declare (:data:`hiseg.io.PIXEL_LIMIT`,
    checked from its header before decoding; sets ``HISEG_PIXEL_LIMIT`` for the run and its workers)."""
    from ..io.images import PIXEL_LIMIT, PIXEL_LIMIT_ENV

    p.add_argument("--pixel-limit", type=option_type(int, _at_least_zero_pixels), default=None, metavar="N",
                   help="an image file declaring more than N pixels (height x width, read from its header before "
                        "decoding), or a ucm2 of `hiseg view --ucm` more than N values, is refused, the others "
                        "processed; 0: no limit"
                        + default_text(f"${PIXEL_LIMIT_ENV}, else {PIXEL_LIMIT}"))


@contextlib.contextmanager
def pixel_limit_of(args):
    """Inside the block, ``--pixel-limit`` is the limit of this process and of the workers it
    starts (``HISEG_PIXEL_LIMIT``, restored after); ValueError for a bad ``HISEG_PIXEL_LIMIT``
    (before anything runs)."""
    from ..io.images import PIXEL_LIMIT_ENV, pixel_limit

    given, was = getattr(args, "pixel_limit", None), os.environ.get(PIXEL_LIMIT_ENV)
    if given is None:
        pixel_limit()
        yield
        return
    os.environ[PIXEL_LIMIT_ENV] = str(given)
    try:
        yield
    finally:
        if was is None:
            os.environ.pop(PIXEL_LIMIT_ENV, None)
        else:
            os.environ[PIXEL_LIMIT_ENV] = was


def add_inputs(p: argparse.ArgumentParser, what: str = "images or folders of images") -> None:
    """The positional inputs (``INPUT ...``)."""
    p.add_argument("inputs", nargs="+", metavar="INPUT", help=what)


def add_out(p: argparse.ArgumentParser, what: str, required: bool = True) -> None:
    """``-o/--out DIR``: the folder the command writes into."""
    p.add_argument("-o", "--out", required=required, metavar="DIR", type=Path,
                   help=what + ("" if required else default_text("write nothing, print only")))


def default_workers() -> int:
    """The CPUs this process may use, at most 8: what ``--workers auto`` means."""
    n = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    return max(1, min(8, n))


def _workers(text: str):
    if text == "auto":
        return text
    try:
        v = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected 'auto' or an integer >= 0, got {text!r}") from None
    if v < 0:
        raise argparse.ArgumentTypeError(f"must be 'auto' or an integer >= 0 (0 or 1: no worker processes), got {v}")
    return v


def add_workers(p: argparse.ArgumentParser, what: str, min_items: int) -> None:
    """``--workers N``: processes working on the images in parallel (``auto``: :func:`resolve_workers`
    with ``min_items``)."""
    p.add_argument("--workers", type=_workers, default="auto", metavar="N",
                   help=f"{what}; 0 or 1: none, all in this process; auto: one per usable CPU, at most 8 (here: "
                        f"{default_workers()}), none for fewer than {min_items} images; the results are the same "
                        "either way" + default_text("auto"))


def resolve_workers(value, n_items: int, min_items: int) -> int:
    """The worker processes of ``--workers value`` for ``n_items`` images: ``auto`` is
    :func:`default_workers` (1, i.e. none, below ``min_items`` images); never more than the images."""
    if value == "auto":
        value = default_workers() if n_items >= min_items else 1
    return max(1, min(int(value), n_items))


def add_quiet(p: argparse.ArgumentParser, what: str = "no progress bar and no line naming the model") -> None:
    p.add_argument("-q", "--quiet", action="store_true",
                   help=f"{what}; warnings, errors and the closing line stay")


class _Deprecated(argparse.Action):
    """A former spelling of an option: sets the option's ``dest`` as the option would, with a
    one-line deprecation note on stderr naming the spelling to write instead."""

    def __init__(self, option_strings, dest, instead: str = "", why: str = "", **kwargs):
        super().__init__(option_strings, dest, **kwargs)
        self.instead, self.why = instead, why

    def __call__(self, parser, namespace, values, option_string=None):
        print(f"{parser.prog}: warning: {option_string} is deprecated: write {self.instead}"
              + (f" ({self.why})" if self.why else ""), file=sys.stderr)
        setattr(namespace, self.dest, values)


def add_deprecated(p: argparse.ArgumentParser, flag: str, dest: str, instead: str, why: str = "", **kwargs) -> None:
    """Keep ``flag``, a former spelling of ``instead``, working (hidden from ``--help``), with a
    deprecation note when used (:class:`_Deprecated`)."""
    p.add_argument(flag, dest=dest, action=_Deprecated, instead=instead, why=why, help=argparse.SUPPRESS, **kwargs)


def add_overwrite(p: argparse.ArgumentParser, what: str) -> None:
    p.add_argument("--overwrite", action="store_true",
                   help=f"replace existing {what} in --out (without it, the command refuses before "
                        "writing anything, naming them)")


def _names() -> list[str]:
    from .._shipped import SHIPPED_NAMES  # torch-free: the help imports no torch

    return list(SHIPPED_NAMES)


def default_model() -> str:
    from .._shipped import DEFAULT_PRETRAINED

    return DEFAULT_PRETRAINED


def _check_max_pixels(v):
    from ..segmentation.pipeline import Pipeline

    Pipeline(max_pixels=v)  # the one rule: 0 or >= 4096


def add_model(p: argparse.ArgumentParser, when: str = "") -> None:
    """``--checkpoint``, ``--classical``, ``--device``, ``--max-pixels``: which hierarchy
    maker runs, where, at which resolution."""
    p.add_argument("--checkpoint", default=None, metavar="CKPT",
                   help=f"{when}a trained checkpoint (.ckpt), a shipped model's name ({', '.join(_names())}) or a "
                        "folder written by `hiseg export` (onnxruntime, no torch); "
                        "'none': the classical path (--classical)" + default_text(default_model()))
    add_deprecated(p, "-c", "checkpoint", "--checkpoint", "-c is --config in hiseg train", metavar="CKPT")
    p.add_argument("--classical", action="store_true",
                   help=f"{when}the classical path, the no-network baseline: colour gradient, colour-watershed "
                        "superpixels, closest ultrametric fit (same as --checkpoint none)")
    p.add_argument("--backend", type=str.lower, choices=BACKENDS, default="auto",
                   help="what runs the network: onnxruntime (exported models; the shipped ones ship exported: the "
                        "fastest on a CPU, no torch), torch (any checkpoint, any device: the training's maps "
                        "exactly), auto: onnxruntime for an exported folder or a shipped model on the CPU when "
                        "onnxruntime is installed, else torch" + default_text("auto"))
    p.add_argument("--device", default="auto", metavar="DEVICE",
                   help="torch device of the network: auto (CUDA when present, else the CPU), cpu, cuda, cuda:1, mps "
                        "(onnxruntime: the CPU)" + default_text("auto"))
    p.add_argument("--max-pixels", type=option_type(int, _check_max_pixels), default=None, metavar="N",
                   help="working resolution: larger images are processed at N pixels (>= 4096) and their outputs "
                        "drawn back at full size; 0: no limit" + default_text("the checkpoint's pipeline, 500000"))


def add_regions(p: argparse.ArgumentParser, what: str) -> None:
    p.add_argument("--regions", type=option_type(int, at_least_one), default=None, metavar="K", help=what)


def _level(text: str) -> float:
    try:
        v = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number in [0, 1], got {text!r}") from None
    if not 0.0 <= v <= 1.0:  # also refuses nan
        raise argparse.ArgumentTypeError(f"must be in [0, 1] (the saliency map's range), got {text!r}")
    return v


def add_level(p: argparse.ArgumentParser, what: str) -> None:
    """``--level T``: a level of the saliency map, in [0, 1] (``SegmentationResult.cut(threshold=T)``)."""
    p.add_argument("--level", type=_level, default=None, metavar="T", help=what)


def _min_size(text: str):
    from ..core.cuts import resolve_min_size

    try:
        v = text if text == "auto" else float(text)
        resolve_min_size(v, 1, 1)  # the one check of the setting
    except ValueError as e:
        raise argparse.ArgumentTypeError(f"expected 'auto' or a number >= 0, got {text!r} ({e})") from None
    return v


def add_min_region_size(p: argparse.ArgumentParser) -> None:
    from ..core.cuts import AUTO_MIN_REGION_FRACTION

    p.add_argument("--min-region-size", type=_min_size, default="auto", metavar="SIZE",
                   help="with --regions: no region smaller than SIZE pixels (>= 1), SIZE of the image "
                        f"(< 1), or 'auto' ({AUTO_MIN_REGION_FRACTION:g}/K of the image); 0 for the plain "
                        "cut. When the hierarchy has fewer than K regions of SIZE, SIZE is halved until it has "
                        "them, with a warning" + default_text("auto"))


# ----------------------------------------------------------------------------- the steps they share
def _loop(p: Path) -> bool:
    """Whether ``p`` is a symbolic link that never resolves (a loop: ELOOP)."""
    import errno

    try:
        os.stat(p)
    except OSError as e:
        return e.errno == errno.ELOOP
    return False


def _key(f: Path):
    """What makes two inputs one file: the file they resolve to."""
    try:
        return f.resolve()
    except (OSError, RuntimeError):  # pragma: no cover - a loop: checked before
        return f.absolute()


#: The image files ``hiseg predict`` writes for image NAME (``NAME`` + these): in a folder that is
#: also ``--out``, they are its outputs, not inputs.
OUTPUT_SUFFIXES = ("_ucm.png", "_ucm16.png", "_labels.png", "_overlay.png")


def _own_outputs(names: list[Path]) -> set[Path]:
    """The files of ``names`` (one folder's) that are :data:`OUTPUT_SUFFIXES` files of another of them."""
    stems = {q.stem for q in names}
    return {q for q in names for suf in OUTPUT_SUFFIXES if q.name.endswith(suf) and q.name[:-len(suf)] in stems}


def archive_layout(path: Path, command: str = "hiseg") -> Path:
    """``path``, or where a missing BSDS500 path (``datasets/BSDS500/images/val``) lies in the
    official archive's layout (``datasets/BSDS500/data/images/val``, :func:`hiseg.io.bsds_archive_path`),
    said in one line on stderr: ``datasets/README.md`` accepts both layouts."""
    from ..io import bsds_archive_path, display_path

    twin = bsds_archive_path(path)
    if twin is None:
        return path
    print(f"{command}: {display_path(path)} not found: reading {display_path(twin)} (the BSDS500 archive's "
          "layout, datasets/README.md)", file=sys.stderr)
    return twin


def collect_images(inputs: Sequence[str], command: str = "hiseg", out=None) -> list[Path]:
    """The image files of ``inputs`` (files and folders), each once: a file given twice, or
    a file and its folder, is one input. FileNotFoundError for a missing input or a folder
    without images; ValueError when two files would share an output name or an input is a
    symbolic link loop. An entry of a folder that is a symbolic link loop is skipped, with a
    warning on stderr naming it (``command: warning: ...``). A folder that is also ``out``
    (the command's output folder) gives its images, not the outputs written there for them
    (:data:`OUTPUT_SUFFIXES`), so that a run into its input folder can be resumed."""
    from ..io import IMAGE_EXTENSIONS, display_path

    files = []
    for x in inputs:
        p = archive_layout(Path(x), command)
        if _loop(p):
            raise ValueError(f"input {display_path(p)} is a symbolic link loop (it never reaches a file)")
        if p.is_dir():
            found = []
            entries = sorted(q for q in p.iterdir() if q.suffix.lower() in IMAGE_EXTENSIONS)
            if out is not None and Path(out).is_dir() and os.path.samefile(p, out):
                theirs = _own_outputs(entries)
                entries = [q for q in entries if q not in theirs]
            for q in entries:
                if _loop(q):
                    print(f"{command}: warning: {display_path(q)} is a symbolic link loop (it never reaches a "
                          "file): skipped", file=sys.stderr)
                else:
                    found.append(q)
            if not found:
                raise FileNotFoundError(f"no image files ({', '.join(IMAGE_EXTENSIONS)}) in folder {p}")
            files.extend(found)
        elif p.exists():  # a file; one that is not a regular file (a FIFO) is refused when read, naming it
            files.append(p)
        else:
            raise FileNotFoundError(f"input not found: {p}")
    seen = set()
    files = [f for f in files if not (_key(f) in seen or seen.add(_key(f)))]
    stems = [f.stem for f in files]
    dup = sorted({s for s in stems if stems.count(s) > 1})
    if dup:
        raise ValueError(f"several inputs share the output name(s) {dup[:5]}: rename them or predict separately")
    return files


def _classical(args) -> bool:
    spec = getattr(args, "checkpoint", None)
    none = spec is not None and str(spec).lower() == "none"
    if getattr(args, "classical", False) and spec is not None and not none:
        raise ValueError("give --classical (no network) or --checkpoint (a network), not both")
    return none or getattr(args, "classical", False)


def external_source(args):
    """``("boundaries" | "masks", DIR)`` when ``--boundaries`` or ``--masks`` give another
    segmenter's outputs instead of a model, else None; ValueError when a model is given too."""
    given = [(k, getattr(args, k, None)) for k in ("boundaries", "masks") if getattr(args, k, None) is not None]
    if not given:
        return None
    if len(given) > 1:
        raise ValueError("give --boundaries or --masks, not both")
    kind = given[0][0]
    model = [o for o, v in (("--checkpoint", getattr(args, "checkpoint", None)),
                            ("--classical", getattr(args, "classical", False) or None),
                            ("--scales", getattr(args, "scales", None)), ("--flip", getattr(args, "flip", None)))
             if v is not None]
    if getattr(args, "backend", "auto") != "auto":
        model.append("--backend")
    if kind == "masks" and getattr(args, "linkage", None) is not None:
        model.append("--linkage")
    if model:
        raise ValueError(f"--{kind} gives the {'boundary maps' if kind == 'boundaries' else 'masks'} of another "
                         f"segmenter: no model runs, so {' and '.join(model)} do(es) not apply")
    return given[0]


def model_name(args) -> str:
    """What ``--checkpoint`` / ``--classical`` / ``--boundaries`` / ``--masks`` select, as the
    model line and the pages name it: a shipped model's registered name, a checkpoint's path,
    ``classical``, or ``boundaries:DIR`` / ``masks:DIR``."""
    ext = external_source(args)
    if ext is not None:
        return f"{ext[0]}:{Path(ext[1]).resolve()}"
    if _classical(args):
        return "classical"
    return str(args.checkpoint) if args.checkpoint is not None else default_model()


def exported_folder(args):
    """``--checkpoint`` when it names a folder (a model written by ``hiseg export``), else None."""
    spec = getattr(args, "checkpoint", None)
    return Path(spec) if spec is not None and Path(spec).is_dir() else None


def model_backend(args) -> tuple:
    """(backend, exported folder or None) that ``--checkpoint``, ``--classical``, ``--backend``,
    ``--device``, ``--scales`` and ``--flip`` select, without loading anything (the run record names
    the model by it before the model is built): ``"classical"``, ``"torch"`` or ``"onnxruntime"``."""
    from ..segmentation.backends import choose_backend

    if external_source(args) is not None:
        return "external", None
    if _classical(args):
        return "classical", None
    backend = getattr(args, "backend", "auto")
    if backend == "auto" and (getattr(args, "scales", None) is not None or getattr(args, "flip", None) is not None) \
            and exported_folder(args) is None:
        backend = "torch"  # a shipped model's exported network holds its scales and flip
    try:
        return choose_backend(model_name(args), backend, args.device)
    except ValueError as e:
        raise ValueError(str(e).replace("backend ", "--backend ", 1) if str(e).startswith("backend ")
                         else str(e)) from None


def make_segmenter(args):
    """The Segmenter of ``--checkpoint`` (a shipped model's name, a checkpoint file or a folder
    written by ``hiseg export``; none: the shipped default model; ``--classical``: no network) on
    ``--backend`` and ``--device``, its pipeline overridden by ``--scales``/``--flip``/``--linkage``/
    ``--max-pixels``. ``--scales`` or ``--flip`` run a shipped model on torch under ``--backend
    auto`` (its exported network holds its own). Raises ValueError (a bad device or backend, a
    network option on the classical path), FileNotFoundError, CheckpointError, ExportError."""
    from ..segmentation.segmenter import Segmenter

    scales, flip, linkage = getattr(args, "scales", None), getattr(args, "flip", None), getattr(args, "linkage", None)
    backend = getattr(args, "backend", "auto")
    device = args.device
    if str(device).strip().lower() not in ("auto", "cpu"):
        from ..segmentation.backends import resolve_device

        device = resolve_device(device, "--device")  # before any checkpoint is read; a GPU means torch
    ext = external_source(args)
    if ext is not None:  # another segmenter's maps or masks: the chain's pipeline, no network
        from ..segmentation.external import ExternalFiles
        from ..segmentation.pipeline import Pipeline

        seg = Segmenter.from_backend(ExternalFiles(ext[1], ext[0]), Pipeline(), name=model_name(args))
    elif _classical(args):
        given = [o for o, v in (("--scales", scales), ("--no-flip" if flip is False else "--flip", flip),
                                ("--linkage", linkage)) if v is not None]
        if given:
            raise ValueError(f"{' and '.join(given)} set(s) the network's pipeline; --classical (the no-network "
                             "baseline: colour gradient, closest fit) has none")
        if backend == "onnxruntime":
            raise ValueError("--classical has no network for --backend onnxruntime to run")
        seg = Segmenter.classical(device=device)
    else:
        seg = Segmenter(model_name(args), device=device, backend=model_backend(args)[0])
    seg.pipeline = seg.pipeline.with_overrides(scales=scales, flip=flip, linkage=linkage, max_pixels=args.max_pixels)
    return seg


def announce(command: str, seg, args) -> None:
    """The one line naming the model and the device (unless ``--quiet``)."""
    if getattr(args, "quiet", False) or not first_process():
        return  # quiet, or not the first process of a DDP run
    if seg.backend.name == "classical":
        what = "the classical path (no network)"
    elif seg.backend.name in ("boundaries", "masks"):
        what = (f"the boundary maps of {seg.backend.folder} (another detector's), through the chain"
                if seg.backend.name == "boundaries" else f"the masks of {seg.backend.folder}")
    else:
        what = (f"model {seg.name}" + (" (the shipped default; --classical: the no-network baseline)"
                                       if args.checkpoint is None else "") + f", {seg.backend.name}")
    print(f"{command}: {what} on {seg.device}", flush=True)


#: Errors that stop one image of a command, not the command: an unreadable or corrupt image,
#: a UCM of another shape, a cut too large for its file, ... (reported at the end).
PER_FILE_ERRORS = (ValueError, FileNotFoundError)


def per_file(failures: list, name, fn, *args):
    """``fn(*args)``, or None with ``(name, message)`` added to ``failures`` on a
    :data:`PER_FILE_ERRORS`: a folder's other images go on."""
    try:
        return fn(*args)
    except PER_FILE_ERRORS as e:
        failures.append((str(name), str(e)))
        return None


def report_failures(command: str, failures: list, total: int) -> int:
    """Print the images that failed (after the others were written); the exit status (1 or 0)."""
    if not failures:
        return 0
    done = total - len(failures)
    print(f"{command}: error: {len(failures)} of {total} image(s) failed; "
          + (f"the other {done} were written:" if done else "nothing was written:"), file=sys.stderr)
    from ..io import display_path

    for name, msg in failures:
        print(f"  {display_path(name)}: {msg}", file=sys.stderr)
    return 1
