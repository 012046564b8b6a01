"""ONNX graphs that make onnxruntime allocate tens of GB (issue 52): each has an exported
network's signature (``image`` (1, 3, H, W) float -> ``boundary`` (1, H, W)), so that only the
graph check (:mod:`hiseg.export.guard`) or the allocation bound stands in the way. Shared by
``tests/export/test_export_guard.py`` and ``benchmarks/fault_probe.py``."""
from __future__ import annotations

import numpy as np

KINDS = ("constant_of_shape", "declared", "from_image")


def hostile_graph(kind: str, path) -> None:
    """Write the graph ``kind`` to ``path``: ``constant_of_shape`` a ConstantOfShape of
    100000 x 100000 floats (40 GB), ``declared`` an initializer declaring that shape while it
    holds one float, ``from_image`` a ConstantOfShape of (400 H) x (400 W), shaped at run time."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    image = helper.make_tensor_value_info("image", TensorProto.FLOAT, [1, 3, "height", "width"])
    boundary = helper.make_tensor_value_info("boundary", TensorProto.FLOAT, [1, "height", "width"])
    nodes = [helper.make_node("ReduceMean", ["image"], ["m"], axes=[1], keepdims=0)]
    inits = []
    if kind == "constant_of_shape":
        inits.append(numpy_helper.from_array(np.array([100000, 100000], np.int64), "shape"))
        nodes.append(helper.make_node("ConstantOfShape", ["shape"], ["big"]))
    elif kind == "declared":
        t = helper.make_tensor("big", TensorProto.FLOAT, [1], b"\0\0\0\0", raw=True)
        t.ClearField("dims")
        t.dims.extend([100000, 100000])
        inits.append(t)
    elif kind == "from_image":
        inits += [numpy_helper.from_array(np.array([2, 3], np.int64), "hw"),
                  numpy_helper.from_array(np.array(400, np.int64), "k")]
        nodes += [helper.make_node("Shape", ["image"], ["shape"]), helper.make_node("Gather", ["shape", "hw"], ["s"]),
                  helper.make_node("Mul", ["s", "k"], ["big_shape"]),
                  helper.make_node("ConstantOfShape", ["big_shape"], ["big"])]
    else:
        raise ValueError(kind)
    nodes += [helper.make_node("ReduceSum", ["big"], ["total"], keepdims=0),
              helper.make_node("Add", ["m", "total"], ["boundary"])]
    model = helper.make_model(helper.make_graph(nodes, "hostile", [image], [boundary], inits),
                              opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, str(path))
