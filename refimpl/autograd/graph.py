"""Backward graph nodes: ``grad_fn`` objects, ``AccumulateGrad`` and saved tensors.

A node is created by an op that records the graph (see ``refimpl.ops``). It holds
``next_functions`` (one ``(node | None, input_nr)`` pair per differentiable input), the tensors
its derivative formulas need (saved with the version they had), the non-tensor facts those
formulas need (``info``), and the shape and dtype of the tensor it produced, so the engine can
reduce a broadcast gradient and cast it back in one place. Nodes never hold their output
tensors: a chain of a million ops keeps only small node objects alive.
"""

from __future__ import annotations

import contextlib
import itertools
import sys
import threading
import weakref
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from refimpl.autograd import anomaly_mode

if TYPE_CHECKING:
    from refimpl._tensor import Tensor

__all__ = ["Node", "AccumulateGrad", "FREED", "RemovableHandle", "init_node", "SEQUENCE",
           "allow_mutation_on_saved_tensors", "MUTATION_CONTEXT",
           "OutputHook", "TensorHooks", "saved_tensors_hooks", "save_on_cpu", "PackedSaved",
           "disable_saved_tensors_hooks", "register_multi_grad_hook"]

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
    name = node.name()
    head, found, overload = name.rpartition("Backward")  # the last one: BackwardHookFunction
    if not found:
        return name
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


# Node.metadata dicts, made on first access (most nodes never have one).
_METADATA: weakref.WeakKeyDictionary[Any, dict[str, Any]] = weakref.WeakKeyDictionary()


_HANDLE_IDS = itertools.count()


class RemovableHandle:
    """What ``register_hook`` returns: ``remove()`` unregisters the hook, and so does leaving a
    ``with`` block on it. ``id`` numbers the handles of the process, as PyTorch's do: a dict of
    hooks (a tensor's ``_backward_hooks``) keys each hook by its handle's id."""

    __slots__ = ("_hooks", "_hook", "_extra", "id")

    def __init__(self, hooks: list[Any] | dict[int, Any], hook: Any = None, *,
                 extra: tuple[dict[int, Any], ...] = ()) -> None:
        self._hooks = hooks
        self._hook = hook
        # Dicts of the hook's flags (a module's with_kwargs, always_call), keyed by id too.
        self._extra = extra
        self.id = next(_HANDLE_IDS)

    def remove(self) -> None:
        if isinstance(self._hooks, dict):
            for hooks in (self._hooks, *self._extra):
                hooks.pop(self.id, None)
        elif any(h is self._hook for h in self._hooks):
            self._hooks.remove(self._hook)

    def __enter__(self) -> RemovableHandle:
        return self

    def __exit__(self, *exc_info: Any) -> None:
        self.remove()


class TensorHooks:
    """A non-leaf tensor's ``_backward_hooks`` dict as one hook of its grad_fn. PyTorch
    registers the dict itself, once, at the tensor's first ``register_hook``: a hook put into
    it or taken out of it later (by a handle, or by hand) counts, while a dict assigned to
    ``_backward_hooks`` afterwards is never registered. Each hook sees what the one before it
    returned, and is checked under its own name."""

    __slots__ = ("hooks",)

    def __init__(self, hooks: dict[int, Any]) -> None:
        self.hooks = hooks

    def __call__(self, grad: Any) -> Any:
        from refimpl.autograd.engine import _hook_result

        changed = None
        for hook in list(self.hooks.values()):
            new = hook(grad)
            if new is not None:
                grad = changed = _hook_result(hook, grad, new)
        return changed


class _MultiHandle(RemovableHandle):
    """What ``register_multi_grad_hook`` returns: ``remove()`` unregisters its hooks."""

    __slots__ = ("handles",)

    def __init__(self, handles: tuple[RemovableHandle, ...]) -> None:
        self.handles = handles

    def remove(self) -> None:
        for handle in self.handles:
            handle.remove()


def register_multi_grad_hook(tensors: Any, fn: Any, *, mode: str = "all") -> _MultiHandle:
    """Call ``fn`` once per backward pass for gradients of several tensors: with
    ``mode="all"``, with the list of their gradients (None for one the pass does not compute)
    once every one the pass computes is there; with ``mode="any"``, with the first one."""
    from refimpl.autograd import engine

    supported_modes = ("all", "any")
    if mode not in supported_modes:
        raise ValueError(f"Expects mode to be one of {supported_modes} but got {mode}")
    lock = threading.Lock()
    if mode == "any":
        ran: dict[int, bool] = {}

        def first(grad: Any) -> None:
            task = engine.current_graph_task_id()
            with lock:
                done, ran[task] = ran.get(task, False), True
            if not done:
                fn(grad)

        return _MultiHandle(tuple(t.register_hook(first) for t in tensors if t.requires_grad))
    nodes = [_grad_fn_or_accumulator(t) for t in tensors]
    count: dict[int, int] = {}
    expected: dict[int, int] = {}
    buffer: dict[int, list[Any]] = {}

    def hook_for(idx: int) -> Any:
        def collect(grad: Any) -> None:
            task = engine.current_graph_task_id()
            with lock:
                seen = count.get(task, 0)
                count[task] = seen + 1
                if seen == 0:
                    # How many of the tensors this pass reaches, asked on its first call.
                    expected[task] = sum(map(engine.will_engine_execute_node, nodes))
                    buffer[task] = [None] * len(nodes)
            buffer[task][idx] = grad
            if seen == expected[task] - 1:
                grads = buffer.pop(task)
                del count[task], expected[task]
                fn(grads)
        return collect

    return _MultiHandle(tuple(t.register_hook(hook_for(i)) for i, t in enumerate(tensors)))


def _grad_fn_or_accumulator(t: Any) -> Any:
    if t.requires_grad and t.grad_fn is None:
        # A leaf's accumulator, reached as PyTorch reaches it: through a view of the leaf
        # (an inference tensor's view records nothing, so its grad_fn is None here too).
        from refimpl.autograd.grad_mode import enable_grad

        with enable_grad():
            return t.view_as(t).grad_fn.next_functions[0][0]
    if t.grad_fn is None:
        raise AssertionError("Expected gradient function to be set")
    return t.grad_fn


class Node:
    """Base of every backward node; ``type(node).__name__`` is PyTorch's class name."""

    # _pre_hooks: the hooks of the tensors this node produced (register_hook, retain_grad);
    # _node_pre_hooks and _post_hooks: the node's own (register_prehook, register_hook).
    # _primals: what an op run on another engine read (refimpl.ops.kernels), for its vjp.
    __slots__ = ("next_functions", "_saved", "_info", "_shape", "_dtype", "_pre_hooks",
                 "_node_pre_hooks", "_post_hooks", "_seq", "_primals", "__weakref__")

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

    @property
    def metadata(self) -> dict[str, Any]:
        """A dict of the node's own, the same one at every access, for users to keep data on
        (PyTorch's ``Node.metadata``); a node created under anomaly mode holds the forward's
        stack under ``traceback_``."""
        found = _METADATA.get(self)
        if found is None:
            found = _METADATA[self] = {}
            trace = anomaly_mode.forward_trace(self)
            if trace is not None:
                found["traceback_"] = trace
        return found

    def register_prehook(self, hook: Any) -> RemovableHandle:
        """Call ``hook(grad_outputs)`` before this node runs, with a tuple of the gradients of
        its outputs (after its tensors' hooks); a tuple it returns replaces them. Returns a
        handle whose ``remove()`` unregisters the hook."""
        if self._node_pre_hooks is None:
            self._node_pre_hooks = []
        self._node_pre_hooks.append(hook)
        return RemovableHandle(self._node_pre_hooks, hook)

    def register_hook(self, hook: Any) -> RemovableHandle:
        """Call ``hook(grad_inputs, grad_outputs)`` after this node ran: ``grad_inputs`` has
        one gradient per entry of ``next_functions`` (None where none was computed); a tuple
        it returns replaces them. Returns a handle whose ``remove()`` unregisters the hook."""
        if self._post_hooks is None:
            self._post_hooks = []
        self._post_hooks.append(hook)
        return RemovableHandle(self._post_hooks, hook)

    def add_tensor_pre_hook(self, hook: Any) -> None:
        """Run ``hook`` (a tensor's hook, retain_grad's) on the gradient of an output of this
        node, before the node's own pre-hooks."""
        if self._pre_hooks is None:
            self._pre_hooks = []
        self._pre_hooks.append(hook)

    def __call__(self, *grads: Any) -> Any:
        """Run the node's backward on ``grads`` (one per output) in the current grad mode,
        without hooks: the gradient for its one input, or a tuple of them."""
        if len(grads) != self._outputs:
            raise TypeError(f"expected {self._outputs} arguments, got {len(grads)} instead")
        if type(self) is AccumulateGrad:
            if grads[0] is not None:
                self.apply(grads[0])
            return ()
        if self._multi_output:
            out = self.apply(list(grads)) if any(g is not None for g in grads) else None
        else:
            out = self.apply(grads[0]) if grads[0] is not None else None
        if out is None:
            out = [None] * len(self.next_functions)
        return out[0] if len(out) == 1 else tuple(out)

    def output_meta(self, nr: int) -> tuple[tuple[int, ...], Any]:
        """Shape and dtype of output ``nr`` (its gradient is reduced and cast to them)."""
        return self._shape, self._dtype

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
            if grad is None:
                raise RuntimeError("can't replace a None gradient with a non-None value")
            grads[self.output_nr] = _hook_result(self.hook, grad, new)


def init_node(node: Node, next_functions: tuple[Any, ...], output: Any) -> Node:
    """Fill the fields every node has: its edges, no saved tensors or hooks yet, and the shape
    and dtype of the array ``output`` it produced (used to reduce and cast its gradient)."""
    node._seq = next(SEQUENCE)
    if anomaly_mode._enabled:
        anomaly_mode.record(node)
    node.next_functions = next_functions
    node._saved = None
    node._info = None
    node._pre_hooks = node._node_pre_hooks = node._post_hooks = None
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
        grad_dtype = variable._leaf_grad_dtype()
        if grad_dtype is not variable.dtype:
            self.set_grad_dtype(grad_dtype)

    def set_grad_dtype(self, grad_dtype: Any) -> None:
        """Cast incoming gradients to the leaf's ``grad_dtype`` (None: leave them as they
        come), as PyTorch's input metadata of an AccumulateGrad does."""
        from refimpl import _backend

        self._dtype = None if grad_dtype is None else _backend.numpy_dtype(grad_dtype)

    def name(self) -> str:
        return "torch::autograd::AccumulateGrad"

    def apply(self, grad: Tensor) -> list[Tensor | None]:
        """Add ``grad`` into ``variable.grad``."""
        variable = self.variable
        # A leaf that stopped requiring grad (detach_, requires_grad_(False)) after the graph
        # was built gets nothing: PyTorch's AccumulateGrad drops the gradient. Its
        # post-accumulate-grad hooks still run (the engine calls them after the node).
        if variable._requires_grad:
            # PyTorch keeps (steals) the incoming gradient instead of copying it when no other
            # reference to that tensor exists (use_count <= 1): a tensor a hook stored, the
            # user's own gradient passed through unchanged, or one still buffered for another
            # node is copied; a new tensor - a formula's result, or a view of the user's
            # gradient (ViewBackward0's) - is kept. Here the references are Python's: the
            # engine's ``grad``, this frame's, _accumulate_grad's and getrefcount's own.
            variable._accumulate_grad(grad, sys.getrefcount(grad) <= 4)
        hooks = variable._post_accumulate_grad_hooks
        if hooks:
            for hook in list(hooks.values()):
                if hook(variable) is not None:
                    raise RuntimeError("Tensor post accumulate grad hooks should return None.")
        return []


class _SavedTensorsHooksState(threading.local):
    """The ``(pack_hook, unpack_hook)`` pairs of the ``saved_tensors_hooks`` contexts entered
    in this thread, innermost last: only the innermost pair applies, as in PyTorch."""

    def __init__(self) -> None:
        self.stack: list[tuple[Any, Any]] = []
        # The message of the innermost disable_saved_tensors_hooks context, None outside one.
        self.disabled: str | None = None

    def snapshot(self) -> tuple[list[tuple[Any, Any]], str | None]:
        """The state as it is now, for :meth:`restore` (PyTorch's ThreadLocalState)."""
        return list(self.stack), self.disabled

    def restore(self, state: tuple[list[tuple[Any, Any]], str | None]) -> None:
        self.stack[:], self.disabled = state


SAVED_TENSORS_HOOKS = _SavedTensorsHooksState()


class saved_tensors_hooks:  # noqa: N801 - PyTorch's name
    """Context manager under which every tensor a node saves for backward is stored as
    ``pack_hook(tensor)`` returns it, and read back through ``unpack_hook(packed)``::

        with refimpl.autograd.graph.saved_tensors_hooks(lambda t: t.detach(), lambda t: t):
            y = x * w      # packs w and x; backward unpacks them
    """

    def __init__(self, pack_hook: Any, unpack_hook: Any) -> None:
        self.pack_hook = pack_hook
        self.unpack_hook = unpack_hook

    def __enter__(self) -> None:
        if SAVED_TENSORS_HOOKS.disabled is not None:
            raise RuntimeError(SAVED_TENSORS_HOOKS.disabled)
        SAVED_TENSORS_HOOKS.stack.append((self.pack_hook, self.unpack_hook))

    def __exit__(self, *exc: object) -> None:
        SAVED_TENSORS_HOOKS.stack.pop()


@contextlib.contextmanager
def disable_saved_tensors_hooks(error_message: str) -> Iterator[None]:
    """Within this context, entering ``saved_tensors_hooks`` raises RuntimeError with
    ``error_message``; refused (with that message) while such hooks are active."""
    state = SAVED_TENSORS_HOOKS
    previous = state.disabled
    try:
        if state.stack:
            raise RuntimeError(error_message)
        state.disabled = error_message
        yield
    finally:
        state.disabled = previous


class save_on_cpu(saved_tensors_hooks):  # noqa: N801 - PyTorch's name
    """Saved tensors are kept as copies on the cpu and moved back to their device when
    backward reads them."""

    def __init__(self, pin_memory: bool = False, device_type: str = "cuda") -> None:
        def pack(tensor: Tensor) -> tuple[Any, Tensor]:
            from refimpl import _creation

            packed = _creation.empty(tuple(tensor.shape), dtype=tensor.dtype, device="cpu")
            packed.copy_(tensor)
            return tensor.device, packed

        def unpack(packed: tuple[Any, Tensor]) -> Tensor:
            device, tensor = packed
            return tensor.to(device)

        super().__init__(pack, unpack)


class _Handle:
    """What ``allow_mutation_on_saved_tensors`` packs: the key of a saved tensor's value."""


class _MutationContext:
    """The state of one ``allow_mutation_on_saved_tensors`` block: each saved tensor by
    (object id, data pointer, version), which of them share a (data pointer, version), and for
    each handle the original tensor or, once it was about to be written, its clone."""

    def __init__(self) -> None:
        self.cloned: weakref.WeakKeyDictionary[_Handle, Tensor] = weakref.WeakKeyDictionary()
        self.original: weakref.WeakKeyDictionary[_Handle, Tensor] = weakref.WeakKeyDictionary()
        self.handles: weakref.WeakValueDictionary[tuple[int, int, int], _Handle] = \
            weakref.WeakValueDictionary()
        self.aliases: dict[tuple[int, int], set[tuple[int, int, int]]] = {}

    def pack(self, tensor: Tensor) -> _Handle:
        tid = (id(tensor), tensor.data_ptr(), tensor._version)
        self.aliases.setdefault(tid[1:], set()).add(tid)
        handle = self.handles.get(tid)
        if handle is None:  # the same tensor at the same version may be saved again
            handle = self.handles[tid] = _Handle()
            self.original[handle] = tensor
        return handle

    def unpack(self, handle: _Handle) -> Tensor:
        if MUTATION_CONTEXT.active is None or (handle not in self.cloned
                                               and handle not in self.original):
            # PyTorch's text, a space missing between its two literals included.
            raise AssertionError("Trying to backward outside of the "
                                 "'allow_mutation_on_saved_tensors' contextin which the graph "
                                 "was originally recorded.")
        return self.cloned[handle] if handle in self.cloned else self.original[handle]

    def before_write(self, tensor: Tensor) -> None:
        """Clone every saved tensor at ``tensor``'s data pointer and version before it is
        written in place, so backward reads the value it saved."""
        for tid in self.aliases.get((tensor.data_ptr(), tensor._version), ()):
            handle = self.handles.get(tid)
            if handle is None or handle in self.cloned:
                continue  # freed by a backward already, or cloned already
            self.cloned[handle] = self.original.pop(handle).clone()

    def clear(self) -> None:
        self.cloned.clear()
        self.original.clear()
        self.handles.clear()
        self.aliases.clear()


class _MutationState:
    __slots__ = ("active",)

    def __init__(self) -> None:
        self.active: _MutationContext | None = None


# The allow_mutation_on_saved_tensors block in force (one per process, as PyTorch's flag);
# in-place writes ask it to clone what they would overwrite.
MUTATION_CONTEXT = _MutationState()


@contextlib.contextmanager
def allow_mutation_on_saved_tensors() -> Iterator[_MutationContext]:
    """Within this block a tensor saved for backward may be modified in place: it is cloned
    just before the write and backward uses the clone. Run backward inside the same block;
    the blocks do not nest."""
    ctx = _MutationContext()
    with saved_tensors_hooks(ctx.pack, ctx.unpack):
        try:
            if MUTATION_CONTEXT.active is not None:
                raise RuntimeError("allow_mutation_on_saved_tensors contexts cannot be nested")
            MUTATION_CONTEXT.active = ctx
            yield ctx
        finally:
            ctx.clear()
            MUTATION_CONTEXT.active = None


class PackedSaved:
    """A saved tensor as a pack hook stored it. Unpacking gives the unpack hook's values the
    saved tensor's place in the graph: its grad_fn (the saving node itself for one of its
    outputs) or its leaf's AccumulateGrad. PyTorch checks no version counter here: the hooks
    own the values."""

    __slots__ = ("packed", "unpack_hook", "edge", "output_nr")

    def __init__(self, packed: Any, unpack_hook: Any, edge: tuple[Node | None, int] | None,
                 output_nr: int = 0) -> None:
        self.packed = packed
        self.unpack_hook = unpack_hook
        self.edge = edge  # None: an output of the node that saved it
        self.output_nr = output_nr

    def unpack(self, node: Node) -> Tensor:
        from refimpl._tensor import Tensor, wrap

        data = self.unpack_hook(self.packed)
        if not isinstance(data, Tensor):
            raise TypeError("Output of saved tensor unpack_hook expected to be a Tensor but got "
                            f"result of type {type(data).__name__}")
        out = wrap(data._data, data._device)
        out._vc = data._shared_version()
        fn, nr = (node, self.output_nr) if self.edge is None else self.edge
        if type(fn) is AccumulateGrad:
            out._requires_grad = True
            out._grad_acc = weakref.ref(fn)
        elif fn is not None:
            out._grad_node = fn
            out._output_nr = nr
            out._requires_grad = True
        return out
