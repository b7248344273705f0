"""Model-state memory: weights, gradients, optimizer state (labs 01, 02, 05, 08, 12).

Model state is FIXED per parameter (it does not depend on the batch); activations are the
variable part (see ``activations.py``). A ``Recipe`` says how many bytes each parameter costs
in each bucket; ``model_state_memory`` shards those buckets the way ZeRO stage 0-3 does and
divides the parameters among tensor- and pipeline-parallel ranks.

Units: BYTES. The ZeRO paper's GB are decimal (1e9); use ``units.GB``.
"""

from __future__ import annotations

from dataclasses import dataclass

from lab_utils.calc._check import (
    boolean,
    byte_count,
    choice,
    nonneg_num,
    pos_int,
    sequence,
    text,
)
from lab_utils.calc._check import (
    zero_stage as _zero_stage,
)


@dataclass(frozen=True)
class Recipe:
    """Bytes per parameter in each bucket of model state.

    ``weights``: the copy the forward pass uses; ``grads``: the gradient buffer the backward
    pass writes; ``master``: fp32 copy of the weights kept by the optimizer (mixed precision);
    ``optimizer``: optimizer states (Adam m and v, SGD momentum; and an fp32 gradient copy
    when the optimizer keeps one). ZeRO-1 shards master + optimizer.
    """

    name: str
    weights: float
    grads: float
    master: float
    optimizer: float
    source: str

    def __post_init__(self) -> None:
        text("Recipe.name", self.name)
        for field in ("weights", "grads", "master", "optimizer"):
            nonneg_num(f"Recipe.{field}", getattr(self, field))
        text("Recipe.source", self.source)

    @property
    def per_param(self) -> float:
        return self.weights + self.grads + self.master + self.optimizer


RECIPES: dict[str, Recipe] = {
    # ZeRO (Rajbhandari et al. 2020) Sec. 3.1: fp32 Adam keeps 4 B weights + 4 B grads +
    # 8 B (m, v) = 16 B/param.
    "fp32_adam": Recipe(
        "fp32_adam", 4, 4, 0, 8, "Rajbhandari et al. 2020 Sec. 3.1; Kingma & Ba 2015"
    ),
    # ZeRO Sec. 3.1: 2 + 2 + K with K = 12 (fp32 master, m, v) = 16 B/param. Same total as
    # fp32 Adam: mixed precision saves activation memory and time, not model state.
    "mixed_adam": Recipe(
        "mixed_adam",
        2,
        2,
        4,
        8,
        "Rajbhandari et al. 2020 Sec. 3.1; Micikevicius et al. 2018; "
        "EleutherAI 'Transformer Math 101' (2023)",
    ),
    # Megatron-LM distributed-optimizer doc (docs/distrib_optimizer.md): fp16 params and
    # grads plus an fp32 copy of the grads for accumulation = 20 B/param. Megatron shards the
    # fp32 grad copy together with the optimizer ("4 + 16/d"), so we book it as optimizer.
    "mixed_adam_fp32_grad_copy": Recipe(
        "mixed_adam_fp32_grad_copy",
        2,
        2,
        4,
        4 + 8,
        "Megatron-LM distributed optimizer table: 20, 4 + 16/d",
    ),
    # bf16 params with grads accumulated directly in fp32 (Megatron main_grad): 2 + 4 + 12
    # = 18 B/param; the fp32 grads are model grads here, not sharded by ZeRO-1 ("6 + 12/d").
    "mixed_adam_fp32_grads": Recipe(
        "mixed_adam_fp32_grads", 2, 4, 4, 8, "Megatron-LM distributed optimizer table: 18, 6 + 12/d"
    ),
    # Plain fp32 SGD with momentum: 4 B weights + 4 B grads + 4 B momentum = 12 B/param.
    "fp32_sgd_momentum": Recipe(
        "fp32_sgd_momentum",
        4,
        4,
        0,
        4,
        "SGD with one fp32 momentum buffer (PyTorch torch.optim.SGD)",
    ),
    # torch.autocast (AMP): the parameters stay fp32 and each op casts them to bf16/fp16 on the
    # fly, so .grad is fp32 and no master copy is needed: the same 16 B as fp32 Adam.
    "amp_adam": Recipe(
        "amp_adam", 4, 4, 0, 8, "PyTorch AMP docs (torch.autocast keeps fp32 parameters); lab 01"
    ),
    # Pure bf16: torch.optim.AdamW on bf16 parameters makes m and v like the parameter (bf16)
    # and keeps no master copy: 2 + 2 + 2 + 2 = 8 B/param, at the price of small updates
    # rounding away (lab 02; Kahan summation or stochastic rounding are the usual remedies).
    "bf16_adam": Recipe(
        "bf16_adam", 2, 2, 0, 4, "torch.optim.AdamW state is zeros_like(param); lab 01"
    ),
    # 8-bit Adam (Dettmers et al. 2022, "8-bit Optimizers via Block-wise Quantization"):
    # m and v stored in 8 bits = 2 B/param; we keep bf16 weights/grads and the fp32 master
    # (2 + 2 + 4 + 2 = 10 B). The fp32 scale per block of 2048 values (block-wise) adds
    # ~0.004 B/param and is ignored.
    "mixed_adam_8bit": Recipe(
        "mixed_adam_8bit", 2, 2, 4, 2, "Dettmers et al. 2022; Transformer Math 101 (6 B optim.)"
    ),
}


def resolve_recipe(recipe: str | Recipe) -> Recipe:
    """Resolve a recipe by name (see ``RECIPES``) or pass a ``Recipe`` through. Labs 01, 05."""
    if isinstance(recipe, Recipe):
        return recipe
    choice("recipe", recipe, list(RECIPES))
    return RECIPES[recipe]  # type: ignore[index]


@dataclass(frozen=True)
class ModelStateMemory:
    """Per-rank model-state bytes. ``total`` is device memory; ``host`` is CPU memory used by
    optimizer offload (0 without offload). ``n_params`` is the parameters this rank computes
    with (after TP/PP splitting, before ZeRO sharding)."""

    params: float
    grads: float
    master: float
    optimizer: float
    host: float
    n_params: float

    @property
    def total(self) -> float:
        return self.params + self.grads + self.master + self.optimizer

    def as_dict(self) -> dict[str, float]:
        return {
            "params": self.params,
            "grads": self.grads,
            "master": self.master,
            "optimizer": self.optimizer,
        }


def model_state_memory(
    n_params: float,
    recipe_name: str | Recipe = "mixed_adam",
    zero_stage: int = 0,
    dp: int = 1,
    tp: int = 1,
    pp: int = 1,
    offload_optimizer: bool = False,
) -> ModelStateMemory:
    """Model-state bytes on ONE rank.

    With Psi = n_params / (tp * pp) parameters on this rank and K = master + optimizer bytes
    (12 for mixed-precision Adam), ZeRO over ``dp`` ranks gives (Rajbhandari et al. 2020,
    Sec. 5 and Fig. 1, mixed-precision Adam):

        stage 0 (DDP)   : (2 + 2 + K) Psi                 = 16 Psi
        stage 1 (P_os)  : (2 + 2) Psi + K Psi / dp        = 4 Psi + 12 Psi / dp
        stage 2 (P_os+g): 2 Psi + (2 + K) Psi / dp        = 2 Psi + 14 Psi / dp
        stage 3 (P_os+g+p): (2 + 2 + K) Psi / dp          = 16 Psi / dp

    7.5B params, dp=64 -> 120 / 31.4 / 16.6 / 1.9 GB (Fig. 1). TP/PP split is approximated as
    an even n_params / (tp * pp); ``planner`` adds the embedding imbalance of the first stage.
    ``offload_optimizer`` moves master + optimizer state to host memory (ZeRO-Offload, Ren et
    al. 2021); the host copy is still sharded over dp when zero_stage >= 1.
    Introduced in lab 01 (stage 0), sharded in lab 05, combined with TP/PP in lab 08.
    """
    n_params = nonneg_num("n_params", n_params)
    r = resolve_recipe(recipe_name)
    zero_stage = _zero_stage(zero_stage)
    dp, tp, pp = pos_int("dp", dp), pos_int("tp", tp), pos_int("pp", pp)
    offload_optimizer = boolean("offload_optimizer", offload_optimizer)
    psi = n_params / (tp * pp)
    # Stage k shards everything from "optimizer" up to its own bucket; the rest is replicated.
    opt_div = dp if zero_stage >= 1 else 1
    grad_div = dp if zero_stage >= 2 else 1
    param_div = dp if zero_stage >= 3 else 1
    master, optim = r.master * psi / opt_div, r.optimizer * psi / opt_div
    host = 0.0
    if offload_optimizer:
        host, master, optim = master + optim, 0.0, 0.0
    return ModelStateMemory(
        params=r.weights * psi / param_div,
        grads=r.grads * psi / grad_div,
        master=master,
        optimizer=optim,
        host=host,
        n_params=psi,
    )


def zero_memory_table(
    n_params: float,
    dps: tuple[int, ...] = (1, 4, 16, 64, 256, 1024),
    recipe_name: str | Recipe = "mixed_adam",
) -> dict[int, tuple[float, ...]]:
    """Per-rank bytes for stages (1, 2, 3) at each dp degree: ZeRO paper Table 1 layout
    (Rajbhandari et al. 2020, Table 1, columns P_os, P_os+g, P_os+g+p). Lab 05."""
    sequence("dps", dps, pos_int, min_len=1)
    return {
        dp: tuple(model_state_memory(n_params, recipe_name, s, dp).total for s in (1, 2, 3))
        for dp in dps
    }


def max_params_that_fit(
    gpu_mem_bytes: float,
    recipe_name: str | Recipe = "mixed_adam",
    zero_stage: int = 0,
    dp: int = 1,
    tp: int = 1,
    pp: int = 1,
    reserved_bytes: float = 0.0,
) -> float:
    """Largest parameter count whose model state fits in ``gpu_mem_bytes - reserved_bytes``.

    Model state is linear in n_params, so this is budget / (bytes per parameter on one rank).
    Ignores activations (put them in ``reserved_bytes``). Lab 05 (what ZeRO buys), lab 12.
    """
    budget = byte_count("gpu_mem_bytes", gpu_mem_bytes) - nonneg_num(
        "reserved_bytes", reserved_bytes
    )
    if budget <= 0:
        raise ValueError("reserved_bytes leaves no memory for model state; lower it")
    per_param = model_state_memory(1.0, recipe_name, zero_stage, dp, tp, pp).total
    return budget / per_param
