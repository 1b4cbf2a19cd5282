"""Adapter for MyGrad (https://github.com/rsokl/MyGrad), an autograd engine with a NumPy API.

MyGrad's API is not PyTorch's, so the namespace translates the torch-shaped case language onto
MyGrad's own functions and adds nothing MyGrad lacks. `mg` is `mygrad`, `nnet` is
`mygrad.nnet`, `t` a tensor and `d` a dimension (passed on as MyGrad's `axis`):

| case language | MyGrad |
| --- | --- |
| `torch.tensor(v, requires_grad=r)` | `mg.Tensor(v, constant=not r)`, Python floats as float32 |
| `torch.zeros/ones/full/empty(...)`, `*_like` | NumPy data in `mg.Tensor(..., constant=...)` |
| `t.requires_grad`, `requires_grad_(f)` | `not t.constant`; a leaf is rebuilt with the new flag |
| `t.is_leaf`, `t.grad_fn` | `t.constant or t.creator is None`, `t.creator` (named by its class) |
| `t.retains_grad` | true for every non-constant non-leaf (MyGrad keeps all their grads) |
| `t.grad`, `t.grad = None` | `t.grad` (a NumPy array, wrapped as a constant), `t.null_grad()` |
| `t.backward(g)` | `t.backward(g)` |
| `t.detach()`, `t.data` | a constant tensor sharing the data |
| `torch.no_grad()` | `mg.no_autodiff` |
| `+ - * / ** @`, comparisons, `t[i]` | MyGrad's operators (comparisons give NumPy bools) |
| `add/sub/mul/div/pow/neg(o)` | `mg.add/subtract/multiply/divide/power/negative` |
| `abs/exp/log/sin/cos/tanh/sqrt`, also in `torch.` | the `mg` function of the same name |
| `matmul/mm/mv/dot`, `torch.matmul/mm` | `mg.matmul` |
| `sum/mean(d, keepdim)`, `torch.sum/mean` | `mg.sum/mean(axis=d, keepdims=keepdim)` |
| `max/min()`, `max/min(d, keepdim)` | `mg.max/min`; with `d` also `mg.argmax/argmin` as indices |
| `max/min(other)` | `mg.maximum/minimum` |
| `argmax(d, keepdim)` | `mg.argmax` (a constant integer tensor) |
| `view/reshape(*shape)` | `mg.reshape` |
| `t()`, `permute(*dims)` | `mg.transpose(t)`, `mg.transpose(t, dims)` |
| `transpose(d0, d1)` | `mg.swapaxes` |
| `unsqueeze(d)`, `squeeze(d)` | `mg.expand_dims`, `mg.squeeze(axis=d)` |
| `expand(*sizes)` | `mg.broadcast_to` (a size of -1 keeps that dimension) |
| `select(d, i)` | indexing with `i` at position `d` |
| `torch.cat/stack(ts, d)` | `mg.concatenate/stack(axis=d)` |
| `torch.where(c, a, b)` | `mg.where` |
| `clamp(lo, hi)` | `mg.clip` |
| `relu/sigmoid/softmax/log_softmax`, `torch.`/`F.` too | `nnet.relu/sigmoid/softmax/logsoftmax` |
| `clone()` | `mg.positive` (MyGrad's copy, `t.copy()`, leaves the graph; `positive` copies in it) |
| `double/float/half()`, `to(dtype)` | `t.astype(dtype, copy=False)` |
| `cpu()`, `to('cpu')` | the tensor itself |
| `dim()`, `numel()`, `size(d)` | `t.ndim`, `t.size`, `t.shape[d]` |
| `add_/sub_/mul_/div_/pow_(o)`, `exp_()` | the MyGrad function with `out=t` |
| `zero_()`, `fill_(v)`, `t[i] = v`, `t -= o` | `t[...] = 0`, `t[...] = v`, `t[i] = v`, `t -= o` |

Whatever has no MyGrad counterpart (`torch.autograd`, `enable_grad`, `set_grad_enabled`,
`is_grad_enabled`, `addmm`, `detach_`, `contiguous`, `nn` modules, devices, `retain_graph`,
`create_graph`, `inputs=`, an `AccumulateGrad.variable`) is left out, so a case using it fails or
is unsupported, and MyGrad's own behaviour (it keeps gradients of non-leaves, clears the graph
after backward, names nodes after its operations) shows in the results. The features declared
are those MyGrad has: tensor autograd state, `no_grad` (as `no_autodiff`), in-place ops and
views that write through to their base, nodes to introspect (`creator`) and float16. Messages
are compared by type only. Known failures are listed in `conformance/expectations/mygrad.yaml`.
"""

from __future__ import annotations

import importlib.metadata
import math
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from conformance.engines.base import Engine, EngineUnavailable

EXPECTATIONS = Path(__file__).resolve().parent.parent / "expectations" / "mygrad.yaml"
DTYPES = ("float16", "float32", "float64", "int8", "int16", "int32", "int64", "uint8", "bool")
UNARY = ("exp", "log", "sin", "cos", "tanh", "sqrt", "abs", "floor", "ceil", "trunc")
"""Elementwise functions with the same name in PyTorch and MyGrad."""
BINARY = {"add": "add", "sub": "subtract", "mul": "multiply", "div": "divide", "pow": "power"}
"""PyTorch's method name -> MyGrad's ufunc."""
ACTIVATIONS = ("relu", "sigmoid", "softmax", "log_softmax")
"""Tensor methods (translated to `mygrad.nnet`) that `torch` and `F` also have as functions."""


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
        # MyGrad mutates tensors in place (`out=`, item assignment, augmented assignment),
        # views share their base's memory, and it keeps its graph consistent. It has no
        # set_grad_enabled or grad-mode decorators (enable_grad is missing), no version counter,
        # detach_, retain_grad (it keeps every grad), backward(inputs=/create_graph=), hooks,
        # PyTorch's warnings, modules, complex dtypes, higher-order or forward-mode AD, repr in
        # PyTorch's format or devices (cuda, meta); and `.grad` is wrapped anew at each read, so
        # object identity is not observable. Those cases are unsupported.
        self.features = frozenset({"autograd_state", "no_grad", "inplace", "views",
                                   "node_introspection", "half"})

    def namespace(self, rng: np.random.Generator) -> dict[str, Any]:
        torch = _Torch(self.mg, rng)
        return {"torch": torch, "nn": torch.nn, "F": torch.nn.functional}

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

    def __init__(self, name: str, **members: Any) -> None:
        self._name = name
        self.__dict__.update(members)

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


def _mg() -> Any:
    import mygrad

    return mygrad


class Tensor:
    """A MyGrad tensor behind PyTorch's attribute names."""

    def __init__(self, raw: Any) -> None:
        self.raw = raw

    # -- properties -------------------------------------------------------------------------

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
    def data(self) -> Tensor:
        return _wrap_constant(self.raw.data)

    def dim(self) -> int:
        return int(self.raw.ndim)

    def numel(self) -> int:
        return int(self.raw.size)

    def size(self, dim: int | None = None) -> Any:
        return self.shape if dim is None else self.shape[dim]

    # -- autograd state ---------------------------------------------------------------------

    @property
    def requires_grad(self) -> bool:
        return not self.raw.constant

    @requires_grad.setter
    def requires_grad(self, flag: bool) -> None:
        if self.raw.creator is not None:
            raise AttributeError("MyGrad cannot change the constant flag of a computed tensor")
        self.raw = _mg().Tensor(self.raw.data, constant=not flag, copy=False)

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
    def retains_grad(self) -> bool:
        # MyGrad stores the gradient of every tensor that takes part in backpropagation.
        return not self.is_leaf

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

    # -- conversions ------------------------------------------------------------------------

    def item(self) -> Any:
        return self.raw.item()

    def tolist(self) -> Any:
        return self.raw.data.tolist()

    def numpy(self) -> np.ndarray:
        return self.raw.data

    def to(self, *args: Any, dtype: Any = None, **kwargs: Any) -> Tensor:
        for arg in (*args, *kwargs.values()):
            if isinstance(arg, Tensor):
                dtype = arg.dtype
            elif isinstance(arg, np.dtype):
                dtype = arg
            elif str(arg) != "cpu":
                raise ValueError(f"MyGrad tensors live on the CPU only, cannot move to {arg!r}")
        return self if dtype is None else self._astype(dtype)

    def double(self) -> Tensor:
        return self._astype(np.float64)

    def float(self) -> Tensor:
        return self._astype(np.float32)

    def half(self) -> Tensor:
        return self._astype(np.float16)

    def cpu(self) -> Tensor:
        return self

    def _astype(self, dtype: Any) -> Tensor:
        return _same_or_wrapped(self, self.raw.astype(dtype, copy=False))

    # -- operations -------------------------------------------------------------------------

    def sum(self, dim: Any = None, keepdim: bool = False) -> Tensor:
        return Tensor(_mg().sum(self.raw, axis=_axis(dim), keepdims=keepdim))

    def mean(self, dim: Any = None, keepdim: bool = False) -> Tensor:
        return Tensor(_mg().mean(self.raw, axis=_axis(dim), keepdims=keepdim))

    def max(self, dim: Any = None, keepdim: bool = False) -> Any:
        return self._extreme("max", "maximum", "argmax", dim, keepdim)

    def min(self, dim: Any = None, keepdim: bool = False) -> Any:
        return self._extreme("min", "minimum", "argmin", dim, keepdim)

    def _extreme(self, reduce: str, elementwise: str, arg: str, dim: Any, keepdim: bool) -> Any:
        mg = _mg()
        if isinstance(dim, Tensor):
            return Tensor(getattr(mg, elementwise)(self.raw, dim.raw))
        values = Tensor(getattr(mg, reduce)(self.raw, axis=dim, keepdims=keepdim))
        if dim is None:
            return values
        indices = getattr(mg, arg)(self.raw, axis=dim)
        if keepdim:
            indices = np.expand_dims(indices, dim)
        return values, _wrap_constant(np.asarray(indices))

    def argmax(self, dim: int | None = None, keepdim: bool = False) -> Tensor:
        return self._arg("argmax", dim, keepdim)

    def argmin(self, dim: int | None = None, keepdim: bool = False) -> Tensor:
        return self._arg("argmin", dim, keepdim)

    def _arg(self, name: str, dim: int | None, keepdim: bool) -> Tensor:
        indices = np.asarray(getattr(_mg(), name)(self.raw, axis=dim))
        if keepdim and dim is not None:
            indices = np.expand_dims(indices, dim)
        return _wrap_constant(indices)

    def amax(self, dim: Any = None, keepdim: bool = False) -> Tensor:
        return Tensor(_mg().amax(self.raw, axis=_axis(dim), keepdims=keepdim))

    def amin(self, dim: Any = None, keepdim: bool = False) -> Tensor:
        return Tensor(_mg().amin(self.raw, axis=_axis(dim), keepdims=keepdim))

    def prod(self, dim: Any = None, keepdim: bool = False) -> Tensor:
        return Tensor(_mg().prod(self.raw, axis=_axis(dim), keepdims=keepdim))

    def matmul(self, other: Any) -> Tensor:
        return Tensor(_mg().matmul(self.raw, _unwrap(other)))

    mm = mv = dot = matmul

    def neg(self) -> Tensor:
        return Tensor(_mg().negative(self.raw))

    def reshape(self, *shape: Any) -> Tensor:
        return Tensor(_mg().reshape(self.raw, _sizes(shape)))

    view = reshape

    def t(self) -> Tensor:
        return Tensor(_mg().transpose(self.raw))

    def transpose(self, dim0: int, dim1: int) -> Tensor:
        return Tensor(_mg().swapaxes(self.raw, dim0, dim1))

    def permute(self, *dims: Any) -> Tensor:
        return Tensor(_mg().transpose(self.raw, _sizes(dims)))

    def unsqueeze(self, dim: int) -> Tensor:
        return Tensor(_mg().expand_dims(self.raw, dim))

    def squeeze(self, dim: Any = None) -> Tensor:
        return Tensor(_mg().squeeze(self.raw, axis=_axis(dim)))

    def expand(self, *sizes: Any) -> Tensor:
        sizes = _sizes(sizes)
        own = (None,) * (len(sizes) - len(self.shape)) + self.shape
        shape = tuple(old if new == -1 else new for new, old in zip(sizes, own, strict=True))
        return Tensor(_mg().broadcast_to(self.raw, shape))

    def select(self, dim: int, index: int) -> Tensor:
        position = dim % len(self.shape)
        return Tensor(self.raw[(slice(None),) * position + (index,)])

    def clamp(self, min: Any = None, max: Any = None) -> Tensor:  # noqa: A002 - torch's names
        return Tensor(_mg().clip(self.raw, _unwrap(min), _unwrap(max)))

    def clone(self) -> Tensor:
        return Tensor(_mg().positive(self.raw))

    def relu(self) -> Tensor:
        return Tensor(_mg().nnet.relu(self.raw))

    def sigmoid(self) -> Tensor:
        return Tensor(_mg().nnet.sigmoid(self.raw))

    def softmax(self, dim: int) -> Tensor:
        return Tensor(_mg().nnet.softmax(self.raw, axis=dim))

    def log_softmax(self, dim: int) -> Tensor:
        return Tensor(_mg().nnet.logsoftmax(self.raw, axis=dim))

    def norm(self, p: Any = "fro", dim: Any = None, keepdim: bool = False) -> Tensor:
        # torch's "fro" of a vector or of a whole tensor is the 2-norm of its elements.
        ord = 2 if p == "fro" else p
        flat = self.raw if dim is not None else _mg().reshape(self.raw, (-1,))
        return Tensor(_mg().linalg.norm(flat, ord=ord, axis=_axis(dim), keepdims=keepdim))

    # -- in-place operations ----------------------------------------------------------------

    def exp_(self) -> Tensor:
        _mg().exp(self.raw, out=self.raw)
        return self

    def zero_(self) -> Tensor:
        self.raw[...] = 0
        return self

    def fill_(self, value: Any) -> Tensor:
        self.raw[...] = _unwrap(value)
        return self

    def __setitem__(self, index: Any, value: Any) -> None:
        self.raw[_index(index)] = _unwrap(value)

    def __getattr__(self, name: str) -> Any:
        # `x.exp()` and friends: MyGrad's function of the same name applied to the tensor.
        if name in UNARY:
            return lambda: Tensor(getattr(_mg(), name)(self.raw))
        raise AttributeError(f"MyGrad tensors have no counterpart of '{name}'")

    # -- Python protocol --------------------------------------------------------------------

    def __repr__(self) -> str:
        return f"tensor({self.raw.data!r}, requires_grad={self.requires_grad})"

    def __len__(self) -> int:
        return len(self.raw)

    def __bool__(self) -> bool:
        return bool(self.raw)

    def __float__(self) -> float:
        return float(self.raw)

    def __getitem__(self, index: Any) -> Tensor:
        return Tensor(self.raw[_index(index)])

    def __neg__(self) -> Tensor:
        return Tensor(-self.raw)

    def __abs__(self) -> Tensor:
        return Tensor(abs(self.raw))


def _binary(name: str) -> Callable[[Tensor, Any], Any]:
    def method(self: Tensor, other: Any) -> Any:
        result = getattr(self.raw, name)(_unwrap(other))
        return result if result is NotImplemented else _wrap(result)

    method.__name__ = name
    return method


def _in_place(name: str) -> Callable[[Tensor, Any], Any]:
    def method(self: Tensor, other: Any) -> Any:
        result = getattr(self.raw, name)(_unwrap(other))
        return result if result is NotImplemented else _same_or_wrapped(self, result)

    method.__name__ = name
    return method


def _method(function: str) -> Callable[..., Tensor]:
    def method(self: Tensor, other: Any) -> Tensor:
        return Tensor(getattr(_mg(), function)(self.raw, _unwrap(other)))

    return method


def _method_in_place(function: str) -> Callable[..., Tensor]:
    def method(self: Tensor, other: Any) -> Tensor:
        getattr(_mg(), function)(self.raw, _unwrap(other), out=self.raw)
        return self

    return method


for _op in ("add", "sub", "mul", "truediv", "pow", "matmul", "eq", "ne", "lt", "le", "gt", "ge"):
    setattr(Tensor, f"__{_op}__", _binary(f"__{_op}__"))
    if _op in ("add", "sub", "mul", "truediv", "pow", "matmul"):
        setattr(Tensor, f"__r{_op}__", _binary(f"__r{_op}__"))
    if _op in ("add", "sub", "mul", "truediv", "pow"):
        setattr(Tensor, f"__i{_op}__", _in_place(f"__i{_op}__"))
for _torch_name, _mygrad_name in BINARY.items():
    setattr(Tensor, _torch_name, _method(_mygrad_name))
    setattr(Tensor, f"{_torch_name}_", _method_in_place(_mygrad_name))


def _axis(dim: Any) -> Any:
    return tuple(dim) if isinstance(dim, list) else dim


def _sizes(sizes: tuple[Any, ...]) -> tuple[int, ...]:
    """`f(2, 3)` and `f((2, 3))` alike, as PyTorch's size arguments."""
    if len(sizes) == 1 and not isinstance(sizes[0], int):
        return tuple(int(n) for n in sizes[0])
    return tuple(int(n) for n in sizes)


def _unwrap(value: Any) -> Any:
    if isinstance(value, list | tuple):
        return type(value)(_unwrap(v) for v in value)
    return value.raw if isinstance(value, Tensor) else value


def _data(value: Any) -> Any:
    return value.raw.data if isinstance(value, Tensor) else value


def _index(key: Any) -> Any:
    """An index with the adapter's tensors (index tensors, masks) as NumPy arrays, inside
    tuples and lists too."""
    if isinstance(key, (tuple, list)):
        return type(key)(_index(item) for item in key)
    return _data(key)


def _wrap(result: Any) -> Tensor:
    """A MyGrad result as a tensor; NumPy results (comparisons) become constants."""
    return Tensor(result) if isinstance(result, _mg().Tensor) else _wrap_constant(result)


def _same_or_wrapped(tensor: Tensor, result: Any) -> Tensor:
    # MyGrad returns the very tensor when nothing changes (astype without a copy, in-place
    # ops), and so does PyTorch: keep the identity the case can observe.
    return tensor if result is tensor.raw else _wrap(result)


def _wrap_constant(array: Any) -> Tensor:
    return Tensor(_mg().Tensor(array, constant=True, copy=False))


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
        for name in ACTIVATIONS:
            setattr(self, name, getattr(Tensor, name))
        self.matmul = self.mm = lambda a, b: Tensor(mygrad.matmul(_unwrap(a), _unwrap(b)))
        for name, ufunc in (("maximum", "maximum"), ("minimum", "minimum"), ("pow", "power"),
                            ("atan2", "arctan2")):
            setattr(self, name, _binary(getattr(mygrad, ufunc)))
        self.nan, self.inf = math.nan, math.inf
        functional = {name: getattr(Tensor, name) for name in ACTIVATIONS}
        self.nn = _Missing("nn", functional=_Missing("F", **functional))

    def tensor(self, data: Any, dtype: Any = None, requires_grad: bool = False) -> Tensor:
        array = np.asarray(_data(data), dtype=dtype)
        if dtype is None and array.dtype == np.float64 and not isinstance(data, np.ndarray):
            array = array.astype(np.float32)  # PyTorch's default dtype for Python floats
        return Tensor(self._mg.Tensor(array, constant=not requires_grad))

    def _filled(self, fill: Callable[[tuple[int, ...]], np.ndarray], size: tuple[Any, ...],
                dtype: Any, requires_grad: bool) -> Tensor:
        values = fill(_sizes(size))
        return self.tensor(values.astype(dtype or np.float32), requires_grad=requires_grad)

    def prod(self, input: Tensor, dim: Any = None, keepdim: bool = False) -> Tensor:
        return input.prod(dim, keepdim)

    def argmin(self, input: Tensor, dim: Any = None, keepdim: bool = False) -> Tensor:
        return input.argmin(dim, keepdim)

    def eye(self, n: int, m: int | None = None, *, dtype: Any = None,
            requires_grad: bool = False) -> Tensor:
        return Tensor(self._mg.eye(n, m, dtype=dtype or np.float32, constant=not requires_grad))

    def amax(self, input: Tensor, dim: Any = None, keepdim: bool = False) -> Tensor:
        return input.amax(dim, keepdim)

    def amin(self, input: Tensor, dim: Any = None, keepdim: bool = False) -> Tensor:
        return input.amin(dim, keepdim)

    def arange(self, *args: Any, dtype: Any = None, requires_grad: bool = False) -> Tensor:
        values = np.arange(*args)
        if dtype is None and values.dtype == np.float64:
            dtype = np.float32  # PyTorch's default dtype
        return self.tensor(values.astype(dtype or values.dtype), requires_grad=requires_grad)

    def zeros(self, *size: Any, dtype: Any = None, requires_grad: bool = False) -> Tensor:
        return self._filled(np.zeros, size, dtype, requires_grad)

    def ones(self, *size: Any, dtype: Any = None, requires_grad: bool = False) -> Tensor:
        return self._filled(np.ones, size, dtype, requires_grad)

    def empty(self, *size: Any, dtype: Any = None, requires_grad: bool = False) -> Tensor:
        return self._filled(np.zeros, size, dtype, requires_grad)

    def full(self, size: Any, fill_value: Any, *, dtype: Any = None,
             requires_grad: bool = False) -> Tensor:
        values = np.full(_sizes((size,)), fill_value)
        if dtype is None and values.dtype == np.float64:
            dtype = np.float32
        return self.tensor(values.astype(dtype or values.dtype), requires_grad=requires_grad)

    def zeros_like(self, input: Tensor, *, dtype: Any = None, requires_grad: bool = False
                   ) -> Tensor:
        return self.zeros(input.shape, dtype=dtype or input.dtype, requires_grad=requires_grad)

    def ones_like(self, input: Tensor, *, dtype: Any = None, requires_grad: bool = False
                  ) -> Tensor:
        return self.ones(input.shape, dtype=dtype or input.dtype, requires_grad=requires_grad)

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

    def sum(self, input: Tensor, dim: Any = None, keepdim: bool = False) -> Tensor:
        return input.sum(dim, keepdim)

    def mean(self, input: Tensor, dim: Any = None, keepdim: bool = False) -> Tensor:
        return input.mean(dim, keepdim)

    def cat(self, tensors: Sequence[Tensor], dim: int = 0) -> Tensor:
        return Tensor(self._mg.concatenate(_unwrap(list(tensors)), axis=dim))

    def stack(self, tensors: Sequence[Tensor], dim: int = 0) -> Tensor:
        return Tensor(self._mg.stack(_unwrap(list(tensors)), axis=dim))

    def where(self, condition: Any, input: Any, other: Any) -> Tensor:
        return Tensor(self._mg.where(_data(condition), _unwrap(input), _unwrap(other)))


def _unary(function: Callable[[Any], Any]) -> Callable[[Any], Tensor]:
    return lambda tensor: Tensor(function(_unwrap(tensor)))


def _binary(function: Callable[[Any, Any], Any]) -> Callable[[Any, Any], Tensor]:
    return lambda input, other: Tensor(function(_unwrap(input), _unwrap(other)))

