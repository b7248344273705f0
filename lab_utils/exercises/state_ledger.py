"""Exercise "state_ledger" (lab 01): the bytes of model state, bucket by bucket, per recipe.

The learner writes

    fn(model: nn.Module, recipe: str) -> {"params": B, "grads": B, "master": B, "optimizer": B}

the bytes a training recipe keeps for ``model``: its weights, their gradients, an fp32 master
copy of the weights (if the recipe keeps one) and the optimizer's state tensors. ``model`` is
handed over in fp32; the recipe says which dtypes training uses:

    fp32_adam          fp32 weights, torch.optim.AdamW
    mixed_adam         bf16 weights; the optimizer keeps fp32 master weights + AdamW on them
    amp_adam           fp32 weights, forward under torch.autocast(bf16), torch.optim.AdamW
    bf16_adam          bf16 weights, torch.optim.AdamW straight on them (no master)
    fp32_sgd_momentum  fp32 weights, torch.optim.SGD(momentum=0.9)

Checked on two TinyGPTs (30k parameters untied; 90k with the embedding tied to the output
head) x five recipes, against BOTH ``calc.model_state_memory`` and the bytes measured after
one real step of the recipe (``experiments.lab01.measure_recipe``). A wrong answer is named
by its misconception: one Adam moment, mixed precision "halving" the 16 B, a forgotten master
copy, 16-bit gradients under autocast, fp32 moments for bf16 weights, SGD counted like Adam,
a tied weight counted twice.
"""

from __future__ import annotations

import math
from functools import lru_cache
from typing import Any, Mapping

from lab_utils.exercises._core import Exercise, Verdict, register

BUCKETS = ("params", "grads", "master", "optimizer")
CONFIGS = (  # (label, GPTConfig kwargs)
    ("TinyGPT 2 layers, d_model 32, untied", dict()),
    (
        "TinyGPT 3 layers, d_model 48, embedding tied to the output head",
        dict(n_layer=3, d_model=48, n_head=4, vocab_size=96, tie_weights=True),
    ),
)


def state_ledger(model, recipe: str) -> dict[str, int]:
    """Bytes of params, grads, fp32 master weights and optimizer state for a recipe."""
    n = sum(p.numel() for p in model.parameters())  # each tensor once: tied weights too
    fp32, bf16 = 4, 2
    weights = bf16 if recipe in ("mixed_adam", "bf16_adam") else fp32  # autocast: fp32 weights
    grads = weights  # .grad has its parameter's dtype
    master = fp32 if recipe == "mixed_adam" else 0  # the fp32 copy the update is applied to
    buffers = 1 if recipe == "fp32_sgd_momentum" else 2  # momentum | Adam m, v
    state = (
        fp32 if recipe == "mixed_adam" else weights
    )  # torch makes state like the param it updates
    return {
        "params": n * weights,
        "grads": n * grads,
        "master": n * master,
        "optimizer": n * buffers * state,
    }


# ----------------------------------------------------------------------------- wrong versions
def _ledger(
    model, per_param: dict[str, tuple[int, int, int, int]], recipe: str, n: int | None = None
) -> dict[str, int]:
    n = sum(p.numel() for p in model.parameters()) if n is None else n
    return dict(zip(BUCKETS, (n * b for b in per_param[recipe])))


RIGHT = {
    "fp32_adam": (4, 4, 0, 8),
    "mixed_adam": (2, 2, 4, 8),
    "amp_adam": (4, 4, 0, 8),
    "bf16_adam": (2, 2, 0, 4),
    "fp32_sgd_momentum": (4, 4, 0, 4),
}


def wrong_one_moment(model, recipe):
    """Adam's state counted as one buffer (like SGD momentum)."""
    return _ledger(
        model,
        {
            **RIGHT,
            "fp32_adam": (4, 4, 0, 4),
            "mixed_adam": (2, 2, 4, 4),
            "amp_adam": (4, 4, 0, 4),
            "bf16_adam": (2, 2, 0, 2),
        },
        recipe,
    )


def wrong_mixed_halves(model, recipe):
    """Mixed precision taken as 'everything in 16 bits': 2 + 2 + 4 = 8 B."""
    return _ledger(model, {**RIGHT, "mixed_adam": (2, 2, 0, 4)}, recipe)


def wrong_forgot_master(model, recipe):
    """Mixed precision with 16-bit weights and fp32 m, v, but no fp32 master copy."""
    return _ledger(model, {**RIGHT, "mixed_adam": (2, 2, 0, 8)}, recipe)


def wrong_autocast_16bit_grads(model, recipe):
    """Under torch.autocast the gradients are taken to be bf16."""
    return _ledger(model, {**RIGHT, "amp_adam": (4, 2, 0, 8)}, recipe)


def wrong_bf16_fp32_moments(model, recipe):
    """AdamW on bf16 weights assumed to keep fp32 m and v."""
    return _ledger(model, {**RIGHT, "bf16_adam": (2, 2, 0, 8)}, recipe)


def wrong_sgd_like_adam(model, recipe):
    """SGD with momentum booked like Adam (two buffers)."""
    return _ledger(model, {**RIGHT, "fp32_sgd_momentum": (4, 4, 0, 8)}, recipe)


def wrong_tied_twice(model, recipe):
    """Counts every parameter NAME, so a tied embedding/head weight is counted twice."""
    n = sum(p.numel() for _, p in model.named_parameters(remove_duplicate=False))
    return _ledger(model, RIGHT, recipe, n=n)


# ----------------------------------------------------------------------------- the grader
@lru_cache(maxsize=None)
def _truth(k: int, recipe: str) -> tuple[int, dict, dict]:
    """(N, calculator bytes, measured bytes) of config k under a recipe (one real step)."""
    from lab_utils.calc import model_state_memory
    from lab_utils.experiments.lab01 import measure_recipe
    from lab_utils.models import GPTConfig, TinyGPT, count_params

    cfg = GPTConfig(**CONFIGS[k][1])
    n = count_params(TinyGPT(cfg))
    calc = model_state_memory(n, recipe).as_dict()
    measured = measure_recipe(cfg, recipe)
    return n, calc, {b: measured[b] for b in BUCKETS}


def _as_ledger(got: Any) -> dict[str, float] | str:
    """The learner's answer as {bucket: bytes}, or a sentence saying what is wrong with it."""
    if got is None:
        return "the function returned None: return a dict with the four buckets"
    get = got.get if isinstance(got, Mapping) else (lambda k, d=None: getattr(got, k, d))
    out = {}
    for b in BUCKETS:
        v = get(b, None)
        if v is None:
            return f"the answer has no {b!r} entry: return {{{', '.join(map(repr, BUCKETS))}}}"
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
            v = getattr(v, "item", lambda: v)()  # a 0-dim tensor is fine
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
                return f"{b!r} must be a number of bytes, got {v!r}"
        out[b] = float(v)
    return out


def _why(recipe: str, got: dict, exp: dict, n: int, tied: bool) -> str:
    """Name the misconception from the bytes per parameter the answer implies."""
    per = {b: got[b] / n for b in BUCKETS}
    ratios = {got[b] / exp[b] for b in BUCKETS if exp[b]}
    if len(ratios) == 1 and all(got[b] == 0 for b in BUCKETS if not exp[b]):
        if tied:
            return (
                "every bucket is off by the same factor: the parameter count. This model's "
                "output head IS its token embedding (one tensor in two places): count each "
                "parameter tensor once, e.g. model.parameters(), not the state_dict or names."
            )
        return (
            "every bucket is off by the same factor: count the parameters with model.parameters()."
        )
    adam = recipe != "fp32_sgd_momentum"
    if recipe == "mixed_adam":
        if per["master"] == 0 and per["optimizer"] == 12:
            return (
                "the fp32 master copy is a bucket of its own: 4 B in 'master', and m and v "
                "(8 B) in 'optimizer', not 12 B lumped into the optimizer."
            )
        if per["master"] == 0 and per["optimizer"] == 4:
            return (
                "mixed precision does not halve the 16 B: only the weights and gradients that "
                "forward/backward use are 16-bit; the optimizer adds an fp32 master copy "
                "(4 B) and keeps m and v in fp32 (8 B)."
            )
        if per["master"] == 0:
            return (
                "mixed precision keeps an fp32 MASTER copy of every weight (4 B) in the "
                "optimizer: an update applied to bf16 weights would round away (lab 02)."
            )
        if per["params"] != 2 or per["grads"] != 2:
            return "in this recipe the model itself is bf16: its weights and .grad are 2 B each."
    if recipe == "amp_adam":
        if per["grads"] == 2:
            return (
                "torch.autocast casts to bf16 inside each operation, but the parameters stay "
                "fp32, so their .grad is fp32 too: 4 B, not 2."
            )
        if per["params"] != 4 or per["master"]:
            return (
                "torch.autocast leaves the parameters in fp32 (4 B) and needs no master copy: "
                "the weights already are the fp32 copy."
            )
    if recipe == "bf16_adam":
        if per["master"]:
            return "this recipe keeps no master copy: AdamW updates the bf16 weights directly."
        if per["optimizer"] == 8:
            return (
                "torch.optim.AdamW creates m and v with zeros_like(param): bf16 weights get "
                "bf16 moments, 2 + 2 B, not fp32."
            )
    if adam and per["optimizer"] * 2 == exp["optimizer"] / n:
        return "Adam keeps TWO moments per parameter (m and v), not one."
    if not adam and per["optimizer"] == 8:
        return "SGD with momentum keeps ONE buffer per parameter (4 B), not Adam's two."
    if not adam and per["optimizer"] == 0:
        return "momentum is a buffer per parameter (4 B in fp32); only plain SGD keeps no state."
    wrong = [b for b in BUCKETS if got[b] != exp[b]]
    return "check the bucket(s) " + ", ".join(wrong) + ": which dtype, how many copies?"


def check(ctx, fn) -> Verdict:
    from lab_utils.experiments.lab01 import RECIPE_NAMES
    from lab_utils.models import GPTConfig, TinyGPT

    for k, (label, kwargs) in enumerate(CONFIGS):
        for recipe in RECIPE_NAMES:
            n, calc, measured = _truth(k, recipe)
            if calc != measured:  # the grader's own check: calculator == measurement
                return Verdict.fail(
                    f"{label}, {recipe}: calculator {calc} != measured "
                    f"{measured}; please report this"
                )
            got = _as_ledger(fn(TinyGPT(GPTConfig(**kwargs)), recipe))
            if isinstance(got, str):
                return Verdict.fail(f"{label}, {recipe}: {got}")
            if any(abs(got[b] - calc[b]) > 0.5 for b in BUCKETS):
                table = "; ".join(
                    f"{b}: yours {got[b] / n:g}, calc and measured {calc[b] / n:g}" for b in BUCKETS
                )
                return Verdict.fail(
                    f"{label} (N = {n:,}), recipe {recipe}: "
                    f"{_why(recipe, got, calc, n, kwargs.get('tie_weights', False))}"
                    f"  [bytes per parameter - {table}]"
                )
    return Verdict.ok(
        "every bucket matches the calculator and the bytes measured after a real "
        "step, for 5 recipes on 2 models (one with tied weights)"
    )


register(
    Exercise(
        name="state_ledger",
        lab="01_memory",
        summary="bytes of weights, grads, fp32 master and optimizer state for a training recipe",
        signature="fn(model, recipe: str) -> {'params', 'grads', 'master', 'optimizer'} (bytes)",
        check=check,
        reference=state_ledger,
        wrong={
            "Adam keeps one moment": wrong_one_moment,
            "mixed precision halves everything": wrong_mixed_halves,
            "mixed precision without the master copy": wrong_forgot_master,
            "16-bit gradients under autocast": wrong_autocast_16bit_grads,
            "fp32 moments for bf16 weights": wrong_bf16_fp32_moments,
            "SGD momentum counted like Adam": wrong_sgd_like_adam,
            "tied weight counted twice": wrong_tied_twice,
        },
        world_size=1,
        timeout_s=60.0,
        hint="for each bucket ask: which dtype does THIS recipe use, and how many copies per "
        "parameter? torch makes optimizer state like the tensor it updates. Count each "
        "parameter tensor once.",
    )
)
