"""The small models every lab parallelises: a tiny GPT and a toy MLP.

Built so later labs parallelise them WITHOUT editing this file: parameters live in plainly
named submodules (`blocks[i].attn.q`, `mlp.fc`) that `parallelize_module` / `fully_shard` can
address; attention reads its head count from the tensors it gets, so column-parallel q/k/v just
work; `split_stages` cuts the GPT into pipeline stages whose composition IS the full forward.

Same seed -> same weights on every rank: every parameter is filled from a local torch.Generator,
and the global RNG is left as it was (fork_rng restores it after nn.Linear's default init).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn


@dataclass(frozen=True)
class GPTConfig:
    vocab_size: int = 64
    seq_len: int = 16  # the longest sequence the position embedding covers
    n_layer: int = 2
    n_head: int = 2
    d_model: int = 32
    d_ff: int | None = None  # None -> 4 * d_model, the usual transformer MLP width
    dropout: float = 0.0
    bias: bool = True
    tie_weights: bool = False  # share tok_emb.weight with head.weight

    def __post_init__(self) -> None:
        for name in ("vocab_size", "seq_len", "n_layer", "n_head", "d_model", "d_ff"):
            value = getattr(self, name)
            if name == "d_ff" and value is None:
                continue
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ValueError(f"GPTConfig.{name} must be a positive integer, got {value!r}")
        if self.d_model % self.n_head != 0:
            raise ValueError(
                f"GPTConfig.d_model={self.d_model} must be divisible by n_head={self.n_head} "
                "(each head gets d_model / n_head channels)"
            )
        if not 0.0 <= self.dropout < 1.0:
            raise ValueError(f"GPTConfig.dropout must be in [0, 1), got {self.dropout!r}")

    @property
    def head_dim(self) -> int:
        return self.d_model // self.n_head

    @property
    def ff_dim(self) -> int:
        return 4 * self.d_model if self.d_ff is None else self.d_ff


class CausalSelfAttention(nn.Module):
    """Multi-head causal self-attention with separate q, k, v projections.

    Separate q/k/v (rather than one fused qkv) make tensor parallelism a one-line plan:
    ColwiseParallel on q, k, v gives each rank n_head / tp whole heads (tp must divide n_head);
    RowwiseParallel on proj sums the ranks' partial outputs.
    """

    def __init__(self, cfg: GPTConfig) -> None:
        super().__init__()
        self.head_dim = cfg.head_dim  # fixed by the config; the head COUNT is read at runtime
        self.q = nn.Linear(cfg.d_model, cfg.d_model, bias=cfg.bias)
        self.k = nn.Linear(cfg.d_model, cfg.d_model, bias=cfg.bias)
        self.v = nn.Linear(cfg.d_model, cfg.d_model, bias=cfg.bias)
        self.proj = nn.Linear(cfg.d_model, cfg.d_model, bias=cfg.bias)
        self.attn_drop = nn.Dropout(cfg.dropout)
        self.resid_drop = nn.Dropout(cfg.dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        B, T, _ = x.shape
        # (B, T, C_local): C_local = C on one rank, C / tp under column-parallel q/k/v, so the
        # number of heads this rank holds comes from the tensor, not from cfg.n_head.
        q, k, v = self.q(x), self.k(x), self.v(x)
        q = q.view(B, T, -1, self.head_dim).transpose(1, 2)  # (B, H_local, T, hd)
        k = k.view(B, T, -1, self.head_dim).transpose(1, 2)
        v = v.view(B, T, -1, self.head_dim).transpose(1, 2)
        # Explicit masked softmax rather than SDPA: every step (and the (T, T) score matrix that
        # backward must save) is visible, and it behaves the same for plain tensors and DTensors.
        att = (q @ k.transpose(-2, -1)) / math.sqrt(self.head_dim)  # (B, H_local, T, T)
        future = torch.ones(T, T, dtype=torch.bool, device=x.device).triu(diagonal=1)
        att = att.masked_fill(future, float("-inf"))
        att = self.attn_drop(F.softmax(att, dim=-1))
        y = att @ v  # (B, H_local, T, hd)
        y = y.transpose(1, 2).reshape(B, T, -1)  # (B, T, C_local): heads side by side again
        return self.resid_drop(self.proj(y))  # (B, T, C)


class MLP(nn.Module):
    """fc -> GELU -> proj: the Megatron pair (column-parallel fc, row-parallel proj)."""

    def __init__(self, cfg: GPTConfig) -> None:
        super().__init__()
        self.fc = nn.Linear(cfg.d_model, cfg.ff_dim, bias=cfg.bias)
        self.act = nn.GELU()
        self.proj = nn.Linear(cfg.ff_dim, cfg.d_model, bias=cfg.bias)
        self.drop = nn.Dropout(cfg.dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.drop(self.proj(self.act(self.fc(x))))  # (B, T, C) -> (B, T, 4C) -> (B, T, C)


class Block(nn.Module):
    """Pre-LayerNorm transformer block: x + attn(ln1(x)), then x + mlp(ln2(x))."""

    def __init__(self, cfg: GPTConfig) -> None:
        super().__init__()
        self.ln1 = nn.LayerNorm(cfg.d_model, bias=cfg.bias)
        self.attn = CausalSelfAttention(cfg)
        self.ln2 = nn.LayerNorm(cfg.d_model, bias=cfg.bias)
        self.mlp = MLP(cfg)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.ln1(x))
        return x + self.mlp(self.ln2(x))


def _init_gpt_(model: nn.Module, cfg: GPTConfig, generator: torch.Generator) -> None:
    """GPT-2 style init, drawn in named_modules order from `generator` (so it is reproducible)."""
    std = 0.02
    # Residual projections are scaled down so the residual stream's variance does not grow
    # with depth (GPT-2 paper, section 2.3): 2 residual additions per block.
    resid_std = std / math.sqrt(2 * cfg.n_layer)
    for name, module in model.named_modules():
        if isinstance(module, nn.Linear):
            s = resid_std if name.endswith(".proj") else std
            nn.init.normal_(module.weight, 0.0, s, generator=generator)
            if module.bias is not None:
                nn.init.zeros_(module.bias)
        elif isinstance(module, nn.Embedding):
            nn.init.normal_(module.weight, 0.0, std, generator=generator)
        elif isinstance(module, nn.LayerNorm):
            module.reset_parameters()  # ones and zeros: no randomness


class TinyGPT(nn.Module):
    """A decoder-only transformer small enough to train on a laptop CPU in seconds.

    forward(idx: (B, T) int64) -> logits (B, T, vocab_size); the loss is lm_loss(logits, targets).
    """

    def __init__(self, cfg: GPTConfig = GPTConfig(), seed: int = 0) -> None:
        super().__init__()
        self.cfg = cfg
        # (Building on the "meta" device would skip the throw-away default init, but in torch 2.13
        # materialising meta tensors imports sympy: ~0.5 s in every rank process.)
        with torch.random.fork_rng(devices=[]):  # default inits draw globally; fork_rng undoes it
            self.tok_emb = nn.Embedding(cfg.vocab_size, cfg.d_model)
            self.pos_emb = nn.Embedding(cfg.seq_len, cfg.d_model)
            self.drop = nn.Dropout(cfg.dropout)
            self.blocks = nn.ModuleList(Block(cfg) for _ in range(cfg.n_layer))
            self.ln_f = nn.LayerNorm(cfg.d_model, bias=cfg.bias)
            self.head = nn.Linear(cfg.d_model, cfg.vocab_size, bias=False)
        if cfg.tie_weights:
            # One Parameter object in two places: counted once, updated once.
            self.head.weight = self.tok_emb.weight
        _init_gpt_(self, cfg, torch.Generator().manual_seed(seed))

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        x = _embed(self.tok_emb, self.pos_emb, self.drop, idx)  # (B, T, C)
        for block in self.blocks:
            x = block(x)
        return self.head(self.ln_f(x))  # (B, T, vocab)


def _embed(tok_emb: nn.Embedding, pos_emb: nn.Embedding, drop: nn.Dropout, idx: torch.Tensor):
    """Token + position embeddings, (B, T) int64 -> (B, T, C). Shared by TinyGPT and GPTStage."""
    T = idx.shape[1]
    if T > pos_emb.num_embeddings:
        raise ValueError(f"sequence length {T} exceeds GPTConfig.seq_len={pos_emb.num_embeddings}")
    pos = torch.arange(T, device=idx.device)  # (T,)
    return drop(tok_emb(idx) + pos_emb(pos))


def lm_loss(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """Mean next-token cross-entropy over all B*T positions. logits (B, T, V), targets (B, T)."""
    return F.cross_entropy(logits.flatten(0, 1), targets.flatten())


class GPTStage(nn.Module):
    """One pipeline stage of a TinyGPT. It SHARES the parameters of the model it was cut from.

    First stage: idx (B, T) -> hidden (B, T, C). Middle: hidden -> hidden.
    Last stage: hidden -> logits (B, T, V). A single stage holding everything: idx -> logits.
    """

    def __init__(self, model: TinyGPT, first: int, last: int, is_first: bool, is_last: bool):
        super().__init__()
        self.is_first, self.is_last = is_first, is_last
        if is_first:
            self.tok_emb, self.pos_emb, self.drop = model.tok_emb, model.pos_emb, model.drop
        self.blocks = nn.ModuleList(model.blocks[first:last])
        if is_last:
            self.ln_f, self.head = model.ln_f, model.head

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # The same ops in the same order as TinyGPT.forward: the composition is bitwise equal.
        if self.is_first:
            x = _embed(self.tok_emb, self.pos_emb, self.drop, x)  # (B, T) -> (B, T, C)
        for block in self.blocks:
            x = block(x)
        if self.is_last:
            x = self.head(self.ln_f(x))  # (B, T, V)
        return x


def split_stages(model: TinyGPT, n_stages: int, balance: list[int] | None = None) -> list[GPTStage]:
    """Cut `model` into `n_stages` consecutive stages; `balance[i]` = number of blocks in stage i.

    Default balance spreads blocks evenly, the remainder going to the earliest stages.
    Composing the stages in order gives exactly `model(idx)`.
    """
    n_layer = model.cfg.n_layer
    if not isinstance(n_stages, int) or n_stages < 1:
        raise ValueError(f"n_stages must be a positive integer, got {n_stages!r}")
    if model.cfg.tie_weights and n_stages > 1:
        raise ValueError(
            "tie_weights=True shares tok_emb.weight (first stage) with head.weight (last stage); "
            "a pipeline would have to keep two copies in sync. Build TinyGPT with "
            "GPTConfig(tie_weights=False) for pipeline parallelism."
        )
    if balance is None:
        if n_stages > n_layer:
            raise ValueError(
                f"n_stages={n_stages} > n_layer={n_layer}: some stages would hold no block; "
                "pass balance=[...] explicitly if that is what you want"
            )
        base, extra = divmod(n_layer, n_stages)
        balance = [base + (1 if i < extra else 0) for i in range(n_stages)]
    if len(balance) != n_stages or any(b < 0 for b in balance) or sum(balance) != n_layer:
        raise ValueError(
            f"balance={balance} must list {n_stages} non-negative block counts summing to "
            f"n_layer={n_layer}"
        )
    stages, start = [], 0
    for i, n_blocks in enumerate(balance):
        stages.append(GPTStage(model, start, start + n_blocks, i == 0, i == n_stages - 1))
        start += n_blocks
    return stages


class ToyMLP(nn.Module):
    """Linear+ReLU stack ending in a Linear, for the DDP and ZeRO labs. Layers live in `net`.

    batchnorm=True inserts BatchNorm1d after the first Linear (buffers: the DDP broadcast /
    SyncBatchNorm lesson). freeze_first=True sets requires_grad=False on the first Linear (DDP
    must not wait for gradients that never come).
    """

    def __init__(
        self,
        d_in: int = 16,
        d_hidden: int = 32,
        d_out: int = 16,
        n_layers: int = 3,
        seed: int = 0,
        batchnorm: bool = False,
        freeze_first: bool = False,
    ) -> None:
        super().__init__()
        if n_layers < 1:
            raise ValueError(f"n_layers must be >= 1, got {n_layers}")
        dims = [d_in] + [d_hidden] * (n_layers - 1) + [d_out]
        layers: list[nn.Module] = []
        with torch.random.fork_rng(devices=[]):  # as in TinyGPT: keep the global RNG untouched
            for i in range(n_layers):
                layers.append(nn.Linear(dims[i], dims[i + 1]))
                if i < n_layers - 1:  # hidden layers only; the output layer stays linear
                    if i == 0 and batchnorm:
                        layers.append(nn.BatchNorm1d(dims[1]))
                    layers.append(nn.ReLU())
            self.net = nn.Sequential(*layers)
        generator = torch.Generator().manual_seed(seed)
        for module in self.net:
            if isinstance(module, nn.Linear):  # (BatchNorm starts at 1 / 0: nothing random)
                # torch's default range U(-1/sqrt(fan_in), 1/sqrt(fan_in)), but from our generator
                bound = 1.0 / math.sqrt(module.in_features)
                nn.init.uniform_(module.weight, -bound, bound, generator=generator)
                nn.init.uniform_(module.bias, -bound, bound, generator=generator)
        if freeze_first:
            self.net[0].requires_grad_(False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)  # (B, d_in) -> (B, d_out)


def count_params(model: nn.Module, trainable_only: bool = False) -> int:
    """Number of parameters; a shared (tied) parameter is counted once.

    model.parameters() already yields each Parameter object once. For DTensor parameters
    (after fully_shard / parallelize_module) numel() is the GLOBAL size, not this rank's shard.
    """
    return sum(p.numel() for p in model.parameters() if p.requires_grad or not trainable_only)
