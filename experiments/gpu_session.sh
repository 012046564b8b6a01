#!/usr/bin/env bash
# One device command for a session that is lent a GPU (issue 20 first, then issue 24's GPU checks):
#   1. the GPU recipe's train-only twin resumed from its committed checkpoint (experiments/gpu_recipe.sh,
#      SPLIT=train MERGE=0; the merging head is fitted on the CPU afterwards: experiments/merge_recipe.py
#      --splits train), for PIXEL_MINUTES of this command;
#   2. the CUDA tests, the training-step benchmark, a bf16-mixed fine-tuning run and predict's per-stage table.
# At most 8 files come back in OUT: pixel_last.ckpt, pixel_metrics.csv, recipe.log, summary.txt, cuda_tests.log,
# bench_training_cuda.md, bf16.log, predict_cuda.md. The next command resumes with RESUME=OUT/pixel_last.ckpt
# (copied into the checkout; git-ignored .gpu/ is carried).
# usage (device run from the repo root, carry [".gpu"], timeout ~590 s; .gpu/ prepared as ../shared/gpu/README.md
# says, plus .gpu/extra/ with hypothesis, sortedcontainers and attrs wheels for Python 3.12 for the tests):
#   bash experiments/gpu_session.sh $OUT
# environment: RESUME (default experiments/state/gpu_twin_pixel_last.ckpt), PIXEL_MINUTES (6), T_RECIPE (410),
#   T_TESTS (55), T_BENCH (50), T_BF16 (35), T_PRED (30): seconds each part may take; TINY=1 for a CPU check.
set -u
OUT=$1
PY=${PY:-python3}
if ! $PY -c 'import higra, jsonargparse, hypothesis' 2>/dev/null; then
  $PY -m pip install -q --no-index --no-deps --no-compile --target .gpu/site .gpu/*.whl .gpu/extra/*.whl || exit 1
  export PYTHONPATH=$PWD/.gpu/site:$PWD
fi
(nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>/dev/null || echo "no nvidia-smi") \
  >> "$OUT/summary.txt"
$PY -c 'import torch; print("torch", torch.__version__)' >> "$OUT/summary.txt"
RESUME=${RESUME-experiments/state/gpu_twin_pixel_last.ckpt}
[ "${TINY:-0}" = 1 ] && RESUME=""  # the tiny network cannot resume the twin
SPLIT=train MERGE=0 PIXEL_MINUTES=${PIXEL_MINUTES:-6} PIXEL_STEPS=${PIXEL_STEPS:-9000} \
  timeout "${T_RECIPE:-410}" bash experiments/gpu_recipe.sh "$OUT" $RESUME
echo "recipe rc=$? at $SECONDS s" >> "$OUT/summary.txt"
timeout "${T_TESTS:-55}" $PY -m pytest -q -p no:cacheprovider -k cuda tests/test_sync.py tests/test_merge_head.py \
  tests/test_ultrametric.py tests/test_segmentation.py tests/test_fitting.py tests/test_cli_faults.py \
  > "$OUT/cuda_tests.log" 2>&1
echo "tests rc=$? at $SECONDS s" >> "$OUT/summary.txt"
timeout "${T_BENCH:-50}" $PY benchmarks/bench_training.py --device cuda --threads 16 --batch 16 --wall \
  > "$OUT/bench_training_cuda.md" 2>&1
echo "bench_training rc=$? at $SECONDS s" >> "$OUT/summary.txt"
timeout "${T_BF16:-35}" $PY train.py fit --config configs/synthetic.yaml --trainer.precision bf16-mixed \
  --trainer.max_steps 30 --trainer.default_root_dir "$(mktemp -d)" --trainer.enable_progress_bar false \
  > "$OUT/bf16.log" 2>&1
echo "bf16 synthetic rc=$? at $SECONDS s" >> "$OUT/summary.txt"
timeout "${T_PRED:-30}" $PY benchmarks/bench_predict.py --device cuda --images .gpu/BSDS500/images/val --n 20 \
  --table "$OUT/predict_cuda.md" > /dev/null 2>&1
echo "predict rc=$? at $SECONDS s" >> "$OUT/summary.txt"
