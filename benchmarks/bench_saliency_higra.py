"""hiseg's saliency-map functions against higra's, same run, same inputs (issue 24 item 6).

    python benchmarks/bench_saliency_higra.py [--repeats 3] [--out benchmarks/results/saliency_higra.md]

For each function of :mod:`hiseg.segmentation.saliency` that higra could do, the time of
hiseg's implementation and of the higra one (``_..._higra`` in that module: the same
output, tested bit for bit in tests/segmentation/test_segmentation.py), best of ``--repeats``, and their
ratio (higra / hiseg: above 1, hiseg's is faster):

* ``ucm2_from_rag``: the BSDS ucm2 of an ultrametric on a RAG; higra:
  ``graph_4_adjacency_2_khalimsky`` on the pixels' explicit 4-adjacency graph (the
  weights reordered to its edge order);
* ``ucm2_from_labels``: the same from a label image and a graph (the working-resolution
  superpixels drawn at the image's size); higra: its region adjacency graph of the labels,
  ``rag_back_project_edge_weights``, ``graph_4_adjacency_2_khalimsky``;
* ``cut_at_threshold``: the regions below a threshold; higra: ``bpt_canonical`` then
  ``labelisation_horizontal_cut_from_threshold``.

Inputs: ~2000 Voronoi superpixels of a 481x321 image (BSDS size), random RAG edge
weights and their subdominant ultrametric; the same superpixels drawn at 4000x3000 (a
12-megapixel photograph: for ``ucm2_from_rag`` and ``cut_at_threshold`` a RAG built on
that label image, for ``ucm2_from_labels`` the 481x321 RAG's labels upsampled, as
:meth:`hiseg.segmentation.result.SegmentationResult.ucm2` does).
"""
from __future__ import annotations

import argparse
import platform
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from provenance import stamped  # noqa: E402


def voronoi_labels(shape, n_regions: int, seed: int = 0) -> np.ndarray:
    """(H, W) labels of the nearest of ``n_regions`` random seeds."""
    from scipy.spatial import cKDTree

    h, w = shape
    pts = np.random.default_rng(seed).random((n_regions, 2)) * [h, w]
    yy, xx = np.mgrid[0:h, 0:w]
    return cKDTree(pts).query(np.c_[yy.ravel(), xx.ravel()])[1].reshape(h, w)


def best_time(f, *args, repeats: int = 3):
    best, out = float("inf"), None
    for _ in range(repeats):
        out = None  # the previous output is freed before the next run
        t = time.perf_counter()
        out = f(*args)
        best = min(best, time.perf_counter() - t)
    return best, out


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--superpixels", type=int, default=2000)
    ap.add_argument("--out", default=None, help="also write the table (markdown) here")
    a = ap.parse_args(argv)

    from hiseg.core.graph import region_adjacency_graph
    from hiseg.segmentation import saliency as S

    small = voronoi_labels((321, 481), a.superpixels)
    rag_small = region_adjacency_graph(small)
    u_small = S.rag_hierarchy(rag_small, np.random.default_rng(1).random(rag_small.graph.num_edges))[0].numpy()
    rows = []
    for name, shape in (("481x321", (321, 481)), ("4000x3000", (3000, 4000))):
        if shape == small.shape:
            rag, u = rag_small, u_small
        else:
            rag = region_adjacency_graph(S.upsample_labels(small, shape))
            u = u_small  # the same regions, hence the same RAG edges (region_adjacency_graph sorts them)
            assert rag.graph.num_edges == u.size
        labels = S.upsample_labels(rag_small.labels, shape)
        threshold = float(np.median(u))
        cases = (("ucm2_from_rag", S.ucm2_from_rag, S._ucm2_from_rag_higra, (rag, u)),
                 ("ucm2_from_labels", S.ucm2_from_labels, S._ucm2_from_labels_higra, (labels, rag_small.graph, u_small)),
                 ("cut_at_threshold", S.cut_at_threshold, S._cut_at_threshold_higra, (rag, u, threshold)))
        for fname, ours, theirs, args in cases:
            t_ours, out_ours = best_time(ours, *args, repeats=a.repeats)
            t_higra, out_higra = best_time(theirs, *args, repeats=a.repeats)
            same = out_ours.dtype == out_higra.dtype and np.array_equal(out_ours, out_higra)
            del out_ours, out_higra
            rows.append((fname, name, rag.graph.num_vertices, t_ours, t_higra, same))
            print(f"{fname:18s} {name:10s} hiseg {t_ours * 1e3:9.1f} ms  higra {t_higra * 1e3:9.1f} ms  "
                  f"ratio {t_higra / t_ours:5.1f}  identical {same}", flush=True)
    import higra

    lines = [f"hiseg's saliency functions against higra's (benchmarks/bench_saliency_higra.py), best of "
             f"{a.repeats}, same run; python {platform.python_version()}, numpy {np.__version__}, higra "
             f"{getattr(higra, '__version__', None) or _dist_version('higra')}\n",
             "| function | image | superpixels | hiseg (ms) | higra (ms) | higra / hiseg | identical output |",
             "|---|---|---|---|---|---|---|"]
    for fname, name, nsp, t_ours, t_higra, same in rows:
        lines.append(f"| {fname} | {name} | {nsp} | {t_ours * 1e3:.1f} | {t_higra * 1e3:.1f} | "
                     f"{t_higra / t_ours:.1f} | {'yes' if same else 'NO'} |")
    text = stamped("\n".join(lines))
    print(text)
    if a.out:
        Path(a.out).write_text(text)


def _dist_version(name: str) -> str:
    from importlib.metadata import version

    return version(name)


if __name__ == "__main__":
    main()
