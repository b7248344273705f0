"""scripts/train_ddp.py, the plain torchrun script of lab 04, launched for real with torchrun:
the loss goes down and the distributed checkpoint loads back identically."""

import json
import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "train_ddp.py"


def test_train_ddp_under_torchrun(tmp_path):
    cmd = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        "--nproc-per-node",
        "2",
        str(SCRIPT),
        "--steps",
        "30",
        "--out",
        str(tmp_path),
    ]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=240)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    result = json.loads((tmp_path / "results.json").read_text())
    losses = result["losses"]
    assert result["world_size"] == 2 and len(losses) == 30
    assert losses[-1] < 0.5 * losses[0], losses
    assert result["checkpoint_reloaded"]
    files = sorted(p.name for p in (tmp_path / "checkpoint").iterdir())
    assert ".metadata" in files and sum(f.endswith(".distcp") for f in files) == 2, files
