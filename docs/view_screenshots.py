"""Screenshots of `hiseg view` for the README: three levels of a BSDS500 val photograph.

    python docs/view_screenshots.py [IMAGE] [--out docs]

Segments IMAGE (default: BSDS500 val 197017, from ../shared/data or datasets/BSDS500) with
the shipped checkpoint, writes its explorer page, opens it in headless chromium (Debian's
chromium and chromium-driver, and selenium) and saves ``view_level1.png`` .. ``view_level3.png``
(many, some and few regions; the second with a clicked region), palette-compressed, into --out.
Prints the region counts, the ms per slider move the page measured and the page's size.
"""
import argparse
import shutil
import sys
import tempfile
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
CANDIDATES = [ROOT.parent / "shared" / "data" / "BSDS500" / "data" / "images" / "val" / "197017.jpg",
              ROOT / "datasets" / "BSDS500" / "images" / "val" / "197017.jpg"]


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("image", nargs="?", default=next((str(p) for p in CANDIDATES if p.is_file()), None))
    ap.add_argument("--out", default=str(ROOT / "docs"))
    ap.add_argument("--regions", type=int, nargs=3, default=(60, 14, 4), help="region counts of the three shots")
    ap.add_argument("--click", type=int, nargs=2, default=(150, 80), metavar=("ROW", "COL"),
                    help="the pixel clicked in the second shot")
    args = ap.parse_args()
    if args.image is None:
        sys.exit("no image: give one (BSDS500 val 197017 was not found)")
    from PIL import Image

    sys.path.insert(0, str(ROOT))
    from benchmarks.bench_view import chromium, move, open_page

    from hiseg.segmentation.segmenter import Segmenter
    from hiseg.io import read_image
    from hiseg.explorer.page import build_page

    img = read_image(args.image)
    res = Segmenter.from_pretrained("bsds500").segment(img)
    stem = Path(args.image).stem
    tmp = Path(tempfile.mkdtemp())
    page = tmp / f"{stem}.html"
    page.write_text(build_page(img, res.ucm2, title=stem, source="checkpoint bsds500"))
    d = chromium()
    try:
        open_page(d, page)
        extra = d.execute_script("return [outerWidth - innerWidth, outerHeight - innerHeight]")
        d.set_window_size(2 * img.shape[1] + 120 + extra[0], img.shape[0] + 175 + extra[1])  # the page, no more
        levels = np.unique(res.ucm2)
        counts = np.array([res.cut(threshold=t).max() + 1 for t in levels])
        ms = []
        for i, n in enumerate(args.regions, 1):
            k = int(np.argmin(np.abs(counts - n)))
            move(d, k)
            if i == 2:  # a clicked region: its area and merge level below the images
                d.execute_script("hisegView.select(arguments[0], arguments[1])", *args.click)
            ms.append(d.execute_script("return hisegView.lastMs"))
            shot = tmp / "shot.png"
            d.save_screenshot(str(shot))
            out = Path(args.out) / f"view_level{i}.png"
            Image.open(shot).convert("RGB").quantize(colors=128, method=Image.Quantize.MEDIANCUT).save(
                out, optimize=True)
            print(f"{out}: level {levels[k]:.4f}, {d.find_element('id', 'regions').text} regions "
                  f"(Python: {counts[k]}), {out.stat().st_size // 1024} KiB")
        for k in np.linspace(0, len(levels) - 1, 20).astype(int):
            ms.append(move(d, int(k)))
        print(f"ms per slider move: median {np.median(ms):.1f}, max {max(ms):.1f} ({len(ms)} moves); "
              f"page {page.stat().st_size // 1024} KiB")
    finally:
        d.quit()
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
