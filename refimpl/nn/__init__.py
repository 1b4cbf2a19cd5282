"""``refimpl.nn``: parameters, modules and their functional forms, mirroring ``torch.nn``.

``import refimpl as torch; import refimpl.nn as nn`` runs module programs as PyTorch 2.13 does::

    lin = nn.Linear(3, 5)
    y = lin(torch.rand(1, 3))            # grad_fn=<AddmmBackward0>
    loss = nn.L1Loss()(y, torch.rand(1, 5))
    loss.backward()                      # lin.weight.grad is populated; lin.weight stays a leaf
"""

from refimpl.nn import functional, init  # noqa: I001 - functional before the modules using it
from refimpl.nn.modules import (
    BatchNorm1d,
    BatchNorm2d,
    Conv2d,
    Dropout,
    InstanceNorm1d,
    InstanceNorm2d,
    InstanceNorm3d,
    L1Loss,
    Linear,
    Module,
    MSELoss,
    ReLU,
    Sequential,
    Sigmoid,
)
from refimpl.nn.parameter import Parameter

__all__ = ["Parameter", "Module", "Linear", "Conv2d", "L1Loss", "MSELoss", "Dropout",
           "BatchNorm1d", "BatchNorm2d", "InstanceNorm1d", "InstanceNorm2d", "InstanceNorm3d",
           "ReLU", "Sigmoid", "Sequential", "functional", "init"]
