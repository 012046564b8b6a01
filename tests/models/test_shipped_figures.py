"""No figure of a shipped checkpoint changes: every checkpoint in ``models/`` (the weights
registry's and the pixel stage's) segments the first 5 BSDS500 val images, and its
hierarchies (regions, ultrametric sums) and benchmark figures (Fb ODS / OIS / AP, covering,
PRI, VI, Fop at 25 thresholds) must agree with the values stored in
``tests/fixtures/shipped_figures.json``, each to the precision its arithmetic allows (:data:`REL_TOL`):

* the sums of the ultrametric (``u_sum``, ``u_sq``) to 1e-5 relative: they add up the float32
  network's outputs, whose kernels (oneDNN / MKL, chosen by CPU and build) round differently, so
  two machines agree to about 1e-7 relative per value and 1e-6 on the sums (issue 42: 1.1e-8 on
  an AMD EPYC, 3.6e-8 with an AVX-512 Xeon's default kernels, 2.9e-8 with them capped at AVX2 by
  ``ATEN_CPU_CAPABILITY=avx2 ONEDNN_MAX_CPU_ISA=AVX2``);
* the integer counts (regions, edges, levels) and every benchmark figure exactly: they are
  counts of pixels and regions on the hierarchy's cuts at fixed levels, which a change of the
  outputs at 1e-7 moves only if it moves a cut; a change there is a change of the model.

The stored values were computed before the training path was rebuilt on the pipeline (issue
30); regenerate them only for a deliberate change of a shipped model:
``python tests/models/test_shipped_figures.py`` (writes the file). Skips where the BSDS500 data
(``../shared/data``) is absent.
"""
from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[2]
STORED = ROOT / "tests" / "fixtures" / "shipped_figures.json"
DATA = ROOT.parent / "shared" / "data" / "BSDS500" / "data"
N_IMAGES, N_THRESHOLDS = 5, 25


def checkpoints() -> dict:
    """name -> checkpoint file: the registry's shipped models and the pixel stage's."""
    from hiseg.models.weights import Weights

    out = {n: str(Weights.from_name(n).path()) for n in Weights.names()}
    out["pixel_stage"] = str(ROOT / "models" / "pixel_stage.ckpt")
    return out


def figures(path: str) -> dict:
    """The hierarchies' digest and the benchmark figures of one checkpoint on the first
    :data:`N_IMAGES` val images."""
    import torch

    from hiseg.segmentation.segmenter import Segmenter
    from hiseg.io import read_image, to_float_rgb, write_ucm2_mat
    from hiseg.metrics import evaluate

    torch.set_num_threads(1)
    seg = Segmenter.from_checkpoint(path, device="cpu")  # the stored values are the CPU's
    stems = sorted(p.stem for p in (DATA / "images" / "val").glob("*.jpg"))[:N_IMAGES]
    out = {"images": {}}
    with tempfile.TemporaryDirectory() as tmp:
        pred, gt = Path(tmp, "pred"), Path(tmp, "gt")
        pred.mkdir(), gt.mkdir()
        for s in stems:
            res = seg.segment(to_float_rgb(read_image(DATA / "images" / "val" / f"{s}.jpg")))
            u = np.asarray(res.ultrametric, np.float64)
            out["images"][s] = {"regions": int(res.rag.num_regions), "edges": int(u.size),
                                "u_sum": float(u.sum()), "u_sq": float((u * u).sum()),
                                "levels": int(np.unique(u).size)}
            write_ucm2_mat(pred / f"{s}.mat", res.ucm2)
            (gt / f"{s}.mat").symlink_to(DATA / "groundTruth" / "val" / f"{s}.mat")
        r = evaluate(pred, gt, n_thresholds=N_THRESHOLDS, workers=1)
    b = r["boundary"]
    out.update(fb_ods=b["ods"]["f"], fb_ois=b["ois"]["f"], fb_ap=b["ap"], covering_ods=r["covering"]["ods"],
               pri_ods=r["pri"]["ods"], vi_ods=r["vi"]["ods"], fop_ods=r["fop"]["ods"]["f"],
               fop_ois=r["fop"]["ois"]["f"])
    return {k: (float(v) if isinstance(v, (np.floating, float)) else v) for k, v in out.items()}


#: relative tolerance of each stored value, by its key (0: exact); see the module's docstring
REL_TOL = {"u_sum": 1e-5, "u_sq": 1e-5}


def _close(a, b, where):
    if isinstance(a, dict):
        assert set(a) == set(b), f"{where}: keys {sorted(a)} != {sorted(b)}"
        for k in a:
            _close(a[k], b[k], f"{where}.{k}")
    elif isinstance(a, int):
        assert a == b, f"{where}: {a} != stored {b}"
    else:
        tol = REL_TOL.get(where.rsplit(".", 1)[-1], 0.0)
        assert abs(a - b) <= tol * abs(b), f"{where}: {a!r} != stored {b!r} (relative tolerance {tol:g})"


@pytest.mark.parametrize("name", ["bsds500", "bsds500_merge", "bsds500_ensemble", "pixel_stage"])
@pytest.mark.slow
def test_shipped_figures_unchanged(name):
    if not DATA.is_dir():
        pytest.skip(f"BSDS500 data not found at {DATA}")
    stored = json.loads(STORED.read_text())
    assert set(stored) == set(checkpoints()), "a shipped checkpoint was added or removed: store its figures"
    _close(figures(checkpoints()[name]), stored[name], name)


if __name__ == "__main__":  # regenerate the stored values (a deliberate change of a shipped model only)
    names = sys.argv[1:] or list(checkpoints())
    old = json.loads(STORED.read_text()) if STORED.exists() else {}
    for n in names:
        old[n] = figures(checkpoints()[n])
        print(n, {k: v for k, v in old[n].items() if k != "images"}, flush=True)
    STORED.parent.mkdir(parents=True, exist_ok=True)
    STORED.write_text(json.dumps(old, indent=1, sort_keys=True) + "\n")
