"""Fop (precision-recall for objects and parts) and the SEISM baselines.

* Against SEISM's own per-image results on BSDS500 val (``../shared/data/bench/seism``,
  skipped where absent): gPb-owt-ucm's ucm2 through the whole ``hiseg evaluate`` driver
  give SEISM's F, precision and recall at every threshold, and SEISM's files give the
  published dataset figures.
* Against a brute force written from the definition (loops over a dense intersection
  matrix, in SEISM's scanning order) on random small partitions, ties included.
* Properties: identical partitions give 1, parts and merges are scored as the definition
  says, label permutations change nothing.
* Bad input: messages that name the file or option; nothing written under ``--out``.
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.io import savemat

from hiseg.io import DataError, load_ground_truth
from hiseg.metrics import bsds, fop, predictions, seism
from hiseg.metrics.summary import fop_dataset

SHARED = Path(__file__).resolve().parents[2].parent / "shared" / "data"
SEISM = SHARED / "bench" / "seism"
BSDS = SHARED / "BSDS500"


# ----------------------------------------------------------------------------- brute force
def _scan_relabel(x):
    """Labels renumbered 0.. in the order of their first pixel in a row-major scan."""
    out = np.empty(x.shape, dtype=np.int64)
    seen = {}
    for idx, v in np.ndenumerate(x):
        out[idx] = seen.setdefault(int(v), len(seen))
    return out, len(seen)


def _cands(areas, total):
    order = sorted(range(len(areas)), key=lambda i: (areas[i], i), reverse=True)  # equal areas: later first
    cand, acc = [0] * len(areas), 0.0
    for i in order:
        cand[i] = 1 if acc < 0.99 else 0
        acc += areas[i] / total
    return cand


def brute_fop(seg, gts):
    """Fop from its definition, one pair at a time (SEISM's loop order)."""
    p, npart = _scan_relabel(seg)
    total = seg.size
    ap = [int((p == j).sum()) for j in range(npart)]
    cp = _cands(ap, total)
    cls_p, prec_p = [None] * npart, [0.0] * npart
    n_obj_g = n_part_g = n_cand_g = 0
    over = 0.0
    for gt in gts:
        g, ng = _scan_relabel(gt)
        ag = [int((g == i).sum()) for i in range(ng)]
        cg = _cands(ag, total)
        cls_g, rec_g = [None] * ng, [0.0] * ng
        for i in range(ng):
            for j in range(npart):
                inter = int(((g == i) & (p == j)).sum())
                r, q = inter / ag[i], inter / ap[j]
                if cg[i] and cp[j]:
                    if r >= 0.9 and q >= 0.9:
                        cls_g[i], cls_p[j] = "obj", "obj"
                    elif r >= 0.25 and q >= 0.9:
                        if cls_p[j] is None:
                            cls_p[j] = "part"
                    elif r >= 0.9 and q >= 0.25:
                        cls_g[i] = "part"
                if q >= 0.9 and r < 0.9:
                    rec_g[i] += r
                elif r >= 0.9 and q < 0.9:
                    prec_p[j] += q
        n_cand_g += sum(cg)
        n_obj_g += cls_g.count("obj")
        n_part_g += cls_g.count("part")
        over += sum(rec_g[i] for i in range(ng) if cg[i] and cls_g[i] is None)
    under = sum(prec_p[j] for j in range(npart) if cp[j] and cls_p[j] is None) / len(gts)
    prec = (cls_p.count("obj") + under + 0.1 * cls_p.count("part")) / sum(cp)
    rec = (n_obj_g + over + 0.1 * n_part_g) / n_cand_g
    return (0.0 if prec == rec == 0 else 2 * prec * rec / (prec + rec)), prec, rec


def _as_tuple(r):
    return r.f, r.precision, r.recall


# ----------------------------------------------------------------------------- unit
def blocks(h, w, rows, cols):
    r = np.minimum(np.arange(h) * rows // h, rows - 1)
    c = np.minimum(np.arange(w) * cols // w, cols - 1)
    return (r[:, None] * cols + c[None, :] + 1).astype(np.int64)


def test_identical_partitions_score_one():
    seg = blocks(30, 40, 3, 4)
    assert _as_tuple(fop.objects_and_parts(seg, [seg, seg])) == (1.0, 1.0, 1.0)


def test_parts_are_weighted_by_beta_and_fragments_count_for_recall():
    gt = blocks(40, 40, 2, 2)
    halves = blocks(40, 40, 2, 4)  # every annotated region cut in two: parts (recall .5)
    f, p, r = _as_tuple(fop.objects_and_parts(halves, [gt]))
    assert p == pytest.approx(fop.BETA)  # each piece is a part: weight beta
    assert r == pytest.approx(1.0)  # every annotated region is fully covered by its pieces
    assert f == pytest.approx(2 * 0.1 / 1.1)
    fifths = blocks(40, 40, 2, 10)  # pieces of 20 % of a region: below the part threshold .25
    f, p, r = _as_tuple(fop.objects_and_parts(fifths, [gt]))
    assert p == 0.0 and r == pytest.approx(1.0) and f == 0.0


def test_a_merge_makes_annotated_regions_parts():
    gt = blocks(40, 40, 1, 2)
    merged = np.ones((40, 40), np.int64)
    f, p, r = _as_tuple(fop.objects_and_parts(merged, [gt, gt]))
    assert r == pytest.approx(fop.BETA)  # both annotated regions are parts of the one region
    assert p == pytest.approx(1.0)  # the region collects the precision of what lies within it
    assert (f, p, r) == pytest.approx(brute_fop(merged, [gt, gt]))


def test_smallest_regions_are_left_out():
    gt = blocks(20, 100, 1, 1)
    seg = np.ones((20, 100), np.int64)
    seg[0, :10] = 2  # 0.5 % of the image: not a candidate
    assert _as_tuple(fop.objects_and_parts(seg, [gt])) == (1.0, 1.0, 1.0)


@settings(max_examples=60, deadline=None)
@given(st.integers(0, 2**31 - 1), st.integers(2, 9), st.integers(1, 3))
def test_equals_brute_force_on_random_partitions(seed, k, n_gt):
    rng = np.random.default_rng(seed)
    h, w = rng.integers(3, 9, size=2)
    coarse = rng.integers(1, k + 1, size=(h, w))
    seg = coarse.copy()
    seg[rng.random((h, w)) < 0.15] = k + 1  # scattered small regions: many equal areas
    gts = []
    for _ in range(n_gt):
        g = coarse.copy()
        g[rng.random((h, w)) < 0.2] = rng.integers(1, k + 3)
        gts.append(g)
    assert _as_tuple(fop.objects_and_parts(seg, gts)) == pytest.approx(brute_fop(seg, gts), abs=1e-12)


def test_ties_at_the_99_percent_line_follow_the_scanning_order():
    # 100 px: region 1 has 97 px, then three 1-px regions; the line falls inside the tie
    gt = np.ones((10, 10), np.int64)
    seg = np.ones((10, 10), np.int64)
    seg[0, 0], seg[5, 5], seg[9, 9] = 2, 3, 4
    gt[0, 0] = 2  # only region 2 is annotated: whether it is a candidate changes the score
    assert _as_tuple(fop.objects_and_parts(seg, [gt])) == pytest.approx(brute_fop(seg, [gt]), abs=1e-12)


@settings(max_examples=30, deadline=None)
@given(st.integers(0, 2**31 - 1))
def test_label_permutations_change_nothing(seed):
    rng = np.random.default_rng(seed)
    seg = rng.integers(0, 6, size=(7, 9))
    gt = rng.integers(1, 4, size=(7, 9))
    perm_s, perm_g = rng.permutation(50), rng.permutation(50) + 1
    a = _as_tuple(fop.objects_and_parts(seg, [gt]))
    b = _as_tuple(fop.objects_and_parts(perm_s[seg], [perm_g[gt]]))
    assert a == pytest.approx(b, abs=1e-12)


def test_seism_cut_of_a_ucm2_forces_vertices_to_boundary():
    u = np.zeros((5, 5))  # 2x2 pixels
    u[1, 2] = u[3, 2] = 1.0  # a vertical contour between the two columns
    u[2, 2] = 0.0  # its middle vertex low: the BSDS 8-connected cut leaks through it
    assert len(np.unique(fop.seism_ucm_labels(u, 0.5))) == 2
    from hiseg.metrics.region import ucm_to_labels

    assert len(np.unique(ucm_to_labels(u, 0.5))) == 1
    # and the driver scores Fop on SEISM's partition where the two differ
    pred = predictions.Prediction("ucm2", u)
    (_, bsds_seg, fop_seg), = pred.segmentations([0.5], fop=True)
    assert fop_seg is not None and len(np.unique(fop_seg)) == 2


def test_fop_dataset_aggregation_by_hand():
    # two images, two thresholds: mean precision and recall first, then F
    tab = np.array([[[0.0, 0.5, 0.5], [0.0, 1.0, 0.2]], [[0.0, 0.3, 0.9], [0.0, 0.9, 0.1]]])
    for im in tab:
        im[:, 0] = 2 * im[:, 1] * im[:, 2] / (im[:, 1] + im[:, 2])
    out = fop_dataset([0.3, 0.6], tab, ["a", "b"])
    mp, mr = tab[..., 1].mean(0), tab[..., 2].mean(0)
    mf = 2 * mp * mr / (mp + mr)
    assert out["ods"]["f"] == pytest.approx(mf.max()) and out["ods"]["threshold"] == [0.3, 0.6][mf.argmax()]
    best = tab[..., 0].argmax(1)
    op, orr = tab[[0, 1], best, 1].mean(), tab[[0, 1], best, 2].mean()
    assert out["ois"]["f"] == pytest.approx(2 * op * orr / (op + orr))


# ----------------------------------------------------------------------------- against SEISM
needs_seism = pytest.mark.skipif(not (SEISM / "gPb-UCM").is_dir() or not (BSDS / "ucm2" / "val").is_dir(),
                                 reason="SEISM results or BSDS500 val ucm2 not available (../shared/data)")


@needs_seism
@pytest.mark.parametrize("method,figures", [("gPb-UCM", ((.710, .739, .731), (.332, .380, .226))),
                                            ("MCG", ((.721, .740, .732), (.362, .416, .254)))])
def test_seism_files_give_the_published_val_figures(method, figures):
    ids = (SEISM / "val_ids.txt").read_text().split()
    res = seism.read_seism(SEISM / method, ids=ids)
    for key, (ods, ois, ap) in zip(("boundary", "fop"), figures):
        got = res[key]
        assert (got["ods"]["f"], got["ois"]["f"], got["ap"]) == pytest.approx((ods, ois, ap), abs=6e-4)


@needs_seism
@pytest.mark.slow
def test_evaluate_reproduces_seism_per_image_fop_on_gpb(tmp_path):
    ids = (SEISM / "val_ids.txt").read_text().split()
    pick = [0, 7, 42]  # three val images, every threshold, through the whole driver
    pred_dir, gt_dir = tmp_path / "pred", tmp_path / "gt"
    pred_dir.mkdir()
    gt_dir.mkdir()
    for i in pick:
        (pred_dir / f"{ids[i]}.mat").symlink_to(BSDS / "ucm2" / "val" / f"{ids[i]}.mat")
        (gt_dir / f"{ids[i]}.mat").symlink_to(BSDS / "data" / "groundTruth" / "val" / f"{ids[i]}.mat")
    res = bsds.evaluate(pred_dir, gt_dir, n_thresholds=99, workers=1, boundary=False)
    thresh, params, ref = seism.read_seism_table(SEISM / "gPb-UCM", "fop")
    assert np.allclose(res["thresholds"], thresh, atol=1e-15)
    for i in pick:
        got = np.asarray(res["per_image_counts"]["fop"][ids[i]])[:, 1:]
        assert np.abs(got - ref[i]).max() < 1e-5, ids[i]  # SEISM's files hold 6 decimals
    want = fop_dataset(thresh, ref[pick], [ids[i] for i in pick])
    assert res["fop"]["ods"] == pytest.approx(want["ods"], abs=1e-6)
    assert res["fop"]["ois"] == pytest.approx(want["ois"], abs=1e-6)
    assert res["fop"]["ap"] == pytest.approx(want["ap"], abs=1e-6)


# ----------------------------------------------------------------------------- bad input
def _write_gt(path, segs):
    cell = np.empty((1, len(segs)), dtype=object)
    for k, s in enumerate(segs):
        cell[0, k] = {"Segmentation": s, "Boundaries": np.zeros(np.shape(s), np.uint8)}
    savemat(str(path), {"groundTruth": cell})


def _cell(*arrays):
    c = np.empty((1, len(arrays)), dtype=object)
    for k, a in enumerate(arrays):
        c[0, k] = a
    return c


def _cli(argv):
    from hiseg.cli import evaluate as evaluate_cli

    p = evaluate_cli.add_arguments(argparse.ArgumentParser())
    return evaluate_cli.run(p.parse_args(argv))


@pytest.fixture
def one_image(tmp_path):
    gt_dir, pred_dir = tmp_path / "gt", tmp_path / "pred"
    gt_dir.mkdir()
    pred_dir.mkdir()
    seg = blocks(20, 30, 2, 3)
    _write_gt(gt_dir / "a.mat", [seg.astype(np.uint16)])
    return pred_dir, gt_dir, seg


def test_label_zero_is_refused_naming_the_file_with_first_label_1(one_image, tmp_path, capsys):
    """``--first-label 1`` (the BSDS format): a 0 is refused; ``0``: read 0-based; ``auto`` (the
    default, issue 42): hiseg predict's 0-based labels and BSDS's 1-based ones both read, the same
    figures."""
    import cv2

    pred_dir, gt_dir, seg = one_image
    cv2.imwrite(str(pred_dir / "a.png"), (seg - 1).astype(np.uint16))  # 0-based, as hiseg predict writes
    out = tmp_path / "out"
    assert _cli([str(pred_dir), "--gt", str(gt_dir), "--kind", "labels", "--out", str(out), "--first-label", "1",
                 "--workers", "1", "--quiet"]) == 2
    err = capsys.readouterr().err
    assert "a.png" in err and "label 0" in err and "--first-label 0" in err
    assert not out.exists()
    assert _cli([str(pred_dir), "--gt", str(gt_dir), "--kind", "labels", "--first-label", "0",
                 "--out", str(out), "--workers", "1", "--quiet"]) == 0
    res = json.loads((out / "results.json").read_text())
    assert res["fop"]["ods"]["f"] == 1.0 and res["covering"]["ods"] == 1.0
    assert "Fop" in (out / "results.md").read_text()
    for based in (0, 1):  # auto, the default
        cv2.imwrite(str(pred_dir / "a.png"), (seg - 1 + based).astype(np.uint16))
        got = tmp_path / f"auto{based}"
        assert _cli([str(pred_dir), "--gt", str(gt_dir), "--kind", "labels", "--out", str(got), "--workers", "1",
                     "--quiet"]) == 0
        auto = json.loads((got / "results.json").read_text())
        assert auto["fop"] == res["fop"] and auto["covering"] == res["covering"] and auto["pri"] == res["pri"]


def test_gt_of_another_size_is_refused_naming_both_files(one_image, tmp_path, capsys):
    pred_dir, gt_dir, seg = one_image
    savemat(str(pred_dir / "a.mat"), {"segs": _cell(blocks(21, 30, 2, 2))})
    out = tmp_path / "out"
    assert _cli([str(pred_dir), "--gt", str(gt_dir), "--out", str(out), "--workers", "1",
                 "--quiet"]) == 2
    err = capsys.readouterr().err
    assert "a.mat" in err and "21x30" in err and "20x30" in err
    assert not out.exists()


def test_empty_segmentation_is_refused_naming_the_file(one_image, capsys):
    pred_dir, gt_dir, seg = one_image
    savemat(str(pred_dir / "a.mat"), {"segs": _cell(np.zeros((0, 0), np.uint16))})
    assert _cli([str(pred_dir), "--gt", str(gt_dir), "--workers", "1", "--quiet"]) == 2
    err = capsys.readouterr().err
    assert "a.mat" in err and "empty" in err


def test_ucm2_that_is_a_string_names_the_file(one_image, capsys):
    pred_dir, gt_dir, _ = one_image
    savemat(str(pred_dir / "a.mat"), {"ucm2": "not a map"})
    assert _cli([str(pred_dir), "--gt", str(gt_dir), "--workers", "1", "--quiet"]) == 2
    err = capsys.readouterr().err
    assert "a.mat" in err and "'ucm2' must be a numeric" in err


@pytest.mark.parametrize("labels,needle", [
    (np.array([[1.0, 2.5], [1.0, 1.0]]), "non-integer labels"),
    (np.array([[1.0, np.nan], [1.0, 1.0]]), "NaN"),
    (np.array([[1, -2], [1, 1]], np.int32), "negative labels"),
])
def test_bad_ground_truth_labels_are_refused_naming_the_file(tmp_path, labels, needle):
    _write_gt(tmp_path / "g.mat", [np.ones((2, 2), np.uint16), labels])
    with pytest.raises(DataError, match=needle) as e:
        load_ground_truth(tmp_path / "g.mat")
    assert "g.mat" in str(e.value) and "annotator 2" in str(e.value)


def test_huge_ground_truth_label_ids_are_renumbered(tmp_path):
    seg = blocks(12, 12, 2, 2)
    big = np.array([0, 10**12, 5 * 10**12, 7, 2**40], dtype=np.float64)[seg]  # ids up to 5e12
    _write_gt(tmp_path / "g.mat", [big, seg.astype(np.uint16)])
    segs, _ = load_ground_truth(tmp_path / "g.mat")
    assert segs[0].max() <= segs[0].size
    # the same partition: every score equal
    assert _as_tuple(fop.objects_and_parts(seg, [segs[0]])) == (1.0, 1.0, 1.0)


@pytest.mark.parametrize("value", ["-1", "nan", "1e9", "0"])
def test_max_dist_out_of_range_names_the_option(one_image, value, capsys):
    pred_dir, gt_dir, _ = one_image
    with pytest.raises(SystemExit):
        _cli([str(pred_dir), "--gt", str(gt_dir), "--max-dist", value])
    assert "--max-dist" in capsys.readouterr().err
    with pytest.raises(ValueError, match="max_dist"):
        bsds.evaluate(pred_dir, gt_dir, max_dist=float(value))


def test_seism_folder_errors_name_the_file(tmp_path):
    with pytest.raises(FileNotFoundError, match="parameters.txt"):
        seism.read_seism_table(tmp_path, "fop")
    (tmp_path / "parameters.txt").write_text("0.1\n0.2\n")
    (tmp_path / "val_fop_0.1.txt").write_text("0.5 0.5 0.5\n")
    with pytest.raises(FileNotFoundError, match="val_fop_0.2.txt"):
        seism.read_seism_table(tmp_path, "fop")
    (tmp_path / "val_fop_0.2.txt").write_text("0.5 0.5\n")
    with pytest.raises(ValueError, match="val_fop_0.2.txt"):
        seism.read_seism_table(tmp_path, "fop")


def test_evaluate_out_never_replaces_existing_files_unless_overwrite(one_image, tmp_path, capsys):
    pred_dir, gt_dir, seg = one_image
    savemat(str(pred_dir / "a.mat"), {"segs": _cell(seg)})
    out = tmp_path / "out"
    out.mkdir()
    (out / "results.md").write_text("my own notes")
    argv = [str(pred_dir), "--gt", str(gt_dir), "--out", str(out), "--workers", "1", "--quiet"]
    assert _cli(argv) == 2
    err = capsys.readouterr().err
    assert "results.md" in err and "--overwrite" in err
    assert (out / "results.md").read_text() == "my own notes"
    assert sorted(p.name for p in out.iterdir()) == ["results.md"]
    assert _cli(argv + ["--overwrite"]) == 0
    assert "Fop" in (out / "results.md").read_text()


def test_evaluate_scores_only_the_predicted_images_when_asked(one_image, tmp_path, capsys):
    """Issue 42: 1 prediction for 2 ground-truth images is refused by default (the benchmark's
    set), naming --subset predicted; with it, the predicted image alone is scored, as if the
    ground truth held it alone, and the first line says how many of --gt's were scored."""
    pred_dir, gt_dir, seg = one_image
    _write_gt(gt_dir / "b.mat", [seg.astype(np.uint16)])
    savemat(str(pred_dir / "a.mat"), {"segs": _cell(seg)})
    assert _cli([str(pred_dir), "--gt", str(gt_dir), "--workers", "1", "--quiet"]) == 2
    err = capsys.readouterr().err
    assert "b.mat" in err and "1 prediction(s) for 2 ground-truth file(s)" in err and "--subset predicted" in err
    out = tmp_path / "sub"
    assert _cli([str(pred_dir), "--gt", str(gt_dir), "--subset", "predicted", "-o", str(out), "--workers", "1",
                 "--quiet"]) == 0
    first = capsys.readouterr().out.splitlines()[0]
    assert first.startswith("BSDS500 benchmark: 1 of the 2 ground-truth image(s) (the predicted ones), kind segs")
    res = json.loads((out / "results.json").read_text())
    assert res["images"] == ["a"] and res["n_ground_truth"] == 2 and res["subset"] == "predicted"
    (gt_dir / "b.mat").unlink()
    whole = tmp_path / "whole"
    assert _cli([str(pred_dir), "--gt", str(gt_dir), "-o", str(whole), "--workers", "1", "--quiet"]) == 0
    assert capsys.readouterr().out.startswith("BSDS500 benchmark: 1 image(s), kind segs")
    ref = json.loads((whole / "results.json").read_text())
    assert res["covering"] == ref["covering"] and res["fop"] == ref["fop"] and res["boundary"] == ref["boundary"]
    with pytest.raises(ValueError, match="subset must be one of"):
        from hiseg.metrics.predictions import discover_pairs
        discover_pairs(pred_dir, gt_dir, subset="some")
