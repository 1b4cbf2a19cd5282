"""``Tensor.as_strided`` and ``as_strided_``: a view of any size and strides (in elements) into
the memory a tensor views, from ``storage_offset`` (by default the tensor's own offset).

The gradient follows the memory: the view's gradient is added up per memory element and read
back at the input's own elements, with PyTorch's steps where no two elements of the view share
memory, and through ``scatter_add`` and ``gather`` where some do (PyTorch counts and adds those
with ``index_add``); both differentiate again under ``create_graph``. refimpl
supports tensors whose memory is one row-major array starting at the tensor's base, the
layout of any tensor refimpl creates and of its views; others get a clear error.
"""

from __future__ import annotations

import math
from typing import Any

import numpy

from refimpl import _creation
from refimpl._tensor import Tensor
from refimpl.ops import derivatives as D
from refimpl.ops.table import apply, defop

__all__ = ["as_strided", "as_strided_"]


def _positions(size: tuple[int, ...], stride: tuple[int, ...], offset: int) -> numpy.ndarray:
    """The memory position of each element of a ``size``/``stride`` view from ``offset``,
    in row-major order of the view."""
    pos = numpy.full(size, offset, dtype=numpy.int64)
    for dim, (n, step) in enumerate(zip(size, stride, strict=True)):
        shape = [1] * len(size)
        shape[dim] = n
        pos = pos + (numpy.arange(n, dtype=numpy.int64) * step).reshape(shape)
    return pos.reshape(-1)


def _forward(xp: Any, self: Any, *, size: tuple[int, ...], stride: tuple[int, ...],
             offset: int, self_offset: int, memory: int) -> Any:
    # ``self`` starts at ``self_offset`` of a row-major memory of ``memory`` elements.
    flat = self.reshape(-1) if self.flags.c_contiguous and self.size == memory \
        else _memory_of(self, memory)
    return xp.lib.stride_tricks.as_strided(
        flat[offset:], shape=size, strides=tuple(s * flat.itemsize for s in stride))


def _memory_of(array: Any, memory: int) -> Any:
    from refimpl._storage import _owner

    return _owner(array).reshape(-1)[:memory]


def _backward(grad: Tensor, self_shape: tuple[int, ...], size: tuple[int, ...],
              stride: tuple[int, ...], offset: int, self_strides: tuple[int, ...],
              self_offset: int, memory: int) -> Tensor:
    kept = [(n, s) for n, s in zip(size, stride, strict=True) if n > 1 and s != 0]
    at = _positions(tuple(n for n, _ in kept), tuple(s for _, s in kept), offset)
    if len(numpy.unique(at)) == at.size:
        # No two elements of the view share memory: PyTorch's own steps (sum what the view
        # expanded, copy into zeros standing for the memory, read the input's elements).
        return D.as_strided_backward(grad, (memory,), size, stride, offset,
                                     into=(self_shape, self_strides, self_offset))
    view_at = _creation.tensor(_positions(size, stride, offset), device=grad.device)
    self_at = _creation.tensor(_positions(self_shape, self_strides, self_offset),
                               device=grad.device)
    zeros = _creation.zeros(memory, dtype=grad.dtype, device=grad.device)
    summed = apply(D.SCATTER_ADD, (zeros, grad.reshape(-1)), {"dim": 0, "index": view_at})
    return apply(D.GATHER, (summed,), {"dim": 0, "index": self_at}).reshape(self_shape)


_GRAD = {"self": lambda grad, self_shape, self_strides, size, stride, offset, self_offset,
         memory: _backward(grad, self_shape, size, stride, offset, self_strides, self_offset,
                           memory)}
AS_STRIDED = defop("as_strided.memory", "AsStridedBackward0", _forward, _GRAD, view=True)
AS_STRIDED_ = defop("as_strided_", "AsStridedBackward1", _forward, _GRAD)


def _params(self: Tensor, size: Any, stride: Any, storage_offset: int | None
            ) -> dict[str, Any]:
    from refimpl._storage import _offset, _owner

    size, stride = tuple(int(n) for n in size), tuple(int(s) for s in stride)
    if len(size) != len(stride):
        raise RuntimeError("mismatch in length of strides and shape")
    if any(s < 0 for s in stride):
        raise RuntimeError("as_strided: Negative strides are not supported at the moment, got "
                           f"strides: {list(stride)}")
    root = _owner(self._data)
    start = _offset(self._data, root)
    if start is None:
        raise NotImplementedError("refimpl's as_strided takes a tensor whose memory is one "
                                  "row-major array of its dtype (any tensor refimpl made, or "
                                  "a view of one); call it on a contiguous copy")
    offset = start if storage_offset is None else int(storage_offset)
    numel = math.prod(size)
    needed = 0 if numel == 0 else \
        offset + 1 + sum((n - 1) * s for n, s in zip(size, stride, strict=True))
    itemsize = self._data.itemsize
    if needed > root.size:
        raise RuntimeError(f"setStorage: sizes {list(size)}, strides {list(stride)}, storage "
                           f"offset {offset}, and itemsize {itemsize} requiring a storage "
                           f"size of {needed * itemsize} are out of bounds for storage of "
                           f"size {root.size * itemsize}")
    return {"size": size, "stride": stride, "offset": offset, "self_offset": start,
            "memory": int(root.size)}


def as_strided(self: Tensor, size: Any, stride: Any, storage_offset: int | None = None
               ) -> Tensor:
    """A view of ``size`` and ``stride`` into this tensor's memory, from ``storage_offset``
    (default: where this tensor starts), recorded as ``AsStridedBackward0``."""
    return apply(AS_STRIDED, (self,), _params(self, size, stride, storage_offset))


def as_strided_(self: Tensor, size: Any, stride: Any, storage_offset: int | None = None
                ) -> Tensor:
    """``self`` made the view :func:`as_strided` describes (``AsStridedBackward1`` in front
    of its history when it requires grad)."""
    from refimpl.ops.inplace import inplace_view

    return inplace_view(AS_STRIDED_, AS_STRIDED, self,
                        _params(self, size, stride, storage_offset))


def _bind() -> None:
    Tensor.as_strided = as_strided
    Tensor.as_strided_ = as_strided_


_bind()
