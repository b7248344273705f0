"""Pre-flight check: is this machine ready for the labs? (lab 00)

    python -m lab_utils doctor

Every check prints OK / WARN / FAIL, and every problem comes with its fix. Instructors run
it on each workshop machine before the day starts (docs/instructor_guide.md).
"""

from __future__ import annotations

import importlib.metadata
import platform
import sys
import time
from dataclasses import dataclass
from pathlib import Path

EXPECTED_TORCH = "2.13.0"


@dataclass(frozen=True)
class Check:
    name: str
    status: str  # "OK", "WARN" or "FAIL"
    detail: str
    fix: str = ""


def _version(package: str) -> str | None:
    try:
        return importlib.metadata.version(package)
    except importlib.metadata.PackageNotFoundError:
        return None


def check_python() -> Check:
    v = sys.version_info
    ok = v >= (3, 10)
    return Check(
        "python",
        "OK" if ok else "FAIL",
        f"{platform.python_version()} at {sys.executable}",
        ""
        if ok
        else "use Python 3.10 or newer (the README's `make lab` builds .venv with python3)",
    )


def check_torch() -> Check:
    version = _version("torch")
    if version is None:
        return Check(
            "torch",
            "FAIL",
            "not installed",
            "run `make lab` or `make test` (creates .venv with torch==2.13.0)",
        )
    if not version.startswith(EXPECTED_TORCH):
        return Check(
            "torch",
            "WARN",
            f"{version} (the course is tested with {EXPECTED_TORCH})",
            f"pip install torch=={EXPECTED_TORCH} (CPU) or the matching CUDA build, see README",
        )
    return Check("torch", "OK", version)


def check_cores() -> Check:
    from lab_utils.runtime.launch import cpu_cores

    cores = cpu_cores()
    if cores < 4:
        return Check(
            "cpu cores",
            "WARN",
            f"{cores} cores: 4-rank labs are oversubscribed",
            "fine for learning: the timing lessons run on the emulated GPU cluster "
            "(lab_utils.twin), and the labs label raw timings that measure this machine",
        )
    return Check("cpu cores", "OK", f"{cores} cores")


def check_gpus() -> Check:
    import torch

    if not torch.cuda.is_available():
        return Check("gpus", "OK", "none: every lab runs on CPU with gloo")
    names = [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())]
    return Check(
        "gpus", "OK", f"{len(names)}: {', '.join(names)} (NCCL used when every rank has a GPU)"
    )


def check_backends() -> Check:
    import torch.distributed as dist

    if not dist.is_available():
        return Check(
            "backends",
            "FAIL",
            "torch.distributed is not available in this build",
            "install an official torch wheel (pip install torch==2.13.0)",
        )
    have = [
        name
        for name, ok in (("gloo", dist.is_gloo_available()), ("nccl", dist.is_nccl_available()))
        if ok
    ]
    if "gloo" not in have:
        return Check(
            "backends",
            "FAIL",
            f"available: {have}",
            "install an official torch wheel: gloo is needed on CPU",
        )
    return Check("backends", "OK", ", ".join(have))


def check_widgets() -> Check:
    """The kernel's widget packages, plotly's JupyterLab renderer (the explorers draw their
    figures as plotly's mimetype inside an Output widget) and anywidget's frontend (LivePlot, which
    redraws those figures in place)."""
    missing = [
        p
        for p in ("ipywidgets", "jupyterlab_widgets", "plotly", "anywidget")
        if _version(p) is None
    ]
    from jupyter_core.paths import (
        jupyter_path,
    )  # where JupyterLab looks (sys.prefix, user, JUPYTER_PATH)

    for extension, what in (
        ("jupyterlab-plotly", "plotly's JupyterLab renderer"),
        ("anywidget", "anywidget's JupyterLab frontend"),
    ):
        places = [Path(p) / extension for p in jupyter_path("labextensions")]
        if not any(p.is_dir() for p in places):
            missing.append(
                f"{what} (labextensions/{extension}, "
                f"looked in {', '.join(str(p.parent) for p in places)})"
            )
    if missing:
        return Check(
            "widgets",
            "FAIL",
            f"missing: {', '.join(missing)}",
            "run `make lab` (installs the pinned requirements into .venv)",
        )
    return Check(
        "widgets",
        "OK",
        f"ipywidgets {_version('ipywidgets')}, jupyterlab_widgets "
        f"{_version('jupyterlab_widgets')}, plotly {_version('plotly')} (with its JupyterLab "
        f"renderer), "
        f"anywidget {_version('anywidget')}",
    )


def check_smoke(world_size: int = 2) -> Check:
    """A real 2-rank launch and all-reduce: the whole path a lab uses."""
    from lab_utils.experiments.lab00 import allreduce_timing
    from lab_utils.runtime.launch import RankFailure, run

    start = time.perf_counter()
    try:
        per_rank = run(allreduce_timing, world_size, numel=1 << 18, quiet=True, timeout_s=60)
    except (RankFailure, OSError) as exc:
        return Check(
            "2-rank all-reduce",
            "FAIL",
            str(exc).splitlines()[0],
            "see the traceback with `python -m lab_utils run lab_utils.experiments.lab00:hello "
            "--nproc 2`; "
            "a firewall blocking 127.0.0.1 ports or a full /tmp are the usual causes",
        )
    launch = time.perf_counter() - start
    return Check(
        "2-rank all-reduce",
        "OK",
        f"launch + run {launch:.1f} s; one all_reduce of 1 MiB "
        f"{per_rank[0] * 1e3:.2f} ms on {per_rank.backend}",
    )


def run_checks(smoke: bool = True) -> list[Check]:
    checks = [
        check_python(),
        check_torch(),
        check_cores(),
        check_backends(),
        check_gpus(),
        check_widgets(),
    ]
    if smoke and all(c.status != "FAIL" for c in checks):
        checks.append(check_smoke())
    return checks


def format_checks(checks: list[Check]) -> str:
    lines = []
    for c in checks:
        lines.append(f"[{c.status:4}] {c.name:18} {c.detail}")
        if c.fix:
            lines.append(f"{'':7}{'':18} fix: {c.fix}")
    worst = (
        "FAIL"
        if any(c.status == "FAIL" for c in checks)
        else "WARN"
        if any(c.status == "WARN" for c in checks)
        else "OK"
    )
    lines.append(
        {
            "OK": "All checks passed: ready for the labs.",
            "WARN": "Ready, with the warnings above.",
            "FAIL": "Not ready: fix the FAIL lines above, then run the doctor again.",
        }[worst]
    )
    return "\n".join(lines)


def doctor(smoke: bool = True) -> list[Check]:
    """Run every check, print the report, return the checks (for notebooks and tests)."""
    checks = run_checks(smoke)
    print(format_checks(checks))
    return checks
