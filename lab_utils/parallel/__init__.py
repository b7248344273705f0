"""The techniques, each beside its communication (the lessons of labs 03-09).

    collectives.py          ring reduce-scatter / all-gather / all-reduce, parameter server (lab 03)
    data_parallel.py        NaiveDDP, BucketDDP, SyncBatchNorm1d (lab 04)
    local_sgd.py            local SGD and DiLoCo: data parallelism that syncs less often (lab 04)
    backward_tls.py         collectives launched in backward hooks, safe at a plain interpreter exit
    zero.py                 ZeRO-1 and ZeRO-2: optimizer-side sharding (lab 05)
    fsdp.py, fsdp_units.py  ZeRO-3 as a module (FSDP), mixed precision; the shard layout (lab 05)
    tensor_parallel/        column / row parallel layers, Megatron MLP and attention (lab 06)
    pipeline_parallel/      GPipe, 1F1B, interleaved 1F1B, ZB-H1, ZB-H2 from send/recv; torch's
    (lab 07)
    context_parallel.py     ring attention (lab 08)
    compose.py              DP x TP x PP on one mesh: apply_tp, apply_fsdp, apply_pp (lab 08)
    expert_parallel.py      MoE layer (router, capacity, balance loss) and EP with all-to-alls (lab
    09)

Every module here holds a technique and its communication only: the experiments that run them
live in ``lab_utils.experiments``, and measurement observes them from ``lab_utils.measure``.
"""
