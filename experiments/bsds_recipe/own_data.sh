#!/usr/bin/env bash
# The README's own-data figures: 20 BSDS500 train images exported as a user's folder (images +
# one 16-bit label PNG per annotator), the shipped model fine-tuned on it with the README's
# command (configs/folder_finetune.yaml), then the shipped and the fine-tuned model scored with
# `hiseg evaluate` on the first 20 val images (each results.md stamped by benchmarks/provenance.py).
#   nohup nice -n 10 experiments/bsds_recipe/own_data.sh [BSDS_ROOT] [WORK] > runs/own_data.log 2>&1 &
set -euo pipefail
BSDS=${1:-datasets/BSDS500}; WORK=${2:-runs/own_data}
mkdir -p "$WORK"
python - "$BSDS" "$WORK" <<'PY'
import shutil, sys
from pathlib import Path
import cv2, numpy as np
from hiseg.data.bsds import BSDS500
bsds, work = sys.argv[1], Path(sys.argv[2])
for split, n, out in (("train", 20, work / "my_data"), ("val", 20, work / "val20")):
    ds = BSDS500(bsds, split)
    (out / "images").mkdir(parents=True, exist_ok=True)
    (out / "labels").mkdir(parents=True, exist_ok=True)
    (out / "gt").mkdir(parents=True, exist_ok=True)
    for i in range(n):
        name = ds.image_path(i).stem
        shutil.copyfile(ds.image_path(i), out / "images" / ds.image_path(i).name)
        shutil.copyfile(ds.groundtruth_path(i), out / "gt" / (name + ".mat"))
        for a, seg in enumerate(np.asarray(ds[i]["segmentations"])):
            cv2.imwrite(str(out / "labels" / f"{name}_{a}.png"), seg.astype(np.uint16))
    print(f"{split}: {n} images -> {out}")
PY
python train.py fit --config configs/folder_finetune.yaml --data.init_args.data_root "$WORK/my_data" \
  --trainer.default_root_dir "$WORK/train" --trainer.enable_progress_bar false
ck=$(ls "$WORK"/train/tensorboard/version_*/checkpoints/best-*.ckpt 2>/dev/null || ls "$WORK"/train/tensorboard/version_*/checkpoints/last.ckpt)  # the best on the held-out images
ck=$(echo "$ck" | tail -1)
for m in shipped:bsds500 finetuned:$ck; do
  hiseg predict "$WORK/val20/images" --checkpoint "${m#*:}" --out "$WORK/pred_${m%%:*}"
  hiseg evaluate "$WORK/pred_${m%%:*}" --gt "$WORK/val20/gt" --out "$WORK/eval_${m%%:*}"
  python benchmarks/provenance.py "$WORK/eval_${m%%:*}/results.md" --command "experiments/bsds_recipe/own_data.sh $*"
done
