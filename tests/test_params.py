"""hiseg._params (declarative parameter checks) and the training module's table of them
(hiseg.training.steps.MODULE_CONSTRAINTS): every parameter refuses a bad value by name, with one
message shape; the schedule helper against its definition."""
import math

import pytest

from hiseg._params import Interval, Options, check_parameters
from hiseg.training.steps import MODULE_CONSTRAINTS, warmup_cosine


@pytest.mark.parametrize("interval, inside, outside, text", [
    (Interval(0, None, "neither"), [1e-9, 5, 10 ** 9], [0, -1, float("nan"), True, "1", None], "> 0"),
    (Interval(0, None, "left"), [0, 0.0, 3], [-1e-9, float("nan"), False], ">= 0"),
    (Interval(0, 1), [0, 0.5, 1], [-0.1, 1.1, float("inf")], "in [0, 1]"),
    (Interval(0, 1, "right"), [1e-9, 1], [0, 1.5], "in (0, 1]"),
    (Interval(None, 2, "neither"), [-5, 1.9], [2, 3], "< 2"),
    (Interval(1, None, "left", integer=True), [1, 2000], [0, 1.5, 2.0, True], "an integer >= 1"),
])
def test_interval(interval, inside, outside, text):
    assert all(v in interval for v in inside)
    assert not any(v in interval for v in outside)
    assert str(interval) == text


def test_options_compare_values_and_types():
    o = Options(("a", "b", 1))
    assert "a" in o and 1 in o and "c" not in o and True not in o and 1.0 not in o
    assert str(o) == "one of ('a', 'b', 1)"


def test_check_parameters_message_shape():
    table = {"lr": (Interval(0, None, "neither"), "the learning rate"), "mode": (Options(("x",)), None)}
    check_parameters(table, {"lr": 0.1, "mode": "x", "other": object()})
    with pytest.raises(ValueError, match=r"^model\.lr must be > 0 \(the learning rate\), got -1\.0$"):
        check_parameters(table, {"lr": -1.0, "mode": "x"}, "model.")
    with pytest.raises(ValueError, match=r"^mode must be one of \('x',\), got 'y'$"):
        check_parameters(table, {"lr": 1, "mode": "y"})


#: one bad value per parameter of the module's table
BAD = {"lr": 0, "weight_decay": -1e-4, "margin": -0.2, "triplets_per_image": 0, "val_threshold": 1.5,
       "pixel_loss": "dice", "warmup": -1, "final_lr": 2, "positive_threshold": 0, "dice_weight": -1,
       "head_lr_scale": -1, "optimizer": "sgd"}


def test_every_module_parameter_of_the_table_has_a_bad_value_here():
    assert set(BAD) == set(MODULE_CONSTRAINTS)


@pytest.mark.parametrize("name", sorted(BAD))
def test_module_refuses_a_bad_value_by_name(name):
    from hiseg.training.module import HierarchicalSegmentationModule

    with pytest.raises(ValueError, match=rf"^model\.{name} must be .*, got {BAD[name]!r}$"):
        HierarchicalSegmentationModule(arch_kwargs={"width": 8}, **{name: BAD[name]})


def test_warmup_cosine_is_its_definition():
    # warm-up: (s + 1) / W for s < W; then final + (1 - final) (1 + cos(pi p)) / 2, p the progress
    total, final = 200, 0.05
    for warmup, w in ((0.1, 20), (7, 7)):
        for s in range(total + 5):
            p = min(1.0, (s - w) / (total - w))
            ref = (s + 1) / w if s < w else final + (1 - final) * (1 + math.cos(math.pi * p)) / 2
            assert warmup_cosine(s, total, warmup, final) == pytest.approx(ref, abs=1e-15)
    assert warmup_cosine(3, None, 0.1, final) == warmup_cosine(3, float("inf"), 0.1, final) == 1.0
    # warmup 0: torch's CosineAnnealingLR (eta_min 0), step for step
    import torch

    p = torch.nn.Parameter(torch.zeros(1))
    opt = torch.optim.SGD([p], lr=1.0)
    sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, 50)
    for s in range(50):
        assert warmup_cosine(s, 50, 0, 0.0) == pytest.approx(opt.param_groups[0]["lr"], abs=1e-12)
        opt.step()
        sched.step()
