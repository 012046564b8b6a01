"""The two guarded ratios every measure of the benchmark shares, below all of them (so that the
boundary, region and Fop measures and their summaries import them without a circle)."""
from __future__ import annotations

import numpy as np

__all__ = ["f_measure", "ratio"]


def f_measure(r, p):
    """Harmonic mean ``2PR / (P + R)``, defined as 0 where ``P + R == 0``."""
    r = np.asarray(r, dtype=np.float64)
    p = np.asarray(p, dtype=np.float64)
    s = p + r
    return 2.0 * p * r / (s + (s == 0))


def ratio(cnt, tot):
    """``cnt / tot``, defined as 0 where ``tot == 0`` (the official ``max(tot, eps)`` guard)."""
    cnt = np.asarray(cnt, dtype=np.float64)
    tot = np.asarray(tot, dtype=np.float64)
    return cnt / (tot + (tot == 0))
