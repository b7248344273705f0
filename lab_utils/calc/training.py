"""Time, GPU-hours and cost to train a model end to end (labs 10, 12).

Training a P-parameter model on T tokens executes about c T P FLOPs: c = 6 without
recomputation (2 forward + 4 backward per parameter per token; Kaplan et al. 2020) and
c = 8 with full activation recomputation (one more forward). On n GPUs that each execute
X FLOP/s (ACHIEVED hardware throughput, recomputation included) the time is

    time = c T P / (n X)                    Narayanan et al. 2021, Sec. 5.1: "8TP/(nX)"

GPT-3 (P = 175B, T = 300B tokens, n = 1024 A100s, X = 140 TFLOP/s): 34 days; the 1T model
(P = 1008B, T = 450B, n = 3072, X = 163 TFLOP/s): 84 days. Given MFU instead, the model
FLOPs 6 T P are divided by n x peak x MFU and recomputation does not enter (it only raises
HFU). GPU-hours = n x hours; cost = GPU-hours x price per GPU-hour.
"""

from __future__ import annotations

from dataclasses import dataclass

from lab_utils.calc._check import (
    choice,
    fields,
    flop_rate,
    fraction,
    nonneg_num,
    pos_int,
    pos_num,
    text,
)
from lab_utils.calc.activations import RECOMPUTE

# FLOPs per parameter per token: the 6P rule, plus one forward (2P) with full recomputation.
# Selective recomputation re-runs only attention scores, which 6P does not count anyway.
FLOPS_PER_PARAM_TOKEN = {"none": 6, "selective": 6, "full": 8}
SECONDS_PER_DAY = 86_400


@dataclass(frozen=True)
class TrainingTime:
    """An end-to-end estimate. ``flops`` are hardware FLOPs executed; ``mfu`` / ``hfu`` are
    None when no peak FLOP/s was given."""

    n_params: float
    n_tokens: float
    n_gpus: int
    flops: float
    seconds: float
    mfu: float | None
    hfu: float | None
    price_per_gpu_hour: float

    @property
    def days(self) -> float:
        return self.seconds / SECONDS_PER_DAY

    @property
    def gpu_hours(self) -> float:
        return self.n_gpus * self.seconds / 3600

    @property
    def cost(self) -> float:
        """In the currency of ``price_per_gpu_hour`` (0 when no price was given)."""
        return self.gpu_hours * self.price_per_gpu_hour


def time_to_train(
    n_params: float,
    n_tokens: float,
    n_gpus: int,
    flops_per_gpu: float | None = None,
    recompute: str = "none",
    mfu: float | None = None,
    peak_flops: float | None = None,
    price_per_gpu_hour: float = 0.0,
) -> TrainingTime:
    """End-to-end training time from ONE of two throughput figures (module docstring).

    * ``flops_per_gpu`` X: achieved hardware FLOP/s per GPU, the X of Narayanan et al.
      (2021, Sec. 5.1), who count the recomputed forward: time = c T P / (n X), c = 6 or 8
      (``recompute='full'``). With ``peak_flops`` too, HFU = X / peak and MFU = (6/c) HFU.
    * ``mfu`` with ``peak_flops``: time = 6 T P / (n peak MFU). ``recompute`` then only
      decides HFU = MFU c / 6, which must stay <= 100% (MFU 0.8 with full recomputation
      would need 107% of the peak, so it raises).
    ``price_per_gpu_hour`` (e.g. 2.0 dollars) gives ``.cost``. Lab 10 (time-and-cost widget),
    lab 12 (back-of-the-envelope interview questions).
    """
    p, t = pos_num("n_params", n_params), pos_num("n_tokens", n_tokens)
    n = pos_int("n_gpus", n_gpus)
    choice("recompute", recompute, RECOMPUTE)
    price = nonneg_num("price_per_gpu_hour", price_per_gpu_hour)
    c = FLOPS_PER_PARAM_TOKEN[recompute]
    peak = None if peak_flops is None else flop_rate("peak_flops", peak_flops)
    if (flops_per_gpu is None) == (mfu is None):
        raise ValueError(
            "give exactly one throughput: flops_per_gpu (achieved FLOP/s per GPU) "
            "or mfu (a fraction, with peak_flops)"
        )
    if mfu is not None:
        u = fraction("mfu", mfu)
        if u == 0:
            raise ValueError("mfu must be above 0: at 0% utilisation training never ends")
        if peak is None:
            raise ValueError(
                "mfu needs peak_flops (FLOP/s per GPU, e.g. 989e12 for an H100) to "
                "turn a fraction into FLOP/s"
            )
        hfu = u * c / 6
        if hfu > 1:
            raise ValueError(
                f"mfu={u:g} with recompute={recompute!r} means HFU = {hfu:.3g} > 1: "
                f"the recomputed forward does not fit in the peak; lower mfu "
                f"below {6 / c:g}"
            )
        seconds = 6 * t * p / (n * peak * u)
        return TrainingTime(p, t, n, c * t * p, seconds, u, hfu, price)
    x = flop_rate("flops_per_gpu", flops_per_gpu)
    hfu_x = None
    if peak is not None:
        hfu_x = x / peak
        if hfu_x > 1:
            raise ValueError(
                f"flops_per_gpu={x:.3g} exceeds peak_flops={peak:.3g}: no GPU "
                "runs above its peak; check the units (FLOP/s, not TFLOP/s)"
            )
    seconds = c * t * p / (n * x)
    return TrainingTime(
        p, t, n, c * t * p, seconds, None if hfu_x is None else hfu_x * 6 / c, hfu_x, price
    )


def mfu_from_gpu_hours(
    n_params: float, n_tokens: float, gpu_hours: float, peak_flops: float
) -> float:
    """MFU implied by a reported GPU-hour budget: 6 P T / (GPU-hours x 3600 x peak).

    For a mixture-of-experts model P is the ACTIVATED parameters per token. DeepSeek-V3
    (2024): 37B activated, 14.8T tokens, 2.664M H800-hours of pre-training, 989 TFLOP/s bf16
    peak: 34.6% (their matmuls ran in FP8, whose peak is twice as high). Lab 09, lab 10.
    """
    work = 6 * pos_num("n_params", n_params) * pos_num("n_tokens", n_tokens)
    capacity = pos_num("gpu_hours", gpu_hours) * 3600 * flop_rate("peak_flops", peak_flops)
    value = work / capacity
    if value > 1:
        raise ValueError(
            f"MFU = {value:.3g} is above 100%: the GPU-hours cannot hold that "
            "many FLOPs; check gpu_hours (hours x GPUs) and peak_flops (FLOP/s)"
        )
    return value


@dataclass(frozen=True)
class NarayananEstimate:
    """Narayanan et al. 2021, Sec. 5.1: an end-to-end training-time estimate they print."""

    model: str
    n_params: float
    n_tokens: float
    n_gpus: int
    tflops_per_gpu: float
    printed_days: int

    def __post_init__(self) -> None:
        text("NarayananEstimate.model", self.model)
        fields(self, pos_num, ("n_params", "n_tokens"))
        pos_int("NarayananEstimate.n_gpus", self.n_gpus)
        flop_rate("NarayananEstimate.tflops_per_gpu", self.tflops_per_gpu, "TFLOP/s")
        if self.tflops_per_gpu > 312:
            raise ValueError(
                f"NarayananEstimate.tflops_per_gpu={self.tflops_per_gpu:g} exceeds "
                "the A100's 312 TFLOP/s peak that the paper's runs used"
            )
        pos_int("NarayananEstimate.printed_days", self.printed_days)

    def estimate(self) -> TrainingTime:
        """Their 8TP/(nX) (full recomputation) with our calculator."""
        return time_to_train(
            self.n_params,
            self.n_tokens,
            self.n_gpus,
            self.tflops_per_gpu * 1e12,
            "full",
            peak_flops=312e12,
        )


NARAYANAN_SEC51: tuple[NarayananEstimate, ...] = (
    NarayananEstimate("GPT-3 175B", 175e9, 300e9, 1024, 140, 34),
    # Sec. 5.1 says "1 trillion"; Table 1's count for that row is 1008.0B.
    NarayananEstimate("1T", 1008e9, 450e9, 3072, 163, 84),
)
