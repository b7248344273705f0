"""Scale model: charge a full-size model's FLOPs and bytes while a tiny model does the math.

The tiny lab model runs for real (every number it produces is exact); the emulated clock is
charged ``flops`` times its counted FLOPs and ``bytes`` times its communicated bytes, the ratios
of a named full-size model to the tiny one (``Scale.model``). One ratio for all FLOPs and one for
all bytes is an approximation, labelled as such: it keeps the PROPORTIONS of the full model's step
(compute vs communication) on a laptop.
"""
from __future__ import annotations

from dataclasses import dataclass

from lab_utils.calc._check import pos_num


@dataclass(frozen=True)
class Scale:
    """Multipliers on counted FLOPs and moved bytes; ``name`` says what they stand for."""

    flops: float = 1.0
    bytes: float = 1.0
    name: str = "as run"

    def __post_init__(self) -> None:
        pos_num("Scale.flops", self.flops)
        pos_num("Scale.bytes", self.bytes)

    @staticmethod
    def model(full: str, tiny_params: float, tiny_tokens: float, full_tokens: float,
              tiny_layers: int, seq_len: int) -> "Scale":
        """Ratios of the full model ``full`` (a ``calc.params.preset`` name, e.g.
        "llama3-8b") over the tiny one: bytes by parameter count (gradients and weights are
        what data-parallel collectives move), FLOPs by ``calc.scaling.flops_per_token`` x
        tokens per step."""
        from lab_utils.calc.params import param_count, preset
        from lab_utils.calc.scaling import flops_per_token

        cfg = preset(full)
        n_full = param_count(cfg).total
        f_full = flops_per_token(n_full, cfg.n_layers, seq_len) * pos_num("full_tokens",
                                                                           full_tokens)
        f_tiny = flops_per_token(pos_num("tiny_params", tiny_params), tiny_layers,
                                 seq_len) * pos_num("tiny_tokens", tiny_tokens)
        return Scale(f_full / f_tiny, n_full / tiny_params, f"scaled to {full}")
