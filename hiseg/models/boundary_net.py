"""Boundary networks: image batch -> boundary logits at full resolution.

Every network here (and in :mod:`hiseg.models.backbone_net`) is a
:class:`BoundaryNetBase`:

* input ``x``: float tensor ``(B, 3, H, W)``, RGB in ``[0, 1]``, any ``H, W >= 1``;
  ImageNet mean/std normalisation happens inside the model;
* output: ``(B, 1, H, W)`` boundary **logits** at the input resolution;
  ``torch.sigmoid(logits)`` is the probability that a pixel lies on a boundary
  (:meth:`BoundaryNetBase.boundary_probability` does both);
* ``forward(x, return_side_outputs=True)`` returns ``(fused, sides)`` where ``sides`` is
  the list of per-stage logits, each ``(B, 1, H, W)``, finest stage first (HED-style deep
  supervision: a loss may be put on every side output as well as on the fused one).

Sizes that are not multiples of the network's total stride ``m`` are handled by replicate
padding on the bottom/right (to a multiple of ``m``, and to at least ``2 m``) before the
network and cropping after: output pixel ``(i, j)`` is aligned with input pixel ``(i, j)``.

This module defines :class:`CompactBoundaryNet`, a small network (about 0.1 M
parameters at ``width=16``) meant to be trained from scratch on a CPU.
"""
from __future__ import annotations

from typing import Any, Sequence

import torch
import torch.nn.functional as F
from torch import nn

from .weights import builder_weights

__all__ = [
    "IMAGENET_MEAN",
    "IMAGENET_STD",
    "check_images",
    "BoundaryNetBase",
    "CompactBoundaryNet",
    "compact_boundary_net",
]

IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)


def check_images(x: torch.Tensor) -> None:
    """Raise a clear error unless ``x`` is a float ``(B, 3, H, W)`` tensor.

    Raises
    ------
    TypeError
        Not a tensor, or an integer dtype (divide uint8 images by 255 first).
    ValueError
        Wrong number of dimensions or of channels, or an empty spatial size.
    """
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"expected a torch.Tensor of images, got {type(x).__name__}")
    if not x.is_floating_point():
        raise TypeError(f"expected float images in [0, 1], got dtype {x.dtype} (for uint8 use x.float() / 255)")
    if x.ndim != 4 or x.shape[1] != 3:
        raise ValueError(f"expected images of shape (B, 3, H, W), got {tuple(x.shape)}")
    if x.shape[2] < 1 or x.shape[3] < 1:
        raise ValueError(f"expected a non-empty spatial size, got {tuple(x.shape)}")


class BoundaryNetBase(nn.Module):
    """Shared plumbing of the boundary networks: checks, normalisation, pad/crop, fusion.

    Subclasses set ``self.pad_multiple`` and implement :meth:`side_logits`, returning
    one ``(B, 1, h_s, w_s)`` logit map per stage for the padded, normalised input; this
    class upsamples them (bilinear) to the padded size, crops to the input size and fuses
    them with a 1x1 convolution (initialised to their mean).

    Parameters
    ----------
    num_sides : int
        Number of side outputs.
    pad_multiple : int
        Total stride of the network; inputs are padded to a multiple of it.
    normalize_input : bool
        Apply ImageNet mean/std normalisation inside the model (expects RGB in [0, 1]).

    Attributes
    ----------
    arch : str
        Registered builder name of the architecture (see :mod:`hiseg.models.weights`).
    arch_kwargs : dict
        Builder kwargs that rebuild this architecture (saved in checkpoints).
    """

    arch: str = ""

    def __init__(self, num_sides: int, pad_multiple: int, normalize_input: bool = True) -> None:
        super().__init__()
        self.num_sides = int(num_sides)
        self.pad_multiple = int(pad_multiple)
        self.normalize_input = bool(normalize_input)
        self.arch_kwargs: dict[str, Any] = {}
        # Non-persistent: the constants are not part of the state dict.
        self.register_buffer("input_mean", torch.tensor(IMAGENET_MEAN).view(1, 3, 1, 1), persistent=False)
        self.register_buffer("input_std", torch.tensor(IMAGENET_STD).view(1, 3, 1, 1), persistent=False)
        self.fuse = nn.Conv2d(self.num_sides, 1, kernel_size=1)
        nn.init.constant_(self.fuse.weight, 1.0 / self.num_sides)
        nn.init.zeros_(self.fuse.bias)

    def side_logits(self, x: torch.Tensor) -> list[torch.Tensor]:  # pragma: no cover - abstract
        """Per-stage logits for a normalised input padded to ``pad_multiple``."""
        raise NotImplementedError

    def forward(self, x: torch.Tensor, return_side_outputs: bool = False):
        """Boundary logits of an image batch.

        Parameters
        ----------
        x : Tensor, shape (B, 3, H, W), float
            RGB images in [0, 1] (any H, W).
        return_side_outputs : bool
            Also return the per-stage logits.

        Returns
        -------
        fused : Tensor, shape (B, 1, H, W)
            Boundary logits; ``sigmoid(fused)`` is a boundary probability.
        sides : list of Tensor, each (B, 1, H, W)
            Only when ``return_side_outputs``: the stage logits, finest first.

        Raises
        ------
        TypeError, ValueError
            See :func:`check_images`.
        """
        check_images(x)
        h, w = x.shape[-2:]
        if self.normalize_input:
            x = (x - self.input_mean.to(x.dtype)) / self.input_std.to(x.dtype)
        # Pad to a multiple of the total stride, and to at least two cells of the coarsest
        # stage (so that BatchNorm in training mode sees more than one value per channel
        # even for a single tiny image).
        m = self.pad_multiple
        ph, pw = max((-h) % m, 2 * m - h), max((-w) % m, 2 * m - w)
        if ph or pw:
            x = F.pad(x, (0, pw, 0, ph), mode="replicate")
        hp, wp = h + ph, w + pw
        sides = []
        for s in self.side_logits(x):
            if s.shape[-2:] != (hp, wp):
                s = F.interpolate(s, size=(hp, wp), mode="bilinear", align_corners=False)
            sides.append(s[..., :h, :w])
        fused = self.fuse(torch.cat(sides, dim=1))
        if return_side_outputs:
            return fused, sides
        return fused

    @torch.no_grad()
    def boundary_probability(self, x: torch.Tensor) -> torch.Tensor:
        """``sigmoid(self(x))`` without gradient: boundary probabilities (B, 1, H, W)."""
        return torch.sigmoid(self(x))


class _SeparableResidualBlock(nn.Module):
    """x -> relu(x + BN(pw(relu(BN(dw3x3_dilated(x))))))."""

    def __init__(self, channels: int, dilation: int = 1) -> None:
        super().__init__()
        self.dw = nn.Conv2d(channels, channels, 3, padding=dilation, dilation=dilation, groups=channels, bias=False)
        self.bn1 = nn.BatchNorm2d(channels)
        self.pw = nn.Conv2d(channels, channels, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(channels)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = F.relu(self.bn1(self.dw(x)), inplace=True)
        y = self.bn2(self.pw(y))
        if torch.is_grad_enabled():
            return F.relu(x + y, inplace=True)
        return F.relu(y.add_(x), inplace=True)  # without gradient: into the fresh y (the same bits, one buffer less)


class _Downsample(nn.Module):
    """Stride-2 depthwise 3x3 then pointwise c_in -> c_out (BN + ReLU after each)."""

    def __init__(self, c_in: int, c_out: int) -> None:
        super().__init__()
        self.dw = nn.Conv2d(c_in, c_in, 3, stride=2, padding=1, groups=c_in, bias=False)
        self.bn1 = nn.BatchNorm2d(c_in)
        self.pw = nn.Conv2d(c_in, c_out, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(c_out)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = F.relu(self.bn1(self.dw(x)), inplace=True)
        return F.relu(self.bn2(self.pw(x)), inplace=True)


class _SideHead(nn.Module):
    """Stage features -> one logit map: 1x1 conv to a few channels, ReLU, 3x3 conv to 1."""

    def __init__(self, c_in: int, hidden: int) -> None:
        super().__init__()
        self.reduce = nn.Conv2d(c_in, hidden, 1)
        self.out = nn.Conv2d(hidden, 1, 3, padding=1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.out(F.relu(self.reduce(x), inplace=True))


class CompactBoundaryNet(BoundaryNetBase):
    """Small HED-style boundary network of depthwise-separable residual blocks.

    Four stages at strides 1, 2, 4, 8 with ``width * (1, 2, 4, 8)`` channels (default
    ``16, 32, 64, 128``); each stage ends in a side head (1x1 conv, ReLU, 3x3 conv to one
    logit map), the side maps are upsampled to full resolution and fused by a 1x1
    convolution.  The stride-8 stage uses dilations ``(1, 2, 4)`` to widen the receptive
    field (about 170 px) at no extra cost.  Designed to train from scratch on a CPU.

    Parameters
    ----------
    width : int
        Channels of the first stage (default 16: about 0.1 M parameters).
    blocks : sequence of 4 ints
        Residual blocks per stage (default ``(1, 2, 2, 3)``).
    dilations : sequence of ints
        Dilations of the blocks of the last stage (cycled; default ``(1, 2, 4)``).
    side_channels : int
        Hidden channels of each side head (default 8).
    normalize_input : bool
        ImageNet normalisation inside the model (default True).

    Cost
    ----
    82 k parameters at ``width=16`` (grows as ``width**2``).  Forward: about 7.4 kFLOP
    per input pixel (0.75 GFLOP for 320 x 320); on a CPU it is memory-bound, the
    stride-1 stage dominating.  Measured: ``benchmarks/results/models.md``
    (``benchmarks/bench_models.py``).
    """

    arch = "compact_boundary_net"

    def __init__(
        self,
        width: int = 16,
        blocks: Sequence[int] = (1, 2, 2, 3),
        dilations: Sequence[int] = (1, 2, 4),
        side_channels: int = 8,
        normalize_input: bool = True,
    ) -> None:
        blocks = tuple(int(b) for b in blocks)
        dilations = tuple(int(d) for d in dilations)
        if len(blocks) != 4 or min(blocks) < 0:
            raise ValueError(f"blocks must be 4 non-negative ints, got {blocks}")
        if width < 1 or side_channels < 1 or not dilations or min(dilations) < 1:
            raise ValueError("width, side_channels and dilations must be positive")
        super().__init__(num_sides=4, pad_multiple=8, normalize_input=normalize_input)
        self.arch_kwargs = dict(
            width=int(width), blocks=list(blocks), dilations=list(dilations),
            side_channels=int(side_channels), normalize_input=bool(normalize_input),
        )
        ch = [width, 2 * width, 4 * width, 8 * width]
        self.stem = nn.Sequential(
            nn.Conv2d(3, ch[0], 3, padding=1, bias=False), nn.BatchNorm2d(ch[0]), nn.ReLU(inplace=True)
        )
        stages = []
        for i, (c, n) in enumerate(zip(ch, blocks)):
            layers: list[nn.Module] = [] if i == 0 else [_Downsample(ch[i - 1], c)]
            for j in range(n):
                d = dilations[j % len(dilations)] if i == 3 else 1
                layers.append(_SeparableResidualBlock(c, dilation=d))
            stages.append(nn.Sequential(*layers))
        self.stages = nn.ModuleList(stages)
        self.sides = nn.ModuleList(_SideHead(c, side_channels) for c in ch)

    def side_logits(self, x: torch.Tensor) -> list[torch.Tensor]:
        x = self.stem(x)
        out = []
        for stage, head in zip(self.stages, self.sides):
            x = stage(x)
            out.append(head(x))
        return out


def compact_boundary_net(weights: Any = None, *, width: int | None = None, **kwargs: Any) -> CompactBoundaryNet:
    """Build a :class:`CompactBoundaryNet`, optionally with trained weights.

    Parameters
    ----------
    weights : None, Weights, Checkpoint, str or os.PathLike
        ``None`` (random init), a :class:`~hiseg.models.weights.Weights` entry, a read
        :class:`~hiseg.models.weights.Checkpoint`, or a checkpoint path (plain state dict,
        Lightning checkpoint or :func:`~hiseg.models.weights.save_weights` file).
    width : int, optional
        First-stage channels; 16 unless the weights say otherwise.
    **kwargs
        Other :class:`CompactBoundaryNet` arguments (``blocks``, ``dilations``,
        ``side_channels``, ``normalize_input``).

    Returns
    -------
    CompactBoundaryNet
        On the CPU, in training mode.

    Raises
    ------
    FileNotFoundError, CheckpointError, ArchitectureMismatchError, ValueError
        See :func:`hiseg.models.weights.read_checkpoint` and
        :func:`~hiseg.models.weights.load_state_dict_checked`.
    """
    kw, load = builder_weights("compact_boundary_net", weights, dict(width=width, **kwargs))
    return load(CompactBoundaryNet(**kw))
