"""``torch.utils.checkpoint``: trade compute for memory by recomputing a function's
intermediate tensors during backward instead of keeping them, as PyTorch 2.13 does.

Two implementations, chosen by ``use_reentrant`` (PyTorch warns when it is not given and takes
``True``):

- **reentrant** (``use_reentrant=True``): the function runs inside a custom Function,
  ``CheckpointFunction``, under no_grad, so the result has a single ``CheckpointFunctionBackward``
  node. Its backward runs the function again with grad on, on detached copies of the inputs, and
  calls ``backward`` on that graph from inside the outer backward (a reentrant backward). So
  only tensor arguments get gradients (a parameter reached through a closure gets none unless
  an argument requires grad), ``autograd.grad`` and ``backward(inputs=...)`` are refused, and a
  recomputation that differs from the forward goes unnoticed.
- **non-reentrant** (``use_reentrant=False``): the function runs normally, under a
  saved-tensors-hooks pair whose pack hook keeps a placeholder instead of each saved tensor. The
  result has the graph it would have without checkpointing; the first unpack of a backward pass
  reruns the function (with the forward's RNG state) under a second pack hook that fills the
  placeholders, and stops as soon as all are filled. A recomputation that saves fewer tensors,
  or tensors of other shape, dtype or device, raises ``CheckpointError``.
"""

from __future__ import annotations

import contextlib
import itertools
import warnings
import weakref
from collections import defaultdict
from collections.abc import Callable, Iterator
from typing import Any

from refimpl import _creation
from refimpl._tensor import Tensor
from refimpl.autograd import engine, grad_mode
from refimpl.autograd.function import Function
from refimpl.autograd.graph import SAVED_TENSORS_HOOKS, PackedSaved, saved_tensors_hooks
from refimpl.ops.table import edge, pack_with, unpack_saved

__all__ = ["checkpoint", "checkpoint_sequential", "CheckpointError", "CheckpointFunction",
           "set_checkpoint_early_stop", "detach_variable"]


class CheckpointError(RuntimeError):
    """A non-reentrant recomputation that does not match the forward."""


_DEBUG_TIP = (
    "\nTip: To see a more detailed error message, either pass `debug=True` to\n"
    "`torch.utils.checkpoint.checkpoint(...)` or wrap the code block\n"
    "with `with torch.utils.checkpoint.set_checkpoint_debug_enabled(True):` to\n"
    "enable checkpoint\u2011debug mode globally.\n\n"
    "If this error occurs under torch.compile with automatic_dynamic_shapes enabled,\n"
    "it may be because the recomputation selected a different compiled graph than the\n"
    "forward pass (e.g., a dynamic graph instead of the original static graph).\n"
    "To fix this, either:\n"
    "  - Use torch._dynamo.mark_dynamic() to explicitly mark varying dimensions as\n"
    "    dynamic upfront, avoiding the static-to-dynamic transition.\n"
    "  - Call torch._C._dynamo.eval_frame._set_lru_cache(False) to disable LRU cache\n"
    "    reordering, which can change which graph is checked first between forward\n"
    "    and recompute.\n"
    "See https://github.com/pytorch/pytorch/issues/166926 for more details and\n"
    "workaround examples.\n")

_NO_REENTRANT_CHOICE = (
    "the use_reentrant parameter should be passed explicitly. {when} use_reentrant=False is "
    "recommended, but if you need to preserve the current default behavior, you can pass "
    "use_reentrant=True. Refer to docs for more details on the differences between the two "
    "variants.")


def noop_context_fn() -> tuple[Any, Any]:
    return contextlib.nullcontext(), contextlib.nullcontext()


def detach_variable(inputs: tuple[Any, ...]) -> tuple[Any, ...]:
    """Each tensor of ``inputs`` detached, keeping its ``requires_grad``."""
    if not isinstance(inputs, tuple):
        raise RuntimeError("Only tuple of tensors is supported. Got Unsupported input type: "
                           f"{type(inputs).__name__}")
    out = []
    for inp in inputs:
        if isinstance(inp, Tensor):
            x = inp.detach()
            x.requires_grad = inp.requires_grad
            inp = x
        out.append(inp)
    return tuple(out)


@contextlib.contextmanager
def _rng_as_in_forward(state: Any, enabled: bool) -> Iterator[None]:
    """Run with the default generator where the forward left it, then put it back."""
    if not enabled:
        yield
        return
    gen = _creation.default_generator
    outer = gen.snapshot()
    gen.restore(state)
    try:
        yield
    finally:
        gen.restore(outer)


# ---------------------------------------------------------------- reentrant
class CheckpointFunction(Function):
    """The reentrant checkpoint: the function's graph is rebuilt and backpropagated inside
    this Function's backward."""

    @staticmethod
    def forward(ctx: Any, run_function: Callable[..., Any], preserve_rng_state: bool,
                *args: Any) -> Any:
        if not any(a.requires_grad for a in args if isinstance(a, Tensor)):
            warnings.warn("None of the inputs have requires_grad=True. Gradients will be None",
                          UserWarning, stacklevel=2)
        ctx.run_function = run_function
        ctx.preserve_rng_state = preserve_rng_state
        if preserve_rng_state:
            ctx.fwd_rng_state = _creation.default_generator.snapshot()
        ctx.inputs = [None if isinstance(a, Tensor) else a for a in args]
        ctx.tensor_indices = [i for i, a in enumerate(args) if isinstance(a, Tensor)]
        ctx.save_for_backward(*[a for a in args if isinstance(a, Tensor)])
        with grad_mode.no_grad():
            return run_function(*args)

    @staticmethod
    def backward(ctx: Any, *grads: Any) -> tuple[Any, ...]:
        if not engine.is_checkpoint_valid():
            raise RuntimeError(
                "When use_reentrant=True, torch.utils.checkpoint is incompatible with .grad() "
                "or passing an `inputs` parameter to .backward(). To resolve this error, you "
                "can either set use_reentrant=False, or call .backward() without passing the "
                "`inputs` argument.")
        inputs = list(ctx.inputs)
        for i, t in zip(ctx.tensor_indices, ctx.saved_tensors, strict=True):
            inputs[i] = t
        with _rng_as_in_forward(getattr(ctx, "fwd_rng_state", None), ctx.preserve_rng_state):
            detached = detach_variable(tuple(inputs))
            with grad_mode.enable_grad():
                outputs = ctx.run_function(*detached)
        if isinstance(outputs, Tensor):
            outputs = (outputs,)
        pairs = [(o, g) for o, g in zip(outputs, grads, strict=False)
                 if isinstance(o, Tensor) and o.requires_grad]
        if not pairs:
            raise RuntimeError("none of output has requires_grad=True, this checkpoint() is not "
                               "necessary")
        from refimpl.autograd import backward

        backward([o for o, _ in pairs], [g for _, g in pairs])
        return (None, None) + tuple(d.grad if isinstance(d, Tensor) else None
                                    for d in detached)


# ---------------------------------------------------------------- non-reentrant
class _StopRecomputation(Exception):
    """Raised by the recomputation's pack hook once every placeholder is filled."""


class _Holder:
    """What the forward's pack hook keeps for one saved tensor: per backward pass, the key of
    its recomputed value (None once unpacked)."""

    def __init__(self) -> None:
        self.handles: dict[Any, object | None] = {}


def _metadata(x: Tensor) -> dict[str, Any]:
    return {"shape": x.shape, "dtype": x.dtype, "device": x.device}


class _Frame:
    """One non-reentrant checkpoint call: its inputs, its placeholders, and what each backward
    pass recomputed."""

    def __init__(self, recompute: Callable[..., None], early_stop: bool,
                 metadata_fn: Callable[[Tensor], Any] | None, debug: bool) -> None:
        self.recompute = recompute
        self.debug = debug
        self.early_stop = early_stop
        self.metadata_fn = metadata_fn
        self.saved_args: list[Any] = []
        self.saved_tensors: dict[int, Any] = {}  # saved entries, as unpack_saved reads them
        self.weak_holders: list[weakref.ref[_Holder]] = []
        self.metadatas: list[Any] = []
        self.recomputed: defaultdict[Any, dict[object, Tensor]] = defaultdict(dict)
        self.counter: defaultdict[Any, int] = defaultdict(int)
        self.done: defaultdict[Any, bool] = defaultdict(bool)
        self.forward_completed = False
        self.ignore_mismatch = False

    def save_inputs(self, args: tuple[Any, ...]) -> None:
        self.saved_args = list(args)
        # Each tensor argument kept as a saved input is: checked against in-place changes
        # when recomputing. PyTorch saves them with save_for_backward before its own hooks
        # take over, so saved_tensors_hooks around the checkpoint pack them, and the
        # recomputation runs on what their unpack hook gives back.
        self.saved_tensors = {i: (a, a._version, a.grad_fn is not None)
                              for i, a in enumerate(args) if isinstance(a, Tensor)}
        if SAVED_TENSORS_HOOKS.stack and self.saved_tensors:
            hook, unpack = SAVED_TENSORS_HOOKS.stack[-1]
            with grad_mode.no_grad():
                self.saved_tensors = {i: PackedSaved(pack_with(hook, a), unpack, edge(a))
                                      for i, (a, _, _) in self.saved_tensors.items()}

    def inputs(self) -> list[Any]:
        return [unpack_saved(None, self.saved_tensors[i]) if i in self.saved_tensors else a
                for i, a in enumerate(self.saved_args)]

    def pack(self, x: Tensor) -> _Holder:
        holder = _Holder()
        self.weak_holders.append(weakref.ref(holder))
        if self.metadata_fn is not None:
            self.metadatas.append(self.metadata_fn(x))
        return holder

    def unpack(self, holder: _Holder) -> Tensor:
        try:
            return self._unpack(holder)
        except CheckpointError as error:
            if self.debug:
                # PyTorch's debug mode appends the operators each run called; refimpl records
                # none, so it says so rather than give the message without them.
                raise NotImplementedError("refimpl's checkpoint has no debug mode (operator "
                                          f"traces); without it: {error}") from error
            raise

    def _unpack(self, holder: _Holder) -> Tensor:
        gid = engine.current_graph_task_id()
        if gid == -1:
            gid = object()  # unpacked outside backward: a pass of its own
        if not self.done[gid]:
            try:
                with saved_tensors_hooks(lambda x: self.pack_recomputed(x, gid), lambda x: x), \
                        grad_mode.enable_grad():
                    self.recompute(*self.inputs())
            except _StopRecomputation:
                pass
            self.done[gid] = True
            self.check_recomputed(gid)
        key = holder.handles[gid]
        if key is None:
            raise CheckpointError(
                "torch.utils.checkpoint: Unpack is being triggered for a tensor that was already "
                "unpacked once. If you are calling ctx.saved_tensors in backward, make sure to do "
                "so only once. Otherwise please open an issue with details on your use case.")
        holder.handles[gid] = None
        return self.recomputed[gid][key]

    def pack_recomputed(self, x: Tensor, gid: Any) -> Tensor:
        x = x.detach() if x.requires_grad else x
        idx = self.counter[gid]
        self.counter[gid] += 1
        if idx >= len(self.weak_holders):
            if not self.forward_completed:
                # A backward inside the checkpointed function, without early stop.
                self.ignore_mismatch = True
                return x
            raise CheckpointError("torch.utils.checkpoint: trying to save more tensors during "
                                  f"recomputation than during the original forward pass.\n"
                                  f"{_DEBUG_TIP}")
        holder = self.weak_holders[idx]()
        if holder is not None:  # None: its node was freed, nobody will unpack it
            key = object()
            holder.handles[gid] = key
            self.recomputed[gid][key] = x
        if self.early_stop and self.counter[gid] == len(self.weak_holders):
            raise _StopRecomputation
        return x

    def check_recomputed(self, gid: Any) -> None:
        if self.ignore_mismatch:
            return
        if len(self.weak_holders) != self.counter[gid]:
            raise CheckpointError(
                "torch.utils.checkpoint: A different number of tensors was saved during the "
                "original forward and recomputation.\n"
                f"Number of tensors saved during forward: {len(self.weak_holders)}\n"
                f"Number of tensors saved during recomputation: {self.counter[gid]}.\n"
                f"{_DEBUG_TIP}")
        if self.metadata_fn is None:
            return
        different = ""
        for idx, ref in enumerate(self.weak_holders):
            holder = ref()
            if holder is None:
                continue
            new = self.metadata_fn(self.recomputed[gid][holder.handles[gid]])
            if new != self.metadatas[idx]:
                different += (f"tensor at position {idx}:\nsaved metadata: "
                              f"{self.metadatas[idx]}\nrecomputed metadata: {new}\n")
        if different:
            raise CheckpointError(
                "torch.utils.checkpoint: Recomputed values for the following tensors have "
                f"different metadata than during the forward pass.\n{different}.\n{_DEBUG_TIP}")


_DETERMINISM_CHECKS: dict[str, Callable[[Tensor], Any] | None] = {
    "default": _metadata, "none": None}
_early_stop: bool | None = None


@contextlib.contextmanager
def set_checkpoint_early_stop(enable: bool) -> Iterator[None]:
    """Whether non-reentrant checkpoints made inside stop recomputing once every saved tensor
    is back (the default) or run the whole function again."""
    global _early_stop
    prev, _early_stop = _early_stop, enable
    try:
        yield
    finally:
        _early_stop = prev


def _checkpoint_without_reentrant(function: Callable[..., Any], preserve_rng_state: bool,
                                  context_fn: Callable[[], tuple[Any, Any]],
                                  determinism_check: str, debug: bool, early_stop: bool,
                                  args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    if debug and context_fn is not noop_context_fn:
        raise ValueError("debug=True is incompatible with non-default context_fn")
    if determinism_check not in _DETERMINISM_CHECKS:
        raise ValueError("determinism_check should be one of "
                         f"{list(_DETERMINISM_CHECKS)}, but got {determinism_check}")
    forward_context, recompute_context = context_fn()
    rng_state = _creation.default_generator.snapshot() if preserve_rng_state else None

    def recompute(*inputs: Any) -> None:
        with _rng_as_in_forward(rng_state, preserve_rng_state), recompute_context:
            function(*inputs, **kwargs)

    if not grad_mode.is_grad_enabled():
        with forward_context:
            return function(*args, **kwargs)
    frame = _Frame(recompute, _early_stop if _early_stop is not None else early_stop,
                   _DETERMINISM_CHECKS[determinism_check], debug)
    frame.save_inputs(args)
    with saved_tensors_hooks(frame.pack, frame.unpack), forward_context:
        result = function(*args, **kwargs)
    frame.forward_completed = True
    return result


# ---------------------------------------------------------------- entry points
def checkpoint(function: Callable[..., Any], *args: Any, use_reentrant: bool | None = None,
               context_fn: Callable[[], tuple[Any, Any]] = noop_context_fn,
               determinism_check: str = "default", debug: bool = False,
               early_stop: bool = True, **kwargs: Any) -> Any:
    """``function(*args, **kwargs)``, keeping only the inputs for backward and recomputing the
    rest there (see the module docstring for the two variants). ``preserve_rng_state=False``
    (a keyword) lets the recomputation draw fresh random numbers."""
    if use_reentrant is None:
        warnings.warn("torch.utils.checkpoint: " + _NO_REENTRANT_CHOICE.format(
            when="Starting in PyTorch 2.9, calling checkpoint without use_reentrant will raise "
                 "an exception."), UserWarning, stacklevel=2)
        use_reentrant = True
    preserve = kwargs.pop("preserve_rng_state", True)
    if kwargs and use_reentrant:
        raise ValueError("Unexpected keyword arguments: " + ",".join(kwargs))
    if use_reentrant:
        if context_fn is not noop_context_fn or debug is not False:
            raise ValueError("Passing `context_fn` or `debug` is only supported when "
                             "use_reentrant=False.")
        return CheckpointFunction.apply(function, preserve, *args)
    return _checkpoint_without_reentrant(function, preserve, context_fn, determinism_check,
                                         debug, early_stop, args, kwargs)


def checkpoint_sequential(functions: Any, segments: int, input: Any,
                          use_reentrant: bool | None = None, **kwargs: Any) -> Any:
    """Run ``functions`` (a list or an ``nn.Sequential``) in ``segments`` pieces, each but the
    last checkpointed."""
    if use_reentrant is None:
        warnings.warn("torch.utils.checkpoint.checkpoint_sequential: " + _NO_REENTRANT_CHOICE
                      .format(when="In version 2.9 we will raise an exception if use_reentrant "
                                   "is not passed."), UserWarning, stacklevel=2)
        use_reentrant = True
    preserve = kwargs.pop("preserve_rng_state", True)
    if kwargs:
        raise ValueError("Unexpected keyword arguments: " + ",".join(kwargs))
    from refimpl.nn import Sequential

    if isinstance(functions, Sequential):
        functions = list(functions.children())

    def run(start: int, end: int) -> Callable[[Any], Any]:
        def forward(x: Any) -> Any:
            for f in itertools.islice(functions, start, end + 1):
                x = f(x)
            return x
        return forward

    size = len(functions) // segments
    end = -1
    for start in range(0, size * (segments - 1), size):
        end = start + size - 1
        input = checkpoint(run(start, end), input, use_reentrant=use_reentrant,
                           preserve_rng_state=preserve)
    return run(end + 1, len(functions) - 1)(input)
