"""Mixture-of-Experts arithmetic: total vs active parameters, memory per rank under EP x DP (x PP),
all-to-all volume per layer (lab 09; used by lab 12's drills).

An MoE layer holds E routed experts (plus, in DeepSeekMoE, a few always-on "shared" experts) and
sends each token to k of the routed ones. Hence two parameter counts:
  * TOTAL: everything stored. Memory follows it: weights, gradients and optimizer state exist
    for every expert, whether a given token uses it or not.
  * ACTIVE (per token): what one token's forward pass multiplies by. Compute follows it:
    about 6 x active FLOPs per token for training (Kaplan et al. 2020's 6N with N = active).
Adding experts at fixed k and fixed expert size grows TOTAL and leaves ACTIVE unchanged.

Conventions: counts are exact, by matrix (no biases unless stated, RMSNorm weights only);
"active" includes the embedding table by default (Mistral counts it for Mixtral's 12.9B); the
DeepSeek-V3 report's 37B matches the count without the input embedding lookup (36.6B; with it,
37.5B): publishers differ, ``count_embedding`` picks.
Memory: bytes, via ``calc.memory.model_state_memory`` (ZeRO stages, recipes). Pure functions.
"""

from __future__ import annotations

from dataclasses import dataclass

from lab_utils.calc._check import (
    at_most,
    boolean,
    divides,
    instance,
    nonneg_int,
    pos_int,
    pos_num,
    text,
)
from lab_utils.calc._check import (
    zero_stage as _zero_stage,
)
from lab_utils.calc.comm import ring_bytes_per_rank
from lab_utils.calc.memory import Recipe, model_state_memory, resolve_recipe


def gqa_attention_params(
    hidden: int, n_heads: int, n_kv_heads: int | None = None, head_dim: int | None = None
) -> int:
    """Q, K, V, O projections without biases: 2 h (a hd) + 2 h (kv hd) (grouped-query
    attention, Ainslie et al. 2023; kv = a is multi-head attention). Lab 09."""
    h, a = pos_int("hidden", hidden), pos_int("n_heads", n_heads)
    kv = pos_int("n_kv_heads", n_kv_heads if n_kv_heads is not None else a)
    divides(
        "n_kv_heads",
        kv,
        "n_heads",
        a,
        "grouped-query attention shares each K/V head among as many query heads",
    )
    hd = pos_int("head_dim", head_dim if head_dim is not None else h // a)
    return 2 * h * a * hd + 2 * h * kv * hd


def mla_attention_params(
    hidden: int,
    n_heads: int,
    q_lora_rank: int,
    kv_lora_rank: int,
    qk_nope_head_dim: int,
    qk_rope_head_dim: int,
    v_head_dim: int,
) -> int:
    """Multi-head latent attention (DeepSeek-V2, Liu et al. 2024, Sec. 2.1; DeepSeek-V3 report
    Sec. 2.1.1): low-rank query and key/value compressions with their RMSNorms, decoupled RoPE
    keys shared by all heads, and the output projection:
        h x q_lora + q_lora + q_lora x a (d_nope + d_rope)                 (queries)
        h x (kv_lora + d_rope) + kv_lora + kv_lora x a (d_nope + d_v)       (keys, values)
        a d_v x h                                                          (output). Lab 09."""
    h, a = pos_int("hidden", hidden), pos_int("n_heads", n_heads)
    ql, kvl = pos_int("q_lora_rank", q_lora_rank), pos_int("kv_lora_rank", kv_lora_rank)
    dn, dr = (
        pos_int("qk_nope_head_dim", qk_nope_head_dim),
        pos_int("qk_rope_head_dim", qk_rope_head_dim),
    )
    dv = pos_int("v_head_dim", v_head_dim)
    q = h * ql + ql + ql * a * (dn + dr)
    kv = h * (kvl + dr) + kvl + kvl * a * (dn + dv)
    return q + kv + a * dv * h


@dataclass(frozen=True)
class MoEConfig:
    """Shape of a decoder-only MoE transformer. ``attention_params`` is per layer (use
    ``gqa_attention_params`` or ``mla_attention_params``); the first ``n_dense_layers`` layers
    have a dense MLP of ``dense_ffn``, the others an MoE layer of ``n_experts`` routed experts
    of ``expert_ffn`` (top ``top_k``) plus ``n_shared_experts`` always-on ones."""

    name: str
    vocab_size: int
    hidden: int
    n_layers: int
    attention_params: int
    n_experts: int
    top_k: int
    expert_ffn: int
    n_shared_experts: int = 0
    n_dense_layers: int = 0
    dense_ffn: int = 0
    gated: bool = True  # SwiGLU: 3 matrices per expert (gate, up, down); else 2
    router_bias: bool = False  # DeepSeek-V3 keeps one balancing bias per expert
    tied_embeddings: bool = False
    source: str = ""

    def __post_init__(self) -> None:
        text("MoEConfig.name", self.name)
        text("MoEConfig.source", self.source)
        for f in ("gated", "router_bias", "tied_embeddings"):
            boolean(f"MoEConfig.{f}", getattr(self, f))
        for f in (
            "vocab_size",
            "hidden",
            "n_layers",
            "attention_params",
            "n_experts",
            "top_k",
            "expert_ffn",
        ):
            pos_int(f"MoEConfig.{f}", getattr(self, f))
        for f in ("n_shared_experts", "n_dense_layers", "dense_ffn"):
            nonneg_int(f"MoEConfig.{f}", getattr(self, f))
        if self.top_k > self.n_experts:
            raise ValueError(f"top_k={self.top_k} cannot exceed n_experts={self.n_experts}")
        if self.n_dense_layers > self.n_layers:
            raise ValueError(f"n_dense_layers={self.n_dense_layers} > n_layers={self.n_layers}")
        if self.n_dense_layers and not self.dense_ffn:
            raise ValueError("dense layers need dense_ffn > 0 (their MLP hidden size)")

    @property
    def n_moe_layers(self) -> int:
        return self.n_layers - self.n_dense_layers


@dataclass(frozen=True)
class MoEParamCount:
    """Parameter breakdown, summed over layers. ``routed_experts`` is every routed expert of
    every MoE layer; ``expert_size`` one routed expert."""

    embedding: int
    head: int
    attention: int
    norms: int
    dense_mlp: int
    shared_experts: int
    routed_experts: int
    router: int
    expert_size: int
    n_moe_layers: int
    top_k: int

    @property
    def total(self) -> int:
        return (
            self.embedding
            + self.head
            + self.attention
            + self.norms
            + self.dense_mlp
            + self.shared_experts
            + self.routed_experts
            + self.router
        )

    @property
    def non_expert(self) -> int:
        """Everything but the routed experts: replicated over the EP ranks."""
        return self.total - self.routed_experts

    def active(self, count_embedding: bool = True) -> int:
        """Parameters one token's forward pass uses: all but the routed experts, plus k of them
        per MoE layer; without the input embedding table if ``count_embedding`` is False."""
        count_embedding = boolean("count_embedding", count_embedding)
        act = self.non_expert + self.n_moe_layers * self.top_k * self.expert_size
        return act if count_embedding else act - self.embedding


def moe_param_count(cfg: MoEConfig) -> MoEParamCount:
    """Count ``cfg``'s parameters exactly, by matrix (RMSNorm: h per norm, two per layer and a
    final one; router: E x h per MoE layer, + E if ``router_bias``). Mixtral 8x7B gives 46.70B
    total / 12.88B active (Mistral AI 2023: 46.7B / 12.9B); DeepSeek-V3 671.0B total, 36.6B
    active without the embedding table (DeepSeek-AI 2024, arXiv 2412.19437: 671B / 37B). Lab 09.
    """
    cfg = instance("cfg", cfg, MoEConfig, "MOE_PRESETS['mixtral-8x7b']")
    h, n_mats = cfg.hidden, 3 if cfg.gated else 2
    expert = n_mats * h * cfg.expert_ffn
    moe = cfg.n_moe_layers
    return MoEParamCount(
        embedding=cfg.vocab_size * h,
        head=0 if cfg.tied_embeddings else cfg.vocab_size * h,
        attention=cfg.n_layers * cfg.attention_params,
        norms=(2 * cfg.n_layers + 1) * h,
        dense_mlp=cfg.n_dense_layers * n_mats * h * cfg.dense_ffn,
        shared_experts=moe * cfg.n_shared_experts * expert,
        routed_experts=moe * cfg.n_experts * expert,
        router=moe * cfg.n_experts * (h + (1 if cfg.router_bias else 0)),
        expert_size=expert,
        n_moe_layers=moe,
        top_k=cfg.top_k,
    )


# Published configurations (sizes from each release's config.json / paper).
MOE_PRESETS: dict[str, MoEConfig] = {
    "mixtral-8x7b": MoEConfig(
        name="mixtral-8x7b",
        vocab_size=32000,
        hidden=4096,
        n_layers=32,
        attention_params=gqa_attention_params(4096, 32, 8),
        n_experts=8,
        top_k=2,
        expert_ffn=14336,
        source="Jiang et al. 2024, 'Mixtral of Experts' (arXiv 2401.04088), "
        "Table 1; Mistral AI 2023 release note: 46.7B total, 12.9B "
        "active per token",
    ),
    "deepseek-v3": MoEConfig(
        name="deepseek-v3",
        vocab_size=129280,
        hidden=7168,
        n_layers=61,
        attention_params=mla_attention_params(7168, 128, 1536, 512, 128, 64, 128),
        n_experts=256,
        top_k=8,
        expert_ffn=2048,
        n_shared_experts=1,
        n_dense_layers=3,
        dense_ffn=18432,
        router_bias=True,
        source="DeepSeek-AI 2024, 'DeepSeek-V3 Technical Report' (arXiv 2412.19437), Sec. 4.2: "
        "671B total, 37B activated per token (the 14B multi-token-prediction module "
        "is not counted)",
    ),
}
# name -> (published total, published active, does the published active count the embedding?)
MOE_PUBLISHED: dict[str, tuple[float, float, bool]] = {
    "mixtral-8x7b": (46.7e9, 12.9e9, True),
    "deepseek-v3": (671e9, 37e9, False),
}
# DeepSeek-V3's training layout (report Sec. 3.2): 2048 H800 GPUs, 16-way pipeline, 64-way
# expert parallelism over 8 nodes, ZeRO-1 data parallelism, no tensor parallelism. Each
# expert shard is then replicated 2048 / (16 x 64) = 2 times; the dense part of a stage is
# data parallel over all 64 x 2 = 128 of the stage's GPUs.
DEEPSEEK_V3_LAYOUT = {"pp": 16, "ep": 64, "dp": 2, "zero_stage": 1}


@dataclass(frozen=True)
class MoEMemory:
    """Model-state bytes on ONE rank, split into the routed experts it holds and the rest."""

    expert_params: float  # routed-expert parameters on this rank
    dense_params: float  # everything else on this rank (replicated over EP)
    expert_bytes: float
    dense_bytes: float

    @property
    def total(self) -> float:
        return self.expert_bytes + self.dense_bytes


def moe_memory_per_rank(
    cfg: MoEConfig,
    ep: int,
    dp: int = 1,
    pp: int = 1,
    zero_stage: int = 0,
    recipe: str | Recipe = "mixed_adam",
) -> MoEMemory:
    """Model state per rank on ep x dp x pp ranks (no TP), layers split evenly over pp stages.

    Within a stage, rank (d, e) holds routed experts [e E/ep, (e+1) E/ep) of each of its layers,
    and a replica of everything else. The routed experts' replicas are the dp ranks with the
    same e: ZeRO shards their state over dp. The dense part is replicated on all ep x dp ranks
    of the stage (every one sees different tokens): ZeRO shards it over ep x dp.
        expert params here = routed / (ep pp),   dense params here = (total - routed) / pp
    with ``model_state_memory`` for the bytes of each (ZeRO, Rajbhandari et al. 2020, Sec. 5).
    The trap: memory follows TOTAL parameters; active ones only set the FLOPs. Lab 09.
    """
    cfg = instance("cfg", cfg, MoEConfig, "MOE_PRESETS['mixtral-8x7b']")
    ep, dp, pp = pos_int("ep", ep), pos_int("dp", dp), pos_int("pp", pp)
    at_most("pp", pp, "n_layers", cfg.n_layers, "every stage needs a layer")
    zero_stage = _zero_stage(zero_stage)
    recipe = resolve_recipe(recipe)
    if cfg.n_experts % ep:
        raise ValueError(
            f"{cfg.n_experts} experts cannot be split evenly over ep={ep} ranks: "
            "pick an ep that divides the number of experts"
        )
    count = moe_param_count(cfg)
    expert_here = count.routed_experts / (ep * pp)
    dense_here = count.non_expert / pp
    expert = model_state_memory(expert_here, recipe, zero_stage, dp=dp)
    dense = model_state_memory(dense_here, recipe, zero_stage, dp=ep * dp)
    return MoEMemory(
        expert_params=expert_here,
        dense_params=dense_here,
        expert_bytes=expert.total,
        dense_bytes=dense.total,
    )


@dataclass(frozen=True)
class AllToAllVolume:
    """Bytes ONE rank sends per MoE layer (dispatch, combine), and the shape of its traffic."""

    dispatch: float
    combine: float
    rows_per_rank: float  # rows in this rank's dispatch buffer (T k, or padded)
    inter_node_fraction: float

    @property
    def forward(self) -> float:
        return self.dispatch + self.combine

    @property
    def step(self) -> float:
        """Forward and backward: the gradients retrace both all-to-alls."""
        return 2 * self.forward


def all_to_all_bytes_per_layer(
    tokens_per_rank: int,
    hidden: int,
    top_k: int,
    ep: int,
    dispatch_bytes: float = 2,
    combine_bytes: float = 2,
    padded_capacity_factor: float | None = None,
    gpus_per_node: int = 8,
) -> AllToAllVolume:
    """Expert-parallel traffic of one MoE layer, per rank, under UNIFORM routing.

    A rank's T tokens make T k rows of h values; (ep-1)/ep of them go to other ranks in the
    dispatch all-to-all and the same number come back in the combine:
        dispatch = (ep-1)/ep * T k h * dispatch_bytes,  combine = (ep-1)/ep * T k h * combine_bytes
    (DeepSeek-V3 dispatches in FP8, 1 byte, and combines in BF16, 2; Sec. 3.3). Fixed-shape
    implementations send their padded (E, C, h) buffers, C = cf T k / E: pass
    ``padded_capacity_factor`` to count cf T k rows. Skewed routing sends more from and to the
    busiest rank: the all-to-all takes as long as that rank. ``inter_node_fraction``: the
    share of the peers outside a node of ``gpus_per_node`` (what crosses the slower network
    when the EP group spans nodes). Lab 09.
    """
    t, h = pos_int("tokens_per_rank", tokens_per_rank), pos_int("hidden", hidden)
    k, ep = pos_int("top_k", top_k), pos_int("ep", ep)
    g = pos_int("gpus_per_node", gpus_per_node)
    dispatch_bytes = pos_num("dispatch_bytes", dispatch_bytes)
    combine_bytes = pos_num("combine_bytes", combine_bytes)
    rows = (
        t
        * k
        * (
            pos_num("padded_capacity_factor", padded_capacity_factor)
            if padded_capacity_factor is not None
            else 1
        )
    )
    send = lambda b: ring_bytes_per_rank("all_to_all", ep, rows * h * b)  # noqa: E731
    inter = max(0, ep - g) / (ep - 1) if ep > 1 else 0.0
    return AllToAllVolume(
        dispatch=send(dispatch_bytes),
        combine=send(combine_bytes),
        rows_per_rank=rows,
        inter_node_fraction=inter,
    )
