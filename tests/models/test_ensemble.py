"""hiseg.models.ensemble: several networks as one (mean of their boundary probabilities)."""
import numpy as np
import pytest
import torch

from hiseg.models import get_model, load_model, save_weights
from hiseg.models.ensemble import MeanProbabilityEnsemble, mean_probability_ensemble

A = {"width": 8, "blocks": [1, 1, 1, 1], "side_channels": 4}
B = {"width": 12, "blocks": [1, 2, 1, 1], "side_channels": 4}


def _members():
    torch.manual_seed(0)
    return [get_model("compact_boundary_net", **A).eval(), get_model("compact_boundary_net", **B).eval()]


def test_mean_of_the_members_probabilities_and_a_saved_round_trip(tmp_path):
    a, b = _members()
    ens = MeanProbabilityEnsemble.from_models([a, b]).eval()
    x = torch.rand(2, 3, 40, 56)
    with torch.no_grad():
        # the definition, computed here in float64 from the members themselves
        p = (torch.sigmoid(a(x).double()) + torch.sigmoid(b(x).double())) / 2
        got = torch.sigmoid(ens(x).double())
        assert got.shape == (2, 1, 40, 56)
        np.testing.assert_allclose(got.numpy(), p.numpy(), atol=1e-6)
        from hiseg.segmentation import Pipeline

        path = save_weights(ens, tmp_path / "ens.ckpt", metadata={"pipeline": Pipeline().to_dict()})
        again = load_model(path).eval()
        assert torch.equal(again(x), ens(x))
    assert again.arch_kwargs["members"][1]["arch_kwargs"]["width"] == 12
    # what `hiseg predict` runs: a pipeline on the ensemble's map
    from hiseg.segmentation.segmenter import Segmenter

    res = Segmenter.from_checkpoint(path).segment(np.random.default_rng(0).uniform(0, 1, (40, 56, 3)).astype(np.float32))
    assert res.ucm2.shape == (81, 113) and np.isfinite(res.ucm2).all()


def test_one_member_is_that_member():
    a, _ = _members()
    ens = MeanProbabilityEnsemble.from_models([a]).eval()
    x = torch.rand(1, 3, 24, 24)
    with torch.no_grad():
        np.testing.assert_allclose(torch.sigmoid(ens(x)).numpy(), torch.sigmoid(a(x)).clamp(1e-6, 1 - 1e-6).numpy(),
                                   atol=1e-6)


@pytest.mark.parametrize("members, msg", [
    ([], "non-empty list of members"),
    ("compact_boundary_net", "non-empty list of members"),
    ([{"arch_kwargs": {}}], "member 0 must be a dict"),
    ([{"arch": "compact_boundary_net", "arch_kwargs": [1]}], "member 0 must be a dict"),
    ([{"arch": "mean_probability_ensemble", "arch_kwargs": {}}], "member 0 is itself an ensemble"),
    ([{"arch": "no_such_net", "arch_kwargs": {}}], "unknown model 'no_such_net'"),
])
def test_bad_members_are_named(members, msg):
    with pytest.raises(ValueError, match=msg):
        MeanProbabilityEnsemble(members)


def test_misuse_is_a_clear_error():
    a, _ = _members()
    with pytest.raises(ValueError, match="does not name its architecture"):
        MeanProbabilityEnsemble.from_models([a, torch.nn.Conv2d(3, 1, 1)])
    with pytest.raises(ValueError, match="has no side outputs"):
        MeanProbabilityEnsemble.from_models([a])(torch.rand(1, 3, 16, 16), return_side_outputs=True)
    with pytest.raises(ValueError, match="needs members"):
        mean_probability_ensemble()


def test_the_shipped_ensemble_is_the_default_and_runs_its_pipeline():
    """``bsds500_ensemble``: two trained networks and a merging head fitted on their averaged maps."""
    from hiseg.segmentation.segmenter import Segmenter
    from hiseg.models import Weights

    seg = Segmenter.from_pretrained(backend="torch")
    assert isinstance(seg.model, MeanProbabilityEnsemble) and len(seg.model.members) == 2
    assert Weights.from_name("bsds500_ensemble").value.builder == "mean_probability_ensemble"
    assert seg.pipeline.merge_head is not None and tuple(seg.pipeline.scales) == (0.5, 1.0) and not seg.pipeline.flip
    res = seg.segment(np.random.default_rng(1).uniform(0, 1, (48, 64, 3)).astype(np.float32))
    assert res.ucm2.shape == (97, 129) and np.isfinite(res.ucm2).all() and res.ucm2.max() > 0
    # the head refuses the maps of another network (one member alone)
    from hiseg.segmentation.pipeline import PipelineError

    with pytest.raises(PipelineError, match="network"):
        Segmenter(seg.model.members[0], pipeline=seg.pipeline).segment(np.zeros((32, 32, 3), np.float32))


def test_hiseg_ensemble_writes_the_members_mean_with_a_headless_pipeline(tmp_path, capsys):
    """``hiseg ensemble`` (how the shipped ensemble is built): the members' weights, the first
    member's pipeline (without a head: one is trained on the ensemble's maps), the given
    settings on top; one member, or an existing output without --overwrite, is refused with
    nothing written."""
    from hiseg.cli import main
    from hiseg.segmentation import Pipeline

    a, b = _members()
    pa = save_weights(a, tmp_path / "a.ckpt", metadata={"pipeline": Pipeline(scales=(1.0,), region_size=6.0).to_dict()})
    pb = save_weights(b, tmp_path / "b.ckpt")
    out = tmp_path / "sub" / "ens.ckpt"
    assert main(["ensemble", str(pa), str(pb), "--scales", "0.5", "1", "-o", str(out.parent), "--name", "ens"]) == 0
    assert capsys.readouterr().out.startswith(f"wrote {out}: 2 members")
    ens = load_model(out).eval()
    x = torch.rand(1, 3, 32, 48)
    with torch.no_grad():
        want = torch.logit(((torch.sigmoid(a(x)) + torch.sigmoid(b(x))) / 2).clamp(1e-6, 1 - 1e-6))
        np.testing.assert_allclose(ens(x).numpy(), want.numpy(), atol=1e-5)
    meta = torch.load(out, weights_only=True)["metadata"]
    assert meta["pipeline"]["scales"] == [0.5, 1.0] and meta["pipeline"]["region_size"] == 6.0  # first member's
    assert meta["pipeline"]["merge_head"] is None
    assert meta["members"] == [str(pa), str(pb)]
    before = out.read_bytes()
    for argv, msg in (([str(pa)], "two or more members"), ([str(pa), str(pb)], "ens.ckpt")):
        assert main(["ensemble", *argv, "-o", str(out.parent), "--name", "ens"]) == 2
        assert msg in capsys.readouterr().err
    assert out.read_bytes() == before
    # -o FILE.ckpt, the former spelling: that file, with a deprecation note
    assert main(["ensemble", str(pa), str(pb), "-o", str(out), "--overwrite"]) == 0
    assert "-o FILE.ckpt is deprecated: write -o DIR [--name NAME]" in capsys.readouterr().err and out.is_file()
    assert main(["ensemble", str(pa), str(pb), "-o", str(tmp_path / "d")]) == 0  # --name's default
    assert (tmp_path / "d" / "ensemble.ckpt").is_file()
    assert main(["ensemble", str(pa), str(pb), "-o", str(tmp_path / "d"), "--name", "x/y"]) == 2
    assert main(["ensemble", str(pa), str(tmp_path / "missing.ckpt"), "-o", str(tmp_path / "bad.ckpt")]) == 2
    assert "missing.ckpt" in capsys.readouterr().err and not (tmp_path / "bad.ckpt").exists()
