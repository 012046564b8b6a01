"""SEISM's published per-image results, read and aggregated as SEISM does.

SEISM (Pont-Tuset & Marques, TPAMI 2016; public repository jponttuset/seism) publishes,
for each method and image set, one text file per measure and UCM threshold
(``{set}_{measure}_{T}.txt``, one line per image in the order of the set's image ids;
the thresholds in ``parameters.txt``):

* ``fop``: F, precision, recall (objects and parts, :mod:`hiseg.metrics.fop`);
* ``fb``: F, precision, recall, cntR, sumR, cntP, sumP (boundaries).

:func:`read_seism` turns such a folder into the dataset figures, shaped like
:func:`hiseg.metrics.bsds.evaluate`'s ``"boundary"`` and ``"fop"`` entries, with SEISM's
rules (``gather_measure``, ``general_ods``, ``general_ois``, ``general_ap``): for Fb, the
counts summed over images at each threshold, ODS the best discrete threshold (the official
BSDS benchmark also interpolates between thresholds, which gives slightly higher figures);
for Fop, the means of the per-image values (:func:`hiseg.metrics.summary.fop_dataset`).
This is how hiseg compares itself with MCG and gPb-owt-ucm without MATLAB.
"""
from __future__ import annotations

from pathlib import Path
from typing import Sequence

import numpy as np

from .summary import average_precision, f_measure, fop_dataset, ratio

__all__ = ["read_seism", "read_seism_table", "fb_dataset"]

_COLUMNS = {"fop": 3, "fb": 7}


def read_seism_table(folder, measure: str, image_set: str = "val") -> tuple[np.ndarray, list[str], np.ndarray]:
    """The per-image values of one method: ``(thresholds, parameter strings, table)`` with
    ``table`` of shape (images, thresholds, columns). FileNotFoundError / ValueError name the
    folder or file that is missing or malformed."""
    folder = Path(folder)
    if measure not in _COLUMNS:
        raise ValueError(f"unknown SEISM measure {measure!r}; expected one of {sorted(_COLUMNS)}")
    params_file = folder / "parameters.txt"
    if not params_file.is_file():
        raise FileNotFoundError(f"{params_file}: no such file (a SEISM result folder holds parameters.txt)")
    params = params_file.read_text().split()
    if not params:
        raise ValueError(f"{params_file}: no threshold listed")
    try:
        thresh = np.array([float(p) for p in params])
    except ValueError:
        raise ValueError(f"{params_file}: thresholds must be numbers, got {params[:5]}") from None
    tabs = []
    for p in params:
        f = folder / f"{image_set}_{measure}_{p}.txt"
        if not f.is_file():
            raise FileNotFoundError(f"{f}: no such file (listed in {params_file})")
        try:
            a = np.loadtxt(f, ndmin=2)
        except ValueError as exc:
            raise ValueError(f"{f}: not a table of numbers ({exc})") from None
        if a.shape[1] != _COLUMNS[measure] or (tabs and a.shape[0] != tabs[0].shape[0]):
            raise ValueError(f"{f}: expected {_COLUMNS[measure]} columns and one row per image, got shape {a.shape}")
        tabs.append(a)
    return thresh, params, np.stack(tabs, axis=1)


def fb_dataset(thresh, tab) -> dict:
    """Boundary figures with SEISM's rules from a (images, thresholds, 7) table of
    F, precision, recall, cntR, sumR, cntP, sumP: ``ods`` {threshold, f, precision,
    recall} (best discrete threshold of the summed counts), ``ois`` (each image at the
    first best of its own F, counts summed), ``ap`` (:func:`average_precision`)."""
    tab = np.asarray(tab, dtype=np.float64)
    cnt = tab[..., 3:7].sum(0)  # (thresholds, 4)
    r, p = ratio(cnt[:, 0], cnt[:, 1]), ratio(cnt[:, 2], cnt[:, 3])
    f = f_measure(r, p)
    i = int(np.argmax(f))
    best = np.argmax(tab[..., 0], axis=1)
    c = tab[np.arange(tab.shape[0]), best, 3:7].sum(0)
    orr, op = float(ratio(c[0], c[1])), float(ratio(c[2], c[3]))
    return {"ods": {"threshold": float(thresh[i]), "f": float(f[i]), "precision": float(p[i]), "recall": float(r[i])},
            "ois": {"f": float(f_measure(orr, op)), "precision": op, "recall": orr},
            "ap": average_precision(r, p)}


def read_seism(folder, image_set: str = "val", ids: Sequence[str] | None = None) -> dict:
    """``{"boundary": ..., "fop": ...}`` of a SEISM result folder (each key present when
    its files are). ``ids``: the image names, in file order (for the per-image rows)."""
    folder = Path(folder)
    out: dict = {}
    for measure, key in (("fb", "boundary"), ("fop", "fop")):
        if not any(folder.glob(f"{image_set}_{measure}_*.txt")):
            continue
        thresh, _, tab = read_seism_table(folder, measure, image_set)
        names = list(ids) if ids is not None else [str(i + 1) for i in range(tab.shape[0])]
        if len(names) != tab.shape[0]:
            raise ValueError(f"{folder}: {tab.shape[0]} image rows but {len(names)} image ids")
        out[key] = fb_dataset(thresh, tab) if measure == "fb" else fop_dataset(thresh, tab, names, False)
    if not out:
        raise FileNotFoundError(f"{folder}: no SEISM result files ({image_set}_fb_*.txt or {image_set}_fop_*.txt)")
    return out
