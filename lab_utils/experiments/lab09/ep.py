"""Lab 09's expert-parallel experiments: EP against the dense reference, and on a 2D mesh.

    ep_checks(ctx, sizes)          EP at each size in ``sizes`` (sub-groups of the world) vs the
                                   single-process MoELayer: forward, gradients, all-to-all bytes
    ep_dp_mesh(ctx, dp, ep, steps) EP x DP on a DeviceMesh ("dp", "ep"): SGD steps vs the reference,
                                   what each axis carries
    ep_experiments(ctx, ...)       ep_checks then ep_dp_mesh, in one launch (the notebook's)

The technique is ``lab_utils.parallel.expert_parallel``; the measurement is outside it (a
CommLedger (what was called), a WireMeter (what the kernel sent), and the routing each rank can
recompute for every rank from the shared seeds (what the splits say should move).
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass, field

import torch
import torch.distributed as dist

from lab_utils.experiments.lab09.shape import MoEShape, probe_for, teacher, tokens_for
from lab_utils.parallel.expert_parallel import ExpertParallelMoE, MoELayer


def _blocks(world: int, n: int) -> list[list[int]]:
    return [list(range(s, s + n)) for s in range(0, world, n)]


def _new_groups(world: int, n: int, rank: int):
    """Every rank creates every block's group (new_group is collective); returns its own."""
    mine = None
    for ranks in _blocks(world, n):
        g = dist.new_group(ranks)
        if rank in ranks:
            mine = g
    return mine


@dataclass
class EPCheck:
    """One rank of one EP group size: errors vs the dense reference and the bytes it sent."""

    ep: int
    rank: int
    out_err: float  # max |y_EP - y_dense| over this rank's tokens
    grad_err: dict[str, float]  # max abs diff: tokens, local experts, router
    a2a_calls: dict[str, int]  # all-to-alls in forward / backward (rows + counts)
    bytes_splits: dict[str, int]  # payload to OTHER ranks per forward all-to-all: the
    # counts (int64) and the rows x h x 4, from the splits
    bytes_ledger: dict[str, float]  # the ledger: (n-1)/n x the whole send buffer
    bytes_uniform: float  # formula, uniform routing: (n-1)/n T k h 4
    bytes_wire: dict[str, int | None]  # WireMeter: forward, backward (payload + gloo headers)
    tokens_per_expert: list[int]  # kept assignments per expert, whole group
    dropped: int  # assignments dropped by capacity, whole group


@dataclass
class EPChecks:
    rows: list[EPCheck]
    uneven_all_gather: str  # what gloo says to an all_gather of unequal sizes
    uneven_all_to_all: bool  # all_to_all_single with unequal splits worked


@contextlib.contextmanager
def _phase(ctx, ledger, wires: dict, name: str):
    """A ledger phase and a wire meter around one block: wires[name] = bytes the kernel sent."""
    from lab_utils.measure import WireMeter

    with ledger.phase(name), WireMeter(ctx) as wire:
        yield
    wires[name] = wire.sent


def _uneven_probe(ctx) -> tuple[str, bool]:
    """gloo: all_gather of tensors of different sizes fails; all_to_all_single with splits works."""
    r, n = ctx.rank, ctx.world_size
    try:
        outs = [torch.zeros(j + 1) for j in range(n)]
        dist.all_gather(outs, torch.full((r + 1,), float(r)), group=ctx.group)
        message = "no error"
    except RuntimeError as exc:
        message = str(exc).splitlines()[0][:120]
    dist.barrier(group=ctx.group)  # a failed gloo collective must not leave a rank behind
    send = [(r + j) % 3 for j in range(n)]  # r sends (r + j) % 3 values to j
    recv = [(j + r) % 3 for j in range(n)]
    out = torch.empty(sum(recv))
    dist.all_to_all_single(out, torch.full((sum(send),), float(r)), recv, send, group=ctx.group)
    expect = torch.cat([torch.full((c,), float(j)) for j, c in enumerate(recv)])
    return message, bool(torch.equal(out, expect))


def _one_size(ctx, shape: MoEShape, n: int, group) -> EPCheck:
    from lab_utils.measure import CommLedger, WireMeter

    me = dist.get_rank(group)
    xs = [tokens_for(shape, s) for s in range(n)]
    dense = MoELayer(
        shape.d_model,
        shape.d_hidden,
        shape.n_experts,
        shape.top_k,
        shape.capacity_factor,
        seed=shape.seed,
    )
    X = torch.cat(xs).requires_grad_(True)  # (n T, h)
    ref = dense(X, n_groups=n)
    loss = (ref.y * torch.cat([probe_for(shape, s) for s in range(n)])).sum() + ref.aux_loss
    loss.backward()

    moe = ExpertParallelMoE(
        shape.d_model,
        shape.d_hidden,
        shape.n_experts,
        shape.top_k,
        shape.capacity_factor,
        group=group,
        seed=shape.seed,
    )
    x = xs[me].clone().requires_grad_(True)
    with CommLedger() as ledger:
        with ledger.phase("forward"), WireMeter(ctx) as wire_fwd:
            out = moe(x)
        with ledger.phase("backward"), WireMeter(ctx) as wire_bwd:
            ((out.y * probe_for(shape, me)).sum() + out.aux_loss / n).backward()
    dist.all_reduce(moe.router.weight.grad, group=group)  # dense part: data parallel, SUM
    rows = slice(me * shape.tokens, (me + 1) * shape.tokens)
    n_local = shape.n_experts // n
    experts_err = 0.0
    for j, expert in enumerate(moe.experts):
        for p, q in zip(expert.parameters(), dense.experts[moe.first_expert + j].parameters()):
            want = q.grad if q.grad is not None else torch.zeros_like(p)
            experts_err = max(experts_err, (p.grad - want).abs().max().item())
    grad_err = {
        "tokens": (x.grad - X.grad[rows]).abs().max().item(),
        "experts": experts_err,
        "router": (moe.router.weight.grad - dense.router.weight.grad).abs().max().item(),
    }

    # Exact payloads from the routing (every rank can see every rank's, in the reference).
    r = ref.routing
    kept_e = [
        r.expert_idx[s * shape.tokens : (s + 1) * shape.tokens][
            r.keep[s * shape.tokens : (s + 1) * shape.tokens]
        ]
        for s in range(n)
    ]
    to = lambda s, d: int((kept_e[s] // n_local == d).sum())  # noqa: E731 - rows s sends to d
    row_bytes = shape.d_model * 4
    splits = {
        "counts": (n - 1) * n_local * 8,
        "dispatch": sum(to(me, d) for d in range(n) if d != me) * row_bytes,
        "combine": sum(to(s, me) for s in range(n) if s != me) * row_bytes,
    }
    a2a = [rec for rec in ledger.records if rec.op == "all_to_all"]
    fwd = [rec for rec in a2a if rec.phase == "forward"]
    bwd = [rec for rec in a2a if rec.phase == "backward"]
    ledger_bytes = {
        "dispatch": fwd[1].bytes_sent,
        "combine": fwd[2].bytes_sent,
        "counts": fwd[0].bytes_sent,
    }
    counts = torch.bincount(r.expert_idx[r.keep], minlength=shape.n_experts)
    return EPCheck(
        ep=n,
        rank=ctx.rank,
        out_err=(out.y - ref.y[rows]).abs().max().item(),
        grad_err=grad_err,
        a2a_calls={"forward": len(fwd), "backward": len(bwd)},
        bytes_splits=splits,
        bytes_ledger=ledger_bytes,
        bytes_uniform=(n - 1) / n * shape.tokens * shape.top_k * shape.d_model * 4,
        bytes_wire={"forward": wire_fwd.sent, "backward": wire_bwd.sent},
        tokens_per_expert=counts.tolist(),
        dropped=int((~r.keep).sum()),
    )


def ep_checks(ctx, sizes: tuple[int, ...] = (2, 4), shape: MoEShape = MoEShape()) -> EPChecks:
    """For each n in ``sizes``: the world in blocks of n consecutive ranks, each block one EP
    group; every rank compares its EP forward and backward with the dense reference computed
    in-process on all n ranks' tokens (routed per rank: one capacity group per rank)."""
    message, a2a_ok = _uneven_probe(ctx)
    rows = []
    for n in sizes:
        group = _new_groups(ctx.world_size, n, ctx.rank)
        rows.append(_one_size(ctx, shape, n, group))
        dist.barrier(group=ctx.group)
    return EPChecks(rows, message, a2a_ok)


# ------------------------------------------------------------------ EP x DP on a 2D mesh
@dataclass
class MeshResult:
    coords: dict[str, int]  # this rank's place on the mesh
    losses: list[float]  # global loss per step (sum over every rank)
    ref_losses: list[float]  # the single-process reference on all tokens
    param_err: float  # max |param - reference| after the last step
    comm: dict[str, dict] = field(default_factory=dict)  # phase -> {calls, ops, bytes, wire}
    formula: dict[str, float] = field(default_factory=dict)  # phase -> bytes per rank


def ep_dp_mesh(
    ctx,
    dp: int = 2,
    ep: int = 2,
    steps: int = 3,
    lr: float = 0.05,
    shape: MoEShape = MoEShape(n_experts=4),
) -> MeshResult:
    """EP over the mesh's "ep" axis, DP over its "dp" axis; every rank has its own tokens.

    Gradient sync, after backward: each expert's gradient is summed over the "dp" axis (the
    replicas of that expert); the router's (dense, replicated everywhere) over ALL ranks, since
    every rank is a data-parallel replica of the dense part. Then plain SGD on both sides.
    """
    from torch.distributed.device_mesh import init_device_mesh

    from lab_utils.measure import CommLedger

    world = dp * ep
    if world != ctx.world_size:
        raise ValueError(f"dp x ep = {dp} x {ep} must equal the world size {ctx.world_size}")
    mesh = init_device_mesh("cpu", (dp, ep), mesh_dim_names=("dp", "ep"))
    ep_group, dp_group = mesh.get_group("ep"), mesh.get_group("dp")
    coords = {"dp": ctx.rank // ep, "ep": ctx.rank % ep}  # row-major: ep is the inner axis
    moe = ExpertParallelMoE(
        shape.d_model,
        shape.d_hidden,
        shape.n_experts,
        shape.top_k,
        shape.capacity_factor,
        group=ep_group,
        seed=shape.seed,
    )
    dense = MoELayer(
        shape.d_model,
        shape.d_hidden,
        shape.n_experts,
        shape.top_k,
        shape.capacity_factor,
        seed=shape.seed,
    )
    target = lambda x: torch.tanh(x @ teacher(shape)) / 2  # noqa: E731 - what y should learn
    scale = 1 / (world * shape.tokens)  # the mean over all tokens
    losses, ref_losses, ledger = [], [], None
    for step in range(steps):
        xs = [tokens_for(shape, s, step) for s in range(world)]
        ref = dense(torch.cat(xs), n_groups=world)
        ref_loss = scale * ((ref.y - target(torch.cat(xs))) ** 2).sum()
        dense.zero_grad()
        ref_loss.backward()
        with torch.no_grad():
            for p in dense.parameters():
                if p.grad is not None:
                    p -= lr * p.grad
        ref_losses.append(ref_loss.item())

        moe.zero_grad()
        wires: dict[str, int | None] = {}
        with CommLedger() as ledger:  # the last step's ledger and wire bytes are reported
            x = xs[ctx.rank].requires_grad_(True)  # as if it came from the layer below
            with _phase(ctx, ledger, wires, "forward"):
                loss = scale * ((moe(x).y - target(x.detach())) ** 2).sum()
            with _phase(ctx, ledger, wires, "backward"):
                loss.backward()
            with _phase(ctx, ledger, wires, "experts over dp"):
                for p in moe.experts.parameters():
                    dist.all_reduce(p.grad, group=dp_group)
            with _phase(ctx, ledger, wires, "router over all"):
                dist.all_reduce(moe.router.weight.grad, group=ctx.group)
        with torch.no_grad():
            for p in moe.parameters():
                p -= lr * p.grad
        total = torch.tensor([loss.item()])
        dist.all_reduce(total, group=ctx.group)
        losses.append(total.item())
    err = (moe.router.weight - dense.router.weight).abs().max().item()
    for j, expert in enumerate(moe.experts):
        for p, q in zip(expert.parameters(), dense.experts[moe.first_expert + j].parameters()):
            err = max(err, (p - q).abs().max().item())
    comm = {}
    for phase, row in ledger.summary()["by_phase"].items():
        ops = {}
        for rec in ledger.records:
            if rec.phase == phase:
                ops[rec.op] = ops.get(rec.op, 0) + 1
        comm[phase] = {
            "calls": row["count"],
            "ops": ops,
            "bytes": row["bytes_sent"],
            "wire": wires[phase],
        }
    expert_bytes = sum(p.numel() * 4 for p in moe.experts.parameters())
    router_bytes = moe.router.weight.numel() * 4
    formula = {
        "experts over dp": 2 * (dp - 1) / dp * expert_bytes,
        "router over all": 2 * (world - 1) / world * router_bytes,
    }
    return MeshResult(coords, losses, ref_losses, err, comm, formula)


@dataclass
class EPRun:
    checks: EPChecks  # section 3: EP at 2 and 4 ranks vs the dense layer
    mesh: MeshResult  # section 4: EP x DP on a (dp, ep) mesh


def ep_experiments(
    ctx,
    sizes: tuple[int, ...] = (2, 4),
    shape: MoEShape = MoEShape(),
    dp: int = 2,
    ep: int = 2,
    steps: int = 3,
) -> EPRun:
    """Lab 09's EP launch: ``ep_checks`` then ``ep_dp_mesh``, one start-up of the ranks for both."""
    checks = ep_checks(ctx, sizes, shape)
    dist.barrier(group=ctx.group)
    return EPRun(checks, ep_dp_mesh(ctx, dp, ep, steps))
