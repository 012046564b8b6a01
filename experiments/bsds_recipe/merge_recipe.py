"""Stage 2 of the GPU recipe (``experiments/gpu/gpu_run.py recipe``): the learned-merging head of a new
network, the network frozen, exported as one checkpoint that ``hiseg predict --checkpoint`` runs.

A thin wrapper (issue 30: the head is trained by the training module, not by a loop of its
own): ``python train.py fit --config configs/bsds500_merge_head.yaml`` with the network as
``--model.init_from`` and the recipe's overrides, then the network with the pipeline holding
the trained head (fingerprinted to the network) written by ``save_weights``.

    python experiments/bsds_recipe/merge_recipe.py --checkpoint PIXEL.ckpt --bsds BSDS500 --work /tmp/merge \
        --out hiseg_gpu_merge.ckpt [--splits train|train,val] [--workers 16] [--recipe '{"steps": 4}']
"""
import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

#: the recipe's settings that differ from the config's, as train.py options (``--recipe`` keys)
OPTIONS = {"steps": "--trainer.max_steps", "batch": "--data.init_args.batch_size", "lr": "--model.lr",
           "weight_decay": "--model.weight_decay", "closest": "--model.closest_weight",
           "triplet": "--model.triplet_weight", "triplets": "--model.triplets_per_image", "margin": "--model.margin",
           "seed": "--seed_everything"}


def train_args(args, recipe: dict) -> list:
    """The ``train.py fit`` command line of the stage."""
    from hiseg.models.weights import Weights, read_checkpoint

    unknown = sorted(set(recipe) - set(OPTIONS) - {"scales", "flip"})
    if unknown:
        raise SystemExit(f"--recipe: unknown key(s) {unknown}; known: {sorted(OPTIONS) + ['flip', 'scales']}")
    arch = read_checkpoint(Weights.resolve(args.checkpoint)).hyper_parameters.get("arch") or "compact_boundary_net"
    split = {"train": "train", "train,val": "train+val"}.get(args.splits)
    if split is None:
        raise SystemExit(f"--splits: 'train' or 'train,val', got {args.splits!r}")
    cmd = [sys.executable, str(ROOT / "train.py"), "fit", "--config", str(ROOT / "configs/bsds500_merge_head.yaml"),
           "--model.init_from", str(args.checkpoint), "--model.arch", arch, "--model.host_workers", str(args.workers),
           "--data.init_args.data_root", str(args.bsds), "--data.init_args.train_split", split,
           "--data.init_args.num_workers", str(min(args.workers, 4)), "--trainer.default_root_dir", str(args.work),
           "--trainer.enable_progress_bar", "false"]
    for k, v in recipe.items():
        if k in OPTIONS:
            cmd += [OPTIONS[k], str(v)]
    if {"scales", "flip"} & set(recipe):  # the map setting: the config's pipeline with these two changed
        import yaml

        pipe = yaml.safe_load((ROOT / "configs/bsds500_merge_head.yaml").read_text())["model"]["pipeline"]
        pipe.update({k: recipe[k] for k in ("scales", "flip") if k in recipe})
        cmd += ["--model.pipeline", json.dumps(pipe)]
    return cmd


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--checkpoint", required=True, help="the network (a train.py checkpoint or slim weights)")
    ap.add_argument("--bsds", required=True)
    ap.add_argument("--work", required=True, help="the run's folder (its checkpoints and metrics.csv)")
    ap.add_argument("--out", required=True, help="the exported checkpoint")
    ap.add_argument("--splits", default="train,val", help="the head's training images: train or train,val")
    ap.add_argument("--workers", type=int, default=4, help="host processes (trees, superpixels) and loader workers")
    ap.add_argument("--recipe", default="{}", help=f"JSON overrides of the config: {sorted(OPTIONS)}, scales, flip")
    args = ap.parse_args(argv)
    recipe = json.loads(args.recipe)
    t0 = time.perf_counter()
    subprocess.run(train_args(args, recipe), check=True)
    last = sorted(Path(args.work).glob("csv/version_*/checkpoints/last.ckpt"))[-1]

    from hiseg.segmentation.segmenter import Segmenter
    from hiseg.models.weights import save_weights

    seg = Segmenter.from_checkpoint(last, device="cpu", fold=False)  # saved again: the network as trained
    meta = {"pipeline": seg.pipeline.to_dict(), "recipe": "experiments/gpu/gpu_run.py recipe (configs/bsds500_merge_head.yaml)",
            "merge_head_data": f"BSDS500 {args.splits}", "merge_recipe": recipe, "network": str(args.checkpoint)}
    p = save_weights(seg.model.float().cpu(), args.out, metadata=meta)
    print(f"wrote {p} ({p.stat().st_size / 1024:.0f} KiB) after {time.perf_counter() - t0:.0f} s", flush=True)


if __name__ == "__main__":
    main()
