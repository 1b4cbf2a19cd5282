"""Adapter for tinygrad (https://github.com/tinygrad/tinygrad) 0.12, on its PYTHON device.

tinygrad picks its device once, from the environment, the first time `Device.DEFAULT` is read
(`DEV=<name>`, or a variable named after the device set to 1), else the first device that
opens. Its CPU device compiles kernels with clang; the PYTHON device interprets them and needs
no compiler, so this module sets `DEV=PYTHON` before tinygrad is imported, unless the
environment already chose a device. 0.12 is the last release whose tensors have
`requires_grad`.

Tensors are tinygrad's own, which share many of PyTorch's names (`requires_grad`,
`requires_grad_`, `grad`, `backward`, `detach`, `clone`, `sum`, `reshape`, `view`, `expand`,
`relu`, `softmax`, ...); the `torch` namespace adds the factories and functions PyTorch has at
module level:

| case language | tinygrad |
| --- | --- |
| `torch.tensor(v, dtype=d, requires_grad=r)` | `Tensor(v, dtype=d, requires_grad=r)` |
| `torch.zeros/ones/full/empty/arange`, `*_like` | `Tensor.zeros/ones/full/empty/arange` |
| `torch.rand/randn/..._like` | values drawn from the runner's generator |
| `torch.float32`, `torch.int64`, ... | `dtypes.float32`, `dtypes.int64`, ... |
| `torch.exp(t)`, `torch.sum(t, d)`, `torch.relu(t)`, ... | the tensor method `t.exp()`, ... |
| `torch.cat/stack(ts, d)` | `Tensor.cat/stack(*ts, dim=d)` |
| `torch.where(c, a, b)` | `c.where(a, b)` |

tinygrad records no backward graph: a tensor's history is the lazy UOp graph of its forward
computation, differentiated as a whole when `backward()` runs. So there is no `grad_fn`,
`is_leaf`, node or `retain_grad`, and no grad mode; those reads fail the case with tinygrad's
own AttributeError. The features declared are those tinygrad has: tensor autograd state
(`requires_grad`, `grad`, `backward`), `inplace` (`assign`, item assignment, augmented
assignment; a write to a slice or a detached tensor does not reach its base, so no `views`),
object identity and float16. Messages are compared by type only.
"""

from __future__ import annotations

import importlib.metadata
import os
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np

from conformance.engines.base import Engine, EngineUnavailable
from conformance.engines.generic import TorchLikeEngine

EXPECTATIONS = Path(__file__).resolve().parent.parent / "expectations" / "tinygrad.yaml"
DTYPES = ("bool", "float16", "float32", "float64", "int32", "int64")
METHODS = ("abs", "exp", "log", "sin", "cos", "sqrt", "tanh", "relu", "sigmoid", "softmax",
           "log_softmax", "matmul", "maximum", "minimum", "sum", "mean")
"""`torch.<name>(t, ...)` is `t.<name>(...)` in tinygrad."""
FEATURES = frozenset({"autograd_state", "inplace", "identity", "half"})


def make_engine() -> Engine:
    """The entry point `tinygrad` (group `autograd_conformance.engines`)."""
    os.environ.setdefault("DEV", "PYTHON")
    try:
        import tinygrad
    except ImportError as exc:
        return EngineUnavailable("tinygrad", f"cannot import tinygrad: {exc}")
    return TinygradEngine(tinygrad)


def _torch_view(tinygrad: Any) -> ModuleType:
    """tinygrad's module-level API under PyTorch's names."""
    tensor_cls, dtypes = tinygrad.Tensor, tinygrad.dtypes
    torch = ModuleType("torch")
    torch.__version__ = importlib.metadata.version("tinygrad")
    torch.Tensor = tensor_cls
    for name in DTYPES:
        setattr(torch, name, getattr(dtypes, name))
    for name in METHODS:
        setattr(torch, name, _method(name))
    torch.mm = torch.matmul

    def tensor(data: Any, dtype: Any = None, device: Any = None,
               requires_grad: bool = False) -> Any:
        if isinstance(data, tensor_cls):
            data = data.numpy()
        elif isinstance(data, np.ndarray) and dtype is None and data.dtype == np.float64:
            dtype = dtypes.float64  # tinygrad keeps float64 data as float32 unless told
        return tensor_cls(data, dtype=dtype, requires_grad=requires_grad)

    def factory(name: str) -> Callable[..., Any]:
        def make(*size: Any, dtype: Any = None, device: Any = None,
                 requires_grad: bool = False) -> Any:
            return getattr(tensor_cls, name)(*_sizes(size), **_options(dtype, requires_grad))
        return make

    def like(name: str) -> Callable[..., Any]:
        def make(input: Any, *, dtype: Any = None, requires_grad: bool = False) -> Any:
            return getattr(tensor_cls, name)(*input.shape,
                                             **_options(dtype or input.dtype, requires_grad))
        return make

    def full(size: Any, fill_value: Any, *, dtype: Any = None, device: Any = None,
             requires_grad: bool = False) -> Any:
        return tensor_cls.full(_sizes((size,)), fill_value, **_options(dtype, requires_grad))

    def arange(*args: Any, dtype: Any = None, device: Any = None,
               requires_grad: bool = False) -> Any:
        return tensor_cls.arange(*args, **_options(dtype, requires_grad))

    torch.tensor, torch.full, torch.arange = tensor, full, arange
    for name in ("zeros", "ones", "empty"):
        setattr(torch, name, factory(name))
    torch.zeros_like, torch.ones_like = like("zeros"), like("ones")
    torch.cat = lambda tensors, dim=0: tensors[0].cat(*tensors[1:], dim=dim)
    torch.stack = lambda tensors, dim=0: tensors[0].stack(*tensors[1:], dim=dim)
    torch.where = lambda condition, input, other: condition.where(input, other)
    torch.get_default_dtype = lambda: dtypes.default_float
    torch.nn = _Missing("nn", functional=_Missing(
        "F", **{name: getattr(torch, name) for name in
                ("relu", "sigmoid", "softmax", "log_softmax")}))
    return torch


class _Missing(ModuleType):
    """A namespace tinygrad has only in part: anything else raises AttributeError."""

    def __init__(self, name: str, **members: Any) -> None:
        super().__init__(name)
        self.__dict__.update(members)

    def __getattr__(self, attribute: str) -> Any:
        raise AttributeError(f"tinygrad has no counterpart of {self.__name__}.{attribute}")


def _method(name: str) -> Callable[..., Any]:
    def call(input: Any, *args: Any, **kwargs: Any) -> Any:
        if "dim" in kwargs:
            kwargs["axis"] = kwargs.pop("dim")
        return getattr(input, name)(*args, **kwargs)

    call.__name__ = name
    return call


def _options(dtype: Any, requires_grad: bool) -> dict[str, Any]:
    """tinygrad's factories take dtype only when one is given (None is not a dtype to them)."""
    return {"requires_grad": requires_grad} | ({} if dtype is None else {"dtype": dtype})


def _sizes(sizes: tuple[Any, ...]) -> tuple[int, ...]:
    """`f(2, 3)` and `f((2, 3))` alike, as PyTorch's size arguments."""
    if len(sizes) == 1 and not isinstance(sizes[0], int):
        return tuple(int(n) for n in sizes[0])
    return tuple(int(n) for n in sizes)


class TinygradEngine(TorchLikeEngine):
    """tinygrad's tensors behind a `torch` module of its factories and functions."""

    expectations = EXPECTATIONS

    def __init__(self, tinygrad: Any) -> None:
        super().__init__("tinygrad", "tinygrad", message_strictness="type",
                         torch_version="2.13.0",
                         repro_import="import os\nos.environ.setdefault('DEV', 'PYTHON')\n"
                         "import tinygrad\n"
                         "from conformance.engines.tinygrad_adapter import _torch_view\n"
                         "torch = _torch_view(tinygrad)")
        self.tinygrad = tinygrad
        self.torch = _torch_view(tinygrad)
        self.version = self.torch.__version__
        self.device = str(tinygrad.Device.DEFAULT)

    def supports(self, feature: str) -> bool:
        return feature in FEATURES

    def reset(self) -> None:
        """tinygrad keeps no grad mode; `Tensor.training` is the only switch, left alone."""

    def to_numpy(self, tensor: Any) -> np.ndarray:
        return np.array(tensor.detach().numpy())

    def is_tensor(self, obj: Any) -> bool:
        return isinstance(obj, self.tinygrad.Tensor)

    def dtype_name(self, tensor: Any) -> str:
        return np.dtype(self.tinygrad.dtype._to_np_dtype(tensor.dtype)).name

    def device_name(self, tensor: Any) -> str:
        # The PYTHON and CPU devices both keep tensors in host memory: PyTorch's "cpu".
        device = str(tensor.device)
        return "cpu" if device.split(":")[0] in ("PYTHON", "CPU") else device.lower()
