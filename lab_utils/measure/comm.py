"""Communication ledger: every collective and point-to-point call one rank makes (labs 03-08).

    with CommLedger() as ledger:          # inside a rank
        with ledger.phase("backward"):
            loss.backward()               # e.g. torch DDP's bucketed all-reduces
    ledger.count("all_reduce"), ledger.bytes_sent(), ledger.summary()

What a ledger number is: WHAT WAS CALLED (ops, counts, tensor sizes, durations). Its bytes are
the ring formula applied to the tensor sizes it observed - label them "ledger", never
"measured": ledger == formula holds by construction, whatever the backend really sends. The
bytes that really left the rank, as the kernel counted them, are the "wire" column:
``lab_utils.measure.WireMeter`` (measure/wire.py), which also names gloo's deviations from the
ring (its reduce-scatter all-reduces: 2x the formula).

How it sees everything: since torch 2.0 every ProcessGroup call - from Python's dist.* and
from C++ callers such as DDP's reducer - goes through the dispatcher as a ``c10d::`` op
(``c10d::allreduce_``, ``c10d::send``, ...), and DTensor / FSDP2 functional collectives are
``_c10d_functional::`` ops. A TorchDispatchMode (the mechanism of torch's CommDebugMode)
sees both. Ops on tensor subclasses (DTensor) are declined with NotImplemented so the
subclass desugars them into the plain-tensor collectives we count. The mode is thread-local:
it sees what this thread (and the CPU autograd engine running backward for it) dispatches.

Bytes: ``tensor_bytes`` is D, the FULL buffer (all-reduce input, reduce-scatter input,
all-gather output, the whole all-to-all send buffer, the tensor sent or received);
``bytes_sent`` is what THIS rank WOULD send if the backend ran the ring algorithm (the ledger
view, not a measurement): ``calc.comm.ring_bytes_per_rank(op, group_size, D)``, 2(N-1)/N D
for all-reduce, (N-1)/N D for reduce-scatter / all-gather, D for send, 0 for recv and barrier.
``duration_s`` runs from the call to completion of its Work (a callback on the Work's future),
so async calls and DDP's overlapped buckets get their real span, not just the launch time.

A record you can read is complete. The future's callback runs on the thread that completed
the work, a moment AFTER ``work.wait()`` may already have returned to the caller, so the
ledger never hands out a record whose callback is still pending: ``records`` (and every
reader built on it) first waits for the pending callbacks of work that has finished.
"""

from __future__ import annotations

import contextlib
import sys
import threading
import time
from dataclasses import asdict, dataclass
from typing import Any, Iterator

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from lab_utils.measure.comm_ops import decode, group_ranks, group_size, ledger_bytes

OPS = (
    "all_reduce",
    "reduce_scatter",
    "all_gather",
    "broadcast",
    "reduce",
    "all_to_all",
    "send",
    "recv",
    "barrier",
    "gather",
    "scatter",
)


@dataclass
class CommRecord:
    """One communication call as this rank saw it. ``start_s`` is time.perf_counter().
    ``bytes_sent`` is the ring formula for this call's sizes (ledger), not a measurement."""

    op: str
    bytes_sent: float
    tensor_bytes: int
    group_size: int
    duration_s: float | None
    phase: str | None
    peer: int | None = None  # send/recv: the other rank (group rank); broadcast/reduce: root
    torch_op: str = ""
    start_s: float = 0.0
    group_ranks: tuple[int, ...] = ()  # the group's global ranks


def _is_dtensor(cls: type) -> bool:
    api = sys.modules.get("torch.distributed.tensor._api")  # not imported -> no DTensor exists
    return api is not None and issubclass(cls, api.DTensor)


class _LedgerMode(TorchDispatchMode):
    def __init__(self, ledger: "CommLedger") -> None:
        super().__init__()
        self.ledger = ledger
        self.pending: dict[int, CommRecord] = {}  # functional outputs waiting for wait_tensor

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if isinstance(func, torch._ops.HigherOrderOperator):
            return func(*args, **kwargs)
        # A tensor subclass (DTensor) first turns the op into plain-tensor collectives,
        # which come back through this mode: decline, as CommDebugMode does.
        if any(_is_dtensor(t) for t in types):
            return NotImplemented
        name = func.name()
        if name.startswith("_c10d_functional::wait_tensor"):
            out = func(*args, **kwargs)
            rec = self.pending.pop(id(args[0]), None)
            if rec is not None:
                rec.duration_s = time.perf_counter() - rec.start_s
            return out
        decoded = decode(name, tuple(args)) if "c10d" in name else None
        if decoded is None:
            return func(*args, **kwargs)
        op, d, group, peer = decoded
        n = group_size(group)
        rec = CommRecord(
            op,
            ledger_bytes(op, n, d),
            d,
            n,
            None,
            self.ledger._phase,
            peer,
            name,
            time.perf_counter(),
            group_ranks(group),
        )
        out = func(*args, **kwargs)
        self.ledger._records.append(rec)
        self._finish_when_done(rec, out)
        return out

    def _finish_when_done(self, rec: CommRecord, out: Any) -> None:
        works = [
            o
            for o in (out if isinstance(out, tuple) else (out,))
            if isinstance(o, torch.ScriptObject)
        ]
        if works:
            try:
                fut = torch.distributed.distributed_c10d.Work.unbox(works[0]).get_future()
            except RuntimeError:  # a Work type without a future: keep the call's own span
                rec.duration_s = time.perf_counter() - rec.start_s
                return
            finished = threading.Event()

            def done(_: Any, rec: CommRecord = rec) -> None:
                rec.duration_s = time.perf_counter() - rec.start_s
                finished.set()

            self.ledger._pending.append((rec, fut, finished))
            fut.add_done_callback(done)
        elif isinstance(out, torch.Tensor):  # functional: finished by wait_tensor
            self.pending[id(out)] = rec
            rec.duration_s = time.perf_counter() - rec.start_s  # until then: the launch
        else:
            rec.duration_s = time.perf_counter() - rec.start_s


class CommLedger:
    """Records every communication call this rank makes inside ``with CommLedger():``.

    Records come from hand-written dist.* code, torch DDP (its C++ reducer), FSDP2 and
    DTensor tensor parallelism alike. Ledgers nest (each one records). Cost: a Python hop per
    torch op while active, fine for the labs' tiny models.
    """

    def __init__(self) -> None:
        self._records: list[CommRecord] = []
        # async work whose completion callback has not been seen yet: (record, future, event)
        self._pending: list[tuple[CommRecord, Any, threading.Event]] = []
        self._phase: str | None = None
        self._mode: _LedgerMode | None = None

    @property
    def records(self) -> list[CommRecord]:
        """Every record so far, each complete: pending async work is waited for first."""
        self._settle()
        return self._records

    def clear(self) -> None:
        """Forget the records so far (e.g. keep only the last training step)."""
        self._settle()
        self._records.clear()

    def _settle(self) -> None:
        """Wait until every recorded async call has finished AND its callback has run.

        ``fut.wait()`` returns once the work is marked complete; the callback that stamps
        ``duration_s`` runs just after, on gloo's thread. Waiting on its event closes that gap
        (the race that once left ``duration_s = None`` in 2% of DDP's bucket records).
        """
        pending, self._pending = self._pending, []
        for rec, fut, finished in pending:
            try:
                fut.wait()
            except Exception:  # a failed collective: its span ends at the failure
                pass
            if not finished.wait(timeout=60.0):
                raise RuntimeError(f"CommLedger: the completion callback of a {rec.op} never ran")

    def __enter__(self) -> "CommLedger":
        self._mode = _LedgerMode(self)
        self._mode.__enter__()
        return self

    def __exit__(self, *exc: Any) -> None:
        assert self._mode is not None
        self._mode.__exit__(*exc)
        self._mode = None

    @contextlib.contextmanager
    def phase(self, name: str) -> Iterator[None]:
        """Tag the records made inside with ``phase=name`` (phases nest; innermost wins)."""
        outer, self._phase = self._phase, name
        try:
            yield
        finally:
            self._phase = outer

    def _select(self, op: str | None, phase: str | None) -> list[CommRecord]:
        if op is not None and op not in OPS:
            raise ValueError(f"unknown op {op!r}; choose one of {', '.join(OPS)}")
        return [
            r
            for r in self.records
            if (op is None or r.op == op) and (phase is None or r.phase == phase)
        ]

    def count(self, op: str | None = None, phase: str | None = None) -> int:
        """Number of calls (of ``op`` / in ``phase`` if given)."""
        return len(self._select(op, phase))

    def bytes_sent(self, op: str | None = None, phase: str | None = None) -> float:
        """Ledger bytes: the ring formula applied to the selected calls' tensor sizes, summed.
        Not a measurement (for the bytes the kernel counted, see measure.WireMeter)."""
        return sum(r.bytes_sent for r in self._select(op, phase))

    def tensor_bytes(self, op: str | None = None, phase: str | None = None) -> int:
        """Sum of D (full buffer sizes) over the selected calls."""
        return sum(r.tensor_bytes for r in self._select(op, phase))

    def time_s(self, op: str | None = None, phase: str | None = None) -> float:
        return sum(r.duration_s or 0.0 for r in self._select(op, phase))

    def summary(self) -> dict:
        """Plain, picklable dict: totals per op and per phase, and every record."""
        per_op: dict[str, dict] = {}
        per_phase: dict[str, dict] = {}
        for r in self.records:
            for table, key in ((per_op, r.op), (per_phase, str(r.phase))):
                row = table.setdefault(
                    key, {"count": 0, "bytes_sent": 0.0, "tensor_bytes": 0, "time_s": 0.0}
                )
                row["count"] += 1
                row["bytes_sent"] += r.bytes_sent
                row["tensor_bytes"] += r.tensor_bytes
                row["time_s"] += r.duration_s or 0.0
        return {
            "count": len(self.records),
            "bytes_sent": self.bytes_sent(),
            "by_op": per_op,
            "by_phase": per_phase,
            "records": [asdict(r) for r in self.records],
        }
