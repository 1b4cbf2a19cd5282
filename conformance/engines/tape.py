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

`python -m conformance tape-ops` lists the rows and their signatures. The engine is held to the `semantics` level by
default: the nodes a create_graph backward records are named `EngineVjpBackward`, not after
the ops of PyTorch's formulas.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from conformance.engines.base import Engine
from conformance.engines.generic import TorchLikeEngine

# What the tape cannot offer on an engine's arrays: CUDA and meta tensors are refimpl's
# devices, forward AD would need the engine's jvp, and repr prints PyTorch's formatting of
# values the engine did not format.
TAPE_LACKS = frozenset({"cuda", "meta", "forward_ad", "repr"})


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

    def namespace(self, rng: np.random.Generator) -> dict[str, Any]:
        from refimpl.ops import kernels

        kernels.install(self.kernels)
        return super().namespace(rng)

    def close(self) -> None:
        from refimpl.ops import kernels

        kernels.uninstall()
        super().close()

    def repro_prelude(self) -> str:
        # The tape is this project's code: a repro goes through the adapter, loaded by name.
        return Engine.repro_prelude(self)

