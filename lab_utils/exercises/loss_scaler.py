"""Exercise "loss_scaler" (lab 02): the step of a dynamic loss scaler, checked against
``torch.amp.GradScaler``.

After ``(loss * state.scale).backward()`` every gradient is S times too large (or inf/NaN when
the scaled backward overflowed). The learner writes

    fn(optimizer, state: ScalerState) -> bool        # True if the optimizer stepped

which must: skip the step when any gradient is inf/NaN (and multiply the scale by
``backoff_factor``, restarting the count of good steps); otherwise divide the gradients by the
scale that produced them, clip them if ``state.max_norm`` is set, step, and after
``growth_interval`` good steps in a row multiply the scale by ``growth_factor``. This is what
GradScaler's unscale_ / step / update do (Micikevicius et al. 2018, Sec. 3.2).

The check trains a small linear model for a dozen steps with overflows injected at chosen
steps, once with the learner's step and once with GradScaler, under three configurations (SGD
with different growth intervals and overflow patterns, SGD with momentum and clipping, Adam),
and compares the scale and the weights after every step. Each run alone lets some mistake
through (with clipping a forgotten unscale is invisible: the clipped norm is max_norm either
way; a run without clipping cannot see clipping done in the wrong order); the three together
reject every known-wrong version.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from lab_utils.exercises._core import Exercise, Verdict, register


@dataclass
class ScalerState:
    scale: float
    growth_factor: float = 2.0
    backoff_factor: float = 0.5
    growth_interval: int = 2000
    good_steps: int = 0  # good steps since the scale last changed
    max_norm: float | None = None  # clip the UNSCALED gradient norm to this, if set


def scaler_step(optimizer, state: ScalerState) -> bool:
    params = [p for group in optimizer.param_groups for p in group["params"] if p.grad is not None]
    grads = [p.grad for p in params]
    if not all(torch.isfinite(g).all() for g in grads):  # the scaled backward overflowed
        state.scale *= state.backoff_factor  # skip the step, back off
        state.good_steps = 0
        return False
    for g in grads:
        g.div_(state.scale)  # unscale with the scale USED
    if state.max_norm is not None:  # clip the true gradient
        torch.nn.utils.clip_grad_norm_(params, state.max_norm)
    optimizer.step()
    state.good_steps += 1
    if state.good_steps == state.growth_interval:  # a run of clean steps: grow
        state.scale *= state.growth_factor
        state.good_steps = 0
    return True


# ----------------------------------------------------------------------------- wrong versions
def _params(optimizer):
    return [p for g in optimizer.param_groups for p in g["params"] if p.grad is not None]


def _finite(optimizer) -> bool:
    return all(torch.isfinite(g).all() for g in [p.grad for p in _params(optimizer)])


def _overflowed(optimizer, state: ScalerState, restart_count: bool = True) -> bool:
    if _finite(optimizer):
        return False
    state.scale *= state.backoff_factor
    if restart_count:
        state.good_steps = 0
    return True


def _grow(state: ScalerState) -> None:
    state.good_steps += 1
    if state.good_steps == state.growth_interval:
        state.scale *= state.growth_factor
        state.good_steps = 0


def _clip_step(optimizer, state: ScalerState) -> None:
    if state.max_norm is not None:
        torch.nn.utils.clip_grad_norm_(_params(optimizer), state.max_norm)
    optimizer.step()


def wrong_no_unscale(optimizer, state):
    """The gradients were never divided by the scale: the step used gradients S times too
    large."""
    if _overflowed(optimizer, state):
        return False
    _clip_step(optimizer, state)
    _grow(state)
    return True


def wrong_steps_on_inf(optimizer, state):
    """A step with inf/NaN gradients was applied: the weights are no longer finite. On
    overflow, skip the optimizer step entirely."""
    finite = _finite(optimizer)
    for g in [p.grad for p in _params(optimizer)]:
        g.div_(state.scale)
    _clip_step(optimizer, state)
    if finite:
        _grow(state)
    else:
        state.scale *= state.backoff_factor
        state.good_steps = 0
    return True


def wrong_never_grows(optimizer, state):
    """The scale never grows back after a run of good steps: it only falls, and small
    gradients underflow again."""
    if _overflowed(optimizer, state, restart_count=False):
        return False
    for g in [p.grad for p in _params(optimizer)]:
        g.div_(state.scale)
    _clip_step(optimizer, state)
    return True


def wrong_keeps_count(optimizer, state):
    """The count of good steps was not restarted by an overflow, so the scale grew too soon
    after one."""
    if _overflowed(optimizer, state, restart_count=False):
        return False
    for g in [p.grad for p in _params(optimizer)]:
        g.div_(state.scale)
    _clip_step(optimizer, state)
    _grow(state)
    return True


def wrong_divides_twice(optimizer, state):
    """The gradients were divided by the scale twice: the updates are S times too small."""
    if _overflowed(optimizer, state):
        return False
    for g in [p.grad for p in _params(optimizer)]:
        g.div_(state.scale).div_(state.scale)
    _clip_step(optimizer, state)
    _grow(state)
    return True


def wrong_clip_before_unscale(optimizer, state):
    """The gradients were clipped while still scaled: the norm compared with max_norm was S
    times too big."""
    if _overflowed(optimizer, state):
        return False
    if state.max_norm is not None:
        torch.nn.utils.clip_grad_norm_(_params(optimizer), state.max_norm)
    for g in [p.grad for p in _params(optimizer)]:
        g.div_(state.scale)
    optimizer.step()
    _grow(state)
    return True


def wrong_update_then_unscale(optimizer, state):
    """The gradients were unscaled with the NEW scale: unscale with the scale that multiplied
    this backward, then update it."""
    if _overflowed(optimizer, state):
        return False
    _grow(state)
    for g in [p.grad for p in _params(optimizer)]:
        g.div_(state.scale)
    _clip_step(optimizer, state)
    return True


WRONG = {
    "forgets to unscale before stepping": wrong_no_unscale,
    "steps even when a gradient is inf/NaN": wrong_steps_on_inf,
    "never grows the scale": wrong_never_grows,
    "does not restart the growth count after an overflow": wrong_keeps_count,
    "divides by the scale twice": wrong_divides_twice,
    "clips before unscaling": wrong_clip_before_unscale,
    "updates the scale before unscaling": wrong_update_then_unscale,
}


# ----------------------------------------------------------------------------- the grader
CASES = (  # name, optimizer, init scale, growth, backoff, interval, max_norm, overflow steps
    (
        "SGD, growth every 3 good steps, overflows at steps 4 and 5",
        "sgd",
        2.0**10,
        2.0,
        0.5,
        3,
        None,
        (4, 5),
    ),
    (
        "SGD + momentum, clipping at 0.5, growth x4 every 2 steps, backoff x0.25, overflows at "
        "steps 1 and 6",
        "momentum",
        2.0**16,
        4.0,
        0.25,
        2,
        0.5,
        (1, 6),
    ),
    (
        "Adam, growth every 4 steps, overflows at steps 0, 5 and 9",
        "adam",
        2.0**8,
        2.0,
        0.5,
        4,
        None,
        (0, 5, 9),
    ),
)
STEPS = 12


def _setup(opt_name: str):
    g = torch.Generator().manual_seed(0)
    model = nn.Linear(4, 2)
    with torch.no_grad():
        model.weight.copy_(torch.randn(2, 4, generator=g))
        model.bias.copy_(torch.randn(2, generator=g))
    if opt_name == "adam":
        return model, torch.optim.Adam(model.parameters(), lr=0.05)
    momentum = 0.9 if opt_name == "momentum" else 0.0
    return model, torch.optim.SGD(model.parameters(), lr=0.05, momentum=momentum)


def _loss(model, step: int, overflow: tuple) -> torch.Tensor:
    g = torch.Generator().manual_seed(100 + step)
    x, y = torch.randn(8, 4, generator=g), torch.randn(8, 2, generator=g)
    if step in overflow:
        x[0, 0] = float("inf")  # as if the scaled backward had overflowed
    return nn.functional.mse_loss(model(x), y)


def _flat(model) -> torch.Tensor:
    return torch.cat([p.detach().reshape(-1) for p in model.parameters()]).clone()


def trajectory(fn, case, returned: list | None = None) -> list[tuple[float, torch.Tensor]]:
    """(scale, weights) after each step with ``fn`` as the scaler step; ``returned`` collects
    what fn returned at each step."""
    _, opt_name, s0, growth, backoff, interval, max_norm, overflow = case
    model, opt = _setup(opt_name)
    state = ScalerState(s0, growth, backoff, interval, 0, max_norm)
    out = []
    for step in range(STEPS):
        opt.zero_grad()
        (_loss(model, step, overflow) * state.scale).backward()
        stepped = fn(opt, state)
        if returned is not None:
            returned.append(stepped)
        out.append((float(state.scale), _flat(model)))
    return out


def gradscaler_trajectory(case) -> list[tuple[float, torch.Tensor]]:
    """The same run with torch.amp.GradScaler: the behaviour to match."""
    _, opt_name, s0, growth, backoff, interval, max_norm, overflow = case
    model, opt = _setup(opt_name)
    scaler = torch.amp.GradScaler(
        "cpu", init_scale=s0, growth_factor=growth, backoff_factor=backoff, growth_interval=interval
    )
    out = []
    for step in range(STEPS):
        opt.zero_grad()
        scaler.scale(_loss(model, step, overflow)).backward()
        scaler.unscale_(opt)
        if max_norm is not None:
            torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
        scaler.step(opt)
        scaler.update()
        out.append((float(scaler.get_scale()), _flat(model)))
    return out


def _first_difference(got, want) -> str | None:
    for step, ((s, w), (s_ref, w_ref)) in enumerate(zip(got, want)):
        if s != s_ref:
            return f"after step {step} the scale is {s:g}, GradScaler's is {s_ref:g}"
        if not torch.allclose(w, w_ref, rtol=1e-5, atol=1e-7, equal_nan=True):
            return (
                f"after step {step} the weights differ from GradScaler's run (max diff "
                f"{(w - w_ref).abs().max().item():.3g})"
            )
    return None


def check(ctx, fn) -> Verdict:
    for case in CASES:
        returned: list = []
        got = trajectory(fn, case, returned)
        problem = _first_difference(got, gradscaler_trajectory(case))
        if problem:
            return Verdict.fail(f"{case[0]}: {problem}. " + _why(got, case))
        problem = _wrong_return(returned, case[-1])
        if problem:
            return Verdict.fail(f"{case[0]}: {problem}")
    return Verdict.ok(
        "the scale and the weights match torch.amp.GradScaler after every step, "
        f"in all {len(CASES)} runs (overflows, growth, clipping, SGD and Adam)"
    )


def _wrong_return(returned: list, overflow: tuple) -> str | None:
    """The bool must say whether the optimizer stepped (a training loop counts skipped steps
    with it, and GradScaler's own step returns None when it skipped)."""
    for step, value in enumerate(returned):
        if not isinstance(value, bool):
            return (
                f"step {step} returned {value!r}, not a bool: return True when the "
                "optimizer stepped, False when the step was skipped"
            )
        if value != (step not in overflow):
            what = "overflowed and was skipped" if step in overflow else "was a clean step"
            return (
                f"step {step} {what}, but your function returned {value}: the scale and "
                "the weights are right, but the bool says whether the optimizer stepped "
                "(False on a skipped step, True on a clean one)"
            )
    return None


def _why(got, case) -> str:
    """Name the misconception whose run this one reproduces."""
    for wrong_fn in WRONG.values():  # each wrong version's docstring names its mistake
        if _first_difference(got, trajectory(wrong_fn, case)) is None:
            return " ".join(wrong_fn.__doc__.split())
    if any(not torch.isfinite(w).all() for _, w in got):
        return "The weights stopped being finite: an inf/NaN step was applied."
    return (
        "Compare, step by step: skip + back off on inf/NaN; otherwise unscale with the "
        "scale that was used, clip, step, count, and grow after growth_interval good steps."
    )


register(
    Exercise(
        name="loss_scaler",
        lab="02_baselines",
        summary=(
            "a dynamic loss scaler's step: skip/back off on overflow, unscale, clip, step, grow"
        ),
        signature="fn(optimizer, state: ScalerState) -> bool (stepped)",
        check=check,
        reference=scaler_step,
        wrong=WRONG,
        world_size=1,
        timeout_s=60.0,
        hint="what must the gradients be divided by, and WHEN, relative to clipping and to "
        "changing the scale? What happens to the optimizer on a step whose gradients are "
        "not finite, and what restarts the count of good steps?",
    )
)
