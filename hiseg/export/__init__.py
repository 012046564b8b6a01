"""Deployment: a trained hierarchy maker as ONNX files (:mod:`hiseg.export.onnx`, ``hiseg
export``), the folder's manifest (:mod:`hiseg.export.manifest`) and its inference with
onnxruntime and numpy, without torch (:mod:`hiseg.export.runtime`, its edge features
:mod:`hiseg.export.features`,
``Segmenter.from_exported``, ``hiseg predict --checkpoint DIR``).

Nothing is imported here: ``import hiseg.export.runtime`` costs no torch.
"""
