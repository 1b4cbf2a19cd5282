"""``out=``: writing a function's result into a tensor the caller gives.

PyTorch's ``out=`` variants are not differentiable: its autograd layer refuses a call in which
an input or ``out`` requires grad while grad mode is on, naming the op, and otherwise runs the
kernel without recording anything. The result is cast into ``out``'s dtype (only where
PyTorch's ``canCast`` allows: never complex to real, floating to integer, or anything to
bool), ``out`` is resized when its shape is not the result's (with a deprecation warning when
it held elements), and the write bumps ``out``'s version once; ``out`` keeps its own flags, so
a leaf that requires grad stays one.
"""

from __future__ import annotations

import functools
import warnings
from collections.abc import Callable
from typing import Any

from refimpl import _backend
from refimpl._tensor import Tensor
from refimpl.autograd import grad_mode

__all__ = ["OUT_OPS", "accepting_out", "can_cast"]

# The torch.* functions refimpl has whose PyTorch signatures take a Tensor ``out=`` (sum and
# mean only with a dim; reductions that return values and indices take a tuple, not here).
OUT_OPS = frozenset({
    "abs", "atan2", "sgn", "cos", "exp", "log", "log_softmax", "logical_not", "mean", "neg",
    "reciprocal", "sigmoid", "sign", "sin", "softmax", "sqrt", "tanh", "add", "sub", "mul",
    "div", "matmul", "mm", "dot", "mv", "addmm", "maximum", "minimum", "cat", "stack",
    "true_divide", "pow", "where", "clamp", "clip", "max", "min", "eq", "ne", "lt", "le", "gt",
    "ge", "amax", "amin", "floor", "ceil", "round", "trunc", "nan_to_num", "sum"})

# Ops whose result is never differentiable (bool): out= is allowed whatever requires grad.
NOT_DIFFERENTIABLE = frozenset({"logical_not", "eq", "ne", "lt", "le", "gt", "ge"})
# Ops PyTorch composes from others for out=: it records the call under a node named
# NotImplemented, whose backward raises.
UNRECORDED = frozenset({"softmax", "log_softmax"})

_KIND_RANK = {"b": 0, "i": 1, "f": 2, "c": 3}

RESIZED = ("An output with one or more elements was resized since it had shape {old}, which "
           "does not match the required output shape {new}. This behavior is deprecated, and "
           "in a future PyTorch release outputs will not be resized unless they have zero "
           "elements. You can explicitly reuse an out tensor t by resizing it, inplace, to "
           "zero elements with t.resize_(0).")


def can_cast(source: Any, target: Any) -> bool:
    """PyTorch's ``canCast``: no cast to a lower category (complex > floating > integer >
    bool); within a category any size goes."""
    return _KIND_RANK[source.kind] <= _KIND_RANK[target.kind]


def _requires_grad(values: Any) -> bool:
    for v in values:
        if isinstance(v, Tensor):
            if v.requires_grad:
                return True
        elif isinstance(v, (list, tuple)) and _requires_grad(v):
            return True
    return False


def _write(op: str, result: Any, out: Tensor) -> Tensor:
    if not isinstance(result, Tensor):
        raise NotImplementedError(f"{op}(): refimpl writes out= only for a single tensor result")
    if not can_cast(result.dtype, out.dtype):
        raise RuntimeError(f"result type {result.dtype.legacy_name} can't be cast to the "
                           f"desired output type {out.dtype.legacy_name}")
    data = out._data
    if tuple(data.shape) != tuple(result.shape):
        if data.size:
            warnings.warn(RESIZED.format(old=list(data.shape), new=list(result.shape)),
                          UserWarning, stacklevel=4)
        xp = _backend.backend_of(out._device).xp
        out._data = data = xp.empty(tuple(result.shape), dtype=data.dtype)
    out._bump_version()
    data[...] = result._data
    return out


def accepting_out(fn: Callable[..., Any], op: str) -> Callable[..., Any]:
    """``fn`` taking PyTorch's ``out=`` keyword as ``torch.<op>`` does."""

    @functools.wraps(fn)
    def with_out(*args: Any, **kwargs: Any) -> Any:
        if "out" not in kwargs:
            return fn(*args, **kwargs)
        out = kwargs.pop("out")
        if out is None:
            return fn(*args, **kwargs)
        if not isinstance(out, Tensor):
            raise TypeError(f"{op}(): argument 'out' must be Tensor, not {type(out).__name__}")
        if op not in NOT_DIFFERENTIABLE and grad_mode.is_grad_enabled() and (
                _requires_grad(args) or _requires_grad(kwargs.values()) or out.requires_grad):
            if op in UNRECORDED:
                raise NotImplementedError(
                    f"refimpl does not record {op}(out=...) on tensors that require grad "
                    "(PyTorch records a node named NotImplemented whose backward raises); "
                    "drop out= or call it under torch.no_grad()")
            raise RuntimeError(f"{op}(): functions with out=... arguments don't support "
                               "automatic differentiation, but one of the arguments requires "
                               "grad.")
        with grad_mode.no_grad():
            result = fn(*args, **kwargs)
        return _write(op, result, out)

    return with_out

