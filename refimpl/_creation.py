"""Tensor factories: ``tensor``, ``rand``, ``randn``, ``ones``, ``zeros``, ``full``, ``arange``,
the ``*_like`` forms and ``manual_seed``.

Random numbers come from one host generator (seeded by ``manual_seed``) and are moved to the
requested device, so a seed gives the same values on cpu and cuda.
"""

from __future__ import annotations

import math
import operator
import warnings
from collections.abc import Sequence
from typing import Any

import numpy

from refimpl import _backend, _dtype
from refimpl._tensor import Tensor, wrap

__all__ = ["tensor", "as_tensor", "from_numpy", "rand", "randn", "ones", "zeros", "full",
           "empty", "arange", "rand_like", "randn_like", "ones_like", "zeros_like", "full_like",
           "empty_like", "manual_seed", "Generator", "is_tensor", "eye", "randint"]

REQUIRES_GRAD_DTYPE = "Only Tensors of floating point and complex dtype can require gradients"
COPY_CONSTRUCT_WARNING = (
    "To copy construct from a tensor, it is recommended to use sourceTensor.detach().clone() or "
    "sourceTensor.detach().clone().requires_grad_(True), rather than "
    "torch.tensor(sourceTensor)."
)


class Generator:
    """The default random generator; ``manual_seed`` returns it, as in PyTorch."""

    __slots__ = ("_rng", "_seed")

    def __init__(self, seed: int = 0) -> None:
        self.manual_seed(seed)

    def manual_seed(self, seed: int) -> Generator:
        self._seed = int(seed)
        self._rng = _backend.host_rng(self._seed)
        return self

    def initial_seed(self) -> int:
        return self._seed

    def snapshot(self) -> Any:
        """Where the generator is now, for :meth:`restore` (checkpoint's recomputation draws
        the numbers its forward drew)."""
        return self._seed, self._rng.bit_generator.state

    def restore(self, state: Any) -> None:
        self._seed = state[0]
        self._rng.bit_generator.state = state[1]


default_generator = Generator(0)


def manual_seed(seed: int) -> Generator:
    """Seed the generator behind ``rand``/``randn`` and return it."""
    return default_generator.manual_seed(seed)


def is_tensor(obj: object) -> bool:
    return isinstance(obj, Tensor)


def _size(size: Sequence[Any], op: str, sequence_only: bool = False) -> tuple[int, ...]:
    """The shape in ``size``: the sizes given one by one, or one tuple or list of them (only
    that with ``sequence_only``, as ``full`` takes it). Anything that is not an integer (an
    int, a NumPy integer, a one-element integer tensor; not a bool or a float) is refused with
    the message of PyTorch's argument parser for ``op``."""
    if len(size) == 1 and isinstance(size[0], (tuple, list)):
        items = size[0]
    elif len(size) == 1 and (sequence_only or _size_item(size[0]) is None):
        raise TypeError(f"{op}(): argument 'size' (position 1) must be tuple of ints, not "
                        f"{type(size[0]).__name__}")
    else:
        items = size
    shape = []
    for pos, item in enumerate(items, 1):
        n = _size_item(item)
        if n is None:
            raise TypeError(f"{op}(): argument 'size' failed to unpack the object at pos {pos} "
                            f"with error \"type must be tuple of ints,but got "
                            f"{type(item).__name__}\"")
        shape.append(n)
    return tuple(shape)


def _size_item(item: Any) -> int | None:
    if type(item) is bool:
        return None
    try:
        return operator.index(item)
    except TypeError:
        return None


def _finish(host: Any, dtype: _dtype.dtype, device: Any, requires_grad: bool) -> Tensor:
    dev = _backend.resolve_device(device)
    return _leaf(_backend.backend_of(dev).from_host(host), dev, dtype, requires_grad)


def _leaf(array: Any, dev: _backend.device, dtype: _dtype.dtype, requires_grad: bool) -> Tensor:
    if requires_grad and dtype.kind not in "fc":
        raise RuntimeError(REQUIRES_GRAD_DTYPE)
    t = wrap(array, dev)
    t._requires_grad = bool(requires_grad)
    return t


def _copy_of(data: Tensor, dtype: _dtype.dtype | None, device: Any,
             requires_grad: bool = False) -> Tensor:
    """A new leaf holding ``data``'s values cast and moved (device to device, so a meta
    tensor gives a meta copy without its values being read)."""
    dtype = dtype or data.dtype
    dev = _backend.resolve_device(device) if device is not None else data._device
    return _leaf(_backend.move_array(data._data, dtype, dev), dev, dtype, requires_grad)


def tensor(data: Any, *, dtype: _dtype.dtype | None = None, device: Any = None,
           requires_grad: bool = False) -> Tensor:
    """A new leaf tensor holding a copy of ``data`` (numbers or nested lists)."""
    if isinstance(data, Tensor):
        warnings.warn(COPY_CONSTRUCT_WARNING, UserWarning, stacklevel=2)
        return _copy_of(data, dtype, device, requires_grad)
    host = _backend.host_array_from_data(data, dtype).copy()
    return _finish(host, dtype or _backend.dtype_of(host), device, requires_grad)


def as_tensor(data: Any, dtype: _dtype.dtype | None = None, device: Any = None) -> Tensor:
    if isinstance(data, Tensor):
        if dtype in (None, data.dtype) and (
                device is None or _backend.resolve_device(device) == data._device):
            return data
        return _copy_of(data, dtype, device)
    return tensor(data, dtype=dtype, device=device)


def from_numpy(array: Any) -> Tensor:
    """A cpu tensor sharing memory with NumPy array ``array``."""
    if not _backend.is_host_array(array):
        raise TypeError(f"expected np.ndarray (got {type(array).__name__})")
    _backend.dtype_of(array)
    return wrap(array, _backend.CPU)


def _random(kind: str, size: Sequence[Any], dtype: _dtype.dtype | None, device: Any,
            requires_grad: bool, generator: Generator | None) -> Tensor:
    dtype = dtype or _dtype.float32
    if dtype.kind not in "fc":
        raise RuntimeError(f"\"check_uniform_bounds\" not implemented for '{dtype.legacy_name}'")
    shape = _size(size, kind)
    if _backend.resolve_device(device).type == "meta":
        # Values on meta are never seen, and PyTorch draws none: the generator does not advance.
        return _finish(_backend.filled(shape, 0, dtype), dtype, device, requires_grad)
    rng = (generator or default_generator)._rng
    host = rng.random(shape) if kind == "rand" else rng.standard_normal(shape)
    return _finish(_backend.as_host(host, dtype), dtype, device, requires_grad)


def rand(*size: Any, dtype: _dtype.dtype | None = None, device: Any = None,
         requires_grad: bool = False, generator: Generator | None = None) -> Tensor:
    """Uniform samples on [0, 1)."""
    return _random("rand", size, dtype, device, requires_grad, generator)


def randn(*size: Any, dtype: _dtype.dtype | None = None, device: Any = None,
          requires_grad: bool = False, generator: Generator | None = None) -> Tensor:
    """Standard normal samples."""
    return _random("randn", size, dtype, device, requires_grad, generator)


def full(size: Sequence[int], fill_value: Any, *, dtype: _dtype.dtype | None = None,
         device: Any = None, requires_grad: bool = False) -> Tensor:
    if dtype is None:
        dtype = _dtype.result_type_of((fill_value,))
    shape = _size((size,), "full", sequence_only=True)
    host = _backend.filled(shape, _dtype.checked_scalar(fill_value, dtype,
                                                        one_element=math.prod(shape) == 1), dtype)
    return _finish(host, dtype, device, requires_grad)


def _filled(op: str, size: Sequence[Any], value: int, dtype: _dtype.dtype | None, device: Any,
            requires_grad: bool) -> Tensor:
    dtype = dtype or _dtype.float32
    return _finish(_backend.filled(_size(size, op), value, dtype), dtype, device, requires_grad)


def ones(*size: Any, dtype: _dtype.dtype | None = None, device: Any = None,
         requires_grad: bool = False) -> Tensor:
    return _filled("ones", size, 1, dtype, device, requires_grad)


def zeros(*size: Any, dtype: _dtype.dtype | None = None, device: Any = None,
          requires_grad: bool = False) -> Tensor:
    return _filled("zeros", size, 0, dtype, device, requires_grad)


def empty(*size: Any, dtype: _dtype.dtype | None = None, device: Any = None,
          requires_grad: bool = False) -> Tensor:
    """A tensor of ``size`` (zeros here; PyTorch leaves its values unset)."""
    return _filled("empty", size, 0, dtype, device, requires_grad)


def arange(start: Any, end: Any = None, step: Any = 1, *, dtype: _dtype.dtype | None = None,
           device: Any = None, requires_grad: bool = False) -> Tensor:
    """Values from ``start`` up to ``end`` (exclusive) by ``step``.

    int64 unless one of the bounds or the step is a float (then float32).
    """
    if end is None:
        start, end = 0, start
    if dtype is None:
        floats = any(isinstance(v, float) for v in (start, end, step))
        dtype = _dtype.float32 if floats else _dtype.int64
    return _finish(_backend.arange(start, end, step, dtype), dtype, device, requires_grad)


def eye(n: int, m: int | None = None, *, dtype: _dtype.dtype | None = None, device: Any = None,
        requires_grad: bool = False) -> Tensor:
    """An n by m leaf with ones on the diagonal."""
    if n < 0:
        raise RuntimeError(f"n must be greater or equal to 0, got {n}")
    m = n if m is None else m
    if m < 0:
        raise RuntimeError(f"m must be greater or equal to 0, got {m}")
    dtype = dtype or _dtype.float32
    host = numpy.eye(n, m).astype(_backend.numpy_dtype(dtype))
    return _finish(host, dtype, device, requires_grad)


def randint(low: int, high: Any = None, size: Any = None, *, dtype: _dtype.dtype | None = None,
            device: Any = None, requires_grad: bool = False,
            generator: Generator | None = None) -> Tensor:
    """Integers drawn uniformly from ``low`` up to ``high`` (exclusive; ``randint(high,
    size)`` starts at 0), int64 unless ``dtype`` says otherwise."""
    if size is None:
        low, high, size = 0, low, high
    dtype = dtype or _dtype.int64
    if requires_grad and dtype.kind not in "fc":
        raise RuntimeError(REQUIRES_GRAD_DTYPE)
    if low >= high:
        raise RuntimeError(f"random_ expects 'from' to be less than 'to', but got from={low} "
                           f">= to={high}")
    shape = _size((size,), "randint", sequence_only=True)
    host = (generator or default_generator)._rng.integers(low, high, shape)
    return _finish(_backend.as_host(host, dtype), dtype, device, requires_grad)


def _like(t: Tensor, dtype: _dtype.dtype | None, device: Any) -> tuple[_dtype.dtype, Any]:
    return dtype or t.dtype, device if device is not None else t._device


def rand_like(input: Tensor, *, dtype: _dtype.dtype | None = None, device: Any = None,
              requires_grad: bool = False) -> Tensor:
    dtype, device = _like(input, dtype, device)
    return rand(input.shape, dtype=dtype, device=device, requires_grad=requires_grad)


def randn_like(input: Tensor, *, dtype: _dtype.dtype | None = None, device: Any = None,
               requires_grad: bool = False) -> Tensor:
    dtype, device = _like(input, dtype, device)
    return randn(input.shape, dtype=dtype, device=device, requires_grad=requires_grad)


def ones_like(input: Tensor, *, dtype: _dtype.dtype | None = None, device: Any = None,
              requires_grad: bool = False) -> Tensor:
    dtype, device = _like(input, dtype, device)
    return ones(input.shape, dtype=dtype, device=device, requires_grad=requires_grad)


def zeros_like(input: Tensor, *, dtype: _dtype.dtype | None = None, device: Any = None,
               requires_grad: bool = False) -> Tensor:
    dtype, device = _like(input, dtype, device)
    return zeros(input.shape, dtype=dtype, device=device, requires_grad=requires_grad)


empty_like = zeros_like


def full_like(input: Tensor, fill_value: Any, *, dtype: _dtype.dtype | None = None,
              device: Any = None, requires_grad: bool = False) -> Tensor:
    dtype, device = _like(input, dtype, device)
    return full(input.shape, fill_value, dtype=dtype, device=device, requires_grad=requires_grad)


# ``Tensor.new_*``: leaves with the source tensor's dtype and device unless told otherwise.

def _new(source: Tensor, make: Any, size: tuple[Any, ...], dtype: _dtype.dtype | None,
         device: Any, requires_grad: bool, *args: Any) -> Tensor:
    dtype, device = _like(source, dtype, device)
    return make(_size(size, f"new_{make.__name__}"), *args, dtype=dtype, device=device,
                requires_grad=requires_grad)


def new_zeros(self: Tensor, *size: Any, dtype: _dtype.dtype | None = None, device: Any = None,
              requires_grad: bool = False) -> Tensor:
    """Zeros of ``size``, with this tensor's dtype and device."""
    return _new(self, zeros, size, dtype, device, requires_grad)


def new_ones(self: Tensor, *size: Any, dtype: _dtype.dtype | None = None, device: Any = None,
             requires_grad: bool = False) -> Tensor:
    """Ones of ``size``, with this tensor's dtype and device."""
    return _new(self, ones, size, dtype, device, requires_grad)


def new_empty(self: Tensor, *size: Any, dtype: _dtype.dtype | None = None, device: Any = None,
              requires_grad: bool = False) -> Tensor:
    """A tensor of ``size`` (zeros here; PyTorch leaves its values unset), with this tensor's
    dtype and device."""
    return _new(self, empty, size, dtype, device, requires_grad)


def new_full(self: Tensor, size: Sequence[int], fill_value: Any, *,
             dtype: _dtype.dtype | None = None, device: Any = None,
             requires_grad: bool = False) -> Tensor:
    """``fill_value`` everywhere in ``size``, with this tensor's dtype and device."""
    dtype, device = _like(self, dtype, device)
    return full(_size((size,), "new_full", sequence_only=True), fill_value, dtype=dtype,
                device=device, requires_grad=requires_grad)


NEW_TENSOR_COPY_WARNING = COPY_CONSTRUCT_WARNING.replace("torch.tensor(", "tensor.new_tensor(")


def new_tensor(self: Tensor, data: Any, *, dtype: _dtype.dtype | None = None, device: Any = None,
               requires_grad: bool = False) -> Tensor:
    """A new leaf holding a copy of ``data``, with this tensor's dtype and device."""
    dtype, device = _like(self, dtype, device)
    if isinstance(data, Tensor):
        warnings.warn(NEW_TENSOR_COPY_WARNING, UserWarning, stacklevel=2)
        return _copy_of(data, dtype, device, requires_grad)
    host = _backend.host_array_from_data(data, dtype).copy()
    return _finish(host, dtype, device, requires_grad)
