"""Published 4D layouts, reproduced: Llama 3 405B's pre-training configurations (labs 08, 12).

Meta 2024, "The Llama 3 Herd of Models", Sec. 3.3.2 and Table 4: 405B trained on up to
16,384 H100s with tensor (TP), context (CP), pipeline (PP) and data (DP, FSDP) parallelism,
16M tokens per batch. Each row prints GPUs, TP, CP, PP, DP, sequence length, batch size per
DP group, tokens per batch, achieved TFLOP/s per GPU and the bf16 MFU. From the row this
module derives what the table implies (tokens per batch, MFU = TFLOP/s / 989, tokens/s per
GPU, days for 15.6T tokens) and what our calculators say one GPU holds (``layout_memory``).
DeepSeek-V3's layout is in ``calc.deepseek``.
"""

from __future__ import annotations

from dataclasses import dataclass

from lab_utils.calc._check import (
    at_most,
    boolean,
    choice,
    degrees_multiply,
    divides,
    fields,
    flop_rate,
    heads_and_tp,
    instance,
    pos_int,
    pos_num,
    whole,
)
from lab_utils.calc._check import (
    zero_stage as _zero_stage,
)
from lab_utils.calc.activations import RECOMPUTE, activation_bytes_per_layer
from lab_utils.calc.hardware import DEVICES
from lab_utils.calc.memory import ModelStateMemory, model_state_memory, resolve_recipe
from lab_utils.calc.params import PRESETS, ModelConfig, param_count
from lab_utils.calc.scaling import flops_per_token

CP_SLICES = "each context-parallel rank holds an equal slice of the sequence"


@dataclass(frozen=True)
class LayoutMemory:
    """Bytes on one GPU of the fullest (first) pipeline stage."""

    model_state: ModelStateMemory
    activations: float

    @property
    def total(self) -> float:
        return self.model_state.total + self.activations


def layout_memory(
    cfg: ModelConfig,
    tp: int,
    pp: int,
    dp: int,
    seq_len: int,
    micro_batch: int = 1,
    cp: int = 1,
    zero_stage: int = 1,
    recompute: str = "selective",
    flash_attention: bool = True,
    recipe: str = "mixed_adam",
    first_stage_layers: int | None = None,
) -> LayoutMemory:
    """Memory per GPU of the first pipeline stage of a TP x CP x PP x DP layout.

    * parameters: the first stage's layers (``first_stage_layers``, default ceil(L/p)) and
      the embedding (plus the head when pp = 1), split by tp;
    * model state: ZeRO ``zero_stage`` over the dp x cp ranks that hold the same parameters
      (FSDP shards over both in torchtitan; Rajbhandari et al. 2020);
    * activations: 1F1B, so the first stage holds p micro-batches of its layers, each of
      seq_len / cp tokens per rank, sequence parallel when tp > 1 (Korthikanti et al. 2022
      Table 2; FlashAttention drops the score term).
    TP must divide the query AND key/value heads. A first-order estimate: no logits, no
    temporary buffers, no fragmentation. Lab 08 (published layouts), lab 12.
    """
    instance("cfg", cfg, ModelConfig, "calc.preset('llama3.1-405b')")
    tp, pp, dp = pos_int("tp", tp), pos_int("pp", pp), pos_int("dp", dp)
    s, b, cp = pos_int("seq_len", seq_len), pos_int("micro_batch", micro_batch), pos_int("cp", cp)
    zero = _zero_stage(zero_stage)
    choice("recompute", recompute, RECOMPUTE)
    flash = boolean("flash_attention", flash_attention)
    resolve_recipe(recipe)
    heads_and_tp(cfg.hidden, cfg.n_heads, tp, cfg.kv_heads)
    divides("cp", cp, "seq_len", s, CP_SLICES)
    at_most("pp", pp, "n_layers", cfg.n_layers, "every stage needs a layer")
    default = -(-cfg.n_layers // pp)
    n_first = (
        default
        if first_stage_layers is None
        else whole("first_stage_layers", first_stage_layers, 1, cfg.n_layers)
    )
    pc = param_count(cfg)
    params = n_first * pc.per_layer + pc.embedding + (pc.head if pp == 1 else 0)
    state = model_state_memory(params / tp, recipe, zero, dp * cp)
    per_layer = activation_bytes_per_layer(
        s // cp, b, cfg.hidden, cfg.n_heads, tp, tp > 1, recompute, flash
    )
    return LayoutMemory(state, per_layer * n_first * pp)


@dataclass(frozen=True)
class LlamaRun:
    """One row of Meta 2024, Table 4 (Llama 3 405B pre-training on H100s)."""

    gpus: int
    tp: int
    cp: int
    pp: int
    dp: int
    seq_len: int
    batch_per_dp: int
    tflops_per_gpu: float
    mfu_pct: int

    def __post_init__(self) -> None:
        fields(self, pos_int, ("gpus", "tp", "cp", "pp", "dp", "seq_len", "batch_per_dp"))
        degrees_multiply("LlamaRun.gpus", self.gpus, tp=self.tp, cp=self.cp, pp=self.pp, dp=self.dp)
        cfg = PRESETS["llama3.1-405b"]
        heads_and_tp(cfg.hidden, cfg.n_heads, self.tp, cfg.kv_heads)
        at_most("pp", self.pp, "n_layers", cfg.n_layers, "every stage needs a layer")
        divides("cp", self.cp, "seq_len", self.seq_len, CP_SLICES)
        flop_rate("LlamaRun.tflops_per_gpu", self.tflops_per_gpu, "TFLOP/s")
        whole("LlamaRun.mfu_pct", self.mfu_pct, 0, 100)
        if self.implied_mfu > 1:
            raise ValueError(
                f"LlamaRun.tflops_per_gpu={self.tflops_per_gpu:g} exceeds the "
                "H100's 989 TFLOP/s bf16 peak"
            )
        if abs(100 * self.implied_mfu - self.mfu_pct) > 1.5:
            raise ValueError(
                f"LlamaRun.mfu_pct={self.mfu_pct} disagrees with tflops_per_gpu="
                f"{self.tflops_per_gpu:g}, which is {self.implied_mfu:.1%} of the "
                "H100's 989 TFLOP/s; the two must describe the same run"
            )

    @property
    def tokens_per_batch(self) -> int:
        """Sequences per DP group x DP groups x tokens per sequence (printed as "16M")."""
        return self.batch_per_dp * self.dp * self.seq_len

    @property
    def implied_mfu(self) -> float:
        """Achieved TFLOP/s over the H100's dense bf16 peak (989 TFLOP/s)."""
        return self.tflops_per_gpu * 1e12 / DEVICES["H100-SXM5-80GB"].peak_flops

    def tokens_per_s_per_gpu(self) -> float:
        """Implied throughput: achieved FLOP/s / (6P + 12 L s h) FLOPs per token (PaLM's
        count with its attention term at this row's sequence length)."""
        cfg = PRESETS["llama3.1-405b"]
        per_token = flops_per_token(param_count(cfg).total, cfg.n_layers, self.seq_len, cfg.hidden)
        return self.tflops_per_gpu * 1e12 / per_token

    def days_for(self, n_tokens: float = 15.6e12) -> float:
        """Days to process ``n_tokens`` at this row's throughput on all its GPUs (no
        failures, no restarts; Meta report 15.6T tokens in total)."""
        return pos_num("n_tokens", n_tokens) / (self.tokens_per_s_per_gpu() * self.gpus) / 86400

    def memory(self, micro_batch: int = 1) -> LayoutMemory:
        """Our first-order memory per GPU for this layout: ZeRO-2 (Meta's FSDP shards
        gradients and optimizer state, keeps parameters after the forward), selective
        recomputation, FlashAttention, and 7 layers on the first stage (Meta remove one
        layer from the first and last stages: 7 + 14 x 8 + 7 = 126)."""
        return layout_memory(
            PRESETS["llama3.1-405b"],
            self.tp,
            self.pp,
            self.dp,
            self.seq_len,
            micro_batch,
            self.cp,
            zero_stage=2,
            first_stage_layers=7,
        )


LLAMA3_405B_TABLE4: tuple[LlamaRun, ...] = (
    LlamaRun(8192, 8, 1, 16, 64, 8192, 32, 430, 43),
    LlamaRun(16384, 8, 1, 16, 128, 8192, 16, 400, 41),
    LlamaRun(16384, 8, 16, 16, 8, 131072, 16, 380, 38),
)
