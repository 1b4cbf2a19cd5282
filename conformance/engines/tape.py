"""The shipped tape: PyTorch's tensor-level autograd state for engines that have only arrays,
functions and vector-Jacobian products (JAX, MLX, HIPS autograd, `torch.func`).

A functional engine differentiates functions; the case language asks tensors for their state
(`requires_grad`, `.grad`, `grad_fn`, hooks, grad modes, freed graphs, version counters). That
state is the same for every such engine, so it is the project's, not each adapter's: the tape
is refimpl's autograd core with refimpl's op table running on the engine
(`refimpl.ops.kernels`). Each op's forward is the engine's function and each node's backward
the engine's `vjp` of it; under `create_graph=True` the gradients are nodes whose backward is
the engine's `vjp` again. What the engine owes is the math; a failure is the engine's math or
the adapter's table, never a tape written for one engine.

An adapter is a `Kernels` subclass (arrays in and out, `vjp`, and a table from the op table's
row names to the engine's functions) and a `TapeEngine` built on it::

    class MyKernels(Kernels):
        name = "mine"
        def __init__(self):
            self.ops = {"exp": mine.exp, "mul.Tensor": mine.multiply, ...}
        def to_engine(self, array): return mine.array(array)
        def to_numpy(self, value): return numpy.asarray(value)
        def vjp(self, fn, primals, cotangent): return mine.vjp(fn, primals, cotangent)

    def make_engine():
        return TapeEngine("mine", MyKernels(), version=mine.__version__)

`python -m conformance tape-ops` lists the rows and their signatures. The engine is held to the
`semantics` level by default: the nodes a create_graph backward records are named
`EngineVjpBackward`, not after the ops of PyTorch's formulas.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from conformance.engines.base import Engine
from conformance.engines.generic import TorchLikeEngine

# What the tape cannot offer on an engine's arrays: CUDA and meta tensors are refimpl's
# devices, and repr prints PyTorch's formatting of values the engine did not format. Forward AD
# is offered: a tangent is the engine's vjp of its vjp (refimpl's double-vjp trick).
FORMULA_ROWS = frozenset({"select_backward", "slice_backward", "diagonal_backward",
                          "_softmax_backward_data", "_log_softmax_backward_data",
                          "sigmoid_backward", "tanh_backward", "threshold_backward"})
"""Backward rows the tape's own formulas apply on the engine (see `refimpl.ops.kernels`): the
views' gradients, and the formulas of rows that save their result, which run where a
saved-tensor hook gave back another result."""
TAPE_LACKS = frozenset({"cuda", "meta", "repr"})


class TapeEngine(TorchLikeEngine):
    """An engine run on the tape: refimpl's autograd state, the kernels' math."""

    def __init__(self, name: str, kernels: Any, *, version: str, lacks: frozenset[str] =
                 frozenset(), expectations: Any = None,
                 message_strictness: str = "type") -> None:
        super().__init__(name, "refimpl", lacks=TAPE_LACKS | lacks,
                         torch_version=Engine.torch_version,
                         message_strictness=message_strictness)  # type: ignore[arg-type]
        self.kernels = kernels
        self.version = version
        self.level = "semantics"
        self.expectations = expectations
        self.repro_import = "import refimpl as torch"

    def close(self) -> None:
        from refimpl.ops import kernels

        kernels.uninstall()
        super().close()

    def repro_prelude(self) -> str:
        # The tape is this project's code: a repro goes through the adapter, loaded by name.
        return Engine.repro_prelude(self)



def numpy_like_ops(np_: Any, vjp: Callable[..., Any],
                   astype: Callable[[str], Any] = lambda name: name
                   ) -> dict[str, Callable[..., Any]]:
    """Functions for the op table's rows from a module with NumPy's API (`jax.numpy`,
    `autograd.numpy`, and `mlx.core` where it agrees); `vjp` is the engine's, as
    `Kernels.vjp`. Each is the plain NumPy spelling of the op, so its derivative is whatever
    the engine's derivative of that spelling is (`clamp` is `clip`, `relu` is `maximum(x, 0)`):
    an adapter replaces a function where its engine has its own (`jax.nn.relu`) and deletes
    what its engine lacks. `astype` turns a dtype's name into what the engine's `astype`
    takes."""

    constant = getattr(np_, "stop_gradient", lambda a: a)

    def axes(dim: Any) -> Any:
        # PyTorch reduces over every dimension when given none (dim=[]).
        return tuple(dim) if isinstance(dim, (list, tuple)) and dim else \
            None if isinstance(dim, (list, tuple)) else dim

    def scatter_grad(view: Callable[[Any], Any]) -> Callable[..., Any]:
        # The gradient of a view, placed back in a tensor of the input's shape: the transpose
        # of a linear map, which is its vjp at any point (zeros).
        def backward(grad: Any, *, shape: Any, **params: Any) -> Any:
            return vjp(lambda z: view(z, **params), [np_.zeros(tuple(shape), grad.dtype)],
                       grad)[0]
        return backward

    def index(indices: Any) -> tuple[Any, ...]:
        return tuple(slice(None) if i is None else i for i in indices)

    def along(x: Any, where: Any, dim: int) -> Any:
        # take_along_axis by fancy indexing, which every engine differentiates.
        grid = [np_.asarray(g) for g in np.indices(where.shape, sparse=True)]
        # Indices are constants of the function (MLX differentiates them unless told).
        grid[dim] = constant(where)
        return x[tuple(grid)]

    def placed(x: Any, read: Callable[[Any], Any], values: Any, accumulate: bool) -> Any:
        # Writing `values` where `read` reads from x, without item assignment (which arrays
        # of a functional engine lack): the transpose of the read puts them in place.
        zeros = np_.zeros_like(x)
        target = read(zeros).shape
        put = vjp(read, [zeros], np_.broadcast_to(values.astype(x.dtype), target))[0]
        if accumulate:
            return x + put
        hit = vjp(read, [zeros], np_.ones(target, x.dtype))[0]
        return np_.where(hit != 0, put, x)

    def index_put(x: Any, values: Any, *, indices: Any, accumulate: bool = False) -> Any:
        return placed(x, lambda z: z[index(indices)], values, accumulate)

    def scatter(x: Any, src: Any, dim: int, where: Any, accumulate: bool) -> Any:
        part = src[tuple(slice(0, n) for n in where.shape)] if src.ndim else src
        return placed(x, lambda z: along(z, where, dim), part, accumulate)

    def masked_scatter(x: Any, src: Any, *, mask: Any) -> Any:
        mask = np_.broadcast_to(mask, x.shape)
        count = int(np_.sum(mask))
        return placed(x, lambda z: z[mask], src.reshape(-1)[:count], False)

    def ordered(x: Any, dim: int, descending: bool) -> Any:
        # Stable, and descending keeps tied elements in their order, as PyTorch's sort.
        return np_.argsort(-x if descending else x, axis=dim, stable=True)

    def median(x: Any, dim: Any, keepdim: bool) -> Any:
        # PyTorch's median: the lower middle element, or the first NaN of a slice with one.
        flat = x.reshape(-1) if dim is None else x
        axis = 0 if dim is None else dim % max(flat.ndim, 1)
        order = np_.argsort(flat, axis=axis, stable=True)
        pick = np_.take(order, np_.asarray([(flat.shape[axis] - 1) // 2]), axis=axis)
        nan = np_.isnan(flat)
        pick = np_.where(np_.any(nan, axis=axis, keepdims=True),
                         np_.argmax(nan, axis=axis, keepdims=True), pick)
        values = along(flat, pick, axis)
        if dim is None:
            return values.reshape(())
        return (values, pick) if keepdim else (np_.squeeze(values, axis), np_.squeeze(pick, axis))

    def nanmedian(x: Any, dim: Any, keepdim: bool) -> Any:
        # The lower middle of the numbers of a slice (NaNs sort last); an all-NaN slice's
        # first NaN.
        flat = x.reshape(-1) if dim is None else x
        axis = 0 if dim is None else dim % max(flat.ndim, 1)
        order = np_.argsort(flat, axis=axis, stable=True)
        count = np_.sum(~np_.isnan(flat), axis=axis, keepdims=True)
        position = np_.maximum((count - 1) // 2, 0)
        pick = along(order, position, axis)
        values = along(flat, pick, axis)
        if dim is None:
            return values.reshape(())
        return (values, pick) if keepdim else (np_.squeeze(values, axis), np_.squeeze(pick, axis))

    def select(z: Any, *, dim: int, index: Any) -> Any:
        return z[(slice(None),) * dim + (index,)]

    def batch_norm(x: Any, w: Any, b: Any, *, training: bool, eps: float,
                   running_mean: Any = None, running_var: Any = None) -> Any:
        dims = (0, *range(2, x.ndim))
        shape = (1, -1) + (1,) * (x.ndim - 2)
        if training:
            mean = np_.mean(x, axis=dims)
            var = np_.mean((x - mean.reshape(shape)) ** 2, axis=dims)
        else:
            mean, var = running_mean, running_var
        out = (x - mean.reshape(shape)) / np_.sqrt(var.reshape(shape) + eps)
        return out * w.reshape(shape) + b.reshape(shape), mean, var

    def norm(x: Any, *, ord: float = 2.0) -> Any:
        a = np_.abs(x.reshape(-1))
        if ord == 2:
            return np_.linalg.norm(x.reshape(-1))
        if ord == np.inf:
            return np_.max(a)
        return np_.sum(a) if ord == 1 else np_.sum(a ** ord) ** (1.0 / ord)

    def nan_to_num(x: Any, *, nan: float = 0.0, posinf: Any = None, neginf: Any = None) -> Any:
        info = np.finfo(str(x.dtype).rsplit(".", 1)[-1])
        x = np_.where(np_.isnan(x), nan, x)
        x = np_.where(x == np.inf, info.max if posinf is None else posinf, x)
        return np_.where(x == -np.inf, info.min if neginf is None else neginf, x)

    def convolution(x: Any, w: Any, b: Any, *, stride: Any, padding: Any, dilation: Any,
                    groups: int) -> Any:
        # A 2-d convolution as sums of strided slices times weight columns (no engine-specific
        # convolution needed, and every engine differentiates slices and tensordot).
        (sh, sw), (ph, pw), (dh, dw) = stride, padding, dilation
        x = np_.pad(x, [(0, 0), (0, 0), (ph, ph), (pw, pw)], mode="constant")
        out_channels, per_group, kh, kw = w.shape
        oh = (x.shape[2] - dh * (kh - 1) - 1) // sh + 1
        ow = (x.shape[3] - dw * (kw - 1) - 1) // sw + 1
        per_out = out_channels // groups
        pieces = []
        for g in range(groups):
            total = 0
            for i in range(kh):
                for j in range(kw):
                    patch = x[:, g * per_group:(g + 1) * per_group,
                              i * dh:i * dh + sh * (oh - 1) + 1:sh,
                              j * dw:j * dw + sw * (ow - 1) + 1:sw]
                    column = w[g * per_out:(g + 1) * per_out, :, i, j]
                    total = total + np_.tensordot(patch, column, axes=([1], [1]))
            pieces.append(np_.transpose(total, (0, 3, 1, 2)))
        out = pieces[0] if groups == 1 else np_.concatenate(pieces, axis=1)
        return out if b is None else out + b.reshape(1, -1, 1, 1)

    def log_softmax(x: Any, *, dim: int) -> Any:
        shifted = x - np_.max(x, axis=dim, keepdims=True)
        return shifted - np_.log(np_.sum(np_.exp(shifted), axis=dim, keepdims=True))

    def reduced(loss: Any, reduction: str) -> Any:
        return np_.mean(loss) if reduction == "mean" else \
            np_.sum(loss) if reduction == "sum" else loss

    return {
        "abs": np_.abs, "ceil": np_.ceil, "floor": np_.floor, "round": np_.round,
        "trunc": np_.trunc, "cos": np_.cos, "sin": np_.sin, "exp": np_.exp, "log": np_.log,
        "sqrt": np_.sqrt, "tanh": np_.tanh, "sign": np_.sign, "neg": lambda x: -x,
        "reciprocal": lambda x: 1 / x, "conj": np_.conj, "real": np_.real,
        "sgn": np_.sign,
        "sigmoid": lambda x: 1 / (1 + np_.exp(-x)),
        "relu": lambda x: np_.maximum(x, 0),
        "atan2": np_.arctan2, "maximum": np_.maximum, "minimum": np_.minimum,
        "add.Scalar": lambda x, *, other: x + other,
        "add.Tensor": lambda x, y, *, alpha=1: x + y if alpha == 1 else x + alpha * y,
        "sub.Scalar": lambda x, *, other, alpha=1: x - alpha * other,
        "sub.Tensor": lambda x, y, *, alpha=1: x - y if alpha == 1 else x - alpha * y,
        "rsub.Scalar": lambda x, *, other, alpha=1: other - alpha * x,
        "mul.Scalar": lambda x, *, other: x * other, "mul.Tensor": lambda x, y: x * y,
        "div.Scalar": lambda x, *, other: x / other, "div.Tensor": lambda x, y: x / y,
        "pow.Scalar": lambda e, *, self: np_.power(self, e),
        "pow.Tensor_Scalar": lambda x, *, exponent: np_.power(x, exponent),
        "pow.Tensor_Tensor": np_.power,
        "mm": np_.matmul, "mv": np_.matmul, "dot": np_.dot,
        "addmm": lambda s, a, b, *, beta=1, alpha=1: alpha * np_.matmul(a, b) if beta == 0
            else beta * s + alpha * np_.matmul(a, b),
        "sum": np_.sum, "mean": np_.mean, "prod": np_.prod, "max": np_.max, "min": np_.min,
        "trace": np_.trace,
        "sum.dim_IntList": lambda x, *, dim, keepdim=False:
            np_.sum(x, axis=axes(dim), keepdims=keepdim),
        "mean.dim": lambda x, *, dim, keepdim=False: np_.mean(x, axis=axes(dim), keepdims=keepdim),
        "amax": lambda x, *, dim, keepdim=False: np_.max(x, axis=axes(dim), keepdims=keepdim),
        "amin": lambda x, *, dim, keepdim=False: np_.min(x, axis=axes(dim), keepdims=keepdim),
        "max.dim": lambda x, *, dim, keepdim=False: (
            np_.max(x, axis=dim, keepdims=keepdim), np_.argmax(x, axis=dim, keepdims=keepdim)),
        "min.dim": lambda x, *, dim, keepdim=False: (
            np_.min(x, axis=dim, keepdims=keepdim), np_.argmin(x, axis=dim, keepdims=keepdim)),
        "median": lambda x: median(x, None, False),
        "median.dim": lambda x, *, dim, keepdim=False: median(x, dim, keepdim),
        "nanmedian": lambda x: nanmedian(x, None, False),
        "nanmedian.dim": lambda x, *, dim, keepdim=False: nanmedian(x, dim, keepdim),
        "sort.stable": lambda x, *, dim=-1, descending=False: (
            along(x, ordered(x, dim, descending), dim % max(x.ndim, 1)),
            ordered(x, dim, descending)),
        "linalg_vector_norm": norm,
        "clamp": lambda x, *, min=None, max=None: np_.clip(x, min, max),
        "clamp.Tensor": lambda x, lo, hi: np_.clip(x, lo, hi),
        "hardtanh": lambda x, *, min_val=-1.0, max_val=1.0: np_.clip(x, min_val, max_val),
        "nan_to_num": nan_to_num,
        "where.self": lambda x, y, *, condition: np_.where(condition, x, y),
        "masked_fill.Scalar": lambda x, *, mask, value: np_.where(mask, value, x),
        "masked_fill.Tensor": lambda x, v, *, mask: np_.where(mask, v, x),
        "cat": lambda *xs, dim=0: np_.concatenate(xs, axis=dim),
        "stack": lambda *xs, dim=0: np_.stack(xs, axis=dim),
        "repeat": lambda x, *, repeats: np_.tile(x, tuple(repeats)),
        "gather": lambda x, *, dim, index: along(x, index, dim % max(x.ndim, 1)),
        "index.Tensor": lambda x, *, indices: x[index(indices)],
        "index_put": index_put, "_index_put_impl_": index_put,
        "scatter.src": lambda x, src, *, dim, index: scatter(x, src, dim, index, False),
        "scatter.value": lambda x, *, dim, index, value:
            scatter(x, np_.asarray(value, x.dtype), dim, index, False),
        "scatter_add": lambda x, src, *, dim, index: scatter(x, src, dim, index, True),
        "masked_scatter": masked_scatter,
        "masked_select": lambda x, *, mask: np_.broadcast_to(
            x, np.broadcast_shapes(x.shape, mask.shape))[
            np_.broadcast_to(mask, np.broadcast_shapes(x.shape, mask.shape))],
        "unsafe_split.Tensor": select,
        "_to_copy": lambda x, *, dtype, device: x.astype(astype(dtype.name)),
        "_unsafe_view": lambda x, *, size: np_.reshape(x, tuple(size)),
        "clone": lambda x: x, "clone.contiguous_format": lambda x: x,
        # The copy's value is the source's; the destination gives only shape and dtype.
        "copy_": lambda x, src: np_.broadcast_to(src.astype(x.dtype), x.shape),
        "fill_.Scalar": lambda x, *, value: np_.full_like(x, value),
        "fill_.Tensor": lambda x, v: np_.broadcast_to(v.astype(x.dtype), x.shape),
        "zero_": np_.zeros_like,
        "_softmax": lambda x, *, dim: np_.exp(log_softmax(x, dim=dim)),
        "_log_softmax": log_softmax,
        "mse_loss": lambda x, t, *, reduction="mean": reduced((x - t) ** 2, reduction),
        "native_batch_norm": batch_norm,
        "convolution": convolution,
        "_softmax_backward_data": lambda g, y, *, dim:
            y * (g - np_.sum(g * y, axis=dim, keepdims=True)),
        "_log_softmax_backward_data": lambda g, y, *, dim:
            g - np_.exp(y) * np_.sum(g, axis=dim, keepdims=True),
        "sigmoid_backward": lambda g, y: g * y * (1 - y),
        "tanh_backward": lambda g, y: g * (1 - y * y),
        "threshold_backward": lambda g, x, *, threshold=0: np_.where(x > threshold, g, 0),
        "select_backward": scatter_grad(select),
        "slice_backward": scatter_grad(select),
        "diagonal_backward": scatter_grad(lambda z, *, offset, dim1, dim2:
                                          np_.diagonal(z, offset, dim1, dim2)),
    }


def tape_ops(kernels: Any = None) -> list[tuple[str, str, str, str]]:
    """The op table's rows an engine on the tape supplies: (row name, PyTorch's node,
    signature, status). Status is `view` for the rows whose forward stays the tape's,
    `helper` for the rows only refimpl's own derivative formulas apply (the tape takes those
    derivatives from the engine's vjp instead), else `missing` or `ok` against `kernels` (`-`
    without one)."""
    import inspect

    from refimpl.ops.kernels import LAYOUT_ROWS
    from refimpl.ops.table import ROWS

    rows = []
    for name, row in sorted(ROWS.items()):
        signature = str(inspect.signature(row.raw_forward))
        signature = signature.replace("(xp, ", "(").replace("(xp: 'Any', ", "(")
        if row.is_view or name in LAYOUT_ROWS:
            status = "view"
        elif "_backward" in name and name not in FORMULA_ROWS:
            status = "helper"
        elif kernels is None:
            status = "-"
        else:
            status = "ok" if name in kernels.ops else "missing"
        rows.append((name, row.node, signature, status))
    return rows


def add_parser(commands: Any) -> None:
    parser = commands.add_parser(
        "tape-ops", help="list the op-table rows an engine on the shipped tape supplies")
    parser.add_argument("--engine", metavar="NAME",
                        help="mark which rows this tape engine's kernel table has")


def run(args: Any) -> int:
    from conformance.engines import load_engine

    kernels = None
    if args.engine:
        engine = load_engine(args.engine)
        kernels = getattr(engine, "kernels", None)
        if kernels is None:
            reason = engine.unavailable_reason or "it is not an engine on the tape"
            print(f"error: {args.engine}: {reason}")
            return 2
    for name, node, signature, status in tape_ops(kernels):
        print(f"{status:8}{name:28}{node:30}{signature}")
    return 0
