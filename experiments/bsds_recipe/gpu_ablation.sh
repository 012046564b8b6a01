#!/usr/bin/env bash
# The loss ablation of the BSDS recipe at equal budget, run on the CUDA machine:
# from the same pixel-stage weights, fine-tune for the same number of steps with
#   pixel loss only | closest+triplet through single linkage | closest+triplet through average linkage
# (every arm rebuilds superpixels from its own predictions, as at inference).
# usage: [ARMS="pixel single average"] [PIXEL_LOSS=edge] \
#        experiments/bsds_recipe/gpu_ablation.sh PIXEL_CKPT BSDS_ROOT OUT [STEPS] [MAX_TIME]
# PIXEL_LOSS: the fine-tuning pixel term (model.pixel_loss): "edge" (the pixel stage's own
# loss, the v2 ablation) or "balanced_bce" (the first ablation, 140 steps, models/README.md).
set -u
CK=$1; DATA=$2; OUT=$3; STEPS=${4:-100}; MAXT=${5:-00:00:01:50}
ARMS=${ARMS:-"pixel single average"}; PIXEL_LOSS=${PIXEL_LOSS:-balanced_bce}
common="--config configs/bsds500_finetune.yaml --model.init_from $CK --data.init_args.data_root $DATA \
 --model.pixel_loss $PIXEL_LOSS --data.init_args.num_workers 6 --trainer.max_steps $STEPS \
 --trainer.max_time $MAXT --trainer.enable_progress_bar false"
for arm in $ARMS; do
  case $arm in
    pixel) extra="--model.closest_weight 0 --model.triplet_weight 0" ;;
    single) extra="--model.pipeline.linkage single" ;;
    average) extra="" ;;
    *) echo "unknown arm $arm"; exit 2 ;;
  esac
  rm -rf /tmp/abl_$arm   # a stale last.ckpt would be picked up instead of this run's
  t0=$(date +%s)
  python3 train.py fit $common --trainer.logger false --trainer.default_root_dir /tmp/abl_$arm $extra > $OUT/$arm.log 2>&1
  rc=$?
  cp "$(ls -t $(find /tmp/abl_$arm -name 'last*.ckpt') | head -1)" $OUT/$arm.ckpt
  echo "$arm rc=$rc seconds=$(( $(date +%s) - t0 ))" >> $OUT/summary.txt
  grep -h "global_step\|stopped" $OUT/$arm.log | tail -2 >> $OUT/summary.txt
done
