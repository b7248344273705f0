"""Lab 02's precision experiments: formats, loss scaling, autocast (one process, CPU).

    format_rows(names)           each format's layout and range: formula (calc.fp8) and torch.finfo
    layout_figure(names)         the bit layouts as stacked bars
    train(dtype, ...)            a linear model with 16-bit forward/backward and fp32 master
                                 weights, with a static or dynamic loss scale (overflow, underflow)
    attention_logits(...)        a forward-pass overflow that no loss scale can reach
    amp_step(...)                the practitioner's AMP step: autocast + GradScaler
    autocast_dtypes(model, ...)  the dtype of every op's output under autocast, by a dispatch hook

FP8 lives in fp8.py, checkpointing / accumulation / large batches in memory.py.
"""

from __future__ import annotations

import math
from collections import OrderedDict

import plotly.graph_objects as go
import torch
import torch.nn.functional as F
from torch import nn
from torch.utils._python_dispatch import TorchDispatchMode

from lab_utils.calc.fp8 import float_format
from lab_utils.models import lm_loss

TORCH_DTYPES = {
    "fp32": torch.float32,
    "fp16": torch.float16,
    "bf16": torch.bfloat16,
    "e5m2": torch.float8_e5m2,
    "e4m3": torch.float8_e4m3fn,
}


def format_rows(names=("fp32", "fp16", "bf16")) -> list[dict]:
    """One row per format: bits from calc.fp8 (formula) next to torch.finfo (what torch has)."""
    rows = []
    for name in names:
        f, fi = float_format(name), torch.finfo(TORCH_DTYPES[name])
        rows.append(
            {
                "format": name,
                "sign": 1,
                "exp": f.exp_bits,
                "mant": f.mant_bits,
                "max (formula)": f.max,
                "max (torch)": fi.max,
                "min normal": fi.smallest_normal,
                "min subnormal": f.smallest_subnormal,
                "eps (relative step)": fi.eps,
                "binades": f.binades,
            }
        )
        assert f.max == fi.max and f.smallest_normal == fi.smallest_normal and f.eps == fi.eps
    return rows


def layout_figure(names=("fp32", "fp16", "bf16")) -> go.Figure:
    layout = {n: (1, float_format(n).exp_bits, float_format(n).mant_bits) for n in names}
    fig = go.Figure()
    for i, (part, color) in enumerate(
        (("sign", "#E45756"), ("exponent", "#4C78A8"), ("mantissa", "#72B7B2"))
    ):
        fig.add_trace(
            go.Bar(
                y=list(layout),
                x=[v[i] for v in layout.values()],
                name=part,
                orientation="h",
                marker_color=color,
                text=[v[i] for v in layout.values()],
            )
        )
    fig.update_layout(
        barmode="stack",
        title="Bit layouts",
        xaxis_title="bits",
        width=700,
        height=80 + 45 * len(names),
        yaxis=dict(autorange="reversed"),
    )
    return fig


# ----------------------------------------------------------------------------- loss scaling
def make_data(n: int = 256, d: int = 16, scale: float = 5e-5, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    w_true = torch.randn(d, 1, generator=g)
    x = torch.randn(n, d, generator=g) * scale  # (n, d): tiny inputs
    return x, x @ w_true  # targets (n, 1)


def train(dtype, loss_scale=1.0, dynamic=False, check=True, steps=120, growth_interval=20):
    """Linear model: 16-bit forward and weight gradient, fp32 loss, fp32 master weights + Adam.

    The gradient is computed from (loss x scale) and divided by the scale in fp32. ``dynamic``:
    halve the scale and skip the step on inf/NaN, double it after ``growth_interval`` clean
    steps (Micikevicius et al. 2018, Sec. 3.2). ``check=False`` applies whatever comes out.
    """
    x, y = make_data()
    model = nn.Linear(16, 1, bias=False).to(dtype)  # the 16-bit working copy
    master = torch.zeros(1, 16, requires_grad=True)  # fp32 master weights
    opt = torch.optim.Adam([master], lr=5e-2)
    scale, good = loss_scale, 0
    log = {"loss": [], "zero_grads": [], "skipped": [], "scale": []}
    for step in range(steps):
        with torch.no_grad():
            model.weight.copy_(master)  # round the master into 16 bits
        model.zero_grad()
        loss = F.mse_loss(model(x.to(dtype)).float(), y)  # loss computed in fp32
        (loss * scale).backward()  # 16-bit gradients, scaled
        grad = model.weight.grad.float() / scale  # unscale in fp32
        log["loss"].append(F.mse_loss(x @ master.detach().T, y).item())
        log["zero_grads"].append((model.weight.grad == 0).float().mean().item())
        log["scale"].append(scale)
        if check and not torch.isfinite(grad).all():  # overflow: skip this step
            log["skipped"].append(step)
            if dynamic:
                scale, good = scale / 2, 0  # back off
            continue
        master.grad = grad
        opt.step()
        if dynamic:
            good += 1
            if good == growth_interval:  # a run of clean steps: try bigger
                scale, good = scale * 2, 0
    return log


def attention_logits(
    dtype, magnitude: float = 50.0, head_dim: int = 64, loss_scale: float = 1.0, seed: int = 0
) -> dict:
    """q k^T for activations of size ~``magnitude`` in ``dtype``; then softmax and a loss.

    The overflow happens in the FORWARD pass, before there is a loss to scale: ``loss_scale``
    multiplies a loss that is already NaN. Returns the largest logit and whether the loss is
    finite."""
    g = torch.Generator().manual_seed(seed)
    q = (torch.randn(8, head_dim, generator=g).abs() * magnitude).to(dtype)  # (T, hd)
    k = (torch.randn(8, head_dim, generator=g).abs() * magnitude).to(dtype)
    logits = q @ k.T  # (T, T)
    loss = F.softmax(logits.float(), dim=-1).max() * loss_scale
    return {
        "max |logit|": logits.float().abs().max().item(),
        "inf logits": int(torch.isinf(logits).sum()),
        "loss": loss.item(),
    }


# ----------------------------------------------------------------------------- autocast
def amp_step(model, optimizer, scaler, x, y, dtype=torch.bfloat16, device_type="cpu") -> float:
    """One training step as a practitioner writes it (PyTorch AMP recipe)."""
    optimizer.zero_grad(set_to_none=True)
    with torch.autocast(device_type=device_type, dtype=dtype):  # matmuls in 16 bits
        loss = lm_loss(model(x), y)  # the loss comes out in fp32
    scaler.scale(loss).backward()  # fp16: multiply by S; a disabled scaler passes through
    scaler.unscale_(optimizer)  # divide the grads by S BEFORE clipping
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    scaler.step(optimizer)  # skipped if any grad is inf/NaN
    scaler.update()  # back off on overflow, grow after growth_interval
    return loss.item()


OP_GROUPS = OrderedDict(
    [  # aten op -> what a learner calls it
        ("addmm", "linear (q, k, v, proj, fc)"),
        ("mm", "linear, no bias (LM head)"),
        ("bmm", "attention matmuls (q k^T, att v)"),
        ("_softmax", "softmax"),
        ("native_layer_norm", "layer_norm"),
        ("gelu", "GELU"),
        ("add", "residual add"),
        ("_log_softmax", "loss: log_softmax"),
        ("nll_loss_forward", "loss: nll"),
    ]
)


class _OutputDtypes(TorchDispatchMode):
    """Records the output dtype of every aten op that runs (below autocast's casts)."""

    def __init__(self) -> None:
        super().__init__()
        self.seen: dict[str, set] = {}

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        first = out[0] if isinstance(out, (tuple, list)) else out
        if isinstance(first, torch.Tensor):
            name = func.__name__.split(".")[0]
            self.seen.setdefault(name, set()).add(str(first.dtype).replace("torch.", ""))
        return out


def forward_dtypes(model, x, y, autocast_dtype=None) -> dict[str, str]:
    """Output dtype of each op group in one forward + backward, and of params and grads."""
    model.zero_grad(set_to_none=True)
    with _OutputDtypes() as rec:
        if autocast_dtype is None:
            loss = lm_loss(model(x), y)
        else:
            with torch.autocast("cpu", dtype=autocast_dtype):
                loss = lm_loss(model(x), y)
        fwd = dict(rec.seen)
    loss.backward()
    row = {label: "/".join(sorted(fwd.get(op, {"-"}))) for op, label in OP_GROUPS.items()}
    row["loss value"] = str(loss.dtype).replace("torch.", "")
    row["parameters"] = "/".join(sorted({str(p.dtype)[6:] for p in model.parameters()}))
    row["gradients"] = "/".join(sorted({str(p.grad.dtype)[6:] for p in model.parameters()}))
    return row


def autocast_table(make_model, x, y) -> list[dict]:
    """Rows: op -> dtype under autocast bf16, autocast fp16 (CPU), and model.to(bf16)."""
    cols = {
        "autocast(bf16)": forward_dtypes(make_model(), x, y, torch.bfloat16),
        "autocast(fp16)": forward_dtypes(make_model(), x, y, torch.float16),
        "model.to(bf16) by hand": forward_dtypes(make_model().to(torch.bfloat16), x, y),
    }
    return [{"op": op, **{c: v[op] for c, v in cols.items()}} for op in cols["autocast(bf16)"]]


def bits_lost(update: float, weight: float = 1.0, dtype=torch.bfloat16, n: int = 1000) -> float:
    """``weight`` + ``update``, n times, in ``dtype``: what is left of n x update."""
    w = torch.tensor(weight, dtype=dtype)
    for _ in range(n):
        w = w + update
    return w.item()


def half_gap(dtype, at: float = 1.0) -> float:
    """Half the distance from ``at`` to the next representable number: smaller updates round
    away (round to nearest)."""
    return torch.finfo(dtype).eps * 2.0 ** math.floor(math.log2(at)) / 2
