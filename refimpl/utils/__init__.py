"""``refimpl.utils``: what ``torch.utils`` offers autograd users (activation checkpointing)."""

from refimpl.utils import checkpoint

__all__ = ["checkpoint"]
