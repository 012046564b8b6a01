"""Deployment: a trained hierarchy maker as ONNX files (:mod:`hiseg.export.onnx`, ``hiseg
export``), the folder's manifest (:mod:`hiseg.export.manifest`), and the onnxruntime backend
that runs such a folder's network without torch (:mod:`hiseg.export.runtime`), one of the
:class:`hiseg.Segmenter`'s backends (``Segmenter.from_checkpoint(DIR)``, ``hiseg predict
--checkpoint DIR``). The chain after the network is not here: it is the pipeline's, the same for
every backend (:meth:`hiseg.segmentation.Pipeline.hierarchy_of_map`).

Nothing is imported here: ``import hiseg.export.runtime`` costs no torch.
"""
