#!/usr/bin/env bash
# One device call of the v2 fine-tuning ablation (pixel term = the pixel stage's loss):
# a short bf16-mixed training on CUDA, then the arms named in ARMS at equal steps.
# usage (on the CUDA machine, from the repo root, .gpu/ carried):
#   ARMS="pixel average" experiments/gpu_session_v2.sh OUT STEPS MAX_TIME
set -u
OUT=$1; STEPS=$2; MAXT=$3
python3 -m pip install -q --no-index --no-deps --no-compile --target .gpu/site .gpu/*.whl \
  && export PYTHONPATH=$PWD/.gpu/site:$PWD || exit 1
export PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,memory.total --format=csv > $OUT/summary.txt
if [ "${BF16:-1}" = 1 ]; then
  t0=$(date +%s)
  python3 train.py fit --config configs/bsds500_finetune.yaml --model.init_from .gpu/pixel.ckpt \
    --model.pixel_loss edge --data.init_args.data_root .gpu/BSDS500 --data.init_args.num_workers 6 \
    --trainer.precision bf16-mixed --trainer.max_steps 20 --trainer.logger false \
    --trainer.default_root_dir /tmp/bf16 --trainer.enable_progress_bar false > $OUT/bf16.log 2>&1
  echo "bf16 rc=$? seconds=$(( $(date +%s) - t0 ))" >> $OUT/summary.txt
  grep -h "stopped\|Error" $OUT/bf16.log | tail -2 >> $OUT/summary.txt
fi
PIXEL_LOSS=edge bash experiments/gpu_ablation.sh .gpu/pixel.ckpt .gpu/BSDS500 $OUT $STEPS $MAXT
cat $OUT/summary.txt
