"""Interactive explorer pages: one self-contained HTML file per image's hierarchy.

>>> from hiseg.explorer.page import build_page
>>> html = build_page(image, result, title="photo")    # result: a SegmentationResult, or a ucm2

A page needs no server, no network and no other file (it opens by double-click; a
Content-Security-Policy forbids it any request). It carries the image and the UCM as
PNGs: the UCM on the doubled grid (BSDS ``ucm2``, (2H+1) x (2W+1)) as the rank of each
entry among the map's distinct levels (24-bit RGB), the levels themselves as float64. The
page computes every cut from it: once, Kruskal over the pixel edges in level order (the
merge tree); per slider move, one pass over that tree. The regions at level ``t`` are
the 4-connected components of pixels joined by ucm2 entries ``<= t``:
``SegmentationResult.cut(threshold=t)`` for hiseg's hierarchies, the benchmark's reading
(:func:`hiseg.metrics.region.ucm_to_labels`) for any ucm2 in the BSDS layout.

A page of a :class:`~hiseg.segmentation.result.SegmentationResult` whose image was larger than the
pipeline's ``max_pixels`` (processed at a reduced working resolution) shows the image and
the hierarchy at that working resolution: the image reduced as :meth:`Segmenter.read
<hiseg.segmentation.segmenter.Segmenter.read>` reduces it, the ucm2 the hierarchy's own there
(``SegmentationResult.working_ucm2``: its cut at a level is ``working_cut(threshold=level)``);
the page says so beside its title and carries the image's own size (``fullWidth``,
``fullHeight``). The full-size ucm2 is never built: a 12000x9000 photograph's would be 3.5 GB,
and a page of its full resolution hundreds of MB. Any other page is drawn at the image's
resolution.

``hiseg view`` (:mod:`hiseg.cli.view`) writes the pages of images (segmented on the spot, or read from a folder
of ucm2 ``.mat`` files with ``--ucm``), and an ``index.html`` of thumbnails for several;
``hiseg predict --html`` writes them next to its other outputs.
"""
from __future__ import annotations

import base64
import html
import json
import os
import shutil
import tempfile
from importlib import resources
from pathlib import Path
from typing import Sequence

import numpy as np

from ..core.cuts import AUTO_MIN_REGION_FRACTION
from ..io import atomic_write, display_path, naming_the_file, read_image, refuse_overwrite, set_usual_mode, to_float_rgb

__all__ = ["build_page", "build_index", "check_ucm2", "ucm2_ranks", "thumbnail", "page_outputs", "shown",
           "page_entry", "write_pages", "write_page_file", "write_index_file", "start_of", "INDEX"]

INDEX = "index.html"
_MAX_LEVELS = 1 << 24  # ranks travel in the 24 bits of an RGB pixel


def check_ucm2(ucm2: np.ndarray, image_shape=None, where: str = "ucm2") -> np.ndarray:
    """``ucm2`` as float64 after the checks the page relies on; ValueError naming the problem.

    The map must be (2H+1, 2W+1) (``image_shape`` (H, W) when given), finite, with
    zeros at the pixel positions ``[1::2, 1::2]`` and every grid corner ``[::2, ::2]`` at
    least as high as the pixel edges around it (hiseg's maps and gPb-owt-ucm's are): then
    the 8-connected components the benchmark reads are the pixels' 4-connected ones.
    """
    u = np.asarray(ucm2, dtype=np.float64)
    if u.ndim != 2 or u.shape[0] % 2 == 0 or u.shape[1] % 2 == 0 or min(u.shape) < 3:
        raise ValueError(f"{where}: a ucm2 must be (2H+1) x (2W+1), got shape {u.shape}")
    h, w = (u.shape[0] - 1) // 2, (u.shape[1] - 1) // 2
    if image_shape is not None and tuple(image_shape[:2]) != (h, w):
        raise ValueError(f"{where} of shape {u.shape} is the map of a {h}x{w} (HxW) image, but the image is "
                         f"{image_shape[0]}x{image_shape[1]}: the UCM belongs to another image")
    if not np.isfinite(u).all():
        raise ValueError(f"{where}: the ucm2 has NaN or infinite values")
    if np.any(u[1::2, 1::2] != 0):
        raise ValueError(f"{where}: not a ucm2 in the BSDS layout (pixel positions [1::2, 1::2] must be 0)")
    c = u[::2, ::2]
    low = np.zeros(c.shape, dtype=bool)
    for edges, axis in ((u[::2, 1::2], 1), (u[1::2, ::2], 0)):  # pixel edges beside / above-below corners
        before = [slice(None), slice(None)]
        after = [slice(None), slice(None)]
        before[axis], after[axis] = slice(None, -1), slice(1, None)
        low[tuple(before)] |= c[tuple(before)] < edges
        low[tuple(after)] |= c[tuple(after)] < edges
    if low.any():
        raise ValueError(f"{where}: not a ucm2 in the BSDS layout ({int(low.sum())} grid corners [::2, ::2] are "
                         "lower than a pixel edge beside them)")
    return u


def ucm2_ranks(ucm2: np.ndarray):
    """(levels, ranks): the sorted distinct values of ``ucm2`` and each entry's index in them."""
    levels, ranks = np.unique(ucm2, return_inverse=True)
    if levels.size > _MAX_LEVELS:
        raise ValueError(f"the ucm2 has {levels.size} distinct levels; a page holds at most {_MAX_LEVELS}")
    return levels, ranks.reshape(ucm2.shape).astype(np.uint32)


def _png(rgb: np.ndarray) -> bytes:
    import cv2

    ok, buf = cv2.imencode(".png", np.ascontiguousarray(rgb[..., ::-1]), [cv2.IMWRITE_PNG_COMPRESSION, 9])
    if not ok:
        raise OSError("could not encode a PNG")
    return buf.tobytes()


def _rgb8(image) -> np.ndarray:
    return (to_float_rgb(image) * 255 + 0.5).astype(np.uint8)


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def _script_json(obj) -> str:
    """JSON safe inside a <script> element: ``<``, ``>`` and ``&`` as ``\\u003c``-style escapes
    (valid JSON, and no ``</script>`` or ``<!--`` can appear in the element's text)."""
    text = json.dumps(obj, separators=(",", ":"))
    return text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")


def build_page(image, hierarchy, title: str = "", source: str = "", n_regions=None, threshold=None) -> str:
    """The explorer page (HTML text) of one image and its hierarchy (see the module docstring).

    ``image``: (H, W[, 3]) float in [0, 1] or integers; ``hierarchy``: its ucm2 (2H+1,
    2W+1), checked by :func:`check_ucm2`, or its :class:`~hiseg.segmentation.result.SegmentationResult`
    (a large image's page is then drawn at the working resolution: :func:`shown`).
    ``source`` (what made the hierarchy) is shown beside the title. The page opens at the
    level ``threshold``, or at the finest level with at most ``n_regions`` regions
    (default: 12).
    """
    return _build_page(*shown(image, hierarchy), title, source, start_of(n_regions, threshold))[0]


def shown(image, hierarchy) -> tuple:
    """(image, ucm2, full (H, W) or None): what the page of ``image`` and ``hierarchy`` (a
    ucm2, or a :class:`~hiseg.segmentation.result.SegmentationResult` of the image) draws.

    A ucm2, and the result of an image processed at its own resolution: the image and the
    ucm2 (``result.ucm2``), None. The result of an image reduced to a working resolution
    (``result.upsampled``): the image reduced to it (:func:`hiseg.io.reduce_image`, band by
    band for an integer image, as :meth:`Segmenter.read <hiseg.segmentation.segmenter.Segmenter.read>`
    reduces it), the hierarchy's ucm2 there (``result.working_ucm2()``) and the image's own
    (H, W); the full-size ucm2 is not built. ValueError when the image is not the result's size.
    """
    if not hasattr(hierarchy, "working_ucm2"):
        return image, hierarchy, None
    if tuple(np.shape(image)[:2]) != tuple(hierarchy.shape):
        raise ValueError(f"the image is {np.shape(image)[0]}x{np.shape(image)[1]} (HxW) but the hierarchy is of a "
                         f"{hierarchy.shape[0]}x{hierarchy.shape[1]} image: the hierarchy belongs to another image")
    if not hierarchy.upsampled:
        return image, hierarchy.ucm2, None
    from ..segmentation.segmenter import BAND_PIXELS
    from ..io import reduce_image

    return (reduce_image(np.asarray(image), hierarchy.rag.labels.shape, band=BAND_PIXELS),
            hierarchy.working_ucm2(), tuple(hierarchy.shape))


def start_of(n_regions=None, threshold=None) -> dict:
    """Where a page opens: ``{"level": threshold}`` or ``{"regions": n_regions}`` (default 12)."""
    if threshold is not None:
        return {"level": float(threshold)}
    return {"regions": int(n_regions) if n_regions is not None else 12}


def _build_page(image, ucm2: np.ndarray, full, title: str, source: str, start=None) -> tuple[str, int]:
    """(page text, number of distinct levels) of :func:`build_page`, from :func:`shown`'s
    (image, ucm2, full): a ``full`` (H, W) says the image is shown reduced from that size."""
    rgb = _rgb8(image)
    u = check_ucm2(ucm2, rgb.shape, where=f"ucm2 of {title or 'the image'}")
    levels, ranks = ucm2_ranks(u)
    packed = np.stack([(ranks >> 16) & 255, (ranks >> 8) & 255, ranks & 255], axis=-1).astype(np.uint8)
    if full is not None:  # the page shows "(SOURCE; the image reduced from WxH to ..., wxh)"
        source = (f"{source}; " if source else "") + (f"the image reduced from {full[1]}x{full[0]} to the "
                                                       "hierarchy's working resolution")
    data = {"title": title, "source": source, "width": rgb.shape[1], "height": rgb.shape[0],
            "image": _b64(_png(rgb)), "ucm": _b64(_png(packed)),
            "levels": _b64(levels.astype("<f8").tobytes()), "rankSum": int(ranks.sum(dtype=np.int64)),
            "start": start or start_of(), "minRegionFraction": AUTO_MIN_REGION_FRACTION}
    if full is not None:
        data.update(fullWidth=int(full[1]), fullHeight=int(full[0]))
    template = resources.files("hiseg.explorer").joinpath("view_page.html").read_text(encoding="utf-8")
    text = template.replace("__HISEG_TITLE__", html.escape(title)).replace("__HISEG_DATA__", _script_json(data))
    return text, levels.size


def thumbnail(image, ucm2: np.ndarray, size: int = 240) -> bytes:
    """JPEG of the image with its UCM drawn over it in white, at most ``size`` pixels a side."""
    import cv2

    from ..segmentation.saliency import saliency_from_ucm2

    rgb = _rgb8(image).astype(np.float32)
    sal = saliency_from_ucm2(np.asarray(ucm2)).astype(np.float32)  # not a float32 copy of all of ucm2
    a = (sal / max(float(sal.max()), 1e-12))[..., None]
    over = rgb * (1 - a) + 255 * a
    h, w = sal.shape
    s = min(1.0, size / max(h, w))
    small = cv2.resize(over, (max(1, round(w * s)), max(1, round(h * s))), interpolation=cv2.INTER_AREA)
    ok, buf = cv2.imencode(".jpg", np.clip(small + 0.5, 0, 255).astype(np.uint8)[..., ::-1],
                           [cv2.IMWRITE_JPEG_QUALITY, 85])
    if not ok:
        raise OSError("could not encode a JPEG thumbnail")
    return buf.tobytes()


def build_index(entries: Sequence[tuple], title: str = "hiseg hierarchies") -> str:
    """Index page: ``entries`` of (page file name, caption, thumbnail JPEG bytes)."""
    from urllib.parse import quote

    cards = "\n".join(
        f'<a class="card" href="{html.escape(quote(name, errors="surrogateescape"))}"><img alt="{html.escape(caption)}" '
        f'src="data:image/jpeg;base64,{_b64(thumb)}"><span>{html.escape(caption)}</span></a>'
        for name, caption, thumb in entries)
    return f"""<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta http-equiv="Content-Security-Policy" content="default-src 'none'; img-src data:; style-src 'unsafe-inline'">
<title>{html.escape(title)}</title>
<style>
  body {{ font: 14px/1.4 system-ui, sans-serif; margin: 12px 16px; background: #f4f4f2; color: #222; }}
  h1 {{ font-size: 18px; }}
  .grid {{ display: flex; flex-wrap: wrap; gap: 14px; }}
  .card {{ display: flex; flex-direction: column; color: inherit; text-decoration: none; }}
  .card img {{ border: 1px solid #bbb; }}
  .card:hover img {{ border-color: #333; }}
</style>
</head>
<body>
<h1>{html.escape(title)}: {len(entries)} images</h1>
<p>Thumbnails show each image with its saliency map (UCM); click one to explore its hierarchy.</p>
<div class="grid">
{cards}
</div>
</body>
</html>
"""


def page_outputs(out, stems: Sequence[str]) -> dict:
    """Paths of the pages of ``stems`` in ``out`` (and of the index, for several), by file name."""
    out = Path(out)
    names = [f"{s}.html" for s in stems]
    if len(stems) > 1:
        if INDEX in names:
            raise ValueError(f"an image named {Path(INDEX).stem!r} would have its page overwritten by the index "
                             f"page {INDEX}: rename that image or view it separately")
        names.append(INDEX)
    return {n: out / n for n in names}


def _page(stem: str, image, hierarchy, source: str, start=None):
    """(page text, index entry) of one image and its hierarchy (a ucm2 or a result:
    :func:`shown`); ``stem`` may hold any bytes a file name may (the page's title and caption
    show the ones that are not UTF-8 as ``\\xNN``). The thumbnail is drawn from what the page shows."""
    title = display_path(stem)
    image, ucm2, full = shown(image, hierarchy)
    text, levels = _build_page(image, ucm2, full, title, source, start)  # one np.unique of the ucm2, not two
    return text, _entry(stem, levels, image, ucm2)


def _entry(stem: str, levels: int, image, ucm2) -> tuple:
    return f"{stem}.html", f"{display_path(stem)} ({levels} levels)", thumbnail(image, ucm2)


_DATA_OPEN, _DATA_CLOSE = '<script type="application/json" id="hiseg-data">', "</script>"


def page_entry(out, stem: str) -> tuple:
    """The :func:`write_index_file` entry of image ``stem`` whose page ``out/STEM.html``
    exists already (a resumed ``hiseg predict --html``), read from the page itself: the entry
    its writing returned (the thumbnail of the image and ucm2 the page carries, at the page's
    resolution). ValueError naming the file when it is not an explorer page."""
    import cv2

    path = Path(out) / f"{stem}.html"
    with naming_the_file(path):
        text = path.read_text(encoding="utf-8", errors="replace")
    try:
        start = text.index(_DATA_OPEN) + len(_DATA_OPEN)
        data = json.loads(text[start:text.index(_DATA_CLOSE, start)])
        image, packed = (cv2.imdecode(np.frombuffer(base64.b64decode(data[k], validate=True), np.uint8),
                                      cv2.IMREAD_UNCHANGED)[..., ::-1] for k in ("image", "ucm"))
        levels = np.frombuffer(base64.b64decode(data["levels"], validate=True), "<f8")
        ranks = (packed[..., 0].astype(np.int64) << 16) | (packed[..., 1].astype(np.int64) << 8) | packed[..., 2]
        ucm2 = levels[ranks]
    except (ValueError, KeyError, TypeError, IndexError) as e:  # a bad PNG: cv2 gives None, subscripted: TypeError
        raise ValueError(f"{display_path(path)} is not a hiseg explorer page ({type(e).__name__}: {e}); remove it "
                         "or rerun with --overwrite") from None
    return _entry(stem, levels.size, image, ucm2)


def write_page_file(out, stem: str, image, hierarchy, source: str = "", start=None) -> tuple:
    """Write ``out/STEM.html`` of ``image`` and ``hierarchy`` (a ucm2 or a result:
    :func:`shown`) atomically (``hiseg predict --html``; ``start``: :func:`start_of`); returns
    its index entry for :func:`write_index_file`."""
    text, entry = _page(stem, image, hierarchy, source, start)
    atomic_write(Path(out) / entry[0], lambda tmp: Path(tmp).write_text(text, encoding="utf-8"))
    return entry


def write_index_file(out, entries: Sequence[tuple]) -> Path:
    """Write ``out/index.html`` of ``entries`` atomically."""
    path = Path(out) / INDEX
    text = build_index(entries)
    atomic_write(path, lambda tmp: Path(tmp).write_text(text, encoding="utf-8"))
    return path


def write_pages(out, items, progress=None, start=None) -> list[Path]:
    """Write the pages of ``items`` (an iterable of ``(stem, image, hierarchy, source)``, the
    hierarchy a ucm2 or a result: :func:`shown`) into ``out``, with an ``index.html`` for
    several; all or nothing.

    Every file is first written into a temporary folder inside ``out`` (pages one at a
    time: a folder of photographs is never held in memory) and moved into place
    (``os.replace``, atomic) only once all of them exist: an error raised by ``items`` or a
    page leaves no page written and no folder created (``hiseg view`` skips and reports the
    images that fail on their own, :func:`hiseg.cli.options.per_file`). ``progress``: wraps ``items`` (e.g.
    tqdm); ``start``: where the pages open (:func:`start_of`; default 12 regions). Returns the
    written paths (none, and no folder, when ``items`` is empty).
    """
    out = Path(out)
    created = []
    d = out
    while not d.exists():
        created.append(d)
        d = d.parent
    with naming_the_file(out):
        out.mkdir(parents=True, exist_ok=True)
        stage = Path(tempfile.mkdtemp(dir=out, prefix=".hiseg-view-"))

    def remove_created():
        shutil.rmtree(stage, ignore_errors=True)
        for d in created:  # deepest first; only the folders this call made
            try:
                d.rmdir()
            except OSError:
                break
    try:
        entries, stems = [], []
        for stem, image, hierarchy, source in (progress(items) if progress else items):
            text, entry = _page(stem, image, hierarchy, source, start)
            with naming_the_file(out / entry[0]):
                (stage / entry[0]).write_text(text, encoding="utf-8")
            entries.append(entry)
            stems.append(stem)
        if not entries:  # every image failed (the caller reports them): no folder left behind
            remove_created()
            return []
        targets = page_outputs(out, stems)
        if len(entries) > 1:
            with naming_the_file(out / INDEX):
                (stage / INDEX).write_text(build_index(entries), encoding="utf-8")
        for name, path in targets.items():
            with naming_the_file(path):
                set_usual_mode(stage / name)  # mkdtemp's folder is private, the pages are not
                os.replace(stage / name, path)
        return list(targets.values())
    except BaseException:
        remove_created()
        raise
    finally:
        shutil.rmtree(stage, ignore_errors=True)
