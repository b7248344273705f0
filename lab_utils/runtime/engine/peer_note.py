"""Who a stuck rank was waiting FOR: the peer of the blocking send or recv it is inside.

A hang report already shows the line each rank was stuck on (faulthandler, ``rank.py``), but
``dist.recv(t, other)`` does not say which rank ``other`` was. While a rank is inside a BLOCKING
``torch.distributed.send`` or ``recv`` (which a learner calls as ``dist.send``/``dist.recv``),
this module keeps one line in ``rank<k>.peer`` in the run's folder ("recv from rank 1"), and
blanks it when the call returns, so what the launcher reads at a deadline is never stale.
Asynchronous ``isend``/``irecv`` are not noted: their wait can come much later, elsewhere.

Cost: one ``pwrite`` of 96 bytes before and after each blocking call (a few microseconds).
"""

from __future__ import annotations

import functools
import os
from typing import Any, Callable

import torch.distributed as dist

WIDTH = 96
_fd: int | None = None


def note_to(folder: str, rank: int) -> None:
    """Keep this rank's note in ``folder/rank<rank>.peer`` (once per run or pool job)."""
    global _fd
    if _fd is not None:
        os.close(_fd)
    _fd = os.open(os.path.join(folder, f"rank{rank}.peer"), os.O_CREAT | os.O_WRONLY, 0o644)
    _write("")
    for name, key in (("send", "dst"), ("recv", "src")):
        fn = getattr(dist, name)
        if not getattr(fn, "_lab_peer_note", False):
            setattr(dist, name, _noted(fn, name, key))


def _write(text: str) -> None:
    if _fd is not None:
        os.pwrite(_fd, text.encode()[:WIDTH].ljust(WIDTH), 0)


def _peer(args: tuple, kwargs: dict, key: str) -> str:
    peer = args[1] if len(args) > 1 else kwargs.get(key)
    if peer is not None:
        return f"rank {peer}"
    local = kwargs.get(f"group_{key}")
    return f"rank {local} of its group" if local is not None else "any rank"


def _noted(fn: Callable, name: str, key: str) -> Callable:
    direction = "to" if name == "send" else "from"

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        _write(f"blocking {name} {direction} {_peer(args, kwargs, key)}")
        try:
            return fn(*args, **kwargs)
        finally:
            _write("")

    wrapper._lab_peer_note = True  # type: ignore[attr-defined]
    return wrapper
