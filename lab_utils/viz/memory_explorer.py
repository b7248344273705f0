"""Memory explorer: what one GPU holds, DDP next to ZeRO-1/2/3 (labs 01, 05, 08).

A thin view over ``calc.model_state_memory`` (weights, grads, fp32 master, optimizer states;
Rajbhandari et al. 2020 Sec. 5) and ``calc.activation_memory`` (Korthikanti et al. 2022,
Table 2). Bars are per GPU; the dashed line is the device's memory. Korthikanti's formula
assumes attention that stores its s x s scores (5as/h of the 34 + 5as/h); the "FlashAttention"
box drops that term, as SDPA / FlashAttention kernels (Dao et al. 2022) recompute the scores in
backward instead of storing them, which is what most models train with today.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from lab_utils.calc import (
    GB,
    PRESETS,
    RECIPES,
    ZERO_STAGES,
    GiB,
    ModelConfig,
    activation_memory,
    model_state_memory,
    param_count,
    zero_stage,
)
from lab_utils.calc._check import boolean, choice, divides, number, pos_int
from lab_utils.calc.activations import RECOMPUTE
from lab_utils.viz._base import Explorer, Spec
from lab_utils.viz.controls import checkbox, dropdown, float_text, int_text
from lab_utils.viz.style import FIGURE_WIDTH, LEGEND_BESIDE

# The syllabus's worked examples use ROUND parameter counts (7e9 x 16 B = 112 GB); activations
# need a shape, so each borrows the architecture of the nearest published model (named).
WORKED: dict[str, tuple[str, float | None, str]] = {
    # key: (label, round n_params or None = exact count of the preset, preset for the shape)
    "1B": ("1B (GPT-style 1b preset, exact)", None, "1b"),
    "3B": ("3B example (3e9; megatron-3.6b shape)", 3e9, "megatron-3.6b"),
    "7B": ("7B example (7e9; llama2-7b shape)", 7e9, "llama2-7b"),
    "7.5B": ("7.5B ZeRO Fig. 1 (megatron-7.5b)", 7.5e9, "megatron-7.5b"),
    "70B": ("70B (70e9; llama2-70b shape)", 70e9, "llama2-70b"),
    "GPT-3 175B": ("GPT-3 175B (preset, exact)", None, "gpt3-175b"),
}
MODEL_OPTIONS = [(label, key) for key, (label, _, _) in WORKED.items()] + [
    (f"{name} (preset, exact)", name) for name in PRESETS
]
UNITS = {"GB": GB, "GiB": GiB}
COMPONENTS = (
    ("params", "weights (16-bit)", "#4C78A8"),
    ("grads", "gradients", "#F58518"),
    ("master", "fp32 master weights", "#72B7B2"),
    ("optimizer", "optimizer states", "#E45756"),
    ("activations", "activations", "#54A24B"),
)
STAGE_NAMES = ("DDP (ZeRO-0)", "ZeRO-1", "ZeRO-2", "ZeRO-3")


def model_of(key: str) -> tuple[float, ModelConfig]:
    """(n_params, shape) for a model key: a worked example or any ``calc.PRESETS`` name."""
    if key in WORKED:
        _, n, shape = WORKED[key]
        cfg = PRESETS[shape]
        return (n if n is not None else float(param_count(cfg).total)), cfg
    if key in PRESETS:
        return float(param_count(PRESETS[key]).total), PRESETS[key]
    raise ValueError(f"unknown model {key!r}; choose one of {', '.join(WORKED)} or a preset")


@dataclass(frozen=True)
class MemoryState:
    """Validated inputs. ``device_gb`` is decimal GB (datasheets: "80 GB" = 80e9 bytes)."""

    model: str
    n_params: float
    cfg: ModelConfig
    recipe: str
    zero_stage: int
    dp: int
    tp: int
    pp: int
    micro_batch: int
    seq_len: int
    recompute: str
    sequence_parallel: bool
    flash_attention: bool
    activations: bool
    offload: bool
    compare: bool
    device_gb: float
    unit: str


def validate(values: dict[str, Any]) -> MemoryState:
    """Check the controls and return a ``MemoryState``; ValueError says what to fix."""
    n, cfg = model_of(values["model"])
    # The calculators' own checks (calc._check), so a typed 2.5 or 'abc' gets their message.
    for name in ("dp", "tp", "pp", "micro_batch", "seq_len"):
        pos_int(name, values[name])
    choice("recipe", values["recipe"], list(RECIPES))
    zero_stage(values["zero_stage"])
    choice("recompute", values["recompute"], RECOMPUTE)
    divides(
        "tp",
        values["tp"],
        "n_heads",
        cfg.n_heads,
        f"each tensor-parallel rank must own whole attention heads of {cfg.name}",
    )
    if cfg.n_layers % values["pp"]:
        raise ValueError(
            f"pp={values['pp']} does not divide the {cfg.n_layers} layers of "
            f"{cfg.name}: every pipeline stage must get whole layers"
        )
    dev = number(
        "device memory (GB)",
        values["device_gb"],
        0,
        1e6,
        lo_open=True,
        expected="a positive number of GB below 1e6",
    )
    choice("unit", values["unit"], list(UNITS))
    for flag in ("sequence_parallel", "flash_attention", "activations", "offload", "compare"):
        boolean(flag, values[flag])
    return MemoryState(
        values["model"],
        n,
        cfg,
        values["recipe"],
        values["zero_stage"],
        values["dp"],
        values["tp"],
        values["pp"],
        values["micro_batch"],
        values["seq_len"],
        values["recompute"],
        bool(values["sequence_parallel"]),
        bool(values["flash_attention"]),
        bool(values["activations"]),
        bool(values["offload"]),
        bool(values["compare"]),
        float(dev),
        values["unit"],
    )


def breakdown(st: MemoryState, zero_stage: int) -> dict[str, float]:
    """Bytes per GPU by component for one ZeRO stage (the numbers the bars show)."""
    ms = model_state_memory(
        st.n_params, st.recipe, zero_stage, st.dp, st.tp, st.pp, offload_optimizer=st.offload
    )
    out = ms.as_dict()
    act = 0.0
    if st.activations:  # first pipeline stage, 1F1B with m >= p: p micro-batches in flight
        act = activation_memory(
            st.seq_len,
            st.micro_batch,
            st.cfg.hidden,
            st.cfg.n_heads,
            st.cfg.n_layers,
            st.tp,
            st.pp,
            n_micro=st.pp,
            sequence_parallel=st.sequence_parallel and st.tp > 1,
            recompute=st.recompute,
            flash_attention=st.flash_attention,
        ).total
    out["activations"] = act
    return out


def figure_spec(st: MemoryState) -> Spec:
    """Stacked bars (one per ZeRO stage, or just the chosen one) and the capacity line."""
    stages = ZERO_STAGES if st.compare else (st.zero_stage,)
    names = [STAGE_NAMES[s] for s in stages]
    parts = [breakdown(st, s) for s in stages]
    scale = UNITS[st.unit]
    # The chosen stage gets a black outline, so the comparison keeps the selection visible.
    outline = [2.5 if s == st.zero_stage else 0 for s in stages]
    data: list[dict[str, Any]] = []
    for key, label, color in COMPONENTS:
        data.append(
            dict(
                type="bar",
                name=label,
                x=names,
                y=[p[key] / scale for p in parts],
                marker=dict(color=color, line=dict(color="black", width=outline)),
                hovertemplate=f"%{{x}}<br>{label}: %{{y:.2f}} {st.unit}<extra></extra>",
            )
        )
    cap = st.device_gb * GB / scale
    data.append(
        dict(
            type="scatter",
            mode="lines",
            name=f"device memory ({st.device_gb:g} GB)",
            x=names,
            y=[cap] * len(names),
            line=dict(color="black", dash="dash"),
            hovertemplate=f"device memory {cap:.1f} {st.unit}<extra></extra>",
        )
    )
    unit_note = "1 GB = 10^9 bytes" if st.unit == "GB" else "1 GiB = 2^30 bytes"
    layout = dict(
        barmode="stack",
        width=FIGURE_WIDTH,
        height=360,
        margin=dict(l=70, r=20, t=60, b=50),
        title=dict(
            text=f"{st.n_params / 1e9:.2f}B params, {st.recipe}, dp={st.dp} tp={st.tp} "
            f"pp={st.pp}: memory per GPU"
        ),
        yaxis=dict(title=dict(text=f"memory per GPU ({st.unit}; {unit_note})"), rangemode="tozero"),
        xaxis=dict(title=dict(text="data-parallel strategy over dp ranks")),
        legend=LEGEND_BESIDE,
    )
    return {"data": data, "layout": layout}


def summary_html(st: MemoryState) -> str:
    """The chosen stage's numbers in words, in the chosen unit."""
    p = breakdown(st, st.zero_stage)
    scale, u = UNITS[st.unit], st.unit
    state = p["params"] + p["grads"] + p["master"] + p["optimizer"]
    total = state + p["activations"]
    fits = total <= st.device_gb * GB
    verdict = (
        "<span style='color:#2e7d32'>fits</span>"
        if fits
        else "<span style='color:#c62828'><b>does not fit</b></span>"
    )
    extra = ""
    if st.offload:
        host = model_state_memory(
            st.n_params, st.recipe, st.zero_stage, st.dp, st.tp, st.pp, offload_optimizer=True
        ).host
        extra = f" Offloaded to CPU memory: {host / scale:.1f} {u}."
    if st.zero_stage and st.dp == 1:
        extra += " With dp=1 ZeRO has nothing to shard over: set dp > 1."
    return (
        f"<b>{STAGE_NAMES[st.zero_stage]}</b>: model state {state / scale:.1f} {u} + "
        f"activations {p['activations'] / scale:.1f} {u} = <b>{total / scale:.1f} {u}</b> "
        f"per GPU, {verdict} in {st.device_gb:g} GB ({st.device_gb * GB / scale:.1f} {u})."
        f"{extra} Activations: first pipeline stage, 1F1B, {st.pp} micro-batch(es) in "
        f"flight, micro-batch {st.micro_batch} x {st.seq_len} tokens, "
        + (
            "FlashAttention (no s x s scores stored)."
            if st.flash_attention
            else "attention that stores its s x s scores (Korthikanti's 5as/h term)."
        )
    )


class MemoryExplorer(Explorer):
    """Per-GPU memory by component vs device capacity. ``set(model="7B", dp=8, ...)``."""

    TITLE = "Memory explorer"
    CSS = "memory-explorer"
    validate = staticmethod(validate)
    figure_spec = staticmethod(figure_spec)
    summary_html = staticmethod(summary_html)

    def __init__(self, **initial: Any) -> None:
        controls = {
            "model": dropdown("model", MODEL_OPTIONS, "7B"),
            "recipe": dropdown("recipe", list(RECIPES), "mixed_adam"),
            "zero_stage": dropdown("ZeRO stage", [(n, i) for i, n in enumerate(STAGE_NAMES)], 0),
            "dp": int_text("dp (ranks)", 1),
            "tp": int_text("tp", 1),
            "pp": int_text("pp", 1),
            "micro_batch": int_text("micro-batch", 1),
            "seq_len": int_text("seq len (tokens)", 2048),
            "recompute": dropdown("recompute", list(RECOMPUTE), "none"),
            "sequence_parallel": checkbox("sequence parallel", False),
            "flash_attention": checkbox("FlashAttention / SDPA", False),
            "activations": checkbox("include activations", True),
            "offload": checkbox("offload optimizer to CPU", False),
            "compare": checkbox("show DDP vs ZeRO-1/2/3", True),
            "device_gb": float_text("device memory (GB)", 80.0),
            "unit": dropdown("print in", [("GB (1e9 B)", "GB"), ("GiB (2^30 B)", "GiB")], "GB"),
        }
        super().__init__(controls, **initial)


def memory_explorer(**initial: Any) -> MemoryExplorer:
    """A ready-to-display memory explorer (labs 01, 05, 08)."""
    return MemoryExplorer(**initial)
