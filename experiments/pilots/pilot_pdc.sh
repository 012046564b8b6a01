#!/usr/bin/env bash
# CPU pilot of issue 33 (finished; setting and tables in experiments/pilots/README.md): pdc_boundary_net against
# compact_boundary_net at the same parameter count and crops budget, configs/bsds500_pixel.yaml's pixel stage with
# STEPS steps of BATCH crops of CROP px, one thread, validation on VAL_IMAGES val images every VAL_EVERY steps; then
# the curves (pilot_pdc_curves.py) and each last checkpoint scored on EVAL_IMAGES val images into OUT.
#   nohup experiments/pilots/pilot_pdc.sh [BSDS_ROOT] > runs/pilot_pdc.log 2>&1 &
# Resumable (rerun it: ROOT/<arch>/done skips a run, else it resumes its last.ckpt); ARCHS picks the designs;
# STATE=experiments/state/<name> SAVE=1 copies the runs there (to commit) and exits; a later STATE restores them.
set -eu
DATA=${1:-/work/shared/data/BSDS500}
STEPS=${STEPS:-1000}; BATCH=${BATCH:-8}; CROP=${CROP:-160}; VAL_EVERY=${VAL_EVERY:-250}; VAL_IMAGES=${VAL_IMAGES:-20}
EVAL_IMAGES=${EVAL_IMAGES:-100}; THRESHOLDS=${THRESHOLDS:-33}; STATE=${STATE:-}; SAVE=${SAVE:-0}
ROOT=${ROOT:-runs/pilot_pdc}; OUT=${OUT:-experiments/pilots/results/pilot_pdc}
export OMP_NUM_THREADS=1 MKL_NUM_THREADS=1; cd "$(dirname "$0")/../.."
DESIGNS="pdc_boundary_net compact_boundary_net"
declare -A KW=([pdc_boundary_net]='{"width": 16}' [compact_boundary_net]='{"width": 17, "blocks": [2, 2, 3, 3], "side_channels": 16}')
ARCHS=${ARCHS:-$DESIGNS}
for arch in $ARCHS; do [ -n "${KW[$arch]:-}" ] || { echo "pilot_pdc: ARCHS: unknown design '$arch' ($DESIGNS)" >&2; exit 2; }; done
last_ckpt() { ls "$1"/csv/version_*/checkpoints/last.ckpt 2>/dev/null | sort -V | tail -1 || true; }
copy_metrics() {  # every version_*/metrics.csv of folder $1 into the same place under $2
  for v in "$1"/version_*; do [ -f "$v/metrics.csv" ] && mkdir -p "$2/${v##*/}" && cp "$v/metrics.csv" "$2/${v##*/}/"; done; return 0
}
for arch in ${STATE:+$DESIGNS}; do
  dir=$ROOT/$arch; st=$STATE/$arch; last=$(last_ckpt "$dir")
  if [ "$SAVE" = 1 ] && [ -n "$last" ]; then  # the run so far into STATE
    rm -rf "$st.part" && mkdir -p "$st.part" && copy_metrics "$dir/csv" "$st.part" && cp "$last" "$st.part/last.ckpt"
    [ -f "$dir/done" ] && touch "$st.part/done"
    rm -rf "$st" && mv "$st.part" "$st" && echo "pilot_pdc: $arch saved to $st (from $last)"
  elif [ "$SAVE" != 1 ] && [ -z "$last" ] && [ -f "$st/last.ckpt" ]; then  # restored: the run resumes from it
    copy_metrics "$st" "$dir/csv"; newest=$(ls -d "$st"/version_* 2>/dev/null | sort -V | tail -1)
    ckpts=$dir/csv/$(basename "${newest:-version_0}")/checkpoints
    mkdir -p "$ckpts" && cp "$st/last.ckpt" "$ckpts/last.ckpt" && { [ ! -f "$st/done" ] || touch "$dir/done"; }
    echo "pilot_pdc: $arch restored from $st"
  fi
done
[ -n "$STATE" ] && [ "$SAVE" = 1 ] && exit 0
for arch in $ARCHS; do
  dir=$ROOT/$arch; [ -f "$dir/done" ] && { echo "pilot_pdc: $arch already trained ($dir/done)"; continue; }
  last=$(last_ckpt "$dir"); resume=(); [ -n "$last" ] && resume=(--ckpt_path "$last")
  echo "pilot_pdc: $arch ${KW[$arch]}, $STEPS steps of $BATCH crops of $CROP px${last:+, resuming $last}; $(date)"
  python train.py fit --config configs/bsds500_pixel.yaml --model.arch "$arch" --model.arch_kwargs "${KW[$arch]}" \
    --model.warmup 100 --data.init_args.data_root "$DATA" --data.init_args.train_split train \
    --data.init_args.crop_size "$CROP" --data.init_args.batch_size "$BATCH" --data.init_args.crops_per_epoch $(( 500 * BATCH )) \
    --data.init_args.num_workers 0 --data.init_args.max_val_images "$VAL_IMAGES" --trainer.max_steps "$STEPS" \
    --trainer.val_check_interval "$VAL_EVERY" --trainer.accelerator cpu --trainer.precision 32-true \
    --trainer.log_every_n_steps 25 --trainer.callbacks.init_args.every_n_train_steps 100 \
    --trainer.default_root_dir "$dir" --trainer.enable_progress_bar false "${resume[@]}"
  touch "$dir/done" && echo "pilot_pdc: $arch done; $(date)"
done
python experiments/pilots/pilot_pdc_curves.py --runs "$ROOT" --out "$OUT" --batch "$BATCH"
for arch in $([ "$EVAL_IMAGES" -gt 0 ] && echo "$ARCHS"); do
  ev=$ROOT/eval_$arch; if [ -f "$ev/results.json" ]; then echo "pilot_pdc: $arch already evaluated ($ev)"; continue; fi
  if [ ! -f "$ROOT/$arch/done" ]; then echo "pilot_pdc: $arch not trained to its end: not evaluated"; continue; fi
  echo "pilot_pdc: evaluating $arch on $EVAL_IMAGES val images; $(date)"
  python experiments/segmentation/bsds_eval.py --checkpoint "$(last_ckpt "$ROOT/$arch")" --bsds "$DATA" --out "$ev" \
    --n-images "$EVAL_IMAGES" --thresholds "$THRESHOLDS"
  mkdir -p "$OUT" && cp "$ev/results.md" "$OUT/eval_$arch.md" && cp "$ev/results.json" "$OUT/eval_$arch.json"
done
echo "pilot_pdc: finished; $(date)"
