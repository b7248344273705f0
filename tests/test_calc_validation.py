"""Inputs that cannot lie (issue 21): every public calculator refuses bad input with a
ValueError that names the argument, through ONE mechanism (``calc._check``).

The property test enumerates ``calc.__all__``: every function (and every input or record
class, and every public method of a result or record class that takes arguments) must have a
valid example call below, so a new function is fuzzed automatically or the test says what to
add; and every public function or class of every public calc module must be in ``__all__``
(discovered by walking the package, so nothing public escapes the fuzzing). For each
argument, hypothesis substitutes random values that are wrong for its type (bools for ints,
any float for an int, NaN, inf, 10**400, text, None, containers) and accepts only a
ValueError whose message names the argument. Published records (``LlamaRun``,
``DeepSeekBudget``, ...) are inputs too: a learner can build one, so they are fuzzed.
"""

from __future__ import annotations

import importlib
import inspect
import math
import pkgutil

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import lab_utils.calc as calc
from lab_utils.calc import (
    DEEPSEEK_V3,
    KORTHIKANTI_TABLE4,
    LLAMA3_405B_TABLE4,
    PRESETS,
    Cluster,
    Event,
    ModelConfig,
    Recipe,
    dgx_h100,
)

SMALL = PRESETS["gpt2-small"]
H100 = dgx_h100(1)
EVENTS = [{"rank": 0, "start": 0.0, "end": 1.0}, {"rank": 1, "start": 0.5, "end": 2.0}]
PLANS = calc.plan(SMALL, H100, 8, 128, top_k=3)

# One valid call per public callable: every parameter given, so every parameter is fuzzed.
VALID: dict[str, dict] = {
    "fmt_bytes": dict(n=1e9, unit="GB", digits=1),
    "float_gap": dict(x=1.2e-4, mant_bits=7),
    "round_to_bits": dict(x=1.2e-4, mant_bits=10),
    "reduction_bound": dict(n=4096, mant_bits=23),
    "logged_loss": dict(token_sums=[10.0, 3.0], token_counts=[5, 1], how="per_rank"),
    "ModelConfig": dict(
        vocab_size=100,
        hidden=64,
        n_layers=2,
        n_heads=4,
        n_kv_heads=2,
        ffn_hidden=128,
        gated_mlp=False,
        tied_embeddings=False,
        position="learned",
        max_position=64,
        bias=True,
        norm="layernorm",
        name="tiny",
    ),
    "param_count": dict(cfg=SMALL),
    "narayanan_param_count": dict(n_layers=24, hidden=2304, vocab_size=51200, seq_len=2048),
    "preset": dict(name="gpt2-small"),
    "MegatronRun": dict(
        params_b=1.7,
        n_heads=24,
        hidden=2304,
        n_layers=24,
        tp=1,
        pp=1,
        n_gpus=32,
        batch=512,
        tflops_per_gpu=137.0,
    ),
    "zero_stage": dict(stage=2),
    "resolve_recipe": dict(recipe="mixed_adam"),
    "Recipe": dict(name="r", weights=2.0, grads=2.0, master=4.0, optimizer=8.0, source="s"),
    "model_state_memory": dict(
        n_params=1e9,
        recipe_name="mixed_adam",
        zero_stage=1,
        dp=4,
        tp=2,
        pp=2,
        offload_optimizer=False,
    ),
    "zero_memory_table": dict(n_params=1e9, dps=(1, 4), recipe_name="mixed_adam"),
    "max_params_that_fit": dict(
        gpu_mem_bytes=80e9,
        recipe_name="mixed_adam",
        zero_stage=1,
        dp=8,
        tp=1,
        pp=1,
        reserved_bytes=1e9,
    ),
    "activation_bytes_per_layer": dict(
        seq_len=2048,
        micro_batch=1,
        hidden=12288,
        n_heads=96,
        tp=8,
        sequence_parallel=True,
        recompute="none",
        flash_attention=False,
    ),
    "activation_memory": dict(
        seq_len=2048,
        micro_batch=1,
        hidden=12288,
        n_heads=96,
        n_layers=96,
        tp=8,
        pp=4,
        n_micro=8,
        sequence_parallel=True,
        recompute="selective",
        schedule="1f1b",
        stage=0,
        virtual_stages=2,
        flash_attention=False,
        embedding=True,
    ),
    "embedding_activation_bytes": dict(
        seq_len=2048, micro_batch=1, hidden=4096, tp=2, sequence_parallel=True
    ),
    "in_flight_microbatches": dict(schedule="1f1b", pp=4, n_micro=8, stage=1),
    "logits_bytes": dict(seq_len=2048, micro_batch=1, vocab_size=32000, tp=2, bytes_per_value=4),
    "checkpoint_segments": dict(n_layers=16, n_segments=4, input_bytes=1.0, layer_bytes=3.0),
    "optimal_segments": dict(n_layers=16, input_bytes=1.0, layer_bytes=3.0),
    "cp_bytes_per_rank": dict(
        variant="ulysses", batch=1, heads=32, seq_len=131072, head_dim=128, n=8, bytes_per_elem=2
    ),
    "cp_saved_bytes": dict(
        variant="allgather_kv",
        batch=1,
        heads=8,
        seq_len=131072,
        head_dim=128,
        n=16,
        rank=3,
        causal=True,
        zigzag=True,
        bytes_per_elem=2,
    ),
    "cp_causal_pairs": dict(variant="ring", heads=32, seq_len=131072, n=16, rank=15, zigzag=False),
    "ring_bytes_per_rank": dict(op="all_reduce", n=8, size_bytes=1e6),
    "hierarchical_time": dict(
        op="all_reduce",
        per_node=8,
        nodes=4,
        size_bytes=1e9,
        intra_alpha_s=1e-6,
        intra_bw=450e9,
        inter_alpha_s=1e-5,
        inter_bw=50e9,
    ),
    "group_collective_time": dict(
        op="all_gather",
        size=16,
        nodes=2,
        per_node=8,
        size_bytes=1e9,
        intra_alpha_s=1e-6,
        intra_bw=450e9,
        inter_alpha_s=1e-5,
        inter_bw=50e9,
    ),
    "ClusterSpec": dict(
        name="DGX H100",
        device="H100-SXM5-80GB",
        gpus_per_node=8,
        intra_link="NVLink4",
        inter_link="IB-NDR",
        intra_latency_s=2e-6,
        inter_latency_s=5e-6,
        compute_efficiency=0.6,
        source="data sheet",
    ),
    "replica_group_goodput": dict(groups=8, recovery=60.0, step=5.0, mtbf=3 * 3600.0),
    "critical_intensity": dict(device_flops=989e12, link_bytes_per_s=450e9),
    "tp_intensity": dict(hidden=8192, tp=8, bytes_per_value=2.0),
    "fsdp_intensity": dict(tokens_per_rank=8192, dp=64, param_bytes=2.0, grad_bytes=4.0),
    "lr_for_batch": dict(base_lr=1e-3, base_batch=256, batch=1024, optimizer="adam"),
    "large_batch_tradeoff": dict(batch=512, critical_batch=2048),
    "compute_optimal": dict(compute_flops=5.76e23, tokens_per_param=20.0),
    "collective_time": dict(
        op="all_gather",
        n=8,
        size_bytes=1e6,
        alpha_s=1e-5,
        bandwidth_bytes_per_s=50e9,
        algorithm="tree",
    ),
    "alg_bandwidth": dict(size_bytes=1e6, time_s=1e-3),
    "busbw_factor": dict(op="all_reduce", n=8),
    "bus_bandwidth": dict(op="all_reduce", n=8, algbw=10e9),
    "dp_bytes_per_rank": dict(param_bytes=1e9, n=8, strategy="zero3"),
    "tp_layer_comm": dict(
        micro_batch=1,
        seq_len=2048,
        hidden=4096,
        tp=4,
        bytes_per_elem=2,
        sequence_parallel=True,
        backward=True,
        recompute="full",
    ),
    "pp_bytes_per_microbatch": dict(micro_batch=1, seq_len=2048, hidden=4096, bytes_per_elem=2),
    "fit_alpha_beta": dict(sizes_bytes=[1e3, 1e6, 1e9], times_s=[1e-5, 2e-5, 2e-2]),
    "bubble": dict(schedule="zb-h1", p=4, m=8, v=1, t_f=1.0, t_b=2.0, t_w=1.0),
    "peak_in_flight": dict(schedule="interleaved", p=4, m=8, stage=1, v=2),
    "p2p_factor": dict(schedule="interleaved", v=2),
    "pipeline_facts": dict(schedule="zb-h2", p=4, m=8, v=1, t_f=1.0, t_b=2.0, t_w=1.0),
    "Event": dict(rank=0, kind="F", microbatch=0, chunk=0, start=0.0, end=1.0),
    "schedule": dict(name="zb-h1", p=2, m=4, v=1, t_f=1.0, t_b=2.0, t_w=1.0),
    "bubble_from_timeline": dict(events=EVENTS, window="global"),
    "amdahl_speedup": dict(serial_fraction=0.05, n=8),
    "amdahl_limit": dict(serial_fraction=0.05),
    "gustafson_speedup": dict(serial_fraction=0.05, n=8),
    "fit_serial_fraction": dict(ns=[1, 2, 4], times=[10.0, 5.5, 3.25]),
    "flops_per_token": dict(n_params=1e9, n_layers=24, seq_len=2048, hidden=2048),
    "mfu": dict(
        n_params=1e9,
        tokens_per_s=1e5,
        n_devices=8,
        peak_flops=312e12,
        n_layers=24,
        seq_len=2048,
        hidden=2048,
    ),
    "megatron_flops_per_step": dict(
        batch=8, seq_len=2048, n_layers=24, hidden=2304, vocab_size=51200
    ),
    "megatron_model_flops": dict(batch=8, seq_len=2048, n_layers=24, hidden=2304, vocab_size=51200),
    "megatron_hardware_flops": dict(
        batch=8, seq_len=2048, n_layers=24, hidden=2304, vocab_size=51200, recompute="selective"
    ),
    "flops_utilization": dict(
        batch=64,
        seq_len=2048,
        n_layers=96,
        hidden=12288,
        vocab_size=51200,
        n_gpus=64,
        step_time_s=13.75,
        peak_flops=312e12,
        recompute="selective",
    ),
    "hfu_over_mfu": dict(
        seq_len=2048, hidden=12288, n_layers=96, vocab_size=51200, recompute="full"
    ),
    "time_to_train": dict(
        n_params=175e9,
        n_tokens=300e9,
        n_gpus=1024,
        flops_per_gpu=140e12,
        recompute="full",
        mfu=None,
        peak_flops=312e12,
        price_per_gpu_hour=2.0,
    ),
    "NarayananEstimate": dict(
        model="GPT-3",
        n_params=175e9,
        n_tokens=300e9,
        n_gpus=1024,
        tflops_per_gpu=140.0,
        printed_days=34,
    ),
    "KorthikantiRun": dict(
        name="22B",
        n_heads=64,
        hidden=6144,
        n_layers=48,
        tp=8,
        pp=1,
        n_gpus=8,
        batch=4,
        full_recompute_s=1.42,
        present_work_s=1.10,
        mfu_pct=41.5,
        hfu_pct=43.7,
    ),
    "LlamaRun": dict(
        gpus=8192,
        tp=8,
        cp=1,
        pp=16,
        dp=64,
        seq_len=8192,
        batch_per_dp=32,
        tflops_per_gpu=430.0,
        mfu_pct=43,
    ),
    "DeepSeekBudget": dict(
        pretrain_gpu_hours=2664e3,
        context_gpu_hours=119e3,
        post_gpu_hours=5e3,
        printed_total_gpu_hours=2788e3,
        price_per_gpu_hour=2.0,
        printed_cost=5.576e6,
        tokens=14.8e12,
        gpu_hours_per_trillion=180e3,
        printed_days_per_trillion=3.7,
    ),
    "mfu_from_gpu_hours": dict(
        n_params=37e9, n_tokens=14.8e12, gpu_hours=2.664e6, peak_flops=989e12
    ),
    "Device": dict(
        name="gpu",
        peak_flops=1e14,
        memory_bytes=8e10,
        mem_bandwidth=2e12,
        source="datasheet",
        peak_fp8_flops=2e14,
    ),
    "FloatFormat": dict(name="e4m3", exp_bits=4, mant_bits=3, finite_only=True),
    "float_format": dict(name="e4m3"),
    "format_max": dict(name="e5m2"),
    "bytes_per_element": dict(name="bf16"),
    "current_scale": dict(amax=3.0, fmt_max=448.0, margin=1),
    "delayed_scale": dict(amax_history=[1.0, 3.0], fmt_max=448.0, margin=0),
    "Link": dict(name="link", bytes_per_s=5e10, note="note"),
    "Cluster": dict(
        gpus_per_node=8,
        n_nodes=2,
        gpu_mem_bytes=80e9,
        intra_node_bw=450e9,
        inter_node_bw=50e9,
        peak_flops=989e12,
        intra_node_latency_s=5e-6,
        inter_node_latency_s=1e-5,
        name="c",
    ),
    "dgx_a100": dict(n_nodes=2),
    "dgx_h100": dict(n_nodes=2),
    "evaluate": dict(
        cfg=SMALL,
        cluster=H100,
        global_batch=8,
        seq_len=128,
        dp=8,
        tp=1,
        pp=1,
        zero_stage=1,
        micro_batch=1,
        recompute="selective",
        recipe="mixed_adam",
        sequence_parallel=True,
        allow_tp_across_nodes=False,
        compute_efficiency=0.5,
    ),
    "plan": dict(
        cfg=SMALL,
        cluster=H100,
        global_batch=8,
        seq_len=128,
        micro_batches=(1, 2),
        recomputes=("none",),
        zero_stages=(0, 1),
        recipe="mixed_adam",
        allow_tp_across_nodes=False,
        compute_efficiency=0.5,
        top_k=3,
    ),
    "check_config": dict(
        cfg=SMALL,
        cluster=H100,
        global_batch=8,
        seq_len=128,
        dp=8,
        tp=1,
        pp=1,
        zero_stage=1,
        micro_batch=1,
        recompute="selective",
    ),
    "best_per_layout": dict(plans=PLANS),
    "layout_memory": dict(
        cfg=PRESETS["llama3.1-405b"],
        tp=8,
        pp=16,
        dp=64,
        seq_len=8192,
        micro_batch=1,
        cp=1,
        zero_stage=2,
        recompute="selective",
        flash_attention=True,
        recipe="mixed_adam",
        first_stage_layers=7,
    ),
    "deepseek_v3_params": dict(),
    "deepseek_v3_stage_memory": dict(stage=0),
    "gqa_attention_params": dict(hidden=4096, n_heads=32, n_kv_heads=8, head_dim=128),
    "mla_attention_params": dict(
        hidden=7168,
        n_heads=128,
        q_lora_rank=1536,
        kv_lora_rank=512,
        qk_nope_head_dim=128,
        qk_rope_head_dim=64,
        v_head_dim=128,
    ),
    "MoEConfig": dict(
        name="tiny-moe",
        vocab_size=100,
        hidden=64,
        n_layers=4,
        attention_params=1000,
        n_experts=8,
        top_k=2,
        expert_ffn=32,
        n_shared_experts=1,
        n_dense_layers=1,
        dense_ffn=128,
        gated=True,
        router_bias=False,
        tied_embeddings=False,
        source="s",
    ),
    "moe_param_count": dict(cfg=calc.MOE_PRESETS["mixtral-8x7b"]),
    "moe_memory_per_rank": dict(
        cfg=calc.MOE_PRESETS["mixtral-8x7b"], ep=4, dp=2, pp=2, zero_stage=1, recipe="mixed_adam"
    ),
    "all_to_all_bytes_per_layer": dict(
        tokens_per_rank=4096,
        hidden=4096,
        top_k=2,
        ep=8,
        dispatch_bytes=1.0,
        combine_bytes=2.0,
        padded_capacity_factor=1.25,
        gpus_per_node=8,
    ),
    "h800_cluster": dict(n_nodes=2),
    "evaluate_moe": dict(
        cfg=calc.MOE_PRESETS["mixtral-8x7b"],
        cluster=dgx_h100(2),
        global_batch=32,
        seq_len=4096,
        pp=2,
        dp=8,
        ep=4,
        zero_stage=1,
        micro_batch=1,
        recompute="full",
        recipe="mixed_adam",
        compute_efficiency=0.4,
        dispatch_bytes=1.0,
        combine_bytes=2.0,
        a2a_overlap=0.5,
    ),
    "plan_moe": dict(
        cfg=calc.MOE_PRESETS["mixtral-8x7b"],
        cluster=dgx_h100(2),
        global_batch=32,
        seq_len=4096,
        micro_batches=(1, 2),
        zero_stages=(0, 1),
        recomputes=("full",),
        recipe="mixed_adam",
        compute_efficiency=0.4,
        dispatch_bytes=1.0,
        combine_bytes=2.0,
        a2a_overlap=0.5,
        n_best=3,
    ),
    "expected_goodput": dict(tau=600.0, delta=10.0, restart=60.0, mtbf=3600.0),
    "goodput_first_order": dict(tau=600.0, delta=10.0, restart=60.0, mtbf=3600.0),
    "waste": dict(tau=600.0, delta=10.0, restart=60.0, mtbf=3600.0),
    "young_interval": dict(delta=10.0, mtbf=3600.0),
    "daly_interval": dict(delta=10.0, mtbf=3600.0),
    "simulate": dict(tau=600.0, delta=10.0, restart=60.0, mtbf=3600.0, horizon=7200.0, seed=0),
    "InterruptionRecord": dict(
        name="r", days=54.0, interruptions=466, unexpected=419, gpus=16384, source="s"
    ),
}
# Public methods (of result and record classes) that take arguments: "Class.method".
METHODS: dict[str, tuple] = {
    "SerialFit.predict": (
        calc.fit_serial_fraction([1, 2, 4], [10.0, 5.5, 3.25]).predict,
        dict(n=8),
    ),
    "KorthikantiRun.utilization": (KORTHIKANTI_TABLE4[1].utilization, dict(recompute="full")),
    "LlamaRun.days_for": (LLAMA3_405B_TABLE4[0].days_for, dict(n_tokens=15.6e12)),
    "LlamaRun.memory": (LLAMA3_405B_TABLE4[0].memory, dict(micro_batch=1)),
    "DeepSeekBudget.days": (DEEPSEEK_V3.days, dict(gpu_hours=2.664e6)),
    "DeepSeekBudget.implied_mfu": (DEEPSEEK_V3.implied_mfu, dict(peak_flops=989e12)),
    "ClusterSpec.cluster": (next(iter(calc.CLUSTER_SPECS.values())).cluster, dict(n_nodes=2)),
    "MoEParamCount.active": (
        calc.moe_param_count(calc.MOE_PRESETS["mixtral-8x7b"]).active,
        dict(count_embedding=False),
    ),
}
# Classes that only carry results computed by calc (published records are inputs: fuzzed).
RESULTS = {
    "BatchTradeoff",
    "ComputeOptimal",
    "ParamCount",
    "ModelStateMemory",
    "ActivationMemory",
    "CheckpointPlan",
    "CPBytes",
    "TPLayerComm",
    "AlphaBetaFit",
    "Bubble",
    "PipelineFacts",
    "Schedule",
    "TimelineBubble",
    "SerialFit",
    "Utilization",
    "TrainingTime",
    "Plan",
    "LayoutMemory",
    "DeepSeekV3Params",
    "MoEParamCount",
    "MoEMemory",
    "AllToAllVolume",
    "MoEPlan",
    "Waste",
    "Simulated",
}
FREE_TEXT = {
    ("KorthikantiRun", "name"),
    ("NarayananEstimate", "model"),
    ("MoEConfig", "name"),
    ("MoEConfig", "source"),
    ("ModelConfig", "name"),
    ("Recipe", "name"),
    ("Recipe", "source"),
    ("Device", "name"),
    ("Device", "source"),
    ("Link", "name"),
    ("Link", "note"),
    ("Cluster", "name"),
    ("FloatFormat", "name"),
    ("ClusterSpec", "name"),
    ("ClusterSpec", "source"),
    ("InterruptionRecord", "name"),
    ("InterruptionRecord", "source"),
}
NEGATIVE_OK = {("fmt_bytes", "n")}  # a difference of two memory figures may be negative
# Words a message may use for an argument (e.g. each element of ``ns`` is "each N in ns").
ALIASES = {
    "recipe_name": "recipe",
    "recomputes": "recompute",
    "zero_stages": "zero_stage",
    "micro_batches": "micro batch",
    "events": "event",
    "cfg": "cfg",
}


def _callables() -> dict[str, object]:
    out: dict[str, object] = {}
    for name in calc.__all__:
        obj = getattr(calc, name)
        if inspect.isfunction(obj) or (inspect.isclass(obj) and name not in RESULTS):
            out[name] = obj
        if inspect.isclass(obj):
            for meth, fn in vars(obj).items():
                if (
                    inspect.isfunction(fn)
                    and not meth.startswith("_")
                    and len(inspect.signature(fn).parameters) > 1
                ):
                    out[f"{name}.{meth}"] = fn
    return out


def test_every_public_name_of_every_calc_module_is_in_all():
    """Walk the package: a public function or class defined in a public calc module must be
    exported (and so fuzzed below); helpers are private or live in ``calc._check``."""
    escaped = []
    for info in pkgutil.iter_modules(calc.__path__):
        if info.name.startswith("_"):
            continue
        module = importlib.import_module(f"lab_utils.calc.{info.name}")
        for name, obj in vars(module).items():
            if (
                not name.startswith("_")
                and (inspect.isfunction(obj) or inspect.isclass(obj))
                and obj.__module__ == module.__name__
                and name not in calc.__all__
            ):
                escaped.append(f"{info.name}.{name}")
    assert not escaped, f"export these in calc.__all__ (or make them private): {escaped}"


def test_every_public_callable_has_a_valid_example():
    missing = set(_callables()) - set(VALID) - set(METHODS)
    assert not missing, f"add a valid example call to VALID/METHODS for: {sorted(missing)}"
    for name, kwargs in VALID.items():
        fn = getattr(calc, name)
        params = {
            k for k, p in inspect.signature(fn).parameters.items() if p.kind is not p.VAR_KEYWORD
        }
        assert set(kwargs) == params, f"{name}: give every parameter ({sorted(params)})"
        fn(**kwargs)  # the example itself is valid
    for name, (fn, kwargs) in METHODS.items():
        fn(**kwargs)


INT_BAD = st.one_of(
    st.booleans(),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=5),
    st.integers(max_value=-1),
    st.integers(min_value=10**101, max_value=10**400),
    st.sampled_from([[], [1], (2,), {}, {1: 2}, 1j, b"4", object()]),
)
FLOAT_BAD = st.one_of(
    st.booleans(),
    st.sampled_from([math.nan, math.inf, -math.inf, 1e101, -1e300]),
    st.floats(min_value=1e101, allow_infinity=False),
    st.text(max_size=5),
    st.integers(min_value=10**101, max_value=10**400),
    st.sampled_from([[], [1.0], {}, 1j, b"1.5", object()]),
)
NEGATIVE = st.floats(max_value=-1e-6, allow_infinity=False, allow_nan=False)
BOOL_BAD = st.sampled_from(["no", "yes", "", "True", 0, 1, 2, 0.0, 1.0, [], math.nan, b"1"])
STR_BAD = st.sampled_from([0, 1, True, 2.5, [], {}, b"ring", object()])
CHOICE_BAD = st.one_of(
    STR_BAD, st.sampled_from(["no-such-option", "", " none", "GPIPE", "ring\n", "mixed-adam"])
)
OBJECT_BAD = st.sampled_from([0, 1.5, True, "llama2-7b", [], {}, b"x", object()])
EVENT_BAD = st.sampled_from(
    [
        {"rank": 0, "start": math.nan, "end": 1.0},
        {"rank": 0, "start": 0.0, "end": math.inf},
        {"rank": True, "start": 0.0, "end": 1.0},
        {"rank": -1, "start": 0.0, "end": 1.0},
        {"rank": 0.0, "start": 0.0, "end": 1.0},
        {"rank": 0, "start": "0", "end": 1.0},
        {"rank": 0, "start": 2.0, "end": 1.0},
        {"rank": 0, "start": 0.0},
        None,
        5,
        "F0",
    ]
)


def _bad_values(owner: str, name: str, valid: object, annotation: str) -> st.SearchStrategy:
    """Values that are wrong for this argument whatever the others are."""
    optional = "None" in annotation
    if isinstance(valid, bool):
        return BOOL_BAD
    if isinstance(valid, int) or (valid is None and "int" in annotation):
        return INT_BAD if optional else st.one_of(INT_BAD, st.none())
    if isinstance(valid, float) or (valid is None and "float" in annotation):
        base = FLOAT_BAD if (owner, name) in NEGATIVE_OK else st.one_of(FLOAT_BAD, NEGATIVE)
        return base if optional else st.one_of(base, st.none())
    if isinstance(valid, str):
        return STR_BAD if (owner, name) in FREE_TEXT else st.one_of(CHOICE_BAD, st.none())
    if isinstance(valid, (list, tuple)):
        first = valid[0]
        elem = (
            EVENT_BAD
            if isinstance(first, dict)
            else OBJECT_BAD
            if not isinstance(first, (int, float, str))
            else _bad_values(owner, name + "[]", first, "")
        )
        scalars = st.sampled_from([None, 3, 2.5, True, "1,2", {}, b"ab"])
        return st.one_of(scalars, st.lists(elem, min_size=1, max_size=3))
    return st.one_of(OBJECT_BAD, st.none())


def _cases() -> list[tuple[str, str]]:
    cases = [(f, p) for f, kwargs in VALID.items() for p in kwargs]
    return cases + [(m, p) for m, (_, kwargs) in METHODS.items() for p in kwargs]


def _target(case: str):
    if case in METHODS:
        return METHODS[case]
    return getattr(calc, case), VALID[case]


@pytest.mark.parametrize("case, param", _cases(), ids=lambda x: x)
@settings(
    max_examples=12,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)
@given(data=st.data())
def test_bad_input_raises_value_error_naming_the_argument(case, param, data):
    fn, kwargs = _target(case)
    annotation = str(inspect.signature(fn).parameters[param].annotation)
    owner = case.split(".")[0]
    bad = data.draw(_bad_values(owner, param, kwargs[param], annotation), label=param)
    with pytest.raises(ValueError) as info:
        fn(**{**kwargs, param: bad})
    message = str(info.value)
    words = {param, param.rstrip("s"), ALIASES.get(param, param)}
    assert message.strip() and any(w in message for w in words), (param, bad, message)
    assert "Traceback" not in message


# --- the cases issue 21 lists, one by one ------------------------------------------------


@pytest.mark.parametrize(
    "call, match",
    [
        (lambda: calc.model_state_memory(1e9, zero_stage=True), "zero_stage must be a whole"),
        (lambda: calc.model_state_memory(1e9, zero_stage=2.0), r"write 2 \(an int\), not 2.0"),
        (lambda: calc.model_state_memory(1e9, offload_optimizer="no"), "counts as True"),
        (lambda: calc.activation_bytes_per_layer(2048, 1, 12288, 96, tp=7), "tp=7 does not divide"),
        (lambda: calc.activation_bytes_per_layer(2048, 1, 12288, 96, tp=128), "tp=128 exceeds"),
        (lambda: calc.activation_bytes_per_layer(2048, 1, 1000, 96), "n_heads=96 does not divide"),
        (
            lambda: calc.activation_memory(2048, 1, 12288, 96, 96, pp=4, stage=1.5),
            r"stage must be in 0\.\.3",
        ),
        (lambda: calc.in_flight_microbatches("1f1b", 4, 8, stage="0"), "stage must be in 0..3"),
        (lambda: calc.mfu(7e9, 1e12, 8, 989e12), "above 100%"),
        (lambda: calc.bubble_from_timeline([{"rank": 0, "start": math.nan, "end": 1.0}]), "NaN"),
        (lambda: calc.model_state_memory(10**400), "digit number"),
        (lambda: calc.ring_bytes_per_rank("all_reduce", 10**400, 1e6), "digit number"),
        (
            lambda: calc.time_to_train(7e9, 1e12, 8, mfu=0.8, peak_flops=989e12, recompute="full"),
            "HFU",
        ),
        (
            lambda: calc.time_to_train(7e9, 1e12, 8, flops_per_gpu=2e15, peak_flops=989e12),
            "exceeds peak_flops",
        ),
        (lambda: calc.time_to_train(7e9, 1e12, 8), "exactly one throughput"),
        (lambda: calc.flops_utilization(64, 2048, 96, 12288, 51200, 64, 1.0, 312e12), "above 100%"),
        (lambda: calc.bubble("1f1b", 4, 8, v=2), "only applies to the 'interleaved'"),
        (lambda: calc.bubble("1f1b", 4, 8, t_w=1.0), "t_w only applies"),
        (lambda: calc.bubble("zb-v", 4, 8, t_b=3.0), "equal F, B and W"),
        (lambda: calc.checkpoint_segments(8, 9), "n_segments=9 exceeds n_layers=8"),
        (lambda: calc.layout_memory(PRESETS["llama2-70b"], 16, 4, 8, 4096), "key/value heads"),
        (lambda: calc.best_per_layout([]) or calc.fit_serial_fraction([], []), "at least 2"),
        (lambda: calc.schedule("1f1b", 300, 300), "too many to simulate"),
        (lambda: calc.plan(SMALL, Cluster(8, 2**18, 80e9, 1e11, 1e10, 1e15), 8, 128), "at most"),
        # issue 37: the four inputs that were accepted silently, and their unit cousins
        (
            lambda: calc.time_to_train(175e9, 300e9, 1024, flops_per_gpu=140, peak_flops=312e12),
            "looks like TFLOP/s",
        ),
        (
            lambda: calc.LlamaRun(8192, 8, 1, 16, 64, 8192, 32, math.nan, 43),
            "tflops_per_gpu must be a positive number, got NaN",
        ),
        (
            lambda: calc.LlamaRun(8192, 8, 1, 16, 32, 8192, 32, 430, 43),
            r"tp\*cp\*pp\*dp = 8\*1\*16\*32 = 4096 but LlamaRun.gpus=8192",
        ),
        (lambda: calc.DeepSeekBudget(price_per_gpu_hour=-2), "price_per_gpu_hour must be"),
        (lambda: calc.LlamaRun(8192, 8, 1, 16, 64, 8192, 32, 430e12, 43), "looks like FLOP/s"),
        (lambda: calc.LlamaRun(8192, 8, 1, 16, 64, 8192, 32, 430, 80), "disagrees"),
        (lambda: calc.LlamaRun(8192, 16, 1, 8, 64, 8192, 32, 430, 43), "key/value heads"),
        (lambda: calc.mfu(7e9, 1e5, 8, 312), "looks like TFLOP/s"),
        (lambda: calc.mfu_from_gpu_hours(37e9, 14.8e12, 2.664e6, 989), "looks like TFLOP/s"),
        (lambda: calc.collective_time("all_reduce", 8, 1e6, 5e-6, 50), "looks like GB/s"),
        (
            lambda: calc.KorthikantiRun("x", 96, 12288, 96, 8, 8, 96, 64, 18.1, 13.8, 51.4, 52.8),
            "tp\\*pp=64 does not divide n_gpus=96",
        ),
        (lambda: calc.NarayananEstimate("x", 175e9, 300e9, 1024, 140e12, 34), "looks like FLOP/s"),
        (lambda: calc.DeepSeekBudget(printed_total_gpu_hours=1e6), "not the sum of its parts"),
        (lambda: calc.zero_stage(4), "zero_stage must be 0, 1, 2 or 3"),
        (lambda: calc.max_params_that_fit(80), "looks like GB"),
        (lambda: calc.gqa_attention_params(4096, 32, 5), "n_kv_heads=5 does not divide n_heads"),
        (
            lambda: calc.moe_memory_per_rank(calc.MOE_PRESETS["mixtral-8x7b"], 4, 2, 64),
            "pp=64 exceeds n_layers=32",
        ),
        (
            lambda: calc.tp_layer_comm(1, 2050, 4096, 4, sequence_parallel=True),
            "tp=4 does not divide seq_len=2050",
        ),
        (
            lambda: calc.activation_bytes_per_layer(2050, 1, 4096, 32, 4, sequence_parallel=True),
            "sequence parallelism splits",
        ),
        (
            lambda: calc.plan_moe(
                calc.MOE_PRESETS["mixtral-8x7b"], dgx_h100(2), 32, 4096, zero_stages=(2,)
            ),
            "zero_stage must be 0 or 1 here",
        ),
    ],
)
def test_issue_21_cases(call, match):
    with pytest.raises(ValueError, match=match):
        call()


def test_planner_checks_grouped_query_attention():
    # Llama-2-70B: 64 query heads, 8 K/V heads. TP=8 splits them; TP=16 must replicate each
    # K/V head on 2 ranks (Megatron-LM refuses: n_kv_heads % tp == 0), which is flagged.
    llama70, h100 = PRESETS["llama2-70b"], dgx_h100(32)
    ok = calc.check_config(llama70, h100, 1024, 4096, dp=8, tp=8, pp=4)
    assert not any("key/value" in w for w in ok.warnings + ok.problems)
    rep = calc.check_config(
        llama70, h100, 1024, 4096, dp=8, tp=16, pp=2, allow_tp_across_nodes=True
    )
    assert any("replicated on 2 ranks" in w for w in rep.warnings)
    odd = ModelConfig(vocab_size=100, hidden=96 * 8, n_layers=4, n_heads=96, n_kv_heads=8)
    bad = calc.check_config(odd, dgx_h100(1), 8, 128, dp=1, tp=6, pp=1, zero_stage=0)
    assert not bad.feasible and any("cannot be split evenly" in p for p in bad.problems)


def test_objects_validate_their_fields():
    with pytest.raises(ValueError, match="ModelConfig.bias must be True or False"):
        ModelConfig(vocab_size=100, hidden=64, n_layers=2, n_heads=4, bias="no")
    with pytest.raises(ValueError, match="Recipe.weights must be a number >= 0"):
        Recipe("r", -2, 2, 4, 8, "s")
    with pytest.raises(ValueError, match="Event.end=0.5 is before Event.start=1.0"):
        Event(0, "F", 0, 0, 1.0, 0.5)


def test_parse_number_feeds_the_same_checks():
    # What a widget's number box does with the learner's text, then the calculators' check.
    from lab_utils.calc._check import parse_number, pos_int

    assert [parse_number(t) for t in ("4", " 8 ", "2.5", "1e9", "abc", "")] == [
        4,
        8,
        2.5,
        1e9,
        "abc",
        "",
    ]
    with pytest.raises(ValueError, match="got 2.5"):
        pos_int("dp", parse_number("2.5"))
    with pytest.raises(ValueError, match="a number is needed, not text"):
        pos_int("dp", parse_number("two"))
