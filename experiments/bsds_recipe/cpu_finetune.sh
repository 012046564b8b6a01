#!/usr/bin/env bash
# Background CPU fine-tuning (configs/bsds500_finetune_cpu.yaml), resumable:
#   nohup taskset -c 1 experiments/bsds_recipe/cpu_finetune.sh [INIT_WEIGHTS] [BSDS_ROOT] > runs/cpu_finetune.log 2>&1 &
# INIT_WEIGHTS: the pixel stage's weights (default models/pixel_stage.ckpt, from
# python -m hiseg.edge_training); BSDS_ROOT default datasets/BSDS500.
# Resumes from runs/cpu_finetune/checkpoints/last.ckpt, or from experiments/state/cpu_finetune_last.ckpt where
# present (step 2,830, archived out of the tree: experiments/state/README.md restores it).
# One thread: leaves a core free. The validation curve: python experiments/bsds_recipe/cpu_finetune_curve.py
set -u
INIT=${1:-models/pixel_stage.ckpt}; DATA=${2:-datasets/BSDS500}
export OMP_NUM_THREADS=${THREADS:-1} MKL_NUM_THREADS=${THREADS:-1}
last=runs/cpu_finetune/checkpoints/last.ckpt
[ -f "$last" ] || last=experiments/state/cpu_finetune_last.ckpt
resume=(); [ -f "$last" ] && resume=(--ckpt_path "$last")
exec python train.py fit --config configs/bsds500_finetune.yaml --config configs/bsds500_finetune_cpu.yaml \
  --model.init_from "$INIT" --data.init_args.data_root "$DATA" "${resume[@]}"
