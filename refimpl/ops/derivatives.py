"""The op table: one row per PyTorch op overload, forward on arrays, derivatives in refimpl ops.

Read a row as PyTorch's ``derivatives.yaml`` entry for the same overload: the node name is
the class PyTorch 2.13 records, each formula gives one input's gradient, and the names a
formula takes are what the node saves (see ``refimpl.ops.table``). Forwards receive arrays that
callers already promoted to the result dtype; gradients are reduced to each input's shape and
cast to its dtype by the engine, so formulas may return broadcast shapes.
"""

from __future__ import annotations

import math
from typing import Any, NamedTuple

import numpy

from refimpl import _backend, _dtype
from refimpl.ops import functional as F
from refimpl.ops.table import defop, iteration_order, lay_out_in_order

# ------------------------------------------------------------------ helpers for formulas


def sum_backward(grad: Any, shape: tuple[int, ...], dim: tuple[int, ...], keepdim: bool) -> Any:
    """Spread a reduced gradient back over ``shape`` (PyTorch's ``sum_backward``)."""
    if not keepdim and len(shape) > 0:
        for d in sorted(d % len(shape) for d in dim):
            grad = grad.unsqueeze(d)
    return grad.expand(shape)


def _reduced_count(shape: tuple[int, ...], dim: tuple[int, ...]) -> int:
    n = 1
    for d in dim:
        n *= shape[d % len(shape)] if shape else 1
    return n


def _select_reduction_backward(grad: Any, dim: int, indices: Any, shape: tuple[int, ...],
                               keepdim: bool) -> Any:
    # Gradient of max/min along a dim (PyTorch's value_selecting_reduction_backward): the
    # incoming gradient scattered into zeros at the selected indices (ScatterBackward0).
    if not keepdim and len(shape) > 0:
        grad = grad.unsqueeze(dim)
        indices = indices.unsqueeze(dim)
    zeros = F.zeros(shape, dtype=grad.dtype, device=grad.device)
    return F.apply(SCATTER, (zeros, grad), {"dim": dim, "index": indices})


def _evenly_distribute(grad: Any, self: Any, result: Any) -> Any:
    # PyTorch: zeros_like(self).masked_fill_(mask, grad / mask.sum()), recorded as
    # masked_fill.Tensor (MaskedFillBackward1) over the division. The mask holds the elements
    # equal to the result, or the NaNs where the result is NaN (``x != x`` only for NaN).
    mask = (self == result) | ((self != self) & (result != result))
    return F.apply(MASKED_FILL, (F.zeros_like(self), grad / mask.sum()), {"mask": mask})


def _masked(grad: Any, mask: Any) -> Any:
    return F.where(mask, grad, F.zeros((), dtype=grad.dtype, device=grad.device))


def _within(self: Any, low: Any, high: Any) -> Any:
    # The region where clamp passes its input through (either bound may be absent).
    if low is None:
        return self <= high
    if high is None:
        return self >= low
    return (self >= low) & (self <= high)


def scale(number: Any, tensor: Any) -> Any:
    """``number * tensor`` as PyTorch's formulas compute it: ``mul.Scalar`` (``MulBackward1``),
    where the operator in a program wraps the number as a tensor (``MulBackward0``)."""
    return F.apply(MUL_SCALAR, (tensor,), {"other": number})


def shift(tensor: Any, number: Any) -> Any:
    """``tensor + number`` as PyTorch's formulas compute it: ``add.Scalar`` (``AddBackward1``),
    where the operator in a program wraps the number as a tensor (``AddBackward0``)."""
    return F.apply(ADD_SCALAR, (tensor,), {"other": number})


def divide(tensor: Any, number: Any) -> Any:
    """``tensor / number`` as PyTorch's formulas compute it: ``div.Scalar`` (``DivBackward1``),
    where the operator in a program wraps the number as a tensor (``DivBackward0``)."""
    return F.apply(DIV_SCALAR, (tensor,), {"other": number})


def _pow_self_grad(grad: Any, self: Any, exponent: Any) -> Any:
    if not F.is_tensor(exponent):
        if exponent == 0:
            return F.zeros_like(self)
        return grad * scale(exponent, self.pow(exponent - 1))
    # PyTorch: where(exponent == 0, 0, grad * (exponent * self.pow(exponent - 1))), with
    # ``exponent - 1`` as sub.Scalar (SubBackward1).
    zero = F.zeros((), dtype=grad.dtype, device=grad.device)
    return F.where(exponent == 0, zero,
                   grad * (exponent * self.pow(F.apply(SUB_SCALAR, (exponent,), {"other": 1}))))


def _pow_exponent_grad(grad: Any, base: Any, exponent: Any, result: Any) -> Any:
    if not F.is_tensor(base):
        # PyTorch: grad * (result * log(base)), a Scalar product (mul.Scalar); a zero base
        # masks where the exponent is not negative.
        log = math.log(base) if base > 0 else -math.inf if base == 0 else math.nan
        if base == 0:
            zero = F.zeros((), dtype=grad.dtype, device=grad.device)
            return grad * F.where(exponent >= 0, zero, scale(log, result))
        return grad * scale(log, result)
    # PyTorch: grad * where((base == 0) & (exponent >= 0), 0, result * log(base)).
    zero = F.zeros((), dtype=grad.dtype, device=grad.device)
    return grad * F.where((base == 0) & (exponent >= 0), zero, result * base.log())


def _maximum_grad(grad: Any, self: Any, other: Any, sign: int) -> Any:
    # PyTorch: where(self == other, grad / 2, grad).masked_fill_(self < other, 0) for maximum
    # (self > other for minimum): ties split the gradient evenly.
    lose = (self < other) if sign > 0 else (self > other)
    tie = self == other
    return masked_fill(F.where(tie, divide(grad, 2), grad), lose, 0)


def masked_fill(tensor: Any, mask: Any, value: Any) -> Any:
    """``tensor.masked_fill(mask, value)`` with a number (``MaskedFillBackward0``)."""
    return F.apply(MASKED_FILL_SCALAR, (tensor,), {"mask": mask, "value": value})


# ------------------------------------------------------------------ arithmetic

ADD = defop(
    "add.Tensor", "AddBackward0",
    lambda xp, self, other, *, alpha=1: self + other if alpha == 1 else self + alpha * other,
    {"self": lambda grad: grad,
     "other": lambda grad, alpha: grad if alpha == 1 else scale(alpha, grad)},
    layout="elementwise", zeros="all",
)
SUB = defop(
    "sub.Tensor", "SubBackward0",
    lambda xp, self, other, *, alpha=1: self - other if alpha == 1 else self - alpha * other,
    {"self": lambda grad: grad,
     "other": lambda grad, alpha: -grad if alpha == 1 else scale(alpha, -grad)},
    layout="elementwise", zeros="all",
)
RSUB = defop(
    "rsub.Scalar", "RsubBackward1",
    lambda xp, self, *, other, alpha=1: other - self if alpha == 1 else other - alpha * self,
    {"self": lambda grad, alpha: -grad if alpha == 1 else scale(alpha, -grad)},
    layout="elementwise",
)
SUB_SCALAR = defop(
    # ``tensor - number`` inside formulas (PyTorch's own ``exponent - 1``): SubBackward1.
    "sub.Scalar", "SubBackward1",
    lambda xp, self, *, other, alpha=1: (self - alpha * other).astype(self.dtype, copy=False),
    {"self": lambda grad: grad},
    layout="elementwise",
)
MUL = defop(
    "mul.Tensor", "MulBackward0",
    lambda xp, self, other: self * other,
    {"self": lambda grad, other: grad * other, "other": lambda grad, self: grad * self},
    layout="elementwise", zeros="any",
)
DIV = defop(
    "div.Tensor", "DivBackward0",
    lambda xp, self, other: self / other,
    {"self": lambda grad, other: grad / other,
     "other": lambda grad, self, other: -grad * ((self / other) / other)},
    layout="elementwise", zeros="self",
)
MUL_SCALAR = defop(
    "mul.Scalar", "MulBackward1",
    lambda xp, self, *, other: (self * other).astype(self.dtype, copy=False),
    {"self": lambda grad, other: scale(other, grad)},
    layout="elementwise",
)
ADD_SCALAR = defop(
    "add.Scalar", "AddBackward1",
    lambda xp, self, *, other: (self + other).astype(self.dtype, copy=False),
    {"self": lambda grad: grad},
    layout="elementwise",
)
DIV_SCALAR = defop(
    "div.Scalar", "DivBackward1",
    lambda xp, self, *, other: (self / other).astype(self.dtype, copy=False),
    {"self": lambda grad, other: divide(grad, other)},
    layout="elementwise",
)
RECIPROCAL = defop(
    "reciprocal", "ReciprocalBackward0",
    lambda xp, self: 1 / self,
    {"self": lambda grad, result: -grad * (result * result)},
    layout="elementwise",
)
NEG = defop("neg", "NegBackward0", lambda xp, self: -self, {"self": lambda grad: -grad},
            layout="elementwise")
POW_TENSOR_SCALAR = defop(
    "pow.Tensor_Scalar", "PowBackward0",
    lambda xp, self, *, exponent: self ** exponent,
    {"self": lambda grad, self, exponent: _pow_self_grad(grad, self, exponent)},
    layout="elementwise",
)
POW_TENSOR_TENSOR = defop(
    "pow.Tensor_Tensor", "PowBackward1",
    lambda xp, self, exponent: self ** exponent,
    {"self": lambda grad, self, exponent: _pow_self_grad(grad, self, exponent),
     "exponent": lambda grad, self, exponent, result:
         _pow_exponent_grad(grad, self, exponent, result)},
    layout="elementwise",
)
POW_SCALAR = defop(
    "pow.Scalar", "PowBackward2",
    lambda xp, exponent, *, self: self ** exponent,
    {"exponent": lambda grad, self, exponent, result:
         _pow_exponent_grad(grad, self, exponent, result)},
    layout="elementwise",
)

# ------------------------------------------------------------------ matrix products

def _column_major(shape: tuple[int, ...], strides: tuple[int, ...]) -> bool:
    return strides[0] == 1 and strides[1] == shape[0]


def _mm_mat1_backward(grad: Any, mat2: Any, mat1_shape: tuple[int, ...],
                      mat1_strides: tuple[int, ...], alpha: Any = 1) -> Any:
    # PyTorch's mm_mat1_backward: for a column-major mat1 it computes the gradient transposed
    # (TBackward0 over MmBackward0), which create_graph records.
    if _column_major(mat1_shape, mat1_strides):
        out = mat2.mm(grad.t()).t()
    else:
        out = grad.mm(mat2.t())
    return out if alpha == 1 else scale(alpha, out)


def _mm_mat2_backward(grad: Any, mat1: Any, mat2_shape: tuple[int, ...],
                      mat2_strides: tuple[int, ...], alpha: Any = 1) -> Any:
    # PyTorch's mm_mat2_backward, with the same column-major case.
    if _column_major(mat2_shape, mat2_strides):
        out = grad.t().mm(mat1).t()
    else:
        out = mat1.t().mm(grad)
    return out if alpha == 1 else scale(alpha, out)


def _addmm(xp: Any, self: Any, mat1: Any, mat2: Any, beta: Any, alpha: Any) -> Any:
    if beta == 1 and alpha == 1:
        out = mat1 @ mat2
        if out.ndim and self.dtype == out.dtype:
            # The product is a new array: adding in place saves a temporary the size of the
            # result (self broadcasts to it; addmm checked the shapes).
            out += self
            return out
        return self + out
    return beta * self + alpha * (mat1 @ mat2)


MM = defop(
    "mm", "MmBackward0",
    lambda xp, self, mat2: self @ mat2,
    {"self": lambda grad, mat2, self_shape, self_strides:
         _mm_mat1_backward(grad, mat2, self_shape, self_strides),
     "mat2": lambda grad, self, mat2_shape, mat2_strides:
         _mm_mat2_backward(grad, self, mat2_shape, mat2_strides)},
)
DOT = defop(
    "dot", "DotBackward0",
    lambda xp, self, tensor: xp.dot(self, tensor),
    {"self": lambda grad, tensor: grad * tensor, "tensor": lambda grad, self: grad * self},
    zeros="any",
)
MV = defop(
    "mv", "MvBackward0",
    lambda xp, self, vec: self @ vec,
    # PyTorch: grad.outer(vec), which reshapes grad to a column (ViewBackward0).
    {"self": lambda grad, vec: grad.reshape(-1, 1) * vec,
     "vec": lambda grad, self: self.t().mv(grad)},
)
ADDMM = defop(
    "addmm", "AddmmBackward0",
    lambda xp, self, mat1, mat2, *, beta=1, alpha=1: _addmm(xp, self, mat1, mat2, beta, alpha),
    {"self": lambda grad, beta: grad if beta == 1 else scale(beta, grad),
     "mat1": lambda grad, mat2, alpha, mat1_shape, mat1_strides:
         _mm_mat1_backward(grad, mat2, mat1_shape, mat1_strides, alpha),
     "mat2": lambda grad, mat1, alpha, mat2_shape, mat2_strides:
         _mm_mat2_backward(grad, mat1, mat2_shape, mat2_strides, alpha)},
)

# ------------------------------------------------------------------ reductions

SUM = defop(
    "sum", "SumBackward0",
    lambda xp, self: self.sum(),
    {"self": lambda grad, self_shape: grad.expand(self_shape)},
)
SUM_DIM = defop(
    "sum.dim_IntList", "SumBackward1",
    lambda xp, self, *, dim, keepdim=False: self.sum(axis=dim, keepdims=keepdim),
    {"self": lambda grad, self_shape, dim, keepdim: sum_backward(grad, self_shape, dim, keepdim)},
    layout="contiguous",
)
MEAN = defop(
    "mean", "MeanBackward0",
    lambda xp, self: self.mean(),
    {"self": lambda grad, self_shape: divide(grad.expand(self_shape), math.prod(self_shape))},
)
MEAN_DIM = defop(
    "mean.dim", "MeanBackward1",
    lambda xp, self, *, dim, keepdim=False: self.mean(axis=dim, keepdims=keepdim),
    {"self": lambda grad, self_shape, dim, keepdim:
         divide(sum_backward(grad, self_shape, dim, keepdim), _reduced_count(self_shape, dim))},
    layout="contiguous",
)
MAX = defop(
    "max", "MaxBackward1",
    lambda xp, self: self.max(),
    {"self": lambda grad, self, result: _evenly_distribute(grad, self, result)},
)
MIN = defop(
    "min", "MinBackward1",
    lambda xp, self: self.min(),
    {"self": lambda grad, self, result: _evenly_distribute(grad, self, result)},
)
MAX_DIM = defop(
    "max.dim", "MaxBackward0",
    lambda xp, self, *, dim, keepdim=False:
        (self.max(axis=dim, keepdims=keepdim), self.argmax(axis=dim, keepdims=keepdim)),
    {"self": lambda grad, dim, indices, self_shape, keepdim:
         _select_reduction_backward(grad, dim, indices, self_shape, keepdim)},
    extra_outputs=("indices",),
    layout="contiguous",
)
MIN_DIM = defop(
    "min.dim", "MinBackward0",
    lambda xp, self, *, dim, keepdim=False:
        (self.min(axis=dim, keepdims=keepdim), self.argmin(axis=dim, keepdims=keepdim)),
    {"self": lambda grad, dim, indices, self_shape, keepdim:
         _select_reduction_backward(grad, dim, indices, self_shape, keepdim)},
    extra_outputs=("indices",),
    layout="contiguous",
)


def _median_forward(xp: Any, self: Any) -> Any:
    # The lower of the two middle elements for an even count; NaN when there is one.
    flat = xp.sort(self.reshape(-1))
    if flat.size == 0:
        return xp.asarray(xp.nan, dtype=self.dtype)
    value = flat[(flat.size - 1) // 2]
    if self.dtype.kind == "f" and flat.size and xp.isnan(flat[-1]):
        value = flat[-1]
    return xp.asarray(value)


def _median_dim_forward(xp: Any, self: Any, *, dim: int, keepdim: bool = False) -> Any:
    if self.ndim == 0:
        return self.copy(), xp.zeros((), dtype=xp.int64)
    order = xp.argsort(self, axis=dim, kind="stable")  # NaNs sort last
    n = self.shape[dim]
    pick = xp.take(order, [(n - 1) // 2], axis=dim)
    if self.dtype.kind == "f":
        # A slice holding NaN has the median NaN, at its first NaN.
        nan = xp.isnan(self)
        pick = xp.where(nan.any(axis=dim, keepdims=True),
                        nan.argmax(axis=dim, keepdims=True), pick)
    values = xp.take_along_axis(self, pick, axis=dim)
    if not keepdim:
        values, pick = xp.squeeze(values, dim), xp.squeeze(pick, dim)
    return values, pick.astype(xp.int64)


MEDIAN = defop(
    "median", "MedianBackward0", _median_forward,
    {"self": lambda grad, self, result: _evenly_distribute(grad, self, result)},
)
MEDIAN_DIM = defop(
    "median.dim", "MedianBackward1", _median_dim_forward,
    {"self": lambda grad, dim, indices, self_shape, keepdim:
         _select_reduction_backward(grad, dim, indices, self_shape, keepdim)},
    extra_outputs=("indices",),
    layout="contiguous",
)
def _nanmedian_forward(xp: Any, self: Any) -> Any:
    # The lower median of the elements that are not NaN; NaN when all are (or none exist).
    flat = self.reshape(-1)
    if self.dtype.kind == "f":
        flat = flat[~xp.isnan(flat)]
    if flat.size == 0:
        return xp.asarray(xp.nan, dtype=self.dtype)
    return xp.asarray(xp.sort(flat)[(flat.size - 1) // 2])


def _nanmedian_dim_forward(xp: Any, self: Any, *, dim: int, keepdim: bool = False) -> Any:
    if self.ndim == 0:
        return self.copy(), xp.zeros((), dtype=xp.int64)
    order = xp.argsort(self, axis=dim, kind="stable")  # NaNs sort last
    count = self.shape[dim]
    if self.dtype.kind == "f":
        count = (~xp.isnan(self)).sum(axis=dim, keepdims=True)
    # The lower middle of the numbers of each slice; an all-NaN slice takes its first NaN.
    position = xp.maximum((xp.asarray(count) - 1) // 2, 0)
    position = xp.broadcast_to(position, self.shape[:dim] + (1,) + self.shape[dim + 1:])
    pick = xp.take_along_axis(order, position, axis=dim)
    values = xp.take_along_axis(self, pick, axis=dim)
    if not keepdim:
        values, pick = xp.squeeze(values, dim), xp.squeeze(pick, dim)
    return values, pick.astype(xp.int64)


NANMEDIAN = defop(
    "nanmedian", "NanmedianBackward0", _nanmedian_forward,
    {"self": lambda grad, self, result: _evenly_distribute(grad, self, result)},
)
NANMEDIAN_DIM = defop(
    "nanmedian.dim", "NanmedianBackward1", _nanmedian_dim_forward,
    {"self": lambda grad, dim, indices, self_shape, keepdim:
         _select_reduction_backward(grad, dim, indices, self_shape, keepdim)},
    extra_outputs=("indices",),
    layout="contiguous",
)


def _trace_forward(xp: Any, self: Any) -> Any:
    total = xp.trace(self)
    return xp.asarray(total, dtype=xp.int64 if self.dtype.kind in "biu" else self.dtype)


def _trace_backward(grad: Any, self_shape: tuple[int, ...]) -> Any:
    # PyTorch's trace_backward: the gradient on the diagonal, zeros elsewhere.
    eye = F.eye_mask(self_shape, grad.device)
    return masked_fill(grad.expand(self_shape), ~eye, 0)


TRACE = defop("trace", "TraceBackward0", _trace_forward,
              {"self": lambda grad, self_shape: _trace_backward(grad, self_shape)})


def _atan2_reciprocal(self: Any, other: Any) -> Any:
    # 1 / (self^2 + other^2), 0 at the origin: PyTorch's gradient of atan2 is 0 there.
    denominator = self * self + other * other
    return masked_fill(denominator.reciprocal(), denominator == 0, 0)


ATAN2 = defop(
    "atan2", "Atan2Backward0",
    lambda xp, self, other: xp.arctan2(self, other),
    {"self": lambda grad, self, other: grad * (other * _atan2_reciprocal(self, other)),
     "other": lambda grad, self, other: grad * (-self * _atan2_reciprocal(self, other))},
    layout="elementwise",
)
MAXIMUM = defop(
    "maximum", "MaximumBackward0",
    lambda xp, self, other: xp.maximum(self, other),
    {"self": lambda grad, self, other: _maximum_grad(grad, self, other, 1),
     "other": lambda grad, self, other: _maximum_grad(grad, other, self, 1)},
    layout="elementwise",
)
MINIMUM = defop(
    "minimum", "MinimumBackward0",
    lambda xp, self, other: xp.minimum(self, other),
    {"self": lambda grad, self, other: _maximum_grad(grad, self, other, -1),
     "other": lambda grad, self, other: _maximum_grad(grad, other, self, -1)},
    layout="elementwise",
)

# ------------------------------------------------------------------ elementwise functions

EXP = defop("exp", "ExpBackward0", lambda xp, self: xp.exp(self),
            {"self": lambda grad, result: grad * result}, layout="elementwise")
LOG = defop("log", "LogBackward0", lambda xp, self: xp.log(self),
            {"self": lambda grad, self: grad / self}, layout="elementwise")
SQRT = defop("sqrt", "SqrtBackward0", lambda xp, self: xp.sqrt(self),
             {"self": lambda grad, result: grad / scale(2, result)}, layout="elementwise")
SIN = defop("sin", "SinBackward0", lambda xp, self: xp.sin(self),
            {"self": lambda grad, self: grad * self.cos()}, layout="elementwise")
COS = defop("cos", "CosBackward0", lambda xp, self: xp.cos(self),
            {"self": lambda grad, self: grad * -self.sin()}, layout="elementwise")
TANH_BACKWARD = defop(
    # tanh's gradient as its own op, so a create_graph gradient is TanhBackwardBackward0.
    "tanh_backward", "TanhBackwardBackward0",
    lambda xp, grad_output, output: grad_output * (1 - output * output),
    {"grad_output": lambda grad, output: F.apply(TANH_BACKWARD, F.promote((grad, output))[0]),
     "output": lambda grad, output, grad_output: grad * (scale(-2, output) * grad_output)},
    layout="elementwise",
)
TANH = defop("tanh", "TanhBackward0", lambda xp, self: xp.tanh(self),
             {"self": lambda grad, result: F.apply(TANH_BACKWARD, F.promote((grad, result))[0])},
             layout="elementwise")
def _sigmoid_output_grad(grad: Any, output: Any, grad_output: Any) -> Any:
    # PyTorch: grad * grad_output * (-2 * output + 1). Its C++ evaluates an operator's right
    # operand first, which numbers the nodes: the factor on the right is recorded first.
    factor = shift(scale(-2, output), 1)
    return grad * grad_output * factor


def _softmax_double_backward(grad: Any, grad_output: Any, output: Any, dim: int) -> Any:
    # PyTorch: grad_output * grad - (output * grad_output).sum(dim, true) * grad
    #          - grad_output * (output * grad).sum(dim, true),
    # with each operator's right operand recorded first, as its C++ evaluates them.
    last = grad_output * (output * grad).sum(dim, keepdim=True)
    middle = (output * grad_output).sum(dim, keepdim=True) * grad
    return grad_output * grad - middle - last


SIGMOID_BACKWARD = defop(
    # sigmoid's gradient as its own op (SigmoidBackwardBackward0 under create_graph).
    "sigmoid_backward", "SigmoidBackwardBackward0",
    lambda xp, grad_output, output: grad_output * ((1 - output) * output),
    {"grad_output": lambda grad, output:
         F.apply(SIGMOID_BACKWARD, F.promote((grad, output))[0]),
     "output": lambda grad, output, grad_output:
         _sigmoid_output_grad(grad, output, grad_output)},
    layout="elementwise",
)
SIGMOID = defop(
    "sigmoid", "SigmoidBackward0",
    # exp(-|x|) never overflows; both branches give 1 / (1 + exp(-x)).
    lambda xp, self: 1 / (1 + xp.exp(-self)) if self.dtype.kind == "c" else
        xp.where(self >= 0, 1 / (1 + xp.exp(-xp.abs(self))),
                 xp.exp(-xp.abs(self)) / (1 + xp.exp(-xp.abs(self)))),
    {"self": lambda grad, result: F.apply(SIGMOID_BACKWARD, F.promote((grad, result))[0])},
    layout="elementwise",
)
def _keep_where(xp: Any, mask: Any, values: Any) -> Any:
    """``where(mask, values, 0)``, exact for inf and NaN too, by clearing the bits of the
    dropped elements: ``xp.where`` is several times slower on the random masks relu makes."""
    uint = xp.dtype(f"u{values.dtype.itemsize}")
    return (values.view(uint) & xp.negative(mask.astype(uint))).view(values.dtype)


THRESHOLD_BACKWARD = defop(
    # relu's gradient as its own op, so it stays connected to ``result`` as in PyTorch.
    "threshold_backward", "ThresholdBackwardBackward0",
    lambda xp, grad_output, self, *, threshold=0:
        _keep_where(xp, ~(self <= threshold), grad_output),  # NaN passes, as in PyTorch
    {"grad_output": lambda grad, self, threshold:
         F.apply(THRESHOLD_BACKWARD, (grad, self), {"threshold": threshold}),
     "self": lambda grad: F.zeros_like(grad)},
    layout="elementwise",
)
RELU = defop(
    "relu", "ReluBackward0",
    lambda xp, self: xp.maximum(self, 0).astype(self.dtype, copy=False),
    {"self": lambda grad, result: F.apply(THRESHOLD_BACKWARD, (grad, result), {"threshold": 0})},
    layout="elementwise",
)
def _sgn_backward(grad: Any, self: Any, result: Any) -> Any:
    if self.dtype.kind != "c":
        # The derivative of sgn on real numbers is zero everywhere: PyTorch returns an
        # immutable ZeroTensor, which the products of the formulas that use it keep (see
        # OpRow.zeros).
        zero = F.zeros_like(grad)
        zero._zero = True
        return zero
    # sgn(z) = z / |z| moves only along the circle: the part of grad along sgn drops out.
    magnitude = self.abs()
    out = (grad - result * (grad * result.conj()).real) / magnitude
    return masked_fill(out, magnitude == 0, 0)


def _sgn_forward(xp: Any, self: Any) -> Any:
    if self.dtype.kind != "c":
        return xp.sign(self)
    magnitude = xp.abs(self)
    return xp.where(magnitude == 0, 0, self / xp.where(magnitude == 0, 1, magnitude))


SGN = defop("sgn", "SgnBackward0", _sgn_forward, {"self": _sgn_backward}, holomorphic=False,
            layout="elementwise")
SIGN = defop("sign", "SignBackward0", lambda xp, self: xp.sign(self),
             {"self": lambda grad: F.zeros_like(grad)}, layout="elementwise")
ABS = defop("abs", "AbsBackward0", lambda xp, self: xp.abs(self),
            {"self": lambda grad, self: grad * F.apply(SGN, (self,))}, holomorphic=False,
            layout="elementwise")
def _zero_gradient(grad: Any) -> Any:
    return F.zeros_like(grad)


# Rounding: a zero gradient everywhere, the jumps included.
FLOOR = defop("floor", "FloorBackward0", lambda xp, self: xp.floor(self),
              {"self": _zero_gradient}, layout="elementwise")
CEIL = defop("ceil", "CeilBackward0", lambda xp, self: xp.ceil(self),
             {"self": _zero_gradient}, layout="elementwise")
ROUND = defop("round", "RoundBackward0", lambda xp, self: xp.round(self),
              {"self": _zero_gradient}, layout="elementwise")
TRUNC = defop("trunc", "TruncBackward0", lambda xp, self: xp.trunc(self),
              {"self": _zero_gradient}, layout="elementwise")
HARDTANH = defop(
    # Unlike clamp, the gradient passes only strictly inside (min_val, max_val).
    "hardtanh", "HardtanhBackward0",
    lambda xp, self, *, min_val=-1.0, max_val=1.0:
        xp.clip(self, min_val, max_val).astype(self.dtype, copy=False),
    {"self": lambda grad, self, min_val, max_val:
         _masked(grad, (self > min_val) & (self < max_val))},
    layout="elementwise",
)
NAN_TO_NUM = defop(
    # PyTorch: grad * isfinite(self): the replaced elements get no gradient.
    "nan_to_num", "NanToNumBackward0",
    lambda xp, self, *, nan=0.0, posinf=None, neginf=None:
        xp.nan_to_num(self, nan=nan, posinf=posinf, neginf=neginf),
    {"self": lambda grad, self: _masked(grad, (self == self) & (self.abs() != math.inf))},
    layout="elementwise",
)


def _amax_backward(grad: Any, self: Any, result: Any, dim: tuple[int, ...],
                   keepdim: bool) -> Any:
    # PyTorch's scale_grad_by_count(restore_reduced_dims(grad), restore(result) == self):
    # an even split between the elements equal to the extreme; none equals NaN (0 / 0).
    shape = tuple(self.shape)
    mask = self == sum_backward(result, shape, dim, keepdim)
    count = mask.sum(dim, keepdim=True) if shape else mask.sum()
    return sum_backward(grad, shape, dim, keepdim) / count * mask


AMAX = defop(
    "amax", "AmaxBackward0",
    lambda xp, self, *, dim, keepdim=False: self.max(axis=dim, keepdims=keepdim),
    {"self": lambda grad, self, result, dim, keepdim:
         _amax_backward(grad, self, result, dim, keepdim)},
    layout="contiguous",
)
AMIN = defop(
    "amin", "AminBackward0",
    lambda xp, self, *, dim, keepdim=False: self.min(axis=dim, keepdims=keepdim),
    {"self": lambda grad, self, result, dim, keepdim:
         _amax_backward(grad, self, result, dim, keepdim)},
    layout="contiguous",
)


def _prod_backward(grad: Any, self: Any, result: Any) -> Any:
    # PyTorch's prod_backward: grad * result / self without zeros; with one zero only that
    # element gets the product of the others; with two or more every gradient is 0.
    zero = self == 0
    zeros = int(zero.sum().item())
    if zeros == 0:
        return grad * result / self
    if zeros > 1:
        return F.zeros_like(self)
    others = F.where(zero, F.ones_like(self), self).prod()
    return _masked(grad * others, zero)


PROD = defop("prod", "ProdBackward0", lambda xp, self: xp.asarray(self.prod(), dtype=self.dtype),
             {"self": lambda grad, self, result: _prod_backward(grad, self, result)})


def _sort_forward(xp: Any, self: Any, *, dim: int = -1, descending: bool = False) -> Any:
    # Stable either way; descending keeps tied elements in their order too.
    order = xp.argsort(-self if descending else self, axis=dim, kind="stable")
    return xp.take_along_axis(self, order, axis=dim), order.astype(xp.int64)


SORT = defop(
    "sort.stable", "SortBackward0", _sort_forward,
    {"self": lambda grad, dim, indices, self_shape:
         _select_reduction_backward(grad, dim % max(len(self_shape), 1), indices, self_shape,
                                    True)},
    extra_outputs=("indices",),
    layout="contiguous",
)


def _vector_norm_forward(xp: Any, self: Any, *, ord: float = 2.0) -> Any:
    a = xp.abs(self).reshape(-1)
    if ord == math.inf:
        value = a.max() if a.size else 0.0
    elif ord == 1:
        value = a.sum()
    else:
        value = (a ** ord).sum() ** (1.0 / ord)
    return xp.asarray(value, dtype=self.dtype)


def _vector_norm_backward(grad: Any, self: Any, result: Any, ord: float) -> Any:
    # PyTorch's norm_backward: 0 at the zero vector (the subgradient of minimum norm); the
    # infinity norm splits its gradient between the tied largest magnitudes.
    if ord == math.inf:
        mask = self.abs() == result
        return grad * F.apply(SIGN, (self,)) * mask / mask.sum()
    if ord == 1:
        return grad * F.apply(SIGN, (self,))
    zero = result == 0
    safe = F.where(zero, F.ones_like(result), result)
    if ord == 2:
        scaled = self / safe
    else:
        scaled = F.apply(SIGN, (self,)) * self.abs().pow(ord - 1) / safe.pow(ord - 1)
    return _masked(grad * scaled, ~zero)


LINALG_VECTOR_NORM = defop(
    "linalg_vector_norm", "LinalgVectorNormBackward0", _vector_norm_forward,
    {"self": lambda grad, self, result, ord: _vector_norm_backward(grad, self, result, ord)},
)
CONJ = defop("conj", "ConjBackward0", lambda xp, self: xp.conj(self),
             {"self": lambda grad: grad.conj()}, holomorphic=False)
REAL = defop(
    # The gradient of a real tensor that took part in complex math: its real part.
    "real", "RealBackward0", lambda xp, self: self.real.copy(),
    {"self": lambda grad: grad}, holomorphic=False,
    layout="elementwise",
)
CLAMP = defop(
    "clamp", "ClampBackward1",
    lambda xp, self, *, min=None, max=None:
        xp.clip(self, min, max).astype(self.dtype, copy=False),
    {"self": lambda grad, self, min, max: _masked(grad, _within(self, min, max))},
    layout="elementwise",
)
CLAMP_TENSOR = defop(
    "clamp.Tensor", "ClampBackward0",
    lambda xp, self, min, max: xp.minimum(xp.maximum(self, min), max),
    {"self": lambda grad, self, min, max: _masked(grad, (self >= min) & (self <= max)),
     "min": lambda grad, self, min: _masked(grad, self < min),
     "max": lambda grad, self, max: _masked(grad, self > max)},
    layout="elementwise",
)
WHERE = defop(
    "where.self", "WhereBackward0",
    lambda xp, self, other, *, condition: xp.where(condition._data, self, other),
    {"self": lambda grad, condition: _masked(grad, condition),
     "other": lambda grad, condition:
         F.where(condition, F.zeros((), dtype=grad.dtype, device=grad.device), grad)},
    layout="elementwise",
)

MASKED_FILL = defop(
    "masked_fill.Tensor", "MaskedFillBackward1",
    lambda xp, self, value, *, mask: xp.where(mask._data, value, self).astype(self.dtype,
                                                                             copy=False),
    {"self": lambda grad, mask: masked_fill(grad, mask, 0),
     "value": lambda grad, mask: F.apply(MASKED_SELECT, (grad,), {"mask": mask}).sum()},
    layout="elementwise",
)
MASKED_FILL_SCALAR = defop(
    "masked_fill.Scalar", "MaskedFillBackward0",
    lambda xp, self, *, mask, value:
        xp.where(mask._data, xp.asarray(value, dtype=self.dtype), self),
    {"self": lambda grad, mask: masked_fill(grad, mask, 0)},
    layout="elementwise",
)
MASKED_SELECT = defop(
    # The elements of ``self`` where ``mask`` (of the same shape here) is set, as a 1-D tensor.
    "masked_select", "MaskedSelectBackward0",
    lambda xp, self, *, mask: self[mask._data],
    {"self": lambda grad, self_shape, mask:
         F.apply(MASKED_SCATTER, (F.zeros(self_shape, dtype=grad.dtype, device=grad.device),
                                  grad), {"mask": mask})},
)


def _masked_scatter(xp: Any, self: Any, source: Any, mask: Any) -> Any:
    out = self.copy()
    out[mask] = source.reshape(-1)[:int(mask.sum())]
    return out


MASKED_SCATTER = defop(
    "masked_scatter", "MaskedScatterBackward0",
    lambda xp, self, source, *, mask: _masked_scatter(xp, self, source, mask._data),
    {"self": lambda grad, mask: masked_fill(grad, mask, 0),
     "source": lambda grad, mask, source_shape:
         F.apply(MASKED_SELECT, (grad,), {"mask": mask}).reshape(source_shape)},
)


def _scatter(xp: Any, self: Any, dim: int, index: Any, src: Any, value: Any = None,
             add: bool = False) -> Any:
    """``self`` with ``src`` (or ``value``) written, or added, at ``index`` along ``dim``.

    Built from comparisons and sums so NumPy and CuPy run the same code: a one-hot of
    ``index`` against every position of ``dim``, with the written values summed over the
    index entries (exact for the distinct indices max, min and gather's gradient use; PyTorch
    leaves the result of scatter with repeated indices unspecified). Where ``index`` is smaller
    than ``self``, only that leading region is written, as in PyTorch.
    """
    zero_d = self.ndim == 0
    if zero_d:
        self, index = self.reshape(1), index.reshape(1)
        src = src.reshape(1) if src is not None else None
    region = tuple(slice(0, n) for n in index.shape[:dim]) + (slice(None),) + \
        tuple(slice(0, n) for n in index.shape[dim + 1:])
    hot = xp.expand_dims(index, -1) == xp.arange(self.shape[dim])
    if src is None:
        values = xp.asarray(value, dtype=self.dtype)
    else:
        values = xp.expand_dims(src[tuple(slice(0, n) for n in index.shape)], -1)
    written = xp.moveaxis(xp.where(hot, values, xp.zeros((), self.dtype)).sum(axis=dim), -1, dim)
    out = self.copy()
    if add:
        out[region] += written
    else:
        out[region] = xp.where(xp.moveaxis(hot.any(axis=dim), -1, dim), written, out[region])
    return out.reshape(()) if zero_d else out


def _gather(xp: Any, self: Any, dim: int, index: Any) -> Any:
    if self.ndim == 0:
        return self.reshape(1)[index.reshape(1)].reshape(())
    return xp.take_along_axis(self[tuple(slice(0, n) for n in index.shape[:dim])
                                   + (slice(None),)
                                   + tuple(slice(0, n) for n in index.shape[dim + 1:])],
                              index, axis=dim)


SCATTER = defop(
    # PyTorch's formulas scatter a gradient into zeros (max and min along a dim) and gather it
    # back: rows for those ops give their create_graph gradients PyTorch's nodes.
    "scatter.src", "ScatterBackward0",
    lambda xp, self, src, *, dim, index: _scatter(xp, self, dim, index._data, src),
    {"self": lambda grad, dim, index:
         F.apply(SCATTER_VALUE, (grad,), {"dim": dim, "index": index, "value": 0}),
     "src": lambda grad, dim, index: F.apply(GATHER, (grad,), {"dim": dim, "index": index})},
)
SCATTER_VALUE = defop(
    "scatter.value", "ScatterBackward1",
    lambda xp, self, *, dim, index, value: _scatter(xp, self, dim, index._data, None, value),
    {"self": lambda grad, dim, index:
         F.apply(SCATTER_VALUE, (grad,), {"dim": dim, "index": index, "value": 0})},
)
SCATTER_ADD = defop(
    "scatter_add", "ScatterAddBackward0",
    lambda xp, self, src, *, dim, index: _scatter(xp, self, dim, index._data, src, add=True),
    {"self": lambda grad: grad,
     "src": lambda grad, dim, index: F.apply(GATHER, (grad,), {"dim": dim, "index": index})},
)
GATHER = defop(
    "gather", "GatherBackward0",
    lambda xp, self, *, dim, index: _gather(xp, self, dim, index._data),
    {"self": lambda grad, self_shape, dim, index:
         F.apply(SCATTER_ADD, (F.zeros(self_shape, dtype=grad.dtype, device=grad.device), grad),
                 {"dim": dim, "index": index})},
)


def _softmax(xp: Any, x: Any, dim: int) -> Any:
    shifted = x - x.max(axis=dim, keepdims=True)
    e = xp.exp(shifted)
    return e / e.sum(axis=dim, keepdims=True)


def _log_softmax(xp: Any, x: Any, dim: int) -> Any:
    shifted = x - x.max(axis=dim, keepdims=True)
    return shifted - xp.log(xp.exp(shifted).sum(axis=dim, keepdims=True))


SOFTMAX_BACKWARD_DATA = defop(
    # softmax's gradient as its own op (PyTorch's fused kernel), so a create_graph gradient is
    # one SoftmaxBackwardDataBackward0 over the incoming gradient and softmax's result.
    "_softmax_backward_data", "SoftmaxBackwardDataBackward0",
    lambda xp, grad_output, output, *, dim:
        output * (grad_output - (grad_output * output).sum(axis=dim, keepdims=True)),
    {"grad_output": lambda grad, output, dim:
         F.apply(SOFTMAX_BACKWARD_DATA, (grad, output), {"dim": dim}),
     "output": lambda grad, grad_output, output, dim:
         _softmax_double_backward(grad, grad_output, output, dim)},
    layout="contiguous",
)
SOFTMAX = defop(
    "_softmax", "SoftmaxBackward0",
    lambda xp, self, *, dim: _softmax(xp, self, dim),
    {"self": lambda grad, result, dim:
         F.apply(SOFTMAX_BACKWARD_DATA, (grad, result), {"dim": dim})},
    layout="contiguous",
)
LOG_SOFTMAX_BACKWARD_DATA = defop(
    # log_softmax's gradient as its own op (LogSoftmaxBackwardDataBackward0 under create_graph).
    "_log_softmax_backward_data", "LogSoftmaxBackwardDataBackward0",
    lambda xp, grad_output, output, *, dim:
        grad_output - xp.exp(output) * grad_output.sum(axis=dim, keepdims=True),
    {"grad_output": lambda grad, output, dim: grad - (grad * output.exp()).sum(dim, keepdim=True),
     "output": lambda grad, grad_output, output, dim:
         -grad_output.sum(dim, keepdim=True) * output.exp() * grad},
    layout="contiguous",
)
LOG_SOFTMAX = defop(
    "_log_softmax", "LogSoftmaxBackward0",
    lambda xp, self, *, dim: _log_softmax(xp, self, dim),
    {"self": lambda grad, result, dim:
         F.apply(LOG_SOFTMAX_BACKWARD_DATA, (grad, result), {"dim": dim})},
    layout="contiguous",
)

# ------------------------------------------------------------------ views and shape

VIEW = defop("view", "ViewBackward0", lambda xp, self, *, size: self.reshape(size),
             {"self": lambda grad, self_shape: grad.reshape(self_shape)}, view=True)
RESHAPE_ALIAS = defop("_reshape_alias", "ReshapeAliasBackward0",
                      lambda xp, self, *, size: self.reshape(size),
                      {"self": lambda grad, self_shape: grad.reshape(self_shape)}, view=True)
UNSAFE_VIEW = defop("_unsafe_view", "UnsafeViewBackward0",
                    lambda xp, self, *, size: self.reshape(size),
                    {"self": lambda grad, self_shape: grad.reshape(self_shape)})
def _as_strided_forward(xp: Any, self: Any, *, size: tuple[int, ...],
                        stride: tuple[int, ...], offset: int) -> Any:
    # ``self`` is a row-major tensor standing for its storage: element ``offset`` onwards.
    flat = self.reshape(-1)[offset:]
    return xp.lib.stride_tricks.as_strided(
        flat, shape=size, strides=tuple(s * flat.itemsize for s in stride))


def as_strided_backward(grad: Any, base_shape: tuple[int, ...], size: tuple[int, ...],
                        stride: tuple[int, ...], offset: int,
                        into: tuple[tuple[int, ...], tuple[int, ...], int] | None = None
                        ) -> Any:
    """PyTorch's ``as_strided_backward`` for a view of ``size``/``stride``/``offset`` (in
    elements) into a row-major base: size-1 dims of the gradient are squeezed and those the
    view expanded (stride 0) summed, from the last dim; the rest is copied into its place in
    zeros standing for the storage, returned as an ``as_strided`` view of the base's shape
    (or of the input's own ``into = (size, stride, offset)`` in that storage)."""
    from refimpl.ops.inplace import copy_

    kept_size: list[int] = []
    kept_stride: list[int] = []
    for i in range(len(size) - 1, -1, -1):
        if size[i] == 0:
            return F.zeros(base_shape, dtype=grad.dtype, device=grad.device)
        if size[i] == 1:
            grad = grad.squeeze(i)
        elif stride[i] == 0:
            grad = grad.sum(i)
        else:
            kept_size.insert(0, size[i])
            kept_stride.insert(0, stride[i])
    storage = F.zeros((math.prod(base_shape),), dtype=grad.dtype, device=grad.device)
    region = F.apply(AS_STRIDED, (storage,), {"size": tuple(kept_size),
                                             "stride": tuple(kept_stride), "offset": offset})
    copy_(region, grad)
    if into is not None:
        return F.apply(AS_STRIDED, (storage,), {"size": into[0], "stride": into[1],
                                               "offset": into[2]})
    return F.apply(AS_STRIDED, (storage,), {"size": tuple(base_shape),
                                           "stride": contiguous_strides(base_shape),
                                           "offset": 0})


def contiguous_strides(shape: tuple[int, ...]) -> tuple[int, ...]:
    strides, step = [], 1
    for n in reversed(shape):
        strides.insert(0, step)
        step *= max(n, 1)
    return tuple(strides)


AS_STRIDED = defop(
    "as_strided", "AsStridedBackward0", _as_strided_forward,
    {"self": lambda grad, self_shape, size, stride, offset:
         as_strided_backward(grad, self_shape, size, stride, offset)},
    view=True,
)
ALIAS = defop("alias", "AliasBackward0", lambda xp, self: self[...],
              {"self": lambda grad: grad}, view=True)
MAKE_DUAL = defop(
    # forward_ad.make_dual's result: a view of the primal (PyTorch records ViewBackward0).
    "_make_dual", "ViewBackward0", lambda xp, self: self[...], {"self": lambda grad: grad},
    view=True,
)
FW_PRIMAL = defop(
    # forward_ad.unpack_dual's primal: PyTorch's grad_fn prints as <Identity>.
    "_fw_primal", "Identity", lambda xp, self: self[...], {"self": lambda grad: grad},
    view=True,
)
T = defop("t", "TBackward0", lambda xp, self: self.T, {"self": lambda grad: grad.t()}, view=True)
TRANSPOSE = defop(
    "transpose.int", "TransposeBackward0",
    lambda xp, self, *, dim0, dim1: xp.swapaxes(self, dim0, dim1),
    {"self": lambda grad, dim0, dim1: grad.transpose(dim0, dim1)}, view=True,
)
PERMUTE = defop(
    "permute", "PermuteBackward0",
    lambda xp, self, *, dims: xp.transpose(self, dims),
    {"self": lambda grad, dims: grad.permute(tuple(sorted(range(len(dims)),
                                                          key=lambda i: dims[i])))},
    view=True,
)
UNSQUEEZE = defop("unsqueeze", "UnsqueezeBackward0",
                  lambda xp, self, *, dim: xp.expand_dims(self, dim),
                  {"self": lambda grad, dim: grad.squeeze(dim)}, view=True)
def _unsqueeze_to(grad: Any, shape: tuple[int, ...], dims: Any) -> Any:
    """PyTorch's ``unsqueeze_to``: put back each squeezed size-1 dim, in ascending order, one
    ``unsqueeze`` each (none at all when nothing was squeezed)."""
    for d in sorted({d % len(shape) for d in dims} if shape else ()):
        if shape[d] == 1:
            grad = grad.unsqueeze(d)
    return grad


SQUEEZE = defop("squeeze", "SqueezeBackward0", lambda xp, self: self.reshape(
    tuple(s for s in self.shape if s != 1)),
    {"self": lambda grad, self_shape: _unsqueeze_to(grad, self_shape, range(len(self_shape)))},
    view=True)
SQUEEZE_DIM = defop(
    "squeeze.dim", "SqueezeBackward1",
    lambda xp, self, *, dim: xp.squeeze(self, dim) if self.ndim and self.shape[dim] == 1
    else self[...],
    {"self": lambda grad, self_shape, dim: _unsqueeze_to(grad, self_shape, (dim,))}, view=True,
)
SQUEEZE_DIMS = defop(
    "squeeze.dims", "SqueezeBackward2",
    lambda xp, self, *, dim: xp.squeeze(
        self, tuple(d for d in dim if self.ndim and self.shape[d] == 1)),
    {"self": lambda grad, self_shape, dim: _unsqueeze_to(grad, self_shape, dim)}, view=True,
)
# The in-place view ops (t_, transpose_, squeeze_, unsqueeze_) change a tensor's shape where it
# stands: their rows compute the new view of the data and record the node PyTorch names with
# overload 1 or more; refimpl.ops.inplace.inplace_view puts it on the tensor itself. matmul
# squeezes its 1-D operand's helper dimension away with squeeze_ too (SqueezeBackward4).
T_ = defop("t_", "TBackward1", lambda xp, self: self.T, {"self": lambda grad: grad.t()})
TRANSPOSE_ = defop(
    "transpose_", "TransposeBackward1",
    lambda xp, self, *, dim0, dim1: xp.swapaxes(self, dim0, dim1),
    {"self": lambda grad, dim0, dim1: grad.transpose(dim0, dim1)},
)
UNSQUEEZE_ = defop("unsqueeze_", "UnsqueezeBackward1",
                   lambda xp, self, *, dim: xp.expand_dims(self, dim),
                   {"self": lambda grad, dim: grad.squeeze(dim)})
SQUEEZE_ = defop("squeeze_", "SqueezeBackward3", lambda xp, self: self.reshape(
    tuple(s for s in self.shape if s != 1)),
    {"self": lambda grad, self_shape: _unsqueeze_to(grad, self_shape, range(len(self_shape)))})
SQUEEZE_INPLACE_DIM = defop(
    "squeeze_.dim", "SqueezeBackward4",
    lambda xp, self, *, dim: xp.squeeze(self, dim) if self.ndim and self.shape[dim] == 1
    else self[...],
    {"self": lambda grad, self_shape, dim: _unsqueeze_to(grad, self_shape, (dim,))},
)
SQUEEZE_INPLACE_DIMS = defop(
    "squeeze_.dims", "SqueezeBackward5",
    lambda xp, self, *, dim: xp.squeeze(
        self, tuple(d for d in dim if self.ndim and self.shape[d] == 1)),
    {"self": lambda grad, self_shape, dim: _unsqueeze_to(grad, self_shape, dim)},
)
EXPAND = defop(
    "expand", "ExpandBackward0",
    lambda xp, self, *, size: _backend.expand(xp, self, size),
    {"self": lambda grad, self_shape: F.sum_to(grad, self_shape)}, view=True,
)


def _select_backward_forward(xp: Any, grad: Any, *, shape: tuple[int, ...], dim: int,
                             index: Any) -> Any:
    out = xp.zeros(shape, dtype=grad.dtype)
    key = (slice(None),) * dim + (index,)
    out[key] = grad
    return out


SELECT = defop(
    "select.int", "SelectBackward0",
    # The trailing ``...`` keeps a 0-d result a view instead of a NumPy scalar.
    lambda xp, self, *, dim, index: self[(slice(None),) * dim + (index, Ellipsis)],
    {"self": lambda grad, self_shape, dim, index:
         F.apply(SELECT_BACKWARD, (grad,), {"shape": self_shape, "dim": dim, "index": index})},
    view=True,
)
UNBIND = defop(
    # One piece of unbind (and of iter(tensor)). PyTorch records a single UnbindBackward0
    # with one output per piece; here each piece gets its own node of that name.
    "unbind.int", "UnbindBackward0",
    lambda xp, self, *, dim, index: self[(slice(None),) * dim + (index, Ellipsis)],
    {"self": lambda grad, self_shape, dim, index:
         F.apply(SELECT_BACKWARD, (grad,), {"shape": self_shape, "dim": dim, "index": index})},
    view=True,
    multi_output=True,
)
SELECT_BACKWARD = defop(
    "select_backward", "SelectBackwardBackward0", _select_backward_forward,
    {"grad": lambda grad, dim, index: F.apply(SELECT, (grad,), {"dim": dim, "index": index})},
)
SLICE = defop(
    "slice.Tensor", "SliceBackward0",
    lambda xp, self, *, dim, index: self[(slice(None),) * dim + (index,)],
    {"self": lambda grad, self_shape, dim, index:
         F.apply(SLICE_BACKWARD, (grad,), {"shape": self_shape, "dim": dim, "index": index})},
    view=True,
)
SLICE_BACKWARD = defop(
    "slice_backward", "SliceBackwardBackward0", _select_backward_forward,
    {"grad": lambda grad, dim, index: F.apply(SLICE, (grad,), {"dim": dim, "index": index})},
)
# One piece of split (and chunk), split with sizes and unsafe_split: the slice ``index`` along
# ``dim``. Each call records one node with an output per piece (refimpl.ops.functional.split);
# these rows give each piece its forward-mode tangent and, for the views, their view
# bookkeeping. unsafe_split's pieces are copies that may be written in place.
_PIECE_GRAD = {"self": lambda grad, self_shape, dim, index:
               F.apply(SLICE_BACKWARD, (grad,), {"shape": self_shape, "dim": dim, "index": index})}
SPLIT = defop("split.Tensor", "SplitBackward0",
              lambda xp, self, *, dim, index: self[(slice(None),) * dim + (index,)],
              _PIECE_GRAD, view=True, multi_output=True)
SPLIT_WITH_SIZES = defop("split_with_sizes", "SplitWithSizesBackward0",
                         lambda xp, self, *, dim, index: self[(slice(None),) * dim + (index,)],
                         _PIECE_GRAD, view=True, multi_output=True)
UNSAFE_SPLIT = defop("unsafe_split.Tensor", "UnsafeSplitBackward0",
                     lambda xp, self, *, dim, index: self[(slice(None),) * dim + (index,)].copy(),
                     _PIECE_GRAD)


def _diagonal_view(xp: Any, self: Any, offset: int, dim1: int, dim2: int) -> Any:
    out = xp.diagonal(self, offset, dim1, dim2)
    if isinstance(out, numpy.ndarray) and not out.flags.writeable:
        # NumPy hands out diagonals read-only (CuPy does not); PyTorch's are writable views.
        out.flags.writeable = True
    return out


def _diagonal_backward_forward(xp: Any, grad: Any, *, shape: tuple[int, ...], offset: int,
                               dim1: int, dim2: int) -> Any:
    out = xp.zeros(shape, dtype=grad.dtype)
    _diagonal_view(xp, out, offset, dim1, dim2)[...] = grad
    return out


DIAGONAL = defop(
    "diagonal", "DiagonalBackward0",
    lambda xp, self, *, offset=0, dim1=0, dim2=1: _diagonal_view(xp, self, offset, dim1, dim2),
    {"self": lambda grad, self_shape, offset, dim1, dim2:
         F.apply(DIAGONAL_BACKWARD, (grad,),
                 {"shape": self_shape, "offset": offset, "dim1": dim1, "dim2": dim2})},
    view=True,
)
DIAGONAL_BACKWARD = defop(
    "diagonal_backward", "DiagonalBackwardBackward0", _diagonal_backward_forward,
    {"grad": lambda grad, offset, dim1, dim2:
         F.apply(DIAGONAL, (grad,), {"offset": offset, "dim1": dim1, "dim2": dim2})},
)


def _repeat_backward(grad: Any, repeats: tuple[int, ...], shape: tuple[int, ...]) -> Any:
    """PyTorch's ``repeat_backward``: sum the leading dims repeat added, then split each
    repeated dim into (repeat, size) and sum over the repeats."""
    if 0 in repeats:
        return F.zeros(shape, dtype=grad.dtype, device=grad.device)
    for _ in range(len(repeats) - len(shape)):
        grad = grad.sum(0)
    sizes: list[int] = []
    summed: list[int] = []
    for n, r in zip(shape, repeats[len(repeats) - len(shape):], strict=True):
        if r != 1:
            sizes.append(r)
            summed.append(len(sizes) - 1)
        sizes.append(n)
    grad = grad.reshape(tuple(sizes))
    return grad.sum(tuple(summed)) if summed else grad


REPEAT = defop(
    "repeat", "RepeatBackward0",
    lambda xp, self, *, repeats: xp.tile(self, repeats).copy(),
    {"self": lambda grad, repeats, self_shape: _repeat_backward(grad, repeats, self_shape)},
)


def _cat_backward(grad: Any, tensors_shape: list[tuple[int, ...]], dim: int) -> list[Any]:
    out, start = [], 0
    for shape in tensors_shape:
        size = shape[dim] if shape else 0
        out.append(F.apply(SLICE, (grad,), {"dim": dim, "index": slice(start, start + size)}))
        start += size
    return out


def _channels_last(array: Any) -> bool:
    """PyTorch's ``is_channels_last_strides_2d``: a 4-D array whose strides order its dims as
    (N, H, W, C) from outermost to innermost."""
    if array.ndim != 4 or array.strides[1] == 0:
        return False
    smallest = 0
    for d in (1, 3, 2, 0):
        if array.shape[d] == 0 or array.strides[d] < smallest:
            return False
        if d == 0 and smallest == array.strides[1]:
            return False
        smallest = array.strides[d] * (array.shape[d] if array.shape[d] > 1 else 1)
    return True


def _cat_forward(xp: Any, *tensors: Any, dim: int = 0) -> Any:
    # PyTorch's cat lays its result out row-major, or channels-last when every input is
    # (NumPy would follow the inputs' layout, which changes what view() accepts later).
    out = xp.concatenate(tensors, axis=dim)
    if all(_channels_last(t) for t in tensors):
        return xp.transpose(xp.ascontiguousarray(xp.transpose(out, (0, 2, 3, 1))), (0, 3, 1, 2))
    return xp.ascontiguousarray(out)


CAT = defop(
    "cat", "CatBackward0",
    _cat_forward,
    {"tensors": lambda grad, tensors_shape, dim: _cat_backward(grad, tensors_shape, dim)},
)
STACK = defop(
    "stack", "StackBackward0",
    lambda xp, *tensors, dim=0: xp.stack(tensors, axis=dim),
    {"tensors": lambda grad, tensors_shape, dim:
         [grad.select(dim, i) for i in range(len(tensors_shape))]},
)

# ------------------------------------------------------------------ copies and moves

CLONE = defop("clone", "CloneBackward0", lambda xp, self: self.copy(),
              {"self": lambda grad: grad}, layout="elementwise")
# clone(memory_format=torch.contiguous_format), which contiguous() calls: a row-major copy.
CLONE_CONTIGUOUS = defop("clone.contiguous_format", "CloneBackward0",
                         lambda xp, self: self.copy(order="C"), {"self": lambda grad: grad},
                         layout="contiguous")
TO_COPY = defop(
    "_to_copy", "ToCopyBackward0",
    lambda xp, self, *, dtype, device: _backend.move_array(self, dtype, device),
    {"self": lambda grad, self_dtype, self_device:
         F.cast_grad(grad, self_dtype).to(device=self_device)},
    changes_device=True,
    layout="elementwise",
)
COPY_ = defop(
    "copy_", "CopyBackwards",
    lambda xp, self, src: xp.broadcast_to(src, self.shape).astype(self.dtype),
    {"self": lambda grad: F.zeros_like(grad),
     "src": lambda grad, src_device: grad.to(device=src_device)},
)
ZERO_ = defop("zero_", "ZeroBackward0", lambda xp, self: xp.zeros_like(self),
              {"self": lambda grad: F.zeros_like(grad)})
FILL_ = defop("fill_.Scalar", "FillBackward2",
              lambda xp, self, *, value: xp.full_like(
                  self, _dtype.checked_scalar(value, _backend.dtype_of(self),
                                              one_element=self.size == 1)),
              {"self": lambda grad: F.zeros_like(grad)})
FILL_TENSOR = defop("fill_.Tensor", "FillBackward3",
                    lambda xp, self, value: xp.broadcast_to(value, self.shape).astype(self.dtype),
                    {"self": lambda grad: F.zeros_like(grad),
                     "value": lambda grad: grad.sum()})

# ------------------------------------------------------------------ advanced indexing
# ``indices`` is PyTorch's list for index.Tensor and index_put: one entry per leading dim of
# ``self``, an index tensor (int64, or bool covering as many dims as it has) or None for a dim
# taken whole. NumPy's indexing of a tuple made from it places the result's dims as PyTorch
# does (the indexed dims together where they are adjacent, else first).


def _index_key(indices: list[Any]) -> tuple[Any, ...]:
    return tuple(slice(None) if i is None else i._data for i in indices)


def _index_put(xp: Any, self: Any, values: Any, indices: list[Any], accumulate: bool) -> Any:
    out = self.copy()
    key = _index_key(indices)
    if not accumulate:
        out[key] = values
        return out
    # Repeated indices add up: sum the values per target element with bincount (the same code
    # on NumPy and CuPy), on the linear positions the index selects.
    positions = xp.arange(out.size).reshape(out.shape)[key]
    values = xp.broadcast_to(values, positions.shape).reshape(-1)
    parts = (values.real, values.imag) if values.dtype.kind == "c" else (values,)
    sums = [xp.bincount(positions.reshape(-1), weights=part, minlength=out.size)
            for part in parts]
    total = sums[0] if len(sums) == 1 else sums[0] + 1j * sums[1]
    out += total.reshape(out.shape).astype(out.dtype)
    return out


class _Geometry(NamedTuple):
    shape: tuple[int, ...]
    strides: tuple[int, ...]

    @property
    def ndim(self) -> int:
        return len(self.shape)


def index_result_shape(shape: tuple[int, ...], indices: list[Any]) -> tuple[int, ...]:
    """The shape of ``tensor[indices]`` for a tensor of ``shape``, without indexing (so before
    any bounds check): the broadcast index shape replaces the indexed dims, in place when they
    are adjacent, else in front."""
    dims: list[Any] = []
    for index in indices:
        if index is None:
            dims.append(None)
        elif index.dtype.kind == "b":
            dims += [(int(index._data.sum()),)] + ["covered"] * (index.dim() - 1)
        else:
            dims.append(index._data.shape)
    dims += [None] * (len(shape) - len(dims))
    defined = [d for d, e in enumerate(dims) if e is not None and e != "covered"]
    common = tuple(numpy.broadcast_shapes(*(dims[d] for d in defined)))
    rest = [n for n, e in zip(shape, dims, strict=True) if e is None]
    if defined != list(range(defined[0], defined[-1] + 1)) and not any(
            e == "covered" for e in dims[defined[0]:defined[-1] + 1]):
        return common + tuple(rest)
    before = sum(1 for e in dims[:defined[0]] if e is None)
    return tuple(rest[:before]) + common + tuple(rest[before:])


def _index_forward(xp: Any, self: Any, indices: list[Any]) -> Any:
    """``self[indices]`` laid out in memory as PyTorch's index kernel lays it out.

    PyTorch iterates (TensorIterator) over ``self`` restrided to the result's shape (stride 0
    along the indexed dims, which are moved to the front when they are not adjacent) together
    with the index tensors broadcast to it; the result's dims follow their strides.
    """
    out = self[_index_key(indices)]
    if out.ndim < 2:
        return out
    entries: list[Any] = []
    for index in indices:
        if index is None:
            entries.append(None)
        elif index.dtype.kind == "b":
            entries += list(xp.nonzero(index._data))
        else:
            entries.append(index._data)
    shape, strides = list(self.shape), list(self.strides)
    entries += [None] * (len(shape) - len(entries))
    defined = [d for d, e in enumerate(entries) if e is not None]
    if defined != list(range(defined[0], defined[-1] + 1)):
        order = defined + [d for d, e in enumerate(entries) if e is None]
        shape, strides = [shape[d] for d in order], [strides[d] for d in order]
        entries = [entries[d] for d in order]
        defined = list(range(len(defined)))
    before, after = defined[0], defined[-1] + 1
    common = tuple(numpy.broadcast_shapes(*(entries[d].shape for d in defined)))
    src = _Geometry(tuple(shape[:before]) + common + tuple(shape[after:]),
                    tuple(strides[:before]) + (0,) * len(common) + tuple(strides[after:]))
    geometries = [src]
    for d in defined:
        e = entries[d]
        lead = len(common) - e.ndim
        st = tuple(0 if i < lead or e.shape[i - lead] != common[i] else e.strides[i - lead]
                   for i in range(len(common)))
        geometries.append(_Geometry((1,) * before + common + (1,) * (len(shape) - after),
                                    (0,) * before + st + (0,) * (len(shape) - after)))
    return lay_out_in_order(xp, out, iteration_order(out.shape, geometries), exact=True)


INDEX = defop(
    "index.Tensor", "IndexBackward0",
    lambda xp, self, *, indices: _index_forward(xp, self, indices),
    # PyTorch's index_backward: the gradient added into zeros at the indexed places.
    {"self": lambda grad, self_shape, indices:
         F.apply(INDEX_PUT_IMPL, (F.zeros(self_shape, dtype=grad.dtype, device=grad.device),
                                  grad), {"indices": indices, "accumulate": True})},
)


def _index_put_self_grad(grad: Any, indices: list[Any], values_shape: tuple[int, ...],
                         accumulate: bool) -> Any:
    if accumulate:
        return grad
    zeros = F.zeros(values_shape, dtype=grad.dtype, device=grad.device)
    return F.apply(INDEX_PUT, (grad, zeros), {"indices": indices, "accumulate": False})


def _index_put_forward(xp: Any, self: Any, values: Any, *, indices: list[Any],
                       accumulate: bool = False) -> Any:
    return _index_put(xp, self, values, indices, accumulate)


# index_put (item assignment) and _index_put_impl_ (index's gradient) share their formulas.
_INDEX_PUT_DERIVATIVES = {
    "self": lambda grad, indices, values_shape, accumulate:
        _index_put_self_grad(grad, indices, values_shape, accumulate),
    "values": lambda grad, indices: F.apply(INDEX, (grad,), {"indices": indices}),
}
INDEX_PUT = defop("index_put", "IndexPutBackward0", _index_put_forward, _INDEX_PUT_DERIVATIVES)
INDEX_PUT_IMPL = defop("_index_put_impl_", "IndexPutImplBackward0", _index_put_forward,
                       _INDEX_PUT_DERIVATIVES)

