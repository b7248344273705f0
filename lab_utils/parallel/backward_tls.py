"""Collectives launched from inside backward, made safe for a plain interpreter exit.

Found with a core dump of a rank that aborted ("terminate called without an active exception")
under the spawn harness of tests/test_teardown.py; docs/teardown.md has the whole story:

1. For every backward, torch stashes a Python object in its thread-local state
   (``torch.autograd.graph._engine_run_backward``: ``_stash_obj_in_tls("context", ...)``).
2. A gloo collective copies the thread-local state into its work object (``AsyncWork::tls_``),
   so a collective called from a backward hook holds a reference to that Python object.
3. gloo's worker thread drops its reference to a work after the caller's ``wait()`` has
   returned. When it drops the LAST one, the Python object is released from that C++ thread,
   which must take the GIL first.
4. If the main thread is already finalising the interpreter (the harness returned right after
   ``destroy_process_group()``, which stops the workers without waiting for them), taking
   the GIL ends the thread with ``pthread_exit`` inside a ``noexcept`` destructor, and the C++
   runtime aborts the process.

The hooks of BucketDDP, ZeRO-2 and FSDP run under ``without_autograd_context``. The collectives
they launch then carry no Python object, and releasing them never needs the GIL, whichever
thread releases them and whenever. The object goes back into the thread-local state when the
hook returns, so the rest of backward sees what torch put there.
"""

from __future__ import annotations

import contextlib
import functools
from typing import Any, Callable, Iterator, TypeVar

import torch

KEY = "context"  # the key torch.autograd.graph._engine_run_backward stashes under
F = TypeVar("F", bound=Callable[..., Any])


@contextlib.contextmanager
def autograd_context_removed() -> Iterator[None]:
    """Take torch's per-backward Python object out of the thread-local state for the block."""
    if not torch._C._is_key_in_tls(KEY):
        yield
        return
    stashed = torch._C._get_obj_in_tls(KEY)
    torch._C._remove_obj_from_tls(KEY)
    try:
        yield
    finally:
        torch._C._stash_obj_in_tls(KEY, stashed)


def without_autograd_context(fn: F) -> F:
    """Decorator for a backward hook that launches collectives (see the module docstring)."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        with autograd_context_removed():
            return fn(*args, **kwargs)

    return wrapper  # type: ignore[return-value]
