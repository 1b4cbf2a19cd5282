"""The layers of ``refimpl.nn``, one module per family as in ``torch.nn.modules``."""

from refimpl.nn.modules.module import Module  # noqa: I001 - the base class first
from refimpl.nn.modules.activation import ReLU, Sigmoid
from refimpl.nn.modules.batchnorm import (
    BatchNorm1d,
    BatchNorm2d,
    InstanceNorm1d,
    InstanceNorm2d,
    InstanceNorm3d,
)
from refimpl.nn.modules.container import Sequential
from refimpl.nn.modules.conv import Conv2d
from refimpl.nn.modules.dropout import Dropout
from refimpl.nn.modules.linear import Linear
from refimpl.nn.modules.loss import L1Loss, MSELoss

__all__ = ["Module", "Linear", "Conv2d", "L1Loss", "MSELoss", "Dropout", "BatchNorm1d",
           "BatchNorm2d", "InstanceNorm1d", "InstanceNorm2d", "InstanceNorm3d", "ReLU", "Sigmoid",
           "Sequential"]
