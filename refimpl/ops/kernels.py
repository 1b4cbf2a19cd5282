"""Running the op table's math on another array engine, under refimpl's autograd state.

refimpl is two things: PyTorch's tensor-level autograd state (leaves, ``requires_grad``,
``.grad``, hooks, grad modes, saved tensors and their version checks, graph freeing) and an op
table whose rows compute forward values and derivatives with NumPy. :func:`install` keeps the
first and takes the second from an engine that has only arrays, functions and vector-Jacobian
products (JAX, MLX, HIPS autograd, ``torch.func``): every row's forward is the engine's
function and every node's backward the engine's ``vjp`` of it, so a value or gradient a case
reads was computed by the engine, and everything else is the state machinery refimpl shares
with every engine installed this way.

What stays refimpl's, by design:

- **Memory layout.** A view row (``view``, ``transpose``, ``select``...) and the in-place
  layout rows (``t_``, ``squeeze_``...) must alias their input, which an immutable engine array
  cannot, and their gradient aliases the incoming one (``x.view(6).backward(g)`` leaves a view
  of ``g`` in ``x.grad``): they keep their NumPy forward and their own formulas, which move
  memory with views and compute with rows (``select_backward``, ``sum``), so what arithmetic
  they do runs on the engine.
- **Which inputs are differentiable and what a node saves.** A node saves what PyTorch's saves
  (the row's formulas say which), so freeing, version checks and saved-tensor hooks behave as in
  PyTorch. The engine's ``vjp`` reads the inputs as they were at the forward (a private snapshot
  the node keeps), except a saved input, which it reads back as backward unpacks it.
- **The gradient's conventions at the tape's level**: summing the gradients of several uses,
  reducing a broadcast gradient, casting it to the input's dtype. Those run as rows, on the
  engine.
- **The shape of PyTorch's gradients beyond their values**, read from the row's own formula
  run on what the node saved with NumPy (``_probe``; its values are thrown away): which inputs
  a create_graph gradient depends on (the gradient of ``x * 2`` is a constant, of ``x * y`` a
  function of ``y`` alone), and whether a gradient is a view of the incoming one (``sum``'s
  is an expanded view, which in-place writes refuse; it is used when the engine's values are
  exactly its).
- **A result a saved-tensor hook changed.** PyTorch's formula reads the saved result as the
  unpack hook gives it back; no vjp of the engine's function can, so such a node runs the row's
  own formula on the hook's values, with ops that run on the engine.
- **Result dtypes.** An op's result has PyTorch's type (read from the row's own forward); an
  engine that computes in another type has its values cast to it.

Under ``create_graph=True`` a node's backward records, for each input, a node whose forward is
the engine's ``vjp`` (a function of the gradient and the op's inputs) and whose own backward is
the engine's ``vjp`` of that, so any order of derivative is the engine's. Such nodes are named
``EngineVjpBackward``: PyTorch's names for them are those of the ops its formulas use, which
only its own formulas can reproduce.

An engine is described by a :class:`Kernels` object::

    class MyKernels(Kernels):
        name = "myengine"
        ops = {"mul.Tensor": lambda self, other: self * other, ...}   # row name -> function
        def to_engine(self, array): ...       # NumPy array -> a snapshot the engine owns
        def to_numpy(self, value): ...        # engine array -> NumPy array
        def vjp(self, fn, primals, cotangent): ...   # -> one gradient per primal

A function takes the engine's arrays for the row's tensor inputs positionally (a ``*tensors``
row takes them all) and the row's parameters as keywords (tensors among them as engine arrays),
exactly as the row's ``forward`` does without its ``xp`` (``refimpl.ops.table``); a row with
extra outputs returns a tuple. An op with no function raises NotImplementedError naming it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy

from refimpl import _backend
from refimpl._tensor import Tensor, wrap
from refimpl.autograd import anomaly_mode, grad_mode
from refimpl.autograd.graph import FREED, SECOND_BACKWARD, SEQUENCE, Node, PackedSaved
from refimpl.ops import table
from refimpl.ops.table import ROWS, OpRow, unpack_saved

__all__ = ["Kernels", "install", "uninstall", "installed", "LAYOUT_ROWS"]

LAYOUT_ROWS = frozenset({"t_", "transpose_", "squeeze_", "squeeze_.dim", "squeeze_.dims",
                         "unsqueeze_", "as_strided_"})
"""In-place rows that only change how a tensor's memory is read: their forward stays NumPy's."""

class Kernels:
    """An engine's arrays, functions and vector-Jacobian products (see the module docstring)."""

    name = "engine"
    ops: dict[str, Callable[..., Any]] = {}
    conjugate = False
    """True when the engine's ``vjp`` of a holomorphic function is ``g * f'(x)`` (JAX, the
    transpose of the linear map) rather than PyTorch's ``g * conj(f'(x))``: the tape then
    conjugates the cotangent and the gradients around it."""

    def to_engine(self, array: Any) -> Any:
        """A NumPy array as the engine's array; a copy the engine owns (later in-place writes
        to ``array`` must not reach it)."""
        raise NotImplementedError

    def to_numpy(self, value: Any) -> numpy.ndarray:
        raise NotImplementedError

    def vjp(self, fn: Callable[..., Any], primals: Sequence[Any],
            cotangent: Any) -> Sequence[Any]:
        """The gradient of ``sum(fn(*primals) * cotangent)`` for each primal."""
        raise NotImplementedError

    def is_zero(self, value: Any) -> bool:
        """Whether ``value`` is a symbolic zero of the engine (PyTorch's ZeroTensor): the
        tape then gives an immutable zero tensor that records no graph, as PyTorch does."""
        return False


_KERNELS: Kernels | None = None
_SAVED_CLASSES: dict[str, tuple[Any, Any, type]] = {}
_PROBING = [False]
"""True while `_probe` runs a row's own formula for its graph's shape alone: the rows
then compute with refimpl's NumPy forwards (the values are thrown away, and the formulas use
helper rows an engine need not have)."""
_LAST: list[Any] = [None, None]
"""The row the engine ran last and the snapshot of its inputs, for the node ``_record``
makes next (an in-place op records after it wrote its input)."""


def installed() -> Kernels | None:
    return _KERNELS


def install(kernels: Kernels) -> None:
    """Run every row on ``kernels`` until :func:`uninstall`."""
    global _KERNELS
    if _KERNELS is kernels:
        return
    uninstall()
    _KERNELS = kernels
    for name, row in ROWS.items():
        if row.is_view or name in LAYOUT_ROWS:
            continue
        _SAVED_CLASSES[name] = (row.forward, row.raw_forward, type(row))
        row.forward = row.raw_forward = _engine_forward(row, row.raw_forward, kernels)
        row.__class__ = EngineRow
    table.RECORD_HOOK = _recorded


def uninstall() -> None:
    """Give every row back its own forward and formulas."""
    global _KERNELS
    for name, (forward, raw_forward, cls) in _SAVED_CLASSES.items():
        row = ROWS[name]
        row.forward, row.raw_forward = forward, raw_forward
        row.__class__ = cls
    _SAVED_CLASSES.clear()
    _KERNELS = None
    table.RECORD_HOOK = None
    _LAST[:] = [None, None]


def _missing(kernels: Kernels, row: OpRow) -> NotImplementedError:
    return NotImplementedError(
        f"{kernels.name} has no function for the op {row.name!r} (PyTorch's {row.node}): add "
        f"one to the adapter's kernel table")


def _engine_params(kernels: Kernels, params: dict[str, Any]) -> dict[str, Any]:
    """The row's parameters with tensors (index tensors, masks) as the engine's arrays."""
    if not params:
        return params
    return {k: _engine_value(kernels, v) for k, v in params.items()}


def _engine_value(kernels: Kernels, value: Any) -> Any:
    if isinstance(value, Tensor):
        return kernels.to_engine(value._data)
    if isinstance(value, numpy.ndarray):
        return kernels.to_engine(value)
    if type(value) in (list, tuple) and any(isinstance(v, (Tensor, numpy.ndarray))
                                            for v in value):
        return type(value)(_engine_value(kernels, v) for v in value)
    return value


def _expected(fn: Callable[..., Any], xp: Any, arrays: tuple[Any, ...],
              params: dict[str, Any]) -> Any:
    """What the row's own forward makes (for its shape and dtype), or None where it refuses."""
    try:
        with numpy.errstate(all="ignore"):
            return fn(xp, *arrays, **params)
    except Exception:  # noqa: BLE001 - the engine's answer stands where PyTorch's would refuse
        return None


def _engine_forward(row: OpRow, own: Callable[..., Any], kernels: Kernels
                    ) -> Callable[..., Any]:
    def forward(xp: Any, *arrays: Any, **params: Any) -> Any:
        if _PROBING[0]:
            return own(xp, *arrays, **params)
        function = kernels.ops.get(row.name)
        if function is None:
            raise _missing(kernels, row)
        primals = [kernels.to_engine(a) for a in arrays]
        engine_params = _engine_params(kernels, params)
        out = function(*primals, **engine_params)
        _LAST[:] = [row, (primals, engine_params)]
        expected = _expected(own, xp, arrays, params)
        if isinstance(out, tuple):
            shapes = expected if isinstance(expected, tuple) else [None] * len(out)
            return tuple(_as_numpy(kernels, row, o, e) for o, e in zip(out, shapes, strict=True))
        return _as_numpy(kernels, row, out, expected)

    return forward


def _host(kernels: Kernels, value: Any) -> numpy.ndarray:
    """An engine array as a NumPy array the tape owns (it writes its arrays in place)."""
    return numpy.array(kernels.to_numpy(value), copy=True)


def _as_numpy(kernels: Kernels, row: OpRow, value: Any, expected: Any) -> Any:
    array = _host(kernels, value)
    if expected is None:
        return array
    expected = numpy.asarray(expected)
    if array.shape != expected.shape:
        raise RuntimeError(
            f"{kernels.name}'s {row.name} gave shape {list(array.shape)} where PyTorch's "
            f"{row.name} gives {list(expected.shape)}")
    if array.dtype != expected.dtype:
        # The result's type is PyTorch's promotion, which the rest of the tape relies on: an
        # engine that computes in another type has its values cast to it.
        array = array.astype(expected.dtype)
    if array.strides != expected.strides:
        # The layout PyTorch gives the result decides what view() accepts later.
        out = numpy.empty_like(expected)
        out[...] = array
        return out
    return array


def _recorded(node: Node, row: OpRow) -> None:
    # Kept after use: forward AD records a second, throwaway node for the op just run
    # (refimpl.autograd.forward_ad.jvp), whose double vjp must be the engine's too.
    if _LAST[0] is row:
        node._primals = _LAST[1]


class EngineRow(OpRow):
    """A row whose nodes take their gradients from the installed engine's ``vjp``."""

    __slots__ = ()

    def backward(self, node: Node, grad: Tensor) -> list[Tensor | None]:
        kernels = _KERNELS
        function = None if kernels is None else kernels.ops.get(self.name)
        forward = getattr(node, "_primals", None)
        if function is None or forward is None:
            return OpRow.backward(self, node, grad)
        primals, params = forward
        saved = node._saved
        if saved is FREED:
            raise RuntimeError(SECOND_BACKWARD)
        primals = list(primals)
        values: list[Any] = [None] * len(saved) if saved else []
        for k in self.unpack_order:
            # Every saved tensor is unpacked and version-checked first, in PyTorch's order; a
            # saved input is read back as unpacked (a hook may have replaced it).
            if saved and saved[k] is not None:
                values[k] = unpack_saved(node, saved[k])
                i = self.save_plan[k][0]
                if i >= 0 and not self.variadic:
                    primals[i] = kernels.to_engine(values[k]._data)
        multi = bool(self.extra_outputs)

        def fn(*arrays: Any) -> Any:
            out = function(*arrays, **params)
            return out[0] if multi else out

        if _hook_changed_result(self, kernels, fn, primals, saved, values):
            # A saved-tensor hook gave back another result than the op's: PyTorch's formula
            # reads it, and no vjp of the engine's function can. The row's own formula runs,
            # on the values the hook gave, with ops that run on the engine.
            return OpRow.backward(self, node, grad, values)

        wanted = [i for i, (next_fn, _) in enumerate(node.next_functions)
                  if next_fn is not None and (self.variadic or self.formulas[i] is not None)]
        deps, layouts = _probe(self, node, values, grad, wanted)
        return _vjp_grads(kernels, fn, primals, node.next_functions, wanted, grad,
                          len(node.next_functions), deps, layouts)


def _hook_changed_result(row: OpRow, kernels: Kernels, fn: Callable[..., Any],
                         primals: list[Any], saved: Any, values: list[Any]) -> bool:
    for k, name in enumerate(row.saved_names):
        if name == "result" and type(saved[k]) is PackedSaved and values[k] is not None:
            with numpy.errstate(all="ignore"):
                result = _host(kernels, fn(*primals))
            return not numpy.array_equal(result, values[k]._data, equal_nan=True)
    return False


def _probe(row: OpRow, node: Node, values: list[Any], grad: Tensor, wanted: list[int]
           ) -> tuple[dict[int, list[int]] | None, dict[int, Any]]:
    """What PyTorch's gradients look like beyond their values, read from the row's own
    formula run on what the node saved (with refimpl's NumPy forwards: only the shapes of the
    results and of their graphs are kept):

    - whether a gradient is a view of the incoming one: ``sum``'s is an expanded view (stride
      0), which in-place writes and ``detach_`` refuse. Where the engine's values are exactly
      the formula's view's, that view is the gradient;
    - under create_graph, for each input the inputs its gradient depends on beyond the incoming
      gradient: the saved tensors the formula differentiably reads (all inputs where that is
      the result). The gradient of ``x * 2`` is a constant, of ``x * y`` a function of ``y``
      alone, of ``maximum(x, x)`` a constant (the formula only compares the inputs).
    """
    create_graph = grad_mode._state.enabled
    count = len(node.next_functions)
    stand_ins: list[Any] = []
    for value in values:
        stand_in = None
        if isinstance(value, Tensor):
            stand_in = wrap(value._data, value._device)
            stand_in._requires_grad = create_graph
        stand_ins.append(stand_in)
    # A gradient that records nothing may be seen by the formula as it is, so a result that
    # is a view of it (sum's expand) is one as in PyTorch.
    incoming = grad
    if create_graph and grad._requires_grad:
        incoming = wrap(grad._data, grad._device)
        incoming._requires_grad = True
    deps: dict[int, list[int]] = {}
    layouts: dict[int, Any] = {}
    for i in wanted:
        formula, spec = row.formulas[0 if row.variadic else i]
        args = [stand_ins[key] if kind == table._SAVED else table._resolve(node, values,
                                                                            (kind, key))
                for kind, key in spec]
        _PROBING[0] = True
        try:
            out = formula(incoming, *args)
            if row.variadic:
                out = out[i]
        except Exception:  # noqa: BLE001 - a formula that cannot run says nothing: assume all
            out = None
        finally:
            _PROBING[0] = False
        if isinstance(out, Tensor) and out._base is not None and not out._requires_grad:
            layouts[i] = out
        if not create_graph:
            continue
        if out is None:
            deps[i] = list(range(count))
            continue
        reached = _leaves(out)
        used: set[int] = set()
        for k, stand_in in enumerate(stand_ins):
            if stand_in is not None and id(stand_in) in reached:
                name = row.saved_names[k]
                used.update(range(count) if name == "result" or row.variadic
                            else [row.inputs.index(name)])
        deps[i] = sorted(used)
    return (deps if create_graph else None), layouts


def _leaves(t: Any) -> set[int]:
    """The ids of the leaf tensors whose AccumulateGrad ``t``'s graph reaches."""
    if not isinstance(t, Tensor) or t._grad_node is None:
        return set()
    seen, found, stack = set(), set(), [t._grad_node]
    while stack:
        node = stack.pop()
        if id(node) in seen:
            continue
        seen.add(id(node))
        variable = getattr(node, "variable", None)
        if variable is not None:
            found.add(id(variable))
        stack.extend(n for n, _ in node.next_functions if n is not None)
    return found


def _vjp_grads(kernels: Kernels, fn: Callable[..., Any], primals: list[Any],
               edges: Sequence[Any], wanted: list[int], grad: Tensor,
               count: int, deps: dict[int, list[int]] | None = None,
               layouts: dict[int, Any] | None = None) -> list[Tensor | None]:
    out: list[Tensor | None] = [None] * count
    if not wanted:
        return out
    dev = grad._device
    if grad_mode._state.enabled:
        # create_graph: each gradient is a node of its own over (grad, the op's inputs).
        grad_edge = table.edge(grad)
        for i in wanted:
            out[i] = _record_vjp(kernels, fn, primals, i,
                                 list(range(count)) if deps is None else deps[i],
                                 grad, grad_edge, edges, dev, (layouts or {}).get(i))
        return out
    grads = _engine_vjp(kernels, fn, primals, kernels.to_engine(grad._data), wanted)
    for i, g in zip(wanted, grads, strict=True):
        array = _host(kernels, g)
        view = _as_view(array, (layouts or {}).get(i))
        if view is not None:
            out[i] = view
            continue
        out[i] = wrap(array, dev)
        out[i]._zero = kernels.is_zero(g)
    return out


def _engine_vjp(kernels: Kernels, fn: Callable[..., Any], primals: Sequence[Any],
                cotangent: Any, wanted: Sequence[int]) -> list[Any]:
    """The gradients of the ``wanted`` primals; the others are constants of the function (an
    integer input, an input that needs no gradient)."""
    def of_wanted(*chosen: Any) -> Any:
        args = list(primals)
        for i, value in zip(wanted, chosen, strict=True):
            args[i] = value
        return fn(*args)

    chosen = [primals[i] for i in wanted]
    # PyTorch computes NaN and inf silently: so does the tape, whatever NumPy an engine uses.
    with numpy.errstate(all="ignore"):
        # By the dtype alone: under create_graph the cotangent may be a traced value.
        if not kernels.conjugate or "complex" not in str(cotangent.dtype):
            return list(kernels.vjp(of_wanted, chosen, cotangent))
        conj = kernels.ops["conj"]
        return [conj(g) for g in kernels.vjp(of_wanted, chosen, conj(cotangent))]


class EngineVjpBackward(Node):
    """The node of a gradient computed under create_graph: the engine's ``vjp`` of its
    function, over (the gradient, the op's inputs)."""

    __slots__ = ()

    def apply(self, grad: Tensor) -> list[Tensor | None]:
        if self._saved is FREED:
            raise RuntimeError(SECOND_BACKWARD)
        kernels, fn = self._info["kernels"], self._info["fn"]
        wanted = [i for i, (next_fn, _) in enumerate(self.next_functions) if next_fn is not None]
        return _vjp_grads(kernels, fn, list(self._primals), self.next_functions, wanted, grad,
                          len(self.next_functions))


def _as_view(array: numpy.ndarray, like: Tensor | None) -> Tensor | None:
    """``like``, the view of the incoming gradient PyTorch's formula makes, where the engine's
    values ``array`` are exactly its (the gradient is then PyTorch's object, with the engine's
    values); else None."""
    if like is not None and like._data.dtype == array.dtype and like._data.shape == \
            array.shape and numpy.array_equal(like._data, array, equal_nan=True):
        return like
    return None


def _record_vjp(kernels: Kernels, fn: Callable[..., Any], primals: list[Any], i: int,
                deps: list[int], grad: Tensor, grad_edge: Any, edges: Sequence[Any],
                dev: _backend.device, like: Tensor | None = None) -> Tensor:
    def gradient(cotangent: Any, *values: Any) -> Any:
        args = list(primals)
        for j, value in zip(deps, values, strict=True):
            args[j] = value
        return _engine_vjp(kernels, fn, args, cotangent, [i])[0]

    inputs = [kernels.to_engine(grad._data), *[primals[j] for j in deps]]
    value = gradient(*inputs)
    result = wrap(_host(kernels, value), dev)
    next_functions = (grad_edge, *[edges[j] for j in deps])
    if kernels.is_zero(value):
        result._zero = True
        return result
    if all(e[0] is None for e in next_functions):
        view = _as_view(result._data, like)
        return result if view is None else view
    node = EngineVjpBackward()
    node._seq = next(SEQUENCE)
    if anomaly_mode._enabled:
        anomaly_mode.record(node)
    node.next_functions = tuple(next_functions)
    node._pre_hooks = node._node_pre_hooks = node._post_hooks = None
    node._shape = result._data.shape
    node._dtype = result._data.dtype
    # PyTorch's formula reads the saved tensors with ops that save them in turn, so such a
    # gradient's graph is freed by a backward pass through it; a gradient linear in the
    # incoming one alone (``grad * 2``) saves nothing.
    node._saved = () if deps else None
    node._info = {"kernels": kernels, "fn": gradient}
    node._primals = inputs
    result._grad_node = node
    result._requires_grad = True
    return result
