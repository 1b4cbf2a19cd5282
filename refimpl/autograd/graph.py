"""Backward graph nodes: ``grad_fn`` objects, ``AccumulateGrad`` and saved tensors.

A node is created by an op that records the graph (see ``refimpl.ops``). It holds
``next_functions`` (one ``(node | None, input_nr)`` pair per differentiable input), the tensors
its derivative formulas need (saved with the version they had), the non-tensor facts those
formulas need (``info``), and the shape and dtype of the tensor it produced, so the engine can
reduce a broadcast gradient and cast it back in one place. Nodes never hold their output
tensors: a chain of a million ops keeps only small node objects alive.
"""

from __future__ import annotations

import itertools
from typing import TYPE_CHECKING, Any

from refimpl.autograd import anomaly_mode

if TYPE_CHECKING:
    from refimpl._tensor import Tensor

__all__ = ["Node", "AccumulateGrad", "FREED", "RemovableHandle", "init_node", "SEQUENCE",
           "OutputHook"]

SECOND_BACKWARD = (
    "Trying to backward through the graph a second time (or directly access saved tensors after "
    "they have already been freed). Saved intermediate values of the graph are freed when you "
    "call .backward() or autograd.grad(). Specify retain_graph=True if you need to backward "
    "through the graph a second time or if you need to access saved tensors after calling "
    "backward."
)

# Marks a node whose saved tensors were released by a backward pass without retain_graph.
FREED = ("<freed>",)

# Each node takes the next number when it is created, as in PyTorch: the engine runs the ready
# node with the highest number first, so later operations are differentiated first.
SEQUENCE = itertools.count()
# PyTorch gives every AccumulateGrad the largest number, so a leaf's gradient is accumulated
# as soon as it is complete.
ACCUMULATE_GRAD_SEQUENCE = 2**64 - 1


def message_name(node: Node) -> str:
    """A node's name as PyTorch's error messages print it: without "Backward" and without an
    overload number 0 (MulBackward0 reads "Mul", SqueezeBackward1 "Squeeze1"); a node of
    autograd's own keeps its full name (torch::autograd::CopySlices)."""
    head, _, overload = node.name().partition("Backward")
    return head + ("" if overload == "0" else overload)


def modified_message(tensor_type: str, shape: list[int], producer: str | None, version: int,
                     expected: int) -> str:
    """PyTorch's error for a saved tensor changed in place before backward used it."""
    origin = f", which is output 0 of {producer}," if producer else ""
    # Under anomaly detection PyTorch points at the traceback its warning printed instead.
    hint = ("Hint: the backtrace further above shows the operation that failed to compute its "
            "gradient. The variable in question was changed in there or anywhere later. Good "
            "luck!") if anomaly_mode._enabled else (
        "Hint: enable anomaly detection to find the operation that failed to compute its "
        "gradient, with torch.autograd.set_detect_anomaly(True, check_nan=False).")
    return (
        "one of the variables needed for gradient computation has been modified by an inplace "
        f"operation: [{tensor_type} {shape}]{origin} is at version {version}; expected version "
        f"{expected} instead. {hint}"
    )


class RemovableHandle:
    """What ``register_hook`` returns: ``remove()`` unregisters the hook."""

    __slots__ = ("_hooks", "_hook")

    def __init__(self, hooks: list[Any], hook: Any) -> None:
        self._hooks = hooks
        self._hook = hook

    def remove(self) -> None:
        if any(h is self._hook for h in self._hooks):
            self._hooks.remove(self._hook)


class Node:
    """Base of every backward node; ``type(node).__name__`` is PyTorch's class name."""

    __slots__ = ("next_functions", "_saved", "_info", "_shape", "_dtype", "_pre_hooks", "_seq",
                 "__weakref__")

    # Set on each generated subclass: the op-table row whose derivatives this node runs.
    _row: Any = None
    # A node with several outputs (UnbindBackward0) gets one gradient per output, as a list
    # with None where none arrived, and its tensor hooks are OutputHooks.
    _multi_output = False
    _outputs = 1

    def name(self) -> str:
        """The node's name as ``grad_fn.name()`` returns it in PyTorch."""
        return type(self).__name__

    def __repr__(self) -> str:
        return f"<{type(self).__name__} object at {id(self):#x}>"

    def register_prehook(self, hook: Any) -> None:
        """Call ``hook(grad)`` with the gradient flowing into this node before it runs."""
        if self._pre_hooks is None:
            self._pre_hooks = []
        self._pre_hooks.append(hook)

    def release_variables(self) -> None:
        """Drop saved tensors, as a backward pass without ``retain_graph`` does."""
        if self._saved is not None:
            self._saved = FREED

    def apply(self, grad: Tensor) -> list[Tensor | None]:
        """Gradients for each entry of ``next_functions`` (``None`` where none is needed)."""
        return self._row.backward(self, grad)


class OutputHook:
    """A tensor hook on one output of a node with several: it sees that output's gradient,
    None when none arrived (PyTorch calls it anyway), and may replace it."""

    __slots__ = ("output_nr", "hook")

    def __init__(self, output_nr: int, hook: Any) -> None:
        self.output_nr = output_nr
        self.hook = hook

    def run(self, grads: list[Any]) -> None:
        from refimpl.autograd.engine import _hook_result

        grad = grads[self.output_nr]
        new = self.hook(grad)
        if new is not None:
            grads[self.output_nr] = new if grad is None else _hook_result(self.hook, grad, new)


def init_node(node: Node, next_functions: tuple[Any, ...], output: Any) -> Node:
    """Fill the fields every node has: its edges, no saved tensors or hooks yet, and the shape
    and dtype of the array ``output`` it produced (used to reduce and cast its gradient)."""
    node._seq = next(SEQUENCE)
    if anomaly_mode._enabled:
        anomaly_mode.record(node)
    node.next_functions = next_functions
    node._saved = None
    node._info = None
    node._pre_hooks = None
    node._shape = output.shape
    node._dtype = output.dtype
    return node


class AccumulateGrad(Node):
    """The node at a leaf that requires grad: adds incoming gradients into ``variable.grad``."""

    __slots__ = ("variable",)

    def __init__(self, variable: Tensor) -> None:
        self.variable = variable
        init_node(self, (), variable._data)
        self._seq = ACCUMULATE_GRAD_SEQUENCE

    def name(self) -> str:
        return "torch::autograd::AccumulateGrad"

    def apply(self, grad: Tensor, owned: bool = False) -> list[Tensor | None]:
        """Add ``grad`` into ``variable.grad``; ``owned``: no one else holds ``grad``."""
        if not self.variable._requires_grad:
            # The leaf stopped requiring grad (detach_, requires_grad_(False)) after the
            # graph was built: PyTorch's AccumulateGrad then drops the gradient.
            return []
        self.variable._accumulate_grad(grad, owned)
        return []
