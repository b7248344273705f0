"""Device peaks, interconnect speeds and the ``Cluster`` the planner works on (labs 03, 08, 10).

Figures are vendor datasheet values. FLOP/s are DENSE 16-bit tensor-core peaks (datasheets
often print the 2:4-sparsity figure, twice as large: do not use it for MFU). ``peak_fp8_flops``
is the dense FP8 tensor-core peak where the device has one (0 where it has none; lab 02). Link
speeds are
bytes/s PER DIRECTION: NVIDIA quotes NVLink as total bidirectional bandwidth (H100: 900 GB/s
= 450 GB/s each way); network links are quoted in bits/s (400 Gb/s = 50 GB/s).
"""

from __future__ import annotations

from dataclasses import dataclass

from lab_utils.calc._check import choice, nonneg_num, pos_int, pos_num, text
from lab_utils.calc.units import GB, GiB


@dataclass(frozen=True)
class Device:
    """An accelerator: dense bf16/fp16 peak FLOP/s, memory bytes, memory bandwidth bytes/s,
    and the dense FP8 peak (0: no FP8 tensor cores)."""

    name: str
    peak_flops: float
    memory_bytes: float
    mem_bandwidth: float
    source: str
    peak_fp8_flops: float = 0.0

    def __post_init__(self) -> None:
        text("Device.name", self.name)
        for f in ("peak_flops", "memory_bytes", "mem_bandwidth"):
            pos_num(f"Device.{f}", getattr(self, f))
        text("Device.source", self.source)
        nonneg_num("Device.peak_fp8_flops", self.peak_fp8_flops)


DEVICES: dict[str, Device] = {
    d.name: d
    for d in (
        Device(
            "V100-SXM2-32GB",
            125e12,
            32 * GB,
            900e9,
            "NVIDIA Tesla V100 datasheet (fp16 tensor core; no bf16)",
        ),
        Device("T4", 65e12, 16 * GB, 320e9, "NVIDIA T4 datasheet (fp16 tensor core)"),
        Device("L4", 121e12, 24 * GB, 300e9, "NVIDIA L4 datasheet (242 with sparsity)"),
        Device("A100-SXM4-40GB", 312e12, 40 * GB, 1555e9, "NVIDIA A100 datasheet (bf16 dense)"),
        Device("A100-SXM4-80GB", 312e12, 80 * GB, 2039e9, "NVIDIA A100 datasheet (bf16 dense)"),
        Device(
            "H100-PCIe-80GB",
            756e12,
            80 * GB,
            2.0e12,
            "NVIDIA H100 datasheet (bf16 dense; 1513 with sparsity; fp8 1513 dense, 3026 with "
            "sparsity)",
            1513e12,
        ),
        Device(
            "H100-SXM5-80GB",
            989e12,
            80 * GB,
            3.35e12,
            "NVIDIA H100 datasheet (bf16 dense; 1979 with sparsity; fp8 1979 dense, 3958 with "
            "sparsity)",
            1979e12,
        ),
        Device(
            "H800-SXM-80GB",
            989e12,
            80 * GB,
            3.35e12,
            "NVIDIA H800 (export variant of H100 SXM: same bf16 dense compute, NVLink cut to "
            "400 GB/s); DeepSeek-V3's GPU",
        ),
        Device(
            "H200-SXM-141GB",
            989e12,
            141 * GB,
            4.8e12,
            "NVIDIA H200 datasheet (bf16 dense; same compute as H100 SXM; fp8 1979 dense)",
            1979e12,
        ),
        Device("MI300X", 1307.4e12, 192 * GB, 5.3e12, "AMD Instinct MI300X datasheet (bf16 dense)"),
        Device("TPU-v4", 275e12, 32 * GiB, 1200e9, "Google Cloud TPU v4 documentation (bf16)"),
    )
}


@dataclass(frozen=True)
class Link:
    """An interconnect: ``bytes_per_s`` per direction, per GPU (or per port for networks)."""

    name: str
    bytes_per_s: float
    note: str

    def __post_init__(self) -> None:
        text("Link.name", self.name)
        pos_num("Link.bytes_per_s", self.bytes_per_s)
        text("Link.note", self.note)


LINKS: dict[str, Link] = {
    k.name: k
    for k in (
        Link("NVLink3", 300e9, "A100: 12 links, 600 GB/s total bidirectional per GPU"),
        Link("NVLink4", 450e9, "H100: 18 links, 900 GB/s total bidirectional per GPU"),
        Link("PCIe4-x16", 32e9, "PCIe Gen4 x16, ~32 GB/s each way"),
        Link("PCIe5-x16", 64e9, "PCIe Gen5 x16, ~64 GB/s each way"),
        Link("IB-HDR", 25e9, "InfiniBand HDR 200 Gb/s per port"),
        Link("IB-NDR", 50e9, "InfiniBand NDR 400 Gb/s per port"),
        Link("100GbE", 12.5e9, "100 Gb/s Ethernet"),
        Link("25GbE", 3.125e9, "25 Gb/s Ethernet"),
        Link("10GbE", 1.25e9, "10 Gb/s Ethernet"),
        Link("1GbE", 0.125e9, "1 Gb/s Ethernet"),
    )
}


@dataclass(frozen=True)
class Cluster:
    """A homogeneous GPU cluster as the planner sees it (lab 08).

    Bandwidths are bytes/s per GPU per direction: ``intra_node_bw`` between GPUs of one
    node (NVLink), ``inter_node_bw`` from one GPU to another node (its share of the NICs).
    ``*_latency_s`` are the alpha of the alpha-beta model.
    """

    gpus_per_node: int
    n_nodes: int
    gpu_mem_bytes: float
    intra_node_bw: float
    inter_node_bw: float
    peak_flops: float
    intra_node_latency_s: float = 5e-6
    inter_node_latency_s: float = 10e-6
    name: str = "cluster"

    def __post_init__(self) -> None:
        pos_int("Cluster.gpus_per_node", self.gpus_per_node)
        pos_int("Cluster.n_nodes", self.n_nodes)
        for f in ("gpu_mem_bytes", "intra_node_bw", "inter_node_bw", "peak_flops"):
            pos_num(f"Cluster.{f}", getattr(self, f))
        nonneg_num("Cluster.intra_node_latency_s", self.intra_node_latency_s)
        nonneg_num("Cluster.inter_node_latency_s", self.inter_node_latency_s)
        text("Cluster.name", self.name)

    @property
    def world(self) -> int:
        return self.gpus_per_node * self.n_nodes


def dgx_a100(n_nodes: int) -> Cluster:
    """DGX A100 80GB nodes: 8 GPUs, NVLink3, one HDR 200 Gb/s NIC per GPU (NVIDIA DGX A100
    datasheet). The cluster of Narayanan et al. 2021; labs 08, 12."""
    d = DEVICES["A100-SXM4-80GB"]
    return Cluster(
        8,
        n_nodes,
        d.memory_bytes,
        LINKS["NVLink3"].bytes_per_s,
        LINKS["IB-HDR"].bytes_per_s,
        d.peak_flops,
        name=f"{n_nodes}x DGX A100",
    )


def dgx_h100(n_nodes: int) -> Cluster:
    """DGX H100 nodes: 8 GPUs, NVLink4, one NDR 400 Gb/s NIC per GPU (NVIDIA DGX H100
    datasheet). Labs 08, 12."""
    d = DEVICES["H100-SXM5-80GB"]
    return Cluster(
        8,
        n_nodes,
        d.memory_bytes,
        LINKS["NVLink4"].bytes_per_s,
        LINKS["IB-NDR"].bytes_per_s,
        d.peak_flops,
        name=f"{n_nodes}x DGX H100",
    )


# ----------------------------------------------------------------- named cluster presets
@dataclass(frozen=True)
class ClusterSpec:
    """A named kind of GPU node, from vendor data sheets: the GPU (a ``DEVICES`` key), GPUs per
    node, the intra-node link and the per-GPU inter-node link (``LINKS`` keys), their alphas,
    and ``compute_efficiency``: the ONE fraction of the GPU's dense peak that compute is
    charged at (the emulated cluster, ``lab_utils.twin``; never tuned per experiment)."""

    name: str
    device: str
    gpus_per_node: int
    intra_link: str
    inter_link: str
    intra_latency_s: float
    inter_latency_s: float
    compute_efficiency: float
    source: str

    def __post_init__(self) -> None:
        text("ClusterSpec.name", self.name)
        if self.device not in DEVICES:
            raise ValueError(
                f"ClusterSpec.device {self.device!r} is not in DEVICES; known: {', '.join(DEVICES)}"
            )
        pos_int("ClusterSpec.gpus_per_node", self.gpus_per_node)
        for f in ("intra_link", "inter_link"):
            choice(f"ClusterSpec.{f}", getattr(self, f), tuple(LINKS))
        nonneg_num("ClusterSpec.intra_latency_s", self.intra_latency_s)
        nonneg_num("ClusterSpec.inter_latency_s", self.inter_latency_s)
        pos_num("ClusterSpec.compute_efficiency", self.compute_efficiency)
        if self.compute_efficiency > 1:
            raise ValueError(
                f"ClusterSpec.compute_efficiency is a fraction of peak in (0, 1], "
                f"got {self.compute_efficiency}"
            )
        text("ClusterSpec.source", self.source)

    def cluster(self, n_nodes: int) -> Cluster:
        """The planner's ``Cluster`` of ``n_nodes`` such nodes (same numbers)."""
        d = DEVICES[self.device]
        return Cluster(
            self.gpus_per_node,
            pos_int("n_nodes", n_nodes),
            d.memory_bytes,
            LINKS[self.intra_link].bytes_per_s,
            LINKS[self.inter_link].bytes_per_s,
            d.peak_flops,
            self.intra_latency_s,
            self.inter_latency_s,
            name=f"{n_nodes}x {self.name}",
        )


# One efficiency per GPU generation, shared by every preset with that GPU. No GEMM benchmark
# was run for these (no GPU was lent when they were set): 0.6 is an ASSUMED fraction of the
# dense bf16 peak reached by the matmuls of large transformer layers; calibrate it on a real
# GPU (issue 35, item 10) and replace it with the measured value, its date and torch version.
ASSUMED_EFFICIENCY = 0.6
_EFF_NOTE = "compute_efficiency 0.6 ASSUMED (not measured)"

# This machine, MEASURED (python -m lab_utils.twin.calibrate; 2026-11-28, torch 2.13.0+cpu,
# 2 cores shared with other jobs, load 18): one core per rank, loopback gloo as both links.
THIS_MACHINE = Device(
    "this-cpu (measured)",
    120.8e9,
    25.3e9,
    46.9e9,
    "measured 2026-11-28 on the course's 2-core machine: fp32 512^3 matmul "
    "on one thread 120.8 GFLOP/s; a 256 MB copy 46.9 GB/s; 25.3 GB RAM",
)
DEVICES[THIS_MACHINE.name] = THIS_MACHINE
LINKS["gloo-loopback"] = Link(
    "gloo-loopback",
    1.864e9,
    "measured 2026-11-28: 2-rank gloo "
    "all-reduce sweep 16 B-4 MB, alpha 36.8 us, 1.86 GB/s, r^2 0.98",
)

CLUSTER_SPECS: dict[str, ClusterSpec] = {
    s.name: s
    for s in (
        ClusterSpec(
            "DGX H100",
            "H100-SXM5-80GB",
            8,
            "NVLink4",
            "IB-NDR",
            3e-6,
            10e-6,
            ASSUMED_EFFICIENCY,
            "NVIDIA DGX H100 datasheet: 8 H100 SXM5, NVLink 4 (450 GB/s "
            "per direction per GPU), 8 ConnectX-7 400 Gb/s (one per GPU); " + _EFF_NOTE,
        ),
        ClusterSpec(
            "DGX A100",
            "A100-SXM4-80GB",
            8,
            "NVLink3",
            "IB-HDR",
            3e-6,
            10e-6,
            ASSUMED_EFFICIENCY,
            "NVIDIA DGX A100 datasheet: 8 A100 SXM4 80GB, NVLink 3 "
            "(300 GB/s per direction per GPU), 8 ConnectX-6 200 Gb/s (one per GPU); " + _EFF_NOTE,
        ),
        ClusterSpec(
            "PCIe A100",
            "A100-SXM4-80GB",
            8,
            "PCIe4-x16",
            "100GbE",
            10e-6,
            20e-6,
            ASSUMED_EFFICIENCY,
            "a PCIe server: 8 A100 80GB on PCIe Gen4 x16 (~32 GB/s "
            "each way, no NVLink), one 100 GbE port per GPU; " + _EFF_NOTE,
        ),
        ClusterSpec(
            "10GbE L4",
            "L4",
            4,
            "PCIe4-x16",
            "10GbE",
            10e-6,
            50e-6,
            ASSUMED_EFFICIENCY,
            "a commodity cluster: 4 L4 per node on PCIe Gen4, 10 Gb/s Ethernet per GPU; "
            + _EFF_NOTE,
        ),
        ClusterSpec(
            "This machine",
            THIS_MACHINE.name,
            2,
            "gloo-loopback",
            "gloo-loopback",
            36.8e-6,
            36.8e-6,
            1.0,
            "this 2-core machine as measured (efficiency 1: the "
            "peak IS the measured matmul rate); what the labs' raw wall clocks see",
        ),
    )
}
