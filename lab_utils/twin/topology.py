"""The emulated cluster's shape and speeds: nodes x GPUs per node, the GPU, two links (issue 35).

``Cluster`` is what a learner declares (or takes from a preset named after a vendor data sheet,
``calc.hardware.CLUSTER_SPECS``: one source of the numbers for ``calc`` and the emulator). It
answers the two questions the emulator asks: how long do these FLOPs take on one GPU, and which
links does a group of ranks span (``span``).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Sequence

from lab_utils.calc import hardware
from lab_utils.calc._check import fraction, nonneg_num, pos_int, pos_num, text


@dataclass(frozen=True)
class Link:
    """One link as the alpha-beta model sees it: latency (s) and bandwidth (bytes/s per GPU,
    per direction)."""

    name: str
    latency_s: float
    bytes_per_s: float

    def __post_init__(self) -> None:
        text("Link.name", self.name)
        nonneg_num(f"{self.name}.latency_s", self.latency_s)
        pos_num(f"{self.name}.bytes_per_s", self.bytes_per_s, "a link needs a bandwidth > 0")


@dataclass(frozen=True)
class Span:
    """Where a group's ranks sit: ``per_node`` ranks on each of ``nodes`` nodes (the largest
    count on any node when uneven)."""

    size: int
    nodes: int
    per_node: int


@dataclass(frozen=True)
class Cluster:
    """nodes x gpus_per_node GPUs with peak ``peak_flops`` charged at ``efficiency``, an
    ``intra`` link inside a node and an ``inter`` link per GPU between nodes."""

    nodes: int
    gpus_per_node: int
    peak_flops: float
    efficiency: float
    intra: Link
    inter: Link
    name: str = "cluster"
    gpu: str = "GPU"
    source: str = "declared by hand"
    slow_ranks: tuple = ()  # ((rank, factor), ...): that GPU runs at factor x (a straggler)

    def __post_init__(self) -> None:
        pos_int("Cluster.nodes", self.nodes)
        pos_int("Cluster.gpus_per_node", self.gpus_per_node)
        pos_num("Cluster.peak_flops", self.peak_flops)
        fraction("Cluster.efficiency", self.efficiency, "a fraction of peak in (0, 1]")
        if self.efficiency == 0:
            raise ValueError("Cluster.efficiency must be > 0 (a fraction of peak in (0, 1])")
        for pair in self.slow_ranks:
            if not (isinstance(pair, tuple) and len(pair) == 2):
                raise ValueError(f"Cluster.slow_ranks holds (rank, factor) pairs, got {pair!r}")
            if not (isinstance(pair[0], int) and 0 <= pair[0] < self.world_size):
                raise ValueError(
                    f"Cluster.slow_ranks: rank {pair[0]!r} is not one of the "
                    f"cluster's {self.world_size} GPUs (0..{self.world_size - 1})"
                )
            fraction("Cluster.slow_ranks factor", pair[1], "a GPU's speed as a fraction in (0, 1]")
            if pair[1] == 0:
                raise ValueError("Cluster.slow_ranks factor must be > 0 (a fraction in (0, 1])")
        for f in ("intra", "inter"):
            if not isinstance(getattr(self, f), Link):
                raise ValueError(
                    f"Cluster.{f} must be a twin.Link, got {type(getattr(self, f)).__name__}"
                )

    @property
    def world_size(self) -> int:
        return self.nodes * self.gpus_per_node

    @property
    def flops_per_s(self) -> float:
        """What compute is charged at: peak x efficiency."""
        return self.peak_flops * self.efficiency

    def rank_flops_per_s(self, rank: int) -> float:
        """What ``rank``'s compute is charged at: peak x efficiency x its ``slow_ranks`` factor."""
        return self.flops_per_s * dict(self.slow_ranks).get(rank, 1.0)

    @staticmethod
    def preset(name: str, nodes: int = 1, gpus_per_node: int | None = None) -> "Cluster":
        """A cluster of ``nodes`` nodes of a kind named in ``calc.hardware.CLUSTER_SPECS``
        ("DGX H100", "DGX A100", "PCIe A100", "10GbE L4"); ``gpus_per_node`` may use fewer
        GPUs of each node (e.g. 2 nodes x 2 GPUs for a 4-rank lab)."""
        if name not in hardware.CLUSTER_SPECS:
            raise ValueError(
                f"Cluster preset {name!r} is unknown; presets: {', '.join(hardware.CLUSTER_SPECS)}"
            )
        s = hardware.CLUSTER_SPECS[name]
        per = s.gpus_per_node if gpus_per_node is None else pos_int("gpus_per_node", gpus_per_node)
        if per > s.gpus_per_node:
            raise ValueError(f"gpus_per_node={per} but a {name} node has {s.gpus_per_node}")
        d, li, le = (
            hardware.DEVICES[s.device],
            hardware.LINKS[s.intra_link],
            hardware.LINKS[s.inter_link],
        )
        return Cluster(
            pos_int("nodes", nodes),
            per,
            d.peak_flops,
            s.compute_efficiency,
            Link(li.name, s.intra_latency_s, li.bytes_per_s),
            Link(le.name, s.inter_latency_s, le.bytes_per_s),
            name=f"{nodes}x{per} {name}",
            gpu=s.device,
            source=s.source,
        )

    def with_(self, **changes: object) -> "Cluster":
        """A copy with some fields changed (validated again): ``c.with_(nodes=4)``."""
        return replace(self, **changes)

    def check_world(self, world_size: int) -> None:
        """The ranks of a run must fill the cluster exactly (one rank per GPU)."""
        if pos_int("world_size", world_size) != self.world_size:
            raise ValueError(
                f"world_size={world_size} but the cluster {self.name!r} has "
                f"nodes x gpus_per_node = {self.nodes} x {self.gpus_per_node} = "
                f"{self.world_size} GPUs; one rank per GPU"
            )

    def node_of(self, rank: int) -> int:
        if not 0 <= rank < self.world_size:
            raise ValueError(f"rank {rank} is outside the cluster's {self.world_size} GPUs")
        return rank // self.gpus_per_node

    def span(self, ranks: Sequence[int]) -> Span:
        """Nodes a group of global ranks spans, and its most crowded node's count."""
        if not ranks:
            raise ValueError("a group needs at least one rank")
        counts: dict[int, int] = {}
        for r in ranks:
            counts[self.node_of(r)] = counts.get(self.node_of(r), 0) + 1
        return Span(len(ranks), len(counts), max(counts.values()))
