"""hiseg's region adjacency graph against higra's, same run, same inputs (issue 24 item 6).

    python benchmarks/bench_rag.py [--repeats 3] [--out benchmarks/results/rag.md]

Times, best of ``--repeats``:

* ``hiseg``: :func:`hiseg.core.graph.region_adjacency_graph`, the whole RAG (graph, renumbered
  labels, pixel-edge map, frontier CSR);
* ``higra call``: ``hg.make_region_adjacency_graph_from_labelisation`` alone, on the pixels'
  4-adjacency graph built beforehand (``hg.get_4_adjacency_graph``, not timed; higra refuses
  the implicit graph): the least any higra-based RAG costs. It is not hiseg's RAG (one vertex
  per connected component in order of appearance, edges in order of discovery, pixel edges
  in higra's order, no frontier lists);
* ``higra-based``: :func:`hiseg.core.graph._region_adjacency_graph_higra`, hiseg's RAG built from
  higra's (building the 4-adjacency graph included), checked here to equal hiseg's in every
  field, bit for bit and dtype (tests/core/test_graph.py checks it on random label images).

Ratios are higra / hiseg: above 1, hiseg's is faster.

Inputs: Voronoi superpixels (nearest of random seeds; ``voronoi_labels`` of
benchmarks/bench_saliency_higra.py), ~2000 on 481x321 (BSDS size) and ~30000 on 4000x3000
(a 12-megapixel photograph), labels in a random order.
"""
from __future__ import annotations

import argparse
import platform
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from bench_saliency_higra import _dist_version, best_time, voronoi_labels  # noqa: E402
from provenance import stamped  # noqa: E402

CASES = (("481x321", (321, 481), 2000), ("4000x3000", (3000, 4000), 30000))


def identical(a, b) -> bool:
    """Every field of two RegionAdjacencyGraphs equal, values and dtypes."""
    arrays = [(a.labels, b.labels), (a.pixel_edge_map, b.pixel_edge_map), (a.frontier_ptr, b.frontier_ptr),
              (a.frontier_edges, b.frontier_edges), (a.graph.sources, b.graph.sources),
              (a.graph.targets, b.graph.targets)]
    return (a.graph.num_vertices == b.graph.num_vertices
            and all(x.dtype == y.dtype and np.array_equal(x, y) for x, y in arrays))


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--out", default=None, help="also write the table (markdown) here")
    a = ap.parse_args(argv)

    import higra as hg

    from hiseg.core.graph import _region_adjacency_graph_higra, region_adjacency_graph

    rows = []
    for name, shape, n in CASES:
        labels = np.random.default_rng(1).permutation(n)[voronoi_labels(shape, n)]
        t_ours, ours = best_time(region_adjacency_graph, labels, repeats=a.repeats)
        g4 = hg.get_4_adjacency_graph(shape)
        flat = labels.ravel().astype(np.int64)
        t_call, _ = best_time(hg.make_region_adjacency_graph_from_labelisation, g4, flat, repeats=a.repeats)
        del g4, flat
        t_full, theirs = best_time(_region_adjacency_graph_higra, labels, repeats=a.repeats)
        same = identical(ours, theirs)
        rows.append((name, ours.num_regions, ours.graph.num_edges, t_ours, t_call, t_full, same))
        del ours, theirs
        print(f"{name:10s} {rows[-1][1]:6d} regions  hiseg {t_ours * 1e3:9.1f} ms  higra call {t_call * 1e3:9.1f} ms "
              f"({t_call / t_ours:4.1f}x)  higra-based {t_full * 1e3:9.1f} ms ({t_full / t_ours:4.1f}x)  "
              f"identical {same}", flush=True)
    lines = [f"hiseg's region adjacency graph against higra's (benchmarks/bench_rag.py), best of {a.repeats}, "
             f"same run; python {platform.python_version()}, "
             f"numpy {np.__version__}, higra {_dist_version('higra')}\n",
             "| image | regions | RAG edges | hiseg (ms) | higra call (ms) | higra call / hiseg | "
             "higra-based (ms) | higra-based / hiseg | identical output |",
             "|---|---|---|---|---|---|---|---|---|"]
    for name, nv, ne, t_ours, t_call, t_full, same in rows:
        lines.append(f"| {name} | {nv} | {ne} | {t_ours * 1e3:.1f} | {t_call * 1e3:.1f} | {t_call / t_ours:.1f} | "
                     f"{t_full * 1e3:.1f} | {t_full / t_ours:.1f} | {'yes' if same else 'NO'} |")
    text = stamped("\n".join(lines))
    print(text)
    if a.out:
        Path(a.out).write_text(text)


if __name__ == "__main__":
    main()
