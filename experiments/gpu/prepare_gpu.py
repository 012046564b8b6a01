"""Fill the git-ignored .gpu/ that experiments/gpu/gpu_run.py's device run carries (carry=[".gpu"]):

* ``site.tar.xz``: higra and jsonargparse (+ its signature extras) for the CUDA machine's Python 3.12, from
  ../shared/gpu/wheels, unpacked, higra's C++ headers left out, xz-compressed (~6 MiB instead of 12 MiB of
  wheels): the machine has no network and lacks both;
* ``bsds500_train.npz``: BSDS500 train for the pixel stage (hiseg.data.edges.pack_edge_dataset: the original
  JPEG bytes and the annotators' boundary counts, ~15 MiB; load_edge_dataset gives the folder's exact arrays);
  ``--splits train+val`` writes ``bsds500_trainval.npz`` instead (~23 MiB: train and val, each image tagged
  with its split, so gpu_run.py's ``--split train`` reads its train images from it too: one file serves both,
  bsds500_train.npz is removed, and later runs with the default ``--splits`` leave it so);
* ``BSDS500/``: the first ``--val-images`` (10) val images and their ground truth: the pixel stage's validation.

Then it prints what a device call would send (tracked and untracked files + .gpu/) against the 64 MiB limit
and fails when that is over. Existing outputs are kept (``--force`` rebuilds them).

    python experiments/gpu/prepare_gpu.py [--gpu-dir .gpu] [--wheels ../shared/gpu/wheels]
        [--bsds ../shared/data/BSDS500] [--val-images 10] [--splits train [train+val]] [--force] [--limit-mib 64]

(from the repository root, the project's Python)
"""
from __future__ import annotations

import argparse
import io
import lzma
import os
import shutil
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

HEADERS = ("higra/lib/include/", "higra/include/")  # C++ headers: not needed to import higra


def pack_site(wheels: list[Path], out: Path) -> None:
    """The wheels' installed files (a wheel is a zip of them: unpacking it installs it) as one tar.xz."""
    tmp = out.with_name(out.name + ".part")
    try:
        with lzma.open(tmp, "wb", preset=9) as xz, tarfile.open(fileobj=xz, mode="w") as tar:
            for whl in wheels:
                with zipfile.ZipFile(whl) as z:
                    for info in z.infolist():
                        if info.is_dir() or info.filename.startswith(HEADERS):
                            continue
                        data = z.read(info)
                        ti = tarfile.TarInfo(info.filename)
                        so = info.filename.endswith(".so") or ".so." in info.filename
                        ti.size, ti.mode = len(data), 0o755 if so else 0o644
                        tar.addfile(ti, io.BytesIO(data))
        tmp.replace(out)
    finally:
        tmp.unlink(missing_ok=True)
    print(f"{out}: {out.stat().st_size / 2**20:.1f} MiB from {len(wheels)} wheels")


def copy_val(bsds: Path, dest: Path, n: int) -> None:
    """The first ``n`` val images and their ground truth, in the BSDS500 layout."""
    shutil.rmtree(dest, ignore_errors=True)
    src = bsds / "data" if (bsds / "data" / "images").is_dir() else bsds
    (dest / "images" / "val").mkdir(parents=True)
    (dest / "groundTruth" / "val").mkdir(parents=True)
    images = sorted(p for p in (src / "images" / "val").iterdir() if p.suffix.lower() in (".jpg", ".jpeg", ".png"))
    for img in images[:n]:
        shutil.copy(img, dest / "images" / "val")
        shutil.copy(src / "groundTruth" / "val" / f"{img.stem}.mat", dest / "groundTruth" / "val")


def device_call_mib(gpu: Path) -> tuple[float, float]:
    """What a device call sends: the working tree (tracked and untracked, not ignored) and the carried folder."""
    files = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
                           capture_output=True, check=True).stdout.decode().split("\0")
    tree = sum(os.path.getsize(f) for f in files if f and os.path.isfile(f)) / 2**20
    carried = sum(os.path.getsize(os.path.join(d, f)) for d, _, fs in os.walk(gpu) for f in fs) / 2**20
    return tree, carried


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--gpu-dir", default=".gpu")
    p.add_argument("--wheels", default="../shared/gpu/wheels")
    p.add_argument("--bsds", default="../shared/data/BSDS500")
    p.add_argument("--val-images", type=int, default=10)
    p.add_argument("--splits", nargs="+", default=["train"], choices=("train", "train+val"))
    p.add_argument("--force", action="store_true", help="rebuild what exists")
    p.add_argument("--limit-mib", type=float, default=64)
    a = p.parse_args(argv)
    gpu = Path(a.gpu_dir)
    if a.gpu_dir == ".gpu" and subprocess.run(["git", "check-ignore", "-q", ".gpu/site.tar.xz"]).returncode != 0:
        print("prepare_gpu: .gpu/ is not git-ignored: add /.gpu/ to .gitignore first", file=sys.stderr)
        return 2
    gpu.mkdir(parents=True, exist_ok=True)

    def fresh(path: Path) -> bool:
        return a.force or not path.exists()

    if fresh(gpu / "site.tar.xz"):
        wheels = sorted(Path(a.wheels).glob("*.whl"))
        if not wheels:
            print(f"prepare_gpu: no wheels in {a.wheels}", file=sys.stderr)
            return 2
        pack_site(wheels, gpu / "site.tar.xz")
    for split in a.splits:
        name = "bsds500_train.npz" if split == "train" else "bsds500_trainval.npz"
        if name == "bsds500_train.npz" and (gpu / "bsds500_trainval.npz").is_file():
            print(f"prepare_gpu: {gpu / 'bsds500_trainval.npz'} holds train too: no bsds500_train.npz")
            continue
        if fresh(gpu / name):
            from hiseg.data.edges import pack_edge_dataset

            o = pack_edge_dataset(a.bsds, split.split("+"), gpu / name)
            print(f"{o}: {o.stat().st_size / 2**20:.1f} MiB")
        if name == "bsds500_trainval.npz":
            (gpu / "bsds500_train.npz").unlink(missing_ok=True)  # one file serves both splits
    if fresh(gpu / "BSDS500" / "images" / "val"):
        copy_val(Path(a.bsds), gpu / "BSDS500", a.val_images)
    tree, carried = device_call_mib(gpu)
    total = tree + carried
    print(f"a device call sends {tree:.1f} MiB of working tree + {carried:.1f} MiB of {gpu}/ = {total:.1f} MiB "
          f"(limit {a.limit_mib:.0f} MiB)")
    if total > a.limit_mib:
        print(f"prepare_gpu: {total:.1f} MiB is over the device tool's {a.limit_mib:.0f} MiB: lower --val-images, "
              "pack train only, or move large tracked files (experiments/state/*.ckpt) out of the tree",
              file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
