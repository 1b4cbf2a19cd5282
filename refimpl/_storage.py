"""What replaces or reinterprets a tensor's memory: ``resize_``, ``resize_as_``, ``set_``, the
legacy constructors (``torch.Tensor(...)``, ``torch.FloatTensor``..., ``Tensor.new``) and
``torch.save``/``torch.load``.

refimpl keeps no storage object: a tensor's memory is its backend array, and the array it
views (``array.base``, followed to the array that owns the memory) plays the storage.
``resize_`` reinterprets that memory as C-contiguous from the tensor's offset, as PyTorch's
does, and allocates anew only when the memory is too small (keeping the values that fit).
Autograd-wise all of them are writes outside the graph: ``resize_`` refuses any tensor that
requires grad (grad mode or not), ``set_`` is an in-place op (a leaf that requires grad
refuses it under grad mode), and both bump the version counter.
"""

from __future__ import annotations

import io
import math
import pickle
import weakref
from typing import Any

import numpy

from refimpl import _backend, _creation, _dtype
from refimpl._tensor import Tensor
from refimpl.ops.inplace import LEAF_INPLACE

__all__ = ["resize_", "resize_as_", "set_", "new", "storage_offset", "LEGACY_TYPES", "save", "load"]

RESIZE_REQUIRES_GRAD = "cannot resize variables that require grad"


def _owner(array: Any) -> Any:
    while getattr(array, "base", None) is not None and hasattr(array.base, "shape"):
        array = array.base
    return array


def _offset(array: Any, owner: Any) -> int | None:
    """``array``'s first element as an index into ``owner`` seen as a flat C-order array, or
    None when ``owner`` cannot be seen that way (not contiguous, another element type)."""
    if owner.dtype != array.dtype or not owner.flags.c_contiguous:
        return None
    if owner.size == 0 or array.size == 0:
        return 0 if owner is array or owner.size == 0 else None
    first = _backend.array_ptr(array) - _backend.array_ptr(owner)
    return first // array.itemsize if first % array.itemsize == 0 else None


def storage_offset(t: Tensor) -> int:
    """``Tensor.storage_offset``: where the tensor starts in the memory it views, in elements
    (0 where that memory is not one flat array of its element type)."""
    data = t._data
    start = _offset(data, _owner(data))
    return start or 0


def resize_(self: Tensor, *sizes: Any, memory_format: Any = None) -> Tensor:
    """``Tensor.resize_``: the tensor's memory read as C-contiguous of the new size (the same
    memory when it holds enough elements from the tensor's offset, else new memory starting
    with the values that fit); refused for a tensor that requires grad."""
    if self.requires_grad:
        raise RuntimeError(RESIZE_REQUIRES_GRAD)
    shape = _creation._size(sizes, "resize_")
    if any(n < 0 for n in shape):
        raise RuntimeError(f"Trying to create tensor with negative dimension {min(shape)}: "
                           f"{list(shape)}")
    data = self._data
    if tuple(data.shape) != shape:
        count = math.prod(shape)
        owner = _owner(data)
        start = _offset(data, owner)
        if start is not None and start + count <= owner.size:
            self._data = owner.reshape(-1)[start:start + count].reshape(shape)
        else:
            xp = _backend.backend_of(self._device).xp
            new = xp.zeros(shape, dtype=data.dtype)
            flat = (owner.reshape(-1)[start:] if start is not None else data.reshape(-1))
            keep = min(count, flat.size)
            new.reshape(-1)[:keep] = flat[:keep]
            self._data = new
    self._bump_version()
    return self


def resize_as_(self: Tensor, the_template: Tensor, memory_format: Any = None) -> Tensor:
    """``Tensor.resize_as_``: ``self.resize_(the_template.size())``."""
    return resize_(self, tuple(the_template.shape))


def set_(self: Tensor, source: Tensor | None = None) -> Tensor:
    """``Tensor.set_``: share ``source``'s memory, size and strides (no argument: empty).
    An in-place op: a leaf that requires grad refuses it while grad mode is on."""
    from refimpl.autograd import grad_mode

    if source is not None and not isinstance(source, Tensor):
        raise TypeError(f"set_(): argument 'source' (position 1) must be Tensor, not "
                        f"{type(source).__name__}")
    recording = grad_mode.is_grad_enabled()
    if recording and self._grad_node is None and self._requires_grad:
        raise RuntimeError(LEAF_INPLACE)
    if recording and (self._grad_node is not None or
                      (source is not None and source.requires_grad)):
        # PyTorch records set_ as a node named NotImplemented, whose backward raises.
        raise NotImplementedError("refimpl does not record set_ on a tensor that requires "
                                  "grad; call it under torch.no_grad()")
    if source is None:
        xp = _backend.backend_of(self._device).xp
        self._data = xp.empty((0,), dtype=self._data.dtype)
    else:
        if source.dtype != self.dtype:
            raise RuntimeError(f"Could not set tensor of type {source.dtype.cpp_name} to a "
                               f"tensor of type {self.dtype.cpp_name}")
        self._data = source._data
        self._device = source._device
    # A new shape needs a new gradient accumulator: the engine checks gradients against the
    # shape the accumulator was made for.
    self._grad_acc = None
    self._bump_version()
    return self


# ------------------------------------------------------------------ storages

TYPED_STORAGE_DEPRECATED = (
    "TypedStorage is deprecated. It will be removed in the future and UntypedStorage will be "
    "the only storage class. This should only matter to you if you are using storages "
    "directly.  To access UntypedStorage directly, use tensor.untyped_storage() instead of "
    "tensor.storage()")


class UntypedStorage:
    """``Tensor.untyped_storage()``: the memory a tensor views, as bytes. Tensors that view
    the same memory get the same object back, as in PyTorch."""

    _live: dict[int, weakref.ref] = {}

    def __new__(cls, owner: Any, device: Any) -> UntypedStorage:
        known = cls._live.get(id(owner))
        storage = known() if known is not None else None
        if storage is not None and storage._owner is owner:
            return storage
        storage = object.__new__(cls)
        storage._owner, storage._device = owner, device
        key = id(owner)

        def forget(ref: weakref.ref, key: int = key) -> None:
            if cls._live.get(key) is ref:
                del cls._live[key]

        cls._live[key] = weakref.ref(storage, forget)
        return storage

    @property
    def device(self) -> Any:
        return self._device

    def nbytes(self) -> int:
        return int(self._owner.nbytes)

    def size(self) -> int:
        return self.nbytes()

    def __len__(self) -> int:
        return self.nbytes()

    def element_size(self) -> int:
        return 1

    def data_ptr(self) -> int:
        return 0 if self._device.type == "meta" else _backend.array_ptr(self._owner)

    def tolist(self) -> list[int]:
        host = _backend.backend_of(self._device).to_host(self._owner)
        return numpy.ascontiguousarray(host).view(numpy.uint8).reshape(-1).tolist()


class TypedStorage:
    """``Tensor.storage()`` (deprecated in PyTorch): the memory as elements of the tensor's
    dtype."""

    def __init__(self, untyped: UntypedStorage, dtype: Any) -> None:
        self._untyped, self.dtype = untyped, dtype

    def size(self) -> int:
        return self._untyped.nbytes() // self.dtype.itemsize

    def __len__(self) -> int:
        return self.size()

    def nbytes(self) -> int:
        return self._untyped.nbytes()

    def data_ptr(self) -> int:
        return self._untyped.data_ptr()

    def untyped(self) -> UntypedStorage:
        return self._untyped

    def tolist(self) -> list[Any]:
        host = _backend.backend_of(self._untyped.device).to_host(self._untyped._owner)
        return numpy.ascontiguousarray(host).reshape(-1).tolist()


def untyped_storage(self: Tensor) -> UntypedStorage:
    """``Tensor.untyped_storage``: the memory this tensor views (its owning array)."""
    return UntypedStorage(_owner(self._data), self._device)


def storage(self: Tensor) -> TypedStorage:
    """``Tensor.storage``: the typed view of :func:`untyped_storage`, with PyTorch's
    once-per-process deprecation warning."""
    from refimpl._warn import warn_once

    warn_once(TYPED_STORAGE_DEPRECATED, UserWarning, stacklevel=2)
    return TypedStorage(untyped_storage(self), self.dtype)


# ------------------------------------------------------------------ legacy constructors

_LEGACY_SIGNATURES = """ * (*, torch.device device = None)
      didn't match because some of the keywords were incorrect: {keywords}
 * (torch.Storage storage)
 * (Tensor other)
 * (tuple of ints size, *, torch.device device = None)
 * (object data, *, torch.device device = None)
"""

_OPTIONS_NAME = {_dtype.int64: "long int"}


def _kind_name(value: Any) -> str:
    if isinstance(value, _dtype.dtype):
        return "torch.dtype"
    if isinstance(value, _backend.device):
        return "torch.device"
    return type(value).__name__


def _options(d: _dtype.dtype) -> str:
    return (f"TensorOptions(dtype={_OPTIONS_NAME.get(d, d.cpp_name)}, device=cpu, "
            "layout=Strided, requires_grad=false (default), pinned_memory=false (default), "
            "memory_format=(nullopt))")


def _legacy(d: _dtype.dtype, device: Any, args: tuple[Any, ...], kwargs: dict[str, Any]
            ) -> Tensor:
    """PyTorch's legacy constructor (``legacy_tensor_ctor``/``legacy_tensor_new``): nothing
    (an empty tensor), a tensor of the same dtype (an alias of it), sizes (values unset:
    zeros here) or data (a copy cast to ``d``); only ``device=`` as a keyword."""
    extra = sorted(k for k in kwargs if k != "device")
    if extra:
        # PyTorch lists the keywords no signature has before those one has.
        ordered = [k for k in kwargs if k != "device"] + [k for k in kwargs if k == "device"]
        got = ", ".join([_kind_name(a) for a in args] +
                        [f"{k}={_kind_name(kwargs[k])}" for k in ordered])
        raise TypeError(f"new() received an invalid combination of arguments - got ({got}), "
                        "but expected one of:\n" +
                        _LEGACY_SIGNATURES.format(keywords=", ".join(extra)))
    if "device" in kwargs and kwargs["device"] is not None:
        device = kwargs["device"]
    if not args:
        return _creation.empty(0, dtype=d, device=device)
    if len(args) == 1 and isinstance(args[0], Tensor):
        other = args[0]
        if other.dtype != d:
            raise TypeError(f"expected {_options(d)} (got {_options(other.dtype)})")
        from refimpl.ops import apply
        from refimpl.ops import derivatives as D

        return apply(D.ALIAS, (other,))
    if all(_creation._size_item(a) is not None for a in args) or (
            len(args) == 1 and type(args[0]).__name__ == "Size"):
        return _creation.empty(*args, dtype=d, device=device)
    if len(args) == 1:
        data = args[0]
        if isinstance(data, str):
            raise TypeError(f"new(): invalid data type '{type(data).__name__}'")
        if not hasattr(data, "__len__"):
            raise TypeError(f"new(): data must be a sequence (got {type(data).__name__})")
        return _creation.tensor(data, dtype=d, device=device)
    first, rest = _LEGACY_SIGNATURES.split("\n", 2)[0], _LEGACY_SIGNATURES.split("\n", 2)[2]
    marks = ", ".join(f"!{_kind_name(a)}!" for a in args)
    raise TypeError("new() received an invalid combination of arguments - got "
                    f"({', '.join(_kind_name(a) for a in args)}), but expected one of:\n"
                    f"{first}\n      didn't match because some of the arguments have invalid "
                    f"types: ({marks})\n{rest}")


def new(self: Tensor, *args: Any, **kwargs: Any) -> Tensor:
    """``Tensor.new``: the legacy constructor with this tensor's dtype and device."""
    return _legacy(self.dtype, self._device, args, kwargs)


class _LegacyType(type):
    """``torch.FloatTensor`` and its kin: calling one is the legacy constructor of its dtype
    on the CPU, and ``isinstance`` tells whether a tensor has that dtype on the CPU."""

    dtype: _dtype.dtype

    def __call__(cls, *args: Any, **kwargs: Any) -> Tensor:
        return _legacy(cls.dtype, None, args, kwargs)

    def __instancecheck__(cls, obj: Any) -> bool:
        return isinstance(obj, Tensor) and obj.dtype is cls.dtype and obj.device.type == "cpu"

    def __repr__(cls) -> str:
        return f"<class 'torch.{cls.__name__}'>"


LEGACY_TYPES = {f"{d.legacy_name}Tensor": _LegacyType(f"{d.legacy_name}Tensor", (),
                                                       {"dtype": d})
                for d in _dtype.ALL if d is not _dtype.float16}
LEGACY_TYPES["HalfTensor"] = _LegacyType("HalfTensor", (), {"dtype": _dtype.float16})


def tensor_new(cls: type, *args: Any, **kwargs: Any) -> Tensor:
    """``torch.Tensor(...)``: the legacy constructor of the default dtype. Subclasses
    (``nn.Parameter``) build their instances themselves."""
    if cls is not Tensor:
        return object.__new__(cls)
    return _legacy(_dtype.get_default_dtype(), None, args, kwargs)


# ------------------------------------------------------------------ save and load

class _Pickler(pickle.Pickler):
    """Saves each tensor as its dtype, flags and a window on the memory it views, each
    memory once: tensors that shared memory when saved share it when loaded."""

    def __init__(self, file: Any) -> None:
        super().__init__(file, protocol=pickle.HIGHEST_PROTOCOL)
        self.memories: dict[int, tuple[int, Any]] = {}

    def persistent_id(self, obj: Any) -> Any:
        if not isinstance(obj, Tensor):
            return None
        if obj._device.type == "meta":
            raise NotImplementedError("refimpl cannot save a meta tensor: it has no values")
        data = obj._data
        owner = _owner(data)
        start = _offset(data, owner)
        if start is None:
            owner, start = data, 0
        key = id(owner)
        if key not in self.memories:
            host = _backend.backend_of(obj._device).to_host(owner)
            # Bytes and a dtype name, not the NumPy array: loading then names no NumPy code.
            self.memories[key] = (len(self.memories), host.tobytes(order="C"))
        index, host = self.memories[key]
        strides = tuple(s // data.itemsize for s in data.strides) if data.size else None
        return ("tensor", type(obj).__name__ == "Parameter", index, host, start,
                tuple(data.shape), strides, str(obj._device), obj.dtype.name,
                obj._requires_grad or obj._view_requires_grad or obj._grad_node is not None)


# What a file loaded with weights_only=True (the default, as in PyTorch) may name besides
# tensors: containers and numbers, no code.
_WEIGHTS_ONLY = {("collections", "OrderedDict"), ("builtins", "set"), ("builtins", "frozenset"),
                 ("builtins", "complex"), ("builtins", "slice")}


_DTYPES = {d.name: d for d in _dtype.ALL}


class _Unpickler(pickle.Unpickler):
    def __init__(self, file: Any, weights_only: bool) -> None:
        super().__init__(file)
        self.memories: dict[int, Any] = {}
        self.weights_only = weights_only

    def find_class(self, module: str, name: str) -> Any:
        if self.weights_only and (module, name) not in _WEIGHTS_ONLY:
            raise pickle.UnpicklingError(
                f"Weights only load failed: the file names {module}.{name}, which "
                "weights_only=True does not allow; pass weights_only=False only for a file "
                "you trust")
        return super().find_class(module, name)

    def persistent_load(self, pid: Any) -> Tensor:
        kind, parameter, index, host, start, shape, strides, device, dtype_name, grad = pid
        if kind != "tensor":
            raise pickle.UnpicklingError(f"unknown persistent id {kind!r}")
        dev = _backend.resolve_device(device)
        if dtype_name not in _DTYPES:
            raise pickle.UnpicklingError(f"unknown dtype {dtype_name!r}")
        memory = self.memories.get(index)
        if memory is None:
            array = numpy.frombuffer(host, dtype=_backend.numpy_dtype(_DTYPES[dtype_name]))
            memory = self.memories[index] = _backend.backend_of(dev).from_host(array.copy())
        flat = memory.reshape(-1)
        if strides is None:
            data = flat[start:start].reshape(shape)
        else:
            view = flat[start:]
            data = _backend.backend_of(dev).xp.lib.stride_tricks.as_strided(
                view, shape, tuple(s * flat.itemsize for s in strides))
        t = _wrap_loaded(data, dev, parameter)
        if grad:
            t._requires_grad = True
        return t


def _wrap_loaded(data: Any, dev: Any, parameter: bool) -> Tensor:
    from refimpl._tensor import wrap

    if parameter:
        from refimpl.nn.parameter import Parameter

        return wrap(data, dev, Parameter)
    return wrap(data, dev)


def save(obj: Any, f: Any, pickle_module: Any = None, pickle_protocol: int = 2) -> None:
    """``torch.save``: ``obj`` pickled into the file-like object or path ``f``. Tensors keep
    their values, dtype, device and ``requires_grad`` (a non-leaf is loaded as a leaf; no
    ``.grad``, no graph); tensors that shared memory share it again when loaded."""
    buffer = io.BytesIO()
    _Pickler(buffer).dump(obj)
    if hasattr(f, "write"):
        f.write(buffer.getvalue())
        if hasattr(f, "flush"):
            f.flush()
    else:
        with open(f, "wb") as out:
            out.write(buffer.getvalue())


def load(f: Any, map_location: Any = None, pickle_module: Any = None, *,
         weights_only: bool = True, **kwargs: Any) -> Any:
    """``torch.load``: what :func:`save` wrote to ``f`` (a file-like object or a path)."""
    if hasattr(f, "read"):
        return _Unpickler(f, weights_only).load()
    with open(f, "rb") as source:
        return _Unpickler(source, weights_only).load()


def _bind() -> None:
    for name in ("resize_", "resize_as_", "set_", "new", "storage_offset", "untyped_storage",
                 "storage"):
        setattr(Tensor, name, globals()[name])
    Tensor.__new__ = staticmethod(tensor_new)


_bind()
