"""One validated description of how ranks are arranged for DP x TP x PP.

Rank layout (pp outermost, then dp, tp innermost):

    rank = (pp * dp_size + dp) * tp_size + tp

so the ranks of one tensor-parallel group are CONSECUTIVE. Launchers number ranks node by node,
so consecutive ranks share a node: TP, which all-reduces activations in every layer, gets the fast
intra-node links; PP, which only sends activations between neighbours, may cross nodes.
Example dp=2, tp=2, pp=2 (8 ranks):

    pp=0: dp=0 -> [0, 1]   dp=1 -> [2, 3]
    pp=1: dp=0 -> [4, 5]   dp=1 -> [6, 7]

Vocabulary: an *axis* is a direction of the rank grid ("pp", "dp", "tp"); a tensor has *dims*.
The pure helpers need no process group (unit-testable); build_groups / build_mesh need one.
Nothing is stored globally: pass the returned groups or mesh to the code that needs them.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch.distributed as dist
from torch.distributed.device_mesh import DeviceMesh, init_device_mesh

AXES = ("pp", "dp", "tp")  # outermost -> innermost; also the DeviceMesh dim order


@dataclass(frozen=True)
class Topology:
    dp: int = 1
    tp: int = 1
    pp: int = 1

    def __post_init__(self) -> None:
        for axis in AXES:
            size = getattr(self, axis)
            if not isinstance(size, int) or isinstance(size, bool) or size < 1:
                raise ValueError(f"Topology.{axis} must be a positive integer, got {size!r}")

    @property
    def world_size(self) -> int:
        return self.dp * self.tp * self.pp

    @property
    def shape(self) -> tuple[int, int, int]:
        """Sizes in AXES order (pp, dp, tp): the DeviceMesh shape."""
        return (self.pp, self.dp, self.tp)

    def size(self, axis: str) -> int:
        _check_axis(axis)
        return getattr(self, axis)

    def check(self, world_size: int) -> None:
        """Raise ValueError unless the degrees multiply to the number of launched ranks."""
        if self.world_size != world_size:
            raise ValueError(
                f"dp x tp x pp = {self.dp} x {self.tp} x {self.pp} = {self.world_size} "
                f"must equal the world size {world_size}"
            )

    # -- pure rank arithmetic (no process group needed) -------------------------------------

    def coords(self, rank: int) -> dict[str, int]:
        """Position of `rank` on each axis, e.g. {'pp': 1, 'dp': 0, 'tp': 1}."""
        if not 0 <= rank < self.world_size:
            raise ValueError(f"rank {rank} is outside 0..{self.world_size - 1} for {self}")
        pp, rest = divmod(rank, self.dp * self.tp)
        dp, tp = divmod(rest, self.tp)
        return {"pp": pp, "dp": dp, "tp": tp}

    def rank_of(self, pp: int = 0, dp: int = 0, tp: int = 0) -> int:
        """Inverse of coords."""
        for axis, index in (("pp", pp), ("dp", dp), ("tp", tp)):
            if not 0 <= index < getattr(self, axis):
                raise ValueError(f"{axis}={index} is outside 0..{getattr(self, axis) - 1}")
        return (pp * self.dp + dp) * self.tp + tp

    def axis_ranks(self, axis: str, rank: int) -> list[int]:
        """Ranks in `rank`'s group along `axis`: same coordinates on the other two axes."""
        _check_axis(axis)
        c = self.coords(rank)
        return [self.rank_of(**{**c, axis: i}) for i in range(self.size(axis))]

    def all_groups(self, axis: str) -> list[list[int]]:
        """Every group along `axis`, ordered by their smallest rank. They partition all ranks."""
        _check_axis(axis)
        groups: list[list[int]] = []
        for rank in range(self.world_size):
            if self.coords(rank)[axis] == 0:  # each group is listed once, by its first member
                groups.append(self.axis_ranks(axis, rank))
        return groups

    # -- with an initialised process group ---------------------------------------------------

    def build_groups(self) -> dict[str, dist.ProcessGroup]:
        """Create a process group for every group of every axis; return this rank's, by axis.

        dist.new_group is itself a collective: EVERY rank must call it for EVERY group (even the
        groups it is not in), in the same order, or ranks wait for each other forever. Hence the
        loops over all axes and all groups on every rank. Size-1 groups are created too, so
        code can always ask for groups["tp"] whatever the degrees.
        """
        rank = self._checked_rank()
        mine: dict[str, dist.ProcessGroup] = {}
        for axis in AXES:
            for ranks in self.all_groups(axis):
                group = dist.new_group(ranks)
                if rank in ranks:
                    mine[axis] = group
        return mine

    def build_mesh(self, device_type: str = "cpu") -> DeviceMesh:
        """A DeviceMesh of shape (pp, dp, tp) with named axes "pp", "dp", "tp".

        All three axes are always present, even size-1 ones: code can then write mesh["tp"] or
        mesh["dp"] whatever the degrees (a size-1 axis costs one trivial group). The rank layout
        is the same as coords(): init_device_mesh fills the mesh in row-major order.
        """
        self._checked_rank()
        return init_device_mesh(device_type, self.shape, mesh_dim_names=AXES)

    def _checked_rank(self) -> int:
        if not dist.is_initialized():
            raise RuntimeError("no process group: call dist.init_process_group first")
        self.check(dist.get_world_size())
        return dist.get_rank()


def _check_axis(axis: str) -> None:
    if axis not in AXES:
        raise ValueError(f"unknown axis {axis!r}; the axes are {AXES}")
