"""An expert-parallel planner: rank PP x DP layouts of a Mixture-of-Experts model, with EP
inside DP (lab 09). The dense planner (``calc.planner``) knows nothing of experts; this one
does, and like it every term is a first-order formula from the other calculators.

Layout: world = pp x dp and NO tensor parallelism (tp = 1), as DeepSeek-V3 was trained
(DeepSeek-AI 2024, Sec. 3.2: PP16 x EP64 x ZeRO-1 DP on 2048 H800s). The dp ranks of a stage
form an ep x (dp / ep) grid: ep consecutive ranks split the routed experts (ep | n_experts,
ep | dp), and each expert shard has r = dp / ep replicas. Rank order: ep innermost (one node
when ep <= GPUs per node), then the replicas, then pp.

    memory  = model state (``moe_memory_per_rank(cfg, ep, r, pp)``: routed / (ep pp) and
              the rest / pp per rank, an average stage; ZeRO as it shards them)
              + activations of the fullest stage (``_activations``)
    compute = c x active x tokens / (world x peak x compute_efficiency), active without the
              embedding lookup, c = 6 (8 with full recompute: one more forward)
    all2all = per MoE layer and micro-batch: dispatch + combine, forward and backward (and
              the recomputed forward), pairwise ``collective_time`` over ep ranks
    dp sync = all-reduce of the dense grads over dp + of the experts' grads over r (ZeRO-1:
              reduce-scatter + all-gather, the same bytes), 16-bit gradients
    step    = (compute + exposed all2all + PP sends) x (1 + bubble) + dp sync, exposed =
              all2all - min(a2a_overlap x all2all, compute), bubble (p-1)/m (1F1B)

By default NO overlap of communication and compute (pessimistic: DeepSeek-V3's DualPipe
hides nearly all its all-to-alls; ``a2a_overlap=1`` models that); uniform routing (no
node-limited routing); expert GEMMs as efficient at any ep (fewer tokens per expert at
small ep would make them slower in practice).
"""

from __future__ import annotations

from dataclasses import dataclass
from math import ceil

from lab_utils.calc._check import (
    choice,
    instance,
    nonneg_int,
    number,
    pos_int,
    pos_num,
    sequence,
)
from lab_utils.calc._check import (
    zero_stage as _zero_stage,
)
from lab_utils.calc._layout_rules import (
    Verdict,
    batch_problem,
    bubble_warning,
    check_search,
    divisors,
    link,
    memory_messages,
    ranked,
)
from lab_utils.calc.activations import activation_bytes_per_layer
from lab_utils.calc.comm import collective_time, pp_bytes_per_microbatch
from lab_utils.calc.hardware import DEVICES, Cluster
from lab_utils.calc.memory import Recipe, resolve_recipe
from lab_utils.calc.moe import (
    AllToAllVolume,
    MoEConfig,
    MoEMemory,
    all_to_all_bytes_per_layer,
    moe_memory_per_rank,
    moe_param_count,
)
from lab_utils.calc.pipeline import bubble
from lab_utils.calc.units import fmt_bytes

MOE_RECOMPUTE = ("selective", "full")


@dataclass(frozen=True)
class MoEPlan(Verdict):
    """One evaluated MoE layout. Times in seconds per optimizer step; memory in bytes per
    GPU (model state of an average stage + activations of the fullest one). ``problems``
    make it infeasible; ``warnings`` do not."""

    pp: int
    dp: int
    ep: int
    zero_stage: int
    micro_batch: int
    recompute: str
    n_micro: int
    model_state: MoEMemory | None  # None when ep does not divide the experts
    activation_bytes: float
    memory_bytes: float
    gpu_mem_bytes: float
    compute_s: float
    a2a_s: float  # all-to-alls of every MoE layer of the fullest stage
    a2a_per_layer: AllToAllVolume  # bytes one rank sends per MoE layer per micro-batch
    pp_comm_s: float
    dp_comm_s: float
    bubble: float  # idle / ideal compute, (p-1)/m
    step_s: float
    problems: tuple[str, ...] = ()
    warnings: tuple[str, ...] = ()

    @property
    def layout(self) -> tuple[int, int, int]:
        return (self.pp, self.dp, self.ep)

    @property
    def expert_replicas(self) -> int:
        """How many GPUs of a stage hold the same experts (dp / ep)."""
        return self.dp // self.ep

    def summary(self) -> str:
        return (
            f"PP={self.pp} DP={self.dp} (EP={self.ep} x {self.expert_replicas} replicas) "
            f"TP=1 ZeRO-{self.zero_stage} mb={self.micro_batch} recompute={self.recompute}"
        )

    def details(self) -> list[str]:
        """Memory and time, term by term (``explain`` prints them)."""
        mem = fmt_bytes(self.memory_bytes) if self.model_state else "? (experts do not split)"
        return [
            f"  memory/GPU {mem} of {fmt_bytes(self.gpu_mem_bytes)} (activations "
            f"{fmt_bytes(self.activation_bytes)})",
            f"  step ~{self.step_s:.2f} s: compute {self.compute_s:.2f}, all-to-all "
            f"{self.a2a_s:.2f} (before overlap), PP {self.pp_comm_s:.3f}, bubble "
            f"{self.bubble:.1%}, DP {self.dp_comm_s:.2f}; {self.n_micro} micro-batches",
        ]


def h800_cluster(n_nodes: int = 256) -> Cluster:
    """DeepSeek-V3's cluster: 8 H800 per node (DeepSeek-AI 2024, Sec. 3.1), NVLink 160 GB/s
    and InfiniBand 50 GB/s per GPU as Sec. 3.2.2 states them (read here as per direction);
    256 nodes = 2048 GPUs. Lab 09."""
    d = DEVICES["H800-SXM-80GB"]
    n = pos_int("n_nodes", n_nodes)
    return Cluster(8, n, d.memory_bytes, 160e9, 50e9, d.peak_flops, name=f"{n}x 8 H800")


def _zero_0_or_1(value: object) -> int:
    """A ZeRO stage this planner models: 0 or 1 (with PP, ZeRO-2/3 re-sync every micro-batch)."""
    stage = _zero_stage(value)
    if stage > 1:
        raise ValueError(
            f"zero_stage must be 0 or 1 here (ZeRO-1 or plain DP), got {stage}: "
            "with PP, ZeRO-2/3 would re-sync gradients every micro-batch"
        )
    return stage


def _activations(
    cfg: MoEConfig,
    seq_len: int,
    micro_batch: int,
    recompute: str,
    layers: int,
    moe_layers: int,
    in_flight: int,
) -> float:
    """Activation bytes on the fullest stage, a rough 16-bit estimate.

    Per layer and micro-batch, with ``selective``: Korthikanti et al. 2022's 34 s b h (no
    attention scores: flash attention), standing in for attention, norms and shared experts,
    + the routed rows of an MoE layer, s b k (2h + n f) x 2 bytes (the dispatched input and
    the expert output, h each, and the expert's n hidden tensors: 3 for SwiGLU, 2 if not).
    With ``full``, 2 s b h (the layer input) and one layer's working set while it recomputes.
    ``in_flight`` micro-batches are held (1F1B: min(p, m) on the first stage). DeepSeek-V3
    sits in between: it caches FP8 activations and recomputes norms and MLA up-projections.
    """
    s, b, h = seq_len, micro_batch, cfg.hidden
    base = activation_bytes_per_layer(s, b, h, 1, recompute="none", flash_attention=True)
    rows = s * b * cfg.top_k * (2 * h + (3 if cfg.gated else 2) * cfg.expert_ffn) * 2
    layer = base + rows * (moe_layers > 0)
    if recompute == "full":
        kept = activation_bytes_per_layer(s, b, h, 1, recompute="full")
        return kept * layers * in_flight + layer
    return (base * layers + rows * moe_layers) * in_flight


def evaluate_moe(
    cfg: MoEConfig,
    cluster: Cluster,
    global_batch: int,
    seq_len: int,
    pp: int,
    dp: int,
    ep: int,
    zero_stage: int = 1,
    micro_batch: int = 1,
    recompute: str = "full",
    recipe: str | Recipe = "mixed_adam",
    compute_efficiency: float = 0.4,
    dispatch_bytes: float = 2,
    combine_bytes: float = 2,
    a2a_overlap: float = 0.0,
) -> MoEPlan:
    """Memory, time and feasibility of ONE MoE layout, by the module docstring's formulas.

    ``compute_efficiency`` is the assumed MFU of the compute alone (0.4 by default; DeepSeek's
    budget implies ~0.34 of the bf16 peak for the whole step, ``DEEPSEEK_V3.implied_mfu()``).
    ``dispatch_bytes`` / ``combine_bytes``: bytes per value sent (DeepSeek-V3: FP8 dispatch, 1,
    BF16 combine, 2; Sec. 3.3). ``recompute`` is "full" by default: without it our 16-bit
    activation estimate does not fit DeepSeek-V3's layout in 80 GB. The all-to-all crosses
    the inter-node link for the share of a rank's ep peers outside its node
    (``AllToAllVolume.inter_node_fraction``), NVLink for the rest, one after the other: all
    NVLink when ep <= GPUs per node. ``a2a_overlap``: the fraction of the all-to-all time
    hidden under compute (0: none; 1: DualPipe). Sources: ZeRO sync (Rajbhandari et al.
    2020, Sec. 7), 1F1B bubble (Narayanan et al. 2021, Sec. 2.2). Lab 09.
    """
    cfg = instance("cfg", cfg, MoEConfig, "MOE_PRESETS['deepseek-v3']")
    cluster = instance("cluster", cluster, Cluster, "calc.h800_cluster(256)")
    global_batch, seq_len = pos_int("global_batch", global_batch), pos_int("seq_len", seq_len)
    pp, dp, ep = pos_int("pp", pp), pos_int("dp", dp), pos_int("ep", ep)
    zero_stage = _zero_0_or_1(zero_stage)
    micro_batch = pos_int("micro_batch", micro_batch)
    recompute = choice("recompute", recompute, MOE_RECOMPUTE)
    recipe = resolve_recipe(recipe)
    compute_efficiency = number(
        "compute_efficiency",
        compute_efficiency,
        0,
        1,
        lo_open=True,
        expected="a fraction in (0, 1] of the peak FLOP/s",
    )
    dispatch_bytes = pos_num("dispatch_bytes", dispatch_bytes)
    combine_bytes = pos_num("combine_bytes", combine_bytes)
    a2a_overlap = number("a2a_overlap", a2a_overlap, 0, 1, expected="a fraction in [0, 1]")
    problems, warnings = [], []
    world, gpn = cluster.world, cluster.gpus_per_node
    if pp * dp != world:
        problems.append(
            f"pp*dp = {pp}*{dp} = {pp * dp} but the cluster has {world} GPUs "
            "(tp = 1 here); the degrees must multiply to the world size"
        )
    if dp % ep:
        problems.append(
            f"EP={ep} does not divide DP={dp}: the experts are split over ep ranks "
            "INSIDE the data-parallel group, so ep must divide dp"
        )
    if cfg.n_experts % ep:
        problems.append(
            f"EP={ep} does not divide the {cfg.n_experts} routed experts: each EP "
            f"rank must hold the same number of whole experts"
        )
    if pp > cfg.n_layers:
        problems.append(f"PP={pp} exceeds the {cfg.n_layers} layers: some stage would be empty")
    problems += batch_problem(global_batch, dp, micro_batch)
    n_micro = max(1, global_batch // (dp * micro_batch))
    layers = ceil(cfg.n_layers / pp)  # the fullest stage
    moe_layers = min(layers, ceil(cfg.n_moe_layers / pp))

    # --- memory: model state as moe_memory_per_rank splits it, plus activations
    divisible = not (dp % ep or cfg.n_experts % ep)
    state = moe_memory_per_rank(cfg, ep, dp // ep, pp, zero_stage, recipe) if divisible else None
    act = _activations(cfg, seq_len, micro_batch, recompute, layers, moe_layers, min(pp, n_micro))
    mem = (state.total if state else float("inf")) + act  # inf: no even split
    if state:
        mem_problems, mem_warnings = memory_messages(mem, cluster.gpu_mem_bytes)
        problems += mem_problems
        warnings += mem_warnings

    # --- time
    count = moe_param_count(cfg)
    tokens = global_batch * seq_len
    flops = (8 if recompute == "full" else 6) * count.active(count_embedding=False) * tokens
    compute = flops / (world * cluster.peak_flops * compute_efficiency)
    vol = all_to_all_bytes_per_layer(
        seq_len * micro_batch,
        cfg.hidden,
        cfg.top_k,
        ep,
        dispatch_bytes,
        combine_bytes,
        gpus_per_node=gpn,
    )
    one = sum(
        _a2a_time(cluster, ep, vol.rows_per_rank * cfg.hidden * nbytes, vol.inter_node_fraction)
        for nbytes in (dispatch_bytes, combine_bytes)
    )
    passes = 3 if recompute == "full" else 2  # forward, (recomputed forward,) backward
    a2a = n_micro * moe_layers * passes * one
    if ep > gpn:
        warnings.append(
            f"EP={ep} spans {ceil(ep / gpn)} nodes: {vol.inter_node_fraction:.0%} of "
            "each all-to-all crosses the inter-node network, every MoE layer"
        )
    bw, lat = link(cluster, cluster.n_nodes > 1)  # some stage boundary crosses nodes
    pp_s = 0.0
    if pp > 1:
        msg = pp_bytes_per_microbatch(micro_batch, seq_len, cfg.hidden)
        pp_s = n_micro * 2 * collective_time("send_recv", 2, msg, lat, bw)
    bw, lat = link(cluster, dp > gpn)
    dense_grads = 2 * count.non_expert / pp
    expert_grads = 2 * count.routed_experts / (ep * pp)
    dp_s = collective_time("all_reduce", dp, dense_grads, lat, bw) + collective_time(
        "all_reduce", max(1, dp // ep), expert_grads, lat, bw
    )
    bub = bubble("1f1b", pp, n_micro).of_ideal
    warnings += bubble_warning(pp, n_micro, bub)
    exposed = a2a - min(a2a_overlap * a2a, compute)  # only compute can hide it
    step = (compute + exposed + pp_s) * (1 + bub) + dp_s
    return MoEPlan(
        pp,
        dp,
        ep,
        zero_stage,
        micro_batch,
        recompute,
        n_micro,
        state,
        act,
        mem,
        cluster.gpu_mem_bytes,
        compute,
        a2a,
        vol,
        pp_s,
        dp_s,
        bub,
        step,
        tuple(problems),
        tuple(warnings),
    )


def _a2a_time(cluster: Cluster, ep: int, size_bytes: float, inter_fraction: float) -> float:
    """One pairwise all-to-all of a ``size_bytes`` send buffer over ep ranks
    (``collective_time``): the share of the peers outside the node at the network's speed,
    the rest at NVLink's, one after the other (1 / bw = f / inter + (1 - f) / intra)."""
    f = inter_fraction
    inverse_bw = f / cluster.inter_node_bw + (1 - f) / cluster.intra_node_bw
    bw, lat = 1 / inverse_bw, link(cluster, f > 0)[1]
    return collective_time("all_to_all", ep, size_bytes, lat, bw)


def plan_moe(
    cfg: MoEConfig,
    cluster: Cluster,
    global_batch: int,
    seq_len: int,
    micro_batches: tuple[int, ...] = (1, 2, 4),
    zero_stages: tuple[int, ...] = (0, 1),
    recomputes: tuple[str, ...] = MOE_RECOMPUTE,
    recipe: str | Recipe = "mixed_adam",
    compute_efficiency: float = 0.4,
    dispatch_bytes: float = 2,
    combine_bytes: float = 2,
    a2a_overlap: float = 0.0,
    n_best: int = 0,
) -> list[MoEPlan]:
    """Enumerate (pp, ep, zero_stage, micro_batch, recompute) with pp | world, dp = world / pp,
    ep | dp and ep | n_experts, pp <= n_layers, dp * micro_batch | global_batch; evaluate
    each with ``evaluate_moe`` (tp = 1: no tensor parallelism, as DeepSeek-V3); return the
    feasible plans fastest first, then the infeasible ones (least memory first) with their
    reasons. ``n_best > 0`` keeps only that many. Lab 09.
    """
    cfg = instance("cfg", cfg, MoEConfig, "MOE_PRESETS['deepseek-v3']")
    cluster = instance("cluster", cluster, Cluster, "calc.h800_cluster(256)")
    global_batch, seq_len = pos_int("global_batch", global_batch), pos_int("seq_len", seq_len)
    n_best = nonneg_int("n_best", n_best)
    check_search("plan_moe", cluster, micro_batches)
    sequence("zero_stages", zero_stages, lambda _, z: _zero_0_or_1(z), min_len=1)
    sequence(
        "recomputes", recomputes, lambda _, rc: choice("recompute", rc, MOE_RECOMPUTE), min_len=1
    )
    out = []
    for pp in (p for p in divisors(cluster.world) if p <= cfg.n_layers):
        dp = cluster.world // pp
        for ep in (e for e in divisors(dp) if cfg.n_experts % e == 0):
            for zero in (z for z in zero_stages if dp > 1 or z == 0):
                for mb in (m for m in micro_batches if global_batch % (dp * m) == 0):
                    out += [
                        evaluate_moe(
                            cfg,
                            cluster,
                            global_batch,
                            seq_len,
                            pp,
                            dp,
                            ep,
                            zero,
                            mb,
                            rc,
                            recipe,
                            compute_efficiency,
                            dispatch_bytes,
                            combine_bytes,
                            a2a_overlap,
                        )
                        for rc in recomputes
                    ]
    return ranked(out, n_best, global_batch, cluster.world)
