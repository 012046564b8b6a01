"""BatchNorm folded into the convolution before it, for inference.

In eval mode ``bn(conv(x))`` is an affine map per output channel of ``conv(x)``:
``gamma * (conv(x) - mean) / sqrt(var + eps) + beta``, which is the convolution with its
kernel scaled by ``gamma / sqrt(var + eps)`` and a bias ``beta - mean * gamma / sqrt(var + eps)``
(+ the scaled bias it had). :func:`fold_batchnorm` rewrites a network that way and puts an
``nn.Identity`` where each folded BatchNorm was: one convolution instead of two passes over
the activations. The result is for inference only (the statistics are gone).

Pairs found: a ``Conv2d`` directly followed by a ``BatchNorm2d`` in an ``nn.Sequential``
(stems, torchvision's ``downsample``), and the named pairs of a block (``dw``/``bn1`` and
``pw``/``bn2`` of :mod:`hiseg.models.boundary_net`'s blocks, ``convN``/``bnN`` of
torchvision's ResNet blocks). A BatchNorm that is in none of these stays as it was (the
network computes the same function, unfolded there).

The folded network's map equals the unfolded one's to float32 rounding: on BSDS val images,
the shipped ``bsds500_ensemble`` differs by at most about 1e-6 in probability
(``tests/export/test_export.py``, ``benchmarks/results/predict_deploy.md``).
"""
from __future__ import annotations

import torch
from torch import nn

__all__ = ["fold_batchnorm", "count_batchnorm", "FOLD_PAIRS"]

#: (conv, bn) attribute names folded inside one module.
FOLD_PAIRS = (("dw", "bn1"), ("pw", "bn2"), ("conv1", "bn1"), ("conv2", "bn2"), ("conv3", "bn3"))


def _foldable(conv, bn) -> bool:
    return (isinstance(conv, nn.Conv2d) and isinstance(bn, nn.BatchNorm2d) and bn.track_running_stats
            and bn.running_mean is not None and conv.out_channels == bn.num_features)


@torch.no_grad()
def _fold_into(conv: nn.Conv2d, bn: nn.BatchNorm2d) -> None:
    scale = (bn.weight if bn.affine else torch.ones_like(bn.running_var)) / torch.sqrt(bn.running_var + bn.eps)
    shift = (bn.bias if bn.affine else torch.zeros_like(bn.running_mean)) - bn.running_mean * scale
    w = conv.weight.double() * scale.double().view(-1, 1, 1, 1)
    b = shift.double() + (conv.bias.double() * scale.double() if conv.bias is not None else 0)
    conv.weight.copy_(w.to(conv.weight.dtype))
    if conv.bias is None:
        conv.bias = nn.Parameter(b.to(conv.weight.dtype), requires_grad=False)
    else:
        conv.bias.copy_(b.to(conv.bias.dtype))


def fold_batchnorm(model: nn.Module) -> nn.Module:
    """Fold every BatchNorm of ``model`` that follows a convolution into it (module
    docstring), in place, and return ``model`` in eval mode. The network must be in eval
    mode's function (running statistics); it is meant for inference only. Idempotent."""
    model.eval()
    for module in list(model.modules()):
        if isinstance(module, nn.Sequential):
            names = list(module._modules)
            for a, b in zip(names[:-1], names[1:]):
                conv, bn = module._modules[a], module._modules[b]
                if _foldable(conv, bn):
                    _fold_into(conv, bn)
                    module._modules[b] = nn.Identity()
        for cname, bname in FOLD_PAIRS:
            conv, bn = getattr(module, cname, None), getattr(module, bname, None)
            if _foldable(conv, bn):
                _fold_into(conv, bn)
                setattr(module, bname, nn.Identity())
    return model


def count_batchnorm(model: nn.Module) -> int:
    """The BatchNorm layers left in ``model`` (0 once every one was folded)."""
    return sum(isinstance(m, nn.modules.batchnorm._BatchNorm) for m in model.modules())
