"""``Tensor``: an array on a device plus the autograd state PyTorch keeps beside it.

Flags and their rules (``requires_grad``, ``is_leaf``, ``grad``, ``retain_grad``, ``detach``,
...) live here with PyTorch 2.13's messages. Math lives in ``refimpl.ops``; the methods that
call it are bound at the end of ``refimpl.ops.functional``.
"""

from __future__ import annotations

import warnings
import weakref
from collections import OrderedDict
from collections.abc import Callable
from typing import Any

from refimpl import _backend, _dtype

__all__ = ["Tensor", "Size", "wrap", "check_no_internal_overlap"]

NON_LEAF_GRAD_WARNING = (
    "The .grad attribute of a Tensor that is not a leaf Tensor is being accessed. Its .grad "
    "attribute won't be populated during autograd.backward(). If you indeed want the .grad "
    "field to be populated for a non-leaf Tensor, use .retain_grad() on the non-leaf Tensor. "
    "If you access the non-leaf Tensor by mistake, make sure you access the leaf Tensor "
    "instead. See github.com/pytorch/pytorch/pull/30531 for more information."
)
ZERO_TENSOR_IMMUTABLE = ("ZeroTensors are immutable. Please use the materialized zero tensor "
                         "obtained using .clone() if you want a mutable tensor.")
ZERO_TENSOR_COPY = ("ZeroTensors are immutable. Please materialize the tensor using `.clone()`, "
                    "if you want a mutable zero tensor.")
NON_LEAF_FLAG = "you can only change requires_grad flags of leaf variables."
NON_LEAF_FLAG_OFF = (
    NON_LEAF_FLAG + " If you want to use a computed variable in a subgraph that doesn't require "
    "differentiation use var_no_grad = var.detach()."
)
DETACH_VIEW = (
    "Can't detach views in-place. Use detach() instead. If you are using DistributedDataParallel "
    "(DDP) for training, and gradient_as_bucket_view is set as True, gradients are views of DDP "
    "buckets, and hence detach_() cannot be called on these gradients. To fix this error, please "
    "refer to the Optimizer.zero_grad() function in torch/optim/optimizer.py as the solution."
)
INFERENCE_REQUIRES_GRAD = ("Setting requires_grad=True on inference tensor outside "
                           "InferenceMode is not allowed.")
INFERENCE_INPLACE = ("Inplace update to inference tensor outside InferenceMode is not allowed.You "
                     "can make a clone to get a normal tensor before doing inplace update.See "
                     "https://github.com/pytorch/rfcs/pull/17 for more details.")
INTERNAL_OVERLAP = (
    "unsupported operation: more than one element of the written-to tensor refers to a single "
    "memory location. Please clone() the tensor before performing the operation."
)


DEEPCOPY_NON_LEAF = (
    "Only Tensors created explicitly by the user (graph leaves) support the deepcopy protocol at "
    "the moment.  If you were attempting to deepcopy a module, this may be because of a "
    "torch.nn.utils.weight_norm usage, see https://github.com/pytorch/pytorch/pull/103001")
# PyTorch's error for assigning or deleting a read-only attribute of a tensor.
_NOT_WRITABLE = "attribute '{}' of 'torch._C.TensorBase' objects is not writable"


def check_no_internal_overlap(array: Any) -> None:
    """PyTorch's refusal to write in place into a tensor whose elements share memory (an
    expanded tensor: a stride of 0 along a dimension longer than 1)."""
    if _backend.has_internal_overlap(array):
        raise RuntimeError(INTERNAL_OVERLAP)


def no_grad_view_message(view: Tensor, indirect: bool) -> str:
    """PyTorch's error for an in-place write involving a view created in no_grad mode or
    (``view._no_grad_view == "inference_mode"``) in inference mode."""
    from refimpl.autograd.graph import message_name

    modified = "its base or another view of its base has been" if indirect else "is being"
    if view._grad_node is not None:
        prefix = f"Output 0 of {message_name(view._grad_node)} is a view of a view which was " \
                 "created in"
    else:
        prefix = "A view was created in"
    if view._no_grad_view == "inference_mode":
        head = f"{prefix} inference mode and {modified} modified inplace in normal mode."
    else:
        head = f"{prefix} no_grad mode and {modified} modified inplace with grad mode enabled."
    return (f"{head} Given that this use case is ambiguous and error-prone, it is forbidden. "
            "You can clarify your code by moving both the view and the inplace either both "
            f"inside the {view._no_grad_view} block (if you don't want the inplace to be "
            "tracked) or both outside (if you want the inplace to be tracked).")


def multi_output_view_message(view: Tensor, indirect: bool) -> str:
    """PyTorch's error for an in-place write involving one of the views a single call returned
    (``unbind``, ``iter(tensor)``), or a view of one."""
    from refimpl.autograd.graph import message_name

    modified = "its base or another view of its base has been" if indirect else "is being"
    fn = view._grad_node
    if fn is None:  # taken while nothing required grad
        head = f"A view was created in no_grad mode and {modified} modified inplace with grad " \
               "mode enabled."
    else:
        row = view._view_fn[1]
        output = view._output_nr if row.multi_output else 0
        head = f"Output {output} of {message_name(fn)} is a view and {modified} modified " \
               "inplace."
    return (f"{head} This view is the output of a function that returns multiple views. Such "
            "functions do not allow the output views to be modified inplace. You should replace "
            "the inplace operation by an out-of-place one.")


def custom_function_view_message(view: Tensor, indirect: bool) -> str:
    """PyTorch's error for an in-place write involving a view a custom Function returned."""
    from refimpl.autograd.graph import message_name

    modified = "its base or another view of its base has been" if indirect else "is being"
    fn = view._grad_node
    if fn is None:
        head = f"A view was created in no_grad mode and {modified} modified inplace with grad " \
               "mode enabled."
    else:
        head = f"Output {view._output_nr} of {message_name(fn)} is a view and {modified} " \
               "modified inplace."
    return (f"{head} This view was created inside a custom Function (or because an input was "
            "returned as-is) and the autograd logic to handle view+inplace would override the "
            "custom backward associated with the custom Function, leading to incorrect "
            "gradients. This behavior is forbidden. You can fix this by cloning the output of "
            "the custom Function.")


def view_write_refusal(view: Tensor) -> Callable[[Tensor, bool], str] | None:
    """The message function of PyTorch's refusal to rewire ``view`` after an in-place write
    (by how the view was created), or None where the write is allowed."""
    if view._no_grad_view:
        return no_grad_view_message
    if view._multi_output:
        return multi_output_view_message
    if view._custom_view:
        return custom_function_view_message
    return None


class Size(tuple):
    """``torch.Size``: a tuple of ints that prints as ``torch.Size([2, 3])``."""

    __slots__ = ()

    def __repr__(self) -> str:
        return f"torch.Size({list(self)})"

    def numel(self) -> int:
        n = 1
        for s in self:
            n *= s
        return n


class Tensor:
    """A multi-dimensional array with autograd state; create one with ``refimpl.tensor``."""

    __slots__ = ("_data", "_device", "_requires_grad", "_grad_node", "_grad", "_retains_grad",
                 # A leaf's grad_dtype when set (None: any dtype); unset means the tensor's own.
                 "_grad_dtype",
                 "_vc", "_base", "_view_fn", "_grad_acc", "_fw_grad", "_views", "_hooks",
                 "_no_grad_view", "_multi_output", "_attr_version", "_output_nr",
                 # PyTorch's CreationMeta::IN_CUSTOM_FUNCTION: a view a custom Function
                 # returned (or an input it returned as it is), which no in-place op may
                 # rewire (see refimpl.autograd.function._wrap_outputs).
                 "_custom_view",
                 # A view's own requires_grad flag (set by requires_grad_() on it), which
                 # PyTorch keeps apart from its base's: it gives a view without a grad_fn a
                 # gradient accumulator of its own.
                 "_view_requires_grad",
                 # PyTorch's ZeroTensor: an immutable tensor of zeros some gradient formulas
                 # return (the derivative of sgn); see refimpl.ops.table.OpRow.zeros.
                 "_zero",
                 # An inference tensor: allocated in inference mode, or a view or detach() of
                 # one (refimpl.autograd.grad_mode).
                 "_inference",
                 # An inference tensor that detach() or .data made outside inference mode: it
                 # gets a version counter of its own, so in-place writes to it are allowed
                 # (its views are inference tensors like any other).
                 "_inference_versioned",
                 # register_post_accumulate_grad_hook's hooks (leaves only), run by the
                 # leaf's AccumulateGrad once it updated .grad.
                 "_post_accumulate_grad_hooks",
                 "__weakref__")

    # Arithmetic binds after equality, so keep tensors hashable by identity as PyTorch does.
    __hash__ = object.__hash__

    # ---------------------------------------------------------------- autograd state
    @property
    def requires_grad(self) -> bool:
        return self._requires_grad

    @requires_grad.setter
    def requires_grad(self, value: bool) -> None:
        if type(value) is not bool:  # also ``del t.requires_grad``, which passes None
            raise RuntimeError("requires_grad must be a bool")
        # PyTorch asks whether the tensor is a leaf from the grad_fn it holds, before a view's
        # grad_fn is brought up to date (which may raise): no _sync_view here.
        if self._grad_node is not None:
            raise RuntimeError(NON_LEAF_FLAG_OFF if not value else NON_LEAF_FLAG)
        if value and self.dtype.kind not in "fc":
            raise RuntimeError(
                "only Tensors of floating point and complex dtype can require gradients")
        if value and self._inference and not _grad_mode._state.inference:
            raise RuntimeError(INFERENCE_REQUIRES_GRAD)
        self._set_own_flag(bool(value))

    @requires_grad.deleter
    def requires_grad(self) -> None:
        raise RuntimeError("requires_grad must be a bool")

    def _set_own_flag(self, value: bool) -> None:
        if self._base is None:
            self._set_requires_grad(value)
            return
        # A view keeps a flag of its own, as PyTorch's view metadata does: without a grad_fn it
        # requires grad when that flag is set or its base requires grad, so clearing the flag
        # of a view whose base requires grad changes nothing, and a view that set it keeps
        # requiring grad when its base stops.
        self._view_requires_grad = value
        self._requires_grad = value or self._base._requires_grad

    def _set_requires_grad(self, value: bool) -> None:
        self._requires_grad = value
        if self._views is not None:
            for view in self._live_views():
                if view._grad_node is None:
                    view._requires_grad = value or view._view_requires_grad

    def _follows_base(self) -> bool:
        # A view without a grad_fn of a base that requires grad (one taken under no_grad)
        # requires grad because its base does: clearing its own flag changes nothing.
        base = self._base
        return base is not None and base._requires_grad and self._grad_node is None

    def requires_grad_(self, requires_grad: bool = True) -> Tensor:
        """Set ``requires_grad`` in place on a leaf and return the tensor itself."""
        # As in the setter, the grad_fn the tensor holds decides (no _sync_view).
        if self._grad_node is not None:
            if not requires_grad:
                raise RuntimeError(NON_LEAF_FLAG_OFF)
            return self
        if requires_grad and self.dtype.kind not in "fc":
            raise RuntimeError("only Tensors of floating point dtype can require gradients")
        if requires_grad and self._inference and not _grad_mode._state.inference:
            raise RuntimeError(INFERENCE_REQUIRES_GRAD)
        self._set_own_flag(bool(requires_grad))
        return self

    @property
    def is_leaf(self) -> bool:
        if self._base is not None:
            self._sync_view()
        return self._grad_node is None

    @property
    def grad_fn(self) -> Any:
        if self._base is not None:
            self._sync_view()
        return self._grad_node

    @grad_fn.setter
    def grad_fn(self, value: Any) -> None:
        raise AttributeError(_NOT_WRITABLE.format("grad_fn"))

    # PyTorch's private ``_grad_fn``: the node slot itself, read and written as it is, which
    # may not be deleted. refimpl's own code uses the slot ``_grad_node`` directly, so this
    # Python-level property costs nothing on the hot paths.
    @property
    def _grad_fn(self) -> Any:
        return self._grad_node

    @_grad_fn.setter
    def _grad_fn(self, value: Any) -> None:
        self._grad_node = value

    @_grad_fn.deleter
    def _grad_fn(self) -> None:
        raise RuntimeError("Deletion of _grad_fn not allowed. Detach tensor instead!")

    @grad_fn.deleter
    def grad_fn(self) -> None:
        raise AttributeError(_NOT_WRITABLE.format("grad_fn"))

    @property
    def output_nr(self) -> int:
        """Which output of its ``grad_fn`` this tensor is (0 for a leaf and for most ops;
        ``i`` for the ``i``-th piece of ``unbind`` or ``split``)."""
        return self._output_nr

    def _sync_view(self) -> None:
        """Bring a view's grad_fn up to date after its storage was written in place without
        recording (under no_grad, or before its base required grad), as PyTorch does when the
        grad_fn is next asked for: it becomes ``AsStridedBackward0`` of the base's graph. A view
        taken under no_grad has no such history and refuses instead."""
        if self._vc[0] == self._attr_version:
            return
        if self._grad_node is None and not self._base._requires_grad:
            return
        refusal = view_write_refusal(self)
        if refusal is not None:
            raise RuntimeError(refusal(self, indirect=True))
        from refimpl.ops.inplace import regenerate_view

        regenerate_view(self._base, self)

    @property
    def grad(self) -> Tensor | None:
        if self._grad_node is not None and not self._retains_grad:
            warnings.warn(NON_LEAF_GRAD_WARNING, UserWarning, stacklevel=2)
        return self._grad

    @grad.setter
    def grad(self, value: Tensor | None) -> None:
        if value is not None:
            if not isinstance(value, Tensor):
                raise TypeError("assigned grad expected to be a Tensor or None but got grad of "
                                f"type {type(value).__name__}")
            if value is self:
                raise RuntimeError("can't assign Variable as its own grad")
            if value._device is not self._device:
                raise RuntimeError(
                    f"attempting to assign a gradient with device type '{value._device.type}' "
                    f"to a tensor with device type '{self._device.type}'. Please ensure that "
                    "the gradient and the tensor are on the same device")
            if value._data.shape != self._data.shape:
                raise RuntimeError(
                    f"attempting to assign a gradient of size '{list(value.shape)}' to a "
                    f"tensor of size '{list(self.shape)}'. Please ensure that the gradient and "
                    "the tensor are the same size")
            grad_dtype = self._leaf_grad_dtype()
            if grad_dtype is not None and value.dtype is not grad_dtype:
                raise RuntimeError(
                    f"attempting to assign a gradient with dtype '{value.dtype.cpp_name}' to a "
                    f"tensor with grad_dtype '{grad_dtype.legacy_name}'. The gradient must match "
                    "the tensor's grad_dtype (defaults to the tensor's dtype). You can set the "
                    "tensor's grad_dtype attribute with a specific dtype, or None to allow any "
                    "dtype. Set grad_dtype with caution. Diverging the dtypes of a tensor and "
                    "its gradient may break downstream systems that assume they match.")
        self._grad = value

    @grad.deleter
    def grad(self) -> None:
        self._grad = None

    @property
    def grad_dtype(self) -> _dtype.dtype | None:
        """The dtype the engine casts a leaf's incoming gradients to (None: no cast); by
        default the leaf's own dtype. Leaves only."""
        if self._grad_node is not None:
            raise RuntimeError("grad_dtype can only be accessed on leaf tensors.")
        return self._leaf_grad_dtype()

    def _leaf_grad_dtype(self) -> _dtype.dtype | None:
        # The slot is set only by the setter; until then grad_dtype is the tensor's dtype.
        return getattr(self, "_grad_dtype", self.dtype)

    @grad_dtype.setter
    def grad_dtype(self, value: _dtype.dtype | None) -> None:
        if value is not None and not isinstance(value, _dtype.dtype):
            raise RuntimeError("grad_dtype must be a torch.dtype or None, but got "
                               f"{type(value).__name__}")
        # PyTorch reads .grad first (so a non-leaf warns as a .grad read does), then refuses.
        grad = self._grad
        if self._grad_node is not None:
            if not self._retains_grad:
                warnings.warn(NON_LEAF_GRAD_WARNING, UserWarning, stacklevel=2)
            raise RuntimeError("grad_dtype can only be set on leaf tensors.")
        if grad is not None and value is not None and grad.dtype is not value:
            raise RuntimeError(
                f"Cannot set grad_dtype to '{value.legacy_name}' because there is already a "
                f"gradient with dtype '{grad.dtype.cpp_name}'. Please clear the gradient "
                "(.grad = None) before changing grad_dtype, or ensure the new grad_dtype "
                "matches the existing gradient's dtype.")
        self._grad_dtype = value
        acc = self._grad_acc() if self._grad_acc is not None else None
        if acc is not None:
            acc.set_grad_dtype(value)

    @property
    def retains_grad(self) -> bool:
        return self._retains_grad

    def retain_grad(self) -> None:
        """Keep this non-leaf's gradient in ``.grad`` during backward (no-op on leaves)."""
        if not self._requires_grad:
            raise RuntimeError("can't retain_grad on Tensor that has requires_grad=False")
        # PyTorch asks whether the tensor is a leaf from the grad_fn it holds, before a view's
        # grad_fn is brought up to date: a view with none yet is a leaf here, and a no-op.
        if self._grad_node is None or self._retains_grad:
            return
        if self._base is not None:
            self._sync_view()
        self._grad_node.add_tensor_pre_hook(self._hook_entry(_RetainGrad(self)))
        self._retains_grad = True

    def _hook_entry(self, hook: Any) -> Any:
        """``hook`` as this tensor's grad_fn keeps it: on one output of a node with several,
        it is bound to this tensor's output number."""
        from refimpl.autograd.graph import OutputHook

        return OutputHook(self._output_nr, hook) if self._grad_node._multi_output else hook

    def register_hook(self, hook: Any) -> Any:
        """Call ``hook(grad)`` when this tensor's gradient is computed; a tensor it returns
        replaces the gradient. Returns a handle whose ``remove()`` unregisters the hook."""
        from refimpl.autograd.graph import RemovableHandle, TensorHooks

        if not self._requires_grad:
            raise RuntimeError("cannot register a hook on a tensor that doesn't require gradient")
        if self._base is not None:
            self._sync_view()
        # As PyTorch: the hooks live in the tensor's ``_backward_hooks`` dict. A leaf's dict is
        # read by its AccumulateGrad each backward; a non-leaf's is registered on the grad_fn
        # it has now, when the dict is made (an in-place op that gives the tensor a new
        # grad_fn starts a new dict, and the hooks before it stay on the old node).
        if self._hooks is None:
            self._hooks = OrderedDict()
            node = self._grad_node
            if node is not None:
                if node._pre_hooks is None:
                    node._pre_hooks = []
                hooks = node._pre_hooks
                # retain_grad's hooks run last, so .grad sees what the other hooks returned.
                at = len(hooks)
                while at and _is_retain(hooks[at - 1]):
                    at -= 1
                hooks.insert(at, self._hook_entry(TensorHooks(self._hooks)))
        handle = RemovableHandle(self._hooks)
        self._hooks[handle.id] = hook
        return handle

    @property
    def _backward_hooks(self) -> Any:
        """The dict of this tensor's hooks, keyed by handle id (None before the first)."""
        return self._hooks

    @_backward_hooks.setter
    def _backward_hooks(self, hooks: Any) -> None:
        # A leaf's hooks are whatever dict is here at backward; a non-leaf's registered dict
        # stays on its grad_fn whatever is assigned (PyTorch 2.13 behaves so).
        self._hooks = hooks

    @_backward_hooks.deleter
    def _backward_hooks(self) -> None:
        raise RuntimeError("Deletion of _backwards_hooks not allowed!")

    def register_post_accumulate_grad_hook(self, hook: Any) -> Any:
        """Call ``hook(tensor)`` on this leaf once backward has accumulated its ``.grad``; the
        hook must return None. Returns a handle whose ``remove()`` unregisters the hook."""
        from refimpl.autograd.graph import RemovableHandle

        if not self._requires_grad:
            raise RuntimeError("cannot register a hook on a tensor that doesn't require gradient")
        if self._grad_node is not None:
            raise RuntimeError(
                "post accumulate grad hooks cannot be registered on non-leaf tensors")
        if self._post_accumulate_grad_hooks is None:
            self._post_accumulate_grad_hooks = OrderedDict()
        handle = RemovableHandle(self._post_accumulate_grad_hooks)
        self._post_accumulate_grad_hooks[handle.id] = hook
        return handle

    def backward(self, gradient: Tensor | None = None, retain_graph: bool | None = None,
                 create_graph: bool = False, inputs: Any = None) -> None:
        """Accumulate this tensor's gradient into the leaves; see ``refimpl.autograd.backward``.

        Defined here rather than bound later so Python's argument errors name
        ``Tensor.backward()``, as PyTorch's do.
        """
        from refimpl.autograd import backward

        backward(self, gradient, retain_graph, create_graph, inputs=inputs)

    def _accumulate_grad(self, grad: Tensor, owned: bool = False) -> None:
        # What AccumulateGrad does with an incoming gradient: the first time, its memory when
        # nothing else holds the tensor (``owned``) and it has the leaf's layout, else a
        # copy; later in place, or out of place when building a graph.
        from refimpl.autograd import grad_mode

        old = self._grad
        if old is None:
            if grad_mode._state.enabled and grad._requires_grad:
                # Building a graph: PyTorch copies into a fresh tensor (a CopyBackwards node).
                from refimpl import _creation
                from refimpl.ops import inplace

                self._grad = inplace.copy_(_creation.zeros_like(grad), grad)
            elif owned and (grad._data.flags.c_contiguous or not self._data.flags.c_contiguous):
                # A detached alias, as PyTorch's update_grad(new_grad.detach()); a ZeroTensor
                # stays one (immutable).
                self._grad = wrap(grad._data, grad._device)
                self._grad._zero = grad._zero
            else:
                self._grad = _copy(grad)
        elif grad_mode._state.enabled or old._requires_grad:
            self._grad = old + grad
        else:
            check_no_internal_overlap(old._data)
            if old._zero:
                raise RuntimeError(ZERO_TENSOR_IMMUTABLE)
            old._data += grad._data.astype(old._data.dtype, copy=False)
            old._bump_version()

    def _grad_accumulator(self) -> Any:
        from refimpl.autograd.graph import AccumulateGrad

        acc = self._grad_acc() if self._grad_acc is not None else None
        if acc is None:
            acc = AccumulateGrad(self)
            self._grad_acc = weakref.ref(acc)
        return acc

    def _shared_version(self) -> list[int]:
        if self._vc is None:
            self._vc = [0]
        return self._vc

    def _bump_version(self) -> None:
        if self._inference and not _grad_mode._state.inference and \
                not self._inference_versioned:
            # PyTorch refuses when it bumps the version, after the kernel wrote: the values
            # change all the same.
            raise RuntimeError(INFERENCE_INPLACE)
        if self._vc is None:
            self._vc = [1]
        else:
            self._vc[0] += 1

    @property
    def _version(self) -> int:
        return self._vc[0] if self._vc is not None else 0

    def _track_view(self, view: Tensor) -> None:
        # A base remembers its views (weakly) so an in-place write can give them new grad_fns.
        views = self._views
        if views is None:
            self._views = [weakref.ref(view)]
            return
        views.append(weakref.ref(view))
        if len(views) >= 64 and len(views) & (len(views) - 1) == 0:  # prune at powers of two
            self._views = [r for r in views if r() is not None]

    def _live_views(self) -> list[Tensor]:
        views = [r() for r in self._views or ()]
        live = [v for v in views if v is not None]
        if len(live) != len(views):
            self._views = [weakref.ref(v) for v in live]
        return live

    def _is_view(self) -> bool:
        return self._base is not None

    def detach(self) -> Tensor:
        """A new leaf sharing this tensor's data and version counter, not requiring grad."""
        out = wrap(self._data, self._device)
        out._vc = self._shared_version()
        out._zero = self._zero
        out._inference = self._inference
        self._version_detached_inference(out)
        return out

    def _version_detached_inference(self, out: Tensor) -> None:
        # detach() and .data of an inference tensor, outside inference mode, come with a
        # version counter: PyTorch lets them be written in place.
        if self._inference and not _grad_mode._state.inference:
            out._inference_versioned = True

    def detach_(self) -> Tensor:
        """Make this tensor a leaf that does not require grad; views refuse."""
        if _grad_mode._state.inference or self._inference:
            # PyTorch's detach_ is an autograd kernel: in inference mode, and on an inference
            # tensor (no autograd dispatch key), the call skips it and changes nothing.
            return self
        if self._base is not None:
            raise RuntimeError(DETACH_VIEW)
        self._grad_node = None
        # Views without a grad_fn (taken under no_grad) follow their base's flag.
        self._set_requires_grad(False)
        self._fw_grad = None
        return self

    @property
    def data(self) -> Tensor:
        out = wrap(self._data, self._device)
        out._zero = self._zero
        out._inference = self._inference
        self._version_detached_inference(out)
        return out

    @data.setter
    def data(self, value: Tensor) -> None:
        if not isinstance(value, Tensor):
            raise TypeError(f"Variable data has to be a tensor, but got {type(value).__name__}")
        if not _backend.shallow_copy_compatible(self._device, value._device):
            raise RuntimeError("Attempted to call `variable.set_data(tensor)`, but `variable` and "
                               "`tensor` have incompatible tensor type.")
        if self._requires_grad and value.dtype.kind not in "fc":
            raise RuntimeError("data set to a tensor that requires gradients must be floating "
                               "point or complex dtype")
        if value._data.dtype != self._data.dtype or value._device is not self._device:
            # PyTorch drops the gradient accumulator on a change of type or device only: one
            # kept across a change of shape still expects the old shape, and the engine refuses
            # a gradient of the new one.
            self._grad_acc = None
        self._data = value._data
        self._device = value._device

    @data.deleter
    def data(self) -> None:
        raise RuntimeError("Deleting tensor data is not allowed. Delete tensor instead!")

    @staticmethod
    def _make_subclass(cls: type[Tensor], data: Tensor, requires_grad: bool = False) -> Tensor:
        """A ``cls`` instance sharing ``data``'s array, as a leaf (used by ``nn.Parameter``)."""
        if requires_grad and data.dtype.kind not in "fc":
            raise RuntimeError(
                "Only Tensors of floating point and complex dtype can require gradients")
        t = wrap(data._data, data._device, cls)
        t._requires_grad = bool(requires_grad)
        return t

    # ---------------------------------------------------------------- metadata
    @property
    def shape(self) -> Size:
        return Size(self._data.shape)

    def size(self, dim: int | None = None) -> Size | int:
        if dim is None:
            return Size(self._data.shape)
        return self._data.shape[_wrap_dim(dim, self._data.ndim)]

    def dim(self) -> int:
        return self._data.ndim

    @property
    def ndim(self) -> int:
        return self._data.ndim

    def numel(self) -> int:
        return int(self._data.size)

    def allclose(self, other: Tensor, rtol: float = 1e-05, atol: float = 1e-08,
                 equal_nan: bool = False) -> bool:
        from refimpl.ops import functional as F

        return F.allclose(self, other, rtol, atol, equal_nan)

    def stride(self, dim: int | None = None) -> Any:
        """The step in elements between neighbours along each dimension (0 along a dimension
        ``expand`` made), as a tuple, or the one of ``dim``."""
        itemsize = self._data.itemsize
        strides = tuple(s // itemsize for s in self._data.strides)
        if dim is None:
            return strides
        return strides[_wrap_dim(dim, self._data.ndim)]

    def data_ptr(self) -> int:
        """The address of the tensor's first element (0 on the meta device, which has no
        memory): views of one storage at other offsets differ."""
        if self._device.type == "meta":
            return 0
        return _backend.array_ptr(self._data)

    def nelement(self) -> int:
        return int(self._data.size)

    @property
    def dtype(self) -> _dtype.dtype:
        return _backend.dtype_of(self._data)

    @property
    def device(self) -> _backend.device:
        return self._device

    @property
    def is_cuda(self) -> bool:
        return self._device.type == "cuda"

    @property
    def is_meta(self) -> bool:
        """Whether the tensor is on the meta device (a shape and a dtype, no readable values)."""
        return self._device.type == "meta"

    def is_contiguous(self) -> bool:
        """Whether the elements lie in row-major order with no gaps."""
        return bool(self._data.flags.c_contiguous)

    def is_floating_point(self) -> bool:
        return self.dtype.kind == "f"

    def is_complex(self) -> bool:
        return self.dtype.kind == "c"

    def type(self) -> str:
        """The legacy type name: ``torch.FloatTensor``, ``torch.cuda.FloatTensor``,
        ``torch.meta.FloatTensor``."""
        kind = self._device.type
        prefix = "torch." if kind == "cpu" else f"torch.{kind}."
        return f"{prefix}{self.dtype.legacy_name}Tensor"

    def _type_for_messages(self) -> str:
        """The type as PyTorch's C++ errors name it: ``type()``, except where there is no
        legacy tensor type - on meta, and for complex and bfloat16 dtypes - which is named
        after its dispatch key (``MetaFloatType``, ``CPUComplexFloatType``)."""
        if self._device.type == "meta":
            return f"Meta{self.dtype.legacy_name}Type"
        if self.dtype.kind == "c" or self.dtype.name == "bfloat16":
            return f"{self._device.type.upper()}{self.dtype.legacy_name}Type"
        return self.type()

    def element_size(self) -> int:
        return self.dtype.itemsize

    # ---------------------------------------------------------------- conversion to Python
    def _host(self) -> Any:
        return _backend.backend_of(self._device).to_host(self._data)

    def item(self) -> Any:
        n = self._data.size
        if n != 1:
            raise RuntimeError(f"a Tensor with {n} elements cannot be converted to Scalar")
        return _backend.backend_of(self._device).item(self._data)

    def tolist(self) -> Any:
        if self._zero:
            raise RuntimeError("tolist() shouldn't be called on a tensor with unallocated "
                               "storage")
        return self._host().tolist()

    def _is_zerotensor(self) -> bool:
        return self._zero

    def is_inference(self) -> bool:
        """Whether this is an inference tensor: allocated in inference mode, or a view of
        one (see ``refimpl.inference_mode``)."""
        return self._inference

    def numpy(self, *, force: bool = False) -> Any:
        """The data as a NumPy array sharing memory (cpu tensors that do not require grad, or
        any under no_grad). ``force=True`` copies from any device (a meta tensor has no data)."""
        from refimpl.autograd import grad_mode

        if self._device.type != "cpu" and not force:
            # PyTorch checks the device first, then requires_grad (only while grad mode is on).
            raise TypeError(
                f"can't convert {self._device} device type tensor to numpy. Use "
                "Tensor.cpu() to copy the tensor to host memory first.")
        if self._requires_grad and not force and grad_mode._state.enabled:
            raise RuntimeError("Can't call numpy() on Tensor that requires grad. Use "
                               "tensor.detach().numpy() instead.")
        if self._device.type != "cpu":
            return self._host()
        if self._zero and not force:
            raise RuntimeError(" Cannot convert a ZeroTensor to numpy. Set force=True if you "
                               "need the zero array.")
        return self._data.copy() if self._zero else self._data

    def __bool__(self) -> bool:
        if self._data.size != 1:
            raise RuntimeError("Boolean value of Tensor with more than one value is ambiguous")
        return bool(self.item())

    def __float__(self) -> float:
        return float(self.item())

    def __int__(self) -> int:
        return int(self.item())

    def __index__(self) -> int:
        if self.dtype.kind not in "ib" or self._data.size != 1:
            raise TypeError("only integer tensors of a single element can be converted to an "
                            "index")
        return int(self.item())

    def __len__(self) -> int:
        if self._data.ndim == 0:
            raise TypeError("len() of a 0-d tensor")
        return self._data.shape[0]

    def __format__(self, spec: str) -> str:
        # As PyTorch's: a 0-d tensor formats its number, except on meta (it has none).
        if self._data.ndim == 0 and self._device.type != "meta":
            return self.item().__format__(spec)
        return object.__format__(self, spec)

    def __repr__(self) -> str:
        from refimpl._tensor_str import tensor_repr

        return tensor_repr(self)

    def __deepcopy__(self, memo: dict[int, Any]) -> Tensor:
        """``copy.deepcopy``: a new leaf with a copy of the values (in the same memory
        layout), the same ``requires_grad`` and a deep copy of ``.grad``; non-leaves refuse."""
        if self._grad_node is not None:
            raise RuntimeError(DEEPCOPY_NON_LEAF)
        done = memo.get(id(self))
        if done is not None:
            return done
        new = wrap(self._data.copy(order="K"), self._device, type(self))
        new._requires_grad = self._requires_grad
        memo[id(self)] = new
        if self._grad is not None:
            new._grad = self._grad.__deepcopy__(memo)
        return new

    def __reduce__(self) -> Any:
        raise TypeError("refimpl tensors cannot be pickled; save t.tolist() instead")


class _RetainGrad:
    """The hook ``retain_grad()`` puts on a non-leaf's grad_fn: store the incoming gradient."""

    __slots__ = ("_ref",)

    def __init__(self, tensor: Tensor) -> None:
        self._ref = weakref.ref(tensor)

    def __call__(self, grad: Tensor | None) -> None:
        t = self._ref()
        if t is not None and t._retains_grad and grad is not None:
            # Unlike a leaf's AccumulateGrad, PyTorch's hook never writes into .grad: it stores
            # a clone (recorded under create_graph), then replaces .grad by the sum.
            from refimpl.ops import functional as F

            t._grad = F.clone(grad) if t._grad is None else t._grad + grad


def _is_retain(hook: Any) -> bool:
    from refimpl.autograd.graph import OutputHook

    return type(hook.hook if type(hook) is OutputHook else hook) is _RetainGrad


def update_hooks_on_new_grad_fn(t: Tensor, old_fn: Any, new_fn: Any) -> None:
    """What PyTorch does to a tensor's hooks when an in-place op (or a view's regeneration)
    gives it a new grad_fn: hooks registered from now on go into a new ``_backward_hooks``
    dict, on the new node (the old ones stay behind), and ``retain_grad()``'s hook moves there,
    so ``.grad`` gets the gradient of the written value."""
    if old_fn is not new_fn:
        t._hooks = None
    if not t._retains_grad or old_fn is None or old_fn is new_fn or not old_fn._pre_hooks:
        return
    mine = [h for h in old_fn._pre_hooks if type(h) is _RetainGrad and h._ref() is t]
    if not mine:
        return
    old_fn._pre_hooks = [h for h in old_fn._pre_hooks if h not in mine]
    new_fn.add_tensor_pre_hook(mine[0])



def wrap(data: Any, device: _backend.device, cls: type[Tensor] | None = None) -> Tensor:
    """A new leaf tensor around backend array ``data`` (no copy, requires_grad False)."""
    t = object.__new__(cls or Tensor)
    t._data = data
    t._device = device
    t._requires_grad = False
    t._grad_node = None
    t._grad = None
    t._retains_grad = False
    t._vc = None
    t._base = None
    t._view_fn = None
    t._grad_acc = None
    t._fw_grad = None
    t._views = None
    t._hooks = None
    t._no_grad_view = False
    t._multi_output = False
    t._custom_view = False
    t._view_requires_grad = False
    t._attr_version = 0
    t._output_nr = 0
    t._zero = False
    t._inference = _grad_mode._state.inference
    t._inference_versioned = False
    t._post_accumulate_grad_hooks = None
    return t


def _copy(t: Tensor) -> Tensor:
    return wrap(t._data.copy(), t._device)


def _wrap_dim(dim: int, ndim: int) -> int:
    n = max(ndim, 1)
    if not -n <= dim < n:
        raise IndexError(f"Dimension out of range (expected to be in range of [{-n}, {n - 1}], "
                         f"but got {dim})")
    return dim % n


# Last: grad_mode's package imports this module, which must be complete by then.
from refimpl.autograd import grad_mode as _grad_mode  # noqa: E402
