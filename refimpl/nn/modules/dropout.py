"""``Dropout``: zeroes elements at random in training mode, the identity in eval mode."""

from __future__ import annotations

from refimpl._tensor import Tensor
from refimpl.nn import functional as F
from refimpl.nn.modules.module import Module

__all__ = ["Dropout"]


class Dropout(Module):
    """In training, each element is zeroed with probability ``p`` and the rest scaled by
    ``1 / (1 - p)`` (``MulBackward0``); after ``eval()`` the input itself is returned."""

    def __init__(self, p: float = 0.5, inplace: bool = False) -> None:
        super().__init__()
        if p < 0 or p > 1:
            raise ValueError(f"dropout probability has to be between 0 and 1, but got {p}")
        self.p = p
        self.inplace = inplace

    def forward(self, input: Tensor) -> Tensor:
        return F.dropout(input, self.p, self.training, self.inplace)

    def extra_repr(self) -> str:
        return f"p={self.p}, inplace={self.inplace}"
