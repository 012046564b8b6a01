"""Several boundary networks as one: the logit of the mean of their probabilities.

Networks trained apart (another width, another seed, another number of steps) make errors
that partly cancel; averaging their boundary probabilities is the cheapest way to combine
them at inference. The ensemble is an ordinary model for the rest of hiseg: it is saved by
:func:`~hiseg.models.weights.save_weights` with its members' architectures in its
``arch_kwargs``, rebuilt by :func:`~hiseg.models.weights.load_model`, and a
:class:`~hiseg.segmentation.Pipeline` (merging head included) runs on its map as on any
network's. It is for inference: train the members, then combine them.

    from hiseg.models import load_model, save_weights
    from hiseg.models.ensemble import MeanProbabilityEnsemble
    ens = MeanProbabilityEnsemble.from_models([load_model("a.ckpt"), load_model("b.ckpt")])
    save_weights(ens, "ensemble.ckpt")
"""
from __future__ import annotations

from typing import Any, Sequence

import torch
from torch import nn

ARCH = "mean_probability_ensemble"
#: probabilities are clamped to [EPS, 1 - EPS] before the logit (finite outputs)
EPS = 1e-6


class MeanProbabilityEnsemble(nn.Module):
    """``logit(mean_i sigmoid(member_i(x)))`` for boundary networks ``member_i``.

    Parameters
    ----------
    members : sequence of dict
        ``{"arch": name, "arch_kwargs": {...}}`` of each member (a registered builder of
        :func:`~hiseg.models.weights.get_model`; not an ensemble), built with random
        weights (a checkpoint's state dict fills them).

    Raises
    ------
    ValueError
        No members, a member that is not such a dict, or an ensemble as a member.
    """

    arch = ARCH

    def __init__(self, members: Sequence[dict]):
        super().__init__()
        from .weights import get_model

        if isinstance(members, (str, bytes)) or not isinstance(members, Sequence) or len(members) == 0:
            raise ValueError(f"an ensemble needs a non-empty list of members, got {members!r}")
        spec = []
        for i, m in enumerate(members):
            if not (isinstance(m, dict) and isinstance(m.get("arch"), str)
                    and isinstance(m.get("arch_kwargs", {}), dict)):
                raise ValueError(f"member {i} must be a dict {{'arch': name, 'arch_kwargs': {{...}}}}, got {m!r}")
            if m["arch"] == ARCH:
                raise ValueError(f"member {i} is itself an ensemble: list its members instead")
            spec.append({"arch": m["arch"], "arch_kwargs": dict(m.get("arch_kwargs", {}))})
        self.members = nn.ModuleList([get_model(m["arch"], **m["arch_kwargs"]) for m in spec])
        self.arch_kwargs = {"members": spec}

    @classmethod
    def from_models(cls, models: Sequence[nn.Module]) -> "MeanProbabilityEnsemble":
        """The ensemble of trained networks (each with ``arch`` and ``arch_kwargs``, as hiseg's
        builders make them); their weights are copied in. ValueError for a network that does
        not name its architecture."""
        spec = []
        for i, m in enumerate(models):
            if not isinstance(getattr(m, "arch", None), str):
                raise ValueError(f"model {i} ({type(m).__name__}) does not name its architecture (no .arch): "
                                 "build it with hiseg.models.get_model or load_model")
            spec.append({"arch": m.arch, "arch_kwargs": dict(getattr(m, "arch_kwargs", {}))})
        ens = cls(spec)
        for mine, theirs in zip(ens.members, models):
            mine.load_state_dict(theirs.state_dict())
        return ens

    def forward(self, x: torch.Tensor, return_side_outputs: bool = False) -> torch.Tensor:
        """Boundary logits (B, 1, H, W) of an image batch, float32."""
        if return_side_outputs:
            raise ValueError("a MeanProbabilityEnsemble has no side outputs: it combines trained networks at "
                             "inference; train its members one by one")
        p = torch.stack([torch.sigmoid(m(x).float()) for m in self.members]).mean(0)
        return torch.logit(p.clamp(EPS, 1 - EPS))


def mean_probability_ensemble(weights: Any = None, *, members: Sequence[dict] | None = None
                              ) -> MeanProbabilityEnsemble:
    """Build a :class:`MeanProbabilityEnsemble` (``members`` from the checkpoint's
    ``arch_kwargs`` when ``weights`` is given), optionally with its trained weights."""
    from .weights import builder_weights

    kw, load = builder_weights(ARCH, weights, dict(members=members))
    if "members" not in kw:
        raise ValueError("mean_probability_ensemble needs members=[{'arch': ..., 'arch_kwargs': {...}}, ...] "
                         "(or weights of an ensemble checkpoint)")
    return load(MeanProbabilityEnsemble(**kw))
