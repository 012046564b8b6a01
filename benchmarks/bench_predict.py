"""Seconds per image of ``hiseg predict``: network, superpixels/RAG, hierarchy, writing.

Runs the :class:`hiseg.segmentation.segmenter.Segmenter` of a checkpoint (default: the shipped default
model, ``Weights.default()``, when present, else the classical path) on BSDS500
val images (481x321) or on scikit-image sample images resized to 481x321, and prints a
markdown table of the median time per stage, plus the batched network time on the
device when ``--device cuda``; with ``--table FILE`` the same text is also written there.

Usage: ``python benchmarks/bench_predict.py [--checkpoint CKPT] [--images DIR] [--n 10]
[--threads 2] [--device cpu]``

``--workers 1 2``: instead, the throughput of the whole command, ``hiseg predict FOLDER
--workers N`` run as a subprocess on ``--n`` images (BSDS500 val from
/work/shared/data/BSDS500 when present, else the sample images), for each N: images/s of
wall-clock time (process start and model loading included) and the CPU seconds of the
process and its workers, with the ratio to the first N, and whether every file equals the
first N's byte for byte; a markdown table, also written to ``--table``
(default here: benchmarks/results/predict.md).

``--archs``: instead, the whole predict path per image (network + superpixels + hierarchy,
``Segmenter.segment`` without writing) of each boundary architecture at scale 1 and at the
default test-time scales 0.5+1, untrained weights: the network rows are each architecture's own
(eval mode, so a ``pdc_boundary_net`` runs its folded kernels, and ``.fold()`` rows run the
plain-convolution copy); superpixels + hierarchy are measured on the shipped ``bsds500`` network's
maps (a trained map: an untrained one has other minima, hence other superpixels), the same for
every row. Ratios are against ``compact_boundary_net`` in the bsds500 shape at the same scales,
measured in the same run; written to ``--table`` (default benchmarks/results/predict_archs.md).

``--deploy DIR``: instead, the three ways to run the shipped default model, paired on the same
images in one run (issue 41): today's eager torch (``Segmenter(fold=False)``), the folded torch
path every user now gets (``Segmenter()``: BatchNorm folded, ``inference_mode``) and onnxruntime
on the model exported into DIR (``hiseg export -o DIR``; ``ExportedSegmenter``, no torch), each
stage per image (network, superpixels + RAG, merging = the head's features and MLP, tree, writing)
at each of ``--thread-counts`` (torch's threads, onnxruntime's intra-op threads); then each
path's start-up (import, load, first image) in a fresh process, ``hiseg predict`` on the ``--n``
images (start-up included) and, with ``--photo``, on a 12 MP photograph (a val image enlarged to
4000x3000). Ratios against eager torch. Written to ``--table`` (default
benchmarks/results/predict_deploy.md).
"""
import argparse
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

from hiseg.segmentation.outputs import write_outputs

from hiseg.segmentation.segmenter import Segmenter
from provenance import stamped, write_stamped

ROOT = Path(__file__).resolve().parents[1]
BSDS_VAL = Path("/work/shared/data/BSDS500/data/images/val")


def images(args):
    if args.images:
        from hiseg.io import read_image

        files = sorted(Path(args.images).glob("*.jpg"))[: args.n]
        return [(f.stem, read_image(f)) for f in files]
    import skimage.data
    from skimage.transform import resize

    out = []
    for name in ["astronaut", "coffee", "chelsea", "rocket", "camera"][: args.n]:
        im = getattr(skimage.data, name)()
        if im.ndim == 2:
            im = np.repeat(im[..., None], 3, 2)
        out.append((name, resize(im, (321, 481), anti_aliasing=True).astype(np.float32)))
    return out


def throughput(args):
    """images/s and CPU seconds of ``hiseg predict --workers N`` for each N of ``args.workers``."""
    import cv2

    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(args.images) if args.images else (BSDS_VAL if BSDS_VAL.is_dir() else None)
        src = Path(tmp) / "images"
        src.mkdir()
        if folder is not None:
            for f in sorted(folder.glob("*.jpg"))[: args.n]:
                (src / f.name).symlink_to(f.resolve())
        else:
            for name, im in images(args):
                cv2.imwrite(str(src / f"{name}.png"), (im[..., ::-1] * 255 + 0.5).astype("uint8"))
        n = len(list(src.iterdir()))
        rows, first = [], None
        for run, w in enumerate(args.workers):
            out = Path(tmp) / f"out{run}"
            cmd = [sys.executable, "-m", "hiseg.cli", "predict", str(src), "--out", str(out), "--workers", str(w),
                   "--device", args.device, "--quiet"] + (["--checkpoint", args.checkpoint] if args.checkpoint else ["--classical"])
            before = resource.getrusage(resource.RUSAGE_CHILDREN)
            t0 = time.perf_counter()
            subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL,
                           env=dict(os.environ, OMP_NUM_THREADS=str(args.threads)))
            wall = time.perf_counter() - t0
            after = resource.getrusage(resource.RUSAGE_CHILDREN)
            cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
            files = {p.name: p.read_bytes() for p in sorted(out.iterdir())}
            first = files if first is None else first
            rows.append((w, n / wall, wall, cpu, files == first))
    what = f"checkpoint {Path(args.checkpoint).name}" if args.checkpoint else "classical path"
    source = "BSDS500 val" if folder is not None else "scikit-image samples"
    lines = [f"# hiseg predict --workers N: throughput on this machine's CPU\n",
             f"{n} {source} images (481x321 or 321x481), {what}, device {args.device}, OMP_NUM_THREADS={args.threads}; "
             f"wall clock of the whole command (start, model loading and writing included). `--workers 1` is the "
             "single-process run; `--workers 2`: two worker processes (decoding, superpixels, hierarchy, writing) "
             "beside the main one (the network). "
             f"**The machine has {os.cpu_count()} cores, shared with other jobs (load average "
             f"{os.getloadavg()[0]:.1f} at the end of the run)**: the wall-clock figures are what "
             "that load allowed; CPU seconds (user + system, of the command and its "
             "worker processes) are the work done, less sensitive to the load. Workers start by forkserver "
             "(they import hiseg themselves: about a second each).\n",
             "| workers | images/s | ratio | wall s | CPU s | CPU s per image | files equal to the first row's |",
             "|---:|---:|---:|---:|---:|---:|---|"]
    for w, ips, wall, cpu, same in rows:
        lines.append(f"| {w} | {ips:.3f} | {ips / rows[0][1]:.2f} | {wall:.1f} | {cpu:.1f} | {cpu / n:.2f} | "
                     f"{'yes, byte for byte' if same else 'NO'} |")
    print(write_stamped(args.table, "\n".join(lines)).read_text())


#: (label, builder, kwargs, fold) of ``--archs``; the first row is the floor of the ratios
ARCHS = [("compact_boundary_net (bsds500's shape)", "compact_boundary_net",
          dict(width=32, blocks=[2, 2, 3, 3], side_channels=16), False),
         ("pdc_boundary_net width 40 (default), eval mode", "pdc_boundary_net", {}, False),
         ("pdc_boundary_net width 40 (default), .fold()", "pdc_boundary_net", {}, True),
         ("pdc_boundary_net width 32, .fold()", "pdc_boundary_net", dict(width=32), True),
         ("pdc_boundary_net width 16 (the CPU pilot's), .fold()", "pdc_boundary_net", dict(width=16), True)]


def compare_archs(args):
    """Seconds per image of the whole predict path for each of :data:`ARCHS` (see the docstring)."""
    from hiseg.models import get_model

    torch.manual_seed(0)
    ims = images(args)
    try:
        ref = Segmenter.from_pretrained("bsds500")
        ref_what = "the shipped bsds500 network's maps"
    except FileNotFoundError:
        ref = Segmenter(get_model(*ARCHS[0][1:3]))
        ref_what = "an untrained compact_boundary_net's maps (bsds500 not found)"
    base = dict(ref.pipeline.to_dict(), merge_head=None)

    # every (architecture, scales) and the shared post-processing are timed image by image, in turn,
    # so that a change of the machine's load falls on all of them alike
    jobs = []  # (label, parameters, scales, function of an image)
    for scales in ([1.0], [0.5, 1.0]):
        pipe = dict(base, scales=scales)
        ref_seg = Segmenter(ref.model, pipeline=pipe)
        maps = {id(im): ref_seg.network_map(im) for _, im in ims}
        sc = "+".join(f"{x:g}" for x in scales)
        jobs.append(("post", 0, sc, lambda im, seg=ref_seg, maps=maps: seg.finish(im, maps[id(im)])))
        for label, name, kw, fold in ARCHS:
            net = get_model(name, **kw).eval()
            seg = Segmenter(net.fold() if fold else net, pipeline=pipe)
            jobs.append((label, sum(p.numel() for p in net.parameters()), sc, seg.network_map))
    wall = [[] for _ in jobs]
    cpu = [[] for _ in jobs]
    for j in jobs:
        j[3](ims[0][1])  # warm-up
    for _, im in ims:
        for k, j in enumerate(jobs):
            c, t = time.process_time(), time.perf_counter()
            j[3](im)
            wall[k].append(time.perf_counter() - t)
            cpu[k].append(time.process_time() - c)
    post = {j[2]: (float(np.min(w)), float(np.median(c))) for j, w, c in zip(jobs, wall, cpu) if j[0] == "post"}
    rows = [(j[0], j[1], j[2], float(np.min(w)), float(np.median(c))) + post[j[2]]
            for j, w, c in zip(jobs, wall, cpu) if j[0] != "post"]
    lines = [f"# hiseg predict per image by boundary architecture, {len(ims)} images "
             f"{ims[0][1].shape[1]}x{ims[0][1].shape[0]}, CPU, torch threads {args.threads}\n",
             f"Seconds per image: wall, the best over the images (the least disturbed by other jobs); CPU, the "
             f"median; all rows timed in turn on each image. Network: each architecture, untrained (the cost "
             f"does not depend on the weights). Superpixels + hierarchy (boundary watershed, average linkage, no merging head): on "
             f"{ref_what} at the same scales, the same for every row. Ratios against the first row at the same "
             f"scales, measured in the same run. **The machine has {os.cpu_count()} cores, shared with other jobs "
             f"(load average {os.getloadavg()[0]:.1f} at the end)**: wall figures are what that load allowed; "
             f"CPU seconds (all threads) are the work.\n",
             "| network | parameters | scales | network s | superpixels + hierarchy s | total s | total ratio "
             "| network CPU s | total CPU s | total CPU ratio |", "|---|---:|---|---:|---:|---:|---:|---:|---:|---:|"]
    floor = {r[2]: r for r in rows if r[0] == ARCHS[0][0]}
    for label, n_params, sc, t, c, post, post_cpu in rows:
        f = floor[sc]
        lines.append(f"| {label} | {n_params:,} | {sc} | {t:.3f} | {post:.3f} | {t + post:.3f} | "
                     f"{(t + post) / (f[3] + f[5]):.2f} | {c:.3f} | {c + post_cpu:.3f} | "
                     f"{(c + post_cpu) / (f[4] + f[6]):.2f} |")
    print(write_stamped(args.table, "\n".join(lines)).read_text())


def _deploy_stages(seg, im, out_dir, name):
    """Seconds of each stage of one image on ``seg`` (a Segmenter, or an ExportedSegmenter:
    its ``pipeline`` has the same step methods)."""
    from hiseg.core.graph import region_adjacency_graph
    from hiseg.core.average_linkage import build_average_linkage_hierarchy
    from hiseg.core.ultrametric import build_hierarchy
    from hiseg.segmentation.result import SegmentationResult

    pipe, t = seg.pipeline, {}
    t0 = time.perf_counter()
    pmap = seg.network_map(im)
    t1 = time.perf_counter()
    rag = region_adjacency_graph(pipe.make_superpixels(pmap, im))
    t2 = time.perf_counter()
    w = pipe.edge_weights(rag, pmap, im)
    t3 = time.perf_counter()
    lengths = rag.frontier_lengths().astype(np.float64)
    if hasattr(seg, "exported"):
        h = (build_hierarchy(rag.graph, w) if pipe.linkage == "single"
             else build_average_linkage_hierarchy(rag.graph, w, lengths))
        u = h.ultrametric(w)
    else:
        u, h = pipe.ultrametric(rag.graph, w, lengths)
        u = u.numpy()
    t4 = time.perf_counter()
    write_outputs(out_dir, name, SegmentationResult(rag, u, h, pmap), im)
    t5 = time.perf_counter()
    t.update(network=t1 - t0, superpixels=t2 - t1, merging=t3 - t2, tree=t4 - t3, writing=t5 - t4, total=t5 - t0)
    return t


_STARTUP = {
    "eager torch": "from hiseg.segmentation.segmenter import Segmenter\nT1=time.perf_counter()\n"
                   "seg = Segmenter(fold=False)",
    "folded torch": "from hiseg.segmentation.segmenter import Segmenter\nT1=time.perf_counter()\nseg = Segmenter()",
    "onnxruntime": "from hiseg.export.runtime import ExportedSegmenter\nT1=time.perf_counter()\n"
                   "seg = ExportedSegmenter.from_exported(sys.argv[2])",
}


def _startup(path: str, image: Path, exported: str) -> tuple:
    """(import s, load s, first image s, torch imported) of ``path`` in a fresh process."""
    code = ("import sys, time\nT0=time.perf_counter()\n" + _STARTUP[path]
            + "\nT2=time.perf_counter()\nseg.segment(sys.argv[1])\nT3=time.perf_counter()\n"
              "print(T1-T0, T2-T1, T3-T2, 'torch' in sys.modules)")
    r = subprocess.run([sys.executable, "-c", code, str(image), exported], capture_output=True, text=True,
                       check=True, env=dict(os.environ, PYTHONPATH=str(ROOT)))
    a, b, c, torch_in = r.stdout.split()[-4:]
    return float(a), float(b), float(c), torch_in == "True"


def _cli_wall(args_list, env=None) -> float:
    t0 = time.perf_counter()
    subprocess.run([sys.executable, "-m", "hiseg.cli", "predict", *args_list, "-q", "--workers", "1"], check=True,
                   stdout=subprocess.DEVNULL, env=dict(os.environ, PYTHONPATH=str(ROOT), **(env or {})))
    return time.perf_counter() - t0


def deploy(args):
    """The --deploy comparison (see the module docstring)."""
    from hiseg.export.runtime import ExportedSegmenter

    folder = Path(args.images) if args.images else BSDS_VAL
    files = sorted(folder.glob("*.jpg"))[: args.n]
    from hiseg.io import read_image

    ims = [(f.stem, read_image(f)) for f in files]
    paths = ["eager torch", "folded torch", "onnxruntime"]
    stages = ["network", "superpixels", "merging", "tree", "writing", "total"]
    results = {}  # (threads, path) -> list of stage dicts
    with tempfile.TemporaryDirectory() as tmp:
        for threads in args.thread_counts:
            torch.set_num_threads(threads)
            segs = {"eager torch": Segmenter(fold=False), "folded torch": Segmenter(),
                    "onnxruntime": ExportedSegmenter.from_exported(args.deploy, threads=threads)}
            for p in paths:  # warm-up
                _deploy_stages(segs[p], ims[0][1], tmp, "warm")
            for name, im in ims:  # paired: every path on this image, in turn
                for p in paths:
                    results.setdefault((threads, p), []).append(_deploy_stages(segs[p], im, tmp, name))
        load = os.getloadavg()[0]
        start = {p: _startup(p, files[0], args.deploy) for p in paths}
        cli = {}
        out = Path(tmp) / "cli"
        src = Path(tmp) / "images"
        src.mkdir()
        for f in files:
            (src / f.name).symlink_to(f.resolve())
        cli["eager torch"] = None  # not selectable from the command line any more (always folded)
        cli["folded torch"] = _cli_wall([str(src), "-o", str(out / "t")])
        cli["onnxruntime"] = _cli_wall([str(src), "-c", args.deploy, "-o", str(out / "o")])
        photo = {}
        if args.photo:
            import cv2

            big = cv2.resize(cv2.imread(str(files[0])), (4000, 3000), interpolation=cv2.INTER_CUBIC)
            cv2.imwrite(str(Path(tmp) / "photo.jpg"), big, [cv2.IMWRITE_JPEG_QUALITY, 92])
            photo["folded torch"] = _cli_wall([str(Path(tmp) / "photo.jpg"), "-o", str(out / "pt")])
            photo["onnxruntime"] = _cli_wall([str(Path(tmp) / "photo.jpg"), "-c", args.deploy, "-o", str(out / "po")])
    med = {k: {s: float(np.median([r[s] for r in v])) for s in stages} for k, v in results.items()}
    lines = ["# hiseg predict of the shipped default model: eager torch, folded torch, onnxruntime\n",
             f"{len(ims)} BSDS500 val images (481x321 or 321x481), each stage's median seconds per image, the three paths "
             f"timed in turn on each image (paired), at torch / onnxruntime intra-op threads "
             f"{', '.join(map(str, args.thread_counts))}. Network: the boundary map (2 networks x scales 0.5 and 1); "
             "superpixels: boundary watershed + region adjacency graph; merging: the merge head's 14 edge features and "
             "its MLP; tree: average linkage (higra) and the ultrametric; writing: the PNGs and the .mat. Ratio: eager "
             f"torch's time over this path's (higher is faster). **The machine has {os.cpu_count()} cores, shared with "
             f"other jobs (load average {load:.1f} after the paired runs)**: wall figures are what that load allowed.\n"]
    for threads in args.thread_counts:
        lines += [f"\n## {threads} thread(s)\n", "| stage | " + " | ".join(paths) + " | folded ratio | onnxruntime ratio |",
                  "|---|" + "---:|" * (len(paths) + 2)]
        for s in stages:
            e = med[threads, "eager torch"][s]
            vals = [med[threads, p][s] for p in paths]
            lines.append(f"| {s} | " + " | ".join(f"{v:.3f}" for v in vals)
                         + f" | {e / max(vals[1], 1e-9):.2f} | {e / max(vals[2], 1e-9):.2f} |")
    lines += ["\n## Start-up (fresh process, default threads)\n",
              "| path | import s | load s | first image s | total s | torch imported |", "|---|---:|---:|---:|---:|---|"]
    for p in paths:
        a, b, c, ti = start[p]
        lines.append(f"| {p} | {a:.2f} | {b:.2f} | {c:.2f} | {a + b + c:.2f} | {'yes' if ti else 'no'} |")
    lines += [f"\n## `hiseg predict` on the {len(ims)} images, start-up and writing included (default threads)\n",
              "| path | wall s | s per image |", "|---|---:|---:|"]
    for p in ("folded torch", "onnxruntime"):
        lines.append(f"| {p} (`-c {'DIR' if p == 'onnxruntime' else 'bsds500_ensemble'}`) | {cli[p]:.2f} | "
                     f"{cli[p] / len(ims):.3f} |")
    if photo:
        lines += ["\n## A 12 MP photograph (4000x3000 JPEG), `hiseg predict`, start-up included\n",
                  "| path | wall s |", "|---|---:|"]
        lines += [f"| {p} | {v:.2f} |" for p, v in photo.items()]
    print(write_stamped(args.table, "\n".join(lines)).read_text())


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    from hiseg.models.weights import Weights

    try:
        default = str(Weights.default().path())
    except FileNotFoundError:
        default = None
    ap.add_argument("--checkpoint", default=default)
    ap.add_argument("--images", default=None, help="folder of .jpg images (e.g. BSDS500 val)")
    ap.add_argument("--n", type=int, default=10)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--on-boundary", action="store_true")
    ap.add_argument("--workers", type=int, nargs="+", default=None,
                    help="throughput of `hiseg predict --workers N` for these N (see above)")
    ap.add_argument("--table", default=None, help="also write the table here (--workers mode: default "
                    "benchmarks/results/predict.md)")
    ap.add_argument("--archs", action="store_true", help="the whole predict path per image of each boundary "
                    "architecture at scales 1 and 0.5+1 (see above)")
    ap.add_argument("--deploy", default=None, metavar="DIR", help="eager vs folded torch vs onnxruntime on the "
                    "model exported into DIR (see above)")
    ap.add_argument("--thread-counts", type=int, nargs="+", default=[1, 2])
    ap.add_argument("--photo", action="store_true", help="--deploy: also a 12 MP photograph")
    args = ap.parse_args()
    if args.deploy:
        args.table = args.table or str(ROOT / "benchmarks" / "results" / "predict_deploy.md")
        return deploy(args)
    if args.archs:
        torch.set_num_threads(args.threads)
        if args.images is None and BSDS_VAL.is_dir():
            args.images = str(BSDS_VAL)
        args.table = args.table or str(ROOT / "benchmarks" / "results" / "predict_archs.md")
        return compare_archs(args)
    if args.workers:
        args.table = args.table or str(ROOT / "benchmarks" / "results" / "predict.md")
        return throughput(args)
    torch.set_num_threads(args.threads)
    seg = (Segmenter.from_checkpoint(args.checkpoint, device=args.device)
           if args.checkpoint else Segmenter.classical(device=args.device))
    ims = images(args)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        seg.segment(ims[0][1])  # warm-up
        for name, im in ims:
            t0 = time.perf_counter()
            res = seg.segment(im)
            t1 = time.perf_counter()
            write_outputs(tmp, name, res, im)
            t2 = time.perf_counter()
            rows.append(dict(res.timings, writing=t2 - t1, total=t2 - t0))
    med = {k: float(np.median([r[k] for r in rows])) for k in rows[0]}
    what = f"checkpoint {Path(args.checkpoint).name}" if args.checkpoint else "classical path (colour gradient + 50 fitting iterations)"
    lines = [f"# hiseg predict, {what}, {len(ims)} images {ims[0][1].shape[1]}x{ims[0][1].shape[0]}, "
             f"device {args.device}, torch threads {args.threads}\n", "| stage | seconds per image |", "|---|---:|"]
    lines += [f"| {k} | {med.get(k, 0.0):.3f} |" for k in ("network", "superpixels", "hierarchy", "writing", "total")]
    if args.device.startswith("cuda") and seg.model is not None:
        x = torch.stack([torch.from_numpy(im.transpose(2, 0, 1)) for _, im in ims if im.shape == ims[0][1].shape])
        x = x.to(args.device)
        with torch.no_grad():
            seg.model(x)
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            for _ in range(5):
                seg.model(x)
            torch.cuda.synchronize()
        lines.append(f"\nBatched network on {args.device}: {(time.perf_counter() - t0) / 5 / len(x) * 1e3:.1f} ms per image")
    text = stamped("\n".join(lines))
    print(text)
    if args.table:
        Path(args.table).parent.mkdir(parents=True, exist_ok=True)
        Path(args.table).write_text(text)


if __name__ == "__main__":
    main()
