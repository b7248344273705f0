"""The rules a DP x TP x PP layout must satisfy, shared by ``planner.evaluate`` and its fast
path ``_planner_cache`` (so both report the same problems in the same words). Labs 08, 12."""
from __future__ import annotations

from math import ceil

from lab_utils.calc._check import boolean, instance, number, pos_int
from lab_utils.calc.hardware import Cluster
from lab_utils.calc.memory import recipe as _recipe
from lab_utils.calc.params import ModelConfig, param_count


MAX_WORLD = 2**20  # plan() enumerates the divisors of the world size; a million GPUs is plenty


def kv_heads_messages(cfg: ModelConfig, tp: int) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """(problems, warnings) of splitting grouped-query attention's K/V heads over ``tp``.

    Each TP rank computes whole query heads and needs the K/V heads they share. tp | n_kv:
    fine. tp a multiple of n_kv: every K/V head must be REPLICATED on tp/n_kv ranks (extra
    memory and compute; Megatron-LM refuses it, it requires n_kv_heads % tp == 0): a warning.
    Neither: no even split exists, a problem. Llama-2-70B has 8 K/V heads, so TP=16 replicates.
    """
    kv = cfg.kv_heads
    if kv % tp == 0:
        return (), ()
    if tp % kv == 0:
        return (), (f"TP={tp} exceeds the {kv} key/value heads of grouped-query attention: each "
                    f"K/V head is replicated on {tp // kv} ranks (Megatron-LM requires "
                    "n_kv_heads % tp == 0); activations and K/V weights are larger than shown",)
    return (f"TP={tp} does not divide the {kv} key/value heads (grouped-query attention) and "
            f"is not a multiple of them: the K/V heads cannot be split evenly; use a TP that "
            f"divides {kv}",), ()


def _check_inputs(cfg: object, cluster: object, global_batch: object, seq_len: object,
                  recipe: object, allow_tp_across_nodes: object,
                  compute_efficiency: object) -> None:
    instance("cfg", cfg, ModelConfig, "calc.preset('llama2-70b')")
    instance("cluster", cluster, Cluster, "calc.dgx_h100(32)")
    pos_int("global_batch", global_batch)
    pos_int("seq_len", seq_len)
    _recipe(recipe)  # type: ignore[arg-type]
    boolean("allow_tp_across_nodes", allow_tp_across_nodes)
    number("compute_efficiency", compute_efficiency, 0, 1, lo_open=True,
           expected="a fraction in (0, 1] of the peak FLOP/s",
           hint="0.5 means half the peak; more than 1 would beat the hardware")


def _stage_params(cfg: ModelConfig, tp: int, pp: int) -> float:
    """Parameters on one GPU of the fullest stage: L/p layers (TP-split) plus the embedding
    on the first stage or the head on the last one (vocab-parallel, split by tp)."""
    pc = param_count(cfg)
    layers = ceil(cfg.n_layers / pp) * pc.per_layer
    if pp == 1:
        return (layers + pc.embedding + pc.head) / tp
    # A tied head on a different stage than the embedding needs its own copy (Megatron).
    head = cfg.vocab_size * cfg.hidden if cfg.tied_embeddings else pc.head
    return (layers + max(pc.embedding, head)) / tp
