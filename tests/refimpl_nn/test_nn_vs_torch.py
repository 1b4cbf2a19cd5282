"""refimpl.nn against PyTorch 2.13 on the same inputs and parameters: values, gradients, node
names, running statistics, errors, warnings and reprs."""

from __future__ import annotations

import re
import warnings
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
from nn_helpers import NEEDS_TORCH, close, copy_module_state, graph, to_torch, torch

import refimpl
import refimpl.nn as rnn
import refimpl.nn.functional as RF

pytestmark = pytest.mark.skipif(torch is None, reason=NEEDS_TORCH)

if torch is not None:
    import torch.nn as tnn
    import torch.nn.functional as TF


def pair(name: str, *args: Any, **kwargs: Any) -> tuple[Any, Any]:
    """The same module built in refimpl (seeded) and in torch, torch's state copied from ours."""
    refimpl.manual_seed(0)
    ours = getattr(rnn, name)(*args, **kwargs)
    theirs = getattr(tnn, name)(*args, **kwargs)
    copy_module_state(ours, theirs)
    return ours, theirs


def inputs(*shape: int, seed: int = 0, requires_grad: bool = True) -> tuple[Any, Any]:
    refimpl.manual_seed(seed)
    x = refimpl.randn(*shape, requires_grad=requires_grad)
    return x, to_torch(x)


def assert_same_run(ours: Any, theirs: Any, x: Any, tx: Any, rtol: float = 1e-5) -> None:
    """Forward and backward through both modules agree in values, graph and gradients."""
    y, ty = ours(x), theirs(tx)
    assert graph(y) == graph(ty)
    assert close(y, ty, rtol=rtol, atol=1e-5)
    refimpl.manual_seed(1)
    v = refimpl.randn(*y.shape)
    (y * v).sum().backward()
    (ty * to_torch(v)).sum().backward()
    for (name, p), (_, tp) in zip(ours.named_parameters(), theirs.named_parameters(),
                                  strict=True):
        assert close(p.grad, tp.grad, rtol=rtol, atol=1e-5), name
    if x.requires_grad:
        assert close(x.grad, tx.grad, rtol=rtol, atol=1e-5)


@pytest.mark.parametrize("shape", [(3,), (2, 3), (2, 4, 3), (2, 1, 2, 3)])
@pytest.mark.parametrize("bias", [True, False])
def test_linear(shape: tuple, bias: bool) -> None:
    ours, theirs = pair("Linear", 3, 5, bias=bias)
    assert_same_run(ours, theirs, *inputs(*shape))


def test_linear_on_input_that_does_not_require_grad() -> None:
    ours, theirs = pair("Linear", 3, 5)
    x, tx = inputs(1, 3, requires_grad=False)
    y, ty = ours(x), theirs(tx)
    expected = "AddmmBackward0(AccumulateGrad, None, TBackward0(AccumulateGrad))"
    assert graph(y) == graph(ty) == expected


CONVS = [
    ((1, 3, 2), {}, (1, 1, 10, 10)),
    ((1, 3, 2), {}, (1, 10, 10)),
    ((2, 4, 3), {"stride": 2, "padding": 1, "bias": False}, (2, 2, 7, 6)),
    ((4, 2, (3, 2)), {"dilation": (2, 1), "groups": 2, "padding": (1, 0)}, (1, 4, 8, 6)),
    ((2, 2, 3), {"padding": "same"}, (1, 2, 5, 5)),
    ((2, 2, 3), {"padding": "valid", "stride": (1, 2)}, (1, 2, 5, 5)),
]


@pytest.mark.parametrize(("args", "kwargs", "shape"), CONVS)
def test_conv2d(args: tuple, kwargs: dict, shape: tuple) -> None:
    ours, theirs = pair("Conv2d", *args, **kwargs)
    assert repr(ours) == repr(theirs)
    assert_same_run(ours, theirs, *inputs(*shape), rtol=1e-4)


@pytest.mark.parametrize("name", ["L1Loss", "MSELoss"])
@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_losses(name: str, reduction: str) -> None:
    x, tx = inputs(2, 5, seed=3)
    t, tt = inputs(2, 5, seed=4)
    loss = getattr(rnn, name)(reduction=reduction)(x, t)
    tloss = getattr(tnn, name)(reduction=reduction)(tx, tt)
    assert graph(loss) == graph(tloss)
    assert close(loss, tloss)
    loss.sum().backward()
    tloss.sum().backward()
    assert close(x.grad, tx.grad) and close(t.grad, tt.grad)


@pytest.mark.parametrize("fn", ["l1_loss", "mse_loss"])
def test_loss_broadcasting_warns_and_expands(fn: str) -> None:
    x, tx = inputs(5, seed=5)
    t, tt = inputs(1, 5, seed=6)
    with warnings.catch_warnings(record=True) as ours:
        warnings.simplefilter("always")
        loss = getattr(RF, fn)(x, t)
    with warnings.catch_warnings(record=True) as theirs:
        warnings.simplefilter("always")
        tloss = getattr(TF, fn)(tx, tt)
    assert [str(w.message) for w in ours] == [str(w.message) for w in theirs]
    assert graph(loss) == graph(tloss) and close(loss, tloss)


def test_second_order_node_names() -> None:
    x, tx = inputs(1, 2, 5, 5, seed=7)
    w, tw = inputs(3, 2, 2, 2, seed=8)
    t, tt = inputs(1, 3, 4, 4, seed=9)
    ours = refimpl.autograd.grad(RF.mse_loss(RF.conv2d(x, w), t), [x, w], create_graph=True)
    theirs = torch.autograd.grad(TF.mse_loss(TF.conv2d(tx, tw), tt), [tx, tw],
                                 create_graph=True)
    for g, tg in zip(ours, theirs, strict=True):
        assert g.grad_fn.name() == tg.grad_fn.name() == "ConvolutionBackwardBackward0"
        assert close(g, tg, rtol=1e-4)
    (gx,) = refimpl.autograd.grad(RF.mse_loss(x, x.detach() * 2), [x], create_graph=True)
    (tgx,) = torch.autograd.grad(TF.mse_loss(tx, tx.detach() * 2), [tx], create_graph=True)
    assert gx.grad_fn.name() == tgx.grad_fn.name() == "MseLossBackwardBackward0"


@pytest.mark.parametrize(("name", "shape", "kwargs"), [
    ("BatchNorm1d", (4, 3), {}),
    ("BatchNorm1d", (4, 3, 5), {"momentum": None}),
    ("BatchNorm2d", (2, 3, 4, 4), {}),
    ("BatchNorm2d", (2, 3, 2, 2), {"affine": False, "momentum": 0.3}),
    ("BatchNorm1d", (5, 3), {"track_running_stats": False}),
    ("BatchNorm1d", (5, 3), {"bias": False}),
])
def test_batch_norm_train_then_eval(name: str, shape: tuple, kwargs: dict) -> None:
    ours, theirs = pair(name, 3, **kwargs)
    assert repr(ours) == repr(theirs)
    for step in range(2):
        x, tx = inputs(*shape, seed=10 + step)
        assert_same_run(ours, theirs, x, tx, rtol=1e-4)
        for (bname, b), (_, tb) in zip(ours.named_buffers(), theirs.named_buffers(),
                                       strict=True):
            assert b.dtype.name == str(tb.dtype).removeprefix("torch."), bname
            assert close(b, tb, rtol=1e-5), bname
    ours.eval()
    theirs.eval()
    assert_same_run(ours, theirs, *inputs(*shape, seed=20), rtol=1e-4)


def test_dropout() -> None:
    x, tx = inputs(200, seed=12)
    ours, theirs = rnn.Dropout(), tnn.Dropout()
    y, ty = ours(x), theirs(tx)
    assert graph(y) == graph(ty) == "MulBackward0(AccumulateGrad, None)"
    kept = y.detach().numpy() != 0
    assert 0.3 < kept.mean() < 0.7  # about half survive with p=0.5
    assert np.allclose(y.detach().numpy()[kept], 2 * x.detach().numpy()[kept])
    ours.eval()
    theirs.eval()
    assert ours(x) is x and theirs(tx) is tx
    for p in (0.0, 1.0):
        out, tout = RF.dropout(x, p), TF.dropout(tx, p)
        assert (out is x) == (tout is tx)
        assert graph(out) == graph(tout) and close(out, tout)


def test_sequential_with_activations() -> None:
    refimpl.manual_seed(0)
    ours = rnn.Sequential(rnn.Linear(3, 4), rnn.ReLU(), rnn.Linear(4, 2), rnn.Sigmoid())
    theirs = tnn.Sequential(tnn.Linear(3, 4), tnn.ReLU(), tnn.Linear(4, 2), tnn.Sigmoid())
    copy_module_state(ours, theirs)
    assert repr(ours) == repr(theirs)
    assert [n for n, _ in ours.named_parameters()] == [n for n, _ in theirs.named_parameters()]
    assert_same_run(ours, theirs, *inputs(5, 3, seed=13))


@pytest.mark.parametrize("name", ["softmax", "log_softmax"])
def test_softmax_functional(name: str) -> None:
    x, tx = inputs(2, 3, seed=14)
    with warnings.catch_warnings(record=True) as ours:
        warnings.simplefilter("always")
        y = getattr(RF, name)(x)
    with warnings.catch_warnings(record=True) as theirs:
        warnings.simplefilter("always")
        ty = getattr(TF, name)(tx)
    assert [str(w.message) for w in ours] == [str(w.message) for w in theirs]
    assert graph(y) == graph(ty) and close(y, ty)


def test_relu_in_place() -> None:
    x, tx = inputs(4, seed=15)
    y, ty = x * 1, tx * 1
    assert rnn.ReLU(inplace=True)(y) is y and tnn.ReLU(inplace=True)(ty) is ty
    assert graph(y) == graph(ty) and close(y, ty)


def test_seed_document_program() -> None:
    """The nn part of the first source document, with its erratum (``nn.L1Loss()(y, gt)``)."""
    results = []
    for lib, nn in ((refimpl, rnn), (torch, tnn)):
        lin = nn.Linear(3, 5)
        flags = [(t.is_leaf, t.requires_grad, t.grad_fn, t.grad) for t in (lin.weight,)]
        x = lib.rand(1, 3)
        y = lin(x)
        gt = lib.rand(1, 5)
        with pytest.raises(RuntimeError) as err:
            nn.L1Loss(y, gt)
        loss = nn.L1Loss()(y, gt)
        loss.backward()
        results.append((flags, type(y.grad_fn).__name__, str(err.value),
                        type(loss.grad_fn).__name__, lin.weight.is_leaf,
                        lin.weight.grad.shape == lin.weight.shape, x.grad, gt.grad))
    assert results[0] == results[1]


ERRORS: list[Callable[[Any, Any, Any], Any]] = [
    lambda lib, nn, F: nn.Linear(3, 5)(lib.rand(2, 4)),
    lambda lib, nn, F: nn.Linear(3, 5)(lib.rand(4)),
    lambda lib, nn, F: nn.Linear(3, 5)(lib.rand(2, 2, 4)),
    lambda lib, nn, F: nn.Linear(3, 5, bias=False)(lib.rand(2, 2, 4)),
    lambda lib, nn, F: nn.Linear(3, 5)(lib.tensor(1.0)),
    lambda lib, nn, F: nn.Linear(3, 5)(lib.rand(1, 3, dtype=lib.float64)),
    lambda lib, nn, F: nn.Conv2d(1, 3, 2)(lib.rand(1, 2, 10, 10)),
    lambda lib, nn, F: nn.Conv2d(1, 3, 2)(lib.rand(1, 1, 1, 1)),
    lambda lib, nn, F: nn.Conv2d(1, 3, 2)(lib.rand(10, 10)),
    lambda lib, nn, F: nn.Conv2d(1, 3, 2)(lib.rand(1, 1, 4, 4, dtype=lib.float64)),
    lambda lib, nn, F: nn.Conv2d(1, 3, 2, bias=False)(lib.rand(1, 1, 4, 4, dtype=lib.float64)),
    lambda lib, nn, F: nn.Conv2d(2, 4, 3, groups=3),
    lambda lib, nn, F: nn.Conv2d(3, 4, 3, groups=3),
    lambda lib, nn, F: nn.L1Loss(lib.rand(1, 5), lib.rand(1, 5)),
    lambda lib, nn, F: F.mse_loss(lib.rand(2, 3), lib.rand(4, 3)),
    lambda lib, nn, F: F.mse_loss(lib.rand(2, 3), lib.rand(2, 3), reduction="bad"),
    lambda lib, nn, F: nn.Dropout(-0.1),
    lambda lib, nn, F: F.dropout(lib.rand(3), 1.5),
    lambda lib, nn, F: F.relu(lib.rand(2, requires_grad=True), inplace=True),
    lambda lib, nn, F: nn.BatchNorm1d(3)(lib.rand(1, 3)),
    lambda lib, nn, F: nn.BatchNorm1d(3)(lib.rand(2, 3, 4, 5)),
    lambda lib, nn, F: nn.BatchNorm2d(3)(lib.rand(2, 3, 4)),
    lambda lib, nn, F: nn.BatchNorm2d(3)(lib.rand(2, 4, 4, 4)),
    lambda lib, nn, F: nn.Module()(1),
    lambda lib, nn, F: setattr(nn.Linear(2, 2), "weight", lib.rand(2, 2)),
    lambda lib, nn, F: nn.Linear(2, 2).missing,
    lambda lib, nn, F: nn.Linear(2, 2).to(lib.int64),
    lambda lib, nn, F: nn.Parameter(lib.tensor([1, 2])),
    lambda lib, nn, F: setattr(nn.Linear(3, 5)(lib.rand(1, 3)), "requires_grad", False),
]


def _outcome(fn: Callable[[Any, Any, Any], Any], lib: Any, nn: Any, F: Any) -> tuple[str, str]:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # warnings are compared in their own tests
        try:
            fn(lib, nn, F)
        except Exception as exc:  # the error is what is compared
            return type(exc).__name__, str(exc)
    return "no error", ""


@pytest.mark.parametrize("index", range(len(ERRORS)))
def test_errors_match_torch(index: int) -> None:
    ours = _outcome(ERRORS[index], refimpl, rnn, RF)
    theirs = _outcome(ERRORS[index], torch, tnn, TF)
    assert ours == theirs
    assert ours[0] != "no error"


def test_legacy_reduction_warns_like_torch() -> None:
    outcomes = []
    for nn in (rnn, tnn):
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            loss = nn.MSELoss(size_average=False)
        outcomes.append((loss.reduction, [str(w.message) for w in caught], repr(loss)))
    assert outcomes[0] == outcomes[1]


def test_reprs() -> None:
    for build in (lambda nn: nn.Linear(3, 5, bias=False), lambda nn: nn.Dropout(0.2, True),
                  lambda nn: nn.ReLU(), lambda nn: nn.ReLU(inplace=True),
                  lambda nn: nn.Sigmoid(), lambda nn: nn.L1Loss(), lambda nn: nn.MSELoss(),
                  lambda nn: nn.Conv2d(3, 6, 3, stride=2, padding=1, dilation=2, groups=3,
                                       bias=False),
                  lambda nn: nn.Sequential(nn.Linear(2, 3), nn.Sequential(nn.Sigmoid()))):
        assert repr(build(rnn)) == repr(build(tnn))
    p = rnn.Parameter(refimpl.tensor([1.0, 2.5]))
    assert repr(p) == repr(tnn.Parameter(torch.tensor([1.0, 2.5])))
    assert re.match(r"Parameter containing:\ntensor\(\[\], requires_grad=True\)$",
                    repr(rnn.Parameter()))


def _backward_then(lib: Any, F: Any, case: str) -> tuple[str, str]:
    x = lib.rand(2, 1, 4, 4)
    w = lib.rand(2, 1, 2, 2)
    b = lib.rand(2, requires_grad=True)
    if case == "conv2d: weight changed in place, only bias needs a gradient":
        y = F.conv2d(x, w, b).sum()
        w.mul_(2)
    elif case == "batch_norm: input changed in place, only weight needs a gradient":
        x = lib.rand(4, 3)
        y = F.batch_norm(x, None, None, lib.rand(3, requires_grad=True), None,
                         training=True).sum()
        x.mul_(2)
    else:  # a second backward through released saved tensors
        y = F.mse_loss(F.conv2d(x, w, b), lib.rand(2, 2, 3, 3))
        y.backward()
    try:
        y.backward()
    except RuntimeError as exc:
        return "RuntimeError", str(exc)
    return "no error", ""


@pytest.mark.parametrize("case", [
    "conv2d: weight changed in place, only bias needs a gradient",
    "batch_norm: input changed in place, only weight needs a gradient",
    "conv2d and mse_loss: second backward",
])
def test_saved_tensor_errors_match_torch(case: str) -> None:
    ours = _backward_then(refimpl, RF, case)
    assert ours == _backward_then(torch, TF, case)
    assert ours[0] == "RuntimeError"
