"""2D (dp x tp) and 3D (dp x tp x pp) training of TinyGPT against the single-process reference.

Two launches: 4 ranks (torch: DTensor TP + FSDP2; ours: Megatron TP + a gradient all-reduce over
dp), 8 ranks (ours: 1F1B over pp, TP inside each stage, DP all-reduce). Losses must equal the
reference's over a few AdamW steps, the first gradients must equal the reference's, and the
communication of every mesh axis must equal its formula (lab_utils.calc.comm) in the ledger; the
wire bytes each axis carried (WireMeter, by peer) must equal the ledger's, plus gloo's 48-byte
headers (and, for FSDP's reduce-scatters, gloo's all-reduce-sized reduce-scatter).
"""

import pytest
import torch
from torch.testing import assert_close

from lab_utils import run
from lab_utils.calc.comm import (
    dp_bytes_per_rank,
    pp_bytes_per_microbatch,
    ring_bytes_per_rank,
    tp_layer_comm,
)
from lab_utils.data import token_batches
from lab_utils.experiments.lab08 import CFG, LR, experiments_2d, reference_grads, train_3d
from lab_utils.models import TinyGPT
from lab_utils.reference import reference_losses

STEPS, B, M, MB = 3, 16, 4, 2  # global batch B = dp * M micro-batches * MB rows (3D)
PRELOAD = ("torch.distributed.tensor", "torch.distributed.fsdp", "torch._dynamo")
T, C, L = CFG.seq_len, CFG.d_model, CFG.n_layer


@pytest.fixture(scope="module")
def ref_losses():
    batches = token_batches(STEPS, B, T, CFG.vocab_size, 1)
    return reference_losses(lambda: TinyGPT(CFG, seed=0), batches, STEPS, lr=LR)


def test_2d_matches_reference_and_formulas(ref_losses):
    res = run(experiments_2d, 4, STEPS, global_batch=B, preload=PRELOAD, timeout_s=240, quiet=True)
    ref_grads = reference_grads(1, B)
    for rank, out in enumerate(res):
        for variant in ("torch", "ours"):
            assert_close(
                torch.tensor(out[variant].losses),
                torch.tensor(ref_losses),
                rtol=1e-5,
                atol=1e-6,
                msg=lambda s, v=variant: f"rank {rank} {v}: {s}",
            )
            # AdamW barely sees a gradient's scale (a sum instead of a mean over dp still gives
            # nearly the same losses): the first step's gradients catch that kind of bug
            grads = out[variant].grads
            assert set(grads) == set(ref_grads)
            for name, g in grads.items():
                assert_close(
                    g,
                    ref_grads[name],
                    rtol=1e-4,
                    atol=1e-6,
                    msg=lambda s, n=name, v=variant: f"rank {rank} {v} {n}: {s}",
                )
        ours, torch_ = out["ours"], out["torch"]
        tp_ar = tp_layer_comm(B // 2, T, C, 2, bytes_per_elem=4).bytes_per_rank  # per layer
        # ours: fused qkv -> 2 all-reduces per layer forward + 2 backward; 1 grad all-reduce
        assert ours.comm["tp"].ops == {"all_reduce": 4 * L}
        assert ours.comm["tp"].ledger == pytest.approx(L * tp_ar)
        p_all = sum(ours.param_bytes.values())
        assert ours.comm["dp"].ops == {"all_reduce": 1}
        assert ours.comm["dp"].ledger == pytest.approx(dp_bytes_per_rank(p_all, 2, "ddp"))
        # torch: q, k, v each all-reduce their input gradient -> 6 per layer, 1.5x the bytes
        assert torch_.comm["tp"].ops == {"all_reduce": 6 * L}
        assert torch_.comm["tp"].ledger == pytest.approx(1.5 * L * tp_ar)
        # FSDP2: blocks all-gather twice + reduce-scatter; the root is not resharded after forward
        pb = torch_.param_bytes
        assert pb == ours.param_bytes  # the same TP shards, DTensor or ours
        assert torch_.comm["dp"].ops == {"all_gather": 2 * L + 1, "reduce_scatter": L + 1}
        want = dp_bytes_per_rank(pb["blocks"], 2, "fsdp") + 2 * ring_bytes_per_rank(
            "all_gather", 2, pb["root"]
        )
        assert torch_.comm["dp"].ledger == pytest.approx(want)
        for run_ in (ours, torch_):  # wire = ledger + gloo's RS excess + 48-byte headers
            for axis, c in run_.comm.items():
                assert c.headers is None or (c.headers >= 0 and c.headers % 48 == 0), (axis, c)
        fc = torch_.placements["blocks.0.mlp.fc.weight"]
        assert fc["shape"] == (4 * C, C) and fc["local"] == (4 * C // 4, C)  # dim 0 cut twice
        proj = torch_.placements["blocks.0.mlp.proj.weight"]
        assert proj["local"] == (C // 2, 4 * C // 2)  # dp cuts dim 0, tp cuts dim 1


def test_3d_matches_reference_and_formulas(ref_losses):
    res = run(train_3d, 8, STEPS, M, MB, preload=PRELOAD, timeout_s=300, quiet=True)
    ref_grads = reference_grads(1, B)
    seen = set()
    for out in res:
        assert_close(torch.tensor(out.losses), torch.tensor(ref_losses), rtol=1e-5, atol=1e-6)
        for name, g in out.grads.items():
            assert_close(
                g, ref_grads[name], rtol=1e-4, atol=1e-6, msg=lambda s, n=name: f"{n}: {s}"
            )
            seen.add(name)
        comm, layers = out.comm, out.layers
        assert comm["tp"].ops == {"all_reduce": 4 * M * layers}
        assert comm["tp"].ledger == pytest.approx(
            M * layers * tp_layer_comm(MB, T, C, 2, bytes_per_elem=4).bytes_per_rank
        )
        assert comm["pp"].ops == {"send": M, "recv": M}  # pp = 2: one boundary
        assert comm["pp"].ledger == pytest.approx(M * pp_bytes_per_microbatch(MB, T, C, 4))
        assert comm["dp"].ops == {"all_reduce": 1}
        assert comm["dp"].ledger == pytest.approx(dp_bytes_per_rank(out.param_bytes, 2))
        for axis, c in comm.items():  # wire = ledger + gloo's 48-byte headers
            assert c.headers is None or (c.headers >= 0 and c.headers % 48 == 0), (axis, c)
        # the trace names every op of 1F1B: m forwards and m backwards, TP calls inside each
        ops = [s.op for s in out.trace if s.axis == "tp"]
        assert {o.split()[0] for o in ops} == {"F", "BW"} and len(set(ops)) == 2 * M
    assert seen == set(ref_grads), "every parameter lives on exactly one pipeline stage"
