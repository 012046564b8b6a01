"""Images at the extremes of size through ``hiseg predict``: 1x1, 1xN and Nx1 with the default
model (scales 0.5 and 1: the 0.5 scale of a 1-pixel side stays 1 pixel) and the classical path."""
import cv2
import numpy as np
import pytest
import torch
from scipy.io import loadmat

from hiseg.cli import main as cli_main
from hiseg.segmentation.pipeline import rescale


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
