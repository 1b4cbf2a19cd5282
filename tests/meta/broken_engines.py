"""refimpl with one autograd rule deliberately broken: engines the suite must reject.

Each `Break` replaces a few of refimpl's real internals (a method, a property, a node class's
name) so that exactly one rule stops holding, the way a plausible bug in an engine would break
it. `BrokenEngine` is the ordinary refimpl adapter with one break applied only while a case
runs: the runner asks an adapter for a fresh namespace at the start of every case and calls
`reset()` before and after it (in a `finally`), so the break goes in with the namespace and
comes out with the reset, and refimpl is untouched between cases and for every other engine::

    engine = BrokenEngine(BREAKS["no_accumulation"])
    run_case(case, engine).verdict          # 'failed' for a case that backwards twice

A break names the attribute it replaces; if refimpl moves that seam, applying the break
raises `AttributeError` naming it instead of silently testing nothing.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

import refimpl
import refimpl.autograd
from conformance.engines import load_engine
from conformance.engines.generic import TorchLikeEngine
from refimpl._tensor import Tensor
from refimpl.autograd import grad_mode
from refimpl.autograd.graph import Node
from refimpl.ops import derivatives, functional, inplace, table


class Patch:
    """Attribute replacements that can be undone, newest first."""

    def __init__(self) -> None:
        self._originals: list[tuple[Any, str, Any]] = []

    @property
    def active(self) -> bool:
        return bool(self._originals)

    def set(self, owner: Any, name: str, value: Any) -> None:
        """Replace `owner.name` by `value` (AttributeError if `owner` has no such attribute)."""
        self._originals.append((owner, name, getattr(owner, name)))
        setattr(owner, name, value)

    def originals(self) -> list[tuple[Any, str, Any]]:
        return list(self._originals)

    def undo(self) -> None:
        while self._originals:
            owner, name, original = self._originals.pop()
            setattr(owner, name, original)


@dataclass(frozen=True)
class Break:
    """One rule of autograd and how to break it in refimpl."""

    name: str
    rule: str
    """The rule that stops holding, in one sentence."""
    apply: Callable[[Patch], None]


def _no_accumulation(patch: Patch) -> None:
    # Every backward overwrites .grad: drop the old gradient before the real accumulation runs.
    original = Tensor._accumulate_grad

    def overwrite(self: Tensor, *args: Any, **kwargs: Any) -> None:
        self._grad = None
        original(self, *args, **kwargs)

    patch.set(Tensor, "_accumulate_grad", overwrite)


def _nonleaf_grads(patch: Patch) -> None:
    # Every recorded result collects its gradient during backward, as if retain_grad() had been
    # called, while its flags (retains_grad, the warning on reading .grad) stay as they were.
    original = table._record

    def record(row: Any, tensors: Any, params: Any, result: Tensor, *args: Any,
               **kwargs: Any) -> Any:
        recorded = original(row, tensors, params, result, *args, **kwargs)
        ref = weakref.ref(result)

        def keep(grads: tuple[Tensor, ...]) -> None:
            tensor = ref()
            if tensor is not None and not tensor._retains_grad and grads[0] is not None:
                tensor._accumulate_grad(grads[0])

        result._grad_fn.register_prehook(keep)
        return recorded

    patch.set(table, "_record", record)
    patch.set(inplace, "_record", record)


def _no_nonleaf_grad_warning(patch: Patch) -> None:
    grad = vars(Tensor)["grad"]
    patch.set(Tensor, "grad", property(lambda self: self._grad, grad.fset, grad.fdel))


def _wrong_element_message(patch: Patch) -> None:
    # The right check and the right error type, with PyTorch's wording slightly altered.
    original = refimpl.autograd.check_outputs

    def check_outputs(*args: Any, **kwargs: Any) -> Any:
        try:
            return original(*args, **kwargs)
        except RuntimeError as exc:
            raise RuntimeError(str(exc).replace("does not have a grad_fn", "has no grad_fn")) \
                from None

    patch.set(refimpl.autograd, "check_outputs", check_outputs)


def _no_release(patch: Patch) -> None:
    patch.set(Node, "release_variables", lambda self: None)


def _wrong_node_name(patch: Patch) -> None:
    patch.set(table.ROWS["mul.Tensor"].node_cls, "__name__", "MulBackward")


def _clone_of_plain_tensor_not_leaf(patch: Patch) -> None:
    # clone() records CloneBackward0 whenever grad mode is on, even for an input that needs no
    # gradient (what older documents describe).
    original = functional.clone

    def clone(input: Tensor, *args: Any, **kwargs: Any) -> Tensor:
        out = original(input, *args, **kwargs)
        if out._grad_fn is None and grad_mode.is_grad_enabled():
            table._record(derivatives.CLONE, (input,), {}, out, None, out._device)
        return out

    patch.set(Tensor, "clone", clone)
    patch.set(refimpl, "clone", clone)
    patch.set(functional, "clone", clone)


def _grad_mode_kept_on_exception(patch: Patch) -> None:
    # Leaving a grad-mode block by an exception keeps the block's mode instead of restoring.
    def exit_(self: Any, exc_type: Any, exc: Any, tb: Any) -> None:
        previous = self._prev.pop()
        if exc_type is None:
            grad_mode._state.enabled, grad_mode._state.inference = previous

    patch.set(grad_mode._ModeContext, "__exit__", exit_)


def _detach_copies(patch: Patch) -> None:
    # detach() returns a copy with its own storage and version counter.
    original = Tensor.detach

    def detach(self: Tensor, *args: Any, **kwargs: Any) -> Tensor:
        out = original(self, *args, **kwargs)
        out._data = out._data.copy()
        out._vc = None
        return out

    patch.set(Tensor, "detach", detach)


def _nonleaf_requires_grad_settable(patch: Patch) -> None:
    flag = vars(Tensor)["requires_grad"]
    method = Tensor.requires_grad_

    def set_flag(self: Tensor, value: bool) -> None:
        if self._grad_fn is not None:
            self._requires_grad = bool(value)
            return
        flag.fset(self, value)

    def requires_grad_(self: Tensor, requires_grad: bool = True) -> Tensor:
        if self._grad_fn is not None:
            self._requires_grad = bool(requires_grad)
            return self
        return method(self, requires_grad)

    patch.set(Tensor, "requires_grad", property(flag.fget, set_flag))
    patch.set(Tensor, "requires_grad_", requires_grad_)


BREAKS: dict[str, Break] = {b.name: b for b in (
    Break("no_accumulation", "Backward adds into .grad; here it overwrites it.",
          _no_accumulation),
    Break("nonleaf_grads", "Only leaves (and non-leaves that retain_grad()) get .grad; here "
          "every non-leaf does.", _nonleaf_grads),
    Break("no_nonleaf_grad_warning", "Reading .grad of a non-leaf warns; here it is silent.",
          _no_nonleaf_grad_warning),
    Break("wrong_element_message", "backward() on a tensor that needs no grad raises PyTorch's "
          "'element 0 ... does not have a grad_fn'; here the text says 'has no grad_fn'.",
          _wrong_element_message),
    Break("no_release", "Backward frees saved tensors unless retain_graph; here it keeps them, "
          "so a second backward through x * 4 succeeds.", _no_release),
    Break("wrong_node_name", "x * y is recorded as MulBackward0; here as MulBackward.",
          _wrong_node_name),
    Break("clone_of_plain_tensor_not_leaf", "clone() of a tensor that needs no grad is a leaf; "
          "here it records CloneBackward0.", _clone_of_plain_tensor_not_leaf),
    Break("grad_mode_kept_on_exception", "Grad-mode contexts restore the previous mode when an "
          "exception leaves them; here they do not.", _grad_mode_kept_on_exception),
    Break("detach_copies", "detach() shares storage with the original; here it copies.",
          _detach_copies),
    Break("nonleaf_requires_grad_settable", "requires_grad of a non-leaf cannot be changed; "
          "here assigning it (or requires_grad_) silently works.",
          _nonleaf_requires_grad_settable),
)}


class BrokenEngine(TorchLikeEngine):
    """The refimpl adapter with `brk` in force while a case runs (see the module docstring)."""

    def __init__(self, brk: Break) -> None:
        # The same features as the built-in refimpl engine (cuda only where CuPy has a GPU).
        lacks = load_engine("refimpl").lacks
        super().__init__(f"refimpl-{brk.name}", "refimpl", lacks=lacks,
                         repro_import="import refimpl as torch")
        self.brk = brk
        self.patch = Patch()

    def namespace(self, rng: np.random.Generator) -> dict[str, Any]:
        self.patch.undo()
        self.brk.apply(self.patch)
        return super().namespace(rng)

    def reset(self) -> None:
        self.patch.undo()
        super().reset()

    def adapter_files(self) -> frozenset[str]:
        # The breaks in this file stand in for the engine's own code: what they raise is the
        # (broken) engine's refusal, not the adapter's.
        return super().adapter_files() - {__file__}
