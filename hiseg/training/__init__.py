"""Training: the LightningModule (:mod:`~hiseg.training.module`), what one step computes
(:mod:`~hiseg.training.steps`), the callbacks (:mod:`~hiseg.training.callbacks`) and the
LightningCLI behind ``python train.py`` / ``hiseg train`` (:mod:`~hiseg.training.cli`).

It sits above the core, the segmentation pipeline, the data and the models; only the command
line imports it.
"""
