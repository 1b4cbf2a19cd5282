"""Activation modules: ``ReLU`` and ``Sigmoid``."""

from __future__ import annotations

from refimpl._tensor import Tensor
from refimpl.nn import functional as F
from refimpl.nn.modules.module import Module
from refimpl.ops import signatures

__all__ = ["ReLU", "Sigmoid"]


class ReLU(Module):
    """``max(x, 0)`` elementwise (``ReluBackward0``); ``inplace=True`` overwrites the input."""

    def __init__(self, inplace: bool = False) -> None:
        super().__init__()
        self.inplace = inplace

    def forward(self, input: Tensor) -> Tensor:
        return F.relu(input, inplace=self.inplace)

    def extra_repr(self) -> str:
        return "inplace=True" if self.inplace else ""


class Sigmoid(Module):
    """``1 / (1 + exp(-x))`` elementwise (``SigmoidBackward0``)."""

    def forward(self, input: Tensor) -> Tensor:
        # torch.sigmoid, as PyTorch's module calls it (its argument check, not F.sigmoid's).
        return signatures.sigmoid(input)
