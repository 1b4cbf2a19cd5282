"""backward / autograd.grad: semantics and errors against PyTorch, and engine properties."""

from __future__ import annotations

import gc
import weakref

import pytest
from refimpl_helpers import run_program

import refimpl
from refimpl.autograd.graph import init_node
from refimpl.ops import derivatives as D

torch = pytest.importorskip("torch", reason="PyTorch is the oracle these tests compare with")

PROGRAMS = {
    "backward_no_grad_fn": "torch.tensor(3.).backward()",
    "backward_nonscalar": "(torch.rand(3, requires_grad=True) * 2).backward()",
    "backward_leaf_nonscalar": "torch.rand(3, requires_grad=True).backward()",
    "backward_leaf_scalar": "x = torch.tensor(7., requires_grad=True); x.backward(); "
                            "x.backward(); result = x.grad",
    "second_backward_after_mul": "x = torch.tensor(3., requires_grad=True); y = x * 4; "
                                 "y.backward(); y.backward()",
    "second_backward_after_add": "x = torch.tensor(3., requires_grad=True); y = x + 4; "
                                 "y.backward(); y.backward(); result = x.grad",
    "retain_graph_allows_second": "x = torch.tensor(3., requires_grad=True); y = x * 4; "
                                  "y.backward(retain_graph=True); y.backward(); result = x.grad",
    "grad_shape_mismatch": "a = torch.rand(3, requires_grad=True); (a * 2).backward(torch.ones(2))",
    "grad_output_count": "q = torch.tensor(2., requires_grad=True); "
                         "torch.autograd.grad([q * 2, q * 3], [q], "
                         "grad_outputs=[torch.tensor(1.)])",
    "grad_output_int_cast": "q = torch.tensor(2., requires_grad=True); (q * 2).backward("
                            "torch.tensor(3)); result = q.grad",
    "grad_output_float64": "q = torch.tensor(2., requires_grad=True); "
                           "result = torch.autograd.grad(q * 2, q, "
                           "torch.tensor(2.0, dtype=torch.float64))",
    "grad_unused": "a = torch.rand(3, requires_grad=True); "
                   "torch.autograd.grad((a * 2).sum(), [a, torch.rand(2, requires_grad=True)])",
    "grad_allow_unused": "a = torch.tensor([1., 2.], requires_grad=True); "
                         "result = torch.autograd.grad((a * 2).sum(), "
                         "[a, torch.rand(2, requires_grad=True)], allow_unused=True)",
    "grad_input_no_requires_grad": "a = torch.rand(3, requires_grad=True); "
                                   "torch.autograd.grad((a * 2).sum(), [torch.rand(2)])",
    "grad_empty_inputs": "a = torch.rand(3, requires_grad=True); "
                         "torch.autograd.grad((a * 2).sum(), [])",
    "backward_empty_inputs": "a = torch.rand(3, requires_grad=True); "
                             "(a * 2).sum().backward(inputs=[])",
    "grad_output_no_grad_fn": "a = torch.rand(3, requires_grad=True); "
                              "torch.autograd.grad(torch.tensor(1.), [a])",
    "grad_of_leaf_itself": "q = torch.tensor(2., requires_grad=True); "
                           "result = torch.autograd.grad(q, q)",
    "grad_nonleaf_input": "a = torch.tensor([1., 2.], requires_grad=True); b = a * 3; "
                          "result = (torch.autograd.grad((b * b).sum(), [b]), a.grad)",
    "grad_nonleaf_not_in_graph": "a = torch.rand(3, requires_grad=True); "
                                 "torch.autograd.grad((a * 2).sum(), [a * 3])",
    "grad_does_not_touch_leaves": "a = torch.tensor([1., 2.], requires_grad=True); "
                                  "b = torch.tensor([3., 4.], requires_grad=True); "
                                  "g = torch.autograd.grad((a * b).sum(), [a]); "
                                  "result = (g, a.grad, b.grad)",
    "complex_implicit_grad": "torch.rand(3, dtype=torch.complex64, requires_grad=True)"
                             ".sum().backward()",
    "backward_inputs_nonleaf": "x = torch.tensor(2., requires_grad=True); y = x * 3; "
                               "z = y * y; z.backward(inputs=[y]); "
                               "result = (y.grad, x.grad, y.retains_grad)",
    "backward_inputs_leaf_only": "a = torch.tensor([1., 2.], requires_grad=True); "
                                 "b = torch.tensor([3., 4.], requires_grad=True); "
                                 "(a * b).sum().backward(inputs=[b]); result = (a.grad, b.grad)",
    "backward_inputs_no_grad": "q = torch.tensor(2., requires_grad=True); "
                               "torch.autograd.backward(q * 2, inputs=[torch.rand(2)])",
    "create_graph_warning": "a = torch.tensor([1., 2.], requires_grad=True); "
                            "(a ** 3).sum().backward(create_graph=True); "
                            "result = (a.grad, a.grad.requires_grad)",
    "accumulation_seed3": (
        "t1 = torch.tensor(data=7., requires_grad=True); t1.backward(); t2 = t1 * 4; "
        "t2.retain_grad(); t2.backward(retain_graph=True); t3 = t2 * 5; t3.retain_grad(); "
        "t3.backward(); result = (t1, t1.grad, t2, t2.grad, t3, t3.grad, t3.is_leaf)"),
    "seed_scenario_1": "a = torch.tensor([[1., 2.], [3., 4.], [5., 6.]], requires_grad=True); "
                       "b = torch.tensor([[1., 0., 2.], [0.5, 1., 1.]]); "
                       "loss = 10 - (a @ b).sum(); loss.backward(); "
                       "result = (loss, a.grad, b.grad)",
    "higher_order": "x = torch.tensor(2.0, requires_grad=True); y = x ** 3 + x.sin() * x.exp();"
                    " g, = torch.autograd.grad(y, x, create_graph=True); "
                    "h, = torch.autograd.grad(g, x); result = (g, h)",
    "next_functions": "x = torch.tensor(3., requires_grad=True); y = x * 2 + 1; "
                      "n = y.grad_fn.next_functions; "
                      "result = (type(n[0][0]).__name__, n[0][1], n[1], "
                      "type(n[0][0].next_functions[0][0]).__name__, "
                      "n[0][0].next_functions[0][0].variable is x, "
                      "n[0][0].next_functions[0][0].name(), y.grad_fn.name())",
    "accumulate_grad_is_shared": "x = torch.rand(3, requires_grad=True); a = x * 2; b = x * 3; "
                                 "result = a.grad_fn.next_functions[0][0] is "
                                 "b.grad_fn.next_functions[0][0]",
    "broadcast_grads": "a = torch.ones(2, 3, requires_grad=True); "
                       "b = torch.ones(3, requires_grad=True); "
                       "c = torch.ones(2, 1, requires_grad=True); (a * b * c).sum().backward(); "
                       "result = (a.grad, b.grad, c.grad)",
    "saved_tensor_modified": "v = torch.tensor([1., 2.], requires_grad=True); c = v * 1; "
                             "d = c * c; c.add_(1); d.sum().backward()",
    "saved_result_modified": "v = torch.tensor([1., 2.], requires_grad=True); c = v * 1; "
                             "d = c.exp(); d.add_(1); d.sum().backward()",
    "saved_leaf_modified_under_no_grad": "c = torch.tensor([1., 2., 3.], requires_grad=True); "
                                         "e = c * c\nwith torch.no_grad():\n    c.mul_(2)\n"
                                         "e.sum().backward()",
    "saved_double_zeroed": "c = torch.rand(2, 3, requires_grad=True).double(); e = c * c; "
                           "c.zero_(); e.sum().backward()",
}


@pytest.mark.parametrize("name", list(PROGRAMS))
def test_autograd_like_torch(name: str) -> None:
    code = PROGRAMS[name]
    assert run_program(refimpl, code) == run_program(torch, code)


def test_saved_tensors_are_released_after_backward() -> None:
    x = refimpl.rand(3, requires_grad=True)
    h = x * 2
    y = (h * h).sum()
    ref = weakref.ref(h)
    del h
    gc.collect()
    assert ref() is not None, "the MulBackward0 node saved h, so h must be alive"
    y.backward()
    gc.collect()
    assert ref() is None, "backward without retain_graph must release saved tensors"


def test_retain_graph_keeps_saved_tensors() -> None:
    x = refimpl.rand(3, requires_grad=True)
    h = x * 2
    y = (h * h).sum()
    ref = weakref.ref(h)
    del h
    y.backward(retain_graph=True)
    gc.collect()
    assert ref() is not None
    y.backward()
    gc.collect()
    assert ref() is None


def test_nodes_do_not_keep_outputs_alive() -> None:
    x = refimpl.rand(3, requires_grad=True)
    h = x + 1  # AddBackward0 saves nothing
    y = h + 1
    ref = weakref.ref(h)
    del h
    gc.collect()
    assert ref() is None
    y.sum().backward()
    assert x.grad.tolist() == [1.0, 1.0, 1.0]


def test_saved_result_does_not_form_a_cycle() -> None:
    x = refimpl.rand(3, requires_grad=True)
    y = x.exp()
    node = weakref.ref(y.grad_fn)
    del y
    assert node() is None, "exp saves its result without referencing its own output tensor"


def test_grad_accumulates_in_place_after_first_backward() -> None:
    x = refimpl.tensor([1.0, 2.0], requires_grad=True)
    (x * 3).sum().backward()
    first = x.grad
    (x * 3).sum().backward()
    assert x.grad is first and first.tolist() == [6.0, 6.0]


def test_grad_does_not_alias_the_given_gradient() -> None:
    x = refimpl.tensor([1.0, 2.0], requires_grad=True)
    g = refimpl.tensor([1.0, 1.0])
    (x + 0).backward(g)
    (x + 0).backward(g)
    assert g.tolist() == [1.0, 1.0] and x.grad.tolist() == [2.0, 2.0]


def test_gradient_shared_by_two_leaves_is_not_aliased() -> None:
    a = refimpl.tensor([1.0, 2.0], requires_grad=True)
    b = refimpl.tensor([3.0, 4.0], requires_grad=True)
    ((a + b) * 2).sum().backward()  # AddBackward0 hands one gradient object to both leaves
    assert a.grad is not b.grad
    ((a + b) * 2).sum().backward()
    a.grad.zero_()
    assert b.grad.tolist() == [4.0, 4.0]


def test_make_subclass_shares_data_as_a_leaf() -> None:
    class Sub(refimpl.Tensor):
        __slots__ = ()

    base = refimpl.tensor([1.0, 2.0])
    p = Sub._make_subclass(Sub, base, True)
    assert type(p) is Sub and p.is_leaf and p.requires_grad
    base.add_(1)
    assert p.tolist() == [2.0, 3.0]
    with pytest.raises(RuntimeError, match="Only Tensors of floating point"):
        Sub._make_subclass(Sub, refimpl.tensor([1]), True)


def test_million_node_graph_backward_is_iterative() -> None:
    """A chain of 1,000,001 nodes: no RecursionError, in building, backward or freeing."""
    x = refimpl.tensor(1.0, requires_grad=True)
    acc = x._grad_accumulator()
    node = init_node(D.NEG.node_cls(), ((acc, 0),), x._data)
    for _ in range(1_000_000):
        nxt = init_node(D.NEG.node_cls(), ((node, 0),), x._data)
        node = nxt
    from refimpl.autograd.engine import run_backward

    run_backward([(node, 0)], [refimpl.tensor(1.0)], retain_graph=False, create_graph=False)
    assert x.grad.item() == -1.0  # an odd number of negations
    del node, nxt  # freeing a million-deep chain must not overflow the C stack either


def test_long_tensor_chain_through_ops() -> None:
    x = refimpl.tensor(1.0, requires_grad=True)
    y = x
    for _ in range(50_000):
        y = y * 1.0 + 0.0
    y.backward()
    assert x.grad.item() == 1.0
