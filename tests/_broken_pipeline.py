"""Pipelines that fail on purpose, in a module that worker processes can import (they do not
see a test's monkeypatching: ``hiseg predict --workers`` starts them by forkserver or spawn)."""
from __future__ import annotations

import errno
from dataclasses import dataclass

from hiseg.segmentation.pipeline import Pipeline


@dataclass(frozen=True)
class FailsOnSmall(Pipeline):
    """The hierarchy step raises RuntimeError on 50 x 70 maps."""

    def hierarchy_of_map(self, boundary, image=None, head=None):
        if boundary.shape == (50, 70):
            raise RuntimeError("higra gave up")
        return super().hierarchy_of_map(boundary, image, head)


@dataclass(frozen=True)
class DiskFull(Pipeline):
    """The hierarchy step raises the OSError of a full disk."""

    def hierarchy_of_map(self, boundary, image=None, head=None):
        raise OSError(errno.ENOSPC, "No space left on device")
