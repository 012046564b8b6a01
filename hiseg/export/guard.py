"""An exported graph checked before onnxruntime opens it: an edited ``.onnx`` whose manifest was
re-hashed passes the checksums, and onnxruntime allocates what the graph declares (a
``ConstantOfShape`` of 100000 x 100000 floats is 40 GB, at load by constant folding or at the
first image). :func:`check_graph` reads the graph with ``onnx`` (no session, nothing computed)
and refuses, in one line (ExportError), a tensor stored outside the file, a tensor declaring
more elements than it holds, a sparse tensor whose dense form is too large, and any tensor whose
shape, inferred for a probe input (every dynamic dimension :data:`PROBE_SIDE`), holds more than
:data:`MAX_ELEMENTS_PER_INPUT` times the input's elements (and more than :data:`MIN_BUDGET`).
The shipped graphs' largest tensor is 1x the input's (the image itself) where shapes are known.
What only the image shapes at run time, :func:`bound_allocations` bounds: onnxruntime then
fails the allocation instead of taking the machine's memory.
"""
from __future__ import annotations

from pathlib import Path

from .manifest import ExportError

__all__ = ["check_graph", "bound_allocations", "memory_bound", "PROBE_SIDE", "MAX_ELEMENTS_PER_INPUT", "MIN_BUDGET"]

#: Each dynamic dimension of an input (image height and width, a head's edges) for the shape check.
PROBE_SIDE = 256
#: The most elements one tensor may hold, in multiples of the probe input's elements.
MAX_ELEMENTS_PER_INPUT = 1024
#: ... and never less than this many (a small input's constants: 2^26, 256 MB of float32).
MIN_BUDGET = 1 << 26


def _elements(dims) -> int:
    n = 1
    for d in dims:
        n *= max(int(d), 0)
    return n


def _stored(tensor) -> int:
    """The number of elements ``tensor`` (a TensorProto) holds in the file."""
    from onnx import helper

    if tensor.HasField("raw_data"):
        size = helper.tensor_dtype_to_np_dtype(tensor.data_type).itemsize if tensor.data_type else 1
        return len(tensor.raw_data) // max(size, 1)
    return max(len(tensor.float_data), len(tensor.int32_data), len(tensor.string_data), len(tensor.int64_data),
               len(tensor.double_data), len(tensor.uint64_data))


def _tensors(graph):
    """(where, TensorProto or SparseTensorProto) of every constant of ``graph`` and its subgraphs."""
    for t in graph.initializer:
        yield f"initializer {t.name!r}", t
    for t in graph.sparse_initializer:
        yield f"sparse initializer {t.values.name!r}", t
    for node in graph.node:
        for a in node.attribute:
            if a.HasField("t"):
                yield f"node {node.name or node.op_type!r}'s {a.name}", a.t
            if a.HasField("sparse_tensor"):
                yield f"node {node.name or node.op_type!r}'s {a.name}", a.sparse_tensor
            for t in a.tensors:
                yield f"node {node.name or node.op_type!r}'s {a.name}", t
            if a.HasField("g"):
                yield from _tensors(a.g)
            for g in a.graphs:
                yield from _tensors(g)


def check_graph(path, where: str = "exported model") -> None:
    """ExportError (one line naming ``where``, the file and the tensor) when the ONNX graph at
    ``path`` would make onnxruntime allocate more than the graph's budget (module docstring);
    None when it passes. Reads the file once (protobuf), infers shapes once: well under a second
    for the shipped graphs. Needs the ``onnx`` package (``pip install "hiseg[onnx]"``): without
    it, ExportError saying so."""
    try:
        import onnx
        from onnx import TensorProto, shape_inference
    except ImportError:
        raise ExportError(f'{where}: checking an exported graph needs onnx: pip install "hiseg[onnx]"') from None
    path = Path(path)
    name = f"{where}: {path.name}"
    try:
        model = onnx.load(str(path), load_external_data=False)
    except Exception as e:  # noqa: BLE001 - protobuf's DecodeError and onnx's own
        raise ExportError(f"{name} is not an ONNX graph ({type(e).__name__}); export the model again") from None
    graph = model.graph
    inputs = {i.name for i in graph.initializer}
    probe = 1
    for inp in graph.input:
        if inp.name in inputs or not inp.type.HasField("tensor_type"):
            continue
        dims = inp.type.tensor_type.shape.dim
        for d in dims:
            if not d.HasField("dim_value") or d.dim_value <= 0:
                d.Clear()
                d.dim_value = PROBE_SIDE
        probe = max(probe, _elements(d.dim_value for d in dims))
    budget = max(MIN_BUDGET, MAX_ELEMENTS_PER_INPUT * probe)
    refuse = (f"; refused before onnxruntime allocates it (over {budget:,} elements for a "
              f"{PROBE_SIDE}-pixel probe): an edited graph? export the model again")
    for what, t in _tensors(graph):
        if isinstance(t, onnx.SparseTensorProto):
            if _elements(t.dims) > budget:
                raise ExportError(f"{name}: {what} is a sparse tensor of dense shape {list(t.dims)}" + refuse)
            continue
        if t.data_location == TensorProto.EXTERNAL or t.external_data:
            raise ExportError(f"{name}: {what} is stored outside the file (external data): an exported graph holds "
                              "its tensors; export the model again")
        declared = _elements(t.dims)
        if declared > budget:
            raise ExportError(f"{name}: {what} declares shape {list(t.dims)}" + refuse)
        if t.data_type != TensorProto.STRING and declared > _stored(t):
            raise ExportError(f"{name}: {what} declares shape {list(t.dims)} ({declared:,} elements) but holds "
                              f"{_stored(t):,}: an edited graph; export the model again")
    try:
        inferred = shape_inference.infer_shapes(model, data_prop=True)
    except Exception as e:  # noqa: BLE001 - onnx's InferenceError and checker errors
        raise ExportError(f"{name}: its shapes cannot be inferred ({str(e).splitlines()[0][:200]}): an edited "
                          "graph? export the model again") from None
    for vi in [*inferred.graph.value_info, *inferred.graph.output]:
        tt = vi.type.tensor_type
        if not tt.HasField("shape") or not all(d.HasField("dim_value") for d in tt.shape.dim):
            continue  # a shape known only at run time (the image's)
        shape = [d.dim_value for d in tt.shape.dim]
        if _elements(shape) > budget:
            raise ExportError(f"{name}: tensor {vi.name!r} would have shape {shape}" + refuse)


#: The bound :func:`bound_allocations` puts on onnxruntime's CPU memory: half the machine's.
_REGISTERED = {"max_bytes": None}


def memory_bound() -> int:
    """Half this machine's physical memory, in bytes (the default of :func:`bound_allocations`)."""
    import os

    try:
        return int(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")) // 2
    except (ValueError, OSError, AttributeError):  # pragma: no cover - not POSIX
        return 8 << 30


def bound_allocations(ort, options, max_bytes=None) -> int:
    """Make the sessions opened with the SessionOptions ``options`` allocate from one CPU arena
    of at most ``max_bytes`` (default :func:`memory_bound`), registered once per process: a
    tensor the static check (:func:`check_graph`) could not size, one shaped by the image at
    run time, then fails in onnxruntime ("Available memory of ... is smaller than requested
    bytes") instead of taking the machine's memory. Returns the bound in force (the first
    registration's)."""
    if _REGISTERED["max_bytes"] is None:
        bound = int(max_bytes or memory_bound())
        info = ort.OrtMemoryInfo("Cpu", ort.OrtAllocatorType.ORT_ARENA_ALLOCATOR, 0, ort.OrtMemType.DEFAULT)
        ort.create_and_register_allocator(info, ort.OrtArenaCfg(bound, -1, -1, -1))
        _REGISTERED["max_bytes"] = bound
    options.add_session_config_entry("session.use_env_allocators", "1")
    return _REGISTERED["max_bytes"]
