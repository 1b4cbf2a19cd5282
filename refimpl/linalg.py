"""``torch.linalg``: the vector norm."""

from refimpl.ops.functional import vector_norm

__all__ = ["vector_norm"]
