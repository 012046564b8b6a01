"""The ``hiseg`` command: ``hiseg predict`` (saliency maps and cuts), ``hiseg view`` (explorer pages) and ``hiseg evaluate`` (BSDS benchmark)."""
from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Optional, Sequence

from .cuts import AUTO_MIN_REGION_FRACTION
from .inference import MIN_TILE, check_tile
from .io import IMAGE_EXTENSIONS
from .view import add_segmenter_arguments, option_type


def _collect_images(inputs: Sequence[str]) -> list[Path]:
    """The image files of ``inputs`` (files and folders), each once: a file given twice, or
    a file and its folder, is one input. ValueError when two files would share an output name."""
    files, seen = [], set()
    for x in inputs:
        p = Path(x)
        if p.is_dir():
            found = sorted(q for q in p.iterdir() if q.suffix.lower() in IMAGE_EXTENSIONS)
            if not found:
                raise FileNotFoundError(f"no image files ({', '.join(IMAGE_EXTENSIONS)}) in folder {p}")
            files.extend(found)
        elif p.is_file():
            files.append(p)
        else:
            raise FileNotFoundError(f"input not found: {p}")
    files = [f for f in files if not (f.resolve() in seen or seen.add(f.resolve()))]
    stems = [f.stem for f in files]
    dup = sorted({s for s in stems if stems.count(s) > 1})
    if dup:
        raise ValueError(f"several inputs share the output name(s) {dup[:5]}: rename them or predict separately")
    return files


def _at_least_one(v: int) -> None:
    if v < 1:
        raise ValueError("must be an integer >= 1")


def default_workers() -> int:
    """The CPUs this process may use, at most 8: the ``--workers`` value worth trying on a
    folder of many images (named in ``--help``; the default is 1, one process)."""
    import os

    n = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    return max(1, min(8, n))


def _workers(v: int) -> None:
    if v < 0:
        raise ValueError("must be an integer >= 0 (0 or 1: no worker processes)")


def _scale(v: float) -> None:
    if not 0.1 <= v <= 4:  # also refuses nan
        raise ValueError("each scale must be in [0.1, 4] (Pipeline.scales)")


def _threshold(text: str) -> float:
    try:
        v = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number in [0, 1], got {text!r}") from None
    if not 0.0 <= v <= 1.0:  # also refuses nan
        raise argparse.ArgumentTypeError(f"must be in [0, 1] (the UCM's range), got {text!r}")
    return v


def _min_size(text: str):
    from .segmentation.saliency import resolve_min_size

    try:
        v = text if text == "auto" else float(text)
        resolve_min_size(v, 1, 1)  # the one check of the setting
    except ValueError as e:
        raise argparse.ArgumentTypeError(f"expected 'auto' or a number >= 0, got {text!r} ({e})") from None
    return v


def add_predict_arguments(p: argparse.ArgumentParser):
    p.description = ("Segment images into hierarchies: write each image's saliency map (ultrametric "
                     "contour map) as 8- and 16-bit PNGs, its BSDS ucm2 .mat file and, with --regions "
                     "or --threshold, a label image and a coloured overlay, into --out.")
    p.add_argument("inputs", nargs="+", help="images or folders of images")
    p.add_argument("--checkpoint", "-c", default=None,
                   help="trained checkpoint (.ckpt) or a shipped model's name (bsds500, bsds500_merge, bsds500_ensemble); without it, "
                        "the classical colour-gradient + ultrametric-fitting path")
    p.add_argument("--out", "-o", required=True, help="output folder")
    p.add_argument("--regions", type=option_type(int, _at_least_one), default=None, metavar="K",
                   help="also write a segmentation with K regions (K >= 1; a hierarchy with fewer regions gives "
                        "its finest cut, with a warning)")
    p.add_argument("--threshold", type=_threshold, default=None,
                   help="also write the segmentation at UCM threshold T, in [0, 1]")
    p.add_argument("--min-region-size", type=_min_size, default="auto", metavar="SIZE",
                   help="with --regions: no region smaller than SIZE pixels (>= 1), SIZE of the image "
                        f"(< 1), or 'auto' (default: {AUTO_MIN_REGION_FRACTION:g}/K of the image); 0 for the plain "
                        "cut. When the hierarchy has fewer than K regions of SIZE, SIZE is halved until it has "
                        "them, with a warning")
    p.add_argument("--scales", type=option_type(float, _scale), nargs="+", default=None,
                   help="with --checkpoint: multi-scale inference, average the boundary maps at these image scales "
                        "(each in [0.1, 4], e.g. 0.5 1 1.5; about sum(s^2) times the network's cost); default: "
                        "the checkpoint's")
    p.add_argument("--flip", action=argparse.BooleanOptionalAction, default=None,
                   help="with --checkpoint: also average each scale's map with the map of the mirrored image "
                        "(about twice the network's cost); default: the checkpoint's")
    p.add_argument("--linkage", choices=("average", "single"), default=None,
                   help="with --checkpoint: hierarchy of the region adjacency graph; default: the checkpoint's")
    p.add_argument("--tile", type=option_type(int, lambda v: check_tile(v, "TILE")), default=512,
                   help=f"the network runs in tiles of TILE x TILE pixels (bounded memory; >= {MIN_TILE}, or 0: "
                        "one pass) (default: %(default)s)")
    add_segmenter_arguments(p, "files (NAME_ucm.png, NAME.mat, ...)")
    p.add_argument("--workers", type=option_type(int, _workers), default=1, metavar="N",
                   help="worker processes for what runs on the CPU per image (decoding, superpixels, hierarchy, "
                        "writing), overlapped with the network in the main process; 0 or 1: all in this process; "
                        "the files are the same either way. Each worker starts in a few seconds: worth it for "
                        f"folders of many images on free cores (here: {default_workers()} CPUs) "
                        "(default: %(default)s)")
    p.add_argument("--no-progress", action="store_true", help="do not show a progress bar")
    p.add_argument("--html", action="store_true",
                   help="also write NAME.html, an interactive explorer of the hierarchy (self-contained: "
                        "no server or network), and index.html of thumbnails for several images")


def run_predict(args) -> int:
    from tqdm import tqdm

    from . import view
    from .inference import output_paths
    from .io import refuse_overwrite

    if args.regions is not None and args.threshold is not None:
        raise ValueError("give at most one of --regions and --threshold")
    files = _collect_images(args.inputs)
    out = Path(args.out)
    outputs = [p for f in files for p in output_paths(out, f.stem).values()]
    if args.html:
        outputs += view.page_outputs(out, [f.stem for f in files]).values()
    # before anything is written (or loaded): no input, and no existing file without --overwrite, is replaced
    refuse_overwrite(outputs, files, overwrite=args.overwrite, command="hiseg predict")
    seg = make_segmenter(args)
    opts = {"out": out, "tile": args.tile, "regions": args.regions, "threshold": args.threshold,
            "min_size": args.min_region_size, "html": args.html, "source": view.source_of(args),
            "start": view.start_of(args.regions, args.threshold)}
    failures, pages = [], []
    bar = tqdm(total=len(files), desc="hiseg predict", unit="img", disable=args.no_progress or len(files) < 2)

    def done(f, result):
        """Report one image's outcome (in input order): its warnings, its page."""
        if result is None:
            return
        page, caught = result
        for msg in caught:
            print(f"hiseg predict: warning: {f.name}: {msg}", file=sys.stderr)
        if args.html:
            pages.append(page)

    workers = min(args.workers, len(files))
    with bar:
        if workers <= 1:
            for f in files:
                done(f, view.per_file(failures, f, _predict_one, seg, f, opts))
                bar.update()
        else:
            _predict_pool(seg, files, opts, workers, failures, done, bar.update)
    if len(pages) > 1:
        view.write_index_file(out, pages)
    if len(files) > len(failures):
        print(f"wrote {len(files) - len(failures)} image(s) to {out}")
    return view.report_failures("hiseg predict", failures, len(files))


def _predict_one(seg, f: Path, opts: dict, pmap=None):
    """:func:`hiseg.inference.predict_file` of image ``f`` (``pmap``: its boundary map, computed
    there when None), plus its page with --html; (page index entry or True, the warnings'
    messages). The one code of ``hiseg predict``'s images, in the main process or a worker."""
    from . import view
    from .inference import predict_file

    img, res, caught = predict_file(seg, f, opts["out"], opts["tile"], opts["regions"], opts["threshold"],
                                    opts["min_size"], boundary=pmap)
    page = view.write_page_file(opts["out"], f.stem, img, res.ucm2, opts["source"], opts["start"]) if opts["html"] else True
    return page, caught


# ----------------------------------------------------------------------------- worker processes
_WORKER: dict = {}


def _worker_init(seg, opts):
    """A worker's state: the Segmenter (its pipeline) and the options; one thread each (the
    workers are the parallelism)."""
    import cv2
    import torch

    torch.set_num_threads(1)
    cv2.setNumThreads(1)
    _WORKER.update(seg=seg, opts=opts)


def _in_worker(step, f: Path, *rest):
    """``step`` of image ``f`` in a worker, its outcome as plain data (any exception comes
    back as its class name and message, with the worker's traceback, whatever its pickling):
    ("ok", value), ("fail", message) for the errors that stop one image
    (:data:`hiseg.view.PER_FILE_ERRORS`), ("error", class name, message)."""
    import traceback

    from .view import PER_FILE_ERRORS

    try:
        if step == "decode":
            from .io import read_image

            return "ok", _WORKER["seg"].working_image(read_image(f))
        return "ok", _predict_one(_WORKER["seg"], f, _WORKER["opts"], *rest)
    except PER_FILE_ERRORS as e:
        return "fail", str(e)
    except Exception as e:  # noqa: BLE001 -- reported in the main process, naming the image
        kind = "OSError" if isinstance(e, OSError) else type(e).__name__
        return "error", kind, f"{e}\n(in worker process:\n{traceback.format_exc().rstrip()})" if kind != "OSError" else str(e)


def _outcome(f: Path, fut, failures: list):
    """The value of a worker's step on ``f``, or None (``failures`` gets the image's
    per-image error); an error that stops the run is raised naming the image."""
    from concurrent.futures.process import BrokenProcessPool

    try:
        res = fut.result()
    except BrokenProcessPool:
        raise RuntimeError(f"a worker process died (killed? out of memory?) while processing {f} or an image "
                           "beside it; rerun with --workers 1 to see its error") from None
    if res[0] == "ok":
        return res[1]
    if res[0] == "fail":
        failures.append((str(f), res[1]))
        return None
    if res[1] == "OSError":
        raise OSError(f"{f}: {res[2]}")
    raise RuntimeError(f"{f}: {res[1]}: {res[2]}")


def _predict_pool(seg, files: list, opts: dict, workers: int, failures: list, done, tick) -> None:
    """``hiseg predict`` with ``workers`` processes: each image is decoded in a worker, its
    network pass runs here (one image at a time: the same pass as in-process, so the same
    bytes), and its superpixels, hierarchy and files are made in a worker, while the network
    goes on with the next images. Outcomes are reported in input order; an error that is not
    an image's own stops the run (the workers' queued images are cancelled)."""
    import multiprocessing as mp
    from collections import deque
    from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait

    from .inference import Segmenter
    from .view import PER_FILE_ERRORS

    # forkserver (Linux) or spawn: never a plain fork of this process, whose OpenCV / OpenMP
    # thread pools may hold a lock at fork time (a forked worker hung in cv2.setNumThreads in CI);
    # the workers import hiseg themselves (a few seconds once), then run one thread each.
    ctx = mp.get_context("forkserver" if "forkserver" in mp.get_all_start_methods() else "spawn")
    cpu_seg = Segmenter(None, device="cpu", pipeline=seg.pipeline)  # the workers' steps need no network
    network = seg.model is not None
    window = 2 * workers  # images in flight per stage: bounded memory whatever the folder's size
    finishing: dict = {}   # index -> future of its last step
    outcomes: dict = {}    # index -> value (None: failed), until reported in order
    reported = 0

    def collect(block: bool):
        nonlocal reported
        if block and finishing:
            wait(list(finishing.values()), return_when=FIRST_COMPLETED)
        for i in [i for i, fu in finishing.items() if fu.done()]:
            outcomes[i] = _outcome(files[i], finishing.pop(i), failures_of[i])
            tick()
        while reported in outcomes:
            done(files[reported], outcomes.pop(reported))
            reported += 1

    failures_of = [[] for _ in files]  # per image, merged in input order at the end
    pool = ProcessPoolExecutor(workers, mp_context=ctx, initializer=_worker_init, initargs=(cpu_seg, opts))
    try:
        decoding = deque()
        queued = 0
        for i, f in enumerate(files):
            pmap = None
            if network:
                while queued < len(files) and len(decoding) < window:
                    decoding.append(pool.submit(_in_worker, "decode", files[queued]))
                    queued += 1
                work = _outcome(f, decoding.popleft(), failures_of[i])
                try:
                    pmap = None if work is None else seg.network_map(work[0], opts["tile"])
                except PER_FILE_ERRORS as e:
                    failures_of[i].append((str(f), str(e)))
                if pmap is None:  # failed here: reported with the others, in order
                    outcomes[i] = None
                    tick()
                    collect(False)
                    continue
            finishing[i] = pool.submit(_in_worker, "finish", f, pmap)
            while len(finishing) > window:
                collect(True)
            collect(False)
        while finishing:
            collect(True)
    except BaseException:
        pool.shutdown(wait=True, cancel_futures=True)
        raise
    pool.shutdown(wait=True)
    for fl in failures_of:
        failures.extend(fl)


def run_view(args) -> int:
    from . import view

    return view.run(args, _collect_images(args.inputs), make_segmenter)


def make_segmenter(args):
    """The Segmenter of ``--checkpoint`` (a path or a shipped model's name; none: the classical
    path) on ``--device``, its pipeline overridden by ``--scales``/``--flip``/``--linkage``/``--max-pixels``."""
    from .inference import Segmenter, resolve_device

    device = resolve_device(args.device, "--device")
    scales, flip, linkage = getattr(args, "scales", None), getattr(args, "flip", None), getattr(args, "linkage", None)
    if args.checkpoint:
        from .models.weights import Weights

        seg = Segmenter.from_checkpoint(Weights.resolve(args.checkpoint), device=device)
        seg.pipeline = seg.pipeline.with_overrides(scales=scales, flip=flip, linkage=linkage,
                                                   max_pixels=args.max_pixels)
    else:
        given = [o for o, v in (("--scales", scales), ("--no-flip" if flip is False else "--flip", flip),
                                ("--linkage", linkage)) if v is not None]
        if given:
            raise ValueError(f"{' and '.join(given)} set(s) the network's pipeline and need(s) --checkpoint; without "
                             "one, the classical path (colour gradient, closest fit) runs, which has neither")
        seg = Segmenter(device=device)
        seg.pipeline = seg.pipeline.with_overrides(max_pixels=args.max_pixels)
    return seg


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = argparse.ArgumentParser(prog="hiseg", description=(
        "hiseg: hierarchical image segmentation. `hiseg predict` writes saliency maps (ultrametric "
        "contour maps), ucm2 .mat files and cuts of images; `hiseg view` writes interactive explorer pages "
        "of their hierarchies; `hiseg evaluate` runs the BSDS500 benchmark."))
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("predict", help="saliency maps (UCM), ucm2 .mat files and cuts of images")
    add_predict_arguments(p)
    p.set_defaults(func=run_predict)
    from . import view

    v = sub.add_parser("view", help="interactive HTML explorer pages of images' hierarchies")
    view.add_arguments(v)
    v.set_defaults(func=run_view)
    try:
        from .metrics import evaluate_cli
    except ImportError:  # pragma: no cover
        evaluate_cli = None
    if evaluate_cli is not None:
        e = sub.add_parser("evaluate", help="BSDS500 benchmark of predictions against ground truth",
                           description="Score predictions (ucm2 .mat, segmentation .mat, boundary or label "
                                       "PNGs) against BSDS-format ground truth: boundary ODS/OIS/AP, covering, "
                                       "PRI and VI, as the official BSDS500 benchmark computes them.")
        evaluate_cli.add_arguments(e)
        e.set_defaults(func=evaluate_cli.run)
    args = parser.parse_args(argv)
    try:
        return int(args.func(args) or 0)
    except (FileNotFoundError, ValueError, OSError) as e:
        print(f"hiseg {args.command}: error: {e}", file=sys.stderr)
        return 2
    except Exception as e:  # checkpoint errors etc.
        from .models.weights import CheckpointError

        if isinstance(e, CheckpointError):
            print(f"hiseg {args.command}: error: {e}", file=sys.stderr)
            return 2
        raise


if __name__ == "__main__":
    sys.exit(main())
