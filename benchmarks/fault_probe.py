"""Issues 32 and 43's fault probe: walk the families of faults a user meets (concurrent runs, file
names that are not UTF-8, interrupted runs, bad training folders and options, a full disk,
degenerate clustering inputs, HISEG_WEIGHTS_DIR, files that are not images; issue 43: runs killed
with kill -9 and the processes they leave, images declaring a huge size, symlink loops and FIFOs,
checkpoints whose hyper-parameters ask for huge or malformed networks, pickle payloads, configs
that name code, many features in the clustering graph, the wording of reruns; issue 52, tagged
``[52 KIND]`` with what a failure would be: configs that call code by every way they arrive,
loggers aimed at another run's files, hostile config files and run records, tampered exported
folders and graphs, ``hiseg export``'s destination, ``cut(threshold='0.3')``, multi-frame
images; the summary below the table counts each kind's failures) and print a table
``case | verdict``: OK when the outcome is the one a user needs (a correct result, or a clear
error naming the problem with no traceback, nothing half-written), else FAIL and why.

Usage: ``python benchmarks/fault_probe.py [--images N] [--only WORD]``; exit status 1 when a
case fails. ``tests/package/test_reliability.py`` runs it with ``--images 3`` (CI). Each case works in
its own temporary folder; the cases that need separate processes (two runs at once, a run
interrupted) start ``hiseg`` as a user would.
"""
from __future__ import annotations

import argparse
import contextlib
import io
import os
import signal
import subprocess
import sys
import tempfile
import textwrap
import time
import traceback
import warnings
from pathlib import Path

import numpy as np

from provenance import stamp

ROOT = Path(__file__).resolve().parents[1]
BAD = b"bad\xff\xfename.png"
CASES = []
#: What a failing case of issue 52's families would be (its name's tag; the summary counts them).
FAILURE_KINDS = {"callables": "callables called", "data loss": "data loss", "silent": "silent-wrong",
                 "hang": "hangs", "traceback": "tracebacks", "blow-up": "blow-ups"}


def case(name):
    def add(fn):
        CASES.append((name, fn))
        return fn
    return add


class Fail(AssertionError):
    pass


def check(ok, why):
    if not ok:
        raise Fail(why)


# ----------------------------------------------------------------------------- helpers
def photo(folder: Path, name, i=0):
    import cv2

    img = np.zeros((48, 64, 3), np.uint8)
    img[:24, :32], img[24:, 32:], img[:24, 32:] = (200, 30, 30), (20, 90, 200), (30, 200, 60)
    path = os.path.join(os.fsencode(folder), os.fsencode(name))
    with open(path, "wb") as fh:
        fh.write(cv2.imencode(".png", np.roll(img, 3 * i, axis=1))[1].tobytes())


def photos(tmp: Path, names) -> Path:
    d = tmp / "photos"
    d.mkdir()
    for i, n in enumerate(names):
        photo(d, n, i)
    return d


def names(folder) -> list:
    return sorted(os.listdir(os.fsencode(folder))) if os.path.isdir(folder) else []


def hiseg_process(*argv, go=None):
    """``hiseg ARGV`` in a new process; with ``go``, it waits for that file to appear (after
    its imports, having touched ``go.ready<pid>``), so that several start together."""
    code = textwrap.dedent("""
        import os, signal, sys, time
        from pathlib import Path
        from hiseg.cli import main
        # Ctrl-C as in a terminal, also when the probe runs in a background job (whose SIGINT is ignored)
        signal.signal(signal.SIGINT, signal.default_int_handler)
        go = sys.argv[1]
        if go:
            Path(f"{go}.ready{os.getpid()}").touch()
            while not os.path.exists(go):
                time.sleep(0.005)
        sys.exit(main(sys.argv[2:]))
    """)
    env = dict(os.environ, OMP_NUM_THREADS="1")
    return subprocess.Popen([sys.executable, "-c", code, str(go or ""), *map(str, argv)], env=env, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, errors="backslashreplace")


def hiseg_inline(*argv):
    """(exit status, stdout, stderr) of ``hiseg ARGV`` in this process."""
    from hiseg.cli import main

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            rc = main([str(a) for a in argv])
        except SystemExit as e:
            rc = e.code
    return rc, out.getvalue(), err.getvalue()


def train_inline(*argv):
    """(exit status, stderr) of ``python train.py ARGV`` in this process."""
    from hiseg.training.cli import main

    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            main([str(a) for a in argv], default_config=ROOT / "configs" / "synthetic.yaml")
            rc = 0
        except SystemExit as e:
            rc = e.code if isinstance(e.code, int) else 1
            if not isinstance(e.code, int):
                err.write(str(e.code))
    return rc, err.getvalue()


def one_line_error(rc, err, *needles, status=2):
    check(rc == status, f"exit {rc}, expected {status}: {err.strip()[-300:]}")
    check("Traceback" not in err, "a traceback")
    last = err.strip().splitlines()[-1] if err.strip() else ""
    for n in needles:
        check(n in last, f"{n!r} not in {last!r}")


# ----------------------------------------------------------------------------- 1: concurrent runs
@case("two hiseg predicts into one --out at once (--regions 6 and 3)")
def concurrent(tmp, n):
    import cv2

    d = photos(tmp, [f"p{i}.png" for i in range(n)])
    out, go = tmp / "out", tmp / "go"
    procs = [hiseg_process("predict", "--classical", "-q", "--regions", k, d, "-o", out, go=go) for k in (6, 3)]
    deadline = time.time() + 120
    while len(list(tmp.glob("go.ready*"))) < 2:
        check(time.time() < deadline and all(p.poll() is None for p in procs), "a run ended before the start")
        time.sleep(0.01)
    go.touch()
    res = [(p.wait(300), p.communicate()[1]) for p in procs]
    check(sorted(r for r, _ in res) == [0, 2], f"exit statuses {[r for r, _ in res]}")
    loser = res[1][1] if res[0][0] == 0 else res[0][1]
    check(str(out) in loser, f"the losing run does not name the folder: {loser.strip()[-200:]}")
    k = 6 if res[0][0] == 0 else 3
    mixed = [f for f in out.glob("*_labels.png") if int(cv2.imread(str(f), cv2.IMREAD_UNCHANGED).max()) + 1 != k]
    check(not mixed, f"label images of the losing run: {mixed}")


# ----------------------------------------------------------------------------- 2-4: file names
@case("a folder with a non-UTF-8 file name, hiseg predict")
def bad_name(tmp, n):
    d = photos(tmp, [BAD] + [f"p{i}.png" for i in range(n - 1)])
    rc, out, err = hiseg_inline("predict", "--classical", "-q", "--workers", "0", d, "-o", tmp / "o")
    check(rc == 0, f"exit {rc}: {err.strip()[-300:]}")
    got = names(tmp / "o")  # three files per image and the run record (.hiseg-predict.json)
    check(b"bad\xff\xfename.mat" in got and len(got) == 3 * n + 1, f"files: {got}")
    check(not [g for g in got if b".tmp" in g], "temporary files left")


@case("the same with --workers 2")
def bad_name_workers(tmp, n):
    d = photos(tmp, [BAD] + [f"p{i}.png" for i in range(n - 1)])
    p = hiseg_process("predict", "--classical", "-q", "--workers", "2", d, "-o", tmp / "o")
    _, err = p.communicate(timeout=300)
    check(p.returncode == 0, f"exit {p.returncode}: {err.strip()[-300:]}")
    check(len(names(tmp / "o")) == 3 * n + 1, f"files: {names(tmp / 'o')}")


@case("hiseg view on a non-UTF-8 file name")
def bad_name_view(tmp, n):
    d = photos(tmp, [BAD, "good.png"])
    rc, out, err = hiseg_inline("view", "--classical", "-q", d, "-o", tmp / "o")
    check(rc == 0, f"exit {rc}: {err.strip()[-300:]}")
    check(names(tmp / "o") == [b"bad\xff\xfename.html", b"good.html", b"index.html"], str(names(tmp / "o")))


# ----------------------------------------------------------------------------- 5: interrupted predict
@case("a predict interrupted (Ctrl-C) mid-folder, rerun with --resume (other options refused)")
def interrupted(tmp, n):
    d = photos(tmp, [f"p{i}.png" for i in range(max(n, 3))])
    out = tmp / "o"
    argv = ("predict", "--classical", "-q", "--workers", "0", "--regions", "4", d, "-o", out)
    from hiseg.segmentation.outputs import image_done

    stems = [f"p{i}" for i in range(max(n, 3))]
    p = hiseg_process(*argv)
    deadline = time.time() + 300
    # one image complete (not merely a .mat name: a temporary .p0.mat.<random>.tmp.mat is one)
    while not (out.exists() and any(image_done(out, s, True) for s in stems)):
        check(time.time() < deadline and p.poll() is None, "the run ended before it could be interrupted")
        time.sleep(0.002)
    p.send_signal(signal.SIGINT)
    p.communicate(timeout=120)
    check(p.returncode != 0, "the run was not interrupted (it finished before the Ctrl-C landed)")
    check(not [g for g in names(out) if b".tmp" in g], "temporary files left by the interrupted run")
    before = {q.name: q.stat().st_mtime_ns for q in out.iterdir()}
    rc, _, err = hiseg_inline(*[a if a != "4" else "5" for a in argv], "--resume")  # other options: refused
    check(rc == 2 and "was written with --regions 4, this run asks for --regions 5" in err,
          f"--resume --regions 5: exit {rc}: {err.strip()[-300:]}")
    check({q.name: q.stat().st_mtime_ns for q in out.iterdir()} == before, "a refused --resume changed files")
    rc, _, err = hiseg_inline(*argv, "--resume")
    check(rc == 0, f"--resume: exit {rc}: {err.strip()[-300:]}")
    check(all(image_done(out, s, True) for s in stems), "an image left incomplete")


# ----------------------------------------------------------------------------- 6-8: training start-up
def label_folder(root: Path, n: int) -> Path:
    import cv2

    (root / "images").mkdir(parents=True)
    (root / "labels").mkdir()
    for i in range(n):
        img = np.zeros((40, 48, 3), np.uint8)
        lab = np.zeros((40, 48), np.int64)
        img[:, 10 + 5 * i:], lab[:, 10 + 5 * i:] = (200, 60, 30), 1
        cv2.imwrite(str(root / "images" / f"im{i}.png"), img)
        np.save(root / "labels" / f"im{i}.npy", lab)
    return root


def folder_run(tmp, data, *extra):
    return train_inline("fit", "--config", ROOT / "configs" / "folder.yaml", "--data.init_args.data_root", data,
                        "--data.init_args.num_workers", "0", "--data.init_args.crop_size", "32",
                        "--trainer.max_steps", "1", "--model.arch_kwargs", '{"width": 8}',
                        "--trainer.enable_progress_bar", "false", "--trainer.default_root_dir", tmp / "run", *extra)


def nothing_left(tmp):
    left = [p for p in (tmp / "run").rglob("*") if p.is_file()] if (tmp / "run").exists() else []
    check(not left, f"left behind: {left[:3]}")


for _label, _bad, _needle in [
        ("negative (all -1)", lambda p: np.save(p, -np.ones((40, 48), np.int64)), "negative labels"),
        ("float", lambda p: np.save(p, np.zeros((40, 48), np.float32)), "expected an integer array"),
        ("of the wrong size", lambda p: np.save(p, np.zeros((30, 48), np.int64)), "have shape (30, 48)")]:
    def _train_bad_label(tmp, n, bad=_bad, needle=_needle):
        data = label_folder(tmp / "data", 4)
        bad(data / "labels" / "im1.npy")
        rc, err = folder_run(tmp, data)
        one_line_error(rc, err, "im1.npy", needle)
        nothing_left(tmp)
    case(f"training on a folder whose .npy label is {_label}")(_train_bad_label)


@case("training on a 1-image folder")
def train_one_image(tmp, n):
    data = label_folder(tmp / "data", 1)
    rc, err = folder_run(tmp, data)
    one_line_error(rc, err, str(data), "cannot be split")
    nothing_left(tmp)


@case("training with --model.lr -1")
def train_bad_lr(tmp, n):
    data = label_folder(tmp / "data", 4)
    rc, err = folder_run(tmp, data, "--model.lr", "-1")
    one_line_error(rc, err, "model.lr must be > 0")
    nothing_left(tmp)


# ----------------------------------------------------------------------------- 9: a full disk
@case("a checkpoint written on a full disk (ENOSPC halfway)")
def full_disk(tmp, n):
    import builtins
    import errno

    import torch

    from hiseg.training.callbacks import AtomicCheckpointIO

    target = tmp / "ckpts" / "last.ckpt"
    AtomicCheckpointIO().save_checkpoint({"state_dict": {"w": torch.zeros(1000)}, "global_step": 1}, target)
    real_open = builtins.open

    class Half:
        def __init__(self, f):
            self.f = f

        def write(self, b):
            self.f.write(bytes(memoryview(b)[:len(b) // 2]))
            raise OSError(errno.ENOSPC, "No space left on device")

        def __getattr__(self, k):
            return getattr(self.f, k)

        def __enter__(self):
            return self

        def __exit__(self, *a):
            self.f.close()

    def filling(file, mode="r", *a, **k):
        f = real_open(file, mode, *a, **k)
        return Half(f) if "w" in mode and "ckpt" in os.fspath(file) else f
    builtins.open = filling
    try:
        AtomicCheckpointIO().save_checkpoint({"state_dict": {"w": torch.ones(1000)}, "global_step": 2}, target)
        raise Fail("no error")
    except OSError as e:
        check("disk is full" in str(e) and str(target) in str(e), f"message: {e}")
    finally:
        builtins.open = real_open
    check(sorted(p.name for p in target.parent.iterdir()) == ["last.ckpt"], "a temporary file left")
    check(torch.load(target, weights_only=True)["global_step"] == 1, "the previous last.ckpt is not whole")


# ----------------------------------------------------------------------------- 10-11: clustering
@case("UltrametricClustering(3) on 50 identical points")
def identical_points(tmp, n):
    from sklearn.exceptions import ConvergenceWarning

    from hiseg.clustering import UltrametricClustering

    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        labels = UltrametricClustering(n_clusters=3).fit(np.ones((50, 3))).labels_
    check(any(issubclass(x.category, ConvergenceWarning) for x in w), "no ConvergenceWarning")
    check(np.all(labels == 0), "identical points split")


@case('semi-supervised y with "NaN" and "" for unlabelled')
def string_missing(tmp, n):
    from hiseg.clustering import UltrametricClustering

    X = np.random.default_rng(0).normal(size=(30, 2))
    y = ["a"] * 5 + ["NaN"] * 10 + [""] * 10 + ["a"] * 5
    try:
        UltrametricClustering(2, loss="closest+triplet", max_iter=5).fit(X, y)
        raise Fail('"NaN" / "" were taken as classes')
    except ValueError as e:
        check("1 class" in str(e), str(e))


# ----------------------------------------------------------------------------- 12: weights dir
@case("HISEG_WEIGHTS_DIR missing / empty")
def weights_dir(tmp, n):
    from hiseg.models.weights import Weights

    old = os.environ.get("HISEG_WEIGHTS_DIR")
    try:
        os.environ["HISEG_WEIGHTS_DIR"] = str(tmp / "nowhere")
        try:
            Weights.BSDS500.path()
            raise Fail("a missing folder was accepted")
        except FileNotFoundError as e:
            check("HISEG_WEIGHTS_DIR" in str(e), str(e))
        (tmp / "empty").mkdir()
        os.environ["HISEG_WEIGHTS_DIR"] = str(tmp / "empty")
        with warnings.catch_warnings(record=True) as w:
            warnings.simplefilter("always")
            try:
                Weights.BSDS500.path()
            except FileNotFoundError:
                return  # no shipped copy here: the missing-folder half is the check
        check(any("HISEG_WEIGHTS_DIR" in str(x.message) for x in w), "no warning for an empty folder")
    finally:
        if old is None:
            os.environ.pop("HISEG_WEIGHTS_DIR", None)
        else:
            os.environ["HISEG_WEIGHTS_DIR"] = old


# ----------------------------------------------------------------------------- 13: not images
@case("a zero-byte .jpg and a text file named .jpg")
def not_images(tmp, n):
    (tmp / "p").mkdir()
    (tmp / "p" / "empty.jpg").write_bytes(b"")
    (tmp / "p" / "text.jpg").write_text("hello\n")
    rc, out, err = hiseg_inline("predict", "--classical", "-q", tmp / "p", "-o", tmp / "o")
    check(rc == 1 and "Traceback" not in err, f"exit {rc}: {err.strip()[-300:]}")
    check("not an image (0 bytes)" in err and "not a readable image" in err, err.strip()[-400:])
    check("pip install" not in err, "a misleading install hint")


# ----------------------------------------------------------------------------- issue 43
def _faults():
    """tests/_faults.py (the declared-size PNG, the kill -9 harness), shared with the tests."""
    if str(ROOT / "tests") not in sys.path:
        sys.path.insert(0, str(ROOT / "tests"))
    import _faults

    return _faults


def _two_region_ground_truth(tmp, shape, n: int):
    """``tmp/gt`` with ``n`` ground truths of two regions (top and bottom halves of ``shape``) and an
    empty ``tmp/pred``."""
    gt, pred = tmp / "gt", tmp / "pred"
    gt.mkdir()
    pred.mkdir()
    seg = np.ones(shape, np.uint16)
    seg[shape[0] // 2:] = 2
    for k in range(n):
        _ground_truth(gt / f"im{k}.mat", seg)
    return gt, pred


def _ground_truth(path, seg) -> None:
    """A BSDS ground-truth .mat of one annotation, ``seg``."""
    from scipy.io import savemat

    cell = np.empty((1, 1), dtype=object)
    cell[0, 0] = {"Segmentation": seg, "Boundaries": np.zeros_like(seg, np.uint8)}
    savemat(str(path), {"groundTruth": cell})


def _no_survivors(tmp, argv, watch=None):
    run = _faults().kill_busy_run(tmp, argv, watch)
    check(len(run["started"]) >= 2, f"only {len(run['started'])} process(es) started")
    check(not run["left"], f"{len(run['left'])} of its {len(run['started'])} processes alive 15 s after kill -9")
    check(not run["written"], f"written after the main process was gone: {run['written'][:3]}")


@case("hiseg predict --workers 2, kill -9 of the main process: no process left, nothing written after")
def killed_predict(tmp, n):
    d = photos(tmp, [f"im{i}.png" for i in range(4)])
    _no_survivors(tmp, ["predict", d, "-o", tmp / "o", "--classical", "--workers", "2", "-q"], watch=tmp / "o")


@case("hiseg evaluate --workers 2, kill -9 of the main process: no process left")
def killed_evaluate(tmp, n):
    from scipy.io import savemat

    gt, pred = _two_region_ground_truth(tmp, (20, 24), 3)
    for k in range(3):
        ucm = np.zeros((41, 49))
        ucm[20, :] = 0.6
        savemat(str(pred / f"im{k}.mat"), {"ucm2": ucm})
    _no_survivors(tmp, ["evaluate", pred, "--gt", gt, "--workers", "2", "-q", "--thresholds", "3",
                        "-o", tmp / "res"], watch=tmp / "res")


@case("the training host pool, kill -9 of the main process: no process left")
def killed_host_pool(tmp, n):
    _no_survivors(tmp, ["hostpool"])


@case("a 1 KB PNG declaring 50000x50000 among good images: predict, view, evaluate")
def declared_bomb(tmp, n):
    d = photos(tmp, ["a.png", "c.png"])
    _faults().declared_png(d / "b.png")
    for cmd in ("predict", "view"):
        t = time.perf_counter()
        rc, out, err = hiseg_inline(cmd, "--classical", "-q", d, "-o", tmp / cmd)
        check(time.perf_counter() - t < 60, f"{cmd}: {time.perf_counter() - t:.0f} s")
        check(rc == 1 and "Traceback" not in err and "cv2.error" not in err, f"{cmd}: exit {rc}: {err[-300:]}")
        check(sum("b.png" in ln for ln in err.splitlines()) == 1 and "50000 x 50000" in err, f"{cmd}: {err[-300:]}")
        check(any(p.name.startswith("a") for p in (tmp / cmd).iterdir()), f"{cmd}: the good images were not done")
    import cv2

    gt, pred = _two_region_ground_truth(tmp, (48, 64), 2)
    b = np.zeros((48, 64), np.uint8)
    b[24] = 255
    cv2.imwrite(str(pred / "im0.png"), b)
    _faults().declared_png(pred / "im1.png")
    rc, out, err = hiseg_inline("evaluate", pred, "--gt", gt, "--workers", "1", "-q", "--thresholds", "3")
    check(rc == 1 and "Traceback" not in err and "1 more failed" in out and "im1.png" in err, f"evaluate: {rc} {err}")


@case("a symlink loop, a FIFO and a folder named x.jpg in the input folder")
def odd_entries(tmp, n):
    d = photos(tmp, ["a.png"])
    os.symlink(d / "loop.png", d / "loop.png")
    os.mkfifo(d / "f.png")
    (d / "x.jpg").mkdir()
    rc, out, err = hiseg_inline("predict", "--classical", "-q", d, "-o", tmp / "o")
    check(rc == 1 and "Traceback" not in err, f"exit {rc}: {err[-300:]}")
    check("symbolic link loop" in err and "not a regular file" in err and "it is a folder" in err, err[-500:])
    check((tmp / "o" / "a.mat").exists(), "a.png was not done")


_HPARAMS = [("blocks=[100000,2,3,3]", {"width": 8, "blocks": [100000, 2, 3, 3]}, "compact_boundary_net"),
            ("width=200000", {"width": 200000}, "compact_boundary_net"),
            ("2000 ensemble members", {"members": [{"arch": "compact_boundary_net", "arch_kwargs": {"width": 8}}] * 2000},
             "mean_probability_ensemble"),
            ("arch_kwargs a string", "width=8", "compact_boundary_net"),
            ("arch_kwargs a class_path", {"class_path": "x.Y", "init_args": {}}, "compact_boundary_net"),
            ("pretrained_backbone: True", {"pretrained_backbone": True}, "resnet18_boundary_net")]


@case("checkpoints with bad hyper-parameters (6 kinds): hiseg predict, load_model, within a second")
def bad_hparams(tmp, n):
    from hiseg.models import load_model
    from hiseg.models.weights import CheckpointError

    d = photos(tmp, ["a.png"])
    for i, (label, kw, arch) in enumerate(_HPARAMS):
        path = _faults().crafted_checkpoint(tmp, f"c{i}", kw, arch)
        t = time.perf_counter()
        try:
            load_model(path)
            raise Fail(f"{label}: loaded")
        except CheckpointError as e:
            check("\n" not in str(e), f"{label}: several lines")
        check(time.perf_counter() - t < 1.0, f"{label}: {time.perf_counter() - t:.1f} s")
        rc, out, err = hiseg_inline("predict", d, "-o", tmp / f"o{i}", "--checkpoint", path, "--device", "cpu", "-q")
        one_line_error(rc, err, str(path))
        check(not (tmp / f"o{i}").exists(), f"{label}: --out created")


@case("train.py --ckpt_path with bad hyper-parameters, and a pickle payload with --weights_only false")
def train_bad_ckpt(tmp, n):
    for i, (label, kw, arch) in enumerate(_HPARAMS[:2] + _HPARAMS[3:5]):
        path = _faults().crafted_checkpoint(tmp, f"l{i}", kw, arch, lightning=True)
        t = time.perf_counter()
        rc, err = train_inline("fit", "--ckpt_path", path, "--trainer.default_root_dir", tmp / "run")
        check(rc != 0 and "Traceback" not in err and str(path) in err, f"{label}: exit {rc}: {err[-300:]}")
        check(time.perf_counter() - t < 30, f"{label}: {time.perf_counter() - t:.0f} s")
    import pathlib

    import torch

    class Touch:
        def __reduce__(self):
            return pathlib.Path.touch, (tmp / "ran",)

    torch.save({"state_dict": {}, "payload": Touch()}, tmp / "payload.ckpt")
    rc, err = train_inline("fit", "--ckpt_path", tmp / "payload.ckpt", "--weights_only", "false",
                           "--trainer.default_root_dir", tmp / "run")
    check(rc != 0 and "not a safe checkpoint" in err and "Traceback" not in err, f"exit {rc}: {err[-300:]}")
    check(not (tmp / "ran").exists(), "the payload ran")


@case("a training config with LambdaCallback on_fit_start: os.system (refused without --trust-config)")
def config_is_code(tmp, n):
    cfg = tmp / "evil.yaml"
    cfg.write_text("trainer:\n  callbacks:\n    - class_path: pytorch_lightning.callbacks.LambdaCallback\n"
                   "      init_args:\n        on_fit_start: os.system\n")
    rc, err = train_inline("fit", "--config", cfg, "--trainer.default_root_dir", tmp / "run")
    check(rc != 0 and "--trust-config" in err and "Traceback" not in err, f"exit {rc}: {err[-300:]}")
    rc, err = train_inline("fit", "--trainer.callbacks+=subprocess.Popen", "--trainer.default_root_dir", tmp / "run")
    check(rc != 0 and "a config is code" in err, f"exit {rc}: {err[-300:]}")


@case("knn_graph of 120 x 20000 features: peak within 3x the input")
def many_features(tmp, n):
    import tracemalloc

    import sklearn.neighbors  # noqa: F401 - its import is not the graph's memory

    from hiseg.core.builders import knn_graph

    X = np.random.default_rng(0).standard_normal((120, 20000))
    tracemalloc.start()
    try:
        knn_graph(X, 5)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    check(peak < 3 * X.nbytes, f"peak {peak / X.nbytes:.1f}x the input")


@case("wording: a plain rerun, a .mat + .png folder, --out equal to the input folder resumed")
def wording(tmp, n):
    d = photos(tmp, ["a.png", "c.png"])
    check(hiseg_inline("predict", "--classical", "-q", d, "-o", tmp / "o")[0] == 0, "first run")
    rc, out, err = hiseg_inline("predict", "--classical", "-q", d, "-o", tmp / "o")
    one_line_error(rc, err, "--resume")
    check(hiseg_inline("predict", "--classical", "-q", d, "-o", d, "--regions", "3")[0] == 0, "into the input folder")
    (d / "c.mat").unlink()
    rc, out, err = hiseg_inline("predict", "--classical", "-q", d, "-o", d, "--regions", "3", "--resume")
    check(rc == 0 and (d / "c.mat").exists() and not list(d.glob("*_ucm_ucm*")), f"resume: exit {rc}: {err[-300:]}")
    from scipy.io import savemat

    gt, pred = tmp / "gt", tmp / "pred"
    gt.mkdir()
    pred.mkdir()
    seg = np.ones((20, 24), np.uint16)
    for k in range(2):
        _ground_truth(gt / f"im{k}.mat", seg)
    savemat(str(pred / "im0.mat"), {"ucm2": np.zeros((41, 49))})
    import cv2

    cv2.imwrite(str(pred / "im1.png"), np.zeros((20, 24), np.uint8))
    rc, out, err = hiseg_inline("evaluate", pred, "--gt", gt, "--workers", "1", "-q")
    one_line_error(rc, err, "mixes .mat and .png")


# ----------------------------------------------------------------------------- issue 52
# Each name is tagged with what a failure would be: [52 callables], [52 data loss], [52 hang],
# [52 traceback], [52 blow-up], [52 silent] (the summary below the table counts them).
_LAMBDA_FULL = ("trainer:\n  callbacks:\n    - class_path: pytorch_lightning.callbacks.lambda_function.LambdaCallback\n"
                "      init_args:\n        on_fit_start: os.system\n")


def _train_refused(tmp, argv, needle="a config is code", env=None):
    """``train.py ARGV`` in this process with os.system (and numpy.add) watched: refused in one
    line naming ``needle``, nothing called, no run folder."""
    import numpy

    called, real_system, real_add = [], os.system, numpy.add
    os.system = lambda *a: called.append(a)
    saved = {k: os.environ.get(k) for k in (env or {})}
    os.environ.update(env or {})
    try:
        rc, err = train_inline(*argv, "--trainer.default_root_dir", tmp / "run")
    finally:
        os.system = real_system
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
    check(not called, f"os.system called {len(called)} time(s)")
    check(numpy.add is real_add, "numpy.add replaced")
    one_line_error(rc, err, needle)
    check(not (tmp / "run").exists(), "a run folder was made")


def _evil(tmp, text=_LAMBDA_FULL, name="evil.yaml"):
    p = tmp / name
    p.write_text(text)
    return p


for _label, _argv in [("--config FILE", lambda e: ["--config", e]), ("--conf FILE (an abbreviation)",
                                                                     lambda e: ["--conf", e]),
                      ("-cFILE", lambda e: [f"-c{e}"]), ("--config=FILE", lambda e: [f"--config={e}"])]:
    def _lambda_full_path(tmp, n, argv=_argv):
        _train_refused(tmp, ["fit", *argv(_evil(tmp))], "LambdaCallback")
    case(f"[52 callables] LambdaCallback by its full path, {_label}")(_lambda_full_path)


@case("[52 callables] JSONARGPARSE_DEFAULT_ENV=true, PL_FIT__TRAINER__CALLBACKS: LambdaCallback calling numpy.add")
def env_callbacks(tmp, n):
    _train_refused(tmp, ["fit"], "PL_FIT__TRAINER__CALLBACKS", env={
        "JSONARGPARSE_DEFAULT_ENV": "true", "PL_FIT__TRAINER__CALLBACKS": '[{"class_path": "pytorch_lightning.'
        'callbacks.LambdaCallback", "init_args": {"on_fit_start": "numpy.add"}}]'})


@case("[52 callables] PL_FIT__CONFIG naming a config, a config included by path (--data data.yaml)")
def included_configs(tmp, n):
    _train_refused(tmp, ["fit"], "LambdaCallback", env={"JSONARGPARSE_DEFAULT_ENV": "true",
                                                        "PL_FIT__CONFIG": str(_evil(tmp))})
    _train_refused(tmp, ["fit", "--data", _evil(tmp, "class_path: subprocess.Popen\n", "data.yaml")], "Popen")


@case("[52 callables] hiseg.data.datamodule.pl.LightningDataModule (Lightning's base class under hiseg.*)")
def base_class_under_hiseg(tmp, n):
    _train_refused(tmp, ["fit", "--data", "hiseg.data.datamodule.pl.LightningDataModule"], "LightningDataModule")


@case("[52 callables] a parsed config holding numpy.add, a partial, an object with __call__")
def parsed_callables(tmp, n):
    import functools

    from jsonargparse import Namespace

    from hiseg.training.configs import UntrustedConfigError, check_config_objects

    class Call:
        def __call__(self):
            pass

    for obj in (np.add, functools.partial(print), Call()):
        try:
            check_config_objects(Namespace(f=obj))
            raise Fail(f"{obj!r} passed")
        except UntrustedConfigError:
            pass


for _logger in ("hiseg.training.callbacks.CSVLogger", "pytorch_lightning.loggers.CSVLogger",
                "pytorch_lightning.loggers.TensorBoardLogger"):
    def _logger_elsewhere(tmp, n, logger=_logger):
        import json

        victim = tmp / "victim"
        victim.mkdir()
        for f in ("config.yaml", "hparams.yaml", "metrics.csv"):
            (victim / f).write_text(f"precious {f}\n")
        spec = json.dumps([{"class_path": logger, "init_args": {"save_dir": str(victim), "name": "", "version": ""}}])
        rc, err = train_inline("fit", "--trainer.max_steps", "1", "--trainer.logger", spec, "--data.init_args.n_train",
                               "4", "--data.init_args.n_val", "2", "--data.init_args.size", "48",
                               "--model.arch_kwargs", '{"width": 8}', "--trainer.enable_progress_bar", "false",
                               "--trainer.default_root_dir", tmp / "run")
        changed = [p.name for p in victim.iterdir() if p.read_text() != f"precious {p.name}\n"]
        check(not changed and len(list(victim.iterdir())) == 3, f"replaced or added: {changed or names(victim)}")
        one_line_error(rc, err, str(victim), "another run")
    case(f"[52 data loss] {_logger.rsplit('.', 1)[-1]}(save_dir=ANY, name='', version='') onto another run's "
         f"files ({_logger.split('.')[0]})")(_logger_elsewhere)


def _train_process(tmp, *argv, timeout=240):
    """(exit status, stderr) of ``train.py ARGV`` in a new process; a hang is a Fail."""
    code = ("import sys; from hiseg.training.cli import main; "
            f"main(sys.argv[1:], default_config={str(ROOT / 'configs' / 'synthetic.yaml')!r})")
    try:
        r = subprocess.run([sys.executable, "-c", code, *map(str, argv), "--trainer.default_root_dir",
                            str(tmp / "run")], capture_output=True, text=True, timeout=timeout, cwd=tmp)
    except subprocess.TimeoutExpired:
        raise Fail(f"no answer in {timeout} s") from None
    return r.returncode, r.stderr


_LAUGHS = "a: &a [lol, lol, lol, lol, lol, lol, lol, lol, lol]\n" + "".join(
    f"{chr(98 + i)}: &{chr(98 + i)} [{', '.join(['*' + chr(97 + i)] * 9)}]\n" for i in range(8)) + \
    "trainer:\n  callbacks: *i\n"


@case("[52 hang] a 1.3 kB billion-laughs config, --config and --trust-config")
def billion_laughs(tmp, n):
    cfg = _evil(tmp, _LAUGHS, "laughs.yaml")
    check(len(_LAUGHS) < 1500, f"{len(_LAUGHS)} bytes")
    one_line_error(*_train_process(tmp, "fit", "--config", cfg, "--trust-config"), "laughs.yaml", "aliases")


@case("[52 hang] --config naming a FIFO (in a process of its own), a device (/dev/zero), a link to /dev/zero")
def config_not_a_file(tmp, n):
    os.mkfifo(tmp / "fifo.yaml")
    one_line_error(*_train_process(tmp, "fit", "--config", tmp / "fifo.yaml"), "fifo.yaml", "not a regular file")
    (tmp / "zero.yaml").symlink_to("/dev/zero")
    for cfg in ("/dev/zero", tmp / "zero.yaml"):  # stat'ed, never opened: in this process
        one_line_error(*train_inline("fit", "--config", cfg), str(cfg), "not a regular file")


@case("[52 hang] hiseg predict --resume with a run record that is a link to /dev/zero")
def record_dev_zero(tmp, n):
    from hiseg.io.files import RECORD

    d = photos(tmp, ["a.png"])
    (tmp / "o").mkdir()
    (tmp / "o" / RECORD).symlink_to("/dev/zero")
    p = hiseg_process("predict", "--classical", "-q", d, "-o", tmp / "o", "--resume")
    try:
        _, err = p.communicate(timeout=240)
    except subprocess.TimeoutExpired:
        p.kill()
        raise Fail("no answer in 240 s") from None
    one_line_error(p.returncode, err, RECORD, "not a regular file")


def _tampered_export(tmp, edit) -> Path:
    import json
    import shutil

    folder = tmp / "exported"
    shutil.copytree(ROOT / "models" / "hiseg_bsds500_merge_onnx", folder)
    m = json.loads((folder / "manifest.json").read_text())
    edit(m)
    (folder / "manifest.json").write_text(json.dumps(m))
    return folder


_MANIFEST_EDITS = [("merge_head a string", "merge_head", lambda m: m.update(merge_head="sigmoid")),
                   ("pipeline a list", "pipeline", lambda m: m.update(pipeline=[1, 2])),
                   ("scales a number", "network.scales", lambda m: m["network"].update(scales=1.0)),
                   ("no features", "merge_head.features", lambda m: m["merge_head"].pop("features")),
                   ("negative max_pixels", "pipeline.max_pixels", lambda m: m["pipeline"].update(max_pixels=-5)),
                   ("sigma 1e9 (59.6 GiB)", "pipeline.sigma", lambda m: m["pipeline"].update(sigma=1e9))]


@case("[52 traceback] exported manifests with a field of the wrong type or range (6 kinds): hiseg predict")
def tampered_manifests(tmp, n):
    d = photos(tmp, ["a.png"])
    for label, field, edit in _MANIFEST_EDITS:
        sub = tmp / label.split()[0]
        sub.mkdir()
        folder = _tampered_export(sub, edit)
        rc, out, err = hiseg_inline("predict", d, "--checkpoint", folder, "-o", sub / "o", "-q")
        try:
            one_line_error(rc, err, repr(field))
        except Fail as e:
            raise Fail(f"{label}: {e}") from None
        check(not (sub / "o").exists(), f"{label}: --out created")


@case("[52 blow-up] exported graphs that would allocate 40 GB (3 kinds): refused before a session opens")
def hostile_graphs(tmp, n):
    if str(ROOT / "tests") not in sys.path:
        sys.path.insert(0, str(ROOT / "tests"))
    from _hostile_graphs import KINDS, hostile_graph

    from hiseg.export.guard import check_graph
    from hiseg.export.manifest import ExportError

    for kind in KINDS:
        hostile_graph(kind, tmp / f"{kind}.onnx")
        try:
            check_graph(tmp / f"{kind}.onnx")
            raise Fail(f"{kind}: passed the check")
        except ExportError as e:
            check("\n" not in str(e), f"{kind}: several lines")


@case("[52 traceback] hiseg export onto a dangling symlink, a /proc path, a file: refused before exporting")
def export_destinations(tmp, n):
    import hiseg.export.onnx as onnx_export

    real = onnx_export._load

    def loaded(*a, **k):
        raise Fail("the model was loaded (the ~20 s export) before the destination was checked")
    onnx_export._load = loaded
    try:
        (tmp / "dangling").symlink_to(tmp / "gone")
        (tmp / "file").write_text("x")
        for out in (tmp / "dangling", Path("/proc/hiseg_probe"), tmp / "file"):
            rc, _, err = hiseg_inline("export", "bsds500", "-o", out, "-q")
            one_line_error(rc, err, str(out))
    finally:
        onnx_export._load = real


@case("[52 traceback] result.cut(threshold='0.3')")
def cut_threshold_text(tmp, n):
    from hiseg import Segmenter

    res = Segmenter(None).segment(np.random.default_rng(0).random((40, 48, 3)).astype(np.float32))
    try:
        res.cut(threshold="0.3")
        raise Fail("accepted")
    except TypeError as e:
        check("threshold" in str(e) and "\n" not in str(e), str(e))


@case("[52 silent] an animated PNG, WebP and GIF, a multi-page TIFF: each says the first frame is used")
def multi_frame(tmp, n):
    import warnings as _warnings

    from PIL import Image

    from hiseg.io import read_image

    frames = [Image.fromarray(np.full((40, 48, 3), v, np.uint8)) for v in (10, 200)]
    (tmp / "p").mkdir()
    files = ["anim_png.png", "anim_webp.webp", "pages.tif"]  # the inputs (a .gif is no input extension)
    for name in files:
        frames[0].save(tmp / "p" / name, save_all=True, append_images=frames[1:])
    frames[0].save(tmp / "anim.gif", save_all=True, append_images=frames[1:])
    with _warnings.catch_warnings(record=True) as caught:
        _warnings.simplefilter("always")
        read_image(tmp / "anim.gif")  # the library reads any format
    check(any("first frame" in str(w.message) for w in caught), "anim.gif (library): no warning")
    p = hiseg_process("predict", "--classical", "-q", tmp / "p", "-o", tmp / "o")
    _, err = p.communicate(timeout=300)
    check(p.returncode == 0, f"exit {p.returncode}: {err[-300:]}")
    for name in files:
        check(any(name in ln and "first frame" in ln for ln in err.splitlines()), f"{name}: no word: {err[-300:]}")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--images", type=int, default=20, help="images per folder (default: 20, the issue's)")
    ap.add_argument("--only", default=None, help="run the cases whose name holds this word")
    args = ap.parse_args(argv)
    import torch

    torch.set_num_threads(1)
    rows = []
    for name, fn in CASES:
        if args.only and args.only not in name:
            continue
        t = time.perf_counter()
        with tempfile.TemporaryDirectory() as tmp:
            try:
                fn(Path(tmp), max(2, args.images))
                verdict = "OK"
            except Fail as e:
                verdict = f"FAIL: {e}"
            except Exception as e:  # noqa: BLE001 - a probe's own crash is a failure to report
                verdict = f"FAIL: {type(e).__name__}: {e} ({traceback.format_exc().splitlines()[-3].strip()})"
        rows.append((name, verdict, time.perf_counter() - t))
    width = max(len(r[0]) for r in rows)
    print(f"| {'case':<{width}} | verdict | s |\n|{'-' * (width + 2)}|---|---|")
    for name, verdict, s in rows:
        print(f"| {name:<{width}} | {verdict} | {s:.1f} |")
    print(f"\n{stamp()}")
    tagged = [(name[4:name.index("]")], verdict) for name, verdict, _ in rows if name.startswith("[52 ")]
    if tagged:
        print("\nissue 52's families: " + ", ".join(
            f"{sum(1 for t, v in tagged if t == tag and v != 'OK')} {what}" for tag, what in FAILURE_KINDS.items())
            + f" (failures of {len(tagged)} cases)")
    return 1 if any(v != "OK" for _, v, _ in rows) else 0


if __name__ == "__main__":
    sys.exit(main())
