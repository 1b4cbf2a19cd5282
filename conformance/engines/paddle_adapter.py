"""Adapter for PaddlePaddle (https://www.paddlepaddle.org.cn), run on the CPU.

Paddle's dynamic-graph API is close to PyTorch's, and Paddle ships its own PyTorch layer:
`paddle.compat` holds the functions and layers whose PyTorch form differs from Paddle's (a
`compat.nn.Linear` weight is `[out_features, in_features]`, as PyTorch's; `paddle.nn.Linear`'s
is transposed), and Paddle's torch proxy (`paddle.compat.enable_torch_proxy`) answers
`torch.X` with `paddle.compat.X` where there is one, else `paddle.X`. This adapter builds the
same lookup without installing the proxy's import hook (which would take over `import torch`
in the worker):

| case language | Paddle |
| --- | --- |
| `torch.X` | `paddle.compat.X`, else `paddle.X` (`torch.relu` is `paddle.nn.functional.relu`) |
| `nn.X`, `F.X` | `paddle.compat.nn.X`, else `paddle.nn.X`; the same under `functional` |
| `nn.Module` | `paddle.nn.Layer` (Paddle's own alias) |
| `torch.rand/randn/...`, module parameters | drawn from the runner's generator |

Tensors are Paddle's own, with Paddle's attributes: `requires_grad` (the negation of
`stop_gradient`), `is_leaf`, `grad_fn`, `grad`, `backward`, `detach`. Nothing is added to them:
what Paddle spells differently (`retain_grads` for `retain_grad`) or lacks fails the case, and
the expectations file says why. Nodes are Paddle's `GradNodeBase` objects, named by their
`name()` (`AddGradNode`, `GradNodeAccumulation`). Messages are compared by type only: Paddle
words every error in its own way.
"""

from __future__ import annotations

import importlib.metadata
import os
import warnings
from collections.abc import Sequence
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np

from conformance.engines.base import Engine, EngineUnavailable
from conformance.engines.generic import TorchLikeEngine

EXPECTATIONS = Path(__file__).resolve().parent.parent / "expectations" / "paddle.yaml"
OVERRIDES = {"relu": ("nn", "functional", "relu")}
"""`torch` members the torch proxy takes from elsewhere in Paddle (its GLOBAL_OVERRIDES)."""
LACKS = frozenset({"cuda", "meta", "forward_ad", "repr", "inference_mode", "batchnorm",
                   "anomaly_mode", "node_hooks", "backward_inputs", "backward_create_graph",
                   "warnings", "functional_api", "gradcheck", "module_hooks", "checkpoint"})
"""A CPU build; no meta device, forward-mode AD, inference mode, anomaly mode or PyTorch's
repr, and no gradcheck (`paddle.autograd` has none). Paddle's function-based Jacobians
(`paddle.incubate.autograd.vjp`, `jvp`, `Jacobian`, `Hessian`) have their own conventions
(a lazily evaluated, flattened Jacobian object) and are not mapped onto
`torch.autograd.functional`. Paddle's batch norm is `BatchNorm1D` with its own momentum
convention, not `nn.BatchNorm1d`. Its backward nodes take no hooks, `Tensor.backward` has
neither `inputs=` nor `create_graph=` (only `paddle.grad` has), and it emits none of
PyTorch's autograd warnings. `paddle.nn.Layer` has forward hooks under other names and
signatures (`register_forward_post_hook`) but no module backward hooks. Its activation
recomputation is `paddle.distributed.fleet.utils.recompute`, with its own arguments and no
`checkpoint_sequential`, not mapped onto `torch.utils.checkpoint`."""


def make_engine() -> Engine:
    """The entry point `paddle` (group `autograd_conformance.engines`)."""
    # Paddle's C++ core logs through glog: keep it to errors so reports stay readable.
    os.environ.setdefault("GLOG_minloglevel", "2")
    try:
        with warnings.catch_warnings():
            # Importing Paddle warns that ccache is missing (it is only needed to build
            # extensions), which would otherwise show in the first case that runs.
            warnings.simplefilter("ignore")
            import paddle
            import paddle.compat  # noqa: F401 - loaded for its PyTorch-layout layers
    except ImportError as exc:
        return EngineUnavailable("paddle", f"cannot import paddle: {exc}")
    return PaddleEngine(paddle)


class _Lookup(ModuleType):
    """A module that answers from `first`, then `then`, then its own overrides."""

    def __init__(self, name: str, first: Any, then: Any, **own: Any) -> None:
        super().__init__(name)
        self._first, self._then = first, then
        self.__dict__.update(own)

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        for source in (self._first, self._then):
            value = getattr(source, name, None)
            if value is not None and not isinstance(value, ModuleType):
                return value
        return getattr(self._then, name)


def _torch_view(paddle: Any) -> _Lookup:
    """`paddle` as the torch proxy presents it."""
    compat = paddle.compat
    functional = _Lookup("torch.nn.functional", compat.nn.functional, paddle.nn.functional)
    nn = _Lookup("torch.nn", compat.nn, paddle.nn, functional=functional,
                 Module=paddle.nn.Layer)
    own = {name: _resolve(paddle, path) for name, path in OVERRIDES.items()}
    # PyTorch keeps saved_tensors_hooks in torch.autograd.graph; Paddle in paddle.autograd.
    graph = ModuleType("torch.autograd.graph")
    graph.saved_tensors_hooks = paddle.autograd.saved_tensors_hooks
    autograd = _Lookup("torch.autograd", paddle.autograd, paddle.autograd, graph=graph)
    return _Lookup("torch", compat, paddle, nn=nn, autograd=autograd,
                   __version__=paddle.__version__, **own)


def _resolve(root: Any, path: Sequence[str]) -> Any:
    for part in path:
        root = getattr(root, part)
    return root


class PaddleEngine(TorchLikeEngine):
    """Paddle behind the torch proxy's names; the generic facade draws the random data."""

    expectations = EXPECTATIONS
    # A "(Fatal)" check of Paddle (PADDLE_ENFORCE), such as a second backward through a freed
    # graph ("The TensorWrappers of MultiplyGradNode do not exist"), arrives as SystemError,
    # which for another engine would mean a crash.
    refusal_types = (SystemError,)

    def __init__(self, paddle: Any) -> None:
        super().__init__("paddle", "paddle", lacks=LACKS, message_strictness="type",
                         torch_version="2.13.0",
                         repro_import="import paddle\nimport paddle.compat\n"
                         "from conformance.engines.paddle_adapter import _torch_view\n"
                         "torch = _torch_view(paddle)")
        self.paddle = paddle
        self.torch = _torch_view(paddle)
        self.version = importlib.metadata.version("paddlepaddle")
        paddle.set_device("cpu")

    def reset(self) -> None:
        self.paddle.set_grad_enabled(True)

    def to_numpy(self, tensor: Any) -> np.ndarray:
        return np.array(tensor.detach().cpu().numpy())

    def is_tensor(self, obj: Any) -> bool:
        return isinstance(obj, self.paddle.Tensor)

    def node_name(self, node: Any) -> str:
        return str(node.name())

    def next_functions(self, node: Any) -> Sequence[Any]:
        # Paddle lists the nodes themselves, not (node, input_nr) pairs as PyTorch does.
        return list(node.next_functions)

    def dtype_name(self, tensor: Any) -> str:
        return str(tensor.dtype).removeprefix("paddle.")

    def device_name(self, tensor: Any) -> str:
        return str(tensor.device)

    def assign_parameter(self, parameter: Any, values: np.ndarray) -> None:
        parameter.set_value(values.astype(self.to_numpy(parameter).dtype))
