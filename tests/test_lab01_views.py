"""Lab 01's table and figure helpers (lab_utils.experiments.lab01): rows and traces as the lab
reads them."""

from lab_utils.calc import model_state_memory
from lab_utils.experiments import lab01


def test_ledger_rows_pair_each_measurement_with_the_calculator():
    n = 1000
    measured = {
        "fp32_adam": {"params": 4 * n, "grads": 4 * n, "master": 0, "optimizer": 8 * n, "x": 9}
    }
    rows = lab01.ledger_rows(measured, n)
    assert [(r["recipe"], r["source"]) for r in rows] == [
        ("fp32_adam", "measured"),
        ("fp32_adam", "calculator"),
    ]
    booked = model_state_memory(n, "fp32_adam").as_dict()
    assert {b: rows[1][b] for b in lab01.BUCKETS} == booked
    assert rows[0]["B/param"] == 16.0 == rows[1]["B/param"]  # 4 + 4 + 8, the extra key ignored


def test_grad_norm_figure_draws_one_line_per_stack():
    stacks = [
        lab01.GradNorms("a", (1e-8, 1.0), (1.0, 1.0)),
        lab01.GradNorms("b", (1.0, 2.0), (1, 1)),
    ]
    fig = lab01.grad_norm_figure(stacks)
    assert [t.name for t in fig.data] == ["a", "b"]
    assert list(fig.data[0].x) == [1, 2] and fig.layout.yaxis.type == "log"
