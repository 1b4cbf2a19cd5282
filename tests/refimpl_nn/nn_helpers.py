"""Helpers for the refimpl.nn tests: graph text, torch conversions, finite differences."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

import refimpl

try:
    import torch
except ImportError:  # the torch comparisons skip themselves
    torch = None

NEEDS_TORCH = "PyTorch is not installed; the comparison with PyTorch 2.13 needs it"


def graph(t: Any) -> str | None:
    """The backward graph as text: ``AddmmBackward0(AccumulateGrad, None, TBackward0(...))``."""
    if t.grad_fn is None:
        return None

    def text(node: Any) -> str:
        if node is None:
            return "None"
        name = node.name().replace("torch::autograd::", "")
        inner = ", ".join(text(n) for n, _ in node.next_functions)
        return f"{name}({inner})" if inner else name

    return text(t.grad_fn)


def to_torch(t: refimpl.Tensor) -> Any:
    """A torch leaf with ``t``'s values, dtype and requires_grad."""
    out = torch.from_numpy(np.array(t.detach().numpy()))
    return out.requires_grad_(t.requires_grad)


def copy_module_state(src: Any, dst: Any) -> None:
    """Copy every parameter and buffer of refimpl module ``src`` into torch module ``dst``."""
    with torch.no_grad():
        for (name, p), (tname, tp) in zip(src.named_parameters(), dst.named_parameters(),
                                          strict=True):
            assert name == tname
            tp.copy_(torch.from_numpy(np.array(p.detach().numpy())))
        for (name, b), (tname, tb) in zip(src.named_buffers(), dst.named_buffers(), strict=True):
            assert name == tname
            tb.copy_(torch.from_numpy(np.array(b.numpy())))


def close(a: Any, b: Any, rtol: float = 1e-5, atol: float = 1e-6) -> bool:
    """Whether a refimpl tensor and a torch tensor (or arrays) hold the same values."""
    if isinstance(a, refimpl.Tensor):
        a = a.detach().numpy()
    if torch is not None and isinstance(b, torch.Tensor):
        b = b.detach().numpy()
    return np.shape(a) == np.shape(b) and np.allclose(a, b, rtol=rtol, atol=atol)


def check_vjp(f: Callable[..., refimpl.Tensor], inputs: Sequence[refimpl.Tensor],
              eps: float = 1e-6, order: int = 1, seed: int = 0) -> None:
    """Finite-difference check of ``f``'s gradients (``order=2``: of its gradients' gradients).

    With a random cotangent ``v``, the analytic gradient of ``sum(f(x) * v)`` must match central
    differences of the same scalar, in float64. For ``order=2`` the scalar is
    ``sum(grad(sum(f(x) * v), x, create_graph=True) * u)`` for random ``u``.
    """
    rng = np.random.default_rng(seed)
    out = f(*inputs)
    v = refimpl.tensor(rng.standard_normal(out.shape))
    us = [refimpl.tensor(rng.standard_normal(x.shape)) for x in inputs]

    def scalar(*xs: refimpl.Tensor) -> refimpl.Tensor:
        s = (f(*xs) * v).sum()
        if order == 1:
            return s
        grads = refimpl.autograd.grad(s, list(xs), create_graph=True, allow_unused=True)
        total = refimpl.tensor(0.0, dtype=refimpl.float64)
        for g, u in zip(grads, us, strict=True):
            if g is not None:
                total = total + (g * u).sum()
        return total

    value = scalar(*inputs)
    analytic = refimpl.autograd.grad(value, list(inputs), allow_unused=True)
    base = [x.detach().numpy().copy() for x in inputs]
    for i in range(len(inputs)):
        numeric = np.zeros_like(base[i])
        for idx in np.ndindex(base[i].shape):
            shifted = []
            for sign in (1, -1):
                arrays = [b.copy() for b in base]
                arrays[i][idx] += sign * eps
                xs = [refimpl.tensor(a, requires_grad=True) for a in arrays]
                shifted.append(scalar(*xs).item())
            numeric[idx] = (shifted[0] - shifted[1]) / (2 * eps)
        got = np.zeros_like(numeric) if analytic[i] is None else analytic[i].numpy()
        assert np.allclose(got, numeric, rtol=1e-4, atol=1e-6), (
            f"input {i}: analytic {got} != numeric {numeric}")
