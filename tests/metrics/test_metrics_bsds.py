"""Tests of the BSDS500 benchmark reimplementation (hiseg.metrics).

* Reference outputs of the official MATLAB benchmark (``../shared/data/bench``;
  skipped where absent): every number of ``test_1`` .. ``test_5`` is reproduced,
  region figures to 1e-4 and boundary figures to 2e-3 (the official matching
  breaks ties at random, about 1e-3 between its own runs).
* Synthetic unit tests (no data needed): perfect / empty / shifted predictions,
  exactness of the assignment against a dense brute force, seg2bdry, thinning,
  covering / PRI / VI against brute force, ODS interpolation and AP.
* Bad input: unreadable files, mismatched sizes or names, empty or missing
  folders; ``--out`` leaves nothing behind on error.
"""
from __future__ import annotations

import argparse
import itertools
import json
import math
from pathlib import Path

import numpy as np
import pytest
from scipy.io import savemat
from scipy.optimize import linear_sum_assignment

from hiseg.io import atomic_write_files
from hiseg.metrics import bsds, predictions, report
from hiseg.metrics import matching as bd
from hiseg.metrics import region as rg
from hiseg.metrics import summary

SHARED = Path(__file__).resolve().parents[2].parent / "shared" / "data"
BENCH = SHARED / "bench" / "data"


# ----------------------------------------------------------------------------
# helpers
# ----------------------------------------------------------------------------
def seg_to_ucm2(seg: np.ndarray, value: float = 1.0) -> np.ndarray:
    """Doubled-grid ucm2 whose only level is the boundary of ``seg``."""
    h, w = seg.shape
    u = np.zeros((2 * h + 1, 2 * w + 1))
    ev = seg[:-1, :] != seg[1:, :]  # between (i, j) and (i+1, j)
    eh = seg[:, :-1] != seg[:, 1:]  # between (i, j) and (i, j+1)
    u[2:-1:2, 1::2] = ev
    u[1::2, 2:-1:2] = eh
    u[2:-1:2, 2:-1:2] = np.maximum(np.maximum(eh[:-1], eh[1:]), np.maximum(ev[:, :-1], ev[:, 1:]))
    u[0, :], u[-1, :] = u[1, :], u[-2, :]
    u[:, 0], u[:, -1] = u[:, 1], u[:, -2]
    return u * value


def write_gt(path: Path, segs) -> None:
    cell = np.empty((1, len(segs)), dtype=object)
    for k, s in enumerate(segs):
        cell[0, k] = {"Segmentation": np.asarray(s, dtype=np.uint16),
                      "Boundaries": bd.seg_to_boundaries(s).astype(np.uint8)}
    savemat(str(path), {"groundTruth": cell})


def blocks(h, w, rows, cols):
    """Label image of a rows x cols grid of rectangles."""
    r = np.minimum(np.arange(h) * rows // h, rows - 1)
    c = np.minimum(np.arange(w) * cols // w, cols - 1)
    return (r[:, None] * cols + c[None, :] + 1).astype(np.int64)


def _cli(argv):
    from hiseg.cli import evaluate as evaluate_cli

    p = evaluate_cli.add_arguments(argparse.ArgumentParser())
    return evaluate_cli.run(p.parse_args(argv))


# ----------------------------------------------------------------------------
# reference outputs of the official benchmark
# ----------------------------------------------------------------------------
REGION_FILES = {"eval_cover.txt", "eval_cover_th.txt", "eval_cover_img.txt", "eval_RI_VOI.txt", "eval_RI_VOI_thr.txt"}
# test name -> (input folder, n_thresholds, boundary, region)
REFERENCE = {
    "test_1": ("ucm2", 5, True, True),
    "test_2": ("png", 5, True, False),
    "test_3": ("segs", 99, True, False),  # nthresh is overridden by the number of segmentations
    "test_4": ("segs", 5, True, True),
    "test_5": ("segs", 5, False, True),
}


@pytest.fixture(scope="module")
def reference_results():
    if not (BENCH / "test_1").is_dir():
        pytest.skip(f"official benchmark outputs not found at {BENCH}")
    cache = {}

    def get(test):
        if test not in cache:
            src, n, b, r = REFERENCE[test]
            res = bsds.evaluate(BENCH / src, BENCH / "groundTruth", n_thresholds=n, workers=2, boundary=b, region=r)
            cache[test] = (res, report.official_txt_files(res))
        return cache[test]

    return get


@pytest.mark.parametrize("test", sorted(REFERENCE))
def test_reference_outputs(reference_results, test):
    res, files = reference_results(test)
    ref_files = sorted((BENCH / test).glob("*.txt"))
    assert ref_files
    assert set(files) == {f.name for f in ref_files}
    for f in ref_files:
        ref = np.loadtxt(f, ndmin=2)
        mine = np.loadtxt(files[f.name].splitlines(), ndmin=2)
        assert mine.shape == ref.shape, f.name
        tol = 1e-4 if f.name in REGION_FILES else 2e-3
        # the ODS/OIS threshold columns of boundary files may sit between
        # thresholds; compare them like the other columns
        dev = np.abs(mine - ref).max()
        assert dev <= tol, f"{test}/{f.name}: max deviation {dev:.2e} > {tol:g}\n{files[f.name]}"
    if REFERENCE[test][0] == "png":
        assert "covering" not in res and "pri" not in res


def test_reference_boundary_counts_close(reference_results):
    """Recall counts are a property of the optimum (cardinality): ours are as
    large as the official ones, and within 0.2 %."""
    res, _ = reference_results("test_1")
    ref = np.loadtxt(BENCH / "test_1" / "eval_bdry_thr.txt", ndmin=2)
    rec = np.array([r["recall"] for r in res["boundary"]["per_threshold"]])
    assert np.all(rec >= ref[:, 1] - 1e-6)
    assert np.all(rec - ref[:, 1] < 2e-3)


# ----------------------------------------------------------------------------
# boundary benchmark, synthetic
# ----------------------------------------------------------------------------
def test_thresholds_matlab_linspace():
    t = summary.thresholds(5)
    np.testing.assert_allclose(t, [1 / 6, 2 / 6, 3 / 6, 4 / 6, 5 / 6])
    # MATLAB arithmetic: (k * (d2 - d1)) / (n - 1) + d1, end points pinned
    d1, d2 = 1 / 100, 1 - 1 / 100
    t = summary.thresholds(99)
    assert t[0] == d1 and t[-1] == d2
    assert np.array_equal(t[1:-1], d1 + (np.arange(1, 98) * (d2 - d1)) / 98)
    with pytest.raises(ValueError):
        summary.thresholds(0)


def test_seg_to_boundaries_small():
    seg = np.array([[1, 1, 2],
                    [1, 1, 2],
                    [3, 3, 3]])
    expected = np.array([[0, 1, 0],
                         [1, 1, 1],
                         [0, 0, 0]], dtype=bool)
    # (0,0): its 2x2 block {1,1,1,1} is uniform -> 0; (0,1): block has 1|2 -> 1
    # last column (0,2): only compared with the pixel below (2 == 2) -> 0
    # last row: only compared with the right neighbour (3 == 3) -> 0
    np.testing.assert_array_equal(bd.seg_to_boundaries(seg), expected)
    assert not bd.seg_to_boundaries(np.ones((4, 5))).any()


def test_thin_to_one_pixel():
    img = np.zeros((30, 40), dtype=bool)
    img[10:13, 5:35] = True  # 3-pixel thick bar
    t = bd.thin_boundaries(img)
    assert t.sum() > 0 and t.sum() <= 30
    assert (t.sum(axis=0) <= 1).all()  # one pixel per column
    from skimage.morphology import thin

    np.testing.assert_array_equal(t, thin(img))
    assert not bd.thin_boundaries(np.zeros((5, 5))).any()


def test_perfect_prediction():
    seg = blocks(60, 80, 3, 4)
    gt = [bd.seg_to_boundaries(seg)] * 3
    m = bd.BoundaryMatcher(gt)
    cnt_r, sum_r, cnt_p, sum_p = m.counts(bd.thin_boundaries(gt[0]))
    assert cnt_r == sum_r == 3 * gt[0].sum() and cnt_p == sum_p == gt[0].sum()
    res = bd.boundary_counts([(0, gt[0])], m, [0.5])
    out = summary.collect_boundary([res])
    assert out["ods"]["f"] == pytest.approx(1.0)
    assert out["ois"]["f"] == pytest.approx(1.0)
    assert out["ods"]["recall"] == pytest.approx(1.0) and out["ods"]["precision"] == pytest.approx(1.0)


def test_empty_prediction():
    seg = blocks(40, 40, 2, 2)
    m = bd.BoundaryMatcher([bd.seg_to_boundaries(seg)])
    cnt_r, sum_r, cnt_p, sum_p = m.counts(np.zeros(seg.shape, bool))
    assert (cnt_r, cnt_p, sum_p) == (0, 0, 0) and sum_r > 0
    res = bd.boundary_counts([(0, np.zeros(seg.shape, bool))] * 2, m, [0.3, 0.6])
    out = summary.collect_boundary([res])
    assert out["ods"]["f"] == 0 and out["ois"]["f"] == 0 and out["ap"] == 0


@pytest.mark.parametrize("shift,matched", [(0, True), (3, True), (4, True), (5, False)])
def test_shifted_line_tolerance(shift, matched):
    h = w = 400  # tolerance 0.0075 * 565.7 = 4.24 px
    gt = np.zeros((h, w), bool)
    gt[50:350, 100] = True
    pred = np.zeros((h, w), bool)
    pred[50:350, 100 + shift] = True
    m1, m2, cost = bd.correspond_pixels(pred, gt)
    assert m1.sum() == (300 if matched else 0) and m2.sum() == m1.sum()
    tol = bd.max_distance_pixels((h, w))
    expected = 300 * shift if matched else 600 * 100 * tol
    assert cost == pytest.approx(expected)


def _brute_force_objective(p_yx, g_yx, md, ow):
    """Optimal integer objective by a dense assignment with outlier nodes."""
    n1, n2 = len(p_yx), len(g_yx)
    big = 10 * ow * (n1 + n2 + 1)
    d = np.sqrt(((p_yx[:, None, :] - g_yx[None, :, :]) ** 2).sum(-1))
    w = np.where(d <= md, np.rint(d * 100), big)
    c = np.full((n1 + n2, n2 + n1), big, dtype=np.float64)
    c[:n1, :n2] = w
    c[:n1, n2:] = np.where(np.eye(n1, dtype=bool), ow, big)
    c[n1:, :n2] = np.where(np.eye(n2, dtype=bool), ow, big)
    c[n1:, n2:] = 0  # any outlier may pair with any outlier
    r, cc = linear_sum_assignment(c)
    return c[r, cc].sum()


@pytest.mark.parametrize("seed", range(6))
def test_assignment_is_optimal(seed):
    """The sparse solver reaches the dense brute-force optimum (integer costs)."""
    rng = np.random.default_rng(seed)
    h, w = 40, 40
    pred = rng.random((h, w)) < 0.06
    gt = rng.random((h, w)) < 0.06
    if seed % 2:  # correlated maps: many ties, long alternating paths
        gt = np.roll(pred, 1, axis=1) | (rng.random((h, w)) < 0.02)
    m = bd.BoundaryMatcher([gt])
    mp, mg = m.match(pred)[0]
    p_yx = np.argwhere(pred).astype(float)
    g_yx = np.argwhere(gt).astype(float)
    d = np.sqrt(((p_yx[mp] - g_yx[mg]) ** 2).sum(-1))
    assert np.all(d <= m.max_dist_px + 1e-9)
    assert len(set(mp.tolist())) == len(mp) and len(set(mg.tolist())) == len(mg)
    ow = m.outlier_weight
    ours = np.rint(d * 100).sum() + ow * (len(p_yx) + len(g_yx) - 2 * len(mp))
    # brute force: sum + ow * (unmatched); pairs cost w, and outlier-outlier 0
    assert ours == _brute_force_objective(p_yx, g_yx, m.max_dist_px, ow)


def test_repeated_matches_give_same_counts():
    rng = np.random.default_rng(3)
    seg = blocks(120, 160, 4, 5)
    gt = [bd.seg_to_boundaries(seg), bd.seg_to_boundaries(np.roll(seg, 2, axis=1))]
    pred = bd.seg_to_boundaries(np.roll(seg, 1, axis=0)) | (rng.random(seg.shape) < 0.01)
    a = bd.BoundaryMatcher(gt)
    b = bd.BoundaryMatcher(gt)
    for _ in range(2):  # a matcher keeps no state between maps
        assert a.counts(pred) == b.counts(pred)


def test_max_f_interpolates_like_official():
    thresh = np.array([0.2, 0.4, 0.6])
    r = np.array([0.9, 0.6, 0.3])
    p = np.array([0.3, 0.7, 0.9])
    # brute force of the official double loop
    best = (thresh[0], r[0], p[0], 2 * p[0] * r[0] / (p[0] + r[0]))
    for i in range(1, 3):
        for d in np.linspace(0, 1, 100):
            rr = r[i] * d + r[i - 1] * (1 - d)
            pp = p[i] * d + p[i - 1] * (1 - d)
            f = 2 * pp * rr / (pp + rr)
            if f > best[3]:
                best = (thresh[i] * d + thresh[i - 1] * (1 - d), rr, pp, f)
    np.testing.assert_allclose(summary.max_f(thresh, r, p), best, rtol=0, atol=1e-12)


def test_collect_boundary_ap_and_ois():
    t = np.array([0.25, 0.5, 0.75])
    a = bd.BoundaryImageResult(t, np.array([80, 60, 30]), np.array([100] * 3), np.array([40, 45, 29]), np.array([80, 50, 30]), "a")
    b = bd.BoundaryImageResult(t, np.array([50, 40, 10]), np.array([100] * 3), np.array([30, 38, 10]), np.array([90, 40, 10]), "b")
    out = summary.collect_boundary([a, b], official_rounding=False)
    rr = np.array([130, 100, 40]) / 200
    pp = np.array([70 / 170, 83 / 90, 39 / 40])
    order = np.argsort(rr)
    ri = np.arange(101) * 0.01
    pi = np.interp(ri, rr[order], pp[order])
    pi[(ri < rr.min()) | (ri > rr.max())] = 0
    assert out["ap"] == pytest.approx(pi.sum() * 0.01)
    # OIS: each image at its (last) best discrete F
    fa = summary.f_measure(a.cnt_r / 100, a.cnt_p / a.sum_p)
    fb = summary.f_measure(b.cnt_r / 100, b.cnt_p / b.sum_p)
    ia, ib = np.flatnonzero(fa == fa.max())[-1], np.flatnonzero(fb == fb.max())[-1]
    assert out["ois"]["recall"] == pytest.approx((a.cnt_r[ia] + b.cnt_r[ib]) / 200)
    assert out["ois"]["precision"] == pytest.approx((a.cnt_p[ia] + b.cnt_p[ib]) / (a.sum_p[ia] + b.sum_p[ib]))
    assert [r["image"] for r in out["per_image"]] == ["a", "b"]


# ----------------------------------------------------------------------------
# region benchmark, synthetic
# ----------------------------------------------------------------------------
def test_identical_partitions():
    seg = blocks(30, 40, 3, 2)
    assert rg.rand_index(seg, seg) == 1.0
    assert rg.variation_of_information(seg, seg) == pytest.approx(0.0, abs=1e-12)
    ms, mg, a_s, a_g, ri, vi = rg.covering_matches(seg, [seg, seg])
    np.testing.assert_allclose(ms, 1.0)
    for m in mg:
        np.testing.assert_allclose(m, 1.0)
    res = rg.region_counts([(0, seg)], [seg, seg], [1.0])
    out = summary.collect_region([res])
    assert out["covering"]["ods"] == pytest.approx(1.0) and out["covering"]["best"] == pytest.approx(1.0)
    assert out["pri"]["ods"] == pytest.approx(1.0) and out["vi"]["ods"] == pytest.approx(0.0, abs=1e-12)


def test_rand_index_brute_force():
    rng = np.random.default_rng(0)
    a = rng.integers(1, 4, size=(5, 6))
    b = rng.integers(0, 3, size=(5, 6))  # label 0 counts as a cluster for RI/VI
    fa, fb = a.ravel(), b.ravel()
    agree = total = 0
    for i, j in itertools.combinations(range(fa.size), 2):
        agree += (fa[i] == fa[j]) == (fb[i] == fb[j])
        total += 1
    assert rg.rand_index(a, b) == pytest.approx(agree / total, abs=1e-14)
    # VI in bits, from the joint distribution
    n = fa.size
    joint = {}
    for x, y in zip(fa, fb):
        joint[(x, y)] = joint.get((x, y), 0) + 1
    pa = {x: np.mean(fa == x) for x in set(fa)}
    pb = {y: np.mean(fb == y) for y in set(fb)}
    h = lambda ps: -sum(p * math.log2(p) for p in ps if p > 0)  # noqa: E731
    mi = sum(c / n * math.log2((c / n) / (pa[x] * pb[y])) for (x, y), c in joint.items())
    assert rg.variation_of_information(a, b) == pytest.approx(h(pa.values()) + h(pb.values()) - 2 * mi, abs=1e-12)


def test_covering_brute_force():
    rng = np.random.default_rng(1)
    seg = rng.integers(1, 5, size=(8, 9))
    gts = [rng.integers(1, 4, size=(8, 9)), rng.integers(1, 6, size=(8, 9))]
    ms, mg, a_s, a_g, ri, vi = rg.covering_matches(seg, gts)

    def iou(x, y):
        return (x & y).sum() / (x | y).sum()

    for r in range(1, seg.max() + 1):
        best = max(iou(seg == r, g == q) for g in gts for q in range(1, g.max() + 1))
        assert ms[r - 1] == pytest.approx(best)
    for g, m in zip(gts, mg):
        for q in range(1, g.max() + 1):
            assert m[q - 1] == pytest.approx(max(iou(seg == r, g == q) for r in range(1, seg.max() + 1)))
    assert ri == pytest.approx(np.mean([rg.rand_index(g, seg) for g in gts]))


def test_ucm_to_labels_8_connected():
    seg = blocks(6, 8, 2, 2)
    u = seg_to_ucm2(seg, 0.7)
    lab = rg.ucm_to_labels(u, 0.5)
    assert lab.shape == seg.shape
    # same partition as seg (up to label names)
    assert rg.rand_index(lab, seg) == 1.0 and len(np.unique(lab)) == 4
    assert len(np.unique(rg.ucm_to_labels(u, 0.7))) == 1


# ----------------------------------------------------------------------------
# dataset driver, synthetic
# ----------------------------------------------------------------------------
@pytest.fixture
def tiny_dataset(tmp_path):
    gt_dir, pred_dir = tmp_path / "gt", tmp_path / "pred"
    gt_dir.mkdir()
    pred_dir.mkdir()
    for k, (r, c) in enumerate([(2, 3), (3, 2), (2, 2)]):
        seg = blocks(40, 50, r, c)
        write_gt(gt_dir / f"im{k}.mat", [seg, np.where(seg == 2, 1, seg)])  # 2nd: two regions merged
        savemat(str(pred_dir / f"im{k}.mat"), {"ucm2": seg_to_ucm2(seg, 0.6)})
    return pred_dir, gt_dir


def test_evaluate_perfect_ucm(tiny_dataset):
    pred_dir, gt_dir = tiny_dataset
    res = bsds.evaluate(pred_dir, gt_dir, n_thresholds=3, workers=2)
    assert res["images"] == ["im0", "im1", "im2"] and res["kind"] == "ucm2"
    b = res["boundary"]
    assert b["ods"]["precision"] == pytest.approx(1.0) and b["ods"]["recall"] == pytest.approx(1.0)
    assert b["ods"]["threshold"] < 0.6 and b["ois"]["f"] == pytest.approx(1.0)
    # regions: identical to the 1st annotator, one merge away from the 2nd
    assert 0.8 < res["covering"]["ods"] < 1 and res["covering"]["ods_threshold"] < 0.6
    assert 0.8 < res["pri"]["ods"] < 1 and 0 < res["vi"]["ods"] < 1
    assert set(res["per_image_counts"]) == {"bdry", "reg", "reg_best", "ri_vi", "fop"}
    json.dumps(res)  # serialisable
    # the three boundary thresholds: 0.25, 0.5 keep the map, 0.75 removes it
    assert [round(r["recall"], 6) for r in b["per_threshold"]][2] == 0


def test_evaluate_pb_and_labels_png(tmp_path):
    from PIL import Image

    gt_dir, pb_dir, lab_dir = tmp_path / "gt", tmp_path / "pb", tmp_path / "lab"
    for d in (gt_dir, pb_dir, lab_dir):
        d.mkdir()
    seg = blocks(30, 30, 2, 3)
    write_gt(gt_dir / "a.mat", [seg])
    Image.fromarray((bd.seg_to_boundaries(seg) * 200).astype(np.uint8)).save(pb_dir / "a.png")
    Image.fromarray(seg.astype(np.uint8)).save(lab_dir / "a.png")
    res = bsds.evaluate(pb_dir, gt_dir, n_thresholds=4, workers=1)
    assert res["kind"] == "pb" and "covering" not in res and "pri" not in res and "vi" not in res
    assert res["boundary"]["ods"]["f"] == pytest.approx(1.0)
    res = bsds.evaluate(lab_dir, gt_dir, kind="labels", workers=1)
    assert res["kind"] == "labels" and res["thresholds"] == [1.0]
    assert res["covering"]["ods"] == pytest.approx(1.0) and res["boundary"]["ods"]["f"] == pytest.approx(1.0)


def test_segs_with_different_counts_rejected(tmp_path):
    gt_dir, pred_dir = tmp_path / "gt", tmp_path / "pred"
    gt_dir.mkdir()
    pred_dir.mkdir()
    seg = blocks(20, 20, 2, 2)
    for name, n in (("a", 2), ("b", 3)):
        write_gt(gt_dir / f"{name}.mat", [seg])
        cell = np.empty((1, n), dtype=object)
        for k in range(n):
            cell[0, k] = seg.astype(np.uint16)
        savemat(str(pred_dir / f"{name}.mat"), {"segs": cell})
    with pytest.raises(ValueError, match="numbers of segmentations"):
        bsds.evaluate(pred_dir, gt_dir, workers=1, region=False)


# ----------------------------------------------------------------------------
# bad input
# ----------------------------------------------------------------------------
def test_unreadable_prediction(tiny_dataset):
    pred_dir, gt_dir = tiny_dataset
    (pred_dir / "im1.mat").write_bytes(b"this is not a MATLAB file")
    with pytest.raises(ValueError, match="im1.mat"):
        bsds.evaluate(pred_dir, gt_dir, n_thresholds=2, workers=2)


def test_unreadable_png(tmp_path):
    (tmp_path / "gt").mkdir()
    (tmp_path / "pred").mkdir()
    write_gt(tmp_path / "gt" / "x.mat", [blocks(10, 10, 2, 2)])
    (tmp_path / "pred" / "x.png").write_bytes(b"\x89PNG garbage")
    with pytest.raises(ValueError, match="x.png"):
        bsds.evaluate(tmp_path / "pred", tmp_path / "gt", workers=1)


def test_prediction_without_ucm2_or_segs(tiny_dataset):
    pred_dir, gt_dir = tiny_dataset
    savemat(str(pred_dir / "im0.mat"), {"something": np.zeros((3, 3))})
    with pytest.raises(ValueError, match=r"im0\.mat.*'ucm2' or 'segs'"):
        bsds.evaluate(pred_dir, gt_dir, n_thresholds=2, workers=1)


def test_mismatched_sizes(tiny_dataset):
    pred_dir, gt_dir = tiny_dataset
    savemat(str(pred_dir / "im2.mat"), {"ucm2": seg_to_ucm2(blocks(40, 52, 2, 2))})
    with pytest.raises(ValueError, match=r"size mismatch.*im2\.mat.*40x52.*im2\.mat.*40x50"):
        bsds.evaluate(pred_dir, gt_dir, n_thresholds=2, workers=1)


def test_mismatched_names(tiny_dataset):
    pred_dir, gt_dir = tiny_dataset
    (pred_dir / "im0.mat").rename(pred_dir / "other.mat")
    with pytest.raises(ValueError, match=r"do not match.*im0\.mat.*other\.mat"):
        bsds.evaluate(pred_dir, gt_dir, workers=1)


def test_empty_and_missing_folders(tmp_path, tiny_dataset):
    pred_dir, gt_dir = tiny_dataset
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(ValueError, match="no prediction files"):
        bsds.evaluate(empty, gt_dir)
    with pytest.raises(ValueError, match="no ground-truth"):
        bsds.evaluate(pred_dir, empty)
    with pytest.raises(FileNotFoundError, match="does not exist"):
        bsds.evaluate(tmp_path / "nope", gt_dir)
    with pytest.raises(ValueError, match="thresholds"):
        bsds.evaluate(pred_dir, gt_dir, n_thresholds=0)


def test_cli_writes_outputs(tiny_dataset, tmp_path, capsys):
    pred_dir, gt_dir = tiny_dataset
    out = tmp_path / "out"
    rc = _cli([str(pred_dir), "--gt", str(gt_dir), "--thresholds", "3", "--out", str(out),
               "--workers", "1", "--quiet"])
    assert rc == 0
    text = capsys.readouterr().out
    assert "boundary F" in text and "covering" in text and "PRI" in text and "VI" in text
    names = {p.name for p in out.iterdir()}
    assert {"results.md", "results.json", "pr_curve.png", "eval_bdry.txt", "eval_cover.txt"} <= names
    assert not [n for n in names if n.endswith(".tmp")]
    res = json.loads((out / "results.json").read_text())
    assert res["boundary"]["ods"]["precision"] == pytest.approx(1.0)
    assert (out / "pr_curve.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_cli_error_leaves_no_output(tiny_dataset, tmp_path, capsys):
    pred_dir, gt_dir = tiny_dataset
    (pred_dir / "im0.mat").rename(pred_dir / "zzz.mat")
    out = tmp_path / "out"
    rc = _cli([str(pred_dir), "--gt", str(gt_dir), "--out", str(out), "--quiet"])
    assert rc == 2
    assert "zzz.mat" in capsys.readouterr().err
    assert not out.exists()


def test_atomic_write_failure_leaves_nothing(tmp_path):
    class Boom:
        def __bytes__(self):
            raise OSError("disk full")

    out = tmp_path / "o"
    with pytest.raises(OSError):
        atomic_write_files(out, {"a.txt": "fine", "b.bin": Boom()})
    assert list(out.iterdir()) == []


@pytest.mark.parametrize("scale, shift", [(255.0, 0.0), (1.0, -0.5)])
def test_ucm2_outside_0_1_is_refused(tmp_path, scale, shift):
    """A ucm2 in [0, 255] would be scored at thresholds in [0, 1] (silently wrong): refused."""
    ucm = np.zeros((7, 9))
    ucm[3, :] = 0.6
    savemat(tmp_path / "a.mat", {"ucm2": ucm * scale + shift})
    with pytest.raises(ValueError, match=r"rescale the map to \[0, 1\]"):
        predictions.load_prediction(tmp_path / "a.mat")
    savemat(tmp_path / "b.mat", {"ucm2": ucm})
    assert predictions.load_prediction(tmp_path / "b.mat").kind == "ucm2"


def test_ois_can_fall_below_ods_as_in_the_official_benchmark():
    """Issue 53, item 9 (docs/evaluate.md, "Why boundary OIS can be below ODS"): OIS sums the counts of
    each image at its own best F, so a poor image whose best F lies at a low threshold, with many
    predicted pixels, pulls the summed precision below the one common threshold's (ODS)."""
    t = np.array([0.25, 0.5, 0.75])
    good = bd.BoundaryImageResult(t, np.array([900, 800, 500]), np.array([1000] * 3), np.array([900, 780, 495]),
                                  np.array([1000, 800, 500]), "good")  # best F .9 at 0.25
    poor = bd.BoundaryImageResult(t, np.array([60, 5, 1]), np.array([100] * 3), np.array([400, 15, 4]),
                                  np.array([2000, 20, 5]), "poor")  # best F .3 at 0.25, with 2,000 pixels
    out = summary.collect_boundary([good, poor], official_rounding=False)
    r, p = (900 + 60) / 1100, (900 + 400) / 3000  # both images at 0.25, their own best
    assert out["ois"]["f"] == pytest.approx(2 * r * p / (r + p)) and out["ois"]["f"] < 0.6
    assert out["ods"]["f"] >= summary.f_measure(805 / 1100, 795 / 820) > 0.8  # all at 0.5
