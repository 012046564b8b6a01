#!/usr/bin/env bash
# One device command for a session that is lent a GPU (issue 33 items 2 and 4), resumable:
#   (a) the benchmark's checks this GPU kind has no result for yet (BENCH=auto; experiments/gpu_choices.py todo
#       reads benchmarks/results/gpu_checks.md and pixel_stage.md), at most BENCH_SECONDS=120 of them, in this
#       order: benchmarks/bench_pixel_stage.py's crops/s of the real step next to its floor for pdc_boundary_net
#       (width 40); tests/test_sync.py's CUDA check that ten steps through Trainer.fit never synchronise;
#       benchmarks/bench_training.py --host-workers 16 (the fine-tuning step's host pool, issue 33 item 3); the
#       network under torch.compile (COMPILE=auto trains with it from then on where it measured >= 1.3x); and
#       compact_boundary_net (the shipped width 32) for comparison. Each command runs, in that order, the checks
#       that fit in what is left of the two minutes (a cheaper later one may run when an earlier one does not fit),
#       later commands the rest, then none; the compile check (~150 s) runs alone, as a command's first check;
#   (b) pdc_boundary_net's pixel stage (configs/bsds500_pdc_pixel.yaml, bf16-mixed, augmentation on the device),
#       on train first (the twin: its val figures are a measurement), through experiments/gpu_recipe.sh
#       (CONFIG, SPLIT=train, MERGE=0), resumed from the committed checkpoint, for the time this command has
#       left, stopped by Lightning's max_time with a final checkpoint (and a LastCheckpoint every 500 steps).
#       Channels-last is used where hiseg.training.steps.channels_last_agrees passes (checked at the fit's start).
# At most 8 files come back in OUT: summary.txt, bench.log (every check's output), pixel_stage.md (the benchmark's
# rows, to append to benchmarks/results/pixel_stage.md), gpu_checks.md (a row per check run, to append to
# benchmarks/results/gpu_checks.md), recipe.log, pixel_last.ckpt, pixel_metrics.csv (the whole
# curve so far; where the stage was cut before gpu_recipe.sh copied its files, the run's last periodic checkpoint
# and the curve up to its step).
# Where the stage trained with torch.compile and failed (not by this command's timeout), the rest of the time
# trains without it from where it got to; where that retry trains, KEEP/compile_failed keeps this machine's later
# commands off compile, and a 'failed' row in OUT/pixel_stage.md (to commit with the benchmark's rows) every later
# session on that GPU kind (where the retry fails too, the cause was not compile: nothing is marked).
#
# Before the session, here (once per checkout; refills the git-ignored .gpu/, about 22 MiB):
#   bash experiments/prepare_gpu.sh
# The session: device `run` calls from the repository root (the working tree, 64 MiB at most, travels with
# the carried .gpu/; prepare_gpu.sh prints the total):
#   1. run(command="bash experiments/gpu_session.sh $OUT", carry=[".gpu"], timeout_s=590)
#      -> about 9.5 min: the benchmark's checks still to do (2 min at most), then the pixel stage for the rest
#         (about 6 min while checks remain, ~8 min once all are committed).
#   2. at once if the reply leaves >= 3.5 min of device time (the machine goes back after 30 s idle):
#      run(command="BENCH=0 BUDGET_SECONDS=150 bash experiments/gpu_session.sh $OUT", carry=[".gpu"], timeout_s=170)
#      -> the pixel stage resumed from where command 1 stopped (its checkpoint and curve stay on the warm machine
#         in KEEP=runs/gpu_session/; a fresh machine resumes from the committed state); then give_back.
#   Then here, from the last reply's files: cp <files_at>/pixel_last.ckpt experiments/state/pdc_pixel_last.ckpt;
#      cp <files_at>/pixel_metrics.csv experiments/state/pdc_pixel_metrics.csv (the whole curve); append every
#      command's pixel_stage.md rows (the benchmark's, a failed compile's) to benchmarks/results/pixel_stage.md
#      and its gpu_checks.md rows to benchmarks/results/gpu_checks.md; commit.
# The next session resumes from experiments/state/pdc_pixel_last.ckpt (RESUME) the same way.
#
# The CUDA machine's Python has no numba (nor a wheel for it here): hiseg.metrics runs its numpy/scipy twins there
# (hiseg/metrics/_kernels_py.py, the same figures, ~3.5x the CPU time); summary.txt's first line says which.
#
# environment: RESUME (unset: the one of STATE=experiments/state/pdc_pixel_last.ckpt and
#   KEEP/pixel_last.ckpt with more steps, KEEP=runs/gpu_session; '' starts afresh), CURVE (the curve so far:
#   the resumed checkpoint's, experiments/state/pdc_pixel_metrics.csv or KEEP's), BUDGET_SECONDS (570: the whole command;
#   the pixel stage gets what the benchmark leaves, less RESERVE_SECONDS=80 for its start and end),
#   BENCH (auto: the checks without a result for this GPU kind, decided by experiments/gpu_choices.py todo; 1: all
#   of them; 0: none), BENCH_SECONDS (120: the benchmark's time, (a)), MEASURE_SECONDS (8 per measurement),
#   COMPILE (auto: train with hiseg.training.callbacks.CompileNetwork when the committed rows and this run's show torch.compile
#   at >= 1.3x the eager crops/s on that GPU, and no try with it failed on this machine: each command compiles
#   again, a minute or so, from the cache on a warm machine; 1 / 0: with / without; COMPILE_CALLBACK: the
#   callback it adds, hiseg.training.callbacks.CompileNetwork), SPLIT (train; train+val once chosen on val),
#   ARCH_NAME (pdc_boundary_net), GPU_DIR (.gpu), PY (python3),
#   TINY=1: a CPU check of the whole chain at a tiny size (BSDS= a BSDS500-layout folder; PIXEL_STEPS_TINY).
set -u
OUT=${1:?usage: experiments/gpu_session.sh OUT}
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
START=$(date +%s)
export PYTHONUNBUFFERED=1
PY=${PY:-python3}
GPU_DIR=${GPU_DIR:-.gpu}
TINY=${TINY:-0}
BUDGET_SECONDS=${BUDGET_SECONDS:-570}
RESERVE_SECONDS=${RESERVE_SECONDS:-80}
BENCH=${BENCH:-auto}
COMPILE=${COMPILE:-auto}
BENCH_SECONDS=${BENCH_SECONDS:-120}
MEASURE_SECONDS=${MEASURE_SECONDS:-8}
SPLIT=${SPLIT:-train}
ARCH_NAME=${ARCH_NAME:-pdc_boundary_net}
PIXEL_CONFIG=configs/bsds500_pdc_pixel.yaml  # the stage's config (its network names the failed-compile row)
STATE=${STATE:-experiments/state/pdc_pixel_last.ckpt}
KEEP=${KEEP:-runs/gpu_session}  # on the device (git-ignored, kept by a warm machine): the last command's end
log() { echo "[$(date -u +%T) +$(( $(date +%s) - START ))s] $*" | tee -a "$OUT/summary.txt"; }

# the checkout's hiseg for every script (benchmarks/*.py put their own folder first on the path)
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}
# torch.compile's cache in the git-ignored runs/, which a warm machine keeps between calls (the carried .gpu/
# is replaced at each call): a second command compiles from it in seconds
export TORCHINDUCTOR_CACHE_DIR=${TORCHINDUCTOR_CACHE_DIR:-$PWD/runs/inductor_cache}
# higra and jsonargparse, which the CUDA machine lacks: prepare_gpu.sh packed them into .gpu/site.tar.xz
if ! $PY -c 'import higra, jsonargparse' 2>/dev/null; then
  [ -f "$GPU_DIR/site.tar.xz" ] || { log "no higra/jsonargparse and no $GPU_DIR/site.tar.xz: run experiments/prepare_gpu.sh"; exit 1; }
  $PY -c 'import sys, tarfile; tarfile.open(sys.argv[1]).extractall(sys.argv[2], filter="data")' \
    "$GPU_DIR/site.tar.xz" "$GPU_DIR/site" || { log "could not unpack $GPU_DIR/site.tar.xz (this Python's lzma?)"; exit 1; }
  export PYTHONPATH=$PWD/$GPU_DIR/site:$PYTHONPATH
fi
if [ -z "${RESUME+set}" ]; then  # the committed state, or this machine's last command if it got further
  RESUME=$($PY experiments/gpu_choices.py newest "$STATE" "$KEEP/pixel_last.ckpt") \
    || RESUME=$([ -f "$STATE" ] && echo "$STATE")  # unreadable: never start afresh by accident
  [ "$RESUME" = "$KEEP/pixel_last.ckpt" ] && CURVE=${CURVE-$KEEP/pixel_metrics.csv}
fi
CURVE=${CURVE-experiments/state/pdc_pixel_metrics.csv}
GPU_NAME=$($PY -c 'import torch; print(torch.cuda.get_device_name(0) if torch.cuda.is_available() else "")' 2>/dev/null)
DEVICE=${GPU_NAME:-cpu}
ITEMS="eager sync host compile compact"
[ "$TINY" = 1 ] && ITEMS="eager compact"  # the CPU has no CUDA sync check, host pool or compile row to measure
CHECK_TABLES=(--results benchmarks/results/pixel_stage.md --results "$KEEP/pixel_stage.md"
              --checks benchmarks/results/gpu_checks.md --checks "$KEEP/gpu_checks.md")
case "$BENCH" in  # each check once per GPU kind: later sessions train instead
  auto) TODO=$($PY experiments/gpu_choices.py todo --device "$DEVICE" --items "$ITEMS" --arch "$ARCH_NAME" \
          "${CHECK_TABLES[@]}" 2>> "$OUT/bench.log") || TODO= ;;  # unreadable tables: train
  1) TODO=$ITEMS ;;
  *) TODO= ;;
esac
log "gpu_session: $( (nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>/dev/null || echo 'no GPU') | head -1); \
$($PY -c 'import torch; print("torch", torch.__version__)'); git $(git rev-parse --short HEAD 2>/dev/null || echo '?'); \
RESUME=${RESUME:-none} SPLIT=$SPLIT BENCH=$BENCH (checks to run: ${TODO:-none}); \
$($PY -c 'import hiseg.metrics.kernels as k; print("numba" if k.HAVE_NUMBA else "no numba: the numpy/scipy metrics")' 2>&1 | tail -1)"

# ---------------------------------------------------------------- (a) the benchmark: BENCH_SECONDS of checks at most
# In this order, each once per GPU kind (a row in OUT/gpu_checks.md however it ended, to commit with
# benchmarks/results/gpu_checks.md; the pixel-stage checks also append their row to OUT/pixel_stage.md):
#   eager    bench_pixel_stage.py: the network to train (width 40) against its floor (issue 33 item 2's goal)
#   sync     tests/test_sync.py's CUDA check that ten steps through Trainer.fit never synchronise, both networks
#   host     bench_training.py --host-workers 16: the fine-tuning step's host pool (item 3's goal; tables in bench.log)
#   compile  the network under torch.compile (default mode): COMPILE=auto trains with it where >= 1.3x eager
#   compact  compact_boundary_net at the shipped width: the comparison row
# A check starts only where its expected time (check_seconds, an estimate before any GPU measured it) fits in
# what is left of BENCH_SECONDS, except a command's first, which may take BENCH_SECONDS or its expected time if
# longer (compile: three compilations, cold); one that does not fit waits for a later command. So a command
# spends at most two minutes on checks (2.5 in the one that measures compile) before training. Limits are hard
# (timeout -k: Lightning only stops at a step's end on SIGTERM).
check_seconds() { [ "$TINY" = 1 ] && { echo 60; return; }; case $1 in compile) echo 150 ;; host) echo 75 ;; *) echo 45 ;; esac; }
if [ "$TINY" = 1 ]; then
  B=(--device cpu --batch 2 --crop 32 --warmup 2 --images 3 --seconds 1)
  NET_KW='{"width": 8, "blocks": [1, 1, 1, 1]}'; COMPACT_KW='{"width": 8}'
else
  B=(--seconds "$MEASURE_SECONDS")
  NET_KW='{"width": 40}'; COMPACT_KW='{"width": 32, "blocks": [2, 2, 3, 3], "side_channels": 16}'
fi
run_check() {  # name, seconds allowed; the check's output goes to bench.log
  case $1 in
    eager) timeout -k 15 "$2" $PY benchmarks/bench_pixel_stage.py "${B[@]}" --arch "$ARCH_NAME" --arch-kwargs "$NET_KW" \
             --results "$OUT/pixel_stage.md" ;;
    compact) timeout -k 15 "$2" $PY benchmarks/bench_pixel_stage.py "${B[@]}" --arch compact_boundary_net \
               --arch-kwargs "$COMPACT_KW" --results "$OUT/pixel_stage.md" ;;
    compile) timeout -k 15 "$2" $PY benchmarks/bench_pixel_stage.py --seconds 6 --compile default --arch "$ARCH_NAME" \
               --arch-kwargs "$NET_KW" --results "$OUT/pixel_stage.md" ;;
    host) timeout -k 15 "$2" $PY benchmarks/bench_training.py --device cuda --threads 16 --batch 16 --wall --host-workers 16 ;;
    sync) timeout -k 15 "$2" $PY -m pytest -q -p no:cacheprovider -o addopts=-ra -k cuda_pixel_stage tests/test_sync.py ;;  # addopts: no xdist there
  esac >> "$OUT/bench.log" 2>&1
}
check_result() {  # name, exit status, seconds allowed: the result cell of its row
  case $2 in
    124|137) echo "timeout after $3 s" ;;
    0) case $1 in
         sync) echo "rc=0: $(tail -1 "$OUT/bench.log")" ;;
         eager|compact|compile) tail -1 "$OUT/pixel_stage.md" | awk -F'|' '{gsub(/ /, "", $4); gsub(/ /, "", $6);
           print "crops/s " $4 ", ratio " $6 " (pixel_stage.md)"}' ;;
         *) echo done ;;
       esac ;;
    *) echo "failed (rc=$2)" ;;
  esac
}
BENCH_START=$(date +%s)
ran=0
for check in $TODO; do
  left=$(( BENCH_SECONDS - ($(date +%s) - BENCH_START) ))
  need=$(check_seconds "$check")
  if [ "$ran" = 1 ] && [ "$need" -gt "$left" ]; then
    log "bench $check: left for a later session (~${need} s expected, ${left} s of BENCH_SECONDS=$BENCH_SECONDS left)"
    continue
  fi
  [ "$left" -lt "$need" ] && left=$need
  echo "== $check ($(date -u +%T), at most ${left} s)" >> "$OUT/bench.log"
  t0=$(date +%s)
  run_check "$check" "$left"
  result=$(check_result "$check" $? "$left")
  result=${result//|//}  # one cell of the table
  secs=$(( $(date +%s) - t0 ))
  [ -f "$OUT/gpu_checks.md" ] || printf '| device | check | result | seconds | date |\n|---|---|---|---:|---|\n' > "$OUT/gpu_checks.md"
  echo "| $DEVICE | $check | $result | $secs | $(date -u +%F) |" >> "$OUT/gpu_checks.md"
  log "bench $check: $result ($secs s)"
  ran=1
done
mkdir -p "$KEEP"  # the next command on this machine reads what this one measured
for f in pixel_stage.md gpu_checks.md; do  # their rows, without the header
  [ -f "$OUT/$f" ] && grep '^| ' "$OUT/$f" | grep -v '^| device |' >> "$KEEP/$f"
done
# ---------------------------------------------------------------- (b) the new network's pixel stage
LEFT=$(( BUDGET_SECONDS - ($(date +%s) - START) - RESERVE_SECONDS ))
if [ "$LEFT" -lt 30 ] && [ "$TINY" != 1 ]; then
  log "only ${LEFT} s left for the pixel stage: not started"
  exit 0
fi
[ -n "$RESUME" ] && [ ! -f "$RESUME" ] && { log "RESUME=$RESUME does not exist"; exit 1; }
if [ "$COMPILE" = auto ]; then
  COMPILE=0
  if [ -f "$KEEP/compile_failed" ]; then
    log "torch.compile: off (a training with it failed on this machine: $KEEP/compile_failed)"
  elif [ "$TINY" != 1 ]; then
    COMPILE=$($PY experiments/gpu_choices.py compile --gain 1.3 --arch "$ARCH_NAME" --device "$GPU_NAME" \
      --results benchmarks/results/pixel_stage.md --results "$KEEP/pixel_stage.md" \
      2>/dev/null || echo 0)
  fi
fi
DATA=() packed=
if [ "$TINY" != 1 ]; then  # train reads bsds500_train.npz, or the train images of bsds500_trainval.npz (it holds both)
  packed=$GPU_DIR/bsds500_trainval.npz
  [ "$SPLIT" = train ] && [ -f "$GPU_DIR/bsds500_train.npz" ] && packed=$GPU_DIR/bsds500_train.npz
  DATA=(BSDS="$GPU_DIR/BSDS500" TRAIN_DATA="$packed")
fi

# one try of the stage for the time left (arguments: 0/1 torch.compile); rc in $rc; where the stage stopped
# before gpu_recipe.sh copied its files (a failure, or this command's timeout), the run's last periodic
# checkpoint and the curve up to it (the curve so far, then this run's rows until its step) go into OUT
stage() {
  local compile=$1 work train_args=""
  work=$(mktemp -d)
  [ "$compile" = 1 ] && train_args="--trainer.callbacks+=${COMPILE_CALLBACK:-hiseg.training.callbacks.CompileNetwork}"
  # a COMPILE_CALLBACK of your own is code outside hiseg: train.py runs it with --trust-config only
  [ "$compile" = 1 ] && [ -n "${COMPILE_CALLBACK:-}" ] && train_args="--trust-config $train_args"
  log "pixel stage: ${LEFT} s of training (${ARCH_NAME}, ${SPLIT}${packed:+ from $packed}, torch.compile: $([ "$compile" = 1 ] && echo on || echo off), RESUME=${RESUME:-none})"
  rm -f "$OUT/pixel_last.ckpt" "$OUT/pixel_metrics.csv"
  env "${DATA[@]}" WORK="$work" CONFIG="$PIXEL_CONFIG" ARCH= SPLIT="$SPLIT" MERGE=0 PIXEL_SECONDS="$LEFT" \
    TRAIN_ARGS="$train_args" \
    PIXEL_STEPS="${PIXEL_STEPS:-30000}" WORKERS="${WORKERS:-4}" CURVE="$CURVE" \
    timeout -k 15 $(( LEFT + RESERVE_SECONDS - 10 )) bash experiments/gpu_recipe.sh "$OUT" ${RESUME:+"$RESUME"}
  rc=$?
  if [ ! -f "$OUT/pixel_last.ckpt" ]; then
    local last
    last=$(ls "$work"/pixel/csv/version_*/checkpoints/last.ckpt 2>/dev/null | tail -1)
    if [ -n "$last" ]; then
      cp "$last" "$OUT/pixel_last.ckpt"
      $PY experiments/gpu_choices.py curve "$OUT/pixel_metrics.csv" --until "$last" "$CURVE" \
        "$(dirname "$(dirname "$last")")/metrics.csv" 2>> "$OUT/recipe.log"
      log "pixel stage stopped (rc=$rc) before its end: its last periodic checkpoint (step $($PY experiments/gpu_choices.py step "$last")) and the curve up to it are in OUT"
    fi
  fi
  rm -rf "$work"
}
stage "$COMPILE"
# torch.compile failed (not this command's timeout): the rest of the time without it, from where it got to. Where
# that retry trains, the failure was compile's: a 'failed' row for the committed table (COMPILE=auto reads it on
# every machine of this GPU kind afterwards) and KEEP/compile_failed for this machine's next commands; where the
# retry fails too, the cause was something else and nothing is marked
if [ "$COMPILE" = 1 ] && [ "$rc" != 0 ] && [ "$rc" != 124 ] && [ "$rc" != 137 ]; then
  compiled_rc=$rc
  # the row names the network as the config builds it (the key COMPILE=auto reads on the next machines)
  CONFIG_KW=$($PY -c 'import json, sys, yaml; print(json.dumps(yaml.safe_load(open(sys.argv[1]))["model"]["arch_kwargs"]))' \
    "$PIXEL_CONFIG" 2>/dev/null || echo "$NET_KW")
  LEFT=$(( BUDGET_SECONDS - ($(date +%s) - START) - RESERVE_SECONDS ))
  rm -rf "$KEEP/rescued"
  if [ -f "$OUT/pixel_last.ckpt" ] && mkdir -p "$KEEP/rescued" && cp "$OUT/pixel_last.ckpt" "$KEEP/rescued/"; then
    RESUME=$KEEP/rescued/pixel_last.ckpt
    [ -f "$OUT/pixel_metrics.csv" ] && cp "$OUT/pixel_metrics.csv" "$KEEP/rescued/" && CURVE=$KEEP/rescued/pixel_metrics.csv
  fi
  if [ "$LEFT" -ge 30 ] || { [ "$TINY" = 1 ] && [ "$LEFT" -gt 0 ]; }; then
    log "torch.compile's try failed (rc=$compiled_rc; recipe.log): retrying without it for ${LEFT} s"
    stage 0
    if [ ! -f "$OUT/pixel_last.ckpt" ] && [ "$RESUME" = "$KEEP/rescued/pixel_last.ckpt" ]; then
      cp "$KEEP/rescued/"* "$OUT/"  # the retry got no checkpoint of its own: the compiled try's comes back
      log "the retry wrote no checkpoint: the compiled try's (rescued) is in OUT"
    fi
    if [ "$rc" = 0 ] || [ "$rc" = 124 ] || [ "$rc" = 137 ]; then
      mkdir -p "$KEEP" && echo "rc=$compiled_rc $(date -u +%FT%TZ)" > "$KEEP/compile_failed"
      echo "| ${GPU_NAME:-cpu} | $ARCH_NAME \`$CONFIG_KW\` training with torch.compile (gpu_session.sh, $(date -u +%F)), compiled (default) | failed (rc=$compiled_rc, recipe.log) | – | – |" \
        >> "$OUT/pixel_stage.md"
    else
      log "the retry without torch.compile failed too (rc=$rc): not compile's failure, nothing marked (recipe.log)"
    fi
  else
    log "torch.compile's try failed (rc=$compiled_rc; recipe.log), ${LEFT} s left: no retry, nothing marked"
  fi
fi
if [ -f "$OUT/pixel_last.ckpt" ] && [ -f "$OUT/pixel_metrics.csv" ]; then  # for the next command on this machine
  mkdir -p "$KEEP" && cp "$OUT/pixel_last.ckpt" "$OUT/pixel_metrics.csv" "$KEEP/"
fi
log "pixel stage rc=$rc; files: $(ls "$OUT" | tr '\n' ' ')"
