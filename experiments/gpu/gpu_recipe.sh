#!/usr/bin/env bash
# The GPU recipe of issue 20, one device command (< 9 min on one H100/H200), resumable:
#   1. a larger from-scratch pixel stage on BSDS500 train+val (configs/bsds500_pixel.yaml,
#      compact_boundary_net width 48, blocks [1, 2, 2, 3]: 675k parameters, chosen on the CPU by
#      throughput, benchmarks/results/pixel_arch.md), bf16-mixed, for PIXEL_MINUTES of this command
#      (a run stopped by the clock resumes where it stopped from RESUME);
#   2. once the pixel stage has reached its step budget: the learned-merging head with the network
#      frozen (experiments/bsds_recipe/merge_recipe.py: train.py fit --config configs/bsds500_merge_head.yaml, maps at
#      scales 0.5, 1 + flip, the head recipe selected on val by experiments/bsds_recipe/merge_head.py, trained on
#      train+val), exported as one checkpoint for hiseg predict.
# Defaults: 5 min of pixel stage per command, then ~4 min of merging once the 9000 steps are done. Measured on an
# H200 (2026-11-27, benchmarks/results/gpu.md): ~305 crops/s, not the ~1100 projected, so 9000 steps take about
# 16 min over several resumed commands (channels-last and the sync-free NaN guard, added since, are unmeasured).
# The train-only twin stands at step 5,721: SPLIT=train MERGE=0 experiments/gpu/gpu_recipe.sh $OUT
# experiments/state/gpu_twin_pixel_last.ckpt
# Everything the next command needs comes back in OUT (at most 8 files): pixel_last.ckpt,
# pixel_metrics.csv, recipe.log, summary.txt and, at the end, hiseg_gpu_merge.ckpt.
#
# usage (repo root; on the CUDA machine .gpu/ holds the wheels and BSDS500, see ../shared/gpu/README.md):
#   here, once:  mkdir -p .gpu/BSDS500 && cp ../shared/gpu/wheels/*.whl .gpu/ \
#                && cp -r ../shared/data/BSDS500/data/images ../shared/data/BSDS500/data/groundTruth .gpu/BSDS500/
#   there:       experiments/gpu/gpu_recipe.sh $OUT [RESUME_PIXEL_CKPT]   (device run with carry [".gpu"])
# environment: BSDS (default .gpu/BSDS500), PIXEL_MINUTES (5), MERGE_MINUTES (4: the merging stage runs
#   only when the command has that much left of its 9 minutes), PIXEL_STEPS (budget of the whole
#   pixel stage, 9000 steps of 32 crops), ARCH (JSON arch_kwargs), BATCH (32), WORKERS (8),
#   SPLIT (train+val: the shipped model; train: its twin, whose val figures are a measurement),
#   MERGE (1; 0: stop after the pixel stage, e.g. to run the merging stage on another machine),
#   TINY=1 (a CPU test of the whole chain in a minute or two: 4 images, tiny crops and network),
#   CONFIG (configs/bsds500_pixel.yaml; ARCH='' keeps the config's network), PIXEL_SECONDS (60 * PIXEL_MINUTES),
#   TRAIN_DATA (a hiseg.data.edges.pack_edge_dataset file to train from instead of BSDS's folder),
#   CURVE (the resumed run's curve so far; default pixel_metrics.csv next to the resumed checkpoint),
#   TRAIN_ARGS (more train.py arguments for the pixel stage, split at spaces, e.g.
#   --trainer.callbacks+=hiseg.training.callbacks.CompileNetwork)
set -euo pipefail
OUT=$1; RESUME=${2:-}
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
BSDS=${BSDS:-.gpu/BSDS500}
PIXEL_MINUTES=${PIXEL_MINUTES:-5}
PIXEL_SECONDS=${PIXEL_SECONDS:-$(( 60 * PIXEL_MINUTES ))}
CONFIG=${CONFIG:-configs/bsds500_pixel.yaml}
TRAIN_DATA=${TRAIN_DATA:-}
PIXEL_STEPS=${PIXEL_STEPS:-9000}
ARCH=${ARCH-'{"width": 48, "blocks": [1, 2, 2, 3], "side_channels": 16}'}
BATCH=${BATCH:-32}
WORKERS=${WORKERS:-8}
SPLIT=${SPLIT:-train+val}
case "$SPLIT" in train|train+val) ;; *) echo "gpu_recipe: SPLIT must be train or train+val, got '$SPLIT'" >&2; exit 2;; esac
MERGE=${MERGE:-1}
MERGE_MINUTES=${MERGE_MINUTES:-4}   # what the merging stage needs; it waits for the next command otherwise
if [ -z "${WORK:-}" ]; then  # the runs' folders (a caller may name it, to rescue a checkpoint; it removes it then)
  WORK=$(mktemp -d)
  # removed when the command succeeds (its files are in OUT); kept after a failure: its periodic checkpoint
  trap 'rc=$?; if [ $rc = 0 ]; then rm -rf "$WORK"; else echo "gpu_recipe: the runs are kept in $WORK" >&2; fi' EXIT
fi
START=$(date +%s)
export PYTHONUNBUFFERED=1
PY=${PY:-python3}
if ! $PY -c 'import higra, jsonargparse' 2>/dev/null && ls .gpu/*.whl >/dev/null 2>&1; then
  # the CUDA machine: higra and jsonargparse from wheels (../shared/gpu/README.md)
  $PY -m pip install -q --no-index --no-deps --no-compile --target .gpu/site .gpu/*.whl
  export PYTHONPATH=$PWD/.gpu/site:$PWD
fi
log() { echo "[$(date -u +%T)] $*" | tee -a "$OUT/summary.txt"; }
log "gpu_recipe: OUT=$OUT RESUME=${RESUME:-none} SPLIT=$SPLIT $($PY -c 'import torch; print(torch.cuda.get_device_name(0) if torch.cuda.is_available() else "cpu")')"

EXTRA=(); PRECISION=bf16-mixed
if [ "${TINY:-0}" = 1 ]; then
  EXTRA=(--data.init_args.limit_images 4 --data.init_args.crop_size 64 --data.init_args.crops_per_epoch 16
         --data.init_args.max_val_images 2 --model.warmup 2)
  BATCH=4; WORKERS=0; PIXEL_STEPS=${PIXEL_STEPS_TINY:-8}; ARCH='{"width": 8, "blocks": [1, 1, 1, 1], "side_channels": 4}'
  PRECISION=32-true
fi
$PY -c 'import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)' || PRECISION=32-true

# ---------------------------------------------------------------- 1. pixel stage (train+val)
RESUME_ARGS=()
[ -n "$RESUME" ] && RESUME_ARGS=(--ckpt_path "$RESUME")
[ -n "$ARCH" ] && RESUME_ARGS+=(--model.arch_kwargs "$ARCH")
[ -n "$TRAIN_DATA" ] && RESUME_ARGS+=(--data.init_args.train_data "$TRAIN_DATA")
CURVE=${CURVE:-${RESUME:+$(dirname "$RESUME")/pixel_metrics.csv}}
# Lightning's max_time counts the whole run: a resumed run restores the training time already spent
# (the Timer's state in the checkpoint), so this command's PIXEL_MINUTES come on top of it
SPENT=0
[ -n "$RESUME" ] && SPENT=$($PY -c "import sys, torch; c = torch.load(sys.argv[1], map_location='cpu', weights_only=True); \
print(int(c.get('callbacks', {}).get('Timer', {}).get('time_elapsed', {}).get('train', 0)))" "$RESUME")
LIMIT=$(( SPENT + PIXEL_SECONDS ))
MAX_TIME=$(printf '00:%02d:%02d:%02d' $(( LIMIT / 3600 )) $(( LIMIT % 3600 / 60 )) $(( LIMIT % 60 )))
t0=$(date +%s)
$PY train.py fit --config "$CONFIG" \
  --data.init_args.data_root "$BSDS" --data.init_args.train_split "$SPLIT" \
  --data.init_args.batch_size "$BATCH" --data.init_args.num_workers "$WORKERS" \
  --trainer.precision "$PRECISION" \
  --trainer.max_steps "$PIXEL_STEPS" --trainer.max_time "$MAX_TIME" \
  --trainer.limit_val_batches 10 --trainer.default_root_dir "$WORK/pixel" --trainer.enable_progress_bar false \
  "${EXTRA[@]}" "${RESUME_ARGS[@]}" ${TRAIN_ARGS:-} >> "$OUT/recipe.log" 2>&1 || { log "pixel stage failed"; tail -30 "$OUT/recipe.log"; exit 1; }
last=$(ls "$WORK"/pixel/csv/version_*/checkpoints/last.ckpt | tail -1)
cp "$last" "$OUT/pixel_last.ckpt"
# the curve so far: the resumed run's rows after the carried ones (the validation curve of the stage)
$PY experiments/gpu/gpu_choices.py curve "$OUT/pixel_metrics.csv" "$CURVE" "$(dirname "$(dirname "$last")")/metrics.csv" 2>> "$OUT/recipe.log"
step=$($PY experiments/gpu/gpu_choices.py step "$OUT/pixel_last.ckpt")
secs=$(( $(date +%s) - t0 ))
log "pixel stage: step $step / $PIXEL_STEPS after ${secs} s in this command (max_time $MAX_TIME, ${SPENT} s spent before)"
if [ "$step" -lt "$PIXEL_STEPS" ]; then
  log "pixel stage not finished: rerun with RESUME=$OUT/pixel_last.ckpt (carried back)"
  exit 0
fi

# ---------------------------------------------------------------- 2. learned merging, network frozen
if [ "$MERGE" = 0 ]; then
  log "pixel stage finished (MERGE=0: no merging stage in this command)"
  exit 0
fi
if [ "${TINY:-0}" != 1 ] && [ $(( $(date +%s) - START + 60 * MERGE_MINUTES )) -gt 540 ]; then
  log "pixel stage finished; the merging stage needs ~${MERGE_MINUTES} min: rerun with RESUME=$OUT/pixel_last.ckpt"
  exit 0
fi
MERGE="$WORK/merge"
N=()
[ "${TINY:-0}" = 1 ] && N=(--recipe '{"steps": 4, "batch": 2}')
$PY experiments/bsds_recipe/merge_recipe.py --checkpoint "$OUT/pixel_last.ckpt" --bsds "$BSDS" --work "$MERGE" \
  --out "$OUT/hiseg_gpu_merge.ckpt" --splits "$([ "$SPLIT" = train ] && echo train || echo train,val)" --workers "$WORKERS" "${N[@]}" >> "$OUT/recipe.log" 2>&1 \
  || { log "merging stage failed"; tail -30 "$OUT/recipe.log"; exit 1; }
log "merging head: $OUT/hiseg_gpu_merge.ckpt after $(( $(date +%s) - t0 )) s in all"
