"""``L1Loss`` and ``MSELoss``.

Their first two constructor arguments are PyTorch's deprecated ``size_average`` and ``reduce``,
which is why ``nn.L1Loss(y, gt)`` (tensors where a module is meant to be built) raises
``RuntimeError: Boolean value of Tensor with more than one value is ambiguous`` in PyTorch and
here: the loss is ``nn.L1Loss()(y, gt)``.
"""

from __future__ import annotations

from typing import Any

from refimpl._tensor import Tensor
from refimpl.nn import functional as F
from refimpl.nn.modules.module import Module

__all__ = ["L1Loss", "MSELoss"]


class _Loss(Module):
    def __init__(self, size_average: Any = None, reduce: Any = None,
                 reduction: str = "mean") -> None:
        super().__init__()
        if size_average is not None or reduce is not None:
            reduction = F.legacy_reduction(size_average, reduce)
        self.reduction = reduction


class L1Loss(_Loss):
    """Mean absolute error; ``grad_fn`` is ``MeanBackward0`` over ``AbsBackward0`` and
    ``SubBackward0`` (``SumBackward0`` with ``reduction='sum'``)."""

    def forward(self, input: Tensor, target: Tensor) -> Tensor:
        return F.l1_loss(input, target, reduction=self.reduction)


class MSELoss(_Loss):
    """Mean squared error; ``grad_fn`` is ``MseLossBackward0``."""

    def forward(self, input: Tensor, target: Tensor) -> Tensor:
        return F.mse_loss(input, target, reduction=self.reduction)
