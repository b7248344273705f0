"""Shared test settings.

One intra-op thread in the test process: tests launch ranks that compete for the same cores,
and torch's spinning OpenMP threads in the parent then slow everything down (40x measured on
2 oversubscribed cores). The models here are tiny; one thread loses nothing.
"""
import torch

torch.set_num_threads(1)
