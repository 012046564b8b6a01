"""hiseg view: self-contained explorer pages; their cuts in a real headless browser.

The browser tests need Debian's ``chromium`` and ``chromium-driver`` packages and the
``selenium`` package (the ``dev`` extra); they skip cleanly without them.
"""
import base64
import json
import re
import shutil
import statistics
from pathlib import Path

import cv2
import numpy as np
import pytest
from scipy.io import savemat

from hiseg.cli import main as cli_main
from hiseg.segmentation.outputs import write_outputs
from hiseg.segmentation.segmenter import Segmenter
from hiseg.metrics.region import ucm_to_labels
from hiseg.explorer.page import build_page, check_ucm2

VAL = Path(__file__).resolve().parents[2].parent / "shared" / "data" / "BSDS500" / "data" / "images" / "val"
GPB = VAL.parents[2] / "ucm2" / "val"


def blocks_image(h=60, w=80, seed=0):
    """Coloured rectangles with a little noise: a hierarchy of a few clear regions."""
    rng = np.random.default_rng(seed)
    img = np.full((h, w, 3), 0.5, np.float32)
    img[: h // 2, : w // 3] = [0.9, 0.1, 0.1]
    img[h // 2:, w // 3: 2 * w // 3] = [0.1, 0.2, 0.9]
    img[h // 4: 3 * h // 4, 2 * w // 3:] = [0.1, 0.8, 0.2]
    img[h // 4: h // 2, 2 * w // 3 + 4: w - 4] = [0.1, 0.5, 0.15]
    return np.clip(img + rng.normal(0, 0.03, img.shape), 0, 1).astype(np.float32)


def photograph():
    """A 481x321 photograph: a BSDS500 val image where the shared data is, else a synthetic
    one of that size (textured: it compresses no better than a photograph)."""
    if VAL.is_dir():
        from hiseg.io import read_image

        return "101085", read_image(VAL / "101085.jpg")
    rng = np.random.default_rng(1)
    img = cv2.resize(rng.random((12, 8, 3)).astype(np.float32), (321, 481), interpolation=cv2.INTER_CUBIC)
    return "synthetic", np.clip(img + rng.normal(0, 0.05, img.shape), 0, 1).astype(np.float32)


@pytest.fixture(scope="module")
def learned():
    name, img = photograph()
    return name, img, Segmenter.from_pretrained("bsds500").segment(img)


@pytest.fixture(scope="module")
def classical():
    img = blocks_image()
    return "blocks", img, Segmenter.classical(region_size=6.0, fit_iterations=20).segment(img)


def page_data(text):
    """The JSON data block of a page."""
    m = re.search(r'<script type="application/json" id="hiseg-data">(.*?)</script>', text, re.S)
    return json.loads(m.group(1).replace("<\\/", "</"))


def decode_png(b64):
    return cv2.imdecode(np.frombuffer(base64.b64decode(b64), np.uint8), cv2.IMREAD_UNCHANGED)


# ----------------------------------------------------------------------------- without a browser
def test_page_is_self_contained_small_and_carries_the_ucm_exactly(learned):
    name, img, res = learned
    text = build_page(img, res.ucm2, title=name, source="test")
    assert img.shape[:2] == (481, 321)
    assert len(text.encode("utf-8")) < 2 * 2 ** 20  # under 2 MB for a 481x321 image
    # no external resource of any kind, and a policy forbidding every request
    assert not re.search(r"""(src|href|action)\s*=\s*["']?\s*(https?:|//)""", text, re.I)
    assert not re.search(r"url\(|@import|<link\b|fetch\(|XMLHttpRequest|<iframe", text, re.I)
    assert "default-src 'none'" in text
    d = page_data(text)
    assert (d["width"], d["height"]) == (321, 481) and d["title"] == name
    # the UCM travels as a PNG of ranks (24 bits) plus the exact float64 levels
    rgb = decode_png(d["ucm"])[..., ::-1].astype(np.int64)
    ranks = (rgb[..., 0] << 16) | (rgb[..., 1] << 8) | rgb[..., 2]
    levels = np.frombuffer(base64.b64decode(d["levels"]), "<f8")
    np.testing.assert_array_equal(levels[ranks], res.ucm2)
    assert d["rankSum"] == ranks.sum()
    np.testing.assert_array_equal(decode_png(d["image"])[..., ::-1], (img * 255 + 0.5).astype(np.uint8))


def test_title_cannot_break_out_of_the_page(classical):
    _, img, res = classical
    text = build_page(img, res.ucm2, title="</script><b>x", source="</script>")
    assert text.lower().count("</script") == 2  # the page's own two script elements
    assert "<h1>&lt;/script&gt;&lt;b&gt;x</h1>" in text
    assert page_data(text)["source"] == "</script>"


def test_check_ucm2_names_the_problem(classical):
    _, img, res = classical
    u = res.ucm2
    with pytest.raises(ValueError, match=r"\(2H\+1\) x \(2W\+1\)"):
        check_ucm2(u[:-1])
    with pytest.raises(ValueError, match="another image"):
        check_ucm2(u, (img.shape[1], img.shape[0]))
    bad = u.copy()
    bad[5, 5] = np.nan
    with pytest.raises(ValueError, match="NaN"):
        check_ucm2(bad)
    bad = u.copy()
    bad[1, 1] = 0.5  # a pixel position
    with pytest.raises(ValueError, match=r"pixel positions"):
        check_ucm2(bad)
    bad = u.copy()
    r, c = np.argwhere(u[2:-1:2, 2:-1:2] > 0)[0] * 2 + 2
    bad[r, c] = 0  # a corner below its edges would join regions diagonally in the benchmark
    with pytest.raises(ValueError, match="corners"):
        check_ucm2(bad)
    assert check_ucm2(u, img.shape) is not None


def save_png(path, img):
    cv2.imwrite(str(path), (img[..., ::-1] * 255 + 0.5).astype(np.uint8))


@pytest.fixture
def predicted(tmp_path, classical):
    """Two images and their `hiseg predict` folder (classical path)."""
    _, img, res = classical
    src = tmp_path / "images"
    src.mkdir()
    save_png(src / "a.png", img)
    save_png(src / "b.png", img[::-1].copy())
    pred = tmp_path / "pred"
    seg = Segmenter.classical(region_size=6.0, fit_iterations=20)
    for f in sorted(src.iterdir()):
        write_outputs(pred, f.stem, seg.segment(str(f)), img)
    return src, pred


def test_view_a_prediction_folder_writes_pages_and_index(tmp_path, predicted):
    src, pred = predicted
    out = tmp_path / "pages"
    assert cli_main(["view", str(src), "--ucm", str(pred), "--out", str(out), "--quiet"]) == 0
    assert sorted(p.name for p in out.iterdir()) == ["a.html", "b.html", "index.html"]
    index = (out / "index.html").read_text()
    assert re.findall(r'href="([^"]+)"', index) == ["a.html", "b.html"]
    assert len(re.findall(r'src="data:image/jpeg;base64,', index)) == 2
    from scipy.io import loadmat

    d = page_data((out / "b.html").read_text())
    levels = np.frombuffer(base64.b64decode(d["levels"]), "<f8")
    np.testing.assert_array_equal(levels, np.unique(loadmat(pred / "b.mat")["ucm2"]))


def test_predict_html(tmp_path, capsys, classical):
    _, img, _ = classical
    src = tmp_path / "images"
    src.mkdir()
    save_png(src / "x.png", img)
    save_png(src / "y.png", img[:, ::-1].copy())
    out = tmp_path / "out"
    assert cli_main(["predict", "--classical", str(src), "--out", str(out), "--html", "--quiet"]) == 0
    assert {"x.html", "y.html", "index.html", "x.mat"} <= {p.name for p in out.iterdir()}
    assert page_data((out / "x.html").read_text())["source"] == "classical path (no network)"
    assert capsys.readouterr().out.splitlines()[-1] == f"wrote 2 image(s) to {out}; open {out / 'index.html'}"


def page_ucm2(d):
    """The ucm2 a page carries: its levels at the ranks of its PNG."""
    rgb = decode_png(d["ucm"])[..., ::-1].astype(np.int64)
    return np.frombuffer(base64.b64decode(d["levels"]), "<f8")[(rgb[..., 0] << 16) | (rgb[..., 1] << 8) | rgb[..., 2]]


def test_a_large_images_page_shows_the_hierarchy_at_its_working_resolution(tmp_path, capsys):
    """An image above max_pixels: predict --html and view draw its page at the working
    resolution (not the full-size ucm2); its cut at every level is the hierarchy's cut there."""
    from hiseg.io import read_image

    img = blocks_image(150, 200, seed=3)  # 30,000 pixels, worked at 4,096
    src = tmp_path / "big.png"
    save_png(src, img)
    seg = Segmenter.classical()  # hiseg predict --classical's
    seg.pipeline = seg.pipeline.with_overrides(max_pixels=4096)
    work, full, read = seg.read(src)
    res = seg.finish(work, seg.network_map(work), full)
    h, w = res.rag.labels.shape
    assert full == (150, 200) and h * w <= 4096 and (h, w) == work.shape[:2]
    argv = ["--classical", "--max-pixels", "4096", "-q", str(src)]
    assert cli_main(["predict", *argv, "--html", "-o", str(tmp_path / "p")]) == 0
    assert cli_main(["view", *argv, "-o", str(tmp_path / "v")]) == 0
    text = (tmp_path / "p" / "big.html").read_text()
    assert (tmp_path / "v" / "big.html").read_text() == text  # the same page either way
    d = page_data(text)
    assert (d["width"], d["height"], d["fullWidth"], d["fullHeight"]) == (w, h, 200, 150)
    assert d["source"] == "classical path (no network); the image reduced from 200x150 to the hierarchy's working resolution"
    np.testing.assert_array_equal(decode_png(d["image"])[..., ::-1], (work * 255 + 0.5).astype(np.uint8))
    u = page_ucm2(d)
    assert u.shape == (2 * h + 1, 2 * w + 1)
    levels = np.unique(u)
    np.testing.assert_array_equal(levels, np.unique(np.concatenate([[0.0], res.ultrametric])))
    for t in levels:  # the page's regions (the benchmark's reading of its ucm2) = the hierarchy's cut
        cut = res.working_cut(threshold=t)
        assert cut.shape == (h, w) and same_partition(ucm_to_labels(u, t), cut), t
    # in process: the page of the result never builds the full-size ucm2
    assert build_page(read_image(src), res, title="big", source="classical path (no network)") == text
    assert res._ucm2 is None
    with pytest.raises(ValueError, match="belongs to another image"):
        build_page(img[:100], res)


@pytest.mark.slow
def test_a_small_images_page_is_the_page_of_its_full_ucm2(tmp_path, classical):
    """At or below max_pixels nothing changes: predict --html's and view's pages are
    build_page of the image and its full ucm2, byte for byte."""
    from hiseg.io import read_image

    name, img = photograph()
    src = tmp_path / f"{name}.jpg"
    if VAL.is_dir():
        shutil.copy(VAL / f"{name}.jpg", src)
    else:
        save_png(src, img)
    seg = Segmenter.classical()
    ucm2 = seg.segment(read_image(src)).ucm2
    assert cli_main(["predict", "--classical", "-q", "--html", "--regions", "5", str(src), "-o", str(tmp_path / "p")]) == 0
    assert cli_main(["view", "--classical", "-q", str(src), "-o", str(tmp_path / "v")]) == 0
    kw = dict(title=name, source="classical path (no network)")
    assert (tmp_path / "p" / f"{name}.html").read_text() == build_page(read_image(src), ucm2, n_regions=5, **kw)
    assert (tmp_path / "v" / f"{name}.html").read_text() == build_page(read_image(src), ucm2, **kw)
    assert "fullWidth" not in page_data((tmp_path / "v" / f"{name}.html").read_text())


def test_a_resumed_index_reads_each_entry_from_its_page(tmp_path, classical):
    """page_entry (a resumed predict --html's index): the entry the page's writing returned,
    for a page at full and at reduced resolution, without the image or its ucm2 file."""
    from hiseg.explorer.page import page_entry, write_page_file

    _, img, res = classical
    entry = write_page_file(tmp_path, "small", img, res.ucm2, "src")
    assert page_entry(tmp_path, "small") == entry
    seg = Segmenter.classical(region_size=6.0, fit_iterations=20)
    seg.pipeline = seg.pipeline.with_overrides(max_pixels=4096)
    big = cv2.resize(img, (160, 120), interpolation=cv2.INTER_NEAREST)
    reduced = seg.segment(big)
    assert reduced.upsampled
    entry = write_page_file(tmp_path, "big", big, reduced, "src")
    assert page_entry(tmp_path, "big") == entry and reduced._ucm2 is None
    (tmp_path / "bad.html").write_text("<html>not a page</html>")
    with pytest.raises(ValueError, match="bad.html is not a hiseg explorer page"):
        page_entry(tmp_path, "bad")


def refused(capsys, argv, *fragments):
    assert cli_main(argv) == 2
    err = capsys.readouterr().err
    for f in fragments:
        assert f in err, err
    return err


def test_bad_input_is_refused_or_reported_per_image(tmp_path, predicted, capsys):
    src, pred = predicted
    out = tmp_path / "new" / "pages"
    # a prediction folder without UCMs
    empty = tmp_path / "no_ucms"
    empty.mkdir()
    (empty / "a_ucm.png").write_bytes(b"")
    refused(capsys, ["view", str(src), "--ucm", str(empty), "--out", str(out)],
            "no ucm2 file for 2 of 2 image(s): a.mat, b.mat", "0 .mat files there")
    # b's UCM belongs to another image: b fails, named, a's page is written, exit status 1
    savemat(pred / "b.mat", {"ucm2": np.zeros((21, 31))})
    assert cli_main(["view", str(src), "--ucm", str(pred), "--out", str(out), "--quiet"]) == 1
    err = capsys.readouterr().err
    assert "1 of 2 image(s) failed" in err and "b.mat" in err and "10x15 (HxW) image, but the image is 60x80" in err
    assert sorted(p.name for p in out.iterdir()) == ["a.html"]
    # only b: nothing written, no folder left
    assert cli_main(["view", str(src / "b.png"), "--ucm", str(pred), "--out", str(tmp_path / "new2" / "p")]) == 1
    assert "nothing was written" in capsys.readouterr().err and not (tmp_path / "new2").exists()
    refused(capsys, ["view", str(src), "--ucm", str(pred), "--checkpoint", "bsds500", "--out", str(tmp_path / "n3")],
            "not both")
    assert not (tmp_path / "n3").exists()


def test_an_output_never_overwrites_an_input(tmp_path, classical, capsys):
    _, img, _ = classical
    src = tmp_path / "images"
    src.mkdir()
    save_png(src / "a.png", img)
    shutil.copy(src / "a.png", src / "b.html")  # an image file named like a page (OpenCV reads it)
    before = (src / "b.html").read_bytes()
    refused(capsys, ["view", "--classical", str(src / "a.png"), str(src / "b.html"), "--out", str(src)],
            "would overwrite input files", "b.html")
    assert (src / "b.html").read_bytes() == before and not (src / "a.html").exists()
    save_png(src / "index.png", img)  # its page would be the index page
    refused(capsys, ["view", "--classical", str(src / "a.png"), str(src / "index.png"), "--out", str(tmp_path / "o")],
            "'index'", "index.html")
    assert not (tmp_path / "o").exists()


# ----------------------------------------------------------------------------- in a browser
@pytest.fixture(scope="module")
def browser():
    webdriver = pytest.importorskip("selenium.webdriver", reason="selenium is not installed (pip install selenium)")
    from selenium.webdriver.chrome.service import Service

    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    driver = shutil.which("chromedriver")
    if not chromium or not driver:
        pytest.skip("no headless browser: install Debian's chromium and chromium-driver packages")
    opts = webdriver.ChromeOptions()
    opts.binary_location = chromium
    for a in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
              "--window-size=1100,760", "--hide-scrollbars"):
        opts.add_argument(a)
    d = webdriver.Chrome(service=Service(driver), options=opts)  # never downloads a driver
    yield d
    d.quit()


def open_page(d, path=None):
    """Load ``path`` (or stay on the current page) and wait until the page is ready."""
    import time

    if path is not None:
        d.get(path.resolve().as_uri())
    t0 = time.time()
    while time.time() - t0 < 30:
        state = d.execute_script("return window.hisegView ? [hisegView.ready, hisegView.error] : null")
        if state and (state[0] or state[1]):
            assert state[1] is None, state[1]
            return
        time.sleep(0.05)
    raise AssertionError("the page did not get ready in 30 s")


def show(d, page, img, ucm2, **kw):
    """Write the page of ``img`` and ``ucm2`` to ``page`` and open it in the browser."""
    page.write_text(build_page(img, ucm2, **kw))
    open_page(d, page)
    return np.unique(ucm2)


def move_slider(d, value):
    """What dragging the slider does: a new value, then an 'input' event."""
    d.execute_script("var s = document.getElementById('slider'); s.value = arguments[0];"
                     "s.dispatchEvent(new Event('input', {bubbles: true}));", value)
    return int(d.find_element("id", "regions").text), d.execute_script("return hisegView.level()")


def same_partition(a, b):
    """Two label images make the same regions (whatever the numbers)."""
    a, b = np.asarray(a).ravel(), np.asarray(b).ravel()
    pairs = np.unique(np.stack([a, b]), axis=1)
    return pairs.shape[1] == np.unique(a).size == np.unique(b).size


def nearly_same_partition(a, b, tol: float = 0.01) -> bool:
    """Two label images with as many regions, which agree but for at most ``tol`` of the pixels
    (each region of ``a`` matched to the region of ``b`` it overlaps most): the page's size-aware
    cut against Python's, where a small group that merged above a split joins the side of the
    pixel edge it merged by, which the UCM alone does not tell (the hierarchy's building edge
    does); a few pixels."""
    a, b = np.asarray(a).ravel(), np.asarray(b).ravel()
    if np.unique(a).size != np.unique(b).size:
        return False
    pairs, counts = np.unique(np.stack([a, b]), axis=1, return_counts=True)
    best = np.zeros(a.max() + 1, np.int64)
    np.maximum.at(best, pairs[0], counts)
    return best.sum() >= (1 - tol) * a.size


def check_three_levels(d, tmp_path, name, levels, truth):
    """Move the slider to three levels (many, some, few regions): the regions drawn are
    those of ``truth(threshold)`` (Python). Returns the ms per move the page measured."""
    sub = levels[:: max(1, len(levels) // 64)]
    counts = np.array([truth(t).max() + 1 for t in sub])
    picks = [int(np.searchsorted(levels, sub[np.argmin(np.abs(counts - c))])) for c in
             (min(counts.max(), 200), min(counts.max(), 25), 3)]
    assert len(set(picks)) == 3, picks
    ms = []
    for k in picks:
        n, level = move_slider(d, k)
        ms.append(d.execute_script("return hisegView.lastMs"))
        lab = truth(levels[k])  # the page reads the lowest level of this partition (issue 53): the same regions
        assert level <= levels[k] and same_partition(truth(level), lab), (level, levels[k])
        assert n == lab.max() + 1, (k, level, n, lab.max() + 1)
        assert same_partition(d.execute_script("return hisegView.labels()"), lab.reshape(-1))
        d.save_screenshot(str(tmp_path / f"{name}_level{k}.png"))
    for v in np.linspace(0, len(levels) - 1, 12).astype(int):  # more moves, for the timing
        move_slider(d, int(v))
        ms.append(d.execute_script("return hisegView.lastMs"))
    return ms


@pytest.mark.slow
def test_browser_cuts_match_python_learned_path(browser, learned, tmp_path):
    d = browser
    name, img, res = learned
    page = tmp_path / f"{name}.html"
    levels = show(d, page, img, res.ucm2, title=name, source="bsds500")
    assert d.execute_script("return hisegView.levels()") == levels.tolist()
    ms = check_three_levels(d, tmp_path, name, levels, lambda t: res.cut(threshold=t))
    # speed is measured by benchmarks/bench_view.py, not asserted here
    print(f"\nms per slider move ({img.shape[1]}x{img.shape[0]}): median {statistics.median(ms):.1f}, "
          f"max {max(ms):.1f}; page {page.stat().st_size / 1024:.0f} KiB; screenshots in {tmp_path}")
    # the real keyboard on the slider: End is the top level (one region), Home the finest
    from selenium.webdriver.common.keys import Keys

    slider = d.find_element("id", "slider")
    for key, k in ((Keys.END, -1), (Keys.HOME, 0)):
        slider.send_keys(key)
        assert int(d.find_element("id", "regions").text) == res.cut(threshold=levels[k]).max() + 1
    # no request left the page
    assert d.execute_script("return performance.getEntriesByType('resource').length") == 0


def test_browser_a_reduced_page_cuts_as_the_hierarchy_at_its_working_resolution(browser, tmp_path):
    """The page of an image above max_pixels: the browser's regions at a level are the
    hierarchy's cut there (working_cut), and the page says it shows the image reduced."""
    d = browser
    name, img = photograph()
    seg = Segmenter.classical(region_size=4.0, fit_iterations=20)
    seg.pipeline = seg.pipeline.with_overrides(max_pixels=8192)
    res = seg.segment(img)
    h, w = res.rag.labels.shape
    assert res.upsampled and h * w <= 8192
    page = tmp_path / "reduced.html"
    page.write_text(build_page(img, res, title=name, source="classical"))
    open_page(d, page)
    assert d.find_element("id", "source").text == (f"(classical; the image reduced from 321x481 to the hierarchy's "
                                                   f"working resolution, {w}x{h})")
    levels = np.unique(np.concatenate([[0.0], res.ultrametric]))
    assert d.execute_script("return hisegView.levels()") == levels.tolist()
    check_three_levels(d, tmp_path, "reduced", levels, lambda t: res.working_cut(threshold=t))
    assert res._ucm2 is None


def test_browser_click_shows_area_and_merge_level(browser, learned, tmp_path):
    from selenium.webdriver.common.actions.action_builder import ActionBuilder

    d = browser
    name, img, res = learned
    levels = show(d, tmp_path / "click.html", img, res.ucm2, title=name)
    k = len(levels) // 2
    move_slider(d, k)
    canvas = d.find_element("id", "cut")
    left, top, width, height = d.execute_script(
        "arguments[0].scrollIntoView(); var r = arguments[0].getBoundingClientRect();"
        "return [r.left, r.top, r.width, r.height];", canvas)
    h, w = img.shape[:2]
    row, col = h // 2, w // 3
    mouse = ActionBuilder(d)  # a real click at that pixel (viewport coordinates)
    mouse.pointer_action.move_to_location(int(left + (col + 0.5) * width / w), int(top + (row + 0.5) * height / h))
    mouse.pointer_action.click()
    mouse.perform()
    info = d.execute_script("return hisegView.info")
    assert abs(info["row"] - row) <= 1 and abs(info["col"] - col) <= 1
    r, c = info["row"], info["col"]
    lab = res.cut(threshold=levels[k])
    area = int((lab == lab[r, c]).sum())
    assert info["area"] == area
    # the merge level: the lowest level above the current one where the region grows
    lo, hi = k + 1, len(levels) - 1
    while lo < hi:
        mid = (lo + hi) // 2
        cut = res.cut(threshold=levels[mid])
        lo, hi = (mid + 1, hi) if (cut == cut[r, c]).sum() == area else (lo, mid)
    assert info["merge"] == levels[lo]
    text = d.find_element("id", "info").text
    assert f"region of {area} pixels" in text and "merges into its parent at level" in text
    d.save_screenshot(str(tmp_path / "click.png"))


def test_browser_classical_path_and_region_count_mode(browser, classical, tmp_path):
    d = browser
    name, img, res = classical
    levels = show(d, tmp_path / "classical.html", img, res.ucm2, title=name)
    check_three_levels(d, tmp_path, name, levels, lambda t: res.cut(threshold=t))
    # the slider over region counts: n regions, hiseg predict --regions n's size-aware cut (issue 42)
    d.execute_script("var m = document.getElementById('mode'); m.value = 'regions';"
                     "m.dispatchEvent(new Event('change'));")
    for n in (2, 5, 12):
        assert move_slider(d, n)[0] == n
        assert nearly_same_partition(d.execute_script("return hisegView.labels()"), res.cut(n_regions=n).reshape(-1))


@pytest.mark.skipif(not GPB.is_dir(), reason="BSDS500 gPb-owt-ucm ucm2 files (shared data) not found")
@pytest.mark.slow
def test_browser_reads_a_bsds_ucm2_as_the_benchmark_does(browser, tmp_path):
    """gPb-owt-ucm's own ucm2, through `hiseg view --ucm`: the regions drawn are the
    benchmark's 8-connected components of ucm2 <= t."""
    from scipy.io import loadmat

    d = browser
    assert cli_main(["view", str(VAL / "101087.jpg"), "--ucm", str(GPB), "--out", str(tmp_path)]) == 0
    open_page(d, tmp_path / "101087.html")
    ucm2 = loadmat(GPB / "101087.mat")["ucm2"].astype(np.float64)
    check_three_levels(d, tmp_path, "gpb", np.unique(ucm2), lambda t: ucm_to_labels(ucm2, t) - 1)


def test_browser_index_page_leads_to_the_pages(browser, predicted, tmp_path):
    from scipy.io import loadmat

    d = browser
    src, pred = predicted
    out = tmp_path / "pages"
    assert cli_main(["view", str(src), "--ucm", str(pred), "--out", str(out), "--quiet"]) == 0
    d.get((out / "index.html").as_uri())
    cards = d.find_elements("css selector", "a.card")
    assert [c.text for c in cards] == [f"{s} ({np.unique(loadmat(pred / f'{s}.mat')['ucm2']).size} levels)"
                                       for s in "ab"]
    assert all(int(i.get_attribute("naturalWidth")) > 0 for i in d.find_elements("css selector", "a.card img"))
    cards[1].click()
    assert d.current_url == (out / "b.html").as_uri()
    open_page(d)
    ucm2 = loadmat(pred / "b.mat")["ucm2"]
    assert d.execute_script("return hisegView.regionCount()") == ucm_to_labels(
        ucm2, d.execute_script("return hisegView.level()")).max()


def test_browser_page_opens_at_the_requested_cut(browser, classical, tmp_path):
    """build_page(n_regions=K): the finest level with at most K regions; threshold=T: level T."""
    d = browser
    name, img, res = classical
    levels = np.unique(res.ucm2)
    counts = np.array([res.cut(threshold=t).max() + 1 for t in levels])  # non-increasing in the level
    for k in (3, 8):
        show(d, tmp_path / f"r{k}.html", img, res.ucm2, title=name, n_regions=k)
        want = levels[int(np.argmax(counts <= k))]
        assert d.execute_script("return hisegView.level()") == want
        assert int(d.find_element("id", "regions").text) == res.cut(threshold=want).max() + 1 <= k
    t = float(levels[len(levels) // 2])
    show(d, tmp_path / "t.html", img, res.ucm2, title=name, threshold=t)
    shown = d.execute_script("return hisegView.level()")  # the lowest level of the cut at t (issue 53)
    assert shown <= t and same_partition(res.cut(threshold=shown), res.cut(threshold=t))


def panel_rects(d, width, height):
    """The viewport's (width, height), the page's scroll size and the two canvases' rects
    (left, top, right, bottom) of the page open in ``d`` shown in a ``width`` x ``height`` window."""
    d.execute_cdp_cmd("Emulation.setDeviceMetricsOverride", {"width": width, "height": height,
                                                             "deviceScaleFactor": 1, "mobile": False})
    try:
        open_page(d, Path(d.current_url.removeprefix("file://")))
        return d.execute_script(
            "var r = function (id) { var b = document.getElementById(id).getBoundingClientRect();"
            "  return [b.left, b.top, b.right, b.bottom]; };"
            "var e = document.documentElement;"
            "return {view: [innerWidth, innerHeight], scroll: [e.scrollWidth, e.scrollHeight], cut: r('cut'), ucm: r('ucm')};")
    finally:
        d.execute_cdp_cmd("Emulation.clearDeviceMetricsOverride", {})


@pytest.mark.slow
def test_browser_panels_fit_the_window(browser, tmp_path):
    """Issue 42: a page of ``hiseg view`` for a 600x400 image (and a 400x600 one) shows both
    panels, the cut and the saliency map, whole in a 1200x800 window, side by side (the saliency
    map is not pushed below the fold); in a 700-px window still side by side, shrunk; in a
    480-px one, one above the other; never wider than the window."""
    d = browser
    rng = np.random.default_rng(3)
    src = tmp_path / "images"
    src.mkdir()
    for name, (h, w) in (("landscape", (400, 600)), ("portrait", (600, 400))):
        img = cv2.resize(rng.random((8, 12, 3)).astype(np.float32), (w, h), interpolation=cv2.INTER_CUBIC)
        save_png(src / f"{name}.png", np.clip(img, 0, 1))
    assert cli_main(["view", "--classical", "-q", str(src), "-o", str(tmp_path / "pages")]) == 0
    for name in ("landscape", "portrait"):
        open_page(d, tmp_path / "pages" / f"{name}.html")
        for width, height, side_by_side in ((1200, 800, True), (700, 800, True), (480, 800, False)):
            r = panel_rects(d, width, height)
            what = (name, width, height, r)
            assert r["view"] == [width, height] and r["scroll"][0] <= width, what  # no horizontal scrolling
            for left, top, right, bottom in (r["cut"], r["ucm"]):
                assert 0 <= left < right <= width and 0 <= top < bottom, what
                assert right - left >= min(400 if name == "portrait" else 600, width / 2 - 40), what  # not shrunk more
            cut, ucm = r["cut"], r["ucm"]
            if side_by_side:  # and both whole in the window, without scrolling
                assert ucm[0] >= cut[2] and ucm[1] == cut[1] and max(cut[3], ucm[3]) <= height, what
            else:
                assert ucm[1] >= cut[3] and ucm[0] == cut[0], what  # stacked


def test_view_opens_at_regions_or_level_as_predict_html(tmp_path, capsys):
    """``hiseg view --regions K`` / ``--level T`` (issue 42): the pages open at that cut, as
    ``hiseg predict --html --regions K`` does (default 12 regions); both at once are refused; the
    closing line names the page to open."""
    img = np.zeros((24, 32, 3), np.float32)
    img[:, 16:] = 1.0
    img[12:, :, 1] = 0.5
    src = tmp_path / "im.png"
    save_png(src, img)
    for opts, start in (([], {"regions": 12}), (["--regions", "3"], {"regions": 3}), (["--level", "0.25"], {"level": 0.25})):
        out = tmp_path / ("v" + "".join(opts))
        assert cli_main(["view", "--classical", "-q", str(src), "-o", str(out), *opts]) == 0
        assert page_data((out / "im.html").read_text())["start"] == start
        assert capsys.readouterr().out.splitlines()[-1] == f"wrote 1 page(s) to {out}; open {out / 'im.html'}"
    assert cli_main(["predict", "--classical", "-q", "--html", "--regions", "3", str(src), "-o", str(tmp_path / "p")]) == 0
    assert page_data((tmp_path / "p" / "im.html").read_text())["start"] == {"regions": 3}
    assert capsys.readouterr().out.splitlines()[-1] == f"wrote 1 image(s) to {tmp_path / 'p'}; open {tmp_path / 'p' / 'im.html'}"
    assert cli_main(["view", "--classical", str(src), "-o", str(tmp_path / "b"), "--regions", "3", "--level", "0.2"]) == 2
    assert "at most one of --regions and --level" in capsys.readouterr().err and not (tmp_path / "b").exists()


def run_page_in_node(tmp_path, img, hierarchy, calls: list) -> list:
    """The results of the page API ``calls`` (``[["setRegions", 5], ["labels"], ...]``) on the
    page of ``img`` and ``hierarchy``, its script run in node (``tests/_page_node.js``) on the
    page's own data, its PNGs decoded here."""
    import subprocess

    page = tmp_path / "p.html"
    page.write_text(build_page(img, hierarchy), encoding="utf-8")
    d = page_data(page.read_text(encoding="utf-8"))

    def rgba(b64):
        rgb = decode_png(b64)[..., ::-1]
        return np.concatenate([rgb, np.full(rgb.shape[:2] + (1,), 255, np.uint8)], axis=-1).ravel().tolist()
    (tmp_path / "pixels.json").write_text(json.dumps({"image": rgba(d["image"]), "ucm": rgba(d["ucm"])}))
    (tmp_path / "calls.json").write_text(json.dumps(calls))
    node_script = Path(__file__).resolve().parents[1] / "_page_node.js"
    r = subprocess.run(["node", str(node_script), str(page), str(tmp_path / "pixels.json"),
                        str(tmp_path / "calls.json")], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    return json.loads(r.stdout)


def specks_image():
    """Two colours in four blocks, noise, and six 2x2 specks of strong edges (the plain cut
    splits them off first)."""
    rng = np.random.default_rng(7)
    img = np.zeros((60, 80, 3), np.float32)
    img[:, 40:] = (0.9, 0.2, 0.1)
    img[30:, :, 1] += 0.6
    for r, c in rng.integers(4, 56, (6, 2)):
        img[r:r + 2, c:c + 2] = rng.random(3)
    return np.clip(img + rng.normal(0, 0.02, img.shape), 0, 1).astype(np.float32)


@pytest.mark.skipif(shutil.which("node") is None, reason="node is not installed (runs the page's script)")
@pytest.mark.parametrize("which", ["specks", "blocks"])
def test_the_pages_region_count_cut_is_the_cli_cut(tmp_path, which):
    """Issue 42: the page cut into K regions ("region count") is hiseg predict --regions K's
    size-aware cut (no region a speck), not the plain cut, for every K: the same partition on an
    image with specks; on the blocks image (ties of levels) but for a small group's side, a few
    pixels (:func:`nearly_same_partition`); its level cut is unchanged."""
    img = specks_image() if which == "specks" else blocks_image()
    res = Segmenter.classical(region_size=6.0, fit_iterations=20).segment(img)
    ks = list(range(1, 13))
    out = run_page_in_node(tmp_path, img, res, [c for k in ks for c in (["setRegions", k], ["labels"])]
                           + [["setLevel", 0.3], ["labels"]])
    plain_specks = 0
    for i, k in enumerate(ks):
        count, labels = out[2 * i], np.asarray(out[2 * i + 1]).reshape(img.shape[:2])
        want = res.cut(n_regions=k)
        assert count == k and (same_partition if which == "specks" else nearly_same_partition)(labels, want), k
        plain = res.cut(n_regions=k, min_size=0)
        plain_specks += int(np.bincount(plain.ravel()).min() < 0.05 * img.shape[0] * img.shape[1] / k)
    assert plain_specks > 0  # the plain cut would have shown specks: the test tells the two apart
    assert same_partition(np.asarray(out[-1]).reshape(img.shape[:2]), res.cut(threshold=0.3))


@pytest.mark.skipif(shutil.which("node") is None, reason="node is not installed (runs the page's script)")
def test_one_partition_reads_one_level_in_both_modes(tmp_path):
    """Issue 53, item 8: a 12-region cut read "level 0.8279" by level and "level 0.9468" by region
    count: the region-count mode showed its highest kept merge, a small group's joined above the
    splits. Now a cut reads the lowest threshold that gives it, in both modes: the level mode at a
    region-count cut's level shows that cut, with the small groups it joined (``absorbedCount``)
    apart; each mode's level is the lowest: one level lower, the regions change."""
    img = specks_image()
    res = Segmenter.classical(region_size=6.0, fit_iterations=20).segment(img)
    levels = np.unique(res.ucm2)
    ks = list(range(2, 13))
    calls = [c for k in ks for c in (["setRegions", k], ["level"], ["absorbedCount"], ["labels"])]
    out = run_page_in_node(tmp_path, img, res, calls)
    joined = 0
    for i, k in enumerate(ks):
        level, absorbed, labels = out[4 * i + 1], out[4 * i + 2], np.asarray(out[4 * i + 3]).reshape(img.shape[:2])
        assert np.isin(level, levels), level
        at_level = res.cut(threshold=level)  # the level mode's cut at the level shown
        assert at_level.max() + 1 == k + absorbed, (k, level, absorbed)
        if absorbed == 0:
            assert same_partition(at_level, labels), k
        else:  # the size-aware cut is that cut with its small groups joined: coarser, never across
            pairs = np.unique(np.stack([at_level.ravel(), labels.ravel()]), axis=1)
            assert pairs.shape[1] == at_level.max() + 1, k
        joined += absorbed > 0
        lower = levels[np.searchsorted(levels, level) - 1] if level > levels[0] else None
        assert lower is None or res.cut(threshold=lower).max() > at_level.max(), k  # the lowest such level
    assert joined  # the image has cuts that join small groups: the case of the issue is tested
    picks = [float(levels[j]) for j in (1, len(levels) // 3, len(levels) // 2, -2)]
    out = run_page_in_node(tmp_path, img, res, [c for t in picks for c in (["setLevel", t], ["level"])])
    for j, t in enumerate(picks):
        shown = out[2 * j + 1]
        assert shown <= t and same_partition(res.cut(threshold=shown), res.cut(threshold=t)), (t, shown)
        below = levels[levels < shown]
        assert below.size == 0 or not same_partition(res.cut(threshold=below[-1]), res.cut(threshold=t))


def test_the_pages_default_fill_is_the_palette_and_its_saliency_map_dark_on_white(classical):
    """Issue 53, item 7: the mean colours washed the image out where the palette is clear; the
    saliency panel is drawn as NAME_ucm.png and the README's figure, dark boundaries on white."""
    name, img, res = classical
    text = build_page(img, res.ucm2, title=name)
    fill = re.search(r'<select id="fill">(.*?)</select>', text, re.S).group(1)
    options = re.findall(r'<option value="(\w+)"( selected)?>', fill)
    assert options[0] == ("palette", " selected") and not any(s for _, s in options[1:])
    assert "255 - Math.round(255 * Math.sqrt(" in text and "background: #fff" in text
