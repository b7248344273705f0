"""Does the noise of a small batch help? Sharpness and test accuracy vs batch size (lab 02, §12c).

The claim, often stated as a law: SGD's gradient noise (its scale grows with lr / B, Smith & Le
2018) steers training to FLAT minima, and flat minima generalise better, so large batches
generalise worse (Keskar et al. 2017). This module measures both halves on one small problem:

* ``top_hessian_eigenvalue``: the largest eigenvalue of the loss Hessian at the trained weights
  (the "sharpness"), by power iteration on Hessian-vector products (double backward), checked in
  tests against ``torch.autograd.functional.hessian`` on a model small enough to build it whole;
* ``batch_noise_sweep``: one MLP trained by plain SGD at the same learning rate with different
  batch sizes, each run stopped at the SAME training loss (so no run is simply less trained), and
  per run: steps taken, sharpness, held-out accuracy.

Everything runs in this process on a synthetic task (a random teacher network labels Gaussian
inputs; a fraction of the training labels is flipped), seeded, so the numbers are the same on every
machine with this torch.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import nn

__all__ = ["top_hessian_eigenvalue", "batch_noise_sweep", "NoiseRun"]


def top_hessian_eigenvalue(
    model: nn.Module, x: torch.Tensor, y: torch.Tensor, iters: int = 30, seed: int = 0
) -> float:
    """Largest eigenvalue of d^2 loss / d params^2 (cross-entropy on x, y), by power iteration.

    Power iteration converges to the eigenvalue of largest MAGNITUDE; at a trained minimum the
    Hessian is nearly positive semi-definite, so that is the sharpness."""
    if iters < 1:
        raise ValueError(f"iters must be >= 1, got {iters}")
    params = [p for p in model.parameters() if p.requires_grad]
    loss = nn.functional.cross_entropy(model(x), y)
    grads = torch.autograd.grad(loss, params, create_graph=True)
    gen = torch.Generator().manual_seed(seed)
    v = [torch.randn(p.shape, generator=gen, dtype=p.dtype) for p in params]
    eig = 0.0
    for _ in range(iters):
        norm = math.sqrt(sum(float((t * t).sum()) for t in v))
        v = [t / norm for t in v]
        hv = torch.autograd.grad(grads, params, v, retain_graph=True)
        eig = float(sum((a * b).sum() for a, b in zip(hv, v)))
        v = [h.detach() for h in hv]
    return eig


def _task(seed: int, n_train: int, n_test: int, dim: int, label_noise: float):
    gen = torch.Generator().manual_seed(seed)
    w1, w2 = torch.randn(dim, 16, generator=gen), torch.randn(16, generator=gen)

    def make(n):
        x = torch.randn(n, dim, generator=gen)
        return x, (torch.tanh(x @ w1) @ w2 > 0).long()

    (xtr, ytr), (xte, yte) = make(n_train), make(n_test)
    flip = torch.rand(n_train, generator=gen) < label_noise
    return xtr, torch.where(flip, 1 - ytr, ytr), xte, yte


def _mlp(seed: int, dim: int, hidden: int) -> nn.Module:
    torch.manual_seed(seed)
    return nn.Sequential(
        nn.Linear(dim, hidden),
        nn.ReLU(),
        nn.Linear(hidden, hidden),
        nn.ReLU(),
        nn.Linear(hidden, 2),
    )


@dataclass(frozen=True)
class NoiseRun:
    batch: int
    lr: float
    seed: int
    steps: int  # SGD steps until the full training loss fell below the target
    train_loss: float
    sharpness: float  # top Hessian eigenvalue at the final weights
    test_acc: float  # held-out accuracy (clean labels)

    @property
    def noise(self) -> float:
        """lr / B: the scale of SGD's gradient noise (Smith & Le 2018), up to the task's
        constant."""
        return self.lr / self.batch


def batch_noise_sweep(
    batches=(4, 16, 256),
    lr: float = 0.05,
    seeds=(0,),
    target: float = 0.02,
    n_train: int = 256,
    label_noise: float = 0.1,
    max_steps: int = 4000,
    dim: int = 20,
    hidden: int = 256,
) -> list[NoiseRun]:
    """Train one MLP per (seed, batch) with SGD at ``lr`` until its full training loss < target."""
    if not batches or any(b < 1 or b > n_train for b in batches):
        raise ValueError(f"batches must be in 1..n_train={n_train}, got {batches}")
    if not 0 < target < math.log(2):
        raise ValueError(f"target must be a cross-entropy between 0 and ln 2, got {target}")
    runs = []
    for seed in seeds:
        xtr, ytr, xte, yte = _task(seed, n_train, 2048, dim, label_noise)
        for b in batches:
            model = _mlp(seed, dim, hidden)
            opt = torch.optim.SGD(model.parameters(), lr=lr)
            order, steps, loss = torch.Generator().manual_seed(seed + 1), 0, float("inf")
            while steps < max_steps and loss >= target:
                for idx in torch.randperm(n_train, generator=order).split(b):
                    opt.zero_grad()
                    nn.functional.cross_entropy(model(xtr[idx]), ytr[idx]).backward()
                    opt.step()
                    steps += 1
                with torch.no_grad():
                    loss = float(nn.functional.cross_entropy(model(xtr), ytr))
            with torch.no_grad():
                acc = float((model(xte).argmax(1) == yte).float().mean())
            runs.append(
                NoiseRun(b, lr, seed, steps, loss, top_hessian_eigenvalue(model, xtr, ytr), acc)
            )
    return runs
