#!/usr/bin/env bash
# CPU pilot of issue 33 (item 5): the pixel-difference network (pdc_boundary_net) against
# compact_boundary_net, at about the same parameter count and the SAME crops budget, before GPU
# minutes are spent on either. Both run the pixel stage of configs/bsds500_pixel.yaml (same loss,
# same device-side augmentation, BSDS500 train, seed 0) with the same overrides:
#   crops of CROP=160 px, BATCH=8 per step, STEPS=1000 steps (8,000 crops), AdamW lr 2e-3 with
#   100 warm-up steps then cosine to 2%, one thread (OMP_NUM_THREADS=1), validation (boundary F of
#   the UCM through the module's pipeline: boundary watershed + average linkage) on the first
#   VAL_IMAGES=20 val images every VAL_EVERY=250 steps (epochs of 500 steps: the crops drawn do not
#   depend on VAL_EVERY).
# Measured first, one thread, crop 160, batch 8 (40 steps each): ~0.8 s CPU per step for the pdc
# network, ~0.5 s for the compact one; on this shared 2-core machine (load 4-8 from other jobs)
# the wall time per step was 2-7x that, hence 1,000 steps rather than the planned 1,500.
#   pdc_boundary_net     {"width": 16}                                              102,909 parameters
#   compact_boundary_net {"width": 17, "blocks": [2, 2, 3, 3], "side_channels": 16} 100,677 parameters
#     (the shipped bsds500 network's shape, narrowed to the same parameter count)
# Then the curves go to experiments/pilots/results/pilot_pdc/curves.{csv,md} and, with EVAL_IMAGES > 0
# (default 100), each last checkpoint is scored on that many val images by experiments/segmentation/bsds_eval.py
# (hiseg predict + hiseg evaluate, THRESHOLDS=33), results copied to experiments/pilots/results/pilot_pdc/.
#
#   nohup experiments/pilots/pilot_pdc.sh [BSDS_ROOT] > runs/pilot_pdc.log 2>&1 &
#
# Resumable: rerun the same command. A finished run leaves runs/pilot_pdc/<arch>/done and is
# skipped; an unfinished one resumes from its last.ckpt (written every 100 steps); an evaluation
# with a results.json is skipped. One training process at a time (the runs are
# sequential), or one process per design, each on its own core: ARCHS=pdc_boundary_net and
# ARCHS=compact_boundary_net (default both) train and evaluate only those; a design is evaluated
# only once its run is done.
# Across machines (runs/ is not committed): STATE=experiments/state/<name> SAVE=1 experiments/pilots/pilot_pdc.sh
# copies each run's newest last.ckpt, its metrics.csv files and its done marker there (to commit; about
# 1.3 MB a run) and exits; a later command with the same STATE restores a run missing from ROOT from it
# first, then resumes it as above.
set -eu
DATA=${1:-/work/shared/data/BSDS500}
STEPS=${STEPS:-1000}; BATCH=${BATCH:-8}; CROP=${CROP:-160}
VAL_EVERY=${VAL_EVERY:-250}; VAL_IMAGES=${VAL_IMAGES:-20}
EVAL_IMAGES=${EVAL_IMAGES:-100}; THRESHOLDS=${THRESHOLDS:-33}
ROOT=${ROOT:-runs/pilot_pdc}
OUT=${OUT:-experiments/pilots/results/pilot_pdc}
export OMP_NUM_THREADS=1 MKL_NUM_THREADS=1
cd "$(dirname "$0")/../.."

arch_kwargs() {
  case "$1" in
    pdc_boundary_net) echo '{"width": 16}' ;;
    compact_boundary_net) echo '{"width": 17, "blocks": [2, 2, 3, 3], "side_channels": 16}' ;;
  esac
}

last_ckpt() {  # the newest version's last.ckpt of a run folder, or nothing
  ls "$1"/csv/version_*/checkpoints/last.ckpt 2>/dev/null | sort -V | tail -1 || true
}

copy_metrics() {  # every version_*/metrics.csv of folder $1 into the same place under $2
  local v
  for v in "$1"/version_*; do
    [ -f "$v/metrics.csv" ] && mkdir -p "$2/${v##*/}" && cp "$v/metrics.csv" "$2/${v##*/}/"
  done
  return 0
}

DESIGNS="pdc_boundary_net compact_boundary_net"  # the designs arch_kwargs knows
ARCHS=${ARCHS:-$DESIGNS}
for arch in $ARCHS; do
  [ -n "$(arch_kwargs "$arch")" ] || { echo "pilot_pdc: ARCHS: unknown design '$arch' ($DESIGNS)" >&2; exit 2; }
done

STATE=${STATE:-}
if [ -n "$STATE" ]; then
  for arch in $DESIGNS; do
    dir=$ROOT/$arch; st=$STATE/$arch
    if [ "${SAVE:-0}" = 1 ]; then  # the run so far into STATE
      last=$(last_ckpt "$dir")
      [ -n "$last" ] || continue
      rm -rf "$st.part" && mkdir -p "$st.part"
      copy_metrics "$dir/csv" "$st.part"
      cp "$last" "$st.part/last.ckpt"
      [ -f "$dir/done" ] && touch "$st.part/done"
      rm -rf "$st" && mv "$st.part" "$st"
      echo "pilot_pdc: $arch saved to $st (from $last)"
    elif [ -z "$(last_ckpt "$dir")" ] && [ -f "$st/last.ckpt" ]; then  # restored: the run resumes from it
      copy_metrics "$st" "$dir/csv"
      newest=$(ls -d "$st"/version_* 2>/dev/null | sort -V | tail -1)
      ckpts=$dir/csv/$(basename "${newest:-version_0}")/checkpoints
      mkdir -p "$ckpts" && cp "$st/last.ckpt" "$ckpts/last.ckpt"
      [ -f "$st/done" ] && touch "$dir/done"
      echo "pilot_pdc: $arch restored from $st"
    fi
  done
  [ "${SAVE:-0}" = 1 ] && exit 0
fi

for arch in $ARCHS; do
  dir=$ROOT/$arch
  if [ -f "$dir/done" ]; then echo "pilot_pdc: $arch already trained ($dir/done)"; continue; fi
  last=$(last_ckpt "$dir")
  resume=(); [ -n "$last" ] && resume=(--ckpt_path "$last")
  echo "pilot_pdc: $arch $(arch_kwargs $arch), $STEPS steps of $BATCH crops of $CROP px${last:+, resuming $last}; $(date)"
  python train.py fit --config configs/bsds500_pixel.yaml \
    --model.arch "$arch" --model.arch_kwargs "$(arch_kwargs $arch)" --model.warmup 100 \
    --data.init_args.data_root "$DATA" --data.init_args.train_split train \
    --data.init_args.crop_size "$CROP" --data.init_args.batch_size "$BATCH" \
    --data.init_args.crops_per_epoch $(( 500 * BATCH )) --data.init_args.num_workers 0 \
    --data.init_args.max_val_images "$VAL_IMAGES" \
    --trainer.max_steps "$STEPS" --trainer.val_check_interval "$VAL_EVERY" \
    --trainer.accelerator cpu --trainer.precision 32-true \
    --trainer.log_every_n_steps 25 --trainer.callbacks.init_args.every_n_train_steps 100 \
    --trainer.default_root_dir "$dir" --trainer.enable_progress_bar false "${resume[@]}"
  touch "$dir/done"
  echo "pilot_pdc: $arch done; $(date)"
done

python experiments/pilots/pilot_pdc_curves.py --runs "$ROOT" --out "$OUT" --batch "$BATCH"

if [ "$EVAL_IMAGES" -gt 0 ]; then
  for arch in $ARCHS; do
    ev=$ROOT/eval_$arch
    if [ -f "$ev/results.json" ]; then echo "pilot_pdc: $arch already evaluated ($ev)"; continue; fi
    if [ ! -f "$ROOT/$arch/done" ]; then echo "pilot_pdc: $arch not trained to its end: not evaluated"; continue; fi
    echo "pilot_pdc: evaluating $arch on $EVAL_IMAGES val images; $(date)"
    python experiments/segmentation/bsds_eval.py --checkpoint "$(last_ckpt "$ROOT/$arch")" --bsds "$DATA" --out "$ev" \
      --n-images "$EVAL_IMAGES" --thresholds "$THRESHOLDS"
    mkdir -p "$OUT"
    cp "$ev/results.md" "$OUT/eval_$arch.md"
    cp "$ev/results.json" "$OUT/eval_$arch.json"
  done
fi
echo "pilot_pdc: finished; $(date)"
