"""Benchmark a trained checkpoint on BSDS500 val, next to gPb-owt-ucm, and export it.

    python experiments/segmentation/bsds_eval.py --checkpoint runs/bsds500/.../best.ckpt \\
        --bsds ../shared/data/BSDS500 --out experiments/segmentation/results/bsds_val [--export models/x.ckpt]
        [--baseline] [--n-images 100] [--thresholds 99]

1. optionally exports the network as a slim, self-describing checkpoint
   (``hiseg.models.weights.save_weights``: state dict + architecture + the superpixel
   settings and training metadata; loads with ``weights_only=True``);
2. runs ``hiseg predict`` on the val images (ucm2 ``.mat`` files), timing each stage;
3. runs the Python BSDS benchmark (``hiseg evaluate``: Fb, covering, PRI, VI and Fop) on
   them and, with ``--baseline``, on the gPb-owt-ucm ucm2 files of the same images, and
   reads SEISM's published per-image results of gPb-owt-ucm and MCG
   (``../shared/data/bench/seism``, when present; SEISM's rules, see
   :mod:`hiseg.metrics.seism`) for the same images;
4. writes ``OUT/results.md`` (a table of both, stamped: ``benchmarks/provenance.py``) and
   ``OUT/results.json``.
"""
import argparse
import json
import shutil
import sys
import time
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))

from provenance import write_stamped  # noqa: E402


def pipeline_summary(pipeline) -> dict:
    """The pipeline's settings for a log or a table: a merging head by its shape and network, not
    its weights (``results.json`` keeps them all)."""
    d = pipeline.to_dict()
    head = d.get("merge_head")
    if isinstance(head, dict):
        d["merge_head"] = {"features": len(head.get("features", [])), "hidden": head.get("hidden"),
                           "context": head.get("context", 0), "network": head.get("network")}
    return d


def export(ckpt, path, extra_meta):
    from hiseg.models.weights import load_checkpoint_file, load_model, save_weights

    ck = load_checkpoint_file(ckpt)
    model = load_model(str(ckpt))
    meta = {"data": dict(ck.get("datamodule_hyper_parameters") or {}),
            "training": {k: v for k, v in (ck.get("hyper_parameters") or {}).items()
                         if isinstance(v, (str, int, float, bool, type(None), dict, list))},
            "epoch": int(ck.get("epoch", -1)), "global_step": int(ck.get("global_step", -1))}
    meta["data"] = {k: (list(v) if isinstance(v, tuple) else v) for k, v in meta["data"].items()}
    pipeline = (ck.get("hyper_parameters") or {}).get("pipeline")
    if pipeline:  # the segmentation settings the model was trained with travel with it
        from hiseg.segmentation import Pipeline

        meta["pipeline"] = Pipeline.from_dict(pipeline, source=str(ckpt)).to_dict()
    meta.update(extra_meta)
    return save_weights(model, path, metadata=meta)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--checkpoint", required=True)
    ap.add_argument("--bsds", required=True, help="BSDS500 root (with data/images/val or images/val)")
    ap.add_argument("--out", required=True)
    ap.add_argument("--export", default=None, help="write the slim checkpoint here")
    ap.add_argument("--meta", default="{}", help="extra JSON metadata for the exported checkpoint")
    ap.add_argument("--baseline", action="store_true",
                    help="also evaluate gPb-owt-ucm (ucm2/val), and list SEISM's gPb-owt-ucm and MCG figures")
    ap.add_argument("--seism", default=None,
                    help="SEISM result folders (default: ../shared/data/bench/seism beside the BSDS root)")
    ap.add_argument("--no-boundary", action="store_true",
                    help="skip the boundary benchmark (Fb), the slow part: regions and Fop only")
    ap.add_argument("--n-images", type=int, default=100)
    ap.add_argument("--thresholds", type=int, default=99)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--scales", type=float, nargs="+", default=None, help="override the pipeline's scales")
    ap.add_argument("--flip", action=argparse.BooleanOptionalAction, default=None,
                    help="override the pipeline's flip (each scale's map averaged with its mirror's)")
    ap.add_argument("--linkage", default=None, help="override the pipeline's linkage")
    ap.add_argument("--superpixels", default=None, help="override the pipeline's superpixels")
    args = ap.parse_args()
    torch.set_num_threads(2)

    from hiseg.data.bsds import find_bsds_root
    from hiseg.io import read_image
    from hiseg.segmentation.outputs import write_outputs
    from hiseg.segmentation.segmenter import Segmenter
    from hiseg.metrics.bsds import evaluate

    root = find_bsds_root(args.bsds)
    out = Path(args.out)
    ckpt = args.checkpoint
    if args.export:
        ckpt = str(export(args.checkpoint, args.export, json.loads(args.meta)))
        print(f"exported {ckpt} ({Path(ckpt).stat().st_size / 1024:.0f} KiB)")
    images = sorted((root / "images" / "val").glob("*.jpg"))[: args.n_images]
    names = [p.stem for p in images]
    pred = out / "ucm2"
    gt = out / "gt"
    for d in (pred, gt):
        shutil.rmtree(d, ignore_errors=True)
        d.mkdir(parents=True)
    for n in names:
        (gt / f"{n}.mat").symlink_to((root / "groundTruth" / "val" / f"{n}.mat").resolve())
    from hiseg.io import load_ground_truth
    from hiseg.metrics.kcut import kcut_counts, median_region_count, ucm2_cut_k

    seg = Segmenter.from_checkpoint(ckpt)
    seg.pipeline = seg.pipeline.with_overrides(scales=args.scales, flip=args.flip, linkage=args.linkage,
                                               superpixels=args.superpixels)
    print("pipeline:", pipeline_summary(seg.pipeline))
    kcut = {"hiseg_exact": [0.0, 0.0], "hiseg": [0.0, 0.0], "gpb_owt_ucm": [0.0, 0.0]}
    ucm_dir = root.parent / "ucm2" / "val" if (root.parent / "ucm2").is_dir() else root / "ucm2" / "val"
    times = []
    for p in images:
        img = read_image(p)
        t0 = time.perf_counter()
        res = seg.segment(img)
        t1 = time.perf_counter()
        write_outputs(pred, p.stem, res, img)
        segs = load_ground_truth(root / "groundTruth" / "val" / f"{p.stem}.mat")[0]
        k = median_region_count(segs)
        for key, lab in (("hiseg_exact", res.cut(n_regions=min(k, res.rag.num_regions))),
                         ("hiseg", ucm2_cut_k(res.ucm2, k))):
            c, t_ = kcut_counts(lab, segs)
            kcut[key][0] += c
            kcut[key][1] += t_
        if (ucm_dir / f"{p.stem}.mat").is_file():
            import scipy.io
            c, t_ = kcut_counts(ucm2_cut_k(scipy.io.loadmat(ucm_dir / f"{p.stem}.mat")["ucm2"], k), segs)
            kcut["gpb_owt_ucm"][0] += c
            kcut["gpb_owt_ucm"][1] += t_
        times.append(dict(res.timings, writing=time.perf_counter() - t1, total=time.perf_counter() - t0))
    for f in pred.glob("*.png"):
        f.unlink()
    tmed = {k: float(np.median([t[k] for t in times])) for k in times[0]}
    print("predict seconds per image (median):", {k: round(v, 3) for k, v in tmed.items()})
    kc = {k: (v[0] / v[1] if v[1] else float("nan")) for k, v in kcut.items()}
    print("K-cut covering:", kc)
    results = {"kcut_covering": kc, "pipeline": seg.pipeline.to_dict(), "hiseg": evaluate(pred, gt, n_thresholds=args.thresholds, workers=args.workers,
                                boundary=not args.no_boundary),
               "predict_seconds": tmed, "n_images": len(names), "thresholds": args.thresholds}
    if args.baseline:
        base = out / "gpb"
        shutil.rmtree(base, ignore_errors=True)
        base.mkdir()
        for n in names:
            (base / f"{n}.mat").symlink_to((ucm_dir / f"{n}.mat").resolve())
        results["gpb_owt_ucm"] = evaluate(base, gt, n_thresholds=args.thresholds, workers=args.workers,
                                          boundary=not args.no_boundary)

    seism_rows = {}
    if args.baseline:
        from hiseg.metrics.seism import read_seism_table, fb_dataset
        from hiseg.metrics.summary import fop_dataset

        sdir = Path(args.seism) if args.seism else root.parent.parent / "bench" / "seism"
        if not (sdir / "val_ids.txt").is_file():
            sdir = root.parent / "bench" / "seism"
        if (sdir / "val_ids.txt").is_file():
            ids = (sdir / "val_ids.txt").read_text().split()
            pick = [ids.index(n) for n in names]
            for method, label in (("MCG", "MCG (SEISM's results)"), ("gPb-UCM", "gPb-owt-ucm (SEISM's results)")):
                if (sdir / method).is_dir():
                    th, _, fb = read_seism_table(sdir / method, "fb")
                    _, _, fo = read_seism_table(sdir / method, "fop")
                    seism_rows[label] = {"boundary": fb_dataset(th, fb[pick]),
                                         "fop": fop_dataset(th, fo[pick], names, False)}
            results["seism"] = seism_rows
        else:
            print(f"no SEISM results in {sdir}: MCG row left out")

    def cell(r, *path):
        try:
            for k in path:
                r = r[k]
            return f"{r:.4f}"
        except (KeyError, TypeError):
            return "–"

    def row(name, r):
        cols = [("boundary", "ods", "f"), ("boundary", "ois", "f"), ("boundary", "ap"),
                ("fop", "ods", "f"), ("fop", "ois", "f"), ("fop", "ap"),
                ("covering", "ods"), ("covering", "ois"), ("covering", "best"),
                ("pri", "ods"), ("pri", "ois"), ("vi", "ods"), ("vi", "ois")]
        return f"| {name} | " + " | ".join(cell(r, *c) for c in cols) + " |"

    lines = [f"BSDS500 val, {len(names)} images, {args.thresholds} thresholds (hiseg's Python benchmark; "
             "SEISM rows: SEISM's own per-image files, its rules)\n",
             "| method | Fb ODS | Fb OIS | Fb AP | Fop ODS | Fop OIS | Fop AP | cover ODS | cover OIS | cover best "
             "| PRI ODS | PRI OIS | VI ODS | VI OIS |", "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
             row(f"hiseg ({Path(args.checkpoint).name})", results["hiseg"])]
    if "gpb_owt_ucm" in results:
        lines.append(row("gPb-owt-ucm", results["gpb_owt_ucm"]))
    for label, r in seism_rows.items():
        lines.append(row(label, r))
    lines.append(f"\nK-cut covering (K = median annotator region count; closest level of each UCM): "
                 f"hiseg {kc['hiseg']:.4f} (exact K-region cut {kc['hiseg_exact']:.4f}), "
                 f"gPb-owt-ucm {kc['gpb_owt_ucm']:.4f}")
    lines.append(f"pipeline: {pipeline_summary(seg.pipeline)}")
    lines.append("\n(VI: lower is better.) predict, seconds per image (median): "
                 + ", ".join(f"{k} {v:.3f}" for k, v in tmed.items()))
    write_stamped(out / "results.md", "\n".join(lines))
    def summary(v):  # dataset figures and per-threshold curves; per-image tables stay out
        return {kk: {f: x for f, x in v[kk].items() if f != "per_image"}
                for kk in ("boundary", "fop", "covering", "pri", "vi") if kk in v}

    keep = {k: (v if k in ("predict_seconds", "n_images", "thresholds", "kcut_covering", "pipeline")
                else summary(v))
            for k, v in results.items() if k != "seism"}
    if seism_rows:  # dataset figures only: the curves are SEISM's files, in ../shared/data/bench/seism
        keep["seism"] = {label: {kk: {f: x for f, x in r[kk].items() if f in ("ods", "ois", "ap")} for kk in r}
                         for label, r in seism_rows.items()}
    (out / "results.json").write_text(json.dumps(keep, indent=1, default=float))
    print("\n".join(lines))


if __name__ == "__main__":
    main()
