"""``refimpl.autograd``: ``backward``, ``grad``, grad mode and the graph classes.

Mirrors ``torch.autograd``::

    x = refimpl.tensor(3.0, requires_grad=True)
    (dx,) = refimpl.autograd.grad(x ** 2, x, create_graph=True)   # tensor(6., grad_fn=...)
    (ddx,) = refimpl.autograd.grad(dx, x)                          # tensor(2.)
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from refimpl._tensor import Tensor
from refimpl._warn import warn_once
from refimpl.autograd import forward_ad, function, functional, graph
from refimpl.autograd.anomaly_mode import detect_anomaly, set_detect_anomaly
from refimpl.autograd.engine import check_outputs, make_grads, roots_of, run_backward
from refimpl.autograd.function import Function
from refimpl.autograd.grad_mode import (
    enable_grad,
    inference_mode,
    is_grad_enabled,
    is_multithreading_enabled,
    no_grad,
    set_grad_enabled,
    set_multithreading_enabled,
)

# As in PyTorch, the names are the functions (the module stays importable by its path).
from refimpl.autograd.gradcheck import gradcheck, gradgradcheck

__all__ = ["backward", "grad", "graph", "forward_ad", "functional", "no_grad", "enable_grad",
           "set_grad_enabled", "is_grad_enabled", "inference_mode", "detect_anomaly",
           "set_detect_anomaly", "Function", "function", "Variable", "gradcheck", "gradgradcheck",
           "set_multithreading_enabled", "is_multithreading_enabled"]


class _VariableMeta(type):
    def __instancecheck__(cls, other: Any) -> bool:
        return isinstance(other, Tensor)


class Variable(metaclass=_VariableMeta):
    """``torch.autograd.Variable``, kept for old code: every tensor is an instance, and
    ``Variable(t, requires_grad=False)`` returns a new plain leaf sharing ``t``'s data and
    version counter (``t.detach()``) with that flag set::

        >>> v = Variable(torch.ones(2), requires_grad=True)
        >>> type(v).__name__, v.is_leaf, v.requires_grad
        ('Tensor', True, True)
    """

    def __new__(cls, data: Any = None, requires_grad: bool = False) -> Tensor:  # type: ignore[misc]
        if data is None:
            from refimpl import _creation

            return _creation.empty(0).requires_grad_(requires_grad)
        if not isinstance(data, Tensor):
            raise TypeError(f"Variable data has to be a tensor, but got {type(data).__name__}")
        out = data.detach()
        if requires_grad and out.dtype.kind not in "fc":
            raise RuntimeError(
                "Only Tensors of floating point and complex dtype can require gradients")
        out._requires_grad = bool(requires_grad)
        return out

CREATE_GRAPH_WARNING = (
    "Using backward() with create_graph=True will create a reference cycle between the "
    "parameter and its gradient which can cause a memory leak. We recommend using autograd.grad "
    "when creating the graph to avoid this. If you have to use this function, make sure to "
    "reset the .grad fields of your parameters to None after use to break the cycle and avoid "
    "the leak."
)


def _as_list(value: Any) -> list[Any]:
    # PyTorch takes one tensor or any iterable of them (``tuple(value)``, with Python's
    # TypeError for anything else, None included).
    if isinstance(value, Tensor):
        return [value]
    return list(value)


def _input_targets(inputs: list[Any], for_backward: bool) -> list[Any]:
    """The node whose incoming gradient each input receives, checked in PyTorch's order."""
    targets = []
    for t in inputs:
        if not isinstance(t, Tensor):
            raise RuntimeError("all inputs have to be Tensors or GradientEdges, but got "
                               f"{type(t).__name__}")
        if for_backward:
            t.retain_grad()  # raises for a tensor that does not require grad; no-op on leaves
        elif not t._requires_grad:
            raise RuntimeError("One of the differentiated Tensors does not require grad")
        if t._base is not None:
            t._sync_view()  # PyTorch reads the input's up-to-date grad_fn, which may refuse
        targets.append((t._grad_node, t._output_nr) if t._grad_node is not None
                       else (t._grad_accumulator(), 0))
    return targets


def _grads_for(outputs: list[Tensor], grad_outputs: Any) -> list[Any]:
    """Pair each output with its gradient as PyTorch does: extra gradients are ignored, too
    few are an error (after the given ones were checked)."""
    if grad_outputs is None:
        given: list[Any] = [None] * len(outputs)
    else:
        given = [grad_outputs] if isinstance(grad_outputs, Tensor) else list(grad_outputs)
    grads = make_grads(outputs[:len(given)], given[:len(outputs)])
    if len(grads) != len(outputs):
        raise RuntimeError(f"got {len(outputs)} tensors and {len(grads)} gradients")
    return grads


def backward(tensors: Tensor | Sequence[Tensor], grad_tensors: Any = None,
             retain_graph: bool | None = None, create_graph: bool = False,
             inputs: Tensor | Sequence[Tensor] | None = None) -> None:
    """Accumulate d(tensors)/d(leaf) into each leaf's ``.grad`` (or only into ``inputs``)."""
    outputs = _as_list(tensors)
    grads = _grads_for(outputs, grad_tensors)
    if retain_graph is None:
        retain_graph = create_graph
    chosen = None
    if inputs is not None:
        chosen = _as_list(inputs)
        if not chosen:
            raise RuntimeError("`inputs` argument to `backward()` cannot be empty.")
    check_outputs(outputs)
    targets = _input_targets(chosen, for_backward=True) if chosen is not None else None
    if create_graph:
        # A TORCH_WARN_ONCE in PyTorch: once per process unless set_warn_always(True).
        warn_once(CREATE_GRAPH_WARNING, UserWarning, stacklevel=3)
    run_backward(roots_of(outputs), grads, retain_graph=retain_graph,
                 create_graph=create_graph, capture=targets, accumulate=True)


def grad(outputs: Tensor | Sequence[Tensor], inputs: Tensor | Sequence[Tensor],
         grad_outputs: Any = None, retain_graph: bool | None = None, create_graph: bool = False,
         allow_unused: bool | None = None, is_grads_batched: bool = False,
         materialize_grads: bool = False) -> tuple[Tensor | None, ...]:
    """d(outputs)/d(inputs), returned as a tuple, without touching any ``.grad``."""
    if materialize_grads and allow_unused is False:
        raise ValueError("Expected allow_unused to be True or not passed when "
                         "materialize_grads=True, but got: allow_unused=False.")
    outs = _as_list(outputs)
    keys = list(inputs) if type(inputs) is dict else None
    ins = list(inputs.values()) if keys is not None else _as_list(inputs)
    if is_grads_batched:
        raise RuntimeError("refimpl does not implement is_grads_batched=True; loop over the "
                           "batch of grad_outputs instead")
    if allow_unused is None:
        allow_unused = materialize_grads
    if not ins:
        raise RuntimeError("`inputs` argument to `grad()` cannot be empty.")
    grads = _grads_for(outs, grad_outputs)
    if retain_graph is None:
        retain_graph = create_graph
    check_outputs(outs)
    targets = _input_targets(ins, for_backward=False)
    captured = run_backward(roots_of(outs), grads, retain_graph=retain_graph,
                            create_graph=create_graph, capture=targets, accumulate=False)
    result: list[Tensor | None] = []
    for i, (t, target) in enumerate(zip(ins, targets, strict=True)):
        g = captured.get(target)
        if g is None:
            if not allow_unused:
                raise RuntimeError(
                    f"The differentiated Tensor at index {i} appears to not have been used in "
                    "the graph. Set allow_unused=True if this is the desired behavior.")
            if materialize_grads:
                from refimpl import _creation

                g = _creation.zeros_like(t, requires_grad=create_graph)
        result.append(g)
    if keys is not None:
        return dict(zip(keys, result, strict=True))
    return tuple(result)
