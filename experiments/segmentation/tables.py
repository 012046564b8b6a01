"""Shared helpers of the segmentation studies: markdown tables and region shares."""


def emit(lines, out=None):
    """Print a markdown table (a list of lines) and write it to ``out`` when given."""
    from pathlib import Path

    text = "\n".join(lines)
    print(text)
    if out:
        Path(out).write_text(text + "\n")


def region_shares(labels):
    """Fraction of the image covered by each (non-empty) region of a label image."""
    import numpy as np

    labels = np.asarray(labels)
    area = np.bincount(labels.ravel())
    return area[area > 0] / labels.size
