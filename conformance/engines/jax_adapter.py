"""Adapter for JAX (https://github.com/jax-ml/jax), run on the CPU.

JAX differentiates functions, not tensors: `jax.grad(f)(x)` traces `f` afresh, and an array
carries no autograd state at all (no `requires_grad`, `grad`, `grad_fn`, `backward`, no grad
mode). The case language is PyTorch's tape model: a case builds tensors that require grad, runs
ops eagerly, then asks the tensors for their graph and gradients. `torch.autograd.grad(y, x)`
names the output, not the function that made it, so it has no faithful image in JAX either
(rebuilding the function would mean recording a tape, an autograd engine of the adapter's own
rather than JAX's). So the namespace gives only what JAX has in PyTorch's terms, the values:

| case language | JAX |
| --- | --- |
| `torch.tensor(v, dtype=d)` | `jnp.asarray(v, d)`, Python floats as float32 |
| `torch.zeros/ones/full/arange`, `*_like` | the `jnp` function of the same name |
| `torch.rand/randn/..._like` | values drawn from the runner's generator |
| `torch.exp/log/.../matmul/cat/stack/where/...` | `jnp`, `jax.nn` for activations |
| `torch.autograd.functional.vjp/jvp` | `jax.vjp`, `jax.jvp` |
| `torch.autograd.functional.jacobian` | `jax.jacrev` (`jax.jacfwd` for forward mode) |
| `torch.autograd.functional.hessian/hvp/vhp` | `jax.hessian`; `jax.jvp`/`jax.vjp` of `jax.grad` |
| `requires_grad=True` and everything else of autograd | absent: the case fails at that call |

64-bit types are switched on (`jax_enable_x64`), else JAX silently stores float64 as float32.
The features declared are what JAX arrays have: complex and half-precision dtypes and object
identity, and `functional_api`, the one part of PyTorch's autograd that is JAX's own model
(a function in, derivatives out). There the adapter only adapts calling conventions: a tuple of
inputs becomes separate arguments and `argnums`, a single input or output unpacks as PyTorch's
does, and a function returning one element is squeezed before `jax.hessian`. JAX has no strict
mode: `strict=True` is refused by the adapter (so never counts as the engine's refusal).
`create_graph` needs nothing: JAX's results can always be differentiated again. Without
`autograd_state` every case that asks a tensor for requires_grad, .grad or backward() is
unsupported, as are modules, devices, grad mode, hooks and the graph. Messages are compared by
type only.
"""

from __future__ import annotations

import importlib.metadata
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from conformance.engines.base import Engine, EngineUnavailable

EXPECTATIONS = Path(__file__).resolve().parent.parent / "expectations" / "jax.yaml"
DTYPES = ("bool", "complex64", "complex128", "float16", "float32", "float64", "int8", "int16",
          "int32", "int64", "uint8")
NUMPY_NAMES = ("abs", "exp", "log", "sin", "cos", "sqrt", "tanh", "matmul", "maximum",
               "minimum", "where", "stack", "zeros_like", "ones_like")
RENAMED = {"mm": "matmul"}
ACTIVATIONS = ("relu", "sigmoid", "softmax", "log_softmax")


def make_engine() -> Engine:
    """The entry point `jax` (group `autograd_conformance.engines`)."""
    try:
        import jax
    except ImportError as exc:
        return EngineUnavailable("jax", f"cannot import jax: {exc}")
    return JaxEngine(jax)


class JaxEngine(Engine):
    name = "jax"
    message_strictness = "type"
    torch_version = "2.13.0"
    expectations = EXPECTATIONS
    features: frozenset[str] = frozenset({"complex", "half", "identity", "functional_api"})

    def __init__(self, jax: Any) -> None:
        jax.config.update("jax_enable_x64", True)
        jax.config.update("jax_platforms", "cpu")
        self.jax = jax
        self.version = importlib.metadata.version("jax")

    def namespace(self, rng: np.random.Generator) -> dict[str, Any]:
        torch = _Torch(self.jax, rng)
        return {"torch": torch, "nn": torch.nn, "F": torch.nn.functional}

    def to_numpy(self, tensor: Any) -> np.ndarray:
        return np.asarray(tensor)

    def is_tensor(self, obj: Any) -> bool:
        return isinstance(obj, self.jax.Array)

    def grad_fn(self, tensor: Any) -> Any:
        return None  # JAX arrays record no history

    def dtype_name(self, tensor: Any) -> str:
        return str(tensor.dtype)

    def device_name(self, tensor: Any) -> str:
        return "cpu"


class _Namespace:
    """Members JAX has; anything else raises AttributeError naming what is missing."""

    def __init__(self, name: str, **members: Any) -> None:
        self._name = name
        self.__dict__.update(members)

    def __getattr__(self, attribute: str) -> Any:
        raise AttributeError(f"JAX has no counterpart of {self._name}.{attribute}")


class _Torch(_Namespace):
    """`torch` for a case run on JAX: array factories and functions, no autograd."""

    def __init__(self, jax: Any, rng: np.random.Generator) -> None:
        jnp = jax.numpy
        super().__init__("torch", Tensor=jax.Array)
        self._jnp, self._rng = jnp, rng
        for name in DTYPES:
            setattr(self, name, jnp.dtype(name))
        for name in NUMPY_NAMES:
            setattr(self, name, getattr(jnp, name))
        for name, target in RENAMED.items():
            setattr(self, name, getattr(jnp, target))
        self.cat = _axis_as_dim(jnp.concatenate, default=0)
        activations = {name: _axis_as_dim(getattr(jax.nn, name)) for name in ACTIVATIONS}
        self.__dict__.update(activations)
        self.nn = _Namespace("nn", functional=_Namespace("F", **activations))
        self.autograd = _Namespace("torch.autograd", functional=_Functional(jax))

    def tensor(self, data: Any, dtype: Any = None, **kwargs: Any) -> Any:
        _refuse_autograd(kwargs)
        array = np.asarray(data, dtype=dtype)
        if dtype is None and array.dtype == np.float64 and not isinstance(data, np.ndarray):
            array = array.astype(np.float32)  # PyTorch's default dtype for Python floats
        return self._jnp.asarray(array)

    def zeros(self, *size: Any, dtype: Any = None, **kwargs: Any) -> Any:
        _refuse_autograd(kwargs)
        return self._jnp.zeros(_sizes(size), dtype or np.float32)

    def ones(self, *size: Any, dtype: Any = None, **kwargs: Any) -> Any:
        _refuse_autograd(kwargs)
        return self._jnp.ones(_sizes(size), dtype or np.float32)

    empty = zeros

    def full(self, size: Any, fill_value: Any, *, dtype: Any = None, **kwargs: Any) -> Any:
        _refuse_autograd(kwargs)
        if dtype is None and isinstance(fill_value, float):
            dtype = np.float32
        return self._jnp.full(_sizes((size,)), fill_value, dtype)

    def arange(self, *args: Any, dtype: Any = None, **kwargs: Any) -> Any:
        _refuse_autograd(kwargs)
        return self._jnp.arange(*args, dtype=dtype)

    def sum(self, input: Any, dim: Any = None, keepdim: bool = False) -> Any:
        return self._jnp.sum(input, axis=_axis(dim), keepdims=keepdim)

    def mean(self, input: Any, dim: Any = None, keepdim: bool = False) -> Any:
        return self._jnp.mean(input, axis=_axis(dim), keepdims=keepdim)

    def _draw(self, draw: Callable[[tuple[int, ...]], np.ndarray], size: tuple[Any, ...],
              dtype: Any, kwargs: dict[str, Any]) -> Any:
        _refuse_autograd(kwargs)
        return self._jnp.asarray(draw(_sizes(size)).astype(dtype or np.float32))

    def rand(self, *size: Any, dtype: Any = None, **kwargs: Any) -> Any:
        return self._draw(self._rng.random, size, dtype, kwargs)

    def randn(self, *size: Any, dtype: Any = None, **kwargs: Any) -> Any:
        return self._draw(self._rng.standard_normal, size, dtype, kwargs)

    def rand_like(self, input: Any, *, dtype: Any = None, **kwargs: Any) -> Any:
        return self._draw(self._rng.random, (input.shape,), dtype or input.dtype, kwargs)

    def randn_like(self, input: Any, *, dtype: Any = None, **kwargs: Any) -> Any:
        return self._draw(self._rng.standard_normal, (input.shape,), dtype or input.dtype,
                          kwargs)

    def manual_seed(self, seed: int) -> None:
        self._rng.bit_generator.state = type(self._rng.bit_generator)(seed).state


class _Functional(_Namespace):
    """`torch.autograd.functional` on JAX's transformations."""

    def __init__(self, jax: Any) -> None:
        super().__init__("torch.autograd.functional")
        self._jax = jax

    @staticmethod
    def _args(inputs: Any) -> tuple[bool, tuple[Any, ...]]:
        given_tuple = isinstance(inputs, tuple)
        return given_tuple, inputs if given_tuple else (inputs,)

    @staticmethod
    def _no_strict(strict: bool) -> None:
        if strict:
            raise TypeError("JAX has no counterpart of strict=True: its derivative of an "
                            "independent input is zeros")

    def _default(self, v: Any, like: Any) -> Any:
        """PyTorch's default v, 1, where `like` is one tensor of one element; otherwise `v`
        as given (None included: JAX has no default and refuses it itself)."""
        if v is None and not isinstance(like, tuple) and self._jax.numpy.size(like) == 1:
            return self._jax.numpy.ones_like(like)
        return v

    def vjp(self, func: Callable[..., Any], inputs: Any, v: Any = None,
            create_graph: bool = False, strict: bool = False) -> tuple[Any, Any]:
        self._no_strict(strict)
        inputs_tuple, args = self._args(inputs)
        out, pullback = self._jax.vjp(func, *args)
        grads = pullback(self._default(v, out))
        return out, grads if inputs_tuple else grads[0]

    def jvp(self, func: Callable[..., Any], inputs: Any, v: Any = None,
            create_graph: bool = False, strict: bool = False) -> tuple[Any, Any]:
        self._no_strict(strict)
        inputs_tuple, args = self._args(inputs)
        tangents = self._default(v, inputs)
        # JAX takes the tangents as a tuple matching the primals; PyTorch lets a single input
        # take a single tensor.
        if not inputs_tuple and not isinstance(tangents, tuple) and tangents is not None:
            tangents = (tangents,)
        return self._jax.jvp(func, args, tangents)

    def jacobian(self, func: Callable[..., Any], inputs: Any, create_graph: bool = False,
                 strict: bool = False, vectorize: bool = False,
                 strategy: str = "reverse-mode") -> Any:
        self._no_strict(strict)
        inputs_tuple, args = self._args(inputs)
        transform = self._jax.jacfwd if strategy == "forward-mode" else self._jax.jacrev
        argnums = tuple(range(len(args))) if inputs_tuple else 0
        return transform(func, argnums=argnums)(*args)

    def _scalar(self, func: Callable[..., Any]) -> Callable[..., Any]:
        # PyTorch squeezes a one-element output to a scalar; any other output goes to JAX as
        # it is.
        def scalar(*args: Any) -> Any:
            out = func(*args)
            jnp = self._jax.numpy
            return jnp.squeeze(out) if not isinstance(out, tuple) and jnp.size(out) == 1 else out

        return scalar

    def hessian(self, func: Callable[..., Any], inputs: Any, create_graph: bool = False,
                strict: bool = False, vectorize: bool = False,
                outer_jacobian_strategy: str = "reverse-mode") -> Any:
        self._no_strict(strict)
        inputs_tuple, args = self._args(inputs)
        argnums = tuple(range(len(args))) if inputs_tuple else 0
        return self._jax.hessian(self._scalar(func), argnums=argnums)(*args)

    def _gradient(self, func: Callable[..., Any], args: tuple[Any, ...]) -> Callable[..., Any]:
        return self._jax.grad(self._scalar(func), argnums=tuple(range(len(args))))

    def _product(self, func: Callable[..., Any], inputs: Any, v: Any,
                 strict: bool) -> tuple[bool, tuple[Any, ...], tuple[Any, ...], Any]:
        self._no_strict(strict)
        inputs_tuple, args = self._args(inputs)
        vs = self._default(v, inputs)
        if not inputs_tuple and not isinstance(vs, tuple) and vs is not None:
            vs = (vs,)
        gradient = self._jax.grad(self._scalar(func), argnums=tuple(range(len(args))))
        return inputs_tuple, args, vs, gradient

    def hvp(self, func: Callable[..., Any], inputs: Any, v: Any = None,
            create_graph: bool = False, strict: bool = False) -> tuple[Any, Any]:
        inputs_tuple, args, vs, gradient = self._product(func, inputs, v, strict)
        _, product = self._jax.jvp(gradient, args, vs)
        return func(*args), product if inputs_tuple else product[0]

    def vhp(self, func: Callable[..., Any], inputs: Any, v: Any = None,
            create_graph: bool = False, strict: bool = False) -> tuple[Any, Any]:
        inputs_tuple, args, vs, gradient = self._product(func, inputs, v, strict)
        _, pullback = self._jax.vjp(gradient, *args)
        product = pullback(vs)
        return func(*args), product if inputs_tuple else product[0]


def _refuse_autograd(kwargs: dict[str, Any]) -> None:
    """Accept PyTorch's placement arguments for the CPU; refuse autograd state JAX lacks."""
    for key, value in kwargs.items():
        if key == "requires_grad" and not value:
            continue
        if key == "device" and str(value) == "cpu":
            continue
        raise TypeError(f"JAX arrays have no counterpart of {key}={value!r}: JAX differentiates "
                        "functions (jax.grad), not tensors")


def _axis_as_dim(function: Callable[..., Any], default: int | None = None
                  ) -> Callable[..., Any]:
    def call(input: Any, dim: int | None = default, **kwargs: Any) -> Any:
        return function(input) if dim is None else function(input, axis=dim)

    call.__name__ = function.__name__
    return call


def _axis(dim: Any) -> Any:
    return tuple(dim) if isinstance(dim, list) else dim


def _sizes(sizes: tuple[Any, ...]) -> tuple[int, ...]:
    """`f(2, 3)` and `f((2, 3))` alike, as PyTorch's size arguments."""
    if len(sizes) == 1 and not isinstance(sizes[0], int):
        return tuple(int(n) for n in sizes[0])
    return tuple(int(n) for n in sizes)
