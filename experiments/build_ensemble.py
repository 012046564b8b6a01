"""Write the slim checkpoint of a mean-probability ensemble of trained networks (how
``models/hiseg_bsds500_ensemble.ckpt`` was made): the members' weights
(``hiseg.models.ensemble.MeanProbabilityEnsemble``) and a pipeline without a merging head (a head
is fitted on the ensemble's own maps afterwards, ``experiments/merge_recipe.py``).

    python experiments/build_ensemble.py --members bsds500 runs/cpu_anneal/.../last.ckpt \\
        --pipeline '{"scales": [0.5, 1.0]}' --out runs/ens/ensemble.ckpt
"""
import argparse
import json


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--members", nargs="+", required=True, help="shipped names or checkpoint files (two or more)")
    ap.add_argument("--pipeline", default="{}", help="JSON settings over the first member's pipeline, head removed")
    ap.add_argument("--out", required=True)
    args = ap.parse_args(argv)
    from hiseg.inference import Segmenter
    from hiseg.models import Weights, load_model, save_weights
    from hiseg.models.ensemble import MeanProbabilityEnsemble
    from hiseg.segmentation import Pipeline

    if len(args.members) < 2:
        ap.error(f"--members needs two or more networks, got {len(args.members)}")
    settings = json.loads(args.pipeline)
    if not isinstance(settings, dict):
        ap.error(f"--pipeline must be a JSON object, got {args.pipeline!r}")
    first = Segmenter.from_checkpoint(Weights.resolve(args.members[0]))  # its network and pipeline, read once
    pipeline = Pipeline.from_dict({**first.pipeline.to_dict(), "merge_head": None, **settings})
    ens = MeanProbabilityEnsemble.from_models([first.model] + [load_model(Weights.resolve(m)) for m in args.members[1:]])
    path = save_weights(ens, args.out, metadata={"pipeline": pipeline.to_dict(), "members": list(args.members)})
    print(f"wrote {path}: {len(args.members)} members, pipeline {pipeline.to_dict()}")


if __name__ == "__main__":
    main()
