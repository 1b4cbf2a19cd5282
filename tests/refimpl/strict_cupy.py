"""A strict stand-in for CuPy, installed as refimpl's cuda backend in tests.

Its arrays hold NumPy arrays inside but behave like CuPy's where host/device mix-ups matter:
they refuse implicit conversion to NumPy (``__array__`` raises CuPy's TypeError, and NumPy
ufuncs refuse them), operations mixing them with NumPy arrays raise, and the only ways back to
the host are ``asnumpy`` and ``.get()``. A refimpl code path that touches a device array with
NumPy therefore fails here exactly as it would on a GPU.
"""

from __future__ import annotations

from typing import Any

import numpy

IMPLICIT = ("Implicit conversion to a NumPy array is not allowed. Please use `.get()` to "
            "construct a NumPy array explicitly.")


def _unwrap(value: Any) -> Any:
    if isinstance(value, ndarray):
        return value._a
    if isinstance(value, numpy.ndarray):
        raise TypeError(f"Unsupported type {type(value)}: a NumPy array cannot be mixed with "
                        "device arrays; use asarray() to copy it to the device first")
    if isinstance(value, (list, tuple)):
        return type(value)(_unwrap(v) for v in value)
    return value


def _wrap(value: Any) -> Any:
    if isinstance(value, numpy.ndarray):
        return ndarray(value)
    if isinstance(value, numpy.generic):
        # CuPy reductions and indexing return 0-d device arrays, never host scalars.
        return ndarray(numpy.asarray(value))
    if isinstance(value, tuple):
        return tuple(_wrap(v) for v in value)
    return value


class _Pointer:
    __slots__ = ("ptr",)

    def __init__(self, ptr: int) -> None:
        self.ptr = ptr


class ndarray:  # noqa: N801 - CuPy's name
    """A device array: a NumPy array that will not leave the device implicitly."""

    __slots__ = ("_a",)
    __array_ufunc__ = None
    __hash__ = None  # type: ignore[assignment]

    def __init__(self, a: numpy.ndarray) -> None:
        self._a = a

    def __array__(self, *args: Any, **kwargs: Any) -> Any:
        raise TypeError(IMPLICIT)

    def __array_function__(self, *args: Any, **kwargs: Any) -> Any:
        raise TypeError(IMPLICIT)

    def get(self) -> numpy.ndarray:
        return self._a.copy()

    shape = property(lambda self: self._a.shape)
    dtype = property(lambda self: self._a.dtype)
    ndim = property(lambda self: self._a.ndim)
    size = property(lambda self: self._a.size)
    itemsize = property(lambda self: self._a.itemsize)
    flags = property(lambda self: self._a.flags)
    strides = property(lambda self: self._a.strides)
    # CuPy's ``data`` is a memory pointer whose ``ptr`` is the first element's address.
    data = property(lambda self: _Pointer(self._a.ctypes.data))
    T = property(lambda self: ndarray(self._a.T))
    base = property(lambda self: None if self._a.base is None else ndarray(self._a.base))

    def __repr__(self) -> str:
        return f"strict_cupy.ndarray({self._a!r})"

    def __getitem__(self, key: Any) -> Any:
        return _wrap(self._a[_unwrap(key)])

    def __setitem__(self, key: Any, value: Any) -> None:
        self._a[_unwrap(key)] = _unwrap(value)

    def __len__(self) -> int:
        return len(self._a)

    def __bool__(self) -> bool:
        return bool(self._a)

    def __float__(self) -> float:
        return float(self._a)

    def __int__(self) -> int:
        return int(self._a)

    def item(self) -> Any:
        return self._a.item()

    def tolist(self) -> Any:
        return self._a.tolist()

    def copy(self) -> ndarray:
        return ndarray(self._a.copy())

    def astype(self, dtype: Any, copy: bool = True) -> ndarray:
        return ndarray(self._a.astype(dtype, copy=copy))

    def reshape(self, *shape: Any) -> ndarray:
        return ndarray(self._a.reshape(*shape))

    def view(self, dtype: Any = None) -> ndarray:
        return ndarray(self._a.view() if dtype is None else self._a.view(dtype))

    real = property(lambda self: ndarray(self._a.real))


def _method(name: str) -> Any:
    def method(self: ndarray, *args: Any, **kwargs: Any) -> Any:
        return _wrap(getattr(self._a, name)(*_unwrap(args), **kwargs))

    method.__name__ = name
    return method


def _inplace(name: str) -> Any:
    def method(self: ndarray, other: Any) -> ndarray:
        getattr(self._a, name)(_unwrap(other))
        return self

    method.__name__ = name
    return method


for _name in ("sum", "mean", "max", "min", "any", "argmax", "argmin", "__add__", "__radd__",
              "__sub__", "__rsub__", "__mul__", "__rmul__", "__truediv__", "__rtruediv__",
              "__pow__", "__rpow__", "__matmul__", "__rmatmul__", "__neg__", "__pos__",
              "__abs__", "__eq__", "__ne__", "__lt__", "__le__", "__gt__", "__ge__", "__and__",
              "__or__", "__xor__", "__invert__", "__rand__", "__ror__"):
    setattr(ndarray, _name, _method(_name))
for _name in ("__iadd__", "__isub__", "__imul__", "__itruediv__"):
    setattr(ndarray, _name, _inplace(_name))


def asarray(value: Any, dtype: Any = None) -> ndarray:
    """Copy host data (NumPy arrays, numbers) to the device; device arrays pass through."""
    if isinstance(value, ndarray):
        return value if dtype is None else value.astype(dtype, copy=False)
    return ndarray(numpy.array(value, dtype=dtype))


def asnumpy(value: ndarray) -> numpy.ndarray:
    """The explicit device-to-host copy."""
    if not isinstance(value, ndarray):
        raise TypeError(f"asnumpy expects a device array, got {type(value).__name__}")
    return value._a.copy()


def _function(name: str) -> Any:
    target = getattr(numpy, name)

    def function(*args: Any, **kwargs: Any) -> Any:
        return _wrap(target(*_unwrap(args), **{k: _unwrap(v) for k, v in kwargs.items()}))

    function.__name__ = name
    return function


_FUNCTIONS = ("exp", "log", "sqrt", "sin", "cos", "tanh", "abs", "sign", "where", "maximum",
              "minimum", "clip", "swapaxes", "transpose", "expand_dims", "squeeze",
              "broadcast_to", "concatenate", "stack", "zeros", "zeros_like", "full_like",
              "dot", "logical_not", "ones", "full", "conj", "negative", "dtype",
              "ascontiguousarray", "arange", "moveaxis", "take_along_axis", "bincount",
              "sort", "argsort", "take", "isnan", "tile")
for _name in _FUNCTIONS:
    globals()[_name] = _function(_name)


nan = numpy.nan
int64 = numpy.int64


def diagonal(a: ndarray, offset: int = 0, axis1: int = 0, axis2: int = 1) -> ndarray:
    """A writable view, as CuPy's diagonal is (NumPy's is read-only)."""
    out = numpy.diagonal(_unwrap(a), offset, axis1, axis2)
    out.flags.writeable = True
    return _wrap(out)


def broadcast_to(array: ndarray, shape: tuple[int, ...]) -> ndarray:
    """A broadcast view that can be written, as CuPy's is (NumPy's is read-only)."""
    a = _unwrap(array)
    view = numpy.broadcast_to(a, shape)
    return ndarray(numpy.lib.stride_tricks.as_strided(a, shape, view.strides))

class _StrideTricks:
    @staticmethod
    def as_strided(x: ndarray, shape: Any = None, strides: Any = None) -> ndarray:
        return ndarray(numpy.lib.stride_tricks.as_strided(_unwrap(x), shape, strides))


class lib:  # noqa: N801 - CuPy's name
    stride_tricks = _StrideTricks


__all__ = ["ndarray", "asarray", "asnumpy", "lib", "diagonal", "nan", "int64", *_FUNCTIONS]
