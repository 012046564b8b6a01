"""numba's ``njit`` for the kernels, or, in a Python where numba cannot be imported (the CUDA
machine's, which has none), a decorator that leaves the function as it is (the package then
takes the numpy/scipy twins of :mod:`hiseg.metrics._kernels_py`: :mod:`hiseg.metrics.kernels`)."""
from __future__ import annotations

try:
    from numba import njit

    HAVE_NUMBA = True
except ImportError:
    HAVE_NUMBA = False

    def njit(*args, **kwargs):
        return lambda f: f

__all__ = ["HAVE_NUMBA", "njit"]
