"""Custom autograd Functions: ``refimpl.autograd.Function`` and the node it records.

A subclass defines ``forward`` and ``backward`` as static methods, either ``forward(ctx,
*args)`` or ``forward(*args)`` plus ``setup_context(ctx, inputs, output)``, and is used
through ``apply``::

    class Exp(refimpl.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            result = x.exp()
            ctx.save_for_backward(result)
            return result

        @staticmethod
        def backward(ctx, grad):
            (result,) = ctx.saved_tensors
            return grad * result

    y = Exp.apply(x)          # y.grad_fn is an ExpBackward node

``apply`` runs the forward without recording; when grad mode is on and a tensor argument
requires grad, the tensor outputs become the outputs of one node of class ``<Name>Backward``.
As in PyTorch that node is the ``ctx`` the forward saw, so what was saved, ``needs_input_grad``
and any attribute set on it are there for ``backward``. The node takes its edges, saves its
tensors (version checks, saved-tensor hooks, release after backward) and is run by the engine
(hooks, ``retain_graph``, ``create_graph``) exactly like an op-table node: the one difference
is that its gradient formula is the user's ``backward``.
"""

from __future__ import annotations

import functools
import inspect
import warnings
from collections.abc import Callable, Sequence
from typing import Any

from refimpl._tensor import Tensor, wrap
from refimpl.autograd import forward_ad, grad_mode
from refimpl.autograd.graph import FREED, SECOND_BACKWARD, Node, init_node

__all__ = ["Function", "FunctionCtx", "BackwardCFunction", "once_differentiable"]

ONCE_DIFFERENTIABLE = ("trying to differentiate twice a function that was marked with "
                       "@once_differentiable")
LEAF_IN_PLACE = "a leaf Variable that requires grad has been used in an in-place operation."
LEAF_VIEW_IN_PLACE = ("a view of a leaf Variable that requires grad is being used in an in-place "
                      "operation.")
DIRTY_NOT_INPUT = ("ctx.mark_dirty() received a tensor that was not an input. Only input Tensors "
                   "that have been mutated should be passed to ctx.mark_dirty().")
DIRTY_VIEW_MULTIPLE_OUTPUTS = (
    "If your Function modifies inplace an input that is a view of another Tensor, your Function "
    "cannot return more than one Tensor. This is not supported by the current autograd engine. "
    "You should either make sure the input is not a view (using .clone() for example) or make "
    "your Function only return one Tensor (potentially splitting it into two Functions: one "
    "doing the inplace that returns a single Tensor and a second one that does the other "
    "operations). You can ask on the forum https://discuss.pytorch.org/ if you need help to do "
    "this change.")
DIRTY_NOT_RETURNED = ("Some elements marked as dirty during the forward method were not returned "
                      "as output. The inputs that are modified inplace must all be outputs of the "
                      "Function.")


CLEARED_ON_ACCESS = (
    "saved_tensors can only be accessed once when clear_saved_tensors_on_access=True is set on "
    "the autograd.Function. Either access saved_tensors only once, or set "
    "clear_saved_tensors_on_access=False.")


class _Cleared(tuple):
    """A node's saved entries once read under ``clear_saved_tensors_on_access``: empty, and
    apart from every other empty tuple."""

    __slots__ = ()


_CLEARED_ON_ACCESS = _Cleared()


class FunctionCtx:
    """What ``forward`` (or ``setup_context``) tells ``backward`` through ``ctx``."""

    to_save: tuple[Any, ...] = ()
    dirty_tensors: tuple[Any, ...] = ()
    non_differentiable: tuple[Any, ...] = ()
    materialize_grads = True

    def save_for_backward(self, *tensors: Tensor | None) -> None:
        """Keep ``tensors`` (or None) for ``backward``, which reads them back through
        ``saved_tensors`` after checking that none was modified in place since."""
        self.to_save = tensors

    def mark_dirty(self, *args: Tensor) -> None:
        """Say which inputs the forward modified in place (they are returned as outputs)."""
        self.dirty_tensors = args

    def mark_non_differentiable(self, *args: Tensor) -> None:
        """Say which outputs do not require grad; ``backward`` still gets a gradient for each,
        zeros of its shape."""
        self.non_differentiable = args

    def set_materialize_grads(self, value: bool) -> None:
        """With False, ``backward`` gets None for an output that received no gradient instead
        of zeros."""
        self.materialize_grads = value


class BackwardCFunction(Node, FunctionCtx):
    """The node of one ``apply`` of a custom Function, and its ``ctx``; one subclass per
    Function, named ``<Name>Backward`` as in PyTorch. It has one output per output of the
    forward (None for a non-tensor one), so the engine hands it a list of gradients."""

    _forward_cls: Any = None
    _multi_output = True
    __repr__ = object.__repr__

    def __call__(self, *grads: Any) -> Any:
        # PyTorch's Python nodes cannot be called; only its C++ nodes can.
        raise TypeError(f"'{type(self).__name__}' object is not callable")

    def output_meta(self, nr: int) -> tuple[tuple[int, ...], Any]:
        shape, np_dtype, _, _ = self._output_metas[nr]
        return shape, np_dtype

    @property
    def saved_tensors(self) -> tuple[Tensor | None, ...]:
        """The tensors ``save_for_backward`` kept, checked for in-place changes."""
        from refimpl.ops.table import unpack_saved

        saved = self._saved
        if saved is FREED:
            raise RuntimeError(SECOND_BACKWARD)
        if saved is _CLEARED_ON_ACCESS:
            raise RuntimeError(CLEARED_ON_ACCESS)
        tensors = tuple(None if entry is None else unpack_saved(self, entry) for entry in saved)
        if self._forward_cls.clear_saved_tensors_on_access:
            self._saved = _CLEARED_ON_ACCESS
        return tensors

    def apply(self, grads: list[Tensor | None]) -> list[Tensor | None]:
        """Run the Function's ``backward`` on one gradient per output; one gradient per
        tensor argument of the forward comes back."""
        if self.materialize_grads:
            grads = [_zeros(meta) if g is None and meta is not None else g
                     for g, meta in zip(grads, self._output_metas, strict=True)]
        cls = self._forward_cls
        backward = cls.backward
        if cls.vjp is not Function.vjp:
            if backward is not Function.backward:
                raise RuntimeError("Implementing both 'backward' and 'vjp' for a custom "
                                   "Function is not allowed. You should only implement one of "
                                   "them.")
            backward = cls.vjp
        result = backward(self, *grads)
        if not isinstance(result, tuple):
            result = (result,)
        expected = len(self.needs_input_grad)
        if len(result) > expected and all(g is None for g in result[expected:]):
            result = result[:expected]
        if len(result) != expected:
            raise RuntimeError(f"function {self.name()} returned an incorrect number of "
                               f"gradients (expected {expected}, got {len(result)})")
        out = []
        for i, (g, is_tensor) in enumerate(zip(result, self._tensor_args, strict=True)):
            if is_tensor:
                out.append(g)
            elif g is not None:
                raise RuntimeError(f"function {self.name()} returned a gradient different than "
                                   f"None at position {i + 1}, but the corresponding forward "
                                   "input was not a Variable")
        return out


def _zeros(meta: tuple[Any, ...]) -> Tensor:
    from refimpl import _creation

    shape, _, dtype, device = meta
    return _creation.zeros(shape, dtype=dtype, device=device)


class FunctionMeta(type):
    """Gives every Function subclass its node class, ``<Name>Backward``."""

    def __init__(cls, name: str, bases: tuple[type, ...], attrs: dict[str, Any]) -> None:
        cls._backward_cls = type(f"{name}Backward", (BackwardCFunction,),
                                 {"_forward_cls": cls, "__module__": __name__,
                                  "__qualname__": f"{name}Backward"})
        super().__init__(name, bases, attrs)


class Function(FunctionCtx, metaclass=FunctionMeta):
    """Base class of custom autograd Functions (see the module docstring)."""

    # True: ctx.saved_tensors may be read once; the node then drops its references.
    clear_saved_tensors_on_access = False

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        warnings.warn(
            f"{self.__class__} should not be instantiated. Methods on autograd functions are "
            "all static, so you should invoke them on the class itself. Instantiating an "
            "autograd function will raise an error in a future version of PyTorch.",
            DeprecationWarning, stacklevel=2)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        raise RuntimeError(
            "Legacy autograd function with non-static forward method is deprecated. Please use "
            "new-style autograd function with static forward method. (Example: "
            "https://pytorch.org/docs/stable/autograd.html#torch.autograd.Function)")

    @staticmethod
    def forward(*args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError(
            "You must implement the forward function for custom autograd.Function.")

    @staticmethod
    def setup_context(ctx: Any, inputs: tuple[Any, ...], output: Any) -> Any:
        raise NotImplementedError("setup_context is not implemented.")

    @staticmethod
    def backward(ctx: Any, *grad_outputs: Any) -> Any:
        raise NotImplementedError(
            "You must implement either the backward or vjp method for your custom "
            "autograd.Function to use it with backward mode AD.")

    # A Function may define its backward under this name instead.
    vjp = backward

    @staticmethod
    def jvp(ctx: Any, *grad_inputs: Any) -> Any:
        raise NotImplementedError("You must implement the jvp function for custom "
                                  "autograd.Function to use it with forward mode AD.")

    @classmethod
    def apply(cls, *args: Any, **kwargs: Any) -> Any:
        """Run ``forward`` on ``args`` and record its node when grad mode is on and a tensor
        argument requires grad."""
        from refimpl.ops.table import edge

        separate = cls.setup_context is not Function.setup_context
        if separate:
            # setup_context sees every argument forward has, defaults filled in, as PyTorch
            # binds them before the call.
            args = _bound(cls.forward, args, kwargs)
            kwargs = {}
        ctx = cls._backward_cls()
        ctx.needs_input_grad = tuple(isinstance(a, Tensor) and a._requires_grad for a in args)
        ctx._tensor_args = tuple(isinstance(a, Tensor) for a in args)
        recording = grad_mode.is_grad_enabled() and any(ctx.needs_input_grad)
        # The edges the inputs have before the forward (which may modify them in place).
        edges = tuple(edge(a) for a in args if isinstance(a, Tensor)) if recording else ()
        # Forward runs with neither mode on: its ops record no graph and compute no tangent
        # (jvp gives the outputs theirs).
        fw_state = forward_ad._state
        fw_busy = fw_state.busy
        fw_state.busy = True
        try:
            with grad_mode.no_grad():
                if separate:
                    output = cls.forward(*args)
                    cls.setup_context(ctx, args, output)
                else:
                    output = cls.forward(ctx, *args, **kwargs)
        finally:
            fw_state.busy = fw_busy
        single = not isinstance(output, tuple)
        raw = (output,) if single else output
        outputs = _wrap_outputs(ctx, args, raw, edges, recording)
        if forward_ad.is_active():
            _forward_tangents(cls, ctx, args, raw, outputs)
        # As in PyTorch, ctx lets go of what forward named once the outputs are wrapped: the
        # node keeps no reference to its own outputs (no cycle through a saved output).
        ctx.to_save = ctx.dirty_tensors = ctx.non_differentiable = None
        return outputs[0] if single else outputs


def _bound(forward: Callable[..., Any], args: tuple[Any, ...],
           kwargs: dict[str, Any]) -> tuple[Any, ...]:
    """``args`` and ``kwargs`` as the positional arguments of ``forward``, defaults included."""
    try:
        signature = inspect.signature(forward)
    except (TypeError, ValueError):
        return args
    bound = signature.bind(*args, **kwargs)
    bound.apply_defaults()
    return bound.args


def _forward_tangents(cls: type, ctx: Any, args: Sequence[Any], raw: tuple[Any, ...],
                      outputs: tuple[Any, ...]) -> None:
    """Inside a forward AD level, the outputs' tangents from the Function's ``jvp``, given
    one tangent per argument (None where it has none), checked as PyTorch checks them: none
    for an output that is not differentiable, and the input's own tangent, modified in place,
    for an input marked dirty."""
    tangents = [a._fw_grad if isinstance(a, Tensor) else None for a in args]
    if all(t is None for t in tangents):
        return
    result = cls.jvp(ctx, *tangents)
    results = result if isinstance(result, tuple) else (result,)
    dirty = ctx.dirty_tensors or ()
    non_differentiable = ctx.non_differentiable or ()
    # A jvp returning fewer tangents than outputs leaves the rest without one.
    for i, (before, out, tangent) in enumerate(zip(raw, outputs, results, strict=False)):
        if tangent is None:
            continue
        if not isinstance(before, Tensor) or before.dtype.kind not in "fc" or \
                any(before is n for n in non_differentiable):
            raise RuntimeError(f"Function's jvp returned a gradient at position {i}, but  the "
                               "corresponding forward output is not a differentiable Tensor."
                               "You should return None at that position instead.")
        if any(before is d for d in dirty):
            k = next(k for k, a in enumerate(args) if a is before)
            if tangent is not tangents[k]:
                raise RuntimeError(
                    "An inplace custom Function is not modifying the forward mode gradients "
                    "inplace. If the forward is modifying an input inplace, then the jvp "
                    "function must modify the corresponding gradient inplace.")
            continue
        if isinstance(tangent, Tensor):
            forward_ad.set_tangent(out, tangent)


def _wrap_outputs(node: BackwardCFunction, args: Sequence[Any], outputs: tuple[Any, ...],
                  edges: tuple[Any, ...], recording: bool) -> tuple[Any, ...]:
    """PyTorch's ``_wrap_outputs``: make the tensor outputs outputs of ``node`` (an input
    marked dirty becomes one itself; an input returned unchanged is returned as a view of
    itself), then save what ``save_for_backward`` named."""
    from refimpl.ops import inplace
    dirty = node.dirty_tensors
    non_differentiable = node.non_differentiable
    if recording and any(not any(d is a for a in args) for d in dirty):
        warnings.warn(DIRTY_NOT_INPUT, UserWarning, stacklevel=4)
    if any(not any(d is o for o in outputs) for d in dirty):
        raise RuntimeError(DIRTY_NOT_RETURNED)
    wrapped: list[Any] = []
    metas: list[Any] = []
    rebase: list[Tensor] = []
    for nr, out in enumerate(outputs):
        if not isinstance(out, Tensor):
            wrapped.append(out)
            metas.append(None)
            continue
        metas.append((out._data.shape, out._data.dtype, out.dtype, out._device))
        is_input = any(out is a for a in args)
        is_modified = any(out is d for d in dirty)
        if is_modified:
            out._bump_version()
        if not (recording and out.dtype.kind in "fc"
                and not any(out is n for n in non_differentiable)):
            # PyTorch never changes an input's requires_grad here: an input that requires
            # grad comes back as a detached alias, any other tensor output that requires grad
            # (one forward did not compute) is detached, unless it is a view.
            if not out._requires_grad:
                if is_input and not is_modified:
                    out = _view_as_self(out)
            elif is_input:
                out = out.detach()
            elif out._base is None:
                out.detach_()
            _mark_custom_view(out, is_input and is_modified)
            wrapped.append(out)
            continue
        if is_modified:
            if out._grad_node is None and out._requires_grad:
                raise RuntimeError(LEAF_IN_PLACE)
            if out._base is not None and out._base._grad_node is None and \
                    out._base._requires_grad:
                raise RuntimeError(LEAF_VIEW_IN_PLACE)
            if out._base is not None and len(outputs) > 1:
                raise RuntimeError(DIRTY_VIEW_MULTIPLE_OUTPUTS)
            # PyTorch transplants the modified tensor into the new graph: a gradient it
            # retained belongs to the old one.
            out._grad = None
            if out._base is not None:
                rebase.append(out)
        elif is_input:
            out = _view_as_self(out)
        out._grad_node = node
        out._output_nr = nr
        out._requires_grad = True
        if out._base is not None:
            # The node is the view's grad_fn as of now, however often forward wrote it.
            out._attr_version = out._vc[0]
        _mark_custom_view(out, is_input and is_modified)
        wrapped.append(out)
    if recording:
        first = next((o for o in wrapped if isinstance(o, Tensor)), None)
        if first is not None:
            init_node(node, edges, first._data)
            node._outputs = len(wrapped)
            node._output_metas = metas
            node._saved = _save(node, wrapped)
        for view in rebase:
            # A view modified in place: as for an op written through a view, its base's
            # grad_fn becomes CopySlices around this node and the view's AsStridedBackward0.
            inplace.rebase_history(view, node)
    return tuple(wrapped)


def _mark_custom_view(out: Tensor, dirty_input: bool) -> None:
    """A view the Function returns (not an input it marked dirty) may not be rewired by an
    in-place op later: the op's graph would replace the custom backward. PyTorch marks it so
    whatever mode created it."""
    if out._base is not None and not dirty_input:
        out._no_grad_view = False
        out._multi_output = False
        out._custom_view = True


def _view_as_self(tensor: Tensor) -> Tensor:
    """An input returned as it is comes back as a new view of itself (its own autograd
    state), which an in-place op may change as any view."""
    with grad_mode.no_grad():
        return tensor.view_as(tensor)


def _save(node: BackwardCFunction, outputs: list[Any]) -> tuple[Any, ...]:
    """The saved entries of what ``save_for_backward`` named, as op-table nodes keep theirs
    (an output of the node is kept without a reference to it), packed by saved-tensor hooks."""
    from refimpl.autograd.graph import SAVED_TENSORS_HOOKS
    from refimpl.ops.table import pack_saved

    saved: list[Any] = []
    for i, t in enumerate(node.to_save):
        if t is None:
            saved.append(None)
        elif not isinstance(t, Tensor):
            raise TypeError("save_for_backward can only save variables, but argument "
                            f"{i} is of type {type(t).__name__}")
        else:
            nr = next((k for k, o in enumerate(outputs) if o is t), None)
            if nr is not None and t._grad_node is node:
                vc = t._shared_version()
                saved.append((t._data, vc[0], vc, nr))
            else:
                saved.append((t, t._version, t._grad_node is not None))
    node._saved = tuple(saved)
    if saved and SAVED_TENSORS_HOOKS.stack:
        pack_saved(node, outputs)
    return node._saved


class Error(Node):
    """PyTorch's ``Error`` node (made by ``DelayedError``): differentiating through it
    raises its message."""

    def __init__(self, message: str, outputs: Sequence[Tensor | None]) -> None:
        from refimpl.ops.table import edge

        self.message = message
        # One input per output, None included: its edge is (None, 0), as for any input that
        # is not a tensor.
        fakes = [None if o is None else o.detach().requires_grad_() for o in outputs]
        first = next(o for o in outputs if o is not None)
        init_node(self, tuple((None, 0) if f is None else edge(f) for f in fakes), first._data)
        self._outputs = len(outputs)
        self._multi_output = len(outputs) > 1
        self._metas = [None if o is None else (o._data.shape, o._data.dtype) for o in outputs]

    def name(self) -> str:
        return "torch::autograd::Error"

    def output_meta(self, nr: int) -> tuple[tuple[int, ...], Any]:
        return self._metas[nr]

    def apply(self, grad: Any) -> list[Tensor | None]:
        raise RuntimeError(self.message)


def once_differentiable(fn: Callable[..., Any]) -> Callable[..., Any]:
    """Decorate a Function's ``backward`` that cannot be differentiated: it runs without
    recording, and when a graph is being built its results lead to an ``Error`` node that
    raises if a later backward reaches it."""

    @functools.wraps(fn)
    def wrapper(ctx: Any, *args: Any) -> Any:
        with grad_mode.no_grad():
            outputs = fn(ctx, *args)
        if not grad_mode.is_grad_enabled():
            return outputs
        if not any(isinstance(a, Tensor) and a._requires_grad for a in args):
            return outputs
        single = not isinstance(outputs, tuple)
        outs = (outputs,) if single else outputs
        if not any(isinstance(o, Tensor) for o in outs):
            return outputs
        # PyTorch's DelayedError node takes every output, None ones too, so an output's number
        # is its position.
        node = Error(ONCE_DIFFERENTIABLE, [o if isinstance(o, Tensor) else None for o in outs])
        wrapped = []
        for nr, o in enumerate(outs):
            if isinstance(o, Tensor):
                o = wrap(o._data, o._device)
                o._grad_node = node
                o._output_nr = nr
                o._requires_grad = True
            wrapped.append(o)
        return wrapped[0] if single else tuple(wrapped)

    return wrapper
