#!/usr/bin/env bash
# Fill the git-ignored .gpu/ that experiments/gpu/gpu_session.sh's device run carries (carry=[".gpu"]):
#   site.tar.xz         higra and jsonargparse (+ its signature extras) for the CUDA machine's Python 3.12, from
#                       ../shared/gpu/wheels, unpacked, higra's C++ headers left out, xz-compressed (~6 MiB
#                       instead of 12 MiB of wheels): the machine has no network and lacks both;
#   bsds500_train.npz   BSDS500 train for the pixel stage (hiseg.data.edges.pack_edge_dataset: the original
#                       JPEG bytes and the annotators' boundary counts, ~15 MiB; load_edge_dataset gives the
#                       folder's exact arrays); SPLITS=train+val writes bsds500_trainval.npz instead (~23 MiB:
#                       train and val, each image tagged with its split, so gpu_session.sh's SPLIT=train reads
#                       its train images from it too: one file serves both, bsds500_train.npz is removed, and
#                       later runs with the default SPLITS leave it so);
#   BSDS500/            the first VAL_IMAGES (10) val images and their ground truth: the pixel stage's validation.
# Then it prints what a device call would send (tracked and untracked files + .gpu/) against the 64 MiB limit
# and fails when that is over. Existing outputs are kept (FORCE=1 rebuilds them).
# usage (repository root, the project's Python): bash experiments/gpu/prepare_gpu.sh
# environment: GPU_DIR (.gpu), WHEELS (../shared/gpu/wheels), BSDS (../shared/data/BSDS500), VAL_IMAGES (10),
#   SPLITS (train), FORCE (0), PY (python3), LIMIT_MIB (64)
set -euo pipefail
GPU_DIR=${GPU_DIR:-.gpu}
WHEELS=${WHEELS:-../shared/gpu/wheels}
BSDS=${BSDS:-../shared/data/BSDS500}
VAL_IMAGES=${VAL_IMAGES:-10}
SPLITS=${SPLITS:-train}
FORCE=${FORCE:-0}
PY=${PY:-python3}
LIMIT_MIB=${LIMIT_MIB:-64}
if [ "$GPU_DIR" = .gpu ] && ! git check-ignore -q .gpu/site.tar.xz; then
  echo "prepare_gpu: .gpu/ is not git-ignored: add /.gpu/ to .gitignore first" >&2; exit 2
fi
mkdir -p "$GPU_DIR"
fresh() { [ "$FORCE" = 1 ] || [ ! -e "$1" ]; }

if fresh "$GPU_DIR/site.tar.xz"; then
  ls "$WHEELS"/*.whl >/dev/null || { echo "prepare_gpu: no wheels in $WHEELS" >&2; exit 2; }
  $PY - "$WHEELS" "$GPU_DIR/site.tar.xz" <<'PYEOF'
import io, lzma, sys, tarfile, zipfile
from pathlib import Path
wheels, out = sorted(Path(sys.argv[1]).glob("*.whl")), Path(sys.argv[2])
tmp = out.with_name(out.name + ".part")
skip = ("higra/lib/include/", "higra/include/")  # C++ headers: not needed to import higra
try:
    with lzma.open(tmp, "wb", preset=9) as xz, tarfile.open(fileobj=xz, mode="w") as tar:
        for whl in wheels:  # a wheel is a zip of its installed files: unpacking it installs it
            with zipfile.ZipFile(whl) as z:
                for info in z.infolist():
                    if info.is_dir() or info.filename.startswith(skip):
                        continue
                    data = z.read(info)
                    ti = tarfile.TarInfo(info.filename)
                    ti.size, ti.mode = len(data), 0o755 if info.filename.endswith(".so") or ".so." in info.filename else 0o644
                    tar.addfile(ti, io.BytesIO(data))
    tmp.replace(out)
finally:
    tmp.unlink(missing_ok=True)
print(f"{out}: {out.stat().st_size / 2**20:.1f} MiB from {len(wheels)} wheels")
PYEOF
fi

for split in $SPLITS; do
  name=$([ "$split" = train ] && echo bsds500_train.npz || echo bsds500_trainval.npz)
  if [ "$name" = bsds500_train.npz ] && [ -f "$GPU_DIR/bsds500_trainval.npz" ]; then
    echo "prepare_gpu: $GPU_DIR/bsds500_trainval.npz holds train too: no bsds500_train.npz"; continue
  fi
  if fresh "$GPU_DIR/$name"; then
    $PY -c 'import sys; from hiseg.data.edges import pack_edge_dataset as p; \
o = p(sys.argv[1], sys.argv[2].split("+"), sys.argv[3]); print(f"{o}: {o.stat().st_size / 2**20:.1f} MiB")' \
      "$BSDS" "$split" "$GPU_DIR/$name"
  fi
  [ "$name" = bsds500_trainval.npz ] && rm -f "$GPU_DIR/bsds500_train.npz"  # one file serves both splits
done

if fresh "$GPU_DIR/BSDS500/images/val"; then
  rm -rf "$GPU_DIR/BSDS500"
  src=$BSDS; [ -d "$src/data/images" ] && src=$src/data
  mkdir -p "$GPU_DIR/BSDS500/images/val" "$GPU_DIR/BSDS500/groundTruth/val"
  for img in $(ls "$src/images/val" | grep -iE '\.(jpg|jpeg|png)$' | sort | head -n "$VAL_IMAGES"); do
    cp "$src/images/val/$img" "$GPU_DIR/BSDS500/images/val/"
    cp "$src/groundTruth/val/${img%.*}.mat" "$GPU_DIR/BSDS500/groundTruth/val/"
  done
fi

# what a device call sends: the working tree (tracked and untracked, not ignored) and the carried folder
$PY - "$GPU_DIR" "$LIMIT_MIB" <<'PYEOF'
import os, subprocess, sys
gpu, limit = sys.argv[1], float(sys.argv[2])
files = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], capture_output=True,
                       check=True).stdout.decode().split("\0")
tree = sum(os.path.getsize(f) for f in files if f and os.path.isfile(f)) / 2**20
carried = sum(os.path.getsize(os.path.join(d, f)) for d, _, fs in os.walk(gpu) for f in fs) / 2**20
total = tree + carried
print(f"a device call sends {tree:.1f} MiB of working tree + {carried:.1f} MiB of {gpu}/ = {total:.1f} MiB "
      f"(limit {limit:.0f} MiB)")
if total > limit:
    sys.exit(f"prepare_gpu: {total:.1f} MiB is over the device tool's {limit:.0f} MiB: lower VAL_IMAGES, pack "
             "train only, or move large tracked files (experiments/state/*.ckpt) out of the tree")
PYEOF
