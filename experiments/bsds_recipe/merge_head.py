"""Learned region merging with the network frozen (issue 20, item 1).

Stages (each resumable, caches under ``runs/merge_cache/``, git-ignored):

1. ``experiments/bsds_recipe/merge_maps.py``: the shipped network's maps per scale, plain and mirrored.
2. ``features``: for one map setting (``--maps 1`` = scale 1; ``0.5,1f`` = scales 0.5 and 1,
   each averaged with its mirror: exactly :meth:`Pipeline.boundary_map` with ``scales``,
   ``flip``), every train and val image's superpixels, RAG, all :data:`FEATURES`, frontier
   lengths and ground-truth targets (``graph_targets``). Train images also enter mirrored
   (the network's map of the mirrored image) as an augmentation.
3. ``train``: the head through ``average_linkage_ultrametric`` on train only (closest,
   optionally weighted by frontier length, + triplet against the targets, plus an optional
   direct term), AMSGrad, batches of images; ``--context`` for the message-passing head.
   ``--train-splits train,val`` trains the final head of a recipe fixed on val on train
   and val. Its val figures are no measurement and go to ``trainval.jsonl``, never to the
   selection.
4. ``eval``: the head's ucm2 on val from the cache, benchmarked (``hiseg.metrics.bsds``)
   with ``--thresholds``; K-cut covering (plain and size-aware); a JSON line per run
   appended to ``runs/merge_cache/selection.jsonl`` (selection is on val only).
5. ``export``: the shipped checkpoint's network with a pipeline holding the head, as a
   slim checkpoint (``save_weights``).
6. ``report``: writes experiments/bsds_recipe/results/merge_selection/README.md, one row per run.
   ``final``: the 99-threshold table of an exported head (after ``experiments/segmentation/bsds_eval.py``).

    python experiments/bsds_recipe/merge_head.py features --maps 1
    python experiments/bsds_recipe/merge_head.py run --maps 1 --features mean max q50 ... --hidden 32 --out runs/merge_cache/h1
    python experiments/bsds_recipe/merge_head.py export --head runs/merge_cache/h1/head.json --maps 1 --out models/x.ckpt
"""
import argparse
import json
import pickle
import sys
import time
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))

from provenance import write_stamped  # noqa: E402

CACHE = Path("runs/merge_cache")
BSDS = "../shared/data/BSDS500"


def parse_maps(spec: str):
    """'0.5,1f' -> (scales (0.5, 1.0), flip True): a trailing 'f' mirrors every scale."""
    flip = spec.endswith("f")
    return tuple(float(p) for p in spec.rstrip("f").split(",")), flip


def combine(npz, scales, flip, mirrored=False):
    """The map of Pipeline.boundary_map(scales, flip) from the stored per-scale maps;
    ``mirrored``: the mirrored image's map (in its own, mirrored, frame)."""
    acc = 0
    for s in scales:
        a, b = npz[f"s{s:g}"].astype(np.float32), npz[f"s{s:g}f"].astype(np.float32)
        if mirrored:
            a, b = b[:, ::-1], a[:, ::-1]
        acc = acc + (0.5 * (a + b) if flip else a)
    return np.ascontiguousarray(acc / len(scales), dtype=np.float32)


def feature_cache(maps: str) -> Path:
    return CACHE / f"feat_{maps.replace(',', '_')}"


def cmd_features(args):
    from hiseg.data.bsds import find_bsds_root
    from hiseg.data.targets import graph_targets
    from hiseg.core.graph import region_adjacency_graph
    from hiseg.io import load_ground_truth, read_image
    from hiseg.segmentation import Pipeline
    from hiseg.segmentation.pooling import FEATURES, edge_features

    scales, flip = parse_maps(args.maps)
    root = find_bsds_root(args.bsds)
    pipe = Pipeline()
    out = feature_cache(args.maps)
    out.mkdir(parents=True, exist_ok=True)
    names = sorted(FEATURES)
    for split in args.splits:
        f = out / f"{split}.pkl"
        if f.is_file():
            continue
        items = []
        t0 = time.perf_counter()
        for mp in sorted((CACHE / "maps" / split).glob("*.npz")):
            stem = mp.stem
            npz = np.load(mp)
            img = read_image(root / "images" / split / f"{stem}.jpg")
            segs = np.stack(load_ground_truth(root / "groundTruth" / split / f"{stem}.mat")[0])
            for mirrored in ((False, True) if split == "train" else (False,)):
                b = combine(npz, scales, flip, mirrored)
                im = np.ascontiguousarray(img[:, ::-1]) if mirrored else img
                sg = np.ascontiguousarray(segs[:, :, ::-1]) if mirrored else segs
                sp = pipe.make_superpixels(b, im)
                rag = region_adjacency_graph(sp)
                tg = graph_targets(rag, sg)
                items.append({"name": stem, "mirrored": mirrored, "sp": sp.astype(np.int32),
                              "src": rag.graph.sources, "dst": rag.graph.targets, "n": rag.graph.num_vertices,
                              "lengths": rag.frontier_lengths().astype(np.float64),
                              "X": edge_features(rag, b, im, names), "edge_target": tg["edge_target"],
                              "sp_labels": tg["sp_labels"].astype(np.int32)})
        with open(f, "wb") as fh:
            pickle.dump({"features": names, "maps": args.maps, "items": items}, fh)
        print(f"{split}: {len(items)} graphs, {time.perf_counter() - t0:.0f} s", flush=True)


def load_split(maps, split):
    with open(feature_cache(maps) / f"{split}.pkl", "rb") as fh:
        return pickle.load(fh)


def select(data, feats):
    idx = [data["features"].index(f) for f in feats]
    return [it["X"][:, idx] for it in data["items"]]


def train_head(args, train):
    from hiseg.core.graph import batch_graphs
    from hiseg.core import losses
    try:
        from hiseg.core.losses import sample_batch_triplets
    except ImportError:  # before it moved out of hiseg.training.module
        from hiseg.core.losses import sample_batch_triplets
    from hiseg.segmentation.merging import MergeHead
    from hiseg.core.average_linkage import average_linkage_ultrametric

    torch.manual_seed(args.seed)
    rng = np.random.default_rng(args.seed)
    items = train["items"]
    Xs = select(train, args.features)
    allx = np.concatenate(Xs).astype(np.float64)
    head = MergeHead(args.features, args.hidden, "sigmoid", allx.mean(0), allx.std(0) + 1e-6, args.network,
                     context=args.context)
    opt = torch.optim.Adam(head.parameters(), lr=args.lr, amsgrad=True, weight_decay=args.weight_decay)
    sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, args.steps)
    Xt = [torch.from_numpy(x.astype(np.float64)) for x in Xs]
    t0 = time.perf_counter()
    log = []
    for step in range(args.steps):
        bi = rng.choice(len(items), args.batch, replace=False)
        g = batch_graphs([(items[i]["src"], items[i]["dst"], items[i]["n"]) for i in bi])
        x = torch.cat([Xt[i] for i in bi])
        tgt = torch.from_numpy(np.concatenate([items[i]["edge_target"] for i in bi]).astype(np.float64))
        lengths = np.concatenate([items[i]["lengths"] for i in bi])
        w = head(x, g)
        u, h = average_linkage_ultrametric(g, w, lengths, return_hierarchy=True)
        if args.closest_weighting == "none":
            loss = args.closest * losses.closest(u, tgt)
        else:  # edges by frontier length (the benchmarks count pixels), or its square root
            wl = torch.from_numpy(lengths if args.closest_weighting == "length" else np.sqrt(lengths))
            loss = args.closest * ((u - tgt) ** 2 * wl).sum() / wl.sum()
        if args.triplet:
            A = max(items[i]["sp_labels"].shape[0] for i in bi)
            lab = np.full((A, g.num_vertices), -1, np.int64)
            for k, i in enumerate(bi):
                sl = items[i]["sp_labels"]
                lab[: sl.shape[0], g.vertex_ptr[k]:g.vertex_ptr[k + 1]] = sl
            trip = sample_batch_triplets(lab, g.vertex_ptr, args.triplets, rng)
            if trip is not None:
                loss = loss + args.triplet * losses.triplet(h, w, trip, margin=args.margin)
        if args.direct:
            wl = torch.from_numpy(lengths)
            loss = loss + args.direct * ((w - tgt) ** 2 * wl).sum() / wl.sum()
        opt.zero_grad()
        loss.backward()
        opt.step()
        sched.step()
        log.append(loss.item())
        if (step + 1) % max(1, args.steps // 10) == 0:
            print(f"step {step + 1}: loss {np.mean(log[-50:]):.4f} ({time.perf_counter() - t0:.0f} s)", flush=True)
    return head


def val_ucm2(head, val, feats, linkage="average"):
    """Per val image: (name, ucm2, rag) of the head's (or, head None, the frontier mean's) hierarchy."""
    from hiseg.core.graph import region_adjacency_graph
    from hiseg.segmentation.saliency import ucm2_from_rag
    from hiseg.core.average_linkage import average_linkage_ultrametric

    Xs = select(val, feats) if head is not None else None
    mi = val["features"].index("mean")
    for k, it in enumerate(val["items"]):
        rag = region_adjacency_graph(it["sp"])
        with torch.no_grad():
            w = head(torch.from_numpy(Xs[k].astype(np.float64)), rag.graph) if head is not None else \
                torch.from_numpy(it["X"][:, mi].astype(np.float64))
        u, h = average_linkage_ultrametric(rag.graph, w, it["lengths"], return_hierarchy=True)
        yield it["name"], ucm2_from_rag(rag, u.numpy()), rag, h, u.numpy()


def evaluate_val(head, val, feats, out, thresholds, bsds, workers=2, n_images=None):
    from hiseg.data.bsds import find_bsds_root
    from hiseg.io import load_ground_truth, write_ucm2_mat
    from hiseg.metrics.bsds import evaluate
    from hiseg.metrics.kcut import kcut_counts, median_region_count, ucm2_cut_k
    from hiseg.core.cuts import AUTO_MIN_REGION_FRACTION, resolve_min_size
    from hiseg.segmentation.saliency import cut_num_regions

    root = find_bsds_root(bsds)
    out = Path(out)
    pred, gt = out / "ucm2", out / "gt"
    for d in (pred, gt):
        d.mkdir(parents=True, exist_ok=True)
        for f in d.glob("*.mat"):
            f.unlink()
    kc = {"plain": [0.0, 0.0], "size_aware": [0.0, 0.0]}
    for i, (name, ucm2, rag, h, u) in enumerate(val_ucm2(head, val, feats)):
        if n_images and i >= n_images:
            break
        write_ucm2_mat(pred / f"{name}.mat", ucm2)
        (gt / f"{name}.mat").symlink_to((root / "groundTruth" / "val" / f"{name}.mat").resolve())
        segs = load_ground_truth(root / "groundTruth" / "val" / f"{name}.mat")[0]
        k = median_region_count(segs)
        px = resolve_min_size("auto", k, rag.labels.size, AUTO_MIN_REGION_FRACTION)
        for key, lab in (("plain", ucm2_cut_k(ucm2, k)), ("size_aware", cut_num_regions(rag, h, min(k, rag.num_regions), px))):
            c, t = kcut_counts(lab, segs)
            kc[key][0] += c
            kc[key][1] += t
    r = evaluate(pred, gt, n_thresholds=thresholds, workers=workers, fop=False)  # Fop: only in the final run
    b = r["boundary"]
    return {"ods": b["ods"]["f"], "ois": b["ois"]["f"], "ap": b["ap"], "cover_ods": r["covering"]["ods"],
            "cover_ois": r["covering"]["ois"], "cover_best": r["covering"]["best"], "pri_ods": r["pri"]["ods"],
            "pri_ois": r["pri"]["ois"], "vi_ods": r["vi"]["ods"], "vi_ois": r["vi"]["ois"],
            "kcut_plain": kc["plain"][0] / kc["plain"][1], "kcut": kc["size_aware"][0] / kc["size_aware"][1]}


def cmd_run(args):
    torch.set_num_threads(1)
    from hiseg.models.weights import Weights, load_model
    from hiseg.segmentation.merging import network_fingerprint

    args.network = network_fingerprint(load_model(Weights.from_name("bsds500").path()))
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    val = load_split(args.maps, "val")
    t0 = time.perf_counter()
    if args.baseline:
        head = None
    else:
        splits = args.train_splits.split(",")
        if not set(splits) <= {"train", "val"} or "train" not in splits:
            raise SystemExit(f"--train-splits: 'train' or 'train,val', got {args.train_splits!r}")
        train = load_split(args.maps, "train")
        if not args.mirrored:
            train["items"] = [it for it in train["items"] if not it["mirrored"]]
        if "val" in splits:  # val enters unmirrored (its cache holds no mirrored graphs)
            assert val["features"] == train["features"]
            train["items"] = train["items"] + val["items"]
        head = train_head(args, train)
        del train
        (out / "head.json").write_text(json.dumps(head.to_spec()))
    t_train = time.perf_counter() - t0
    res = evaluate_val(head, val, args.features, out / "eval", args.thresholds, args.bsds, n_images=args.n_images)
    rec = {"out": str(out), "maps": args.maps, "baseline": args.baseline, "features": args.features,
           "hidden": args.hidden, "context": args.context, "train_splits": args.train_splits, "steps": args.steps,
           "batch": args.batch, "lr": args.lr, "closest": args.closest, "closest_weighting": args.closest_weighting,
           "triplet": args.triplet, "triplets": args.triplets, "direct": args.direct, "margin": args.margin,
           "weight_decay": args.weight_decay, "mirrored": args.mirrored,
           "seed": args.seed, "thresholds": args.thresholds, "n_images": args.n_images, "train_s": round(t_train, 1),
           **{k: round(v, 4) for k, v in res.items()}}
    if "val" in args.train_splits.split(","):
        # trained on val: its val figures are no measurement, and never enter the selection
        rec["val_trained"] = True
        log = CACHE / "trainval.jsonl"
    else:
        log = CACHE / "selection.jsonl"
    print(json.dumps(rec), flush=True)
    with open(log, "a") as fh:
        fh.write(json.dumps(rec) + "\n")


def cmd_export(args):
    from hiseg.models.weights import Weights, load_checkpoint_file, save_weights, load_model
    from hiseg.segmentation import Pipeline
    from hiseg.segmentation.merging import MergeHead

    src = Weights.from_name("bsds500").path()
    ck = load_checkpoint_file(src)
    model = load_model(src)
    head = MergeHead.from_spec(json.loads(Path(args.head).read_text()))
    head.check_network(model)
    scales, flip = parse_maps(args.maps)
    meta = dict(ck.get("metadata") or {})
    pipe = Pipeline.from_dict(meta["pipeline"]).with_overrides(scales=scales, flip=flip, merge_head=head.to_spec())
    meta["pipeline"] = pipe.to_dict()
    meta.update(json.loads(args.meta))
    p = save_weights(model, args.out, metadata=meta)
    print(f"wrote {p} ({p.stat().st_size / 1024:.0f} KiB)")


def cmd_bench(args):
    """Seconds per 481x321 val image of Segmenter.segment + write_outputs (as
    benchmarks/bench_predict.py) for each checkpoint: wall and process CPU time, medians."""
    import tempfile

    from hiseg.data.bsds import find_bsds_root
    from hiseg.segmentation.outputs import write_outputs
    from hiseg.segmentation.segmenter import Segmenter
    from hiseg.io import read_image

    torch.set_num_threads(args.threads)
    root = find_bsds_root(args.bsds)
    ims = [(p.stem, read_image(p)) for p in sorted((root / "images" / "val").glob("*.jpg"))[: args.n]]
    ims = [(n, im) for n, im in ims if im.shape[:2] == (321, 481)]
    for ck in args.checkpoints:
        seg = Segmenter.from_checkpoint(ck)
        rows = []
        with tempfile.TemporaryDirectory() as tmp:
            seg.segment(ims[0][1])
            for name, im in ims:
                w0, c0 = time.perf_counter(), time.process_time()
                res = seg.segment(im)
                w1, c1 = time.perf_counter(), time.process_time()
                write_outputs(tmp, name, res, im)
                rows.append({"network_wall": res.timings["network"], "hierarchy_wall": res.timings["hierarchy"],
                             "segment_cpu": c1 - c0, "writing_wall": time.perf_counter() - w1,
                             "total_wall": time.perf_counter() - w0, "total_cpu": time.process_time() - c0})
        med = {k: round(float(np.median([r[k] for r in rows])), 3) for k in rows[0]}
        print(json.dumps({"checkpoint": ck, "threads": args.threads, "images": len(ims),
                          "scales": list(seg.pipeline.scales), "flip": seg.pipeline.flip,
                          "head": seg.pipeline.merge_head is not None, **med}), flush=True)


def cmd_variant(args):
    """A checkpoint of the shipped network with another pipeline (for timing)."""
    from hiseg.models.weights import Weights, load_checkpoint_file, load_model, save_weights
    from hiseg.segmentation import Pipeline

    src = Weights.from_name("bsds500").path()
    meta = dict(load_checkpoint_file(src).get("metadata") or {})
    scales, flip = parse_maps(args.maps)
    head = json.loads(Path(args.head).read_text()) if args.head else None
    meta["pipeline"] = Pipeline.from_dict(meta["pipeline"]).with_overrides(scales=scales, flip=flip,
                                                                         merge_head=head).to_dict()
    print(save_weights(load_model(src), args.out, metadata=meta))


def cmd_report(args):
    """experiments/bsds_recipe/results/merge_selection/README.md: every val run of selection.jsonl (one
    row per candidate, its settings and figures), then the runs trained on val as well
    (trainval.jsonl: their val figures are no measurement) and the final tables (``--final``)."""
    cols = ["ods", "ois", "ap", "cover_ods", "cover_ois", "pri_ods", "vi_ods", "vi_ois", "kcut", "kcut_plain"]
    heads = ["Fb ODS", "Fb OIS", "Fb AP", "cover ODS", "cover OIS", "PRI ODS", "VI ODS", "VI OIS",
             "K-cut size-aware", "K-cut closest level"]

    def settings(r):
        if r["baseline"]:
            return "frontier mean (no head)"
        ctx = r.get("context", 0)
        return (f"MLP {r['hidden']}" + (f" + context {ctx}" if ctx else "") + f", {len(r['features'])} feat, "
                f"{r['steps']} steps, batch {r['batch']}, lr {r['lr']:g}, closest {r['closest']:g}"
                + (f" ({r['closest_weighting']})" if r.get("closest_weighting", "none") != "none" else "") + ", "
                f"triplet {r['triplet']:g} (margin {r['margin']:g}), direct {r['direct']:g}, seed {r['seed']}")

    def table(path):
        rows = ["| run | maps | head | thr | " + " | ".join(heads) + " |", "|---" * (len(cols) + 4) + "|"]
        for ln in path.read_text().splitlines():
            r = json.loads(ln)
            name = Path(r["out"]).name + (" (trained on val: not a measurement)" if r.get("val_trained") else "")
            rows.append(f"| {name} | {r['maps']} | {settings(r)} | {r['thresholds']} | "
                        + " | ".join(f"{r[c]:.4f}" for c in cols) + " |")
        return rows

    lines = [args.title, "",
             "Learned merging with the network frozen, selection on BSDS500 **val** (100 images; cached maps of "
             "the frozen shipped network, float16; Fop off in selection): `experiments/bsds_recipe/merge_head.py run` "
             "(`runs/merge_cache/selection.jsonl`, one line per run). Every head here is trained on train "
             "only (400 images, each also mirrored).", ""] + table(CACHE / "selection.jsonl")
    lines.append("\nK-cut size-aware: `cut(n_regions=K)` (min size 0.05/K); closest level: the UCM level closest to "
                 "K regions; K = the median annotator region count. VI: lower is better.")
    tv = CACHE / "trainval.jsonl"
    if tv.is_file():
        lines += ["", "Heads trained on train **and val** (the selected recipe, unchanged): their val figures below are "
                  "**not a measurement** (val was trained on); they only show the run is sane.", ""] + table(tv)
    for f in args.final or []:
        lines += ["", Path(f).read_text().strip()]
    print(write_stamped(args.out, "\n".join(lines)).read_text())


def cmd_final(args):
    """The final val table: ``hiseg evaluate``'s results.json of the checkpoint's ucm2 (99
    thresholds), its K-cut coverings, next to the shipped model's and MCG's rows of
    experiments/segmentation/results/bsds_val_shipped/results.json."""
    def fig(r):
        b, f = r["boundary"], r.get("fop")
        out = [b["ods"]["f"], b["ois"]["f"], b["ap"]]
        out += [f["ods"]["f"], f["ois"]["f"], f["ap"]] if f else [float("nan")] * 3
        return out + [r["covering"]["ods"], r["covering"]["ois"], r["covering"]["best"], r["pri"]["ods"],
                      r["pri"]["ois"], r["vi"]["ods"], r["vi"]["ois"]]

    def row(name, vals, kc):
        cells = ["–" if v is None or v != v else f"{v:.4f}" for v in vals + kc]
        return f"| {name} | " + " | ".join(cells) + " |"

    ship = json.loads(Path(args.shipped).read_text())
    new = json.loads(Path(args.results).read_text())
    new = new.get("hiseg", new)
    kc = json.loads(args.kcut)
    lines = [f"BSDS500 val, 100 images, {args.thresholds} thresholds (`hiseg evaluate`), learned merging next to the "
             "shipped model (experiments/segmentation/results/bsds_val_shipped/) and MCG (SEISM's files, its rules).\n",
             "| method | Fb ODS | Fb OIS | Fb AP | Fop ODS | Fop OIS | Fop AP | cover ODS | cover OIS | cover best "
             "| PRI ODS | PRI OIS | VI ODS | VI OIS | K-cut (size-aware) | K-cut (closest level) |", "|---" * 16 + "|",
             row("hiseg_bsds500 (shipped)", fig(ship["hiseg"]),
                 [ship["kcut_covering"]["hiseg_exact"], ship["kcut_covering"]["hiseg"]]),
             ]
    for label, res, kcut in args.reference or []:  # earlier heads, each a hiseg evaluate results.json + K-cut JSON
        r = json.loads(Path(res).read_text())
        k = json.loads(kcut)
        lines.append(row(label, fig(r.get("hiseg", r)), [k["hiseg_exact"], k["hiseg"]]))
    lines.append(row(args.label, fig(new), [kc["hiseg_exact"], kc["hiseg"]]))
    if "seism" in ship:
        for name, r in ship["seism"].items():
            if "mcg" in name.lower():
                b, f = r.get("boundary"), r.get("fop")
                vals = [b["ods"]["f"], b["ois"]["f"], b["ap"]] if b else [None] * 3
                vals += [f["ods"]["f"], f["ois"]["f"], f["ap"]] if f else [None] * 3
                lines.append(row("MCG (SEISM's results)", vals + [None] * 7, [None, None]))
    lines.append("\n(VI: lower is better. K-cut: K = the median annotator region count; size-aware = "
                 "`cut(n_regions=K)`'s default, min 0.05/K of the image; closest level = the UCM level closest to K.)")
    print(write_stamped(args.out, "\n".join(lines)).read_text())


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    f = sub.add_parser("features")
    f.add_argument("--maps", default="1")
    f.add_argument("--bsds", default=BSDS)
    f.add_argument("--splits", nargs="+", default=["val", "train"])
    r = sub.add_parser("run")
    r.add_argument("--maps", default="1")
    r.add_argument("--bsds", default=BSDS)
    r.add_argument("--out", required=True)
    r.add_argument("--baseline", action="store_true", help="no head: the frontier mean (the shipped pipeline)")
    r.add_argument("--features", nargs="+", default=["mean", "max", "q10", "q50", "q90", "mean_s2", "mean_s4",
                                                     "log_length", "log_size_min", "log_size_max", "lab_dist",
                                                     "texture_diff", "interior_min", "interior_max"])
    r.add_argument("--hidden", type=int, nargs="*", default=[32, 32])
    r.add_argument("--context", type=int, default=0,
                   help="width of the head's message-passing layer over the RAG (0: a plain edge MLP)")
    r.add_argument("--train-splits", default="train",
                   help="'train' (selection: val stays unseen) or 'train,val' (the final head of a recipe "
                        "fixed on val; its val figures are then no measurement, logged to trainval.jsonl)")
    r.add_argument("--steps", type=int, default=600)
    r.add_argument("--batch", type=int, default=8)
    r.add_argument("--lr", type=float, default=3e-3)
    r.add_argument("--weight-decay", type=float, default=1e-4)
    r.add_argument("--closest", type=float, default=1.0)
    r.add_argument("--closest-weighting", choices=["none", "length", "sqrt"], default="none",
                   help="weigh each edge's closest term by 1, its frontier length or its square root")
    r.add_argument("--triplet", type=float, default=0.5)
    r.add_argument("--triplets", type=int, default=2000)
    r.add_argument("--margin", type=float, default=0.2)
    r.add_argument("--direct", type=float, default=0.0)
    r.add_argument("--mirrored", type=int, default=1, help="use the mirrored train graphs too")
    r.add_argument("--seed", type=int, default=0)
    r.add_argument("--thresholds", type=int, default=99)
    r.add_argument("--n-images", type=int, default=None)
    e = sub.add_parser("export")
    e.add_argument("--head", required=True)
    e.add_argument("--maps", default="1")
    e.add_argument("--out", required=True)
    e.add_argument("--meta", default="{}")
    b = sub.add_parser("bench")
    b.add_argument("checkpoints", nargs="+")
    b.add_argument("--bsds", default=BSDS)
    b.add_argument("--n", type=int, default=10)
    b.add_argument("--threads", type=int, default=2)
    v = sub.add_parser("variant")
    v.add_argument("--maps", default="1")
    v.add_argument("--head", default=None)
    v.add_argument("--out", required=True)
    rp = sub.add_parser("report")
    rp.add_argument("--out", default="experiments/bsds_recipe/results/merge_selection/README.md")
    rp.add_argument("--title", default="# Learned merging: selection of the head (issue 20)")
    rp.add_argument("--final", nargs="*", help="markdown files appended (the final tables)")
    fi = sub.add_parser("final")
    fi.add_argument("--results", required=True, help="hiseg evaluate's results.json of the checkpoint's ucm2")
    fi.add_argument("--kcut", required=True, help="JSON {hiseg_exact, hiseg} from bsds_eval's K-cut line")
    fi.add_argument("--shipped", default="experiments/segmentation/results/bsds_val_shipped/results.json")
    fi.add_argument("--thresholds", type=int, default=99)
    fi.add_argument("--out", default="experiments/bsds_recipe/results/merge_val/merge_val.md")
    fi.add_argument("--label", default="**hiseg_bsds500_merge** (head + scales 0.5,1 + flip)")
    fi.add_argument("--reference", nargs=3, action="append", metavar=("LABEL", "RESULTS", "KCUT"),
                    help="another head's row: its label, hiseg evaluate results.json and K-cut JSON")
    args = ap.parse_args()
    {"final": cmd_final, "features": cmd_features, "run": cmd_run, "export": cmd_export, "bench": cmd_bench,
     "variant": cmd_variant, "report": cmd_report}[args.cmd](args)


if __name__ == "__main__":
    main()
