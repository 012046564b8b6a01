"""The compiled kernels of the benchmark (hiseg.metrics.kernels) against independent truths.

* thinning: :func:`skimage.morphology.thin` (the port of MATLAB's ``bwmorph(..., 'thin',
  Inf)``) on random maps, and its deletion tables;
* LAPJVsp: :func:`scipy.sparse.csgraph.min_weight_full_bipartite_matching` on the same
  CSR graphs -- the same assignment, not only the same cost (the benchmark's counts
  depend on which optimal assignment is picked);
* the per-component matching of :class:`hiseg.metrics.matching.BoundaryMatcher`: scipy's
  LAPJVsp on the whole candidate graph (the construction the benchmark used before the
  kernels), on random and on correlated maps with many ties.
"""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.sparse import csr_matrix
from scipy.sparse.csgraph import min_weight_full_bipartite_matching
from scipy.spatial import cKDTree
from skimage.morphology import thin as sk_thin

from hiseg.metrics import kernels
from hiseg.metrics import matching as bd


# ----------------------------------------------------------------------------
# thinning
# ----------------------------------------------------------------------------
@settings(max_examples=60, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), density=st.floats(0.05, 0.95), h=st.integers(1, 40), w=st.integers(1, 40))
def test_thin_equals_skimage(seed, density, h, w):
    img = np.random.default_rng(seed).random((h, w)) < density
    np.testing.assert_array_equal(kernels.thin(img), sk_thin(img))


def test_thin_on_blobs_and_boundaries():
    rng = np.random.default_rng(0)
    img = np.zeros((80, 90), dtype=bool)
    for _ in range(12):  # thick blobs, thin lines, 2x2 junctions
        y, x = rng.integers(0, 75, 2)
        img[y : y + rng.integers(1, 8), x : x + rng.integers(1, 8)] = True
    img[40, :] = True
    img[:, 45:47] = True
    np.testing.assert_array_equal(kernels.thin(img), sk_thin(img))
    assert not kernels.thin(np.zeros((4, 4), bool)).any()


def test_thinning_tables_delete_isolated_and_end_pixels_only_where_guo_hall_says():
    first, second = kernels.thinning_tables()
    assert first[0] == 0 and second[0] == 0  # an isolated pixel stays (X_H = 0)
    assert first[0b11111111] == 0  # an interior pixel stays
    assert first.sum() > 0 and second.sum() > 0 and not np.array_equal(first, second)


# ----------------------------------------------------------------------------
# LAPJVsp
# ----------------------------------------------------------------------------
def _random_square_graph(rng, n, density, integer_costs):
    """A random square sparse graph that holds a perfect matching (a hidden permutation)."""
    mask = rng.random((n, n)) < density
    mask[np.arange(n), rng.permutation(n)] = True
    cost = rng.integers(1, 6, size=(n, n)).astype(float) if integer_costs else rng.random((n, n)) + 0.1
    g = csr_matrix(np.where(mask, cost, 0.0))
    g.sort_indices()
    return g


@pytest.mark.parametrize("seed", range(40))
def test_lapjvsp_takes_scipys_decisions(seed):
    rng = np.random.default_rng(seed)
    n = int(rng.integers(1, 60))
    g = _random_square_graph(rng, n, float(rng.uniform(0.02, 0.4)), integer_costs=seed % 3 != 0)
    _, expected = min_weight_full_bipartite_matching(g)
    got = kernels.lapjvsp(g.indptr.astype(np.int64), g.indices.astype(np.int64), g.data.astype(np.float64), n)
    np.testing.assert_array_equal(got, expected)


# ----------------------------------------------------------------------------
# matching: per component == scipy on the whole graph
# ----------------------------------------------------------------------------
def _scipy_whole_graph_match(pred, gt, max_dist=bd.DEFAULT_MAX_DIST):
    """Pairs of the assignment scipy's LAPJVsp picks on the whole candidate graph (every
    pixel with a private outlier, outliers mirrored along the candidate pairs, costs + 1),
    the construction hiseg's benchmark solved before the compiled kernels."""
    radius = bd.max_distance_pixels(pred.shape, max_dist)
    ow = int(np.ceil(bd.DEFAULT_OUTLIER_COST * radius * 100))
    pairs = cKDTree(np.argwhere(pred)).sparse_distance_matrix(cKDTree(np.argwhere(gt)), radius, output_type="ndarray")
    if pairs.size == 0:
        return set()
    ei, ej = pairs["i"].astype(np.int64), pairs["j"].astype(np.int64)
    ew = np.rint(pairs["v"] * 100)
    used1, used2 = np.unique(ei), np.unique(ej)
    ci, cj = np.searchsorted(used1, ei), np.searchsorted(used2, ej)
    a, b = used1.size, used2.size
    rows = np.concatenate([ci, np.arange(a), a + np.arange(b), a + cj])
    cols = np.concatenate([cj, b + np.arange(a), np.arange(b), b + ci])
    wts = np.concatenate([ew + 1.0, np.full(a + b + ci.size, ow + 1.0)])
    r, c = min_weight_full_bipartite_matching(csr_matrix((wts, (rows, cols)), shape=(a + b, a + b)))
    real = (r < a) & (c < b)
    return set(zip(used1[r[real]].tolist(), used2[c[real]].tolist()))


@pytest.mark.parametrize("seed", range(12))
def test_matcher_pairs_equal_scipy_on_the_whole_graph(seed):
    rng = np.random.default_rng(seed)
    h, w = int(rng.integers(20, 70)), int(rng.integers(20, 70))
    pred = rng.random((h, w)) < 0.08
    gt = rng.random((h, w)) < 0.08
    if seed % 2:  # correlated maps: many ties, long alternating paths, big components
        gt = np.roll(pred, 1, axis=1) | (rng.random((h, w)) < 0.03)
    mp, mg = bd.BoundaryMatcher([gt]).match(pred)[0]
    assert set(zip(mp.tolist(), mg.tolist())) == _scipy_whole_graph_match(pred, gt)


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), nested=st.booleans(), n_maps=st.integers(2, 6))
def test_a_reused_matcher_pairs_as_scipy_on_every_map_of_a_sequence(seed, nested, n_maps):
    """The components kept from the last map (copied when unchanged) never change a pair:
    a sequence of maps, nested as a ucm2's thresholds or unrelated (and repeated), each
    matched by one matcher against several annotators, gives scipy's pairs on the whole
    graph for every map."""
    rng = np.random.default_rng(seed)
    h, w = int(rng.integers(8, 40)), int(rng.integers(8, 40))
    gts = [rng.random((h, w)) < 0.1 for _ in range(2)]
    gts[1] |= np.roll(gts[0], 1, axis=0)  # correlated annotators: big components
    pred = rng.random((h, w)) < 0.15
    maps = []
    for _ in range(n_maps):
        maps.append(pred)
        # nested: drop some pixels (often a whole region, often none); else a fresh map
        pred = pred & (rng.random((h, w)) < rng.choice([1.0, 0.9, 0.5])) if nested else rng.random((h, w)) < 0.15
    maps.append(maps[0])  # back to the first: its components were forgotten, solved again
    m = bd.BoundaryMatcher(gts)
    for pmap in maps:
        got = m.match(pmap)
        for k, gt in enumerate(gts):
            assert set(zip(got[k][0].tolist(), got[k][1].tolist())) == _scipy_whole_graph_match(pmap, gt)


def test_a_component_with_as_many_pixels_but_other_ones_is_solved_again():
    """The next map's component shares its first pixel and its size with the last map's,
    not its pixels: it is solved, not copied."""
    gt = np.zeros((300, 300), dtype=bool)  # a tolerance of 3.2 pixels
    gt[50, 50] = True
    a, b = np.zeros_like(gt), np.zeros_like(gt)
    a[50, 48] = a[50, 50] = True  # (50, 50) pairs with the annotator's pixel
    b[50, 48] = b[50, 51] = True  # (50, 51) does now
    m = bd.BoundaryMatcher([gt])
    m.match(a)
    mp, mg = m.match(b)[0]
    assert (mp.tolist(), mg.tolist()) == ([1], [0])


def test_a_reused_matcher_counts_as_fresh_ones_on_a_bsds_image(shared_data):
    """The 99 thresholds of a real ucm2 (a giant component, many copied components): one
    matcher's counts equal a fresh matcher's at every threshold."""
    from hiseg.io import load_ground_truth
    from hiseg.metrics.predictions import load_prediction

    pred = load_prediction(shared_data / "BSDS500" / "ucm2" / "val" / "102061.mat")
    _, gts = load_ground_truth(shared_data / "BSDS500" / "data" / "groundTruth" / "val" / "102061.mat")
    m = bd.BoundaryMatcher(gts)
    for t in np.linspace(0.01, 0.99, 25):
        pmap = bd.thin_boundaries(pred.data[2::2, 2::2] >= t)
        assert m.counts(pmap) == bd.BoundaryMatcher(gts).counts(pmap), t


def test_matcher_pairs_equal_scipy_on_a_bsds_image(shared_data):
    """One real image at a low threshold (thousands of pixels, one giant component)."""
    from hiseg.io import load_ground_truth
    from hiseg.metrics.predictions import load_prediction

    name = "102061"
    pred = load_prediction(shared_data / "BSDS500" / "ucm2" / "val" / f"{name}.mat")
    _, gts = load_ground_truth(shared_data / "BSDS500" / "data" / "groundTruth" / "val" / f"{name}.mat")
    pmap = bd.thin_boundaries(pred.data[2::2, 2::2] >= 0.1)
    mp, mg = bd.BoundaryMatcher(gts[:1]).match(pmap)[0]
    assert set(zip(mp.tolist(), mg.tolist())) == _scipy_whole_graph_match(pmap, gts[0] != 0)


# ----------------------------------------------------------------------------
# region side: nested labels, contingency tables
# ----------------------------------------------------------------------------
@settings(max_examples=80, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), h=st.integers(1, 12), w=st.integers(1, 12), levels=st.integers(1, 6))
def test_nested_ucm_labels_equal_a_labelling_at_each_threshold(seed, h, w, levels):
    """Grown from threshold to threshold, the labels equal scipy.ndimage.label's (through
    ucm_to_labels / seism_ucm_labels), numbering included; a lower threshold restarts."""
    from hiseg.metrics.fop import seism_ucm_labels
    from hiseg.metrics.region import NestedUcmLabels, ucm_to_labels

    rng = np.random.default_rng(seed)
    ucm2 = np.round(rng.random((2 * h + 1, 2 * w + 1)) * levels) / levels  # ties between levels
    ths = np.concatenate([np.sort(rng.random(6)), [0.3]])
    for seism, ref in ((False, ucm_to_labels), (True, seism_ucm_labels)):
        grown = NestedUcmLabels(ucm2, seism=seism)
        for t in ths:
            np.testing.assert_array_equal(grown.labels(t), ref(ucm2, t))


@pytest.mark.parametrize("seed", range(20))
def test_contingency_equals_a_dense_bincount(seed):
    from hiseg.metrics.tables import contingency

    rng = np.random.default_rng(seed)
    a = rng.integers(0, rng.integers(1, 40), size=(25, 30))
    b = rng.integers(0, rng.integers(1, 400), size=(25, 30))
    ka, kb = a.max() + 1, b.max() + 1
    dense = np.bincount((a * kb + b).ravel(), minlength=ka * kb)
    nz = np.flatnonzero(dense)
    ia, ib, n, na, nb = contingency(a, b)
    np.testing.assert_array_equal(ia * kb + ib, nz)
    np.testing.assert_array_equal(n, dense[nz])
    np.testing.assert_array_equal(na, np.bincount(a.ravel(), minlength=ka))
    np.testing.assert_array_equal(nb, np.bincount(b.ravel(), minlength=kb))
    with pytest.raises(ValueError, match="non-negative"):
        contingency(a - 1, b)


# ----------------------------------------------------------------------------
# without numba: the numpy/scipy twins (hiseg.metrics._kernels_py)
# ----------------------------------------------------------------------------
@pytest.mark.parametrize("seed", range(6))
def test_the_numpy_twins_equal_the_compiled_kernels(seed):
    """Each twin against its compiled kernel: thinning, neighbourhoods, the pairs of one
    annotator (sparse and correlated maps), ucm2 labels (BSDS's and SEISM's) and contingency
    tables."""
    from hiseg.metrics import _kernels_py as py

    rng = np.random.default_rng(seed)
    h, w = int(rng.integers(20, 60)), int(rng.integers(20, 60))
    img = rng.random((h, w)) < 0.3
    np.testing.assert_array_equal(py.thin(img), kernels.thin(img))
    pred = rng.random((h, w)) < 0.1
    gt = np.roll(pred, 1, axis=1) | (rng.random((h, w)) < 0.03) if seed % 2 else rng.random((h, w)) < 0.1
    dy, dx, cost = bd._offsets(3.2)
    glin = np.flatnonzero(gt).astype(np.int64)
    hood = kernels.neighbourhoods(glin, h, w, dy, dx, cost)
    for x, y in zip(py.neighbourhoods(glin, h, w, dy, dx, cost), hood):
        np.testing.assert_array_equal(x, y)
    plin = np.flatnonzero(pred).astype(np.int64)
    pid = np.full(h * w, -1, dtype=np.int64)
    pid[plin] = np.arange(plin.size)
    none = np.zeros(0, dtype=np.int64)
    fresh = lambda: (np.full(h * w, -1, dtype=np.int64), none, none, np.zeros(1, dtype=np.int64), none, none)  # noqa
    got = py.match_map(pid, plin, *hood, 32000, *fresh())
    want = kernels.match_map(pid, plin, *hood, 32000, *fresh())
    assert sorted(zip(got[0].tolist(), got[1].tolist())) == sorted(zip(want[0].tolist(), want[1].tolist()))
    ucm2 = np.round(rng.random((2 * h + 1, 2 * w + 1)) * 4) / 4
    for eight, no_vertices in ((True, False), (False, True)):
        n = ucm2.size
        state = (np.full(n, -1, dtype=np.int64), np.zeros(n, dtype=np.int64), np.zeros(n + 1, dtype=np.int64),
                 np.full(n, -1, dtype=np.int64))
        for t_prev, t in ((-np.inf, 0.25), (0.25, 0.5), (0.5, 1.0)):
            np.testing.assert_array_equal(py.ucm_labels_advance(ucm2, t_prev, t, eight, no_vertices, *state),
                                          kernels.ucm_labels_advance(ucm2, t_prev, t, eight, no_vertices, *state))
    a, b = rng.integers(0, 7, 500), rng.integers(0, 5, 500)
    assert py.label_range(a, b) == kernels.label_range(a, b)
    for x, y in zip(py.pair_counts(a, b, 7, 5, np.zeros(35, dtype=np.int64)),
                    kernels.pair_counts(a, b, 7, 5, np.zeros(35, dtype=np.int64))):
        np.testing.assert_array_equal(x, y)


NO_NUMBA = """
import json, sys
sys.modules["numba"] = None  # numba cannot be imported, as on the CUDA machine
from hiseg.metrics import kernels
from hiseg.metrics.bsds import evaluate
assert not kernels.HAVE_NUMBA
res = evaluate(sys.argv[1], sys.argv[2], n_thresholds=25, workers=1)
res.pop("timing")
print(json.dumps(res))
"""


def test_an_evaluation_without_numba_gives_the_same_figures(tmp_path):
    """hiseg evaluate in a Python where numba cannot be imported (the CUDA machine's) gives
    every figure the compiled kernels give, to the last digit: 3 images of hiseg's classical
    hierarchies against 2 made-up annotators each, boundaries, regions and Fop at 25
    thresholds."""
    import json
    import subprocess
    import sys

    from scipy.io import savemat

    from hiseg.segmentation.segmenter import Segmenter
    from hiseg.metrics.bsds import evaluate

    rng = np.random.default_rng(0)
    (tmp_path / "pred").mkdir()
    (tmp_path / "gt").mkdir()
    seg = Segmenter.classical()
    for k in range(3):
        img = np.zeros((48, 64, 3))
        img[:, 20 + 5 * k:] = 0.8
        img[30:, :, 1] = 0.6
        img += rng.normal(0, 0.05, img.shape)
        savemat(str(tmp_path / "pred" / f"im{k}.mat"), {"ucm2": seg.segment(np.clip(img, 0, 1)).ucm2})
        gt = np.empty((1, 2), dtype=object)
        for a in range(2):
            lab = np.ones((48, 64), np.uint16)
            lab[:, 20 + 5 * k + a:] = 2
            lab[30 - a:, :] += 2
            gt[0, a] = {"Segmentation": lab, "Boundaries": bd.seg_to_boundaries(lab).astype(np.uint8)}
        savemat(str(tmp_path / "gt" / f"im{k}.mat"), {"groundTruth": gt})
    want = evaluate(tmp_path / "pred", tmp_path / "gt", n_thresholds=25, workers=1)
    want.pop("timing")
    assert 0.3 < want["boundary"]["ods"]["f"] < 1 and 0 < want["fop"]["ods"]["f"] < 1  # not a degenerate case
    r = subprocess.run([sys.executable, "-c", NO_NUMBA, str(tmp_path / "pred"), str(tmp_path / "gt")],
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    assert json.loads(r.stdout) == json.loads(json.dumps(want))
