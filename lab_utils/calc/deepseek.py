"""DeepSeek-V3's published training layout and budget, reproduced (labs 08, 09, 12).

DeepSeek-AI 2024, "DeepSeek-V3 Technical Report": a 671B-parameter mixture-of-experts model
(37B activated per token) trained on 14.8T tokens on 2048 H800 GPUs with 16-way pipeline
parallelism (DualPipe), 64-way expert parallelism across 8 nodes, ZeRO-1 data parallelism
and NO tensor parallelism (Sec. 3.2). Budget (Table 1): 2664K H800 GPU-hours of
pre-training, 119K of context extension, 5K of post-training, 2788K in all, $5.576M at $2
per GPU-hour; "180K GPU-hours per trillion tokens, 3.7 days on our 2048 GPUs".

Shapes (Sec. 4.2): 61 layers (the first 3 dense, FFN 18432), hidden 7168, 128 heads of
multi-head latent attention (q rank 1536, kv rank 512, head dims 128 + 64 rope, values 128),
MoE layers with 1 shared + 256 routed experts of FFN 2048, 8 routed per token, vocabulary
129280, untied head. The multi-token-prediction module (14B more) is left out, as the 671B is.
"""

from __future__ import annotations

from dataclasses import dataclass

from lab_utils.calc._check import fields, flop_rate, index, nonneg_num, pos_num
from lab_utils.calc.hardware import DEVICES
from lab_utils.calc.memory import Recipe, model_state_memory
from lab_utils.calc.training import mfu_from_gpu_hours

H, LAYERS, DENSE_LAYERS, FFN_DENSE, FFN_EXPERT = 7168, 61, 3, 18432, 2048
HEADS, Q_RANK, KV_RANK, D_NOPE, D_ROPE, D_V = 128, 1536, 512, 128, 64, 128
ROUTED, SHARED, ACTIVE, VOCAB = 256, 1, 8, 129280
GPUS, PP, EP = 2048, 16, 64

# Sec. 3.3: bf16 weights for compute, fp32 gradients (accumulation) and master weights,
# AdamW moments stored in bf16: 2 + 4 + 4 + 2 x 2 = 14 bytes per parameter.
DEEPSEEK_V3_RECIPE = Recipe(
    "deepseek_v3", 2, 4, 4, 4, "DeepSeek-AI 2024 Sec. 3.3: fp32 master and grads, bf16 moments"
)


@dataclass(frozen=True)
class DeepSeekV3Params:
    """Parameter counts from the shapes above (our count, checked against "671B, 37B")."""

    attention_per_layer: int
    dense_ffn: int
    expert: int
    router: int
    norms_per_layer: int
    embedding: int
    head: int

    @property
    def moe_layers(self) -> int:
        return LAYERS - DENSE_LAYERS

    @property
    def total(self) -> int:
        per_moe = (ROUTED + SHARED) * self.expert + self.router
        return (
            LAYERS * (self.attention_per_layer + self.norms_per_layer)
            + DENSE_LAYERS * self.dense_ffn
            + self.moe_layers * per_moe
            + H
            + self.embedding
            + self.head
        )

    @property
    def activated(self) -> int:
        """Parameters that do FLOPs for one token: all but the unchosen experts and the input
        embedding (a table lookup, no FLOPs)."""
        per_moe = (ACTIVE + SHARED) * self.expert + self.router
        return (
            LAYERS * (self.attention_per_layer + self.norms_per_layer)
            + DENSE_LAYERS * self.dense_ffn
            + self.moe_layers * per_moe
            + H
            + self.head
        )


def deepseek_v3_params() -> DeepSeekV3Params:
    """Count DeepSeek-V3's parameters from its published shapes (MLA projections with their
    two low-rank norms, SwiGLU experts of three matrices). Lab 09."""
    q_head = D_NOPE + D_ROPE
    attn = (
        H * Q_RANK
        + Q_RANK
        + Q_RANK * HEADS * q_head  # q down, norm, q up
        + H * (KV_RANK + D_ROPE)
        + KV_RANK  # kv down (+ shared rope key)
        + KV_RANK * HEADS * (D_NOPE + D_V)  # k and v up
        + HEADS * D_V * H
    )  # output projection
    return DeepSeekV3Params(
        attn,
        3 * H * FFN_DENSE,
        3 * H * FFN_EXPERT,
        ROUTED * H + ROUTED,
        2 * H,
        VOCAB * H,
        VOCAB * H,
    )


@dataclass(frozen=True)
class DeepSeekBudget:
    """Published figures (Table 1 and Sec. 1), in GPU-hours of H800 and dollars."""

    pretrain_gpu_hours: float = 2664e3
    context_gpu_hours: float = 119e3
    post_gpu_hours: float = 5e3
    printed_total_gpu_hours: float = 2788e3
    price_per_gpu_hour: float = 2.0
    printed_cost: float = 5.576e6
    tokens: float = 14.8e12
    gpu_hours_per_trillion: float = 180e3
    printed_days_per_trillion: float = 3.7

    def __post_init__(self) -> None:
        fields(
            self,
            nonneg_num,
            (
                "pretrain_gpu_hours",
                "context_gpu_hours",
                "post_gpu_hours",
                "printed_total_gpu_hours",
                "price_per_gpu_hour",
                "printed_cost",
                "gpu_hours_per_trillion",
                "printed_days_per_trillion",
            ),
        )
        pos_num("DeepSeekBudget.tokens", self.tokens)
        parts = self.total_gpu_hours
        if abs(self.printed_total_gpu_hours - parts) > 0.01 * max(parts, 1.0):
            raise ValueError(
                f"DeepSeekBudget.printed_total_gpu_hours="
                f"{self.printed_total_gpu_hours:g} is not the sum of its parts "
                f"(pre-training + context extension + post-training = {parts:g})"
            )

    @property
    def total_gpu_hours(self) -> float:
        return self.pretrain_gpu_hours + self.context_gpu_hours + self.post_gpu_hours

    @property
    def cost(self) -> float:
        return self.total_gpu_hours * self.price_per_gpu_hour

    def days(self, gpu_hours: float) -> float:
        """Wall-clock days of ``gpu_hours`` on the 2048 GPUs."""
        return nonneg_num("gpu_hours", gpu_hours) / GPUS / 24

    def implied_mfu(self, peak_flops: float = DEVICES["H800-SXM-80GB"].peak_flops) -> float:
        """6 x activated params x tokens / pre-training GPU-hours at ``peak_flops`` (bf16
        dense by default; the FP8 matmuls have twice that peak, so half this MFU)."""
        return mfu_from_gpu_hours(
            deepseek_v3_params().activated,
            self.tokens,
            self.pretrain_gpu_hours,
            flop_rate("peak_flops", peak_flops),
        )


DEEPSEEK_V3 = DeepSeekBudget()


def deepseek_v3_stage_memory(stage: int) -> tuple[float, float]:
    """(non-expert, expert) model-state bytes on one GPU of pipeline stage ``stage``.

    An ESTIMATE with our calculators: 61 layers over 16 stages as 4 per stage except the
    last three stages (3 each); the embedding on stage 0, the head on stage 15. Non-expert
    weights are replicated on the 128 GPUs of a stage and ZeRO-1 shards their optimizer
    state 128 ways; the 256 routed experts of a layer are split 64 ways (4 per GPU) and
    their optimizer state is sharded over the 2 GPUs holding the same experts. Recipe
    ``DEEPSEEK_V3_RECIPE``. DualPipe's second parameter copy and activations are left out.
    Lab 09 (expert parallelism), lab 12.
    """
    s = index("stage", stage, PP, f"pp={PP}")
    p = deepseek_v3_params()
    first = sum(4 if i < PP - 3 else 3 for i in range(s))
    layers = range(first, first + (4 if s < PP - 3 else 3))
    dense = sum(
        p.attention_per_layer
        + p.norms_per_layer
        + (p.dense_ffn if i < DENSE_LAYERS else SHARED * p.expert + p.router)
        for i in layers
    )
    dense += p.embedding if s == 0 else 0
    dense += p.head + H if s == PP - 1 else 0
    experts = sum(ROUTED // EP * p.expert for i in layers if i >= DENSE_LAYERS)
    dp = GPUS // PP
    non_expert = model_state_memory(dense, DEEPSEEK_V3_RECIPE, 1, dp).total
    expert = model_state_memory(experts, DEEPSEEK_V3_RECIPE, 1, dp // EP).total
    return non_expert, expert
