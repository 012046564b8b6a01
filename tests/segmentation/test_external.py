"""Hierarchies from any segmenter (issue 55): masks (SAM's dicts, boolean stacks, label images)
and other detectors' boundary maps in, the same result as Segmenter.segment out; COCO RLE against
an encoder written here from the format's definition (and pycocotools where installed); every
bad input refused in one line."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hiseg import hierarchy_from_boundary_map, hierarchy_from_masks
from hiseg.segmentation.external import MAX_MASKS, MaskError, decode_rle, read_boundary_map, read_masks

ROOT = Path(__file__).resolve().parents[2]
UCM2 = ROOT.parent / "shared" / "data" / "BSDS500" / "ucm2" / "val"


# ----------------------------------------------------------------------------- an independent RLE encoder
def runs_of(mask: np.ndarray) -> list:
    """COCO's run lengths of a mask: column-major, alternating from a run of 0s (maybe empty)."""
    flat = mask.T.ravel().astype(np.int8)
    runs, current, n = [], 0, 0
    for v in flat:
        if v == current:
            n += 1
        else:
            runs.append(n)
            current, n = v, 1
    runs.append(n)
    return runs


def compress(runs: list) -> str:
    """pycocotools' rleToString, written from its definition: each run after the second as the
    difference from the run two before, in 5-bit groups (sign-extended), 0x20 for 'more', + 48."""
    out = []
    for i, x in enumerate(runs):
        if i > 2:
            x -= runs[i - 2]
        more = True
        while more:
            c = x & 0x1F
            x >>= 5
            more = not ((c & 0x10 == 0 and x == 0) or (c & 0x10 and x == -1))
            if more:
                c |= 0x20
            out.append(chr(c + 48))
    return "".join(out)


def test_rle_known_encodings():
    # [[0, 1], [1, 1], [0, 0]] column-major: 0 1 0 | 1 1 0 -> runs 1,1,1,2,1
    want = np.array([[0, 1], [1, 1], [0, 0]], bool)
    assert np.array_equal(decode_rle({"size": [3, 2], "counts": [1, 1, 1, 2, 1]}), want)
    assert compress([1, 1, 1, 2, 1]) == "11110"  # by hand: 1, 1, 1, 2-1=1, 1-1=0
    assert np.array_equal(decode_rle({"size": [3, 2], "counts": "11110"}), want)
    assert np.array_equal(decode_rle({"size": [2, 2], "counts": [0, 4]}), np.ones((2, 2), bool))  # starts with 1s
    assert np.array_equal(decode_rle({"size": [2, 3], "counts": b"6"}), np.zeros((2, 3), bool))  # one run of 6


@settings(max_examples=60, deadline=None)
@given(st.integers(1, 9), st.integers(1, 9), st.data())
def test_rle_round_trip(h, w, data):
    mask = np.array(data.draw(st.lists(st.booleans(), min_size=h * w, max_size=h * w)), bool).reshape(h, w)
    runs = runs_of(mask)
    assert np.array_equal(decode_rle({"size": [h, w], "counts": runs}), mask)
    assert np.array_equal(decode_rle({"size": [h, w], "counts": compress(runs)}), mask)


def test_rle_against_pycocotools():
    coco = pytest.importorskip("pycocotools.mask", reason="pycocotools is not installed (an optional cross-check, not a dependency)")
    rng = np.random.default_rng(0)
    for _ in range(20):
        m = rng.random((37, 53)) < rng.random()
        rle = coco.encode(np.asfortranarray(m.astype(np.uint8)))
        assert np.array_equal(decode_rle(rle), m)


@pytest.mark.parametrize("rle, message", [
    ({"size": [2, 2], "counts": [1, 1]}, "do not decode to a 2x2 mask"),
    ({"size": [2, 2], "counts": "1"}, "do not decode"),
    ({"size": [2, 2], "counts": "\x7f"}, "not a compressed COCO RLE"),
    ({"size": [2, 2], "counts": "R"}, "ends inside a number"),
    ({"counts": [4]}, "a dict with 'size' and 'counts'"),
    ({"size": "big", "counts": [4]}, "size must be"),
])
def test_an_rle_that_does_not_decode(rle, message):
    with pytest.raises(MaskError, match=message) as e:
        decode_rle(rle)
    assert "\n" not in str(e.value)


# ----------------------------------------------------------------------------- masks in, nesting out
def nested(h: int = 60, w: int = 80):
    """A whole, its two halves (left, right), four quadrants."""
    whole = np.ones((h, w), bool)
    left = np.zeros((h, w), bool)
    left[:, : w // 2] = True
    quads = []
    for ys in (slice(0, h // 2), slice(h // 2, h)):
        for xs in (slice(0, w // 2), slice(w // 2, w)):
            q = np.zeros((h, w), bool)
            q[ys, xs] = True
            quads.append(q)
    return whole, [left, ~left], quads


def same_partition(a: np.ndarray, parts: list) -> bool:
    """Whether labels ``a`` are exactly the masks ``parts`` (one label each, all different)."""
    labels = [np.unique(a[p]) for p in parts]
    return all(len(x) == 1 for x in labels) and len({int(x[0]) for x in labels}) == len(parts) \
        and len(np.unique(a)) == len(parts)


def test_nested_masks_come_back_as_their_nesting():
    whole, halves, quads = nested()
    stack = np.stack([whole, *halves, *quads])
    for masks in (stack, list(stack), [{"segmentation": m, "area": int(m.sum()), "predicted_iou": 0.9,
                                       "stability_score": 0.95} for m in stack[::-1]]):
        res = hierarchy_from_masks(masks)
        assert same_partition(res.cut(n_regions=2), halves)
        assert same_partition(res.cut(n_regions=4), quads)
        assert res.saliency.shape == (60, 80) and res.ucm2.shape == (121, 161)
    # a finer level only inside one half: the other half stays whole down to 3 regions
    res = hierarchy_from_masks(np.stack([whole, *halves, quads[0], quads[2]]))
    assert same_partition(res.cut(n_regions=3), [quads[0], quads[2], halves[1]])


def test_sam_rle_masks_and_label_images():
    whole, halves, quads = nested(40, 60)
    sam = [{"segmentation": {"size": [40, 60], "counts": compress(runs_of(m))}, "area": int(m.sum()),
            "predicted_iou": 0.9, "stability_score": 0.9} for m in [whole, *halves, *quads]]
    a = hierarchy_from_masks(sam)
    assert same_partition(a.cut(n_regions=2), halves) and same_partition(a.cut(n_regions=4), quads)
    # two annotators' label images, pooled: the halves' one, the quadrants' other
    coarse = halves[1].astype(np.int64)
    fine = sum(i * q for i, q in enumerate(quads)).astype(np.int64)
    b = hierarchy_from_masks([coarse, fine])
    assert same_partition(b.cut(n_regions=2), halves) and same_partition(b.cut(n_regions=4), quads)


def test_scores_leave_masks_out_and_overlaps_still_nest():
    whole, halves, quads = nested()
    masks = [{"segmentation": m, "predicted_iou": s, "stability_score": 1.0}
             for m, s in zip([whole, *halves, *quads], [1, 1, 1, 0.1, 0.1, 0.1, 0.1])]
    res = hierarchy_from_masks(masks, min_score=0.5)  # the quadrants dropped: two regions
    assert res.rag.num_regions == 2
    rng = np.random.default_rng(3)
    yy, xx = np.mgrid[:50, :70]
    blobs = np.stack([(yy - rng.integers(50)) ** 2 + (xx - rng.integers(70)) ** 2 < rng.integers(5, 40) ** 2
                      for _ in range(12)])
    res = hierarchy_from_masks(blobs)  # overlapping masks: a hierarchy, levels in (0, 1]
    assert 0 <= res.saliency.min() and res.saliency.max() <= 1
    for k in (2, 3, 5):
        assert len(np.unique(res.cut(n_regions=k))) == k


def test_files_and_the_explorer_take_the_result(tmp_path):
    from hiseg.explorer import page as view
    from hiseg.segmentation.outputs import write_outputs

    whole, halves, quads = nested()
    img = np.random.default_rng(0).random((60, 80, 3)).astype(np.float32)
    res = hierarchy_from_masks(np.stack([whole, *halves, *quads]), image=img)
    written = write_outputs(tmp_path, "m", res, img, n_regions=4)
    assert {p.name for p in written} == {"m_ucm.png", "m_ucm16.png", "m.mat", "m_labels.png", "m_overlay.png"}
    assert view.write_page_file(tmp_path, "m", img, res, "masks", None)


@pytest.mark.parametrize("masks, message", [
    ([], "no masks"),
    ([np.zeros((4, 5), bool), np.zeros((5, 4), bool)], "different shapes"),
    (np.zeros((2, 4, 5), np.uint8), "must be boolean"),
    ([np.zeros((4, 5), np.float32)], "float32 values"),
    ([{"segmentation": {"size": [2, 2], "counts": [1]}}], "do not decode"),
    ([{"area": 3}], "without 'segmentation'"),
    ("masks.json", "got str"),
])
def test_bad_masks_are_refused_in_one_line(masks, message):
    with pytest.raises(MaskError, match=message) as e:
        hierarchy_from_masks(masks)
    assert "\n" not in str(e.value)


def test_too_many_masks_and_an_image_of_another_size():
    with pytest.raises(MaskError, match=f"more than {MAX_MASKS}"):
        hierarchy_from_masks(np.zeros((MAX_MASKS + 1, 2, 2), bool))  # 10^4 + 1 tiny masks: refused before any pass
    whole, halves, _ = nested()
    with pytest.raises(MaskError, match="the masks are 60x80 and the image 10x10"):
        hierarchy_from_masks(np.stack([whole, *halves]), image=np.zeros((10, 10, 3)))


# ----------------------------------------------------------------------------- boundary maps in
def test_a_boundary_map_goes_through_the_one_chain(tmp_path):
    """A detector's map gives the hierarchy the chain gives a network's map of the same values."""
    import cv2

    from hiseg import Segmenter
    from hiseg.segmentation.pipeline import Pipeline

    rng = np.random.default_rng(2)
    b = np.zeros((70, 90), np.float32)
    b[:, 44:46] = 0.9
    b[30:32, :] = 0.5
    b = np.clip(b + 0.05 * rng.random(b.shape).astype(np.float32), 0, 1)
    res = hierarchy_from_boundary_map(b)
    want = Segmenter(None, pipeline=Pipeline()).finish(None, b)
    assert np.array_equal(res.ucm2, want.ucm2)
    # the files a detector writes: 8- and 16-bit PNGs, .npy, .mat (a ucm2, or one array)
    cv2.imwrite(str(tmp_path / "a.png"), np.round(b * 255).astype(np.uint8))
    cv2.imwrite(str(tmp_path / "b.png"), np.round(b * 65535).astype(np.uint16))
    np.save(tmp_path / "c.npy", b)
    import scipy.io

    ucm2 = np.zeros((141, 181))
    ucm2[2::2, 2::2] = b
    scipy.io.savemat(tmp_path / "d.mat", {"ucm2": ucm2})
    scipy.io.savemat(tmp_path / "e.mat", {"edges": b})
    for name, tol in (("a.png", 1 / 255), ("b.png", 1 / 65535), ("c.npy", 0), ("d.mat", 1e-7), ("e.mat", 0)):
        got = read_boundary_map(tmp_path / name)
        assert got.shape == b.shape and float(np.abs(got - b).max()) <= tol + 1e-7, name


@pytest.mark.parametrize("make, message", [
    (lambda p: np.save(p / "x.npy", np.full((5, 5), 3.0)), r"probabilities in \[0, 1\]"),
    (lambda p: np.save(p / "x.npy", np.zeros((5, 5, 2))), "is \\(H, W\\)"),
    (lambda p: (p / "x.png").write_bytes(b"not a png"), "not a readable PNG"),
])
def test_bad_boundary_maps_are_refused_in_one_line(tmp_path, make, message):
    make(tmp_path)
    with pytest.raises(MaskError, match=message) as e:
        read_boundary_map(next(tmp_path.iterdir()))
    assert "\n" not in str(e.value)
    with pytest.raises(MaskError, match="the boundary map is 5x5 and the image 6x6"):
        hierarchy_from_boundary_map(np.zeros((5, 5), np.float32), image=np.zeros((6, 6, 3)))


# ----------------------------------------------------------------------------- the command
def test_predict_boundaries_and_masks_folders(tmp_path):
    import cv2

    from hiseg.cli import main

    imgs = tmp_path / "img"
    imgs.mkdir()
    whole, halves, quads = nested()
    for stem in ("a", "b"):
        cv2.imwrite(str(imgs / f"{stem}.png"), (np.random.default_rng(1).random((60, 80, 3)) * 255).astype(np.uint8))
    maps, masks = tmp_path / "maps", tmp_path / "masks"
    maps.mkdir()
    masks.mkdir()
    b = np.zeros((60, 80), np.float32)
    b[:, 39:41] = 1.0
    np.save(maps / "a.npy", b)
    cv2.imwrite(str(maps / "b.png"), (b * 255).astype(np.uint8))
    np.savez(masks / "a.npz", masks=np.stack([whole, *halves, *quads]), scores=np.ones(7))
    (masks / "b.json").write_text(json.dumps([{"segmentation": {"size": [60, 80], "counts": compress(runs_of(m))}}
                                              for m in [whole, *halves, *quads]]))
    assert main(["predict", str(imgs), "-o", str(tmp_path / "o1"), "--boundaries", str(maps), "-q",
                 "--regions", "2", "--workers", "1"]) == 0
    assert main(["predict", str(imgs), "-o", str(tmp_path / "o2"), "--masks", str(masks), "-q",
                 "--regions", "4", "--workers", "1"]) == 0
    for stem in ("a", "b"):
        assert same_partition(cv2.imread(str(tmp_path / "o2" / f"{stem}_labels.png"), cv2.IMREAD_UNCHANGED), quads)
        assert (tmp_path / "o1" / f"{stem}.mat").is_file()
    assert read_masks(masks / "b.json")[0]["segmentation"]["size"] == [60, 80]


def test_predict_refuses_what_cannot_go_together(tmp_path, capsys):
    import cv2

    from hiseg.cli import main

    cv2.imwrite(str(tmp_path / "a.png"), np.zeros((30, 40, 3), np.uint8))
    (tmp_path / "maps").mkdir()
    np.save(tmp_path / "maps" / "a.npy", np.zeros((20, 40), np.float32))
    rc = main(["predict", str(tmp_path / "a.png"), "-o", str(tmp_path / "o"), "--boundaries", str(tmp_path / "maps"),
               "--checkpoint", "bsds500"])
    assert rc == 2 and "no model runs, so --checkpoint" in capsys.readouterr().err
    rc = main(["predict", str(tmp_path / "a.png"), "-o", str(tmp_path / "o"), "--boundaries", str(tmp_path / "maps"),
               "-q"])
    err = capsys.readouterr().err
    assert rc == 1 and "a boundary map of 20x40 for an image of 30x40" in err
    assert not list((tmp_path / "o").glob("*.png")) if (tmp_path / "o").exists() else True


@pytest.mark.skipif(not UCM2.is_dir(), reason="gPb-owt-ucm's val results not found (../shared/data)")
def test_gpb_ucm2_at_pixel_resolution():
    import scipy.io

    f = sorted(UCM2.glob("*.mat"))[0]
    b = read_boundary_map(f)
    ucm2 = scipy.io.loadmat(f)["ucm2"]
    assert b.shape == ((ucm2.shape[0] - 1) // 2, (ucm2.shape[1] - 1) // 2)
    assert np.array_equal(b, ucm2[2::2, 2::2].astype(np.float32))
    res = hierarchy_from_boundary_map(b)
    assert res.saliency.shape == b.shape and res.rag.num_regions > 10
