"""One registry of loss terms (``hiseg.core.losses.TERMS``): a term registered here (one function,
one line) trains through ``fit_ultrametric``, ``UltrametricClustering`` and the Lightning module."""
import numpy as np
import pytest
import torch

from hiseg.core import losses
from hiseg.core.fitting import fit_ultrametric, make_loss
from hiseg.core.builders import grid_graph


@pytest.fixture
def mean_height():
    """A new term: the mean of the ultrametric (pulls every merge down), weight 0.5 by default."""
    losses.register_loss("mean_height", lambda x: x.ultrametric.mean(), needs=("ultrametric",), weight=0.5)
    yield "mean_height"
    losses.unregister_loss("mean_height")


def _graph(seed=0):
    g = grid_graph((5, 6))
    w = np.random.default_rng(seed).uniform(0.1, 1.0, g.num_edges)
    return g, torch.as_tensor(w)


def test_registry_lists_the_terms_with_their_needs():
    assert {"closest", "size", "triplet", "dasgupta", "pixel"} <= set(losses.TERMS)
    assert losses.TERMS["triplet"].needs == {"hierarchy", "weights", "triplets"}
    assert losses.TERMS["pixel"].needs == {"pixel_map"}
    assert losses.Objective("closest+triplet").needs == {"ultrametric", "target", "hierarchy", "weights", "triplets"}


def test_new_term_trains_with_fit_ultrametric(mean_height):
    g, w = _graph()
    plain = fit_ultrametric(g, w, "closest", max_iter=60, patience=None)
    res = fit_ultrametric(g, w, "closest+mean_height", max_iter=60, patience=None, mean_height_weight=2.0)
    # the loss is the brute-force sum of the two terms on the returned ultrametric (its best iterate)
    u = res.ultrametric
    assert res.loss == pytest.approx(float(((u - w) ** 2).mean() + 2.0 * u.mean()), rel=1e-9)
    assert float(res.ultrametric.mean()) < float(plain.ultrametric.mean()) - 1e-3  # the term pulled it down
    # its registered default weight (0.5) applies without a keyword
    J = make_loss("closest+mean_height")
    assert J.objective.weights == {"closest": 1.0, "mean_height": 0.5}


def test_new_term_in_the_clustering_estimator(mean_height):
    from hiseg import UltrametricClustering

    X = np.concatenate([np.random.default_rng(1).normal(c, 0.1, (15, 2)) for c in (0, 3)])
    est = UltrametricClustering(n_clusters=2, loss="closest+mean_height", max_iter=30, random_state=0).fit(X)
    assert len(set(est.labels_[:15])) == 1 and len(set(est.labels_[15:])) == 1
    assert est.labels_[0] != est.labels_[-1]


def test_bad_losses_are_named():
    g, w = _graph()
    with pytest.raises(ValueError, match="unknown loss.*nope"):
        fit_ultrametric(g, w, "closest+nope")
    with pytest.raises(ValueError, match="already registered"):
        losses.register_loss("closest", lambda x: x.ultrametric.sum(), needs=("ultrametric",))
    with pytest.raises(ValueError, match="unknown needs"):
        losses.register_loss("bad_need", lambda x: 0, needs=("pixels",))
    with pytest.raises(ValueError, match="identifier"):
        losses.register_loss("a+b", lambda x: 0, needs=())
    with pytest.raises(ValueError, match="weight of loss term 'closest'"):
        losses.Objective({"closest": -1})
    with pytest.raises(ValueError, match="belong to none"):
        losses.Objective("closest", margin=0.3)
    with pytest.raises(ValueError, match="'triplets' was not given"):
        losses.Objective("triplet")(losses.LossInputs(hierarchy=None, weights=None))


def test_lazy_inputs_are_computed_once():
    calls = []
    x = losses.LossInputs(target=losses.Lazy(lambda: calls.append(1) or torch.ones(3)),
                          ultrametric=torch.zeros(3))
    total, parts = losses.Objective("closest")(x)
    losses.Objective("closest")(x)
    assert calls == [1] and float(total) == 1.0 and set(parts) == {"closest"}


def test_new_term_trains_the_lightning_module(mean_height, tmp_path):
    """``model.losses: {mean_height: w}``: the step computes the term (the brute-force mean of
    its ultrametric), logs it, and a tiny Lightning run trains with it."""
    import pytorch_lightning as pl
    from torch.utils.data import DataLoader

    from hiseg.data.collate import collate_graph_batch
    from hiseg.data.graphs import SegmentationGraphDataset
    from hiseg.data.synthetic import SyntheticSegmentation
    from hiseg.training.module import HierarchicalSegmentationModule
    from hiseg.segmentation.superpixels import Superpixels

    ds = SegmentationGraphDataset(SyntheticSegmentation(4, size=48, seed=1), None, Superpixels(region_size=6.0))
    m = HierarchicalSegmentationModule(arch_kwargs={"width": 8}, losses={"mean_height": 0.3}, validate_at_start=False,
                                       pipeline={"superpixels": "color_watershed", "region_size": 6.0})
    batch = collate_graph_batch([ds[i] for i in range(2)])
    m.on_train_batch_start(batch, 0)
    out, u, _, _ = m.compute_losses(batch)
    assert float(out["mean_height"]) == pytest.approx(float(u.mean()), rel=1e-12)
    want = 1.0 * out["closest"] + 0.5 * out["triplet"] + 0.1 * out["pixel"] + 0.3 * out["mean_height"]
    assert float(out["loss"]) == pytest.approx(float(want), rel=1e-6)
    before = [p.detach().clone() for p in m.model.parameters()]
    trainer = pl.Trainer(max_steps=2, logger=False, enable_checkpointing=False, enable_progress_bar=False,
                         enable_model_summary=False, default_root_dir=tmp_path, num_sanity_val_steps=0)
    trainer.fit(m, DataLoader(ds, batch_size=2, collate_fn=collate_graph_batch))
    assert trainer.global_step == 2
    assert any(not torch.equal(a, b) for a, b in zip(before, m.model.parameters()))
    assert "mean_height" in m.make_metrics().loss_keys
