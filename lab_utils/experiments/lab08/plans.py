"""Lab 08's planning side: tables over lab_utils.calc's planner, published layouts, source claims.

Pure calculation (no ranks). Each function returns rows for ``viz.show_table`` or small
dataclasses; the notebook prints them and asserts what the text says.

    plan_rows(plans, n)                 the planner's candidates, one row each
    axis_bytes(cfg, cluster, ...)       bytes one GPU sends per step on each mesh axis
    time_split_rows(plans)              where each plan's step time goes, and its memory
    tp_pp_sweep(cfg, cluster, ...)      move TP <-> PP at a fixed DP: verdicts, GQA warnings
    recipe_ladder(names, cluster, ...)  DDP / FSDP / + TP / + PP: the fastest plan of each rung
    candidates(cfg, cluster, ...)       a few proposed layouts graded by check_config (512 GPUs)
    published_layouts()                 Llama 3 405B (Meta 2024, Table 4), DeepSeek-V3 (2024)
    source_claims()                     numbers about 3D layouts that circulate, checked
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

from lab_utils import calc
from lab_utils.calc import GB

RUNGS = ("DDP", "FSDP/ZeRO", "+ TP", "+ PP (+ TP)")


def plan_rows(plans: Sequence[Any], n: int = 6) -> list[dict]:
    """The first n plans: layout, options, memory per GPU and the step-time breakdown."""
    return [
        {
            "dp": p.dp,
            "tp": p.tp,
            "pp": p.pp,
            "ZeRO": p.zero_stage,
            "mb": p.micro_batch,
            "recompute": p.recompute,
            "mem/GPU (GB)": p.memory_bytes / GB,
            "compute (s)": p.compute_s,
            "TP comm (s)": p.tp_comm_s,
            "PP comm (s)": p.pp_comm_s,
            "DP sync (s)": p.dp_comm_s,
            "bubble": f"{p.bubble:.1%}",
            "step (s)": p.step_s,
            "MFU": f"{p.mfu:.0%}",
        }
        for p in plans[:n]
    ]


@dataclass
class AxisBytes:
    axis: str
    bytes: float  # one GPU, one optimizer step
    seconds: float  # the planner's time for it (no overlap)
    link: str


def axis_bytes(
    cfg: Any,
    cluster: Any,
    global_batch: int,
    seq_len: int,
    dp: int,
    tp: int,
    pp: int,
    zero_stage: int = 1,
    recompute: str = "selective",
) -> list[AxisBytes]:
    """Bytes one GPU sends per step on each axis, 16-bit messages, one sequence per
    micro-batch: tp = m x L/p layers x the SP layer traffic (calc.tp_layer_comm); pp = m x 2
    transfers of b*s*h / t (Megatron's scatter/gather); dp = this GPU's 16-bit grads (ZeRO-1:
    reduce-scatter + all-gather = one all-reduce, calc.dp_bytes_per_rank)."""
    p = calc.check_config(
        cfg,
        cluster,
        global_batch,
        seq_len,
        dp=dp,
        tp=tp,
        pp=pp,
        zero_stage=zero_stage,
        micro_batch=1,
        recompute=recompute,
    )
    layers = cfg.n_layers // pp
    tp_b = (
        p.n_micro
        * layers
        * calc.tp_layer_comm(
            1, seq_len, cfg.hidden, tp, bytes_per_elem=2, sequence_parallel=True
        ).bytes_per_rank
    )
    pp_b = p.n_micro * 2 * calc.pp_bytes_per_microbatch(1, seq_len, cfg.hidden, 2) / tp
    dp_b = calc.dp_bytes_per_rank(2 * calc.param_count(cfg).total / (tp * pp), dp, "zero1")
    return [
        AxisBytes("tp", tp_b, p.tp_comm_s, "NVLink, inside the node"),
        AxisBytes("pp", pp_b, p.pp_comm_s, "InfiniBand, neighbour stages"),
        AxisBytes("dp", dp_b, p.dp_comm_s, "InfiniBand, once per step"),
    ]


@dataclass
class SweepRow:
    strict: Any  # the plan as the planner judges it
    anyway: Any  # the same, evaluated even if TP crosses nodes (to see its price)


def tp_pp_sweep(
    cfg: Any,
    cluster: Any,
    global_batch: int,
    seq_len: int,
    dp: int,
    tp_pp: Sequence[tuple[int, int]],
) -> list[SweepRow]:
    """The same DP, TP and PP traded against each other (ZeRO-1, selective recomputation)."""
    out = []
    for tp, pp in tp_pp:
        kw = dict(dp=dp, tp=tp, pp=pp, zero_stage=1, micro_batch=1, recompute="selective")
        out.append(
            SweepRow(
                calc.check_config(cfg, cluster, global_batch, seq_len, **kw),
                calc.check_config(
                    cfg, cluster, global_batch, seq_len, **kw, allow_tp_across_nodes=True
                ),
            )
        )
    return out


def sweep_rows(rows: Sequence[SweepRow]) -> list[dict]:
    def verdict(p: Any) -> str:
        head = "FLAGGED: " + p.problems[0] if p.problems else "OK"
        return "; ".join([head] + [f"warning: {w}" for w in p.warnings])

    return [
        {
            "dp": r.anyway.dp,
            "tp": r.anyway.tp,
            "pp": r.anyway.pp,
            "TP comm (s)": r.anyway.tp_comm_s,
            "PP comm (s)": r.anyway.pp_comm_s,
            "DP sync (s)": r.anyway.dp_comm_s,
            "bubble": f"{r.anyway.bubble:.1%}",
            "mem/GPU (GB)": r.anyway.memory_bytes / GB,
            "step (s)": r.anyway.step_s,
            "verdict": verdict(r.strict),
        }
        for r in rows
    ]


def rung(p: Any) -> int:
    """The simplest technique a plan needs: 0 DDP, 1 FSDP/ZeRO, 2 + TP, 3 + PP."""
    if p.tp == 1 and p.pp == 1:
        return 0 if p.zero_stage == 0 else 1
    return 2 if p.pp == 1 else 3


@dataclass
class Ladder:
    name: str
    params: float
    fastest: dict[int, Any]  # rung -> its fastest feasible plan
    least_memory: dict[int, float]  # rung -> the least memory any of its plans needs
    top: Any  # the planner's fastest plan overall

    def slowdown(self, k: int) -> float:
        return self.fastest[k].step_s / self.top.step_s


def recipe_ladder(
    names: Sequence[str], cluster: Any, global_batch: int, seq_len: int
) -> list[Ladder]:
    out = []
    for name in names:
        cfg = calc.PRESETS[name]
        plans = calc.plan(cfg, cluster, global_batch, seq_len, recomputes=("none", "selective"))
        fastest, least = {}, {}
        for p in plans:
            k = rung(p)
            if p.feasible and k not in fastest:
                fastest[k] = p
            least[k] = min(least.get(k, float("inf")), p.memory_bytes)
        out.append(Ladder(name, calc.param_count(cfg).total, fastest, least, plans[0]))
    return out


def ladder_rows(ladder: Sequence[Ladder]) -> list[dict]:
    rows = []
    for lad in ladder:
        row = {"model": lad.name, "params (B)": lad.params / 1e9}
        for k, name in enumerate(RUNGS):
            row[name] = (
                f"{lad.fastest[k].step_s:.2f} s"
                if k in lad.fastest
                else f"needs {lad.least_memory[k] / GB:.0f} GB"
            )
        row["simplest that fits"] = RUNGS[min(lad.fastest)]
        row["planner's fastest"] = lad.top.summary()
        rows.append(row)
    return rows


def candidates(
    cfg: Any, cluster: Any, global_batch: int, seq_len: int, layouts: Sequence[tuple[int, int, int]]
) -> list[dict]:
    """Each proposed (dp, tp, pp) with its best options (ZeRO stage, micro-batch, recompute)
    from the planner, or why none fits."""
    plans = calc.plan(cfg, cluster, global_batch, seq_len)
    top = plans[0]
    rows = []
    for layout in layouts:
        mine = [p for p in plans if p.layout == layout]
        ok = [p for p in mine if p.feasible]
        if ok:
            p = ok[0]
            rows.append(
                {
                    "layout": f"DP={p.dp} TP={p.tp} PP={p.pp}",
                    "best options": f"ZeRO-{p.zero_stage} mb={p.micro_batch} {p.recompute}",
                    "mem/GPU (GB)": p.memory_bytes / GB,
                    "step (s)": p.step_s,
                    "vs planner's best": p.step_s / top.step_s,
                }
            )
        else:
            least = min(mine, key=lambda p: p.memory_bytes)
            rows.append(
                {
                    "layout": "DP={} TP={} PP={}".format(*layout),
                    "best options": "none fits: " + least.problems[0],
                    "mem/GPU (GB)": least.memory_bytes / GB,
                }
            )
    return rows


def published_layouts() -> list[dict]:
    """Llama 3 405B's three pre-training configurations (Meta 2024, Table 4) and DeepSeek-V3's
    (DeepSeek-AI 2024), with what our calculators say one GPU holds and what the published
    throughput implies."""
    rows = []
    for r in calc.LLAMA3_405B_TABLE4:
        m = r.memory()
        rows.append(
            {
                "run": f"Llama 3 405B, seq {r.seq_len:,}",
                "GPUs": r.gpus,
                "TP x CP x PP x DP": f"{r.tp} x {r.cp} x {r.pp} x {r.dp}",
                "model state/GPU (GB)": m.model_state.total / GB,
                "activations/GPU (GB)": m.activations / GB,
                "total/GPU (GB)": m.total / GB,
                "MFU (printed)": f"{r.mfu_pct}%",
                "MFU (TFLOP/s / 989)": f"{r.implied_mfu:.1%}",
                "tokens/s/GPU": r.tokens_per_s_per_gpu(),
                "tokens (T)": 15.6,
                "days at this rate": r.days_for(),
            }
        )
    d = calc.DEEPSEEK_V3
    heaviest = max((calc.deepseek_v3_stage_memory(s) for s in range(16)), key=sum)
    rows.append(
        {
            "run": "DeepSeek-V3 671B (MoE)",
            "GPUs": 2048,
            "TP x CP x PP x DP": "1 x 1 x 16 x 128 (EP 64)",
            "model state/GPU (GB)": sum(heaviest) / GB,
            "activations/GPU (GB)": None,
            "total/GPU (GB)": None,
            "MFU (printed)": "n/a",
            "MFU (TFLOP/s / 989)": f"{d.implied_mfu():.1%}",
            "tokens/s/GPU": d.tokens / (d.pretrain_gpu_hours * 3600),
            "tokens (T)": d.tokens / 1e12,
            "days at this rate": d.days(d.pretrain_gpu_hours),
        }
    )
    return rows


@dataclass
class Claim:
    claim: str
    they_say: str
    calculator: float
    unit: str
    why: str


def source_claims() -> list[Claim]:
    """Numeric claims about 3D layouts from the course's source material, paraphrased, beside
    lab_utils.calc (A100 80 GB, mixed-precision Adam: 16 bytes per parameter)."""
    gpt3, l70 = calc.PRESETS["gpt3-175b"], calc.PRESETS["llama2-70b"]
    n175 = calc.param_count(gpt3).total
    theirs = calc.layout_memory(gpt3, tp=8, pp=16, dp=7, seq_len=2048, zero_stage=0)
    q3 = calc.check_config(gpt3, calc.dgx_a100(512), 1536, 2048, dp=64, tp=8, pp=8)
    nar = calc.NARAYANAN_SEC51[0].estimate()
    l70_mem = calc.layout_memory(l70, tp=8, pp=4, dp=8, seq_len=4096, zero_stage=1)
    cl512 = calc.dgx_a100(64)
    src512 = calc.best_per_layout(
        [p for p in calc.plan(l70, cl512, 1024, 4096) if p.layout == (64, 1, 8)]
    )[0]
    best512 = calc.plan(l70, cl512, 1024, 4096)[0]
    return [
        Claim(
            "175B, TP=8: 350 GB / 8 = 44 GB per GPU, fits",
            "44 GB",
            calc.model_state_memory(n175 / 8).total / GB,
            "GB",
            "16 B/param, not 2: weights only leave out grads, Adam and the master copy",
        ),
        Claim(
            "  ... their TP=8 PP=16 layout, per GPU",
            "44 GB",
            theirs.total / GB,
            "GB",
            "fits because PP divides by 16 too (model state + 1F1B activations)",
        ),
        Claim(
            "  ... DP = 1000 / (8 x 16) = 7",
            "DP=7",
            1000 - 7 * 128,
            "GPUs idle",
            "and 1536 sequences do not split over 7 replicas: no layout uses all 1000",
        ),
        Claim(
            "GPT-3 ran on 64 x 8 x 8 = 4096 GPUs",
            "4096",
            calc.NARAYANAN_SEC51[0].n_gpus,
            "A100s",
            f"no layout was published (GPT-3 trained on V100s); Narayanan et al.'s "
            f"estimate: 1024 A100s, {nar.days:.0f} days",
        ),
        Claim(
            "  ... that layout with GPT-3's batch",
            "",
            q3.bubble * 100,
            "% bubble",
            "1536 / 64 = 24 micro-batches for 8 stages",
        ),
        Claim(
            "70B, TP=8 PP=4 DP=8: ~4.4 GB of state per GPU",
            "4.4 GB",
            calc.model_state_memory(70e9, tp=8, pp=4, dp=8, zero_stage=0).total / GB,
            "GB",
            "2.2B params x 2 B = weights only; x 16 B = 35 GB (no ZeRO)",
        ),
        Claim(
            "  ... with ZeRO-1, plus activations",
            "",
            l70_mem.total / GB,
            "GB",
            f"{l70_mem.model_state.total / GB:.0f} GB state + {l70_mem.activations / GB:.0f} GB "
            "of 1F1B activations",
        ),
        Claim(
            "512 GPUs: start at DP=64 PP=8 TP=1 (70B)",
            "maximise DP",
            src512.step_s / best512.step_s,
            "x slower",
            f"needs recompute={src512.recompute}; best: {best512.summary()}",
        ),
    ]


# -- the tiny runs' formulas (lab 08 sections 2 and 3) ------------------------------------------


def formula_2d(
    variant: str, param_bytes: dict[str, int], b: int, s: int, h: int, n_layer: int, d: int, t: int
) -> dict[str, tuple[int, float]]:
    """(calls, bytes one rank sends) per axis for one 2D step, fp32: ours = Megatron TP (2 + 2
    all-reduces per layer) + one gradient all-reduce over dp; torch = apply_tp (q, k, v unfused:
    6 per layer) + FSDP2 (blocks: 2 all-gathers + 1 reduce-scatter; root: 1 + 1)."""
    one_ar = calc.ring_bytes_per_rank("all_reduce", t, b * s * h * 4)
    if variant == "ours":
        return {
            "tp": (
                4 * n_layer,
                n_layer * calc.tp_layer_comm(b, s, h, t, bytes_per_elem=4).bytes_per_rank,
            ),
            "dp": (1, calc.dp_bytes_per_rank(sum(param_bytes.values()), d, "ddp")),
        }
    return {
        "tp": (6 * n_layer, 6 * n_layer * one_ar),
        "dp": (
            3 * n_layer + 2,
            calc.dp_bytes_per_rank(param_bytes["blocks"], d, "fsdp")
            + 2 * calc.ring_bytes_per_rank("all_gather", d, param_bytes["root"]),
        ),
    }


def formula_3d(
    layers: int, param_bytes: int, m: int, b: int, s: int, h: int, d: int, t: int
) -> dict[str, tuple[int, float]]:
    """(calls, bytes one rank sends) per axis for one 3D step, fp32: tp 4 all-reduces per layer
    per micro-batch; pp one activation or gradient each way per micro-batch (m sends + m
    receives, m activations sent); dp one all-reduce of the stage's gradients."""
    return {
        "tp": (
            4 * m * layers,
            m * layers * calc.tp_layer_comm(b, s, h, t, bytes_per_elem=4).bytes_per_rank,
        ),
        "pp": (2 * m, m * calc.pp_bytes_per_microbatch(b, s, h, bytes_per_elem=4)),
        "dp": (1, calc.dp_bytes_per_rank(param_bytes, d, "ddp")),
    }


def axis_rows(
    comm: dict[str, Any], formula: dict[str, tuple[int, float]], **first: Any
) -> list[dict]:
    """formula | ledger | wire per axis (comm: experiments.lab08.AxisComm by axis)."""
    rows = []
    for axis, (calls, want) in formula.items():
        c = comm[axis]
        rows.append(
            {
                **first,
                "axis": axis,
                "calls": " + ".join(f"{n} {op}" for op, n in c.ops.items()),
                "formula calls": calls,
                "formula": round(want),
                "ledger": round(c.ledger),
                "wire": c.wire,
                "gloo RS excess": round(c.op_bytes.get("reduce_scatter", 0.0)),
                "headers": c.headers,
            }
        )
    return rows


def time_split_rows(plans: Sequence[Any]) -> list[dict]:
    """Lab 08 (TP=4 vs TP=8 for Llama-2-70B): where each plan's step time goes (compute, TP
    communication, the pipeline bubble's time, DP sync), its step and its memory per GPU."""
    return [
        {
            "plan": q.summary(),
            "compute (s)": q.compute_s,
            "TP comm (s)": q.tp_comm_s,
            "bubble time (s)": q.bubble * (q.compute_s + q.tp_comm_s + q.pp_comm_s),
            "DP sync (s)": q.dp_comm_s,
            "step (s)": q.step_s,
            "mem/GPU (GB)": q.memory_bytes / GB,
        }
        for q in plans
    ]
