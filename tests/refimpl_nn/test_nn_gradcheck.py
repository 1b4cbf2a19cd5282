"""Finite-difference checks (float64) of every nn op's gradients, and of second derivatives."""

from __future__ import annotations

import pytest
from nn_helpers import check_vjp

import refimpl
import refimpl.nn.functional as F


def leaf(*shape: int, seed: int) -> refimpl.Tensor:
    refimpl.manual_seed(seed)
    return refimpl.randn(*shape, dtype=refimpl.float64, requires_grad=True)


CONV_CONFIGS = [
    # (input shape, weight shape, keyword arguments)
    ((2, 2, 4, 4), (3, 2, 2, 2), {}),
    ((1, 2, 5, 5), (2, 2, 3, 3), {"stride": 2, "padding": 1}),
    ((1, 2, 5, 4), (2, 1, 2, 2), {"dilation": 2, "groups": 2}),
    ((1, 1, 4, 5), (2, 1, 3, 2), {"stride": (2, 1), "padding": (1, 0)}),
]


@pytest.mark.parametrize(("xs", "ws", "kw"), CONV_CONFIGS)
@pytest.mark.parametrize("order", [1, 2])
def test_conv2d(xs: tuple, ws: tuple, kw: dict, order: int) -> None:
    x, w, b = leaf(*xs, seed=1), leaf(*ws, seed=2), leaf(ws[0], seed=3)
    check_vjp(lambda x, w, b: F.conv2d(x, w, b, **kw), [x, w, b], order=order)


def test_conv2d_without_bias_unbatched() -> None:
    x, w = leaf(2, 4, 4, seed=4), leaf(2, 2, 3, 3, seed=5)
    check_vjp(lambda x, w: F.conv2d(x, w, padding=1), [x, w])


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
@pytest.mark.parametrize("order", [1, 2])
def test_mse_loss(reduction: str, order: int) -> None:
    x, t = leaf(2, 3, seed=6), leaf(2, 3, seed=7)
    check_vjp(lambda x, t: F.mse_loss(x, t, reduction=reduction), [x, t], order=order)


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_l1_loss(reduction: str) -> None:
    x, t = leaf(2, 3, seed=8), leaf(2, 3, seed=9)
    check_vjp(lambda x, t: F.l1_loss(x, t, reduction=reduction), [x, t])


@pytest.mark.parametrize("shape", [(4, 3), (3, 2, 4), (2, 2, 3, 2)])
@pytest.mark.parametrize("order", [1, 2])
def test_batch_norm_training(shape: tuple, order: int) -> None:
    x, w, b = leaf(*shape, seed=10), leaf(shape[1], seed=11), leaf(shape[1], seed=12)
    check_vjp(lambda x, w, b: F.batch_norm(x, None, None, w, b, training=True), [x, w, b],
              order=order)


@pytest.mark.parametrize("order", [1, 2])
def test_batch_norm_eval(order: int) -> None:
    x, w, b = leaf(3, 2, 2, seed=13), leaf(2, seed=14), leaf(2, seed=15)
    mean = refimpl.tensor([0.3, -0.2], dtype=refimpl.float64)
    var = refimpl.tensor([1.5, 0.7], dtype=refimpl.float64)
    check_vjp(lambda x, w, b: F.batch_norm(x, mean, var, w, b, training=False), [x, w, b],
              order=order)


@pytest.mark.parametrize("in_shape", [(3,), (2, 3), (2, 2, 3)])
@pytest.mark.parametrize("order", [1, 2])
def test_linear(in_shape: tuple, order: int) -> None:
    x, w, b = leaf(*in_shape, seed=16), leaf(4, 3, seed=17), leaf(4, seed=18)
    check_vjp(lambda x, w, b: F.linear(x, w, b), [x, w, b], order=order)
    check_vjp(lambda x, w: F.linear(x, w), [x, w], order=order)


def test_dropout_with_a_fixed_mask() -> None:
    x = leaf(3, 4, seed=19)

    def f(x: refimpl.Tensor) -> refimpl.Tensor:
        refimpl.manual_seed(123)  # the same mask on every evaluation
        return F.dropout(x, 0.4)

    check_vjp(f, [x], order=1)


@pytest.mark.parametrize("fn", [F.relu, F.sigmoid, lambda x: F.softmax(x, 1),
                                lambda x: F.log_softmax(x, 0)])
def test_activations(fn: object) -> None:
    check_vjp(fn, [leaf(2, 3, seed=20)], order=2)
