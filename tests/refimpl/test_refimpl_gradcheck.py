"""Finite-difference checks (float64) of every op's first and second derivatives."""

from __future__ import annotations

import warnings
from typing import Any

import numpy as np
import pytest
from refimpl_cases import CASES, OpCase
from refimpl_helpers import numerical_vjp

import refimpl
from refimpl.autograd.gradcheck import GradcheckError


def _run(case: OpCase, arrays: list[np.ndarray]) -> np.ndarray:
    ins = [refimpl.tensor(a) for a in arrays]
    with refimpl.no_grad():
        return case.fn(refimpl, *ins).numpy().astype(np.float64)


def _grads(case: OpCase, arrays: list[np.ndarray], v: np.ndarray,
           create_graph: bool = False) -> tuple[list[refimpl.Tensor], tuple]:
    ins = [refimpl.tensor(a, requires_grad=True) for a in arrays]
    out = case.fn(refimpl, *ins)
    grads = refimpl.autograd.grad(out, ins, refimpl.tensor(v, dtype=out.dtype),
                                  create_graph=create_graph, allow_unused=True)
    return ins, grads


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_first_derivative_matches_finite_differences(case: OpCase) -> None:
    arrays = case.arrays()
    v = np.random.default_rng(7).uniform(-1, 1, _run(case, arrays).shape)
    _, grads = _grads(case, arrays, v)
    expected = numerical_vjp(lambda xs: _run(case, xs), arrays, v, case.eps)
    for g, e in zip(grads, expected, strict=True):
        got = np.zeros_like(e) if g is None else g.numpy(force=True)
        np.testing.assert_allclose(got, e, rtol=case.tol, atol=case.tol)


SECOND_ORDER = [c for c in CASES if c.id != "to_float32"]


@pytest.mark.parametrize("case", SECOND_ORDER, ids=[c.id for c in SECOND_ORDER])
def test_second_derivative_matches_finite_differences(case: OpCase) -> None:
    """d/dx of <grad(out, x; v), w>: the backward formulas differentiate again."""
    arrays = case.arrays()
    rng = np.random.default_rng(11)
    v = rng.uniform(-1, 1, _run(case, arrays).shape)
    ws = [rng.uniform(-1, 1, a.shape) for a in arrays]

    def first(xs: list[np.ndarray]) -> np.ndarray:
        _, grads = _grads(case, xs, v)
        return np.array(sum(0.0 if g is None else float(np.sum(g.numpy(force=True) * w))
                            for g, w in zip(grads, ws, strict=True)))

    ins, grads = _grads(case, arrays, v, create_graph=True)
    total = sum((g * refimpl.tensor(w)).sum() for g, w in zip(grads, ws, strict=True)
                if g is not None and g.requires_grad)
    if isinstance(total, int):  # no first-order gradient depends on the inputs
        second = [None] * len(ins)
    else:
        second = refimpl.autograd.grad(total, ins, allow_unused=True)
    expected = numerical_vjp(first, arrays, np.array(1.0), 1e-5)
    for g, e in zip(second, expected, strict=True):
        got = np.zeros_like(e) if g is None else g.numpy(force=True)
        np.testing.assert_allclose(got, e, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_gradcheck_passes_on_the_op_table(case: OpCase) -> None:
    """refimpl's own gradcheck (slow mode, with its reentrancy, zero-gradient and
    undefined-gradient checks) on every op of the table; fast mode too."""
    ins = [refimpl.tensor(a, requires_grad=True) for a in case.arrays()]

    def fn(*xs: refimpl.Tensor) -> refimpl.Tensor:
        return case.fn(refimpl, *xs)

    assert refimpl.autograd.gradcheck(fn, ins, eps=case.eps, atol=case.tol, rtol=1e-3)
    assert refimpl.autograd.gradcheck(fn, ins, eps=case.eps, atol=case.tol, rtol=1e-3,
                                      fast_mode=True)


@pytest.mark.parametrize("case", SECOND_ORDER, ids=[c.id for c in SECOND_ORDER])
def test_gradgradcheck_passes_on_the_op_table(case: OpCase) -> None:
    ins = [refimpl.tensor(a, requires_grad=True) for a in case.arrays()]

    def fn(*xs: refimpl.Tensor) -> refimpl.Tensor:
        return case.fn(refimpl, *xs)

    assert refimpl.autograd.gradgradcheck(fn, ins, atol=1e-4, rtol=1e-3)


def test_gradcheck_reports_a_wrong_formula() -> None:
    """The check is not vacuous: a Function whose backward is off by a factor fails it, with
    the Jacobians in PyTorch's message."""

    class Double(refimpl.autograd.Function):
        @staticmethod
        def forward(ctx: object, x: refimpl.Tensor) -> refimpl.Tensor:
            return x * 2

        @staticmethod
        def backward(ctx: object, g: refimpl.Tensor) -> refimpl.Tensor:
            return g * 3

    x = refimpl.tensor([1.0, 2.0], dtype=refimpl.float64, requires_grad=True)
    with pytest.raises(GradcheckError,
                       match="Jacobian mismatch for output 0 with respect to input 0"):
        refimpl.autograd.gradcheck(Double.apply, (x,))
    assert not refimpl.autograd.gradcheck(Double.apply, (x,), fast_mode=True,
                                          raise_exception=False)


def _complex_verdicts(lib: Any) -> list[Any]:
    """gradcheck of complex functions, right and wrong, in both modes: the verdict, and the
    first line of the message where the output is complex (PyTorch checks the imaginary part
    of complex outputs, then the real part, and says which)."""

    class WrongOut(lib.autograd.Function):
        @staticmethod
        def forward(ctx: Any, x: Any) -> Any:
            return x * lib.tensor(1 + 1j, dtype=lib.complex128)

        @staticmethod
        def backward(ctx: Any, g: Any) -> Any:
            return lib.view_as_real(g)[..., 0] * 2

    class WrongIn(lib.autograd.Function):
        @staticmethod
        def forward(ctx: Any, z: Any) -> Any:
            return lib.view_as_real(z).sum(-1) * 1.0

        @staticmethod
        def backward(ctx: Any, g: Any) -> Any:
            return g * lib.tensor(1 + 0j, dtype=lib.complex128)

    x = lib.tensor([1.0, 2.0], dtype=lib.float64, requires_grad=True)
    z = lib.tensor([1 + 2j, 3 - 1j], dtype=lib.complex128, requires_grad=True)
    pairs = [(lambda a: a * a, (z,)), (lambda a: a.exp() * a.abs(), (z,)),
             (lambda a: lib.view_as_real(a * 2), (z,)),
             (lambda a: lib.view_as_complex(a * 2), (lib.ones(2, 2, dtype=lib.float64,
                                                             requires_grad=True),)),
             (lambda a: a * lib.tensor(1 + 1j, dtype=lib.complex128), (x,)),
             (WrongOut.apply, (x,)), (WrongIn.apply, (z,))]
    seen = []
    for fn, inputs in pairs:
        for fast in (False, True):
            try:
                seen.append(lib.autograd.gradcheck(fn, inputs, fast_mode=fast))
            except RuntimeError as error:
                seen.append((type(error).__name__, str(error).split(",")[0]))
    return seen


def test_complex_functions_are_checked_as_pytorch_checks_them() -> None:
    torch = pytest.importorskip("torch", reason="PyTorch is the oracle of this test")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # NumPy's ComplexWarning and PyTorch's own
        assert _complex_verdicts(refimpl) == _complex_verdicts(torch)
