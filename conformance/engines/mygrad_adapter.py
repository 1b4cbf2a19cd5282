"""Adapter for MyGrad (https://github.com/rsokl/MyGrad), an autograd engine with a NumPy API.

MyGrad's API is not PyTorch's, so the namespace translates the torch-shaped case language onto
MyGrad's own mechanisms and adds nothing MyGrad lacks:

| case language | MyGrad |
| --- | --- |
| `torch.tensor(d, requires_grad=r)` | `mygrad.Tensor(d, constant=not r)`, floats as float32 |
| `t.requires_grad` | `not t.constant` |
| `t.is_leaf`, `t.grad_fn` | `t.constant or t.creator is None`, `t.creator` (named by its class) |
| `t.grad` | `t.grad` (a NumPy array, wrapped as a constant tensor) |
| `t.backward(g)` | `t.backward(g)` |
| `t.detach()` | a constant tensor sharing the data |
| `torch.no_grad()` | `mygrad.no_autodiff` |

Whatever has no MyGrad counterpart (`torch.autograd.grad`, `enable_grad`, modules, devices,
`retain_graph`, `create_graph`) is left out, so a case using it fails or is unsupported, and
MyGrad's own behaviour (it keeps gradients of non-leaves, clears the graph after backward)
shows in the results. Messages are compared by type only. Known failures are listed in
`conformance/expectations/mygrad.yaml`.
"""

from __future__ import annotations

import importlib.metadata
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from conformance.engines.base import Engine, EngineUnavailable

EXPECTATIONS = Path(__file__).resolve().parent.parent / "expectations" / "mygrad.yaml"
DTYPES = ("float16", "float32", "float64", "int8", "int16", "int32", "int64", "uint8", "bool")
UNARY = ("exp", "log", "sin", "cos", "tanh", "sqrt", "abs")


def make_engine() -> Engine:
    """The entry point `mygrad` (group `autograd_conformance.engines`)."""
    try:
        import mygrad
    except ImportError as exc:
        return EngineUnavailable("mygrad", f"cannot import mygrad: {exc}")
    return MyGradEngine(mygrad)


class MyGradEngine(Engine):
    name = "mygrad"
    message_strictness = "type"
    torch_version = "2.13.0"
    expectations = EXPECTATIONS

    def __init__(self, mygrad: Any) -> None:
        self.mg = mygrad
        self.version = importlib.metadata.version("mygrad")
        # No optional feature of spec/features.yaml (modules, complex, create_graph, in-place
        # ops, forward AD, cuda) has a counterpart here: such cases are unsupported.
        self.features = frozenset()

    def namespace(self, rng: np.random.Generator) -> dict[str, Any]:
        return {"torch": _Torch(self.mg, rng), "nn": _Missing("nn"), "F": _Missing("F")}

    def to_numpy(self, tensor: Any) -> np.ndarray:
        return np.array(tensor.raw.data)

    def is_tensor(self, obj: Any) -> bool:
        return isinstance(obj, Tensor)

    def grad_fn(self, tensor: Any) -> Any:
        return tensor.grad_fn

    def next_functions(self, node: Any) -> Sequence[Any]:
        return [function for function, _ in node.next_functions]

    def dtype_name(self, tensor: Any) -> str:
        return np.dtype(tensor.raw.dtype).name

    def device_name(self, tensor: Any) -> str:
        return "cpu"


class _Missing:
    """A namespace MyGrad has no counterpart for: any use raises AttributeError."""

    def __init__(self, name: str) -> None:
        self._name = name

    def __getattr__(self, attribute: str) -> Any:
        raise AttributeError(f"MyGrad has no counterpart of {self._name}.{attribute}")


class Node:
    """A MyGrad operation seen as a backward node; leaves get an `AccumulateGrad` node."""

    def __init__(self, name: str, inputs: Sequence[Any]) -> None:
        self.name = name
        self.inputs = inputs

    @property
    def next_functions(self) -> tuple[tuple[Any, int], ...]:
        return tuple((_node_of(t), 0) for t in self.inputs)


def _node_of(raw: Any) -> Node | None:
    if raw.constant:
        return None
    if raw.creator is None:
        return _named("AccumulateGrad", ())
    return _named(type(raw.creator).__name__, raw.creator.variables)


def _named(name: str, inputs: Sequence[Any]) -> Node:
    # `node_name` reads `type(node).__name__`, so each node kind is its own class.
    return type(name, (Node,), {})(name, inputs)


class Tensor:
    """A MyGrad tensor behind PyTorch's attribute names."""

    def __init__(self, raw: Any) -> None:
        self.raw = raw

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(self.raw.shape)

    @property
    def dtype(self) -> np.dtype:
        return self.raw.dtype

    @property
    def device(self) -> str:
        return "cpu"

    @property
    def requires_grad(self) -> bool:
        return not self.raw.constant

    @requires_grad.setter
    def requires_grad(self, flag: bool) -> None:
        if self.raw.creator is not None:
            raise AttributeError("MyGrad cannot change the constant flag of a computed tensor")
        import mygrad

        self.raw = mygrad.Tensor(self.raw.data, constant=not flag, copy=False)

    def requires_grad_(self, flag: bool = True) -> Tensor:
        self.requires_grad = flag
        return self

    @property
    def is_leaf(self) -> bool:
        # A constant takes no part in backpropagation, as a PyTorch tensor without grad_fn.
        return self.raw.constant or self.raw.creator is None

    @property
    def grad_fn(self) -> Node | None:
        return None if self.is_leaf else _node_of(self.raw)

    @property
    def grad(self) -> Tensor | None:
        grad = self.raw.grad
        return None if grad is None else _wrap_constant(grad)

    @grad.setter
    def grad(self, value: Any) -> None:
        if value is not None:
            raise AttributeError("MyGrad gradients can only be cleared (set to None)")
        self.raw.null_grad()

    def backward(self, gradient: Any = None) -> None:
        self.raw.backward(None if gradient is None else _data(gradient))

    def detach(self) -> Tensor:
        return _wrap_constant(self.raw.data)

    def retain_grad(self) -> None:
        """MyGrad keeps the gradient of every tensor in the graph: nothing to do."""

    def item(self) -> Any:
        return self.raw.item()

    def tolist(self) -> Any:
        return self.raw.data.tolist()

    def numpy(self) -> np.ndarray:
        return self.raw.data

    def sum(self, *args: Any, **kwargs: Any) -> Tensor:
        return Tensor(self.raw.sum(*args, **kwargs))

    def mean(self, *args: Any, **kwargs: Any) -> Tensor:
        return Tensor(self.raw.mean(*args, **kwargs))

    def reshape(self, *shape: Any) -> Tensor:
        return Tensor(self.raw.reshape(*shape))

    def __getattr__(self, name: str) -> Any:
        # `x.exp()` and friends: MyGrad's function of the same name applied to the tensor.
        if name in UNARY:
            import mygrad

            return lambda: Tensor(getattr(mygrad, name)(self.raw))
        raise AttributeError(f"MyGrad tensors have no counterpart of '{name}'")

    def __repr__(self) -> str:
        return f"tensor({self.raw.data!r}, requires_grad={self.requires_grad})"

    def __len__(self) -> int:
        return len(self.raw)

    def __bool__(self) -> bool:
        return bool(self.raw)

    def __float__(self) -> float:
        return float(self.raw)

    def __getitem__(self, index: Any) -> Tensor:
        return Tensor(self.raw[_data(index)])

    def __neg__(self) -> Tensor:
        return Tensor(-self.raw)


def _binary(name: str) -> Callable[[Tensor, Any], Any]:
    def method(self: Tensor, other: Any) -> Any:
        result = getattr(self.raw, name)(_unwrap(other))
        return result if result is NotImplemented else Tensor(result)

    method.__name__ = name
    return method


for _op in ("add", "sub", "mul", "truediv", "pow", "matmul", "eq", "ne", "lt", "le", "gt", "ge"):
    setattr(Tensor, f"__{_op}__", _binary(f"__{_op}__"))
    if _op in ("add", "sub", "mul", "truediv", "pow", "matmul"):
        setattr(Tensor, f"__r{_op}__", _binary(f"__r{_op}__"))


def _unwrap(value: Any) -> Any:
    return value.raw if isinstance(value, Tensor) else value


def _data(value: Any) -> Any:
    return value.raw.data if isinstance(value, Tensor) else value


def _wrap_constant(array: Any) -> Tensor:
    import mygrad

    return Tensor(mygrad.Tensor(array, constant=True, copy=False))


class _Torch:
    """`torch` for a case run on MyGrad."""

    def __init__(self, mygrad: Any, rng: np.random.Generator) -> None:
        self._mg = mygrad
        self._rng = rng
        for name in DTYPES:
            setattr(self, name, np.dtype(name))
        self.Tensor = Tensor
        self.no_grad = lambda: mygrad.no_autodiff
        for name in UNARY:
            setattr(self, name, _unary(getattr(mygrad, name)))
        self.matmul = lambda a, b: Tensor(mygrad.matmul(_unwrap(a), _unwrap(b)))

    def tensor(self, data: Any, dtype: Any = None, requires_grad: bool = False) -> Tensor:
        array = np.asarray(_data(data), dtype=dtype)
        if dtype is None and array.dtype == np.float64 and not isinstance(data, np.ndarray):
            array = array.astype(np.float32)  # PyTorch's default dtype for Python floats
        return Tensor(self._mg.Tensor(array, constant=not requires_grad))

    def _filled(self, fill: Callable[[tuple[int, ...]], np.ndarray], size: tuple[Any, ...],
                dtype: Any, requires_grad: bool) -> Tensor:
        if len(size) == 1 and not isinstance(size[0], int):
            size = tuple(size[0])
        values = fill(tuple(int(n) for n in size))
        return self.tensor(values.astype(dtype or np.float32), requires_grad=requires_grad)

    def zeros(self, *size: Any, dtype: Any = None, requires_grad: bool = False) -> Tensor:
        return self._filled(np.zeros, size, dtype, requires_grad)

    def ones(self, *size: Any, dtype: Any = None, requires_grad: bool = False) -> Tensor:
        return self._filled(np.ones, size, dtype, requires_grad)

    def rand(self, *size: Any, dtype: Any = None, requires_grad: bool = False) -> Tensor:
        return self._filled(self._rng.random, size, dtype, requires_grad)

    def randn(self, *size: Any, dtype: Any = None, requires_grad: bool = False) -> Tensor:
        return self._filled(self._rng.standard_normal, size, dtype, requires_grad)

    def rand_like(self, input: Tensor, *, dtype: Any = None, requires_grad: bool = False
                  ) -> Tensor:
        return self.rand(input.shape, dtype=dtype or input.dtype, requires_grad=requires_grad)

    def randn_like(self, input: Tensor, *, dtype: Any = None, requires_grad: bool = False
                   ) -> Tensor:
        return self.randn(input.shape, dtype=dtype or input.dtype, requires_grad=requires_grad)

    def manual_seed(self, seed: int) -> None:
        self._rng.bit_generator.state = type(self._rng.bit_generator)(seed).state


def _unary(function: Callable[[Any], Any]) -> Callable[[Any], Tensor]:
    return lambda tensor: Tensor(function(_unwrap(tensor)))
