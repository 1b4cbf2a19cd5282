"""Array backends: the only module that imports NumPy or CuPy.

Every tensor lives on a :class:`device`; each device type has a :class:`Backend` holding its
array module (``xp``: NumPy for ``cpu``, CuPy for ``cuda``, NumPy on :class:`MetaArray` for
``meta``) and the two explicit host transfers. Ops receive ``xp`` and never import an array
library themselves, so a host/device mix-up cannot hide in op code.

The ``meta`` device holds tensors with shapes, dtypes and strides but no readable values
(PyTorch's meta tensors): its arrays are NumPy arrays of the :class:`MetaArray` subclass, which
ops compute with as usual, and its backend refuses every way out to the host.

Tests (or a machine without CuPy) can install any CuPy-like module as the cuda backend::

    import refimpl
    refimpl._backend.install_cuda_module(my_cupy_like_module)
    refimpl.ones(3, device="cuda")      # arrays now come from my_cupy_like_module
    refimpl._backend.install_cuda_module(None)   # back to real CuPy, if usable

The module must provide CuPy's array API subset that the ops use (``asarray``, ``asnumpy``,
ufuncs, reductions, ``.get()`` on arrays).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from types import ModuleType
from typing import Any, TypeVar

import numpy

from refimpl import _dtype

try:
    # NumPy 2 keeps its floating-point error state in a context variable. Setting it directly
    # costs a tenth of entering ``numpy.errstate``, and ``quiet`` runs once per op.
    from numpy._core._ufunc_config import _extobj_contextvar
    from numpy._core.umath import _make_extobj
except ImportError:  # NumPy 1.x: the public context manager below
    _extobj_contextvar = None

__all__ = ["Backend", "MetaArray", "device", "install_cuda_module", "cuda_unavailable",
           "cuda_is_available", "numpy_dtype", "quiet", "scalar_array",
           "dtype_of", "host_rng", "CUDA_NOT_ENABLED", "META_NO_DATA", "META_ITEM"]

CUDA_NOT_ENABLED = "Torch not compiled with CUDA enabled"
META_NO_DATA = "Cannot copy out of meta tensor; no data!"
META_ITEM = "Tensor.item() cannot be called on meta tensors"

_F = TypeVar("_F", bound=Callable[..., Any])


QUIET = None if _extobj_contextvar is None else (
    _extobj_contextvar.set, _extobj_contextvar.reset, _make_extobj(all="ignore"))
"""What ``quiet`` does, for the hottest caller to inline (``refimpl.ops.table.apply``): set
the first to the third, then reset with the second's token. None with NumPy 1.x."""


def quiet(fn: _F) -> _F:
    """``fn`` with NumPy's floating-point warnings silenced while it runs.

    PyTorch computes ``log(-1)``, ``1 / 0`` or an overflowing ``exp`` silently (NaN, inf), while
    NumPy warns ("invalid value encountered in log"). Every op's forward runs through this
    (``refimpl.ops.table.OpRow``), and so does every backward formula, which is written in ops.
    CuPy never warns, so the wrapper only touches NumPy's state and is harmless around CuPy.
    """
    if QUIET is None:
        return numpy.errstate(all="ignore")(fn)
    enter, leave, ignore = QUIET

    @functools.wraps(fn)
    def quiet_fn(*args: Any, **kwargs: Any) -> Any:
        token = enter(ignore)
        try:
            return fn(*args, **kwargs)
        finally:
            leave(token)

    return quiet_fn  # type: ignore[return-value]


@quiet
def _scalar_array_quietly(xp: ModuleType, value: Any, np_dtype: Any) -> Any:
    try:
        return xp.asarray(value, dtype=np_dtype)
    except OverflowError:
        if type(value) is not int or np_dtype.kind != "i" or not -2**63 <= value < 2**63:
            raise
        # PyTorch wraps a number past a smaller integer type's range in arithmetic
        # (int16 tensor + 40000), as a C++ cast from int64 does; NumPy 2 refuses it.
        return xp.asarray(value, dtype=numpy.int64).astype(np_dtype)


_FLOAT_MAX = {numpy.dtype(name): float(numpy.finfo(name).max)
              for name in ("float16", "float32", "float64")}


def scalar_array(xp: ModuleType, value: Any, np_dtype: Any) -> Any:
    """A 0-d array of ``value`` with element type ``np_dtype`` (a number out of the type's
    range becomes inf or wraps, silently, as in PyTorch)."""
    # A Python float within a float type's range cannot warn: skip the error-state switch,
    # which costs more than the conversion (every ``tensor * 0.5`` comes here).
    limit = _FLOAT_MAX.get(np_dtype)
    if limit is not None and type(value) is float and -limit <= value <= limit:
        return xp.asarray(value, dtype=np_dtype)
    return _scalar_array_quietly(xp, value, np_dtype)


def _array_type(d: _dtype.dtype) -> Any:
    if d is _dtype.bfloat16:
        # NumPy has no bfloat16; the ml_dtypes package (a dependency of JAX) adds one.
        try:
            import ml_dtypes
        except ImportError:
            return None
        return numpy.dtype(ml_dtypes.bfloat16)
    return numpy.dtype(d.name)


_NP_DTYPE = {d: t for d in _dtype.ALL if (t := _array_type(d)) is not None}
_FROM_NP = {t: d for d, t in _NP_DTYPE.items()}


def numpy_dtype(d: _dtype.dtype) -> Any:
    """The array-library dtype object for ``d`` (NumPy and CuPy share them)."""
    try:
        return _NP_DTYPE[d]
    except KeyError:
        raise TypeError(f"refimpl's {d.name} tensors need the ml_dtypes package (pip install "
                        "ml_dtypes)") from None


def dtype_of(array: Any) -> _dtype.dtype:
    """The refimpl dtype of a backend array; refuses element types refimpl does not model."""
    try:
        return _FROM_NP[array.dtype]
    except KeyError:
        raise TypeError(
            f"refimpl supports the dtypes {[d.name for d in _dtype.ALL]}, got {array.dtype}; "
            "convert the data to one of them first"
        ) from None


class Backend:
    """How one device type stores arrays: ``xp`` and the explicit host transfers."""

    __slots__ = ("xp", "array_type")

    def __init__(self, xp: ModuleType) -> None:
        self.xp = xp
        self.array_type = xp.ndarray

    def from_host(self, host_array: numpy.ndarray) -> Any:
        """Copy a NumPy array onto this backend (identity for NumPy)."""
        if self.xp is numpy:
            return host_array
        return self.xp.asarray(host_array)

    def to_host(self, array: Any) -> numpy.ndarray:
        """Copy a backend array to a NumPy array (identity for NumPy)."""
        if self.xp is numpy:
            return array
        return self.xp.asnumpy(array)

    def item(self, array: Any) -> Any:
        """The one element of ``array`` as a Python number (``Tensor.item()``)."""
        return self.to_host(array).reshape(()).item()


class MetaArray(numpy.ndarray):
    """The array of a meta tensor: a NumPy array whose values the tensor API never shows.

    Why real arrays rather than bare (shape, dtype) records or zero-strided stand-ins: a meta
    tensor needs exactly the shape, dtype and strides the op would give on the CPU (broadcasting,
    reductions, views, ``is_contiguous``, what ``view`` accepts, when an in-place write needs a
    copy), and every op's CPU forward already computes them. Running the same forward keeps one
    definition per op instead of a second shape rule beside each row; zero-strided inputs would
    carry the wrong strides. The price is the time and memory of a CPU tensor of that size.

    The subclass marks the array as meta wherever it goes (``device_of_array``, the memory
    checks below); NumPy functions that would return a plain array return a MetaArray instead.
    """

    def __array_function__(self, func: Any, types: Any, args: Any, kwargs: Any) -> Any:
        return _as_meta(super().__array_function__(func, types, args, kwargs))


def _as_meta(result: Any) -> Any:
    if type(result) is numpy.ndarray:
        return result.view(MetaArray)
    if type(result) in (tuple, list):
        return type(result)(_as_meta(r) for r in result)
    return result


class _MetaNumpy:
    """NumPy as the meta backend's ``xp``: the same functions, but arrays built from Python
    data or NumPy scalars (``asarray``, ``ascontiguousarray``) are meta arrays too."""

    ndarray = MetaArray

    def __getattr__(self, name: str) -> Any:
        return getattr(numpy, name)

    @staticmethod
    def asarray(a: Any, dtype: Any = None) -> MetaArray:
        return numpy.asarray(a, dtype=dtype).view(MetaArray)

    @staticmethod
    def ascontiguousarray(a: Any, dtype: Any = None) -> MetaArray:
        return numpy.ascontiguousarray(a, dtype=dtype).view(MetaArray)


class _MetaBackend(Backend):
    """The meta device: arrays come in (a copy: a meta tensor shares no memory with the CPU
    tensor it was made from) but never go out, as PyTorch's meta tensors have no data."""

    def __init__(self) -> None:
        self.xp = _MetaNumpy()
        self.array_type = MetaArray

    def from_host(self, host_array: numpy.ndarray) -> MetaArray:
        # The values are kept (never shown): a CPU bool mask moved here to index a meta tensor
        # still selects as many elements as PyTorch's mask on the CPU does.
        return numpy.array(host_array, copy=True).view(MetaArray)

    def to_host(self, array: Any) -> numpy.ndarray:
        raise NotImplementedError(META_NO_DATA)

    def item(self, array: Any) -> Any:
        raise RuntimeError(META_ITEM)


_CPU = Backend(numpy)
_META = _MetaBackend()
_cuda_override: ModuleType | None = None
_cuda_backend: Backend | None = None
_cuda_probed = False


def _real_cupy() -> ModuleType | None:
    try:
        import cupy  # noqa: PLC0415 - optional dependency, imported on first cuda request
    except ImportError:
        return None
    try:
        if cupy.cuda.runtime.getDeviceCount() < 1:
            return None
    except Exception:  # CuPy raises its own runtime errors when no driver is present
        return None
    return cupy


def install_cuda_module(module: ModuleType | None) -> None:
    """Use ``module`` (a CuPy-like array module) as the cuda backend; ``None`` restores CuPy.

    Tensors created on cuda before the switch keep their arrays; create new ones after it.
    """
    global _cuda_override, _cuda_backend, _cuda_probed
    _cuda_override = module
    _cuda_backend = Backend(module) if module is not None else None
    _cuda_probed = module is not None


@contextmanager
def cuda_unavailable() -> Iterator[None]:
    """Inside the block, behave as a machine where no CUDA device is usable (asking for one
    raises what CPU-only PyTorch raises); the previous backend comes back afterwards."""
    global _cuda_override, _cuda_backend, _cuda_probed
    saved = (_cuda_override, _cuda_backend, _cuda_probed)
    _cuda_override, _cuda_backend, _cuda_probed = None, None, True
    try:
        yield
    finally:
        _cuda_override, _cuda_backend, _cuda_probed = saved


def _cuda() -> Backend | None:
    global _cuda_backend, _cuda_probed
    if not _cuda_probed:
        _cuda_probed = True
        cupy = _real_cupy()
        _cuda_backend = Backend(cupy) if cupy is not None else None
    return _cuda_backend


def cuda_is_available() -> bool:
    """``torch.cuda.is_available()``: True when CuPy sees a GPU or a stand-in is installed."""
    return _cuda() is not None


DEVICE_TYPES = ("cpu", "cuda", "meta")


class device:  # noqa: N801 - PyTorch spells it torch.device
    """``torch.device``: ``device('cpu')``, ``device('cuda')``, ``device('cuda', 0)``,
    ``device('meta')``."""

    __slots__ = ("type", "index")

    def __new__(cls, spec: str | device, index: int | None = None) -> device:
        if isinstance(spec, device):
            return spec
        if not isinstance(spec, str):
            raise TypeError(f"device() expects a string such as 'cpu' or 'cuda:0', got {spec!r}")
        name, _, idx = spec.partition(":")
        if name not in DEVICE_TYPES:
            raise RuntimeError(f"Expected one of {', '.join(DEVICE_TYPES)} device type at start "
                               f"of device string: {spec}")
        if idx:
            index = int(idx)
        self = object.__new__(cls)
        self.type = name
        self.index = index
        return self

    def __str__(self) -> str:
        return self.type if self.index is None else f"{self.type}:{self.index}"

    def __repr__(self) -> str:
        if self.index is None:
            return f"device(type='{self.type}')"
        return f"device(type='{self.type}', index={self.index})"

    def __eq__(self, other: object) -> bool:
        return (isinstance(other, device) and other.type == self.type
                and other.index == self.index)

    def __hash__(self) -> int:
        return hash((self.type, self.index))


CPU = device("cpu")
CUDA0 = device("cuda", 0)
META = device("meta")


def resolve_device(spec: str | device | None) -> device:
    """The concrete device a tensor lives on (``'cuda'`` means ``cuda:0``).

    Asking for cuda where no CUDA device is usable raises what CPU-only PyTorch raises. There
    is one meta device: PyTorch's meta tensors report ``meta`` whatever index was asked for.
    """
    if spec is None:
        return CPU
    d = device(spec)
    if d.type == "cpu":
        return CPU
    if d.type == "meta":
        return META
    if _cuda() is None:
        raise AssertionError(CUDA_NOT_ENABLED)
    if d.index not in (None, 0):
        raise RuntimeError(
            f"CUDA error: invalid device ordinal (refimpl uses one GPU, cuda:0; got {d})"
        )
    return CUDA0


def backend_of(d: device) -> Backend:
    """The backend that stores arrays for device ``d`` (already resolved)."""
    if d.type == "cpu":
        return _CPU
    if d.type == "meta":
        return _META
    b = _cuda()
    if b is None:
        raise AssertionError(CUDA_NOT_ENABLED)
    return b


def device_of_array(array: Any) -> device:
    """Which device a backend array belongs to."""
    if type(array) is numpy.ndarray:
        return CPU
    if isinstance(array, MetaArray):
        return META
    return CPU if isinstance(array, numpy.ndarray) else CUDA0


def shallow_copy_compatible(a: device, b: device) -> bool:
    """Whether a tensor on ``a`` may take the data of one on ``b`` (``t.data = ...``, which
    ``Module.to`` uses to keep its parameters): PyTorch's ``_has_compatible_shallow_copy_type``,
    true between cpu and cuda, false between meta and either."""
    return (a.type == "meta") == (b.type == "meta")


def host_rng(seed: int | None = None) -> numpy.random.Generator:
    """A host random generator; random tensors are drawn on the host then moved."""
    return numpy.random.default_rng(seed)


def is_host_array(value: Any) -> bool:
    return isinstance(value, numpy.ndarray | numpy.generic)


@quiet
def move_array(array: Any, dtype: _dtype.dtype, target: device) -> Any:
    """A copy of ``array`` with element type ``dtype`` on device ``target`` (through the host;
    out of meta this raises, as a meta tensor has no data to copy)."""
    np_dtype = numpy_dtype(dtype)
    source = device_of_array(array)
    if source == target:
        return array.astype(np_dtype, copy=True)
    host = backend_of(source).to_host(array).astype(np_dtype, copy=False)
    return host if target.type == "cpu" else backend_of(target).from_host(host)


@quiet
def host_array_from_data(data: Any, dtype: _dtype.dtype | None) -> numpy.ndarray:
    """Host array for ``refimpl.tensor(data)`` with PyTorch's dtype inference.

    Python floats become float32, ints int64, bools bool, complex numbers complex64; a NumPy
    array keeps its dtype.
    """
    keep = isinstance(data, numpy.ndarray | numpy.generic)
    try:
        arr = numpy.asarray(data)
    except ValueError:
        # Nested lists of unequal lengths: PyTorch's message, found as it reads them.
        arr = _ragged(data)
    if not keep and arr.dtype.kind in "uO":
        arr = _past_int64(arr, dtype)
    if dtype is not None:
        if not keep and dtype.kind == "i" and arr.size and arr.dtype.kind in "if" and (
                _dtype.overflows(dtype, arr.min().item())
                or _dtype.overflows(dtype, arr.max().item())):
            # Numbers are checked one by one as they are converted (a NumPy array is cast,
            # and wraps): PyTorch names the type as torch does here, not as C++ does.
            raise RuntimeError(f"value cannot be converted to type {dtype.name} without "
                               "overflow")
        return as_host(arr, dtype)
    if keep and arr.dtype in _FROM_NP:
        return arr
    kind = arr.dtype.kind
    if kind == "b":
        return arr.astype(numpy.bool_)
    if kind in "iu":
        return arr.astype(numpy.int64)
    if kind == "c":
        return arr.astype(numpy.complex64)
    if kind == "f" or arr.size == 0:
        return arr.astype(numpy.float32)
    raise TypeError(f"Could not infer dtype of {type(data).__name__}; pass numbers, bools or "
                    "nested lists of them")


def _ragged(data: Any) -> numpy.ndarray:
    """Refuse nested sequences NumPy found ragged, as PyTorch does: the shape is read from the
    first element at each depth, and the first sequence (depth first) of another length, or
    number where a sequence belongs, or sequence where a number belongs, is named. A shape
    with a zero in it is read no further (PyTorch gives an empty tensor of that shape)."""
    sequence = (list, tuple)
    shape: list[int] = []
    first = data
    while isinstance(first, sequence):
        shape.append(len(first))
        if not first:
            break
        first = first[0]
    if 0 in shape:
        return numpy.empty(shape, dtype=numpy.float64)

    def numbers(x: Any) -> Iterator[Any]:
        if isinstance(x, sequence):
            for item in x:
                yield from numbers(item)
        else:
            yield x

    def walk(x: Any, dim: int) -> None:
        if dim < len(shape):
            if not isinstance(x, sequence):
                raise TypeError("not a sequence")
            if len(x) != shape[dim]:
                raise ValueError(f"expected sequence of length {shape[dim]} at dim {dim} "
                                 f"(got {len(x)})")
            for item in x:
                walk(item, dim + 1)
        elif isinstance(x, sequence):
            # PyTorch's dtype, inferred from all the numbers, decides how it reads this one.
            kind = type(x).__name__
            integral = all(isinstance(v, bool | int) for v in numbers(data))
            raise TypeError(f"'{kind}' object cannot be interpreted as an integer" if integral
                            else f"must be real number, not {kind}")

    walk(data, 0)
    return numpy.asarray(data)


def _past_int64(arr: numpy.ndarray, dtype: _dtype.dtype | None) -> numpy.ndarray:
    """Python ints NumPy could not hold in int64 (it made uint64 or object arrays of them):
    PyTorch reads each number as it converts it, so an int past int64's range is an overflow
    unless the tensor is of a floating or complex type (named, or inferred from a float among
    the numbers), which takes it as a float."""
    numbers = arr.reshape(-1).tolist()
    if not all(isinstance(v, int | float | complex) for v in numbers):
        return arr  # ragged lists or other objects: the caller refuses them
    to_float = (dtype is not None and dtype.kind in "fc") or \
        (dtype is None and any(isinstance(v, float | complex) for v in numbers))
    if not to_float:
        if any(isinstance(v, int) and not -2**63 <= v < 2**63 for v in numbers):
            raise ValueError("Overflow when unpacking long long")
        return arr.astype(numpy.int64) if arr.dtype.kind == "u" else \
            numpy.asarray(numbers, dtype=numpy.int64).reshape(arr.shape)
    kind = complex if any(isinstance(v, complex) for v in numbers) else float
    return numpy.asarray([kind(v) for v in numbers]).reshape(arr.shape)


@quiet
def as_host(array: numpy.ndarray, dtype: _dtype.dtype) -> numpy.ndarray:
    """``array`` converted to ``dtype`` on the host."""
    return array.astype(numpy_dtype(dtype), copy=False)


@quiet
def filled(shape: tuple[int, ...], value: Any, dtype: _dtype.dtype) -> numpy.ndarray:
    """A host array of ``shape`` filled with ``value``."""
    return numpy.full(shape, value, dtype=numpy_dtype(dtype))


@quiet
def arange(start: Any, end: Any, step: Any, dtype: _dtype.dtype) -> numpy.ndarray:
    """Host ``arange`` computed in double precision, then cast (PyTorch's rounding)."""
    return numpy.arange(start, end, step, dtype=numpy.float64).astype(numpy_dtype(dtype))


def expand(xp: ModuleType, array: Any, shape: tuple[int, ...]) -> Any:
    """``array`` broadcast to ``shape`` as a writable view (stride 0 along the new and the
    stretched dimensions), as PyTorch's expand is: NumPy's ``broadcast_to`` is read-only,
    while ``zero_``/``fill_`` may write through an expanded tensor."""
    if not isinstance(array, numpy.ndarray):
        return xp.broadcast_to(array, shape)  # CuPy's broadcast views are writable
    lead = len(shape) - array.ndim
    strides = (0,) * lead + tuple(
        0 if n == 1 and want != 1 else st
        for n, st, want in zip(array.shape, array.strides, shape[lead:], strict=True))
    return numpy.lib.stride_tricks.as_strided(array, shape, strides, subok=True)


def _dense_extent(array: Any) -> tuple[int, int] | None:
    """``[first, end)`` byte addresses of an array whose elements tile its memory exactly
    (PyTorch's ``is_non_overlapping_and_dense``), or None for any other layout."""
    item = array.dtype.itemsize
    dims = sorted((st, n) for n, st in zip(array.shape, array.strides, strict=True) if n > 1)
    need = item
    for st, n in dims:
        if st != need:
            return None
        need *= n
    ptr = array.ctypes.data if isinstance(array, numpy.ndarray) else array.data.ptr
    return ptr, ptr + array.size * item


def has_internal_overlap(array: Any) -> bool:
    """Whether elements of ``array`` share memory (a stride 0 along a dim longer than 1).

    Never for a meta array: a meta tensor has no memory, and PyTorch's memory checks pass on
    it (this and the two checks below)."""
    if isinstance(array, MetaArray) or array.size == 0:
        return False  # an empty tensor is non-overlapping and dense (NumPy may give it 0 strides)
    return any(st == 0 and n > 1 for n, st in zip(array.shape, array.strides, strict=True))


def overlaps(a: Any, b: Any) -> bool:
    """Whether arrays ``a`` and ``b`` share any memory, fully or partly (PyTorch's
    ``assert_no_overlap``; layouts too irregular to tell are not)."""
    if a.size == 0 or b.size == 0 or isinstance(a, MetaArray):
        return False
    if a is b:
        return True
    ea, eb = _dense_extent(a), _dense_extent(b)
    if ea is None or eb is None:
        return False
    return ea[0] < eb[1] and eb[0] < ea[1]


def partial_overlap(a: Any, b: Any) -> bool:
    """Whether arrays ``a`` and ``b`` share memory without being the same elements in the same
    layout (PyTorch's ``MemOverlapStatus::Partial``; layouts too irregular to tell are not)."""
    if a is b or a.size == 0 or b.size == 0 or isinstance(a, MetaArray):
        return False
    ea, eb = _dense_extent(a), _dense_extent(b)
    if ea is None or eb is None:
        return False
    if ea == eb:
        return a.strides != b.strides
    return ea[0] < eb[1] and eb[0] < ea[1]


def dtype_of_np(np_dtype: Any) -> _dtype.dtype:
    """The refimpl dtype for an array-library dtype object."""
    return _FROM_NP[np_dtype]


def array_ptr(array: Any) -> int:
    """The address of an array's first element, NumPy's or CuPy's."""
    interface = getattr(array, "__array_interface__", None)
    return interface["data"][0] if interface is not None else array.data.ptr
