"""Explorer widgets, driven without a browser: each control's change must show calc's numbers,
and each class of bad input must show a readable message and leave the figure unchanged."""

from __future__ import annotations

import base64
import json
import math

import numpy as np
import plotly.graph_objects as go
import plotly.io as pio
import pytest

from lab_utils import calc
from lab_utils.calc import GB, GiB
from lab_utils.viz import (
    AmdahlExplorer,
    BubbleExplorer,
    CollectiveExplorer,
    MemoryExplorer,
    PlannerWidget,
    amdahl_explorer,
    bubble_explorer,
    collective_explorer,
    memory_explorer,
    planner_widget,
    to_figure,
    training_cost_explorer,
)
from lab_utils.viz.controls import NumberText
from lab_utils.viz.live_plot import MAX_RENEWALS, LivePlot, figure_json

approx = pytest.approx


def _snapshot(w):
    return [(tuple(t.x), tuple(t.y) if t.y is not None else None) for t in w.figure.data]


def _bad(w, **values):
    """Set bad values: a readable message, no exception, the figure as it was."""
    before = _snapshot(w)
    w.set(**values)
    assert w.error_message and "Traceback" not in w.error_message
    assert "Cannot update" in w.error.value
    assert _snapshot(w) == before
    return w.error_message


@pytest.mark.parametrize(
    "factory, title, css",
    [
        (memory_explorer, "Memory explorer", "memory-explorer"),
        (bubble_explorer, "Bubble explorer", "bubble-explorer"),
        (collective_explorer, "Collective-cost explorer", "collective-explorer"),
        (amdahl_explorer, "Amdahl explorer", "amdahl-explorer"),
        (planner_widget, "3D parallelism planner", "planner-widget"),
    ],
)
def test_every_widget_builds_with_a_findable_title_and_a_valid_figure(factory, title, css):
    w = factory()
    assert w.error_message == "" and w.error.value == ""
    assert f">{title}</h3>" in w.header.value and "lab-widget-title" in w.header.value
    assert css in w._dom_classes and "lab-explorer" in w._dom_classes
    assert len(w.figure.data) > 0 and w.figure.layout.width <= 1100
    to_figure(w.spec)  # plotly validates every property of the pure spec
    assert w.summary.value


def _tree(widget):
    yield widget
    for child in getattr(widget, "children", ()):
        yield from _tree(child)


EVERY_EXPLORER = [
    memory_explorer,
    bubble_explorer,
    collective_explorer,
    amdahl_explorer,
    planner_widget,
    training_cost_explorer,
]


@pytest.mark.parametrize("factory", EVERY_EXPLORER)
def test_the_figure_travels_as_output_state_until_a_page_draws_it_live(factory):
    """The race CI hit: a FigureWidget (an anywidget) whose 5 MB script loads in over 2 s drops
    every
    message, so its plot stays blank. The figure arrives as the state of a core Output widget; the
    only anywidget is LivePlot, whose module is tiny, and it takes over only once a page reports
    that
    it drew the Output's graph (``live``). If a redraw fails there, the Output shows the figure
    again."""
    w = factory()
    assert [type(x).__name__ for x in _tree(w) if x.has_trait("_esm")] == ["LivePlot"]
    assert len(w.plot._esm) < 4096 and not w.plot.live
    (out,) = w.view.outputs
    shown = out["data"]["application/vnd.plotly.v1+json"]
    assert len(shown["data"]) == len(w.figure.data) > 0
    assert "text/plain" in out["data"]
    assert w.plot.full() == shown  # the live view has the same figure to redraw from

    w.plot.live = True  # what the page reports once it drew the graph
    box = next(n for n, c in w.controls.items() if isinstance(c, NumberText))
    old = w.controls[box].value
    w.set(**{box: str(2 * float(old)) if not w.controls[box].whole else str(2 * int(old))})
    if not w.error_message:
        assert w.view.outputs == (out,), "a live page redraws in place: the Output is not replaced"
        assert w.plot.full() != shown
    w.plot.live = False  # a redraw failed on the page: the Output shows the current figure
    assert w.view.outputs[0]["data"]["application/vnd.plotly.v1+json"] == w.plot.full()


def test_a_plot_whose_page_drops_its_messages_is_replaced_by_a_fresh_one(monkeypatch):
    """anywidget drops every message to a model whose module did not load within 2 s (a slow page):
    its view renders without the figure Python set and reports "no-figure". The first report gets
    the
    figure sent again (it may only be late); a second one makes the explorer swap in a fresh
    LivePlot
    holding the same figure, closing the old one, at most MAX_RENEWALS times."""
    w, sent = bubble_explorer(), []
    monkeypatch.setattr(LivePlot, "send_state", lambda self, key=None: sent.append((self, key)))
    report = {"type": "no-figure"}
    first = w.plot
    first._on_view_message(first, {"type": "something else"}, [])
    first._on_view_message(first, report, [])
    assert w.plot is first and sent == [(first, "figure")] and not first.deaf
    first._on_view_message(first, report, [])
    assert first.deaf and w.plot is not first and w.plot_renewals == 1
    assert w.plot in w.children and first not in w.children and first.comm is None  # closed
    assert w.plot.figure == first.figure and not w.plot.deaf
    w.set(m="8")  # the explorer drives its new plot
    assert w.plot.full() == w.view.outputs[0]["data"]["application/vnd.plotly.v1+json"]
    for _ in range(2 * MAX_RENEWALS):
        w.plot._on_view_message(w.plot, report, [])
    assert w.plot_renewals == MAX_RENEWALS and w.plot.deaf, "then the Output path stays"

    w = bubble_explorer()
    w.plot._on_view_message(w.plot, report, [])
    w.plot.live = True  # the resent figure arrived and the view went live ...
    live = w.plot
    live._on_view_message(live, report, [])  # ... after it had sent its second report
    assert w.plot is live and not live.deaf, "a live view's late report is not a deaf model"


def _decoded(value):
    """plotly's typed-array JSON ({"dtype", "bdata"}) as lists, everything else as it is."""
    if isinstance(value, dict) and set(value) >= {"dtype", "bdata"}:
        array = np.frombuffer(base64.b64decode(value["bdata"]), dtype=np.dtype(value["dtype"]))
        return _decoded(
            array.reshape(value["shape"]).tolist() if "shape" in value else array.tolist()
        )
    if isinstance(value, dict):
        return {k: _decoded(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_decoded(v) for v in value]
    return value


def _first_difference(a, b, path="figure"):
    """Where two JSON trees differ (numbers within 1e-12 relative count as equal), else None."""
    if isinstance(a, dict) and isinstance(b, dict):
        for key in sorted(set(a) | set(b)):
            if key not in a or key not in b:
                return f"{path}.{key} only in {'ours' if key in a else 'plotly'}"
            if (found := _first_difference(a[key], b[key], f"{path}.{key}")) is not None:
                return found
        return None
    if isinstance(a, list) and isinstance(b, list):
        if len(a) != len(b):
            return f"{path}: {len(a)} vs {len(b)} items"
        return next(
            (
                d
                for i, (x, y) in enumerate(zip(a, b))
                if (d := _first_difference(x, y, f"{path}[{i}]")) is not None
            ),
            None,
        )
    if isinstance(a, (int, float)) and isinstance(b, (int, float)) and not isinstance(a, bool):
        return None if math.isclose(a, b, rel_tol=1e-12, abs_tol=1e-300) else f"{path}: {a} vs {b}"
    return None if a == b else f"{path}: {a!r} vs {b!r}"


@pytest.mark.parametrize("factory", EVERY_EXPLORER)
def test_the_pages_json_is_what_plotly_makes_of_the_spec(factory):
    """The page draws ``figure_json(spec)``, not plotly's own serialisation of the validated figure:
    the two must agree (specs use plotly.js names; the default template is filled in)."""
    w = factory()
    for _ in range(2):
        ours = json.loads(figure_json(w.spec))
        plotlys = json.loads(pio.to_json(go.Figure(w.spec), validate=False))
        for trace in ours["data"]:
            trace.setdefault("type", "scatter")
        assert _first_difference(_decoded(ours), _decoded(plotlys)) is None
        box = next(n for n, c in w.controls.items() if isinstance(c, NumberText) and c.whole)
        w.set(**{box: str(2 * int(w.controls[box].value))})


# --- memory -----------------------------------------------------------------------------


def _totals(w):
    return [sum(t.y[i] for t in w.figure.data[:5]) for i in range(len(w.figure.data[0].x))]


def test_memory_worked_examples_from_the_syllabus():
    w = MemoryExplorer(activations=False, compare=False)
    assert _totals(w.set(model="7B")) == approx([112.0])
    assert _totals(w.set(model="3B")) == approx([48.0])
    w.set(model="7.5B", dp=64, compare=True)
    assert [round(x, 1) for x in _totals(w)] == [120.0, 31.4, 16.6, 1.9]
    assert list(w.figure.data[0].x) == ["DDP (ZeRO-0)", "ZeRO-1", "ZeRO-2", "ZeRO-3"]


def test_memory_controls_change_the_bars_to_calc_numbers():
    w = MemoryExplorer(model="7B", compare=False)
    cfg = calc.preset("llama2-7b")
    for change in (
        {"zero_stage": 2, "dp": 8},
        {"tp": 4},
        {"pp": 2},
        {"recipe": "fp32_adam"},
        {"micro_batch": 4},
        {"seq_len": 4096},
        {"recompute": "selective"},
        {"sequence_parallel": True},
    ):
        for name, value in change.items():
            w.controls[name].value = value  # a UI edit: observe callbacks update synchronously
        v = w.values
        ms = calc.model_state_memory(7e9, v["recipe"], v["zero_stage"], v["dp"], v["tp"], v["pp"])
        act = calc.activation_memory(
            v["seq_len"],
            v["micro_batch"],
            cfg.hidden,
            cfg.n_heads,
            cfg.n_layers,
            v["tp"],
            v["pp"],
            n_micro=v["pp"],
            sequence_parallel=v["sequence_parallel"] and v["tp"] > 1,
            recompute=v["recompute"],
        ).total
        got = [t.y[0] for t in w.figure.data[:5]]
        assert got == approx(
            [ms.params / GB, ms.grads / GB, ms.master / GB, ms.optimizer / GB, act / GB]
        ), change
        assert w.error_message == ""


def test_memory_flash_attention_drops_the_score_term():
    w = MemoryExplorer(model="7B", compare=False, seq_len=2048)
    cfg = calc.preset("llama2-7b")
    stored = w.figure.data[4].y[0]
    w.set(flash_attention=True)
    flash = calc.activation_memory(
        2048, 1, cfg.hidden, cfg.n_heads, cfg.n_layers, flash_attention=True
    ).total
    assert w.figure.data[4].y[0] == approx(flash / GB) and flash / GB < 0.5 * stored
    assert "FlashAttention" in w.summary.value and w.error_message == ""


def test_memory_units_capacity_line_offload_and_selected_stage():
    w = MemoryExplorer(model="7B", activations=False, compare=True, zero_stage=1, dp=4)
    assert list(w.figure.data[0].marker.line.width) == [0, 2.5, 0, 0]
    w.set(unit="GiB", device_gb=40.0)
    assert w.figure.data[5].y[0] == approx(40e9 / GiB)
    assert w.figure.data[0].y[0] == approx(14e9 / GiB)
    assert "GiB" in w.figure.layout.yaxis.title.text
    w.set(offload=True)
    assert list(w.figure.data[3].y) == [0, 0, 0, 0] and "Offloaded" in w.summary.value


def test_memory_bad_inputs_show_messages():
    w = MemoryExplorer(model="7B")
    assert "whole number" in _bad(w, dp=0)
    w.set(dp=1)
    assert "attention heads" in _bad(w, tp=3)
    w.set(tp=1)
    assert "layers" in _bad(w, pp=5)
    w.set(pp=1)
    assert "positive" in _bad(w, device_gb=-80.0)
    w.set(device_gb=80.0)
    assert "must be one of" in _bad(w, model="13B-typo")
    assert w.set(model="1B").error_message == ""
    with pytest.raises(ValueError, match="unknown control"):
        w.set(dpp=2)  # a typo in code is a programming error, not a learner's input


# --- bubble -----------------------------------------------------------------------------


def _bars(w):
    return sorted(
        (y, round(b, 9), round(b + d, 9))
        for t in w.figure.data
        for y, b, d in zip(t.y, t.base, t.x)
    )


def test_bubble_controls_redraw_the_calc_schedule_and_state_both_fractions():
    w = BubbleExplorer()
    for change in (
        {"p": 2},
        {"m": 6},
        {"t_b_over_t_f": 3.0},
        {"schedule": "gpipe"},
        {"schedule": "zb-h1"},
        {"schedule": "interleaved", "m": 4, "v": 2},
    ):
        for name, value in change.items():
            w.controls[name].value = value
        v = w.values
        vv = v["v"] if v["schedule"] == "interleaved" else 1
        s = calc.schedule(v["schedule"], v["p"], v["m"], vv, 1.0, v["t_b_over_t_f"])
        assert w.error_message == "", change
        assert _bars(w) == sorted(
            (f"rank {e.rank}", round(e.start, 9), round(e.end, 9)) for e in s.events
        )
        b = calc.bubble(v["schedule"], v["p"], v["m"], vv, 1.0, v["t_b_over_t_f"])
        assert f"{b.of_ideal:.1%} of ideal" in w.figure.layout.title.text
        assert f"{b.of_total:.1%} of total" in w.figure.layout.title.text
    assert not w.controls["v"].disabled
    w.controls["schedule"].value = "1f1b"
    assert w.controls["v"].disabled


def test_bubble_gpipe_closed_form_in_summary():
    w = BubbleExplorer(schedule="gpipe", p=4, m=8)
    assert "37.5%</b> of ideal" in w.summary.value and "27.3%</b> of total" in w.summary.value


def test_bubble_bad_inputs_show_messages():
    w = BubbleExplorer(schedule="interleaved", p=4, m=8, v=2)
    assert "multiple of p=4" in _bad(w, m=6)
    assert "whole number" in _bad(w, m=8, p=0)
    assert "t_b/t_f" in _bad(w, p=4, t_b_over_t_f=-1.0)
    assert "too many" in _bad(w, t_b_over_t_f=2.0, p=32, m=64, v=4)
    assert "v=1 is plain 1F1B" in _bad(w, p=4, m=8, v=1)


# --- collectives ------------------------------------------------------------------------


def test_collective_panels_equal_calc_for_every_op_and_sweep():
    w = CollectiveExplorer(n=16, size_mb=64.0, alpha_us=5.0, bandwidth_gbs=50.0)
    for change in (
        {},
        {"op": "all_gather"},
        {"n": 32},
        {"size_mb": 8.0},
        {"alpha_us": 20.0},
        {"sweep": "size"},
    ):
        w.set(**change)
        assert w.error_message == ""
        st = w.state
        pts = (
            [(int(x), st.size_bytes) for x in w.figure.data[0].x]
            if st.sweep == "n"
            else [(st.n, x * 1e6) for x in w.figure.data[0].x]
        )
        for i, op in enumerate(calc.comm.OPS):
            assert list(w.figure.data[i].y) == approx(
                [calc.ring_bytes_per_rank(op, n, d) / 1e6 for n, d in pts]
            )
        ring = [calc.collective_time(st.op, n, d, st.alpha_s, st.bandwidth, "ring") for n, d in pts]
        tree = [calc.collective_time(st.op, n, d, st.alpha_s, st.bandwidth, "tree") for n, d in pts]
        assert list(w.figure.data[7].y) == approx([t * 1e3 for t in ring])
        assert list(w.figure.data[9].y) == approx([t * 1e3 for t in tree])
        algbw, busbw = w.figure.data[11].y, w.figure.data[12].y
        for (n, d), a, b, t in zip(pts, algbw, busbw, ring):
            assert a == approx(d / t / 1e9) and b == approx(a * calc.busbw_factor(st.op, n))


def test_collective_ring_latency_is_linear_in_n_and_tree_logarithmic():
    w = CollectiveExplorer(op="all_reduce", n=64, alpha_us=10.0, sweep="n")
    ns, ring_lat, tree_lat = w.figure.data[8].x, w.figure.data[8].y, w.figure.data[10].y
    steps = [b - a for a, b in zip(ring_lat, ring_lat[1:])]
    assert steps == approx([2 * 10e-3] * len(steps))  # 2 alpha per extra rank, in ms
    assert tree_lat[list(ns).index(64)] == approx(2 * 6 * 10e-3)  # 2 lg(64) alpha


def test_collective_link_preset_fills_bandwidth_and_bad_inputs():
    w = CollectiveExplorer()
    w.controls["link"].value = "NVLink3"
    assert w.values["bandwidth_gbs"] == approx(300.0)
    assert w.figure.data[13].y[0] == approx(300.0)
    w.controls["bandwidth_gbs"].value = 12.0
    assert w.values["link"] == "custom"
    assert "N must be" in _bad(w, n=1)
    assert "message D (MB)" in _bad(w, n=8, size_mb=0.0)
    assert "alpha" in _bad(w, size_mb=1.0, alpha_us=-3.0)


# --- Amdahl -----------------------------------------------------------------------------


def test_amdahl_curves_and_ceiling_equal_calc():
    w = AmdahlExplorer()
    for change in (
        {"serial_fraction": 0.1},
        {"n_max": 64},
        {"gustafson": False},
        {"serial_fraction": 0.0},
        {"n_max": 5000, "serial_fraction": 0.02},
    ):
        w.set(**change)
        st = w.state
        ns = [int(n) for n in w.figure.data[1].x]
        assert ns[0] == 1 and ns[-1] == st.n_max
        assert list(w.figure.data[1].y) == approx(
            [calc.amdahl_speedup(st.serial_fraction, n) for n in ns]
        )
        gus = [calc.gustafson_speedup(st.serial_fraction, n) for n in ns] if st.gustafson else []
        assert list(w.figure.data[2].y) == approx(gus)
        ceiling = list(w.figure.data[3].y)
        assert ceiling == ([] if st.serial_fraction == 0 else approx([1 / st.serial_fraction] * 2))
    assert "50x" in w.summary.value  # 1/0.02


def test_amdahl_bad_inputs():
    w = AmdahlExplorer()
    assert "between 0 and 1" in _bad(w, serial_fraction=1.5)
    assert "max devices" in _bad(w, serial_fraction=0.05, n_max=1)


# --- planner ----------------------------------------------------------------------------

SMALL = dict(model="llama2-7b", n_nodes=2, global_batch=64, seq_len=2048, top_k=5)


def test_planner_rows_and_bars_equal_calc_plan():
    w = PlannerWidget(**SMALL)
    for change in (
        {},
        {"gpu_mem_gb": 40.0},
        {"n_nodes": 4},
        {"global_batch": 128},
        {"per_layout": False},
        {"inter_link": "100GbE"},
    ):
        w.set(**change)
        assert w.error_message == ""
        v = w.values
        cluster = calc.Cluster(
            v["gpus_per_node"],
            v["n_nodes"],
            v["gpu_mem_gb"] * GB,
            calc.LINKS[v["intra_link"]].bytes_per_s,
            calc.LINKS[v["inter_link"]].bytes_per_s,
            calc.DEVICES[v["device"]].peak_flops,
        )
        plans = calc.plan(
            calc.preset("llama2-7b"),
            cluster,
            v["global_batch"],
            2048,
            compute_efficiency=v["efficiency"],
        )
        good = calc.best_per_layout(plans) if v["per_layout"] else [p for p in plans if p.feasible]
        good = good[: v["top_k"]]
        n = len(good)
        assert list(w.figure.data[0].y[:n]) == approx([p.model_state.total / GB for p in good])
        mem = [a + b for a, b in zip(w.figure.data[0].y, w.figure.data[1].y)]
        assert mem[:n] == approx([p.memory_bytes / GB for p in good])
        steps = [sum(w.figure.data[k].y[i] for k in range(3, 8)) for i in range(n)]
        assert steps == approx([p.step_s for p in good])
        assert (
            f"<td style='padding:2px 8px;text-align:right'>{good[0].step_s:.2f}</td>"
            in w.summary.value
        )


def test_planner_device_fills_memory_and_bad_inputs():
    w = PlannerWidget(**SMALL)
    w.controls["device"].value = "H200-SXM-141GB"
    assert w.values["gpu_mem_gb"] == approx(141.0)
    assert w.figure.data[2].y[0] == approx(141.0)
    assert "nodes" in _bad(w, n_nodes=0)
    assert "GPU memory" in _bad(w, n_nodes=2, gpu_mem_gb=-1.0)
    assert "whole number" in _bad(w, gpu_mem_gb=80.0, global_batch=-4)
    assert "must be one of" in _bad(w, global_batch=64, model="llama9")


def test_planner_says_when_nothing_fits():
    w = PlannerWidget(model="llama2-70b", n_nodes=1, gpu_mem_gb=16.0, global_batch=8, top_k=3)
    assert w.error_message == "" and "No layout fits" in w.summary.value
    assert all(not math.isnan(y) for y in w.figure.data[0].y)


def test_hold_batches_changes_and_set_rejects_fractional_whole_numbers():
    w = MemoryExplorer(model="7B", activations=False, compare=False)
    with w.hold():
        w.controls["dp"].value = 0  # invalid on its own, fixed before the hold ends
        w.controls["dp"].value = 4
        w.controls["zero_stage"].value = 3
    assert w.error_message == "" and _totals(w) == approx([112.0 / 4])
    assert "whole number" in _bad(w, dp=2.5)
    assert w.values["dp"] == 4
