"""Behaviours differential fuzzing found where refimpl differed from PyTorch, each run on both.

Every program runs once with ``torch`` and once with ``refimpl`` as ``torch``; the observations
(values, flags, graphs, errors and their messages) must agree.
"""

from __future__ import annotations

import warnings
from typing import Any

import numpy as np
import pytest
from refimpl_helpers import graph

import refimpl

torch = pytest.importorskip("torch", reason="PyTorch is the oracle these tests compare with")


def _plain(value: Any) -> Any:
    if hasattr(value, "detach"):
        return ("tensor", np.round(value.detach().numpy(), 6).tolist())
    if isinstance(value, (tuple, list)):
        return [_plain(v) for v in value]
    return value


def _outcome(fn: Any) -> Any:
    try:
        return _plain(fn())
    except Exception as exc:  # the error itself is the observation
        return (type(exc).__name__, str(exc))


def _observe(lib: Any, program: str, observations: list[str]) -> list[Any]:
    ns: dict[str, Any] = {"torch": lib, "nn": lib.nn, "graph": graph, "np": np}
    lib.manual_seed(0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        setup = _outcome(lambda: exec(program, ns))
        return [setup] + [_outcome(lambda o=o: eval(o, ns)) for o in observations]


def _agree(program: str, *observations: str) -> None:
    ours = _observe(refimpl, program, list(observations))
    theirs = _observe(torch, program, list(observations))
    for what, a, b in zip(("program", *observations), ours, theirs, strict=True):
        assert a == b, f"{what}: refimpl {a!r}, torch {b!r}"


def test_view_taken_under_no_grad_requires_grad_through_its_base() -> None:
    _agree("""
x = torch.rand(2, 2, requires_grad=True)
with torch.no_grad():
    v = x.view(-1)
y = v * 2
""", "v.requires_grad", "v.is_leaf", "v.grad_fn", "graph(y)", "y.sum().backward()", "x.grad",
           "v.requires_grad_(False).requires_grad", "v.sum().backward()",
           "torch.autograd.grad((v * 2).sum(), [v])", "v.mul_(2)", "v[0].mul_(2)")


def test_view_taken_under_no_grad_refuses_its_history_once_written() -> None:
    _agree("""
x = torch.rand(4, requires_grad=True)
with torch.no_grad():
    v = x.view(-1)
    v.mul_(2)
""", "v.requires_grad", "v.is_leaf", "repr(v).split('grad_fn=')[1]", "v * 2")


def test_view_follows_base_requires_grad_and_regenerates_after_writes() -> None:
    _agree("""
a = torch.rand(1)
b = a.view(-1)
a.requires_grad_()
c = torch.rand(2, 2)
d = c.view(-1)
d.add_(1.0)
c.requires_grad_()
""", "b.requires_grad", "b.is_leaf", "graph(b * 2)", "d.is_leaf", "graph(d)")


def test_view_grad_fn_is_rebuilt_after_a_write_under_no_grad() -> None:
    _agree("""
x = torch.rand(4, requires_grad=True)
v = x.view(-1)
z = torch.rand(4, requires_grad=True) * 1
w = z[1:]
with torch.no_grad():
    x.mul_(2)
    w.mul_(2)
""", "graph(v)", "graph(w)", "graph(z)")


def test_inplace_memory_overlap_errors() -> None:
    _agree("a = torch.tensor([0.1, 0.2, 0.3, 0.4])", "a[1:].add_(a[:3])", "a.add_(a)",
           "a[0].add_(a[0:1])",
           "a.view(2, 2).t().copy_(a.view(2, 2))", "a[:2].add_(a[2:])", "a[1:].clamp_(a[:3])",
           "a.view(2, 2)[0].add_(a.view(2, 2)[:, 0])", "a.view(4, 1).add_(a)",
           "torch.ones(1).expand(3).add_(1)", "torch.ones(1).expand(3).zero_()",
           "torch.ones(1, 2).expand(2, 2).fill_(3)")


def test_inplace_records_operands_before_the_write() -> None:
    _agree("""
x = torch.rand(3, requires_grad=True)
a = x.neg()
v = a.view(-1)
a.sub_(v)
z = x * 1
z.mul_(z)
""", "graph(a)", "graph(v)", "z.sum().backward()")


def test_operators_leave_unsupported_operands_to_python() -> None:
    _agree("t = torch.tensor([0.5, 1.5])", "None + t", "t - None", "t @ 2", "t == None",
           "t != None", "t < None", "t * 'a'", "2 ** t")


def test_autograd_argument_checks_follow_pytorch_order() -> None:
    _agree("""
x = torch.rand(2, requires_grad=True)
z = torch.rand(2)
""", "torch.autograd.grad(x.sum(), [None])", "torch.autograd.grad([x.sum(), None], [x])",
           "torch.autograd.grad(x.sum(), None)", "x.sum().backward(inputs=[None])",
           "z.sum().backward(inputs=[z])", "x.sum().backward(inputs=[z])",
           "torch.autograd.grad(x.sum(), [z, None])",
           "torch.autograd.grad([x.sum()], [x], grad_outputs=[torch.tensor(1.), torch.tensor(5.)])",
           "torch.autograd.grad([x.sum(), x.sum()], [x], grad_outputs=[torch.tensor(1.)])",
           "torch.autograd.grad([x.sum()], [x], grad_outputs=[torch.tensor(1. + 0j)])",
           "torch.autograd.grad(x.sum(), [x, z], materialize_grads=True, allow_unused=False)",
           "setattr(x, 'grad', x)")


def test_retained_root_sees_its_gradient_when_grad_does_not_need_it() -> None:
    _agree("""
x = torch.rand((), requires_grad=True)
a = x.neg()
b = x.neg()
b.retain_grad()
g = torch.autograd.grad(b, [a], allow_unused=True)
""", "g", "b.grad")


def test_leaf_detached_after_the_graph_was_built_gets_no_grad() -> None:
    _agree("""
x = torch.tensor([1., 2.], requires_grad=True)
y = x * x
x.detach_()
y.sum().backward()
""", "x.grad", "x.requires_grad")


def test_nodes_saving_a_condition_or_indices_refuse_a_second_backward() -> None:
    _agree("""
x = torch.tensor([1., 2.], requires_grad=True)
w = torch.where(x > 1, x, x).sum()
m = x.max(0)[0]
w.backward()
m.backward()
""", "w.backward()", "m.backward()")


def test_linear_on_non_contiguous_input_adds_the_bias_in_place() -> None:
    _agree("""
lin = nn.Linear(1, 3)
x = torch.rand(2, 2, 1, requires_grad=True).transpose(0, 1)
y = lin(x)
""", "graph(y)", "list(y.shape)")


def test_create_graph_warning_repeats_under_warn_always() -> None:
    refimpl.set_warn_always(True)
    try:
        assert refimpl.is_warn_always_enabled()
        for _ in range(2):
            x = refimpl.tensor(2.0, requires_grad=True)
            with pytest.warns(UserWarning, match="create_graph=True will create a reference"):
                (x ** 3).backward(create_graph=True)
    finally:
        refimpl.set_warn_always(False)
    assert not refimpl.is_warn_always_enabled()


def test_data_setter_gives_the_leaf_a_new_gradient_accumulator() -> None:
    x = refimpl.rand(3, requires_grad=True)
    (x * 2).sum().backward()
    x.data = refimpl.rand(2, 2, dtype=refimpl.float64)
    x.grad = None
    (x * 2).sum().backward()
    assert x.grad.shape == (2, 2) and x.grad.dtype is refimpl.float64


def test_relu_inplace_and_parse_to_are_public() -> None:
    z = refimpl.tensor([-1.0, 2.0], requires_grad=True) * 1
    assert refimpl.relu_(z) is z
    assert z.tolist() == [0.0, 2.0] and type(z.grad_fn).__name__ == "ReluBackward0"
    from refimpl.ops.functional import parse_to

    assert parse_to((refimpl.float64,), {"device": "cpu"}) == (refimpl.float64, "cpu", False)


def test_simulate_unavailable_refuses_cuda() -> None:
    with refimpl.cuda.simulate_unavailable():
        assert not refimpl.cuda.is_available()
        with pytest.raises(AssertionError, match="Torch not compiled with CUDA enabled"):
            refimpl.ones(1, device="cuda")


def test_tanh_and_sigmoid_gradients_are_their_own_nodes_under_create_graph() -> None:
    _agree("""
x = torch.tensor([0.3, -0.7], dtype=torch.float64, requires_grad=True)
gt, = torch.autograd.grad(x.tanh().sum(), x, create_graph=True)
gs, = torch.autograd.grad(x.sigmoid().sum(), x, create_graph=True)
""", "graph(gt)", "graph(gs)", "torch.autograd.grad(gt.sum(), x, create_graph=True)",
           "torch.autograd.grad(gs.sum(), x)")


def test_no_grad_view_stops_requiring_grad_with_its_leaf_base() -> None:
    _agree("""
x = torch.rand(2, requires_grad=True)
with torch.no_grad():
    v = x.view(-1)
    x.requires_grad_(False)
""", "v.requires_grad", "x.requires_grad")
