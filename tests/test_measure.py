"""lab_utils.measure in one process: model-state bytes, saved activations, timeline, peak."""

import time

import pytest
import torch
from torch import nn

from lab_utils.calc import model_state_memory
from lab_utils.measure import SavedActivations, Timeline, model_state_bytes, peak_memory_bytes
from lab_utils.models import GPTConfig, TinyGPT, count_params


@pytest.fixture(autouse=True, scope="module")
def one_thread():
    """Tiny tensors: one intra-op thread is fastest, and steady on a shared machine."""
    old = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(old)


def test_model_state_fp32_adamw_is_16_bytes_per_param():
    model = TinyGPT(GPTConfig())
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    x = torch.randint(0, 64, (2, 8))
    model(x).sum().backward()
    opt.step()
    n = count_params(model)
    got = model_state_bytes(model, opt)
    calc = model_state_memory(n, "fp32_adam")
    assert got["params"] == 4 * n and got["grads"] == 4 * n
    assert got["optimizer_state"] == 8 * n and got["optimizer_master"] == 0
    assert got["total"] == calc.total == 16 * n
    # Adam's step counters: 4 bytes per parameter TENSOR, reported apart
    assert got["scalars"] == 4 * len(list(model.parameters()))


def test_model_state_counts_tied_weights_once_and_no_optimizer():
    model = TinyGPT(GPTConfig(tie_weights=True))
    got = model_state_bytes(model)
    assert got["params"] == 4 * count_params(model)
    assert got["grads"] == 0 and got["optimizer"] == 0
    assert got["total"] == got["params"]


def test_model_state_mixed_precision_master_weights():
    """bf16 model + fp32 master copies owned by the optimizer: 2 + 2 + 4 + 8 = 16 B/param."""
    model = TinyGPT(GPTConfig()).to(torch.bfloat16)
    master = [p.detach().float().requires_grad_() for p in model.parameters()]
    opt = torch.optim.AdamW(master, lr=1e-3)
    model(torch.randint(0, 64, (2, 8))).float().sum().backward()
    for m, p in zip(master, model.parameters()):
        m.grad = p.grad.float()
    opt.step()
    for m in master:
        m.grad = None  # the fp32 gradient copy is transient
    n = count_params(model)
    got = model_state_bytes(model, opt)
    calc = model_state_memory(n, "mixed_adam")
    assert (got["params"], got["grads"]) == (calc.params, calc.grads) == (2 * n, 2 * n)
    assert got["optimizer"] == calc.master + calc.optimizer == 12 * n
    assert got["total"] == calc.total


def _mlp(d_in=16, hidden=32, d_out=8):
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(d_in, hidden), nn.ReLU(), nn.Linear(hidden, d_out))


@pytest.mark.parametrize("batch", [4, 8])
def test_saved_activations_exclude_params_and_count_storages_once(batch):
    model = _mlp()
    x = torch.randn(batch, 16)
    with SavedActivations(model) as acts:
        y = model(x)
    # Linear1 saves x; ReLU saves its output, which Linear2 saves again (same storage: once).
    # The weights (saved as W^T views) are parameters, not activations.
    assert acts.bytes == batch * (16 + 32) * 4
    assert acts.count == 2
    y.sum().backward()  # the graph still works after the hooks
    assert model[0].weight.grad is not None


def test_saved_activations_live_and_peak_follow_backward_and_checkpointing():
    from torch.utils.checkpoint import checkpoint

    model = nn.Sequential(*[nn.Sequential(nn.Linear(32, 32), nn.Tanh()) for _ in range(4)])
    peaks = {}
    for ckpt in (False, True):
        with SavedActivations(model) as acts:
            h = torch.randn(8, 32, requires_grad=True)
            for layer in model:
                h = checkpoint(layer, h, use_reentrant=True) if ckpt else layer(h)
            after_forward = acts.live_bytes
            h.sum().backward()
            del h
        peaks[ckpt] = (after_forward, acts.peak_bytes, acts.live_bytes)
    row = 8 * 32 * 4  # one (8, 32) fp32 activation
    # plain: the input, then each Tanh output (which is also the next Linear's input: one storage)
    # -> 5 activations, all freed by backward
    assert peaks[False] == (5 * row, 5 * row, 0)
    # checkpointed: only the 4 layer inputs survive forward; backward recomputes one layer at a time
    # (its input + tanh output) while the earlier checkpoints are still held
    fwd, peak, live = peaks[True]
    assert fwd == 4 * row and 4 * row < peak < 5 * row + row and live == 0


def test_saved_activations_without_model_still_skip_parameters():
    model = _mlp()
    with SavedActivations() as acts:
        model(torch.randn(4, 16))
    assert acts.bytes == 4 * (16 + 32) * 4


def test_saved_activations_grow_linearly_with_batch_and_vanish_under_no_grad():
    model = TinyGPT(GPTConfig())
    sizes = []
    for b in (1, 2, 4):
        with SavedActivations(model) as acts:
            model(torch.randint(0, 64, (b, 16)))
        sizes.append(acts.bytes)
    per_row = sizes[1] - sizes[0]
    assert sizes[2] - sizes[1] == 2 * per_row  # linear in the batch
    # What does not grow: the (T, T) bool causal mask of each layer and the (T,) int64 position
    # indices the embedding keeps, T = 16.
    assert sizes[0] - per_row == 2 * 16 * 16 + 16 * 8
    with SavedActivations(model) as acts, torch.no_grad():
        model(torch.randint(0, 64, (4, 16)))
    assert acts.bytes == 0


def test_timeline_single_process_and_peak_memory_on_cpu():
    tl = Timeline()
    with tl.span("forward", mb=0):
        time.sleep(0.01)
    with tl.span("backward", mb=0):
        time.sleep(0.01)
    ev = tl.gather()
    assert [e["name"] for e in ev] == ["forward", "backward"]
    assert ev[0]["start"] == 0.0 and ev[0]["end"] >= 0.01 and ev[1]["start"] >= ev[0]["end"]
    assert ev[0]["mb"] == 0 and ev[0]["rank"] == 0
    assert peak_memory_bytes(torch.device("cpu")) is None
