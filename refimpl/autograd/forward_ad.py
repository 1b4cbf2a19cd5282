"""``refimpl.autograd.forward_ad``: forward-mode AD with dual tensors, as in PyTorch.

Inside a ``dual_level``, a tensor made with ``make_dual(primal, tangent)`` carries a tangent,
and every op applied to it computes its output's tangent ``J·t``::

    with forward_ad.dual_level():
        d = forward_ad.make_dual(x, t)
        y = d.sin() * d
        forward_ad.unpack_dual(y).tangent        # (cos(x) * x + sin(x)) * t

No op carries a forward (jvp) formula. The tangent comes from the op's own backward formulas
by the double-vjp trick: the vector-Jacobian product ``v(g) = Jᵀ·g`` is linear in the cotangent
``g``, so differentiating ``<v(g), t>`` with respect to ``g`` gives ``J·t``. Both steps run
refimpl's differentiable backward formulas on a throwaway node, so the op table stays the one
source of derivatives. Tangents are plain values here: unlike PyTorch's, they do not record a
backward graph of their own.

Leaving the level drops every tangent; ``detach()`` and ``detach_()`` drop them too.
"""

from __future__ import annotations

import weakref
from collections.abc import Sequence
from typing import Any, NamedTuple

from refimpl._tensor import Tensor, wrap
from refimpl.autograd import grad_mode

__all__ = ["dual_level", "enter_dual_level", "exit_dual_level", "make_dual", "unpack_dual",
           "UnpackedDualTensor"]


class _State:
    """The one forward AD level PyTorch supports, and the tensors holding tangents in it."""

    def __init__(self) -> None:
        self.level = -1
        # True while a tangent is being computed, so the formulas' own ops do not propagate.
        self.busy = False
        self.duals: list[weakref.ref[Tensor]] = []


_state = _State()


def is_active() -> bool:
    """Whether ops should look for tangents (a level is open and none is being computed)."""
    return _state.level >= 0 and not _state.busy


class UnpackedDualTensor(NamedTuple):
    """``(primal, tangent)`` of a dual tensor; ``tangent`` is None for a plain tensor."""

    primal: Tensor
    tangent: Tensor | None


def enter_dual_level() -> int:
    """Open the forward AD level and return it (0); PyTorch supports one at a time."""
    if _state.level >= 0:
        raise RuntimeError("Nested forward mode AD is not supported at the moment")
    _state.level = 0
    return 0


def exit_dual_level(*, level: int | None = None) -> None:
    """Close the level: every tangent created in it is dropped."""
    if level is None:
        level = _state.level
    if level < 0:
        raise RuntimeError("Dual level must be a positive number.")
    if level != _state.level:
        raise RuntimeError("Trying to exit a forward AD level that was not the last one that "
                           "was created. This is not supported.")
    for ref in _state.duals:
        t = ref()
        if t is not None:
            t._fw_grad = None
    _state.duals = []
    _state.level = -1


class dual_level:  # noqa: N801 - PyTorch's name
    """Context manager around ``enter_dual_level`` / ``exit_dual_level``."""

    def __enter__(self) -> int:
        return enter_dual_level()

    def __exit__(self, *exc: object) -> None:
        exit_dual_level()


def set_tangent(t: Tensor, tangent: Tensor | None) -> None:
    """Attach ``tangent`` to ``t`` for the current level (remembered so exiting drops it)."""
    t._fw_grad = tangent
    if tangent is not None:
        _state.duals.append(weakref.ref(t))


def make_dual(tensor: Tensor, tangent: Tensor, *, level: int | None = None) -> Tensor:
    """A view of ``tensor`` carrying ``tangent`` as its forward gradient."""
    from refimpl.ops import derivatives as D
    from refimpl.ops.table import apply

    if level is None:
        level = _state.level
    if level < 0:
        raise RuntimeError("Trying to create a dual Tensor for forward AD but no level exists, "
                           "make sure to enter_dual_level() first.")
    if tensor.dtype.kind not in "fc":
        raise ValueError(f"Expected primal to be floating point or complex, but got: "
                         f"{tensor.dtype!r}")
    if tangent.dtype.kind not in "fc":
        raise ValueError(f"Expected tangent to be floating point or complex, but got: "
                         f"{tangent.dtype!r}")
    if tangent._data.shape != tensor._data.shape:
        raise RuntimeError(
            "Trying to set a forward gradient that has a different size than that of the "
            f"original Tensor, this is not supported. Tensor is of size {list(tensor.shape)} "
            f"while the given forward gradient is of size {list(tangent.shape)}.")
    if tensor._fw_grad is not None:
        raise RuntimeError("Making a dual Tensor based on a Tensor that already has a forward "
                           f"gradient at the same level {level} is not supported.")
    if tangent._fw_grad is not None:
        # PyTorch's text, without a space before the level.
        raise RuntimeError("Setting a forward grad that itself has a forward gradient at the "
                           f"same level{level} is not supported.")
    dual = apply(D.MAKE_DUAL, (tensor,))
    set_tangent(dual, tangent)
    return dual


def unpack_dual(tensor: Tensor, *, level: int | None = None) -> UnpackedDualTensor:
    """``(primal, tangent)``: a tangent-free view of ``tensor`` inside a level (``tangent``
    None when it has none); ``(tensor, None)`` outside one."""
    from refimpl.ops import derivatives as D
    from refimpl.ops.table import apply

    if level is None:
        level = _state.level
    if level < 0:
        return UnpackedDualTensor(tensor, None)
    _state.busy = True
    try:
        primal = apply(D.FW_PRIMAL, (tensor,))
    finally:
        _state.busy = False
    return UnpackedDualTensor(primal, tensor._fw_grad)


def jvp(row: Any, inputs: Sequence[Tensor], params: dict[str, Any], result: Tensor,
        extras: list[Any] | None) -> Tensor | None:
    """The tangent of ``row``'s ``result`` from its inputs' tangents (double-vjp trick)."""
    from refimpl import _creation
    from refimpl.autograd import grad
    from refimpl.ops import functional as F
    from refimpl.ops.table import _record

    tangents = [t._fw_grad for t in inputs]
    if all(tan is None for tan in tangents):
        return None
    dev = result._device
    prev_mode = grad_mode._state.enabled
    _state.busy = True
    grad_mode._state.enabled = True
    try:
        # A throwaway node over tangent-free copies of the inputs: only inputs with a tangent
        # require grad, so the formulas run for exactly those.
        primals = []
        for t, tan in zip(inputs, tangents, strict=True):
            p = wrap(t._data, t._device)
            p._requires_grad = tan is not None
            primals.append(p)
        holder = wrap(result._data, dev)
        _record(row, primals, params, holder, extras, dev)
        cotangent = _creation.zeros_like(result).requires_grad_()
        vjps = holder._grad_node.apply(cotangent)
        outs, grads_out = [], []
        for v, p, tan in zip(vjps, primals, tangents, strict=True):
            if v is None or tan is None or not v._requires_grad:
                continue  # a gradient that does not depend on g adds nothing to J·t
            outs.append(F.sum_to(v, p._data.shape))
            grads_out.append(F.to(tan, outs[-1].dtype))
        if not outs:
            return _creation.zeros_like(result)
        (out,) = grad(outs, cotangent, grads_out, allow_unused=True)
        if out is None:
            return _creation.zeros_like(result)
        return out.detach()
    finally:
        grad_mode._state.enabled = prev_mode
        _state.busy = False
