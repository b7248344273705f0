"""`python -m lab_utils`: run, --print-command, doctor, and readable errors (exit 2)."""

import os
import subprocess
import sys

from lab_utils.cli import main, sbatch_script, torchrun_cluster_command
from lab_utils.tools.doctor import format_checks, run_checks

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def cli(*args):
    return subprocess.run(
        [sys.executable, "-m", "lab_utils", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        env=dict(os.environ, PYTHONPATH=ROOT),
    )


def test_run_prints_each_rank_result():
    res = cli("run", "lab_utils.experiments.lab00:allreduce_demo", "--nproc", "2")
    assert res.returncode == 0, res.stderr
    assert (
        "rank 1 returned: {'before': [1.0, 2.0, 3.0, 4.0], 'after': [1.0, 3.0, 5.0, 7.0]}"
        in res.stdout
    )


def test_bad_targets_exit_2_with_one_line(capsys):
    for target, expected in [
        ("no_such_module:fn", "cannot import module 'no_such_module'"),
        ("lab_utils.experiments.lab00:nope", "has no function 'nope'; it has: allreduce_demo"),
        ("lab_utils.experiments.lab00", "must look like 'package.module:function'"),
        ("lab_utils.experiments.lab00:LAUNCH_ENV", "is a tuple, not a function"),
    ]:
        assert main(["run", target]) == 2
        err = capsys.readouterr().err
        assert expected in err and "Traceback" not in err


def test_bad_nproc_exits_2():
    assert cli("run", "lab_utils.experiments.lab00:hello", "--nproc", "0").returncode == 2
    res = cli("run", "lab_utils.experiments.lab00:hello", "--nproc", "two")
    assert res.returncode == 2 and "invalid int value" in res.stderr


def test_print_command_is_a_real_torchrun_command():
    res = cli(
        "run",
        "lab_utils.experiments.lab00:hello",
        "--nproc",
        "8",
        "--nnodes",
        "2",
        "--rdzv-endpoint",
        "node0:29500",
        "--print-command",
    )
    assert res.returncode == 0
    assert (
        "torchrun --nnodes=2 --nproc-per-node=8 --rdzv-backend=c10d --rdzv-endpoint=node0:29500 "
        "--rdzv-id=lab -m lab_utils.runtime.worker --target lab_utils.experiments.lab00:hello"
    ) in res.stdout
    assert (
        "#SBATCH --nodes=2" in res.stdout and "srun torchrun --nnodes=$SLURM_NNODES" in res.stdout
    )


def test_printed_command_runs_on_one_node():
    """The printed command is not just text: run it (one node, gloo) and read the ranks' results."""
    cmd = torchrun_cluster_command(
        "lab_utils.experiments.lab00:allreduce_demo", 2, 1, "127.0.0.1:0", "gloo", 60
    )
    cmd[0:1] = [sys.executable, "-m", "torch.distributed.run"]
    res = subprocess.run(
        cmd,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        env=dict(os.environ, PYTHONPATH=ROOT, OMP_NUM_THREADS="1"),
    )
    assert res.returncode == 0, res.stderr[-2000:]
    assert (
        "[rank 1] result: {'before': [1.0, 2.0, 3.0, 4.0], 'after': [1.0, 3.0, 5.0, 7.0]}"
        in res.stdout
    )


def test_sbatch_script_uses_cpus_for_gloo():
    script = sbatch_script("m:f", 4, 2, "gloo", 60)
    assert "--cpus-per-task=4" in script and "--gpus-per-node" not in script


def test_doctor_reports_every_check_and_passes_here():
    checks = run_checks(smoke=True)
    names = [c.name for c in checks]
    assert names == [
        "python",
        "torch",
        "cpu cores",
        "backends",
        "gpus",
        "widgets",
        "2-rank all-reduce",
    ]
    assert all(c.status in ("OK", "WARN") for c in checks), format_checks(checks)
    assert all(c.fix for c in checks if c.status != "OK"), "every problem needs its fix"
    assert "2-rank all-reduce" in format_checks(checks)


def test_cards_subcommand_takes_its_own_options(tmp_path, capsys):
    assert main(["cards", "--self-test"]) == 0
    assert "deck self-test OK" in capsys.readouterr().out
    res = subprocess.run(
        [
            sys.executable,
            "-m",
            "lab_utils",
            "cards",
            "--lab",
            "05",
            "--n",
            "1",
            "--progress",
            str(tmp_path / "p.json"),
        ],
        cwd=ROOT,
        input="y\n",
        capture_output=True,
        text=True,
        timeout=120,
        env=dict(os.environ, PYTHONPATH=ROOT),
    )
    assert res.returncode == 0, res.stderr
    assert "You knew 1 of 1" in res.stdout and (tmp_path / "p.json").exists()


def test_import_lab_utils_does_not_import_torch():
    code = "import sys, lab_utils; assert 'torch' not in sys.modules; print(lab_utils.Ctx.__name__)"
    res = subprocess.run(
        [sys.executable, "-c", code],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        env=dict(os.environ, PYTHONPATH=ROOT),
    )
    assert res.returncode == 0 and res.stdout.strip() == "Ctx", res.stderr


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_two_node_rehearsal_matches_one_four_rank_node():
    """The pre-flight check before a cluster workshop: the printed multi-node command, run as two
    torchrun agents (two "nodes") on this machine, gives the same result as one 4-rank node."""
    import re

    from lab_utils import run
    from lab_utils.experiments.lab00 import allreduce_demo

    endpoint = f"127.0.0.1:{_free_port()}"
    cmd = torchrun_cluster_command(
        "lab_utils.experiments.lab00:allreduce_demo", 2, 2, endpoint, "gloo", 60
    )
    cmd[0:1] = [sys.executable, "-m", "torch.distributed.run"]
    env = dict(os.environ, PYTHONPATH=ROOT, OMP_NUM_THREADS="1")
    nodes = [
        subprocess.Popen(
            cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
        )
        for _ in range(2)
    ]
    outs = [node.communicate(timeout=180)[0] for node in nodes]
    assert all(node.returncode == 0 for node in nodes), "\n".join(o[-1500:] for o in outs)
    found = {
        int(r): eval(v) for o in outs for r, v in re.findall(r"\[rank (\d)\] result: (\{.*\})", o)
    }
    assert sorted(found) == [0, 1, 2, 3], outs
    assert [found[r] for r in range(4)] == list(run(allreduce_demo, 4, quiet=True))
