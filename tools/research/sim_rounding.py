"""For the PyTorch simulations behind the CUDA tests' tolerances (bf16_step_error.py,
train_run_drift.py): an op that perturbs a tensor in the forward pass and its gradient in
the backward pass, as a GPU's bf16 rounding or other summation order would."""
import torch


def rounding(perturb):
    """An autograd function applying perturb(x) forward and perturb(g) backward."""

    class Round(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            return perturb(x)

        @staticmethod
        def backward(ctx, g):
            return perturb(g)

    return Round.apply
