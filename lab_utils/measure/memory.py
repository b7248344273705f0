"""Memory ledger of one rank: model state, saved activations, device peak (labs 01, 02, 05-07).

Model state is what training holds whatever the batch: parameters, gradients, optimizer state
(``model_state_bytes``). Activations saved for backward grow with batch and sequence
(``SavedActivations``). Both count STORAGES, each once: two tensors that view the same memory
(a tied embedding, a transposed weight) cost their bytes once, as they do on the device.
"""

from __future__ import annotations

import weakref
from typing import Any, Iterable

import torch
from torch import nn


def _local(t: torch.Tensor) -> torch.Tensor:
    """A DTensor (FSDP2 / TP parameter) holds only its local shard on this rank."""
    to_local = getattr(t, "to_local", None)
    return to_local() if callable(to_local) else t


def _storage_key(t: torch.Tensor) -> tuple[str, int]:
    return (str(t.device), t.untyped_storage().data_ptr())


def storage_bytes(tensors: Iterable[torch.Tensor], seen: set) -> int:
    """Bytes of the distinct storages behind ``tensors`` not already in ``seen``."""
    total = 0
    for t in tensors:
        t = _local(t)
        if t.device.type == "meta":
            continue
        key = _storage_key(t)
        if key in seen:
            continue
        seen.add(key)
        total += t.untyped_storage().nbytes()
    return total


def model_state_bytes(model: nn.Module, optimizer: torch.optim.Optimizer | None = None) -> dict:
    """Bytes this rank holds for parameters, gradients and optimizer state.

    params:    storages of model.parameters() (DTensor: the local shard; tied weights once)
    grads:     storages of their .grad
    optimizer: everything the optimizer holds beyond those: parameters it owns that the model
               does not (fp32 master weights of mixed precision: ``optimizer_master``), their
               .grad if kept, and its state tensors (Adam m and v: ``optimizer_state``)
    total:     params + grads + optimizer
    scalars:   0-dim optimizer bookkeeping (Adam's per-tensor ``step``): bytes per TENSOR,
               not per parameter; reported apart and left out of total, as the calculators
               (calc.memory) leave it out.
    Compare with ``calc.model_state_memory(n_params, recipe)`` (lab 01).
    """
    seen: set = set()
    params = [p for p in model.parameters()]
    p_bytes = storage_bytes(params, seen)
    g_bytes = storage_bytes([p.grad for p in params if p.grad is not None], seen)
    master = state = scalars = 0
    if optimizer is not None:
        own = [p for g in optimizer.param_groups for p in g["params"]]
        master = storage_bytes(own, seen)
        master += storage_bytes([p.grad for p in own if p.grad is not None], seen)
        tensors = [
            v for s in optimizer.state.values() for v in s.values() if isinstance(v, torch.Tensor)
        ]
        scalars = storage_bytes([v for v in tensors if _local(v).dim() == 0], seen)
        state = storage_bytes([v for v in tensors if _local(v).dim() > 0], seen)
    opt = master + state
    return {
        "params": p_bytes,
        "grads": g_bytes,
        "optimizer": opt,
        "total": p_bytes + g_bytes + opt,
        "optimizer_master": master,
        "optimizer_state": state,
        "scalars": scalars,
    }


class SavedActivations:
    """Bytes the autograd graph saves for backward inside the region (parameters excluded).

        with SavedActivations(model) as acts:
            loss = model(x).sum()          # forward: tensors saved for backward are counted
        acts.bytes, acts.count, acts.tensors   # then loss.backward() as usual

    ``bytes`` adds up every distinct storage saved inside the region; ``live_bytes`` is what
    is still held (autograd drops saved tensors as backward consumes them) and ``peak_bytes``
    the most that was held at once - with backward inside the region that includes what
    activation checkpointing recomputes during backward.

    Uses torch.autograd.graph.saved_tensors_hooks: every tensor an op saves for its backward
    passes through our pack hook. Parameters (and views of them, like the transposed weight a
    Linear saves) and the buffers of ``model`` are not activations and are excluded. Each
    storage is counted once (a weakref tells whether it is still the same storage when an
    address repeats). Limitation: torch.utils.checkpoint with use_reentrant=False installs its
    own inner hooks, hiding what it saves; use use_reentrant=True to measure checkpointing.
    """

    def __init__(self, model: nn.Module | None = None) -> None:
        self.model = model
        self.bytes = 0
        self.count = 0
        self.tensors: list[dict] = []  # shape, dtype, bytes of each distinct saved storage
        self.live_bytes = 0
        self.peak_bytes = 0
        self._seen: dict[tuple, weakref.ref] = {}
        self._excluded: set = set()
        self._hooks: Any = None

    def __enter__(self) -> "SavedActivations":
        if self.model is not None:
            for t in list(self.model.parameters()) + list(self.model.buffers()):
                self._excluded.add(_storage_key(_local(t)))
        self._hooks = torch.autograd.graph.saved_tensors_hooks(self._pack, lambda t: t)
        self._hooks.__enter__()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._hooks.__exit__(*exc)

    def _pack(self, t: torch.Tensor) -> torch.Tensor:
        base = t._base if t._base is not None else t
        if isinstance(t, nn.Parameter) or isinstance(base, nn.Parameter):
            return t
        local = _local(t)
        if local.device.type == "meta":
            return t
        key = _storage_key(local)
        if key in self._excluded:
            return t
        alive = self._seen.get(key)
        if alive is not None and alive() is not None:
            return t  # the same storage, already counted
        self._seen[key] = weakref.ref(t)  # t itself: autograd keeps it alive until backward
        nbytes = local.untyped_storage().nbytes()
        self.bytes += nbytes
        self.count += 1
        self.live_bytes += nbytes
        self.peak_bytes = max(self.peak_bytes, self.live_bytes)
        weakref.finalize(t, self._release, nbytes)  # when autograd (and everyone) lets go
        self.tensors.append(
            {"shape": tuple(local.shape), "dtype": str(local.dtype), "bytes": nbytes}
        )
        return t

    def _release(self, nbytes: int) -> None:
        self.live_bytes -= nbytes


def peak_memory_bytes(device: torch.device | str | None = None) -> int | None:
    """Peak allocated device memory since the last reset (CUDA only; None on CPU, where the
    allocator keeps no such counter)."""
    device = torch.device(device) if device is not None else None
    if device is not None and device.type == "cuda" and torch.cuda.is_available():
        return int(torch.cuda.max_memory_allocated(device))
    return None


def reset_peak_memory(device: torch.device | str | None = None) -> None:
    """Start a new peak measurement (CUDA only; a no-op elsewhere)."""
    device = torch.device(device) if device is not None else None
    if device is not None and device.type == "cuda" and torch.cuda.is_available():
        torch.cuda.reset_peak_memory_stats(device)
