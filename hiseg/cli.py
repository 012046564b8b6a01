"""The ``hiseg`` command: ``hiseg predict`` (saliency maps and cuts), ``hiseg view`` (explorer pages) and ``hiseg evaluate`` (BSDS benchmark)."""
from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Optional, Sequence

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
                   help="trained checkpoint (.ckpt) or a shipped model's name (bsds500); without it, "
                        "the classical colour-gradient + ultrametric-fitting path")
    p.add_argument("--out", "-o", required=True, help="output folder")
    p.add_argument("--regions", type=option_type(int, _at_least_one), default=None, metavar="K",
                   help="also write a segmentation with K regions (K >= 1; a hierarchy with fewer regions gives "
                        "its finest cut, with a warning)")
    p.add_argument("--threshold", type=_threshold, default=None,
                   help="also write the segmentation at UCM threshold T, in [0, 1]")
    p.add_argument("--min-region-size", type=_min_size, default="auto", metavar="SIZE",
                   help="with --regions: no region smaller than SIZE pixels (>= 1), SIZE of the image "
                        "(< 1), or 'auto' (default: 0.05/K of the image); 0 for the plain cut")
    p.add_argument("--scales", type=option_type(float, _scale), nargs="+", default=None,
                   help="with --checkpoint: multi-scale inference, average the boundary maps at these image scales "
                        "(each in [0.1, 4], e.g. 0.5 1 1.5; about sum(s^2) times the network's cost); default: "
                        "the checkpoint's")
    p.add_argument("--linkage", choices=("average", "single"), default=None,
                   help="with --checkpoint: hierarchy of the region adjacency graph; default: the checkpoint's")
    p.add_argument("--tile", type=option_type(int, lambda v: check_tile(v, "TILE")), default=512,
                   help=f"the network runs in tiles of TILE x TILE pixels (bounded memory; >= {MIN_TILE}, or 0: "
                        "one pass) (default: %(default)s)")
    add_segmenter_arguments(p, "files (NAME_ucm.png, NAME.mat, ...)")
    p.add_argument("--no-progress", action="store_true", help="do not show a progress bar")
    p.add_argument("--html", action="store_true",
                   help="also write NAME.html, an interactive explorer of the hierarchy (self-contained: "
                        "no server or network), and index.html of thumbnails for several images")


def run_predict(args) -> int:
    import warnings

    from tqdm import tqdm

    from . import view
    from .inference import output_paths, write_outputs
    from .io import read_image, refuse_overwrite

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
    start = view.start_of(args.regions, args.threshold)

    def one(f):
        img = read_image(f)
        res = seg.segment(img, tile=args.tile)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            write_outputs(out, f.stem, res, img, n_regions=args.regions, threshold=args.threshold,
                          min_size=args.min_region_size)
        for w in caught:
            print(f"hiseg predict: warning: {f.name}: {w.message}", file=sys.stderr)
        return view.write_page_file(out, f.stem, img, res.ucm2, view.source_of(args), start) if args.html else True

    failures, pages = [], []
    for f in tqdm(files, desc="hiseg predict", unit="img", disable=args.no_progress or len(files) < 2):
        page = view.per_file(failures, f, one, f)
        if args.html and page is not None:
            pages.append(page)
    if len(pages) > 1:
        view.write_index_file(out, pages)
    if len(files) > len(failures):
        print(f"wrote {len(files) - len(failures)} image(s) to {out}")
    return view.report_failures("hiseg predict", failures, len(files))


def run_view(args) -> int:
    from . import view

    return view.run(args, _collect_images(args.inputs), make_segmenter)


def make_segmenter(args):
    """The Segmenter of ``--checkpoint`` (a path or a shipped model's name; none: the classical
    path) on ``--device``, its pipeline overridden by ``--scales``/``--linkage``/``--max-pixels``."""
    from .inference import Segmenter, resolve_device

    device = resolve_device(args.device, "--device")
    if args.checkpoint:
        from .models.weights import Weights

        if args.checkpoint.lower() in Weights.names() and not Path(args.checkpoint).exists():
            seg = Segmenter.from_pretrained(args.checkpoint, device=device)
        else:
            seg = Segmenter.from_checkpoint(args.checkpoint, device=device)
        seg.pipeline = seg.pipeline.with_overrides(scales=getattr(args, "scales", None),
                                                   linkage=getattr(args, "linkage", None),
                                                   max_pixels=args.max_pixels)
    else:
        given = [o for o, v in (("--scales", getattr(args, "scales", None)), ("--linkage", getattr(args, "linkage", None)))
                 if v is not None]
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
