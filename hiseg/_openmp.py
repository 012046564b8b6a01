"""OpenMP threads that sleep when they wait, for the training commands (``python train.py``, ``hiseg train``).

torch's intra-op pool, MKL and oneDNN run on GNU OpenMP (libgomp), whose threads spin after each
parallel region (``GOMP_SPINCOUNT`` 300,000 pauses, several milliseconds) before they sleep. A
training step runs hundreds of short regions separated by single-threaded host work (Python, the
trees): the idle thread spins through all of it, and on a busy machine, where that host work waits
for a core, it spins longer still: ``python train.py`` used several times the CPU on a busy machine
that it used on a quiet one (issue 53), and sleeping threads (``OMP_WAIT_POLICY=PASSIVE``) gave the
same loss to the last digit with about half the CPU or less: the policy changes how a thread waits,
not how the work is split (the figures: ``benchmarks/results/training.md``, "OpenMP waits").

libgomp reads the variable once, when torch loads it: :func:`passive_openmp_waits` must run before
``import torch``. Importing this module costs nothing."""
from __future__ import annotations

import os
import sys

__all__ = ["passive_openmp_waits"]


def passive_openmp_waits() -> bool:
    """Set ``OMP_WAIT_POLICY=PASSIVE`` unless it is set already (a user's choice is kept). Returns
    whether OpenMP will use it: False when torch was imported first (the setting comes too late)."""
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    return "torch" not in sys.modules
