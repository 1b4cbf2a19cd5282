"""The op table machinery: one :class:`OpRow` per PyTorch op overload, and how rows run.

A row says everything autograd needs to know about an op, in the spirit of PyTorch's
``derivatives.yaml``:

- ``name``: the overload, in PyTorch's spelling (``"mul.Tensor"``, ``"sum.dim_IntList"``);
- ``node``: the backward node's class name, written out as PyTorch 2.13 names it
  (``"MulBackward0"``);
- ``forward(xp, <tensor inputs>, *, <params>)``: computes the result from backend arrays with
  the array module ``xp`` (NumPy or CuPy). Positional parameters are the tensor inputs, in
  PyTorch's order (``self``, ``other``...; a ``*tensors`` parameter takes a list); keyword-only
  parameters are the op's non-tensor arguments, with defaults;
- ``derivatives``: for each tensor input, a formula ``lambda grad, <names>: <gradient>`` written
  with refimpl's own differentiable ops, so ``create_graph=True`` differentiates it again. The
  names after ``grad`` say what the formula needs and therefore what the node saves:
  an input name (``self``, ``other``) or ``result`` saves that tensor (checked against
  in-place changes, released after backward); ``<input>_shape``, ``<input>_strides`` (in
  elements, as ``Tensor.stride()``), ``<input>_dtype``, ``<input>_device`` and the op's
  parameters are kept as plain facts. An input with no formula gets no gradient. Gradients
  may have a broadcast shape or another dtype: the engine reduces and casts them to the
  input's in one place.

Adding an op from another module (for example in ``refimpl.nn``)::

    from refimpl.ops import defop, apply

    MSE_LOSS = defop(
        "mse_loss", "MseLossBackward0",
        forward=lambda xp, self, target, *, reduction=1: ...,   # arrays in, array out
        derivatives={
            "self": lambda grad, self, target, reduction: ...,   # refimpl ops on Tensors
            "target": lambda grad, self, target, reduction: ...,
        },
    )

    def mse_loss(input, target, reduction="mean"):
        return apply(MSE_LOSS, (input, target), {"reduction": 1 if reduction == "mean" else 0})

``apply`` checks devices, runs ``forward``, and, when grad mode is on and an input requires
grad, records a node of class ``node`` whose ``next_functions`` follow the tensor inputs. Callers
promote dtypes first (``refimpl.ops.functional.promote``); ``apply`` takes the tensors as given.
A forward may return a tuple ``(result, extra...)`` when the row sets ``extra_outputs``: the
extras are non-differentiable tensors the formulas may name (``indices`` for ``max.dim``).
Two more flags: ``view=True`` marks the result as a view of input 0 (shared version counter,
in-place writes through it rewire the base with ``CopySlices``); ``multi_output=True`` marks such
a view as one of several a single call returns (``unbind``): PyTorch refuses in-place writes to
it, to its base and to its other views; ``changes_device=True`` takes
the result's device from the ``device`` parameter (``_to_copy``). The forward must return a
new array unless ``view=True``. Complex gradients follow PyTorch's convention
(``grad * conj(f'(x))``): a row's formulas are written for real numbers and the table conjugates
around them; a row whose formula is not of that form (``abs``: complex in, real out) says
``holomorphic=False`` and handles complex numbers itself. In-place variants reuse the row through
``refimpl.ops.inplace.inplace(row, self, others, arrays, params)``. Rows are tested by adding
an ``OpCase`` to ``tests/refimpl/refimpl_cases.py`` (gradcheck, second order, PyTorch, cuda).
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Sequence
from typing import Any

import numpy

from refimpl import _backend
from refimpl._tensor import Tensor, wrap
from refimpl.autograd import anomaly_mode, forward_ad, grad_mode
from refimpl.autograd.graph import (
    FREED,
    SAVED_TENSORS_HOOKS,
    SECOND_BACKWARD,
    SEQUENCE,
    Node,
    PackedSaved,
    message_name,
    modified_message,
)

__all__ = ["OpRow", "defop", "apply", "ROWS", "unpack_saved", "same_device", "pack_saved",
           "WrappedNumber", "SavedTensor"]

ROWS: dict[str, OpRow] = {}

_META_SUFFIXES = ("_shape", "_strides", "_dtype", "_device")
_SAVED, _INFO, _EXTRA = 0, 1, 2


class OpRow:
    """One op overload: its forward on arrays, its node name and its derivative formulas."""

    __slots__ = ("name", "node", "forward", "raw_forward", "inputs", "variadic",
                 "param_defaults", "formulas", "saved_names", "save_users", "info_names",
                 "default_info", "node_cls", "is_view", "multi_output", "extra_outputs",
                 "changes_device", "holomorphic", "layout", "formula_order", "unpack_order",
                 "zeros", "below_autograd", "save_plan")

    def __init__(self, name: str, node: str, forward: Callable[..., Any],
                 derivatives: dict[str, Callable[..., Any]], *, view: bool = False,
                 multi_output: bool = False,
                 extra_outputs: Sequence[str] = (), changes_device: bool = False,
                 holomorphic: bool = True, layout: str | None = None,
                 zeros: str | None = None) -> None:
        if layout not in (None, "elementwise", "contiguous"):
            raise ValueError(f"op row {name!r}: layout must be None, 'elementwise' or "
                             f"'contiguous', not {layout!r}")
        if zeros not in (None, "self", "any", "all"):
            raise ValueError(f"op row {name!r}: zeros must be None, 'self', 'any' or 'all', "
                             f"not {zeros!r}")
        # When the result is an immutable zero tensor (PyTorch's ZeroTensor): when ``self``
        # is one ("self", every view), when any input is ("any": products), when all are
        # ("all": sums); None: never, the op works on the zeros.
        self.zeros = "self" if view else zeros
        # What PyTorch's kernel does when it runs below autograd: when every tensor the op
        # dispatches on is an inference tensor (they carry no autograd dispatch key), outside
        # inference mode, with one requiring grad. None: it records nothing. Else a function
        # ``(tensors, params, result) -> result`` for kernels that call autograd-visible ops
        # on normal tensors they make (clone's copy_, abs's out= variant).
        self.below_autograd: Callable[..., Any] | None = None
        self.name = name
        self.layout = layout
        self.holomorphic = holomorphic
        self.changes_device = changes_device
        self.node = node
        self.forward = forward
        self.is_view = view
        self.multi_output = multi_output
        self.extra_outputs = tuple(extra_outputs)
        params = list(inspect.signature(forward).parameters.values())[1:]
        self.inputs = [p.name for p in params if p.kind in
                       (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD, p.VAR_POSITIONAL)]
        self.variadic = any(p.kind is p.VAR_POSITIONAL for p in params)
        self.param_defaults = {p.name: p.default for p in params if p.kind is p.KEYWORD_ONLY}
        unknown = set(derivatives) - set(self.inputs)
        if unknown:
            raise ValueError(f"op row {name!r}: derivatives for {sorted(unknown)} name no input "
                             f"of forward (inputs are {self.inputs})")
        self.saved_names: list[str] = []
        self.save_users: list[list[int]] = []
        self.info_names: list[str] = []
        self.formulas: list[tuple[Callable[..., Any], tuple[tuple[int, Any], ...]] | None] = []
        for i, inp in enumerate(self.inputs):
            formula = derivatives.get(inp)
            if formula is None:
                self.formulas.append(None)
                continue
            spec = tuple(self._arg_source(name, arg, i)
                         for arg in list(inspect.signature(formula).parameters)[1:])
            self.formulas.append((formula, spec))
        # PyTorch's generated nodes run their formulas in the sorted order of the input names
        # (``other`` before ``self``); under create_graph that order numbers the nodes the
        # formulas record, which orders the next backward pass.
        self.formula_order = sorted(range(len(self.inputs)), key=self.inputs.__getitem__)
        # They unpack (and version-check) every saved tensor first: the inputs in sorted name
        # order, then the result. That order picks the error when several were modified.
        self.unpack_order = sorted(range(len(self.saved_names)),
                                   key=lambda k: (self.saved_names[k] == "result",
                                                  self.saved_names[k]))
        # What _record saves, resolved once: (input index or -1 for the result, the inputs
        # whose gradient needs it).
        self.save_plan = tuple(
            (-1 if name == "result" else self.inputs.index(name), tuple(users))
            for name, users in zip(self.saved_names, self.save_users, strict=True))
        # The facts of a node made with every parameter at its default, when they are all
        # parameters: one read-only dict that every such node shares (AddBackward0's alpha).
        self.default_info = None
        if self.info_names and not self.extra_outputs and all(
                n in self.param_defaults for n in self.info_names):
            self.default_info = {n: self.param_defaults[n] for n in self.info_names}
        # After reading its signature: NaN and inf come out silently, as in PyTorch.
        self.forward = _backend.quiet(forward)
        self.raw_forward = forward
        self.node_cls = type(node, (Node,), {"__slots__": (), "_row": self,
                                             "__module__": "refimpl.autograd.graph",
                                             "__getattr__": _saved_attribute,
                                             "__dir__": _node_dir})

    def _arg_source(self, op_name: str, arg: str, user: int) -> tuple[int, Any]:
        if arg in self.inputs or arg == "result":
            if arg not in self.saved_names:
                self.saved_names.append(arg)
                self.save_users.append([])
            k = self.saved_names.index(arg)
            self.save_users[k].append(user)
            return (_SAVED, k)
        if arg in self.extra_outputs:
            return (_EXTRA, arg)
        base = next((arg[: -len(s)] for s in _META_SUFFIXES if arg.endswith(s)), None)
        if arg in self.param_defaults or base in self.inputs or base == "result":
            if arg not in self.info_names:
                self.info_names.append(arg)
            return (_INFO, arg)
        raise ValueError(
            f"op row {op_name!r}: formula argument {arg!r} is neither an input "
            f"({self.inputs}), 'result', an extra output ({list(self.extra_outputs)}), a "
            f"parameter ({list(self.param_defaults)}) nor <input>_shape/_dtype/_device"
        )

    def backward(self, node: Node, grad: Tensor,
                 values: list[Any] | None = None) -> list[Tensor | None]:
        """Run the derivative formulas for every input whose edge needs a gradient.
        ``values``: the saved tensors, already unpacked (refimpl.ops.kernels)."""
        saved = node._saved
        if saved is FREED:
            raise RuntimeError(SECOND_BACKWARD)
        if self.holomorphic and grad._data.dtype.kind == "c":
            # Formulas read ``grad * f'(x)``; PyTorch's complex convention is
            # ``grad * conj(f'(x))``, which is conj(formula(conj(grad))) for every such row.
            from refimpl.ops.functional import conj

            grads = self._run(node, conj(grad), values)
            return [None if g is None else conj(g) for g in grads]
        return self._run(node, grad, values)

    def _run(self, node: Node, grad: Tensor,
             values: list[Any] | None = None) -> list[Tensor | None]:
        # Every saved tensor is unpacked (and version-checked) once, first: the inputs in
        # sorted name order, then the result. That order picks the error when several were
        # modified, and is the order unpack hooks run in.
        saved = node._saved
        if values is None:
            values = [None] * len(saved) if saved else []
            for k in self.unpack_order:
                if saved[k] is not None:
                    values[k] = unpack_saved(node, saved[k])
        if self.variadic:
            formula, spec = self.formulas[0]
            args = [_resolve(node, values, s) for s in spec]
            grads = list(formula(grad, *args))
            return [g if e[0] is not None else None
                    for g, e in zip(grads, node.next_functions, strict=True)]
        out: list[Tensor | None] = [None] * len(self.formulas)
        edges = node.next_functions
        for i in self.formula_order:
            entry = self.formulas[i]
            if edges[i][0] is None or entry is None:
                continue
            formula, spec = entry
            out[i] = formula(grad, *[_resolve(node, values, s) for s in spec])
        return out

    def __repr__(self) -> str:
        return f"OpRow({self.name!r}, node={self.node!r})"


# ---------------------------------------------------------------- saved-tensor introspection
# PyTorch's generated nodes expose what they saved as ``_saved_<name>`` (a tensor, unpacked
# and version-checked, or a parameter; an input's size and strides as
# ``_saved_<input>_sym_sizes`` / ``_sym_strides``) and each saved tensor as
# ``_raw_saved_<name>``, a SavedTensor that takes a pair of hooks of its own.
_SYM_SUFFIXES = (("_sym_sizes", "_shape"), ("_sym_strides", "_strides"))

FREED_HOOKS = (
    "Calling register_hooks on a saved tensor after it has been freed. Saved intermediate "
    "values of the graph are freed when you call .backward() or autograd.grad(). Specify "
    "retain_graph=True if you need to backward through the graph a second time or if you need "
    "to access saved variables after calling backward.")
HOOKS_ALREADY_SET = ("Calling register_hooks on a saved tensor whose hooks have already been "
                     "set. Hint: only one pair of hooks is allowed at a time.")


def _renamed(name: str, pairs: Sequence[tuple[str, str]]) -> str:
    """``name`` with its suffix replaced by the first matching (old, new) pair."""
    for old, new in pairs:
        if name.endswith(old):
            return name[: -len(old)] + new
    return name


def _info_name(row: OpRow, key: str) -> str | None:
    key = _renamed(key, _SYM_SUFFIXES)
    return key if key in row.info_names else None


def _saved_attribute(node: Node, name: str) -> Any:
    row = type(node)._row
    raw = name.startswith("_raw_saved_")
    key = name[len("_raw_saved_"):] if raw else \
        name[len("_saved_"):] if name.startswith("_saved_") else None
    if key is not None and key in row.saved_names:
        k = row.saved_names.index(key)
        if raw:
            return SavedTensor(node, k)
        saved = node._saved
        if saved is FREED:
            raise RuntimeError(SECOND_BACKWARD)
        entry = saved[k] if saved else None
        return None if entry is None else unpack_saved(node, entry)
    info = None if key is None or raw else _info_name(row, key)
    if info is not None:
        value = node._info[info]
        return tuple(value) if isinstance(value, list) else value
    raise AttributeError(f"'{type(node).__name__}' object has no attribute '{name}'")


def _node_dir(node: Node) -> list[str]:
    row = type(node)._row
    names = set(object.__dir__(node)) - {"_saved"}  # the slot is internal, not PyTorch's
    names.update(f"_saved_{n}" for n in row.saved_names)
    names.update(f"_raw_saved_{n}" for n in row.saved_names)
    torch_names = [(ours, torch_suffix) for torch_suffix, ours in _SYM_SUFFIXES]
    names.update(f"_saved_{_renamed(info, torch_names)}" for info in row.info_names)
    return sorted(names)


class SavedTensor:
    """One tensor a node saved (``grad_fn._raw_saved_self``): ``register_hooks(pack,
    unpack)`` packs it now and unpacks it when backward reads it."""

    __slots__ = ("_node", "_k")

    def __init__(self, node: Node, k: int) -> None:
        self._node = node
        self._k = k

    def _entry(self) -> Any:
        saved = self._node._saved
        return None if saved is FREED or not saved else saved[self._k]

    def register_hooks(self, pack_hook: Any, unpack_hook: Any) -> None:
        if not (callable(pack_hook) and callable(unpack_hook)):
            raise TypeError("register_hooks(): incompatible function arguments. pack_hook and "
                            "unpack_hook must be callables")
        node = self._node
        if node._saved is FREED:
            raise RuntimeError(FREED_HOOKS)
        entry = self._entry()
        if type(entry) is PackedSaved:
            raise RuntimeError(HOOKS_ALREADY_SET)
        if entry is None or type(entry) is WrappedNumber:
            return
        saved = list(node._saved)
        with grad_mode.no_grad():
            saved[self._k] = _packed_entry(node, self._k, entry, pack_hook, unpack_hook,
                                           unpack_saved(node, entry))
        node._saved = tuple(saved)

    def unpack(self) -> Tensor | None:
        saved = self._node._saved
        if saved is FREED:
            raise RuntimeError(SECOND_BACKWARD)
        entry = self._entry()
        return None if entry is None else unpack_saved(self._node, entry)

    @property
    def data(self) -> Tensor | None:
        return self.unpack()


def defop(name: str, node: str, forward: Callable[..., Any],
          derivatives: dict[str, Callable[..., Any]] | None = None, *, view: bool = False,
          multi_output: bool = False,
          extra_outputs: Sequence[str] = (), changes_device: bool = False,
          holomorphic: bool = True, layout: str | None = None,
          zeros: str | None = None) -> OpRow:
    """Create and register a row (see the module docstring); names must be unique."""
    if name in ROWS:
        raise ValueError(f"op row {name!r} is already defined ({ROWS[name]!r}); pick another "
                         "overload name")
    row = OpRow(name, node, forward, derivatives or {}, view=view, multi_output=multi_output,
                extra_outputs=extra_outputs,
                changes_device=changes_device, holomorphic=holomorphic, layout=layout,
                zeros=zeros)
    ROWS[name] = row
    return row


def _resolve(node: Node, values: list[Any], source: tuple[int, Any]) -> Any:
    kind, key = source
    if kind == _SAVED:
        return values[key]
    return node._info[key]


def unpack_saved(node: Node, entry: tuple) -> Tensor:
    """The tensor a node saved, after checking nobody changed it in place since."""
    if type(entry) is PackedSaved:
        return entry.unpack(node)
    if type(entry) is WrappedNumber:
        return entry  # saved as itself: nothing can write to it (see _record)
    tensor, version = entry[0], entry[1]
    if len(entry) == 3:  # a saved input: (tensor, version, it had a grad_fn when saved)
        if entry[2] and tensor._grad_node is None:
            raise RuntimeError(DETACHED_SAVED)
        vc = tensor._vc
        current = vc[0] if vc is not None else 0
        if current == version:
            return tensor
        # PyTorch names the saved tensor's grad_fn as it is now: a view whose storage was
        # written since regenerates it (AsStridedBackward0), or refuses as grad_fn access does.
        producer = tensor.grad_fn
    else:  # the node's own output: (array, version, version counter, output number), with no
        # cycle
        vc = entry[2]
        current = vc[0]
        if current == version:
            out = wrap(tensor, _backend.device_of_array(tensor))
            out._vc = vc
            out._grad_node = node
            out._output_nr = entry[3]
            out._requires_grad = True
            return out
        producer = node
        tensor = wrap(tensor, _backend.device_of_array(tensor))
    name = message_name(producer) if producer is not None else None
    raise RuntimeError(modified_message(tensor._type_for_messages(), list(tensor.shape), name,
                                        current, version))


# PyTorch refuses a saved input that had a grad_fn when saved and lost it to detach_().
DETACHED_SAVED = ("Trying to use a saved tensor that has been detached in-place, i.e. with "
                  ".detach_().This is not supported, please use out-of-place `.detach()` "
                  "instead")


INFERENCE_SAVED = (
    "Inference tensors cannot be saved for backward. Please do not use Tensors created in "
    "inference mode in computation tracked by autograd. To work around this, you can make a "
    "clone to get a normal tensor and use it in autograd, or use `torch.no_grad()` instead of "
    "`torch.inference_mode()`.")


def same_device(tensors: Sequence[Tensor]) -> _backend.device:
    """The device all ``tensors`` share; PyTorch's error when they do not."""
    dev = tensors[0]._device
    for t in tensors[1:]:
        if t._device is not dev:
            if "meta" in (dev.type, t._device.type):
                # PyTorch's meta kernels check devices themselves, against the first tensor's.
                raise RuntimeError(
                    f"Tensor on device {t._device} is not on the expected device {dev}!")
            raise RuntimeError(
                "Expected all tensors to be on the same device, but found at least two devices, "
                f"{dev} and {t._device}!"
            )
    return dev


def edge(t: Tensor) -> tuple[Node | None, int]:
    """The ``next_functions`` entry for input ``t``: its grad_fn, its AccumulateGrad, or None."""
    if not t._requires_grad:
        return _NO_EDGE
    base = t._base
    if base is not None:
        t._sync_view()
    fn = t._grad_node
    if fn is not None:
        return (fn, t._output_nr)
    if base is not None and base._requires_grad and not t._view_requires_grad:
        # A view taken under no_grad requires grad through its base but has no gradient
        # accumulator of its own (unless requires_grad_() set its own flag): PyTorch records
        # no edge for it.
        return _NO_EDGE
    return (t._grad_accumulator(), 0)


_NO_EDGE = (None, 0)
RECORD_HOOK: Callable[[Node, OpRow], None] | None = None
"""Called with each node ``_record`` makes, while another engine runs the rows
(``refimpl.ops.kernels``)."""
_PLAIN_FACTS = frozenset((int, float, bool, str, type(None), tuple))
_QUIET = _backend.QUIET


def _is_zero_result(rule: str, tensors: Sequence[Tensor]) -> bool:
    if rule == "self":
        return tensors[0]._zero
    if rule == "any":
        return any(t._zero for t in tensors)
    return all(t._zero for t in tensors)


def apply(row: OpRow, tensors: Sequence[Tensor], params: dict[str, Any] | None = None,
          arrays: Sequence[Any] | None = None, dispatch: Sequence[Tensor] = ()) -> Any:
    """Run ``row`` on ``tensors`` and record its node when grad mode and the inputs ask for it.

    ``arrays`` replaces the inputs' arrays in the forward (callers pass dtype-promoted
    arrays); the node still records the tensors themselves. ``dispatch``: tensors in
    ``params`` that PyTorch dispatches on too (indices, a condition), which decide whether an
    op on inference tensors reaches autograd. Returns the result tensor, or
    ``(result, *extras)`` for rows with extra outputs.
    """
    dev = tensors[0]._device
    if len(tensors) > 1 and (len(tensors) > 2 or tensors[1]._device is not dev):
        dev = same_device(tensors)
    backend = _backend.backend_of(dev)
    mode = grad_mode._state
    recording = mode.enabled and not mode.inference
    if arrays is None:
        arrays = [t._data for t in tensors]
    given = params
    if params:
        if row.param_defaults.keys() - params.keys():
            params = {**row.param_defaults, **params}
    else:
        # The forward's own defaults are these (read from its signature): no keywords to pass.
        params = row.param_defaults
    if _QUIET is None:
        out = row.forward(backend.xp, *arrays, **params)
    else:
        # row.forward's quiet wrapper, inlined: one call less on every op.
        token = _QUIET[0](_QUIET[2])
        try:
            out = row.raw_forward(backend.xp, *arrays, **params) if given else \
                row.raw_forward(backend.xp, *arrays)
        finally:
            _QUIET[1](token)
    extras = None
    if row.extra_outputs:
        out, *extras = out
        extras = [e if type(e) is backend.array_type else backend.xp.asarray(e) for e in extras]
    if row.changes_device:
        dev = params["device"]
        backend = _backend.backend_of(dev)
    if type(out) is not backend.array_type:
        # NumPy returns scalars from 0-d operations; tensors always hold arrays.
        out = backend.xp.asarray(out)
    elif row.layout is not None and out.ndim > 1:
        out = _lay_out(backend.xp, out, arrays if row.layout == "elementwise" else None)
    result = wrap(out, dev)
    if row.zeros is not None and tensors[0]._zero | tensors[-1]._zero:
        result._zero = _is_zero_result(row.zeros, tensors)
    if row.is_view and tensors[0]._inference:
        # A view of an inference tensor is an inference tensor that autograd does not know as
        # a view (PyTorch gives it no view metadata): a leaf that never requires grad.
        result._inference = True
        result._vc = tensors[0]._shared_version()
    elif row.is_view:
        base = tensors[0]
        root = base._base if base._base is not None else base
        result._base = root
        result._vc = base._shared_version()
        result._view_fn = (base._view_fn, row, params)
        # The version its grad_fn describes (see Tensor._sync_view).
        result._attr_version = result._vc[0]
        # Views of an inference tensor are inference tensors; other views are not, even in
        # inference mode.
        result._inference = base._inference
        if not recording or base._no_grad_view and not row.multi_output:
            # PyTorch's CreationMeta::NO_GRAD_MODE (INFERENCE_MODE in inference mode),
            # inherited by views of such a view: it requires grad when its base does, and
            # in-place writes to it are refused (see refimpl.ops.inplace). The value names the
            # block in the message.
            result._no_grad_view = base._no_grad_view or (
                "inference_mode" if mode.inference else "no_grad")
            result._requires_grad = root._requires_grad
        elif row.multi_output or base._multi_output:
            # CreationMeta::MULTI_OUTPUT_NODE, also inherited by views of such a view.
            result._multi_output = True
        elif base._custom_view:
            result._custom_view = True
        if root._grad_node is not None or not root._requires_grad or result._no_grad_view:
            # Only these bases can be written in place with grad recording (a leaf that
            # requires grad refuses), which rewires the graph of every view of them; a view
            # taken under no_grad also follows its leaf base's requires_grad flag.
            root._track_view(result)
    if recording:
        for t in tensors:
            if t._requires_grad:
                # An op whose tensors are all inference tensors runs below autograd in
                # PyTorch (they carry no autograd dispatch key): see OpRow.below_autograd.
                for u in tensors:
                    if not u._inference:
                        _record(row, tensors, params, result, extras, dev)
                        break
                else:
                    if any(not d._inference for d in dispatch):
                        _record(row, tensors, params, result, extras, dev)
                    elif row.below_autograd is not None:
                        result = row.below_autograd(tensors, params, result)
                break
    fw = forward_ad._state
    # inline forward_ad.is_active() (this path is hot); inference mode disables forward AD.
    if fw.level >= 0 and not fw.busy and not mode.inference:
        if row.is_view and not row.multi_output and row.name not in FORWARD_AD_ROOTS:
            # A view's tangent is the same view of its input's tangent (they share memory,
            # so an in-place op on either shows in both), as in PyTorch.
            tangent = tensors[0]._fw_grad
            if tangent is not None:
                xp = backend.xp
                view = row.forward(xp, tangent._data, **params) if params else \
                    row.forward(xp, tangent._data)
                forward_ad.set_tangent(result, wrap(view, dev))
        else:
            forward_ad.set_tangent(result, forward_ad.jvp(row, tensors, params, result, extras))
    if extras is not None:
        return (result, *[wrap(e, dev) for e in extras])
    return result


# The views whose results start a forward AD chain of their own (make_dual's result, unpack_dual's
# primal): their tangent is not their input's.
FORWARD_AD_ROOTS = frozenset({"_make_dual", "_fw_primal"})


def _lay_out(xp: Any, out: Any, inputs: Sequence[Any] | None) -> Any:
    """``out`` with the memory layout PyTorch gives the op's result, which decides what
    ``view`` accepts later: row-major (``inputs`` None: reductions, softmax), or for an
    elementwise op (TensorIterator) its inputs' dimension order."""
    # Row-major inputs of the result's own shape give a row-major result; broadcast ones do
    # not always (their size-1 dims' strides take part in the ordering).
    if inputs is None or all(a.flags.c_contiguous and a.shape == out.shape
                             for a in inputs if a.ndim):
        if out.flags.c_contiguous:
            return out
        if inputs is None:
            return xp.ascontiguousarray(out)
    order = iteration_order(out.shape, inputs) if inputs is not None else []
    return lay_out_in_order(xp, out, order)


def lay_out_in_order(xp: Any, out: Any, order: Sequence[int], exact: bool = False) -> Any:
    """``out`` (a copy if needed) with its dims in memory in ``order``, outermost first.

    ``exact``: size-1 dims get the strides the order gives them too, as a fresh PyTorch result
    has them (NumPy's advanced indexing leaves other values there, which PyTorch's
    column-major test in mm's backward would read)."""
    expected, step = [0] * out.ndim, out.dtype.itemsize
    for d in reversed(order):
        expected[d] = step
        step *= out.shape[d]
    if all(n == 1 or s == e for n, s, e in zip(out.shape, out.strides, expected, strict=True)):
        if exact and tuple(expected) != out.strides and type(out) is numpy.ndarray:
            return numpy.lib.stride_tricks.as_strided(out, out.shape, expected)
        return out
    dense = xp.ascontiguousarray(xp.transpose(out, order))
    inverse = [0] * len(order)
    for i, d in enumerate(order):
        inverse[d] = i
    return xp.transpose(dense, inverse)


def iteration_order(shape: tuple[int, ...], inputs: Sequence[Any]) -> list[int]:
    """PyTorch's ``TensorIterator::reorder_dimensions``: the output's dims from outermost to
    innermost, sorted by the inputs' strides (broadcast dims skipped, ties to the larger dim).
    ``inputs`` need only ``ndim``, ``shape`` and ``strides``."""
    ndim = len(shape)
    strides = []
    for a in inputs:
        lead = ndim - a.ndim
        strides.append([0 if i < lead or (a.shape[i - lead] == 1 and shape[i] != 1)
                        else a.strides[i - lead] for i in range(ndim)])

    def should_swap(d0: int, d1: int) -> int:
        for st in strides:
            s0, s1 = st[d0], st[d1]
            if s0 == 0 or s1 == 0:
                continue
            if s0 != s1:
                return -1 if s0 < s1 else 1
            if shape[d0] > shape[d1]:
                return 1
        return 0

    perm = list(range(ndim - 1, -1, -1))  # innermost first
    for i in range(1, ndim):
        d1 = i
        for d0 in range(i - 1, -1, -1):
            cmp = should_swap(perm[d0], perm[d1])
            if cmp > 0:
                perm[d0], perm[d1] = perm[d1], perm[d0]
                d1 = d0
            elif cmp < 0:
                break
    perm.reverse()
    return perm


def _record(row: OpRow, tensors: Sequence[Tensor], params: dict[str, Any], result: Tensor,
            extras: list[Any] | None, dev: _backend.device,
            before: tuple[tuple[Any, ...], list[int]] | None = None) -> None:
    """Make ``result``'s node. ``before``: the inputs' edges and versions taken before an
    in-place write changed them (they name the graph and data the op actually read)."""
    node = row.node_cls()
    # Numbered before its edges are taken, which may regenerate a view's grad_fn (PyTorch
    # creates the node first too).
    node._seq = next(SEQUENCE)
    if anomaly_mode._enabled:
        anomaly_mode.record(node)
    if before is not None:
        node.next_functions = before[0]
    else:
        # edge(), inlined for the common inputs: no grad, or a non-view with a grad_fn.
        node.next_functions = tuple([
            _NO_EDGE if not t._requires_grad else (t._grad_node, t._output_nr)
            if t._base is None and t._grad_node is not None else edge(t) for t in tensors])
    node._pre_hooks = node._node_pre_hooks = node._post_hooks = None
    node._shape = result._data.shape
    node._dtype = result._data.dtype
    if row.saved_names:
        saved = []
        variadic = row.variadic
        for k, users in row.save_plan:
            if not variadic:
                for u in users:
                    if tensors[u]._requires_grad:
                        break
                else:
                    saved.append(None)
                    continue
            if k < 0:
                vc = result._shared_version()  # an in-place result is past version 0
                saved.append((result._data, vc[0], vc, 0))
            else:
                t = tensors[k]
                if type(t) is WrappedNumber:
                    # No one holds a wrapped number to write to it in place: it needs no
                    # version to check, and saving it bare spares a tuple per op.
                    saved.append(t)
                    continue
                if t._inference:
                    raise RuntimeError(INFERENCE_SAVED)
                vc = t._vc
                if before is not None:
                    saved.append((t, before[1][k], t._grad_node is not None))
                else:
                    saved.append((t, vc[0] if vc is not None else 0, t._grad_node is not None))
        node._saved = tuple(saved)
    else:
        node._saved = None
    if params is row.param_defaults and row.default_info is not None:
        node._info = row.default_info
    elif row.info_names or extras is not None:
        info = {}
        # A tensor among the facts (where's condition, max.dim's indices, index's index
        # tensors) is a saved tensor in PyTorch too: backward releases it, and a second
        # backward must fail. Only parameters and extra outputs can be tensors.
        holds_tensor = extras is not None
        for name in row.info_names:
            if name in params:
                value = info[name] = params[name]
                if not holds_tensor and type(value) not in _PLAIN_FACTS and (
                        isinstance(value, Tensor) or type(value) is list
                        and any(isinstance(i, Tensor) for i in value)):
                    holds_tensor = True
            else:
                base, _, what = name.rpartition("_")
                if row.variadic:  # one fact per tensor of the list
                    info[name] = [_meta(t, what) for t in tensors]
                else:
                    src = result if base == "result" else tensors[row.inputs.index(base)]
                    info[name] = _meta(src, what)
        for name, e in zip(row.extra_outputs, extras or (), strict=True):
            info[name] = wrap(e, dev)
        node._info = info
        if holds_tensor and node._saved is None:
            node._saved = ()
    else:
        node._info = None
    result._grad_node = node
    result._requires_grad = True
    if node._saved and SAVED_TENSORS_HOOKS.stack:
        pack_saved(node, (result,))
    if RECORD_HOOK is not None:
        RECORD_HOOK(node, row)


class WrappedNumber(Tensor):
    """A Python number an op took as an operand, as the 0-d tensor the op computes with
    (PyTorch's wrapped number): saved-tensor hooks never see it."""

    __slots__ = ()


PACK_HOOK_IN_PLACE = (
    "A saved tensor pack hook is modifying its input in place. Tensors provided as input to "
    "pack hook cannot be modified by in-place operations as this can lead to unexpected "
    "side-effects. Please open an issue if you need to perform in-place operations on the "
    "input to a pack hook.")


def pack_with(hook: Callable[[Tensor], Any], tensor: Tensor) -> Any:
    """``hook(tensor)``, refused when the pack hook wrote into ``tensor``."""
    before = tensor._version
    result = hook(tensor)
    if tensor._version != before:
        raise RuntimeError(PACK_HOOK_IN_PLACE)
    return result


def pack_saved(node: Node, outputs: Sequence[Any]) -> None:
    """Replace what ``node`` saved by what the innermost ``saved_tensors_hooks`` pack hook
    makes of each tensor (``outputs[k]`` for the node's output ``k``), in saving order. Pack
    hooks run with grad mode off."""
    hook, unpack = SAVED_TENSORS_HOOKS.stack[-1]

    def pack(tensor: Tensor) -> Any:
        return pack_with(hook, tensor)

    packed = list(node._saved)
    row = type(node)._row
    # PyTorch saves an op's inputs in sorted name order, then its result (a row's unpack
    # order); a custom Function's tensors in the order save_for_backward got them.
    order = row.unpack_order if row is not None else range(len(packed))
    with grad_mode.no_grad():
        for k in order:
            entry = packed[k]
            if entry is None or type(entry) is WrappedNumber:
                continue
            value = entry[0] if len(entry) == 3 else outputs[entry[3]]
            packed[k] = _packed_entry(node, k, entry, pack, unpack, value)
    node._saved = tuple(packed)


def _packed_entry(node: Node, k: int, entry: tuple, pack: Any, unpack: Any,
                  value: Tensor) -> PackedSaved:
    """Saved entry ``k`` of ``node`` as ``pack(value)``, read back through ``unpack``."""
    if len(entry) != 3:  # one of the node's outputs
        return PackedSaved(pack(value), unpack, None, entry[3])
    row = type(node)._row
    # An input the op itself wrote in place (x in x.mul_(x)) is saved where it was in the
    # graph before the write: the node's edge for it.
    where = node.next_functions[row.save_plan[k][0]] \
        if row is not None and value._grad_node is node else edge(value)
    return PackedSaved(pack(value), unpack, where)


def _meta(t: Tensor, what: str) -> Any:
    if what == "shape":
        return t._data.shape
    if what == "strides":
        return _element_strides(t._data)
    return t.dtype if what == "dtype" else t._device


def _element_strides(array: Any) -> tuple[int, ...]:
    """PyTorch's ``stride()`` of an array: strides in elements, where a size-1 dimension that
    NumPy gave stride 0 (``a[None]``) gets the stride ``unsqueeze`` gives it."""
    item = array.dtype.itemsize
    strides = [s // item for s in array.strides]
    for d in range(array.ndim - 1, -1, -1):
        if array.shape[d] == 1 and strides[d] == 0:
            strides[d] = strides[d + 1] * array.shape[d + 1] if d + 1 < array.ndim else 1
    return tuple(strides)
