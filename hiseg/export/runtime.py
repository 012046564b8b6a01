"""The onnxruntime backend of :class:`hiseg.Segmenter`: an exported folder's network (and merge
head) run by onnxruntime, without torch.

>>> from hiseg import Segmenter
>>> seg = Segmenter.from_checkpoint("bsds500_onnx")     # a folder written by `hiseg export`
>>> seg                                                 # Segmenter(model='bsds500_ensemble', backend='onnxruntime', ...)

A backend makes the boundary map, nothing else: the chain after it (superpixels, the region
adjacency graph, the edge features, the hierarchy, UCMs, cuts, files) is the one every backend
shares (:meth:`hiseg.segmentation.Pipeline.hierarchy_of_map`). The network graph holds the
pipeline's scales, flips and an ensemble's mean, so those settings are fixed at export
(:attr:`OnnxBackend.fixed`); the merge head's MLP runs here too (:class:`OnnxHead`), on the
chain's numpy features. Importing this module, opening a folder and segmenting import no torch
(``tests/export/test_export.py`` checks ``sys.modules`` in a fresh process). It imports nothing of
hiseg above :mod:`hiseg.export.manifest`, so that the Segmenter (below the exporter) can use it.
"""
from __future__ import annotations

from pathlib import Path
from typing import Optional

import numpy as np

from ..core._lazy import installed
from .guard import bound_allocations, check_graph
from .manifest import ExportError, printable, read_manifest

__all__ = ["OnnxBackend", "OnnxHead", "onnxruntime_module", "onnxruntime_available", "INSTALL_HINT"]

INSTALL_HINT = "pip install onnxruntime"


def onnxruntime_available() -> bool:
    """Whether onnxruntime can be imported here (found, not imported: no cost)."""
    return installed("onnxruntime")


def onnxruntime_module():
    """onnxruntime, or ExportError naming the line that installs it."""
    try:
        import onnxruntime
    except ImportError:
        raise ExportError(f"running an exported model needs onnxruntime, which is not installed: {INSTALL_HINT}") \
            from None
    return onnxruntime


def _open(ort, path: Path, options, inputs, outputs, where: str):
    """An inference session of ``path`` whose inputs and outputs are ``[(name, rank, element
    type)]`` (ExportError naming the difference)."""
    try:
        sess = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
    except Exception as e:  # noqa: BLE001 - onnxruntime's own exception classes
        raise ExportError(f"{where}: {path.name} is not a model onnxruntime can load ({e}); export the model again") \
            from None
    for kind, got, want in (("inputs", sess.get_inputs(), inputs), ("outputs", sess.get_outputs(), outputs)):
        g = [(a.name, len(a.shape), a.type) for a in got]
        if g != want:
            raise ExportError(f"{where}: {path.name}'s {kind} are {g}, expected {want} (the manifest and the graph "
                              "do not belong together); export the model again")
    return sess


class OnnxHead:
    """An exported merge head: ``features`` (the names the chain computes) and
    :meth:`edge_weights`, the call :meth:`hiseg.segmentation.Pipeline.edge_weights` makes of a
    head (the torch one is :meth:`hiseg.segmentation.merging.MergeHead.edge_weights`)."""

    def __init__(self, session, features):
        self.session, self.features = session, tuple(features)
        self._input = session.get_inputs()[0].name

    def edge_weights(self, features: np.ndarray, rag=None) -> np.ndarray:
        """(E,) float64 weights of (E, F) float64 features (``rag``: unused, context-free heads only)."""
        return self.session.run(None, {self._input: np.ascontiguousarray(features, dtype=np.float64)})[0]


class OnnxBackend:
    """The graphs of an exported folder (manifest and checksums checked, sessions open).

    ``threads``: onnxruntime's intra-op threads (None: its default, one per core; on a busy
    machine 1 is faster). ``trusted``: a shipped model's exported form (matched to its
    checkpoint by sha256), whose graphs are not sized again; any other folder's are, where onnx
    is installed (:func:`hiseg.export.guard.check_graph`), and every session's memory is bounded
    (:func:`~hiseg.export.guard.bound_allocations`). Raises ExportError
    (:func:`hiseg.export.manifest.read_manifest`, a
    graph that does not load or whose inputs differ from the manifest's, onnxruntime missing)."""

    name = "onnxruntime"
    #: the pipeline settings inside the network graph: fixed at export
    fixed = ("scales", "flip")

    def __init__(self, folder, threads: Optional[int] = None, trusted: bool = False):
        self.folder = Path(folder)
        where = f"exported model {self.folder}"
        self.manifest = m = read_manifest(self.folder)
        ort = onnxruntime_module()
        self.threads, self.trusted = threads, trusted
        so = ort.SessionOptions()
        so.log_severity_level = 3
        bound_allocations(ort, so)  # a graph that asks for more than half the machine fails, never takes it
        if not trusted and installed("onnx"):  # a folder from elsewhere: its graphs' declared sizes first (predict_deploy.md)
            for section in ("network", "merge_head"):
                if m.get(section) is not None:
                    check_graph(self.folder / m[section]["file"], where)
        # idle threads sleep instead of spinning: on a shared 2-core machine (load 6) two spinning
        # threads took 0.91 s a pass of the default model, two sleeping ones 0.76 (median of 5)
        so.add_session_config_entry("session.intra_op.allow_spinning", "0")
        if threads:
            so.intra_op_num_threads = int(threads)
            so.inter_op_num_threads = 1
        net = m["network"]
        self.network = _open(ort, self.folder / net["file"], so, [(net.get("input", "image"), 4, "tensor(float)")],
                             [(net.get("output", "boundary"), 3, "tensor(float)")], where)
        self._input = self.network.get_inputs()[0].name
        self.min_side = int(net.get("min_side", 1))
        head = m.get("merge_head")
        self.head = None
        if head is not None:
            sess = _open(ort, self.folder / head["file"], so, [(head.get("input", "features"), 2, "tensor(double)")],
                         [(head.get("output", "weights"), 1, "tensor(double)")], where)
            self.head = OnnxHead(sess, head["features"])
        #: the model's name as the manifest gives it, control characters escaped (printed as is)
        self.model_name = printable(str(m.get("model", self.folder)))

    def settings(self) -> dict:
        """The pipeline settings of the export (``Pipeline.from_dict`` reads them): the manifest's,
        with the network graph's scales and flip; the merge head is :attr:`head`, run here."""
        net = self.manifest["network"]
        p = {k: v for k, v in (self.manifest.get("pipeline") or {}).items() if k != "merge_head"}
        return {**p, "scales": list(net.get("scales", (1.0,))), "flip": bool(net.get("flip", False))}

    def boundary_map(self, image: np.ndarray, pipeline=None, tile: int = 0) -> np.ndarray:
        """(H, W) float32 boundary probability of an (H, W, 3) float image in [0, 1], one pass
        (the pipeline's scales and flips are inside the graph; ``tile``: the torch backend's)."""
        img = np.asarray(image, np.float32)[..., :3]
        h, w = img.shape[:2]
        if min(h, w) < self.min_side:  # below two cells of the stride at the smallest scale the graph differs
            # from torch's padding: the image mirrored out to the smallest side it computes, the map cropped back
            img = np.pad(img, ((0, max(0, self.min_side - h)), (0, max(0, self.min_side - w)), (0, 0)), "symmetric")
        x = np.ascontiguousarray(img.transpose(2, 0, 1))[None]
        return self.network.run(None, {self._input: x})[0][0][:h, :w]

    def worker_copy(self) -> "OnnxBackend":
        """What a worker process of ``hiseg predict --workers`` runs the chain with: this backend
        (its merge head), reopened there with one thread (:meth:`__reduce__`)."""
        return self

    def __reduce__(self):  # sessions are not picklable: a worker process opens the folder again, one thread
        return (type(self), (str(self.folder), 1, self.trusted))

    def __repr__(self) -> str:
        return f"OnnxBackend({str(self.folder)!r}, model={self.model_name!r})"
