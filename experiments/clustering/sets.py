"""The data sets of the clustering experiments, every feature scaled to [-1, 1].

Two groups, kept apart so that no setting is chosen on the sets it is judged on:

* :func:`benchmark_sets`: what ``benchmarks/bench_clustering_purity.py`` reports: iris,
  wine, breast cancer (scikit-learn's copies), a 500-sample draw of scikit-learn's digits,
  and two generated sets with seed 0 (Gaussian blobs of unequal spreads in 8-d, two
  noisy moons);
* :func:`pilot_sets`: generated draws (seeds 100, 101, 102) of tabular-like classification
  sets, Gaussian mixtures and 2-d toy shapes; the only sets on which a default is chosen;
* :func:`extra_sets`: two more held-out sets, unlike both (5 classes in 30-d, nested
  Gaussian shells), for checks beyond the pilot generators' seeds 0-2;
* :func:`hypcse_sets`: the nine sets of issue 56, on which HypCSE was measured side by side:
  HypCSE's six copies (``../shared/data/clustering``, skipped when absent) and scikit-learn's
  iris, wine and WDBC, min-max scaled to [0, 1] as HypCSE's protocol does.

``MinMaxScaler((-1, 1))`` as in the issue (LIBSVM-style scaling).
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
from sklearn import datasets
from sklearn.preprocessing import MinMaxScaler

__all__ = ["benchmark_sets", "pilot_sets", "extra_sets", "hypcse_sets", "groups", "scaled", "BENCHMARK",
           "PILOT_SEEDS", "HYPCSE_DIR", "HYPCSE_FILES", "HYPCSE_MEASURED"]

BENCHMARK = ("iris", "wine", "breast cancer", "digits (500)", "blobs (8-d)", "moons")
PILOT_SEEDS = (100, 101, 102)


def scaled(X) -> np.ndarray:
    """Every feature in [-1, 1]."""
    return MinMaxScaler(feature_range=(-1, 1)).fit_transform(np.asarray(X, dtype=np.float64))


def _digits(n: int, seed: int):
    X, y = datasets.load_digits(return_X_y=True)
    idx = np.sort(np.random.default_rng(seed).choice(len(y), n, replace=False))
    return X[idx], y[idx]


def _blobs(n: int, dim: int, k: int, seed: int):
    std = np.random.default_rng(seed).uniform(0.5, 2.0, k)
    return datasets.make_blobs(n, n_features=dim, centers=k, cluster_std=std, center_box=(-6, 6),
                               random_state=seed)


def _moons(n: int, seed: int, noise: float = 0.08):
    return datasets.make_moons(n, noise=noise, random_state=seed)


def benchmark_sets() -> dict:
    """name -> (X scaled to [-1, 1], y): the benchmark's six sets."""
    raw = {
        "iris": datasets.load_iris(return_X_y=True),
        "wine": datasets.load_wine(return_X_y=True),
        "breast cancer": datasets.load_breast_cancer(return_X_y=True),
        "digits (500)": _digits(500, 0),
        "blobs (8-d)": _blobs(300, 8, 5, 0),
        "moons": _moons(300, 0),
    }
    return {name: (scaled(X), np.asarray(y)) for name, (X, y) in raw.items()}


def _pilot_draws(seed: int) -> dict:
    c = datasets.make_classification
    return {
        "classif 2 classes": c(300, n_features=10, n_informative=4, n_redundant=2, n_classes=2,
                               n_clusters_per_class=1, class_sep=1.2, random_state=seed),
        "classif 3 classes": c(300, n_features=20, n_informative=5, n_redundant=3, n_classes=3,
                               n_clusters_per_class=1, class_sep=1.5, random_state=seed),
        "classif 4 classes": c(400, n_features=12, n_informative=6, n_redundant=2, n_classes=4,
                               n_clusters_per_class=1, class_sep=1.0, random_state=seed),
        "mixture 10-d": _blobs(300, 10, 4, seed),
        "mixture 64-d": _blobs(500, 64, 8, seed),
        "circles": datasets.make_circles(200, factor=0.5, noise=0.05, random_state=seed),
        "moons x2": _two_pairs_of_moons(200, seed),
        "varied": datasets.make_blobs(200, cluster_std=[1.0, 2.5, 0.5], random_state=seed),
        "aniso": _aniso(200, seed),
    }


def _two_pairs_of_moons(n: int, seed: int):
    X, y = datasets.make_moons(n // 2, noise=0.05, random_state=seed)
    return np.concatenate([X, X + (2.5, 0)]), np.concatenate([y, y + 2])


def _aniso(n: int, seed: int):
    X, y = datasets.make_blobs(n, random_state=seed)
    return X @ np.array([[0.6, -0.6], [-0.4, 0.8]]), y


def pilot_sets(seeds=PILOT_SEEDS) -> dict:
    """"name / seed" -> (X scaled to [-1, 1], y): nine generators, one draw per seed."""
    out = {}
    for seed in seeds:
        for name, (X, y) in _pilot_draws(seed).items():
            out[f"{name} / {seed}"] = (scaled(X), np.asarray(y))
    return out


def extra_sets(seed: int = 0) -> dict:
    """name -> (X scaled to [-1, 1], y): a 5-class 30-d classification set (one cluster per
    class, 8 informative features) and three nested Gaussian shells in 3-d, seeded."""
    raw = {
        "classif 5 classes (30-d)": datasets.make_classification(
            400, n_features=30, n_informative=8, n_redundant=4, n_classes=5, n_clusters_per_class=1,
            class_sep=1.5, random_state=seed),
        "gaussian shells (3-d)": datasets.make_gaussian_quantiles(n_samples=300, n_features=3, n_classes=3,
                                                                  random_state=seed),
    }
    return {name: (scaled(X), np.asarray(y)) for name, (X, y) in raw.items()}


def groups() -> dict:
    """group name -> sets: the pilot draws (where a setting would be chosen), the held-out
    draws (seeds 0-2), :func:`extra_sets` and the benchmark's six, in that order."""
    return {"pilot (seeds 100-102, 27)": pilot_sets(), "held-out (seeds 0-2, 27)": pilot_sets((0, 1, 2)),
            "extra (2)": extra_sets(), "benchmark (6)": benchmark_sets()}


#: HypCSE's copies of six UCI sets (``../shared/data/clustering/README``; read-only, not in the repository)
HYPCSE_DIR = Path(__file__).resolve().parents[3] / "shared" / "data" / "clustering"
#: the nine sets' names -> HypCSE's file (its copies) or None (scikit-learn's copy)
HYPCSE_FILES = {"iris (HypCSE)": "Iris.mat", "wine (HypCSE)": "wine.mat", "Wisconsin (HypCSE)": "breast-cancer.mat",
                "glass (HypCSE)": "Glass.mat", "zoo (HypCSE)": "Zoo.mat", "segmentation (HypCSE)": "Segmentation.mat",
                "iris (sklearn)": None, "wine (sklearn)": None, "WDBC (sklearn)": None}
#: HypCSE's dendrogram purity measured with its public code on the same data (issue 56: short CPU
#: runs, seeds 0-2); not measured on glass, zoo and segmentation
HYPCSE_MEASURED = {"iris (HypCSE)": 0.925, "wine (HypCSE)": 0.927, "Wisconsin (HypCSE)": 0.970,
                   "iris (sklearn)": 0.916, "wine (sklearn)": 0.931, "WDBC (sklearn)": 0.844}


def hypcse_sets() -> dict:
    """name -> (X min-max scaled to [0, 1], y): the nine sets of issue 56 (HypCSE's six copies
    only where ``HYPCSE_DIR`` holds them; the Wisconsin copy keeps its sample-code column, as
    HypCSE's protocol does)."""
    from scipy.io import loadmat

    unit = MinMaxScaler(feature_range=(0, 1))
    sk = {"iris (sklearn)": datasets.load_iris, "wine (sklearn)": datasets.load_wine,
          "WDBC (sklearn)": datasets.load_breast_cancer}
    out = {}
    for name, file in HYPCSE_FILES.items():
        if file is None:
            X, y = sk[name](return_X_y=True)
        elif (HYPCSE_DIR / file).is_file():
            m = loadmat(HYPCSE_DIR / file)
            X, y = m["fea"], m["gnd"].ravel()
        else:
            continue
        out[name] = (unit.fit_transform(np.asarray(X, dtype=np.float64)), np.asarray(y))
    return out
