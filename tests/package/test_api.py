"""The top-level API (issue 31): ``from hiseg import Segmenter`` and every name of ``__all__``;
``import hiseg`` alone imports neither torch nor higra; the product's objects say what they
hold in one line."""
import subprocess
import sys

import numpy as np
import pytest

import hiseg


def test_every_name_of_all_resolves_to_its_module():
    import hiseg.clustering
    import hiseg.segmentation.segmenter
    import hiseg.models.weights
    import hiseg.segmentation.pipeline

    for name in hiseg.__all__:
        assert getattr(hiseg, name) is not None, name
    from hiseg import Pipeline, Segmenter, UltrametricClustering, Weights

    assert Segmenter is hiseg.segmentation.segmenter.Segmenter and Pipeline is hiseg.segmentation.pipeline.Pipeline
    assert Weights is hiseg.models.weights.Weights and UltrametricClustering is hiseg.clustering.UltrametricClustering
    assert {"Segmenter", "SegmentationResult", "Pipeline", "Weights", "UltrametricClustering", "fit_ultrametric",
            "cut_hierarchy", "subdominant_ultrametric", "grid_graph"} <= set(hiseg.__all__)
    assert set(hiseg.__all__) <= set(dir(hiseg))
    with pytest.raises(AttributeError, match="no attribute 'nope'"):
        hiseg.nope  # noqa: B018


def test_import_hiseg_is_light():
    code = "import sys, hiseg; print(sorted(m for m in ('torch', 'higra', 'sklearn', 'cv2') if m in sys.modules))"
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0 and r.stdout.strip() == "[]", r.stdout + r.stderr


def test_reprs_say_what_they_hold():
    from hiseg import Segmenter

    seg = Segmenter.classical(region_size=6.0, fit_iterations=5, device="cpu")
    assert repr(seg) == ("Segmenter(model='classical', backend='classical', device='cpu', "
                         "pipeline=Pipeline(superpixels='color_watershed', "
                         "linkage='closest', region_size=6.0, fit_iterations=5))")
    img = np.zeros((30, 40, 3), np.float32)
    img[:, 20:] = 1.0
    res = seg.segment(img)
    text = repr(res)
    assert text == (f"SegmentationResult(shape=(30, 40), levels={np.unique(res.ultrametric).size}, "
                    f"regions at finest={res.rag.num_regions})")
    assert "\n" not in text and len(text) < 120


@pytest.mark.slow
def test_the_default_segmenter_is_the_shipped_default_model():
    from hiseg import Segmenter, Weights

    import torch

    seg = Segmenter()  # as `hiseg predict` by default: onnxruntime on a CPU, torch on CUDA when present
    assert seg.name == Weights.default().name.lower() == "bsds500_ensemble"
    auto, backend = ("cuda", "torch") if torch.cuda.is_available() else ("cpu", "onnxruntime")
    assert str(seg.device) == auto and seg.backend.name == backend
    assert str(Segmenter(None).device) == str(Segmenter.classical().device) == "cpu"  # no network: the CPU
    assert repr(seg) == (f"Segmenter(model='bsds500_ensemble', backend='{backend}', device='{auto}', "
                         "pipeline=Pipeline(scales=(0.5, 1.0), merge_head='learned'))")
    assert Segmenter(Weights.default().path()).name == "bsds500_ensemble"  # its file is called by its name
    assert Segmenter(None).model is None and Segmenter(None).name == "classical"


def test_the_core_modules_are_attributes_after_import_hiseg():
    """docs/clustering.md writes ``hiseg.core.losses.closest(...)`` after ``import hiseg``: the
    core's modules are imported on first use (a fresh interpreter: nothing imported them before)."""
    import subprocess
    import sys

    code = ("import hiseg\nfor m in ('graph', 'ultrametric', 'cuts', 'losses', 'fitting'):\n"
            "    getattr(hiseg.core, m)\nprint(hiseg.core.losses.closest.__name__)")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0 and r.stdout.strip() == "closest", r.stderr[-2000:]


def test_dir_of_hiseg_holds_only_public_names():
    """Issue 53, item 11: ``dir(hiseg)`` lists ``__all__`` and the subpackages, nothing the module
    uses itself (``annotations``, ``importlib``), before and after names are used."""
    code = ("import hiseg\nfirst = dir(hiseg)\nhiseg.Segmenter; hiseg.core\n"
            "print(repr((first, dir(hiseg), sorted(hiseg.__all__), sorted(hiseg._MODULES))))")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr[-2000:]
    first, later, public, modules = eval(r.stdout)  # noqa: S307 - our own repr of lists of str
    for names in (first, later):
        assert set(names) == set(public) | set(modules), sorted(set(names) ^ (set(public) | set(modules)))
