"""lab_utils.measure.sharpness: power iteration against the whole Hessian, and the lab's trend."""

import pytest
import torch
from torch import nn

from lab_utils.measure.sharpness import batch_noise_sweep, top_hessian_eigenvalue


def test_power_iteration_matches_the_whole_hessian():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(3, 4), nn.Tanh(), nn.Linear(4, 2)).double()
    x, y = torch.randn(16, 3, dtype=torch.float64), torch.randint(0, 2, (16,))
    params = list(model.parameters())
    shapes = [p.shape for p in params]
    flat = torch.cat([p.detach().flatten() for p in params])

    def loss_of(v):
        chunks, i = [], 0
        for s in shapes:
            n = int(torch.tensor(s).prod())
            chunks.append(v[i : i + n].view(s))
            i += n
        h = torch.tanh(x @ chunks[0].T + chunks[1])
        return nn.functional.cross_entropy(h @ chunks[2].T + chunks[3], y)

    eigs = torch.linalg.eigvalsh(torch.autograd.functional.hessian(loss_of, flat))
    want = float(eigs[eigs.abs().argmax()])
    assert top_hessian_eigenvalue(model, x, y, iters=200) == pytest.approx(want, rel=1e-6)


def test_smaller_batches_end_flatter_at_the_same_training_loss():
    runs = batch_noise_sweep(batches=(4, 256), seeds=(0,))
    small, big = runs
    assert small.train_loss < 0.02 and big.train_loss < 0.02
    assert small.sharpness < 0.7 * big.sharpness
    assert abs(small.test_acc - big.test_acc) < 0.03  # and no generalisation gap on this task


def test_bad_input_is_named():
    with pytest.raises(ValueError, match="batches"):
        batch_noise_sweep(batches=(0,))
    with pytest.raises(ValueError, match="target"):
        batch_noise_sweep(target=1.0)
