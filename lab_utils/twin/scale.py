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
    def model(
        full: str, tiny_params: float, tiny_layers: int, tiny_hidden: int, seq_len: int
    ) -> "Scale":
        """Ratios of the full model ``full`` (a ``calc.params.preset`` name, e.g.
        "llama3-8b") over the tiny one, at the same tokens per step: FLOPs by
        ``calc.scaling.flops_per_token`` (6 N + the attention term), bytes by parameter count
        (gradients and weights are what data-parallel collectives move; activation messages
        really grow with the hidden size only: an approximation, labelled by the name)."""
        from lab_utils.calc.params import param_count, preset
        from lab_utils.calc.scaling import flops_per_token

        cfg = preset(full)
        n_full, n_tiny = param_count(cfg).total, pos_num("tiny_params", tiny_params)
        f_full = flops_per_token(n_full, cfg.n_layers, seq_len, cfg.hidden)
        f_tiny = flops_per_token(n_tiny, tiny_layers, seq_len, tiny_hidden)
        return Scale(
            f_full / f_tiny,
            n_full / n_tiny,
            f"charged as {full} (FLOPs x{f_full / f_tiny:.3g}, "
            f"bytes x{n_full / n_tiny:.3g}; approximate)",
        )
