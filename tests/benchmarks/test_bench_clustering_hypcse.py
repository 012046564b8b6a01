"""The table of issue 56 (``benchmarks/bench_clustering_hypcse.py``): its sets load without the
shared data (HypCSE's copies are skipped), and its goal lines count what the issue asks, on
hand-made figures."""
import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def bench(monkeypatch):
    monkeypatch.setattr(sys, "path", [str(ROOT / "benchmarks"), str(ROOT / "experiments" / "clustering")] + sys.path)
    for name in ("bench_clustering_hypcse", "entropy_choice", "sets", "measure"):
        monkeypatch.delitem(sys.modules, name, raising=False)
    import bench_clustering_hypcse

    return bench_clustering_hypcse


def test_sets_without_the_shared_data_are_scikit_learns_three(bench, monkeypatch, tmp_path):
    import sets

    monkeypatch.setattr(sets, "HYPCSE_DIR", tmp_path)  # an empty folder: no HypCSE copy
    data = sets.hypcse_sets()
    assert list(data) == ["iris (sklearn)", "wine (sklearn)", "WDBC (sklearn)"]
    for X, y in data.values():
        assert np.isclose(X.min(), 0.0) and np.isclose(X.max(), 1.0) and len(X) == len(y)  # min-max scaled, HypCSE's protocol


def _rows(default, ward, average, cpu=1.0):
    rows = {}
    rows["hiseg default"] = dict(purity=default, cpu=cpu, wall=cpu)
    rows["hiseg, selection='entropy'"] = dict(purity=default, cpu=cpu, wall=cpu)
    rows["ward"], rows["average"] = dict(purity=ward), dict(purity=average)
    return rows


def test_goal_lines_count_the_issues_goals(bench):
    """Short of HypCSE: below its measured figure; below the linkages: more than 0.005 under
    the better of Ward and average; slow: over 10 CPU seconds."""
    results = {"iris (sklearn)": ((150, 4), _rows(0.900, 0.848, 0.854)),  # short of .916, above both
               "wine (sklearn)": ((178, 13), _rows(0.950, 0.956, 0.885, cpu=12.0)),  # -0.006 below: counts
               "WDBC (sklearn)": ((569, 30), _rows(0.860, 0.834, 0.863)),  # -0.003: within the tolerance
               "zoo (HypCSE)": ((101, 16), _rows(0.970, 0.973, 0.977))}  # no HypCSE figure; -0.007 below
    line = bench.goals(results)[0]
    assert "below HypCSE's measured figure on 1 of 3 (iris (sklearn) -0.016)" in line
    assert "below the better of Ward and average on 2 of 4 (wine (sklearn) -0.006, zoo (HypCSE) -0.007)" in line
    assert "over 10 CPU s on 1 (wine (sklearn) 12.0 s)" in line
    assert np.isclose(float(bench.summary(results)[2].split("|")[10]), 0.900 - 0.854)
