"""Tensor parallelism, Megatron-style (lab 06).

    layers.py   ColumnParallelLinear, RowParallelLinear, TPMLP, TPAttention, tensor_parallelize
    comm.py     the f / g operators and sequence-parallel gathers, vocab-parallel cross-entropy
    rng.py      dropout RNG: the same mask in replicated regions, different in sharded ones
"""
