"""Shared helpers of the segmentation studies: markdown tables and region shares."""


def emit(lines, out=None):
    """Print a markdown table (a list of lines) and write it to ``out`` when given, stamped with
    revision, date, machine and command (``benchmarks/provenance.py``)."""
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
    from provenance import stamped

    text = stamped("\n".join(lines))
    print(text)
    if out:
        Path(out).write_text(text)


def region_shares(labels):
    """Fraction of the image covered by each (non-empty) region of a label image."""
    import numpy as np

    labels = np.asarray(labels)
    area = np.bincount(labels.ravel())
    return area[area > 0] / labels.size
