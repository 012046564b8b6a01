"""Many images (issue 23 section 4): ``hiseg predict --workers N`` and :mod:`hiseg.segmentation.predict_ddp`
write the same bytes as the single-process ``hiseg predict --workers 0``, keep its
guarantees (existing files refused before writing, per-image failures reported at the end
with exit 1, atomic writes) and name the image of an error raised in a worker."""
import json

import cv2
import numpy as np
import pytest
import torch
from tests.cli.test_cli_faults import PIPE, photos, quadrants, run, snapshot

from hiseg.models import get_model
from hiseg.models.weights import save_weights


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    torch.manual_seed(0)
    return str(save_weights(get_model("compact_boundary_net", width=8), tmp_path_factory.mktemp("ck") / "net.ckpt",
                            metadata={"pipeline": PIPE}))


def four_photos(tmp_path):
    """Four small images, one of another size (and one a JPEG)."""
    d = photos(tmp_path, "a.png", "b.png", "c.jpg")
    cv2.imwrite(str(d / "d.png"), cv2.resize(quadrants(), (70, 50)))
    return d


def predict(capsys, tmp_path, name, *argv):
    out = tmp_path / name
    classical = [] if "--checkpoint" in argv else ["--classical"]
    rc, err = run(capsys, ["predict", *classical, *argv, "--out", str(out), "--quiet", "--device", "cpu"])
    return rc, err, snapshot(out)


@pytest.mark.parametrize("network", [False, True], ids=["classical-html", "network"])
@pytest.mark.slow
def test_workers_write_the_same_bytes_as_one_process(tmp_path, capsys, checkpoint, network):
    d = four_photos(tmp_path)
    extra = ["--checkpoint", checkpoint, "--level", "0.2"] if network else ["--regions", "3", "--html"]
    rc0, err0, one = predict(capsys, tmp_path, "o0", str(d), "--workers", "0", *extra)
    assert rc0 == 0, err0
    assert len(one) == 4 * 5 + (5 if "--html" in extra else 0) + 1  # and the run record (.hiseg-predict.json)
    for n in (2, 3):
        rc, err, many = predict(capsys, tmp_path, f"o{n}", str(d), "--workers", str(n), *extra)
        assert rc == 0, err
        assert many == one  # every file, byte for byte, and no other file (no stray temporary)


def test_a_bad_image_in_a_worker_is_reported_at_the_end_as_in_one_process(tmp_path, capsys, checkpoint):
    d = four_photos(tmp_path)
    (d / "b.png").write_bytes(b"not an image")
    outs = {}
    for n in (0, 2):
        rc, err, outs[n] = predict(capsys, tmp_path, f"o{n}", str(d), "--workers", str(n), "--checkpoint", checkpoint)
        assert rc == 1
        report = err[err.index("hiseg predict: error:"):]
        assert report.startswith("hiseg predict: error: 1 of 4 image(s) failed; the other 3 were written:")
        assert f"{d / 'b.png'}: cannot read image" in report
        outs[n, "report"] = report
    assert outs[0] == outs[2] and outs[0, "report"] == outs[2, "report"]
    assert not any(name.startswith("b") for name in outs[2])


def test_existing_files_are_refused_before_any_worker_writes(tmp_path, capsys):
    d = four_photos(tmp_path)
    out = tmp_path / "o"
    out.mkdir()
    (out / "c.mat").write_bytes(b"ground truth")
    rc, err = run(capsys, ["predict", "--classical", str(d), "--out", str(out), "--workers", "2"])
    assert rc == 2 and "c.mat" in err
    assert snapshot(out) == {"c.mat": b"ground truth"}


@pytest.mark.slow
def test_an_error_in_a_worker_names_the_image(tmp_path, capsys, monkeypatch):
    import hiseg.cli.predict
    from _broken_pipeline import DiskFull, FailsOnSmall

    d = four_photos(tmp_path)
    make = hiseg.cli.predict.make_segmenter

    def with_pipeline(cls):  # the workers unpickle the pipeline: the failure happens there
        def patched(args):
            seg = make(args)
            seg.pipeline = cls(**seg.pipeline.to_dict())
            return seg
        return patched

    monkeypatch.setattr(hiseg.cli.predict, "make_segmenter", with_pipeline(FailsOnSmall))
    with pytest.raises(RuntimeError, match=r"d\.png: RuntimeError: higra gave up"):
        run(capsys, ["predict", "--classical", str(d), "--out", str(tmp_path / "o"), "--workers", "2"])
    monkeypatch.setattr(hiseg.cli.predict, "make_segmenter", with_pipeline(DiskFull))
    rc, err = run(capsys, ["predict", "--classical", str(d), "--out", str(tmp_path / "o2"), "--workers", "2", "--quiet"])
    # every image fails; the two workers start with a.png and b.png, and whichever fails first is named
    assert rc == 2 and (f"{d / 'a.png'}: [Errno 28]" in err or f"{d / 'b.png'}: [Errno 28]" in err), err[-500:]
    assert not list((tmp_path / "o2").glob("*.mat")) and not list((tmp_path / "o2").glob(".*tmp*"))


@pytest.mark.parametrize("value", ["-1", "two", "1.5"])
def test_a_bad_workers_value_is_named(tmp_path, capsys, value):
    d = four_photos(tmp_path)
    rc, err = run(capsys, ["predict", "--classical", str(d), "--out", str(tmp_path / "o"), "--workers", value])
    assert rc == 2 and "argument --workers" in err and not (tmp_path / "o").exists()


def test_workers_default_to_auto_and_help_names_the_cpus(capsys):
    """``--workers auto``: one process per usable CPU (at most 8), none for fewer images than
    it pays to start them for; the help names this machine's count."""
    import os

    from hiseg.cli import main
    from hiseg.cli.options import default_workers, resolve_workers
    from hiseg.cli.predict import POOL_MIN_IMAGES

    assert default_workers() == max(1, min(8, len(os.sched_getaffinity(0))))
    assert resolve_workers("auto", POOL_MIN_IMAGES - 1, POOL_MIN_IMAGES) == 1
    assert resolve_workers("auto", 100, POOL_MIN_IMAGES) == default_workers()
    assert resolve_workers(4, 2, POOL_MIN_IMAGES) == 2 and resolve_workers(0, 9, 2) == 1
    with pytest.raises(SystemExit):
        main(["predict", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert f"(here: {default_workers()})" in text and "(default: auto)" in text


@pytest.mark.slow
def test_predict_ddp_on_two_gloo_processes_writes_hiseg_predicts_files(tmp_path, capsys, checkpoint):
    from hiseg.segmentation.segmenter import Segmenter
    from hiseg.segmentation.predict_ddp import IMAGE_ERRORS, predict_files
    from hiseg.cli.options import PER_FILE_ERRORS

    assert IMAGE_ERRORS == PER_FILE_ERRORS
    d = four_photos(tmp_path)
    files = sorted(p for p in d.iterdir() if p.name != "b.png")  # 3 images, one of another size
    rc, err, truth = predict(capsys, tmp_path, "o0", *map(str, files), "--workers", "0", "--checkpoint", checkpoint,
                             "--regions", "3")
    assert rc == 0, err
    # Known intermittent fault (2026-11-26, about 1 run in 4 under pytest on a loaded 2-core machine, 0 in 6
    # runs of the same call from a plain script): a spawned gloo worker aborts ("terminate called without an
    # active exception", SIGABRT). Up to 3 attempts, each into a fresh folder; the files are still compared
    # byte for byte with hiseg predict's, so a run that writes wrong files, or a fault on every attempt, fails.
    from torch.multiprocessing.spawn import ProcessExitedException

    for attempt in range(3):
        out = tmp_path / f"ddp{attempt}"
        try:
            predict_files(Segmenter.from_checkpoint(checkpoint), files, out, n_regions=3,
                          trainer_kwargs=dict(accelerator="cpu", devices=2, strategy="ddp_spawn"))
            break
        except ProcessExitedException as e:
            if "SIGABRT" not in str(e) or attempt == 2:
                raise
    got = snapshot(out)
    # each its run record: the same images, the library's option set also naming its whole pipeline
    records = [json.loads(x.pop(".hiseg-predict.json")) for x in (got, truth)]
    assert records[0]["images"] == records[1]["images"]
    assert got == truth
    with pytest.raises(ValueError, match="a.mat"):  # refused before anything runs
        predict_files(Segmenter.from_checkpoint(checkpoint), files, out, trainer_kwargs=dict(accelerator="cpu"))


@pytest.mark.slow
def test_warnings_from_workers_name_their_image_in_input_order(tmp_path, capsys):
    d = four_photos(tmp_path)
    errs = {}
    for n in (0, 2):
        rc, err, _ = predict(capsys, tmp_path, f"o{n}", str(d), "--workers", str(n), "--regions", "5000")
        assert rc == 0, err
        errs[n] = [line for line in err.splitlines() if line.startswith("hiseg predict: warning:")]
    names = [w.split(":")[2].strip() for w in errs[0]]
    assert sorted(set(names), key=names.index) == ["a.png", "b.png", "c.jpg", "d.png"]
    assert errs[2] == errs[0]


def test_predict_ddp_reports_a_bad_image_and_writes_the_others(tmp_path, capfd, checkpoint):
    from hiseg.segmentation.segmenter import Segmenter
    from hiseg.segmentation.predict_ddp import predict_files

    d = four_photos(tmp_path)
    (d / "b.png").write_bytes(b"not an image")
    files = sorted(d.iterdir())
    failures = predict_files(Segmenter.from_checkpoint(checkpoint), files, tmp_path / "o",
                             trainer_kwargs=dict(accelerator="cpu", devices=1))
    assert [(n, m[:18]) for n, m in failures] == [(str(d / "b.png"), "cannot read image ")]
    assert "1 of 4 image(s) failed" in capfd.readouterr().err
    assert sorted(p.name for p in (tmp_path / "o").glob("*.mat")) == ["a.mat", "c.mat", "d.mat"]
    with pytest.raises(ValueError, match="predict_files distributes a torch network"):
        predict_files(Segmenter(None), files, tmp_path / "o2")


def test_predict_devices_into_a_folder_another_run_writes_into_is_refused(tmp_path, capsys, checkpoint, monkeypatch):
    """The process the user started with --devices holds the folder's lock as one process does
    (the processes DDP starts for the other ranks, LOCAL_RANK set, share it: the slow test
    below runs them while their launcher holds it); refused before anything is written."""
    from hiseg.io import folder_lock

    d = four_photos(tmp_path)
    out = tmp_path / "out"
    out.mkdir()
    # the launcher before it starts the others (no LOCAL_RANK), and after (Lightning sets its own to 0), or
    # rank 0 under torchrun
    for local_rank in (None, "0"):
        if local_rank is None:
            monkeypatch.delenv("LOCAL_RANK", raising=False)
        else:
            monkeypatch.setenv("LOCAL_RANK", local_rank)
        with folder_lock(out, "hiseg predict"):
            rc, err = run(capsys, ["predict", str(d), "--checkpoint", checkpoint, "--device", "cpu", "--devices", "2", "-o",
                                   str(out)])
        assert rc == 2 and "another hiseg predict or view is writing into" in err and str(out) in err, err
        assert list(out.iterdir()) == []


@pytest.mark.slow
def test_predict_devices_runs_the_lightning_ddp_back_end(tmp_path, checkpoint):
    """``hiseg predict --devices 2`` (two gloo processes on the CPU, launched as Lightning's DDP
    launches them): the files of every image, the same hierarchies as one process, one model
    line and one closing line (the other process stays silent); the classical path and --html
    are refused before anything runs."""
    import subprocess
    import sys

    from scipy.io import loadmat

    d = four_photos(tmp_path)
    cmd = [sys.executable, "-m", "hiseg.cli", "predict", str(d), "--checkpoint", checkpoint, "--device", "cpu", "--regions", "3"]
    env = {"PATH": "/usr/bin:/bin", "OMP_NUM_THREADS": "1", "HOME": str(tmp_path)}
    one = subprocess.run(cmd + ["-o", str(tmp_path / "one"), "--workers", "0"], capture_output=True, text=True,
                         env=env, timeout=600)
    assert one.returncode == 0, one.stderr[-2000:]
    for attempt in range(3):  # the known intermittent gloo abort (test_predict_ddp_on_two_gloo_processes...)
        out = tmp_path / f"ddp{attempt}"
        r = subprocess.run(cmd + ["-o", str(out), "--devices", "2"], capture_output=True, text=True, env=env,
                           timeout=600)
        if r.returncode == 0 or "SIGABRT" not in r.stderr and "terminate called" not in r.stderr:
            break
    assert r.returncode == 0, r.stderr[-2000:]
    assert r.stdout.splitlines() == [f"hiseg predict: model {checkpoint}, torch on cpu", f"wrote 4 image(s) to {out}"]
    assert sorted(p.name for p in out.iterdir()) == sorted(p.name for p in (tmp_path / "one").iterdir())
    # the run record, written by the first process: the same options as one process's (--devices is not one)
    assert (out / ".hiseg-predict.json").read_bytes() == (tmp_path / "one" / ".hiseg-predict.json").read_bytes()
    for f in out.glob("*.mat"):
        np.testing.assert_allclose(loadmat(f)["ucm2"], loadmat(tmp_path / "one" / f.name)["ucm2"], atol=1e-6)
    for opts, says in ((["--html"], "--html writes its pages in one process"),
                       (["--classical"], "the classical path has none")):
        bad = [c for c in cmd if c not in ("--checkpoint", checkpoint)] if opts == ["--classical"] else cmd
        r = subprocess.run(bad + ["-o", str(tmp_path / "no"), "--devices", "2", *opts], capture_output=True,
                           text=True, env=env, timeout=600)
        assert r.returncode == 2 and says in r.stderr and not (tmp_path / "no").exists(), r.stderr[-2000:]
