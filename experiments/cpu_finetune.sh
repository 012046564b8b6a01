#!/usr/bin/env bash
# Background CPU fine-tuning (configs/bsds500_finetune_cpu.yaml), resumable:
#   nohup experiments/cpu_finetune.sh INIT_WEIGHTS BSDS_ROOT > runs/cpu_finetune.log 2>&1 &
# INIT_WEIGHTS: the pixel stage's weights (python -m hiseg.edge_training). A second call
# resumes from runs/cpu_finetune/checkpoints/last.ckpt. One thread: leaves a core free.
# The validation curve: python experiments/cpu_finetune_curve.py (-> experiments/results/).
set -u
INIT=$1; DATA=$2
export OMP_NUM_THREADS=${THREADS:-1} MKL_NUM_THREADS=${THREADS:-1}
last=runs/cpu_finetune/checkpoints/last.ckpt
resume=(); [ -f "$last" ] && resume=(--ckpt_path "$last")
exec python train.py fit --config configs/bsds500_finetune.yaml --config configs/bsds500_finetune_cpu.yaml \
  --model.init_from "$INIT" --data.init_args.data_root "$DATA" "${resume[@]}"
