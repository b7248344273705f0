"""Lab 02's FP8 experiments, EMULATED on the CPU: casts, per-tensor scaling, a matmul.

torch has the two FP8 storage types (``torch.float8_e4m3fn``, ``torch.float8_e5m2``); on a
CPU there are no FP8 tensor cores, so the "FP8 matmul" here casts the inputs to FP8 with a
scale (the rounding an FP8 GEMM sees), multiplies the FP8 values in fp32 and divides the
scales out. That reproduces FP8's NUMBERS, not its speed (which the calculator gives from
published peaks). Micikevicius et al. 2022, "FP8 Formats for Deep Learning".

    cast_report(t, fmt, scale)        what a cast does to a tensor: saturated / inf / flushed
    cast_rows(grads)                  cast_report over formats, scalings and magnitudes (table)
    DelayedScaler(fmt, history)       scale from the amax of PREVIOUS steps (Transformer Engine)
    emulated_matmul(a, b, ...)        FP8-rounded matmul, fp32 accumulate, scales divided out
    model_grads(seed)                 real gradients of a TinyGPT step, the tensors to cast
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass

import torch

from lab_utils.calc.fp8 import current_scale, delayed_scale, float_format
from lab_utils.data import token_batches
from lab_utils.models import GPTConfig, TinyGPT, lm_loss

FP8 = {"e4m3": torch.float8_e4m3fn, "e5m2": torch.float8_e5m2}


def to_fp8(t: torch.Tensor, fmt: str, scale: float = 1.0) -> torch.Tensor:
    """Quantise: multiply by ``scale``, cast to FP8 (round to nearest)."""
    return (t.float() * scale).to(FP8[fmt])


def from_fp8(t8: torch.Tensor, scale: float = 1.0) -> torch.Tensor:
    """Dequantise: back to fp32, divide the scale out."""
    return t8.float() / scale


@dataclass(frozen=True)
class CastReport:
    fmt: str
    scale: float
    saturated: float  # share of values whose |x * scale| > the format's max
    inf_or_nan: float  # share that came back inf/NaN
    flushed: float  # share of non-zero values that came back exactly 0 (underflow)
    rel_error: float  # ||dequant(cast(x)) - x|| / ||x|| over the finite values


def cast_report(t: torch.Tensor, fmt: str, scale: float = 1.0) -> CastReport:
    x = t.float().flatten()
    back = from_fp8(to_fp8(x, fmt, scale), scale)
    finite = torch.isfinite(back)
    nonzero = x != 0
    err = (back[finite] - x[finite]).norm() / x[finite].norm().clamp_min(1e-30)
    top = float_format(fmt).max * (1 + 1e-6)  # amax x (max / amax) may round up a hair
    return CastReport(
        fmt,
        scale,
        (x.double().abs() * scale > top).float().mean().item(),
        (~finite).float().mean().item(),
        ((back == 0) & nonzero).float().sum().item() / max(int(nonzero.sum()), 1),
        err.item(),
    )


class DelayedScaler:
    """Per-tensor DELAYED scaling: cast with the scale from the last ``history`` amaxes, then
    record this tensor's amax for the next step (no pass over the tensor before the cast)."""

    def __init__(self, fmt: str, history: int = 16, margin: int = 0) -> None:
        self.fmt, self.margin = fmt, margin
        self.amax_history: deque[float] = deque(maxlen=history)

    def scale(self) -> float:
        return delayed_scale(list(self.amax_history), float_format(self.fmt).max, self.margin)

    def cast(self, t: torch.Tensor) -> tuple[torch.Tensor, float]:
        s = self.scale()
        t8 = to_fp8(t, self.fmt, s)
        self.amax_history.append(t.abs().max().item())
        return t8, s


def current(t: torch.Tensor, fmt: str, margin: int = 0) -> float:
    """Per-tensor CURRENT scaling: from this tensor's own amax."""
    return current_scale(t.abs().max().item(), float_format(fmt).max, margin)


def cast_rows(grads: torch.Tensor) -> list[dict]:
    """Lab 02's cast table: the tensor as is and x 1e6, to e4m3 and e5m2, unscaled and with the
    current (per-tensor amax) scale: what each cast saturated, turned inf/NaN, flushed to 0."""
    rows = []
    for what, t in (("as is", grads), ("x 1e6", grads * 1e6)):
        for fmt in ("e4m3", "e5m2"):
            for scaling, s in (("none", 1.0), ("current", current(t, fmt))):
                r = cast_report(t, fmt, s)
                rows.append(
                    {
                        "tensor": what,
                        "format": fmt,
                        "scaling": scaling,
                        "scale": s,
                        "overflowed": r.saturated,
                        "became inf/NaN": r.inf_or_nan,
                        "flushed to 0": r.flushed,
                        "rel. error": r.rel_error,
                    }
                )
    return rows


def delayed_vs_current(
    steps: list[torch.Tensor], fmt: str = "e5m2", history: int = 4
) -> list[dict]:
    """Cast a sequence of tensors (one per step) with delayed and with current scaling."""
    scaler, rows = DelayedScaler(fmt, history), []
    for i, t in enumerate(steps):
        _, s_delayed = scaler.cast(t)
        s_now = current(t, fmt)
        d, c = cast_report(t, fmt, s_delayed), cast_report(t, fmt, s_now)
        rows.append(
            {
                "step": i,
                "amax": t.abs().max().item(),
                "delayed scale": s_delayed,
                "current scale": s_now,
                "delayed: overflowed": d.saturated,
                "current: overflowed": c.saturated,
                "delayed: error": d.rel_error,
                "current: error": c.rel_error,
            }
        )
    return rows


def emulated_matmul(
    a: torch.Tensor, b: torch.Tensor, fmt_a: str = "e4m3", fmt_b: str = "e4m3", scaled: bool = True
) -> torch.Tensor:
    """EMULATION of an FP8 GEMM: a and b rounded to FP8 (with per-tensor current scales, or
    none), multiplied with full fp32 accumulation (the best case: an H800 tensor core keeps about
    14 accumulator bits, DeepSeek-V3 Sec. 3.3.2), scales divided out. (M, K) @ (K, N) -> (M, N)."""
    sa = current(a, fmt_a) if scaled else 1.0
    sb = current(b, fmt_b) if scaled else 1.0
    return (from_fp8(to_fp8(a, fmt_a, sa)) @ from_fp8(to_fp8(b, fmt_b, sb))) / (sa * sb)


def matmul_errors(a: torch.Tensor, b: torch.Tensor) -> list[dict]:
    """Relative error ||C - C_fp32|| / ||C_fp32|| of each way of computing a @ b."""
    ref = a.double() @ b.double()

    def err(c: torch.Tensor) -> float:
        return ((c.double() - ref).norm() / ref.norm()).item()

    return [
        {"matmul": "fp32", "how": "measured", "rel. error": err(a @ b)},
        {
            "matmul": "bf16 inputs",
            "how": "measured",
            "rel. error": err(a.bfloat16().float() @ b.bfloat16().float()),
        },
        {
            "matmul": "e4m3 x e4m3, no scaling",
            "how": "emulated",
            "rel. error": err(emulated_matmul(a, b, scaled=False)),
        },
        {
            "matmul": "e4m3 x e4m3, per-tensor scaling",
            "how": "emulated",
            "rel. error": err(emulated_matmul(a, b)),
        },
        {
            "matmul": "e4m3 x e5m2, per-tensor scaling",
            "how": "emulated",
            "rel. error": err(emulated_matmul(a, b, "e4m3", "e5m2")),
        },
    ]


def scaled_mm_reference(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor | None:
    """torch's own FP8 GEMM (``torch._scaled_mm``) on the same scaled inputs, where this
    build has it (used by the tests to check the emulation); None otherwise."""
    if not hasattr(torch, "_scaled_mm"):
        return None
    sa, sb = current(a, "e4m3"), current(b, "e4m3")
    a8, b8 = to_fp8(a, "e4m3", sa), to_fp8(b, "e4m3", sb).t().contiguous().t()
    try:
        return torch._scaled_mm(
            a8,
            b8,
            scale_a=torch.tensor(1 / sa),
            scale_b=torch.tensor(1 / sb),
            out_dtype=torch.float32,
        )
    except (RuntimeError, NotImplementedError):
        return None


def model_grads(seed: int = 0) -> dict[str, torch.Tensor]:
    """Gradients of one TinyGPT step on the course's synthetic tokens: real tensors to cast."""
    cfg = GPTConfig()
    model = TinyGPT(cfg, seed=seed)
    x, y = token_batches(1, 8, cfg.seq_len, cfg.vocab_size, seed=seed)[0]
    lm_loss(model(x), y).backward()
    return {n: p.grad.detach().clone() for n, p in model.named_parameters()}


def overflow_values() -> list[dict]:
    """What the cast does to a value above each format's max (measured on this torch)."""
    rows = []
    for fmt, dt in FP8.items():
        top = float_format(fmt).max
        for v in (top, 2 * top, 1e6, float("inf")):
            rows.append(
                {"format": fmt, "value": v, "after the cast": torch.tensor(v).to(dt).float().item()}
            )
    return rows
