#!/usr/bin/env bash
# Anneal the GPU recipe's train-only twin on the CPU, in the background, resumable.
# The twin (experiments/state/gpu_twin_pixel_last.ckpt, compact_boundary_net width 48, 675k parameters)
# stopped at step 5,721 of its 9,000-step cosine schedule when the GPU time ran out: its learning rate was
# still 6.5e-4 (a third of the peak). This finishes the schedule's job cheaply: the same pixel stage
# (configs/bsds500_pixel.yaml, same loss, same augmentation, train only) restarted from its weights at that
# learning rate, no warm-up, cosine decay to ~0 over STEPS steps of BATCH crops (default 400 x 8 = 3,200
# crops, ~10 s per step on one core). Validation (first 10 val images, boundary F of the UCM) every
# 100 steps, for the curve only: the last iterate is used.
#   nohup taskset -c 1 experiments/bsds_recipe/cpu_anneal.sh [BSDS_ROOT] > runs/cpu_anneal.log 2>&1 &
# Resumes from runs/cpu_anneal/csv/version_*/checkpoints/last.ckpt (every 50 steps), or, in a fresh clone, from
# experiments/state/cpu_anneal_last.ckpt where present (the finished 400-step run of 2026-11-27, archived out of the
# tree: experiments/state/README.md restores it; a larger STEPS continues it).
set -eu
DATA=${1:-datasets/BSDS500}
STEPS=${STEPS:-400}; BATCH=${BATCH:-8}
export OMP_NUM_THREADS=${THREADS:-1} MKL_NUM_THREADS=${THREADS:-1}
ROOT=runs/cpu_anneal
INIT=experiments/state/gpu_twin_pixel_last.ckpt
LR=$(python -c "import sys, torch; c = torch.load(sys.argv[1], map_location='cpu', weights_only=True); \
print(c['optimizer_states'][0]['param_groups'][0]['lr'])" "$INIT")
last=$(ls "$ROOT"/csv/version_*/checkpoints/last.ckpt 2>/dev/null | tail -1 || true)
[ -z "$last" ] && [ -f experiments/state/cpu_anneal_last.ckpt ] && last=experiments/state/cpu_anneal_last.ckpt
resume=(); [ -n "$last" ] && resume=(--ckpt_path "$last")
echo "cpu_anneal: from $INIT at lr $LR, $STEPS steps of $BATCH crops${last:+, resuming $last}"
exec python train.py fit --config configs/bsds500_pixel.yaml \
  --data.init_args.data_root "$DATA" --data.init_args.train_split train \
  --data.init_args.batch_size "$BATCH" --data.init_args.num_workers 0 \
  --data.init_args.crops_per_epoch $(( 100 * BATCH )) \
  --model.arch_kwargs '{"width": 48, "blocks": [1, 2, 2, 3], "side_channels": 16}' \
  --model.init_from "$INIT" --model.lr "$LR" --model.warmup 0 --model.final_lr 0.001 \
  --trainer.precision 32-true --trainer.max_steps "$STEPS" --trainer.limit_val_batches 10 \
  --trainer.log_every_n_steps 10 --trainer.callbacks.init_args.every_n_train_steps 50 \
  --trainer.default_root_dir "$ROOT" --trainer.enable_progress_bar false "${resume[@]}"
