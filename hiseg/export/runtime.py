"""Inference from an exported folder (``hiseg export``) with onnxruntime and numpy: no torch.

>>> from hiseg.export.runtime import ExportedSegmenter
>>> seg = ExportedSegmenter.from_exported("bsds500_onnx")    # checks the manifest and checksums
>>> res = seg.segment("photo.jpg")                           # a SegmentationResult, as Segmenter's
>>> res.saliency, res.cut(n_regions=10)

The chain is the torch path's (:class:`hiseg.segmentation.Pipeline`), step by step: the
boundary map is the network graph's (scales, flips and the ensemble inside it); superpixels,
the region adjacency graph, the merge head's features (:func:`~hiseg.export.features.numpy_edge_features`,
numpy) and its MLP (the head graph), the hierarchy (higra, :mod:`hiseg.core.ultrametric` on numpy
weights), UCMs, cuts and files are the same functions. Importing this module, opening a
folder and segmenting images import no torch (``tests/test_export.py`` checks
``sys.modules`` in a fresh process). onnxruntime comes with ``pip install "hiseg[onnx]"``.
"""
from __future__ import annotations

from pathlib import Path
from typing import Optional

import numpy as np

from ..segmentation.segmenter import Segmenter
from .manifest import MANIFEST, ExportError, read_manifest

__all__ = ["ExportedModel", "ExportedSegmenter", "onnxruntime_module", "INSTALL_HINT"]

INSTALL_HINT = 'pip install "hiseg[onnx]"'
#: The superpixel methods and linkages the exported chain runs (the closest fit needs torch).
SUPERPIXELS = ("boundary_watershed", "all_minima", "color_watershed")
LINKAGES = ("average", "single")


def onnxruntime_module():
    """onnxruntime, or ExportError naming the extra that installs it."""
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


class ExportedModel:
    """The graphs and settings of an exported folder (manifest checked, sessions open).

    ``threads``: onnxruntime's intra-op threads (None: its default, one per core; on a busy
    machine 1 is faster: 0.43-0.53 s a pass of the default model against 0.74-0.76 for 2 at
    load average 6 on 2 cores).
    ``max_pixels``: the working resolution (default: the manifest's pipeline's). Raises
    ExportError (:func:`hiseg.export.manifest.read_manifest`, a graph that does not load or
    whose inputs differ from the manifest's, settings this chain does not run, onnxruntime
    missing)."""

    def __init__(self, folder, threads: Optional[int] = None, max_pixels: Optional[int] = None):
        self.folder = Path(folder)
        where = f"exported model {self.folder}"
        self.manifest = m = read_manifest(self.folder)
        ort = onnxruntime_module()
        self.threads = threads
        so = ort.SessionOptions()
        so.log_severity_level = 3
        # idle threads sleep instead of spinning: on a shared 2-core machine (load 6) two spinning
        # threads took 0.91 s a pass of the default model, two sleeping ones 0.76 (median of 5)
        so.add_session_config_entry("session.intra_op.allow_spinning", "0")
        if threads:
            so.intra_op_num_threads = int(threads)
            so.inter_op_num_threads = 1
        net = m["network"]
        self.network = _open(ort, self.folder / net["file"], so, [(net.get("input", "image"), 4, "tensor(float)")],
                             [(net.get("output", "boundary"), 3, "tensor(float)")], where)
        self.min_side = int(net.get("min_side", 1))
        head = m.get("merge_head")
        self.head, self.features = None, ("mean",)
        if head is not None:
            self.head = _open(ort, self.folder / head["file"], so, [(head.get("input", "features"), 2, "tensor(double)")],
                              [(head.get("output", "weights"), 1, "tensor(double)")], where)
            self.features = tuple(head["features"])
        p = dict(m.get("pipeline") or {})
        self.superpixels = p.get("superpixels", "boundary_watershed")
        self.linkage = p.get("linkage", "average")
        self.region_size, self.sigma = float(p.get("region_size", 8.0)), float(p.get("sigma", 1.0))
        self.max_pixels = int(p.get("max_pixels", 500_000) if max_pixels is None else max_pixels)
        self.scales, self.flip = tuple(net.get("scales", (1.0,))), bool(net.get("flip", False))
        if self.superpixels not in SUPERPIXELS or self.linkage not in LINKAGES:
            raise ExportError(f"{where}: superpixels {self.superpixels!r} / linkage {self.linkage!r}: the exported "
                              f"chain runs superpixels {SUPERPIXELS} and linkages {LINKAGES}")
        self.name = str(m.get("model", self.folder))

    # the settings as Segmenter.read and the run record read them from a Pipeline
    def working_size(self, height: int, width: int) -> tuple[int, int]:
        """As :meth:`hiseg.segmentation.Pipeline.working_size`."""
        if self.max_pixels == 0 or height * width <= self.max_pixels:
            return int(height), int(width)
        f = (self.max_pixels / float(height * width)) ** 0.5
        return max(1, int(height * f)), max(1, int(width * f))

    def boundary_map(self, image: np.ndarray) -> np.ndarray:
        """(H, W) float32 boundary probability of an (H, W, 3) float image in [0, 1]."""
        img = np.asarray(image, np.float32)
        h, w = img.shape[:2]
        if min(h, w) < self.min_side:
            raise ValueError(f"image of {h}x{w} pixels: the exported network computes images of at least "
                             f"{self.min_side} pixels a side (its smallest scale, {min(self.scales)}, would go "
                             "below two cells of its stride); use the torch path (Segmenter) for smaller ones")
        x = np.ascontiguousarray(img[..., :3].transpose(2, 0, 1))[None]
        return self.network.run(None, {self.network.get_inputs()[0].name: x})[0][0]

    def edge_weights(self, rag, boundary: np.ndarray, image: Optional[np.ndarray] = None) -> np.ndarray:
        """(E,) float64 weights of one RAG's edges: the merge head's on the edge features, or
        the mean boundary along each frontier (as :meth:`hiseg.segmentation.Pipeline.edge_weights`)."""
        from .features import numpy_edge_features

        x = numpy_edge_features(rag, boundary, image, self.features)
        if self.head is None:
            return x[:, 0]
        return self.head.run(None, {self.head.get_inputs()[0].name: np.ascontiguousarray(x)})[0]

    def make_superpixels(self, boundary: np.ndarray, image: Optional[np.ndarray] = None) -> np.ndarray:
        from ..segmentation.superpixels import make_superpixels

        return make_superpixels(self.superpixels, boundary, image, self.region_size, self.sigma)

    def hierarchy_of_map(self, boundary: np.ndarray, image: Optional[np.ndarray] = None):
        """(rag, ultrametric, hierarchy) of a boundary map, as :meth:`hiseg.segmentation.Pipeline.hierarchy_of_map`."""
        from ..core.graph import region_adjacency_graph
        from ..core.ultrametric import build_average_linkage_hierarchy, build_hierarchy

        rag = region_adjacency_graph(self.make_superpixels(boundary, image))
        if rag.graph.num_vertices == 1:
            return rag, np.zeros(0), None
        w = self.edge_weights(rag, boundary, image)
        if self.linkage == "single":
            h = build_hierarchy(rag.graph, w)
        else:
            h = build_average_linkage_hierarchy(rag.graph, w, rag.frontier_lengths().astype(np.float64))
        return rag, h.ultrametric(w), h

    def with_overrides(self, scales=None, flip=None, linkage=None, max_pixels=None) -> "ExportedModel":
        """Itself with ``max_pixels`` set (``hiseg predict --max-pixels``); the scales, the flip
        and the linkage are the export's (ValueError: export the model again with them)."""
        given = [n for n, v in (("--scales", scales), ("--flip", flip), ("--linkage", linkage)) if v is not None]
        if given:
            raise ValueError(f"{' and '.join(given)}: an exported model's pipeline is fixed at export; export it "
                             "again with them (hiseg export MODEL --scales ... -o DIR)")
        if max_pixels is not None:  # checked where it is parsed (hiseg predict --max-pixels)
            self.max_pixels = int(max_pixels)
        return self

    def to_dict(self) -> dict:
        """The pipeline settings (the manifest's), as ``Pipeline.to_dict`` gives them."""
        return {**(self.manifest.get("pipeline") or {}), "scales": list(self.scales), "flip": self.flip,
                "max_pixels": self.max_pixels}


class ExportedSegmenter(Segmenter):
    """A :class:`~hiseg.segmentation.segmenter.Segmenter` of an exported folder: the same
    ``segment``, ``read``, results and files, with the network and the merge head run by
    onnxruntime and the rest in numpy, without torch. ``pipeline`` is the
    :class:`ExportedModel` (its settings and steps); ``model`` is None, ``device`` "cpu"."""

    def __init__(self, folder, threads: Optional[int] = None, max_pixels: Optional[int] = None):
        self.exported = ExportedModel(folder, threads, max_pixels)
        self.pipeline = self.exported
        self.model, self.device = None, "cpu"
        self.name = f"{self.exported.name} (exported, {self.exported.folder})"
        # what a run record names it by (hiseg.segmentation.record): the folder, its manifest's digest
        self.checkpoint, self.checkpoint_file = str(self.exported.folder), self.exported.folder / MANIFEST

    @classmethod
    def from_exported(cls, folder, threads: Optional[int] = None, **kwargs) -> "ExportedSegmenter":
        """The Segmenter of a folder written by ``hiseg export`` (see the class)."""
        return cls(folder, threads, **kwargs)

    def __repr__(self) -> str:
        return f"ExportedSegmenter({str(self.exported.folder)!r}, model={self.exported.name!r})"

    def __reduce__(self):  # a worker process opens the folder again (sessions are not picklable), one thread
        return (type(self), (str(self.exported.folder), 1, self.exported.max_pixels))

    def boundary_map(self, image: np.ndarray) -> np.ndarray:
        return self.exported.boundary_map(image)

    def network_map(self, img: np.ndarray, tile: int = 0) -> np.ndarray:
        """The boundary map of the working image (one pass: ``tile`` is the torch path's)."""
        pmap = self.exported.boundary_map(img)
        bad = int(np.count_nonzero(~np.isfinite(pmap)))
        if bad:
            raise ValueError(f"the exported network's boundary map has {bad} NaN or infinite values (of {pmap.size})")
        return pmap

    def worker_copy(self) -> "ExportedSegmenter":
        return self
