"""``Module``: the base class that registers parameters, buffers and submodules by assignment.

Assigning a :class:`~refimpl.nn.Parameter` to an attribute registers it as a parameter, a
``Module`` as a submodule, and a tensor to a name declared with :meth:`Module.register_buffer`
as a buffer. Moves (``to``, ``double``, ``float``, ``cuda``, ``cpu``) replace each
parameter's data in place, as PyTorch's ``param.data = ...`` does, so parameters stay the same
leaf objects and keep requiring grad::

    lin = nn.Linear(3, 5)
    w = lin.weight
    lin.double()
    lin.weight is w, w.dtype, w.is_leaf          # (True, torch.float64, True)

A move to or from the meta device replaces each parameter by a new leaf Parameter instead (a
meta tensor cannot take a CPU tensor's data), as in PyTorch.
"""

from __future__ import annotations

import functools
import warnings
from collections import OrderedDict
from collections.abc import Callable, Iterator
from typing import Any

from refimpl import _backend
from refimpl._tensor import Tensor
from refimpl.autograd.grad_mode import no_grad
from refimpl.autograd.graph import RemovableHandle
from refimpl.nn.modules.hooks import BackwardHook
from refimpl.nn.parameter import Parameter
from refimpl.ops import functional as core

__all__ = ["Module"]

# A module's hooks, as PyTorch keeps them (code outside PyTorch reads and clears these dicts):
# each an OrderedDict from handle id to hook, in calling order, with the ids of the forward
# hooks registered with_kwargs=True or always_call=True in dicts of their own.
_HOOK_LISTS = ("_forward_pre_hooks", "_forward_hooks", "_backward_pre_hooks", "_backward_hooks")
_HOOK_FLAGS = ("_forward_pre_hooks_with_kwargs", "_forward_hooks_with_kwargs",
               "_forward_hooks_always_called")


def _addindent(text: str, spaces: int) -> str:
    lines = text.split("\n")
    if len(lines) == 1:
        return text
    return lines[0] + "\n" + "\n".join(" " * spaces + line for line in lines[1:])


class Module:
    """Base class of all layers; subclasses set attributes in ``__init__`` and define
    ``forward``. Calling the module calls ``forward``."""

    training: bool
    _parameters: dict[str, Parameter | None]
    _buffers: dict[str, Tensor | None]
    _modules: dict[str, Module | None]

    def __init__(self) -> None:
        object.__setattr__(self, "training", True)
        object.__setattr__(self, "_parameters", OrderedDict())
        object.__setattr__(self, "_buffers", OrderedDict())
        object.__setattr__(self, "_modules", OrderedDict())
        for hooks in _HOOK_LISTS + _HOOK_FLAGS:
            object.__setattr__(self, hooks, OrderedDict())

    # ------------------------------------------------------------ calling
    def forward(self, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError(
            f'Module [{type(self).__name__}] is missing the required "forward" function')

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        d = self.__dict__
        if not any(d.get(hooks) for hooks in _HOOK_LISTS):
            return self.forward(*args, **kwargs)
        return self._call_with_hooks(args, kwargs)

    def _call_with_hooks(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        # PyTorch's order: forward pre-hooks, the backward hook's identity on the arguments,
        # forward, forward hooks, the backward hook's identity on the result.
        for hook_id, hook in list(self._forward_pre_hooks.items()):
            if hook_id in self._forward_pre_hooks_with_kwargs:
                res = hook(self, args, kwargs)
                if res is not None:
                    if not (isinstance(res, tuple) and len(res) == 2):
                        raise RuntimeError("forward pre-hook must return None or a tuple of "
                                           f"(new_args, new_kwargs), but got {res}.")
                    args, kwargs = res
            else:
                res = hook(self, args)
                if res is not None:
                    args = res if isinstance(res, tuple) else (res,)
        full = self.__dict__.get("_is_full_backward_hook") is not False
        backward_hook = None
        if full and self._backward_hooks or self._backward_pre_hooks:
            backward_hook = BackwardHook(self, list(self._backward_hooks.values()) if full else [],
                                         list(self._backward_pre_hooks.values()))
            args = backward_hook.setup_input_hook(args)
        try:
            result = self.forward(*args, **kwargs)
        except BaseException:
            # always_call=True hooks run even when forward raised; what they return is ignored.
            for hook_id, hook in list(self._forward_hooks.items()):
                if hook_id in self._forward_hooks_always_called:
                    _forward_hook(self, hook, hook_id in self._forward_hooks_with_kwargs,
                                  args, kwargs, None)
            raise
        for hook_id, hook in list(self._forward_hooks.items()):
            res = _forward_hook(self, hook, hook_id in self._forward_hooks_with_kwargs,
                                args, kwargs, result)
            if res is not None:
                result = res
        if backward_hook is not None:
            if not isinstance(result, (Tensor, tuple)):
                warnings.warn("For backward hooks to be called, module output should be a "
                              f"Tensor or a tuple of Tensors but received {type(result)}",
                              UserWarning, stacklevel=3)
            result = backward_hook.setup_output_hook(result)
        if not full and self._backward_hooks:
            self._register_non_full_hooks(args, result)
        return result

    def _register_non_full_hooks(self, args: tuple[Any, ...], result: Any) -> None:
        # The deprecated hooks go on the grad_fn of the first tensor in the result: they see
        # that one node's gradients, whatever else the module computed.
        var = result
        while not isinstance(var, Tensor):
            var = next(v for v in var.values() if isinstance(v, Tensor)) \
                if isinstance(var, dict) else var[0]
        node = var.grad_fn
        if node is None:
            return
        for hook in self._backward_hooks.values():
            node.register_hook(functools.partial(hook, self))
        warning = _non_full_hook_warning(args, result, node)
        if warning:
            warnings.warn(warning, FutureWarning, stacklevel=3)

    # ------------------------------------------------------------ hooks
    def _add_hook(self, hooks: str, hook: Callable[..., Any], prepend: bool,
                  with_kwargs: bool = False, always_call: bool = False) -> RemovableHandle:
        self._check_initialized()
        registry = self.__dict__[hooks]
        flags = [self.__dict__[f] for f in _HOOK_FLAGS if f.startswith(hooks + "_")]
        handle = RemovableHandle(registry, extra=tuple(flags))
        registry[handle.id] = hook
        if prepend:
            registry.move_to_end(handle.id, last=False)
        if with_kwargs:
            self.__dict__[hooks + "_with_kwargs"][handle.id] = True
        if always_call:
            self.__dict__[hooks + "_always_called"][handle.id] = True
        return handle

    def register_forward_pre_hook(self, hook: Callable[..., Any], *, prepend: bool = False,
                                  with_kwargs: bool = False) -> RemovableHandle:
        """``hook(module, args)`` before ``forward``; what it returns (a tuple, or one value)
        replaces the positional arguments. With ``with_kwargs=True``: ``hook(module, args,
        kwargs)`` returning ``None`` or ``(args, kwargs)``."""
        return self._add_hook("_forward_pre_hooks", hook, prepend, with_kwargs)

    def register_forward_hook(self, hook: Callable[..., Any], *, prepend: bool = False,
                              with_kwargs: bool = False, always_call: bool = False
                              ) -> RemovableHandle:
        """``hook(module, args, output)`` after ``forward`` (``args`` as forward received
        them); a value it returns replaces the output."""
        return self._add_hook("_forward_hooks", hook, prepend, with_kwargs, always_call)

    def register_full_backward_pre_hook(self, hook: Callable[..., Any], prepend: bool = False
                                        ) -> RemovableHandle:
        """``hook(module, grad_output)`` when the gradients of the module's outputs are
        known; a tuple it returns (one entry per output) replaces them."""
        return self._add_hook("_backward_pre_hooks", hook, prepend)

    def register_backward_hook(self, hook: Callable[..., Any]) -> RemovableHandle:
        """Deprecated: ``hook(module, grad_input, grad_output)`` on the node that made the
        module's (first) output, with that node's gradients; warns (FutureWarning) at each call
        where that is not the module's inputs and outputs."""
        self._backward_kind(full=False)
        return self._add_hook("_backward_hooks", hook, False)

    def _backward_kind(self, full: bool) -> None:
        if self.__dict__.get("_is_full_backward_hook") is (not full):
            raise RuntimeError("Cannot use both regular backward hooks and full backward hooks "
                               "on a single Module. Please use only one of them.")
        object.__setattr__(self, "_is_full_backward_hook", full)

    def register_full_backward_hook(self, hook: Callable[..., Any], prepend: bool = False
                                    ) -> RemovableHandle:
        """``hook(module, grad_input, grad_output)`` when the gradients of the module's
        positional inputs are known (``None`` for a non-tensor argument); a tuple it returns
        replaces ``grad_input``. See :mod:`refimpl.nn.modules.hooks`."""
        self._backward_kind(full=True)
        return self._add_hook("_backward_hooks", hook, prepend)

    # ------------------------------------------------------------ registration
    def _check_initialized(self) -> None:
        if "_parameters" not in self.__dict__:
            raise AttributeError("cannot assign parameters, buffers or modules before "
                                 "Module.__init__() call")

    def register_parameter(self, name: str, param: Parameter | None) -> None:
        """Add ``param`` (or a ``None`` placeholder) under ``name``."""
        self._check_initialized()
        if param is not None and not isinstance(param, Parameter):
            raise TypeError(f"cannot assign '{_type_name(param)}' object to parameter '{name}' "
                            "(torch.nn.Parameter or None required)")
        self._forget(name)
        self._parameters[name] = param

    def register_buffer(self, name: str, tensor: Tensor | None) -> None:
        """Add a tensor (or ``None``) that is state but not a parameter (running statistics)."""
        self._check_initialized()
        if tensor is not None and not isinstance(tensor, Tensor):
            raise TypeError(f"cannot assign '{_type_name(tensor)}' object to buffer '{name}' "
                            "(torch Tensor or None required)")
        self._forget(name)
        self._buffers[name] = tensor

    def add_module(self, name: str, module: Module | None) -> None:
        self._check_initialized()
        if module is not None and not isinstance(module, Module):
            raise TypeError(f"{_type_name(module)} is not a Module subclass")
        self._forget(name)
        self._modules[name] = module

    def _forget(self, name: str) -> None:
        self.__dict__.pop(name, None)
        for registry in (self._parameters, self._buffers, self._modules):
            registry.pop(name, None)

    def __setattr__(self, name: str, value: Any) -> None:
        params = self.__dict__.get("_parameters")
        if isinstance(value, Parameter):
            self.register_parameter(name, value)
        elif params is not None and name in params:
            if value is not None:
                raise TypeError(f"cannot assign '{_type_name(value)}' as parameter '{name}' "
                                "(torch.nn.Parameter or None expected)")
            params[name] = None
        elif isinstance(value, Module):
            self.add_module(name, value)
        elif params is not None and name in self._modules:
            if value is not None:
                raise TypeError(f"cannot assign '{_type_name(value)}' as child module '{name}' "
                                "(torch.nn.Module or None expected)")
            self._modules[name] = None
        elif params is not None and name in self._buffers:
            if value is not None and not isinstance(value, Tensor):
                raise TypeError(f"cannot assign '{_type_name(value)}' as buffer '{name}' "
                                "(torch.nn.Buffer, torch.Tensor or None expected)")
            self._buffers[name] = value
        else:
            object.__setattr__(self, name, value)

    def __getattr__(self, name: str) -> Any:
        # Only called when normal lookup fails: look in the registries.
        d = self.__dict__
        for registry in ("_parameters", "_buffers", "_modules"):
            if registry in d and name in d[registry]:
                return d[registry][name]
        raise AttributeError(f"'{type(self).__name__}' object has no attribute '{name}'")

    def __delattr__(self, name: str) -> None:
        for registry in (self._parameters, self._buffers, self._modules):
            if name in registry:
                del registry[name]
                return
        object.__delattr__(self, name)

    # ------------------------------------------------------------ traversal
    def named_modules(self, memo: set[int] | None = None, prefix: str = ""
                      ) -> Iterator[tuple[str, Module]]:
        """This module and every submodule, each once, depth first, with dotted names."""
        memo = set() if memo is None else memo
        if id(self) in memo:
            return
        memo.add(id(self))
        yield prefix, self
        for name, child in self._modules.items():
            if child is not None:
                yield from child.named_modules(memo, f"{prefix}.{name}" if prefix else name)

    def modules(self) -> Iterator[Module]:
        for _, m in self.named_modules():
            yield m

    def named_children(self) -> Iterator[tuple[str, Module]]:
        seen: set[int] = set()
        for name, child in self._modules.items():
            if child is not None and id(child) not in seen:
                seen.add(id(child))
                yield name, child

    def children(self) -> Iterator[Module]:
        for _, child in self.named_children():
            yield child

    def _named_members(self, registry: str, prefix: str, recurse: bool,
                       remove_duplicate: bool) -> Iterator[tuple[str, Any]]:
        seen: set[int] = set()
        mods = self.named_modules(prefix=prefix) if recurse else [(prefix, self)]
        for mod_prefix, mod in mods:
            for name, value in getattr(mod, registry).items():
                if value is None or (remove_duplicate and id(value) in seen):
                    continue
                seen.add(id(value))
                yield (f"{mod_prefix}.{name}" if mod_prefix else name), value

    def named_parameters(self, prefix: str = "", recurse: bool = True,
                         remove_duplicate: bool = True) -> Iterator[tuple[str, Parameter]]:
        """``(dotted name, parameter)`` pairs, e.g. ``('0.weight', ...)`` in a Sequential."""
        return self._named_members("_parameters", prefix, recurse, remove_duplicate)

    def parameters(self, recurse: bool = True) -> Iterator[Parameter]:
        for _, p in self.named_parameters(recurse=recurse):
            yield p

    def named_buffers(self, prefix: str = "", recurse: bool = True,
                      remove_duplicate: bool = True) -> Iterator[tuple[str, Tensor]]:
        return self._named_members("_buffers", prefix, recurse, remove_duplicate)

    def buffers(self, recurse: bool = True) -> Iterator[Tensor]:
        for _, b in self.named_buffers(recurse=recurse):
            yield b

    def state_dict(self) -> OrderedDict[str, Tensor]:
        """Parameters and buffers by dotted name, detached (sharing data) as in PyTorch."""
        out: OrderedDict[str, Tensor] = OrderedDict()
        for prefix, mod in self.named_modules():
            lead = f"{prefix}." if prefix else ""
            for name, p in mod._parameters.items():
                if p is not None:
                    out[lead + name] = p.detach()
            for name, b in mod._buffers.items():
                if b is not None:
                    out[lead + name] = b.detach()
        return out

    def apply(self, fn: Callable[[Module], None]) -> Module:
        """Call ``fn`` on every submodule (children first) and on this module; returns self."""
        for child in self.children():
            child.apply(fn)
        fn(self)
        return self

    # ------------------------------------------------------------ modes and gradients
    def train(self, mode: bool = True) -> Module:
        """Set training mode (Dropout drops, BatchNorm uses batch statistics); returns self."""
        if not isinstance(mode, bool):
            raise ValueError("training mode is expected to be boolean")
        for m in self.modules():
            object.__setattr__(m, "training", mode)
        return self

    def eval(self) -> Module:
        """``train(False)``: Dropout becomes the identity, BatchNorm uses running statistics."""
        return self.train(False)

    def requires_grad_(self, requires_grad: bool = True) -> Module:
        for p in self.parameters():
            p.requires_grad_(requires_grad)
        return self

    def zero_grad(self, set_to_none: bool = True) -> None:
        """Reset parameter gradients: to ``None`` (the default), or to zeros in place."""
        for p in self.parameters():
            if p.grad is None:
                continue
            if set_to_none:
                p.grad = None
            else:
                grad = p.grad
                if grad.grad_fn is not None:
                    grad.detach_()
                else:
                    grad.requires_grad_(False)
                grad.zero_()

    # ------------------------------------------------------------ moves
    def _apply(self, fn: Callable[[Tensor], Tensor]) -> Module:
        for m in self.modules():
            for key, p in m._parameters.items():
                if p is None:
                    continue
                # PyTorch keeps the Parameter object when the moved data can be set into it
                # (cpu <-> cuda, dtype casts); a move to or from meta cannot, so the module gets
                # a new Parameter (still a leaf) and the old one keeps its data.
                with no_grad():
                    moved = fn(p)
                if _backend.shallow_copy_compatible(p._device, moved._device):
                    out = p
                    if moved is not p:
                        p.data = moved
                else:
                    out = Parameter(moved, p._requires_grad)
                    m._parameters[key] = out
                grad = p._grad
                if grad is None:
                    continue
                with no_grad():
                    moved_grad = fn(grad)
                if moved_grad is grad:
                    continue
                if _backend.shallow_copy_compatible(grad._device, moved_grad._device):
                    grad.data = moved_grad
                else:
                    out.grad = moved_grad.requires_grad_(grad._requires_grad)
            for name, b in m._buffers.items():
                if b is not None:
                    with no_grad():
                        m._buffers[name] = fn(b)
        return self

    def to(self, *args: Any, **kwargs: Any) -> Module:
        """Move and/or cast floating-point parameters and buffers (``to('cuda')``,
        ``to(torch.float64)``, ``to(device, dtype)``); parameters stay the same objects."""
        dtype, device, _ = core.parse_to(args, dict(kwargs))
        if dtype is not None and dtype.kind not in "fc":
            raise TypeError("nn.Module.to only accepts floating point or complex dtypes, but got "
                            f"desired dtype={dtype!r}")
        if device is not None:
            device = _backend.resolve_device(device)

        def convert(t: Tensor) -> Tensor:
            target = dtype if dtype is not None and t.dtype.kind in "fc" else None
            return t.to(device=device, dtype=target)

        return self._apply(convert)

    def cuda(self, device: Any = None) -> Module:
        """Move every parameter and buffer to the cuda device (in place for parameters)."""
        return self._apply(lambda t: t.cuda(device))

    def cpu(self) -> Module:
        return self._apply(lambda t: t.cpu())

    def double(self) -> Module:
        """Cast floating-point parameters and buffers to float64."""
        return self._apply(lambda t: t.double() if t.dtype.kind == "f" else t)

    def float(self) -> Module:
        """Cast floating-point parameters and buffers to float32."""
        return self._apply(lambda t: t.float() if t.dtype.kind == "f" else t)

    # ------------------------------------------------------------ printing
    def extra_repr(self) -> str:
        """The text between the parentheses of this module's repr (its settings)."""
        return ""

    def __repr__(self) -> str:
        lines = []
        extra = self.extra_repr()
        if extra:
            lines.extend(extra.split("\n"))
        for name, child in self._modules.items():
            lines.append(f"({name}): " + _addindent(repr(child), 2))
        main = type(self).__name__ + "("
        if lines:
            if len(lines) == 1 and not self._modules:
                main += lines[0]
            else:
                main += "\n  " + "\n  ".join(lines) + "\n"
        return main + ")"

    def __dir__(self) -> list[str]:
        return sorted(set(super().__dir__()) | set(self._parameters) | set(self._buffers)
                      | set(self._modules))


def _forward_hook(module: Module, hook: Callable[..., Any], with_kwargs: bool,
                  args: tuple[Any, ...], kwargs: dict[str, Any], result: Any) -> Any:
    return hook(module, args, kwargs, result) if with_kwargs else hook(module, args, result)


_DEPRECATED = ("is deprecated and will be removed in future versions. This hook will be missing "
               "some")
_USE_FULL = "Please use register_full_backward_hook to get the documented behavior."


def _non_full_hook_warning(args: tuple[Any, ...], result: Any, node: Any) -> str | None:
    """PyTorch's FutureWarning for a deprecated module backward hook that will not see the
    module's own gradients, or None when the node's gradients are the module's."""
    if isinstance(result, Tensor):
        result = (result,)
    elif not (isinstance(result, tuple) and all(isinstance(r, Tensor) for r in result)):
        return ("Using non-full backward hooks on a Module that does not return a single Tensor "
                f"or a tuple of Tensors {_DEPRECATED} of the grad_output. {_USE_FULL}")
    if not all(isinstance(a, Tensor) for a in args):
        return ("Using non-full backward hooks on a Module that does not take as input a single "
                f"Tensor or a tuple of Tensors {_DEPRECATED} of the grad_input. {_USE_FULL}")
    made_by = {r.grad_fn for r in result if r.grad_fn is not None}
    if not made_by or (len(made_by) == 1 and node not in made_by):
        return ("Using a non-full backward hook when outputs are nested in python data "
                f"structure {_DEPRECATED} grad_output.")
    if len(made_by) > 1:
        return ("Using a non-full backward hook when outputs are generated by different autograd "
                f"Nodes {_DEPRECATED} grad_output. {_USE_FULL}")
    if {a.grad_fn for a in args if a.grad_fn is not None} != {n for n, _ in node.next_functions}:
        return ("Using a non-full backward hook when the forward contains multiple autograd "
                f"Nodes {_DEPRECATED} grad_input. {_USE_FULL}")
    return None


def _type_name(value: Any) -> str:
    if isinstance(value, Tensor):
        return value.type()
    return type(value).__name__
