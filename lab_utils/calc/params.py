"""How many parameters a decoder-only transformer has (lab 01; used by every later lab).

One ``ModelConfig`` describes GPT-style models (LayerNorm, biases, learned positions, 4h GeLU
MLP, tied head) and Llama-style models (RMSNorm, no biases, RoPE, SwiGLU MLP with three
matrices, grouped-query attention, untied head). ``param_count`` returns a breakdown so a
widget can stack embedding / attention / MLP / norms / head.

Notation (Narayanan et al. 2021): l layers, h hidden size, a heads, V vocabulary, s sequence.
"""

from __future__ import annotations

from dataclasses import dataclass

from lab_utils.calc._check import (
    boolean,
    choice,
    flop_rate,
    instance,
    megatron_run,
    pos_int,
    pos_num,
    text,
)


@dataclass(frozen=True)
class ModelConfig:
    """Shape of a decoder-only transformer.

    ``n_kv_heads=None`` means multi-head attention (as many K/V heads as query heads);
    ``ffn_hidden=None`` means 4*hidden. ``position="learned"`` adds a (max_position x hidden)
    table; "rope" and "none" add no parameters.
    """

    vocab_size: int
    hidden: int
    n_layers: int
    n_heads: int
    n_kv_heads: int | None = None
    ffn_hidden: int | None = None
    gated_mlp: bool = False
    tied_embeddings: bool = False
    position: str = "learned"
    max_position: int = 2048
    bias: bool = True
    norm: str = "layernorm"
    name: str = "custom"

    def __post_init__(self) -> None:
        for field in ("vocab_size", "hidden", "n_layers", "n_heads", "max_position"):
            pos_int(f"ModelConfig.{field}", getattr(self, field))
        if self.n_kv_heads is not None:
            pos_int("ModelConfig.n_kv_heads", self.n_kv_heads)
        if self.ffn_hidden is not None:
            pos_int("ModelConfig.ffn_hidden", self.ffn_hidden)
        for flag in ("gated_mlp", "tied_embeddings", "bias"):
            boolean(f"ModelConfig.{flag}", getattr(self, flag))
        choice("ModelConfig.position", self.position, ("learned", "rope", "none"))
        choice("ModelConfig.norm", self.norm, ("layernorm", "rmsnorm"))
        text("ModelConfig.name", self.name)
        if self.hidden % self.n_heads:
            raise ValueError(
                f"hidden={self.hidden} must be divisible by n_heads={self.n_heads} "
                "(each head gets hidden/n_heads dimensions)"
            )
        if self.n_heads % self.kv_heads:
            raise ValueError(
                f"n_heads={self.n_heads} must be a multiple of n_kv_heads="
                f"{self.kv_heads} (grouped-query attention shares each K/V head "
                "among an equal number of query heads)"
            )

    @property
    def head_dim(self) -> int:
        return self.hidden // self.n_heads

    @property
    def kv_heads(self) -> int:
        return self.n_heads if self.n_kv_heads is None else self.n_kv_heads

    @property
    def ffn(self) -> int:
        return 4 * self.hidden if self.ffn_hidden is None else self.ffn_hidden


@dataclass(frozen=True)
class ParamCount:
    """Parameter breakdown. ``attention``/``mlp``/``norms`` are summed over all layers;
    ``norms`` includes the final norm; ``embedding`` includes learned positions;
    ``head`` is 0 when tied to the embedding."""

    embedding: int
    attention: int
    mlp: int
    norms: int
    head: int
    per_layer: int

    @property
    def total(self) -> int:
        return self.embedding + self.attention + self.mlp + self.norms + self.head

    def as_dict(self) -> dict[str, int]:
        return {
            "embedding": self.embedding,
            "attention": self.attention,
            "mlp": self.mlp,
            "norms": self.norms,
            "head": self.head,
        }


def param_count(cfg: ModelConfig) -> ParamCount:
    """Count parameters of ``cfg`` exactly, by matrix.

    Per layer: attention Q and O are h x h, K and V are h x (n_kv_heads * head_dim);
    MLP has 2 matrices h x f (GeLU) or 3 (SwiGLU gate/up/down, Llama); two norms per layer
    (LayerNorm: weight + bias, RMSNorm: weight only); biases on every linear if ``bias``.
    For GPT-style models this is Narayanan et al. 2021 (Sec. 5.1) per layer, 12h^2 + 13h,
    plus the embedding (V + s)h and one final LayerNorm (2h, which their formula omits).
    Llama-2 7B gives 6,738,415,616 (Touvron et al. 2023, "7B"). Introduced in lab 01.
    """
    instance("cfg", cfg, ModelConfig, "calc.preset('llama2-7b')")
    h, f, kv = cfg.hidden, cfg.ffn, cfg.kv_heads * cfg.head_dim
    attn = 2 * h * h + 2 * h * kv + ((2 * h + 2 * kv) if cfg.bias else 0)
    n_mats = 3 if cfg.gated_mlp else 2
    mlp = n_mats * h * f + (((n_mats - 1) * f + h) if cfg.bias else 0)
    norm_size = 2 * h if cfg.norm == "layernorm" else h
    layer = attn + mlp + 2 * norm_size
    emb = cfg.vocab_size * h + (cfg.max_position * h if cfg.position == "learned" else 0)
    head = 0 if cfg.tied_embeddings else cfg.vocab_size * h
    return ParamCount(
        embedding=emb,
        attention=cfg.n_layers * attn,
        mlp=cfg.n_layers * mlp,
        norms=cfg.n_layers * 2 * norm_size + norm_size,
        head=head,
        per_layer=layer,
    )


def narayanan_param_count(
    n_layers: int, hidden: int, vocab_size: int = 51200, seq_len: int = 2048
) -> float:
    """P = 12 l h^2 (1 + 13/(12h) + (V + s)/(12 l h)).

    Narayanan et al. 2021 (Megatron-LM PTD-P), Sec. 5.1; the formula behind their Table 1
    (V = 51,200, s = 2048). Equals ``param_count`` of the matching GPT config minus the
    final LayerNorm (2h). Introduced in lab 01, reused in lab 08.
    """
    l, h = pos_int("n_layers", n_layers), pos_int("hidden", hidden)
    v, s = pos_int("vocab_size", vocab_size), pos_int("seq_len", seq_len)
    return 12 * l * h**2 * (1 + 13 / (12 * h) + (v + s) / (12 * l * h))


def _gpt(
    name: str,
    n_layers: int,
    hidden: int,
    n_heads: int,
    vocab_size: int = 50257,
    seq_len: int = 2048,
) -> ModelConfig:
    """A GPT-2/3 style config: LayerNorm, biases, learned positions, tied head, 4h MLP."""
    return ModelConfig(
        vocab_size=vocab_size,
        hidden=hidden,
        n_layers=n_layers,
        n_heads=n_heads,
        tied_embeddings=True,
        position="learned",
        max_position=seq_len,
        bias=True,
        norm="layernorm",
        name=name,
    )


def _llama(
    name: str,
    n_layers: int,
    hidden: int,
    n_heads: int,
    ffn_hidden: int,
    n_kv_heads: int | None = None,
    vocab_size: int = 32000,
    seq_len: int = 4096,
    tied: bool = False,
) -> ModelConfig:
    """A Llama style config: RMSNorm, no biases, RoPE, SwiGLU (3 matrices), untied head."""
    return ModelConfig(
        vocab_size=vocab_size,
        hidden=hidden,
        n_layers=n_layers,
        n_heads=n_heads,
        n_kv_heads=n_kv_heads,
        ffn_hidden=ffn_hidden,
        gated_mlp=True,
        tied_embeddings=tied,
        position="rope",
        max_position=seq_len,
        bias=False,
        norm="rmsnorm",
        name=name,
    )


@dataclass(frozen=True)
class MegatronRun:
    """One row of Narayanan et al. 2021, Table 1 (weak-scaling runs on A100s, V=51200,
    s=2048). ``params_b`` is the published count in billions (rounded by the paper)."""

    params_b: float
    n_heads: int
    hidden: int
    n_layers: int
    tp: int
    pp: int
    n_gpus: int
    batch: int
    tflops_per_gpu: float

    def __post_init__(self) -> None:
        pos_num("MegatronRun.params_b", self.params_b)
        megatron_run(self)
        flop_rate("MegatronRun.tflops_per_gpu", self.tflops_per_gpu, "TFLOP/s")

    @property
    def config(self) -> ModelConfig:
        return _gpt(
            f"megatron-{self.params_b}b",
            self.n_layers,
            self.hidden,
            self.n_heads,
            vocab_size=51200,
            seq_len=2048,
        )


NARAYANAN_TABLE1: tuple[MegatronRun, ...] = (
    MegatronRun(1.7, 24, 2304, 24, 1, 1, 32, 512, 137),
    MegatronRun(3.6, 32, 3072, 30, 2, 1, 64, 512, 138),
    MegatronRun(7.5, 32, 4096, 36, 4, 1, 128, 512, 142),
    MegatronRun(18.4, 48, 6144, 40, 8, 1, 256, 1024, 135),
    MegatronRun(39.1, 64, 8192, 48, 8, 2, 512, 1536, 138),
    MegatronRun(76.1, 80, 10240, 60, 8, 4, 1024, 1792, 140),
    MegatronRun(145.6, 96, 12288, 80, 8, 8, 1536, 2304, 148),
    MegatronRun(310.1, 128, 16384, 96, 8, 16, 1920, 2160, 155),
    MegatronRun(529.6, 128, 20480, 105, 8, 35, 2520, 2520, 163),
    MegatronRun(1008.0, 160, 25600, 128, 8, 64, 3072, 3072, 163),
)

# Sources: GPT-2 (Radford et al. 2019, Table 2; vocab 50257, context 1024), GPT-3 (Brown et
# al. 2020, Table 2.1), Llama 2 (Touvron et al. 2023, Table 1 + released config.json),
# Llama 3 (Meta 2024, "The Llama 3 Herd of Models", Table 3; 405B: 405,853,388,800 in the
# released config), Llama 3.2 1B and 3B (released configs).
PRESETS: dict[str, ModelConfig] = {
    "gpt2-small": _gpt("gpt2-small", 12, 768, 12, seq_len=1024),
    "gpt2-medium": _gpt("gpt2-medium", 24, 1024, 16, seq_len=1024),
    "gpt2-large": _gpt("gpt2-large", 36, 1280, 20, seq_len=1024),
    "gpt2-xl": _gpt("gpt2-xl", 48, 1600, 25, seq_len=1024),
    "1b": _gpt("1b", 18, 2048, 16),  # a round GPT-style 1.0B for quick labs (not a release)
    "gpt3-175b": _gpt("gpt3-175b", 96, 12288, 96),
    "llama2-7b": _llama("llama2-7b", 32, 4096, 32, 11008),
    "llama2-13b": _llama("llama2-13b", 40, 5120, 40, 13824),
    "llama2-70b": _llama("llama2-70b", 80, 8192, 64, 28672, n_kv_heads=8),
    "llama3-8b": _llama(
        "llama3-8b", 32, 4096, 32, 14336, n_kv_heads=8, vocab_size=128256, seq_len=8192
    ),
    "llama3-70b": _llama(
        "llama3-70b", 80, 8192, 64, 28672, n_kv_heads=8, vocab_size=128256, seq_len=8192
    ),
    "llama3.2-1b": _llama(
        "llama3.2-1b", 16, 2048, 32, 8192, n_kv_heads=8, vocab_size=128256, seq_len=8192, tied=True
    ),
    "llama3.2-3b": _llama(
        "llama3.2-3b", 28, 3072, 24, 8192, n_kv_heads=8, vocab_size=128256, seq_len=8192, tied=True
    ),
    # Llama 3.1 keeps Llama 3's shapes with a 128K context (RoPE: no extra parameters).
    "llama3.1-405b": _llama(
        "llama3.1-405b", 126, 16384, 128, 53248, n_kv_heads=8, vocab_size=128256, seq_len=131072
    ),
}
PRESETS.update({f"megatron-{r.params_b}b": r.config for r in NARAYANAN_TABLE1})


def preset(name: str) -> ModelConfig:
    """Look up a preset by name (see ``PRESETS`` for sizes and sources). Lab 01 onwards."""
    if not isinstance(name, str) or name not in PRESETS:
        raise ValueError(
            f"unknown model preset {name!r}; name must be one of: {', '.join(PRESETS)}"
        )
    return PRESETS[name]
