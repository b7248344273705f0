"""Topology: validation, rank arithmetic, and real process groups / DeviceMesh on 4 gloo ranks."""

import gc
import socket
from datetime import timedelta

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from lab_utils.topology import AXES, Topology


@pytest.mark.parametrize(
    "kwargs, message",
    [
        (dict(tp=0), "Topology.tp must be a positive integer, got 0"),
        (dict(dp=-2), "Topology.dp must be a positive integer, got -2"),
        (dict(pp=1.5), "Topology.pp must be a positive integer, got 1.5"),
    ],
)
def test_rejects_non_positive_degrees(kwargs, message):
    with pytest.raises(ValueError, match=message):
        Topology(**kwargs)


def test_check_world_size_message():
    Topology(dp=2, tp=2, pp=2).check(8)
    with pytest.raises(ValueError) as err:
        Topology(dp=2, tp=2, pp=1).check(8)
    assert str(err.value) == "dp x tp x pp = 2 x 2 x 1 = 4 must equal the world size 8"


def test_coords_rank_of_round_trip():
    topo = Topology(dp=2, tp=2, pp=2)
    assert topo.world_size == 8 and topo.shape == (2, 2, 2)
    for rank in range(8):
        assert topo.rank_of(**topo.coords(rank)) == rank
    assert topo.coords(0) == {"pp": 0, "dp": 0, "tp": 0}
    assert topo.coords(1) == {"pp": 0, "dp": 0, "tp": 1}  # tp innermost: neighbours in a node
    assert topo.coords(6) == {"pp": 1, "dp": 1, "tp": 0}
    with pytest.raises(ValueError, match="outside 0..7"):
        topo.coords(8)
    with pytest.raises(ValueError, match="tp=2 is outside 0..1"):
        topo.rank_of(tp=2)


def test_axis_ranks_and_all_groups():
    topo = Topology(dp=2, tp=2, pp=2)
    assert topo.axis_ranks("tp", 0) == [0, 1]
    assert topo.axis_ranks("dp", 5) == [5, 7]
    assert topo.axis_ranks("pp", 2) == [2, 6]
    assert topo.all_groups("tp") == [[0, 1], [2, 3], [4, 5], [6, 7]]
    assert topo.all_groups("dp") == [[0, 2], [1, 3], [4, 6], [5, 7]]
    assert topo.all_groups("pp") == [[0, 4], [1, 5], [2, 6], [3, 7]]
    with pytest.raises(ValueError, match="unknown axis 'ep'"):
        topo.axis_ranks("ep", 0)


@pytest.mark.parametrize("dp, tp, pp", [(1, 1, 1), (3, 1, 2), (2, 4, 1), (1, 2, 3)])
def test_groups_partition_the_ranks(dp, tp, pp):
    topo = Topology(dp=dp, tp=tp, pp=pp)
    for axis in AXES:
        groups = topo.all_groups(axis)
        assert sorted(r for g in groups for r in g) == list(range(topo.world_size))
        assert all(len(g) == topo.size(axis) for g in groups)


# -- multi-rank: the groups really connect the ranks they claim to ------------------------------


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _groups_and_mesh_worker(rank: int, world_size: int, port: int) -> None:
    torch.set_num_threads(1)  # 4 ranks on a 2-core machine: no oversubscription
    dist.init_process_group(
        "gloo",
        init_method=f"tcp://127.0.0.1:{port}",
        rank=rank,
        world_size=world_size,
        timeout=timedelta(seconds=30),
    )
    try:
        topo = Topology(dp=2, tp=2, pp=1)  # pp groups have size 1: the trivial axis works too
        groups = topo.build_groups()
        mesh = topo.build_mesh("cpu")
        assert mesh.mesh_dim_names == AXES
        assert list(mesh.get_coordinate()) == [topo.coords(rank)[a] for a in AXES]  # same layout
        for axis in AXES:
            expected = float(sum(topo.axis_ranks(axis, rank)))
            for source, group in (("groups", groups[axis]), ("mesh", mesh.get_group(axis))):
                t = torch.tensor([float(rank)])
                dist.all_reduce(t, group=group)
                assert t.item() == expected, f"rank {rank}, {source}[{axis}]: {t.item()}"
        dist.barrier()
    finally:
        gc.collect()  # drop group references before teardown: gloo may abort otherwise
        dist.destroy_process_group()


@pytest.mark.timeout(120)
def test_build_groups_and_mesh_on_four_gloo_ranks():
    mp.spawn(_groups_and_mesh_worker, args=(4, _free_port()), nprocs=4, join=True)
