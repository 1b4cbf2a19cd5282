"""``torch.view_as_real`` and ``torch.view_as_complex``: views that reinterpret a complex
tensor as pairs of reals and back (``ViewAsRealBackward0``, ``ViewAsComplexBackward0``).

Their gradients are each other's: the gradient of ``view_as_real(z)`` is
``view_as_complex(grad)``, PyTorch's ``gx0 + 1j * gx1``, so neither formula is holomorphic. An
in-place write through one of them into a base that requires grad needs PyTorch's view replay
(its ``as_strided`` cannot change the dtype); refimpl refuses it with a clear error instead of
rewriting the base's history with the wrong geometry.
"""

from __future__ import annotations

from typing import Any

import numpy

from refimpl import _dtype
from refimpl._tensor import Tensor
from refimpl.ops.table import apply, defop

__all__ = ["view_as_real", "view_as_complex", "DTYPE_VIEWS"]

_COMPLEX = {"float16": "complex32", "float32": "complex64", "float64": "complex128"}


def _as_real(xp: Any, self: Any) -> Any:
    real = self.real  # a view with the complex array's strides, in units of the real type
    return xp.lib.stride_tricks.as_strided(real, shape=(*self.shape, 2),
                                           strides=(*real.strides, real.itemsize))


def _as_complex(xp: Any, self: Any) -> Any:
    # NumPy's dtypes name the element type for CuPy too.
    kind = {4: numpy.complex64, 8: numpy.complex128}[self.itemsize]
    return self.view(kind)[..., 0]


VIEW_AS_REAL = defop("view_as_real", "ViewAsRealBackward0", _as_real,
                     {"self": lambda grad: view_as_complex(grad.contiguous())},
                     view=True, holomorphic=False)
VIEW_AS_COMPLEX = defop("view_as_complex", "ViewAsComplexBackward0", _as_complex,
                        {"self": lambda grad: view_as_real(grad)},
                        view=True, holomorphic=False)
DTYPE_VIEWS = frozenset({VIEW_AS_REAL.name, VIEW_AS_COMPLEX.name})
"""Rows whose view has another dtype than its base: no as_strided of the base describes it."""


def view_as_real(input: Tensor) -> Tensor:
    """A view of a complex tensor as a real one with a last dimension of 2 (real, imaginary)."""
    if not isinstance(input, Tensor):
        raise TypeError(f"view_as_real(): argument 'input' (position 1) must be Tensor, not "
                        f"{type(input).__name__}")
    if input.dtype.kind != "c":
        raise RuntimeError("view_as_real is only supported for complex tensors")
    return apply(VIEW_AS_REAL, (input,))


def view_as_complex(input: Tensor) -> Tensor:
    """A view of a real tensor whose last dimension of 2 holds (real, imaginary) pairs."""
    if not isinstance(input, Tensor):
        raise TypeError(f"view_as_complex(): argument 'input' (position 1) must be Tensor, "
                        f"not {type(input).__name__}")
    if input.dtype not in (_dtype.float32, _dtype.float64):
        if input.dtype is _dtype.float16:
            raise NotImplementedError("refimpl has no complex32 dtype for view_as_complex of "
                                      "a float16 tensor")
        raise RuntimeError("view_as_complex is only supported for half, float and double "
                           f"tensors, but got a tensor of scalar type: "
                           f"{input.dtype.legacy_name}")
    if input.dim() == 0:
        raise RuntimeError("Input tensor must have one or more dimensions")
    if input.shape[-1] != 2:
        raise RuntimeError("Tensor must have a last dimension of size 2")
    strides = input.stride()
    if strides[-1] != 1:
        raise RuntimeError("Tensor must have a last dimension with stride 1")
    if any(s % 2 for s in strides[:-1]):
        raise RuntimeError("Tensor must have a stride divisible by 2 for all but last "
                           "dimension")
    from refimpl._storage import storage_offset

    if storage_offset(input) % 2:
        raise RuntimeError("Tensor must have a storage_offset divisible by 2")
    return apply(VIEW_AS_COMPLEX, (input,))
