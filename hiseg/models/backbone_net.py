"""HED-style boundary networks on torchvision backbones (VGG16, ResNet18).

Side outputs are taken at the end of each backbone stage, reduced to one logit map by a
1x1 convolution, upsampled (bilinear) to the input size and fused by a 1x1 convolution;
input/output conventions are those of :class:`~hiseg.models.boundary_net.BoundaryNetBase`.

ImageNet-pretrained backbones are **never downloaded**.  ``pretrained_backbone=True``
reads torchvision's weight file from the local torch hub cache,
``<torch.hub.get_dir()>/checkpoints/<file name of the torchvision URL>`` (e.g.
``~/.cache/torch/hub/checkpoints/vgg16-397923af.pth``; ``$TORCH_HOME`` moves it), and
raises :class:`PretrainedWeightsNotFoundError` when it is absent.  To fill the cache, on a
machine with network access run::

    python -c "import torchvision; torchvision.models.vgg16(weights='IMAGENET1K_V1')"
    python -c "import torchvision; torchvision.models.resnet18(weights='IMAGENET1K_V1')"

and copy the files into the cache directory.  ``pretrained_backbone="auto"`` warns and
continues from random initialisation instead of raising.  The file's hash is not checked.
"""
from __future__ import annotations

import os
import urllib.parse
import warnings
from pathlib import Path
from typing import Any

import torch
from torch import nn

from .boundary_net import BoundaryNetBase
from .weights import CheckpointError, builder_weights, load_checkpoint_file

__all__ = [
    "PretrainedWeightsNotFoundError",
    "BackboneBoundaryNet",
    "BACKBONES",
    "pretrained_backbone_path",
    "vgg16_boundary_net",
    "resnet18_boundary_net",
]


class PretrainedWeightsNotFoundError(FileNotFoundError):
    """The ImageNet weight file of a backbone is not in the local torch hub cache."""


# name -> (torchvision weights enum entry, side channels, pad multiple)
BACKBONES: dict[str, dict[str, Any]] = {
    "vgg16": {
        "weights": "VGG16_Weights.IMAGENET1K_V1",
        "side_channels": (64, 128, 256, 512, 512),
        "pad_multiple": 16,
        "torchvision_builder": "vgg16",
    },
    "resnet18": {
        "weights": "ResNet18_Weights.IMAGENET1K_V1",
        "side_channels": (64, 64, 128, 256, 512),
        "pad_multiple": 32,
        "torchvision_builder": "resnet18",
    },
}


def _weights_enum(backbone: str):
    import torchvision  # lazy: importing torchvision costs ~2 s

    enum_name, member = BACKBONES[backbone]["weights"].split(".")
    return getattr(getattr(torchvision.models, enum_name), member)


def pretrained_backbone_path(backbone: str) -> Path:
    """Where the ImageNet weight file of ``backbone`` is expected (nothing is fetched).

    Returns
    -------
    pathlib.Path
        ``torch.hub.get_dir()/checkpoints/<basename of the torchvision weights URL>``.

    Raises
    ------
    ValueError
        Unknown backbone.
    """
    if backbone not in BACKBONES:
        raise ValueError(f"unknown backbone {backbone!r}; known: {sorted(BACKBONES)}")
    url = _weights_enum(backbone).url
    filename = os.path.basename(urllib.parse.urlparse(url).path)
    return Path(torch.hub.get_dir()) / "checkpoints" / filename


def _load_pretrained_backbone(backbone: str, module: nn.Module, mode: bool | str) -> bool:
    """Load ImageNet weights from the local cache into ``module``; True when loaded."""
    path = pretrained_backbone_path(backbone)
    if not path.is_file():
        tv = BACKBONES[backbone]["torchvision_builder"]
        msg = (
            f"ImageNet weights of the {backbone} backbone not found: expected the file {path} "
            f"(torch hub cache; set TORCH_HOME to move it). hiseg never downloads. On a machine "
            f"with network access run `python -c \"import torchvision; torchvision.models.{tv}"
            f"(weights='IMAGENET1K_V1')\"` and copy {path.name} from its "
            f"~/.cache/torch/hub/checkpoints/ into {path.parent}, or use "
            f"pretrained_backbone='auto' (random initialisation with a warning) or False."
        )
        if mode == "auto":
            warnings.warn(msg + " Continuing from random initialisation.", UserWarning, stacklevel=3)
            return False
        raise PretrainedWeightsNotFoundError(msg)
    sd = load_checkpoint_file(path, map_location="cpu")
    if not isinstance(sd, dict):
        raise CheckpointError(f"{path} does not hold a state dict")
    own = module.state_dict()
    # Keep the tensors the trimmed backbone uses (drops e.g. the classifier / fc).
    sd = {k: v for k, v in sd.items() if k in own}
    missing = [k for k in own if k not in sd]
    shapes = [k for k in sd if tuple(sd[k].shape) != tuple(own[k].shape)]
    if missing or shapes:
        raise CheckpointError(
            f"{path} is not a torchvision {backbone} ImageNet checkpoint: "
            f"missing {missing[:5]}, shape mismatches {shapes[:5]}"
        )
    module.load_state_dict(sd, strict=True)
    return True


class _VGG16Features(nn.Module):
    """torchvision's VGG16 conv layers up to conv5_3 (HED drops the fifth pool): the same
    ``features.<i>`` keys and initialisation as ``torchvision.models.vgg16().features``,
    without building its 120 M-parameter classifier."""

    # indices (in ``features``) of the ReLUs that end stages 1..5
    stage_ends = (3, 8, 15, 22, 29)

    def __init__(self) -> None:
        super().__init__()
        from torchvision.models import vgg  # lazy: importing torchvision costs ~2 s

        self.features = vgg.make_layers(vgg.cfgs["D"])[: self.stage_ends[-1] + 1]
        for m in self.features.modules():  # torchvision's VGG initialisation of its convs
            if isinstance(m, nn.Conv2d):
                nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")
                nn.init.zeros_(m.bias)

    def forward(self, x: torch.Tensor) -> list[torch.Tensor]:
        outs, start = [], 0
        for end in self.stage_ends:
            x = self.features[start:end + 1](x)
            outs.append(x)
            start = end + 1
        return outs


class _ResNetFeatures(nn.Module):
    """A torchvision ResNet without avgpool/fc, returning its five stage outputs."""

    def __init__(self, name: str) -> None:
        super().__init__()
        import torchvision  # lazy: importing torchvision costs ~2 s

        net = getattr(torchvision.models, name)(weights=None)  # weights=None: no I/O
        self.conv1, self.bn1, self.relu, self.maxpool = net.conv1, net.bn1, net.relu, net.maxpool
        self.layer1, self.layer2, self.layer3, self.layer4 = net.layer1, net.layer2, net.layer3, net.layer4

    def forward(self, x: torch.Tensor) -> list[torch.Tensor]:
        x0 = self.relu(self.bn1(self.conv1(x)))  # stride 2
        x1 = self.layer1(self.maxpool(x0))  # 4
        x2 = self.layer2(x1)  # 8
        x3 = self.layer3(x2)  # 16
        x4 = self.layer4(x3)  # 32
        return [x0, x1, x2, x3, x4]


class BackboneBoundaryNet(BoundaryNetBase):
    """HED on a torchvision backbone: one side output per stage, fused by a 1x1 conv.

    ``vgg16``: sides at conv1_2 .. conv5_3 (strides 1, 2, 4, 8, 16), as in HED.
    ``resnet18``: sides at the stem and layer1..layer4 (strides 2, 4, 8, 16, 32), plus,
    when ``full_resolution_side`` (default for resnet18), a light stride-1 branch (two
    3x3 convs with 16 channels on the image) so that the fused map can localise
    boundaries to the pixel.

    Parameters
    ----------
    backbone : {"vgg16", "resnet18"}
    pretrained_backbone : bool or "auto"
        Load torchvision's ImageNet weights from the local hub cache (never
        downloaded); ``"auto"`` falls back to random init with a warning.
    full_resolution_side : bool, optional
        Add the stride-1 branch; default: True for resnet18, False for vgg16 (whose
        first stage is already at stride 1).
    frozen_batchnorm : bool
        Keep the backbone's BatchNorm layers in eval mode (running statistics are used
        and not updated) even in ``train()``; advisable with pretrained weights and
        batches of one or two images.
    normalize_input : bool
        ImageNet normalisation inside the model (default True).

    Raises
    ------
    ValueError
        Unknown backbone or ``pretrained_backbone`` value.
    PretrainedWeightsNotFoundError
        ``pretrained_backbone=True`` and the weight file is not in the local cache.
    CheckpointError
        The cached file is not a torchvision checkpoint of this backbone.
    """

    def __init__(
        self,
        backbone: str = "vgg16",
        *,
        pretrained_backbone: bool | str = False,
        full_resolution_side: bool | None = None,
        frozen_batchnorm: bool = False,
        normalize_input: bool = True,
    ) -> None:
        if backbone not in BACKBONES:
            raise ValueError(f"unknown backbone {backbone!r}; known: {sorted(BACKBONES)}")
        if pretrained_backbone not in (True, False, "auto"):
            raise ValueError(f"pretrained_backbone must be True, False or 'auto', got {pretrained_backbone!r}")
        spec = BACKBONES[backbone]
        if full_resolution_side is None:
            full_resolution_side = backbone != "vgg16"
        n_sides = len(spec["side_channels"]) + int(full_resolution_side)
        super().__init__(num_sides=n_sides, pad_multiple=spec["pad_multiple"], normalize_input=normalize_input)
        self.arch = f"{backbone}_boundary_net"
        self.backbone_name = backbone
        self.frozen_batchnorm = bool(frozen_batchnorm)
        self.arch_kwargs = dict(
            full_resolution_side=bool(full_resolution_side),
            frozen_batchnorm=self.frozen_batchnorm,
            normalize_input=bool(normalize_input),
        )
        self.backbone = _VGG16Features() if backbone == "vgg16" else _ResNetFeatures(backbone)
        self.full_res = None
        if full_resolution_side:
            self.full_res = nn.Sequential(
                nn.Conv2d(3, 16, 3, padding=1, bias=False), nn.BatchNorm2d(16), nn.ReLU(inplace=True),
                nn.Conv2d(16, 16, 3, padding=1, bias=False), nn.BatchNorm2d(16), nn.ReLU(inplace=True),
                nn.Conv2d(16, 1, 1),
            )
        self.sides = nn.ModuleList(nn.Conv2d(c, 1, 1) for c in spec["side_channels"])
        for s in self.sides:
            nn.init.normal_(s.weight, std=0.01)
            nn.init.zeros_(s.bias)
        self.pretrained_loaded = False
        if pretrained_backbone:
            self.pretrained_loaded = _load_pretrained_backbone(backbone, self.backbone, pretrained_backbone)
        self.train()

    def train(self, mode: bool = True) -> "BackboneBoundaryNet":
        """As :meth:`nn.Module.train`; backbone BatchNorms stay in eval if frozen."""
        super().train(mode)
        if mode and getattr(self, "frozen_batchnorm", False):
            for m in self.backbone.modules():
                if isinstance(m, nn.modules.batchnorm._BatchNorm):
                    m.eval()
        return self

    def side_logits(self, x: torch.Tensor) -> list[torch.Tensor]:
        feats = self.backbone(x)
        out = [head(f) for head, f in zip(self.sides, feats)]
        if self.full_res is not None:
            out.insert(0, self.full_res(x))
        return out


def _build(backbone: str, weights: Any, pretrained_backbone: bool | str, kwargs: dict[str, Any]) -> BackboneBoundaryNet:
    kw, load = builder_weights(f"{backbone}_boundary_net", weights, kwargs)
    if weights is not None:
        pretrained_backbone = False  # trained weights overwrite the backbone anyway
    return load(BackboneBoundaryNet(backbone, pretrained_backbone=pretrained_backbone, **kw))


def vgg16_boundary_net(weights: Any = None, *, pretrained_backbone: bool | str = False, **kwargs: Any) -> BackboneBoundaryNet:
    """HED on VGG16: :class:`BackboneBoundaryNet` ``("vgg16")``.

    14.7 M parameters; forward about 612 kFLOP per input pixel (63 GFLOP at 320 x 320).

    Parameters
    ----------
    weights : None, Weights, Checkpoint, str or os.PathLike
        Trained weights of the whole network (see
        :func:`hiseg.models.weights.get_model`); when given, ``pretrained_backbone`` is
        ignored.
    pretrained_backbone : bool or "auto"
        ImageNet weights for the backbone from the local torch hub cache only.
    **kwargs
        ``full_resolution_side``, ``frozen_batchnorm``, ``normalize_input``.

    Returns
    -------
    BackboneBoundaryNet

    Raises
    ------
    PretrainedWeightsNotFoundError, FileNotFoundError, CheckpointError,
    ArchitectureMismatchError, ValueError
    """
    return _build("vgg16", weights, pretrained_backbone, kwargs)


def resnet18_boundary_net(weights: Any = None, *, pretrained_backbone: bool | str = False, **kwargs: Any) -> BackboneBoundaryNet:
    """HED-style net on ResNet18: :class:`BackboneBoundaryNet` ``("resnet18")``.

    11.2 M parameters; forward about 78 kFLOP per input pixel (8 GFLOP at 320 x 320).

    Same parameters, returns and raises as :func:`vgg16_boundary_net`.
    """
    return _build("resnet18", weights, pretrained_backbone, kwargs)
