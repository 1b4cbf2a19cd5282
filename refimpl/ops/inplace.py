"""In-place ops: version counters, PyTorch's leaf checks, and ``CopySlices`` for views.

An in-place op computes its result out of place with the same op-table row, writes it into
the tensor's array, bumps the version counter shared with every view of that storage, and (when
recording) makes the row's node the tensor's new ``grad_fn``. Writing through a view of a tensor
that requires grad rewires the *base*: its ``grad_fn`` becomes ``CopySlices`` (the base's old
graph outside the view, the op's derivative inside it) and the view's becomes
``AsStridedBackward0``, as in PyTorch.
"""

from __future__ import annotations

import math
import warnings
from typing import Any

import numpy

from refimpl import _backend, _dtype
from refimpl._tensor import (
    ZERO_TENSOR_COPY,
    ZERO_TENSOR_IMMUTABLE,
    Tensor,
    _copy,
    check_no_internal_overlap,
    update_hooks_on_new_grad_fn,
    view_write_refusal,
    wrap,
)
from refimpl.autograd import forward_ad, grad_mode
from refimpl.autograd.graph import MUTATION_CONTEXT, SECOND_BACKWARD, Node, init_node
from refimpl.ops import derivatives as D
from refimpl.ops import functional as F
from refimpl.ops.table import FORWARD_AD_ROOTS, INFERENCE_SAVED, _record, edge

__all__ = ["add_", "sub_", "mul_", "div_", "pow_", "exp_", "sin_", "cos_", "tanh_", "sigmoid_",
           "log_", "sqrt_", "neg_", "abs_", "relu_", "t_", "transpose_", "squeeze_", "unsqueeze_",
           "zero_", "fill_", "copy_",
           "clamp_", "index_put_", "setitem"]

LEAF_INPLACE = "a leaf Variable that requires grad is being used in an in-place operation."
PARTIAL_OVERLAP = ("unsupported operation: some elements of the input tensor and the written-to "
                   "tensor refer to a single memory location. Please clone() the tensor before "
                   "performing the operation.")
EXPANDED_INDEX_PUT = ("Use of index_put_ on expanded tensors is deprecated. Please clone() the "
                      "tensor before performing this operation. This also applies to advanced "
                      "indexing e.g. tensor[indices] = tensor")
VIEW_OF_LEAF_INPLACE = ("a view of a leaf Variable that requires grad is being used in an "
                        "in-place operation.")


# Views of another dtype than their base (refimpl.ops.complex_views): PyTorch replays them
# to rewrite a base's history, as no as_strided of the base describes them.
_DTYPE_VIEWS = ("view_as_real", "view_as_complex")


def _replay_chain(view_fn: Any) -> list[tuple[Any, dict[str, Any]]]:
    # A view remembers (parent chain, row, params); unroll it to base-first order.
    steps = []
    while view_fn is not None:
        view_fn, row, params = view_fn
        if row.name in _DTYPE_VIEWS:
            raise NotImplementedError(
                f"refimpl cannot record an in-place write through a {row.name} view of a "
                "tensor that requires grad (PyTorch replays the view to rewrite the base's "
                "history); write into the base itself, or under torch.no_grad()")
        steps.append((row, params))
    steps.reverse()
    return steps


def replay_on_array(xp: Any, array: Any, steps: list[tuple[Any, dict[str, Any]]]) -> Any:
    """The view of ``array`` that ``steps`` describe (shares memory with ``array``)."""
    for row, params in steps:
        array = row.forward(xp, array, **params) if params else row.forward(xp, array)
    return array


def view_geometry(shape: tuple[int, ...],
                  steps: list[tuple[Any, dict[str, Any]]]) -> dict[str, Any]:
    """The ``size``, ``stride`` and ``offset`` (in elements) of the view ``steps`` take of a
    row-major tensor of ``shape``: the parameters of the ``as_strided`` PyTorch uses instead.

    Geometry is metadata, so it is worked out on the host whatever the tensor's device: the
    view is replayed on a probe whose elements are their own offsets."""
    probe = numpy.arange(math.prod(shape)).reshape(shape)
    view = replay_on_array(numpy, probe, steps)
    return {"size": tuple(view.shape),
            "stride": tuple(st // probe.itemsize for st in view.strides),
            "offset": int(view[(0,) * view.ndim]) if view.size else 0}


class CopySlices(Node):
    """The base's node after an in-place op wrote through one of its views.

    Its backward is PyTorch's, op for op, so that under create_graph it records the same nodes:
    the gradient is copied into a new tensor (``CopyBackwards``), the op's node runs on a clone
    of the written region (an ``AsStridedBackward0`` view, cloned), and the gradient it gives
    the region is copied back into it (a ``CopySlices`` of its own).
    """

    __slots__ = ("fn", "_steps")

    def name(self) -> str:
        return "torch::autograd::CopySlices"

    def release_variables(self) -> None:
        # PyTorch drops the op's node itself, saved tensors or not: a second pass through
        # this node without retain_graph is refused even when the op saved nothing.
        self.fn = None

    def apply(self, grad: Tensor) -> list[Tensor | None]:
        if self.fn is None:
            raise RuntimeError(SECOND_BACKWARD)
        result = F.zeros(self._shape, dtype=grad.dtype, device=grad.device)
        copy_(result, grad)
        region = F.apply(D.AS_STRIDED, (result,), view_geometry(self._shape, self._steps))
        region_grad = F.clone(region)
        # A custom Function's node (a view marked dirty) takes one gradient per output.
        grads = self.fn.apply([region_grad] if self.fn._multi_output else region_grad)
        if not grads or grads[0] is None:
            # PyTorch skips an undefined gradient for the region: the base gets none.
            return [None, *grads[1:]]
        copy_(region, grads[0])
        return [result, *grads[1:]]


class AsStridedBackward0(Node):
    """The node of a view written in place: its gradient lands in the base's region, by
    PyTorch's ``as_strided_backward`` for the view's geometry."""

    __slots__ = ("_steps", "_base_shape")

    def apply(self, grad: Tensor) -> list[Tensor | None]:
        geometry = view_geometry(self._base_shape, self._steps)
        return [D.as_strided_backward(grad, self._base_shape, **geometry)]


def _check_leaf(self: Tensor) -> None:
    if self._grad_node is None and self._requires_grad and self._base is None:
        raise RuntimeError(LEAF_INPLACE)
    base = self._base
    # PyTorch asks whether the view requires grad and its base is a leaf: a view recorded
    # before its leaf base stopped requiring grad still refuses.
    if base is not None and base._grad_node is None and self._requires_grad:
        raise RuntimeError(VIEW_OF_LEAF_INPLACE)


def _new_node(row: Any, old_self: Tensor, others: list[Tensor], params: dict[str, Any] | None,
              result: Tensor, before: tuple[tuple[Any, ...], list[int]]) -> Node:
    _record(row, [old_self, *others], {**row.param_defaults, **(params or {})}, result, None,
            result._device, before)
    return result._grad_node


def check_write(row: Any, self: Tensor, others: list[Tensor], memory: bool = True,
                normal_operand: bool = False) -> None:
    """The checks before an in-place write, in PyTorch's order: autograd's (views taken under
    no_grad, leaves), then (unless ``memory`` is False) the memory checks, before any shape or
    dtype check.

    ``normal_operand``: a normal tensor the op dispatches on besides ``self`` and ``others``:
    a Python number PyTorch wraps in one (add_, sub_, mul_, div_), or a normal index tensor
    (index_put_). An op whose tensors are all inference tensors carries no autograd dispatch
    key in PyTorch: it skips autograd's checks, writes, and only then refuses (see
    ``Tensor._bump_version``), even on a leaf that requires grad."""
    if grad_mode.recording() and (normal_operand or not self._inference
                                  or any(not o._inference for o in others)):
        refusal = view_write_refusal(self)
        if refusal is not None and (self._requires_grad
                                    or any(o._requires_grad for o in others)):
            raise RuntimeError(refusal(self, indirect=False))
        if self._base is not None:
            self._sync_view()
        _check_leaf(self)
    if MUTATION_CONTEXT.active is not None:
        # Below autograd's checks, as PyTorch's dispatch mode: clone what the write overwrites.
        MUTATION_CONTEXT.active.before_write(self)
    if not memory:
        return
    if row is not D.ZERO_ and row is not D.FILL_:
        # PyTorch's zero_ and fill_ write every element the same value, so they allow it.
        check_no_internal_overlap(self._data)
    for o in others:
        if o._device is self._device and _backend.partial_overlap(self._data, o._data):
            raise RuntimeError(PARTIAL_OVERLAP)


def inplace(row: Any, self: Tensor, others: list[Tensor], arrays: list[Any],
            params: dict[str, Any] | None = None, same_device: bool = True,
            checked: bool = False) -> Tensor:
    """Apply ``row`` to ``self`` in place (``arrays``: the promoted inputs, self first;
    ``checked``: the caller already ran :func:`check_write`)."""
    if not checked:
        check_write(row, self, others)
    if self._zero:
        # Autograd's checks come first; the kernel then refuses to write a ZeroTensor.
        raise RuntimeError(ZERO_TENSOR_COPY if row is D.COPY_ else ZERO_TENSOR_IMMUTABLE)
    recording = grad_mode.recording()
    if others and same_device:
        F.same_device([self, *others])
    xp = _backend.backend_of(self._device).xp
    all_params = {**row.param_defaults, **(params or {})}
    out = row.forward(xp, *arrays, **all_params) if all_params else row.forward(xp, *arrays)
    # Only a floating or complex self can carry a gradient: copying a tensor that requires
    # grad into an integer one records nothing.
    # An op whose tensors are all inference tensors runs below autograd (a detach() of one
    # can be written outside inference mode): it records nothing either.
    needs_graph = recording and (self._requires_grad or any(o._requires_grad for o in others)) \
        and self.dtype.kind in "fc" \
        and not (self._inference and all(o._inference for o in others))
    tangent = None
    if forward_ad.is_active() and (self._fw_grad is not None
                                   or any(o._fw_grad is not None for o in others)):
        before = wrap(self._data.copy(), self._device)
        before._fw_grad = self._fw_grad
        tangent = forward_ad.jvp(row, [before, *others], all_params, wrap(out, self._device),
                                 None)
    old_self = None
    if needs_graph:
        # PyTorch saves the operands before the kernel writes: an inference tensor among
        # those saved is refused with self still unchanged (an inference self is refused
        # after the write, below).
        operands = [self, *others]
        for k, users in row.save_plan:
            if k > 0 and operands[k]._inference and not self._inference and any(
                    operands[u]._requires_grad for u in users):
                raise RuntimeError(INFERENCE_SAVED)
        # The node's edge for self is self's graph before the write.
        old_self = wrap(self._data, self._device)
        old_self._grad_node = self._grad_node
        old_self._output_nr = self._output_nr  # one of several outputs (unsafe_split's)
        old_self._requires_grad = self._requires_grad
        # An operand may share self's storage: its edge and version are the ones the op read.
        inputs = [old_self, *others]
        before = (tuple([edge(t) for t in inputs]),
                  [t._vc[0] if t._vc is not None else 0 for t in inputs])
        if "self" in row.saved_names:
            # The node needs self's value from before the write (pow_'s gradient, mul_'s
            # other gradient): PyTorch saves ``self.clone()``, recorded (CloneBackward0) when
            # self requires grad, so a create_graph gradient goes through that clone.
            old_self = F.clone(self) if self._requires_grad else _copy(self)
            before[1][0] = 0
    if row is D.INDEX_PUT and not all_params["accumulate"]:
        # Only the selected elements are written: on an expanded tensor the others alias them.
        key = D._index_key(all_params["indices"])
        self._data[key] = out[key]
    else:
        self._data[...] = out
    self._bump_version()
    if tangent is not None:
        _set_inplace_tangent(self, tangent, xp)
    if not needs_graph:
        return self
    base = self._base
    if base is None:
        old_fn = self._grad_node
        _new_node(row, old_self, others, params, self, before)
        self._output_nr = 0  # the only output of its new node
        update_hooks_on_new_grad_fn(self, old_fn, self._grad_node)
        _regenerate_views(self)
        return self
    # Through a view: the op's own node computes the region's gradient inside CopySlices.
    holder = wrap(self._data, self._device)
    rebase_history(self, _new_node(row, old_self, others, params, holder, before))
    return self


def rebase_history(view: Tensor, fn: Node) -> None:
    """Make ``fn`` (whose first input is ``view``) the graph of ``view``'s region of its base:
    the base's grad_fn becomes ``CopySlices`` (its old graph outside the region, ``fn``
    inside) and the views are regenerated from it, as PyTorch's ``rebase_history``."""
    base = view._base
    copy_slices = CopySlices()
    copy_slices.fn = fn
    copy_slices._steps = _replay_chain(view._view_fn)
    init_node(copy_slices, (edge(base), *fn.next_functions[1:]), base._data)
    update_hooks_on_new_grad_fn(base, base._grad_node, copy_slices)
    base._grad_node = copy_slices
    base._requires_grad = True
    _regenerate_views(base, view)


def _regenerate_views(base: Tensor, written: Tensor | None = None) -> None:
    """Point the views of ``base`` at its new graph after an in-place write, as PyTorch does.

    Every view now requires grad. The view written through (``written``) gets its new grad_fn,
    ``AsStridedBackward0`` of the base's, at once; the others get theirs when it is next asked
    for (``Tensor._sync_view``), as in PyTorch, which numbers the new node then (the numbers
    order the backward pass).
    """
    for view in base._live_views():
        view._requires_grad = True
    if written is not None:
        written._requires_grad = True
        if view_write_refusal(written) is None:
            regenerate_view(base, written)


def regenerate_view(base: Tensor, view: Tensor) -> None:
    """Make ``view``'s grad_fn ``AsStridedBackward0`` of ``base``'s current graph."""
    node = AsStridedBackward0()
    node._steps = _replay_chain(view._view_fn)
    node._base_shape = base._data.shape
    init_node(node, (edge(base),), view._data)
    update_hooks_on_new_grad_fn(view, view._grad_node, node)
    view._grad_node = node
    view._requires_grad = True
    view._attr_version = view._vc[0]


def _set_inplace_tangent(self: Tensor, tangent: Tensor, xp: Any) -> None:
    """Give ``self`` its tangent after an in-place op, as PyTorch does: a tangent it has is
    written in place (the tensor given to make_dual, and the tangents of views that alias it,
    see the change); through a view without one, the base's tangent (zeros if it had none)
    gets the region, and the view's tangent is that region."""
    old = self._fw_grad
    if old is not None and getattr(old._data.flags, "writeable", True):
        old._data[...] = tangent._data
        return
    base = self._base
    steps = _replay_chain(self._view_fn)
    if base is None or any(row.name in FORWARD_AD_ROOTS for row, _ in steps):
        # make_dual's result and unpack_dual's primal are views only for backward: forward
        # AD does not tie their tangents to their base's.
        forward_ad.set_tangent(self, tangent)
        return
    if base._fw_grad is None:
        forward_ad.set_tangent(base, F.zeros(base.shape, dtype=tangent.dtype,
                                             device=base._device))
    region = replay_on_array(xp, base._fw_grad._data, steps)
    region[...] = tangent._data
    forward_ad.set_tangent(self, wrap(region, self._device))


def _castable(result: _dtype.dtype, target: _dtype.dtype) -> None:
    order = "bifc"
    if order.index(result.kind) > order.index(target.kind):
        raise RuntimeError(f"result type {result.legacy_name} can't be cast to the desired output "
                           f"type {target.legacy_name}")


def _binary_inplace(row: Any, self: Tensor, other: Any, params: dict[str, Any] | None = None,
                    to_float: bool = False) -> Tensor:
    is_tensor = isinstance(other, Tensor)
    check_write(row, self, [other] if is_tensor else [], normal_operand=not is_tensor)
    tensors, arrays = F.promote((self, other), to_float, broadcast=True)
    _castable(_backend.dtype_of(arrays[0]), self.dtype)
    _fits(self, tensors[1])
    return inplace(row, self, tensors[1:], arrays, params, checked=True)


def _fits(self: Tensor, other: Tensor) -> None:
    """PyTorch's error when broadcasting ``other`` would need a larger shape than ``self``."""
    shape, theirs = self._data.shape, other._data.shape
    if shape == theirs:
        return
    ndim = max(len(shape), len(theirs))
    padded = (1,) * (ndim - len(shape)) + shape
    padded_theirs = (1,) * (ndim - len(theirs)) + theirs
    broadcast = [a if b == 1 else b for a, b in zip(padded, padded_theirs, strict=True)]
    if tuple(broadcast) != shape:
        raise RuntimeError(f"output with shape {list(shape)} doesn't match the broadcast shape "
                           f"{broadcast}")


def pow_(self: Tensor, exponent: Any) -> Tensor:
    if isinstance(exponent, Tensor):
        return _binary_inplace(D.POW_TENSOR_TENSOR, self, exponent)
    return inplace(D.POW_TENSOR_SCALAR, self, [], [self._data], {"exponent": exponent})


def _unary_(row: Any, to_float: bool) -> Any:
    def method(self: Tensor) -> Tensor:
        check_write(row, self, [])
        if to_float and self.dtype.kind in "bi":
            # The out-of-place op gives the default float dtype, which an integer self cannot
            # hold.
            _castable(_dtype.get_default_dtype(), self.dtype)
        return inplace(row, self, [], [self._data], checked=True)
    method.__name__ = row.name + "_"
    method.__doc__ = f"``{row.name}`` written into ``self`` ({row.node})."
    return method


exp_, sin_, cos_, tanh_, sigmoid_, log_, sqrt_ = (
    _unary_(r, True) for r in (D.EXP, D.SIN, D.COS, D.TANH, D.SIGMOID, D.LOG, D.SQRT))
neg_, abs_ = (_unary_(r, False) for r in (D.NEG, D.ABS))


def inplace_view(row: Any, view_row: Any, self: Tensor, params: dict[str, Any]) -> Tensor:
    """Make ``self`` itself the view ``row`` describes (``t_``, ``squeeze_``...): the same
    memory under a new shape, a new version, and (when it requires grad) ``row``'s node in
    front of its history; a view keeps the step, as ``view_row``, to be regenerated."""
    check_write(row, self, [], memory=False)
    if self._base is None and self._views and self._live_views():
        # Its views would have to be re-expressed against the new layout (PyTorch regenerates
        # them with as_strided over the storage); refimpl's view replay assumes the layout
        # the views were taken from.
        raise NotImplementedError(f"refimpl: {row.name}() on a tensor that has views is not "
                                  "supported; take the views after it, or use "
                                  f"{row.name.rstrip('_')}() (out of place)")
    node = None
    if grad_mode.recording() and self._requires_grad:
        from refimpl.ops.table import apply

        node = apply(row, (self,), params)._grad_node
    xp = _backend.backend_of(self._device).xp
    self._data = row.forward(xp, self._data, **params) if params else row.forward(xp, self._data)
    if self._fw_grad is not None:
        tangent = self._fw_grad
        self._fw_grad = wrap(row.forward(xp, tangent._data, **params) if params
                             else row.forward(xp, tangent._data), tangent._device)
    self._bump_version()
    if self._base is not None:
        self._view_fn = (self._view_fn, view_row, params)
        self._attr_version = self._vc[0]  # its grad_fn is current: nothing to regenerate
    if node is not None:
        self._grad_node = node
        self._output_nr = 0
    return self


def t_(self: Tensor) -> Tensor:
    if self.dim() > 2:
        raise RuntimeError(f"t_() expects a tensor with <= 2 dimensions, but self is "
                           f"{self.dim()}D")
    return inplace_view(D.T_, D.T, self, {})


def transpose_(self: Tensor, dim0: int, dim1: int) -> Tensor:
    n = self.dim()
    return inplace_view(D.TRANSPOSE_, D.TRANSPOSE, self,
                        {"dim0": F._wrap_dim(dim0, n), "dim1": F._wrap_dim(dim1, n)})


def unsqueeze_(self: Tensor, dim: int) -> Tensor:
    return inplace_view(D.UNSQUEEZE_, D.UNSQUEEZE, self,
                        {"dim": F._wrap_dim(dim, self.dim() + 1)})


def squeeze_(self: Tensor, dim: Any = None) -> Tensor:
    if dim is None:
        return inplace_view(D.SQUEEZE_, D.SQUEEZE, self, {})
    if isinstance(dim, int):
        return inplace_view(D.SQUEEZE_INPLACE_DIM, D.SQUEEZE_DIM, self,
                            {"dim": F._wrap_dim(dim, self.dim())})
    return inplace_view(D.SQUEEZE_INPLACE_DIMS, D.SQUEEZE_DIMS, self,
                        {"dim": F._dims(dim, self.dim())})


def relu_(self: Tensor) -> Tensor:
    """``max(self, 0)`` written into ``self`` (``ReluBackward0``)."""
    return inplace(D.RELU, self, [], [self._data])


def add_(self: Tensor, other: Any, *, alpha: Any = 1) -> Tensor:
    return _binary_inplace(D.ADD, self, other, {"alpha": alpha} if alpha != 1 else None)


def sub_(self: Tensor, other: Any, *, alpha: Any = 1) -> Tensor:
    return _binary_inplace(D.SUB, self, other, {"alpha": alpha} if alpha != 1 else None)


def mul_(self: Tensor, other: Any) -> Tensor:
    return _binary_inplace(D.MUL, self, other)


def div_(self: Tensor, other: Any) -> Tensor:
    return _binary_inplace(D.DIV, self, other, to_float=True)


def clamp_(self: Tensor, min: Any = None, max: Any = None) -> Tensor:
    bounds = F.clamp_bounds(self, min, max)
    if bounds is None:
        return inplace(D.CLAMP, self, [], [self._data], {"min": min, "max": max})
    check_write(D.CLAMP_TENSOR, self, [b for b in (min, max) if isinstance(b, Tensor)])
    tensors, arrays = F.promote((self, *bounds))
    _castable(_backend.dtype_of(arrays[0]), self.dtype)
    return inplace(D.CLAMP_TENSOR, self, tensors[1:], arrays, checked=True)


def masked_fill_(self: Tensor, mask: Tensor, value: Any) -> Tensor:
    F.check_masked_fill(mask, value)
    if isinstance(value, Tensor):
        value_array = value._data.astype(self._data.dtype, copy=False)
        return inplace(D.MASKED_FILL, self, [value], [self._data, value_array], {"mask": mask},
                       same_device=False)
    return inplace(D.MASKED_FILL_SCALAR, self, [], [self._data], {"mask": mask, "value": value})


def zero_(self: Tensor) -> Tensor:
    return inplace(D.ZERO_, self, [], [self._data])


def fill_(self: Tensor, value: Any) -> Tensor:
    if isinstance(value, Tensor):
        return fill_tensor_(self, value)
    return inplace(D.FILL_, self, [], [self._data], {"value": value})


def copy_(self: Tensor, src: Any, non_blocking: bool = False) -> Tensor:
    """Copy ``src`` (broadcast, cast, and moved across devices) into ``self``."""
    if not isinstance(src, Tensor):
        src = F.full_like_scalar(self, src)
    array = src._data
    if src._device is not self._device:
        array = _backend.move_array(array, src.dtype, self._device)
    return inplace(D.COPY_, self, [src], [self._data, array], same_device=False)


def fill_tensor_(self: Tensor, value: Tensor) -> Tensor:
    """``fill_`` with a 0-d tensor (``FillBackward3``: the value gets the summed gradient)."""
    if value.dim() != 0:
        raise RuntimeError("fill_ only supports 0-dimension value tensor but got tensor with "
                           f"{value.dim()} dimensions.")
    return inplace(D.FILL_TENSOR, self, [value], [self._data, value._data], same_device=False)


def _strip_leading_ones(value: Tensor, always: bool = False) -> Tensor:
    # PyTorch's slicePrefix1sSize for item assignment: a view without the value's leading
    # size-1 dims (taken even when there are none where ``always``: copy_to records it).
    shape = value._data.shape
    lead = next((i for i, n in enumerate(shape) if n != 1), len(shape))
    return F.view(value, shape[lead:]) if lead or always else value


def _copy_to(dst: Tensor, src: Tensor) -> None:
    # PyTorch's copy_to for item assignment: copy_ when the shapes agree, fill_ from a 0-d CPU
    # value, else a view of the value without its leading size-1 dims, expanded to the target.
    if dst._data.shape == src._data.shape:
        copy_(dst, src)
    elif src.dim() == 0 and src._device.type == "cpu":
        fill_tensor_(dst, src)
    else:
        view = _strip_leading_ones(src, always=True)
        if view._data.shape != dst._data.shape:
            view = F.expand(view, dst._data.shape)
        copy_(dst, view)


def _type_name(cls: type) -> str:
    # CPython's tp_name: bare for built-in and Python-defined classes, dotted for the static
    # types of extension modules ("numpy.float32").
    heap_type = cls.__flags__ & (1 << 9)
    return cls.__name__ if heap_type or cls.__module__ == "builtins" else \
        f"{cls.__module__}.{cls.__qualname__}"


def _assigned_value(self: Tensor, value: Any) -> Tensor:
    """The value of ``self[key] = value`` as a tensor, converted before the key is looked at:
    a tensor as it is, a Python (or NumPy integer) number as a 0-d tensor of ``self``'s type;
    anything else is refused."""
    if isinstance(value, Tensor):
        return value
    if isinstance(value, int) or (isinstance(value, numpy.integer)
                                  and not isinstance(value, numpy.bool_)):
        value = int(value)
        if not -2**63 <= value < 2**63:
            raise ValueError("Overflow when unpacking long long")
    elif not isinstance(value, (float, complex)):
        raise TypeError(f"can't assign a {_type_name(type(value))} to a {self.type()}")
    return F.full_like_scalar(self, _dtype.checked_scalar(value, self.dtype, one_element=True))


def setitem(self: Tensor, key: Any, value: Any) -> None:
    """``tensor[key] = value`` as PyTorch's ``__setitem__`` does it: basic indices give the
    target view (a whole-dim slice is the tensor itself) that the value is copied into,
    advanced indices an in-place ``index_put_`` (``IndexPutBackward0``)."""
    value = _assigned_value(self, value)
    if key is False:
        return
    if key is Ellipsis:
        _copy_to(self, value)
        return
    if key is None or key is True:
        _copy_to(F.unsqueeze(self, 0), value)
        return
    if isinstance(key, int):
        _copy_to(F.select(self, 0, key), value)
        return
    items = (key,) if isinstance(key, slice) or not F._sequence_as_tuple(key) else tuple(key)
    target, indices, _ = F._apply_slicing(self, items)
    if not indices:
        _copy_to(target, value)
        return
    index_put_(target, indices, _strip_leading_ones(value))


def index_put_(self: Tensor, indices: list[Any], values: Tensor,
               accumulate: bool = False) -> Tensor:
    """Write (or with ``accumulate`` add) ``values`` at the advanced ``indices`` of ``self``,
    checked in PyTorch's order: autograd's checks, an expanded ``self`` (a warning), memory
    shared with the values or the indices, the masks, the shape and dtype of the values, the
    bounds of the indices."""
    # Index tensors take part in PyTorch's dispatch: a normal one brings autograd's checks
    # even when self and the values are inference tensors.
    check_write(D.INDEX_PUT, self, [values], memory=False,
                normal_operand=any(i is not None and not i._inference for i in indices))
    if _backend.has_internal_overlap(self._data):
        warnings.warn(EXPANDED_INDEX_PUT, UserWarning, stacklevel=3)
    for other in (values, *[i for i in indices if i is not None]):
        if other is self or _backend.overlaps(self._data, other._data):
            raise RuntimeError(PARTIAL_OVERLAP)
    F.check_masks(self, indices)
    selected = D.index_result_shape(self._data.shape, indices)
    shape = values._data.shape
    if len(shape) > len(selected) or any(
            n not in (1, m) for n, m in zip(reversed(shape), reversed(selected), strict=False)):
        raise RuntimeError(f"shape mismatch: value tensor of shape {list(shape)} cannot be "
                           f"broadcast to indexing result of shape {list(selected)}")
    if values.dtype != self.dtype:
        raise RuntimeError("Index put requires the source and destination dtypes match, got "
                           f"{self.dtype.legacy_name} for the destination and "
                           f"{values.dtype.legacy_name} for the source.")
    F.check_bounds(self, indices)
    return inplace(D.INDEX_PUT, self, [values], [self._data, values._data],
                   {"indices": indices, "accumulate": accumulate}, checked=True)
