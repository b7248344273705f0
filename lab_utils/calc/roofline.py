"""When does a parallelism become communication-bound? A roofline for collectives (labs 05, 06, 08).

A device computes F FLOP/s and a link moves B bytes/s, so communication hides behind compute only
if the work does at least F / B FLOPs per byte it sends: the CRITICAL INTENSITY (H100 bf16 dense
989e12 over NVLink 4's 450e9: ~2,200 FLOPs/byte; over one 400 Gb/s NIC, 50e9: ~19,800). What the
parallelism does per byte (ring collectives, N-rank groups; forward and backward give the same
ratio):

    tensor parallel, per token and layer: compute 24 h^2 / t FLOPs (a dense layer's 12 h^2
        weights, 2 FLOPs each), communication 2 all-reduces of h values: 2 x 2(t-1)/t x h x v
        bytes (v bytes per value)                    -> intensity 6 h / ((t-1) v)   (3h/(t-1), bf16)
    FSDP / ZeRO-3, per parameter and step: compute 6 T FLOPs (T tokens per rank), communication
        (K-1)/K x (2 p + g) bytes (two gathers in p-byte params, one reduce-scatter in g-byte grads)
                                                     -> intensity 6 T K / ((K-1)(2 p + g))
So TP needs a wide model to stay compute-bound (h > (t-1) v F / 6B) and almost never survives a
slow link; FSDP needs enough tokens per GPU (about F / B for bf16 everything). Overlap (async TP,
FSDP prefetch) can hide communication only up to this point. Korthikanti et al. 2022 and the
PyTorch FSDP paper (Zhao et al. 2023) make the same argument with measurements.
"""

from __future__ import annotations

from lab_utils.calc._check import flop_rate, pos_int, pos_num


def critical_intensity(device_flops: float, link_bytes_per_s: float) -> float:
    """FLOPs per byte sent below which a link, not the device, sets the pace. Lab 08."""
    return flop_rate("device_flops", device_flops) / pos_num("link_bytes_per_s", link_bytes_per_s)


def tp_intensity(hidden: int, tp: int, bytes_per_value: float = 2.0) -> float:
    """FLOPs per byte of Megatron tensor parallelism: 6 h / ((t - 1) v) (module docstring).
    Lab 08."""
    h, t, v = (
        pos_int("hidden", hidden),
        pos_int("tp", tp),
        pos_num("bytes_per_value", bytes_per_value),
    )
    if t == 1:
        return float("inf")
    return 6 * h / ((t - 1) * v)


def fsdp_intensity(
    tokens_per_rank: int, dp: int, param_bytes: float = 2.0, grad_bytes: float = 4.0
) -> float:
    """FLOPs per byte of FSDP: 6 T K / ((K - 1)(2 p + g)) (module docstring). Lab 08."""
    t, k = pos_int("tokens_per_rank", tokens_per_rank), pos_int("dp", dp)
    p, g = pos_num("param_bytes", param_bytes), pos_num("grad_bytes", grad_bytes)
    if k == 1:
        return float("inf")
    return 6 * t * k / ((k - 1) * (2 * p + g))
