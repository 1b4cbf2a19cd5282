"""Adapter for tinygrad (https://github.com/tinygrad/tinygrad) 0.14, on its compiled CPU device.

tinygrad picks its device once, from the environment (`DEV=<name>`), the first time
`Device.DEFAULT` is read. Its CPU device compiles kernels with a C compiler (`$CC`, else
`clang`); its PYTHON device interprets them and needs none. So `make_engine()` sets `DEV=CPU`
where that compiler is on PATH and `DEV=PYTHON` where it is not, before tinygrad is imported,
unless the environment already chose a device; the engine's `device` and its repro scripts say
which.

Tensors are tinygrad's own, which share many of PyTorch's names (`grad`, `backward`, `detach`,
`clone`, `sum`, `reshape`, `view`, `expand`, `relu`, `softmax`, ...); the `torch` namespace adds
the factories and functions PyTorch has at module level:

| case language | tinygrad |
| --- | --- |
| `torch.tensor(v, dtype=d, requires_grad=r)` | `Tensor(v, dtype=d)` |
| `torch.zeros/ones/full/empty/arange`, `*_like` | `Tensor.zeros/ones/full/empty/arange` |
| `torch.rand/randn/..._like` | values drawn from the runner's generator |
| `torch.float32`, `torch.int8`, ... | `dtypes.float32`, `dtypes.int8`, ... |
| `torch.nan`, `torch.inf` | `math.nan`, `math.inf` (what tinygrad's tensors take) |
| `torch.exp(t)`, `torch.sum(t, d)`, `torch.relu(t)`, ... | the tensor method `t.exp()`, ... |
| `torch.cat/stack(ts, d)` | `Tensor.cat/stack(*ts, dim=d)` |
| `torch.where(c, a, b)` | `c.where(a, b)` |

`requires_grad=`: since 0.13 tinygrad has no such flag. `backward()` fills `.grad` for every
live floating-point tensor of the graph (tinygrad 0.14: "every in-scope float tensor with a
device"), so every float tensor is differentiable, as if it required grad. The keyword of the
constructors and factories is therefore accepted and dropped: `True` is what tinygrad does
anyway, and `False` cannot be expressed (a case that relies on it fails on the `.grad` it then
gets). Reading or setting `.requires_grad` and calling `requires_grad_()` reach tinygrad's
tensors and fail with their own AttributeError: the adapter invents no flag.

tinygrad records no backward graph: a tensor's history is the lazy UOp graph of its forward
computation, differentiated as a whole when `backward()` runs. So there is no `grad_fn`,
`is_leaf`, node or `retain_grad`, and no grad mode; those reads fail too. The features declared
are those tinygrad has: tensor autograd state (`.grad` and `backward`, without the flag, as
above), `inplace` (`assign`, item assignment, augmented assignment; no `views`), object
identity and float16/bfloat16. Messages are compared by type only.
"""

from __future__ import annotations

import importlib.metadata
import inspect
import math
import os
import shutil
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np

from conformance.engines.base import Engine, EngineUnavailable
from conformance.engines.generic import TorchLikeEngine

EXPECTATIONS = Path(__file__).resolve().parent.parent / "expectations" / "tinygrad.yaml"
DTYPES = ("bool", "float16", "bfloat16", "float32", "float64", "int8", "int16", "int32",
          "int64", "uint8")
METHODS = ("abs", "exp", "log", "sin", "cos", "sqrt", "tanh", "relu", "sigmoid", "softmax",
           "log_softmax", "matmul", "max", "min", "maximum", "minimum", "sum", "mean", "floor",
           "ceil", "round", "trunc", "sign", "prod", "pow", "sort", "reciprocal", "argmin")
"""`torch.<name>(t, ...)` is `t.<name>(...)` in tinygrad."""
FEATURES = frozenset({"autograd_state", "inplace", "identity", "half"})


def choose_device() -> str:
    """`DEV` as the environment set it, else CPU where its C compiler is on PATH, else PYTHON."""
    if os.environ.get("DEV"):
        return os.environ["DEV"]
    return "CPU" if shutil.which(os.environ.get("CC", "clang")) else "PYTHON"


def make_engine() -> Engine:
    """The entry point `tinygrad` (group `autograd_conformance.engines`)."""
    os.environ["DEV"] = choose_device()
    try:
        import tinygrad
        from tinygrad.helpers import DEV
    except ImportError as exc:
        return EngineUnavailable("tinygrad", f"cannot import tinygrad: {exc}")
    if not DEV.device:
        # tinygrad read DEV when something imported it before this function set it: without
        # it tinygrad probes for a device and, where clang is missing, finds none.
        DEV.value = os.environ["DEV"]
    return TinygradEngine(tinygrad)


def _torch_view(tinygrad: Any) -> ModuleType:
    """tinygrad's module-level API under PyTorch's names."""
    tensor_cls, dtypes = tinygrad.Tensor, tinygrad.dtypes
    torch = ModuleType("torch")
    torch.__version__ = importlib.metadata.version("tinygrad")
    torch.Tensor = tensor_cls
    torch.nan, torch.inf = math.nan, math.inf
    for name in DTYPES:
        setattr(torch, name, getattr(dtypes, name))
    for name in METHODS:
        setattr(torch, name, _method(name))
    torch.mm = torch.matmul

    # `requires_grad` is dropped everywhere: see the module docstring.
    def tensor(data: Any, dtype: Any = None, device: Any = None,
               requires_grad: bool = False) -> Any:
        if isinstance(data, tensor_cls):
            data = data.numpy()
        return tensor_cls(data, dtype=dtype)

    def factory(name: str) -> Callable[..., Any]:
        def make(*size: Any, dtype: Any = None, device: Any = None,
                 requires_grad: bool = False) -> Any:
            return getattr(tensor_cls, name)(*_sizes(size), dtype=dtype)
        return make

    def like(name: str) -> Callable[..., Any]:
        def make(input: Any, *, dtype: Any = None, requires_grad: bool = False) -> Any:
            return getattr(tensor_cls, name)(*input.shape, dtype=dtype or input.dtype)
        return make

    def full(size: Any, fill_value: Any, *, dtype: Any = None, device: Any = None,
             requires_grad: bool = False) -> Any:
        return tensor_cls.full(_sizes((size,)), fill_value, dtype=dtype)

    def arange(*args: Any, dtype: Any = None, device: Any = None,
               requires_grad: bool = False) -> Any:
        return tensor_cls.arange(*args, dtype=dtype)

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
        method = getattr(input, name)
        # Reductions name the dimension axis=; sort takes dim= as PyTorch does.
        if "dim" in kwargs and "dim" not in inspect.signature(method).parameters:
            kwargs["axis"] = kwargs.pop("dim")
        return method(*args, **kwargs)

    call.__name__ = name
    return call


def _sizes(sizes: tuple[Any, ...]) -> tuple[int, ...]:
    """`f(2, 3)` and `f((2, 3))` alike, as PyTorch's size arguments."""
    if len(sizes) == 1 and not isinstance(sizes[0], int):
        return tuple(int(n) for n in sizes[0])
    return tuple(int(n) for n in sizes)


class TinygradEngine(TorchLikeEngine):
    """tinygrad's tensors behind a `torch` module of its factories and functions."""

    expectations = EXPECTATIONS

    def __init__(self, tinygrad: Any) -> None:
        device = os.environ["DEV"]
        super().__init__("tinygrad", "tinygrad", message_strictness="type",
                         torch_version="2.13.0",
                         repro_import=f"import os\nos.environ.setdefault('DEV', {device!r})\n"
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
        # A weak dtype (a tensor made from a Python number) has no NumPy twin: its own name.
        np_dtype = self.tinygrad.dtype._to_np_dtype(tensor.dtype)
        return tensor.dtype.name if np_dtype is None else np.dtype(np_dtype).name

    def device_name(self, tensor: Any) -> str:
        # The PYTHON and CPU devices both keep tensors in host memory: PyTorch's "cpu". A tensor
        # made from a Python number has no device in tinygrad (None).
        device = str(tensor.device)
        return "cpu" if device.split(":")[0] in ("PYTHON", "CPU") else device.lower()
