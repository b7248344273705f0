"""Numbers on cards come from ``lab_utils.calc``, never typed by hand, so they cannot drift.

A card's ``calc`` field names a function from the WHITELIST below, its keyword arguments,
the field of the result to read, a unit and a number of digits:

    calc: {fn: model_state_memory, args: {n_params: 7.0e9}, field: total, unit: GB, digits: 0}

and the card's text says ``{value}``, which is replaced by ``"112 GB"``. A card with several
numbers gives each spec a name (``calc: {z1: {...}, z3: {...}}``) and says ``{z1}``, ``{z3}``.
Optional ``scale`` multiplies the raw number, and ``divide_by`` (another spec) divides it, for
ratios such as "ZeRO-3 moves 1.5x the bytes of DDP".

Only the functions in ``CALC_FUNCTIONS`` can be called; nothing is evaluated from text (no eval,
no exec, no import by name). Every problem raises ``ValueError`` with a readable message.
"""

from __future__ import annotations

import inspect
import math
import re
from typing import Any, Callable

from lab_utils import calc
from lab_utils.calc.params import NARAYANAN_TABLE1


def _param_count(preset: str) -> calc.ParamCount:
    """Parameter breakdown of a named model in ``calc.PRESETS`` (lab 01)."""
    return calc.param_count(calc.preset(preset))


def _bytes_per_param(recipe: str) -> float:
    """Model-state bytes per parameter of a recipe in ``calc.RECIPES`` (lab 01)."""
    if recipe not in calc.RECIPES:
        raise ValueError(f"unknown recipe {recipe!r}; choose one of: {', '.join(calc.RECIPES)}")
    return calc.RECIPES[recipe].per_param


def _device(name: str) -> calc.Device:
    if name not in calc.DEVICES:
        raise ValueError(f"unknown device {name!r}; choose one of: {', '.join(calc.DEVICES)}")
    return calc.DEVICES[name]


def _link(name: str) -> calc.Link:
    if name not in calc.LINKS:
        raise ValueError(f"unknown link {name!r}; choose one of: {', '.join(calc.LINKS)}")
    return calc.LINKS[name]


def _megatron_run(params_b: float) -> Any:
    """One row of Narayanan et al. 2021, Table 1, by its published size in billions."""
    for run in NARAYANAN_TABLE1:
        if run.params_b == params_b:
            return run
    sizes = ", ".join(f"{r.params_b:g}" for r in NARAYANAN_TABLE1)
    raise ValueError(f"no Narayanan et al. 2021 Table 1 row of {params_b!r}B; rows: {sizes}")


def _train_time(
    n_params: float, tokens: float, n_devices: int, flops_per_device: float, recompute: bool = False
) -> float:
    """Seconds to train: flops_per_token(P) * tokens / (n * achieved FLOP/s). With full
    recomputation the forward runs twice: 8P instead of 6P per token (Narayanan et al. 2021,
    Sec. 5.1, "8TP/(nX)")."""
    per_token = calc.flops_per_token(n_params) * (8 / 6 if recompute else 1)
    return per_token * tokens / (n_devices * flops_per_device)


# The whitelist: card name -> callable. Add an entry here to make a calculator usable on cards.
CALC_FUNCTIONS: dict[str, Callable[..., Any]] = {
    "model_state_memory": calc.model_state_memory,
    "max_params_that_fit": calc.max_params_that_fit,
    "bytes_per_param": _bytes_per_param,
    "param_count": _param_count,
    "narayanan_param_count": calc.narayanan_param_count,
    "activation_bytes_per_layer": calc.activation_bytes_per_layer,
    "activation_memory": calc.activation_memory,
    "checkpoint_segments": calc.checkpoint_segments,
    "optimal_segments": calc.optimal_segments,
    "float_format": calc.float_format,
    "logits_bytes": calc.logits_bytes,
    "in_flight_microbatches": calc.in_flight_microbatches,
    "ring_bytes_per_rank": calc.ring_bytes_per_rank,
    "busbw_factor": calc.busbw_factor,
    "collective_time": calc.collective_time,
    "dp_bytes_per_rank": calc.dp_bytes_per_rank,
    "tp_layer_comm": calc.tp_layer_comm,
    "pp_bytes_per_microbatch": calc.pp_bytes_per_microbatch,
    "bubble": calc.bubble,
    "amdahl_speedup": calc.amdahl_speedup,
    "amdahl_limit": calc.amdahl_limit,
    "gustafson_speedup": calc.gustafson_speedup,
    "fit_serial_fraction": calc.fit_serial_fraction,
    "flops_per_token": calc.flops_per_token,
    "mfu": calc.mfu,
    "train_time": _train_time,
    "device": _device,
    "link": _link,
    "megatron_run": _megatron_run,
}

# unit -> (divisor, suffix). Byte units follow calc.units (GB = 1e9, GiB = 2**30).
UNITS: dict[str, tuple[float, str]] = {
    **{u: (f, f" {u}") for u, f in calc.units.UNITS.items()},
    "GB/s": (1e9, " GB/s"),
    "TFLOP/s": (1e12, " TFLOP/s"),
    "billion": (1e9, " billion"),
    "s": (1, " s"),
    "ms": (1e-3, " ms"),
    "us": (1e-6, " us"),
    "days": (86400, " days"),
    "%": (0.01, "%"),
    "x": (1, "x"),
    "": (1, ""),
}

SPEC_KEYS = {"fn", "args", "field", "unit", "digits", "scale", "divide_by"}
PLACEHOLDER = re.compile(r"\{([A-Za-z_][A-Za-z0-9_]*)\}")


def normalise_specs(raw: object) -> dict[str, dict]:
    """A card's ``calc`` field -> {placeholder name: spec}; a single spec is named 'value'."""
    if not isinstance(raw, dict) or not raw:
        raise ValueError(
            "calc must be a mapping: either one spec {fn: ..., args: ...} or "
            "named specs {name: {fn: ...}, ...}"
        )
    if "fn" in raw:
        return {"value": raw}
    for name in raw:
        if not isinstance(name, str) or not PLACEHOLDER.fullmatch("{" + name + "}"):
            raise ValueError(f"calc value name {name!r} must be an identifier like 'z1'")
    return dict(raw)


def compute(spec: object, where: str = "calc") -> float:
    """Evaluate one spec with the whitelisted function; return the scaled raw number."""
    if not isinstance(spec, dict):
        raise ValueError(f"{where} must be a mapping with at least 'fn', got {spec!r}")
    unknown = set(spec) - SPEC_KEYS
    if unknown:
        raise ValueError(f"{where}: unknown key(s) {sorted(unknown)}; allowed: {sorted(SPEC_KEYS)}")
    name = spec.get("fn")
    if not isinstance(name, str) or name not in CALC_FUNCTIONS:
        raise ValueError(
            f"{where}: fn {name!r} is not an allowed calculator; allowed: "
            f"{', '.join(sorted(CALC_FUNCTIONS))}"
        )
    fn, args = CALC_FUNCTIONS[name], spec.get("args", {})
    if not isinstance(args, dict):
        raise ValueError(f"{where}: args must be a mapping of keyword arguments, got {args!r}")
    try:
        inspect.signature(fn).bind(**args)
    except TypeError as exc:
        raise ValueError(f"{where}: bad arguments for {name}: {exc}") from None
    try:
        result = fn(**args)
    except (ValueError, TypeError, KeyError) as exc:
        raise ValueError(f"{where}: {name}({args}) failed: {exc}") from None
    value = _read_field(result, spec.get("field"), f"{where} ({name})")
    scale = spec.get("scale", 1)
    if isinstance(scale, bool) or not isinstance(scale, (int, float)):
        raise ValueError(f"{where}: scale must be a number, got {scale!r}")
    value *= scale
    if "divide_by" in spec:
        den = compute(spec["divide_by"], f"{where}.divide_by")
        if den == 0:
            raise ValueError(f"{where}: divide_by evaluates to 0")
        value /= den
    return value


def _read_field(result: Any, field: object, where: str) -> float:
    if field is None:
        value = result
    elif not isinstance(field, str) or not re.fullmatch(r"[a-z][a-z0-9_]*", field):
        raise ValueError(f"{where}: field must be a public attribute name, got {field!r}")
    elif not hasattr(result, field):
        public = sorted(
            a for a in dir(result) if not a.startswith("_") and not callable(getattr(result, a))
        )
        raise ValueError(f"{where}: result has no field {field!r}; it has: {', '.join(public)}")
    else:
        value = getattr(result, field)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise ValueError(
            f"{where}: expected a finite number, got {value!r}; name a numeric "
            "'field' of the result"
        )
    return float(value)


def render_value(spec: dict, where: str = "calc") -> tuple[float, str]:
    """(raw number, formatted text with unit), e.g. (112e9, "112 GB")."""
    value = compute(spec, where)
    unit, digits = spec.get("unit", ""), spec.get("digits", 1)
    if unit not in UNITS:
        raise ValueError(
            f"{where}: unknown unit {unit!r}; use one of {', '.join(map(repr, UNITS))}"
        )
    if isinstance(digits, bool) or not isinstance(digits, int) or not 0 <= digits <= 6:
        raise ValueError(f"{where}: digits must be a whole number 0..6, got {digits!r}")
    divisor, suffix = UNITS[unit]
    return value, f"{value / divisor:,.{digits}f}{suffix}"


def fill(text: str, rendered: dict[str, str], where: str) -> str:
    """Replace {name} placeholders; an unknown name is an error (a typo would show raw braces)."""

    def sub(m: re.Match) -> str:
        if m.group(1) not in rendered:
            known = ", ".join(sorted(rendered)) or "none (the card has no calc field)"
            raise ValueError(
                f"{where}: placeholder {{{m.group(1)}}} has no calc value; known: {known}"
            )
        return rendered[m.group(1)]

    return PLACEHOLDER.sub(sub, text)


def placeholders(text: str) -> set[str]:
    return set(PLACEHOLDER.findall(text))


# ---- lab 09 (Mixture of Experts): presets by name, so cards can quote calc.moe's numbers
def _moe_params(preset: str, n_experts: int | None = None) -> Any:
    """Total / active parameters of a model in ``calc.MOE_PRESETS`` (lab 09), optionally with
    another number of routed experts (same top-k, same expert size)."""
    import dataclasses
    from types import SimpleNamespace

    if preset not in calc.MOE_PRESETS:
        raise ValueError(
            f"unknown MoE preset {preset!r}; choose one of: {', '.join(calc.MOE_PRESETS)}"
        )
    cfg = calc.MOE_PRESETS[preset]
    if n_experts is not None:
        cfg = dataclasses.replace(cfg, n_experts=n_experts)
    count = calc.moe_param_count(cfg)
    return SimpleNamespace(
        total=count.total,
        active=count.active(),
        active_no_embedding=count.active(count_embedding=False),
        routed_experts=count.routed_experts,
    )


def _moe_memory(preset: str, ep: int, dp: int = 1, pp: int = 1, zero_stage: int = 0) -> Any:
    """Model-state bytes per rank of a ``calc.MOE_PRESETS`` model under EP x DP x PP (lab 09)."""
    if preset not in calc.MOE_PRESETS:
        raise ValueError(
            f"unknown MoE preset {preset!r}; choose one of: {', '.join(calc.MOE_PRESETS)}"
        )
    return calc.moe_memory_per_rank(calc.MOE_PRESETS[preset], ep, dp, pp, zero_stage)


CALC_FUNCTIONS.update(
    {
        "moe_params": _moe_params,
        "moe_memory": _moe_memory,
        "all_to_all_bytes_per_layer": calc.all_to_all_bytes_per_layer,
    }
)
