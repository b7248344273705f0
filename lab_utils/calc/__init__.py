"""Pure calculators behind the labs: memory, communication, bubbles, scaling, planning.

No torch, no torch.distributed: every function is plain Python on numbers, returns BYTES /
SECONDS / FRACTIONS, and raises ``ValueError`` with a readable message on bad input (widgets
show it). Every input goes through ``_check`` (one mechanism: bools, floats for ints, NaN,
inf and 10**400 are refused by name; units that are off by 1e9 or 1e12, shapes that do not
divide, degrees that do not multiply to the GPU count are named); published records check
their fields too. ``tests/test_calc_validation.py`` fuzzes every function and class listed
in ``__all__`` and fails on a public name of a calc module missing from it. Each docstring
gives the formula, its source and the lab.

    units         GB, GiB, fmt_bytes                                  (lab 01)
    params        ModelConfig, param_count, PRESETS                   (lab 01)
    memory        model_state_memory, RECIPES (ZeRO 0-3)              (labs 01, 05)
    _check        the input checks; zero_stage, ZERO_STAGES (public)  (every lab)
    activations   activation_bytes_per_layer, activation_memory       (labs 01, 02, 06, 07)
    checkpointing checkpoint_segments, optimal_segments (sqrt n)      (lab 02)
    fp8           float formats from bit counts, FP8 per-tensor scaling (lab 02)
    comm          ring_bytes_per_rank, collective_time, busbw         (labs 03-08)
    context_parallel  CP variants: bytes, saved memory, causal work   (lab 08)
    pipeline      bubble, peak_in_flight, pipeline_facts (6 schedules) (lab 07)
    pipeline_sim  schedule (ideal timelines), Event                   (lab 07)
    timeline      bubble_from_timeline (measured or simulated)        (labs 07, 10)
    scaling       amdahl_speedup, fit_serial_fraction, mfu            (lab 10)
    flops         model vs hardware FLOPs, MFU and HFU (Korthikanti)  (lab 10)
    training      time_to_train: days, GPU-hours, cost (Narayanan)    (labs 10, 12)
    hardware      DEVICES, LINKS, Cluster                             (labs 03, 08, 10)
    planner       plan, evaluate, check_config; its one cost model is
                  _layout_cost, the rules it shares with moe_planner _layout_rules (labs 08, 12)
    layouts       Llama 3 405B Table 4, layout_memory                 (labs 08, 12)
    deepseek      DeepSeek-V3: parameters, budget, memory per GPU     (labs 08, 09, 12)
    moe_planner   plan_moe: PP x DP layouts with EP inside DP, no TP  (lab 09)
    rounding      float_gap, round_to_bits (bf16 / fp16 resolution)  (labs 02, 12)
    equivalence   reduction_bound (gamma_n), logged_loss (DP losses)  (lab 14)
    batch_size    lr_for_batch (SGD linear, Adam sqrt), large_batch_tradeoff (lab 02)
    compute_optimal  compute_optimal: Chinchilla's N and D for a budget (lab 10)
    roofline      critical_intensity, tp_intensity, fsdp_intensity     (labs 05, 06, 08)
    facts         SHARED_FACTS: facts several labs state, one source (tests/test_shared_facts)
    goodput       expected_goodput under failures, Young / Daly intervals, simulate (lab 11)
    _line_fit     least squares for fit_alpha_beta and fit_serial_fraction (labs 03, 10)
"""

from lab_utils.calc._check import ZERO_STAGES, zero_stage
from lab_utils.calc.activations import (  # noqa: E402
    ActivationMemory,
    activation_bytes_per_layer,
    activation_memory,
    embedding_activation_bytes,
    in_flight_microbatches,
    logits_bytes,
)
from lab_utils.calc.batch_size import BatchTradeoff, large_batch_tradeoff, lr_for_batch
from lab_utils.calc.checkpointing import CheckpointPlan, checkpoint_segments, optimal_segments
from lab_utils.calc.comm import (  # noqa: E402
    AlphaBetaFit,
    TPLayerComm,
    alg_bandwidth,
    bus_bandwidth,
    busbw_factor,
    collective_time,
    dp_bytes_per_rank,
    fit_alpha_beta,
    group_collective_time,
    hierarchical_time,
    pp_bytes_per_microbatch,
    ring_bytes_per_rank,
    tp_layer_comm,
)
from lab_utils.calc.compute_optimal import ComputeOptimal, compute_optimal
from lab_utils.calc.context_parallel import (  # noqa: E402
    CP_VARIANTS,
    CPBytes,
    cp_bytes_per_rank,
    cp_causal_pairs,
    cp_saved_bytes,
)
from lab_utils.calc.deepseek import (  # noqa: E402
    DEEPSEEK_V3,
    DEEPSEEK_V3_RECIPE,
    DeepSeekBudget,
    DeepSeekV3Params,
    deepseek_v3_params,
    deepseek_v3_stage_memory,
)
from lab_utils.calc.flops import (  # noqa: E402
    KORTHIKANTI_TABLE4,
    KorthikantiRun,
    Utilization,
    flops_utilization,
    hfu_over_mfu,
    megatron_hardware_flops,
    megatron_model_flops,
)
from lab_utils.calc.fp8 import (  # noqa: E402
    FORMATS,
    FloatFormat,
    bytes_per_element,
    current_scale,
    delayed_scale,
    float_format,
    format_max,
)
from lab_utils.calc.hardware import (  # noqa: E402
    CLUSTER_SPECS,
    DEVICES,
    LINKS,
    Cluster,
    ClusterSpec,
    Device,
    Link,
    dgx_a100,
    dgx_h100,
)
from lab_utils.calc.layouts import LLAMA3_405B_TABLE4, LayoutMemory, LlamaRun, layout_memory
from lab_utils.calc.memory import (  # noqa: E402
    RECIPES,
    ModelStateMemory,
    Recipe,
    max_params_that_fit,
    model_state_memory,
    resolve_recipe,
    zero_memory_table,
)
from lab_utils.calc.params import (  # noqa: E402
    NARAYANAN_TABLE1,
    PRESETS,
    MegatronRun,
    ModelConfig,
    ParamCount,
    narayanan_param_count,
    param_count,
    preset,
)
from lab_utils.calc.pipeline import (  # noqa: E402
    SCHEDULES,
    Bubble,
    PipelineFacts,
    bubble,
    p2p_factor,
    peak_in_flight,
    pipeline_facts,
)
from lab_utils.calc.pipeline_sim import Event, Schedule, schedule
from lab_utils.calc.planner import Plan, best_per_layout, check_config, evaluate, plan
from lab_utils.calc.roofline import critical_intensity, fsdp_intensity, tp_intensity
from lab_utils.calc.scaling import (  # noqa: E402
    SerialFit,
    amdahl_limit,
    amdahl_speedup,
    fit_serial_fraction,
    flops_per_token,
    gustafson_speedup,
    megatron_flops_per_step,
    mfu,
)
from lab_utils.calc.timeline import TimelineBubble, bubble_from_timeline
from lab_utils.calc.training import (  # noqa: E402
    NARAYANAN_SEC51,
    NarayananEstimate,
    TrainingTime,
    mfu_from_gpu_hours,
    time_to_train,
)
from lab_utils.calc.units import GB, MB, TB, GiB, MiB, fmt_bytes

__all__ = [
    "critical_intensity",
    "tp_intensity",
    "fsdp_intensity",
    "ClusterSpec",
    "CLUSTER_SPECS",
    "lr_for_batch",
    "large_batch_tradeoff",
    "BatchTradeoff",
    "compute_optimal",
    "ComputeOptimal",
    "GB",
    "GiB",
    "MB",
    "MiB",
    "TB",
    "fmt_bytes",
    "ModelConfig",
    "ParamCount",
    "param_count",
    "narayanan_param_count",
    "PRESETS",
    "preset",
    "NARAYANAN_TABLE1",
    "MegatronRun",
    "ZERO_STAGES",
    "zero_stage",
    "Recipe",
    "RECIPES",
    "resolve_recipe",
    "ModelStateMemory",
    "model_state_memory",
    "zero_memory_table",
    "max_params_that_fit",
    "activation_bytes_per_layer",
    "activation_memory",
    "ActivationMemory",
    "embedding_activation_bytes",
    "in_flight_microbatches",
    "logits_bytes",
    "checkpoint_segments",
    "optimal_segments",
    "CheckpointPlan",
    "CP_VARIANTS",
    "CPBytes",
    "cp_bytes_per_rank",
    "cp_saved_bytes",
    "cp_causal_pairs",
    "FloatFormat",
    "FORMATS",
    "float_format",
    "format_max",
    "current_scale",
    "delayed_scale",
    "bytes_per_element",
    "ring_bytes_per_rank",
    "collective_time",
    "hierarchical_time",
    "group_collective_time",
    "alg_bandwidth",
    "busbw_factor",
    "bus_bandwidth",
    "dp_bytes_per_rank",
    "tp_layer_comm",
    "TPLayerComm",
    "pp_bytes_per_microbatch",
    "fit_alpha_beta",
    "AlphaBetaFit",
    "Bubble",
    "bubble",
    "SCHEDULES",
    "peak_in_flight",
    "p2p_factor",
    "pipeline_facts",
    "PipelineFacts",
    "Event",
    "Schedule",
    "schedule",
    "TimelineBubble",
    "bubble_from_timeline",
    "amdahl_speedup",
    "amdahl_limit",
    "gustafson_speedup",
    "fit_serial_fraction",
    "SerialFit",
    "flops_per_token",
    "mfu",
    "megatron_flops_per_step",
    "megatron_model_flops",
    "megatron_hardware_flops",
    "flops_utilization",
    "Utilization",
    "hfu_over_mfu",
    "KORTHIKANTI_TABLE4",
    "KorthikantiRun",
    "time_to_train",
    "TrainingTime",
    "mfu_from_gpu_hours",
    "NARAYANAN_SEC51",
    "NarayananEstimate",
    "Device",
    "DEVICES",
    "Link",
    "LINKS",
    "Cluster",
    "dgx_a100",
    "dgx_h100",
    "Plan",
    "evaluate",
    "plan",
    "check_config",
    "best_per_layout",
    "layout_memory",
    "LayoutMemory",
    "LLAMA3_405B_TABLE4",
    "LlamaRun",
    "deepseek_v3_params",
    "DeepSeekV3Params",
    "DEEPSEEK_V3",
    "DeepSeekBudget",
    "DEEPSEEK_V3_RECIPE",
    "deepseek_v3_stage_memory",
]

# Mixture of Experts (lab 09): total vs active parameters, memory under EP x DP (x PP), all-to-all.
from lab_utils.calc.moe import (  # noqa: E402
    DEEPSEEK_V3_LAYOUT,
    MOE_PRESETS,
    MOE_PUBLISHED,
    AllToAllVolume,
    MoEConfig,
    MoEMemory,
    MoEParamCount,
    all_to_all_bytes_per_layer,
    gqa_attention_params,
    mla_attention_params,
    moe_memory_per_rank,
    moe_param_count,
)

__all__ += [
    "MoEConfig",
    "MoEParamCount",
    "moe_param_count",
    "MOE_PRESETS",
    "MOE_PUBLISHED",
    "DEEPSEEK_V3_LAYOUT",
    "MoEMemory",
    "moe_memory_per_rank",
    "AllToAllVolume",
    "all_to_all_bytes_per_layer",
    "gqa_attention_params",
    "mla_attention_params",
]

# The MoE planner (lab 09): PP x DP layouts with expert parallelism inside DP, ranked.
from lab_utils.calc.moe_planner import MoEPlan, evaluate_moe, h800_cluster, plan_moe  # noqa: E402

__all__ += ["MoEPlan", "evaluate_moe", "plan_moe", "h800_cluster"]

# Float resolution (labs 02, 12): the gap between neighbouring numbers of a format, rounding.
from lab_utils.calc.rounding import float_gap, round_to_bits  # noqa: E402

__all__ += ["float_gap", "round_to_bits"]

# When two runs must agree (lab 14): a reduction's rounding bound, the loss DP logs.
from lab_utils.calc.equivalence import logged_loss, reduction_bound  # noqa: E402

__all__ += ["reduction_bound", "logged_loss"]

# Goodput under failures (lab 11): Daly's expected value, the first order, the best interval.
from lab_utils.calc.goodput import (  # noqa: E402
    InterruptionRecord,
    Simulated,
    Waste,
    daly_interval,
    expected_goodput,
    goodput_first_order,
    replica_group_goodput,
    simulate,
    waste,
    young_interval,
)

__all__ += [
    "InterruptionRecord",
    "Simulated",
    "Waste",
    "daly_interval",
    "expected_goodput",
    "goodput_first_order",
    "replica_group_goodput",
    "simulate",
    "waste",
    "young_interval",
]
