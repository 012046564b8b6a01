"""Speed and size of the `hiseg view` explorer page in a real browser (headless chromium).

    python benchmarks/bench_view.py [--n 5] [--moves 40] [--out benchmarks/results/view.md]

For each of the first ``--n`` BSDS500 val images (``../shared/data`` or ``datasets/BSDS500``;
a synthetic image where neither is present) it segments the image with the shipped
checkpoint, writes its page, opens it in headless chromium (Debian's chromium and
chromium-driver, and selenium) and moves the slider to ``--moves`` levels spread over the
hierarchy, reading the time the page spent on each move (``hisegView.lastMs``: the cut,
its colours and contours, and the two canvases). Floor, measured in the same page: writing
two blank canvases of the image's size (``putImageData`` twice), the least a redraw costs.
Targets (issue 13): under 50 ms per move and under 2 MB per page for a 481x321 image.
"""
from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from provenance import stamped

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
VAL_DIRS = [ROOT.parent / "shared" / "data" / "BSDS500" / "data" / "images" / "val",
            ROOT / "datasets" / "BSDS500" / "images" / "val"]

FLOOR_JS = """
var w = arguments[0], h = arguments[1], c = document.createElement('canvas');
c.width = w; c.height = h;
var ctx = c.getContext('2d'), im = ctx.createImageData(w, h), t = [];
for (var k = 0; k < 20; k++) {
  var t0 = performance.now(); ctx.putImageData(im, 0, 0); ctx.putImageData(im, 0, 0);
  ctx.getImageData(0, 0, 1, 1);  // forces the writes to happen
  t.push(performance.now() - t0);
}
t.sort(function (a, b) { return a - b; });
return t[10];
"""


def chromium():
    """A headless chromium driven by selenium (Debian's chromium and chromium-driver); never
    downloads a driver. SystemExit with what to install when absent."""
    try:
        from selenium import webdriver
        from selenium.webdriver.chrome.service import Service
    except ImportError:
        sys.exit("selenium is not installed: pip install -e '.[dev]'")
    browser, driver = shutil.which("chromium") or shutil.which("chromium-browser"), shutil.which("chromedriver")
    if not browser or not driver:
        sys.exit("no headless browser: install Debian's chromium and chromium-driver packages")
    opts = webdriver.ChromeOptions()
    opts.binary_location = browser
    for a in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--hide-scrollbars"):
        opts.add_argument(a)
    return webdriver.Chrome(service=Service(driver), options=opts)


def open_page(d, page: Path) -> None:
    d.get(page.as_uri())
    while not d.execute_script("return window.hisegView && hisegView.ready"):
        time.sleep(0.05)


def move(d, k: int) -> float:
    """Move the slider to position ``k`` as a user's drag does; the page's ms for it."""
    d.execute_script("var s = document.getElementById('slider'); s.value = arguments[0];"
                     "s.dispatchEvent(new Event('input', {bubbles: true}));", int(k))
    return float(d.execute_script("return hisegView.lastMs"))


def images(n: int):
    val = next((p for p in VAL_DIRS if p.is_dir()), None)
    from hiseg.io import read_image

    if val is None:
        from hiseg.data import SyntheticSegmentation

        return [("synthetic", SyntheticSegmentation(1, size=(321, 481), seed=0)[0]["image"])]
    return [(p.stem, read_image(p)) for p in sorted(val.glob("*.jpg"))[:n]]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=5, help="BSDS500 val images (default 5)")
    ap.add_argument("--moves", type=int, default=40, help="slider moves per image (default 40)")
    ap.add_argument("--out", type=Path, default=None, help="also write the table to this markdown file")
    args = ap.parse_args(argv)
    from hiseg.segmentation.segmenter import Segmenter
    from hiseg.explorer.page import build_page

    seg = Segmenter.from_pretrained("bsds500")
    d = chromium()
    rows = []
    tmp = Path(tempfile.mkdtemp())
    try:
        for name, img in images(args.n):
            res = seg.segment(img)
            page = tmp / f"{name}.html"
            page.write_text(build_page(img, res.ucm2, title=name, source="bsds500"))
            open_page(d, page)
            n_levels = len(d.execute_script("return hisegView.levels()"))
            ms = [move(d, k) for k in np.linspace(0, n_levels - 1, args.moves).astype(int)]
            floor = float(d.execute_script(FLOOR_JS, img.shape[1], img.shape[0]))
            rows.append((name, f"{img.shape[1]}x{img.shape[0]}", n_levels, page.stat().st_size / 2 ** 20,
                         float(np.median(ms)), max(ms), floor))
    finally:
        d.quit()
        shutil.rmtree(tmp, ignore_errors=True)
    version = "headless chromium" if shutil.which("chromium") is None else \
        "headless " + __import__("subprocess").run(["chromium", "--version"], capture_output=True,
                                                   text=True).stdout.strip()
    lines = [f"{version}; {args.moves} slider moves per image; floor = two blank canvas writes of the image's size",
             "", "| image | size | levels | page MB | ms per move (median) | max | floor ms | median / floor |",
             "|---|---|---:|---:|---:|---:|---:|---:|"]
    for name, size, lv, mb, med, mx, fl in rows:
        lines.append(f"| {name} | {size} | {lv} | {mb:.2f} | {med:.1f} | {mx:.1f} | {fl:.2f} | {med / max(fl, 1e-3):.0f}x |")
    lines += ["", "Targets: < 50 ms per move and < 2 MB per page (481x321)."]
    text = stamped("\n".join(lines))
    print(text)
    if args.out:
        args.out.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
