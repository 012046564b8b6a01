"""``hiseg export``: a trained hierarchy maker written as ONNX files and a manifest.

:func:`export_model` loads a shipped model (by name) or a checkpoint, folds its BatchNorm
layers into the convolutions (:func:`hiseg.models.fold.fold_batchnorm`) and writes, into one
folder, together (:class:`hiseg.io.AtomicFiles`: an error leaves none of them):

* ``boundary.onnx``: image ``(1, 3, H, W)`` float32 in [0, 1], H and W dynamic ->
  boundary probability ``(1, H, W)``: the pipeline's :meth:`~hiseg.segmentation.Pipeline.maps`
  (every scale, bilinear there and back, flips, an ensemble's mean), opset
  :data:`OPSET` (``Resize`` with half-pixel coordinates, as torch's bilinear);
* ``merge_head.onnx`` (a learned merging only): standardised MLP, edge features
  ``(E, F)`` float64 -> edge weights ``(E,)``;
* ``manifest.json`` (:mod:`hiseg.export.manifest`): the settings, versions, checksums.

Before writing, each graph is run with onnxruntime on an image of another size than the
one it was traced at and compared with the folded torch network (max abs difference at most
:data:`CHECK_ATOL`): a graph that does not reproduce the network is never written.
"""
from __future__ import annotations

import io
import json
import warnings
from pathlib import Path

import numpy as np
import torch

from .. import __version__
from ..io import AtomicFiles
from .manifest import FORMAT, FORMAT_VERSION, MANIFEST, ExportError, read_manifest, sha256_bytes, sha256_file

__all__ = ["export_model", "check_destination", "EXPORT_FILES", "OPSET", "CHECK_ATOL", "min_side"]

#: ONNX opset of the graphs: 17 has ``Resize`` with ``half_pixel`` coordinates and the
#: ``scales`` input (torch's ``F.interpolate(..., align_corners=False)``) and is read by
#: onnxruntime >= 1.12.
OPSET = 17
#: Largest |exported - torch| accepted by the check before writing (probabilities).
CHECK_ATOL = 1e-4


def min_side(pipeline, pad_multiple: int) -> int:
    """The smallest image side the exported network graph computes exactly as torch: every
    scaled side at least two cells of the network's stride (below, torch pads more than the
    traced graph does)."""
    return int(np.ceil(2 * pad_multiple / min(pipeline.scales)))


class _Maps(torch.nn.Module):
    """The pipeline's boundary map of one image as one module (what is traced)."""

    def __init__(self, net, pipeline):
        super().__init__()
        self.net, self.pipeline = net, pipeline

    def forward(self, image):
        return self.pipeline.maps(self.net, image)


def _onnx_bytes(module, args, input_names, output_names, dynamic_axes) -> bytes:
    buf = io.BytesIO()
    with warnings.catch_warnings():  # the tracer's notes on shape arithmetic: checked by running the graph
        warnings.simplefilter("ignore")
        torch.onnx.export(module, args, buf, input_names=input_names, output_names=output_names,
                          dynamic_axes=dynamic_axes, opset_version=OPSET, dynamo=False, do_constant_folding=True)
    return buf.getvalue()


def _session(data: bytes):
    try:
        import onnxruntime as ort
    except ImportError:
        raise ExportError('hiseg export checks the graphs with onnxruntime, which is not installed: '
                          'pip install onnxruntime') from None
    so = ort.SessionOptions()
    so.log_severity_level = 3
    return ort.InferenceSession(data, so, providers=["CPUExecutionProvider"])


def _load(spec, overrides=None):
    """The Segmenter (BatchNorm folded) of a shipped model's name or a checkpoint, its
    pipeline's settings overridden by ``overrides``; ExportError for a checkpoint that holds
    no boundary network."""
    from ..models.weights import CheckpointError
    from ..segmentation.segmenter import Segmenter

    try:
        seg = Segmenter(spec, device="cpu", backend="torch")  # BatchNorm folded at load
    except CheckpointError as e:
        raise ExportError(f"cannot export {spec}: {e}") from None
    if seg.model is None:
        raise ExportError("the classical path has no network to export")
    seg.pipeline = seg.pipeline.with_overrides(**(overrides or {}))
    with torch.inference_mode():
        try:
            out = seg.model(torch.rand(1, 3, 40, 48))
        except Exception as e:  # noqa: BLE001 - any failure: not a network of images to maps
            raise ExportError(f"cannot export {spec}: it is not a boundary model (images (B, 3, H, W) -> logits "
                              f"(B, 1, H, W)); its forward pass failed: {type(e).__name__}: {e}") from None
    if not isinstance(out, torch.Tensor) or tuple(out.shape) != (1, 1, 40, 48):
        raise ExportError(f"cannot export {spec}: it is not a boundary model (images (B, 3, H, W) -> logits "
                          f"(B, 1, H, W)); it returned {getattr(out, 'shape', type(out).__name__)}")
    return seg


def _source(spec) -> dict:
    """The checkpoint file an export was made from, by name and sha256: a shipped model's exported
    form is run only beside the very file it was made from (:func:`hiseg.segmentation.backends.shipped_export`)."""
    from ..models.weights import Weights

    path = Path(Weights.resolve(spec))
    return {"file": path.name, "sha256": sha256_file(path)}


def _network_graph(seg) -> tuple[bytes, dict]:
    pipeline = seg.pipeline
    pad = int(getattr(seg.model, "pad_multiple", 0) or max((getattr(m, "pad_multiple", 1)
                                                              for m in seg.model.modules()), default=1))
    lo = min_side(pipeline, pad)
    module = _Maps(seg.model, pipeline).eval()
    # traced at a size that is no multiple of the stride at any scale (so the padding is traced)
    trace = torch.rand(1, 3, lo + 2 * pad + 3, lo + 3 * pad + 5)
    data = _onnx_bytes(module, (trace,), ["image"], ["boundary"],
                       {"image": {2: "height", 3: "width"}, "boundary": {1: "height", 2: "width"}})
    sess = _session(data)
    rng = np.random.default_rng(0)
    for h, w in ((lo + 11, lo + 37), (97, 64)):  # other sizes than the traced one
        x = rng.random((1, 3, max(h, lo), max(w, lo)), dtype=np.float32)
        with torch.inference_mode():
            ref = module(torch.from_numpy(x)).numpy()
        got = sess.run(None, {"image": x})[0]
        diff = float(np.abs(got - ref).max()) if got.shape == ref.shape else float("inf")
        if not diff <= CHECK_ATOL:
            raise ExportError(f"the exported network graph differs from torch by {diff:.3g} (> {CHECK_ATOL}) on a "
                              f"{x.shape[2]}x{x.shape[3]} image: not written")
    info = {"input": "image", "output": "boundary", "scales": list(pipeline.scales), "flip": bool(pipeline.flip),
            "pad_multiple": pad, "min_side": lo, "batchnorm_folded": True,
            "fingerprint": getattr(seg.model, "hiseg_fingerprint", None)}
    return data, info


def _head_graph(head) -> tuple[bytes, dict]:
    if head.context:
        raise ExportError(f"this merge head reads the RAG (context={head.context}, message passing): its export "
                          "is not supported yet; export a model with a context-free head")
    head = head.eval()
    x = torch.rand(7, len(head.features), dtype=torch.float64)
    data = _onnx_bytes(head, (x,), ["features"], ["weights"], {"features": {0: "edges"}, "weights": {0: "edges"}})
    sess = _session(data)
    x = np.random.default_rng(1).normal(size=(23, len(head.features)))
    with torch.inference_mode():
        ref = head(torch.from_numpy(x)).numpy()
    diff = float(np.abs(sess.run(None, {"features": x})[0] - ref).max())
    if not diff <= 1e-12:
        raise ExportError(f"the exported merge head differs from torch by {diff:.3g}: not written")
    info = {"input": "features", "output": "weights", "features": list(head.features), "output_kind": head.output,
            "network": head.network}
    return data, info


#: The files an export writes (the merge head's only for a model with one).
EXPORT_FILES = ("boundary.onnx", "merge_head.onnx", MANIFEST)


def check_destination(out: Path, overwrite: bool) -> None:
    """Refuse, in one line and before anything is exported, a destination the export could not
    write: a dangling symbolic link, a path that exists and is not a folder, a folder holding
    an export's file (without ``overwrite``: FileExistsError naming it), a folder that cannot be
    created or written (a read-only parent, ``/proc``: a probe file is made there and removed)."""
    import os
    import tempfile

    if out.is_symlink() and not out.exists():
        raise ExportError(f"{out} is a symbolic link to {os.readlink(out)}, which does not exist: give a folder")
    if out.exists() and not out.is_dir():
        raise ExportError(f"{out} exists and is not a folder")
    if not overwrite:
        there = [n for n in EXPORT_FILES if os.path.lexists(out / n)]
        if there:
            raise FileExistsError(f"{out / there[0]} exists: remove it or pass --overwrite")
    base = out
    while not base.exists() and base != base.parent:
        base = base.parent
    if not base.is_dir():
        raise ExportError(f"cannot make {out}: {base} is not a folder")
    try:
        fd, probe = tempfile.mkstemp(dir=base, prefix=".hiseg-export-probe-")
        os.close(fd)
        os.unlink(probe)
    except OSError as e:
        raise ExportError(f"cannot write {out}: {base} is not writable ({e.strerror or e})") from None


def export_model(spec, out_dir, overwrite: bool = False, **overrides) -> dict:
    """Export a shipped model's name or a checkpoint (module docstring) into ``out_dir``;
    returns the manifest. ``overrides``: pipeline settings over the model's (``scales``,
    ``flip``, ``linkage``; None: the model's). ``overwrite=False``: refuses (FileExistsError naming it) when a file
    of the export is there already, before anything is written. ExportError (one line) for a
    checkpoint without a boundary network, a graph that does not reproduce it, a merge head
    that cannot be exported; FileNotFoundError, CheckpointError as loading a model raises."""
    out = Path(out_dir)
    check_destination(out, overwrite)  # before the model is loaded and traced (seconds: predict_deploy.md)
    seg = _load(spec, overrides)
    if seg.pipeline.linkage not in ("average", "single"):
        raise ExportError(f"cannot export {spec}: linkage {seg.pipeline.linkage!r} (a fit in torch) does not run "
                          "from an exported folder; use --linkage average or single")
    head = seg.pipeline.head
    graphs = {"boundary.onnx": _network_graph(seg)}
    if head is not None:
        graphs["merge_head.onnx"] = _head_graph(head)
    pipeline = seg.pipeline.to_dict()
    pipeline.pop("merge_head", None)
    manifest = {"format": FORMAT, "format_version": FORMAT_VERSION, "hiseg_version": __version__,
                "model": seg.name, "opset": OPSET,
                "network": {"file": "boundary.onnx", **graphs["boundary.onnx"][1]},
                "merge_head": ({"file": "merge_head.onnx", **graphs["merge_head.onnx"][1]} if head is not None
                               else None),
                "pipeline": pipeline,
                "checkpoint": _source(spec),
                "files": {n: sha256_bytes(g[0]) for n, g in graphs.items()}}
    out.mkdir(parents=True, exist_ok=True)
    with AtomicFiles(overwrite) as files:
        for n, (data, _) in graphs.items():
            files.write(out / n, lambda tmp, data=data: Path(tmp).write_bytes(data))
        text = json.dumps(manifest, indent=1) + "\n"
        files.write(out / MANIFEST, lambda tmp: Path(tmp).write_text(text, encoding="utf-8"))
        files.commit()
    read_manifest(out)  # what was written reads back
    return manifest
