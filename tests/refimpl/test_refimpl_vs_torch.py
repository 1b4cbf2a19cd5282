"""Every op against PyTorch 2.13 on the same inputs: values, gradients and graph shape."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from refimpl_cases import CASES, OpCase
from refimpl_helpers import graph

import refimpl

torch = pytest.importorskip("torch", reason="PyTorch is the oracle these tests compare with")


def _observe(lib: Any, case: OpCase, arrays: list[np.ndarray], v: np.ndarray) -> dict[str, Any]:
    ins = [lib.tensor(a, requires_grad=True) for a in arrays]
    out = case.fn(lib, *ins)
    grads = lib.autograd.grad(out, ins, lib.tensor(v).to(out.dtype), create_graph=True,
                              allow_unused=True)
    live = [(g, i) for g, i in zip(grads, ins, strict=True) if g is not None and g.requires_grad]
    second: tuple = (None,) * len(ins)
    if live:
        total = sum((g * g).sum() for g, _ in live)
        second = lib.autograd.grad(total, ins, allow_unused=True)

    def host(t: Any) -> np.ndarray | None:
        # force=True: PyTorch may return its ZeroTensor for a zero gradient.
        return None if t is None else t.detach().numpy(force=True)

    return {
        "value": host(out), "dtype": str(out.dtype), "graph": graph(out),
        "grads": [host(g) for g in grads],
        "second": [host(g) for g in second],
    }


@pytest.mark.parametrize("dtype", [np.float32, np.float64], ids=["float32", "float64"])
@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_op_matches_torch(case: OpCase, dtype: Any) -> None:
    arrays = case.arrays(dtype)
    with torch.no_grad():
        shape = case.fn(torch, *[torch.tensor(a) for a in arrays]).shape
    v = np.random.default_rng(3).uniform(-1, 1, tuple(shape)).astype(dtype)
    ours, theirs = _observe(refimpl, case, arrays, v), _observe(torch, case, arrays, v)
    tol = 1e-5 if dtype == np.float32 else 1e-10
    assert ours["dtype"] == theirs["dtype"]
    assert ours["graph"] == theirs["graph"]
    np.testing.assert_allclose(ours["value"], theirs["value"], rtol=tol, atol=tol)
    pairs = zip(ours["grads"] + ours["second"], theirs["grads"] + theirs["second"], strict=True)
    for mine, ref in pairs:
        assert (mine is None) == (ref is None)
        if ref is not None:
            np.testing.assert_allclose(mine, ref, rtol=tol * 10, atol=tol * 10)


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_case_node_name_is_pytorchs(case: OpCase) -> None:
    """The node each case declares is the one PyTorch records (keeps the table honest)."""
    ins = [torch.tensor(a, requires_grad=True) for a in case.arrays()]
    assert type(case.fn(torch, *ins).grad_fn).__name__ == case.node
    ours = [refimpl.tensor(a, requires_grad=True) for a in case.arrays()]
    assert type(case.fn(refimpl, *ours).grad_fn).__name__ == case.node


def _gradient_graphs(lib: Any, case: OpCase, arrays: list[np.ndarray], v: np.ndarray) -> list:
    ins = [lib.tensor(a, requires_grad=True) for a in arrays]
    out = case.fn(lib, *ins)
    go = lib.tensor(v).to(out.dtype).requires_grad_()
    grads = lib.autograd.grad(out, ins, go, create_graph=True, allow_unused=True)
    live = [g for g in grads if g is not None and g.requires_grad]
    gg = lib.autograd.grad(sum((g * g).sum() for g in live), [go, *ins], allow_unused=True,
                           create_graph=True) if live else ()
    return [graph(g) if g is not None else None for g in (*grads, *gg)]


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_gradient_graphs_follow_torch_formulas(case: OpCase) -> None:
    """With a gradient that requires grad, a create_graph gradient records the nodes of
    PyTorch's formula for it, and so does the next order."""
    arrays = case.arrays()
    with torch.no_grad():
        shape = case.fn(torch, *[torch.tensor(a) for a in arrays]).shape
    v = np.random.default_rng(3).uniform(-1, 1, tuple(shape))
    assert _gradient_graphs(refimpl, case, arrays, v) == _gradient_graphs(torch, case, arrays, v)
