"""PyTorch-shaped functions over the op table, and the ``Tensor`` methods that call them.

Each function picks the row for its overload (``1 - x`` is ``rsub.Scalar``, ``x - 1`` is
``sub.Tensor`` with the number wrapped as a tensor, as in PyTorch), promotes dtypes with
PyTorch's rules and calls :func:`refimpl.ops.table.apply`.
"""

from __future__ import annotations

import builtins
import math
import numbers
from collections import namedtuple
from collections.abc import Sequence
from typing import Any

import numpy

from refimpl import _backend, _creation, _dtype
from refimpl._tensor import Tensor, wrap
from refimpl.autograd import grad_mode
from refimpl.autograd.graph import FREED, SAVED_TENSORS_HOOKS, SECOND_BACKWARD, Node, init_node
from refimpl.ops import derivatives as D
from refimpl.ops.table import (
    INFERENCE_SAVED,
    SavedTensor,
    WrappedNumber,
    apply,
    edge,
    pack_saved,
    same_device,
    unpack_saved,
)

__all__ = [
    "add", "sub", "rsub", "mul", "div", "true_divide", "pow", "neg", "reciprocal", "matmul",
    "mm", "dot", "mv", "addmm", "sum", "mean", "max", "min", "maximum", "minimum", "exp", "log",
    "sqrt", "sin", "cos", "tanh", "sigmoid", "relu", "abs", "clamp", "clip", "where", "softmax",
    "log_softmax", "reshape", "view", "t", "transpose", "permute", "unsqueeze", "squeeze",
    "expand", "flatten", "select", "unbind", "cat", "stack", "clone", "detach", "to", "sum_to",
    "sign",
    "eq", "ne", "lt", "le", "gt", "ge", "is_tensor", "zeros", "zeros_like", "ones_like",
    "arange", "apply", "promote", "conj", "real", "cast_grad", "argmax", "all", "any",
    "contiguous",
    "parse_to", "clamp_bounds", "allclose",
]

_SCALAR_TYPES = (bool, int, float, complex)
is_tensor = _creation.is_tensor
zeros = _creation.zeros
zeros_like = _creation.zeros_like
ones_like = _creation.ones_like
arange = _creation.arange



class _ReturnType:
    """Prints like ``torch.return_types.max(values=..., indices=...)``."""

    _op: str
    _fields: tuple[str, ...]

    def __repr__(self) -> str:
        fields = ",\n".join(f"{k}={v!r}" for k, v in zip(self._fields, self, strict=True))
        return f"torch.return_types.{self._op}(\n{fields})"


class return_types_max(_ReturnType, namedtuple("max", ["values", "indices"])):  # noqa: N801
    """``(values, indices)`` of ``max(dim)``."""

    __slots__ = ()
    _op = "max"


class return_types_min(_ReturnType, namedtuple("min", ["values", "indices"])):  # noqa: N801
    """``(values, indices)`` of ``min(dim)``."""

    __slots__ = ()
    _op = "min"


class return_types_median(_ReturnType, namedtuple("median", ["values", "indices"])):  # noqa: N801
    """``(values, indices)`` of ``median(dim)``."""

    __slots__ = ()
    _op = "median"


class return_types_nanmedian(_ReturnType,  # noqa: N801
                             namedtuple("nanmedian", ["values", "indices"])):
    """``(values, indices)`` of ``nanmedian(dim)``."""

    __slots__ = ()
    _op = "nanmedian"


def promote(operands: Sequence[Any], to_float: bool = False, broadcast: bool = False
            ) -> tuple[list[Tensor], list[Any]]:
    """Tensors (Python numbers wrapped) and their arrays cast to PyTorch's result dtype.

    ``to_float`` turns an integral or bool result into the default float (true division,
    ``exp``...). ``broadcast`` checks that two tensors broadcast (elementwise ops). Wrapped
    numbers live on the first tensor's device.
    """
    if len(operands) == 2 and isinstance(operands[0], Tensor):
        # Fast paths for the two common binary cases (they dominate small-op graphs).
        first, second = operands
        arr = first._data
        if type(second) in (int, float) and arr.dtype.kind == "f":
            # ``tensor (op) number``: the tensor's float type wins.
            other = wrap(_backend.scalar_array(_backend.backend_of(first._device).xp, second,
                                              arr.dtype), first._device, WrappedNumber)
            return [first, other], [arr, other._data]
        if isinstance(second, Tensor):
            if broadcast:
                _check_broadcast(arr.shape, second._data.shape)
            if second._data.dtype == arr.dtype and (not to_float or arr.dtype.kind in "fc"):
                return [first, second], [arr, second._data]
    first = next(o for o in operands if isinstance(o, Tensor))
    dt = _dtype.result_type_of(tuple(operands))
    if to_float and dt.kind in "bi":
        dt = _dtype.float32
    np_dt = _backend.numpy_dtype(dt)
    xp = _backend.backend_of(first._device).xp
    tensors, arrays = [], []
    for o in operands:
        if isinstance(o, Tensor):
            arr = o._data
            if arr.dtype != np_dt:
                arr = arr.astype(np_dt)
        elif isinstance(o, _SCALAR_TYPES):
            arr = _backend.scalar_array(xp, o, np_dt)
            o = wrap(arr, first._device, WrappedNumber)
        else:
            raise TypeError(f"expected a Tensor or a number, got {type(o).__name__}")
        tensors.append(o)
        arrays.append(arr)
    return tensors, arrays


def _check_broadcast(a: tuple[int, ...], b: tuple[int, ...]) -> None:
    """PyTorch's error for shapes that do not broadcast together."""
    if a == b:
        return
    ndim = builtins.max(len(a), len(b))
    for i in range(ndim - 1, -1, -1):
        offset = ndim - 1 - i
        sa = a[len(a) - 1 - offset] if offset < len(a) else 1
        sb = b[len(b) - 1 - offset] if offset < len(b) else 1
        if sa != sb and sa != 1 and sb != 1:
            raise RuntimeError(f"The size of tensor a ({sa}) must match the size of tensor b "
                               f"({sb}) at non-singleton dimension {i}")


def _binary(row: Any, a: Any, b: Any, params: dict[str, Any] | None = None,
            to_float: bool = False, elementwise: bool = True) -> Tensor:
    tensors, arrays = promote((a, b), to_float, broadcast=elementwise)
    return apply(row, tensors, params, arrays)


def _unary_float(row: Any, x: Tensor, params: dict[str, Any] | None = None) -> Tensor:
    if x._data.dtype.kind in "biu":
        return apply(row, (x,), params, [x._data.astype(_backend.numpy_dtype(_dtype.float32))])
    return apply(row, (x,), params)


# ------------------------------------------------------------------ arithmetic

def add(input: Any, other: Any, *, alpha: Any = 1) -> Tensor:
    if not isinstance(input, Tensor):
        input, other = other, input
    return _binary(D.ADD, input, other, {"alpha": alpha} if alpha != 1 else None)


def sub(input: Any, other: Any, *, alpha: Any = 1) -> Tensor:
    if not isinstance(input, Tensor):
        return rsub(other, input, alpha=alpha)
    return _binary(D.SUB, input, other, {"alpha": alpha} if alpha != 1 else None)


def rsub(input: Tensor, other: Any, *, alpha: Any = 1) -> Tensor:
    """``other - alpha * input``; a number ``other`` gives PyTorch's ``RsubBackward1``."""
    if isinstance(other, Tensor):
        return sub(other, input, alpha=alpha)
    tensors, arrays = promote((input, other))
    value = arrays[1].item() if hasattr(arrays[1], "item") else other
    return apply(D.RSUB, tensors[:1], {"other": value, "alpha": alpha}, arrays[:1])


def mul(input: Any, other: Any) -> Tensor:
    if not isinstance(input, Tensor):
        input, other = other, input
    return _binary(D.MUL, input, other)


def div(input: Any, other: Any) -> Tensor:
    if not isinstance(input, Tensor):
        # number / tensor is number * reciprocal(tensor) in PyTorch.
        return mul(reciprocal(other), input)
    return _binary(D.DIV, input, other, to_float=True)


true_divide = div


def reciprocal(input: Tensor) -> Tensor:
    return _unary_float(D.RECIPROCAL, input)


def neg(input: Tensor) -> Tensor:
    if input._data.dtype.kind == "b":
        raise RuntimeError("Negation, the `-` operator, on a bool tensor is not supported. If "
                           "you are trying to invert a mask, use the `~` or `logical_not()` "
                           "operator instead.")
    return apply(D.NEG, (input,))


def pow(input: Any, exponent: Any) -> Tensor:
    if not isinstance(input, Tensor):
        tensors, arrays = promote((input, exponent))
        return apply(D.POW_SCALAR, tensors[1:], {"self": input}, arrays[1:])
    if isinstance(exponent, Tensor):
        return _binary(D.POW_TENSOR_TENSOR, input, exponent)
    tensors, arrays = promote((input, exponent))
    return apply(D.POW_TENSOR_SCALAR, tensors[:1], {"exponent": exponent}, arrays[:1])


# ------------------------------------------------------------------ matrix products

def mm(input: Tensor, mat2: Tensor) -> Tensor:
    if input.dim() != 2 or mat2.dim() != 2:
        which = "self" if input.dim() != 2 else "mat2"
        raise RuntimeError(f"{which} must be a matrix")
    if input.shape[1] != mat2.shape[0]:
        raise RuntimeError(
            f"mat1 and mat2 shapes cannot be multiplied ({input.shape[0]}x{input.shape[1]} and "
            f"{mat2.shape[0]}x{mat2.shape[1]})")
    # Matrix products never promote: mixed dtypes are refused, each kernel in its own words.
    if input.dtype is not mat2.dtype:
        raise RuntimeError("expected m1 and m2 to have the same dtype, but got: "
                           f"{input.dtype.cpp_name} != {mat2.dtype.cpp_name}")
    return _binary(D.MM, input, mat2, elementwise=False)


def dot(input: Tensor, tensor: Tensor) -> Tensor:
    if input.dim() != 1 or tensor.dim() != 1:
        raise RuntimeError(f"1D tensors expected, but got {input.dim()}D and {tensor.dim()}D "
                           "tensors")
    if input.shape[0] != tensor.shape[0]:
        n, m = input.shape[0], tensor.shape[0]
        raise RuntimeError(f"inconsistent tensor size, expected tensor [{n}] and src [{m}] to "
                           f"have the same number of elements, but got {n} and {m} elements "
                           "respectively")
    if input.dtype is not tensor.dtype:
        raise RuntimeError("dot : expected both vectors to have same dtype, but found "
                           f"{input.dtype.legacy_name} and {tensor.dtype.legacy_name}")
    return _binary(D.DOT, input, tensor, elementwise=False)


def mv(input: Tensor, vec: Tensor) -> Tensor:
    if input.shape[1] != vec.shape[0]:
        raise RuntimeError(f"size mismatch, got input ({input.shape[0]}), mat ({input.shape[0]}"
                           f"x{input.shape[1]}), vec ({vec.shape[0]})")
    if input.dtype is not vec.dtype:
        # PyTorch runs mv as addmv into a result of vec's dtype and names the three tensors.
        v, m = vec.dtype.legacy_name, input.dtype.legacy_name
        raise RuntimeError(f"addmv input tensors must have the same dtype, but got {v}, {m}, "
                           f"and {v}")
    return _binary(D.MV, input, vec, elementwise=False)


def matmul(input: Tensor, other: Tensor) -> Tensor:
    """Matrix product dispatched as PyTorch does: dot, mv, mm, or mm with reshapes."""
    a, b = input.dim(), other.dim()
    if a == 0 or b == 0:
        raise RuntimeError(f"both arguments to matmul need to be at least 1D, but they are {a}D "
                           f"and {b}D")
    if a == 1 and b == 1:
        return dot(input, other)
    if a == 2 and b == 1:
        return mv(input, other)
    if a == 1 and b == 2:
        out = apply(D.SQUEEZE_INPLACE_DIM, (mm(input.unsqueeze(0), other),), {"dim": 0})
        if not out._inference:
            # PyTorch's squeeze_(0) here is in place: the result starts at version 1.
            out._bump_version()
        return out
    if a == 2 and b == 2:
        return mm(input, other)
    if a >= 3 and b <= 2:
        lead = input.shape[:-1]
        folded = input.reshape(-1, input.shape[-1])
        out = mm(folded, other) if b == 2 else mv(folded, other)
        shape = tuple(lead) + ((other.shape[-1],) if b == 2 else ())
        return apply(D.UNSAFE_VIEW, (out,), {"size": shape})
    raise RuntimeError(
        f"refimpl's matmul covers 1-D and 2-D operands and an N-D tensor times a matrix; got "
        f"{a}D @ {b}D. Reshape the operands to 2-D (or loop over the batch) instead.")


def addmm(input: Tensor, mat1: Tensor, mat2: Tensor, *, beta: Any = 1,
          alpha: Any = 1) -> Tensor:
    if mat1.shape[1] != mat2.shape[0]:
        raise RuntimeError(
            f"mat1 and mat2 shapes cannot be multiplied ({mat1.shape[0]}x{mat1.shape[1]} and "
            f"{mat2.shape[0]}x{mat2.shape[1]})")
    tensors, arrays = promote((input, mat1, mat2))
    params = {"beta": beta, "alpha": alpha} if beta != 1 or alpha != 1 else None
    return apply(D.ADDMM, tensors, params, arrays)


# ------------------------------------------------------------------ reductions

def _dims(dim: Any, ndim: int) -> tuple[int, ...]:
    dims = (dim,) if isinstance(dim, int) else tuple(dim)
    return tuple(_wrap_dim(d, ndim) for d in dims)


def _wrap_dim(dim: int, ndim: int) -> int:
    n = ndim if ndim > 0 else 1
    if not -n <= dim < n:
        raise IndexError(f"Dimension out of range (expected to be in range of [{-n}, {n - 1}], "
                         f"but got {dim})")
    return dim % n


def _sum_arrays(x: Tensor, dtype: _dtype.dtype | None) -> list[Any] | None:
    if dtype is not None:
        return [x._data.astype(_backend.numpy_dtype(dtype))]
    if x._data.dtype.kind in "biu":
        return [x._data.astype(_backend.numpy_dtype(_dtype.int64))]
    return None


def sum(input: Tensor, dim: Any = None, keepdim: bool = False, *,
        dtype: _dtype.dtype | None = None) -> Tensor:
    arrays = _sum_arrays(input, dtype)
    if dim is None:
        return apply(D.SUM, (input,), None, arrays)
    dims = _dims(dim, input.dim()) if input.dim() else ()
    return apply(D.SUM_DIM, (input,), {"dim": dims, "keepdim": keepdim}, arrays)


def mean(input: Tensor, dim: Any = None, keepdim: bool = False, *,
         dtype: _dtype.dtype | None = None) -> Tensor:
    kind = (dtype or input.dtype).kind
    if kind not in "fc":
        raise RuntimeError("mean(): could not infer output dtype. Input dtype must be either a "
                           "floating point or complex dtype. Got: "
                           f"{(dtype or input.dtype).legacy_name}")
    arrays = _sum_arrays(input, dtype)
    if dim is None:
        return apply(D.MEAN, (input,), None, arrays)
    dims = _dims(dim, input.dim()) if input.dim() else ()
    return apply(D.MEAN_DIM, (input,), {"dim": dims, "keepdim": keepdim}, arrays)


def _reduce_select(full: Any, by_dim: Any, binary: Any, named: Any, input: Tensor, dim: Any,
                   keepdim: bool) -> Any:
    if isinstance(dim, Tensor):
        return binary(input, dim)
    if dim is None:
        if input._data.size == 0:
            raise RuntimeError(f"{full.name}(): Expected reduction dim to be specified for "
                               "input.numel() == 0. Specify the reduction dim with the 'dim' "
                               "argument.")
        return apply(full, (input,))
    d = _wrap_dim(dim, input.dim())
    values, indices = apply(by_dim, (input,), {"dim": d, "keepdim": keepdim})
    return named(values, indices)


def max(input: Tensor, dim: Any = None, keepdim: bool = False) -> Any:
    """``max()`` of all elements, ``max(dim)`` as (values, indices), or ``max(other)``."""
    return _reduce_select(D.MAX, D.MAX_DIM, maximum, return_types_max, input, dim, keepdim)


def min(input: Tensor, dim: Any = None, keepdim: bool = False) -> Any:
    """``min()`` of all elements, ``min(dim)`` as (values, indices), or ``min(other)``."""
    return _reduce_select(D.MIN, D.MIN_DIM, minimum, return_types_min, input, dim, keepdim)


def median(input: Tensor, dim: int | None = None, keepdim: bool = False) -> Any:
    """The lower median of all elements (NaN if there is one), or ``median(dim)`` as
    (values, indices); the gradient goes to the median element(s), as for ``max()``."""
    if dim is None:
        return apply(D.MEDIAN, (input,))
    d = _wrap_dim(dim, input.dim())
    values, indices = apply(D.MEDIAN_DIM, (input,), {"dim": d, "keepdim": keepdim})
    return return_types_median(values, indices)


def nanmedian(input: Tensor, dim: int | None = None, keepdim: bool = False) -> Any:
    """``median`` ignoring NaN (NaN only where every element is); the gradient goes to the
    median element(s)."""
    if dim is None:
        return apply(D.NANMEDIAN, (input,))
    d = _wrap_dim(dim, input.dim())
    values, indices = apply(D.NANMEDIAN_DIM, (input,), {"dim": d, "keepdim": keepdim})
    return return_types_nanmedian(values, indices)


def trace(input: Tensor) -> Tensor:
    """The sum of a matrix's diagonal (``TraceBackward0``; int64 for integer matrices)."""
    if input.dim() != 2:
        raise RuntimeError(f"trace: expected a matrix, but got tensor with dim {input.dim()}")
    return apply(D.TRACE, (input,))


def eye_mask(shape: tuple[int, ...], device: Any) -> Tensor:
    """A bool matrix of ``shape``, True on the diagonal."""
    return _creation.eye(shape[0], shape[1], dtype=_dtype.bool, device=device)


def atan2(input: Tensor, other: Tensor) -> Tensor:
    """The angle of the point ``(other, input)`` (``Atan2Backward0``)."""
    return _binary(D.ATAN2, input, other, to_float=True)


def masked_fill(input: Tensor, mask: Tensor, value: Any) -> Tensor:
    """``input`` with ``value`` (a number or a 0-dim tensor) where ``mask`` is True; no
    gradient reaches ``input`` there."""
    check_masked_fill(mask, value)
    if isinstance(value, Tensor):
        _check_broadcast(input._data.shape, mask._data.shape)
        value_array = value._data.astype(input._data.dtype, copy=False)
        return apply(D.MASKED_FILL, (input, value), {"mask": mask}, [input._data, value_array])
    return apply(D.MASKED_FILL_SCALAR, (input,), {"mask": mask, "value": value})


def check_masked_fill(mask: Tensor, value: Any) -> None:
    if mask.dtype is not _dtype.bool:
        # The C++ type's name as the compiler spells it (``long int``, ``signed char``).
        name = {"long": "long int", "short": "short int"}.get(mask.dtype.cpp_name,
                                                              mask.dtype.cpp_name)
        raise RuntimeError("masked_fill_ only supports boolean masks, but got mask with dtype "
                           f"{name}")
    if isinstance(value, Tensor) and value.dim() != 0:
        raise RuntimeError("masked_fill_ only supports a 0-dimensional value tensor, but got "
                           f"tensor with {value.dim()} dimension(s).")


class VarMeanBackward0(Node):
    """The one node of the variance and the mean ``var_mean`` returns (outputs 0 and 1): the
    variance's gradient is ``2 (x - mean) / (N - correction)``, the mean's ``1 / N``. It saves
    its input as PyTorch's does (``_saved_self``): checked against in-place writes, freed by
    backward, seen by saved-tensor hooks."""

    __slots__ = ("_dims", "_correction", "_keepdim", "_outputs", "_shape_in")
    _multi_output = True

    def _spread(self, grad: Tensor) -> Tensor:
        return D.sum_backward(grad, self._shape_in, self._dims, self._keepdim)

    def _deviation_grad(self, grad: Tensor, centered: Tensor, spread: Tensor) -> Tensor:
        return self._spread(grad) * centered * 2 / spread

    @property
    def _saved_self(self) -> Tensor:
        return self._unpacked()

    @property
    def _raw_saved_self(self) -> SavedTensor:
        return SavedTensor(self, 0)

    def _unpacked(self) -> Tensor:
        if self._saved is FREED:
            raise RuntimeError(SECOND_BACKWARD)
        return unpack_saved(self, self._saved[0])

    def apply(self, grads: list[Tensor | None]) -> list[Tensor | None]:
        x = self._unpacked()
        count = D._reduced_count(x._data.shape, self._dims)
        total = None
        if grads[0] is not None:
            centered = x - mean(x, self._dims, keepdim=True)
            spread = builtins.max(0, count - self._correction)
            total = self._deviation_grad(grads[0], centered, spread)
        if grads[1] is not None:
            part = self._spread(grads[1]) / count
            total = part if total is None else total + part
        return [total]


class StdMeanBackward0(VarMeanBackward0):
    """``std_mean``: the standard deviation's gradient is ``(x - mean) / ((N - correction)
    std)``."""

    __slots__ = ("_std",)

    def _deviation_grad(self, grad: Tensor, centered: Tensor, spread: Tensor) -> Tensor:
        return self._spread(grad / self._std) * centered / spread


def _moments(node_cls: Any, op: str, input: Tensor, dim: Any, unbiased: bool | None,
             keepdim: bool, correction: int | None) -> tuple[Tensor, Tensor]:
    if input.dtype.kind not in "fc":
        raise RuntimeError(f"{op} only support floating point and complex dtypes")
    if correction is None:
        correction = 1 if unbiased is None or unbiased else 0
    dims = _all_dims(dim, input.dim())
    with grad_mode.no_grad():
        centre = mean(input, dims, keepdim=True)
        centered = input - centre
        count = D._reduced_count(input._data.shape, dims)
        spread = sum(centered * centered, dims, keepdim) / builtins.max(0, count - correction)
        first = spread.sqrt() if node_cls is StdMeanBackward0 else spread
        second = centre if keepdim else centre.reshape(first.shape)
    if grad_mode.is_grad_enabled() and input._requires_grad:
        node = node_cls()
        node._dims, node._correction, node._keepdim = dims, correction, keepdim
        node._shape_in = input._data.shape
        node._outputs = 2
        if node_cls is StdMeanBackward0:
            node._std = first.detach()
        init_node(node, (edge(input),), first._data)
        if input._inference:
            raise RuntimeError(INFERENCE_SAVED)
        node._saved = ((input, input._version, input._grad_node is not None),)
        for nr, out in enumerate((first, second)):
            out._grad_node, out._output_nr, out._requires_grad = node, nr, True
        if SAVED_TENSORS_HOOKS.stack:
            pack_saved(node, (first, second))
    return first, second


def var_mean(input: Tensor, dim: Any = None, unbiased: bool | None = None, keepdim: bool = False,
             *, correction: int | None = None) -> tuple[Tensor, Tensor]:
    """The variance (divided by N - correction, 1 by default) and the mean over ``dim``, the
    two outputs of one ``VarMeanBackward0``."""
    return _moments(VarMeanBackward0, "var_mean", input, dim, unbiased, keepdim, correction)


def std_mean(input: Tensor, dim: Any = None, unbiased: bool | None = None, keepdim: bool = False,
             *, correction: int | None = None) -> tuple[Tensor, Tensor]:
    """The standard deviation and the mean over ``dim`` (one ``StdMeanBackward0``)."""
    return _moments(StdMeanBackward0, "std_mean", input, dim, unbiased, keepdim, correction)


def maximum(input: Tensor, other: Tensor) -> Tensor:
    return _binary(D.MAXIMUM, input, other)


def minimum(input: Tensor, other: Tensor) -> Tensor:
    return _binary(D.MINIMUM, input, other)


def sum_to(grad: Tensor, shape: tuple[int, ...]) -> Tensor:
    """Sum a broadcast gradient back to ``shape`` (the one place broadcasting is undone)."""
    gshape = grad._data.shape
    if gshape == tuple(shape):
        return grad
    if not shape:  # PyTorch's sum_to reduces to a 0-d shape with a plain sum() (SumBackward0)
        return sum(grad)
    lead = len(gshape) - len(shape)
    dims = tuple(range(lead)) + tuple(
        i + lead for i, s in enumerate(shape) if s == 1 and gshape[i + lead] != 1)
    if dims:
        grad = sum(grad, dims, keepdim=True)
    if lead:
        grad = reshape(grad, tuple(shape))
    return grad


# ------------------------------------------------------------------ elementwise functions

def exp(input: Tensor) -> Tensor:
    return _unary_float(D.EXP, input)


def log(input: Tensor) -> Tensor:
    return _unary_float(D.LOG, input)


def sqrt(input: Tensor) -> Tensor:
    return _unary_float(D.SQRT, input)


def sin(input: Tensor) -> Tensor:
    return _unary_float(D.SIN, input)


def cos(input: Tensor) -> Tensor:
    return _unary_float(D.COS, input)


def tanh(input: Tensor) -> Tensor:
    return _unary_float(D.TANH, input)


def sigmoid(input: Tensor) -> Tensor:
    return _unary_float(D.SIGMOID, input)


def conj(input: Tensor) -> Tensor:
    """The complex conjugate (``ConjBackward0``); a real tensor is returned as is."""
    if input._data.dtype.kind != "c":
        return input
    return apply(D.CONJ, (input,))


def real(input: Tensor) -> Tensor:
    """The real part of a complex tensor (a copy here; a view in PyTorch)."""
    if input._data.dtype.kind != "c":
        return input
    return apply(D.REAL, (input,))


def cast_grad(grad: Tensor, dtype: _dtype.dtype) -> Tensor:
    """``grad`` as ``dtype``; a complex gradient for a real tensor keeps its real part."""
    if grad._data.dtype.kind == "c" and dtype.kind != "c":
        grad = real(grad)
    return to(grad, dtype)


def relu(input: Tensor) -> Tensor:
    return apply(D.RELU, (input,))


def abs(input: Tensor) -> Tensor:
    return apply(D.ABS, (input,))


def clamp(input: Tensor, min: Any = None, max: Any = None) -> Tensor:
    """Limit values to ``[min, max]``; tensor bounds give ``ClampBackward0``."""
    bounds = clamp_bounds(input, min, max)
    if bounds is not None:
        tensors, arrays = promote((input, *bounds))
        return apply(D.CLAMP_TENSOR, tensors, None, arrays)
    tensors, arrays = promote((input,) + tuple(v for v in (min, max) if v is not None))
    return apply(D.CLAMP, tensors[:1], {"min": min, "max": max}, arrays[:1])


def clamp_bounds(input: Tensor, min: Any, max: Any) -> tuple[Tensor, Tensor] | None:
    """Both bounds as tensors when either is one (``clamp.Tensor``), else None (numbers)."""
    if min is None and max is None:
        raise RuntimeError("torch.clamp: At least one of 'min' or 'max' must not be None")
    if not isinstance(min, Tensor) and not isinstance(max, Tensor):
        return None
    lo = min if isinstance(min, Tensor) else full_like_scalar(
        input, -math.inf if min is None else min)
    hi = max if isinstance(max, Tensor) else full_like_scalar(
        input, math.inf if max is None else max)
    return lo, hi


clip = clamp


def full_like_scalar(like: Tensor, value: Any) -> Tensor:
    """A 0-d constant on ``like``'s device and dtype."""
    xp = _backend.backend_of(like._device).xp
    return wrap(_backend.scalar_array(xp, value, like._data.dtype), like._device)


def where(condition: Tensor, input: Any, other: Any) -> Tensor:
    if condition._data.dtype.kind != "b":
        raise RuntimeError(f"where expected condition to be a boolean tensor, but got a tensor "
                           f"with dtype {condition.dtype.legacy_name}")
    tensors, arrays = promote((input, other) if isinstance(input, Tensor) else (other, input))
    if not isinstance(input, Tensor):
        tensors.reverse()
        arrays.reverse()
    same_device([condition, *tensors])
    return apply(D.WHERE, tensors, {"condition": condition}, arrays, dispatch=(condition,))


def softmax(input: Tensor, dim: int, dtype: _dtype.dtype | None = None) -> Tensor:
    x = input.to(dtype) if dtype is not None else input
    return _unary_float(D.SOFTMAX, x, {"dim": _wrap_dim(dim, x.dim())})


def log_softmax(input: Tensor, dim: int, dtype: _dtype.dtype | None = None) -> Tensor:
    x = input.to(dtype) if dtype is not None else input
    return _unary_float(D.LOG_SOFTMAX, x, {"dim": _wrap_dim(dim, x.dim())})


def _constant(x: Tensor, array: Any) -> Tensor:
    xp = _backend.backend_of(x._device).xp
    return wrap(xp.asarray(array), x._device)


def _compare(name: str) -> Any:
    def compare(input: Tensor, other: Any) -> Tensor:
        _, arrays = promote((input, other))
        if isinstance(other, Tensor):
            same_device([input, other])
        return _constant(input, getattr(arrays[0], name)(arrays[1]))

    compare.__name__ = name.strip("_")
    compare.__doc__ = f"Elementwise ``{name}`` as a bool tensor (never differentiable)."
    return compare


eq, ne, lt, le, gt, ge = (_compare(n) for n in
                          ("__eq__", "__ne__", "__lt__", "__le__", "__gt__", "__ge__"))


def _logical(name: str) -> Any:
    def logical(input: Tensor, other: Any) -> Tensor:
        _, arrays = promote((input, other))
        return _constant(input, getattr(arrays[0], name)(arrays[1]))

    logical.__name__ = name.strip("_")
    return logical


logical_and, logical_or, logical_xor = (_logical(n) for n in ("__and__", "__or__", "__xor__"))


def logical_not(input: Tensor) -> Tensor:
    xp = _backend.backend_of(input._device).xp
    return _constant(input, xp.logical_not(input._data))


def bitwise_not(input: Tensor) -> Tensor:
    return _constant(input, ~input._data)


def argmax(input: Tensor, dim: int | None = None, keepdim: bool = False) -> Tensor:
    """Index of the largest element (flattened when ``dim`` is None); never differentiable."""
    if dim is None:
        return _constant(input, input._data.argmax())
    d = _wrap_dim(dim, input.dim())
    return _constant(input, input._data.argmax(axis=d, keepdims=keepdim))


def argmin(input: Tensor, dim: int | None = None, keepdim: bool = False) -> Tensor:
    """Index of the smallest element (the first among ties, a NaN's where there is one)."""
    data = input._data  # NumPy's argmin takes the first NaN, as PyTorch's does
    if dim is None:
        return _constant(input, data.argmin())
    d = _wrap_dim(dim, input.dim())
    return _constant(input, data.argmin(axis=d, keepdims=keepdim))


def gather(input: Tensor, dim: int, index: Tensor, *, sparse_grad: bool = False) -> Tensor:
    """``out[i][j] = input[index[i][j]][j]`` along ``dim`` (``GatherBackward0``): ``index`` has
    ``input``'s number of dimensions and is no larger than it apart from ``dim``; the gradient
    is scattered (added) back into ``input``'s shape."""
    if sparse_grad:
        raise NotImplementedError("refimpl has no sparse tensors: gather(sparse_grad=True) "
                                  "is not implemented")
    d = _wrap_dim(dim, input.dim())
    if index.dtype not in (_dtype.int64, _dtype.int32):
        raise RuntimeError("gather(): Expected dtype int32/int64 for index")
    idx = index._data
    # PyTorch checks nothing more for an empty index: the result is empty, of its shape.
    if idx.size:
        if idx.ndim != (input.dim() or 1) and not (idx.ndim == 0 and input.dim() == 0):
            raise RuntimeError(
                "Index tensor must have the same number of dimensions as input tensor")
        shape = input._data.shape or (1,)
        for k in range(idx.ndim):
            if k != d and idx.shape[k] > shape[k]:
                raise RuntimeError(
                    f"Size does not match at dimension {k} expected index "
                    f"{list(idx.shape)} to be no larger than self {list(shape)} apart from "
                    f"dimension {d}")
        bad = (idx < 0) | (idx >= shape[d])
        if bad.any():
            raise RuntimeError(f"index {int(idx[bad].reshape(-1)[0])} is out of bounds for "
                               f"dimension {d} with size {shape[d]}")
    if index.dtype is not _dtype.int64:
        index = index.long()
    return apply(D.GATHER, (input,), {"dim": d, "index": index})


def isin(elements: Any, test_elements: Any, *, assume_unique: bool = False,
         invert: bool = False) -> Tensor:
    """Whether each element occurs in ``test_elements`` (a bool tensor, never differentiable);
    one of the two may be a number."""
    like = elements if isinstance(elements, Tensor) else test_elements
    xp = _backend.backend_of(like._device).xp
    data = elements._data if isinstance(elements, Tensor) else xp.asarray(elements)
    tests = test_elements._data if isinstance(test_elements, Tensor) else \
        xp.asarray(test_elements)
    return _constant(like, xp.isin(data, tests, invert=invert))


def _logical_reduction(name: str) -> Any:
    def reduce(input: Tensor, dim: int | None = None, keepdim: bool = False) -> Tensor:
        xp = _backend.backend_of(input._device).xp
        data = input._data
        if dim is None:
            out = getattr(xp, name)(data)
        else:
            out = getattr(xp, name)(data, axis=_wrap_dim(dim, input.dim()), keepdims=keepdim)
        return _constant(input, out)

    reduce.__name__ = name
    reduce.__doc__ = (f"Whether {'every' if name == 'all' else 'any'} element (of each slice "
                      "along ``dim``) is non-zero, as a bool tensor (never differentiable).")
    return reduce


all = _logical_reduction("all")  # noqa: A001 - PyTorch's name
any = _logical_reduction("any")  # noqa: A001 - PyTorch's name


def contiguous(input: Tensor) -> Tensor:
    """The tensor itself when its memory is already in row-major order, else a row-major
    clone (``CloneBackward0``)."""
    if input._data.flags.c_contiguous:
        return input
    return apply(D.CLONE_CONTIGUOUS, (input,))


def sgn(input: Tensor) -> Tensor:
    """``sign`` for real numbers, ``z / |z|`` (0 at 0) for complex ones (``SgnBackward0``)."""
    return apply(D.SGN, (input,))


def floor(input: Tensor) -> Tensor:
    return apply(D.FLOOR, (input,))


def ceil(input: Tensor) -> Tensor:
    return apply(D.CEIL, (input,))


def round(input: Tensor) -> Tensor:  # noqa: A001 - PyTorch's name
    return apply(D.ROUND, (input,))


def trunc(input: Tensor) -> Tensor:
    return apply(D.TRUNC, (input,))


def hardtanh(input: Tensor, min_val: float = -1.0, max_val: float = 1.0) -> Tensor:
    return apply(D.HARDTANH, (input,), {"min_val": min_val, "max_val": max_val})


def nan_to_num(input: Tensor, nan: float = 0.0, posinf: Any = None, neginf: Any = None
               ) -> Tensor:
    return apply(D.NAN_TO_NUM, (input,), {"nan": nan, "posinf": posinf, "neginf": neginf})


def _all_dims(dim: Any, ndim: int) -> tuple[int, ...]:
    return tuple(range(ndim)) if dim is None or dim == () else _dims(dim, ndim)


def amax(input: Tensor, dim: Any = None, keepdim: bool = False) -> Tensor:
    """The largest value of each slice; ties share the gradient evenly (NaN: all NaN)."""
    return apply(D.AMAX, (input,), {"dim": _all_dims(dim, input.dim()), "keepdim": keepdim})


def amin(input: Tensor, dim: Any = None, keepdim: bool = False) -> Tensor:
    return apply(D.AMIN, (input,), {"dim": _all_dims(dim, input.dim()), "keepdim": keepdim})


def prod(input: Tensor) -> Tensor:
    return apply(D.PROD, (input,))


return_types_sort = namedtuple("sort", ["values", "indices"])


def sort(input: Tensor, dim: int = -1, descending: bool = False, stable: bool = False) -> Any:
    """Sorted values and their indices; the gradient goes back through the indices."""
    values, indices = apply(D.SORT, (input,), {"dim": _wrap_dim(dim, input.dim()),
                                               "descending": descending})
    return return_types_sort(values, indices)


def vector_norm(x: Tensor, ord: float = 2, dim: Any = None) -> Tensor:
    """``torch.linalg.vector_norm`` of all elements (2, 1, inf or another positive p)."""
    if dim is not None:
        raise NotImplementedError("refimpl's vector_norm reduces over all elements only; "
                                  "dim= is not implemented")
    return apply(D.LINALG_VECTOR_NORM, (x,), {"ord": float(ord)})


def norm(input: Tensor, p: Any = "fro") -> Tensor:
    return vector_norm(input, 2 if p == "fro" else p)


def sign(input: Tensor) -> Tensor:
    """Signs of the elements (``SignBackward0``: a zero gradient)."""
    return apply(D.SIGN, (input,))


# ------------------------------------------------------------------ shapes and views

def _shape_arg(shape: Sequence[Any]) -> tuple[int, ...]:
    if len(shape) == 1 and isinstance(shape[0], (tuple, list)):
        shape = shape[0]
    return tuple(int(s) for s in shape)


def _infer_shape(shape: tuple[int, ...], numel: int) -> tuple[int, ...]:
    known = 1
    for s in shape:
        if s != -1:
            known *= s
    if shape.count(-1) > 1:
        raise RuntimeError("only one dimension can be inferred")
    if -1 in shape and known != 0 and numel % known == 0:
        return tuple(numel // known if s == -1 else s for s in shape)
    if -1 in shape or known != numel:
        raise RuntimeError(f"shape '{list(shape)}' is invalid for input of size {numel}")
    return shape


def _viewable(array: Any, size: tuple[int, ...]) -> bool:
    """Whether ``array`` can be seen with shape ``size`` without a copy: PyTorch's
    ``computeStride``, which walks the old dims from the innermost, grouping runs of dims that
    are contiguous with each other; each run must be covered exactly by a run of new dims."""
    old, strides = array.shape, array.strides
    if not old or array.size == 0 or old == size:
        return True
    view_d = len(size) - 1
    base = strides[-1]
    tensor_numel = view_numel = 1
    for d in range(len(old) - 1, -1, -1):
        tensor_numel *= old[d]
        if d == 0 or (old[d - 1] != 1 and strides[d - 1] != tensor_numel * base):
            while view_d >= 0 and (view_numel < tensor_numel or size[view_d] == 1):
                view_numel *= size[view_d]
                view_d -= 1
            if view_numel != tensor_numel:
                return False
            if d > 0:
                base = strides[d - 1]
                tensor_numel = view_numel = 1
    return view_d == -1


def view(input: Tensor, *shape: Any) -> Tensor:
    size = _infer_shape(_shape_arg(shape), input._data.size)
    if not _viewable(input._data, size):
        raise RuntimeError("view size is not compatible with input tensor's size and stride (at "
                           "least one dimension spans across two contiguous subspaces). Use "
                           ".reshape(...) instead.")
    return apply(D.VIEW, (input,), {"size": size})


def reshape(input: Tensor, *shape: Any) -> Tensor:
    """As PyTorch reshapes: a contiguous tensor is viewed (``ViewBackward0``); other strides
    that allow a view give an alias (``ReshapeAliasBackward0``); anything else is copied
    (``CloneBackward0`` then ``UnsafeViewBackward0``)."""
    size = _infer_shape(_shape_arg(shape), input._data.size)
    if input.is_contiguous():
        return apply(D.VIEW, (input,), {"size": size})
    if _viewable(input._data, size):
        return apply(D.RESHAPE_ALIAS, (input,), {"size": size})
    return apply(D.UNSAFE_VIEW, (clone(input),), {"size": size})


def flatten(input: Tensor, start_dim: int = 0, end_dim: int = -1) -> Tensor:
    shape = input._data.shape
    if not shape:
        return reshape(input, (1,))
    s, e = _wrap_dim(start_dim, len(shape)), _wrap_dim(end_dim, len(shape))
    if s == e:
        return input
    return reshape(input, shape[:s] + (math.prod(shape[s:e + 1]),) + shape[e + 1:])


def t(input: Tensor) -> Tensor:
    if input.dim() > 2:
        raise RuntimeError(f"t() expects a tensor with <= 2 dimensions, but self is "
                           f"{input.dim()}D")
    return apply(D.T, (input,))


def transpose(input: Tensor, dim0: int, dim1: int) -> Tensor:
    n = input.dim()
    return apply(D.TRANSPOSE, (input,), {"dim0": _wrap_dim(dim0, n), "dim1": _wrap_dim(dim1, n)})


def permute(input: Tensor, *dims: Any) -> Tensor:
    d = _shape_arg(dims)
    n = input.dim()
    if len(d) != n:
        raise RuntimeError(f"permute(sparse_coo): number of dimensions in the tensor input does "
                           f"not match the length of the desired ordering of dimensions i.e. "
                           f"input.dim() = {n} is not equal to len(dims) = {len(d)}")
    return apply(D.PERMUTE, (input,), {"dims": tuple(_wrap_dim(x, n) for x in d)})


def unsqueeze(input: Tensor, dim: int) -> Tensor:
    return apply(D.UNSQUEEZE, (input,), {"dim": _wrap_dim(dim, input.dim() + 1)})


def squeeze(input: Tensor, dim: Any = None) -> Tensor:
    if dim is None:
        return apply(D.SQUEEZE, (input,))
    if isinstance(dim, int):
        return apply(D.SQUEEZE_DIM, (input,), {"dim": _wrap_dim(dim, input.dim())})
    return apply(D.SQUEEZE_DIMS, (input,), {"dim": _dims(dim, input.dim())})


def expand(input: Tensor, *sizes: Any) -> Tensor:
    size = _shape_arg(sizes)
    shape = input._data.shape
    if len(size) < len(shape):
        raise RuntimeError(f"expand(torch.FloatTensor{{{list(shape)}}}, size={list(size)}): the "
                           "number of sizes provided ({}) must be greater or equal to the number "
                           "of dimensions in the tensor ({})".format(len(size), len(shape)))
    lead = len(size) - len(shape)
    target = list(size)
    for i, s in enumerate(shape):
        if size[lead + i] == -1:
            target[lead + i] = s
        elif s != 1 and s != size[lead + i]:
            raise RuntimeError(
                f"The expanded size of the tensor ({size[lead + i]}) must match the existing "
                f"size ({s}) at non-singleton dimension {lead + i}.  Target sizes: {list(size)}."
                f"  Tensor sizes: {list(shape)}")
    return apply(D.EXPAND, (input,), {"size": tuple(target)})


def select(input: Tensor, dim: int, index: int) -> Tensor:
    n = input.dim()
    if n == 0:
        raise IndexError("select() cannot be applied to a 0-dim tensor.")
    d = _wrap_dim(dim, n)
    size = input._data.shape[d]
    if not -size <= index < size:
        raise IndexError(f"index {index} is out of bounds for dimension {d} with size {size}")
    return apply(D.SELECT, (input,), {"dim": d, "index": index % size})


class UnbindBackward0(Node):
    """The one node of all the pieces unbind returns, one output each: its backward stacks
    their gradients (zeros where one got none), as PyTorch's ``unbind_backward`` does."""

    __slots__ = ("_dim", "_outputs")
    _multi_output = True

    def apply(self, grads: list[Tensor | None]) -> list[Tensor | None]:
        some = next(g for g in grads if g is not None)
        filler = zeros((), dtype=some.dtype, device=some.device).expand(some.shape)
        return [stack([filler if g is None else g for g in grads], self._dim)]


def unbind(input: Tensor, dim: int = 0) -> tuple[Tensor, ...]:
    """The slices along ``dim`` as a tuple of views, outputs of one ``UnbindBackward0``."""
    if input.dim() == 0:
        raise IndexError("Dimension specified as 0 but tensor has no dimensions")
    d = _wrap_dim(dim, input.dim())
    pieces = tuple(apply(D.UNBIND, (input,), {"dim": d, "index": i})
                   for i in range(input._data.shape[d]))
    if pieces and pieces[0]._grad_node is not None:
        # Each piece recorded the row's node, for its forward-mode tangent and its view
        # bookkeeping; the graph gets one node with an output per piece instead.
        node = UnbindBackward0()
        node._dim = d
        node._outputs = len(pieces)
        init_node(node, pieces[0]._grad_node.next_functions, pieces[0]._data)
        for i, piece in enumerate(pieces):
            piece._grad_node = node
            piece._output_nr = i
    return pieces


class SplitBackward0(Node):
    """The one node of all the pieces a split returns, one output each: its backward
    concatenates their gradients along the split dim (zeros where one got none), as PyTorch's
    ``split_with_sizes_backward`` does."""

    __slots__ = ("_dim", "_outputs", "_shapes")
    _multi_output = True

    def output_meta(self, nr: int) -> tuple[tuple[int, ...], Any]:
        return self._shapes[nr], self._dtype

    def apply(self, grads: list[Tensor | None]) -> list[Tensor | None]:
        some = next(g for g in grads if g is not None)
        return [cat([zeros(shape, dtype=some.dtype, device=some.device) if g is None else g
                     for g, shape in zip(grads, self._shapes, strict=True)], self._dim)]


class SplitWithSizesBackward0(SplitBackward0):
    """``split`` with a list of sizes."""

    __slots__ = ()


class UnsafeSplitBackward0(SplitBackward0):
    """``unsafe_split``: the pieces are copies, not views."""

    __slots__ = ()


_SPLIT_NODES = {D.SPLIT: SplitBackward0, D.SPLIT_WITH_SIZES: SplitWithSizesBackward0,
                D.UNSAFE_SPLIT: UnsafeSplitBackward0}


def _split(row: Any, input: Tensor, sizes: Sequence[int], dim: int) -> tuple[Tensor, ...]:
    """The pieces of ``sizes`` along ``dim``, outputs of one node of ``row``'s name."""
    start, pieces = 0, []
    for n in sizes:
        pieces.append(apply(row, (input,), {"dim": dim, "index": slice(start, start + n)}))
        start += n
    if pieces and pieces[0]._grad_node is not None:
        # As for unbind: each piece recorded the row's node; the graph gets one node.
        node = _SPLIT_NODES[row]()
        node._dim = dim
        node._outputs = len(pieces)
        node._shapes = [p._data.shape for p in pieces]
        init_node(node, pieces[0]._grad_node.next_functions, pieces[0]._data)
        for i, piece in enumerate(pieces):
            piece._grad_node = node
            piece._output_nr = i
    return tuple(pieces)


def _split_sizes(size: int, split_size: int) -> list[int]:
    if size == 0:
        return [0]  # PyTorch: at least one piece, an empty one
    return [builtins.min(split_size, size - start) for start in range(0, size, split_size)]


def split(tensor: Tensor, split_size_or_sections: Any, dim: int = 0) -> tuple[Tensor, ...]:
    """Views of ``split_size`` along ``dim`` (the last one shorter), or of each size in a
    list (``SplitWithSizesBackward0``)."""
    if tensor.dim() == 0:
        raise RuntimeError("split expects at least a 1-dimensional tensor")
    d = _wrap_dim(dim, tensor.dim())
    size = tensor._data.shape[d]
    if isinstance(split_size_or_sections, (list, tuple)):
        sections = [int(n) for n in split_size_or_sections]
        if builtins.sum(sections) != size:
            raise RuntimeError(
                f"split_with_sizes expects split_sizes to sum exactly to {size} (input tensor's "
                f"size at dimension {d}), but got split_sizes={sections}")
        return _split(D.SPLIT_WITH_SIZES, tensor, sections, d)
    return _split(D.SPLIT, tensor, _split_sizes(size, int(split_size_or_sections)), d)


def unsafe_split(tensor: Tensor, split_size: int, dim: int = 0) -> tuple[Tensor, ...]:
    """``split`` returning copies (``UnsafeSplitBackward0``), which may be written in place."""
    if tensor.dim() == 0:
        raise RuntimeError("split expects at least a 1-dimensional tensor")
    d = _wrap_dim(dim, tensor.dim())
    return _split(D.UNSAFE_SPLIT, tensor, _split_sizes(tensor._data.shape[d], int(split_size)), d)


def chunk(input: Tensor, chunks: int, dim: int = 0) -> tuple[Tensor, ...]:
    """``split`` into pieces of ``ceil(size / chunks)`` (so possibly fewer than ``chunks``)."""
    if chunks <= 0:
        raise RuntimeError(f"chunk expects `chunks` to be greater than 0, got: {chunks}")
    if input.dim() == 0:
        raise RuntimeError("chunk expects at least a 1-dimensional tensor")
    d = _wrap_dim(dim, input.dim())
    size = input._data.shape[d]
    if size == 0:
        # PyTorch gives an empty dimension ``chunks`` empty pieces, as split_with_sizes.
        return _split(D.SPLIT_WITH_SIZES, input, [0] * chunks, d)
    return split(input, -(-size // chunks), d)


def narrow(input: Tensor, dim: int, start: int, length: int) -> Tensor:
    """The view of ``length`` elements from ``start`` along ``dim`` (``SliceBackward0``)."""
    d = _wrap_dim(dim, input.dim())
    size = input._data.shape[d]
    if not -size <= start <= size:
        raise IndexError(f"start out of range (expected to be in range of [{-size}, {size}], "
                         f"but got {start})")
    if start < 0:
        start += size
    if start + length > size:
        raise RuntimeError(f"start ({start}) + length ({length}) exceeds dimension size "
                           f"({size}).")
    return apply(D.SLICE, (input,), {"dim": d, "index": slice(start, start + length, 1)})


def diagonal(input: Tensor, offset: int = 0, dim1: int = 0, dim2: int = 1) -> Tensor:
    """The view of the diagonal ``offset`` of the planes ``(dim1, dim2)``, as the last dim."""
    d1, d2 = _wrap_dim(dim1, input.dim()), _wrap_dim(dim2, input.dim())
    if d1 == d2:
        raise RuntimeError(f"diagonal dimensions cannot be identical {dim1}, {dim2}")
    return apply(D.DIAGONAL, (input,), {"offset": offset, "dim1": d1, "dim2": d2})


def repeat(input: Tensor, *repeats: Any) -> Tensor:
    """``input`` tiled ``repeats`` times along each dim (leading dims added first)."""
    reps = _shape_arg(repeats)
    if len(reps) < input.dim():
        raise RuntimeError("Number of dimensions of repeat dims can not be smaller than number "
                           "of dimensions of tensor")
    return apply(D.REPEAT, (input,), {"repeats": reps})


def _iter(input: Tensor) -> Any:
    if input.dim() == 0:
        raise TypeError("iteration over a 0-d tensor")
    return iter(unbind(input, 0))


def _slice(input: Tensor, dim: int, key: slice) -> Tensor:
    if key.step is not None and key.step <= 0:
        raise ValueError("step must be greater than zero")
    start, stop, step = key.indices(input._data.shape[dim])
    stop = builtins.max(stop, start)
    return apply(D.SLICE, (input,), {"dim": dim, "index": slice(start, stop, step)})


def _sequence_as_tuple(key: Any) -> bool:
    """PyTorch's (and NumPy's) rule for a list key: a tuple of indices when it holds a slice,
    None, Ellipsis, a tensor or a sequence, else one index tensor (``x[[0, 2]]``)."""
    if isinstance(key, tuple):
        return True
    if not isinstance(key, list) or len(key) >= 32:
        return False
    return builtins.any(isinstance(k, (Tensor, list, tuple, slice)) or k is None
                        or k is Ellipsis for k in key)


def _index_tensor(item: Any, device: _backend.device) -> Tensor:
    """An advanced index as a tensor on ``device``: int64 from a sequence of ints, bool from one
    of bools, a given tensor checked for an index dtype."""
    if not isinstance(item, Tensor):
        item = _creation.tensor(item, device=device)
    if item.dtype.kind not in "iub" or item.dtype.kind == "b" and item.dim() == 0:
        raise IndexError("tensors used as indices must be long, int, byte or bool tensors")
    if item._device is not device:
        item = wrap(_backend.move_array(item._data, item.dtype, device), device)
    return item


def _apply_slicing(input: Tensor, items: Sequence[Any]) -> tuple[Tensor, list[Any], bool]:
    """PyTorch's ``applySlicing``: ints select, slices slice (a slice of a whole dim is
    skipped), None unsqueezes and ``...`` skips dims, in that order along the tensor; advanced
    indices (tensors, sequences) are collected per dim for ``index``/``index_put_``. Returns
    the sliced tensor, the advanced indices (None for dims taken whole) and whether anything
    but a skipped slice was applied."""
    def is_scalar_index(item: Any) -> bool:
        return isinstance(item, Tensor) and item.dim() == 0 and item.dtype.kind in "iu"

    specified = 0
    for item in items:
        if isinstance(item, bool):
            raise IndexError("refimpl does not index with Python bools; use a bool tensor")
        if isinstance(item, Tensor) and item.dtype.kind == "b":
            specified += item.dim()
        elif item is not None and item is not Ellipsis:
            specified += 1
    if specified > input.dim():
        raise IndexError(f"too many indices for tensor of dimension {input.dim()}")
    out, dim, changed = input, 0, False
    indices: list[Any] = []
    for item in items:
        if item is Ellipsis:
            dim += input.dim() - specified
        elif item is None:
            out = unsqueeze(out, dim)
            dim += 1
            changed = True
        elif isinstance(item, int) or is_scalar_index(item):
            out = select(out, dim, int(item))
            changed = True
        elif isinstance(item, slice):
            if item.step is not None and item.step <= 0:
                raise ValueError("step must be greater than zero")
            size = out._data.shape[dim]
            start, stop, step = item.indices(size)
            if not (start == 0 and stop >= size and step == 1):
                out = _slice(out, dim, item)
                changed = True
            dim += 1
        else:
            index = _index_tensor(item, input._device)
            indices += [None] * (dim - len(indices)) + [index]
            dim += index.dim() if index.dtype.kind == "b" else 1
    return out, indices, changed


def check_masks(input: Tensor, indices: list[Any]) -> None:
    """PyTorch's check that each bool index has the shape of the dims it covers (made when the
    indices are prepared, before the values are checked)."""
    dim = 0
    for index in indices:
        if index is not None and index.dtype.kind == "b":
            for j, n in enumerate(index.shape):
                if n != input._data.shape[dim + j]:
                    raise IndexError(
                        f"The shape of the mask {list(index.shape)} at index {j} does not match "
                        f"the shape of the indexed tensor {list(input.shape)} at index "
                        f"{dim + j}")
            dim += index.dim()
        else:
            dim += 1


def check_bounds(input: Tensor, indices: list[Any]) -> None:
    """PyTorch's check that every int index is inside its dim (made by the kernel, last)."""
    dim = 0
    for index in indices:
        if index is not None and index.dtype.kind != "b":
            size = input._data.shape[dim]
            if index._data.size:
                for bad in (int(index._data.min()), int(index._data.max())):
                    if not -size <= bad < size:
                        raise IndexError(f"index {bad} is out of bounds for dimension {dim} "
                                         f"with size {size}")
        dim += index.dim() if index is not None and index.dtype.kind == "b" else 1


def index(input: Tensor, indices: list[Any]) -> Tensor:
    """``input[indices]`` with advanced indices (``IndexBackward0``, a copy, not a view)."""
    check_masks(input, indices)
    check_bounds(input, indices)
    return apply(D.INDEX, (input,), {"indices": indices},
                 dispatch=[i for i in indices if isinstance(i, Tensor)])


def getitem(input: Tensor, key: Any) -> Tensor:
    """``tensor[key]``: basic indexing (ints, slices, None, ``...``) gives views, advanced
    indexing (int or bool tensors and sequences) an ``index`` copy, as in PyTorch."""
    if isinstance(key, slice):
        if input.dim() == 0:
            raise IndexError("slice() cannot be applied to a 0-dim tensor.")
        return _slice(input, 0, key)
    items = tuple(key) if _sequence_as_tuple(key) else (key,)
    out, indices, changed = _apply_slicing(input, items)
    if indices:
        return index(out, indices)
    if not changed:
        return apply(D.ALIAS, (input,))
    return out


def cat(tensors: Sequence[Tensor], dim: int = 0) -> Tensor:
    if len(tensors) == 0:
        raise RuntimeError("torch.cat(): expected a non-empty list of Tensors")
    ref = tensors[0]
    d = _wrap_dim(dim, ref.dim())
    for i, x in enumerate(tensors[1:], 1):
        for k in range(ref.dim()):
            if k != d and x._data.shape[k] != ref._data.shape[k]:
                raise RuntimeError(
                    f"Sizes of tensors must match except in dimension {d}. Expected size "
                    f"{ref._data.shape[k]} but got size {x._data.shape[k]} for tensor number {i} "
                    "in the list.")
    ts, arrays = promote(list(tensors))
    return apply(D.CAT, ts, {"dim": d}, arrays)


def stack(tensors: Sequence[Tensor], dim: int = 0) -> Tensor:
    if len(tensors) == 0:
        raise RuntimeError("stack expects a non-empty TensorList")
    for i, x in enumerate(tensors[1:], 1):
        if x._data.shape != tensors[0]._data.shape:
            raise RuntimeError(f"stack expects each tensor to be equal size, but got "
                               f"{list(tensors[0].shape)} at entry 0 and {list(x.shape)} at "
                               f"entry {i}")
    dim = _wrap_dim(dim, tensors[0].dim() + 1)
    if dim < tensors[0].dim() and builtins.all(t._inference for t in tensors) \
            and not grad_mode._state.inference:
        # Inference tensors outside inference mode run stack below autograd, where PyTorch's
        # kernel is cat then view: the result is a view of the concatenation.
        shape = list(tensors[0].shape)
        shape.insert(dim, len(tensors))
        return cat(list(tensors), dim).view(shape)
    ts, arrays = promote(list(tensors))
    return apply(D.STACK, ts, {"dim": dim}, arrays)


# ------------------------------------------------------------------ copies and moves

def clone(input: Tensor) -> Tensor:
    return apply(D.CLONE, (input,))


def detach(input: Tensor) -> Tensor:
    return input.detach()


def parse_to(args: tuple[Any, ...], kwargs: dict[str, Any]
              ) -> tuple[_dtype.dtype | None, Any, bool]:
    """``(dtype, device, copy)`` from the arguments of ``to(...)`` (``kwargs`` is consumed)."""
    dtype = kwargs.pop("dtype", None)
    device = kwargs.pop("device", None)
    copy = kwargs.pop("copy", False)
    kwargs.pop("non_blocking", None)
    if kwargs:
        raise TypeError(f"to() got unexpected keyword arguments {sorted(kwargs)}")
    for a in args:
        if a is None:  # PyTorch's to(None) changes nothing
            continue
        if isinstance(a, _dtype.dtype):
            dtype = a
        elif isinstance(a, Tensor):
            dtype, device = a.dtype, a._device
        elif isinstance(a, (str, _backend.device)):
            device = a
        elif isinstance(a, bool):
            copy = a
        else:
            raise TypeError(f"to() received an invalid combination of arguments: {a!r}")
    return dtype, device, copy


def to(input: Tensor, *args: Any, **kwargs: Any) -> Tensor:
    """Move or cast; returns ``input`` itself when nothing changes (unless ``copy=True``)."""
    dtype, device, copy = parse_to(args, kwargs)
    target_dev = _backend.resolve_device(device) if device is not None else input._device
    target_dtype = dtype or input.dtype
    if target_dev is input._device and target_dtype is input.dtype and not copy:
        return input
    if target_dtype.kind not in "fc":
        # An integer result is not differentiable: PyTorch records no node for it.
        with grad_mode.no_grad():
            return apply(D.TO_COPY, (input,), {"dtype": target_dtype, "device": target_dev})
    return apply(D.TO_COPY, (input,), {"dtype": target_dtype, "device": target_dev})


def _cast(d: _dtype.dtype) -> Any:
    def cast(input: Tensor) -> Tensor:
        return to(input, d)

    cast.__doc__ = f"``to({d!r})``."
    return cast


# ------------------------------------------------------------------ below autograd

# PyTorch runs an op whose tensors are all inference tensors below autograd (see
# OpRow.below_autograd). Most kernels then record nothing; these call autograd-visible ops
# on normal tensors they allocate, and so record or refuse as those ops do.

def _copied(tensors: Sequence[Tensor], params: dict[str, Any], result: Tensor) -> Tensor:
    # clone and _to_copy: empty_like, then copy_ into it (CopyBackwards, result at version 1).
    from refimpl.ops import inplace

    return inplace.copy_(result, tensors[0])


def _rsub_wrapped(tensors: Sequence[Tensor], params: dict[str, Any], result: Tensor) -> Tensor:
    # rsub(Tensor, Scalar) is sub(wrapped other, self): SubBackward0.
    other = wrap(_backend.scalar_array(_backend.backend_of(result._device).xp, params["other"],
                                       result._data.dtype), result._device, WrappedNumber)
    return sub(other, tensors[0], alpha=params["alpha"])


def _out_variant(name: str) -> Any:
    def refuse(tensors: Sequence[Tensor], params: dict[str, Any], result: Tensor) -> Tensor:
        # The kernel calls the out= overload with a normal result tensor.
        raise RuntimeError(f"{name}(): functions with out=... arguments don't support "
                           "automatic differentiation, but one of the arguments requires grad.")

    return refuse


def _saves_inference(tensors: Sequence[Tensor], params: dict[str, Any], result: Tensor
                     ) -> Tensor:
    # mv is addmv into a normal zero tensor, whose node would save the inference operands.
    from refimpl.ops.table import INFERENCE_SAVED

    raise RuntimeError(INFERENCE_SAVED)


for _row, _kernel in ((D.CLONE, _copied), (D.TO_COPY, _copied), (D.RSUB, _rsub_wrapped),
                      (D.ABS, _out_variant("abs")), (D.MEAN, _out_variant("sum")),
                      (D.MEAN_DIM, _out_variant("sum")), (D.MV, _saves_inference)):
    _row.below_autograd = _kernel


# ------------------------------------------------------------------ Tensor methods

def _reflected(fn: Any) -> Any:
    def method(self: Tensor, other: Any) -> Tensor:
        return fn(other, self)

    return method


def _operator(fn: Any, accepts: tuple[type, ...] = (Tensor, numbers.Number)) -> Any:
    """A binary dunder that leaves operands it cannot take to Python (``NotImplemented``), so
    ``t + None`` raises Python's TypeError and ``t == None`` is False, as with PyTorch."""
    common = {t for t in (Tensor, int, float, bool, complex) if issubclass(t, accepts)}

    def method(self: Tensor, other: Any) -> Any:
        if type(other) not in common and not isinstance(other, accepts):  # the ABC is slow
            return NotImplemented
        return fn(self, other)

    method.__name__ = getattr(fn, "__name__", "operator")
    return method


def _bind() -> None:
    from refimpl.ops import inplace

    methods = {
        "add": add, "sub": sub, "mul": mul, "div": div, "true_divide": div, "pow": pow,
        "neg": neg, "reciprocal": reciprocal, "matmul": matmul, "mm": mm, "dot": dot, "mv": mv,
        "addmm": addmm, "sum": sum, "mean": mean, "max": max, "min": min, "maximum": maximum,
        "minimum": minimum, "exp": exp, "log": log, "sqrt": sqrt, "sin": sin, "cos": cos,
        "tanh": tanh, "sigmoid": sigmoid, "relu": relu, "abs": abs, "clamp": clamp,
        "conj": conj,
        "clip": clamp, "softmax": softmax, "log_softmax": log_softmax, "reshape": reshape,
        "view": view, "t": t, "transpose": transpose, "permute": permute,
        "unsqueeze": unsqueeze, "squeeze": squeeze, "expand": expand, "flatten": flatten,
        "select": select, "unbind": unbind, "__iter__": _iter, "clone": clone, "to": to,
        "argmax": argmax, "all": all, "any": any, "contiguous": contiguous,
        "pow_": inplace.pow_, "exp_": inplace.exp_, "sin_": inplace.sin_, "cos_": inplace.cos_,
        "tanh_": inplace.tanh_, "sigmoid_": inplace.sigmoid_, "log_": inplace.log_,
        "sqrt_": inplace.sqrt_, "neg_": inplace.neg_, "abs_": inplace.abs_,
        "t_": inplace.t_, "transpose_": inplace.transpose_, "swapdims_": inplace.transpose_,
        "swapaxes_": inplace.transpose_, "squeeze_": inplace.squeeze_,
        "unsqueeze_": inplace.unsqueeze_, "relu_": inplace.relu_,
        "sign": sign, "sgn": sgn, "floor": floor, "ceil": ceil, "round": round,
        "trunc": trunc, "nan_to_num": nan_to_num, "amax": amax, "amin": amin, "prod": prod,
        "sort": sort, "norm": norm, "median": median, "nanmedian": nanmedian,
        "trace": trace, "atan2": atan2, "argmin": argmin, "masked_fill": masked_fill,
        "gather": gather,
        "masked_fill_": inplace.masked_fill_, "narrow": narrow, "split": split,
        "unsafe_split": unsafe_split, "chunk": chunk,
        "split_with_sizes": lambda self, split_sizes, dim=0: split(self, list(split_sizes), dim),
        "diagonal": diagonal, "repeat": repeat,
        "eq": eq, "ne": ne, "lt": lt,
        "le": le, "gt": gt, "ge": ge, "logical_not": logical_not,
        "double": _cast(_dtype.float64), "float": _cast(_dtype.float32),
        "half": _cast(_dtype.float16),
        "long": _cast(_dtype.int64), "int": _cast(_dtype.int32), "bool": _cast(_dtype.bool),
        "cuda": lambda self, device=None: to(self, device if device is not None else "cuda"),
        "cpu": lambda self: to(self, "cpu"),
        "expand_as": lambda self, other: expand(self, other.shape),
        "view_as": lambda self, other: view(self, other.shape),
        "reshape_as": lambda self, other: reshape(self, other.shape),
        "where": lambda self, condition, other: where(condition, self, other),
        "__add__": _operator(add), "__radd__": _operator(add), "__sub__": _operator(sub),
        "__rsub__": _operator(rsub), "__mul__": _operator(mul), "__rmul__": _operator(mul),
        "__truediv__": _operator(div), "__rtruediv__": _operator(_reflected(div)),
        "__pow__": _operator(pow), "__rpow__": _operator(_reflected(pow)), "__neg__": neg,
        "__matmul__": _operator(matmul, (Tensor,)),
        "__rmatmul__": _operator(_reflected(matmul), (Tensor,)), "__abs__": abs,
        "__eq__": _operator(eq), "__ne__": _operator(ne), "__lt__": _operator(lt),
        "__le__": _operator(le), "__gt__": _operator(gt), "__ge__": _operator(ge),
        "__and__": _operator(logical_and), "__or__": _operator(logical_or),
        "__xor__": _operator(logical_xor), "__invert__": bitwise_not,
        "__getitem__": getitem, "__setitem__": inplace.setitem, "add_": inplace.add_,
        "sub_": inplace.sub_, "mul_": inplace.mul_, "div_": inplace.div_,
        "zero_": inplace.zero_, "fill_": inplace.fill_, "copy_": inplace.copy_,
        "clamp_": inplace.clamp_, "__iadd__": inplace.add_, "__isub__": inplace.sub_,
        "__imul__": inplace.mul_, "__itruediv__": inplace.div_,
    }
    for name in ("new_zeros", "new_ones", "new_empty", "new_full", "new_tensor"):
        methods[name] = getattr(_creation, name)
    for name, fn in methods.items():
        setattr(Tensor, name, fn)
    Tensor.real = property(real)
    Tensor.T = property(lambda self: permute(self, tuple(reversed(range(self.dim())))))


_bind()


def allclose(input: Tensor, other: Tensor, rtol: float = 1e-05, atol: float = 1e-08,
             equal_nan: bool = False) -> bool:
    """Whether ``|input - other| <= atol + rtol * |other|`` everywhere (broadcast; infinities
    of one sign equal; NaN equal to NaN only with ``equal_nan``); the dtypes must match."""
    if input.dtype != other.dtype:
        raise RuntimeError(f"{input.dtype.legacy_name} did not match {other.dtype.legacy_name}")
    with grad_mode.no_grad():
        # The broadcast check, with PyTorch's message for shapes that do not broadcast.
        sub(input, other)
    a = numpy.asarray(input.detach().numpy(force=True))
    b = numpy.asarray(other.detach().numpy(force=True))
    return bool(numpy.all(numpy.isclose(a, b, rtol=rtol, atol=atol, equal_nan=equal_nan)))
