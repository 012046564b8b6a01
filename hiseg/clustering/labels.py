"""Partial labels of :class:`hiseg.UltrametricClustering`: any values in, int64 codes out.

``-1`` (scikit-learn's semi-supervised convention), NaN, None, pandas' NA and the
missing-value spellings of text files mark an unlabelled sample; other labels are numbered.
"""
from __future__ import annotations

import numbers

import numpy as np
from sklearn.utils.validation import column_or_1d

__all__ = ["label_array", "partial_labels"]

#: string labels that mark an unlabelled sample, compared after stripping blanks and in lower
#: case: the empty string, "-1", and the missing-value spellings that pandas' ``read_csv``
#: reads as NaN ("nan" is also what numpy makes of np.nan in an array of strings)
_UNLABELLED_STRINGS = ("", "-1", "-1.0", "nan", "-nan", "none", "null", "na", "n/a", "<na>", "#n/a")


def _is_missing(v) -> bool:
    """None, a float NaN, pandas' NA or NaT."""
    if v is None or type(v).__name__ in ("NAType", "NaTType"):
        return True
    return isinstance(v, (float, np.floating)) and v != v


def label_array(y) -> np.ndarray:
    """Labels as a 1-D numpy array; lists, tuples and pandas objects become object arrays so
    that NaN / None / pandas' NA among strings survive as such (numpy would turn NaN into
    the string "nan")."""
    if hasattr(y, "to_numpy") and not isinstance(y, np.ndarray):  # pandas Series / one-column frame
        y = y.to_numpy(dtype=object)
    elif not isinstance(y, np.ndarray):
        y = np.asarray(y, dtype=object)
    return column_or_1d(y, warn=True)


def partial_labels(y: np.ndarray) -> np.ndarray:
    """Partial labels -> int64 codes, ``-1`` for the unlabelled samples.

    Unlabelled: ``-1`` (scikit-learn's semi-supervised convention), NaN, None, pandas' NA
    or NaT, and among strings (compared blank-stripped, in any case) the empty string, ``"-1"``
    and the missing-value spellings ``"NaN"``, ``"None"``, ``"NULL"``, ``"NA"``, ``"N/A"``,
    ``"<NA>"``, ``"#N/A"`` (those pandas' ``read_csv`` reads as NaN). Other labels: integers
    (>= 0, kept as they are) or any values (strings, ...: numbered in sorted order of their
    text).
    """
    if y.dtype.kind in "OUS":
        missing = np.fromiter((_is_missing(v) for v in y), dtype=bool, count=y.shape[0])
        values = y[~missing]
        if all(isinstance(v, numbers.Real) and not isinstance(v, (bool, np.bool_)) for v in values):
            num = np.full(y.shape[0], -1.0)  # numbers in an object array: the numeric path below
            num[~missing] = values.astype(np.float64)
            y = num
        else:
            text = y.astype(str)
            unl = missing | np.isin(np.char.lower(np.char.strip(text)), _UNLABELLED_STRINGS)
            codes = np.full(y.shape[0], -1, dtype=np.int64)
            if (~unl).any():
                _, codes[~unl] = np.unique(text[~unl], return_inverse=True)
            return codes
    if y.dtype.kind == "f":
        if np.any(np.isinf(y)):
            raise ValueError("y contains infinite values; mark unlabelled samples with -1 or NaN")
        y = np.where(np.isnan(y), -1.0, y)
        if np.any(y != np.round(y)):
            raise ValueError("y must hold class labels (integers, -1 or NaN = unlabelled), "
                             "got non-integer values")
    y = y.astype(np.int64)
    if np.any(y < -1):
        raise ValueError("y holds negative labels other than -1 (the unlabelled marker)")
    return y
