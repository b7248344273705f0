"""Which communication op a dispatcher call is, how many bytes it moves, and its ledger bytes.

Used by ``comm.CommLedger``: every ProcessGroup call reaches the dispatcher as a ``c10d::`` op
(``c10d::allreduce_``, ``c10d::send``, ...); DTensor / FSDP2 functional collectives as
``_c10d_functional::`` ops. ``decode`` maps each to (op, D bytes, group, peer), where D is the
FULL buffer (all-reduce input, reduce-scatter input, all-gather output, the whole all-to-all
send buffer, the tensor sent or received). ``ledger_bytes`` is the ring formula for that call,
what the rank WOULD send under the ring algorithm: not a measurement (see ``wire.WireMeter``).
"""

from __future__ import annotations

from typing import Any

import torch

from lab_utils.calc.comm import ring_bytes_per_rank


def _nbytes(t: Any) -> int:
    if isinstance(t, torch.Tensor):
        return t.numel() * t.element_size()
    if isinstance(t, (list, tuple)):
        return sum(_nbytes(x) for x in t)
    return 0


def process_group(group: Any) -> Any:
    """The ProcessGroup behind what the dispatcher hands an op (a name or a boxed group)."""
    if isinstance(group, str):  # functional collectives name their group
        from torch.distributed.distributed_c10d import _resolve_process_group

        return _resolve_process_group(group)
    if isinstance(group, torch.ScriptObject):  # what the dispatcher hands c10d:: ops
        return torch.distributed.ProcessGroup.unbox(group)
    return group


def group_size(group: Any) -> int:
    return int(process_group(group).size())


def group_ranks(group: Any) -> tuple[int, ...]:
    """The GLOBAL ranks of the group, in group-rank order (the correctness bisector counts
    collectives per group: dp and tp groups of the same size are told apart)."""
    return tuple(torch.distributed.get_process_group_ranks(process_group(group)))


def decode(name: str, args: tuple) -> tuple[str, int, Any, int | None] | None:
    """(op, D bytes, group, peer) for a communication op, None for any other op."""
    a = args
    c10d = {  # name -> (op, how to get D, group arg index, peer arg index)
        "allreduce_": ("all_reduce", lambda: _nbytes(a[0]), 1, None),
        "allreduce_coalesced_": ("all_reduce", lambda: _nbytes(a[0]), 1, None),
        "broadcast_": ("broadcast", lambda: _nbytes(a[0]), 1, 2),
        "reduce_": ("reduce", lambda: _nbytes(a[0]), 1, 3),
        "allgather_": ("all_gather", lambda: _nbytes(a[0]), 2, None),
        "_allgather_base_": ("all_gather", lambda: _nbytes(a[0]), 2, None),
        "allgather_coalesced_": ("all_gather", lambda: _nbytes(a[0]), 2, None),
        "allgather_into_tensor_coalesced_": ("all_gather", lambda: _nbytes(a[0]), 2, None),
        "reduce_scatter_": ("reduce_scatter", lambda: _nbytes(a[1]), 2, None),
        "_reduce_scatter_base_": ("reduce_scatter", lambda: _nbytes(a[1]), 2, None),
        "reduce_scatter_tensor_coalesced_": ("reduce_scatter", lambda: _nbytes(a[1]), 2, None),
        "alltoall_": ("all_to_all", lambda: _nbytes(a[1]), 2, None),
        "alltoall_base_": ("all_to_all", lambda: _nbytes(a[1]), 2, None),
        "send": ("send", lambda: _nbytes(a[0]), 1, 2),
        "recv_": ("recv", lambda: _nbytes(a[0]), 1, 2),
        "recv_any_source_": ("recv", lambda: _nbytes(a[0]), 1, None),
        "barrier": ("barrier", lambda: 0, 1, None),
        "monitored_barrier_": ("barrier", lambda: 0, 1, None),
        "gather_": ("gather", lambda: _nbytes(a[0]) or _nbytes(a[1]) * group_size(a[2]), 2, 3),
        "scatter_": ("scatter", lambda: _nbytes(a[1]) or _nbytes(a[0]) * group_size(a[2]), 2, 3),
    }
    funcol = {  # functional collectives (DTensor, FSDP2): group is the last positional arg
        "all_reduce": ("all_reduce", lambda: _nbytes(a[0]), 2),
        "all_reduce_": ("all_reduce", lambda: _nbytes(a[0]), 2),
        "all_reduce_coalesced": ("all_reduce", lambda: _nbytes(a[0]), 2),
        "all_reduce_coalesced_": ("all_reduce", lambda: _nbytes(a[0]), 2),
        "all_gather_into_tensor": ("all_gather", lambda: _nbytes(a[0]) * a[1], 2),
        "all_gather_into_tensor_out": ("all_gather", lambda: _nbytes(a[0]) * a[1], 2),
        "all_gather_into_tensor_coalesced": ("all_gather", lambda: _nbytes(a[0]) * a[1], 2),
        "reduce_scatter_tensor": ("reduce_scatter", lambda: _nbytes(a[0]), 3),
        "reduce_scatter_tensor_coalesced": ("reduce_scatter", lambda: _nbytes(a[0]), 3),
        "all_to_all_single": ("all_to_all", lambda: _nbytes(a[0]), 3),
        "broadcast": ("broadcast", lambda: _nbytes(a[0]), 2),
        "broadcast_": ("broadcast", lambda: _nbytes(a[0]), 2),
    }
    ns, _, short = name.partition("::")
    short = short.split(".")[0]
    if ns == "c10d" and short in c10d:
        op, size, gi, pi = c10d[short]
        return op, size(), a[gi], (int(a[pi]) if pi is not None else None)
    if ns in ("_c10d_functional", "_c10d_functional_autograd") and short in funcol:
        op, size, gi = funcol[short]
        return op, size(), a[gi], None
    return None


def ledger_bytes(op: str, n: int, d: int) -> float:
    """Ledger bytes: the ring formula from calc (send: D; recv, barrier: 0); not measured."""
    if op == "send":
        return ring_bytes_per_rank("send_recv", n, d)
    if op in ("recv", "barrier"):
        return 0.0
    if op in ("gather", "scatter"):  # root-centred: a non-root moves its 1/n share once
        return d / n if n > 1 else 0.0
    return ring_bytes_per_rank(op, n, d)
