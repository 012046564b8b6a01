"""``hiseg view``: interactive explorer pages of images' hierarchies (the pages themselves are
:mod:`hiseg.explorer.page`'s), computed on the spot or read from ``hiseg predict``'s ucm2 files (``--ucm``)."""
from __future__ import annotations

import argparse
from pathlib import Path

from .options import (add_level, add_model, add_overwrite, add_quiet, add_regions, announce, collect_images,
                      default_text, image_command, make_segmenter, per_file, report_failures)
from .predict import source_of

__all__ = ["add_arguments", "run"]

HELP = "interactive HTML explorer pages of images' hierarchies"


def add_arguments(p: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """Add ``hiseg view``'s options to ``p`` and return it."""
    image_command(p, "Write an interactive explorer page (one self-contained HTML file, no server or "
                     "network needed) per image: the image, its saliency map (UCM) and a slider over "
                     "the hierarchy's levels or region counts; click a region for its area and the "
                     "level at which it merges. With several images, also index.html of thumbnails.",
                  "output folder of the pages")
    p.add_argument("--ucm", default=None, metavar="DIR",
                   help="read each image's hierarchy from DIR/NAME.mat (a BSDS ucm2, as `hiseg predict` "
                        "writes) instead of segmenting the image")
    add_model(p, when="without --ucm: ")
    add_regions(p, "the pages open at the finest level with at most K regions (K >= 1; the slider moves from "
                   "there)" + default_text(12))
    add_level(p, "the pages open at level T of the saliency map, in [0, 1] (regions merged below T)")
    add_overwrite(p, "pages")
    add_quiet(p)
    return p


def run(args) -> int:
    """``hiseg view`` with parsed ``args``: the pages of the input images; the exit status."""
    from ..io import folder_lock

    if args.regions is not None and args.level is not None:
        raise ValueError("give at most one of --regions and --level")
    if args.ucm is not None and (args.checkpoint is not None or args.classical):
        raise ValueError("give --ucm (read the hierarchies) or --checkpoint / --classical (compute them), not both")
    files = collect_images(args.inputs, "hiseg view")
    out = Path(args.out)
    inputs = list(files)
    mats = [None] * len(files)  # with --ucm: each image's ucm2 file
    if args.ucm is not None:
        folder = Path(args.ucm)
        if not folder.is_dir():
            raise FileNotFoundError(f"--ucm folder not found: {folder}")
        mats = [folder / f"{f.stem}.mat" for f in files]
        missing = [m.name for m in mats if not m.is_file()]
        if missing:
            have = len(list(folder.glob("*.mat")))
            raise FileNotFoundError(
                f"--ucm folder {folder} has no ucm2 file for {len(missing)} of {len(files)} image(s): "
                f"{', '.join(missing[:5])}{' ...' if len(missing) > 5 else ''} ({have} .mat files there; "
                "`hiseg predict` writes NAME.mat for image NAME)")
        inputs += mats
    elif args.checkpoint and Path(args.checkpoint).exists():
        inputs.append(Path(args.checkpoint))
    # one run at a time into a folder (hiseg predict takes the same lock: --html writes these pages too)
    with folder_lock(out, "hiseg predict or view"):
        return _write(args, files, mats, inputs, out)


def _write(args, files: list, mats: list, inputs: list, out: Path) -> int:
    """:func:`run` once the inputs are known and ``out`` is this run's."""
    from tqdm import tqdm

    from ..io import read_image, refuse_overwrite
    from ..explorer.page import INDEX, check_ucm2, page_outputs, start_of, write_pages

    refuse_overwrite(page_outputs(out, [f.stem for f in files]).values(), inputs, overwrite=args.overwrite,
                     command="hiseg view")
    seg = None
    if args.ucm is None:
        seg = make_segmenter(args)
        announce("hiseg view", seg, args)
    source = f"ucm2 from {args.ucm}" if seg is None else source_of(args)
    failures = []

    def hierarchy(f, mat):
        """(image, hierarchy) of one page: a ucm2 read from ``mat``, or the image's result (a
        large image read and reduced band by band, its page drawn at the working resolution)."""
        from ..metrics.predictions import load_prediction

        if seg is None:
            _check_ucm2_header(f, mat)  # from the headers: no pixel read for a file of the wrong size
            img = read_image(f)
            return img, check_ucm2(load_prediction(mat, kind="ucm2").data, img.shape, where=f"{mat} (for {f})")
        work, full, img = seg.read(f)
        return img, seg.finish(work, seg.network_map(work), full)

    def items():
        for f, mat in zip(files, mats):
            got = per_file(failures, f, hierarchy, f, mat)
            if got is not None:
                yield (f.stem, *got, source)

    bar = None if args.quiet or len(files) < 2 else (lambda it: tqdm(it, total=len(files), desc="hiseg view",
                                                                      unit="img"))
    written = write_pages(out, items(), progress=bar, start=start_of(args.regions, args.level))
    pages = len(files) - len(failures)
    if pages:
        from ..io import display_path

        html = sorted(p for p in written if p.suffix == ".html")
        first = next((p for p in html if p.name == INDEX), html[0] if html else None)
        print(f"wrote {pages} page(s) to {display_path(out)}" + (f"; open {display_path(first)}" if first else ""))
    return report_failures("hiseg view", failures, len(files))


def _check_ucm2_header(image, mat) -> None:
    """ValueError when the ucm2 in ``mat`` is not the (2H+1) x (2W+1) map of ``image``, both
    sizes read from the files' headers (the image's within the pixel limit,
    :func:`hiseg.io.image_header`): a ucm2 of another, larger image is refused before it is read,
    and so is one that declares more entries than the pixel limit (DataError,
    :func:`hiseg.io.check_pixels`: (2H+1) x (2W+1) float64 values, 32 bytes per pixel of the image).
    Files whose header does not tell (not a MATLAB 5 file, no ``ucm2``) are left to the reader."""
    from scipy.io import whosmat

    from ..io import check_pixels, image_header

    h, w = image_header(image)[:2]
    try:
        shapes = {name: shape for name, shape, _ in whosmat(str(mat))}
    except Exception:  # noqa: BLE001 - not a file whosmat reads: load_prediction names the problem
        return
    shape = shapes.get("ucm2")
    if shape is not None and len(shape) == 2:
        check_pixels(*shape, f"{mat} (for {image})", what="ucm2")
    if shape is not None and tuple(shape) != (2 * h + 1, 2 * w + 1):
        raise ValueError(f"{mat} (for {image}) holds a ucm2 of shape {tuple(shape)}, the map of a "
                         f"{(shape[0] - 1) // 2}x{(shape[1] - 1) // 2} (HxW) image, but the image is {h}x{w}: "
                         "the UCM belongs to another image (not read)")
