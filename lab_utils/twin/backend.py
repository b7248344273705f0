"""The emulated process-group backend: real gloo data movement, emulated time (issue 35).

``register()`` adds a torch.distributed backend named "twin" (``Backend.register_backend``); a
group made with it is an ``EmulatedGroup``, a Python ``ProcessGroup`` (torch calls its methods
from Python AND from C++: DDP's reducer, FSDP2, DeviceMesh, pipelining) that forwards each call
to a real ``ProcessGroupGloo`` (the numbers are exact) and charges the rank's virtual clock:

* a collective: the participants' ready times meet in a tiny MAX all-reduce on a second gloo
  group with the same members (same order as the real calls), waited only when the end is
  needed (``RankClock.defer``); it starts at that maximum and lasts
  ``calc.comm.group_collective_time`` over the links the group spans;
* send: (full duplex: sends queue behind sends, receives behind receives, not each other)
  the sender's start travels to the receiver in front of the data (8 bytes, one message);
  the receive ends at max(its own ready time, the sender's start) + the link's alpha-beta cost;
* the returned work's ``wait()`` advances the rank's clock to the work's end; work issued in a
  backward pass (DDP's buckets, FSDP2's reduce-scatters) is joined when that backward ends, as
  DDP and FSDP2 wait for it there.
Outside an emulated run (no session) the group simply forwards.
"""

from __future__ import annotations

import datetime
from typing import Any, Callable

import torch
import torch.distributed as dist
from torch.distributed import ProcessGroup, ReduceOp

from lab_utils.calc.comm import collective_time, group_collective_time
from lab_utils.twin import session as _session

BACKEND = "twin"
SEND, RECV = "p2p send", "p2p recv"  # the two directions of a full-duplex link (clock.py)


def _nbytes(tensors: Any) -> int:
    if isinstance(tensors, torch.Tensor):
        return tensors.numel() * tensors.element_size()
    return sum(_nbytes(t) for t in tensors)


def _in_backward() -> bool:
    return torch._C._current_autograd_node() is not None


class EmulatedWork(dist.Work):
    """A real gloo work whose ``wait()`` also moves the rank's clock to the emulated end."""

    def __init__(self, inner: Any, end: Callable[[], float] | float | None) -> None:
        super().__init__()
        self.inner, self._end = inner, end

    def wait(self, timeout: datetime.timedelta | None = None) -> bool:
        self.inner.wait() if timeout is None else self.inner.wait(timeout)
        s = _session.current()
        if s is not None and self._end is not None:
            end = self._end() if callable(self._end) else self._end
            s.clock.wait(end)
        return True

    def get_future(self) -> Any:
        return self.inner.get_future()

    def is_completed(self) -> bool:
        return self.inner.is_completed()

    def is_success(self) -> bool:
        return self.inner.is_success()

    def exception(self) -> Any:
        return self.inner.exception()

    def result(self) -> Any:
        return self.inner.result()


class EmulatedGroup(ProcessGroup):
    """A process group over ``ranks`` (global) that is gloo for data and the twin for time."""

    def __init__(
        self, store: Any, rank: int, size: int, ranks: list[int], timeout: datetime.timedelta
    ) -> None:
        super().__init__(rank, size)
        gloo = dist.ProcessGroupGloo
        self.inner = gloo(dist.PrefixStore("data/", store), rank, size, timeout)
        self.side = gloo(dist.PrefixStore("clock/", store), rank, size, timeout)
        self.ranks = ranks
        self._gname = ""
        self._gdesc = ""
        self._backward_join = False
        # calls the twin does not model (gather, scatter, ...) still run, on gloo, uncharged
        self._register_backend(torch.device("cpu"), ProcessGroup.BackendType.GLOO, self.inner)

    # -- identity (DeviceMesh and FSDP2 look groups up by name)
    def getBackendName(self) -> str:
        return BACKEND

    def name(self) -> str:
        return BACKEND

    def _set_group_name(self, name: str) -> None:
        self._gname = name

    def setGroupName(self, name: str) -> None:
        self._gname = name

    @property
    def group_name(self) -> str:
        return self._gname

    def getGroupName(self) -> str:
        return self._gname

    def setGroupDesc(self, desc: str) -> None:
        self._gdesc = desc

    def getGroupDesc(self) -> str:
        return self._gdesc

    # -- the clock
    def _forward(self, fn: Callable[[], Any]) -> Any:
        s = _session.current()
        if s is not None:
            s.forwarding += 1
        try:
            return fn()
        finally:
            if s is not None:
                s.forwarding -= 1

    def _charge(self, op: str, nbytes: float) -> Callable[[], float] | None:
        """Start time from the participants' ready times; occupy the comm stream; end."""
        s = _session.current()
        if s is None:
            return None
        s.count(op)
        t = torch.tensor([s.clock.ready("comm")], dtype=torch.float64)
        opts = dist.AllreduceOptions()
        opts.reduceOp = ReduceOp.MAX
        side = self._forward(lambda: self.side.allreduce([t], opts))  # not waited here

        def start() -> float:
            side.wait()
            return float(t[0])

        c, sp = s.cluster, s.cluster.span(self.ranks)
        cost = group_collective_time(
            op,
            sp.size,
            sp.nodes,
            sp.per_node,
            nbytes * s.scale.bytes,
            c.intra.latency_s,
            c.intra.bytes_per_s,
            c.inter.latency_s,
            c.inter.bytes_per_s,
        )
        end = s.clock.defer(start, cost, op, nbytes * s.scale.bytes)
        if _in_backward() and not self._backward_join:
            self._backward_join = True
            torch.autograd.Variable._execution_engine.queue_callback(self._end_of_backward)
        return end

    def _end_of_backward(self) -> None:
        self._backward_join = False
        s = _session.current()
        if s is not None:
            s.clock.join()

    def _coll(self, op: str, nbytes: float, call: Callable[[], Any]) -> EmulatedWork:
        end = self._charge(op, nbytes)
        return EmulatedWork(self._forward(call), end)

    # -- collectives (size in bytes as calc.comm counts it: the FULL buffer)
    def allreduce(self, tensors: Any, opts: Any = None) -> EmulatedWork:
        opts = opts if opts is not None else dist.AllreduceOptions()
        return self._coll(
            "all_reduce", _nbytes(tensors), lambda: self.inner.allreduce(tensors, opts)
        )

    def allreduce_coalesced(self, tensors: Any, opts: Any = None) -> EmulatedWork:
        opts = opts if opts is not None else dist.AllreduceCoalescedOptions()
        return self._coll(
            "all_reduce", _nbytes(tensors), lambda: self.inner.allreduce_coalesced(tensors, opts)
        )

    def allgather(self, outputs: Any, inputs: Any, opts: Any = None) -> EmulatedWork:
        opts = opts if opts is not None else dist.AllgatherOptions()
        return self._coll(
            "all_gather", _nbytes(outputs), lambda: self.inner.allgather(outputs, inputs, opts)
        )

    def _allgather_base(self, output: Any, input: Any, opts: Any = None) -> EmulatedWork:
        opts = opts if opts is not None else dist.AllgatherOptions()
        return self._coll(
            "all_gather", _nbytes(output), lambda: self.inner._allgather_base(output, input, opts)
        )

    all_gather_single = _allgather_base

    def reduce_scatter(self, outputs: Any, inputs: Any, opts: Any = None) -> EmulatedWork:
        opts = opts if opts is not None else dist.ReduceScatterOptions()
        return self._coll(
            "reduce_scatter",
            _nbytes(inputs),
            lambda: self.inner.reduce_scatter(outputs, inputs, opts),
        )

    def _reduce_scatter_base(self, output: Any, input: Any, opts: Any = None) -> EmulatedWork:
        opts = opts if opts is not None else dist.ReduceScatterOptions()
        return self._coll(
            "reduce_scatter",
            _nbytes(input),
            lambda: self.inner._reduce_scatter_base(output, input, opts),
        )

    reduce_scatter_single = _reduce_scatter_base

    def alltoall_base(
        self, output: Any, input: Any, out_splits: Any, in_splits: Any, opts: Any = None
    ) -> EmulatedWork:
        opts = opts if opts is not None else dist.AllToAllOptions()
        return self._coll(
            "all_to_all",
            _nbytes(input),
            lambda: self.inner.alltoall_base(output, input, out_splits, in_splits, opts),
        )

    all_to_all_single = alltoall_base

    def broadcast(self, tensors: Any, opts: Any = None) -> EmulatedWork:
        opts = opts if opts is not None else dist.BroadcastOptions()
        return self._coll(
            "broadcast", _nbytes(tensors), lambda: self.inner.broadcast(tensors, opts)
        )

    def barrier(self, opts: Any = None) -> EmulatedWork:
        opts = opts if opts is not None else dist.BarrierOptions()
        return self._coll("all_reduce", 0, lambda: self.inner.barrier(opts))

    # -- point to point ("p2p" stream). The sender's start time travels IN the message: 8 bytes
    # in front of the data (one message, one channel: nothing to keep in order across groups).
    def _p2p_cost(self, s: Any, peer: int, nbytes: float) -> float:
        c, me, other = s.cluster, self.ranks[self.rank()], self.ranks[peer]
        link = c.intra if c.node_of(me) == c.node_of(other) else c.inter
        return collective_time("send_recv", 2, nbytes, link.latency_s, link.bytes_per_s)

    def send(self, tensors: Any, dst: int, tag: int) -> EmulatedWork:
        s = _session.current()
        if s is None:
            return EmulatedWork(self.inner.send(tensors, dst, tag), None)
        s.count("send")
        nb = _nbytes(tensors) * s.scale.bytes
        start = s.clock.ready("p2p", SEND)
        head = torch.tensor([start], dtype=torch.float64).view(torch.uint8)
        msg = torch.cat([head] + [t.contiguous().view(-1).view(torch.uint8) for t in tensors])
        end = s.clock.occupy("p2p", start, self._p2p_cost(s, dst, nb), "send", nb, SEND)
        work = EmulatedWork(self._forward(lambda: self.inner.send([msg], dst, tag)), end)
        work._msg = msg  # alive until the work goes
        return work

    def recv(self, tensors: Any, src: int, tag: int) -> EmulatedWork:
        s = _session.current()
        if s is None:
            return EmulatedWork(self.inner.recv(tensors, src, tag), None)
        s.count("recv")
        nb = _nbytes(tensors) * s.scale.bytes
        ready, cost = s.clock.ready("p2p", RECV), self._p2p_cost(s, src, nb)
        msg = torch.empty(8 + _nbytes(tensors), dtype=torch.uint8)
        done: list[float] = []

        def end() -> float:
            if not done:  # unpack once: the data into the caller's tensors, the start
                at = 8
                for t in tensors:  # a buffer may require grad (torch.pipelining's): no autograd
                    n = t.numel() * t.element_size()
                    with torch.no_grad():
                        t.copy_(msg[at : at + n].view(t.dtype).view(t.shape))
                    at += n
                start = max(ready, float(msg[:8].view(torch.float64)[0]))
                done.append(s.clock.occupy("p2p", start, cost, "recv", nb, RECV))
            return done[0]

        return EmulatedWork(self._forward(lambda: self.inner.recv([msg], src, tag)), end)


def _create(opts: Any, backend_options: Any) -> EmulatedGroup:
    ranks = list(opts.global_ranks_in_group) or list(range(opts.group_size))
    return EmulatedGroup(opts.store, opts.group_rank, opts.group_size, ranks, opts.timeout)


def register() -> None:
    """Make "twin" a torch.distributed backend in this process (idempotent)."""
    if BACKEND.upper() not in dist.Backend._plugins:
        dist.Backend.register_backend(BACKEND, _create, extended_api=True, devices=["cpu"])
