"""Model FLOPs vs hardware FLOPs of a training step, and the utilisations MFU and HFU (lab 10).

MFU (model FLOPs utilisation) counts only the FLOPs the model needs: forward + backward,
3 x the forward. HFU (hardware FLOPs utilisation) counts what the GPUs actually executed,
including the forward work recomputed to save memory. So HFU >= MFU, equal without
recomputation; their ratio is the recomputation overhead (Korthikanti et al. 2022, Sec. 6;
Chowdhery et al. 2022, PaLM, Appendix B). Per iteration of a GPT model (B sequences of s
tokens, l layers, hidden h, vocabulary V; Narayanan et al. 2021 Sec. 5.1):

    forward of one layer: 24 B s h^2 (matmuls) + 4 B s^2 h (attention QK^T and AV)
    logits: 2 B s h V
    model FLOPs           72 B s l h^2 (1 + s/(6h) + V/(12 l h))     (fwd + bwd = 3 forwards)
    hardware, selective   72 B s l h^2 (1 + s/(3h) + V/(12 l h))     (Korthikanti et al.)
    hardware, full        96 B s l h^2 (1 + s/(6h) + V/(16 l h))     (a 4th forward of the
                                                                     layers, not the logits)
"""

from __future__ import annotations

from dataclasses import dataclass

from lab_utils.calc._check import (
    choice,
    fields,
    flop_rate,
    megatron_run,
    number,
    pos_int,
    pos_num,
    text,
)
from lab_utils.calc.activations import RECOMPUTE


def megatron_model_flops(
    batch: int, seq_len: int, n_layers: int, hidden: int, vocab_size: int
) -> float:
    """Model FLOPs of one iteration: 72 B s l h^2 (1 + s/(6h) + V/(12 l h)).

    Forward + backward of every layer and of the logits, no recomputation (Narayanan et al.
    2021 Sec. 5.1; Korthikanti et al. 2022 Sec. 6). The numerator of MFU. Lab 10.
    """
    b, s = pos_int("batch", batch), pos_int("seq_len", seq_len)
    l, h = pos_int("n_layers", n_layers), pos_int("hidden", hidden)
    v = pos_int("vocab_size", vocab_size)
    return 72 * b * s * l * h**2 * (1 + s / (6 * h) + v / (12 * l * h))


def megatron_hardware_flops(
    batch: int, seq_len: int, n_layers: int, hidden: int, vocab_size: int, recompute: str = "none"
) -> float:
    """FLOPs the GPUs execute in one iteration, recomputation included. The numerator of HFU.

        none      = model FLOPs, 72 B s l h^2 (1 + s/(6h) + V/(12 l h))
        selective   72 B s l h^2 (1 + s/(3h) + V/(12 l h)): Korthikanti et al. 2022's count
                    for recomputing the attention core (the form that reproduces their
                    Table 4; by our count re-running QK^T and AV once adds 4 B s^2 h a layer,
                    s/(18h), less than their s/(6h): a small, documented difference)
        full        96 B s l h^2 (1 + s/(6h) + V/(16 l h)) (Narayanan et al. 2021 eq. 3;
                    = ``megatron_flops_per_step``)
    Lab 10 (HFU vs MFU).
    """
    choice("recompute", recompute, RECOMPUTE)
    model = megatron_model_flops(batch, seq_len, n_layers, hidden, vocab_size)
    b, s, l, h, v = batch, seq_len, n_layers, hidden, vocab_size
    if recompute == "none":
        return model
    if recompute == "selective":
        return 72 * b * s * l * h**2 * (1 + s / (3 * h) + v / (12 * l * h))
    return 96 * b * s * l * h**2 * (1 + s / (6 * h) + v / (16 * l * h))


@dataclass(frozen=True)
class Utilization:
    """MFU and HFU of one measured iteration, and the FLOPs behind them."""

    model_flops: float
    hardware_flops: float
    mfu: float
    hfu: float


def flops_utilization(
    batch: int,
    seq_len: int,
    n_layers: int,
    hidden: int,
    vocab_size: int,
    n_gpus: int,
    step_time_s: float,
    peak_flops: float,
    recompute: str = "none",
) -> Utilization:
    """MFU = model FLOPs / (n_gpus peak step_time); HFU = hardware FLOPs / (same).

    Korthikanti et al. 2022, Table 4: GPT-3 175B on 64 A100s (peak 312 TFLOP/s), batch 64,
    13.75 s per iteration with selective recompute + sequence parallelism: MFU 51.4%,
    HFU 52.8%. A utilisation above 100% raises: the step time or the peak is wrong. Lab 10.
    """
    model = megatron_model_flops(batch, seq_len, n_layers, hidden, vocab_size)
    hw = megatron_hardware_flops(batch, seq_len, n_layers, hidden, vocab_size, recompute)
    capacity = (
        pos_int("n_gpus", n_gpus)
        * pos_num("step_time_s", step_time_s)
        * flop_rate("peak_flops", peak_flops)
    )
    hfu = hw / capacity
    if hfu > 1:
        raise ValueError(
            f"HFU = {hfu:.3g} is above 100%: the GPUs cannot execute more than "
            "their peak; check step_time_s (seconds per iteration), peak_flops "
            "(FLOP/s per GPU, e.g. 312e12) and batch (sequences per iteration)"
        )
    return Utilization(model, hw, model / capacity, hfu)


@dataclass(frozen=True)
class KorthikantiRun:
    """One model of Korthikanti et al. 2022, Tables 3 and 4 (GPT, A100s, s = 2048,
    V = 51200): the configuration, the iteration time with full recomputation and with
    their 'present work' (sequence parallelism + selective recomputation), and the MFU /
    HFU (%) they print for the latter."""

    name: str
    n_heads: int
    hidden: int
    n_layers: int
    tp: int
    pp: int
    n_gpus: int
    batch: int
    full_recompute_s: float
    present_work_s: float
    mfu_pct: float
    hfu_pct: float

    def __post_init__(self) -> None:
        text("KorthikantiRun.name", self.name)
        megatron_run(self)
        fields(self, pos_num, ("full_recompute_s", "present_work_s"))
        fields(
            self,
            lambda n, v: number(n, v, 0, 100, expected="a percentage in 0..100"),
            ("mfu_pct", "hfu_pct"),
        )
        if self.mfu_pct > self.hfu_pct:
            raise ValueError(
                f"KorthikantiRun.mfu_pct={self.mfu_pct:g} exceeds hfu_pct="
                f"{self.hfu_pct:g}: HFU counts the model's FLOPs plus the "
                "recomputed ones, so MFU <= HFU"
            )

    def utilization(self, recompute: str = "selective") -> Utilization:
        """MFU/HFU implied by the printed iteration time ('selective': present work,
        'full': the full-recompute baseline)."""
        choice("recompute", recompute, ("selective", "full"))
        t = self.present_work_s if recompute == "selective" else self.full_recompute_s
        return flops_utilization(
            self.batch, 2048, self.n_layers, self.hidden, 51200, self.n_gpus, t, 312e12, recompute
        )


KORTHIKANTI_TABLE4: tuple[KorthikantiRun, ...] = (
    KorthikantiRun("22B", 64, 6144, 48, 8, 1, 8, 4, 1.42, 1.10, 41.5, 43.7),
    KorthikantiRun("175B (GPT-3)", 96, 12288, 96, 8, 8, 64, 64, 18.13, 13.75, 51.4, 52.8),
    KorthikantiRun("530B (MT-NLG)", 128, 20480, 105, 8, 35, 280, 280, 49.05, 37.83, 56.0, 57.0),
    KorthikantiRun("1T", 160, 25600, 128, 8, 64, 512, 512, 94.42, 71.49, 56.3, 57.0),
)


def hfu_over_mfu(
    seq_len: int, hidden: int, n_layers: int, vocab_size: int, recompute: str
) -> float:
    """HFU / MFU = hardware FLOPs / model FLOPs (batch cancels): 1 without recomputation,
    ~4/3 with full recomputation (one more forward of the layers), a few % with selective
    recomputation (GPT-3: 1.027). Lab 10."""
    return megatron_hardware_flops(
        1, seq_len, n_layers, hidden, vocab_size, recompute
    ) / megatron_model_flops(1, seq_len, n_layers, hidden, vocab_size)
