"""Lab 01's experiments: what one training step holds in memory, measured on CPU.

    measure_recipe(cfg, recipe)      model state after one real step of a training recipe
    measure_replica(ctx)             rank worker: one DDP + AdamW step, this rank's model state
    saved_bytes(model, b, t)         bytes autograd saves for backward in one forward pass
    attention_saved_bytes(t, sdpa)   one attention call: materialised T x T scores vs SDPA
    step_memory(cfg, steps)          memory at every event of training steps (measure.step_memory)
    grad_norms(kind, depth)          gradient norm of every layer of a deep stack (vanishing)
    grad_norm_figure(stacks)         the error norm at every layer of each stack (figure)
    ledger_rows(measured, n)         measured vs calculator model state, one row each (table)

Recipes (``RECIPE_NAMES``; the calculator books them in ``calc.RECIPES`` under the same names):
fp32_adam, mixed_adam (bf16 weights, fp32 master + AdamW), amp_adam (torch.autocast: fp32
weights, bf16 compute), bf16_adam (AdamW straight on bf16 weights) and fp32_sgd_momentum.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from lab_utils.measure import SavedActivations, model_state_bytes
from lab_utils.measure.step_memory import MemoryPoint, record_steps
from lab_utils.models import GPTConfig, TinyGPT, lm_loss

RECIPE_NAMES = ("fp32_adam", "mixed_adam", "amp_adam", "bf16_adam", "fp32_sgd_momentum")
BUCKETS = ("params", "grads", "master", "optimizer")


class MasterWeightAdamW:
    """bf16 weights for forward/backward; fp32 master weights + AdamW (m, v) in the optimizer.

    Each step copies the bf16 gradients into fp32 (only for the step: that copy is freed
    afterwards), updates the masters, and rounds them back into the bf16 weights.
    """

    def __init__(self, model: nn.Module, lr: float = 1e-3) -> None:
        self.params = list(model.parameters())  # bf16: 2 B/param
        self.master = [p.detach().float().clone() for p in self.params]  # fp32: 4 B/param
        self.inner = torch.optim.AdamW(self.master, lr=lr)  # m, v: 8 B/param

    def step(self) -> None:
        for m, p in zip(self.master, self.params):
            m.grad = p.grad.float()  # the update is computed in fp32 ...
        self.inner.step()
        for m, p in zip(self.master, self.params):
            m.grad = None  # ... and the fp32 gradient copy is not kept
            p.data.copy_(m)  # round the master weights into the bf16 weights


def recipe_batch(cfg: GPTConfig, b: int = 4, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    batch = torch.randint(0, cfg.vocab_size, (b, cfg.seq_len + 1), generator=g)
    return batch[:, :-1], batch[:, 1:]


def build_recipe(cfg: GPTConfig, recipe: str):
    """(model, optimizer whose state we measure, step function, autocast?) for a recipe."""
    if recipe not in RECIPE_NAMES:
        raise ValueError(f"recipe must be one of {', '.join(RECIPE_NAMES)}, got {recipe!r}")
    bf16 = recipe in ("mixed_adam", "bf16_adam")
    model = TinyGPT(cfg).to(torch.bfloat16) if bf16 else TinyGPT(cfg)
    if recipe == "mixed_adam":
        wrapper = MasterWeightAdamW(model)
        return model, wrapper.inner, wrapper.step, False
    if recipe == "fp32_sgd_momentum":
        opt = torch.optim.SGD(model.parameters(), lr=1e-2, momentum=0.9)
    else:
        opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    return model, opt, opt.step, recipe == "amp_adam"


def measure_recipe(cfg: GPTConfig, recipe: str) -> dict[str, int]:
    """Model-state bytes after one real training step: params, grads, master, optimizer."""
    model, opt, step, autocast = build_recipe(cfg, recipe)
    inputs, targets = recipe_batch(cfg)
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
        logits = model(inputs)
    lm_loss(logits.float(), targets).backward()
    step()
    got = model_state_bytes(model, opt)
    return {
        "params": got["params"],
        "grads": got["grads"],
        "master": got["optimizer_master"],
        "optimizer": got["optimizer_state"],
        "scalars": got["scalars"],
    }


def measure_replica(ctx) -> dict:
    """Rank worker: torch DDP over the ranks, one AdamW step; this rank's model state."""
    from torch.nn.parallel import DistributedDataParallel as DDP

    cfg = GPTConfig()
    # gradient_as_bucket_view: the grads ARE views into DDP's buckets (no second copy)
    model = DDP(TinyGPT(cfg), gradient_as_bucket_view=True)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    inputs, targets = recipe_batch(cfg, seed=ctx.rank)  # each rank: its own data
    lm_loss(model(inputs), targets).backward()
    opt.step()
    return model_state_bytes(model, opt)


def saved_bytes(model: nn.Module, batch: int, seq: int) -> int:
    """Bytes autograd saves for backward in one forward pass of a (batch, seq) input."""
    with SavedActivations(model) as acts:
        model(torch.randint(0, model.cfg.vocab_size, (batch, seq)))
    return acts.bytes


def attention_saved_bytes(
    seq: int, sdpa: bool, batch: int = 2, heads: int = 2, head_dim: int = 16
) -> int:
    """Bytes one causal attention call saves: softmax(QK^T) @ V written out (TinyGPT's way)
    or ``F.scaled_dot_product_attention`` (on CPU a FlashAttention-style kernel: it keeps
    q, k, v, the output and one log-sum-exp per row, never the T x T scores)."""
    g = torch.Generator().manual_seed(0)
    q, k, v = (
        torch.randn(batch, heads, seq, head_dim, generator=g, requires_grad=True) for _ in range(3)
    )
    with SavedActivations() as acts:
        if sdpa:
            F.scaled_dot_product_attention(q, k, v, is_causal=True)
        else:
            att = (q @ k.transpose(-2, -1)) / math.sqrt(head_dim)
            future = torch.ones(seq, seq, dtype=torch.bool).triu(diagonal=1)
            F.softmax(att.masked_fill(future, float("-inf")), dim=-1) @ v
    return acts.bytes


def step_memory(cfg: GPTConfig, steps: int = 2, batch: int = 8) -> list[MemoryPoint]:
    """Memory at every event of ``steps`` fp32 AdamW steps of a TinyGPT (see record_steps)."""
    model = TinyGPT(cfg)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    layers = [("embeddings", model.drop)] + [(f"block {i}", b) for i, b in enumerate(model.blocks)]
    layers += [("ln_f", model.ln_f), ("head (logits)", model.head)]
    # made when needed, then freed
    batches = (recipe_batch(cfg, batch, seed=s) for s in range(steps))
    return record_steps(model, opt, batches, lm_loss, layers=layers)


@dataclass(frozen=True)
class GradNorms:
    kind: str
    errors: tuple[float, ...]  # ||dL/dh_i||, the error arriving at layer i (1 = next to input)
    weights: tuple[float, ...]  # ||dL/dW_i|| of the same layers


def grad_norms(kind: str, depth: int = 24, width: int = 64, seed: int = 0) -> GradNorms:
    """The error and weight-gradient norm at every layer of a deep stack, one backward pass.

    kind: "sigmoid" (h_i = sigmoid(W_i h_{i-1}): every layer multiplies the error by W_i^T and
    by sigmoid' <= 1/4), "residual" (h_i = h_{i-1} + W_i sigmoid(h_{i-1}) / sqrt(depth): the
    identity path passes the error down unchanged) or "large init" (h_i = W_i h_{i-1} with
    weights 1.5x the variance-preserving scale: each layer multiplies the error by ~1.5).
    The loss is h_L . r for a fixed random r, so the error entering the top is the same for all.
    """
    g = torch.Generator().manual_seed(seed)
    scale = {"sigmoid": 1.0, "residual": 1.0, "large init": 1.5}[kind]
    layers = [nn.Linear(width, width, bias=False) for _ in range(depth)]
    for lin in layers:
        nn.init.normal_(lin.weight, 0.0, scale / math.sqrt(width), generator=g)
    h = torch.randn(32, width, generator=g)
    inputs = []  # h_{i-1}, the input of layer i
    for lin in layers:
        h.requires_grad_(True) if not h.requires_grad else h.retain_grad()
        inputs.append(h)
        if kind == "sigmoid":
            h = torch.sigmoid(lin(h))
        elif kind == "residual":
            h = h + lin(torch.sigmoid(h)) / math.sqrt(depth)
        else:
            h = lin(h)
    h.retain_grad()
    (h * torch.randn(h.shape, generator=g)).sum().backward()
    errors = [x.grad.norm().item() for x in inputs[1:]] + [h.grad.norm().item()]
    return GradNorms(kind, tuple(errors), tuple(lin.weight.grad.norm().item() for lin in layers))


def grad_norm_figure(stacks: list[GradNorms]):
    """Lab 01's figure: the error norm arriving at every layer of each stack, log scale."""
    import plotly.graph_objects as go

    from lab_utils.viz.style import titled

    lines = [
        go.Scatter(
            x=list(range(1, len(g.errors) + 1)), y=g.errors, mode="lines+markers", name=g.kind
        )
        for g in stacks
    ]
    title = "Norm of the error dL/dh_i arriving at each layer (measured, one backward pass)"
    x_title = "layer i (1 = next to the input)"
    return titled(go.Figure(lines), title, x_title, "||dL/dh_i||", 700, 360, yaxis_type="log")


def ledger_rows(measured: dict[str, dict[str, int]], n_params: int) -> list[dict]:
    """Lab 01's model-state table: per recipe, a measured row then the calculator's row (bytes)."""
    from lab_utils.calc import model_state_memory

    rows = []
    for recipe, got in measured.items():
        booked = model_state_memory(n_params, recipe).as_dict()
        for source, buckets in (("measured", got), ("calculator", booked)):
            row = {b: int(buckets[b]) for b in BUCKETS}
            rows.append({"recipe": recipe, "source": source, **row})
            rows[-1]["B/param"] = sum(row.values()) / n_params
    return rows
