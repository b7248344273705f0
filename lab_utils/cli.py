"""Command line: `python -m lab_utils <command>` (lab 00).

    python -m lab_utils doctor                                    pre-flight check
    python -m lab_utils twin validate                             the emulated cluster vs calc
                                                                  and published runs (a table)
    python -m lab_utils cards --lab 05                            flashcards in the terminal
    python -m lab_utils class serve --db class.sqlite             a live class (lab_utils.classroom)
    python -m lab_utils zoo [BUG ...] [--details]                 the bug zoo under the bisector
    python -m lab_utils bisect BUG [--fixed]                      bisect one zoo bug (or its fix)
    python -m lab_utils bisect package.module:make_case           bisect your own Case
    python -m lab_utils run lab_utils.experiments.lab00:hello --nproc 4    run a function on 4
    ranks here
    python -m lab_utils run MOD:FN --nproc 8 --nnodes 2 --rdzv-endpoint node0:29500 --print-command
                                                                  the same experiment on a cluster:
                                                                  prints torchrun and sbatch
                                                                  commands

Bad input (a module or function that does not exist, a bad rank count) prints one readable
line and exits with status 2.
"""

from __future__ import annotations

import argparse
import importlib
import inspect
import shlex
import sys
from typing import Callable, Sequence

USAGE_ERROR = 2


class UsageError(Exception):
    """A mistake in the command line: shown as one line, exit status 2."""


def resolve_target(target: str) -> Callable:
    """'package.module:function' -> the function, or a UsageError saying what is wrong."""
    module_name, sep, fn_name = target.partition(":")
    if not sep or not module_name or not fn_name:
        raise UsageError(f"target must look like 'package.module:function', got {target!r}")
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        raise UsageError(
            f"cannot import module {module_name!r} ({exc}); is it on PYTHONPATH? "
            "run from the repository root or `pip install -e .`"
        ) from None
    fn = getattr(module, fn_name, None)
    if fn is None:
        public = sorted(
            n
            for n, v in vars(module).items()
            if inspect.isfunction(v) and v.__module__ == module.__name__ and not n.startswith("_")
        )
        raise UsageError(
            f"module {module_name!r} has no function {fn_name!r}; it has: {', '.join(public)}"
        )
    if not callable(fn):
        raise UsageError(f"{target} is a {type(fn).__name__}, not a function")
    return fn


def torchrun_cluster_command(
    target: str,
    nproc: int,
    nnodes: int,
    endpoint: str,
    backend: str,
    timeout_s: float,
    job_id: str = "lab",
) -> list[str]:
    """The multi-node torchrun command: run the same line on every node."""
    return [
        "torchrun",
        f"--nnodes={nnodes}",
        f"--nproc-per-node={nproc}",
        "--rdzv-backend=c10d",
        f"--rdzv-endpoint={endpoint}",
        f"--rdzv-id={job_id}",
        "-m",
        "lab_utils.runtime.worker",
        "--target",
        target,
        "--backend",
        backend,
        "--timeout",
        f"{timeout_s:g}",
    ]


def sbatch_script(target: str, nproc: int, nnodes: int, backend: str, timeout_s: float) -> str:
    """A Slurm batch script: one torchrun per node, rendezvous on the first node."""
    cmd = torchrun_cluster_command(
        target, nproc, nnodes, "$head:29500", backend, timeout_s, "$SLURM_JOB_ID"
    )
    cmd[1] = "--nnodes=$SLURM_NNODES"
    return "\n".join(
        [
            "#!/bin/bash",
            "#SBATCH --job-name=dist-lab",
            f"#SBATCH --nodes={nnodes}",
            "#SBATCH --ntasks-per-node=1          # one torchrun agent per node; it starts the "
            "ranks",
            f"#SBATCH --gpus-per-node={nproc}"
            if backend != "gloo"
            else f"#SBATCH --cpus-per-task={max(2, nproc)}",
            "#SBATCH --time=00:30:00",
            "set -euo pipefail",
            'head=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1)',
            "source .venv/bin/activate            # the course environment, on a shared filesystem",
            "srun "
            + " ".join(
                c if c.startswith("--rdzv-endpoint") or "$" in c else shlex.quote(c) for c in cmd
            ),
        ]
    )


def _cmd_run(ns: argparse.Namespace) -> int:
    if ns.nproc < 1:
        raise UsageError(f"--nproc must be at least 1, got {ns.nproc}")
    if ns.nnodes < 1:
        raise UsageError(f"--nnodes must be at least 1, got {ns.nnodes}")
    if ns.print_command:
        backend = "nccl" if ns.backend == "auto" else ns.backend
        endpoint = ns.rdzv_endpoint or "HEAD_NODE:29500"
        print("# Run this same command on every node (node order does not matter):")
        print(
            shlex.join(
                torchrun_cluster_command(
                    ns.target, ns.nproc, ns.nnodes, endpoint, backend, ns.timeout
                )
            )
        )
        print("\n# Or submit with Slurm (sbatch job.sh):")
        print(sbatch_script(ns.target, ns.nproc, ns.nnodes, backend, ns.timeout))
        return 0
    if ns.nnodes != 1:
        raise UsageError(
            "running here is single-node; add --print-command for the multi-node commands"
        )
    fn = resolve_target(ns.target)
    from lab_utils.runtime.launch import RankFailure, run

    try:
        results = run(fn, ns.nproc, backend=ns.backend, timeout_s=ns.timeout)
    except RankFailure as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    for rank, value in enumerate(results):
        print(f"rank {rank} returned: {value!r}")
    print(f"{ns.nproc} ranks, backend {results.backend}, {results.elapsed_s:.1f} s")
    return 0


def _cmd_doctor(ns: argparse.Namespace) -> int:
    from lab_utils.tools.doctor import doctor

    checks = doctor(smoke=not ns.no_smoke)
    return 1 if any(c.status == "FAIL" for c in checks) else 0


def _cmd_cards(ns: argparse.Namespace) -> int:
    from lab_utils.cards import cli_main

    return cli_main(ns.rest)


def _cmd_class(ns: argparse.Namespace) -> int:
    import sqlite3

    from lab_utils.classroom.server import serve

    try:
        serve(ns.db, ns.host, ns.port)
    except sqlite3.Error as exc:
        raise UsageError(f"--db {ns.db}: not a usable SQLite file ({exc})") from None
    except OSError as exc:  # the address is taken, or not one of this machine's
        raise UsageError(
            f"cannot listen on --host {ns.host} --port {ns.port}: {exc.strerror}"
            " (pick another --port)"
        ) from None
    return 0


def _cmd_twin(ns: argparse.Namespace) -> int:
    from lab_utils.twin.validate import main

    return main(["--no-grid"] if ns.no_grid else [])


def _cmd_zoo(ns: argparse.Namespace) -> int:
    from lab_utils.correctness.zoo import main

    return main(ns.bugs, details=ns.details)


def _cmd_bisect(ns: argparse.Namespace) -> int:
    from lab_utils.correctness import Case, bisect
    from lab_utils.correctness.zoo import BUGS

    known = {b.name: b for b in BUGS}
    if ":" in ns.bug:  # package.module:function returning a Case: your own configuration
        case = resolve_target(ns.bug)()
        if not isinstance(case, Case):
            raise UsageError(
                f"{ns.bug} returned a {type(case).__name__}, not a lab_utils.correctness.Case"
            )
    elif ns.bug in known:
        case = known[ns.bug].fixed if ns.fixed else known[ns.bug].buggy
    else:
        raise UsageError(
            f"no bug named {ns.bug!r}; the zoo has: {', '.join(known)} "
            "(or give package.module:function returning a Case)"
        )
    report = bisect(case)
    print(report)
    return 0 if report.verdict == "clean" else 1


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m lab_utils", description=__doc__.split("\n\n")[0]
    )
    sub = parser.add_subparsers(dest="command", required=True)

    run_p = sub.add_parser("run", help="run module:function on N ranks (or print cluster commands)")
    run_p.add_argument("target", help="package.module:function taking (ctx)")
    run_p.add_argument("--nproc", type=int, default=2, help="ranks per node (default 2)")
    run_p.add_argument("--backend", choices=("auto", "gloo", "nccl"), default="auto")
    run_p.add_argument(
        "--timeout", type=float, default=120.0, help="seconds before stuck ranks are stopped"
    )
    run_p.add_argument(
        "--print-command", action="store_true", help="print torchrun / sbatch commands instead"
    )
    run_p.add_argument("--nnodes", type=int, default=1, help="nodes (with --print-command)")
    run_p.add_argument(
        "--rdzv-endpoint", default=None, help="HOST:PORT of the first node (with --print-command)"
    )
    run_p.set_defaults(func=_cmd_run)

    cards_p = sub.add_parser(
        "cards", help="flashcard quiz in the terminal (--help for options)", add_help=False
    )
    cards_p.add_argument("rest", nargs=argparse.REMAINDER)
    cards_p.set_defaults(func=_cmd_cards)

    doc_p = sub.add_parser("doctor", help="check this machine is ready for the labs")
    doc_p.add_argument("--no-smoke", action="store_true", help="skip the 2-rank launch")
    doc_p.set_defaults(func=_cmd_doctor)

    class_p = sub.add_parser("class", help="live class: `class serve --db FILE` (instructor)")
    class_p.add_argument("action", choices=("serve",))
    class_p.add_argument("--db", required=True, help="SQLite file that keeps the class (reused)")
    class_p.add_argument("--host", default="127.0.0.1", help="interface (0.0.0.0: the room)")
    class_p.add_argument("--port", type=int, default=8765, help="0 picks a free port")
    class_p.set_defaults(func=_cmd_class)

    zoo_p = sub.add_parser("zoo", help="bisect every bug of the zoo: one row per bug")
    zoo_p.add_argument("bugs", nargs="*", help="only these bugs (default: all)")
    zoo_p.add_argument("--details", action="store_true", help="the bisector's explanation too")
    zoo_p.set_defaults(func=_cmd_zoo)

    bisect_p = sub.add_parser("bisect", help="bisect one zoo bug: the first op that is wrong")
    bisect_p.add_argument(
        "bug",
        help="a bug of the zoo (`zoo` lists them), or "
        "package.module:function returning a lab_utils.correctness.Case",
    )
    bisect_p.add_argument("--fixed", action="store_true", help="its fixed version instead")
    bisect_p.set_defaults(func=_cmd_bisect)

    twin_p = sub.add_parser("twin", help="the emulated GPU cluster: `twin validate`")
    twin_p.add_argument("action", choices=("validate",))
    twin_p.add_argument("--no-grid", action="store_true", help="only the published rows")
    twin_p.set_defaults(func=_cmd_twin)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == [
        "cards"
    ]:  # the quiz parses its own options (argparse REMAINDER rejects "--lab" first)
        return _cmd_cards(argparse.Namespace(rest=argv[1:]))
    parser = build_parser()
    ns = parser.parse_args(argv)  # argparse itself exits 2 on malformed options
    try:
        return ns.func(ns)
    except UsageError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return USAGE_ERROR
