"""Module backward hooks: how ``register_full_backward_hook`` and
``register_full_backward_pre_hook`` reach the autograd graph, as in PyTorch 2.13.

A module call with such hooks passes its tensor arguments, and then its tensor results, through
an identity custom Function, ``BackwardHookFunction``. The Function's nodes are where the hooks
live: the node after the outputs sees the gradients of the outputs first (the pre-hooks run there
and may replace them); the node before the inputs sees the gradients of the inputs last (the full
hooks run there with both and may replace the inputs'). Because the arguments are returned as they
are, they become views made inside a custom Function: writing one in place inside ``forward``
(``ReLU(inplace=True)`` on the module's input) is refused with PyTorch's message, and a result a
module hands back untouched is a view of its argument.

Two consequences users meet, both PyTorch's: an input whose result does not depend on it gets a
zero gradient instead of none (the Function materializes missing gradients), and when no input
requires grad the full hooks run at the output node with ``None`` for every input gradient,
after a warning.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Sequence
from typing import Any

from refimpl._tensor import Tensor
from refimpl.autograd import grad_mode
from refimpl.autograd.function import Function

__all__ = ["BackwardHookFunction", "BackwardHook"]

_NO_INPUT_WARNING = (
    "Full backward hook is firing when gradients are computed with respect to module outputs "
    "since no inputs require gradients. See "
    "https://docs.pytorch.org/docs/main/generated/torch.nn.Module.html"
    "#torch.nn.Module.register_full_backward_hook for more details.")


class BackwardHookFunction(Function):
    """Identity on its tensor arguments; its node is where module backward hooks run."""

    @staticmethod
    def forward(ctx: Any, *args: Tensor) -> tuple[Tensor, ...]:
        ctx.mark_non_differentiable(*[a for a in args if not a.requires_grad])
        return args

    @staticmethod
    def backward(ctx: Any, *grads: Any) -> tuple[Any, ...]:
        return grads


def _spread(positions: Sequence[int], values: Sequence[Any], size: int) -> tuple[Any, ...]:
    """``values`` at ``positions`` of a tuple of ``size``; None elsewhere (non-tensor slots)."""
    out: list[Any] = [None] * size
    for i, v in zip(positions, values, strict=True):
        out[i] = v
    return tuple(out)


class BackwardHook:
    """One module call's hooks: set up on its arguments, then on its result."""

    def __init__(self, module: Any, hooks: list[Callable[..., Any]],
                 pre_hooks: list[Callable[..., Any]]) -> None:
        self.module = module
        self.hooks = hooks
        self.pre_hooks = pre_hooks
        self.grad_outputs: tuple[Any, ...] | None = None
        self.n_inputs = self.n_outputs = -1
        self.input_positions: list[int] | None = None
        self.output_positions: list[int] | None = None

    def _wrap(self, values: tuple[Any, ...], node_hook: Callable[..., Any]
              ) -> tuple[tuple[Any, ...], list[int] | None]:
        positions = [i for i, v in enumerate(values) if isinstance(v, Tensor)]
        tensors = [values[i] for i in positions]
        if not (any(t.requires_grad for t in tensors) and grad_mode.is_grad_enabled()):
            return values, None
        wrapped = BackwardHookFunction.apply(*tensors)
        if len(wrapped) == 0:
            raise RuntimeError("Cannot set Module backward hook for a Module with no input "
                               "Tensors.")
        next(t.grad_fn for t in wrapped if t.grad_fn is not None).register_hook(node_hook)
        out = list(values)
        for i, t in zip(positions, wrapped, strict=True):
            out[i] = t
        return tuple(out), positions

    # ------------------------------------------------------------ inputs
    def setup_input_hook(self, args: tuple[Any, ...]) -> tuple[Any, ...]:
        res, self.input_positions = self._wrap(args, self._input_hook)
        self.n_inputs = len(args)
        return res

    def _input_hook(self, grad_inputs: tuple[Any, ...], _: Any) -> Any:
        if self.grad_outputs is None:
            # The gradient reached the inputs without passing the outputs (a double backward).
            return None
        assert self.input_positions is not None
        res = _spread(self.input_positions, grad_inputs, self.n_inputs)
        for hook in self.hooks:
            new = hook(self.module, res, self.grad_outputs)
            if new is None:
                continue
            if len(new) != len(res):
                raise RuntimeError("Backward hook returned an invalid number of grad_input, "
                                   f"got {len(new)}, but expected {len(res)}")
            res = new
        self.grad_outputs = None
        return tuple(res[i] for i in self.input_positions)

    # ------------------------------------------------------------ outputs
    def setup_output_hook(self, result: Any) -> Any:
        single = not isinstance(result, tuple)
        values = (result,) if single else result
        res, self.output_positions = self._wrap(values, self._output_hook)
        self.n_outputs = len(values)
        return res[0] if single else res

    def _output_hook(self, _: Any, grad_outputs: tuple[Any, ...]) -> Any:
        assert self.output_positions is not None
        self.grad_outputs = _spread(self.output_positions, grad_outputs, self.n_outputs)
        for hook in self.pre_hooks:
            new = hook(self.module, self.grad_outputs)
            if new is None:
                continue
            if len(new) != len(self.grad_outputs):
                raise RuntimeError("Backward pre hook returned an invalid number of "
                                   f"grad_output, got {len(new)}, but expected "
                                   f"{len(self.grad_outputs)}")
            self.grad_outputs = new
        chosen = self.grad_outputs
        if self.input_positions is None:
            # No input needs a gradient: no node before the inputs will run, so the full hooks
            # run here, with None for every input, and may not change anything.
            warnings.warn(_NO_INPUT_WARNING, UserWarning, stacklevel=2)
            nones = (None,) * self.n_inputs
            for hook in self.hooks:
                new = hook(self.module, nones, self.grad_outputs)
                if new is not None and not (isinstance(new, tuple)
                                            and all(g is None for g in new)):
                    raise RuntimeError("Backward hook for Modules where no input requires "
                                       "gradient should always return None or None for all "
                                       "gradients.")
            self.grad_outputs = None
        return tuple(chosen[i] for i in self.output_positions)
