"""The contrastive embedding of ``contrastive.py`` in the Poincaré ball instead of on the unit
sphere, then linkage (issue 44, the "never below Ward or average" goal): HypCSE's idea (the
issue's best published figure), written from the idea only.

The geometry (``measure.contrastive_embedding(space="ball")``): the same network (64 ReLU units),
views (``all three``: noise 0.3, mask 0.2, a move towards a 10-NN neighbour; ``contrastive.md``'s
pilot choice) and training (Adam, step 0.01, 300 steps of 256 rows, seed 0), but the output ``v``
is mapped into the ball of curvature -1 by the exponential map at the origin, ``tanh(|v|) v /
|v|`` (``measure.to_poincare_ball``, norm clipped to 1 - 1e-5), and the loss's similarity is
the negative Poincaré distance over the temperature (``measure.hyperbolic_nt_xent``) instead of
the cosine. Settings (a small grid fixed beforehand, output scale 1):

* the temperature 0.5 or 1 (the distances span 0 to ~25, the cosines -1 to 1);
* the output's dimension 16 (as ``contrastive.py``) or 2 (HypHC's disc).

The hierarchies read from the points:

* ``average (Poincaré)``: average linkage of the Poincaré distances;
* ``ward (tangent at 0)``: Ward's linkage of ``log_0(z) = artanh(|z|) z / |z|``, Euclidean
  points that keep each point's distance from the origin (halved) and the angles there: Ward's
  variance criterion needs a Euclidean space, and this one is the ball seen from its centre;
* ``LCA depth (single)`` and ``LCA depth (average)``: the norm as depth (HypHC's reading), pairs
  merged first whose geodesic passes farthest from the origin (``measure.lca_depth``; single
  linkage of ``max depth - depth`` is HypHC's greedy decoding).

A setting is chosen on the pilot group only (the fewest draws below the better of Ward and
average, then the worst gap, then the mean) and then reported on the held-out draws, the two
extra sets and the benchmark's six; the pilot's choice is rerun with the network's seed 1 (how
much the training's draws alone move it).

Columns: as ``contrastive.md``: mean purity, mean gap to the better of Ward and average per set,
sets more than 0.005 below it, worst gap, and CPU seconds on one thread (median / max over the
group) of the training, the embedding and the linkage.

Writes ``hyperbolic.md``. Usage: ``python experiments/clustering/hyperbolic.py`` (~11 minutes on
2 cores: the sets are shared between two single-threaded processes).
"""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import measure  # noqa: E402  (first: one thread for numpy and torch)
import numpy as np  # noqa: E402
import torch  # noqa: E402
from contrastive import VIEWS  # noqa: E402
from scipy.cluster.hierarchy import linkage  # noqa: E402
from scipy.spatial.distance import squareform  # noqa: E402
from sets import groups  # noqa: E402

TEMPERATURES = (0.5, 1.0)
DIMENSIONS = (16, 2)


def _condensed(D) -> np.ndarray:
    """The condensed form of a symmetric dissimilarity matrix (its diagonal ignored)."""
    D = np.array(D, dtype=np.float64)
    np.fill_diagonal(D, 0.0)
    return squareform(D, checks=False)


def _tangent_at_origin(Z) -> np.ndarray:
    """``log_0(z) = artanh(|z|) z / |z|``: Euclidean points, each at half its Poincaré distance
    from the origin, in its direction."""
    norm = np.linalg.norm(Z, axis=1, keepdims=True)
    return np.arctanh(norm) * Z / np.maximum(norm, 1e-15)


def _by_depth(Z, method: str):
    """``method`` linkage of ``max depth - depth``: pairs whose geodesic runs deepest merge first."""
    depth = measure.lca_depth(Z)
    return linkage(_condensed(depth.max() - depth), method)


LINKAGES = {"average (Poincaré)": lambda Z: linkage(_condensed(measure.poincare_distance(
                torch.as_tensor(Z), torch.as_tensor(Z)).numpy()), "average"),
            "ward (tangent at 0)": lambda Z: linkage(_tangent_at_origin(Z), "ward"),
            "LCA depth (single)": lambda Z: _by_depth(Z, "single"),
            "LCA depth (average)": lambda Z: _by_depth(Z, "average")}
METHODS = [(t, d, link) for d in DIMENSIONS for t in TEMPERATURES for link in LINKAGES]


def name(method) -> str:
    temperature, dim, link = method
    return f"τ {temperature} / {dim}-d / {link}"


def hyperbolic_trees(X, methods, seed: int = 0) -> dict:
    """method -> (scipy linkage matrix, CPU seconds of the training and the linkage): one
    embedding in the ball per (temperature, dimension)."""
    def embedding(temperature, dim):
        return measure.contrastive_embedding(X, space="ball", temperature=temperature, dim=dim, seed=seed,
                                             **VIEWS["all three"])
    return measure.geometry_trees(methods, embedding, LINKAGES)


def _row(job) -> dict:
    """One set's row: its purities and CPU seconds for every method, and the better linkage."""
    set_name, X, y = job
    trees = hyperbolic_trees(X, METHODS)
    row = dict(name=set_name, X=X, y=y, purity={m: measure.purity(Z, y) for m, (Z, _) in trees.items()},
               seconds={m: s for m, (_, s) in trees.items()}, best=measure.better_linkage(X, y))
    print(set_name, f"better linkage {row['best']:.3f}", f"max {max(row['purity'].values()):.3f}",
          f"{max(row['seconds'].values()):.1f} s", flush=True)
    return row


def _seed_1(job):
    """(purity, CPU seconds) of the pilot's choice with the network's seed 1."""
    X, y, pick = job
    (Z, s), = hyperbolic_trees(X, [pick], seed=1).values()
    return measure.purity(Z, y), s


def main(workers: int = 2):
    """Each set on one of ``workers`` single-threaded processes (CPU seconds are per process)."""
    from multiprocessing import get_context

    jobs = {g: [(n, X, y) for n, (X, y) in sets.items()] for g, sets in groups().items()}
    with get_context("fork").Pool(workers) as pool:
        rows = {g: pool.map(_row, js, chunksize=1) for g, js in jobs.items()}
        pick = measure.pilot_choice(rows["pilot (seeds 100-102, 27)"], METHODS)
        print("pilot's choice:", name(pick), flush=True)
        for rs in rows.values():
            for r, (p, s) in zip(rs, pool.map(_seed_1, [(r["X"], r["y"], pick) for r in rs], chunksize=1)):
                r["purity"]["seed 1"], r["seconds"]["seed 1"] = p, s

    lines = ["# The contrastive embedding in the Poincaré ball, then linkage", "",
             "Written by `hyperbolic.py` (its docstring says what each setting and column is). Dendrogram purity; "
             "views `all three`, 300 training steps, the network's seed 0, unless said.", "",
             "## 1. Every setting (temperature / output dimension / hierarchy read from the ball)", ""]
    lines += measure.group_table(rows, [(name(m), m) for m in METHODS], "setting")
    lines += ["", f"## 2. The pilot's choice, {name(pick)}, and with the network's seed 1", ""]
    lines += measure.group_table(rows, [(f"{name(pick)} (seed 0)", pick), ("seed 1", "seed 1")], "method")
    lines += ["", "Per set (benchmark and extra): the pilot's choice (seeds 0 and 1) and the better of Ward and "
              "average.", "", "| set | choice | seed 1 | better linkage |", "|---|---:|---:|---:|"]
    lines += [f"| {r['name']} | {r['purity'][pick]:.3f} | {r['purity']['seed 1']:.3f} | {r['best']:.3f} |"
              for r in rows["benchmark (6)"] + rows["extra (2)"]]
    measure.write_table(lines, __file__)


if __name__ == "__main__":
    main()
