"""Imports on first use. torch, for the modules that the onnxruntime path shares with the
torch path (:mod:`hiseg.core.ultrametric`, :mod:`hiseg.segmentation.pooling`,
:mod:`hiseg.segmentation.saliency`, :mod:`hiseg.segmentation.segmenter`, :mod:`hiseg.models.weights`): importing them costs no torch, and a segmentation from an
exported model (:mod:`hiseg.export.runtime`, numpy arrays throughout) never imports it. It lives
in the core, its first user, so that the core imports nothing else of hiseg; the packages above
import it from here.

``torch = lazy_torch()`` in such a module: ``torch.X`` imports torch at its first use, except
``torch.is_tensor(x)``, which tells a tensor without importing torch (no tensor exists before
it is), so that the modules shared with the onnxruntime path test their inputs as torch code does.
"""
from __future__ import annotations

import importlib
import sys

__all__ = ["lazy_torch", "lazy_names"]


class _LazyModule:
    """A module's stand-in: its first attribute access imports it; every access reads the module's."""

    def __init__(self, name: str):
        self._name, self._module = name, None

    def __getattr__(self, attr):
        # the module object itself is kept, never a copy of its names: a name set on the
        # module later (a test's monkeypatch of torch.load) is the one read here
        if self._module is None:
            self._module = importlib.import_module(self._name)
        return getattr(self._module, attr)

    def __repr__(self) -> str:
        return f"<lazy module {self._name!r}>"


class _LazyTorch(_LazyModule):
    """torch's stand-in, whose ``is_tensor`` imports nothing."""

    def is_tensor(self, x) -> bool:
        """``torch.is_tensor(x)``, without importing torch: False while it is not imported."""
        torch = sys.modules.get("torch")
        return torch is not None and isinstance(x, torch.Tensor)


def lazy_torch():
    """torch, imported at the first use of one of its names (``is_tensor`` excepted)."""
    return _LazyTorch("torch")


def lazy_names(package: str, where: dict):
    """``(__getattr__, __dir__)`` of a package whose names are imported on first use: ``where``
    maps a name to the package's module that defines it (``importlib`` at the first access, then
    the package's own attribute), so that importing the package costs none of its modules."""
    def __getattr__(name):
        if name in where:
            value = getattr(importlib.import_module(f"{package}.{where[name]}"), name)
            setattr(sys.modules[package], name, value)  # once
            return value
        raise AttributeError(f"module {package!r} has no attribute {name!r}")

    def __dir__():
        return sorted(set(vars(sys.modules[package])) | set(where))

    return __getattr__, __dir__
