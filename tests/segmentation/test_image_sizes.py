"""Images at the extremes of size: 1x1, 1xN and Nx1 through ``hiseg predict`` with the default
model (scales 0.5 and 1: the 0.5 scale of a 1-pixel side stays 1 pixel) and the classical path;
and large ones, whose working image is reduced and whose outputs are drawn band by band
(``hiseg.segmentation.segmenter.BAND_PIXELS``): the same files as the whole-image path."""
import cv2
import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.io import loadmat

from hiseg.segmentation import outputs, segmenter
from hiseg.cli import main as cli_main
from hiseg.io import read_image, reduce_image, to_float_rgb
from hiseg.segmentation.pipeline import rescale
from tests.segmentation.test_segmentation import voronoi_labels


def test_rescale_keeps_one_pixel_and_equals_torch_elsewhere():
    x = torch.rand(1, 3, 9, 14)
    assert torch.equal(rescale(x, 0.5), torch.nn.functional.interpolate(
        x, scale_factor=0.5, mode="bilinear", align_corners=False, recompute_scale_factor=False))
    assert rescale(x, 0.5).shape[-2:] == (4, 7)
    one = torch.rand(2, 3, 1, 1)
    assert torch.equal(rescale(one, 0.5), one)  # 1x1 -> 1x1: the pixel itself
    row = torch.rand(1, 3, 1, 9)
    assert rescale(row, 0.5).shape[-2:] == (1, 4) and rescale(row.transpose(-1, -2), 0.5).shape[-2:] == (4, 1)
    # a constant row stays constant whatever the resize
    assert torch.allclose(rescale(torch.full((1, 1, 1, 9), 0.25), 0.5), torch.tensor(0.25))


@pytest.mark.parametrize("model", ["default", "classical"])
def test_tiny_images_through_predict(tmp_path, model, capsys):
    rng = np.random.default_rng(0)
    shapes = {"one": (1, 1), "row": (1, 23), "col": (17, 1)}
    src = tmp_path / "src"
    src.mkdir()
    for name, (h, w) in shapes.items():
        cv2.imwrite(str(src / f"{name}.png"), rng.integers(0, 256, (h, w, 3)).astype(np.uint8))
    argv = ["predict", str(src), "--out", str(tmp_path / "out"), "--regions", "2", "--quiet"]
    assert cli_main(argv + (["--classical"] if model == "classical" else [])) == 0, capsys.readouterr().err
    for name, (h, w) in shapes.items():
        lab = cv2.imread(str(tmp_path / "out" / f"{name}_labels.png"), cv2.IMREAD_UNCHANGED)
        assert lab.shape[:2] == (h, w)
        ucm = cv2.imread(str(tmp_path / "out" / f"{name}_ucm.png"), cv2.IMREAD_UNCHANGED)
        assert ucm.shape[:2] == (h, w)
        ucm2 = loadmat(tmp_path / "out" / f"{name}.mat")["ucm2"]
        assert ucm2.shape == (2 * h + 1, 2 * w + 1) and np.isfinite(ucm2).all()


# ----------------------------------------------------------------------------- large images, in bands
@settings(max_examples=40, deadline=None)
@given(st.data())
def test_ucm2_blocks_equal_the_whole_map(data):
    from hiseg.core.graph import region_adjacency_graph
    from hiseg.segmentation.saliency import UCM2Blocks, rag_hierarchy, ucm2_from_labels, upsample_labels

    rng = np.random.default_rng(data.draw(st.integers(0, 2 ** 16)))
    h, w = data.draw(st.integers(1, 12)), data.draw(st.integers(1, 12))
    rag = region_adjacency_graph(voronoi_labels(rng, (h, w), data.draw(st.integers(1, 6))))
    u, _ = rag_hierarchy(rag, rng.random(rag.graph.num_edges) + 0.01)
    shape = (data.draw(st.integers(h, 3 * h)), data.draw(st.integers(w, 3 * w)))
    whole = ucm2_from_labels(upsample_labels(rag.labels, shape), rag.graph, u)
    blocks = UCM2Blocks(rag.labels, rag.graph, u, shape)
    assert blocks.shape == whole.shape
    r0, r1 = sorted(data.draw(st.integers(0, whole.shape[0])) for _ in range(2))
    c0, c1 = sorted(data.draw(st.integers(0, whole.shape[1])) for _ in range(2))
    np.testing.assert_array_equal(blocks[r0:r1, c0:c1], whole[r0:r1, c0:c1])
    np.testing.assert_array_equal(blocks[:, c0:c1], whole[:, c0:c1])
    r = slice(*sorted(data.draw(st.integers(0, h)) for _ in range(2)))
    np.testing.assert_array_equal(upsample_labels(rag.labels, shape, rows=(r.start, r.stop)),
                                  upsample_labels(rag.labels, shape)[r])


@pytest.mark.parametrize("size", [(300, 400, 61, 81), (120, 90, 60, 45), (99, 101, 33, 34), (90, 120, 90, 40),
                                  (90, 120, 45, 120), (90, 120, 31, 40)])
@pytest.mark.parametrize("dtype", [np.uint8, np.uint16])
def test_reduce_image_equals_the_whole_image_resize(size, dtype):
    H, W, h, w = size
    img = np.random.default_rng(0).integers(0, np.iinfo(dtype).max, (H, W, 3)).astype(dtype)
    whole = cv2.resize(to_float_rgb(img, bgr=True), (w, h), interpolation=cv2.INTER_AREA)
    banded = reduce_image(img, (h, w), bgr=True, band=500)
    if W % w == 0 and W > w and H % h:  # OpenCV's area resize takes another path for the whole image
        np.testing.assert_allclose(banded, whole, rtol=0, atol=3e-7)
    else:
        np.testing.assert_array_equal(banded, whole)


@pytest.mark.parametrize("band", [1, 3, 1000])
@pytest.mark.parametrize("kind", [(np.uint8, ()), (np.uint16, ()), (np.uint8, (3,)), (np.uint16, (3,))])
def test_write_png_rows_decodes_as_the_array(tmp_path, band, kind):
    """The band-by-band PNG decodes, by OpenCV and by Pillow, as the whole array."""
    from PIL import Image

    from hiseg.io import write_png_rows

    dtype, channels = kind
    rng = np.random.default_rng(band)
    img = rng.integers(0, np.iinfo(dtype).max + 1, (23, 17) + channels).astype(dtype)
    img[5:12] = img[4]  # rows the filter turns to zeros
    write_png_rows(lambda r0, r1: img[r0:r1].astype(np.int64), img.shape[0], dtype, band)(tmp_path / "a.png")
    back = cv2.imread(str(tmp_path / "a.png"), cv2.IMREAD_UNCHANGED)
    np.testing.assert_array_equal(back[..., ::-1] if channels else back, img)
    if not (channels and dtype == np.uint16):  # Pillow reads 16-bit colour as 8-bit
        with Image.open(tmp_path / "a.png") as im:
            np.testing.assert_array_equal(np.asarray(im), img)


@pytest.mark.parametrize("band", [400, 1 << 21])  # 3 rows a band, encoded band by band; one band, whole
@pytest.mark.parametrize("kind", ["rgb8", "gray16"])
@pytest.mark.parametrize("max_pixels", [4096, 0])
def test_banded_outputs_equal_the_whole_image_ones(tmp_path, monkeypatch, kind, max_pixels, band):
    """predict_file with bands of a few rows (BAND_PIXELS forced small) writes the files the
    whole-image views give: the cut, its overlay, the saliency maps and the ucm2."""
    from hiseg.segmentation.outputs import _colour_overlay, _quantise, predict_file
    from hiseg.segmentation.segmenter import Segmenter

    rng = np.random.default_rng(3)
    img = cv2.resize(rng.integers(0, 256, (6, 8, 3)).astype(np.uint8), (130, 97), interpolation=cv2.INTER_CUBIC)
    if kind == "gray16":
        img = img[..., 0].astype(np.uint16) * 257 + rng.integers(0, 200, img.shape[:2]).astype(np.uint16)
    cv2.imwrite(str(tmp_path / "im.png"), img)
    seg = Segmenter.classical(region_size=5.0, fit_iterations=5)
    seg.pipeline = seg.pipeline.with_overrides(max_pixels=max_pixels)
    full = read_image(tmp_path / "im.png")
    work, shape = seg.working_image(full)
    assert np.array_equal(seg.read(tmp_path / "im.png")[0], work)
    assert (work.shape[0] * work.shape[1] <= 4096) if max_pixels else work.shape[:2] == full.shape[:2]
    res = seg.finish(work, seg.network_map(work), shape)
    for module in (segmenter, outputs):  # reading and writing, each band at a time
        monkeypatch.setattr(module, "BAND_PIXELS", band)
    image, banded, _ = predict_file(seg, tmp_path / "im.png", tmp_path / "out", n_regions=5)
    assert banded._ucm2 is None  # never whole

    out = tmp_path / "out"
    labels = res.cut(n_regions=5)
    np.testing.assert_array_equal(cv2.imread(str(out / "im_labels.png"), cv2.IMREAD_UNCHANGED), labels)
    np.testing.assert_array_equal(cv2.imread(str(out / "im_overlay.png")), _colour_overlay(full, labels))
    np.testing.assert_array_equal(_colour_overlay(image, labels, rows=2), _colour_overlay(full, labels))
    sal = np.clip(res.saliency, 0, 1).astype(np.float32)
    np.testing.assert_array_equal(cv2.imread(str(out / "im_ucm.png"), cv2.IMREAD_UNCHANGED),  # the view: sqrt,
                                  255 - _quantise(np.sqrt(sal), 255, np.uint8))  # dark on white
    np.testing.assert_array_equal(cv2.imread(str(out / "im_ucm16.png"), cv2.IMREAD_UNCHANGED),
                                  _quantise(sal, 65535, np.uint16))
    np.testing.assert_array_equal(loadmat(out / "im.mat")["ucm2"], res.ucm2)
    assert len(np.unique(labels)) == 5 and res.ucm2.max() > 0
