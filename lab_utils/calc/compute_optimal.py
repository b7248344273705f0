"""Compute-optimal model size and data (Chinchilla: Hoffmann et al. 2022, "Training
Compute-Optimal Large Language Models") (lab 10).

Training costs C = 6 N D FLOPs (N parameters, D tokens). For a fixed C, the loss is lowest when
N and D grow together, at about 20 tokens per parameter (the paper's three approaches agree on
N and D scaling as C^0.5; 20 tokens/param is the usual reading of its Table 3). So
N = sqrt(C / (6 r)) and D = r N with r = 20. Chinchilla itself: 70B parameters on 1.4T tokens.
Models trained for cheap inference go far beyond it (Llama 3 405B: 15.6T tokens, ~38 per
parameter; Llama 3 8B: ~1,900 per parameter): compute-optimal is optimal for TRAINING compute.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from lab_utils.calc._check import pos_num


@dataclass(frozen=True)
class ComputeOptimal:
    compute_flops: float
    tokens_per_param: float
    params: float
    tokens: float


def compute_optimal(compute_flops: float, tokens_per_param: float = 20.0) -> ComputeOptimal:
    """The compute-optimal (N, D) for a budget of ``compute_flops`` training FLOPs (Hoffmann
    et al. 2022). Lab 10."""
    c = pos_num("compute_flops", compute_flops)
    if c < 1e12:
        raise ValueError(
            f"compute_flops={compute_flops:g}: a training budget in FLOPs (e.g. "
            "5.76e23 for Chinchilla); below 1e12 is almost surely another unit"
        )
    r = pos_num("tokens_per_param", tokens_per_param)
    n = math.sqrt(c / (6 * r))
    return ComputeOptimal(c, r, n, r * n)
