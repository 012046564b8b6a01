"""CNN boundary networks and their registry (torchvision-style builders).

Every model maps float RGB images ``(B, 3, H, W)`` in ``[0, 1]`` (any ``H, W``) to
boundary logits ``(B, 1, H, W)``; ``torch.sigmoid`` of them is a boundary probability.
``model(x, return_side_outputs=True)`` also returns the per-stage (HED) side logits.

>>> from hiseg.models import get_model, list_models
>>> list_models()
['compact_boundary_net', 'mean_probability_ensemble', 'pdc_boundary_net', 'resnet18_boundary_net', 'vgg16_boundary_net']
>>> net = get_model("compact_boundary_net")          # random init, ~0.08 M parameters
>>> pdc = get_model("pdc_boundary_net").eval()       # pixel-difference convolutions, ~0.6 M; .fold() for plain convs

Nothing here ever downloads: ImageNet backbones are read from the local torch hub cache
only (see :mod:`hiseg.models.backbone_net`); checkpoints are read with
``weights_only=True`` (see :mod:`hiseg.models.weights`).
"""
from ..core._lazy import lazy_names

#: name -> the module of this package that defines it, imported when the name is first used:
#: ``import hiseg.models.weights`` (the shipped models' names) costs no torch
_WHERE = {
    **{n: "backbone_net" for n in ("BACKBONES", "BackboneBoundaryNet", "PretrainedWeightsNotFoundError",
                                   "pretrained_backbone_path", "resnet18_boundary_net", "vgg16_boundary_net")},
    **{n: "boundary_net" for n in ("BoundaryNetBase", "CompactBoundaryNet", "compact_boundary_net")},
    **{n: "pdc_net" for n in ("PDCBoundaryNet", "pdc_boundary_net")},
    **{n: "weights" for n in ("ArchitectureMismatchError", "Checkpoint", "CheckpointError", "Weights", "WeightsEntry",
                              "get_model", "list_models", "load_checkpoint_file", "load_model", "load_weights",
                              "read_checkpoint", "register_model", "save_weights")},
}

__all__ = [
    "BoundaryNetBase", "CompactBoundaryNet", "compact_boundary_net", "PDCBoundaryNet", "pdc_boundary_net",
    "BackboneBoundaryNet", "BACKBONES",
    "vgg16_boundary_net", "resnet18_boundary_net", "pretrained_backbone_path", "PretrainedWeightsNotFoundError",
    "Weights", "WeightsEntry", "Checkpoint", "CheckpointError", "ArchitectureMismatchError", "get_model", "list_models",
    "register_model", "load_checkpoint_file", "read_checkpoint", "load_weights", "save_weights", "load_model",
]

__getattr__, __dir__ = lazy_names(__name__, _WHERE)
