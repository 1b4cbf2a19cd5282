"""The backward pass: an iterative walk over the graph with dependency counts.

``run_backward`` first counts, for every node reachable from the roots, how many edges point
at it; a node is ready once all of them delivered (their gradients summed in its buffer).
Ready nodes run in PyTorch's order (see ``ReadyQueue``), which decides the order gradients are
summed in, the graph a create_graph sum records, the order hooks fire in and which leaves got
their gradient when a node raises. No recursion anywhere, so graph depth is bounded only by
memory. Gradients are checked against
the shape and dtype of the tensor each node produced and reduced/cast there, which is the one
place broadcasting is undone. Saved tensors are released as each node finishes unless
``retain_graph``.
"""

from __future__ import annotations

import functools
import itertools
import threading
from collections.abc import Callable, Sequence
from typing import Any

from refimpl._tensor import Tensor
from refimpl.autograd import anomaly_mode, grad_mode
from refimpl.autograd.graph import SAVED_TENSORS_HOOKS, AccumulateGrad, Node


def _validate(grad: Tensor, node: Node, nr: int, producer: Node | None, index: int) -> Tensor:
    """``grad``, computed by ``producer`` (None for a root) as its output ``index``, reduced and
    cast to what output ``nr`` of ``node`` was; PyTorch's error where no broadcast of that shape
    gives the gradient's (the data of a tensor was replaced by one of another shape)."""
    shape, dtype = node.output_meta(nr) if node._multi_output else (node._shape, node._dtype)
    data = grad._data
    if data.shape == shape and data.dtype == dtype:
        return grad
    from refimpl import _backend
    from refimpl.ops import functional as F

    if data.shape != shape:
        if not _expandable(shape, data.shape):
            head = "" if producer is None else f"Function {producer.name()} returned an "
            raise RuntimeError(f"{head}invalid gradient at index {index} - got "
                               f"{list(data.shape)} but expected shape compatible with "
                               f"{list(shape)}")
        grad = F.sum_to(grad, shape)
    if dtype is not None and grad._data.dtype != dtype:  # None: a leaf's grad_dtype of None
        grad = F.cast_grad(grad, _backend.dtype_of_np(dtype))
    return grad


def _expandable(shape: tuple[int, ...], target: tuple[int, ...]) -> bool:
    """Whether ``shape`` broadcasts to ``target``."""
    if len(shape) > len(target):
        return False
    return all(s == t or s == 1 for s, t in zip(reversed(shape), reversed(target), strict=False))


class ReadyQueue:
    """PyTorch's ready queue: a ``std::priority_queue`` that pops the node with the highest
    sequence number first (the most recently created one; every AccumulateGrad shares the
    largest number). Equal numbers come out in whatever order the binary heap leaves them, so
    push and pop follow libstdc++'s ``push_heap`` and ``pop_heap`` step by step: the order in
    which several leaves accumulate (and their hooks fire) is PyTorch's exactly."""

    __slots__ = ("_heap",)

    def __init__(self) -> None:
        self._heap: list[Node] = []

    def __bool__(self) -> bool:
        return bool(self._heap)

    def push(self, node: Node) -> None:
        self._heap.append(node)
        self._sift_up(len(self._heap) - 1, node)

    def _sift_up(self, hole: int, node: Node) -> None:
        heap = self._heap
        key = node._seq
        while hole > 0:
            parent = (hole - 1) // 2
            if not heap[parent]._seq < key:
                break
            heap[hole] = heap[parent]
            hole = parent
        heap[hole] = node

    def pop(self) -> Node:
        heap = self._heap
        top = heap[0]
        length = len(heap) - 1
        if length > 0:
            # pop_heap: move the last element into the hole left at the top, walking the hole
            # down along the larger child (the left one on a tie), then sift it back up.
            node = heap[length]
            heap[length] = top
            hole = child = 0
            while child < (length - 1) // 2:
                child = 2 * (child + 1)
                if heap[child]._seq < heap[child - 1]._seq:
                    child -= 1
                heap[hole] = heap[child]
                hole = child
            if length % 2 == 0 and child == (length - 2) // 2:
                child = 2 * (child + 1)
                heap[hole] = heap[child - 1]
                hole = child - 1
            self._sift_up(hole, node)
        heap.pop()
        return top


def _discover(roots: Sequence[Node]) -> dict[Node, int]:
    """Dependency count of every node reachable from ``roots``."""
    deps: dict[Node, int] = {}
    stack = list(dict.fromkeys(roots))
    seen = set(roots)
    while stack:
        node = stack.pop()
        for nxt, _ in node.next_functions:
            if nxt is None:
                continue
            deps[nxt] = deps.get(nxt, 0) + 1
            if nxt not in seen:
                seen.add(nxt)
                stack.append(nxt)
    return deps


def _needed(roots: Sequence[Node], deps: dict[Node, int], targets: set[Node]) -> set[Node]:
    """Nodes from which some target is reachable (the only ones ``grad`` has to run)."""
    remaining = dict(deps)
    order: list[Node] = []
    ready = [r for r in dict.fromkeys(roots) if remaining.get(r, 0) == 0]
    while ready:
        node = ready.pop()
        order.append(node)
        for nxt, _ in node.next_functions:
            if nxt is None:
                continue
            remaining[nxt] -= 1
            if remaining[nxt] == 0:
                ready.append(nxt)
    needed: set[Node] = set()
    for node in reversed(order):
        if node in targets or any(n in needed for n, _ in node.next_functions if n is not None):
            needed.add(node)
    return needed


Edge = tuple[Node, int]


def _add(buffers: dict[Node, Any], edge: Edge, g: Tensor) -> Tensor:
    """Sum ``g`` into the buffer of ``edge``'s node (the slot of its output, for a node with
    several) and return the buffered gradient; the earlier gradient comes first, as in
    PyTorch."""
    node, nr = edge
    if node._multi_output:
        slots = buffers.get(node)
        if slots is None:
            slots = buffers[node] = [None] * node._outputs
        old = slots[nr]
        slots[nr] = g = g if old is None else old + g
        return g
    old = buffers.get(node)
    buffers[node] = g = g if old is None else old + g
    return g


# PyTorch's engine runs a backward started inside another one's node (a reentrant backward) in
# the same thread up to this depth, then on a new thread: each thread has a stack of its own,
# so deeply nested backward calls do not exhaust one.
MAX_REENTRANT_DEPTH = 60


class _Depth(threading.local):
    value = 0


_depth = _Depth()


class _Tasks(threading.local):
    """The backward passes running in this thread, innermost last: (id, the nodes it will
    run, whether it is an autograd.grad, whether it computes every gradient), PyTorch's graph
    tasks as hooks can ask about them."""

    def __init__(self) -> None:
        self.stack: list[tuple[int, Any, bool, bool]] = []


_tasks = _Tasks()
_task_ids = itertools.count()


def current_graph_task_id() -> int:
    """The id of the backward pass running in this thread (-1 outside one)."""
    return _tasks.stack[-1][0] if _tasks.stack else -1


def is_checkpoint_valid() -> bool:
    """False inside a backward pass that computes only some gradients (``autograd.grad``,
    ``backward(inputs=...)``), or nested in one: a reentrant checkpoint cannot run there."""
    return all(task[3] for task in _tasks.stack)


def will_engine_execute_node(node: Node) -> bool:
    """Whether the backward pass running in this thread runs ``node`` (for autograd.grad,
    only the nodes that lead to its inputs, the inputs' own included)."""
    if not _tasks.stack:
        raise RuntimeError("_will_engine_execute_node should only be called during the "
                           "backward pass")
    _, nodes, is_grad, _ = _tasks.stack[-1]
    if node not in nodes:
        return False
    if is_grad and type(node) is AccumulateGrad:
        raise RuntimeError("A leaf node was passed to _will_engine_execute_node but we are "
                           "currently running autograd.grad(). This is currently not "
                           "supported.")
    return True


def run_backward(roots: Sequence[Edge], root_grads: Sequence[Tensor], *, retain_graph: bool,
                 create_graph: bool, capture: Sequence[Edge] | None = None,
                 accumulate: bool = True) -> dict[Edge, Tensor]:
    """Run a backward pass (see :func:`_run_backward`), on a new thread when this thread is
    already ``MAX_REENTRANT_DEPTH`` backward calls deep."""
    depth = _depth.value
    if depth >= MAX_REENTRANT_DEPTH:
        return _on_new_thread(functools.partial(
            run_backward, roots, root_grads, retain_graph=retain_graph,
            create_graph=create_graph, capture=capture, accumulate=accumulate))
    _depth.value = depth + 1
    try:
        return _run_backward(roots, root_grads, retain_graph=retain_graph,
                             create_graph=create_graph, capture=capture, accumulate=accumulate)
    finally:
        _depth.value = depth


def _on_new_thread(call: Callable[[], Any]) -> Any:
    """``call()`` on a new thread that starts with this thread's autograd state (grad and
    inference mode, saved-tensors hooks), as PyTorch's ThreadLocalState; its exception is
    raised here."""
    modes = (grad_mode._state.enabled, grad_mode._state.inference)
    hooks = SAVED_TENSORS_HOOKS.snapshot()
    outcome: list[Any] = []

    def target() -> None:
        grad_mode._state.enabled, grad_mode._state.inference = modes
        SAVED_TENSORS_HOOKS.restore(hooks)
        try:
            outcome.append((True, call()))
        except BaseException as error:  # noqa: BLE001 - handed to the caller as it is
            outcome.append((False, error))

    thread = threading.Thread(target=target, name="refimpl-reentrant-backward")
    thread.start()
    thread.join()
    ok, value = outcome[0]
    if not ok:
        raise value
    return value


def _run_backward(roots: Sequence[Edge], root_grads: Sequence[Tensor], *, retain_graph: bool,
                  create_graph: bool, capture: Sequence[Edge] | None = None,
                  accumulate: bool = True) -> dict[Edge, Tensor]:
    """Propagate ``root_grads`` from the ``roots`` edges (node, output number) through the graph.

    With ``capture`` (``autograd.grad``, ``backward(inputs=...)``) only nodes leading to those
    edges run, and the gradient arriving at each captured edge is returned. ``accumulate``
    False means ``AccumulateGrad`` nodes are not run (``autograd.grad`` leaves ``.grad`` alone).
    A node with several outputs (``UnbindBackward0``) buffers one gradient per output, None
    where none arrived, and gets them as a list.
    """
    root_nodes = [node for node, _ in roots]
    deps = _discover(root_nodes)
    targets = {node for node, _ in capture} if capture is not None else None
    target_edges = set(capture) if capture is not None else None
    needed = _needed(root_nodes, deps, targets) if targets is not None else None
    buffers: dict[Node, Any] = {}
    captured: dict[Edge, Tensor] = {}
    prev_mode = grad_mode._state.enabled
    grad_mode._state.enabled = create_graph
    # PyTorch runs every node in the thread-local state captured when backward began: a
    # saved-tensors-hooks context a hook enters (or leaves) ends with its node.
    tls = SAVED_TENSORS_HOOKS
    saved_hooks = tls.snapshot()
    node = None
    # PyTorch's nodes_in_graph: what the graph root reaches; with one root the root is that
    # node itself, not counted, and with several a GraphRoot node leads to each of them.
    if needed is None:
        will_run = set(deps) if len(roots) == 1 else set(deps).union(root_nodes)
    else:
        will_run = needed - {root_nodes[0]} if len(roots) == 1 else needed
    _tasks.stack.append((next(_task_ids), will_run, not accumulate, capture is None))
    try:
        for i, (root, g) in enumerate(zip(roots, root_grads, strict=True)):
            _add(buffers, root, _validate(g, *root, None, i))
        root_set = set(root_nodes)
        # No inputs to capture and no anomaly mode: most nodes take the short path below.
        plain = targets is None and not anomaly_mode._enabled
        ready = ReadyQueue()
        # Several roots hang off one GraphRoot node whose edges count as dependencies: a root
        # is ready at its last edge, in edge order.
        last = {r: i for i, r in enumerate(root_nodes)}
        for i, r in enumerate(root_nodes):
            if last[r] == i and deps.get(r, 0) == 0:
                ready.push(r)
        while ready:
            if tls.stack != saved_hooks[0] or tls.disabled != saved_hooks[1]:
                tls.restore(saved_hooks)
            node = ready.pop()
            grad = buffers.pop(node, None)
            if plain and grad is not None and node._pre_hooks is None and \
                    node._node_pre_hooks is None and node._post_hooks is None and \
                    not node._multi_output and type(node) is not AccumulateGrad:
                # The common case: a node with no hooks in a plain backward pass.
                run = True
                grads = node.apply(grad)
                if not retain_graph:
                    node.release_variables()
            else:
                multi = node._multi_output
                arrived = grad is not None and (not multi or any(g is not None for g in grad))
                run = arrived and (needed is None or node in needed)
                is_leaf = type(node) is AccumulateGrad
                capture_late = False
                if run and targets is not None and not is_leaf and node in targets:
                    # PyTorch captures the gradient of a non-leaf it must run on before that
                    # node's tensor hooks (they run with the node), and that of one it need not
                    # run after them (it calls them first, then captures).
                    if any(n in needed for n, _ in node.next_functions if n is not None):
                        _capture(captured, target_edges, node, grad)
                    else:
                        capture_late = True
                # Tensor hooks (retain_grad's too) also see the gradient of a root that
                # autograd.grad does not need to run, as in PyTorch (no other unneeded node
                # gets one).
                hooks = None
                if run or (arrived and node in root_set):
                    # A leaf's hooks are its _backward_hooks dict, as it is now.
                    hooks = node._pre_hooks if not is_leaf else \
                        node.variable._hooks and list(node.variable._hooks.values())
                if hooks and multi:
                    for hook in hooks:
                        hook.run(grad)
                elif hooks:
                    for hook in hooks:
                        new = hook(grad)
                        if new is not None:
                            grad = _hook_result(hook, grad, new)
                    new = None  # only ``grad`` may hold it (see AccumulateGrad.apply)
                if capture_late:
                    _capture(captured, target_edges, node, grad)
                if run and targets is not None:
                    if is_leaf and node in targets:
                        _capture(captured, target_edges, node, grad)
                    if is_leaf:
                        run = accumulate
                    else:
                        # Run to reach targets further down; backward(inputs=) also runs a
                        # non-leaf input's own node (its hooks included), which sends nothing
                        # on past it, as PyTorch marks that node needed.
                        run = (accumulate and node in targets) or any(
                            n in needed for n, _ in node.next_functions if n is not None)
                if run and node._node_pre_hooks:
                    grad = _call_pre_hooks(node, grad)
                if not run:
                    grads = ()
                elif grad is None or multi and all(g is None for g in grad):
                    # A pre-hook took every gradient away: the node computes none.
                    grads = [None] * len(node.next_functions)
                elif is_leaf:
                    grads = node.apply(grad)
                elif anomaly_mode._enabled:
                    grads = anomaly_mode.apply(node, grad)
                else:
                    grads = node.apply(grad)
                if run and node._post_hooks:
                    if needed is not None:
                        # What the hook sees of an edge that leads to no input of grad(): PyTorch's
                        # node does not compute it.
                        grads = [g if n is not None and n in needed else None
                                 for g, (n, _) in zip(grads, node.next_functions, strict=True)]
                    # PyTorch validates (reduces and casts) a node's gradients before its
                    # post hooks see them.
                    grads = [g if g is None or n is None else _validate(g, n, nr, node, i)
                             for i, (g, (n, nr)) in enumerate(zip(grads, node.next_functions,
                                                                  strict=True))]
                    grads = _call_post_hooks(node, grads, grad)
                if run and not retain_graph:
                    node.release_variables()
                if needed is not None and not (node in needed and any(
                        n in needed for n, _ in node.next_functions if n is not None)):
                    # PyTorch skips a node grad does not need before it reaches its edges: the
                    # nodes past it never become ready.
                    continue
            for i, edge in enumerate(node.next_functions):
                nxt = edge[0]
                if nxt is None:
                    continue
                g = grads[i] if run else None
                if g is not None:
                    data = g._data
                    # _validate's check, inlined for the common gradient that already fits.
                    if nxt._multi_output or data.shape != nxt._shape or \
                            data.dtype != nxt._dtype:
                        g = _validate(g, nxt, edge[1], node, i)
                    if nxt._multi_output:
                        _add(buffers, edge, g)
                    else:
                        old = buffers.get(nxt)
                        if old is not None:
                            g = old + g
                        buffers[nxt] = g
                left = deps[nxt] - 1
                deps[nxt] = left
                if left == 0:
                    ready.push(nxt)
            # The buffers alone hold the gradients sent on: AccumulateGrad counts references
            # to decide whether it may keep one.
            grads = g = old = grad = data = None
    except Exception:
        if node is not None and anomaly_mode._enabled:
            # PyTorch reports the node whose evaluation failed: its hooks, its function, or
            # the check of the gradients it sends on.
            anomaly_mode.report(node)
        raise
    finally:
        grad_mode._state.enabled = prev_mode
        tls.restore(saved_hooks)
        _tasks.stack.pop()
    return captured


def _capture(captured: dict[Edge, Tensor], edges: set[Edge], node: Node, grad: Any) -> None:
    if node._multi_output:
        for nr, g in enumerate(grad):
            if (node, nr) in edges and g is not None:
                captured[(node, nr)] = g
    else:
        captured[(node, 0)] = grad


def _hook_result(hook: Any, grad: Tensor | None, new: Any) -> Tensor:
    """The gradient a hook returned in place of ``grad``, refused where PyTorch refuses it."""
    if not isinstance(new, Tensor):
        raise TypeError(f"expected Variable, but hook returned '{type(new).__name__}'")
    if grad is None:
        raise RuntimeError("can't replace a None gradient with a non-None value")
    if new._type_for_messages() != grad._type_for_messages():
        raise RuntimeError(f"hook '{_hook_name(hook)}' has changed the type of value (was "
                           f"{grad._type_for_messages()} got {new._type_for_messages()})")
    if new._data.shape != grad._data.shape:
        raise RuntimeError(f"hook '{_hook_name(hook)}' has changed the size of value")
    return new


def _hook_results(hook: Any, old: tuple[Any, ...], new: Any) -> tuple[Any, ...]:
    """The tuple of gradients a node hook returned in place of ``old``."""
    if not isinstance(new, tuple):
        raise TypeError(f"expected tuple, but hook returned '{type(new).__name__}'")
    if len(new) != len(old):
        raise RuntimeError(f"hook '{_hook_name(hook)}' has returned an incorrect number of "
                           f"values (got {len(new)}, but expected {len(old)})")
    return tuple(None if n is None else _hook_result(hook, o, n)
                 for o, n in zip(old, new, strict=True))


def _call_pre_hooks(node: Node, grad: Any) -> Any:
    """Run ``register_prehook``'s hooks on the node's output gradients (a tuple, None where
    an output got none); each sees what the previous one returned."""
    grads = tuple(grad) if node._multi_output else (grad,)
    for hook in list(node._node_pre_hooks):
        new = hook(grads)
        if new is not None:
            grads = _hook_results(hook, grads, new)
    return list(grads) if node._multi_output else grads[0]


def _call_post_hooks(node: Node, grads: Sequence[Any], grad: Any) -> list[Any]:
    """Run ``register_hook``'s hooks on what the node computed (one gradient per entry of
    ``next_functions``) and the gradients it was given."""
    inputs = tuple(grads)
    outputs = tuple(grad) if node._multi_output else (grad,)
    for hook in list(node._post_hooks):
        new = hook(inputs, outputs)
        if new is not None:
            inputs = _hook_results(hook, inputs, new)
    return list(inputs)


def _hook_name(hook: Any) -> str:
    return getattr(hook, "__name__", type(hook).__name__)


def roots_of(outputs: Sequence[Tensor]) -> list[Edge]:
    """The edge each output's gradient enters: its grad_fn (at its output number), or its
    AccumulateGrad for a leaf."""
    return [(t._grad_node, t._output_nr) if t._grad_node is not None else (t._grad_accumulator(), 0)
            for t in outputs]


def make_grads(outputs: Sequence[Tensor], grad_outputs: Sequence[Any]) -> list[Tensor]:
    """PyTorch's ``_make_grads``: ones for scalar outputs, shape checks for given gradients."""
    from refimpl import _creation

    grads = []
    for i, (out, g) in enumerate(zip(outputs, grad_outputs, strict=True)):
        if not isinstance(out, Tensor):
            raise AssertionError("Expected output to be a torch.Tensor")
        if g is None:
            if out._requires_grad:
                if out._data.size != 1:
                    raise RuntimeError("grad can be implicitly created only for scalar outputs")
                if out.dtype.kind != "f":
                    raise RuntimeError("grad can be implicitly created only for real scalar "
                                       f"outputs but got {out.dtype!r}")
            g = _creation.ones_like(out)
        elif isinstance(g, Tensor):
            if g._data.shape != out._data.shape:
                raise RuntimeError(
                    f"Mismatch in shape: grad_output[{i}] has a shape of {g.shape!r} and "
                    f"output[{i}] has a shape of {out.shape!r}.")
            if (g.dtype.kind == "c") != (out.dtype.kind == "c"):
                raise RuntimeError(
                    "For complex Tensors, both grad_output and output are required to have the "
                    f"same dtype. Mismatch in dtype: grad_output[{i}] has a dtype of "
                    f"{g.dtype!r} and output[{i}] has a dtype of {out.dtype!r}.")
            if g._device is not out._device:
                # The engine's validate_outputs, after _make_grads' checks.
                raise RuntimeError(f"invalid gradient at index {i} - expected device "
                                   f"{out._device} but got {g._device}")
        else:
            raise TypeError("gradients can be either Tensors or None, but got "
                            f"{type(g).__name__}")
        grads.append(g)
    return grads


def check_outputs(outputs: Sequence[Tensor]) -> None:
    for i, out in enumerate(outputs):
        if out._base is not None:
            out._sync_view()  # PyTorch starts from the output's up-to-date grad_fn
        # A leaf view that requires grad only through its base has no node to start from.
        if not out._requires_grad or (out._grad_node is None and out._follows_base()
                                      and not out._view_requires_grad):
            raise RuntimeError(
                f"element {i} of tensors does not require grad and does not have a grad_fn")
