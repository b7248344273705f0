"""One source for the facts several labs, cards and the practice bank state (issue 36, item 3).

Each entry of SHARED_FACTS names a fact, its value(s) computed here from the calculators (never
typed twice), and how a statement of it is recognised in text; ``tests/test_shared_facts.py``
scans every notebook, card and practice item and fails on a statement that disagrees:

    bf16 / fp16 mantissa bits     7 / 10 STORED bits (8 / 11 significant), from FORMATS
    E4M3 / E5M2 largest value     448 / 57344, from float_format
    the bubble's two conventions  (p-1)/m is of the IDEAL compute time, (p-1)/(m+p-1) of the
                                  step: every mention says which
    ZeRO-2 traffic                "the same bytes as DDP" only per step WITHOUT accumulation:
                                  (A+1)/2 x DDP with A micro-batches; every claim says so
    DeepSeek-V3 model state/GPU   10.8 GB (ZeRO-1, 16 B/param), 27.3 GB without ZeRO (lab 09),
                                  19.4 GB stage 0 with DeepSeek's 14 B/param recipe (lab 08)
"""

from __future__ import annotations

from lab_utils.calc.deepseek import deepseek_v3_stage_memory
from lab_utils.calc.fp8 import FORMATS, float_format
from lab_utils.calc.moe import DEEPSEEK_V3_LAYOUT, MOE_PRESETS, moe_memory_per_rank
from lab_utils.calc.units import GB


def _deepseek_state_gb() -> tuple[float, ...]:
    cfg = MOE_PRESETS["deepseek-v3"]
    zero1 = moe_memory_per_rank(cfg, **DEEPSEEK_V3_LAYOUT).total / GB
    no_zero = moe_memory_per_rank(cfg, **{**DEEPSEEK_V3_LAYOUT, "zero_stage": 0}).total / GB
    return zero1, no_zero, sum(deepseek_v3_stage_memory(0)) / GB


# name -> (values, regular expression whose first group is the stated value, or None for a
# labelling rule checked by the test; the words that must stand near a labelling rule's match)
SHARED_FACTS: dict[str, dict] = {
    "bf16 stored mantissa bits": {
        "values": (FORMATS["bf16"].mant_bits,),
        "pattern": r"(?i)bf16[^.\n]{0,80}?\b(\d+) (?:stored )?(?:mantissa bits|bits of mantissa)",
    },
    "fp16 stored mantissa bits": {
        "values": (FORMATS["fp16"].mant_bits,),
        "pattern": r"(?i)fp16[^.\n]{0,80}?\b(\d+) (?:stored )?(?:mantissa bits|bits of mantissa)",
    },
    "E4M3 largest value": {
        "values": (float_format("e4m3").max,),
        "pattern": r"E4M3[^.\n]{0,60}?\bmax(?:imum)?[^\d{\n]{0,20}([\d,]+)",
    },
    "E5M2 largest value": {
        "values": (float_format("e5m2").max,),
        "pattern": r"E5M2[^.\n]{0,60}?\bmax(?:imum)?[^\d{\n]{0,20}([\d,]+)",
    },
    "bubble over ideal compute": {"label": r"\(p ?[-−] ?1\) ?/ ?m\b", "near": ("ideal",)},
    "bubble over the step": {
        "label": r"\(p ?[-−] ?1\) ?/ ?\(m ?\+ ?p ?[-−] ?1\)",
        "near": ("step", "total"),
    },
    "ZeRO-2 bytes need the accumulation caveat": {
        "claim": r"(?i)zero-(?:1/)?2\b|stages 1 and 2",
        "says": r"(?i)no extra (?:bytes|communication)|same bytes|exactly what DDP sends|"
        r"send what DDP sends|costs no extra",
        "near": ("accumulat",),
    },
    "DeepSeek-V3 model state per GPU (GB)": {
        "values": _deepseek_state_gb(),
        "tolerance": 0.6,
        "pattern": r"model state[^.\n]{0,60}?\b(\d+(?:\.\d+)?) GB",
        "context": "DeepSeek",
    },
}
