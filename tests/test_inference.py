"""Inference (Segmenter, hiseg predict): outputs, checkpoints and bad input."""
import numpy as np
import pytest
import torch
from scipy.io import loadmat

import cv2
from hiseg.cli import main as cli_main
from hiseg.inference import Segmenter, write_outputs
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
    res = Segmenter(region_size=6.0, fit_iterations=20).segment(checker_image())
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
                     "--no-progress"]) == 0
    names = sorted(p.name for p in out.iterdir())
    assert names == sorted(f"im{i}{s}" for i in range(2) for s in
                           ["_ucm.png", "_ucm16.png", ".mat", "_labels.png", "_overlay.png"])
    ucm2 = loadmat(out / "im0.mat")["ucm2"]
    assert ucm2.shape == (97, 129) and ucm2.dtype == np.float64
    u16 = cv2.imread(str(out / "im0_ucm16.png"), cv2.IMREAD_UNCHANGED)
    assert u16.dtype == np.uint16 and u16.shape == (48, 64)
    np.testing.assert_allclose(u16 / 65535.0, np.clip(ucm2[2::2, 2::2], 0, 1), atol=1 / 65535)
    lab = cv2.imread(str(out / "im0_labels.png"), cv2.IMREAD_UNCHANGED)
    assert len(np.unique(lab)) == 3
    # classical path and a threshold
    assert cli_main(["predict", str(src / "im0.png"), "--out", str(tmp_path / "o2"), "--threshold", "0.5",
                     "--no-progress"]) == 0
    assert (tmp_path / "o2" / "im0_labels.png").is_file()


def test_flat_image_gives_flat_saliency(tmp_path):
    img = np.full((30, 40, 3), 0.5, np.float32)
    res = Segmenter(region_size=100.0).segment(img)
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
    assert cli_main(["predict", arg, "--out", str(out), "--no-progress"]) == status
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
    assert cli_main(["predict", str(img), "--out", str(out), "--regions", "5", "--no-progress"]) == 0
    assert cli_main(["evaluate", "--pred", str(out), "--gt", str(gt), "--thresholds", "5", "--workers", "1",
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
                     str(tmp_path / "o"), "--no-progress"]) == 2
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


def test_classical_path_is_the_closest_fit_of_the_colour_gradient():
    """Segmenter() runs Pipeline.classical: the closest ultrametric fitted to the colour
    gradient pooled on colour-watershed superpixels (scaled to a maximum of 1)."""
    from hiseg import fit_ultrametric
    from hiseg.graph import region_adjacency_graph
    from hiseg.segmentation import Superpixels, rag_frontier_mean
    from hiseg.segmentation.superpixels import color_gradient

    img = checker_image()
    res = Segmenter(region_size=6.0, fit_iterations=20).segment(img)
    rag = region_adjacency_graph(Superpixels(region_size=6.0)(img))
    w = rag_frontier_mean(rag, color_gradient(img, 1.0))
    u = fit_ultrametric(rag.graph, w / w.max(), max_iter=20).ultrametric
    np.testing.assert_array_equal(res.rag.labels, rag.labels)
    np.testing.assert_allclose(res.ultrametric, u.numpy(), rtol=0, atol=1e-12)


def test_multiscale_and_linkages_give_nested_ucms(ckpt):
    from hiseg.segmentation import Pipeline

    seg = Segmenter.from_checkpoint(ckpt, pipeline=Pipeline(scales=(0.5, 1.0), region_size=6.0))
    img = checker_image()
    for linkage in ("average", "single"):
        seg.pipeline = Pipeline(scales=(0.5, 1.0), region_size=6.0, linkage=linkage)
        res = seg.segment(img)
        u = res.ultrametric
        # an ultrametric: its own min-max closure
        import hiseg
        import torch as _t
        np.testing.assert_allclose(hiseg.subdominant_ultrametric(res.rag.graph, _t.from_numpy(u)).numpy(), u,
                                   atol=1e-12)
        k = min(3, res.rag.num_regions)
        assert len(np.unique(res.cut(n_regions=k))) == k


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
    # beyond the margin the network's influence is negligible (measured < 3e-6 for the shipped one)
    assert float((torch.sigmoid(tiled) - torch.sigmoid(whole)).abs().max()) < 1e-3
    assert TILE_MARGIN >= 32


def test_ucm2_from_labels_equals_ucm2_from_rag_and_upsamples_the_cuts(rng):
    from hiseg.graph import region_adjacency_graph
    from hiseg.metrics.region import ucm_to_labels
    from hiseg.segmentation.saliency import (cut_at_threshold, rag_hierarchy, ucm2_from_labels, ucm2_from_rag,
                                             upsample_labels)
    from test_segmentation import same_partition, voronoi_labels

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
    """cat.jpg and cat_ucm.png in one folder, --out that folder: refused, nothing written."""
    d = tmp_path / "photos"
    d.mkdir()
    cv2.imwrite(str(d / "cat.png"), (checker_image() * 255).astype(np.uint8))
    cv2.imwrite(str(d / "cat_ucm.png"), np.full((48, 64), 7, np.uint8))
    before = {p.name: p.read_bytes() for p in d.iterdir()}
    assert cli_main(["predict", str(d), "--out", str(d), "--no-progress"]) == 2
    assert "would overwrite input" in capsys.readouterr().err
    assert {p.name: p.read_bytes() for p in d.iterdir()} == before


@pytest.mark.parametrize("value", ["nan", "-0.1", "1.5", "abc"])
def test_predict_refuses_bad_thresholds(tmp_path, capsys, value):
    img = tmp_path / "a.png"
    cv2.imwrite(str(img), (checker_image() * 255).astype(np.uint8))
    with pytest.raises(SystemExit):
        cli_main(["predict", str(img), "--out", str(tmp_path / "o"), "--threshold", value])
    assert "--threshold" in capsys.readouterr().err and not (tmp_path / "o").exists()


def test_nan_images_and_thresholds_are_refused(ckpt):
    img = checker_image()
    img[3, 4, 1] = np.nan
    for seg in (Segmenter(region_size=6.0, fit_iterations=0), Segmenter.from_checkpoint(ckpt)):
        with pytest.raises(ValueError, match="NaN or infinite"):
            seg.segment(img)
    res = Segmenter(region_size=6.0, fit_iterations=0).segment(checker_image())
    for t in (float("nan"), -0.5, 2.0):
        with pytest.raises(ValueError, match="threshold must be in"):
            res.cut(threshold=t)


def test_every_cli_option_has_help(capsys):
    import argparse

    from hiseg import view
    from hiseg.cli import add_predict_arguments
    from hiseg.metrics import evaluate_cli

    for add in (add_predict_arguments, evaluate_cli.add_arguments, view.add_arguments):
        p = argparse.ArgumentParser()
        add(p)
        missing = [a.option_strings or a.dest for a in p._actions if not a.help]
        assert not missing, f"{add.__name__}: options without help {missing}"
    for sub in ("predict", "evaluate", "view"):
        with pytest.raises(SystemExit):
            cli_main([sub, "--help"])
        out = capsys.readouterr().out
        assert len(out.split("options:")[0]) > 200  # a description, not just the usage line
