"""The op table (``refimpl.ops.derivatives``), its machinery (``refimpl.ops.table``) and the
PyTorch-shaped functions over it (``refimpl.ops.functional``). Start with ``table``'s docstring
to add an op."""

from refimpl.ops.table import ROWS, OpRow, apply, defop  # noqa: I001 - table before its users
from refimpl.ops import functional
from refimpl.ops.functional import promote

__all__ = ["ROWS", "OpRow", "apply", "defop", "functional", "promote"]
