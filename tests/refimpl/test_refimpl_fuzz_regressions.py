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
        return ("tensor", value.detach().numpy().tolist())
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
        assert _same(a, b), f"{what}: refimpl {a!r}, torch {b!r}"


def _same(a: Any, b: Any) -> bool:
    """Equal, except that tensor values agree to float32 precision (the two engines' libms
    may round a transcendental result differently in its last bit)."""
    if isinstance(a, tuple) and a[:1] == b[:1] == ("tensor",):
        x, y = np.asarray(a[1]), np.asarray(b[1])
        if x.dtype.kind not in "fc" or y.dtype.kind not in "fc":
            return a == b
        return x.shape == y.shape and bool(np.allclose(x, y, rtol=1e-5, atol=1e-6,
                                                       equal_nan=True))
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
    return a == b


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


_NONE_OPERAND_CALLS = (
    "x.add(None)", "torch.add(x, None)", "torch.add(None, x)", "x.sub(None)", "torch.mul(x, None)",
    "x.div(None)", "torch.matmul(None, x)", "torch.matmul(x, None)", "x.matmul(None)",
    "x.mm(None)", "torch.mm(x, None)", "x.dot(None)", "x.mv(None)", "torch.addmm(x, None, x)",
    "x.add(other=None)", "x.add('a')", "x.mm(2)", "torch.maximum(x, 2.0)", "torch.tanh(None)",
    "torch.exp(None)", "torch.sum(None)", "torch.max(None)", "torch.softmax(None, 0)",
    "torch.ones_like(None)", "torch.zeros_like(None)",
    "torch.cat([x, None])", "torch.stack([None])", "torch.cat(x)", "x.detach().sub_(None)",
    "x.sub_(None)", "x.mul_(None)", "x.detach().copy_(None)", "x.expand_as(None)",
    "x.pow(None)", "torch.pow(x, None)", "x.eq(None)", "torch.eq(x, None)", "x.max(None)",
    "torch.max(x, 'a')", "x.true_divide(None)", "torch.true_divide(x, None)",
    "torch.where(x > 0, x, None)", "torch.where(None, x, x)", "x.where(x > 0, None)",
    "x.detach().fill_(None)", "x.to(None) is x",
    "nn.Linear(2, 1)(None)", "nn.Conv2d(2, 1, 1)(None)", "nn.ReLU()(None)", "nn.Sigmoid()(None)",
    "nn.Dropout()(None)", "nn.functional.linear(x, w, 2.0)", "nn.functional.softmax(None, 0)",
    "nn.functional.mse_loss(x, None)", "nn.functional.batch_norm(None, None, None)",
)


@pytest.mark.parametrize("call", _NONE_OPERAND_CALLS)
def test_non_tensor_operand_fails_the_argument_check(call: str) -> None:
    # An unused input's None gradient reached ops as an operand: PyTorch's binding refuses it
    # with a TypeError naming the op and the argument, before the op (or its leaf check) runs.
    _agree("""
x = torch.rand(2, 2, requires_grad=True)
w = torch.rand(1, 2)
""", call)


@pytest.mark.parametrize("call", [
    "x.clamp_(t, 0.5)", "x.clamp_(0.5, t)", "x.clamp(t, 0.5)", "torch.clamp(x, t, 0.5)",
    "x.clamp_(t, t)", "x.clamp_(None, t)", "x.clamp_(-0.5, 0.5)", "x.clamp(None)"])
def test_clamp_takes_two_tensor_or_two_number_bounds(call: str) -> None:
    _agree("""
x = torch.tensor([-1.0, 0.25, 2.0])
t = torch.zeros(3)
""", call)


@pytest.mark.parametrize("expr", ["a.pow(2)", "a.pow(1.5)", "a.sqrt()"])
def test_second_order_graph_multiplies_by_numbers_with_mul_scalar(expr: str) -> None:
    _agree(f"""
a = torch.tensor([0.5, 1.0, 2.0], requires_grad=True)
g, = torch.autograd.grad({expr}.sum(), [a], create_graph=True)
gg, = torch.autograd.grad(g.sum(), [a])
""", "graph(g)", "g", "gg")


def test_detach_in_place_clears_the_flag_of_views_taken_under_no_grad() -> None:
    _agree("""
with torch.no_grad():
    x = torch.rand(1, requires_grad=True)
    v = x.view(-1)
    x.detach_()
a = torch.rand(2, requires_grad=True)
b = a * 2
w = b.view(-1)
b.detach_()
""", "v.requires_grad", "v.is_leaf", "w.requires_grad", "graph(w)")


def test_view_follows_strides_not_only_contiguity() -> None:
    # PyTorch's view works whenever the strides allow it (computeStride), and cat lays its
    # result out row-major whatever its inputs' layout.
    _agree("""
a = torch.arange(1., 9.).reshape(1, 2, 2, 2)
t = a.transpose(0, -2)
c = torch.cat([t, t], dim=0)
""", "c.view(-1)", "c.is_contiguous()", "t.view(2, 2, 2)", "t.view(4)",
           "a.permute(0, 2, 1, 3).view(2, 2, 2)")


def test_elementwise_results_keep_torch_layout() -> None:
    # TensorIterator orders the result's dims by its inputs' strides; whether a later view
    # succeeds depends on it.
    _agree("""
a = torch.arange(1., 9.).reshape(1, 2, 2, 2)
b = torch.cat([a, a], dim=0)
t = a.transpose(0, -2)
s = t + b
x = torch.arange(1., 13.).reshape(3, 4).div(10).t()
""", "s.view(-1)", "s.is_contiguous()", "x.clone().is_contiguous()", "x.clone().view(-1)",
           "x.exp().t().view(-1)", "x.softmax(0).view(-1)", "x.sum(0, keepdim=True).view(-1)",
           "(torch.ones(1, 1, 3).permute(2, 0, 1) + torch.ones(1, 3, 1)).view(-1)")


def test_convolution_gradient_node_has_three_edges() -> None:
    # Every gradient of a convolution is an output of one ConvolutionBackwardBackward0 node
    # with edges (grad_output, input, weight), whichever of them its formula uses.
    _agree("""
x = torch.rand(2, 1, 2, 2, requires_grad=True)
m = nn.Conv2d(1, 2, 1)
gx, = torch.autograd.grad(m(x).sum(), [x], create_graph=True)
gw, gb = torch.autograd.grad((m(x) ** 2).sum(), [m.weight, m.bias], create_graph=True)
""", "graph(gx)", "graph(gw)", "graph(gb)",
           "torch.autograd.grad(gx.sum(), [x], allow_unused=True, retain_graph=True)",
           "torch.autograd.grad(gx.sum(), [x], retain_graph=True)")


def test_inplace_op_saves_a_recorded_clone_of_self() -> None:
    # An in-place op whose formula needs self's old value saves self.clone(), recorded
    # (CloneBackward0) when self requires grad: a create_graph gradient goes through it.
    _agree("""
x = torch.tensor([0.5, 1.0, 1.5], requires_grad=True)
w = torch.tensor([2.0, 0.0, 0.5], requires_grad=True)
v = x + 1
v.pow_(2)
u = x + 1
u.mul_(w)
p = x + 1
p.pow_(w)
gv, = torch.autograd.grad(v.sum(), [x], create_graph=True)
gu, = torch.autograd.grad(u.sum(), [w], create_graph=True)
gp = torch.autograd.grad(p.sum(), [x, w], create_graph=True)
""", "graph(gv)", "graph(gu)", "graph(gp[0])", "graph(gp[1])", "gv", "gu", "gp")


def test_saved_input_detached_in_place_is_refused() -> None:
    _agree("""
x = torch.tensor([0.5, -1.0, 1.5], requires_grad=True)
y = x * 2
z = y.abs()
y.detach_()
""", "z.sum().backward()", "x.grad")


def test_nan_and_inf_come_out_without_numpy_warnings() -> None:
    x = refimpl.tensor([-1.0, 0.0, 100.0], requires_grad=True)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        y = refimpl.log(x) + refimpl.sqrt(x) + 1 / x + refimpl.exp(x) + x / 0
        y.sum().backward()
        big = refimpl.ones(2) + 1e300
        cast = refimpl.tensor([1e300], dtype=refimpl.float32)
    assert np.isnan(y.detach().numpy()[:2]).all() and np.isinf(x.grad.numpy()[2])
    assert np.isinf(big.numpy()).all() and np.isinf(cast.numpy()).all()
    assert np.geterr()["invalid"] == "warn"  # the caller's NumPy settings are left alone


def test_retain_grad_on_a_stale_no_grad_view_is_a_no_op() -> None:
    _agree("""
with torch.no_grad():
    x = torch.rand(1, requires_grad=True)
    v = x.unsqueeze(-2)
    x.add_(1.0)
v.retain_grad()
""", "v.retains_grad", "v.requires_grad", "v.grad_fn")


def test_unbind_views_refuse_history_and_writes_after_the_base_changes() -> None:
    _agree("""
x = torch.rand(2, dtype=torch.float64, requires_grad=True)
a, b = x
with torch.no_grad():
    x.add_(1.0)
b.requires_grad_()
""", "a.is_leaf", "b.grad_fn", "a * 2", "a.retain_grad()", "b.requires_grad")
    _agree("""
y = torch.rand(2, 2, requires_grad=True).clone()
c, d = y.unbind()
e = c.view(2)
""", "c.add_(1)", "y.mul_(2).shape", "graph(e)", "e.add_(1)", "d.grad_fn")
    _agree("""
z = torch.rand(2)
c, d = z.unbind()
z.mul_(torch.rand(2, requires_grad=True))
""", "c.requires_grad", "c.grad_fn")


@pytest.mark.parametrize("training", [True, False])
def test_batch_norm_double_backward_is_one_node_with_torch_values(training: bool) -> None:
    _agree(f"""
x = torch.tensor([[0.3, -1.2], [0.8, 0.1], [-0.5, 2.0]], dtype=torch.float64, requires_grad=True)
m = nn.BatchNorm1d(2, eps=0.1).double()
m.running_mean.fill_(0.2)
m.running_var.fill_(1.5)
m.train({training})
with torch.no_grad():
    m.weight.copy_(torch.tensor([1.5, -0.7]))
y = m(x * 1)
c = torch.tensor([1.0, 2.0], dtype=torch.float64, requires_grad=True)
gx, gw, gb = torch.autograd.grad((y * y * c).sum(), [x, m.weight, m.bias], create_graph=True)
hx, hw, hc = torch.autograd.grad((gx * gx).sum() + (gw * gb).sum(), [x, m.weight, c])
""", "graph(gx)", "graph(gw)", "graph(gb)", "gx", "gw", "gb", "hx", "hw", "hc")


def test_modified_saved_tensor_message_keeps_nonzero_overload_numbers() -> None:
    _agree("x = torch.tensor([[0.5, 2.0], [1.5, 3.0]], requires_grad=True)",
           "[(v := x * 1, w := v * v, v.fill_(0.5), w.sum().backward())]",
           "[(v := x * 1, w := v * v, v.pow_(torch.tensor(2.0)), w.sum().backward())]",
           "[(v := x * 1, w := v * v, v.add_(1), w.sum().backward())]")


def test_mm_gradient_of_a_column_major_operand_is_computed_transposed() -> None:
    _agree("""
x = torch.tensor([0.7], requires_grad=True)
m = nn.Linear(1, 1)
with torch.no_grad():
    m.weight.fill_(0.3)
g, = torch.autograd.grad(m(x).sum(), [x], create_graph=True)
a = torch.tensor([[0.1, 0.2], [0.3, 0.4], [0.5, 0.6]], requires_grad=True)
b = torch.tensor([[1.0, 2.0, 3.0]], requires_grad=True)
ga, gb = torch.autograd.grad(a.t().mm(b.t()).sum(), [a, b], create_graph=True)
c = torch.tensor([[1.0, 2.0, 3.0]], requires_grad=True)
gc, = torch.autograd.grad(torch.addmm(torch.zeros(3, 3), c.t(), c, alpha=2).sum(), [c],
                          create_graph=True)
""", "graph(g)", "graph(ga)", "graph(gb)", "graph(gc)", "g", "ga", "gb", "gc")


def test_requires_grad_on_a_no_grad_view_gives_it_an_accumulator() -> None:
    _agree("""
with torch.no_grad():
    x = torch.tensor([2.0], requires_grad=True)
    v = x.view(-1)
v.requires_grad_()
(v * 3).sum().backward()
first = (v.grad.clone(), x.grad)
v.requires_grad_(False)
(v * 3).sum().backward()
""", "first", "v.grad", "x.grad", "v.is_leaf", "v.requires_grad", "graph(v * 3)")


def test_gradient_reduced_to_a_0d_input_is_a_plain_sum() -> None:
    _agree("""
x = torch.tensor([0.5, 2.0], requires_grad=True)
s = torch.tensor(3.0, requires_grad=True)
g, = torch.autograd.grad((x * s).sum(), [s], create_graph=True)
""", "graph(g)", "g")


def test_retain_grad_follows_the_tensor_through_in_place_writes() -> None:
    _agree("""
x = torch.tensor([1.5, 2.0], dtype=torch.float64, requires_grad=True)
v = x.neg()
v.retain_grad()
v.mul_(2.0)
(v * 3).sum().backward()
b = x * 1
w = b[:1]
w.retain_grad()
b.mul_(5)
(w * 3).sum().backward()
""", "v.grad", "w.grad", "x.grad")


def test_sigmoid_double_backward_uses_scalar_overloads() -> None:
    _agree("""
x = torch.tensor([0.3, -0.8], dtype=torch.float64, requires_grad=True)
y = torch.sigmoid(x)
g, = torch.autograd.grad((y * y).sum(), [x], create_graph=True)
h, = torch.autograd.grad(g.sum(), [x], create_graph=True)
""", "graph(h)", "h")


def test_grad_reads_no_grad_views_up_to_date() -> None:
    _agree("""
x = torch.rand(2, requires_grad=True)
with torch.no_grad():
    v = x.view(-1)
    x.add_(1.0)
s = torch.rand((), requires_grad=True)
with torch.no_grad():
    w = s.t()
    w.requires_grad_()
""", "torch.autograd.grad(x.sum(), [v])", "torch.autograd.grad(w, [s])",
           "torch.autograd.grad(w, [s], allow_unused=True)")


def test_view_recorded_before_its_leaf_stopped_requiring_grad_refuses_writes() -> None:
    _agree("""
x = torch.tensor([0.5, 1.5], requires_grad=True)
v = x[-1]
x.requires_grad_(False)
""", "v.add_(1.0)", "v.requires_grad", "x[0].add_(1.0).requires_grad")


def test_reshape_records_view_alias_or_copy_by_strides() -> None:
    _agree("""
x = torch.rand((), requires_grad=True)
y = torch.rand(2, 3, requires_grad=True)
z = torch.rand(3, 1, requires_grad=True).expand(3, 4)
outs = [x.expand(2).reshape(1, -1), y.reshape(3, 2), y.t().reshape(6), y[:, 0].reshape(1, 2),
        z.reshape(3, 2, 2), z.reshape(12), y.t().flatten(), y[:, 1:].reshape(4)]
total = sum(o.sum() for o in outs)
total.backward()
""", "[graph(o) for o in outs]", "x.grad", "y.grad")


def test_modified_saved_view_is_named_by_its_regenerated_grad_fn() -> None:
    _agree("""
def attempt(build):
    try:
        build()
    except RuntimeError as exc:
        return str(exc)

def leaf_view():
    x = torch.rand(3, requires_grad=True)
    y = x.unsqueeze(0)
    z = (y * y).sum()
    with torch.no_grad():
        x.add_(1)
    z.backward()

def nonleaf_view():
    x = torch.rand(3, requires_grad=True).exp()
    y = x.view(3)
    z = (y * y).sum()
    with torch.no_grad():
        x.add_(1)
    z.backward()

def saved_output_of_a_view():
    x = torch.rand(3, requires_grad=True).exp()
    y = x.view(3)
    z = y.exp().sum()
    with torch.no_grad():
        y.add_(1)
    z.backward()

def no_grad_view():
    x = torch.rand(3, requires_grad=True)
    w = torch.rand(2, requires_grad=True)
    with torch.no_grad():
        y = x[0:2]
    z = (y * w).sum()
    with torch.no_grad():
        x.add_(1)
    z.backward()
""", "attempt(leaf_view)", "attempt(nonleaf_view)", "attempt(saved_output_of_a_view)",
           "attempt(no_grad_view)")


def test_a_view_keeps_its_own_requires_grad_flag_apart_from_its_base() -> None:
    _agree("""
def flags(*ts):
    return [(t.requires_grad, t.is_leaf) for t in ts]

seen = []
a = torch.rand(1, 1, 1)
v = a.view(-1)
v.requires_grad_()
seen.append(flags(a, v))
a.requires_grad_(False)
seen.append(flags(a, v))
a.requires_grad_(True)
a.requires_grad_(False)
seen.append(flags(a, v))
v.requires_grad_(False)
seen.append(flags(a, v))
b = torch.rand(2)
w = b.view(2)
b.requires_grad_()
c = w * 2
w.requires_grad_()
b.requires_grad_(False)
seen.append(flags(b, w, c))
(w * 2).sum().backward()
""", "seen", "graph(c)", "b.grad", "w.grad")


def test_backward_runs_ready_nodes_in_torch_order() -> None:
    # Hooks fire as their nodes run: the latest-created ready node first, leaves at once, and
    # several ready leaves in the order PyTorch's binary heap leaves them.
    _agree("""
log = []
def hook(name):
    return lambda grad: log.append(name)

def run(*tensors):
    for name, t in tensors:
        t.register_hook(hook(name))

x = torch.rand(2, requires_grad=True)
w = torch.rand(2, requires_grad=True)
b = x * 3
a = x * w
run(("a", a), ("b", b), ("x", x), ("w", w))
(a + b).sum().backward()
leaves = [torch.rand(2, requires_grad=True) for _ in range(6)]
run(*[(f"l{i}", t) for i, t in enumerate(leaves)])
(leaves[0] * leaves[1] + leaves[2] * leaves[3] * leaves[4] + leaves[5]).sum().backward()
torch.stack(leaves).sum().backward()
torch.autograd.backward(leaves, [torch.ones(2)] * 6)
torch.autograd.backward([t * 2 for t in leaves[::-1]], [torch.ones(2)] * 6)
""", "log")


def test_create_graph_gradients_record_formulas_in_torch_order() -> None:
    # Formulas run in the sorted order of their input names, and the terms of one formula in
    # PyTorch's evaluation order: the sums the next backward records follow.
    _agree("""
x = torch.rand(2, 3, requires_grad=True)
y = torch.rand(3, 2, requires_grad=True)
go = torch.rand(2, 3, requires_grad=True)
g, = torch.autograd.grad(x.softmax(dim=1), [x], go, create_graph=True)
gx, = torch.autograd.grad((g * g).sum(), [x], create_graph=True)
hx, = torch.autograd.grad((gx * gx).sum(), [x], create_graph=True)
m = x.mm(y)
ga, gb = torch.autograd.grad(m, [x, y], torch.ones(2, 2, requires_grad=True), create_graph=True)
gm = torch.autograd.grad((ga * ga).sum() + (gb * gb).sum(), [x, y], create_graph=True)
""", "graph(gx)", "graph(hx)", "[graph(t) for t in gm]")


def test_version_error_names_saved_tensors_in_unpack_order() -> None:
    # A node unpacks its saved inputs in the sorted order of their names, then its result.
    _agree("""
def attempt(build):
    try:
        build()
    except RuntimeError as exc:
        return str(exc)

def binary(op, shapes, modify):
    def build():
        a = torch.rand(*shapes[0], requires_grad=True).exp()
        b = torch.rand(*shapes[1], requires_grad=True).sin()
        z = op(a, b)
        for name in modify:
            {"a": a, "b": b, "z": z}[name].add_(1)
        z.sum().backward()
    return build

results = [attempt(binary(op, shapes, modify)) for op, shapes in [
    (lambda a, b: a * b, ((2, 1), (3,))), (lambda a, b: a / b, ((2, 1), (3,))),
    (lambda a, b: a.mm(b), ((2, 3), (3, 4))), (lambda a, b: a ** b, ((2, 1), (3,))),
    (torch.maximum, ((2,), (2,)))] for modify in (("a", "b"), ("b", "a"))]
results += [attempt(binary(lambda a, b: a ** b, ((2, 1), (3,)), m))
            for m in (("a", "z"), ("b", "z"))]
""", "results")


def test_unbind_pieces_are_outputs_of_one_node() -> None:
    # Hooks on a piece see its gradient, or None when only other pieces got one; roots,
    # captures and retain_grad work per piece; a create_graph gradient is one stack.
    _agree("""
log = []
x = torch.tensor([[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]], requires_grad=True)
a, b, c = x
b.register_hook(lambda g: log.append(("b", g)))
a.register_hook(lambda g: log.append(("a", g)))
b.retain_grad()
c.retain_grad()
(a * 2).sum().backward()
first = [log[:], b.grad, c.grad, x.grad]
log.clear()
(b * 3).sum().backward(retain_graph=True)
second = [log[:], b.grad, x.grad]
captured = torch.autograd.grad((a * b).sum(), [b, x, c], allow_unused=True)
both = torch.autograd.grad([a.sum(), b.sum()], [b])
x.grad = None
torch.autograd.backward([c, a], [torch.ones(2), torch.ones(2) * 2])
g, = torch.autograd.grad((a * b).sum(), x, create_graph=True)
same = [a.grad_fn is b.grad_fn, a.grad_fn.next_functions[0][1]]
""", "first", "second", "captured", "both", "x.grad", "graph(g)", "g", "same")


def test_the_same_root_twice_gets_both_gradients() -> None:
    _agree("""
x = torch.ones(2, requires_grad=True)
z = x * 3
torch.autograd.backward([z, z], [torch.ones(2), torch.ones(2) * 2])
w = torch.ones(2, requires_grad=True)
torch.autograd.backward([w, w * 1, w], [torch.ones(2)] * 3)
""", "x.grad", "w.grad")


def test_copy_slices_keeps_its_full_name_in_messages() -> None:
    _agree("""
v1 = torch.ones(1, 2, requires_grad=True)
v2 = v1 + v1
v3 = v2.view(-1)
v4 = v1 * v2
v3.add_(1.0)
name = v2.grad_fn.name()
v4.sum().backward()
""", "name")


def test_gradient_of_a_view_whose_base_changed_goes_through_as_strided_backward() -> None:
    # A view whose base was written in place regenerates its grad_fn as AsStridedBackward0;
    # its gradient is PyTorch's as_strided_backward: size-1 dims squeezed, expanded dims summed.
    _agree("""
v1 = torch.rand(1, requires_grad=True)
v2 = v1.expand(2, -1)
with torch.no_grad():
    v1.add_(1.0)
g, = torch.autograd.grad(v2, v1, torch.ones(2, 1, requires_grad=True), create_graph=True)
x = torch.rand(2, 3, requires_grad=True).clone()
v = x.t()
with torch.no_grad():
    x.mul_(2)
h, = torch.autograd.grad(v, x, torch.ones(3, 2, requires_grad=True), create_graph=True)
y = torch.rand(3, requires_grad=True).clone()
w = y[None].expand(2, 3)
with torch.no_grad():
    y.mul_(2)
k, = torch.autograd.grad(w, y, torch.ones(2, 3, requires_grad=True), create_graph=True)
""", "g", "graph(g)", "graph(v2)", "h", "graph(h)", "k", "graph(k)")


def test_item_assignment_converts_the_value_first() -> None:
    # tensor[key] = value takes a tensor or a number (a NumPy integer too), before it looks at
    # the key or at autograd; anything else, a None gradient included, is a TypeError naming
    # the value's type. A number must fit the element type, as for fill_ and full.
    _agree("""
def assign(t, key, value):
    t[key] = value
    return t

def outcome(fn):
    try:
        return fn()
    except Exception as exc:
        return (type(exc).__name__, str(exc))

leaf = torch.rand(1, 2, 1, requires_grad=True)
_, unused = torch.autograd.grad(leaf.sum(), [leaf, torch.rand(1, 2, 1, requires_grad=True)],
                                allow_unused=True)
values = [None, "a", [1.0], (1.0,), np.float64(2), np.float32(2), np.ones(1), np.bool_(True),
          np.int64(3), np.uint64(2**63 + 5), 2**70, True, 1 + 2j, complex(3, 0), 1e300]
dtypes = [torch.float16, torch.float32, torch.float64, torch.int32, torch.int64, torch.bool,
          torch.complex64]
numbers = [2**31, 2**63 - 1, 1e5, 1e39, float("nan"), float("inf"), 1 + 1j, complex(1e300, 0)]
""", "assign(leaf, [0], unused)", "assign(leaf, False, None)",
           "[outcome(lambda: assign(torch.zeros(2), [0], v)) for v in values]",
           "[outcome(lambda: assign(torch.zeros(2, dtype=d), 0, v)) for d in dtypes "
           "for v in numbers]",
           "[outcome(lambda: torch.zeros(2, dtype=d).fill_(v)) for d in dtypes for v in numbers]",
           "[outcome(lambda: torch.full((1,), v, dtype=d)) for d in dtypes for v in numbers]",
           "outcome(lambda: leaf.fill_(1e300))", "outcome(lambda: leaf.clone().fill_(1e300))")


def test_sgn_derivative_is_an_immutable_zero_tensor() -> None:
    # PyTorch's sgn_backward returns a ZeroTensor: the ops with ZeroTensor kernels keep it
    # (mul, div by anything, add/sub of two, dot, views, detach), the rest materialize zeros;
    # writes to it, tolist() and numpy() are refused.
    _agree("""
def zero():
    x = torch.tensor([1., -2.], requires_grad=True)
    g, = torch.autograd.grad(x.abs().sum(), [x], create_graph=True)
    return torch.autograd.grad(g.sum(), [x])[0]

def outcome(fn):
    try:
        out = fn()
        return out._is_zerotensor() if isinstance(out, torch.Tensor) else out
    except Exception as exc:
        return (type(exc).__name__, str(exc))

z, o = zero(), torch.tensor([3., 4.])
derived = [lambda: z * o, lambda: o * z, lambda: z * 2, lambda: z / o, lambda: o / z,
           lambda: -z, lambda: z + o, lambda: z + z, lambda: z - z, lambda: z - 1, lambda: 1 - z,
           lambda: z.sum(), lambda: z.detach(), lambda: z.data, lambda: z.view(2), lambda: z[0],
           lambda: z.exp(), lambda: z @ o, lambda: z.clone(), lambda: z.unsqueeze(0).t(),
           lambda: z.expand(3, 2), lambda: z.mean(), lambda: z.float(), lambda: z.double(),
           lambda: torch.ones(2, 2).mv(z), lambda: z.unbind()[0], lambda: z[0].item()]
writes = [lambda: zero().add_(1), lambda: zero().zero_(), lambda: zero().fill_(1),
          lambda: zero().copy_(o), lambda: zero().__setitem__(0, 1.0),
          lambda: zero().__setitem__(slice(None), o), lambda: zero()[0].mul_(2),
          lambda: zero().requires_grad_().add_(1), lambda: o.clone().add_(zero()),
          lambda: z.tolist(), lambda: z.numpy(), lambda: z.numpy(force=True).tolist()]

def accumulate(first, second):
    x = torch.tensor([1., -2.], requires_grad=True)
    steps = {"zero": lambda: torch.autograd.grad(x.abs().sum(), [x], create_graph=True)[0]
             .sum().backward(),
             "dense": lambda: (x * x).sum().backward(),
             "graph": lambda: (x * x).sum().backward(create_graph=True)}
    steps[first]()
    steps[second]()
    return x.grad._is_zerotensor(), x.grad.detach().clone()
""", "[outcome(f) for f in derived]", "[outcome(f) for f in writes]",
           "[outcome(lambda a=a, b=b: accumulate(a, b)) for a in ('zero', 'dense') "
           "for b in ('zero', 'dense', 'graph')]")


def test_copy_slices_is_freed_by_a_backward_pass_without_retain_graph() -> None:
    # CopySlices drops the node of the op written through the view, saved tensors or not.
    _agree("""
def twice(retain):
    x = torch.tensor([0.3, 0.2], requires_grad=True)
    y = x.neg()
    y[0] = 1.5
    torch.autograd.grad(y.sum(), [x], retain_graph=retain)
    try:
        y.sum().backward()
    except RuntimeError as exc:
        return str(exc)
    return x.grad
""", "twice(False)", "twice(True)")


def test_mse_loss_gradient_has_the_dtype_of_its_input() -> None:
    # mse_loss_backward writes into zeros like its input: a float32 target of a float64 input
    # gets a float32 gradient from the node itself, with no cast (ToCopyBackward0) after it.
    _agree("""
x = torch.tensor([0.25, 0.5], dtype=torch.float64, requires_grad=True)
t = torch.tensor([1.0, -1.0], requires_grad=True)
loss = torch.nn.functional.mse_loss(x, t)
gx, gt = torch.autograd.grad(loss, [x, t], create_graph=True)
hx, ht = torch.autograd.grad((gx * gx).sum() + (gt * gt).sum(), [x, t])
""", "graph(gx)", "graph(gt)", "str(gx.dtype)", "str(gt.dtype)", "gx", "gt", "hx", "ht",
           "str(hx.dtype)", "str(ht.dtype)")


def test_inplace_on_an_inference_tensor_skips_autograd_unless_a_number_is_wrapped() -> None:
    # Only inference tensors: no autograd kernel, so no leaf check; the write happens, then
    # the version bump refuses. add_/mul_/div_ wrap their number as a normal tensor.
    _agree("""
def write(op):
    with torch.inference_mode():
        v = torch.tensor([0.3, 0.4], requires_grad=True)
    try:
        op(v)
    except RuntimeError as exc:
        return [str(exc), v.tolist()]
    return v.tolist()
ops = [lambda v: v.zero_(), lambda v: v.fill_(0.5), lambda v: v.clamp_(0.0, 0.35),
       lambda v: v.pow_(2),
       lambda v: v.add_(1.0), lambda v: v.mul_(2.0), lambda v: v.div_(2.0),
       lambda v: v.mul_(torch.ones(2)), lambda v: v.__setitem__(0, 1.5)]
""", *[f"write(ops[{i}])" for i in range(9)])


def test_a_view_of_an_inference_tensor_is_a_leaf_that_does_not_require_grad() -> None:
    _agree("""
with torch.inference_mode():
    v = torch.tensor([0.3, 0.4], requires_grad=True)
    inside = v.view(-1)
with torch.no_grad():
    a = v.view(-1)
b = v[0]
""", "inside.requires_grad", "a.requires_grad", "a.is_inference()", "b.requires_grad",
           "b.is_leaf", "b.grad_fn")


def test_detach_in_place_in_inference_mode_changes_nothing() -> None:
    _agree("""
x = torch.tensor([1., 2.], requires_grad=True)
y = x * 2
z = y[0]
with torch.inference_mode():
    w = torch.tensor([1.], requires_grad=True)
    x.detach_()
    y.detach_()
    z.detach_()
w.detach_()
y.sum().backward()
""", "x.requires_grad", "y.grad_fn.name()", "z.requires_grad", "w.requires_grad", "x.grad")


@pytest.mark.parametrize("shape", [(2, 1), (3, 2, 2), (2, 2, 2, 2)])
@pytest.mark.parametrize("training", [True, False])
def test_batch_norm_third_order_records_batchnorm_double_backward(shape, training) -> None:
    # PyTorch's batchnorm_double_backward, op for op: the gradient of the input gradient has
    # the same graph and values in training and eval mode, for 2-, 3- and 4-d inputs.
    norm = "BatchNorm2d" if len(shape) == 4 else "BatchNorm1d"
    _agree(f"""
x = torch.tensor({np.sin(np.arange(np.prod(shape)) * 1.7).reshape(shape).tolist()},
                 dtype=torch.float64, requires_grad=True)
m = nn.{norm}({shape[1]}, eps=0.1).double()
with torch.no_grad():
    m.weight.copy_(torch.tensor({np.linspace(0.5, 1.5, shape[1]).tolist()}, dtype=torch.float64))
m(x)
m.train({training})
y = m(x)
g, = torch.autograd.grad((y * y).sum(), [x], create_graph=True)
h, = torch.autograd.grad((g * g).sum(), [x], create_graph=True, allow_unused=True)
hw, = torch.autograd.grad((g * g).sum(), [m.weight], create_graph=True, allow_unused=True)
s, = torch.autograd.grad(y.sum(), [x], create_graph=True)
t, = torch.autograd.grad(s.sum(), [x], create_graph=True, allow_unused=True)
""", "graph(h)", "h", "graph(hw)", "hw", "graph(t)", "t")


def test_autograd_grad_captures_a_non_leaf_after_its_hooks_unless_it_runs_on() -> None:
    _agree("""
x = torch.tensor([1., 2.], requires_grad=True)
v = x * 3
v.register_hook(lambda g: g * 2)
v.retain_grad()
g, = torch.autograd.grad(v.sum(), [v], retain_graph=True)
gv, gx = torch.autograd.grad(v.sum(), [v, x], retain_graph=True)
w = x * 3
w.register_hook(lambda g: g * 2)
w.grad_fn.register_prehook(lambda gs: (gs[0] * 10,))
gw, = torch.autograd.grad(w.sum(), [w])
""", "g", "v.grad", "gv", "gx", "gw")
