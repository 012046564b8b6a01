"""Measures and baselines shared by the clustering experiments.

* :func:`dasgupta_reference`: Dasgupta's cost of a hierarchy on the set's 10-NN + MST
  graph with similarities ``exp(-(d / mean d)^2)``, divided by the flat tree's cost (lower
  is better): the convention of ``experiments/paper/hierarchies.py``, kept so that the numbers
  compare;
* :func:`linkage_tree`: scipy's linkages on all pairs, what a user tries first;
* :func:`geodesic_distances`: shortest-path lengths on a kNN + MST graph, a graph-based geometry;
* :func:`co_association`: how often two points share a k-means cluster over many runs, the
  evidence-accumulation (consensus) geometry;
* :func:`nt_xent` and :func:`contrastive_embedding`: a small network trained without labels to
  bring two augmented views of a point together (SimCLR's loss), the learned geometry, on the
  unit sphere or in the Poincaré ball (:func:`to_poincare_ball`, :func:`poincare_distance`,
  :func:`hyperbolic_nt_xent`; :func:`lca_depth` reads a hierarchy from the points' depths);
* :func:`geometry_trees`: the linkages of several settings of a geometry, each geometry computed
  once and timed;
* :func:`gap_summary`: how a method's purities compare with the better of Ward and average;
  :func:`row_summary` adds the CPU seconds, :func:`pilot_choice` picks a setting by that goal;
* :func:`group_table`, :func:`pool_table`: the tables of a geometry's settings and of its pilot's
  choice as a start of the refinement (``consensus.py``, ``contrastive.py``);
* :func:`write_table`: print a markdown table and write it, stamped, next to the script.
"""
from __future__ import annotations

import os
import time
from functools import lru_cache
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")

import numpy as np  # noqa: E402
import torch  # noqa: E402

torch.set_num_threads(1)

from hiseg import knn_graph  # noqa: E402
from hiseg.metrics import dasgupta_cost, dendrogram_purity  # noqa: E402

__all__ = ["dasgupta_reference", "purity", "linkage_tree", "geodesic_distances", "co_association", "nt_xent",
           "contrastive_embedding", "to_poincare_ball", "poincare_distance", "hyperbolic_nt_xent", "lca_depth",
           "geometry_trees", "gap_summary", "row_summary",
           "pilot_choice", "group_table", "pool_table", "better_linkage", "timed", "write_table", "LINKAGES"]

LINKAGES = ("ward", "average", "complete", "single")


@lru_cache(maxsize=64)
def _reference_graph(key):
    X = np.frombuffer(key[0]).reshape(key[1])
    g, d = knn_graph(X, 10)
    return g, np.exp(-(d / d.mean()) ** 2)


def dasgupta_reference(tree, X) -> float:
    """Normalised Dasgupta cost of ``tree`` on the 10-NN + MST graph of ``X``."""
    X = np.ascontiguousarray(X, dtype=np.float64)
    g, s = _reference_graph((X.tobytes(), X.shape))
    return dasgupta_cost(tree, g, s, normalize=True)


def purity(tree, y) -> float:
    """Exact dendrogram purity."""
    return dendrogram_purity(tree, y)


def linkage_tree(X, method: str):
    """scipy's linkage matrix of ``X`` (all pairs, Euclidean)."""
    from scipy.cluster.hierarchy import linkage

    return linkage(X, method)


def geodesic_distances(X, k: int) -> np.ndarray:
    """(n, n) shortest-path lengths on the ``k``-NN + MST graph of ``X`` (Euclidean edge
    lengths; connected, so all finite): O(n^2) memory, for small sets only."""
    from scipy.sparse import coo_matrix
    from scipy.sparse.csgraph import shortest_path

    g, d = knn_graph(X, k)
    n = X.shape[0]
    return shortest_path(coo_matrix((d, (g.sources, g.targets)), shape=(n, n)).tocsr(), directed=False)


def co_association(X, runs: int, k_range, *, features: float = 1.0, subsample: float = 1.0, seed: int = 0):
    """(n, n) share of the k-means runs, among those that drew both points, in which ``i`` and
    ``j`` fall in one cluster (1 on the diagonal). Each run draws ``k`` uniformly in ``k_range``
    (inclusive), a ``features`` share of the columns and a ``subsample`` share of the rows
    (without replacement; at least one column and ``k`` rows), and runs one k-means++ start:
    no label is used, so the matrix is a label-free geometry. O(runs n k d) time, O(n^2) memory."""
    from sklearn.cluster import KMeans

    X = np.asarray(X, dtype=np.float64)
    n, d = X.shape
    lo, hi = int(k_range[0]), int(k_range[1])
    if not 2 <= lo <= hi <= n:
        raise ValueError(f"k_range must satisfy 2 <= low <= high <= n = {n}, got {tuple(k_range)}")
    rng = np.random.default_rng(seed)
    together, drawn = np.zeros((n, n)), np.zeros((n, n))
    for _ in range(int(runs)):
        k = int(rng.integers(lo, hi + 1))
        cols = np.sort(rng.choice(d, max(1, round(features * d)), replace=False))
        rows = np.sort(rng.choice(n, max(k, round(subsample * n)), replace=False))
        labels = KMeans(k, n_init=1, random_state=int(rng.integers(2**31))).fit_predict(X[np.ix_(rows, cols)])
        onehot = np.zeros((rows.size, k))
        onehot[np.arange(rows.size), labels] = 1.0
        together[np.ix_(rows, rows)] += onehot @ onehot.T
        drawn[np.ix_(rows, rows)] += 1.0
    C = np.divide(together, drawn, out=np.zeros_like(together), where=drawn > 0)
    np.fill_diagonal(C, 1.0)
    return C


def nt_xent(z1, z2, temperature: float):
    """SimCLR's normalised-temperature cross-entropy of two views (torch tensors, (B, D), row
    ``i`` of each a view of one point): every one of the 2B rows must pick its other view among
    the other 2B - 1 by cosine similarity / ``temperature``; the mean of the 2B losses."""
    z = torch.nn.functional.normalize(torch.cat([z1, z2]), dim=1)
    return _pick_other_view(z @ z.T, temperature)


def _pick_other_view(similarity, temperature: float):
    """The mean cross-entropy of each of the 2B rows of ``similarity`` (between the rows of two
    stacked views) picking its other view, row ``i`` + B (mod 2B), among the others by
    similarity / ``temperature``: what :func:`nt_xent` and :func:`hyperbolic_nt_xent` share."""
    if not temperature > 0:
        raise ValueError(f"temperature must be > 0, got {temperature}")
    b = similarity.shape[0] // 2
    logits = (similarity / temperature).masked_fill(torch.eye(2 * b, dtype=torch.bool), float("-inf"))
    positive = torch.cat([torch.arange(b, 2 * b), torch.arange(b)])
    return torch.nn.functional.cross_entropy(logits, positive)


def to_poincare_ball(v, max_norm: float = 1 - 1e-5):
    """The exponential map at the origin of the Poincaré ball of curvature -1, ``tanh(|v|) v /
    |v|`` (rows of a torch tensor), the norm clipped to ``max_norm``: the network's Euclidean
    output as points of the ball, kept off its boundary where distances are infinite."""
    if not 0 < max_norm < 1:
        raise ValueError(f"max_norm must be in (0, 1), got {max_norm}")
    norm = v.norm(dim=-1, keepdim=True).clamp_min(1e-15)
    return torch.tanh(norm).clamp(max=max_norm) * v / norm


def poincare_distance(x, y, eps: float = 1e-12):
    """(n, m) Poincaré distances (curvature -1) between the rows of torch tensors ``x`` (n, D)
    and ``y`` (m, D), ``arcosh(1 + e)`` with ``e = 2 |x - y|^2 / ((1 - |x|^2)(1 - |y|^2))`` at
    least ``eps``: finite gradients where ``x = y`` (a similarity matrix's diagonal). ``|x - y|^2``
    from the Gram matrix (one product, not an (n, m, D) difference, four times faster in the
    loss): so float64, as near the boundary ``e`` divides its rounding error by ``(1 - |x|^2)(1 -
    |y|^2)``, down to 4e-10 at the norm 1 - 1e-5."""
    nx, ny = (x ** 2).sum(1), (y ** 2).sum(1)
    squared = torch.addmm(nx[:, None] + ny[None], x, y.T, alpha=-2)
    e = (squared * torch.outer(2 / (1 - nx), 1 / (1 - ny))).clamp_min(eps)
    return torch.acosh(1 + e)


def hyperbolic_nt_xent(z1, z2, temperature: float):
    """:func:`nt_xent` with the negative Poincaré distance as the similarity (``z1``, ``z2``:
    points of the ball, (B, D) torch tensors): each view must be nearer its other view than the
    other 2B - 2 rows."""
    z = torch.cat([z1, z2])
    return _pick_other_view(-poincare_distance(z, z), temperature)


def lca_depth(Z) -> np.ndarray:
    """(n, n) Poincaré distance from the origin to the geodesic segment between each pair of
    points of the ball ``Z`` (numpy rows; a point's own distance on the diagonal): the depth of
    their lowest common ancestor when the origin is the root and the norm carries depth (HypHC's
    reading). With ``a``, ``b`` the cosh of x's and y's distances from the origin and ``c = 1 + e``
    that of d(x, y): when the triangle (origin, x, y) has an obtuse angle at x (``b > ac``) or y
    the segment's nearest point is that end (the nearer one); otherwise the foot of the
    perpendicular, ``sinh^2 = (2abe - (a - b)^2) / (e (e + 2)) - 1`` (the origin's Lorentz distance
    from the plane of x and y in the hyperboloid model), written with ``e`` so that near pairs
    stay exact."""
    Z = np.asarray(Z, dtype=np.float64)
    n2 = (Z ** 2).sum(1)
    a = (1 + n2) / (1 - n2)
    e = 2 * ((Z[:, None] - Z[None]) ** 2).sum(-1) / np.outer(1 - n2, 1 - n2)
    A, B = np.meshgrid(a, a, indexing="ij")
    end = (B >= A * (1 + e)) | (A >= B * (1 + e))  # also a single point (e = 0)
    e = np.where(end, 1.0, e)
    s2 = (2 * A * B * e - (A - B) ** 2) / (e * (e + 2)) - 1
    return np.where(end, np.arccosh(np.minimum(A, B)), np.arcsinh(np.sqrt(np.clip(s2, 0.0, None))))


def _views(X, rows, std, neighbours, gen, *, noise: float, mask: float, mix: float):
    """One augmented view of the ``rows`` of ``X`` (torch): each moved a uniform share in [0,
    ``mix``] towards one of its ``neighbours`` (in ``X``) drawn at random, plus Gaussian noise of
    ``noise`` times each feature's std, then each feature zeroed (the scale's middle) with
    probability ``mask``."""
    b = rows.shape[0]
    V = X[rows]
    if mix > 0:
        pick = neighbours[rows, torch.randint(neighbours.shape[1], (b,), generator=gen)]
        V = V + mix * torch.rand(b, 1, generator=gen) * (X[pick] - V)
    if noise > 0:
        V = V + noise * std * torch.randn(V.shape, generator=gen)
    if mask > 0:
        V = V * (torch.rand(V.shape, generator=gen) >= mask)
    return V


def contrastive_embedding(X, *, dim: int = 16, hidden: int = 64, steps: int = 300, batch: int = 256,
                          temperature: float = 0.5, noise: float = 0.0, mask: float = 0.0, mix: float = 0.0,
                          k: int = 10, lr: float = 1e-2, seed: int = 0, space: str = "sphere",
                          scale: float = 1.0) -> np.ndarray:
    """(n, dim) unit rows: a two-layer network (``hidden`` ReLU units) trained by Adam for
    ``steps`` steps, each on :func:`nt_xent` of two :func:`_views` of ``batch`` rows of ``X``
    drawn without replacement (all rows when fewer), then applied to ``X`` itself. No label is
    used, so the embedding is a label-free geometry (cosine distances between rows). Seeded: the
    same call gives the same rows (one thread).

    ``space="ball"``: points of the Poincaré ball instead, :func:`to_poincare_ball` of ``scale``
    times the network's output, trained on :func:`hyperbolic_nt_xent` (Poincaré distances)."""
    if space not in ("sphere", "ball"):
        raise ValueError(f"space must be 'sphere' or 'ball', got {space!r}")
    if not scale > 0:
        raise ValueError(f"scale must be > 0, got {scale}")
    X = np.asarray(X, dtype=np.float64)
    if X.ndim != 2 or len(X) < 2:
        raise ValueError(f"X must be a 2-d array of at least 2 rows, got shape {X.shape}")
    if not 0 <= mask < 1 or noise < 0 or mix < 0:
        raise ValueError(f"need 0 <= mask < 1, noise >= 0 and mix >= 0, got mask={mask}, noise={noise}, mix={mix}")
    if noise == mask == mix == 0:
        raise ValueError("no augmentation: at least one of noise, mask and mix must be > 0")
    from sklearn.neighbors import NearestNeighbors

    kk = min(int(k), len(X) - 1)
    neighbours = NearestNeighbors(n_neighbors=kk + 1).fit(X).kneighbors(X, return_distance=False)[:, 1:]
    torch.manual_seed(seed)
    gen = torch.Generator().manual_seed(seed)
    net = torch.nn.Sequential(torch.nn.Linear(X.shape[1], hidden), torch.nn.ReLU(), torch.nn.Linear(hidden, dim))
    opt = torch.optim.Adam(net.parameters(), lr=lr)
    T = torch.as_tensor(X, dtype=torch.float32)
    std, nb = T.std(dim=0), torch.as_tensor(neighbours)
    b = min(int(batch), len(X))
    loss_of, embed = (nt_xent, lambda z: z) if space == "sphere" else (hyperbolic_nt_xent,
                                                                      lambda z: to_poincare_ball(scale * z.double()))
    for _ in range(int(steps)):
        rows = torch.randperm(len(X), generator=gen)[:b]
        loss = loss_of(embed(net(_views(T, rows, std, nb, gen, noise=noise, mask=mask, mix=mix))),
                       embed(net(_views(T, rows, std, nb, gen, noise=noise, mask=mask, mix=mix))), temperature)
        opt.zero_grad()
        loss.backward()
        opt.step()
    with torch.no_grad():
        if space == "ball":  # the training's map, in float64: the distances near the boundary need it
            return embed(net(T)).numpy()
        return torch.nn.functional.normalize(net(T), dim=1).numpy().astype(np.float64)


def geometry_trees(methods, geometry, linkages) -> dict:
    """method -> (scipy linkage matrix, CPU seconds of the geometry and the linkage). A method is a
    tuple: the geometry's settings, then a key of ``linkages`` (name -> function of the geometry);
    ``geometry(*settings)`` is computed once for all the methods that share them."""
    out, cache = {}, {}
    for method in methods:
        *settings, link = method
        key = tuple(settings)
        if key not in cache:
            t = time.process_time()
            cache[key] = (geometry(*key), time.process_time() - t)
        G, seconds = cache[key]
        t = time.process_time()
        out[method] = (linkages[link](G), seconds + time.process_time() - t)
    return out


def better_linkage(X, y) -> float:
    """The purity of the better of scipy's Ward and average linkage: the bar of issue 44."""
    return max(purity(linkage_tree(X, m), y) for m in ("ward", "average"))


def gap_summary(values, best_of_two) -> str:
    """``mean | mean gap | below | worst`` table cells: the mean purity, the mean gap to the
    better of Ward and average per set, the sets more than 0.005 below it, the worst gap."""
    v, g = np.asarray(values), np.asarray(values) - np.asarray(best_of_two)
    return f"{v.mean():.3f} | {g.mean():+.3f} | {(g < -0.005).sum()} | {g.min():+.3f}"


def row_summary(rows, key) -> str:
    """:func:`gap_summary` cells of ``row["purity"][key]`` over ``rows`` (each with its ``"best"``
    linkage's purity) and ``| median / max`` of ``row["seconds"][key]``."""
    cells = gap_summary([r["purity"][key] for r in rows], [r["best"] for r in rows])
    t = np.asarray([r["seconds"][key] for r in rows])
    return f"{cells} | {np.median(t):.2f} / {t.max():.2f}"


def pilot_choice(rows, methods):
    """The method of ``methods`` closest to the goal on ``rows`` (the pilot draws): the fewest sets
    more than 0.005 below the better linkage, then the worst gap, then the mean gap."""
    def rank(m):
        g = np.array([r["purity"][m] - r["best"] for r in rows])
        return (int((g < -0.005).sum()), -g.min(), -g.mean())
    return min(methods, key=rank)


def group_table(rows, labelled_keys, first_column: str) -> list:
    """Markdown lines: a header, then a :func:`row_summary` line per (label, key) of
    ``labelled_keys`` and group of ``rows`` ({group name: rows})."""
    lines = [f"| {first_column} | group | mean | gap | below | worst | CPU s (median / max) |",
             "|---|---|---:|---:|---:|---:|---:|"]
    for label, key in labelled_keys:
        lines += [f"| {label} | {g} | {row_summary(rs, key)} |" for g, rs in rows.items()]
    return lines


POOL_NOTE = ("`today`: the default's refinement (the lower exact cost of its two refined starts); `{name} "
             "refined`: the choice refined alone; `pool`: the lowest exact cost of the three; their CPU "
             "seconds include the refinements (and {own} where it is used).")


def pool_table(named_rows, choice, name: str) -> list:
    """Markdown lines, one per row of ``named_rows``: the purity of the ``choice``, of
    ``fits.add_refined_pool``'s three hierarchies (with the start the pool kept) and of the better
    linkage."""
    lines = ["Per set (benchmark and extra): the choice, its refinement pools, the better of Ward and "
             "average, and which start the pool kept.", "",
             f"| set | choice | today | {name} refined | pool (kept) | better linkage |",
             "|---|---:|---:|---:|---:|---:|"]
    for r in named_rows:
        p = r["purity"]
        lines.append(f"| {r['name']} | {p[choice]:.3f} | {p['today']:.3f} | {p[f'{name} refined']:.3f} | "
                     f"{p['pool']:.3f} ({r['kept']}) | {r['best']:.3f} |")
    return lines


def timed(fn, *args, **kw):
    """(result, seconds)."""
    t = time.perf_counter()
    out = fn(*args, **kw)
    return out, time.perf_counter() - t


def write_table(lines, script_file: str, name: str | None = None) -> Path:
    """Print the markdown ``lines`` and write them, stamped with revision, date, machine and
    command (``benchmarks/provenance.py``), to ``<script>.md`` (or ``name``) next to the script."""
    import sys

    benchmarks = str(Path(__file__).resolve().parents[2] / "benchmarks")
    if benchmarks not in sys.path:
        sys.path.insert(0, benchmarks)
    from provenance import stamped

    here = Path(script_file).resolve()
    out = here.with_name(name) if name else here.with_suffix(".md")
    text = stamped("\n".join(lines))
    print(text)
    out.write_text(text)
    return out
