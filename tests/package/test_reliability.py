"""Issue 32's fault probe, one test per row: concurrent predicts, file names that are not
valid UTF-8, an interrupted predict resumed, training data checked at start-up, checkpoints
written atomically, degenerate clustering inputs, HISEG_WEIGHTS_DIR, unreadable images, a
very large photograph's memory. Each test failed on the code before the fix."""
import json
import os
import signal
import subprocess
import sys
import tempfile
import textwrap
import time
import warnings
from pathlib import Path

import numpy as np
import pytest
from sklearn.exceptions import ConvergenceWarning

from hiseg.clustering import UltrametricClustering

#: a file name that is not valid UTF-8 (as bytes: Python shows it with surrogate escapes)
BAD_NAME = b"bad\xff\xfename.png"


def write_image(folder: Path, name, i: int = 0):
    """A 48x64 PNG of three coloured blocks (shifted by ``i``) under ``name`` (str or bytes),
    encoded in memory and written by Python: any file name."""
    import cv2

    img = np.zeros((48, 64, 3), np.uint8)
    img[:24, :32] = (200, 30, 30)
    img[24:, 32:] = (20, 90, 200)
    img[:24, 32:] = (30, 200, 60)
    img = np.roll(img, 3 * i, axis=1)
    path = os.path.join(os.fsencode(folder), os.fsencode(name))
    with open(path, "wb") as fh:
        fh.write(cv2.imencode(".png", img)[1].tobytes())
    return Path(os.fsdecode(path))


def photo_folder(tmp_path, names) -> Path:
    d = tmp_path / "photos"
    d.mkdir(exist_ok=True)
    for i, n in enumerate(names):
        write_image(d, n, i)
    return d


def listing(folder) -> list:
    """The names in ``folder`` as bytes (any name), sorted."""
    return sorted(os.listdir(os.fsencode(folder)))


def stray_temps(folder) -> list:
    return [n for n in listing(folder) if b".tmp" in n]


def python(code: str, *args, **kw) -> subprocess.Popen:
    """A Python process running ``code`` (dedented) with ``args`` as sys.argv[1:]."""
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONFAULTHANDLER="0", **kw.pop("env", {}))
    return subprocess.Popen([sys.executable, "-c", textwrap.dedent(code), *map(str, args)], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, errors="backslashreplace", **kw)


# ----------------------------------------------------------------------------- 10: duplicates
def test_fewer_distinct_points_than_clusters_warns_and_keeps_identical_points_together():
    with pytest.warns(ConvergenceWarning, match=r"distinct samples \(1\) is smaller than n_clusters \(3\)"):
        labels = UltrametricClustering(n_clusters=3).fit(np.ones((50, 3))).labels_
    np.testing.assert_array_equal(labels, np.zeros(50))
    # two distinct points, each repeated, asked for 3 clusters: one cluster per distinct point
    X = np.repeat(np.array([[0.0, 1.0], [4.0, 2.0]]), [7, 5], axis=0)[np.r_[0:3, 7:12, 3:7]]
    with pytest.warns(ConvergenceWarning):
        labels = UltrametricClustering(n_clusters=3).fit(X).labels_
    truth = (X[:, 0] > 2).astype(int)  # numbered by smallest sample index: sample 0 is cluster 0
    np.testing.assert_array_equal(labels, truth)
    # enough distinct points: no warning
    with warnings.catch_warnings():
        warnings.simplefilter("error", ConvergenceWarning)
        X = np.repeat(np.random.default_rng(0).normal(size=(6, 2)), 3, axis=0)
        labels = UltrametricClustering(n_clusters=3).fit(X).labels_
    assert (labels.reshape(6, 3) == labels.reshape(6, 3)[:, :1]).all()


# ----------------------------------------------------------------------------- 11: "NaN" / "" labels
@pytest.mark.parametrize("marker", ["NaN", "", " ", "None", "NA", "n/a", "NULL", "nan", "-1"])
def test_string_markers_of_a_missing_label_are_unlabelled_like_minus_one(marker):
    from sklearn.datasets import make_moons

    X, y = make_moons(60, noise=0.08, random_state=1)
    partial = np.where(np.arange(60) % 5 == 0, y, -1)
    kw = dict(loss="closest+triplet", max_iter=15, dissimilarity="euclidean", init="average", random_state=0)
    ref = UltrametricClustering(2, **kw).fit(X, partial).labels_
    names = ["left", "right"]
    strs = [names[v] if v >= 0 else marker for v in partial]
    np.testing.assert_array_equal(UltrametricClustering(2, **kw).fit(X, strs).labels_, ref)
    np.testing.assert_array_equal(UltrametricClustering(2, **kw).fit(X, np.array(strs)).labels_, ref)
    # the marker is no class: labelled samples of one class plus markers are refused as one class
    one = ["left" if v >= 0 else marker for v in partial]
    with pytest.raises(ValueError, match="labelled part of y has 1 class"):
        UltrametricClustering(2, **kw).fit(X, one)


# ----------------------------------------------------------------------------- 2: any file name
def test_a_file_name_that_is_not_utf8_is_read_and_written_and_the_others_too(tmp_path):
    # in a child process: the old code crashed inside OpenCV's imwrite (SIGSEGV)
    d = photo_folder(tmp_path, [b"a.png", b"b.png", BAD_NAME, b"c.png"])
    out = tmp_path / "out"
    p = python("""
        import os, sys
        from pathlib import Path
        from hiseg.segmentation.outputs import predict_file
        from hiseg.segmentation.segmenter import Segmenter
        from hiseg.segmentation import Pipeline
        seg = Segmenter(None, pipeline=Pipeline.classical(8.0, 5))  # the classical path, any version
        for f in sorted(Path(sys.argv[1]).iterdir()):
            predict_file(seg, f, sys.argv[2], n_regions=3)
        print("done")
    """, d, out)
    so, se = p.communicate(timeout=300)
    assert p.returncode == 0 and "done" in so, se
    stems = [b"a", b"b", b"bad\xff\xfename", b"c"]
    assert listing(out) == sorted([b".hiseg-predict.json"] +  # and the run record (hiseg.segmentation.record)
                                  [s + k for s in stems for k in (b".mat", b"_labels.png", b"_overlay.png",
                                                                  b"_ucm.png", b"_ucm16.png")])
    assert stray_temps(out) == []


def test_an_unreadable_file_with_a_non_utf8_name_is_named_safely(tmp_path):
    from hiseg.io import DataError, read_image

    d = tmp_path / "p"
    d.mkdir()
    path = Path(os.fsdecode(os.path.join(os.fsencode(d), b"broken\xff.jpg")))
    path.write_bytes(b"not an image at all")
    with pytest.raises(DataError) as e:
        read_image(path)
    msg = str(e.value)
    msg.encode("utf-8")  # printable anywhere: no surrogates
    assert "broken\\xff.jpg" in msg and "not a readable image" in msg


# ----------------------------------------------------------------------------- 13: not an image
@pytest.mark.parametrize("content, needle", [(b"", "not an image (0 bytes)"),
                                             (b"hello, I am a text file\n", "not a readable image")])
def test_an_empty_or_text_file_named_jpg_is_not_an_image_without_a_misleading_hint(tmp_path, content, needle):
    from hiseg.io import DataError, read_image

    f = tmp_path / "photo.jpg"
    f.write_bytes(content)
    with pytest.raises(DataError) as e:
        read_image(f)
    assert needle in str(e.value) and str(f) in str(e.value)
    assert "pip install" not in str(e.value) and "imageio" not in str(e.value)


# ----------------------------------------------------------------------------- 1: concurrent runs
CONCURRENT = """
    import os, sys, time
    from pathlib import Path
    from hiseg.segmentation.outputs import predict_file
    from hiseg.segmentation.segmenter import Segmenter
    from hiseg.segmentation import Pipeline
    folder, out, regions, go = sys.argv[1], sys.argv[2], int(sys.argv[3]), Path(sys.argv[4])
    seg = Segmenter(None, pipeline=Pipeline.classical(8.0, 5))  # the classical path, any version
    Path(str(go) + f".ready{regions}").touch()
    while not go.exists():
        time.sleep(0.005)
    try:
        for f in sorted(Path(folder).iterdir()):
            predict_file(seg, f, out, n_regions=regions, overwrite=False)
    except FileExistsError as e:
        print(f"error: {e}", file=sys.stderr)
        sys.exit(2)
"""


def start_together(procs_args, go: Path, code: str):
    procs = [python(code, *a, go) for a in procs_args]
    deadline = time.time() + 120
    while not all(Path(f"{go}.ready{a[2]}").exists() for a in procs_args):
        assert time.time() < deadline and all(p.poll() is None for p in procs), [p.communicate() for p in procs]
        time.sleep(0.01)
    go.touch()
    return [(p.returncode if p.wait(300) is not None else None, p.communicate()[1]) for p in procs]


@pytest.mark.slow
def test_two_runs_into_one_folder_at_once_never_replace_each_others_files(tmp_path):
    import cv2

    d = photo_folder(tmp_path, [f"{c}.png" for c in "abcdef"])
    out = tmp_path / "out"
    res = start_together([(d, out, 6), (d, out, 3)], tmp_path / "go", CONCURRENT)
    rcs = [r for r, _ in res]
    assert rcs.count(0) <= 1, res  # both cannot have written every file
    for (rc, err) in res:
        if rc != 0:
            assert rc == 2 and "exists already" in err and str(out) in err, err
    # every image's files are one run's: its label image has that run's number of regions
    for stem in "abcdef":
        lab = out / f"{stem}_labels.png"
        if lab.exists():
            k = int(cv2.imread(str(lab), cv2.IMREAD_UNCHANGED).max()) + 1
            assert k in (3, 6)
            if rcs == [0, 2]:
                assert k == 6
            if rcs == [2, 0]:
                assert k == 3
            assert all((out / f"{stem}{s}").exists() for s in ("_ucm.png", "_ucm16.png", ".mat", "_overlay.png"))
        else:
            assert not list(out.glob(f"{stem}[._]*"))
    assert stray_temps(out) == []


# ----------------------------------------------------------------------------- 5: resume
RUN_KILLED = """
    import os, signal, sys
    from pathlib import Path
    import hiseg.io.files
    from hiseg.segmentation.outputs import predict_file
    from hiseg.segmentation.segmenter import Segmenter
    from hiseg.segmentation import Pipeline
    folder, out, kill_at = sys.argv[1], sys.argv[2], int(sys.argv[3])
    commit, n = hiseg.io.files._commit, [0]
    def dying_commit(tmp, path, overwrite):
        n[0] += 1
        if n[0] == kill_at:  # killed between two files of one image: no clean-up at all
            os.kill(os.getpid(), signal.SIGKILL)
        commit(tmp, path, overwrite)
    hiseg.io.files._commit = dying_commit
    seg = Segmenter(None, pipeline=Pipeline.classical(8.0, 5))  # the classical path, any version
    for f in sorted(Path(folder).iterdir()):
        predict_file(seg, f, out, n_regions=4, overwrite=False, resume=True)
"""


@pytest.mark.slow
def test_a_predict_killed_mid_image_is_finished_by_a_rerun_with_resume(tmp_path):
    from hiseg.segmentation.outputs import image_done

    d = photo_folder(tmp_path, [f"{c}.png" for c in "abcd"])
    out = tmp_path / "out"
    # each image: its entry in the run record, then its 5 files; image c: 2 of its 5 files in place
    p = python(RUN_KILLED, d, out, 6 * 2 + 1 + 3)
    p.communicate(timeout=300)
    assert p.returncode == -signal.SIGKILL
    assert [image_done(out, s, True) for s in "abcd"] == [True, True, False, False]
    assert len(list(out.glob("c*"))) == 2 and stray_temps(out)  # what a kill leaves
    before = {q.name: q.stat().st_mtime_ns for q in out.iterdir() if q.name[0] in "ab"}
    p = python(RUN_KILLED, d, out, 0)
    _, err = p.communicate(timeout=300)
    assert p.returncode == 0, err
    assert all(image_done(out, s, True) for s in "abcd") and stray_temps(out) == []
    assert {q.name: q.stat().st_mtime_ns for q in out.iterdir() if q.name[0] in "ab"} == before  # skipped
    assert len(list(out.iterdir())) == 4 * 5 + 1  # and the run record, which names every image
    assert json.loads((out / ".hiseg-predict.json").read_text())["images"] == {s: 0 for s in "abcd"}


# ----------------------------------------------------------------------------- the same through `hiseg predict`
HISEG = """
    import os, signal, sys, time
    from pathlib import Path
    from hiseg.cli import main
    # Ctrl-C as in a terminal, also when the tests run in a background job (whose SIGINT is ignored)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    go, argv = Path(sys.argv[1]), sys.argv[2:]
    if os.environ.get("HISEG_TEST_PAUSE"):  # each image takes at least this long (an interruption lands mid-folder)
        import hiseg.segmentation.outputs as outputs
        plain = outputs.predict_file

        def predict_file(*a, **k):
            time.sleep(float(os.environ["HISEG_TEST_PAUSE"]))
            return plain(*a, **k)
        outputs.predict_file = predict_file
    Path(str(go) + ".ready" + argv[argv.index("--regions") + 1] if "--regions" in argv else str(go) + ".ready").touch()
    while not go.exists():
        time.sleep(0.005)
    sys.exit(main(argv))
"""


# the go file of children that start at once: one for the module, its folder removed at exit
_GO_FOLDER = tempfile.TemporaryDirectory(prefix="hiseg-go-")
_GO_NOW = Path(_GO_FOLDER.name) / "go-now"
_GO_NOW.touch()


def hiseg(*argv, go=None, pause=None):
    """``hiseg ARGV`` in a child process (started at once, or when the file ``go`` appears);
    ``pause``: seconds each image waits before it is predicted."""
    if go is None:  # start at once: the go file, already there, in a folder of its own (never the cwd)
        go = _GO_NOW
    return python(HISEG, go, *argv, env={"HISEG_TEST_PAUSE": str(pause)} if pause else {})


@pytest.mark.slow
def test_two_hiseg_predicts_into_one_folder_at_once_the_second_is_refused_naming_the_folder(tmp_path):
    import cv2

    d = photo_folder(tmp_path, [f"{c}.png" for c in "abcdef"])
    out, go = tmp_path / "out", tmp_path / "go"
    procs = [hiseg("predict", "--classical", "-q", "--regions", k, str(d), "-o", str(out), go=go) for k in (6, 3)]
    deadline = time.time() + 120
    while not all(Path(f"{go}.ready{k}").exists() for k in (6, 3)):
        assert time.time() < deadline and all(p.poll() is None for p in procs)
        time.sleep(0.01)
    go.touch()
    res = [(p.wait(300), p.communicate()[1]) for p in procs]
    assert sorted(r for r, _ in res) == [0, 2], res
    winner = 6 if res[0][0] == 0 else 3
    loser_err = res[1][1] if res[0][0] == 0 else res[0][1]
    assert str(out) in loser_err and ("another hiseg predict or view is writing into" in loser_err
                                      or "exist already" in loser_err), loser_err
    for stem in "abcdef":  # every label image is the winner's
        assert int(cv2.imread(str(out / f"{stem}_labels.png"), cv2.IMREAD_UNCHANGED).max()) + 1 == winner
    assert stray_temps(out) == []


@pytest.mark.parametrize("workers", ["0", "2"])
@pytest.mark.slow
def test_hiseg_predict_writes_every_image_of_a_folder_with_a_non_utf8_name(tmp_path, workers):
    d = photo_folder(tmp_path, [b"a.png", BAD_NAME, b"b.png"])
    (Path(os.fsdecode(os.path.join(os.fsencode(d), b"broken\xff.png")))).write_bytes(b"")  # and an unreadable one
    out = tmp_path / "out"
    p = hiseg("predict", "--classical", "-q", "--workers", workers, "--regions", "3", "--html", str(d), "-o", str(out))
    so, se = p.communicate(timeout=300)
    assert p.returncode == 1, se  # one image failed, the others written
    assert "broken\\xff.png" in se and "not an image (0 bytes)" in se and "Traceback" not in se
    assert "wrote 3 image(s)" in so
    for stem in (b"a", b"b", b"bad\xff\xfename"):
        assert {stem + s for s in (b".mat", b"_labels.png", b"_overlay.png", b"_ucm.png", b"_ucm16.png",
                                   b".html")} <= set(listing(out))
    assert b"index.html" in listing(out) and stray_temps(out) == []
    assert "bad%FF%FEname.html" in (out / "index.html").read_text(encoding="utf-8")


def test_hiseg_view_shows_an_image_with_a_non_utf8_name(tmp_path):
    d = photo_folder(tmp_path, [BAD_NAME, b"good.png"])
    out = tmp_path / "pages"
    p = hiseg("view", "--classical", "-q", str(d), "-o", str(out))
    so, se = p.communicate(timeout=300)
    assert p.returncode == 0, se
    assert listing(out) == [b"bad\xff\xfename.html", b"good.html", b"index.html"]
    page = Path(os.fsdecode(os.path.join(os.fsencode(out), b"bad\xff\xfename.html"))).read_text(encoding="utf-8")
    assert "<title>bad\\xff\\xfename" in page


@pytest.mark.slow
def test_hiseg_predict_killed_mid_folder_finishes_with_resume(tmp_path):
    from hiseg.segmentation.outputs import image_done

    d = photo_folder(tmp_path, [f"{c}.png" for c in "abcdefgh"])
    out = tmp_path / "out"
    argv = ("predict", "--classical", "-q", "--workers", "0", "--regions", "4", "--html", str(d), "-o", str(out))
    p = hiseg(*argv, pause=0.5)  # 8 images of at least 0.5 s each: the Ctrl-C lands mid-folder
    deadline = time.time() + 300
    # two images complete (not merely two .html names: a page's temporary file, .a.html.<random>.tmp.html, is one)
    while not (out.exists() and sum(image_done(out, s, True, [out / f"{s}.html"]) for s in "abcdefgh") >= 2):
        assert time.time() < deadline and p.poll() is None, p.communicate()
        time.sleep(0.002)
    p.send_signal(signal.SIGINT)  # Ctrl-C in the middle of the folder
    _, se = p.communicate(timeout=120)
    assert p.returncode != 0
    done = [image_done(out, s, True, [out / f"{s}.html"]) for s in "abcdefgh"]
    assert 2 <= sum(done) < 8 and stray_temps(out) == []
    # a plain rerun refuses (the files exist); --resume finishes the job, the finished images untouched
    p = hiseg(*argv)
    _, se = p.communicate(timeout=300)
    assert p.returncode == 2 and "--overwrite" in se
    # (the run record, .hiseg-predict.json, is no image's)
    kept = {q.name: q.stat().st_mtime_ns for q in out.iterdir()
            if q.name[0] in "abcdefgh" and done["abcdefgh".index(q.name[0])]}
    # with other options --resume is refused before anything is written, naming both values
    every = {q.name: q.stat().st_mtime_ns for q in out.iterdir()}
    other = list(argv)
    other[other.index("--regions") + 1] = "5"
    p = hiseg(*other, "--resume")
    _, se = p.communicate(timeout=300)
    assert p.returncode == 2 and "Traceback" not in se, se
    assert f"--resume: {out} was written with --regions 4, this run asks for --regions 5;" in se
    assert {q.name: q.stat().st_mtime_ns for q in out.iterdir()} == every
    p = hiseg(*[a for a in argv if a != "-q"], "--resume")
    so, se = p.communicate(timeout=300)
    assert p.returncode == 0, se
    assert f"{sum(done)} of 8 image(s) are complete" in se
    assert all(image_done(out, s, True, [out / f"{s}.html"]) for s in "abcdefgh")
    assert {q.name: q.stat().st_mtime_ns for q in out.iterdir() if q.name in kept} == kept
    assert (out / "index.html").read_text(encoding="utf-8").count('class="card"') == 8
    # --resume and --overwrite together are refused
    p = hiseg(*argv, "--resume", "--overwrite")
    _, se = p.communicate(timeout=300)
    assert p.returncode == 2 and "at most one of --overwrite" in se


@pytest.mark.slow
def test_hiseg_predict_resume_with_other_options_is_refused_and_with_the_same_ones_goes_on(tmp_path):
    import json

    d = photo_folder(tmp_path, [f"{c}.png" for c in "abc"])
    out = tmp_path / "out"
    argv = ("predict", "--classical", "-q", "--workers", "0", "--regions", "6", "--html", str(d), "-o", str(out))
    p = hiseg(*argv)
    _, se = p.communicate(timeout=300)
    assert p.returncode == 0, se
    record = json.loads((out / ".hiseg-predict.json").read_text())
    assert record["images"] == {"a": 0, "b": 0, "c": 0} and len(record["options"]) == 1
    assert record["options"][0]["regions"] == 6 and record["options"][0]["html"] is True
    index = (out / "index.html").read_text(encoding="utf-8")
    assert index.count('class="card"') == 3 and "hiseg-predict" not in index  # the record is no image
    every = {q.name: q.stat().st_mtime_ns for q in out.iterdir()}
    # three options changed: refused, each named with both values, on one line; nothing written
    p = hiseg("predict", "--classical", "-q", "--workers", "0", "--regions", "3", "--max-pixels", "5000", str(d),
              "-o", str(out), "--resume")
    _, se = p.communicate(timeout=300)
    assert p.returncode == 2 and "Traceback" not in se and len(se.splitlines()) == 1, se
    assert (f"hiseg predict: error: --resume: {out} was written with no --max-pixels (the model's: 500000), --regions 6 "
            "and --html, this run asks for --max-pixels 5000, --regions 3 and no --html; rerun with the same "
            "options, or --overwrite") in se
    p = hiseg(*[a for a in argv if a != "--classical"], "-c", "bsds500", "--resume")  # another model
    _, se = p.communicate(timeout=300)
    assert p.returncode == 2 and "written with --classical, this run asks for --checkpoint bsds500;" in se, se
    assert {q.name: q.stat().st_mtime_ns for q in out.iterdir()} == every
    # the same options (--tile and --workers may change: how the maps are computed, not what): goes on
    p = hiseg(*[a for a in argv if a != "-q"], "--tile", "0", "--resume")
    _, se = p.communicate(timeout=300)
    assert p.returncode == 0 and "3 of 3 image(s) are complete" in se and "warning" not in se, se
    # the model's own setting given explicitly is the same option as none given
    p = hiseg(*[a for a in argv if a != "-q"], "--max-pixels", "500000", "--resume")
    _, se = p.communicate(timeout=300)
    assert p.returncode == 0 and "3 of 3 image(s) are complete" in se, se
    assert {q.name: q.stat().st_mtime_ns for q in out.iterdir()} == every  # the record too: unchanged
    # a plain rerun names the existing files, never the record
    p = hiseg(*argv)
    _, se = p.communicate(timeout=300)
    assert p.returncode == 2 and "exist already" in se and "hiseg-predict" not in se, se


@pytest.mark.slow
def test_hiseg_predict_resume_of_a_folder_without_a_record_warns_and_goes_on(tmp_path):
    import json

    from hiseg.segmentation.outputs import image_done

    d = photo_folder(tmp_path, [f"{c}.png" for c in "abc"])
    out = tmp_path / "out"
    argv = ("predict", "--classical", "-q", "--workers", "0", "--regions", "4", str(d), "-o", str(out))
    p = hiseg(*argv)
    assert p.wait(300) == 0
    (out / ".hiseg-predict.json").unlink()  # as an older hiseg left it
    (out / "c.mat").unlink()  # and interrupted before c was complete
    kept = {q.name: q.stat().st_mtime_ns for q in out.iterdir() if q.name[0] in "ab"}
    p = hiseg(*argv, "--resume")
    so, se = p.communicate(timeout=300)
    assert p.returncode == 0, se
    assert (f"hiseg predict: warning: --resume: {out} has no .hiseg-predict.json (written by an older hiseg, or by "
            "hand): the options that made its 2 complete image(s) cannot be checked; they are skipped as they are "
            "(--overwrite does them again)") in se  # a warning: with -q too
    assert "wrote 1 image(s)" in so and all(image_done(out, s, True) for s in "abc") and stray_temps(out) == []
    assert {q.name: q.stat().st_mtime_ns for q in out.iterdir() if q.name[0] in "ab"} == kept
    # the record names what this run wrote, not the images it could not check
    assert json.loads((out / ".hiseg-predict.json").read_text())["images"] == {"c": 0}


def test_the_run_record_keeps_each_images_options_across_runs(tmp_path):
    """:class:`hiseg.cli.record.RunRecord` over several runs into one folder: another run's
    images, an --overwrite run with other options (its images are either run's until it ends),
    a name that is not UTF-8, the model known by its file's digest, a corrupt record."""
    from hiseg.cli import build_parser
    from hiseg.cli.record import RECORD, RunRecord, output_options

    def options(*argv):
        return output_options(build_parser().parse_args(["predict", "x.png", "-o", "o", *argv]))

    six, three = options("--classical", "--regions", "6"), options("--classical", "--regions", "3")
    bad = os.fsdecode(b"bad\xff\xfename")
    record = RunRecord(tmp_path)
    assert not record.found
    record.assign(six, ["a", "b", bad], set(), overwrite=False)
    record.save()
    record = RunRecord(tmp_path)
    assert record.found and record.check_resume(six, ["a", "b", bad, "new"], tmp_path) == ["new"]
    with pytest.raises(ValueError, match=rf"{tmp_path} was written with --regions 6, this run asks for --regions 3"):
        record.check_resume(three, ["a", bad], tmp_path)
    # an --overwrite run with --regions 3 over a and b, stopped: their files may be either run's
    record.assign(three, ["a", "b"], {"a", "b"}, overwrite=True)
    record.save()
    for opts in (six, three):
        with pytest.raises(ValueError, match=r"2 image\(s\) in .*, e.g. a, were being replaced by an --overwrite"):
            RunRecord(tmp_path).check_resume(opts, ["a", "b"], tmp_path)
    # it ends: a written, b failed (its files untouched, --regions 6's)
    record.finish(["a", "b"], {"a"})
    record.save()
    record = RunRecord(tmp_path)
    assert record.images == {"a": 1, "b": 0, bad: 0} and len(record.options) == 2
    assert record.check_resume(three, ["a"], tmp_path) == record.check_resume(six, ["b", bad], tmp_path) == []
    with pytest.raises(ValueError, match=r"holds 2 image\(s\), e.g. b, that were written with --regions 6, this "
                                         r"run asks for --regions 3"):
        record.check_resume(three, ["a", "b", bad], tmp_path)
    # a model is its file: a shipped name and its checkpoint's path are one model, another file another
    from hiseg.models.weights import Weights

    by_name, by_path = options("-c", "bsds500", "--backend", "torch"), options("-c", str(Weights.BSDS500.path()))
    assert by_name["checkpoint"] == "bsds500" and by_path["checkpoint"] == str(Weights.BSDS500.path().resolve())
    assert by_name["sha256"] == by_path["sha256"] != options("-c", "bsds500_merge", "--backend", "torch")["sha256"]
    # its exported form on onnxruntime (the default on a CPU) is another model's files: a resume does not mix them
    assert options("-c", "bsds500", "--backend", "onnxruntime")["sha256"] != by_name["sha256"]
    record.assign(by_name, ["m"], set(), overwrite=False)
    assert record.check_resume(by_path, ["m"], tmp_path) == []
    with pytest.raises(ValueError, match="written with --checkpoint bsds500, this run asks for --checkpoint "
                                         "bsds500_merge;"):
        record.check_resume(options("-c", "bsds500_merge"), ["m"], tmp_path)
    (tmp_path / RECORD).write_text('{"format": "hiseg predict run record 1"')
    with pytest.raises(ValueError, match=r"\.hiseg-predict\.json is not a hiseg predict run record"):
        RunRecord(tmp_path)


# ----------------------------------------------------------------------------- 12: HISEG_WEIGHTS_DIR
def test_a_missing_weights_dir_is_an_error_naming_the_variable_and_an_empty_one_warns(tmp_path, monkeypatch):
    from hiseg.models.weights import Weights

    shipped = Weights.BSDS500
    expected = shipped.path()  # the package ships its weights
    monkeypatch.setenv("HISEG_WEIGHTS_DIR", str(tmp_path / "nowhere"))
    with pytest.raises(FileNotFoundError, match=r"HISEG_WEIGHTS_DIR='.*nowhere' is missing"):
        shipped.path()
    (tmp_path / "a_file").write_text("x")
    monkeypatch.setenv("HISEG_WEIGHTS_DIR", str(tmp_path / "a_file"))
    with pytest.raises(FileNotFoundError, match="HISEG_WEIGHTS_DIR=.*a file, not a folder"):
        shipped.path()
    (tmp_path / "empty").mkdir()
    monkeypatch.setenv("HISEG_WEIGHTS_DIR", str(tmp_path / "empty"))
    with pytest.warns(UserWarning, match=r"HISEG_WEIGHTS_DIR=.*empty' holds no hiseg_bsds500.ckpt \(an empty folder\)"):
        assert shipped.path() == expected
    own = tmp_path / "own"
    own.mkdir()
    (own / shipped.value.file).write_bytes(expected.read_bytes())
    monkeypatch.setenv("HISEG_WEIGHTS_DIR", str(own))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert shipped.path() == own / shipped.value.file


# ----------------------------------------------------------------------------- 9: a full disk while training
FULL_DISK = '''
import builtins, errno, os

_DISK, _BYTES = os.environ["FAKE_DISK"], int(os.environ["FAKE_DISK_BYTES"])
_open, _used = builtins.open, [0]


class _Filling:
    """A file on a disk that fills up after _BYTES bytes of checkpoints: the write that
    crosses it writes what fits, then fails with ENOSPC (as a real full disk does)."""

    def __init__(self, f):
        self._f = f

    def write(self, b):
        room = _BYTES - _used[0]
        if len(b) > room:
            self._f.write(bytes(memoryview(b)[:max(room, 0)]))
            self._f.flush()
            _used[0] = _BYTES
            raise OSError(errno.ENOSPC, "No space left on device")
        _used[0] += len(b)
        return self._f.write(b)

    def __getattr__(self, name):
        return getattr(self._f, name)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self._f.close()


def _filling_open(file, mode="r", *args, **kwargs):
    f = _open(file, mode, *args, **kwargs)
    if isinstance(file, (str, bytes, os.PathLike)) and "b" in mode and any(c in mode for c in "wax"):
        p = os.path.abspath(os.fsdecode(file))
        if p.startswith(_DISK) and ("ckpt" in os.path.basename(p) or os.sep + "tmpdir" + os.sep in p):
            return _Filling(f)
    return f


builtins.open = _filling_open
'''


@pytest.mark.slow
def test_a_full_disk_while_training_leaves_no_partial_checkpoint_and_says_so(tmp_path, monkeypatch):
    import torch
    from _train import run_train

    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(FULL_DISK)
    run = tmp_path / "run"
    (run / "tmpdir").mkdir(parents=True)
    # a checkpoint of the tiny run is ~430 kB: the third one fills the disk halfway
    monkeypatch.setenv("FAKE_DISK", str(run))
    monkeypatch.setenv("FAKE_DISK_BYTES", str(1_075_000))
    monkeypatch.setenv("TMPDIR", str(run / "tmpdir"))
    r = run_train(run, "--trainer.max_steps", "4", pythonpath=site)
    assert r.returncode != 0
    err = r.stderr.strip().splitlines()
    assert "Traceback" not in r.stderr, r.stderr[-3000:]
    assert err[-1].startswith("train.py: error: cannot write ") and ".ckpt: No space left on device (the disk is " \
        "full)" in err[-1], err[-3:]
    ckpts = [p for p in run.rglob("*") if p.is_file() and "ckpt" in p.name and "tmpdir" not in p.parts]
    assert ckpts and all(p.suffix == ".ckpt" and not p.name.startswith(".") for p in ckpts), ckpts
    for p in ckpts:  # every checkpoint left is whole
        assert torch.load(p, map_location="cpu", weights_only=True)["global_step"] > 0


# ----------------------------------------------------------------------------- 6-8: training data and options
def train_py(tmp_path, *argv, timeout=600):
    """``python train.py ARGV`` in ``tmp_path`` (logs under tmp_path/run)."""
    from _train import ROOT

    cmd = [sys.executable, str(ROOT / "train.py"), *argv, "--trainer.default_root_dir", str(tmp_path / "run")]
    env = dict(os.environ, PYTHONWARNINGS="ignore", OMP_NUM_THREADS="1")
    return subprocess.run(cmd, cwd=tmp_path, capture_output=True, text=True, timeout=timeout, env=env)


def label_folder(root: Path, n: int = 4, size=(40, 48)) -> Path:
    """A user's folder of n images (two colour halves) with a .npy label each."""
    import cv2

    (root / "images").mkdir(parents=True)
    (root / "labels").mkdir()
    for i in range(n):
        img = np.zeros((*size, 3), np.uint8)
        lab = np.zeros(size, np.int64)
        img[:, 10 + 5 * i:] = (200, 60, 30)
        lab[:, 10 + 5 * i:] = 1
        cv2.imwrite(str(root / "images" / f"im{i}.png"), img)
        np.save(root / "labels" / f"im{i}.npy", lab)
    return root


FOLDER_RUN = ("fit", "--config", "configs/folder.yaml", "--data.init_args.num_workers", "0",
              "--data.init_args.crop_size", "32", "--data.init_args.batch_size", "2", "--trainer.max_steps", "2",
              "--model.arch_kwargs", '{"width": 8}', "--trainer.enable_progress_bar", "false")


def assert_refused(r, *needles, tmp_path):
    """One line on stderr naming the problem, exit 2, no traceback, no run folder left."""
    assert r.returncode == 2, r.stderr[-3000:]
    assert "Traceback" not in r.stderr, r.stderr[-3000:]
    last = r.stderr.strip().splitlines()[-1]
    assert last.startswith("train.py: error: ") and all(n in last for n in needles), last
    run = tmp_path / "run"
    assert not run.exists() or not [p for p in run.rglob("*") if p.is_file()], list(run.rglob("*"))


@pytest.mark.parametrize("bad, needles", [
    (lambda p: np.save(p, -np.ones((40, 48), np.int64)), ("im2.npy", "negative labels (min -1)")),
    (lambda p: np.save(p, np.zeros((40, 48), np.float32)), ("im2.npy", "expected an integer array, got dtype float32")),
    (lambda p: np.save(p, np.zeros((30, 48), np.int64)), ("im2.npy", "have shape (30, 48)", "has shape (40, 48)")),
])
@pytest.mark.slow
def test_a_bad_training_label_is_refused_at_start_up_naming_the_file(tmp_path, bad, needles):
    from _train import ROOT

    data = label_folder(tmp_path / "data")
    bad(data / "labels" / "im2.npy")
    r = train_py(tmp_path, *[str(ROOT / a) if a.startswith("configs/") else a for a in FOLDER_RUN],
                 "--data.init_args.data_root", str(data))
    assert_refused(r, *needles, tmp_path=tmp_path)


@pytest.mark.slow
def test_a_one_image_folder_and_a_negative_learning_rate_are_one_line_each(tmp_path):
    from _train import ROOT

    argv = [str(ROOT / a) if a.startswith("configs/") else a for a in FOLDER_RUN]
    data = label_folder(tmp_path / "one", n=1)
    r = train_py(tmp_path, *argv, "--data.init_args.data_root", str(data))
    assert_refused(r, str(data), "1 image(s) cannot be split", tmp_path=tmp_path)
    data = label_folder(tmp_path / "four")
    r = train_py(tmp_path, *argv, "--data.init_args.data_root", str(data), "--model.lr", "-1")
    assert_refused(r, "model.lr must be > 0", "-1", tmp_path=tmp_path)


def test_the_start_up_label_check_reads_headers_then_values_and_accepts_good_labels(tmp_path):
    from hiseg.data.folder import FolderSegmentation

    data = label_folder(tmp_path / "data", n=3)
    FolderSegmentation(data).check_labels()  # good labels pass
    np.save(data / "labels" / "im1.npy", np.full((40, 48), -1, np.int64))
    from hiseg.io import DataError

    with pytest.raises(DataError, match=r"im1\.npy: negative labels"):
        FolderSegmentation(data).check_labels()
    FolderSegmentation(data).check_labels([0, 2])  # a subset without it passes


def bsds_folder(root: Path, bad=None) -> Path:
    """A BSDS500-layout folder: 3 train and 1 val images (two colour halves, 40x48) with their
    ground truth (2 annotators each); ``bad(path)`` then rewrites train image b's ``.mat``."""
    import cv2
    import scipy.io

    for split, names in (("train", "abc"), ("val", "d")):
        (root / "images" / split).mkdir(parents=True)
        (root / "groundTruth" / split).mkdir(parents=True)
        for n in names:
            img = np.zeros((40, 48, 3), np.uint8)
            img[:, 24:] = 200
            cv2.imwrite(str(root / "images" / split / f"{n}.jpg"), img)
            seg = np.ones((40, 48), np.uint16)
            seg[:, 24:] = 2
            gt = np.empty((1, 2), dtype=object)
            for k in range(2):
                gt[0, k] = {"Segmentation": seg, "Boundaries": np.zeros(seg.shape, np.uint8)}
            scipy.io.savemat(str(root / "groundTruth" / split / f"{n}.mat"), {"groundTruth": gt})
    if bad is not None:
        bad(root / "groundTruth" / "train" / "b.mat")
    return root


def _gt_mat(path, seg):
    import scipy.io

    gt = np.empty((1, 1), dtype=object)
    gt[0, 0] = {"Segmentation": seg, "Boundaries": np.zeros(seg.shape, np.uint8)}
    scipy.io.savemat(str(path), {"groundTruth": gt})


BAD_GROUND_TRUTH = [
    (lambda p: _gt_mat(p, -np.ones((40, 48), np.int16)), ("b.mat", "negative labels (min -1)")),
    (lambda p: _gt_mat(p, np.ones((30, 48), np.uint16)), ("b.mat", "(30, 48)", "(40, 48)")),
    (lambda p: p.write_bytes(b""), ("b.mat", "cannot read MATLAB file")),
]


@pytest.mark.parametrize("bad, needles", BAD_GROUND_TRUTH)
def test_a_bad_bsds_ground_truth_is_found_by_the_start_up_check(tmp_path, bad, needles):
    from hiseg.data.bsds import BSDS500
    from hiseg.io import DataError

    BSDS500(bsds_folder(tmp_path / "good"), "train").check_labels()  # good ground truth passes
    ds = BSDS500(bsds_folder(tmp_path / "bad", bad), "train")
    with pytest.raises(DataError) as err:
        ds.check_labels()
    assert all(n in str(err.value) for n in needles), err.value
    ds.check_labels([0, 2])  # a subset without it passes


@pytest.mark.slow
def test_a_bad_bsds_ground_truth_is_refused_by_train_py_before_the_first_step(tmp_path):
    from _train import ROOT

    data = bsds_folder(tmp_path / "bsds", BAD_GROUND_TRUTH[0][0])
    r = train_py(tmp_path, "fit", "--config", str(ROOT / "configs" / "bsds500.yaml"), "--data.init_args.data_root",
                 str(data), "--data.init_args.num_workers", "0", "--data.init_args.crop_size", "32",
                 "--data.init_args.batch_size", "2", "--trainer.max_steps", "2", "--model.arch_kwargs",
                 '{"width": 8}', "--trainer.enable_progress_bar", "false")
    assert_refused(r, *BAD_GROUND_TRUTH[0][1], tmp_path=tmp_path)


# ----------------------------------------------------------------------------- minor: the default run, one override
@pytest.mark.slow
def test_the_default_run_with_one_override_trains_it(tmp_path):
    r = train_py(tmp_path, "--trainer.max_epochs", "1", "--data.init_args.n_train", "8", "--data.init_args.n_val", "2",
                 "--data.init_args.size", "48", "--data.init_args.batch_size", "4",
                 "--model.arch_kwargs", '{"width": 8}', "--trainer.enable_progress_bar", "false")
    assert r.returncode == 0, r.stderr[-3000:]
    assert "training finished: 1 epoch(s), 2 step(s)" in r.stdout


# ----------------------------------------------------------------------------- the probe, at a small size
@pytest.mark.slow
def test_the_fault_probe_finds_every_case_ok():
    from _train import ROOT

    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONWARNINGS="ignore")
    r = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "fault_probe.py"), "--images", "3"], env=env,
                       capture_output=True, text=True, timeout=1200, cwd=ROOT)
    rows = [line for line in r.stdout.splitlines() if line.startswith("| ") and not line.startswith("| case")]
    assert len(rows) >= 15, r.stdout[-3000:] + r.stderr[-3000:]
    assert all(row.split("|")[2].strip() == "OK" for row in rows), "\n".join(rows)
    assert r.returncode == 0
