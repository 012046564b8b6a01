"""Evaluation metrics: a Python reimplementation of the BSDS500 benchmark."""
