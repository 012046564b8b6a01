"""The training run's validation metric: losses and the boundary F-measure of a whole set, as a
torchmetrics ``Metric`` with sum states (summed over the processes under DDP).

:func:`batch_boundary_counts` turns a batch's hierarchies into boundary counts at a few
thresholds of its saliency maps; :class:`SegmentationMetrics` sums them (and the losses) over
the set and computes precision, recall and F with :func:`hiseg.metrics.summary.f_measure`,
the benchmark's own.
"""
from __future__ import annotations

from typing import Sequence

import numpy as np
import torch
import torchmetrics

from ..segmentation.saliency import ucm2_from_rag
from .matching import BoundaryMatcher, seg_to_boundaries, thin_boundaries
from .ratios import f_measure, ratio

__all__ = ["SegmentationMetrics", "VAL_THRESHOLDS", "batch_boundary_counts"]

#: The thresholds of the saliency maps at which the best F over the set is taken.
VAL_THRESHOLDS = np.linspace(0.1, 0.9, 9)


def batch_boundary_counts(rags, edge_ptr, ultrametric: np.ndarray, image_sizes, segmentations,
                          thresholds: Sequence[float]) -> np.ndarray:
    """(len(thresholds), 4) int64 boundary counts ``(matched GT, GT, matched predicted,
    predicted)`` summed over the images of a batch: image ``b``'s saliency map (its RAG ``rags[b]``
    and its edges' values ``ultrametric[edge_ptr[b]:edge_ptr[b + 1]]``, cropped to
    ``image_sizes[b]``) thresholded, thinned and matched against its annotators' boundaries
    (:class:`~hiseg.metrics.matching.BoundaryMatcher`). Cost: one thinning and one matching per
    image and threshold."""
    counts = np.zeros((len(thresholds), 4), dtype=np.int64)
    for b, rag in enumerate(rags):
        sal = ucm2_from_rag(rag, ultrametric[edge_ptr[b]:edge_ptr[b + 1]])[2::2, 2::2]
        h, w = image_sizes[b]
        sal = sal[:h, :w]
        matcher = BoundaryMatcher([seg_to_boundaries(s) for s in segmentations[b]])
        for i, t in enumerate(thresholds):
            counts[i] += np.array(matcher.counts(thin_boundaries(sal > t)))
    return counts


class SegmentationMetrics(torchmetrics.Metric):
    """Validation / test numbers of a whole set: losses and boundary precision, recall, F.

    ``loss_keys``: the names of the losses :meth:`update` may receive (the objective's terms
    and ``"loss"``). :meth:`update` takes one batch's loss values, its boundary counts
    (:func:`batch_boundary_counts` at the fixed threshold then :data:`VAL_THRESHOLDS`) and its
    number of images; the states are sums, which torchmetrics adds up over the processes
    (DDP) in :meth:`compute`; every process must call :meth:`compute`.

    :meth:`compute` returns ``{}`` when no image was seen, else floats: each loss (mean per
    image; a loss missing from some images counts as 0 there, as in the training step),
    ``boundary_f`` / ``boundary_precision`` / ``boundary_recall`` at the fixed threshold and
    ``boundary_f_ods``, the best F over :data:`VAL_THRESHOLDS`: the F of the counts summed
    over the set (not a mean of per-image Fs). ValueError for counts of another shape or an
    unknown loss.
    """

    full_state_update = False

    def __init__(self, n_thresholds: int = 1 + VAL_THRESHOLDS.size,
                 loss_keys: Sequence[str] = ("closest", "triplet", "pixel", "loss"), **kwargs):
        super().__init__(**kwargs)
        self.loss_keys = tuple(loss_keys)
        f64 = dict(dtype=torch.float64)  # holds the integer counts exactly (and every backend reduces it)
        self.add_state("images", torch.zeros((), **f64), dist_reduce_fx="sum")
        self.add_state("loss_sums", torch.zeros(len(self.loss_keys), **f64), dist_reduce_fx="sum")
        self.add_state("loss_images", torch.zeros(len(self.loss_keys), **f64), dist_reduce_fx="sum")
        self.add_state("counts", torch.zeros(int(n_thresholds), 4, **f64), dist_reduce_fx="sum")

    def update(self, loss_values: dict, counts, batch_size: int) -> None:
        """One batch: ``loss_values`` (name -> float), ``counts`` (n_thresholds, 4) summed over
        its images, ``batch_size`` images."""
        counts = torch.as_tensor(np.asarray(counts, dtype=np.float64), device=self.counts.device)
        if counts.shape != self.counts.shape:
            raise ValueError(f"boundary counts of shape {tuple(counts.shape)}, expected {tuple(self.counts.shape)}")
        unknown = set(loss_values) - set(self.loss_keys)
        if unknown:
            raise ValueError(f"unknown losses {sorted(unknown)}; expected some of {self.loss_keys}")
        self.images += batch_size
        for i, k in enumerate(self.loss_keys):
            if k in loss_values:
                self.loss_sums[i] += float(loss_values[k]) * batch_size
                self.loss_images[i] += batch_size
        self.counts += counts

    def compute(self) -> dict:
        n = float(self.images)
        if n == 0:
            return {}
        sums, seen, c = self.loss_sums.cpu().numpy(), self.loss_images.cpu().numpy(), self.counts.cpu().numpy()
        summ = {k: float(sums[i] / n) for i, k in enumerate(self.loss_keys) if seen[i] > 0}
        rec, prec = ratio(c[:, 0], c[:, 1]), ratio(c[:, 2], c[:, 3])
        f = f_measure(rec, prec)
        summ["boundary_f"] = float(f[0])  # at the fixed threshold
        summ["boundary_precision"], summ["boundary_recall"] = float(prec[0]), float(rec[0])
        summ["boundary_f_ods"] = float(f[1:].max())  # best of the other thresholds over the set
        return summ
