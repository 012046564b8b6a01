"""Draw docs/overview.png, the README's picture: a photograph (scikit-image's ``coffee``), its
saliency map from the shipped default model, and two cuts of the hierarchy (5 and 20 regions).

    python docs/make_overview.py
"""
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import skimage.data  # noqa: E402
from skimage.segmentation import find_boundaries  # noqa: E402

from hiseg import Segmenter  # noqa: E402


def overlay(image, labels):
    """The image with each region's contour drawn in white."""
    out = image.copy()
    out[find_boundaries(labels, mode="thick")] = 255
    return out


def main(path=Path(__file__).resolve().parent / "overview.png"):
    image = skimage.data.coffee()
    seg = Segmenter()
    res = seg.segment(image)
    panels = [(image, "photograph"), (res.saliency ** 0.5, f"saliency map ({seg.name}, square root)"),
              (overlay(image, res.cut(n_regions=5)), "cut: 5 regions"),
              (overlay(image, res.cut(n_regions=20)), "cut: 20 regions")]
    fig, axes = plt.subplots(1, 4, figsize=(16, 3.2))
    for ax, (im, title) in zip(axes, panels):
        ax.imshow(im, cmap="gray_r" if im.ndim == 2 else None)
        ax.set_title(title)
        ax.axis("off")
    fig.tight_layout()
    fig.savefig(path, dpi=60)
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
