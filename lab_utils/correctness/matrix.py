"""The layout-equivalence matrix (lab 14): one TinyGPT trained k SGD steps under every legal
layout of DP, ZeRO-1/2, FSDP, TP (+SP), PP (each schedule) and CP that fits in 8 ranks, each
compared with the single-process reference after the last step, parameter by parameter. EP
needs experts: its cells train lab 09's MoE layer (8 experts, top-2) against that layer's
single-process reference, the same way.

    cells = layout_matrix(world_size=8)              # one launch runs every layout
    cells[i].plan, cells[i].verdict                  # "bitwise" | "close" | "wrong"

Each cell is one of three verdicts on the final weights (every parameter, reassembled from
whatever shards the layout keeps):
    bitwise   every bit equal to the float32 single-process reference
    close     not bitwise, but within the bound below of the float64 reference
    wrong     beyond the bound: a real bug (the planted control "dp2 SUM" is one)

The bound (``derived_bound``), per element of the final weights w after k steps from w0:
    |w - w64| <= gamma_n * max|w64 - w0| + 2 k u |w64|,     gamma_n = n u / (1 - n u)
u = 2^-24 is float32's unit roundoff. A sum of n terms in ANY order is within gamma_n of the
exact sum RELATIVE TO THE SUM OF THE TERMS' MAGNITUDES (Higham 2002, "Accuracy and Stability of
Numerical Algorithms", Sec. 3.1), not to the result: a gradient that cancels to almost nothing
(a key bias's is exactly zero in exact arithmetic) keeps an absolute error of the size of its
terms. So the first term is norm-wise: the k updates are gradients, each a reduction over the
global batch's B*T tokens and the widest dot product (d_ff), n = k (B*T + d_ff), and the largest
movement of any weight, max|w64 - w0|, stands for the terms' size. The second term: rounding
each of the k updates into w (relative u, twice for safety). A bug moves weights by an amount of
the order of the movement itself, four orders of magnitude above this bound here.

Why bitwise fails where it does: float addition is not associative, (a + b) + c != a + (b + c)
in the last bit. A layout that changes the ORDER of a reduction (averaging per-rank gradients,
summing row-parallel partial products, accumulating micro-batches, an online softmax over K/V
blocks) changes the last bits, and k steps carry them on. Only a layout that performs the very
same operations in the same order can be bitwise; every correct layout must be "close".

Launches: every layout runs inside ONE launch of ``world_size`` ranks, on ranks 0..size-1 (the
others wait); the process groups a layout needs are built once and reused by later layouts.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass, field, replace
from typing import Any

import torch
import torch.distributed as dist
from torch import nn

from lab_utils.calc import reduction_bound
from lab_utils.data import shard_for_rank, token_batches
from lab_utils.experiments.common import sgd_step
from lab_utils.experiments.lab09.shape import MoEShape, teacher, tokens_for
from lab_utils.experiments.unshard import unshard
from lab_utils.models import GPTConfig, TinyGPT, lm_loss, split_stages
from lab_utils.parallel.collectives import all_reduce_flat
from lab_utils.parallel.compose import apply_tp_ours
from lab_utils.parallel.context_parallel import ring_attention
from lab_utils.parallel.data_parallel import BucketDDP
from lab_utils.parallel.expert_parallel import ExpertParallelMoE, MoELayer
from lab_utils.parallel.fsdp import FSDP
from lab_utils.parallel.pipeline_parallel.schedules import SCHEDULES
from lab_utils.parallel.pipeline_parallel.stage import StageWorker, pipeline_neighbours
from lab_utils.parallel.tensor_parallel import sync_sequence_parallel_grads, tensor_parallelize
from lab_utils.parallel.zero import ZeroOptimizer
from lab_utils.topology import Topology

CFG = GPTConfig(vocab_size=64, seq_len=16, n_layer=4, n_head=4, d_model=32)
BATCH, LR, MICRO = 8, 0.1, 2  # global rows per step, SGD learning rate, pipeline micro-batches
DP_KINDS = ("ddp", "zero1", "zero2", "fsdp")
AXES = ("dp", "tp", "pp", "cp", "ep")
MOE = MoEShape(n_experts=8, tokens=24, capacity_factor=None)  # no capacity: no token dropped
MOE_SOURCES, MOE_LR = 8, 0.05  # token sources (MOE.tokens each) in the global batch; SGD lr
U32 = 2.0**-24  # float32 unit roundoff


@dataclass(frozen=True)
class Plan:
    """One cell's parallelism plan: the degree of each axis (their product = the ranks it uses)
    and the variant of each. (Not ``correctness.Layout``, which is ONE tensor's placement.)"""

    dp: int = 1
    tp: int = 1
    pp: int = 1
    cp: int = 1
    ep: int = 1  # expert parallelism: the MoE layer's experts over ep ranks (its own model)
    dp_kind: str = "ddp"  # how the dp axis shares the work: ddp | zero1 | zero2 | fsdp
    sp: bool = False  # sequence parallelism on the tp axis
    schedule: str = "1f1b"  # the pipeline schedule (a name of SCHEDULES)
    bug: str = ""  # "sum": the planted control, gradients summed over dp instead of averaged

    def __post_init__(self) -> None:
        for axis in AXES:
            size = getattr(self, axis)
            if not isinstance(size, int) or isinstance(size, bool) or size < 1:
                raise ValueError(f"Plan.{axis} must be a positive integer, got {size!r}")
        if self.dp_kind not in DP_KINDS:
            raise ValueError(f"Plan.dp_kind must be one of {DP_KINDS}, got {self.dp_kind!r}")
        if self.schedule not in SCHEDULES:
            raise ValueError(
                f"Plan.schedule must be one of {tuple(SCHEDULES)}, got {self.schedule!r}"
            )
        if self.bug not in ("", "sum"):
            raise ValueError(f"Plan.bug must be '' or 'sum', got {self.bug!r}")

    @property
    def size(self) -> int:
        return self.dp * self.tp * self.pp * self.cp * self.ep

    @property
    def name(self) -> str:
        parts = [f"{a}{getattr(self, a)}" for a in AXES if getattr(self, a) > 1]
        if self.dp > 1 and self.dp_kind != "ddp":
            parts[0] = f"{self.dp_kind}x{self.dp}"
        if self.sp:
            parts.append("sp")
        if self.pp > 1 and self.schedule != "1f1b":
            parts.append(self.schedule)
        if self.bug:
            parts.append(f"BUG:{self.bug}")
        return " ".join(parts) or "1 rank"

    @property
    def family(self) -> str:
        """The heatmap's row: the one technique, or "composed" for two axes or more."""
        if self.bug:
            return "control"
        axes = [a for a in AXES if getattr(self, a) > 1]
        if len(axes) > 1:
            return "composed"
        if axes == ["dp"]:
            return {"ddp": "DP", "zero1": "ZeRO", "zero2": "ZeRO", "fsdp": "FSDP"}[self.dp_kind]
        return axes[0].upper() if axes else "single"


def illegal(layout: Plan, cfg: GPTConfig = CFG, batch: int = BATCH) -> str | None:
    """Why this layout cannot run on this model and batch, or None if it can."""
    rows = batch // layout.dp
    v = SCHEDULES[layout.schedule][1] if layout.pp > 1 else 1
    checks = [
        (batch % layout.dp, f"dp={layout.dp} does not divide the batch of {batch} rows"),
        (cfg.n_head % layout.tp, f"tp={layout.tp} does not divide n_head={cfg.n_head}"),
        (layout.pp * v > cfg.n_layer, f"pp={layout.pp} x {v} chunks > n_layer={cfg.n_layer}"),
        (layout.pp > 1 and rows % MICRO, f"{rows} rows per replica: not {MICRO} micro-batches"),
        (
            cfg.seq_len % (layout.cp * layout.tp if layout.sp else layout.cp),
            f"seq_len={cfg.seq_len} not divisible by the sequence shards",
        ),
        (layout.sp and layout.tp == 1, "sp needs tp > 1"),
        (
            layout.cp > 1 and (layout.tp > 1 or layout.pp > 1),
            "our CP forward runs whole blocks: cp combines with dp only",
        ),
        (
            layout.dp_kind != "ddp" and (layout.tp > 1 or layout.pp > 1 or layout.cp > 1),
            f"{layout.dp_kind} is applied to whole models here: dp only",
        ),
        (layout.sp and layout.pp > 1, "sp inside a pipeline stage is not built here"),
        (layout.ep > 1 and layout.size != layout.ep, "EP trains the MoE layer on its own here"),
        (MOE_SOURCES % layout.ep, f"ep={layout.ep} does not divide the {MOE_SOURCES} sources"),
    ]
    return next((why for bad, why in checks if bad), None)


def all_plans(max_ranks: int = 8) -> list[Plan]:
    """Every legal layout within max_ranks: each grid of degrees (powers of 2) with DDP and 1F1B,
    then each dp kind, each schedule and SP on the single-axis grids, then the planted control."""
    pows = [2**i for i in range(int(math.log2(max_ranks)) + 1)]
    grids = [
        Plan(*d) for d in itertools.product(pows, repeat=len(AXES)) if math.prod(d) <= max_ranks
    ]
    variants = [replace(g, dp_kind=k) for g in grids for k in DP_KINDS[1:] if g.size == g.dp > 1]
    variants += [
        replace(g, schedule=s)
        for g in grids
        for s in SCHEDULES
        if s != "1f1b" and g.size == g.pp > 1
    ]
    variants += [replace(g, sp=True) for g in grids if g.size == g.tp > 1]
    out = [lay for lay in grids + variants if illegal(lay) is None]
    return sorted(out, key=lambda lay: lay.size) + [Plan(dp=2, bug="sum")]


QUICK_PLANS = (
    Plan(),
    Plan(dp=2),
    Plan(dp=2, dp_kind="zero1"),
    Plan(dp=2, dp_kind="fsdp"),
    Plan(tp=2),
    Plan(tp=2, sp=True),
    Plan(pp=2),
    Plan(pp=2, schedule="zb-h1"),
    Plan(cp=2),
    Plan(ep=2),
    Plan(dp=2, tp=2),
    Plan(dp=2, bug="sum"),
)


# ---- the references (one process) ---------------------------------------------------------


def batches(
    steps: int, cfg: GPTConfig = CFG, batch: int = BATCH
) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """The global batches every layout and the references train on (the same on every rank)."""
    return token_batches(steps, batch, cfg.seq_len, cfg.vocab_size, seed=1)


def _moe_loss(y: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    """Squared error against the teacher tanh(x A) / 2, summed, over the GLOBAL token count."""
    target = torch.tanh(x @ teacher(MOE).to(x.dtype)) / 2
    return ((y - target) ** 2).sum() / (MOE_SOURCES * MOE.tokens)


def moe_tokens(step: int, sources: range) -> torch.Tensor:
    """(len(sources) * T, h): the tokens of these sources at this step (lab 09's data)."""
    return torch.cat([tokens_for(MOE, s, step) for s in sources])


def reference_weights(
    steps: int, dtype: torch.dtype, cfg: GPTConfig = CFG, lr: float = LR
) -> dict[str, torch.Tensor]:
    """One process, whole global batch, k plain SGD steps in ``dtype``: the final weights of
    TinyGPT and (names "moe.*") of the MoE layer EP trains (lab 09's, all experts here)."""
    model = TinyGPT(cfg, seed=0).to(dtype)
    for x, y in batches(steps, cfg):
        lm_loss(model(x), y).backward()
        sgd_step(model, lr)
    moe = MoELayer(MOE.d_model, MOE.d_hidden, MOE.n_experts, MOE.top_k, None, seed=MOE.seed).to(
        dtype
    )
    for step in range(steps):
        x = moe_tokens(step, range(MOE_SOURCES)).to(dtype)
        _moe_loss(moe(x).y, x).backward()
        sgd_step(moe, MOE_LR)
    return {n: p.detach().clone() for n, p in model.named_parameters()} | {
        f"moe.{n}": p.detach().clone() for n, p in moe.named_parameters()
    }


def derived_bound(
    w64: dict[str, torch.Tensor], w0: dict[str, torch.Tensor], steps: int, n: int
) -> dict[str, torch.Tensor]:
    """Per-element bound on |w - w64| for a correct float32 layout (the module docstring);
    n: the terms of the longest reduction of one step."""
    gamma = reduction_bound(steps * n)  # n u / (1 - n u), u = 2^-24 (lab_utils.calc)
    moved = max((w64[k] - w0[k].double()).abs().max().item() for k in w64)
    return {k: gamma * moved + 2 * steps * U32 * w64[k].abs() for k in w64}


@dataclass
class References:
    steps: int
    w32: dict[str, torch.Tensor]
    bound: dict[str, torch.Tensor]  # float64, per element
    w64: dict[str, torch.Tensor]

    @classmethod
    def build(cls, steps: int) -> "References":
        w0 = reference_weights(0, torch.float32)
        w64 = reference_weights(steps, torch.float64)
        bad = [k for k, v in w64.items() if not torch.isfinite(v).all()]
        if bad:  # nothing to compare against: say so, rather than call every layout wrong
            raise ValueError(
                f"the float64 reference itself failed: non-finite weights in "
                f"{bad[:3]} after {steps} steps (lower the learning rate or steps)"
            )
        gpt = {k: v for k, v in w64.items() if not k.startswith("moe.")}
        moe = {k: v for k, v in w64.items() if k.startswith("moe.")}
        # n: the tokens a weight gradient sums over, plus the widest dot product
        bound = derived_bound(gpt, w0, steps, BATCH * CFG.seq_len + CFG.ff_dim) | derived_bound(
            moe, w0, steps, MOE_SOURCES * MOE.tokens + MOE.d_hidden
        )
        return cls(steps, reference_weights(steps, torch.float32), bound, w64)


@dataclass
class Compared:
    """What one rank held of one layout's final weights, against the references."""

    names: list[str] = field(default_factory=list)
    bitwise: bool = True
    ratio: float = 0.0  # max |w - w64| / bound over the elements
    err: float = 0.0  # max |w - w64|
    err32: float = 0.0  # max |w - w32|: how far from the float32 reference


def compare(weights: dict[str, torch.Tensor], refs: References) -> Compared:
    out = Compared(sorted(weights))
    for name, w in weights.items():
        if w.shape != refs.w32[name].shape:
            raise ValueError(
                f"{name}: reassembled {tuple(w.shape)}, the reference has "
                f"{tuple(refs.w32[name].shape)}"
            )
        out.bitwise &= torch.equal(w, refs.w32[name])
        diff = (w.double() - refs.w64[name]).abs()
        ratio = torch.where(diff == 0, 0.0, diff / refs.bound[name])  # 0/0: no error
        out.ratio = max(out.ratio, ratio.max().item())
        out.err = max(out.err, diff.max().item())
        out.err32 = max(out.err32, (w - refs.w32[name]).abs().max().item())
    return out


# ---- on the ranks ---------------------------------------------------------------------------


class Groups:
    """Process groups by member ranks, built on first use and kept for the launch's later
    layouts. dist.new_group is collective over the WORLD: every rank asks for the same groups
    in the same order, including the ranks a layout leaves idle."""

    def __init__(self) -> None:
        self.made: dict[tuple[int, ...], Any] = {}

    def mine(self, topo: Topology, rank: int, axis: str) -> Any:
        """This rank's group along ``axis`` of ``topo`` (None for a size-1 axis)."""
        mine = None
        if topo.size(axis) == 1:
            return None
        for ranks in topo.all_groups(axis):
            if tuple(ranks) not in self.made:
                self.made[tuple(ranks)] = dist.new_group(ranks)
            if rank in ranks:
                mine = self.made[tuple(ranks)]
        return mine


def _sync(params: list[nn.Parameter], group: Any, bug: str) -> None:
    """One flat all-reduce of the gradients over ``group``: the mean, or the SUM (the bug)."""
    op = dist.ReduceOp.SUM if bug == "sum" else dist.ReduceOp.AVG
    all_reduce_flat([p.grad for p in params], op, group)


def _cp_forward(model: TinyGPT, idx: torch.Tensor, offset: int, group: Any) -> torch.Tensor:
    """TinyGPT's forward on this rank's chunk of the sequence, (B, Tc) -> (B, Tc, V): positions
    offset..offset+Tc, attention by ring_attention over the cp group (lab 08)."""
    B, Tc = idx.shape
    x = model.tok_emb(idx) + model.pos_emb(torch.arange(offset, offset + Tc))  # (B, Tc, C)
    for block in model.blocks:
        a, h = block.attn, block.ln1(x)
        q, k, v = (lin(h).view(B, Tc, -1, a.head_dim).transpose(1, 2) for lin in (a.q, a.k, a.v))
        y = ring_attention(q, k, v, group, causal=True)  # (B, H, Tc, hd)
        x = x + a.proj(y.transpose(1, 2).reshape(B, Tc, -1))
        x = x + block.mlp(block.ln2(x))
    return model.head(model.ln_f(x))


def _owned(model: TinyGPT, pp: int, stage: int, v: int) -> set[str]:
    """Full-model names of the parameters this pipeline rank trains (its v chunks)."""
    parts, ids = split_stages(model, pp * v), {c * pp + stage for c in range(v)}
    mine = {id(p) for k in ids for p in parts[k].parameters()}
    return {n for n, p in model.named_parameters() if id(p) in mine}


def _train_pipeline(
    lay: Plan, rank: int, groups: Groups, data: list, steps_tag: int
) -> dict[str, torch.Tensor]:
    topo = Topology(dp=lay.dp, tp=lay.tp, pp=lay.pp)
    c = topo.coords(rank)
    dp_group, tp_group = groups.mine(topo, rank, "dp"), groups.mine(topo, rank, "tp")
    fn, v, _ = SCHEDULES[lay.schedule]
    model = TinyGPT(CFG, seed=0)
    stages = split_stages(model, lay.pp * v)
    ids = [k * lay.pp + c["pp"] for k in range(v)]  # loop placement: chunk k is stage k*p + s
    owned = _owned(model, lay.pp, c["pp"], v)  # names before TP fuses q, k, v
    if lay.tp > 1:
        for k in ids:
            apply_tp_ours(stages[k], tp_group)
    params = [p for k in ids for p in stages[k].parameters()]
    rows = BATCH // lay.dp // MICRO
    for step, batch in enumerate(data):
        x, y = shard_for_rank(batch, c["dp"], lay.dp)
        workers = [
            StageWorker(
                stages[k],
                k,
                lay.pp * v,
                *pipeline_neighbours(topo, rank, k, lay.pp * v),
                x.chunk(MICRO),
                y.chunk(MICRO),
                (rows, CFG.seq_len, CFG.d_model),
                tag=(steps_tag + step) * 1024,
            )
            for k in ids
        ]
        fn(workers if v > 1 else workers[0])
        for w in workers:
            w.finish()
        if lay.dp > 1:
            _sync(params, dp_group, lay.bug)
        sgd_step(model, LR)
    full = unshard(model) if lay.tp > 1 else dict(model.named_parameters())
    return {n: w.detach() for n, w in full.items() if n in owned}


def _train_cp(lay: Plan, rank: int, groups: Groups, data: list) -> dict[str, torch.Tensor]:
    topo = Topology(dp=lay.dp, tp=lay.cp)  # the cp ranks are the consecutive (inner) axis
    c = topo.coords(rank)
    cp_group = groups.mine(topo, rank, "tp")
    everyone = groups.mine(Topology(dp=lay.size), rank, "dp")  # every rank of the layout
    model = TinyGPT(CFG, seed=0)
    tc = CFG.seq_len // lay.cp
    for batch in data:
        x, y = shard_for_rank(batch, c["dp"], lay.dp)
        part = slice(c["tp"] * tc, (c["tp"] + 1) * tc)
        # equal chunks: the global mean loss is the mean of the per-rank means
        lm_loss(_cp_forward(model, x[:, part], part.start, cp_group), y[:, part]).backward()
        _sync(list(model.parameters()), everyone, "")
        sgd_step(model, LR)
    return {n: p.detach() for n, p in model.named_parameters()}


def _train_dp_tp(lay: Plan, rank: int, groups: Groups, data: list) -> dict[str, torch.Tensor]:
    topo = Topology(dp=lay.dp, tp=lay.tp)
    c = topo.coords(rank)
    dp_group, tp_group = groups.mine(topo, rank, "dp"), groups.mine(topo, rank, "tp")
    model: nn.Module = TinyGPT(CFG, seed=0)
    if lay.tp > 1:
        tensor_parallelize(model, tp_group, lay.sp)
    zero = (
        ZeroOptimizer(model, int(lay.dp_kind[-1]), dp_group, "sgd", LR)
        if lay.dp_kind.startswith("zero")
        else None
    )
    wrapped = FSDP(model, dp_group) if lay.dp_kind == "fsdp" else model
    ddp = (
        BucketDDP(model, group=dp_group)
        if lay.dp > 1 and lay.tp == 1 and not lay.bug and lay.dp_kind == "ddp"
        else None
    )
    for batch in data:
        x, y = shard_for_rank(batch, c["dp"], lay.dp)
        lm_loss((ddp or wrapped)(x), y).backward()
        if lay.sp:
            sync_sequence_parallel_grads(model, tp_group)
        if zero is not None:
            zero.step()
            zero.zero_grad()
            continue
        if ddp is not None:
            ddp.finish_gradient_synchronization()
        elif lay.dp > 1 and lay.dp_kind == "ddp":
            _sync(list(model.parameters()), dp_group, lay.bug)
        sgd_step(wrapped, LR)
    if lay.dp_kind == "fsdp":  # collective: all-gathers the shards (buffers left out)
        names = {n for n, _ in TinyGPT(CFG).named_parameters()}
        return {n: w for n, w in wrapped.full_state_dict().items() if n in names}
    full = unshard(model) if lay.tp > 1 else dict(model.named_parameters())
    return {n: w.detach() for n, w in full.items()}


def _train_ep(lay: Plan, rank: int, groups: Groups, steps: int) -> dict[str, torch.Tensor]:
    """The MoE layer, its experts over the ep ranks (two all-to-alls per forward, lab 09); each
    rank routes its sources' tokens. Expert gradients arrive whole at their owner through the
    all-to-all's backward; the replicated router's are partial sums: one all-reduce (SUM, as
    the loss is already divided by the GLOBAL token count)."""
    group = groups.mine(Topology(dp=lay.size), rank, "dp")
    moe = ExpertParallelMoE(
        MOE.d_model, MOE.d_hidden, MOE.n_experts, MOE.top_k, None, group=group, seed=MOE.seed
    )
    per = MOE_SOURCES // lay.ep
    for step in range(steps):
        x = moe_tokens(step, range(rank * per, (rank + 1) * per))  # (per * T, h)
        _moe_loss(moe(x).y, x).backward()
        dist.all_reduce(moe.router.weight.grad, group=group)
        sgd_step(moe, MOE_LR)
    out = {f"moe.router.{n}": p.detach() for n, p in moe.router.named_parameters()}
    for j, expert in enumerate(moe.experts):
        out |= {
            f"moe.experts.{moe.first_expert + j}.{n}": p.detach()
            for n, p in expert.named_parameters()
        }
    return out


def matrix_worker(ctx: Any, layouts: list[Plan], refs: References) -> list[Compared | None]:
    """Every layout in turn on ranks 0..size-1 of this launch; each rank compares what it holds
    (None: the rank had no part in that layout)."""
    groups, out = Groups(), []
    data = batches(refs.steps)
    # The float32 reference is recomputed HERE: a rank runs torch on one thread, and a matmul
    # split over several threads sums in another order, so the caller's copy can differ in
    # the last bits (lab 14 shows it) and "bitwise" must mean "as one rank would compute it".
    refs = replace(refs, w32=reference_weights(refs.steps, torch.float32))
    for i, lay in enumerate(layouts):
        topo = Topology(dp=lay.dp, tp=lay.tp * lay.cp, pp=lay.pp)
        for axis in ("pp", "dp", "tp"):  # every rank builds every group, in the same order
            groups.mine(topo, ctx.rank, axis)
        groups.mine(Topology(dp=lay.size), ctx.rank, "dp")
        if ctx.rank >= lay.size:
            out.append(None)
        elif lay.pp > 1:
            out.append(compare(_train_pipeline(lay, ctx.rank, groups, data, i * 64), refs))
        elif lay.cp > 1:
            out.append(compare(_train_cp(lay, ctx.rank, groups, data), refs))
        elif lay.ep > 1:
            out.append(compare(_train_ep(lay, ctx.rank, groups, refs.steps), refs))
        else:
            out.append(compare(_train_dp_tp(lay, ctx.rank, groups, data), refs))
    return out


# ---- on the host ----------------------------------------------------------------------------


@dataclass
class Cell:
    """One layout's verdict: over every rank and every parameter of the final weights."""

    plan: Plan
    verdict: str  # "bitwise" | "close" | "wrong"
    ratio: float  # max |w - w64| / bound
    err: float  # max |w - w64|
    err32: float  # max |w - w32|


def verdict(bitwise: bool, ratio: float) -> str:
    return "bitwise" if bitwise else ("close" if ratio <= 1.0 else "wrong")


def merge(layout: Plan, per_rank: list[Compared | None], names: set[str]) -> Cell:
    """One cell from what every rank compared; every parameter must have been compared."""
    held = [c for c in per_rank if c is not None]
    missing = names - {n for c in held for n in c.names}
    if missing:
        raise ValueError(
            f"layout {layout.name}: no rank compared {sorted(missing)[:3]}...: "
            "its reassembly left these parameters out"
        )
    bitwise, ratio = all(c.bitwise for c in held), max(c.ratio for c in held)
    return Cell(
        layout, verdict(bitwise, ratio), ratio, max(c.err for c in held), max(c.err32 for c in held)
    )


def layout_matrix(
    layouts: list[Plan] | tuple[Plan, ...],
    steps: int = 3,
    world_size: int | None = None,
    **run_kwargs: Any,
) -> list[Cell]:
    """Train every layout ``steps`` SGD steps in ONE launch and judge each against the
    references. world_size defaults to the largest layout's size."""
    from lab_utils import run

    for lay in layouts:
        why = illegal(lay)
        if why:
            raise ValueError(f"layout {lay.name} cannot run: {why}")
    world = world_size or max(lay.size for lay in layouts)
    too_big = [lay.name for lay in layouts if lay.size > world]
    if too_big:
        raise ValueError(f"layouts {too_big} need more than world_size={world} ranks")
    refs = References.build(steps)
    results = run(matrix_worker, world, list(layouts), refs, **run_kwargs)
    return [
        merge(
            lay,
            [results[r][i] for r in range(world)],
            {k for k in refs.w32 if k.startswith("moe.") == (lay.ep > 1)},
        )
        for i, lay in enumerate(layouts)
    ]


def counts(cells: list[Cell]) -> dict[str, int]:
    """How many cells got each verdict."""
    return {v: sum(c.verdict == v for c in cells) for v in ("bitwise", "close", "wrong")}
