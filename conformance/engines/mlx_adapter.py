"""Adapter for MLX (https://github.com/ml-explore/mlx, the `mlx[cpu]` build), through the
shipped tape.

MLX differentiates functions (`mx.grad`, `mx.vjp`); its arrays carry no autograd state, so the
state a case reads comes from the project's tape (`conformance.engines.tape`) and MLX supplies
the math: each op of the op table is the `mlx.core` function of NumPy's spelling
(`numpy_like_ops` over a thin shim for the few calls MLX spells otherwise), every gradient is
`mx.vjp` of it, and under `create_graph` a vjp of a vjp. Arrays are made with their exact dtype
(`mx.array` alone stores float64 as float32); float64 and complex64 run on MLX's CPU device.
"""

from __future__ import annotations

import importlib.metadata
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from conformance.engines.base import Engine, EngineUnavailable
from conformance.engines.tape import TapeEngine, numpy_like_ops

EXPECTATIONS = Path(__file__).resolve().parent.parent / "expectations" / "mlx.yaml"


def make_engine() -> Engine:
    """The entry point `mlx` (group `autograd_conformance.engines`)."""
    try:
        import mlx.core as mx

        from refimpl.ops.kernels import Kernels
    except ImportError as exc:
        return EngineUnavailable("mlx", f"cannot import mlx: {exc}")

    class MlxKernels(Kernels):
        name = "mlx"
        # MLX's vjp of a complex function already gives PyTorch's g * conj(f'(z)) (mx.vjp of
        # c * w returns conj(w)): the tape passes it through as it is.
        conjugate = False

        def __init__(self) -> None:
            self.ops = numpy_like_ops(_NumpyShim(mx), self.vjp, lambda name: _mlx_dtype(mx, name))

        def to_engine(self, array: np.ndarray) -> Any:
            return mx.array(array, dtype=_mlx_dtype(mx, array.dtype.name))

        def to_numpy(self, value: Any) -> np.ndarray:
            if value.dtype == mx.bfloat16:
                import ml_dtypes

                return np.array(value.astype(mx.float32)).astype(ml_dtypes.bfloat16)
            return np.array(value)

        def vjp(self, fn: Callable[..., Any], primals: Sequence[Any], cotangent: Any) -> Any:
            out = fn(*primals)
            if cotangent.dtype != out.dtype:
                cotangent = cotangent.astype(out.dtype)
            return mx.vjp(fn, list(primals), [cotangent])[1]

    return TapeEngine("mlx", MlxKernels(), version=importlib.metadata.version("mlx"),
                      expectations=EXPECTATIONS)


def _mlx_dtype(mx: Any, name: str) -> Any:
    dtype = getattr(mx, "bool_" if name == "bool" else name, None)
    if dtype is None:
        # complex128: MLX's one complex type is complex64.
        raise TypeError(f"MLX has no {name} arrays")
    return dtype


class _NumpyShim:
    """`mlx.core` under NumPy's names and signatures where MLX's differ."""

    def __init__(self, mx: Any) -> None:
        self._mx = mx

    def __getattr__(self, name: str) -> Any:
        return getattr(self._mx, name)

    def asarray(self, value: Any, dtype: Any = None) -> Any:
        return self._mx.array(value) if dtype is None else self._mx.array(value, dtype=dtype)

    # MLX differentiates through integer arrays unless told not to: indices computed from
    # the input are constants of the function, as they are to NumPy's and JAX's tracers.
    def argsort(self, x: Any, axis: int = -1, stable: bool = True) -> Any:
        # MLX's argsort is stable (merge sort on the CPU); it takes no `stable` argument.
        return self._mx.stop_gradient(self._mx.argsort(x, axis=axis))

    def argmax(self, x: Any, axis: Any = None, keepdims: bool = False) -> Any:
        return self._mx.stop_gradient(self._mx.argmax(x, axis=axis, keepdims=keepdims))

    def argmin(self, x: Any, axis: Any = None, keepdims: bool = False) -> Any:
        return self._mx.stop_gradient(self._mx.argmin(x, axis=axis, keepdims=keepdims))

    def concatenate(self, arrays: Sequence[Any], axis: int = 0) -> Any:
        return self._mx.concatenate(list(arrays), axis=axis)

    def stack(self, arrays: Sequence[Any], axis: int = 0) -> Any:
        return self._mx.stack(list(arrays), axis=axis)

    def dot(self, a: Any, b: Any) -> Any:
        return self._mx.inner(a, b)

    def tensordot(self, a: Any, b: Any, axes: Any) -> Any:
        return self._mx.tensordot(a, b, axes=[list(axes[0]), list(axes[1])])
