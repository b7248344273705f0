"""Time-and-cost explorer: days, GPU-hours and cost to train a model end to end (labs 10, 12).

A thin view over ``calc.time_to_train`` (Narayanan et al. 2021 Sec. 5.1: c T P / (n X), c = 6,
or 8 with full recomputation; or 6 T P / (n peak MFU)). The curve is days vs GPU count at the
chosen per-GPU throughput (perfect scaling: doubling the GPUs halves the days, the GPU-hours
and the cost stay put); the marker is the chosen GPU count. Scenarios load published figures:
Narayanan's GPT-3 and 1T estimates, DeepSeek-V3's budget, Llama 3 405B's Table 4 throughput.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from lab_utils.calc import DEEPSEEK_V3, DEVICES, TrainingTime, mfu_from_gpu_hours, time_to_train
from lab_utils.calc._check import choice, number, pos_int
from lab_utils.calc.activations import RECOMPUTE
from lab_utils.viz._base import Explorer, Spec
from lab_utils.viz.controls import dropdown, float_text, int_text
from lab_utils.viz.style import FIGURE_WIDTH, LEGEND_BESIDE

MODES = {"mfu": "MFU (% of peak)", "tflops": "achieved TFLOP/s per GPU"}
MAX_GPUS = 10_000_000
# scenario -> control values (sources in the labels). DeepSeek-V3's MFU is the one its
# 2.664M pre-training GPU-hours imply for 37B activated parameters (calc.DEEPSEEK_V3).
SCENARIOS: dict[str, tuple[str, dict[str, Any]]] = {
    "custom": ("custom", {}),
    "gpt3": (
        "GPT-3 175B, 1024 A100s (Narayanan et al. 2021 Sec. 5.1: 34 days)",
        dict(
            params_b=175.0,
            tokens_b=300.0,
            n_gpus=1024,
            device="A100-SXM4-80GB",
            mode="tflops",
            throughput=140.0,
            recompute="full",
        ),
    ),
    "1t": (
        "1T, 3072 A100s (Narayanan et al. 2021 Sec. 5.1: 84 days)",
        dict(
            params_b=1008.0,
            tokens_b=450.0,
            n_gpus=3072,
            device="A100-SXM4-80GB",
            mode="tflops",
            throughput=163.0,
            recompute="full",
        ),
    ),
    "deepseek-v3": (
        "DeepSeek-V3, 37B activated, 2048 H800s (2.664M GPU-hours)",
        dict(
            params_b=37.0,
            tokens_b=14800.0,
            n_gpus=2048,
            device="H800-SXM-80GB",
            mode="mfu",
            recompute="none",
            throughput=round(
                100
                * mfu_from_gpu_hours(
                    37e9,
                    DEEPSEEK_V3.tokens,
                    DEEPSEEK_V3.pretrain_gpu_hours,
                    DEVICES["H800-SXM-80GB"].peak_flops,
                ),
                2,
            ),
        ),
    ),
    "llama3-405b": (
        "Llama 3 405B, 16384 H100s at 400 TFLOP/s (Meta 2024 Table 4)",
        dict(
            params_b=405.85,
            tokens_b=15600.0,
            n_gpus=16384,
            device="H100-SXM5-80GB",
            mode="tflops",
            throughput=400.0,
            recompute="none",
        ),
    ),
}


@dataclass(frozen=True)
class CostState:
    """Validated inputs in SI units (parameters, tokens, FLOP/s, dollars)."""

    n_params: float
    n_tokens: float
    n_gpus: int
    device: str
    mode: str
    throughput: float
    recompute: str
    price: float

    def estimate(self, n_gpus: int | None = None) -> TrainingTime:
        """``calc.time_to_train`` for this state (at another GPU count if given)."""
        n = self.n_gpus if n_gpus is None else n_gpus
        peak = DEVICES[self.device].peak_flops
        if self.mode == "mfu":
            return time_to_train(
                self.n_params,
                self.n_tokens,
                n,
                recompute=self.recompute,
                mfu=self.throughput / 100,
                peak_flops=peak,
                price_per_gpu_hour=self.price,
            )
        return time_to_train(
            self.n_params,
            self.n_tokens,
            n,
            self.throughput * 1e12,
            self.recompute,
            peak_flops=peak,
            price_per_gpu_hour=self.price,
        )


def validate(values: dict[str, Any]) -> CostState:
    """Check the controls with the calculators' checks; ValueError says what to fix."""
    choice("scenario", values["scenario"], list(SCENARIOS))
    params = number(
        "parameters (billions)",
        values["params_b"],
        0,
        1e6,
        lo_open=True,
        expected="a positive number of billions",
        hint="for a mixture of experts, the ACTIVATED parameters per token",
    )
    tokens = number(
        "tokens (billions)",
        values["tokens_b"],
        0,
        1e9,
        lo_open=True,
        expected="a positive number of billions",
    )
    n = pos_int("GPUs", values["n_gpus"])
    if n > MAX_GPUS:
        raise ValueError(f"GPUs must be at most {MAX_GPUS}, got {n}")
    choice("GPU", values["device"], list(DEVICES))
    choice("throughput as", values["mode"], list(MODES))
    choice("recompute", values["recompute"], RECOMPUTE)
    label = "MFU (%)" if values["mode"] == "mfu" else "TFLOP/s per GPU"
    hi = 100.0 if values["mode"] == "mfu" else DEVICES[values["device"]].peak_flops / 1e12
    x = number(
        label,
        values["throughput"],
        0,
        hi,
        lo_open=True,
        expected=f"a positive number up to {hi:g} (the GPU's dense bf16 peak)"
        if values["mode"] == "tflops"
        else "a percentage in (0, 100]",
    )
    price = number("price ($ per GPU-hour)", values["price"], 0, 1e6)
    state = CostState(
        params * 1e9,
        tokens * 1e9,
        n,
        values["device"],
        values["mode"],
        x,
        values["recompute"],
        price,
    )
    state.estimate()  # the calculator's own checks (e.g. HFU > 100% with recomputation)
    return state


def gpu_counts(n: int) -> list[int]:
    """The x axis: powers of two from n/64 to 64 n (at least 1), with n itself."""
    lo = max(1, n // 64)
    out, g = {n}, 1
    while g <= 64 * n:
        if g >= lo:
            out.add(g)
        g *= 2
    return sorted(out)


def figure_spec(st: CostState) -> Spec:
    """Days vs GPUs (log-log), the chosen count marked."""
    ns = gpu_counts(st.n_gpus)
    days = [st.estimate(n).days for n in ns]
    est = st.estimate()
    data = [
        dict(
            type="scatter",
            mode="lines",
            name="days to train (perfect scaling)",
            x=ns,
            y=days,
            line=dict(color="#4C78A8"),
            hovertemplate="%{x} GPUs: %{y:.3g} days<extra></extra>",
        ),
        dict(
            type="scatter",
            mode="markers",
            name=f"{st.n_gpus} GPUs: {est.days:.3g} days",
            x=[st.n_gpus],
            y=[est.days],
            marker=dict(color="#E45756", size=11),
            hovertemplate="%{x} GPUs: %{y:.3g} days<extra></extra>",
        ),
    ]
    layout = dict(
        width=FIGURE_WIDTH,
        height=420,
        margin=dict(l=70, r=20, t=60, b=50),
        title=dict(
            text=f"{st.n_params / 1e9:.4g}B params, {st.n_tokens / 1e9:.4g}B tokens on "
            f"{st.device}: days to train vs GPUs"
        ),
        xaxis=dict(title=dict(text="GPUs"), type="log"),
        yaxis=dict(title=dict(text="days (24 h, no failures)"), type="log"),
        legend=LEGEND_BESIDE,
    )
    return {"data": data, "layout": layout}


def summary_html(st: CostState) -> str:
    """The estimate in words, with the formula that produced it."""
    e = st.estimate()
    c = 8 if st.recompute == "full" else 6
    if st.mode == "mfu":
        formula = (
            f"6 T P / (n x peak x MFU) = 6 x {st.n_tokens:.3g} x {st.n_params:.3g} / "
            f"({st.n_gpus} x {DEVICES[st.device].peak_flops:.3g} x {st.throughput / 100:g})"
        )
    else:
        formula = (
            f"{c} T P / (n X) = {c} x {st.n_tokens:.3g} x {st.n_params:.3g} / "
            f"({st.n_gpus} x {st.throughput * 1e12:.3g})"
        )
    util = (
        f" MFU {e.mfu:.1%}, HFU {e.hfu:.1%} of the {DEVICES[st.device].peak_flops / 1e12:g} "
        f"TFLOP/s peak."
        if e.mfu is not None
        else ""
    )
    cost = f", <b>${e.cost / 1e6:,.3g}M</b> at ${st.price:g} per GPU-hour" if st.price else ""
    return (
        f"Time = {formula} seconds = <b>{e.days:,.1f} days</b>; <b>{e.gpu_hours / 1e6:,.3g}M "
        f"GPU-hours</b>{cost}.{util} Formula only: failures, restarts and evaluation add "
        "wall-clock time (Narayanan et al. 2021 Sec. 5.1; calc.time_to_train)."
    )


class TrainingCostExplorer(Explorer):
    """Days, GPU-hours and cost to train. ``set(scenario="gpt3")`` or any control."""

    TITLE = "Time and cost to train"
    CSS = "training-cost-explorer"
    validate = staticmethod(validate)
    figure_spec = staticmethod(figure_spec)
    summary_html = staticmethod(summary_html)

    def __init__(self, **initial: Any) -> None:
        controls = {
            "scenario": dropdown(
                "scenario", [(label, k) for k, (label, _) in SCENARIOS.items()], "custom"
            ),
            "params_b": float_text("parameters (billions)", 7.0),
            "tokens_b": float_text("tokens (billions)", 2000.0),
            "n_gpus": int_text("GPUs", 256),
            "device": dropdown("GPU", list(DEVICES), "H100-SXM5-80GB"),
            "mode": dropdown("throughput as", [(v, k) for k, v in MODES.items()], "mfu"),
            "throughput": float_text("MFU % or TFLOP/s", 40.0),
            "recompute": dropdown("recompute", list(RECOMPUTE), "none"),
            "price": float_text("$ per GPU-hour", 2.0),
        }
        super().__init__(controls, **initial)

    _filling = False

    def on_control_change(self, change: dict[str, Any]) -> None:
        # A scenario fills the controls; editing one of them afterwards makes it "custom".
        scenario = self.controls["scenario"]
        if self._filling:
            return
        held, self._holding, self._filling = self._holding, True, True
        try:
            if change["owner"] is scenario:
                for name, value in SCENARIOS[scenario.value][1].items():
                    self.controls[name].value = value
            elif scenario.value != "custom":
                preset = SCENARIOS[scenario.value][1]
                if any(self.values[k] != v for k, v in preset.items()):
                    scenario.value = "custom"
        finally:
            self._holding, self._filling = held, False


def training_cost_explorer(**initial: Any) -> TrainingCostExplorer:
    """A ready-to-display time-and-cost explorer (labs 10, 12)."""
    return TrainingCostExplorer(**initial)
