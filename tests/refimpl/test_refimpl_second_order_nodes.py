"""The graphs recorded while differentiating with create_graph=True follow PyTorch's formulas.

A gradient computed with `create_graph=True` is itself a tensor with a graph, and PyTorch's
formulas decide its node names: the division by a count in `mean`'s derivative is `div.Scalar`
(DivBackward1), and the even split of `max`/`min`'s gradient is a `masked_fill` with a tensor
value (MaskedFillBackward1). Values, graphs and the next order's gradients must all match.
"""

from __future__ import annotations

import numpy as np
import pytest
from refimpl_helpers import graph

import refimpl

torch = pytest.importorskip("torch", reason="these tests compare refimpl with PyTorch")

REDUCTIONS = {
    "mean": lambda t: t.mean(),
    "mean-dim": lambda t: t.mean(0),
    "mean-dim-keepdim": lambda t: t.mean(1, keepdim=True),
    "max": lambda t: t.max(),
    "min": lambda t: t.min(),
}


def second_order(engine, reduce, data):
    x = engine.tensor(data, requires_grad=True)
    g, = engine.autograd.grad(reduce(x).abs().sum(), x, create_graph=True)
    gg, = engine.autograd.grad((g * g).sum(), x, allow_unused=True)
    return graph(g), g.detach().numpy(), None if gg is None else gg.numpy()


@pytest.mark.parametrize("name", sorted(REDUCTIONS))
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_gradient_graph_of_reductions_matches_torch(name, dtype):
    data = np.array([[1.0, 3.0, -2.0], [3.0, 0.5, -2.0]], dtype=dtype)
    ours = second_order(refimpl, REDUCTIONS[name], data)
    theirs = second_order(torch, REDUCTIONS[name], data)
    assert ours[0] == theirs[0]
    np.testing.assert_allclose(ours[1], theirs[1], rtol=1e-6)
    if theirs[2] is None:
        assert ours[2] is None
    else:
        np.testing.assert_allclose(ours[2], theirs[2], rtol=1e-6)
