"""Wire bytes: what each rank REALLY sent during a block, as the kernel counted it (labs 03-08).

    from lab_utils.measure import WireMeter
    with WireMeter(ctx) as wire:     # enter and exit are LOCAL: no collective, no barrier
        dist.all_reduce(x)
    wire.sent        # bytes this rank sent to the other ranks (TCP payload: gloo's data + headers)
    wire.sent_to     # {peer global rank: bytes}; {} where the kernel's view cannot name the peer
    wire.control     # bytes sent to the rendezvous store (TCPStore): control traffic, kept apart
    wire.method      # "tcp_info" (per-socket kernel counters) | "wchar" (fallback) | "unavailable"
    wire.result()    # the same numbers as a small picklable WireBytes, to return from a rank
    wire_matrix(wire, group)   # COLLECTIVE: rank 0 gets M[i][j] = bytes rank i sent to rank j

Three numbers called "bytes sent"; always say which one you show (course rule 6):
    formula  the ring algorithm's bytes for the sizes you chose (``calc.ring_bytes_per_rank``)
    ledger   CommLedger: the ring formula applied to the tensor sizes of the calls it saw. It
             checks WHAT was called; ledger == formula is by construction, not a measurement.
    wire     this module: what the kernel counted leaving this rank's sockets. The measurement.

The three-column table labs 03-08 print (formula | ledger | wire):

    def worker(ctx, numel):                   # in lab_utils/experiments/labNN.py
        x, shard = torch.ones(numel), torch.empty(numel // ctx.world_size)
        with CommLedger() as ledger, WireMeter(ctx) as wire:
            dist.reduce_scatter_single(shard, x)
        return ledger.bytes_sent(), wire.result()    # (float, WireBytes): picklable

    ledger_bytes, wire_bytes = run(worker, n, numel)[0]          # in the notebook: rank 0's
    rows = [byte_row("reduce_scatter", calc.ring_bytes_per_rank("reduce_scatter", n, 4 * numel),
                     ledger_bytes, wire_bytes, note="gloo reduce-scatters by all-reducing")]
    show_table(rows, title=f"bytes rank 0 sent, {n} ranks", units=BYTE_UNITS)

    -> what            formula (B)  ledger (B)   wire (B)  wire / formula  note
       reduce_scatter    2,359,296   2,359,296  4,720,320           2.001  gloo reduce-...

``lab_utils.experiments.lab03.wire_per_collective`` runs every collective this way.

What gloo really sends (torch 2.13, D = the full buffer; pinned in tests/test_measure_wire.py
at N = 2, 3, 4 and printed by ``benchmarks/probe_wire.py``):
    all_reduce, all_gather (single tensor and list), all_to_all: the ring formula, within 0.1%.
    reduce_scatter (single tensor and list): 2(N-1)/N D, an ALL-REDUCE's bytes, twice the ring's
        (N-1)/N D: ProcessGroupGloo implements reduce-scatter by all-reducing and keeping its
        chunk. NCCL's ring reaches (N-1)/N D; on gloo a ZeRO-2 step really sends more than DDP.
    broadcast: a binomial tree, not a pipelined chain: the root sends ceil(log2 N) x D and some
        ranks none (N = 4: D sent by 0 to 1 and 2 each, by 1 to 3). The ranks' total is
        (N-1) D, the chain's, but the root's link carries more than the formula's D.
    reduce: a ring reduce-scatter, then every non-root sends its reduced chunk to the root:
        non-roots send (N-1)/N D + D/N = D (the formula), the root only (N-1)/N D.
    send/recv: the sender D; the receiver one 48-byte "ready" message; barrier: headers only.
    Who sends to whom (``wire_matrix``): gloo's all-reduce ring sends its data to rank r-1 and
        "ready" headers to r+1; the course's ring from send/recv (parallel/collectives.py) the
        other way round. Either way each rank's data goes to ONE neighbour.

Framing: gloo's TCP transport puts a 48-byte header (six 8-byte fields: nbytes, opcode, slot,
offset, length, roffset) in front of every message, and a receiver tells the sender it is
ready with a header-only message. ``GLOO_HEADER_BYTES`` = 48. A 3 MB all-reduce over 4 ranks
is 36 messages per rank: 1,728 bytes, 0.04% of the payload; a 4 KB all-reduce over 2 ranks is
12 messages, 576 bytes on the formula's 4,096 (14%). So compare wire with the formula on
MB-sized tensors; for small ones wire = formula + 48 x messages. IP and TCP headers are not
counted: the kernel's counters are TCP payload bytes.

How it measures (the kernel's per-socket counters, TCP_INFO): see ``measure/tcp.py``.

Limits: Linux only for per-socket counts (macOS, Windows: "unavailable", sent is None); a
socket closed inside the block takes its bytes with it; NCCL over NVLink, shared memory or
InfiniBand bypasses TCP, so on GPUs wire sees only what went over TCP sockets. Cost: two
snapshots of this process's sockets, 0.2-0.6 ms for enter + exit on the course machine (2 busy
cores; ``benchmarks/probe_wire.py``), none of it inside the block.
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass, field
from typing import Any

import torch.distributed as dist

from lab_utils.measure.tcp import Link, socket_inodes, tcp_snapshot, wchar

GLOO_HEADER_BYTES = 48  # gloo tcp transport: one header per message (6 x uint64)
BYTE_UNITS = {"formula": "B", "ledger": "B", "wire": "B"}  # units= for show_table(byte_row rows)
_KEY = "lab_utils/wire/endpoints/{}"


@dataclass(frozen=True)
class WireBytes:
    """What one rank's sockets carried during a WireMeter block (see the module docstring)."""

    sent: int | None
    sent_to: dict[int, int] = field(default_factory=dict)
    control: int = 0
    unattributed: int = 0
    method: str = "tcp_info"


def _store() -> Any:
    """The default process group's store (a PrefixStore over the job's TCPStore), or None."""
    if not (dist.is_available() and dist.is_initialized()):
        return None
    try:
        return dist.distributed_c10d._get_default_store()
    except (AttributeError, RuntimeError, ValueError):
        return None


def _store_port(store: Any) -> int | None:
    while store is not None and hasattr(store, "underlying_store"):
        store = store.underlying_store
    port = getattr(store, "port", None)
    return int(port) if port else int(os.environ.get("MASTER_PORT", 0)) or None


_INHERITED: dict[int, set[int]] = {}  # pid -> socket inodes shared with the parent process
_PUBLISHED: dict[int, tuple[int, frozenset]] = {}  # pid -> (id(store), links written there)
_OWNERS: dict[tuple[int, int], dict[Link, int]] = {}  # (pid, id(store)) -> {a peer's link: rank}


def _inherited() -> set[int]:
    """Sockets this process shares with its parent (a launcher's, inherited at fork).
    Computed once: a socket created after the fork is never the parent's."""
    pid = os.getpid()
    if pid not in _INHERITED:
        _INHERITED[pid] = socket_inodes() & socket_inodes(str(os.getppid()))
    return _INHERITED[pid]


class WireMeter:
    """Bytes this rank's TCP sockets sent during ``with WireMeter(ctx):`` (module docstring).

    ``ctx`` (or nothing: the default group) gives this rank and the world size, used only to
    name peers. Enter and exit are local. Reading ``sent_to`` (or ``result()``) waits up to
    ``resolve_timeout_s`` for the peers it sent to to have entered a WireMeter once.
    """

    def __init__(self, ctx: Any = None, resolve_timeout_s: float = 10.0) -> None:
        initialised = dist.is_available() and dist.is_initialized()
        self.rank = ctx.rank if ctx is not None else (dist.get_rank() if initialised else 0)
        self.world_size = (
            ctx.world_size if ctx is not None else dist.get_world_size() if initialised else 1
        )
        self.resolve_timeout_s = resolve_timeout_s
        self.method = "unavailable"
        self.sent: int | None = None
        self.control = 0
        self._links: dict[Link, int] = {}  # data socket -> bytes sent in the block
        self._sent_to: dict[int, int] | None = None
        self._before: Any = None

    def __enter__(self) -> "WireMeter":
        self._store = _store()
        self._port = _store_port(self._store)
        before = tcp_snapshot()
        if before is not None:
            self.method = "tcp_info"
            if self._publish(before):  # a store write: snapshot again, so control excludes it
                before = tcp_snapshot() or before
            self._before = before
        else:
            self._before = wchar()
            self.method = "wchar" if self._before is not None else "unavailable"
        return self

    def __exit__(self, *exc: Any) -> None:
        if self.method == "wchar":
            self.sent = wchar() - self._before
        if self.method != "tcp_info":
            return
        after = tcp_snapshot() or {}
        kinds = self._kinds(after)
        self.sent = 0
        for inode, (link, written) in after.items():
            delta = written - self._before.get(inode, (None, 0))[1]  # a new socket: from 0
            if kinds[inode] == "control":
                self.control += delta
            elif kinds[inode] == "data":
                self.sent += delta
                if delta:
                    self._links[link] = delta
        self._publish(after)  # sockets opened inside the block (a new group) get named too

    def _kinds(self, snapshot: dict[int, tuple[Link, int]]) -> dict[int, str]:
        """inode -> "control" (the store's port), "other" (both ends in this process, or a
        socket the parent holds too: a launcher's), or "data" (a link to another process)."""
        ends = {link for link, _ in snapshot.values()}
        inherited = _inherited()
        kinds = {}
        for inode, ((local, remote), _) in snapshot.items():
            if self._port in (local[1], remote[1]):
                kinds[inode] = "control"
            elif (remote, local) in ends or inode in inherited:
                kinds[inode] = "other"
            else:
                kinds[inode] = "data"
        return kinds

    def _publish(self, snapshot: dict[int, tuple[Link, int]]) -> bool:
        """Write this rank's data links to the store so that peers can name it; only when they
        changed since this process last wrote them. Returns whether it wrote."""
        if self._store is None:
            return False
        kinds = self._kinds(snapshot)
        links = frozenset(link for inode, (link, _) in snapshot.items() if kinds[inode] == "data")
        if _PUBLISHED.get(os.getpid()) == (id(self._store), links):
            return False
        rows = [[*local, *remote] for local, remote in sorted(links)]
        self._store.set(_KEY.format(self.rank), json.dumps(rows))
        _PUBLISHED[os.getpid()] = (id(self._store), links)
        return True

    @property
    def sent_to(self) -> dict[int, int]:
        """{peer global rank: bytes sent to it}; waits for peers' endpoints (class docstring)."""
        if self._sent_to is None:
            self._sent_to = self._resolve()
        return self._sent_to

    @property
    def unattributed(self) -> int:
        """Bytes in ``sent`` that could not be given to a peer rank."""
        return (self.sent or 0) - sum(self.sent_to.values())

    def _resolve(self) -> dict[int, int]:
        if not self._links or self._store is None:
            return {}
        owners = _OWNERS.setdefault((os.getpid(), id(self._store)), {})
        peers = [p for p in range(self.world_size) if p != self.rank]
        deadline = time.monotonic() + self.resolve_timeout_s
        while True:
            missing = [(lo, re) for lo, re in self._links if (re, lo) not in owners]
            if not missing or time.monotonic() > deadline:
                break
            for peer in peers:  # a peer's latest links (it rewrites them when they change)
                key = _KEY.format(peer)
                if self._store.check([key]):
                    for lh, lp, rh, rp in json.loads(self._store.get(key)):
                        owners[((lh, lp), (rh, rp))] = peer
            if any((re, lo) not in owners for lo, re in missing):
                time.sleep(0.01)
        out: dict[int, int] = {}
        for (local, remote), n in self._links.items():
            peer = owners.get((remote, local))
            if peer is not None:
                out[peer] = out.get(peer, 0) + n
        return dict(sorted(out.items()))

    def result(self) -> WireBytes:
        """The numbers as a picklable dataclass (resolves ``sent_to`` first)."""
        return WireBytes(self.sent, self.sent_to, self.control, self.unattributed, self.method)


def wire_matrix(wire: WireMeter | WireBytes, group: Any = None) -> list[list[int]] | None:
    """COLLECTIVE over ``group``: on the group's rank 0, M[i][j] = bytes group rank i sent to
    group rank j during its block (a gather_object of each rank's ``sent_to``); None elsewhere.
    Bytes to ranks outside the group are left out. Call it after the block, on every rank."""
    sent_to = wire.sent_to
    n = dist.get_world_size(group)
    rows: list[Any] = [None] * n if dist.get_rank(group) == 0 else None
    dist.gather_object(
        sent_to, rows, group=group, dst=dist.get_global_rank(group, 0) if group is not None else 0
    )
    if rows is None:
        return None
    index = {dist.get_global_rank(group, i) if group is not None else i: i for i in range(n)}
    matrix = [[0] * n for _ in range(n)]
    for i, row in enumerate(rows):
        for peer, nbytes in row.items():
            if peer in index:
                matrix[i][index[peer]] += nbytes
    return matrix


def byte_row(
    label: str, formula: float | None, ledger: Any = None, wire: Any = None, **extra: Any
) -> dict[str, Any]:
    """One row of the formula | ledger | wire table (bytes ONE rank sent), for show_table.

    ``ledger``: bytes or a CommLedger (its bytes_sent()); ``wire``: bytes, a WireMeter or a
    WireBytes (its ``sent``). "wire / formula" is the measured-to-ideal ratio. ``extra``
    columns (e.g. note="...") come last.
    """
    if hasattr(ledger, "bytes_sent"):
        ledger = ledger.bytes_sent()
    if hasattr(wire, "sent"):
        wire = wire.sent
    ratio = wire / formula if formula and wire is not None else None

    def whole(v: float | None) -> int | None:  # bytes print as integers
        return None if v is None else round(v)

    return {
        "what": label,
        "formula": whole(formula),
        "ledger": whole(ledger),
        "wire": wire,
        "wire / formula": ratio,
        **extra,
    }
