"""Complex gradients follow PyTorch's convention (``grad * conj(f'(z))``), checked against
PyTorch 2.13 on complex64 and complex128, with real tensors mixed in and to second order."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

import refimpl

torch = pytest.importorskip("torch", reason="PyTorch is the oracle these tests compare with")

OPS: dict[str, Callable[[Any, Any, Any, Any], Any]] = {
    "mul": lambda lib, a, b, m: a * b,
    "div": lambda lib, a, b, m: a / b,
    "rdiv": lambda lib, a, b, m: 2 / a,
    "mm": lambda lib, a, b, m: m.mm(m),
    "mv": lambda lib, a, b, m: m @ a,
    "dot": lambda lib, a, b, m: a.dot(b),
    "addmm": lambda lib, a, b, m: lib.addmm(m, m, m),
    "exp": lambda lib, a, b, m: a.exp(),
    "log": lambda lib, a, b, m: a.log(),
    "sqrt": lambda lib, a, b, m: a.sqrt(),
    "sin_cos": lambda lib, a, b, m: a.sin() * a.cos(),
    "tanh": lambda lib, a, b, m: a.tanh(),
    "sigmoid": lambda lib, a, b, m: a.sigmoid(),
    "pow_scalar": lambda lib, a, b, m: a ** 3,
    "pow_tensor": lambda lib, a, b, m: a ** b,
    "scalar_pow": lambda lib, a, b, m: 2 ** a,
    "add_complex_alpha": lambda lib, a, b, m: lib.add(a, b, alpha=2j),
    "mul_complex_scalar": lambda lib, a, b, m: a * (1 + 1j),
    "abs": lambda lib, a, b, m: a.abs(),
    "sum_mean": lambda lib, a, b, m: a.sum() + m.mean(),
    "conj": lambda lib, a, b, m: a.conj() * b,
    "view_select": lambda lib, a, b, m: m.t()[0] * a.reshape(2, 1)[1],
}


def _grads(lib: Any, name: str, dtype: Any, create_graph: bool) -> list[np.ndarray | None]:
    dt = getattr(lib, dtype)
    a = lib.tensor([1 + 2j, -0.5 + 0.3j], dtype=dt, requires_grad=True)
    b = lib.tensor([3 - 1j, 0.2 + 0.7j], dtype=dt, requires_grad=True)
    m = lib.tensor([[1 + 1j, 2 - 1j], [0.5j, -1 + 0j]], dtype=dt, requires_grad=True)
    out = OPS[name](lib, a, b, m)
    v = lib.ones_like(out) * (0.7 - 0.4j) if out.dtype.is_complex else lib.ones_like(out)
    grads = lib.autograd.grad(out, (a, b, m), v, create_graph=create_graph, allow_unused=True)
    if create_graph:
        live = [g for g in grads if g is not None and g.requires_grad]
        if not live:
            return []
        total = sum((g * g.conj()).real.sum() for g in live)
        grads = lib.autograd.grad(total, (a, b, m), allow_unused=True)
    return [None if g is None else np.asarray(g.detach().tolist()) for g in grads]


@pytest.mark.parametrize("order", [1, 2], ids=["first", "second"])
@pytest.mark.parametrize("dtype", ["complex64", "complex128"])
@pytest.mark.parametrize("name", sorted(OPS))
def test_complex_gradient_matches_torch(name: str, dtype: str, order: int) -> None:
    ours = _grads(refimpl, name, dtype, order == 2)
    theirs = _grads(torch, name, dtype, order == 2)
    tol = 1e-4 if dtype == "complex64" else 1e-9
    assert len(ours) == len(theirs)
    for mine, ref in zip(ours, theirs, strict=True):
        assert (mine is None) == (ref is None)
        if ref is not None:
            np.testing.assert_allclose(mine, ref, rtol=tol, atol=tol)


@pytest.mark.parametrize("lib_name", ["refimpl", "torch"])
def test_real_input_in_complex_math_gets_the_real_part(lib_name: str) -> None:
    lib = refimpl if lib_name == "refimpl" else torch
    x = lib.tensor([1.0, -2.0], requires_grad=True)
    z = x * lib.tensor([2 + 3j, 1 - 1j])
    (z * z.conj()).real.sum().backward()
    # |x c|^2 = x^2 |c|^2: the gradient 2 x |c|^2 is real and has x's dtype.
    assert x.grad.dtype == lib.float32
    np.testing.assert_allclose(np.asarray(x.grad.tolist()), [26.0, -8.0], rtol=1e-6)
