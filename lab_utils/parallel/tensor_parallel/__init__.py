"""Tensor parallelism, Megatron-style (lab 06).

    layers.py   ColumnParallelLinear, RowParallelLinear, TPMLP, TPAttention,
                VocabParallelEmbedding, parallelize_block, tensor_parallelize
    comm.py     the f / g operators, the sequence-parallel gathers and reduce-scatters,
                vocab-parallel cross-entropy: every collective TP makes, one autograd function each
    rng.py      dropout RNG: the same mask in replicated regions, different in sharded ones

The names below are the package's public surface (``from lab_utils.parallel.tensor_parallel
import ColumnParallelLinear``).
"""

from lab_utils.parallel.tensor_parallel.comm import (
    all_gather_along,
    copy_to_tp,
    gather_from_sequence,
    gather_from_tp,
    reduce_from_tp,
    reduce_scatter_to_sequence,
    scatter_to_sequence,
    vocab_parallel_cross_entropy,
)
from lab_utils.parallel.tensor_parallel.layers import (
    TPMLP,
    ColumnParallelLinear,
    RowParallelLinear,
    TPAttention,
    VocabParallelEmbedding,
    parallelize_block,
    sync_sequence_parallel_grads,
    tensor_parallelize,
)
from lab_utils.parallel.tensor_parallel.rng import (
    TPDropout,
    TPRandom,
    full_dropout_masks,
    replay_dropout_masks,
    seed_tensor_parallel,
    set_recording,
)

__all__ = [
    "ColumnParallelLinear",
    "RowParallelLinear",
    "TPAttention",
    "TPMLP",
    "VocabParallelEmbedding",
    "parallelize_block",
    "tensor_parallelize",
    "sync_sequence_parallel_grads",
    "copy_to_tp",
    "reduce_from_tp",
    "gather_from_tp",
    "gather_from_sequence",
    "reduce_scatter_to_sequence",
    "scatter_to_sequence",
    "all_gather_along",
    "vocab_parallel_cross_entropy",
    "TPDropout",
    "TPRandom",
    "seed_tensor_parallel",
    "full_dropout_masks",
    "replay_dropout_masks",
    "set_recording",
]
