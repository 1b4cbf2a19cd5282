"""A generic adapter for engines whose module looks like `torch` (PyTorch itself, refimpl).

The namespace it hands to a case is the engine's own module behind a thin facade:

- `torch.rand`, `torch.randn`, `torch.rand_like`, `torch.randn_like` draw float64 numbers from
  the runner's NumPy generator and build the tensor with the engine's `tensor(...)`;
  `torch.manual_seed(s)` reseeds that generator in place.
- `nn.<Module>(...)` builds the module, then redraws every randomly initialised parameter (in
  `named_parameters()` order; constant ones and zeros such as BatchNorm's are kept) uniformly
  from `[-b, b]` with `b = 1/sqrt(fan_in)`: `fan_in` is
  `weight.shape[1] * prod(weight.shape[2:])` of the parameter's owner's `weight` when that has
  two or more dimensions (PyTorch's default bound for `Linear` and `Conv`), else the
  parameter's own `shape[-1]` (1 for a scalar).
- With `default_device` set (the `-cuda` engines), tensor factories without `device=` and new
  modules are placed on that device.
- The engine supports the `meta` feature when its module can create a tensor on the meta device
  (PyTorch and refimpl can); a meta tensor has no values, so `has_values` says False for it.

Everything else is the engine's module itself.
"""

from __future__ import annotations

import gc
import importlib
import math
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from conformance.engines.base import Engine, Strictness

WARM_UP = """
with torch.autograd.forward_ad.dual_level():
    torch.autograd.forward_ad.make_dual(torch.tensor(1.0), torch.tensor(1.0))
"""
MAX_NESTED = 16
"""More nested blocks of one kind (forward-AD levels, saved-tensor hooks, dispatch modes) than
any case opens: reset undoes at most this many."""
FACTORIES = (
    "tensor", "as_tensor", "zeros", "ones", "empty", "full", "arange", "linspace", "eye",
    "rand", "randn",
)


class TorchLikeEngine(Engine):
    """Adapter for a module with PyTorch's API, imported by name (`torch`, `refimpl`)."""

    _held: tuple[str, ...] = ()
    """What the last `reset` restored that a `with` block held beyond the case had set."""

    def __init__(
        self,
        name: str,
        module: str,
        *,
        default_device: str | None = None,
        lacks: frozenset[str] = frozenset(),
        torch_version: str | None = None,
        message_strictness: Strictness = "exact",
        device_check: Callable[[Any], str | None] | None = None,
        repro_import: str | None = None,
    ) -> None:
        self.name = name
        self.module_name = module
        self.default_device = default_device
        self.device = default_device or "cpu"
        self.lacks = lacks
        self.message_strictness = message_strictness
        self.repro_import = repro_import or f"import {module} as torch"
        self.torch = None
        try:
            self.torch = importlib.import_module(module)
        except Exception as exc:  # noqa: BLE001 - any import failure makes the engine unavailable
            self.unavailable_reason = f"cannot import {module}: {type(exc).__name__}: {exc}"
            return
        self.version = str(getattr(self.torch, "__version__", "unknown"))
        # The PyTorch whose messages the engine is held to: torch's own version for torch, the
        # oracle's otherwise (a torch-like engine's version number says nothing about that).
        self.torch_version = torch_version or (
            self.version.split("+", 1)[0] if module == "torch" else Engine.torch_version)
        if not _has_meta_device(self.torch):
            self.lacks = lacks | {"meta"}
        if device_check is not None:
            self.unavailable_reason = device_check(self.torch)
        self._warm_up()

    def _warm_up(self) -> None:
        # Some features load code on first use, and that code warns while loading (PyTorch's
        # forward AD pulls in deprecated torch.jit code): use them once now, so no case sees
        # warnings that depend on which case ran first.
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            try:
                exec(WARM_UP, {"torch": self.torch})
            except Exception:  # noqa: BLE001 - an engine without these features needs no warm-up
                pass

    def supports(self, feature: str) -> bool:
        """Every registered feature except those in `lacks` (PyTorch's API has them all)."""
        return feature not in self.lacks

    kernels: Any = None
    """For refimpl: the engine whose functions and vjps its op table runs on (the shipped tape,
    `conformance.engines.tape`), or None for refimpl's own NumPy math."""

    def namespace(self, rng: np.random.Generator) -> dict[str, Any]:
        if self.module_name == "refimpl":
            # One process may run refimpl and an engine on the tape in turn: each case gets the
            # op table's math it is meant to have.
            from refimpl.ops import kernels

            if self.kernels is None:
                kernels.uninstall()
            else:
                kernels.install(self.kernels)
        torch = _TorchFacade(self, rng)
        # `F` is looked up when a case first uses it: a module without nn.functional fails
        # those cases at that step (AttributeError), not every case before it starts.
        return {"torch": torch, "nn": torch.nn, "F": _Deferred(lambda: torch.nn.functional)}

    def reset(self) -> None:
        torch = self.torch
        if self._state_changes():
            # A case may leave a mode on from a generator suspended inside its `with`: once
            # collected, the generator is closed and its `with` blocks exit in order.
            gc.collect()
        held = []
        for setting in SETTINGS:
            value = setting.query(torch)
            if value == setting.default or setting.restore is None:
                continue
            if value is not None and setting.block_only:
                held.append(f"{setting.description.format(value)} by a `with` block still "
                            "held after the case")
            setting.restore(torch)
        # Restored now, but the held block's exit would set its old state again, in whichever
        # later case its holder lets go: the worker is not to be trusted (`state_leak`).
        self._held = tuple(held)

    def state_leak(self) -> str | None:
        changes = [*self._held, *self._state_changes()]
        return "; ".join(changes) if changes else None

    def _state_changes(self) -> list[str]:
        """The autograd state that differs from a fresh worker's, as far as the module can
        tell (an engine without a query has nothing to report for it)."""
        return [change for setting in SETTINGS
                if (change := setting.left_changed(self.torch)) is not None]

    def has_values(self, tensor: Any) -> bool:
        return not getattr(tensor, "is_meta", False)

    def to_numpy(self, tensor: Any) -> np.ndarray:
        if not self.has_values(tensor):
            raise ValueError(f"a tensor on {tensor.device} has no values to read")
        tensor = tensor.detach()
        if str(tensor.dtype).endswith("bfloat16"):
            tensor = tensor.float()
        if hasattr(tensor, "resolve_conj"):
            tensor = tensor.resolve_conj().resolve_neg()
        is_zero = getattr(tensor, "_is_zerotensor", None)
        if is_zero is not None and is_zero():
            # An immutable ZeroTensor has no storage to read; its values are its clone's.
            tensor = tensor.clone()
        if str(tensor.device) != "cpu":
            tensor = tensor.cpu()
        return np.asarray(tensor.numpy())

    def is_tensor(self, obj: Any) -> bool:
        return isinstance(obj, self.torch.Tensor)

    def repro_prelude(self) -> str:
        # A standalone script (the module alone, no conformance) when the adapter reads nodes,
        # dtypes and values the way PyTorch's API does; otherwise the script goes through the
        # adapter, loaded the way it was named, so its observations are the runner's. (An
        # engine built in code, never named, can only get the standalone script.)
        hooks = ("node_name", "next_functions", "dtype_name", "device_name", "to_numpy",
                 "grad_fn")
        if self.spec is not None and any(
                getattr(type(self), hook) is not getattr(TorchLikeEngine, hook) for hook in hooks):
            return super().repro_prelude()
        return f"{self.repro_import}\nnn = torch.nn\nF = torch.nn.functional\n"

    def assign_parameter(self, parameter: Any, values: np.ndarray) -> None:
        """Overwrite a parameter's data in place, outside the graph."""
        torch = self.torch
        with torch.no_grad():
            parameter.copy_(torch.tensor(values, dtype=parameter.dtype, device=parameter.device))


class _TorchFacade:
    """`torch` as a case sees it: the engine module with random data from the runner."""

    def __init__(self, engine: TorchLikeEngine, rng: np.random.Generator) -> None:
        self._engine = engine
        self._module = engine.torch
        self._rng = rng
        self.nn = _NnFacade(self)

    def __getattr__(self, name: str) -> Any:
        value = getattr(self._module, name)
        device = self._engine.default_device
        if device is not None and name in FACTORIES:
            return _on_device(value, device)
        return value

    def _draw(self, draw: Callable[[tuple[int, ...]], np.ndarray], size: tuple[Any, ...],
              dtype: Any, device: Any, requires_grad: bool) -> Any:
        if len(size) == 1 and not isinstance(size[0], int):
            size = tuple(size[0])
        shape = tuple(int(n) for n in size)
        if dtype is None:
            default = getattr(self._module, "get_default_dtype", None)
            dtype = default() if default is not None else self._module.float32
        values = draw(shape)
        if "complex" in str(dtype):
            values = values + 1j * draw(shape)
        device = device if device is not None else self._engine.default_device
        kwargs = {"dtype": dtype, "requires_grad": requires_grad}
        if device is not None:
            kwargs["device"] = device
        return self._module.tensor(values, **kwargs)

    def rand(self, *size: Any, dtype: Any = None, device: Any = None,
             requires_grad: bool = False) -> Any:
        return self._draw(self._rng.random, size, dtype, device, requires_grad)

    def randn(self, *size: Any, dtype: Any = None, device: Any = None,
              requires_grad: bool = False) -> Any:
        return self._draw(self._rng.standard_normal, size, dtype, device, requires_grad)

    def rand_like(self, input: Any, *, dtype: Any = None, device: Any = None,
                  requires_grad: bool = False) -> Any:
        return self._draw(self._rng.random, tuple(input.shape), dtype or input.dtype,
                          device or input.device, requires_grad)

    def randn_like(self, input: Any, *, dtype: Any = None, device: Any = None,
                   requires_grad: bool = False) -> Any:
        return self._draw(self._rng.standard_normal, tuple(input.shape), dtype or input.dtype,
                          device or input.device, requires_grad)

    def manual_seed(self, seed: int) -> None:
        self._rng.bit_generator.state = type(self._rng.bit_generator)(seed).state


class _NnFacade:
    """`torch.nn` as a case sees it: modules come with parameters drawn by the runner."""

    def __init__(self, torch: _TorchFacade) -> None:
        self._torch = torch
        self._module = getattr(torch._module, "nn", None)
        self._classes: dict[str, type] = {}

    def __getattr__(self, name: str) -> Any:
        if self._module is None:
            raise AttributeError(f"module '{self._torch._module.__name__}' has no attribute 'nn'")
        value = getattr(self._module, name)
        if isinstance(value, type) and issubclass(value, self._module.Module) \
                and value is not self._module.Module:
            if name not in self._classes:
                self._classes[name] = _redrawing(value, self._torch)
            return self._classes[name]
        return value


def _redrawing(cls: type, torch: _TorchFacade) -> type:
    """A subclass of `cls` (same name) whose instances get their parameters from the runner."""

    def init(self: Any, *args: Any, **kwargs: Any) -> None:
        cls.__init__(self, *args, **kwargs)
        engine = torch._engine
        if engine.default_device is not None:
            self.to(engine.default_device)
        _redraw(self, engine, torch._rng)

    return type(cls.__name__, (cls,), {"__init__": init, "__module__": cls.__module__,
                                       "__qualname__": cls.__qualname__})


def _redraw(module: Any, engine: TorchLikeEngine, rng: np.random.Generator) -> None:
    parameters = list(module.named_parameters())
    by_name = dict(parameters)
    for name, parameter in parameters:
        if not engine.has_values(parameter):
            continue  # created on the meta device: no values to redraw
        current = engine.to_numpy(parameter)
        if current.size and np.all((current == 0) | (current == 1)) and np.ptp(current) == 0:
            # Constant initialisations (BatchNorm's ones and zeros) are already the same in
            # every engine, and cases may assert them.
            continue
        owner = name.rpartition(".")[0]
        weight = by_name.get(f"{owner}.weight" if owner else "weight")
        shape = tuple(weight.shape) if weight is not None and len(weight.shape) >= 2 \
            else tuple(parameter.shape)
        if len(shape) >= 2:
            fan_in = shape[1] * math.prod(shape[2:])
        else:
            fan_in = shape[-1] if shape else 1
        bound = 1.0 / math.sqrt(fan_in) if fan_in > 0 else 0.0
        values = rng.uniform(-bound, bound, tuple(parameter.shape))
        engine.assign_parameter(parameter, values)


class _Deferred:
    """An attribute of the case namespace resolved at its first use, not when the namespace
    is built: the error of a missing one belongs to the step that uses it."""

    def __init__(self, resolve: Callable[[], Any]) -> None:
        self._resolve = resolve

    def __getattr__(self, name: str) -> Any:
        return getattr(self._resolve(), name)


def _has_meta_device(module: Any) -> bool:
    """Whether `module` has PyTorch's meta device (tensors with shapes but no values)."""
    try:
        return bool(module.empty(0, device="meta").is_meta)
    except Exception:  # noqa: BLE001 - an engine without a meta device refuses in its own way
        return False


def _on_device(factory: Callable[..., Any], device: str) -> Callable[..., Any]:
    def placed(*args: Any, **kwargs: Any) -> Any:
        kwargs.setdefault("device", device)
        return factory(*args, **kwargs)

    return placed


def _find(module: Any, path: str) -> Any:
    """`module.<path>` (a dotted path), or None where the module lacks a part of it."""
    for part in path.split("."):
        module = getattr(module, part, None)
        if module is None:
            return None
    return module


def _ask(module: Any, path: str, *args: Any) -> Any:
    """`module.<path>(*args)`, or None when the module has no such function or it fails."""
    function = _find(module, path)
    if function is None:
        return None
    try:
        return function(*args)
    except Exception:  # noqa: BLE001 - a query the engine cannot answer tells nothing
        return None


@dataclass(frozen=True)
class _Setting:
    """A piece of autograd state a case can switch, as a torch-like module reads and restores
    it (an engine without it has no such state to leak)."""

    description: str
    """What a report says while it is changed; `{}` is its value."""
    query: Callable[[Any], Any]
    """The module -> its value now, or None where the module cannot tell."""
    default: Any
    """Its value in a fresh worker after `reset`."""
    restore: Callable[[Any], Any] | None = None
    """Put it back to `default`; None where only the `with` block that set it can."""
    block_only: bool = False
    """Only a `with` block sets it, never a plain call: changed after the case's objects are
    collected, it is held by something outside the case."""

    def left_changed(self, module: Any) -> str | None:
        value = self.query(module)
        return None if value is None or value == self.default else self.description.format(value)


def _default_dtype(torch: Any) -> str | None:
    dtype = _ask(torch, "get_default_dtype")
    if dtype is None:
        return None
    # An engine may spell float32 its own way (tinygrad's `dtypes.float`).
    return "float32" if dtype == getattr(torch, "float32", None) else str(dtype).rsplit(".", 1)[-1]


def _dual_level_open(torch: Any) -> bool:
    try:
        probe = torch.ones(1)
        torch.autograd.forward_ad.make_dual(probe, probe)
    except Exception:  # noqa: BLE001 - no level is open (or no forward AD at all)
        return False
    return True


def _exit_dual_levels(torch: Any) -> None:
    exit_level = _find(torch, "autograd.forward_ad.exit_dual_level")
    for _ in range(MAX_NESTED if exit_level is not None else 0):
        if not _dual_level_open(torch):
            break
        exit_level()


# Neither engine has a public query for its saved-tensor hooks: PyTorch's own bindings, or
# refimpl's thread-local state (`refimpl.autograd.graph.SAVED_TENSORS_HOOKS`).
_HOOKS = "_C._autograd"
_REFIMPL_HOOKS = "autograd.graph.SAVED_TENSORS_HOOKS"


def _saved_tensors_hooks_installed(torch: Any) -> bool | None:
    if _find(torch, f"{_HOOKS}._top_saved_tensors_default_hooks") is not None:
        return _ask(torch, f"{_HOOKS}._top_saved_tensors_default_hooks", False) is not None
    stack = _find(torch, f"{_REFIMPL_HOOKS}.stack")
    return None if stack is None else bool(stack)


def _pop_saved_tensors_hooks(torch: Any) -> None:
    state = _find(torch, _REFIMPL_HOOKS)
    if state is not None:
        state.restore(([], state.disabled))
    for _ in range(MAX_NESTED):
        if not _saved_tensors_hooks_installed(torch):
            break
        _ask(torch, f"{_HOOKS}._pop_saved_tensors_default_hooks")


def _saved_tensors_hooks_disabled(torch: Any) -> bool | None:
    enabled = _ask(torch, f"{_HOOKS}._saved_tensors_hooks_is_enabled")
    if enabled is not None:
        return not enabled
    state = _find(torch, _REFIMPL_HOOKS)
    return None if state is None else getattr(state, "disabled", None) is not None


def _enable_saved_tensors_hooks(torch: Any) -> None:
    state = _find(torch, _REFIMPL_HOOKS)
    if state is not None:
        state.restore((list(state.stack), None))
    _ask(torch, f"{_HOOKS}._saved_tensors_hooks_enable")


def _mutation_allowed(torch: Any) -> bool | None:
    # PyTorch's module flag, or refimpl's context in force; neither has a query.
    graph = _find(torch, "autograd.graph")
    if hasattr(graph, "_allow_mutation_on_saved_tensors_enabled"):
        return bool(graph._allow_mutation_on_saved_tensors_enabled)
    context = getattr(graph, "MUTATION_CONTEXT", None)
    return None if context is None else context.active is not None


def _disallow_mutation(torch: Any) -> None:
    # Its saved-tensor hooks and PyTorch's dispatch mode have settings of their own.
    graph = _find(torch, "autograd.graph")
    if hasattr(graph, "_allow_mutation_on_saved_tensors_enabled"):
        graph._allow_mutation_on_saved_tensors_enabled = False
    context = getattr(graph, "MUTATION_CONTEXT", None)
    if context is not None:
        context.active = None


def _pop_dispatch_modes(torch: Any) -> None:
    for _ in range(MAX_NESTED):
        if not _ask(torch, "_C._len_torch_dispatch_stack"):
            break
        _ask(torch, "_C._pop_torch_dispatch_stack", None)  # None: the innermost mode


# Checkpoint's settings are module globals that only their `with` blocks set (no query, no
# setter): PyTorch's names, then refimpl's.
_CHECKPOINT_EARLY_STOP = ("_enable_checkpoint_early_stop", "_early_stop")
_CHECKPOINT_DEBUG = ("_checkpoint_debug_enabled",)


def _checkpoint_setting(names: tuple[str, ...]) -> Callable[[Any], Any]:
    def query(torch: Any) -> Any:
        checkpoint = _find(torch, "utils.checkpoint")
        return next((getattr(checkpoint, name) for name in names
                     if hasattr(checkpoint, name)), None)

    return query


def _checkpoint_unset(names: tuple[str, ...]) -> Callable[[Any], None]:
    def restore(torch: Any) -> None:
        checkpoint = _find(torch, "utils.checkpoint")
        for name in names:
            if hasattr(checkpoint, name):
                setattr(checkpoint, name, None)

    return restore


def _anomaly_off(torch: Any) -> None:
    # set_detect_anomaly(False) also puts the NaN check back on (its check_nan=True).
    _ask(torch, "autograd.set_detect_anomaly", False)


SETTINGS: tuple[_Setting, ...] = (
    # First: a mode left entered would see the ops the other queries run.
    _Setting("a TorchDispatchMode is entered", lambda t: _ask(t, "_C._len_torch_dispatch_stack"),
             0, _pop_dispatch_modes, block_only=True),
    _Setting("grad mode is off", lambda t: _ask(t, "is_grad_enabled"), True,
             lambda t: _ask(t, "set_grad_enabled", True)),
    # Only its guard's owner can leave inference mode: reported, and the worker replaced.
    _Setting("inference mode is on", lambda t: _ask(t, "is_inference_mode_enabled"), False),
    _Setting("anomaly mode is on", lambda t: _ask(t, "is_anomaly_enabled"), False,
             _anomaly_off),
    _Setting("anomaly mode's NaN check is off",
             lambda t: _ask(t, "is_anomaly_check_nan_enabled"), True, _anomaly_off),
    _Setting("the default dtype is {}", _default_dtype, "float32",
             lambda t: _ask(t, "set_default_dtype", getattr(t, "float32", None))),
    _Setting("a forward-AD level is open", _dual_level_open, False, _exit_dual_levels),
    _Setting("forward grad is off", lambda t: _ask(t, "_C._is_fwd_grad_enabled"), True,
             lambda t: _ask(t, "_C._set_fwd_grad_enabled", True)),
    _Setting("multithreaded backward is off",
             lambda t: _ask(t, "autograd.is_multithreading_enabled"), True,
             lambda t: _ask(t, "autograd.set_multithreading_enabled", True)),
    _Setting("the grad layout contract is relaxed",
             lambda t: _ask(t, "_C._is_grad_layout_enforcement_enabled"), True,
             lambda t: _ask(t, "autograd.enforce_grad_layout_policy", True)),
    _Setting("view replay is on", lambda t: _ask(t, "autograd.is_view_replay_enabled"), False,
             lambda t: _ask(t, "_C._set_view_replay_enabled", False)),
    # PyTorch emits some warnings once per process unless told otherwise; every case must see
    # its warnings whatever ran before it.
    _Setting("warn_always is off", lambda t: _ask(t, "is_warn_always_enabled"), True,
             lambda t: _ask(t, "set_warn_always", True)),
    _Setting("saved-tensor hooks are installed", _saved_tensors_hooks_installed, False,
             _pop_saved_tensors_hooks, block_only=True),
    _Setting("saved-tensor hooks are disabled", _saved_tensors_hooks_disabled, False,
             _enable_saved_tensors_hooks, block_only=True),
    _Setting("allow_mutation_on_saved_tensors is entered", _mutation_allowed, False,
             _disallow_mutation, block_only=True),
    _Setting("checkpoint early stop is set to {}", _checkpoint_setting(_CHECKPOINT_EARLY_STOP),
             None, _checkpoint_unset(_CHECKPOINT_EARLY_STOP), block_only=True),
    _Setting("checkpoint debug is set to {}", _checkpoint_setting(_CHECKPOINT_DEBUG), None,
             _checkpoint_unset(_CHECKPOINT_DEBUG), block_only=True),
)
"""Every piece of torch.autograd's thread-local and process state a case can switch: `reset`
restores each one the engine's module has, `state_leak` reports each one left changed."""
