"""Adapter for HIPS autograd (https://github.com/HIPS/autograd), through the shipped tape.

autograd differentiates NumPy code: `autograd.numpy` wraps NumPy's functions, and
`autograd.make_vjp(f, argnum)` traces `f` and returns its vector-Jacobian product. Arrays are
plain NumPy arrays with no autograd state, so the state a case reads (`requires_grad`,
`.grad`, `grad_fn`, hooks, grad modes) is the project's tape (`conformance.engines.tape`), and
autograd supplies the math: every op of the op table is the `autograd.numpy` function of the
same name (`numpy_like_ops`), every gradient `make_vjp` of it, and under `create_graph` a vjp
of a vjp (autograd nests its traces).

autograd's vjp of a holomorphic function follows NumPy's conventions for complex numbers
(`g * f'(z)`), so the tape conjugates around it (`conjugate = True`). autograd has no float16
or bfloat16 derivatives it documents, and runs on the CPU only.
"""

from __future__ import annotations

import importlib.metadata
import warnings
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from conformance.engines.base import Engine, EngineUnavailable
from conformance.engines.tape import TapeEngine, numpy_like_ops

EXPECTATIONS = Path(__file__).resolve().parent.parent / "expectations" / "autograd.yaml"


def make_engine() -> Engine:
    """The entry point `autograd` (group `autograd_conformance.engines`)."""
    try:
        import autograd
        import autograd.numpy as anp

        from refimpl.ops.kernels import Kernels
    except ImportError as exc:
        return EngineUnavailable("autograd", f"cannot import autograd: {exc}")

    class AutogradKernels(Kernels):
        name = "autograd"
        conjugate = True

        def __init__(self) -> None:
            self.ops = numpy_like_ops(anp, self.vjp)

        def to_engine(self, array: np.ndarray) -> Any:
            return np.array(array, copy=True)

        def to_numpy(self, value: Any) -> np.ndarray:
            return np.asarray(value)

        def vjp(self, fn: Callable[..., Any], primals: Sequence[Any], cotangent: Any) -> Any:
            with warnings.catch_warnings():
                # The tape differentiates every op it records, constant ones (round) too.
                warnings.filterwarnings("ignore", "Output seems independent of input")
                pullback, out = autograd.make_vjp(fn, tuple(range(len(primals))))(*primals)
            dtype = getattr(out, "dtype", None)
            if dtype is not None and cotangent.dtype != dtype:
                cotangent = cotangent.astype(dtype)
            return pullback(cotangent)

    return TapeEngine("autograd", AutogradKernels(),
                      version=importlib.metadata.version("autograd"), expectations=EXPECTATIONS)
