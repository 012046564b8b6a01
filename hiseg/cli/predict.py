"""``hiseg predict``: saliency maps (UCM), ucm2 ``.mat`` files and cuts of images, written into ``--out``.

One driver (:func:`run`) with three back-ends, chosen by the options; the files are the same
byte for byte whichever runs (all go through :func:`hiseg.segmentation.outputs.predict_file`):

* in process (``--workers 0`` or ``1``, or fewer than :data:`POOL_MIN_IMAGES` images with
  ``--workers auto``): each image in turn, in this process;
* a worker pool (``--workers N``): the network runs here, one image at a time, while ``N``
  processes decode the images and make their superpixels, hierarchies and files
  (:func:`_predict_pool`);
* Lightning DDP (``--devices N`` > 1 or ``--num-nodes M`` > 1): ``trainer.predict`` over N
  devices per node (:mod:`hiseg.segmentation.predict_ddp`; no ``--html``).

The driver does the rest once: collect the inputs, refuse existing outputs before anything is
loaded or written, check ``--resume`` against the run record and write it (:mod:`hiseg.segmentation.record`),
build and name the model, report warnings and failed images in input order, write the index
page, exit 0 / 1 / 2 (:data:`hiseg.cli.options.EXIT_STATUS`).
"""
from __future__ import annotations

import argparse
import contextlib
import os
import sys
from pathlib import Path

from .options import (add_level, add_min_region_size, add_model, add_overwrite, add_quiet, add_regions, add_workers,
                      announce, at_least_one, collect_images, default_text, first_process, image_command,
                      exported_folder, make_segmenter, model_name, option_type, per_file, report_failures, resolve_workers)

__all__ = ["add_arguments", "add_pipeline_overrides", "run", "POOL_MIN_IMAGES"]

#: ``--workers auto`` starts worker processes for this many images or more (each takes seconds to start).
POOL_MIN_IMAGES = 8

HELP = "saliency maps (UCM), ucm2 .mat files and cuts of images"


def _scale(v: float) -> None:
    if not 0.1 <= v <= 4:  # also refuses nan
        raise ValueError("each scale must be in [0.1, 4] (Pipeline.scales)")


def _tile(v: int) -> None:
    from ..segmentation.segmenter import check_tile

    check_tile(v, "TILE")


def add_pipeline_overrides(p: argparse.ArgumentParser) -> None:
    """``--scales``, ``--flip``/``--no-flip``, ``--linkage``: settings over the model's pipeline."""
    p.add_argument("--scales", type=option_type(float, _scale), nargs="+", default=None, metavar="S",
                   help="multi-scale inference: average the boundary maps at these image scales (each in [0.1, 4], "
                        "e.g. 0.5 1 1.5; about sum(S^2) times the network's cost)" + default_text("the model's"))
    p.add_argument("--flip", action=argparse.BooleanOptionalAction, default=None,
                   help="also average each scale's map with the map of the mirrored image (about twice the "
                        "network's cost)" + default_text("the model's"))
    p.add_argument("--linkage", choices=("average", "single"), default=None,
                   help="hierarchy of the region adjacency graph" + default_text("the model's"))


def add_arguments(p: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """Add ``hiseg predict``'s options to ``p`` and return it."""
    from ..io.files import RECORD
    image_command(p, "Segment images into hierarchies with the shipped default model (or --checkpoint, or "
                     "--classical): write each image's saliency map (ultrametric contour map) as 8- and 16-bit "
                     "PNGs, its BSDS ucm2 .mat file and, with --regions or --level, a label image and a coloured "
                     "overlay, into --out.", "output folder")
    add_model(p)
    p.add_argument("--boundaries", default=None, metavar="DIR",
                   help="instead of a model, another detector's boundary maps: DIR/NAME.png (8- or 16-bit), .npy or "
                        ".mat (a BSDS ucm2 at pixel resolution, or one array) for each image NAME, through the same "
                        "chain (superpixels, merging, hierarchy)")
    p.add_argument("--masks", default=None, metavar="DIR",
                   help="instead of a model, masks of another segmenter: DIR/NAME.npz (masks: (K, H, W) bool, "
                        "optional scores) or NAME.json (SAM's mask list, COCO RLE) for each image NAME; the "
                        "hierarchy is their nesting (hiseg.hierarchy_from_masks)")
    add_regions(p, "also write a segmentation with K regions (K >= 1; a hierarchy with fewer regions gives its "
                   "finest cut, with a warning)")
    add_level(p, "also write the segmentation at level T of the saliency map, in [0, 1] (regions merged below T)")
    add_min_region_size(p)
    add_pipeline_overrides(p)
    p.add_argument("--tile", type=option_type(int, _tile), default=512, metavar="TILE",
                   help="the network runs in tiles of TILE x TILE pixels (bounded memory; >= 64, or 0: one pass)"
                        + default_text(512))
    add_workers(p, "worker processes for what runs on the CPU per image (decoding, superpixels, hierarchy, "
                   "writing), overlapped with the network in this process", POOL_MIN_IMAGES)
    p.add_argument("--devices", type=option_type(int, at_least_one), default=1, metavar="N",
                   help="N > 1: run on N devices of --device's kind per node, one process each (Lightning DDP, "
                        "a distributed sampler: no image twice; no --html)" + default_text(1))
    p.add_argument("--num-nodes", type=option_type(int, at_least_one), default=1, metavar="M",
                   help="with Lightning DDP: the number of nodes (launched as Lightning's DDP expects: "
                        "MASTER_ADDR, NODE_RANK, ...)" + default_text(1))
    add_overwrite(p, "files (NAME_ucm.png, NAME.mat, ...)")
    p.add_argument("--resume", action="store_true",
                   help="finish an interrupted run into the same --out: skip the images whose files are all there "
                        "and complete, do the others again (a partly written image's files are replaced); give the "
                        "interrupted run's options: another model, cut, --html or pipeline setting is refused "
                        f"(checked against the run's record, {RECORD}; --tile, --device and --workers may change), "
                        "and images written without a record are skipped with a warning (not with --overwrite)")
    add_quiet(p)
    p.add_argument("--html", action="store_true",
                   help="also write NAME.html, an interactive explorer of the hierarchy (self-contained: no server "
                        "or network), and index.html of thumbnails for several images")
    return p


def run(args) -> int:
    """``hiseg predict`` with parsed ``args``: the exit status (0, or 1 when some images failed;
    a bad option or input raises ValueError / FileNotFoundError / CheckpointError before anything
    is written)."""
    from ..io import folder_lock

    if args.regions is not None and args.level is not None:
        raise ValueError("give at most one of --regions and --level")
    if args.resume and args.overwrite:
        raise ValueError("give at most one of --overwrite (do every image again) and --resume (skip the finished ones)")
    ddp = args.devices > 1 or args.num_nodes > 1
    if ddp and args.html:
        raise ValueError("--html writes its pages in one process: not with --devices / --num-nodes")
    if ddp and (exported_folder(args) is not None or args.backend == "onnxruntime"):
        raise ValueError("--devices / --num-nodes distribute a torch network; an exported model runs with "
                         "onnxruntime (use --workers N)")
    if ddp:
        args.backend = "torch"  # a shipped model's network, distributed
    if ddp and model_name(args) == "classical":
        raise ValueError("--devices / --num-nodes distribute the network; the classical path has none "
                         "(use --workers N)")
    files = collect_images(args.inputs, "hiseg predict", out=args.out)
    # one run at a time into a folder: local rank 0 holds the lock (the process the user started: Lightning's
    # launcher, which sets LOCAL_RANK=0 for itself once it has started the others; rank 0 under torchrun); the
    # processes of the other ranks (LOCAL_RANK 1, 2, ...) share the folder, their files created exclusively;
    # several nodes: unlocked (a lock on a shared file system is not reliable)
    launcher = not ddp or (args.num_nodes == 1 and os.environ.get("LOCAL_RANK", "0") == "0")
    with (folder_lock(args.out, "hiseg predict or view") if launcher else contextlib.nullcontext()):
        return _run(args, files, ddp)


def _run(args, files: list, ddp: bool) -> int:
    """:func:`run` once the inputs are collected and ``--out`` is this run's."""
    from ..explorer import page as view
    from ..segmentation.outputs import image_outputs
    from ..io import display_path, refuse_overwrite

    out = Path(args.out)
    cut = args.regions is not None or args.level is not None
    outputs = [p for f in files for p in image_outputs(out, f.stem, cut)]  # the files this run writes
    if args.html:
        outputs += view.page_outputs(out, [f.stem for f in files]).values()
    # before anything is written (or loaded): no input, and no existing file without --overwrite, is replaced
    refuse_overwrite(outputs, files, overwrite=args.overwrite or args.resume, command="hiseg predict", resume=True)
    from .record import RunRecord, output_options

    record, wanted = RunRecord(out), output_options(args)
    total, everything = len(files), files
    files, present = _to_do(args, out, files, record, wanted)
    if not files:
        return 0
    seg = make_segmenter(args)
    announce("hiseg predict", seg, args)
    opts = {"out": out, "tile": args.tile, "regions": args.regions, "threshold": args.level,
            "min_size": args.min_region_size, "html": args.html, "source": source_of(args),
            "start": view.start_of(args.regions, args.level), "overwrite": args.overwrite, "resume": args.resume}
    failures, pages, written = [], [], set()

    def done(f, result):
        """Report one image's outcome (in input order): its warnings, its page."""
        if result is None:
            return
        page, caught = result
        for msg in caught:
            print(f"hiseg predict: warning: {display_path(f.name)}: {msg}", file=sys.stderr)
        if page is not None:
            written.add(f.stem)
        if args.html and page is not None:
            pages.append(page)

    first = first_process()  # before the run: DDP's launcher may set the ranks' variables here
    if first:  # before the first image
        record.assign(wanted, [f.stem for f in files], present, args.overwrite)
        record.save()
    try:
        if ddp:
            if not _predict_ddp(seg, files, opts, args, failures):
                return 0  # not the first process: rank 0 reports
            written = {f.stem for f in files} - {Path(name).stem for name, _ in failures}
        else:
            _predict_local(seg, files, opts, resolve_workers(args.workers, len(files), POOL_MIN_IMAGES), failures,
                           done, quiet=args.quiet)
    finally:
        if first and not record.found and not any(os.path.lexists(p) for p in outputs):
            record.discard()  # nothing written: nothing left (an empty new --out goes too)
    if first:
        record.finish([f.stem for f in files], written)
        record.save()
    if args.html and total > len(files) and total > 1:  # a resumed run's index: the skipped images' pages too
        pages = _resumed_index(out, everything, pages)
    if len(pages) > 1:
        view.write_index_file(out, pages)
    if written:
        html = (f"; open {display_path(out / 'index.html')}" if len(pages) > 1 else
                f"; open {display_path(out / (files[0].stem + '.html'))}" if pages else "")
        print(f"wrote {len(written)} image(s) to {display_path(out)}{html}")
    return report_failures("hiseg predict", failures, len(files))


def _to_do(args, out: Path, files: list, record, wanted: dict) -> tuple[list, set]:
    """(the images this run does, the stems of its images with files in ``out`` already).
    ``--resume``: the check of ``wanted`` (:func:`output_options`) against ``record``
    (ValueError: :meth:`RunRecord.check_resume`), then the images whose files are not all there
    and complete; the skipped ones reported (a warning for those the record does not know)."""
    from ..explorer import page as view
    from ..io.files import RECORD
    from ..segmentation.outputs import image_done, output_paths
    from ..io import display_path

    if not (args.resume or args.overwrite):
        return files, set()  # no file of theirs is there (refuse_overwrite)
    pages = view.page_outputs(out, [f.stem for f in files]) if args.html else {}
    also = {f.stem: [pages[f"{f.stem}.html"]] if pages else [] for f in files}
    present = {f.stem for f in files
               if any(os.path.lexists(p) for p in [*output_paths(out, f.stem).values(), *also[f.stem]])}
    if not args.resume:
        return files, present
    unknown = record.check_resume(wanted, [f.stem for f in files if f.stem in present], out)
    cut = args.regions is not None or args.level is not None
    todo = [f for f in files if not image_done(out, f.stem, cut, also[f.stem])]
    unchecked = set(unknown) - {f.stem for f in todo}
    if unchecked:  # a warning: shown with --quiet too
        n, e_g = len(unchecked), display_path(next(f.name for f in files if f.stem in unchecked))
        why = (f"{display_path(out)} has no {RECORD} (written by an older hiseg, or by hand): the options that "
               f"made its {n} complete image(s) cannot be checked" if not record.found else
               f"{display_path(out / RECORD)} does not name {n} of the complete images, e.g. {e_g} (written by "
               "another program?): their options cannot be checked")
        print(f"hiseg predict: warning: --resume: {why}; they are skipped as they are (--overwrite does them again)",
              file=sys.stderr)
    if not args.quiet and len(todo) < len(files):
        print(f"hiseg predict: --resume: {len(files) - len(todo)} of {len(files)} image(s) are complete in "
              f"{display_path(out)}, skipped", file=sys.stderr)
    return todo, present


def _resumed_index(out: Path, files: list, pages: list) -> list:
    """The index entries of every image of a resumed run, in input order: this run's
    ``pages``, and for the images it skipped the entry read from their page
    (:func:`hiseg.explorer.page.page_entry`: neither the image nor its full-size ucm2 is read)."""
    from ..explorer import page as view

    made = {e[0]: e for e in pages}
    return [made.get(f"{f.stem}.html") or view.page_entry(out, f.stem) for f in files]


def source_of(args) -> str:
    """What made the hierarchies, as a page shows it."""
    name = model_name(args)
    return "classical path (no network)" if name == "classical" else f"model {name}"


def _predict_local(seg, files: list, opts: dict, workers: int, failures: list, done, quiet: bool) -> None:
    """The in-process and worker-pool back-ends, under one progress bar."""
    from tqdm import tqdm

    bar = tqdm(total=len(files), desc="hiseg predict", unit="img", disable=quiet or len(files) < 2)
    with bar:
        if workers <= 1:
            for f in files:
                done(f, per_file(failures, f, _predict_one, seg, f, opts))
                bar.update()
        else:
            _predict_pool(seg, files, opts, workers, failures, done, bar.update)


def _predict_ddp(seg, files: list, opts: dict, args, failures: list) -> bool:
    """The Lightning DDP back-end (:func:`hiseg.segmentation.predict_ddp.predict_files`); True in the
    process that reports (global rank 0), with ``failures`` filled."""
    import logging
    import warnings

    from pytorch_lightning.utilities.rank_zero import rank_zero_only

    from ..segmentation.predict_ddp import predict_files

    for name in ("pytorch_lightning", "lightning.pytorch", "lightning_fabric"):  # its banners: not the user's business
        logging.getLogger(name).setLevel(logging.WARNING)
    warnings.filterwarnings("ignore", message=r".*isinstance\(treespec, LeafSpec\)")  # Lightning's own torch call
    accelerator = {"cpu": "cpu", "cuda": "gpu", "mps": "mps"}.get(seg.device.type, "auto")
    failures += predict_files(seg, files, opts["out"], n_regions=opts["regions"], threshold=opts["threshold"],
                              min_size=opts["min_size"], tile=opts["tile"], overwrite=opts["overwrite"],
                              resume=opts["resume"], lock=False, record=False,  # run() holds both
                              trainer_kwargs=dict(accelerator=accelerator, devices=args.devices,
                                                  num_nodes=args.num_nodes, strategy="ddp"))
    return rank_zero_only.rank == 0


def _predict_one(seg, f: Path, opts: dict, pmap=None):
    """:func:`hiseg.segmentation.outputs.predict_file` of image ``f`` (``pmap``: its boundary map, computed
    there when None), plus its page with --html; (page index entry or True, the warnings'
    messages). The one code of ``hiseg predict``'s images, in this process or a worker."""
    from ..explorer import page as view
    from ..segmentation.outputs import predict_file

    done = predict_file(seg, f, opts["out"], opts["tile"], opts["regions"], opts["threshold"], opts["min_size"],
                        boundary=pmap, overwrite=opts.get("overwrite", True), resume=opts.get("resume", False),
                        record=False,  # run() keeps it, once
                        also=[view.page_outputs(opts["out"], [f.stem])[f"{f.stem}.html"]] if opts["html"] else ())
    if done is None:  # --resume: complete already
        return None, []
    img, res, caught = done
    # the page of the result, not of res.ucm2: a large image's is drawn at the working resolution (hiseg.explorer.page.shown)
    page = view.write_page_file(opts["out"], f.stem, img, res, opts["source"], opts["start"]) if opts["html"] else True
    return page, caught


# ----------------------------------------------------------------------------- worker processes
_WORKER: dict = {}


def _worker_init(seg, opts):
    """A worker's state: the Segmenter (its pipeline) and the options; one thread each (the
    workers are the parallelism)."""
    import cv2

    if sys.modules.get("torch") is not None:  # a chain that needs it (a torch merge head) imported it: one thread
        sys.modules["torch"].set_num_threads(1)
    cv2.setNumThreads(1)
    _WORKER.update(seg=seg, opts=opts)


def _in_worker(step, f: Path, *rest):
    """``step`` of image ``f`` in a worker, its outcome as plain data (any exception comes
    back as its class name and message, with the worker's traceback, whatever its pickling):
    ("ok", value), ("fail", message) for the errors that stop one image
    (:data:`hiseg.explorer.page.PER_FILE_ERRORS`), ("error", class name, message)."""
    import traceback

    from .options import PER_FILE_ERRORS

    try:
        if step == "decode":
            return "ok", _WORKER["seg"].read(f)[:2]
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
    from concurrent.futures import FIRST_COMPLETED, wait

    from .._lifetime import process_pool
    from .options import PER_FILE_ERRORS

    # forkserver (Linux) or spawn: never a plain fork of this process, whose OpenCV / OpenMP
    # thread pools may hold a lock at fork time (a forked worker hung in cv2.setNumThreads in CI);
    # the workers import hiseg themselves (a few seconds once), then run one thread each.
    ctx = mp.get_context("forkserver" if "forkserver" in mp.get_all_start_methods() else "spawn")
    cpu_seg = seg.worker_copy()  # the workers' steps need no torch network (onnxruntime's: the whole chain there)
    network = seg.backend.name == "torch"
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
    pool = process_pool(workers, mp_context=ctx, initializer=_worker_init, initargs=(cpu_seg, opts))  # they end with this process
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
