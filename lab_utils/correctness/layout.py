"""How a distributed tensor is laid out over ranks, and how to put it back together (lab 14).

A Layout is DTensor's idea in a dozen lines: a ``mesh`` of global ranks (nested tuples, one
nesting level per mesh axis) and one placement per axis:

    Replicate()        every index along the axis holds the whole tensor: each is a REPLICA,
                       compared with the reference on its own (a replica that disagrees with
                       the others is a missing reduction)
    Shard(dim)         the indices hold consecutive slices along tensor dim ``dim``: concatenated
                       (DP's batch rows, TP's column / row shards, CP's sequence chunks)
    Partial("sum")     the indices hold terms of a sum ("avg": of a mean): added up
                       (a loss whose gradients are summed, a row-parallel output before its
                       all-reduce)
    FlatShard()        ZeRO / FSDP's flat shards: flattened, concatenated, padding trimmed,
                       reshaped to the reference's shape

Ranks that do not hold a tensor (the other pipeline stages) are simply not in its mesh.
``reassemble`` returns the replicas, each with the ranks it came from; a piece that is missing or
whose shape cannot be combined raises LayoutError naming the tensor and the layout, instead of
comparing tensors of the wrong shape.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Union

import torch


@dataclass(frozen=True)
class Replicate:
    def __str__(self) -> str:
        return "Replicate"


@dataclass(frozen=True)
class Shard:
    dim: int

    def __str__(self) -> str:
        return f"Shard({self.dim})"


@dataclass(frozen=True)
class Partial:
    op: str = "sum"  # "sum" or "avg"

    def __post_init__(self) -> None:
        if self.op not in ("sum", "avg"):
            raise ValueError(f"Partial.op must be 'sum' or 'avg', got {self.op!r}")

    def __str__(self) -> str:
        return f"Partial({self.op})"


@dataclass(frozen=True)
class FlatShard:
    def __str__(self) -> str:
        return "FlatShard"


Placement = Union[Replicate, Shard, Partial, FlatShard]
Mesh = Union[int, tuple]


class LayoutError(ValueError):
    """A tensor's pieces cannot be reassembled under the layout the configuration declared."""


def mesh_depth(mesh: Mesh) -> int:
    return 0 if isinstance(mesh, int) else 1 + mesh_depth(mesh[0])


def mesh_ranks(mesh: Mesh) -> tuple[int, ...]:
    return (mesh,) if isinstance(mesh, int) else tuple(r for m in mesh for r in mesh_ranks(m))


@dataclass(frozen=True)
class Layout:
    """``mesh`` of global ranks (e.g. ((0, 1), (2, 3)) for dp x tp) and one placement per axis."""

    mesh: Mesh
    placements: tuple[Placement, ...]

    def __post_init__(self) -> None:
        if mesh_depth(self.mesh) != len(self.placements):
            raise ValueError(
                f"layout mesh {self.mesh} has {mesh_depth(self.mesh)} axes but "
                f"{len(self.placements)} placements {self.placements}"
            )

    @property
    def ranks(self) -> tuple[int, ...]:
        return mesh_ranks(self.mesh)

    def __str__(self) -> str:
        return f"mesh {self.mesh} [{', '.join(map(str, self.placements))}]"


def replicated(ranks: tuple[int, ...] | list[int]) -> Layout:
    """The whole tensor on every rank in ``ranks`` (DP replicas, a pipeline stage's weights)."""
    return Layout(tuple(ranks), (Replicate(),))


Replica = tuple[torch.Tensor, tuple[int, ...]]  # (the tensor, the ranks it was built from)


def reassemble(
    name: str, layout: Layout, pieces: dict[int, torch.Tensor], shape: torch.Size
) -> list[Replica]:
    """The full tensor(s) ``name`` from each rank's piece; ``shape`` is the reference's."""
    missing = [r for r in layout.ranks if r not in pieces]
    if missing:
        raise LayoutError(
            f"tensor {name!r}, layout {layout}: ranks {missing} recorded no piece "
            f"(ranks that did: {sorted(pieces)})"
        )
    replicas = _combine(name, layout, layout.mesh, layout.placements, pieces, shape)
    for t, ranks in replicas:
        if t.shape != shape:
            raise LayoutError(
                f"tensor {name!r}, layout {layout}: ranks {list(ranks)} reassemble "
                f"to shape {tuple(t.shape)} but the reference has {tuple(shape)}"
            )
    return replicas


def _combine(
    name: str, layout: Layout, mesh: Mesh, placements: tuple, pieces: dict, shape: torch.Size
) -> list[Replica]:
    if isinstance(mesh, int):
        return [(pieces[mesh].double(), (mesh,))]
    subs = [_combine(name, layout, m, placements[1:], pieces, shape) for m in mesh]
    place = placements[0]
    if isinstance(place, Replicate):
        return [rep for sub in subs for rep in sub]
    if len({len(s) for s in subs}) != 1:
        raise LayoutError(f"tensor {name!r}, layout {layout}: unequal replica counts under {place}")
    out = []
    for parts in zip(*subs):
        tensors, ranks = [t for t, _ in parts], tuple(r for _, rs in parts for r in rs)
        out.append((_join(name, layout, place, tensors, ranks, shape), ranks))
    return out


def _join(
    name: str,
    layout: Layout,
    place: Placement,
    tensors: list[torch.Tensor],
    ranks: tuple[int, ...],
    shape: torch.Size,
) -> torch.Tensor:
    shapes = [tuple(t.shape) for t in tensors]
    try:
        if isinstance(place, Shard):
            return torch.cat(tensors, dim=place.dim)
        if isinstance(place, Partial):
            total = torch.stack(tensors).sum(0)
            return total / len(tensors) if place.op == "avg" else total
        flat = torch.cat([t.reshape(-1) for t in tensors])
        if flat.numel() < shape.numel():
            raise LayoutError(
                f"tensor {name!r}, layout {layout}: flat shards {shapes} of ranks "
                f"{list(ranks)} hold {flat.numel()} elements, fewer than the "
                f"reference's {shape.numel()}"
            )
        return flat[: shape.numel()].view(shape)  # drop the padding of the last shard
    except RuntimeError as exc:  # torch.cat / stack on incompatible shapes
        raise LayoutError(
            f"tensor {name!r}, layout {layout}: pieces of shapes {shapes} from "
            f"ranks {list(ranks)} cannot be combined under {place} ("
            f"{str(exc).splitlines()[0]})"
        ) from None


def split_reference(
    name: str, layout: Layout, pieces: dict[int, torch.Tensor], ref: torch.Tensor
) -> dict[int, torch.Tensor] | None:
    """What each rank's piece should have been: the reference cut the way the pieces are
    (None under a Partial placement: a term of a sum cannot be told from the sum)."""
    return _split(name, layout, layout.mesh, layout.placements, pieces, ref)


def _split(
    name: str, layout: Layout, mesh: Mesh, placements: tuple, pieces: dict, ref: torch.Tensor
) -> dict[int, torch.Tensor] | None:
    if isinstance(mesh, int):
        return {mesh: ref}
    place = placements[0]
    if isinstance(place, Partial):
        return None
    if isinstance(place, Replicate):
        parts = [ref] * len(mesh)
    else:  # the extent each index covers, from what its ranks really hold
        extents = [_combine(name, layout, m, placements[1:], pieces, ref.shape)[0][0] for m in mesh]
        if isinstance(place, Shard):
            parts = list(ref.split([t.shape[place.dim] for t in extents], dim=place.dim))
        else:
            sizes = [t.numel() for t in extents]
            flat = torch.nn.functional.pad(ref.reshape(-1), (0, sum(sizes) - ref.numel()))
            parts = list(flat.split(sizes))
    out: dict[int, torch.Tensor] = {}
    for m, part in zip(mesh, parts):
        sub = _split(name, layout, m, placements[1:], pieces, part)
        if sub is None:
            return None
        out.update(sub)
    return out
