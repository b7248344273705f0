"""Exercise "fsdp_unit_hooks" (lab 05): the two halves of an FSDP unit's work.

The learner writes a class with two static methods, used by ``lab_utils.parallel.fsdp.FSDP``:

    class MyHooks:
        @staticmethod
        def pre_forward(unit, group):   # gather: before the forward, and again before backward
            ...
        @staticmethod
        def post_backward(unit, group): # reduce-scatter the gradients (mean), then free
            ...

with the Unit's layout helpers (``fsdp_units.Unit``): ``local_shards(dtype)`` (S,),
``unpack(gathered)`` from (K*S,), ``pack_grads(dtype)`` (K*S_g,), ``accumulate_grads(reduced)``
from (S_g,), ``free()``, and ``world``, ``param_dtype``, ``reduce_dtype``.

The check trains with the learner's hooks in two configurations that separate right from
accidentally right:
  A. the whole world (K = 4), fp32, SGD, a ToyMLP whose layers need padding: losses and weights
     against one process (a missing average is a K-times-too-big step under SGD), and the full
     weights this rank holds as each layer's backward starts (a forgotten free keeps them all);
  B. two data-parallel groups of 2 ranks (a sub-group, not WORLD), bf16 parameters with fp32
     gradient reduction (MixedPrecision): losses against one process doing the same casts, and
     the bytes of every all-gather and reduce-scatter in the CommLedger (a gather in fp32 sends
     twice the bytes with the same numbers; a reduction in bf16 sends half and loses bits).
"""

from __future__ import annotations

import torch
import torch.distributed as dist

from lab_utils.exercises._core import Exercise, Verdict, first_problem, raised_in, register
from lab_utils.parallel.fsdp import UnitHooks as reference

SGD_LR, ADAM_LR, STEPS = 0.1, 1e-2, 2


def _config_a(ctx, hooks) -> str | None:
    """World, fp32, SGD, ToyMLP 5 -> 7 -> 7 -> 3 (padding at K = 4)."""
    from lab_utils.data import regression_batches, shard_for_rank
    from lab_utils.experiments.lab05 import gathered_bytes
    from lab_utils.measure import CommLedger
    from lab_utils.measure.spans import ModuleSpans
    from lab_utils.models import ToyMLP
    from lab_utils.parallel.fsdp import FSDP
    from lab_utils.reference import default_loss, reference_run

    k = ctx.world_size
    model_fn = lambda: ToyMLP(d_in=5, d_hidden=7, d_out=3, n_layers=3, seed=0)  # noqa: E731
    batches = regression_batches(STEPS, 8, d_in=5, d_out=3, seed=2)
    ref = reference_run(model_fn, batches, STEPS, lr=SGD_LR, optimizer="sgd", grad_accum=k)
    fsdp = FSDP(model_fn(), ctx.group, hooks=hooks)
    opt = torch.optim.SGD(fsdp.parameters(), lr=SGD_LR)
    layers = {u.name: u.module for u in fsdp.units if u is not fsdp.root}
    held: list[int] = []
    ModuleSpans(
        layers,
        _Clock(),
        on_start=lambda _n, which: (
            held.append(gathered_bytes(fsdp)) if which == "backward" else None
        ),
    )
    losses, first_step = [], {}
    for batch in batches:
        x, y = shard_for_rank(batch, ctx.rank, k)
        with CommLedger() as ledger:
            loss = default_loss(fsdp(x), y)
            loss.backward()
        opt.step()
        opt.zero_grad()
        losses.append(loss.item())
        first_step = first_step or fsdp.full_state_dict()  # collective: every rank
    mean = torch.tensor(losses, dtype=torch.float64)
    dist.all_reduce(mean, op=dist.ReduceOp.AVG, group=ctx.group)
    if 2 * ledger.tensor_bytes("all_gather") == _gather_bytes(fsdp, k, 4):
        return (
            "the all-gather runs in bf16 while training is fp32: the gathered weights lost "
            "their low bits. Gather in unit.param_dtype (unit.local_shards(unit.param_dtype))"
            ", never a hard-coded dtype"
        )
    one_layer = max(4 * sum(p.shape.numel() for p in u.params) for u in fsdp.units[1:])
    root = 4 * sum(p.shape.numel() for p in fsdp.root.params)
    if max(held) > root + one_layer:
        return (
            f"as a layer's backward started this rank held {max(held)} B of full weights, "
            f"more than the root and one layer ({root + one_layer} B): post_backward must "
            "free the unit (unit.free()) once its gradients are reduce-scattered, or FSDP "
            "ends up holding the whole model, as DDP does"
        )
    weights = fsdp.full_state_dict()
    first = mean[0].item() - ref.losses[0]
    if abs(first) > 1e-5 * abs(ref.losses[0]):
        return (
            f"the first loss is {mean[0].item():.6f}, one process gets {ref.losses[0]:.6f}: "
            "the forward used wrong weights (pre_forward must all-gather every rank's shard "
            "and unpack them into the full parameters)"
        )
    ref1 = reference_run(model_fn, batches, 1, lr=SGD_LR, optimizer="sgd", grad_accum=k)
    problem = _compare_updates(first_step, ref1, model_fn, k, "the")
    if problem is None and not torch.allclose(
        torch.cat([w.flatten() for w in weights.values()]),
        torch.cat([ref.state_dict[n].flatten() for n in weights]),
        rtol=1e-4,
        atol=1e-6,
    ):
        problem = (
            f"after {STEPS} SGD steps the weights differ from one process's (the first "
            "step was right): does every backward reduce-scatter the gradients?"
        )
    return problem


def _config_b(ctx, hooks) -> str | None:
    """Two groups of 2 ranks, TinyGPT, bf16 compute, fp32 reduction, SGD (a gradient of the
    wrong size shows; Adam would normalise it away)."""
    from lab_utils.data import shard_for_rank, token_batches
    from lab_utils.experiments.lab05 import mixed_precision_run
    from lab_utils.measure import CommLedger
    from lab_utils.models import GPTConfig, TinyGPT
    from lab_utils.parallel.fsdp import FSDP, MixedPrecision

    groups = [dist.new_group([0, 1]), dist.new_group([2, 3])]  # every rank creates every group
    group = groups[ctx.rank // 2]
    rank, k = ctx.rank % 2, 2
    cfg = GPTConfig(n_layer=2, d_model=16, n_head=2, vocab_size=32, seq_len=8)
    mp = MixedPrecision(torch.bfloat16, torch.float32)
    model_fn = lambda: TinyGPT(cfg, seed=0)  # noqa: E731
    batches = token_batches(STEPS, 4, cfg.seq_len, cfg.vocab_size, seed=3)
    ref = mixed_precision_run(model_fn, batches, STEPS, k, mp, SGD_LR, "sgd")
    ref1 = mixed_precision_run(model_fn, batches, 1, k, mp, SGD_LR, "sgd")
    fsdp = FSDP(model_fn(), group, mp=mp, hooks=hooks)
    opt = torch.optim.SGD(fsdp.parameters(), lr=SGD_LR)
    losses, first_step = [], {}
    for batch in batches:
        x, y = shard_for_rank(batch, rank, k)
        with CommLedger() as ledger:
            loss = torch.nn.functional.cross_entropy(fsdp(x).flatten(0, 1), y.flatten())
            loss.backward()
        opt.step()
        opt.zero_grad()
        losses.append(loss.item())
        first_step = first_step or fsdp.full_state_dict()  # collective on the group
    mean = torch.tensor(losses, dtype=torch.float64)
    dist.all_reduce(mean, op=dist.ReduceOp.AVG, group=group)
    gather_bytes = _gather_bytes(fsdp, k, 2)  # bf16
    reduce_bytes = sum(k * sum(p.chunk for p in u.trainable) * 4 for u in fsdp.units)  # fp32
    got_gather = ledger.tensor_bytes("all_gather")
    got_reduce = ledger.tensor_bytes("reduce_scatter")
    if got_gather == 2 * gather_bytes:
        return (
            "the numbers are right, but every all-gather moved fp32: cast the shards to "
            "unit.param_dtype BEFORE the all-gather (unit.local_shards(unit.param_dtype)); "
            "gathering in bf16 is what halves FSDP's forward traffic"
        )
    if got_reduce * 2 == reduce_bytes:
        return (
            "the reduce-scatter ran in bf16: use unit.reduce_dtype (fp32 here); summing bf16 "
            "gradients over ranks rounds away their low bits"
        )
    if (got_gather, got_reduce) != (gather_bytes, reduce_bytes):
        return (
            f"one step called all-gathers of {got_gather} B and reduce-scatters of "
            f"{got_reduce} B in total; FSDP's pattern on this group is {gather_bytes} B and "
            f"{reduce_bytes} B (one all-gather per unit before forward and before backward, "
            "one reduce-scatter after backward, on the `group` you are given)"
        )
    return _compare_updates(first_step, ref1, model_fn, k, "this group's") or (
        None
        if torch.allclose(mean, torch.tensor(ref.losses, dtype=torch.float64), rtol=1e-4)
        else f"with bf16 parameters the losses are {[round(v, 5) for v in mean.tolist()]}, one "
        f"process doing the same casts gets {[round(v, 5) for v in ref.losses]}"
    )


def _gather_bytes(fsdp, k: int, itemsize: int) -> int:
    """One step's all-gather bytes: every unit twice (forward, backward), the root once."""
    return sum(
        k * sum(p.chunk for p in u.params) * itemsize * (1 if u is fsdp.root else 2)
        for u in fsdp.units
    )


class _AsyncGatherSpy:
    """Around one pre_forward: an async all-gather whose buffer is unpacked before its
    work.wait() is recorded in ``found`` (the gather may still be filling the buffer)."""

    NAMES = ("all_gather_single", "all_gather_into_tensor", "all_gather")

    def __init__(self, unit, found: list) -> None:
        self.unit, self.found, self.pending = unit, found, []

    def __enter__(self) -> "_AsyncGatherSpy":
        self.real = {n: getattr(dist, n) for n in self.NAMES}
        for n, real in self.real.items():
            setattr(dist, n, self._spy(real))
        self.unpack = self.unit.unpack
        self.unit.unpack = self._unpack
        return self

    def _spy(self, real):
        def call(*args, **kwargs):
            work = real(*args, **kwargs)
            if work is None:
                return None
            box = {"waited": False}
            self.pending.append(box)

            class _Work:
                def wait(self, *a, **k):
                    box["waited"] = True
                    return work.wait(*a, **k)

                def __getattr__(self, name):
                    return getattr(work, name)

            return _Work()

        return call

    def _unpack(self, gathered):
        if any(not box["waited"] for box in self.pending) and not self.found:
            self.found.append(
                "you unpacked an async all-gather without wait(): unit.unpack read "
                "the buffer while the gather could still be filling it; call "
                "work.wait() before unpacking (or gather with async_op=False)"
            )
        return self.unpack(gathered)

    def __exit__(self, *exc) -> None:
        for n, real in self.real.items():
            setattr(dist, n, real)
        del self.unit.unpack  # the instance attribute: back to the class's method


def _spied(hooks, found: list):
    """The learner's hooks with their pre_forward watched by _AsyncGatherSpy."""

    class Spied(hooks):
        @staticmethod
        def pre_forward(unit, group):
            with _AsyncGatherSpy(unit, found):
                hooks.pre_forward(unit, group)

    return Spied


def _compare_updates(first_step: dict, ref1, model_fn, k: int, ranks: str) -> str | None:
    """The first SGD step against one process's: its size tells a sum from a mean."""
    start = model_fn().state_dict()
    moved = lambda w: torch.cat([(w[n] - w0).flatten() for n, w0 in start.items()])  # noqa: E731
    got, want = moved(first_step), moved(ref1.state_dict)
    ratio = (got.norm() / want.norm()).item()
    if got.abs().max() == 0:
        return (
            "the weights never moved: the reduced gradients must reach the shards "
            "(unit.accumulate_grads(reduced)) before the optimizer steps"
        )
    if abs(ratio - k) < 1e-2 * k:
        return (
            f"the first SGD step moved the weights {ratio:.3f} x as far as one process "
            f"does: the gradients were SUMMED over {ranks} {k} ranks, not averaged (op=AVG)"
        )
    if abs(ratio * k - 1) < 1e-2 and ranks == "the":  # the whole world: k is the world's size
        return (
            f"the first SGD step moved the weights 1/{k} as far as one process does: you "
            "average twice: op=AVG already divides by the group size, so do not divide "
            "by unit.world again"
        )
    if abs(ratio - 1) > 1e-2:
        return (
            f"the first SGD step moved the weights {ratio:.3f} x as far as one process does "
            f"(over {ranks} {k} ranks): a mean divides by the size of the group you are "
            "given (unit.world, or op=AVG), not by the size of the whole world"
        )
    if not torch.allclose(got, want, rtol=1e-3, atol=1e-5):
        return (
            "the first SGD step has the right size but the wrong direction: is every rank's "
            "chunk of the reduced gradient added to the shards (unit.accumulate_grads)?"
        )
    return None


class _Clock:
    """The minimal timeline ModuleSpans needs (the check keeps no spans)."""

    def now(self) -> float:
        return 0.0

    def add(self, *_a, **_k) -> None:
        pass


def _explain(exc: Exception, sub_group: bool) -> str:
    """One line for an exception raised inside the hooks (no traceback)."""
    text = str(exc)
    if "not allocated" in text or "1-D" in text or "matrix" in text:
        return (
            f"{type(exc).__name__}: {text.splitlines()[0]} (a layer computed without its "
            "full weights: pre_forward must fill them from the gathered buffer with "
            "unit.unpack(...))"
        )
    return raised_in(exc, wrong_group=sub_group)


CONFIGS = (("world of 4, fp32", _config_a), ("groups of 2, bf16/fp32", _config_b))


def check(ctx, hooks) -> Verdict:
    for name, config in CONFIGS:
        found: list[str] = []
        try:
            problem = config(ctx, _spied(hooks, found))
        except NotImplementedError:
            raise  # a stub: "not implemented yet", from the exercise machinery
        except (RuntimeError, ValueError, TypeError, AttributeError) as exc:
            problem = _explain(exc, sub_group=config is _config_b)
        problem = found[0] if found else problem  # the cause, even when luck hid it
        found_any = first_problem(problem)  # over the world: every rank stops together
        if found_any:
            return Verdict.fail(f"{name}, rank {found_any[0]}: {found_any[1]}")
    return Verdict.ok(
        "losses and weights match one process in both configurations; bf16 "
        "all-gathers, fp32 reduce-scatters, each unit freed after its reduction"
    )


# ---- known-wrong answers (tests/test_exercises.py requires every one rejected) ---------------
def gather(unit, group, dtype, on_group: bool = True) -> None:
    """pre_forward's steps with a chosen dtype (and group): the wrong versions' building block."""
    send = unit.local_shards(dtype)
    recv = send.new_empty(unit.world * send.numel())
    dist.all_gather_single(recv, send, group=group if on_group else None)
    unit.unpack(recv)


def reduce(unit, group, dtype, op=dist.ReduceOp.AVG, free: bool = True) -> None:
    """post_backward's steps with a chosen dtype and op, the free optional."""
    send = unit.pack_grads(dtype)
    recv = send.new_empty(send.numel() // unit.world)
    dist.reduce_scatter_single(recv, send, op=op, group=group)
    unit.accumulate_grads(recv)
    if free:
        unit.free()


class WrongNoFree(reference):
    @staticmethod
    def post_backward(unit, group):  # ... and the full parameters stay allocated
        reduce(unit, group, unit.reduce_dtype, free=False)


class WrongSum(reference):
    @staticmethod
    def post_backward(unit, group):
        reduce(unit, group, unit.reduce_dtype, op=dist.ReduceOp.SUM)


class WrongGatherDtype(reference):
    @staticmethod
    def pre_forward(unit, group):  # the shards' own dtype: twice the bytes in bf16
        gather(unit, group, torch.float32)


class WrongReduceDtype(reference):
    @staticmethod
    def post_backward(unit, group):
        reduce(unit, group, unit.param_dtype)


class WrongWorldGroup(reference):
    @staticmethod
    def pre_forward(unit, group):  # the default group: every rank, not this FSDP's
        gather(unit, group, unit.param_dtype, on_group=False)


register(
    Exercise(
        name="fsdp_unit_hooks",
        lab="05_zero_fsdp",
        summary="an FSDP unit's pre-forward gather and post-backward reduce-scatter + free",
        signature=(
            "class with staticmethods pre_forward(unit, group) and post_backward(unit, group)"
        ),
        check=check,
        reference=reference,
        wrong={
            "forgets to free the unit after its reduce-scatter": WrongNoFree,
            "reduce-scatters with SUM (no average)": WrongSum,
            "all-gathers in fp32, casting afterwards": WrongGatherDtype,
            "reduce-scatters in bf16": WrongReduceDtype,
            "ignores the group it is given": WrongWorldGroup,
        },
        world_size=4,
        timeout_s=90.0,
        hint="pre_forward: this rank's shards cast to the compute dtype -> one all-gather into a "
        "buffer K times as long -> unpack. post_backward: the gradients packed in the "
        "reduction dtype -> one reduce-scatter that averages -> accumulate into the shards -> "
        "free. Every collective takes group=group.",
    )
)
