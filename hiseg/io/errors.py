"""What every file function of hiseg shares: the error for a data file that exists but cannot be
used, and the form in which a path appears in a message."""
from __future__ import annotations

import os

__all__ = ["DataError", "display_path"]


class DataError(ValueError):
    """A data file exists but cannot be used (unreadable, corrupt, inconsistent shapes)."""


def display_path(path) -> str:
    """``path`` as text that any terminal or UTF-8 file takes: bytes of the name that are
    not valid UTF-8 (surrogate escapes in a Python str) shown as ``\\xNN``. O(len)."""
    s = os.fsdecode(path) if isinstance(path, bytes) else str(path)
    try:
        s.encode("utf-8")
        return s
    except UnicodeEncodeError:
        return s.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")
