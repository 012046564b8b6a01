"""Inference (Segmenter, hiseg predict): outputs, checkpoints and bad input."""
import numpy as np
import pytest
import torch
from scipy.io import loadmat

import cv2
from hiseg.cli import main as cli_main
from hiseg.segmentation.outputs import write_outputs
from hiseg.segmentation.segmenter import Segmenter
from hiseg.io import atomic_write
from hiseg.models import get_model
from hiseg.models.weights import save_weights


def checker_image(h=48, w=64):
    img = np.zeros((h, w, 3), np.float32)
    img[: h // 2, : w // 2] = [1, 0, 0]
    img[h // 2:, w // 2:] = [0, 0, 1]
    img[: h // 2, w // 2:] = [0, 1, 0]
    return img


@pytest.fixture
def ckpt(tmp_path):
    torch.manual_seed(0)
    m = get_model("compact_boundary_net", width=8)
    return save_weights(m, tmp_path / "m.ckpt", metadata={"pipeline": {"superpixels": "boundary_watershed",
                                                                        "linkage": "average", "region_size": 6.0}})


def test_classical_path_finds_the_quadrants():
    res = Segmenter.classical(region_size=6.0, fit_iterations=20).segment(checker_image())
    sal = res.saliency
    assert sal.shape == (48, 64) and 0 <= sal.min() and sal.max() <= 1 + 1e-9
    lab = res.cut(n_regions=3)
    assert len(np.unique(lab)) == 3
    # the strongest boundaries are the colour edges: 3 regions = the coloured quadrants (+ black merged)
    assert len(np.unique(lab[:24, :32])) == 1 and len(np.unique(lab[24:, 32:])) == 1
    assert len(np.unique(res.cut(threshold=1.0))) == 1


def test_checkpoint_path(ckpt):
    seg = Segmenter.from_checkpoint(ckpt)
    assert seg.pipeline.region_size == 6.0 and seg.pipeline.linkage == "average"
    res = seg.segment(checker_image())
    assert res.boundary.shape == (48, 64)
    assert res.ucm2.shape == (97, 129)


def test_predict_cli_writes_all_files(tmp_path, ckpt):
    src = tmp_path / "in"
    src.mkdir()
    for i in range(2):
        cv2.imwrite(str(src / f"im{i}.png"), (checker_image() * 255).astype(np.uint8))
    out = tmp_path / "out"
    assert cli_main(["predict", str(src), "--checkpoint", str(ckpt), "--out", str(out), "--regions", "3",
                     "--quiet"]) == 0
    names = sorted(p.name for p in out.iterdir())
    assert names == sorted([f"im{i}{s}" for i in range(2) for s in
                            ["_ucm.png", "_ucm16.png", ".mat", "_labels.png", "_overlay.png"]]
                           + [".hiseg-predict.json"])  # and the run record (hiseg.segmentation.record.RECORD)
    ucm2 = loadmat(out / "im0.mat")["ucm2"]
    assert ucm2.shape == (97, 129) and ucm2.dtype == np.float64
    u16 = cv2.imread(str(out / "im0_ucm16.png"), cv2.IMREAD_UNCHANGED)
    assert u16.dtype == np.uint16 and u16.shape == (48, 64)
    np.testing.assert_allclose(u16 / 65535.0, np.clip(ucm2[2::2, 2::2], 0, 1), atol=1 / 65535)
    lab = cv2.imread(str(out / "im0_labels.png"), cv2.IMREAD_UNCHANGED)
    assert len(np.unique(lab)) == 3
    # classical path and a threshold
    assert cli_main(["predict", "--classical", str(src / "im0.png"), "--out", str(tmp_path / "o2"), "--level", "0.5",
                     "--quiet"]) == 0
    assert (tmp_path / "o2" / "im0_labels.png").is_file()


def test_flat_image_gives_flat_saliency(tmp_path):
    img = np.full((30, 40, 3), 0.5, np.float32)
    res = Segmenter.classical(region_size=100.0).segment(img)
    # a flat image has no gradient: every frontier merges at 0 (however many superpixels)
    assert res.saliency.max() == 0 and res.ucm2.max() == 0
    assert len(np.unique(res.cut(threshold=0.0))) == 1
    paths = write_outputs(tmp_path, "flat", res, img, n_regions=5)
    assert all(p.is_file() for p in paths)


def test_atomic_write_leaves_nothing_on_error(tmp_path):
    target = tmp_path / "x.mat"

    def boom(tmp):
        with open(tmp, "w") as f:
            f.write("half")
        raise RuntimeError("killed")

    with pytest.raises(RuntimeError):
        atomic_write(target, boom)
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("setup, msg, status", [
    ("missing", "input not found", 2),
    ("empty", "no image files", 2),
    ("corrupt", "cannot read image", 1),  # a per-image failure: the others would go on (test_cli_faults)
])
def test_predict_bad_inputs(tmp_path, capsys, setup, msg, status):
    src = tmp_path / "in"
    src.mkdir()
    arg = str(src)
    if setup == "missing":
        arg = str(tmp_path / "nope.png")
    elif setup == "corrupt":
        (src / "bad.png").write_bytes(b"not a png at all")
    out = tmp_path / "out"
    assert cli_main(["predict", "--classical", arg, "--out", str(out), "--quiet"]) == status
    assert msg in capsys.readouterr().err
    assert not out.exists() or list(out.iterdir()) == []


def test_bad_checkpoints(tmp_path, capsys):
    bad = tmp_path / "bad.ckpt"
    bad.write_bytes(b"garbage")
    img = tmp_path / "a.png"
    cv2.imwrite(str(img), np.zeros((20, 20, 3), np.uint8))
    assert cli_main(["predict", str(img), "--checkpoint", str(bad), "--out", str(tmp_path / "o")]) == 2
    assert "corrupted or not a torch checkpoint" in capsys.readouterr().err
    # a checkpoint of another architecture (claims compact, holds resnet weights)
    other = get_model("resnet18_boundary_net")
    torch.save({"state_dict": other.state_dict(),
                "hyper_parameters": {"arch": "compact_boundary_net", "arch_kwargs": {}}}, tmp_path / "o.ckpt")
    with pytest.raises(Exception, match="(?i)mismatch|missing|unexpected"):
        Segmenter.from_checkpoint(tmp_path / "o.ckpt")


@pytest.mark.slow
def test_predict_then_evaluate_same_folder(tmp_path, shared_data):
    """`hiseg evaluate` reads a folder written by `hiseg predict` (the .mat files, not the PNG views)."""
    import json

    bench = shared_data / "bench" / "data"
    img = sorted((bench / "images").glob("*.jpg"))[0]
    gt = tmp_path / "gt"
    gt.mkdir()
    (gt / f"{img.stem}.mat").symlink_to(bench / "groundTruth" / f"{img.stem}.mat")
    out = tmp_path / "pred"
    assert cli_main(["predict", "--classical", str(img), "--out", str(out), "--regions", "5", "--quiet"]) == 0
    assert cli_main(["evaluate", str(out), "--gt", str(gt), "--thresholds", "5", "--workers", "1",
                     "--out", str(tmp_path / "eval"), "--quiet"]) == 0
    res = json.loads((tmp_path / "eval" / "results.json").read_text())
    assert 0.3 < res["boundary"]["ods"]["f"] <= 1 and "covering" in res


def test_checkpoint_without_or_with_unknown_pipeline_is_refused(tmp_path):
    from hiseg.segmentation import Pipeline, PipelineError

    m = get_model("compact_boundary_net", width=8)
    save_weights(m, tmp_path / "old.ckpt", metadata={"data": {"superpixel_method": "watershed"}})
    with pytest.raises(PipelineError, match="no pipeline settings"):
        Segmenter.from_checkpoint(tmp_path / "old.ckpt")
    # an explicit pipeline makes an old checkpoint usable
    seg = Segmenter.from_checkpoint(tmp_path / "old.ckpt", pipeline=Pipeline(linkage="single"))
    assert seg.segment(checker_image()).ucm2.shape == (97, 129)
    save_weights(m, tmp_path / "unk.ckpt", metadata={"pipeline": {"linkage": "average", "colour": "red"}})
    with pytest.raises(PipelineError, match="unknown pipeline setting.*colour"):
        Segmenter.from_checkpoint(tmp_path / "unk.ckpt")
    save_weights(m, tmp_path / "bad.ckpt", metadata={"pipeline": {"linkage": "ward"}})
    with pytest.raises(PipelineError, match="unknown linkage 'ward'"):
        Segmenter.from_checkpoint(tmp_path / "bad.ckpt")
    # predict names the problem and writes nothing
    img = tmp_path / "a.png"
    cv2.imwrite(str(img), np.zeros((20, 20, 3), np.uint8))
    assert cli_main(["predict", str(img), "--checkpoint", str(tmp_path / "unk.ckpt"), "--out",
                     str(tmp_path / "o"), "--quiet"]) == 2
    assert not (tmp_path / "o").exists()


def test_pipeline_settings_round_trip_and_bad_values():
    from hiseg.segmentation import Pipeline, PipelineError

    p = Pipeline(superpixels="all_minima", linkage="single", scales=[0.5, 1])
    assert Pipeline.from_dict(p.to_dict()) == p
    for bad in ({"scales": []}, {"scales": [0.0]}, {"region_size": float("nan")}, {"superpixels": "slic"}):
        with pytest.raises(PipelineError):
            Pipeline(**bad)
    with pytest.raises(PipelineError, match="differ in size"):
        Pipeline(superpixels="color_watershed").make_superpixels(np.zeros((10, 12)), np.zeros((10, 11, 3)))
    for bad in (-1, 2.5, True):
        with pytest.raises(PipelineError, match="fit_iterations"):
            Pipeline(fit_iterations=bad)
    assert Pipeline.from_dict(Pipeline.classical(6.0, 20).to_dict()) == Pipeline.classical(6.0, 20)


# ----------------------------------------------------------------------------- independent truths
# Brute force over pixel pairs and region pairs: no RAG, pooling, hierarchy or ucm2 code of
# hiseg, so the pipeline's results are compared with something that does not share its bugs.
def _pixel_pairs(shape):
    """Every pair of 4-adjacent pixels ((i, j), (k, l)) and its ucm2 position."""
    h, w = shape
    for i in range(h):
        for j in range(w):
            if j + 1 < w:
                yield (i, j), (i, j + 1), (2 * i + 1, 2 * j + 2)
            if i + 1 < h:
                yield (i, j), (i + 1, j), (2 * i + 2, 2 * j + 1)


def _frontiers_bf(labels, boundary):
    """{(a, b): (mean of (b(p) + b(q)) / 2, number of pixel pairs)} over the 4-adjacent pixel
    pairs p in region a, q in region b, a < b (label ranks), by a loop over the pixels."""
    ranks = np.unique(labels, return_inverse=True)[1].reshape(labels.shape)
    acc = {}
    for p, q, _ in _pixel_pairs(labels.shape):
        a, b = int(ranks[p]), int(ranks[q])
        if a != b:
            s, n = acc.get((min(a, b), max(a, b)), (0.0, 0))
            acc[(min(a, b), max(a, b))] = (s + 0.5 * (float(boundary[p]) + float(boundary[q])), n + 1)
    return {key: (s / n, n) for key, (s, n) in acc.items()}


def _single_linkage_bf(weights: dict, n: int) -> dict:
    """u(a, b) of every edge: the least t such that edges of weight <= t join a and b (the
    minimax path), from scipy's connected components at every distinct weight."""
    from scipy.sparse import coo_matrix
    from scipy.sparse.csgraph import connected_components

    keys = list(weights)
    s, t = np.array(keys).T
    w = np.array([weights[k] for k in keys])
    u = {}
    for level in np.unique(w):
        on = w <= level
        comp = connected_components(coo_matrix((np.ones(on.sum()), (s[on], t[on])), shape=(n, n)),
                                    directed=False)[1]
        u.update({k: level for k in keys if k not in u and comp[k[0]] == comp[k[1]]})
    return u


def _average_linkage_bf(weights: dict, lengths: dict, n: int) -> dict:
    """u(a, b) of every edge: the altitude of the merge that joins a and b in graph average
    linkage (merge the two adjacent clusters of least frontier-length-weighted mean weight),
    clusters merged one at a time as in the textbook definition."""
    cluster = list(range(n))
    u = {}
    while True:
        tot = {}
        for (a, b), w in weights.items():
            ca, cb = cluster[a], cluster[b]
            if ca != cb:
                s, length = tot.get((min(ca, cb), max(ca, cb)), (0.0, 0.0))
                tot[(min(ca, cb), max(ca, cb))] = (s + w * lengths[(a, b)], length + lengths[(a, b)])
        if not tot:
            return u
        c1, c2 = min(tot, key=lambda k: tot[k][0] / tot[k][1])
        altitude = tot[(c1, c2)][0] / tot[(c1, c2)][1]
        u.update({(a, b): altitude for (a, b) in weights if {cluster[a], cluster[b]} == {c1, c2}})
        cluster = [c1 if c == c2 else c for c in cluster]


def _ucm2_bf(labels, altitude) -> np.ndarray:
    """BSDS ucm2 drawn pixel pair by pixel pair: the altitude of the two regions on each
    pixel edge (``altitude(a, b)``, a < b label ranks), then each grid corner the max of its
    incident edge entries."""
    ranks = np.unique(labels, return_inverse=True)[1].reshape(labels.shape)
    h, w = labels.shape
    ucm = np.zeros((2 * h + 1, 2 * w + 1))
    for p, q, pos in _pixel_pairs(labels.shape):
        if ranks[p] != ranks[q]:
            ucm[pos] = altitude(min(ranks[p], ranks[q]), max(ranks[p], ranks[q]))
    for r in range(0, 2 * h + 1, 2):
        for c in range(0, 2 * w + 1, 2):
            ucm[r, c] = max(ucm[rr, cc] for rr, cc in ((r - 1, c), (r + 1, c), (r, c - 1), (r, c + 1))
                            if 0 <= rr <= 2 * h and 0 <= cc <= 2 * w)
    return ucm


def _check_against_brute_force(res, u_bf: dict):
    """res's RAG edges, ultrametric and ucm2 against brute-force ones keyed by region pair."""
    rag = res.rag
    np.testing.assert_array_equal(np.unique(rag.labels), np.arange(rag.num_regions))
    pairs = list(zip(rag.graph.sources.tolist(), rag.graph.targets.tolist()))
    assert sorted(pairs) == sorted(u_bf), "the RAG's edges are not the 4-adjacent region pairs"
    np.testing.assert_allclose(res.ultrametric, [u_bf[p] for p in pairs], rtol=0, atol=1e-12)
    np.testing.assert_allclose(res.ucm2, _ucm2_bf(rag.labels, lambda a, b: u_bf[(a, b)]), rtol=0, atol=1e-12)


def noisy_checker_image(seed=0):
    """checker_image with noise: generic edge weights (no ties for the linkages to break)."""
    img = checker_image() + 0.15 * np.random.default_rng(seed).random((48, 64, 3)).astype(np.float32)
    return np.clip(img, 0, 1)


def test_classical_path_without_fitting_is_the_single_linkage_of_the_frontier_means():
    """Segmenter(fit_iterations=0): the single linkage of the colour gradient's mean along every
    superpixel frontier, scaled to a maximum of 1 (Pipeline.classical), against brute force:
    frontier means over the pixel pairs, minimax paths by connected components, the ucm2
    drawn pixel pair by pixel pair. The superpixels and the gradient map are the inputs."""
    res = Segmenter.classical(region_size=6.0, fit_iterations=0).segment(noisy_checker_image())
    assert res.rag.num_regions > 20
    fr = _frontiers_bf(res.rag.labels, res.boundary)
    top = max(m for m, _ in fr.values())
    _check_against_brute_force(res, _single_linkage_bf({k: m / top for k, (m, _) in fr.items()},
                                                       res.rag.num_regions))
    assert 0 < res.ultrametric.max() <= 1  # weights scaled by their maximum
    # with fitting: another ultrametric on the same RAG (its own minimax closure), in [0, 1]
    fit = Segmenter.classical(region_size=6.0, fit_iterations=20).segment(noisy_checker_image())
    np.testing.assert_array_equal(fit.rag.labels, res.rag.labels)
    assert not np.allclose(fit.ultrametric, res.ultrametric)
    pairs = list(zip(fit.rag.graph.sources.tolist(), fit.rag.graph.targets.tolist()))
    closure = _single_linkage_bf(dict(zip(pairs, fit.ultrametric.tolist())), fit.rag.num_regions)
    np.testing.assert_allclose(fit.ultrametric, [closure[p] for p in pairs], rtol=0, atol=1e-12)


def test_network_path_is_the_average_linkage_of_the_frontier_means(ckpt):
    """A checkpoint's pipeline (average linkage): the average linkage of the network map's
    frontier means weighted by frontier lengths, against brute force (the textbook merge
    loop over region pairs). The superpixels and the network map are the inputs."""
    res = Segmenter.from_checkpoint(ckpt).segment(noisy_checker_image())
    assert res.rag.num_regions > 20
    fr = _frontiers_bf(res.rag.labels, res.boundary)
    u_bf = _average_linkage_bf({k: m for k, (m, _) in fr.items()}, {k: float(n) for k, (_, n) in fr.items()},
                               res.rag.num_regions)
    _check_against_brute_force(res, u_bf)


class _FixedMap(torch.nn.Module):
    """A "network" whose boundary probability is a given map, whatever the image."""

    def __init__(self, prob):
        super().__init__()
        self.register_buffer("logit", torch.logit(torch.as_tensor(prob, dtype=torch.float32))[None, None])

    def forward(self, x):
        return self.logit.expand(x.shape[0], 1, *self.logit.shape[-2:])


@pytest.mark.parametrize("linkage", ["average", "single"])
def test_ucm2_of_a_hand_worked_boundary_map(linkage):
    """Four flat blocks (boundary 0) split by two-pixel-wide lines: a vertical one (0.9 in
    rows 0-9, 0.7 below) and two horizontal ones, 0.3 on the left, 0.6 on the right, at other
    rows. Each line's two pixel rows / columns go to the blocks on either side (the
    watershed from every minimum), so the frontiers and the hierarchy are worked out by hand:

    * TL | BL (rows 8 | 9, columns 0-11): 11 pairs at 0.3, column 11 at 0.9 -> 4.2 / 12 = 0.35;
    * TR | BR (rows 12 | 13, columns 12-23): 11 pairs at 0.6, column 12 at 0.7 -> 7.3 / 12;
    * across the vertical line (columns 11 | 12): TL | TR rows 0-8 at 0.9 (9 pairs), BL | TR
      rows 9-12 (0.9, then 3 x 0.7: mean 0.75 over 4), BL | BR rows 13-19 at 0.7 (7 pairs).

    Both linkages merge TL+BL at 0.35, then TR+BR at 7.3 / 12, then left and right: average
    linkage at the length-weighted mean (9 x 0.9 + 4 x 0.75 + 7 x 0.7) / 20 = 0.8, single
    linkage at the least frontier, 0.7.
    """
    from scipy import ndimage

    from hiseg.segmentation import Pipeline

    h, w = 20, 24
    b = np.zeros((h, w))
    b[:10, 11:13], b[10:, 11:13] = 0.9, 0.7
    b[8:10, :11], b[12:14, 13:] = 0.3, 0.6
    blocks = np.zeros((h, w), int)  # TL 0, TR 1, BL 2, BR 3
    blocks[9:, :12] = 2
    blocks[:13, 12:] = 1
    blocks[13:, 12:] = 3
    top = {"average": 0.8, "single": 0.7}[linkage]
    alt = {(0, 2): 0.35, (1, 3): 7.3 / 12, (0, 1): top, (1, 2): top, (2, 3): top}
    seg = Segmenter(_FixedMap(b), pipeline=Pipeline(superpixels="all_minima", linkage=linkage))
    res = seg.segment(np.zeros((h, w, 3), np.float32))
    assert res.rag.num_regions == 4
    assert len(np.unique(np.stack([res.rag.labels.ravel(), blocks.ravel()], 1), axis=0)) == 4  # the blocks
    # the map passes through float32 logits: altitudes within 1e-6
    np.testing.assert_allclose(res.ucm2, _ucm2_bf(blocks, lambda a, b: alt[(a, b)]), rtol=0, atol=1e-6)
    left_right = np.where(blocks % 2 == 0, 0, 1)
    expected = [(0.3, blocks), (0.5, np.where(blocks == 2, 0, blocks)), (0.65, left_right),
                (top + 0.01, np.zeros_like(blocks))]
    for t, truth in expected:
        k = len(np.unique(truth))
        for lab in (res.cut(threshold=t), ndimage.label(res.ucm2 <= t, np.ones((3, 3)))[0][1::2, 1::2],
                    res.cut(n_regions=k, min_size=0)):
            assert _nested(lab, truth) and _nested(truth, lab), (t, lab)


def _nested(fine, coarse) -> bool:
    """Every region of ``fine`` lies inside one region of ``coarse``."""
    return len(np.unique(np.stack([fine.ravel(), coarse.ravel()], 1), axis=0)) == len(np.unique(fine))


def test_multiscale_and_linkages_give_nested_ucms(ckpt):
    """For both linkages (two scales): the ultrametric is one (its own minimax closure, brute
    force); the threshold cuts at increasing thresholds, and the plain cuts into 1..R regions,
    are nested partitions; the ucm2 is an ultrametric contour map: at every threshold, its
    8-connected components below the threshold (the BSDS reading, scipy) are the cut of
    the hierarchy, in number and as a partition (closed contours)."""
    from scipy import ndimage

    from hiseg.segmentation import Pipeline

    seg = Segmenter.from_checkpoint(ckpt)
    img = noisy_checker_image()
    for linkage in ("average", "single"):
        seg.pipeline = Pipeline(scales=(0.5, 1.0), region_size=6.0, linkage=linkage)
        res = seg.segment(img)
        u, r = res.ultrametric, res.rag.num_regions
        assert r > 20
        pairs = list(zip(res.rag.graph.sources.tolist(), res.rag.graph.targets.tolist()))
        closure = _single_linkage_bf(dict(zip(pairs, u.tolist())), r)
        np.testing.assert_allclose(u, [closure[p] for p in pairs], rtol=0, atol=1e-12)
        levels = np.unique(u)
        assert 0 <= levels[0] and levels[-1] <= 1
        thresholds = np.unique(np.concatenate([[0.0], levels, (levels[1:] + levels[:-1]) / 2, [1.0]]))
        cuts = [res.cut(threshold=float(t)) for t in thresholds]
        counts = [len(np.unique(c)) for c in cuts]
        assert counts[-1] == 1 and counts[0] <= r and len(set(counts)) > 10
        for t, fine, coarse in zip(thresholds, cuts, cuts[1:]):
            assert _nested(fine, coarse), f"{linkage}: the cut above {t} is not coarser"
        for t, cut, n in zip(thresholds, cuts, counts):
            from_map = ndimage.label(res.ucm2 <= t, structure=np.ones((3, 3)))[0][1::2, 1::2]
            assert len(np.unique(from_map)) == n, f"{linkage}: ucm2 at {t} has open contours"
            assert _nested(from_map, cut) and _nested(cut, from_map)
        plain = [res.cut(n_regions=k, min_size=0) for k in range(r, 0, -1)]
        assert [len(np.unique(c)) for c in plain] == list(range(r, 0, -1))
        for k, fine, coarse in zip(range(r, 0, -1), plain, plain[1:]):
            assert _nested(fine, coarse), f"{linkage}: the {k - 1}-region cut does not contain the {k}-region one"


# ----------------------------------------------------------------------------- large images
def test_tiled_forward_equals_the_whole_image_pass():
    from hiseg.segmentation.pipeline import TILE_MARGIN, tiled_forward

    torch.manual_seed(0)
    m = get_model("compact_boundary_net", width=8).eval()
    x = torch.rand(1, 3, 150, 211)
    with torch.no_grad():
        whole = m(x)
        torch.testing.assert_close(tiled_forward(m, x, tile=0), whole)
        tiled = tiled_forward(m, x, tile=64)
    assert tiled.shape == whole.shape
    assert float((torch.sigmoid(tiled) - torch.sigmoid(whole)).abs().max()) < 1e-5


@pytest.mark.slow
def test_tiled_shipped_networks_equal_their_whole_image_pass():
    """The shipped networks on a natural image, in tiles of 128 with TILE_MARGIN of context:
    the whole-image map (the former margin, 48, was off by up to 0.2 along the seams)."""
    import skimage.data
    from skimage.transform import resize

    from hiseg.models import Weights, load_model
    from hiseg.segmentation.pipeline import tiled_forward

    img = resize(skimage.data.astronaut(), (280, 264), anti_aliasing=True).astype(np.float32)
    x = torch.from_numpy(img.transpose(2, 0, 1).copy())[None]
    for name in ("bsds500", "bsds500_merge", "bsds500_ensemble"):
        m = load_model(Weights.from_name(name).path()).eval()
        with torch.no_grad():
            whole = torch.sigmoid(m(x))
            tiled = torch.sigmoid(tiled_forward(m, x, tile=128))
            narrow = torch.sigmoid(tiled_forward(m, x, tile=128, margin=48))
        assert float((tiled - whole).abs().max()) < 1e-5, name
        assert float((narrow - whole).abs().max()) > 1e-3, name  # the margin matters: this test can fail


def test_ucm2_from_labels_equals_ucm2_from_rag_and_upsamples_the_cuts(rng):
    from hiseg.core.graph import region_adjacency_graph
    from hiseg.metrics.region import ucm_to_labels
    from hiseg.segmentation.saliency import (cut_at_threshold, rag_hierarchy, ucm2_from_labels, ucm2_from_rag,
                                             upsample_labels)
    from tests.segmentation.test_segmentation import same_partition, voronoi_labels

    lab = voronoi_labels(rng, (20, 30), 15)
    rag = region_adjacency_graph(lab)
    u, _ = rag_hierarchy(rag, rng.random(rag.graph.num_edges) + 0.01)
    np.testing.assert_array_equal(ucm2_from_labels(rag.labels, rag.graph, u), ucm2_from_rag(rag, u))
    big = upsample_labels(rag.labels, (47, 71))
    assert big.shape == (47, 71) and set(np.unique(big)) == set(np.unique(rag.labels))
    ucm2 = ucm2_from_labels(big, rag.graph, u)
    for t in np.quantile(u.numpy(), [0.2, 0.5, 0.8]):
        # thresholding the full-size map = upsampling the cut
        assert same_partition(ucm_to_labels(ucm2, t), upsample_labels(cut_at_threshold(rag, u, t), (47, 71)))
    with pytest.raises(ValueError, match="not joined"):
        ucm2_from_labels(np.array([[0, 1], [2, 2]]), rag.graph.__class__(np.array([0]), np.array([1]), 3),
                         np.array([0.5]))


def test_large_image_runs_at_the_working_resolution(ckpt):
    from hiseg.segmentation import Pipeline

    seg = Segmenter.from_checkpoint(ckpt)
    seg.pipeline = Pipeline(region_size=6.0, max_pixels=4096)
    img = cv2.resize(checker_image(), (160, 120), interpolation=cv2.INTER_NEAREST)
    res = seg.segment(img, tile=64)  # the working image (73x55) still spans several tiles
    hb, wb = res.boundary.shape
    assert hb * wb <= 4096 and abs(wb / hb - 160 / 120) < 0.05
    assert res.shape == (120, 160) and res.saliency.shape == (120, 160) and res.ucm2.shape == (241, 321)
    lab = res.cut(n_regions=3, min_size=0)
    assert lab.shape == (120, 160) and len(np.unique(lab)) == 3
    assert res.cut(threshold=0.5).shape == (120, 160)
    # an image within the limit is untouched
    small = seg.segment(checker_image())
    assert small.shape == small.rag.labels.shape == (48, 64)


def test_write_ucm2_mat_round_trip(tmp_path, rng):
    from hiseg.io import write_ucm2_mat

    for shape in [(1, 1), (7, 9), (301, 481)]:
        a = rng.random(shape) * (rng.random(shape) < 0.1)
        write_ucm2_mat(tmp_path / "a.mat", a)
        b = loadmat(tmp_path / "a.mat")["ucm2"]
        assert b.dtype == np.float64 and np.array_equal(a, b)
    with pytest.raises(ValueError, match="2-D"):
        write_ucm2_mat(tmp_path / "b.mat", np.zeros(3))


def test_output_files_follow_the_umask(tmp_path, ckpt):
    import os

    old = os.umask(0o022)
    try:
        paths = write_outputs(tmp_path, "x", Segmenter.from_checkpoint(ckpt).segment(checker_image()),
                              checker_image(), n_regions=2)
    finally:
        os.umask(old)
    assert all((p.stat().st_mode & 0o777) == 0o644 for p in paths)


def test_max_pixels_bad_values():
    from hiseg.segmentation import Pipeline, PipelineError

    for bad in (-1, 100, 2.5, True, "big"):
        with pytest.raises(PipelineError, match="max_pixels"):
            Pipeline(max_pixels=bad)
    assert Pipeline(max_pixels=0).working_size(5000, 5000) == (5000, 5000)
    assert Pipeline().working_size(3000, 4000) == (612, 816)


def test_predict_never_overwrites_an_input(tmp_path, capsys):
    """cat.jpg and cat_ucm.png in one folder, --out that folder: refused, nothing written (cat_ucm.png is
    what this run would write, so it is not read as an input: issue 43, a run into its input folder)."""
    d = tmp_path / "photos"
    d.mkdir()
    cv2.imwrite(str(d / "cat.png"), (checker_image() * 255).astype(np.uint8))
    cv2.imwrite(str(d / "cat_ucm.png"), np.full((48, 64), 7, np.uint8))
    before = {p.name: p.read_bytes() for p in d.iterdir()}
    assert cli_main(["predict", "--classical", str(d), "--out", str(d), "--quiet"]) == 2
    err = capsys.readouterr().err
    assert "exist already" in err and "cat_ucm.png" in err and "--overwrite" in err
    assert {p.name: p.read_bytes() for p in d.iterdir()} == before


@pytest.mark.parametrize("value", ["nan", "-0.1", "1.5", "abc"])
def test_predict_refuses_bad_thresholds(tmp_path, capsys, value):
    img = tmp_path / "a.png"
    cv2.imwrite(str(img), (checker_image() * 255).astype(np.uint8))
    with pytest.raises(SystemExit):
        cli_main(["predict", "--classical", str(img), "--out", str(tmp_path / "o"), "--level", value])
    assert "--level" in capsys.readouterr().err and not (tmp_path / "o").exists()


def test_nan_images_and_thresholds_are_refused(ckpt):
    img = checker_image()
    img[3, 4, 1] = np.nan
    for seg in (Segmenter.classical(region_size=6.0, fit_iterations=0), Segmenter.from_checkpoint(ckpt)):
        with pytest.raises(ValueError, match="NaN or infinite"):
            seg.segment(img)
    res = Segmenter.classical(region_size=6.0, fit_iterations=0).segment(checker_image())
    for t in (float("nan"), -0.5, 2.0):
        with pytest.raises(ValueError, match="threshold must be in"):
            res.cut(threshold=t)


def test_every_cli_option_has_help(capsys):
    import argparse

    from hiseg.cli import evaluate, predict, view

    for add in (predict.add_arguments, evaluate.add_arguments, view.add_arguments):
        p = argparse.ArgumentParser()
        add(p)
        missing = [a.option_strings or a.dest for a in p._actions if not a.help]
        assert not missing, f"{add.__name__}: options without help {missing}"
    for sub in ("predict", "evaluate", "view"):
        with pytest.raises(SystemExit):
            cli_main([sub, "--help"])
        out = capsys.readouterr().out
        assert len(out.split("options:")[0]) > 200  # a description, not just the usage line
