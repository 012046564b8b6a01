"""CNN boundary networks and their registry (torchvision-style builders).

Every model maps float RGB images ``(B, 3, H, W)`` in ``[0, 1]`` (any ``H, W``) to
boundary logits ``(B, 1, H, W)``; ``torch.sigmoid`` of them is a boundary probability.
``model(x, return_side_outputs=True)`` also returns the per-stage (HED) side logits.

>>> from hiseg.models import get_model, list_models
>>> list_models()
['compact_boundary_net', 'resnet18_boundary_net', 'vgg16_boundary_net']
>>> net = get_model("compact_boundary_net")          # random init, ~0.08 M parameters

Nothing here ever downloads: ImageNet backbones are read from the local torch hub cache
only (see :mod:`hiseg.models.backbone_net`); checkpoints are read with
``weights_only=True`` (see :mod:`hiseg.models.weights`).
"""
from .backbone_net import (
    BACKBONES,
    BackboneBoundaryNet,
    PretrainedWeightsNotFoundError,
    pretrained_backbone_path,
    resnet18_boundary_net,
    vgg16_boundary_net,
)
from .boundary_net import BoundaryNetBase, CompactBoundaryNet, compact_boundary_net
from .weights import (
    ArchitectureMismatchError,
    CheckpointError,
    ModelWeights,
    extract_state_dict,
    get_model,
    get_model_builder,
    get_weights,
    list_models,
    list_weights,
    load_checkpoint_file,
    load_model,
    load_state_dict_checked,
    load_weights,
    models_dir,
    register_model,
    register_weights,
    save_weights,
)

__all__ = [
    "BoundaryNetBase",
    "CompactBoundaryNet",
    "compact_boundary_net",
    "BackboneBoundaryNet",
    "BACKBONES",
    "vgg16_boundary_net",
    "resnet18_boundary_net",
    "pretrained_backbone_path",
    "PretrainedWeightsNotFoundError",
    "ModelWeights",
    "CheckpointError",
    "ArchitectureMismatchError",
    "get_model",
    "get_model_builder",
    "list_models",
    "register_model",
    "get_weights",
    "list_weights",
    "register_weights",
    "load_checkpoint_file",
    "extract_state_dict",
    "load_state_dict_checked",
    "load_weights",
    "save_weights",
    "load_model",
    "models_dir",
]
