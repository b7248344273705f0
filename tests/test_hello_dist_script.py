"""scripts/hello_dist.py, lab 00's plain torchrun script, launched as a real two-node job on one
machine (lab00.run_torchrun); and the default timeouts lab 00 states, read from torch."""

from datetime import timedelta

from torch.distributed import constants

from lab_utils.experiments import lab00


def test_two_node_job_numbers_ranks_node_by_node():
    job = lab00.run_torchrun(
        lab00.SCRIPTS / "hello_dist.py", nnodes=2, nproc_per_node=2, timeout_s=240
    )
    assert job.returncodes == [0, 0], job.output[-3000:]
    assert [(r["RANK"], r["node"], r["LOCAL_RANK"]) for r in job.rows] == [
        (0, 0, 0),
        (1, 0, 1),
        (2, 1, 0),
        (3, 1, 1),
    ]
    assert all(r["WORLD_SIZE"] == 4 and r["sum"] == 10.0 for r in job.rows)  # 1 + 2 + 3 + 4
    assert len({r["pid"] for r in job.rows}) == 4
    assert all(r["pg_timeout_s"] == constants.default_pg_timeout.total_seconds() for r in job.rows)
    assert all(
        "--master-addr 127.0.0.1" in c and c.endswith("scripts/hello_dist.py") for c in job.commands
    )


def test_default_timeouts_match_torch():
    found = lab00.default_timeouts()
    assert (
        found["gloo"]
        == constants.default_pg_timeout.total_seconds()
        == timedelta(minutes=30).total_seconds()
    )
    if constants.default_pg_nccl_timeout is not None:  # CUDA builds
        assert found["nccl"] == constants.default_pg_nccl_timeout.total_seconds()
    else:  # CPU builds: read from the C++ header the wheel ships
        assert found["nccl"] == timedelta(minutes=10).total_seconds()


def test_timeout_rows_are_the_defaults_in_minutes():
    rows = lab00.timeout_rows({"gloo": 1800.0, "nccl": 600.0})
    assert [r["default timeout (min)"] for r in rows] == [30.0, 10.0]
    assert lab00.timeout_rows({"gloo": 1800.0, "nccl": None})[1]["default timeout (min)"] is None


def test_simulated_nodes_never_share_a_gpu(monkeypatch):
    """Nodes simulated on one machine share its GPUs: each gets GPUs of its own when there are
    enough for every rank, else none (gloo), never cuda:0 twice (NCCL: "Duplicate GPU detected")."""
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0")
    assert lab00.node_gpus(2, 1) == ["", ""]  # the 1-GPU machine where lab 00 quick mode failed
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0,1,2,3,4,5,6,7")
    assert lab00.node_gpus(2, 2) == ["0,1", "2,3"]
    assert lab00.node_gpus(2, 4) == ["0,1,2,3", "4,5,6,7"]
    assert lab00.node_gpus(3, 4) == ["", "", ""]
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    assert lab00.node_gpus(2, 2) == ["", ""]
