"""A boundary network of pixel-difference convolutions, folded into plain ones for inference.

Pixel-difference convolutions (PDC; Su et al., "Pixel Difference Networks for Efficient Edge
Detection", ICCV 2021) weigh *differences* of pixels instead of pixels. Over the 3x3
neighbourhood of a pixel ``c``, with the 8 ring positions ``i = 0..7`` taken clockwise from
the top-left corner (offsets ``(-1,-1), (-1,0), (-1,1), (0,1), (1,1), (1,0), (1,-1), (0,-1)``):

* vanilla (``"cv"``): ``y = sum_{i in 3x3} w_i x_i`` (9 weights);
* central (``"cd"``): ``y = sum_i w_i (x_i - x_c)`` (8 weights: the centre's would multiply 0);
* angular (``"ad"``): ``y = sum_i w_i (x_i - x_{i+1})``, ``i + 1`` the next ring position
  clockwise (8 weights);
* radial (``"rd"``): over a 5x5 window, ``y = sum_i w_i (x_{c + 2 d_i} - x_{c + d_i})``, ``d_i``
  the ring offset ``i``: each inner-ring pixel against the outer-ring pixel in the same
  direction (8 weights).

Each is linear in ``x``, so it *is* a plain convolution with a kernel that is a linear function
of ``w`` (:func:`pdc_kernel`): ``"cd"`` puts ``w`` on the ring and ``-sum w`` at the centre,
``"ad"`` puts ``w_j - w_{j-1}`` at ring position ``j``, ``"rd"`` a 5x5 kernel with ``w`` on the
outer ring's directions and ``-w`` on the inner ring. Training runs that convolution (the
gradient reaches ``w`` through the linear map); after training, the kernel and the following
BatchNorm are *folded* into one plain convolution with a bias (:meth:`PDCBoundaryNet.fold`).
Checkpoints hold the trainable form (``w`` and BatchNorm); in eval mode every unit already
convolves with its folded kernel and bias, computed from the current weights at each call (a
few microseconds), so a loaded network costs what the plain network costs wherever it runs
(``hiseg predict``, an ensemble, validation). Zero padding, as for any convolution here: at the
image border ``x`` outside is 0 in every definition above.
"""
from __future__ import annotations

import copy
import functools
from typing import Any, Sequence

import torch
import torch.nn.functional as F
from torch import nn

from .boundary_net import BoundaryNetBase
from .weights import builder_weights

__all__ = ["PDC_KINDS", "RING", "pdc_kernel", "PixelDifferenceConv2d", "PDCBoundaryNet", "pdc_boundary_net"]

#: the pixel-difference kinds: vanilla, central, angular, radial
PDC_KINDS = ("cv", "cd", "ad", "rd")
#: the 8-neighbour ring, clockwise from the top-left corner: (row, column) offsets
RING = ((-1, -1), (-1, 0), (-1, 1), (0, 1), (1, 1), (1, 0), (1, -1), (0, -1))
_NUM_WEIGHTS = {"cv": 9, "cd": 8, "ad": 8, "rd": 8}


def _check_kind(kind: Any) -> str:
    if kind not in PDC_KINDS:
        raise ValueError(f"unknown pixel-difference kind {kind!r}; expected one of {PDC_KINDS}")
    return kind


def pdc_kernel(weight: torch.Tensor, kind: str) -> torch.Tensor:
    """The plain convolution kernel equal to a pixel-difference convolution.

    Parameters
    ----------
    weight : Tensor, shape (C_out, C_in_per_group, n)
        ``n = 9`` for ``"cv"`` (row-major 3x3), ``n = 8`` (the :data:`RING` order) otherwise.
    kind : {"cv", "cd", "ad", "rd"}

    Returns
    -------
    Tensor, shape (C_out, C_in_per_group, k, k)
        ``k = 5`` for ``"rd"``, else 3; a linear function of ``weight`` (differentiable), for
        ``F.conv2d`` (cross-correlation: kernel position ``(a, b)`` multiplies the pixel at
        offset ``(a - k // 2, b - k // 2)``). Cost: O(weight.numel()).

    Raises
    ------
    ValueError
        Unknown ``kind``, or ``weight`` not 3-D with the kind's number of weights.
    """
    _check_kind(kind)
    n = _NUM_WEIGHTS[kind]
    if not isinstance(weight, torch.Tensor) or weight.ndim != 3 or weight.shape[-1] != n:
        shape = tuple(weight.shape) if isinstance(weight, torch.Tensor) else type(weight).__name__
        raise ValueError(f"a {kind!r} pixel-difference weight must have shape (C_out, C_in, {n}), got {shape}")
    co, ci, _ = weight.shape
    if kind == "cv":
        return weight.reshape(co, ci, 3, 3)
    zero = weight.new_zeros(co, ci, 1)
    if kind == "rd":
        extended = torch.cat([-weight, weight, zero], -1)
    elif kind == "cd":
        extended = torch.cat([weight, -weight.sum(-1, keepdim=True), zero], -1)
    else:  # "ad": sum_i w_i (x_i - x_{i+1}) = sum_j x_j (w_j - w_{j-1})
        extended = torch.cat([weight - torch.roll(weight, 1, dims=-1), zero], -1)
    k = 5 if kind == "rd" else 3
    return extended.index_select(-1, _cell_index(kind, weight.device)).reshape(co, ci, k, k)


@functools.lru_cache(maxsize=None)
def _cell_index(kind: str, device: torch.device) -> torch.Tensor:
    """Where each of the k*k kernel cells reads :func:`pdc_kernel`'s extended weights (``[w, -sum(w), 0]``
    for "cd", ``[-w, w, 0]`` for "rd", ``[w - roll(w), 0]`` for "ad"; the last entry is the zero): made once
    per kind and device, so that a call copies no index to a GPU. One gather and its backward replace the
    ~10 views, the stack and their backward that each layer's kernel cost at every training step (2.2x less
    host time for pdc_boundary_net width 40, the same kernels and gradients bit for bit)."""
    n = _NUM_WEIGHTS[kind]
    k = 5 if kind == "rd" else 3
    c = k // 2
    cells = [{"rd": 2 * n, "cd": n + 1, "ad": n}[kind]] * (k * k)  # the zero
    for r, (dy, dx) in enumerate(RING):
        cells[(c + dy) * k + c + dx] = r
        if kind == "rd":
            cells[(c + 2 * dy) * k + c + 2 * dx] = n + r
    if kind == "cd":
        cells[c * k + c] = n
    with torch.inference_mode(False):  # made by an inference call, still usable by a training step's backward
        return torch.tensor(cells, dtype=torch.long, device=device)


class PixelDifferenceConv2d(nn.Module):
    """A pixel-difference convolution (see the module docstring), ``same`` padding (zeros).

    Parameters
    ----------
    in_channels, out_channels : int
    kind : {"cv", "cd", "ad", "rd"}
    stride : int
    groups : int
        ``in_channels`` for a depthwise convolution; must divide both channel counts.

    Attributes
    ----------
    weight : Parameter (out_channels, in_channels // groups, 9 or 8)
        The pixel-difference weights (:func:`pdc_kernel` maps them to a kernel).
    """

    def __init__(self, in_channels: int, out_channels: int, kind: str = "cd", stride: int = 1, groups: int = 1) -> None:
        super().__init__()
        self.kind = _check_kind(kind)
        if min(in_channels, out_channels, stride, groups) < 1 or in_channels % groups or out_channels % groups:
            raise ValueError(f"need positive channels, stride and groups with groups dividing both channel counts, "
                             f"got in={in_channels}, out={out_channels}, stride={stride}, groups={groups}")
        self.in_channels, self.out_channels = int(in_channels), int(out_channels)
        self.stride, self.groups = int(stride), int(groups)
        self.kernel_size = 5 if kind == "rd" else 3
        n = _NUM_WEIGHTS[kind]
        self.weight = nn.Parameter(torch.empty(out_channels, in_channels // groups, n))
        # He initialisation over the n weights of a unit's fan-in
        nn.init.normal_(self.weight, std=(2.0 / (n * in_channels // groups)) ** 0.5)

    def kernel(self) -> torch.Tensor:
        """The equivalent plain kernel (:func:`pdc_kernel`)."""
        return pdc_kernel(self.weight, self.kind)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.conv2d(x, self.kernel(), None, self.stride, self.kernel_size // 2, 1, self.groups)

    def extra_repr(self) -> str:
        return f"{self.in_channels}, {self.out_channels}, kind={self.kind!r}, stride={self.stride}, groups={self.groups}"


class _Unit(nn.Module):
    """A convolution (pixel-difference or plain) and an optional BatchNorm after it.

    Training: ``bn(conv(x))``. Eval (``fold_eval``, the default): one ``F.conv2d`` with the
    folded kernel and bias (:meth:`folded`), the same function of ``x``.
    """

    def __init__(self, conv: nn.Module, bn: bool) -> None:
        super().__init__()
        self.conv = conv
        self.bn = nn.BatchNorm2d(conv.out_channels) if bn else None
        self.fold_eval = True

    def _kernel(self) -> torch.Tensor:
        return self.conv.kernel() if isinstance(self.conv, PixelDifferenceConv2d) else self.conv.weight

    def folded(self) -> tuple[torch.Tensor, torch.Tensor | None]:
        """(kernel, bias) of the one plain convolution equal to this unit in eval mode."""
        k, b = self._kernel(), getattr(self.conv, "bias", None)
        if self.bn is None:
            return k, b
        scale = self.bn.weight / torch.sqrt(self.bn.running_var + self.bn.eps)
        shift = self.bn.bias - self.bn.running_mean * scale
        return k * scale.view(-1, 1, 1, 1), shift if b is None else b * scale + shift

    def plain(self) -> nn.Conv2d:
        """A ``nn.Conv2d`` holding :meth:`folded` (no gradient link to this unit)."""
        c = self.conv
        k, b = self.folded()
        conv = nn.Conv2d(c.in_channels, c.out_channels, k.shape[-1], stride=c.stride, padding=k.shape[-1] // 2,
                         groups=c.groups, bias=b is not None).to(device=k.device, dtype=k.dtype)
        with torch.no_grad():
            conv.weight.copy_(k)
            if b is not None:
                conv.bias.copy_(b)
        return conv

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.training or not self.fold_eval:
            y = self.conv(x)
            return y if self.bn is None else self.bn(y)
        k, b = self.folded()
        c = self.conv
        return F.conv2d(x, k, b, c.stride, k.shape[-1] // 2, 1, c.groups)


class _PDCBlock(nn.Module):
    """``pool(x) -> depthwise PDC -> ReLU -> 1x1 conv -> BN``, plus the (1x1-projected) input.

    ``stride=2`` max-pools the input first (2x2); the shortcut is a 1x1 convolution when the
    channel count changes, else the identity.
    """

    def __init__(self, c_in: int, c_out: int, kind: str, stride: int) -> None:
        super().__init__()
        self.stride = stride
        self.dw = _Unit(PixelDifferenceConv2d(c_in, c_in, kind, groups=c_in), bn=False)
        self.pw = _Unit(nn.Conv2d(c_in, c_out, 1, bias=False), bn=True)
        self.shortcut = nn.Conv2d(c_in, c_out, 1) if c_in != c_out else None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.stride > 1:
            x = F.max_pool2d(x, self.stride)
        # without gradient (inference, validation): the same arithmetic in place, on the fresh outputs of the
        # convolutions (bit for bit the same values, fewer allocations)
        inplace = not torch.is_grad_enabled()
        y = self.pw(F.relu(self.dw(x), inplace=inplace))
        s = x if self.shortcut is None else self.shortcut(x)
        return y.add_(s) if inplace else y + s


class _SideHead(nn.Module):
    """Stage features -> one logit map, multi-scale and attentive, at the stage's resolution.

    ``ReLU -> 1x1 conv (C -> M)``, then the sum of depthwise 3x3 convolutions at several
    dilations (a compact dilation module: context at 2 d + 1 pixels for each dilation d),
    then a spatial attention map ``sigmoid(3x3(ReLU(1x1(M -> 4))))`` multiplying it, then
    ``1x1 (M -> 1)``.
    """

    def __init__(self, c_in: int, hidden: int, dilations: Sequence[int]) -> None:
        super().__init__()
        self.reduce = nn.Conv2d(c_in, hidden, 1)
        self.dilated = nn.ModuleList(
            nn.Conv2d(hidden, hidden, 3, padding=d, dilation=d, groups=hidden, bias=False) for d in dilations)
        self.att_reduce = nn.Conv2d(hidden, 4, 1)
        self.att = nn.Conv2d(4, 1, 3, padding=1)
        nn.init.zeros_(self.att.bias)  # attention starts near sigmoid(0) = 1/2
        self.out = nn.Conv2d(hidden, 1, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.reduce(F.relu(x))
        inplace = not torch.is_grad_enabled()  # as _PDCBlock: the same values, in place without gradient
        acc = self.dilated[0](x)
        for conv in self.dilated[1:]:
            acc = acc.add_(conv(x)) if inplace else acc + conv(x)
        a = self.att(F.relu(self.att_reduce(acc), inplace=inplace))
        return self.out(acc.mul_(a.sigmoid_()) if inplace else acc * torch.sigmoid(a))


class PDCBoundaryNet(BoundaryNetBase):
    """HED-style boundary network of depthwise pixel-difference residual blocks.

    A stem (a full 3x3 PDC, 3 -> ``width``, with BatchNorm), then four stages at strides 1, 2,
    4, 8 with ``width * multipliers`` channels (default ``width * (1, 2, 4, 8)``: PiDiNet keeps
    the last stage at 4; 8 puts parameters where pixels are few, at about 1.4x the cost of
    ``(1, 2, 4, 4)`` for 2.2x the parameters) and ``blocks`` residual blocks each
    (:class:`_PDCBlock`: depthwise PDC, ReLU, 1x1 conv, BatchNorm, residual; a stage's first
    block max-pools 2x2). The PDC kinds cycle through ``kinds`` over the stem and the blocks,
    in order (default ``cd, ad, rd, cv``: each stage of 4 holds one of each). Each stage ends
    in a side head (:class:`_SideHead`: 1x1 reduction, depthwise dilated convolutions summed,
    spatial attention, 1x1 to a logit); the base class upsamples and fuses the four maps.

    Parameters
    ----------
    width : int
        Channels of the first stage (default 40: about 0.58 M parameters; grows as ``width**2``;
        16 gives 0.09 M, the CPU pilot's width).
    blocks : sequence of 4 ints
        Blocks per stage (default ``(3, 4, 4, 4)``).
    kinds : sequence of str
        The PDC kinds, cycled over the stem and the blocks (each of :data:`PDC_KINDS`).
    side_channels : int
        Hidden channels of each side head (default 16).
    dilations : sequence of ints
        Dilations of the side heads' depthwise convolutions (default ``(1, 3, 5, 7)``).
    multipliers : sequence of 4 ints
        Channels of each stage over ``width`` (default ``(1, 2, 4, 8)``).
    normalize_input : bool
        ImageNet normalisation inside the model (default True).

    Cost
    ----
    578,421 parameters at ``width=40`` (102,909 at 16). Eval mode runs the folded network (one
    plain convolution per unit, no BatchNorm; channels-last on a CPU), somewhat slower per image than
    ``compact_boundary_net`` in the shipped bsds500 shape (``benchmarks/results/predict_archs.md``);
    training costs more of that network's CPU per crop at equal parameters
    (``benchmarks/results/models.md``).

    Raises
    ------
    ValueError
        Bad ``blocks``, ``kinds``, ``width``, ``side_channels``, ``dilations`` or ``multipliers``.
    """

    arch = "pdc_boundary_net"

    def __init__(
        self,
        width: int = 40,
        blocks: Sequence[int] = (3, 4, 4, 4),
        kinds: Sequence[str] = ("cd", "ad", "rd", "cv"),
        side_channels: int = 16,
        dilations: Sequence[int] = (1, 3, 5, 7),
        multipliers: Sequence[int] = (1, 2, 4, 8),
        normalize_input: bool = True,
    ) -> None:
        # (the shape of compact_boundary_net's checks, with this network's own arguments and
        # bounds: blocks >= 1 here, >= 0 there; kept apart, `duplicates hiseg/` lists the pair)
        blocks = tuple(int(b) for b in blocks)
        multipliers = tuple(int(m) for m in multipliers)
        if len(multipliers) != 4 or min(multipliers) < 1:
            raise ValueError(f"multipliers must be 4 positive ints (channels per stage / width), got {multipliers}")
        if len(blocks) != 4 or min(blocks) < 1:
            raise ValueError(f"blocks must be 4 positive ints (blocks per stage), got {blocks}")
        if isinstance(kinds, str) or not kinds:
            raise ValueError(f"kinds must be a non-empty sequence of {PDC_KINDS}, got {kinds!r}")
        kinds = tuple(_check_kind(k) for k in kinds)
        dilations = tuple(int(d) for d in dilations)
        if int(width) < 1 or int(side_channels) < 1 or not dilations or min(dilations) < 1:
            raise ValueError(f"width, side_channels and dilations must be positive, got width={width}, "
                             f"side_channels={side_channels}, dilations={dilations}")
        super().__init__(num_sides=4, pad_multiple=8, normalize_input=normalize_input)
        width, side_channels = int(width), int(side_channels)
        self.arch_kwargs = dict(width=width, blocks=list(blocks), kinds=list(kinds), side_channels=side_channels,
                                dilations=list(dilations), multipliers=list(multipliers),
                                normalize_input=bool(normalize_input))
        self.folded_ = False
        ch = [m * width for m in multipliers]
        cycle = (kinds[i % len(kinds)] for i in range(1 + sum(blocks)))
        self.stem = _Unit(PixelDifferenceConv2d(3, ch[0], next(cycle)), bn=True)
        stages, c_prev = [], ch[0]
        for i, (c, n) in enumerate(zip(ch, blocks)):
            layers = []
            for j in range(n):
                layers.append(_PDCBlock(c_prev, c, next(cycle), stride=2 if (i > 0 and j == 0) else 1))
                c_prev = c
            stages.append(nn.Sequential(*layers))
        self.stages = nn.ModuleList(stages)
        self.sides = nn.ModuleList(_SideHead(c, side_channels, dilations) for c in ch)

    def side_logits(self, x: torch.Tensor) -> list[torch.Tensor]:
        if not self.training and x.device.type == "cpu":
            # channels-last: about 0.8x the time of the depthwise convolutions and pools on a CPU
            # (benchmarks/bench_predict.py --archs); the values are the same
            x = x.contiguous(memory_format=torch.channels_last)
        x = F.relu(self.stem(x))
        out = []
        for stage, head in zip(self.stages, self.sides):
            x = stage(x)
            out.append(head(x))
        return out

    def train(self, mode: bool = True) -> "PDCBoundaryNet":
        """As ``nn.Module.train``; RuntimeError for a folded network (it has no trainable form)."""
        if mode and self.folded_:
            raise RuntimeError("this PDCBoundaryNet is folded (inference only: plain convolutions, BatchNorm "
                               "merged); train the unfolded network and fold() it again")
        return super().train(mode)

    def set_fold_eval(self, flag: bool) -> "PDCBoundaryNet":
        """Whether eval mode convolves with the folded kernels (default True) or runs the
        trainable form (PDC kernel, then BatchNorm with its running statistics: the reference
        the fold is tested against). Returns ``self``."""
        for m in self.modules():
            if isinstance(m, _Unit):
                m.fold_eval = bool(flag)
        return self

    @torch.no_grad()
    def fold(self) -> "PDCBoundaryNet":
        """A copy for inference, in eval mode, made of plain convolutions only.

        Every PDC unit and its BatchNorm become one ``nn.Conv2d`` with a bias (3x3, or 5x5 for
        the radial kind); the output equals this network's in eval mode up to rounding. The
        copy has ``folded_ = True``, cannot be put back in training mode, and its state dict is
        not a checkpoint of this architecture (save the unfolded network). Cost: O(parameters).
        """
        out = copy.deepcopy(self).eval()
        for parent in list(out.modules()):
            for name, child in list(parent.named_children()):
                if isinstance(child, _Unit):
                    setattr(parent, name, child.plain())
        out.folded_ = True
        return out


def pdc_boundary_net(weights: Any = None, *, width: int | None = None, **kwargs: Any) -> PDCBoundaryNet:
    """Build a :class:`PDCBoundaryNet` (random init, or ``weights``, which hold the trainable form).

    ``weights`` and the errors are those of :func:`~hiseg.models.boundary_net.compact_boundary_net`;
    ``width`` is 40 unless the weights say otherwise; ``kwargs`` are the other
    :class:`PDCBoundaryNet` arguments. Returns the network on the CPU, in training mode, unfolded
    (eval mode runs it folded; :meth:`~PDCBoundaryNet.fold` makes a plain-convolution copy).
    """
    kw, load = builder_weights("pdc_boundary_net", weights, dict(width=width, **kwargs))
    return load(PDCBoundaryNet(**kw))
