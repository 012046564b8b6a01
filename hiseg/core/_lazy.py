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

__all__ = ["lazy_torch", "lazy_names", "import_higra", "installed", "TORCH_STACK", "INSTALL_TORCH", "missing_package", "needs"]


#: What the install without torch (README, "Deploy") leaves out: training, torch models,
#: the classical fit, clustering, exporting.
TORCH_STACK = ("torch", "torchvision", "pytorch_lightning", "lightning", "lightning_fabric", "torchmetrics",
               "jsonargparse", "tensorboard", "sklearn", "numba", "matplotlib", "onnx")
#: The line that installs them.
INSTALL_TORCH = ("pip install torch torchvision --index-url https://download.pytorch.org/whl/cpu, then the rest "
                 "of hiseg's dependencies with `pip install hiseg` (`pip install .` in its folder)")


def installed(package: str) -> bool:
    """Whether ``package`` can be imported here, found without importing it (no cost)."""
    import importlib.util

    try:
        return importlib.util.find_spec(package) is not None
    except (ImportError, ValueError):  # a finder that refuses it, a broken entry
        return False


def missing_package(error: BaseException):
    """The package of :data:`TORCH_STACK` whose absence ``error`` reports (a ModuleNotFoundError),
    else None: an error of the torch-free install, to be answered with :func:`needs`."""
    name = getattr(error, "name", None) if isinstance(error, ModuleNotFoundError) else None
    root = str(name).split(".")[0] if name else None
    return root if root in TORCH_STACK else None


def needs(what: str, package: str) -> str:
    """One line: ``what`` needs ``package``, which this install lacks, and how to install it."""
    return (f"{what} needs {package}, which is not installed here (an install without torch runs exported "
            f"models only): {INSTALL_TORCH}")


class _LazyModule:
    """A module's stand-in: its first attribute access imports it; every access reads the module's."""

    def __init__(self, name: str):
        self._name, self._module = name, None

    def __getattr__(self, attr):
        # the module object itself is kept, never a copy of its names: a name set on the
        # module later (a test's monkeypatch of torch.load) is the one read here
        if self._module is None:
            try:
                self._module = importlib.import_module(self._name)
            except ModuleNotFoundError as e:
                if missing_package(e) != self._name:
                    raise
                raise ModuleNotFoundError(needs("this", self._name), name=self._name) from None
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


#: The imports of higra's plotting module (``higra.plot``) that higra makes at its own import when
#: they are installed: most of the start-up of ``hiseg predict`` (``benchmarks/results/predict_deploy.md``),
#: for plots hiseg never draws. :func:`import_higra` defers them to the first plot.
_HIGRA_PLOT_IMPORTS = ("matplotlib.pyplot", "matplotlib.collections", "scipy.cluster.hierarchy")


def import_higra():
    """higra, imported without the matplotlib and scipy.cluster imports of its plotting module:
    they are hidden while higra imports, then its plotting functions get stand-ins that import
    them at their first call (``hg.plot_partition_tree`` works as before, the import cost moved
    there). A higra already imported is returned as it is."""
    if "higra" in sys.modules:
        return sys.modules["higra"]
    hidden = [m for m in _HIGRA_PLOT_IMPORTS if m not in sys.modules]
    for m in hidden:
        sys.modules[m] = None  # `import m` raises ImportError: higra.plot marks it unavailable
    try:
        import higra
    finally:
        for m in hidden:
            if m in sys.modules and sys.modules[m] is None:
                del sys.modules[m]
    _defer_higra_plotting(hidden)
    return higra


def _lazy_attr(module: str, name: str):
    """A function that imports ``module`` at its first call and calls its ``name``."""
    def call(*args, **kwargs):
        return getattr(importlib.import_module(module), name)(*args, **kwargs)
    call.__name__ = name
    return call


def _defer_higra_plotting(hidden) -> None:
    """Give ``higra.plot``'s modules the names their hidden imports would have bound, imported at
    first use, where the packages are installed (higra's own globals, set only if it left them unset)."""
    graph, tree = sys.modules.get("higra.plot.plot_graph"), sys.modules.get("higra.plot.plot_tree")
    if "matplotlib.pyplot" in hidden and installed("matplotlib"):
        for mod in (graph, tree):
            if mod is not None and "plt" not in vars(mod):
                mod.plt = _LazyModule("matplotlib.pyplot")
                vars(mod)["__matplotlib_available"] = True
        if graph is not None and "LineCollection" not in vars(graph):
            graph.LineCollection = _lazy_attr("matplotlib.collections", "LineCollection")
    if "scipy.cluster.hierarchy" in hidden and tree is not None and "dendrogram" not in vars(tree) \
            and installed("scipy"):
        tree.dendrogram = _lazy_attr("scipy.cluster.hierarchy", "dendrogram")
        tree.set_link_color_palette = _lazy_attr("scipy.cluster.hierarchy", "set_link_color_palette")
        vars(tree)["__scipy_available"] = True
