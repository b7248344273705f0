"""Lab 02's memory and batch experiments: checkpointing (full, in segments, selective),
large-batch SGD (one process, CPU).

    forward(model, idx, k, selective)   TinyGPT forward with checkpointed segments of k blocks
                                        and/or Korthikanti's selective recomputation
    checkpoint_sweep(model, idx, tgt, ks, repeats)   measured memory and recompute for each k
    selective_sweep(model, idx, tgt)    none / selective / full: saved bytes, score tensors
    sgd_run(batch, lr, warmup_steps, start_lr)       SGD + momentum with Goyal et al.'s warmup

Why ``use_reentrant=True``: the measurement (``measure.SavedActivations``) sees what autograd
saves through ``saved_tensors_hooks``; the non-reentrant checkpoint installs its own inner hooks
and hides its tensors from ours. In your own code use ``use_reentrant=False``, the variant
PyTorch recommends (it supports keyword arguments, inputs that need no grad, and
``torch.autograd.grad``).
"""

from __future__ import annotations

import math
import statistics
import time
from dataclasses import dataclass, field
from functools import partial

import torch
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint

from lab_utils.data import token_batches
from lab_utils.measure import SavedActivations
from lab_utils.models import GPTConfig, TinyGPT, lm_loss


def attention_core(q, k, v, future):
    """softmax(q k^T / sqrt(hd), causal) v: the part whose (B, H, T, T) tensors Korthikanti et
    al. 2022 recompute selectively (the 5 a s^2 b term). q, k, v: (B, H, T, hd)."""
    att = (q @ k.transpose(-2, -1)) / math.sqrt(q.shape[-1])  # (B, H, T, T)
    att = att.masked_fill(future, float("-inf"))
    return F.softmax(att, dim=-1) @ v  # (B, H, T, hd)


def attention(attn, x, selective: bool):
    """TinyGPT's attention; with ``selective`` only the score core is checkpointed: q, k, v
    (the core's inputs) are kept, the T x T matrices are rebuilt during backward."""
    B, T, _ = x.shape
    q, k, v = (m(x).view(B, T, -1, attn.head_dim).transpose(1, 2) for m in (attn.q, attn.k, attn.v))
    future = torch.ones(T, T, dtype=torch.bool, device=x.device).triu(diagonal=1)
    y = (
        checkpoint(attention_core, q, k, v, future, use_reentrant=True)
        if selective
        else attention_core(q, k, v, future)
    )
    return attn.resid_drop(attn.proj(y.transpose(1, 2).reshape(B, T, -1)))  # (B, T, C)


def _run_blocks(blocks, selective, counter, h):
    for blk in blocks:
        counter[0] += 1
        h = h + attention(blk.attn, blk.ln1(h), selective)
        h = h + blk.mlp(blk.ln2(h))
    return h


def forward(model, idx, k: int = 0, selective: bool = False, counter=None):
    """TinyGPT's forward with the blocks cut into checkpointed segments of k blocks (k = 0:
    none). ``counter[0]`` counts block forwards, recomputations included."""
    counter = counter if counter is not None else [0]
    x = model.drop(model.tok_emb(idx) + model.pos_emb(torch.arange(idx.shape[1])))  # (B, T, C)
    blocks = list(model.blocks)
    step = k or len(blocks)
    for i in range(0, len(blocks), step):
        run_segment = partial(_run_blocks, blocks[i : i + step], selective, counter)
        x = checkpoint(run_segment, x, use_reentrant=True) if k else run_segment(x)
    return model.head(model.ln_f(x))


@dataclass
class CkptRun:
    k: int  # blocks per segment (0: no checkpointing)
    after_forward: int  # saved bytes held when the forward ends
    peak: int  # most saved bytes held at once, backward included
    block_forwards: int  # block forwards in one step, recomputation included
    score_bytes: int = 0  # saved by the forward, shaped (B, H, T, T)
    times: list = field(default_factory=list)

    @property
    def time_s(self) -> float:
        return statistics.median(self.times) if self.times else float("nan")


def _measure(model, idx, tgt, k, selective, ref_grads) -> tuple[CkptRun, list]:
    model.zero_grad()
    counter = [0]
    with SavedActivations(model) as acts:
        loss = lm_loss(forward(model, idx, k, selective, counter), tgt)
        after, n_saved = acts.live_bytes, len(acts.tensors)
        loss.backward()
    grads = [p.grad.clone() for p in model.parameters()]
    for g, r in zip(grads, ref_grads or grads):
        torch.testing.assert_close(g, r)  # checkpointing never changes the gradients
    B, T = idx.shape
    scores = sum(
        t["bytes"]
        for t in acts.tensors[:n_saved]  # kept by the forward
        if len(t["shape"]) == 4 and t["shape"][0] == B and t["shape"][2:] == (T, T)
    )
    return CkptRun(k, after, acts.peak_bytes, counter[0], scores), grads


def checkpoint_sweep(model, idx, tgt, ks, repeats: int = 3) -> dict[int, CkptRun]:
    """Every k in ``ks`` (0 = none): memory measured once, time as the median of ``repeats``
    round-robin runs (machine noise hits every k alike). Asserts equal gradients."""
    runs, ref = {}, None
    for k in ks:
        runs[k], grads = _measure(model, idx, tgt, k, False, ref)
        ref = ref or grads
    for _ in range(repeats):
        for k, r in runs.items():
            t0 = time.perf_counter()
            lm_loss(forward(model, idx, k), tgt).backward()
            r.times.append(time.perf_counter() - t0)
    return runs


def selective_sweep(model, idx, tgt) -> dict[str, CkptRun]:
    """none / selective (score core only) / full (every block): measured, same gradients."""
    out, ref = {}, None
    for name, k, sel in (("none", 0, False), ("selective", 0, True), ("full", 1, False)):
        out[name], grads = _measure(model, idx, tgt, k, sel, ref)
        ref = ref or grads
    return out


def sgd_run(
    batch: int,
    lr: float,
    warmup_steps: int = 0,
    start_lr: float | None = None,
    samples: int = 2000,
    seed: int = 0,
) -> tuple[list[int], list[float]]:
    """SGD with momentum on the tiny GPT. Warmup as Goyal et al. 2017 (Sec. 2.2, "gradual
    warmup"): the rate starts at ``start_lr`` (their eta, the small-batch rate) and grows by
    the same amount each step to ``lr`` (k eta) after ``warmup_steps``."""
    model = TinyGPT(GPTConfig(), seed=seed)
    opt = torch.optim.SGD(model.parameters(), lr=lr, momentum=0.9)
    start = lr if start_lr is None else start_lr
    seen, losses = [], []
    for step, (x, y) in enumerate(
        token_batches(samples // batch, batch, 16, 64, seed=1, noise=0.1)
    ):
        ramp = min(1.0, step / warmup_steps) if warmup_steps else 1.0
        for group in opt.param_groups:
            group["lr"] = start + (lr - start) * ramp
        opt.zero_grad()
        loss = lm_loss(model(x), y)
        loss.backward()
        opt.step()
        seen.append((step + 1) * batch)
        losses.append(loss.item())
    return seen, losses


def min_global_batch(dp: int, micro_batch: int = 1, accum: int = 1) -> int:
    """Global batch = micro-batch x data-parallel ranks x accumulation steps: at least dp
    (every rank needs one sample); accumulation only multiplies it."""
    return micro_batch * dp * accum
