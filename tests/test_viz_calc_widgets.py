"""Number boxes go through the calculators' checks, and the time-and-cost explorer (issue 21).

Driven without a browser: a control's ``.value`` is what the browser would send (text)."""

import pytest

from lab_utils import calc
from lab_utils.viz import (
    AmdahlExplorer,
    BubbleExplorer,
    CollectiveExplorer,
    MemoryExplorer,
    PlannerWidget,
    TrainingCostExplorer,
    training_cost_explorer,
)
from lab_utils.viz.controls import NumberText

FACTORIES = [
    MemoryExplorer,
    BubbleExplorer,
    CollectiveExplorer,
    AmdahlExplorer,
    lambda: PlannerWidget(model="llama2-7b", n_nodes=1, global_batch=8, seq_len=512),
    TrainingCostExplorer,
]


@pytest.mark.parametrize("factory", FACTORIES)
def test_every_number_box_refuses_what_it_cannot_take(factory):
    w = factory()
    assert w.error_message == ""
    boxes = {k: c for k, c in w.controls.items() if isinstance(c, NumberText)}
    assert boxes, "explorers take numbers through NumberText boxes"
    for name, box in boxes.items():
        if box.disabled:  # e.g. v of the bubble explorer outside the interleaved schedule
            continue
        good = box.value
        typed = ["abc", "nan", "inf", "1e400", ""] + (["2.5", "8.0", "True"] if box.whole else [])
        for text in typed:  # what a learner can type; IntText would have stored 25 for 2.5
            box.value = text
            assert w.error_message, (name, text)
            assert "Cannot update" in w.error.value and "Traceback" not in w.error_message
            assert box.value == text  # the box shows what was typed
        box.value = good
        assert w.error_message == "", (name, w.error_message)


def test_typed_fraction_in_a_whole_number_box_is_reported_not_truncated():
    w = MemoryExplorer(model="7B", activations=False, compare=False)
    w.controls["dp"].value = "2.5"
    assert w.error_message == "dp must be a whole number >= 1, got 2.5"
    w.controls["dp"].value = "4"
    assert w.error_message == "" and w.values["dp"] == 4 and w.state.dp == 4
    w.controls["dp"].value = 8  # code may assign numbers: stored as text
    assert w.controls["dp"].value == "8" and w.state.dp == 8


def test_training_cost_scenarios_reproduce_the_published_figures():
    w = training_cost_explorer()
    expected = {"gpt3": (34, None), "1t": (84, None), "deepseek-v3": (54, 2.664e6)}
    for scenario, (days, gpu_hours) in expected.items():
        w.set(scenario=scenario)
        assert w.error_message == "" and w.values["scenario"] == scenario
        est = w.state.estimate()
        assert round(est.days) == days
        if gpu_hours:
            assert est.gpu_hours == pytest.approx(gpu_hours, rel=1e-3)
        assert f"{est.days:,.1f} days" in w.summary.value
    w.set(n_gpus=4096)  # an edit leaves the scenario
    assert w.values["scenario"] == "custom"


def test_training_cost_curve_and_bad_inputs():
    w = TrainingCostExplorer(
        params_b=70.0, tokens_b=2000.0, n_gpus=1024, mode="mfu", throughput=40.0, price=2.0
    )
    t = calc.time_to_train(70e9, 2e12, 1024, mfu=0.4, peak_flops=989e12, price_per_gpu_hour=2.0)
    curve, point = w.figure.data
    assert list(point.x) == [1024] and point.y[0] == pytest.approx(t.days)
    i = list(curve.x).index(2048)
    assert curve.y[i] == pytest.approx(t.days / 2)  # perfect scaling: 2x GPUs, half the days
    assert f"${t.cost / 1e6:,.3g}M" in w.summary.value
    w.set(throughput=80.0, recompute="full")
    assert "HFU" in w.error_message  # 80% MFU + a recomputed forward > peak
    w.set(throughput=40.0, recompute="none", mode="tflops", device="A100-SXM4-80GB")
    w.set(throughput=400.0)
    assert "up to 312" in w.error_message  # above the A100's peak
