"""Compiled kernels of the BSDS benchmark (numba): thinning, pixel assignment, region labels.

:mod:`hiseg.metrics.matching`, :mod:`hiseg.metrics.tables` and :mod:`hiseg.metrics.region`
call these; nothing here reads files. One module per algorithm:

* :mod:`~hiseg.metrics.kernels.thinning` -- :func:`thin`, MATLAB's ``bwmorph(BW, 'thin', Inf)``
  (Guo & Hall's two-subiteration thinning, its deletion tables from the paper's conditions:
  :func:`thinning_tables`);
* :mod:`~hiseg.metrics.kernels.lapjvsp` -- :func:`lapjvsp`, the minimum-cost perfect matching of
  a square sparse bipartite graph, taking scipy's decision at every step;
* :mod:`~hiseg.metrics.kernels.assignment` -- :func:`match_map`, the minimum-cost assignment of a
  predicted boundary map to one annotator's with outliers, as the official ``correspondPixels``
  poses it, solved per connected component of the candidate graph (:func:`neighbourhoods`), the
  components of the last threshold copied when unchanged;
* :mod:`~hiseg.metrics.kernels.labels` -- :func:`ucm_labels_advance`, the region labels of a ucm2
  grown from one threshold to the next;
* :mod:`~hiseg.metrics.kernels.contingency` -- :func:`pair_counts` and :func:`label_range`, the
  contingency table of two label arrays.

Without numba
-------------
A Python where numba cannot be imported (the CUDA machine the project trains on has none)
gets the numpy/scipy twins of :mod:`hiseg.metrics._kernels_py` under the same names: the same
results, several times slower (enough for a training run's validation metric).
"""
from __future__ import annotations

from ._jit import HAVE_NUMBA
from .assignment import match_map, neighbourhoods
from .contingency import label_range, pair_counts
from .labels import ucm_labels_advance
from .lapjvsp import lapjvsp
from .thinning import thin, thinning_tables

__all__ = ["HAVE_NUMBA", "label_range", "lapjvsp", "match_map", "neighbourhoods", "pair_counts", "thin",
           "thinning_tables", "ucm_labels_advance"]

if not HAVE_NUMBA:  # the same results from numpy and scipy, several times slower (hiseg.metrics._kernels_py)
    from .._kernels_py import label_range, match_map, neighbourhoods, pair_counts, thin, ucm_labels_advance  # noqa: F811
