"""Declarative parameter checks: one declaration per parameter, one message shape for every bad value.

The shape of scikit-learn's ``_parameter_constraints`` (``Interval``, ``StrOptions``),
written small: a table ``name -> (allowed, note)`` where ``allowed`` is an :class:`Interval`
or :class:`Options` (anything with ``in`` and a ``str``), checked by :func:`check_parameters`:

    >>> check_parameters({"lr": (Interval(0, None, "neither"), "the learning rate")}, {"lr": -1.0}, "model.")
    Traceback (most recent call last):
    ...
    ValueError: model.lr must be > 0 (the learning rate), got -1.0

No dependency: numbers and the standard library only.
"""
from __future__ import annotations

import math
import numbers
from typing import NamedTuple, Optional

__all__ = ["Interval", "Options", "check_parameters"]


class Interval(NamedTuple):
    """Real numbers (``integer=True``: integers) between ``low`` and ``high`` (None: unbounded);
    ``closed``: ``"both"``, ``"left"``, ``"right"`` or ``"neither"``. ``bool`` and NaN are outside."""

    low: Optional[float]
    high: Optional[float]
    closed: str = "both"
    integer: bool = False

    def __contains__(self, v) -> bool:
        kind = numbers.Integral if self.integer else numbers.Real
        if isinstance(v, bool) or not isinstance(v, kind) or math.isnan(v):
            return False
        left = self.low is None or (v >= self.low if self.closed in ("both", "left") else v > self.low)
        right = self.high is None or (v <= self.high if self.closed in ("both", "right") else v < self.high)
        return left and right

    def __str__(self) -> str:
        what = "an integer " if self.integer else ""
        lo = "[" if self.closed in ("both", "left") else "("
        hi = "]" if self.closed in ("both", "right") else ")"
        if self.high is None:
            return f"{what}{'>=' if lo == '[' else '>'} {self.low:g}"
        if self.low is None:
            return f"{what}{'<=' if hi == ']' else '<'} {self.high:g}"
        return f"{what}in {lo}{self.low:g}, {self.high:g}{hi}"


class Options(NamedTuple):
    """One of ``values`` (compared with ``==``)."""

    values: tuple

    def __contains__(self, v) -> bool:
        return any(v == x and type(v) is type(x) for x in self.values)

    def __str__(self) -> str:
        return f"one of {self.values}"


def check_parameters(constraints: dict, values, prefix: str = "") -> None:
    """Check ``values[name]`` against every ``name -> (allowed, note)`` of ``constraints``.

    ``values``: a mapping holding at least the table's names (``locals()`` of a constructor
    works). O(number of parameters). Raises ValueError ``"<prefix><name> must be <allowed>
    (<note>), got <value>"`` for the first value outside its set.
    """
    for name, (allowed, note) in constraints.items():
        v = values[name]
        if v not in allowed:
            raise ValueError(f"{prefix}{name} must be {allowed}{f' ({note})' if note else ''}, got {v!r}")
