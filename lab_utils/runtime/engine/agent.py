"""torchrun, with some modules imported first so the forked ranks inherit them (lab 00).

    python -m lab_utils.runtime.engine.agent <torchrun arguments>      (LAB_UTILS_PRELOAD=mod1,mod2)

The ranks are forked from this process (see launch.py), so a module imported here is
already in every rank's memory. Heavy imports then cost once per launch instead of once per
rank: `torch.distributed.pipelining` takes ~6 s of CPU, 4 ranks on 2 cores ~12 s of wall.
Everything after the imports is torchrun itself, unchanged. The launcher usually forks this
process from its zygote (``zygote.py``), where torch is already imported, instead of starting a
new Python: the same ``main`` runs either way.

CUDA must stay untouched in this process: a rank forked after its parent asked the CUDA driver
anything cannot use CUDA ("Cannot re-initialize CUDA in forked subprocess", seen on an H200).
torchrun's launch config calls ``torch.cuda.is_available()``; with PYTORCH_NVML_BASED_CUDA_CHECK=1
torch answers that from NVML instead of initialising the driver, so the forked ranks can.
"""

import gc
import importlib
import os
import runpy
import sys

from lab_utils.runtime.engine import lifeline


def main(argv: list[str]) -> None:
    os.environ.setdefault(
        "PYTORCH_NVML_BASED_CUDA_CHECK", "1"
    )  # see the docstring: keep CUDA fork-safe
    lifeline.watch_from_env()  # the launcher is gone -> this agent and its ranks go too
    for name in filter(None, os.environ.get("LAB_UTILS_PRELOAD", "").split(",")):
        importlib.import_module(name)
    # the ranks' garbage collectors skip what is already here: fewer copy-on-write pages
    gc.freeze()
    sys.argv = ["torchrun", *argv]
    runpy.run_module("torch.distributed.run", run_name="__main__", alter_sys=True)


if __name__ == "__main__":
    main(sys.argv[1:])
