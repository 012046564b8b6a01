"""One path from image to loss (issue 30): the Lightning module's step and ``Segmenter.segment``
run the same pipeline steps, so they give the same superpixels, edge weights and ultrametric
for the same image and weights."""
import numpy as np
import pytest
import torch

from hiseg.data.collate import collate_graph_batch
from hiseg.data.graphs import make_graph_sample
from hiseg.segmentation.segmenter import Segmenter
from hiseg.training.module import HierarchicalSegmentationModule


@pytest.mark.parametrize("pipeline", [{"superpixels": "boundary_watershed", "linkage": "average", "region_size": 6.0},
                                      {"superpixels": "boundary_watershed", "linkage": "single", "region_size": 6.0,
                                       "scales": [0.5, 1.0], "flip": True}])
def test_module_step_and_segment_agree(pipeline):
    torch.manual_seed(0)
    m = HierarchicalSegmentationModule(arch_kwargs={"width": 8}, pipeline=pipeline, triplet_weight=0.0,
                                       validate_at_start=False).eval()
    rng = np.random.default_rng(0)
    img = rng.random((48, 64, 3)).astype(np.float32)
    img[:, 32:] *= 0.3
    seg = [np.kron(rng.integers(0, 3, (3, 4)), np.ones((16, 16), np.int64)) + 1]
    batch = collate_graph_batch([make_graph_sample({"image": img, "segmentations": seg}, None)])
    with torch.no_grad():
        res = m.compute_losses(batch)
    ref = Segmenter(m.model, pipeline=m.pipeline).segment(img)
    used = res.batch  # the superpixels the step rebuilt from its map
    np.testing.assert_array_equal(used.rags[0].labels, ref.rag.labels)
    # the step pools in float32 (the map's dtype), segment in float64: the same weights to float32 rounding
    w = m.pipeline.graph_weights(used.rags, m.pipeline.maps(m.model, batch.images), batch.images)
    w_ref = m.pipeline.edge_weights(ref.rag, ref.boundary, img)
    np.testing.assert_allclose(w.detach().numpy(), w_ref, rtol=0, atol=1e-6)
    np.testing.assert_allclose(res.ultrametric.numpy(), ref.ultrametric, rtol=0, atol=1e-6)
    np.testing.assert_array_equal(res.hierarchy.parents, ref.hierarchy.parents)
