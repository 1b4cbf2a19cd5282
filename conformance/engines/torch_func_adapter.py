"""`torch-func-tape`: PyTorch's own operators and `torch.func.vjp`, run on the shipped tape.

This engine is the tape's proof of faithfulness. Its math is PyTorch's (each op-table row is
the ATen operator of the same overload name, each backward `torch.func.vjp` of it), so any case
it fails where `torch` passes is the tape's fault: its state machinery, or how it feeds an
engine's `vjp`. `tests/conformance/test_tape.py` holds it to every case torch passes at the
`semantics` level, except the ones its expectations file explains.

Rows whose overload takes its arguments in another order or form than the row (`where.self`,
`pow.Scalar`, `cat`, ...) get a small function; every other row calls
`torch.ops.aten.<name>.<overload>` with the row's keywords.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from conformance.engines.base import Engine, EngineUnavailable
from conformance.engines.tape import TapeEngine

EXPECTATIONS = Path(__file__).resolve().parent.parent / "expectations" / "torch-func-tape.yaml"
REDUCTIONS = {"none": 0, "mean": 1, "sum": 2}


def make_engine() -> Engine:
    try:
        import torch
        import torch.func
    except ImportError as exc:
        return EngineUnavailable("torch-func-tape", f"cannot import torch: {exc}")
    try:
        import refimpl.ops.kernels as kernels
    except ImportError as exc:
        return EngineUnavailable("torch-func-tape", f"cannot import refimpl: {exc}")
    return TapeEngine("torch-func-tape", _kernels(torch, kernels.Kernels),
                      version=torch.__version__.split("+")[0], expectations=EXPECTATIONS)


def _kernels(torch: Any, base: type) -> Any:
    aten = torch.ops.aten

    def op(name: str) -> Callable[..., Any]:
        packet, _, overload = name.partition(".")
        overload_fn = getattr(getattr(aten, packet), overload or "default")

        def call(*arrays: Any, **params: Any) -> Any:
            return overload_fn(*arrays, **{k: _torch_value(torch, v) for k, v in params.items()})

        return call

    special: dict[str, Callable[..., Any]] = {
        "cat": lambda *t, dim=0: aten.cat(list(t), dim),
        "stack": lambda *t, dim=0: aten.stack(list(t), dim),
        "where.self": lambda s, o, *, condition: aten.where.self(condition, s, o),
        "pow.Scalar": lambda e, *, self: aten.pow.Scalar(self, e),
        "masked_fill.Tensor": lambda s, v, *, mask: aten.masked_fill.Tensor(s, mask, v),
        "masked_scatter": lambda s, src, *, mask: aten.masked_scatter(s, mask, src),
        "scatter.src": lambda s, src, *, dim, index: aten.scatter.src(s, dim, index, src),
        "scatter_add": lambda s, src, *, dim, index: aten.scatter_add(s, dim, index, src),
        "index_put": lambda s, v, *, indices, accumulate=False:
            aten.index_put(s, list(indices), v, accumulate),
        "_index_put_impl_": lambda s, v, *, indices, accumulate=False:
            aten.index_put(s, list(indices), v, accumulate),
        "index.Tensor": lambda s, *, indices: aten.index.Tensor(s, list(indices)),
        "sort.stable": lambda s, *, dim=-1, descending=False:
            aten.sort.stable(s, stable=True, dim=dim, descending=descending),
        "_softmax": lambda s, *, dim: aten._softmax(s, dim, False),
        "_softmax_backward_data": lambda g, y, *, dim:
            aten._softmax_backward_data(g, y, dim, y.dtype),
        "_log_softmax_backward_data": lambda g, y, *, dim:
            aten._log_softmax_backward_data(g, y, dim, y.dtype),
        "_log_softmax": lambda s, *, dim: aten._log_softmax(s, dim, False),
        "mse_loss": lambda s, t, *, reduction="mean": aten.mse_loss(s, t, REDUCTIONS[reduction]),
        "clone.contiguous_format": lambda s: aten.clone(s, memory_format=torch.contiguous_format),
        # The copy's value is src's; self only gives the shape and dtype (no gradient).
        "copy_": lambda s, src: torch.where(torch.ones_like(s, dtype=torch.bool),
                                            src.to(s.dtype), s),
        "fill_.Scalar": lambda s, *, value: aten.fill.Scalar(s, value),
        "fill_.Tensor": lambda s, v: aten.fill.Tensor(s, v),
        "zero_": lambda s: aten.zeros_like(s),
        "_to_copy": lambda s, *, dtype, device: s.to(_torch_value(torch, dtype), copy=True),
        "conj": lambda s: aten.conj_physical(s),
        "real": lambda s: aten.real(s).clone(),
        "linalg_vector_norm": lambda s, *, ord=2.0: aten.linalg_vector_norm(s, ord),
        "convolution": lambda i, w, b, *, stride, padding, dilation, groups: aten.convolution(
            i, w, b, list(stride), list(padding), list(dilation), False, [0, 0], groups),
        "native_batch_norm": lambda i, w, b, *, training, eps, running_mean=None,
            running_var=None: _batch_norm(aten, i, w, b, training, eps, running_mean,
                                          running_var),
        "slice.Tensor": lambda s, *, dim, index: s[(slice(None),) * dim + (index,)],
        "unsafe_split.Tensor": lambda s, *, dim, index: s[(slice(None),) * dim + (index,)]
            .clone(),
        "select_backward": lambda g, *, shape, dim, index: aten.select_backward(
            g, list(shape), dim, index),
        "slice_backward": lambda g, *, shape, dim, index: aten.slice_backward(
            g, list(shape), dim, *index.indices(shape[dim])),
        "diagonal_backward": lambda g, *, shape, offset, dim1, dim2: aten.diagonal_backward(
            g, list(shape), offset, dim1, dim2),
        "as_strided": lambda s, *, size, stride, offset: aten.as_strided(
            s.contiguous(), size, stride, offset),
        "_unsafe_view": lambda s, *, size: aten.reshape(s, size).clone(),
        "squeeze_": lambda s: aten.squeeze(s), "squeeze_.dim": lambda s, *, dim:
            aten.squeeze.dim(s, dim),
        "squeeze_.dims": lambda s, *, dim: aten.squeeze.dims(s, dim),
        "unsqueeze_": lambda s, *, dim: aten.unsqueeze(s, dim),
        "t_": lambda s: aten.t(s), "transpose_": lambda s, *, dim0, dim1:
            aten.transpose.int(s, dim0, dim1),
    }
    table = {}
    from refimpl.ops.table import ROWS

    for name in ROWS:
        if name in special:
            table[name] = special[name]
        else:
            packet, _, overload = name.partition(".")
            if overload in getattr(getattr(aten, packet, None), "overloads", lambda: [])() \
                    or not overload and hasattr(aten, packet):
                table[name] = op(name)

    class TorchFuncKernels(base):  # type: ignore[misc, valid-type]
        """PyTorch's tensors as the engine's arrays, `torch.func.vjp` as its vjp."""

        name = "torch.func"
        ops = table

        def to_engine(self, array: Any) -> Any:
            if array.dtype.name == "bfloat16":
                return torch.from_numpy(array.astype(np.float32)).to(torch.bfloat16)
            return torch.from_numpy(np.array(array, copy=True))

        def to_numpy(self, value: Any) -> np.ndarray:
            value = value.detach().resolve_conj().resolve_neg()
            if value._is_zerotensor():
                return np.zeros(tuple(value.shape), str(value.dtype).removeprefix("torch."))
            if value.dtype == torch.bfloat16:
                import ml_dtypes

                return value.float().numpy().astype(ml_dtypes.bfloat16)
            return value.numpy()

        def is_zero(self, value: Any) -> bool:
            return bool(value._is_zerotensor())

        def vjp(self, fn: Callable[..., Any], primals: Any, cotangent: Any) -> Any:
            _, pullback = torch.func.vjp(fn, *primals)
            return pullback(cotangent)

    return TorchFuncKernels()


def _torch_value(torch: Any, value: Any) -> Any:
    """refimpl's dtypes and devices as PyTorch's; lists as lists."""
    kind = type(value).__module__
    if kind.startswith("refimpl"):
        name = getattr(value, "name", None)
        return getattr(torch, name) if isinstance(name, str) and hasattr(torch, name) \
            else torch.device(str(value))
    if isinstance(value, tuple):
        return list(value)
    return value


def _batch_norm(aten: Any, input: Any, weight: Any, bias: Any, training: bool, eps: float,
                running_mean: Any, running_var: Any) -> Any:
    # refimpl updates the running statistics itself; the row computes the output and the
    # batch's statistics (mean and biased variance).
    if training:
        out, mean, invstd = aten.native_batch_norm(input, weight, bias, None, None, True, 0.0,
                                                   eps)
        return out, mean, 1 / invstd ** 2 - eps
    out, _, _ = aten.native_batch_norm(input, weight, bias, running_mean, running_var, False,
                                       0.0, eps)
    return out, running_mean, running_var
