"""Adapter for JAX (https://github.com/jax-ml/jax), on the CPU, through the shipped tape.

JAX differentiates functions: an array carries no autograd state (no `requires_grad`, `.grad`,
`grad_fn`, grad mode). The case language is PyTorch's tape model, so the state comes from the
project's tape (`conformance.engines.tape`) and JAX supplies the math: each op of the op table
is the `jax.numpy` function below (`numpy_like_ops`, with JAX's own where it has one:
`jax.nn.relu`, `jax.nn.softmax`, `.at[]` updates, `lax.conv_general_dilated`), and every
gradient is `jax.vjp` of it, also under `create_graph` (a vjp of a vjp). A value or gradient a
case reads was computed by JAX; what differs from PyTorch is JAX's math or conventions, and the
expectations file says which.

64-bit types are switched on (`jax_enable_x64`), else JAX silently stores float64 as float32.
JAX's vjp of a holomorphic function is `g * f'(z)`; PyTorch's is `g * conj(f'(z))`, and the
tape conjugates around it (`conjugate = True`).
"""

from __future__ import annotations

import importlib.metadata
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from conformance.engines.base import Engine, EngineUnavailable
from conformance.engines.tape import TapeEngine, numpy_like_ops

EXPECTATIONS = Path(__file__).resolve().parent.parent / "expectations" / "jax.yaml"


def make_engine() -> Engine:
    """The entry point `jax` (group `autograd_conformance.engines`)."""
    try:
        import jax

        from refimpl.ops.kernels import Kernels
    except ImportError as exc:
        return EngineUnavailable("jax", f"cannot import jax: {exc}")
    jax.config.update("jax_enable_x64", True)
    jax.config.update("jax_platforms", "cpu")
    return TapeEngine("jax", _kernels(jax, Kernels), version=importlib.metadata.version("jax"),
                      expectations=EXPECTATIONS)


def _kernels(jax: Any, base: type) -> Any:
    jnp = jax.numpy

    class JaxKernels(base):  # type: ignore[misc, valid-type]
        name = "jax"
        conjugate = True

        def __init__(self) -> None:
            self.ops = numpy_like_ops(jnp, self.vjp)
            self.ops.update(_jax_ops(jax))

        def to_engine(self, array: np.ndarray) -> Any:
            # A copy: JAX may alias a NumPy buffer on the CPU, and the tape writes its arrays.
            return jnp.asarray(np.array(array, copy=True))

        def to_numpy(self, value: Any) -> np.ndarray:
            return np.asarray(value)

        def vjp(self, fn: Callable[..., Any], primals: Sequence[Any], cotangent: Any) -> Any:
            out, pullback = jax.vjp(fn, *primals)
            return pullback(cotangent.astype(out.dtype))

    return JaxKernels()


def _jax_ops(jax: Any) -> dict[str, Callable[..., Any]]:
    """Where JAX has its own function for an op, or NumPy's spelling has no JAX counterpart
    (in-place scatters are `.at[]` updates)."""
    jnp, lax = jax.numpy, jax.lax

    def along(index: Any, dim: int) -> tuple[Any, ...]:
        grid = list(jnp.indices(index.shape, sparse=True))
        grid[dim] = index
        return tuple(grid)

    def source(src: Any, index: Any) -> Any:
        return src[tuple(slice(0, n) for n in index.shape)]

    def index_put(x: Any, values: Any, *, indices: Any, accumulate: bool = False) -> Any:
        where = x.at[tuple(slice(None) if i is None else i for i in indices)]
        return where.add(values) if accumulate else where.set(values)

    def masked_scatter(x: Any, src: Any, *, mask: Any) -> Any:
        mask = jnp.broadcast_to(mask, x.shape)
        return x.at[mask].set(src.reshape(-1)[: int(mask.sum())])

    def convolution(x: Any, w: Any, b: Any, *, stride: Any, padding: Any, dilation: Any,
                    groups: int) -> Any:
        out = lax.conv_general_dilated(x, w, tuple(stride), [(p, p) for p in padding],
                                       rhs_dilation=tuple(dilation), feature_group_count=groups)
        return out if b is None else out + b.reshape(1, -1, 1, 1)

    return {
        "relu": jax.nn.relu,
        "sigmoid": jax.nn.sigmoid,
        "_softmax": lambda x, *, dim: jax.nn.softmax(x, axis=dim),
        "_log_softmax": lambda x, *, dim: jax.nn.log_softmax(x, axis=dim),
        "index_put": index_put,
        "_index_put_impl_": index_put,
        "scatter.src": lambda x, src, *, dim, index:
            x.at[along(index, dim)].set(source(src, index)),
        "scatter.value": lambda x, *, dim, index, value: x.at[along(index, dim)].set(value),
        "scatter_add": lambda x, src, *, dim, index:
            x.at[along(index, dim)].add(source(src, index)),
        "masked_scatter": masked_scatter,
        "convolution": convolution,
    }
