"""The meta device compared with PyTorch's: flags, shapes, dtypes, devices, nodes and errors.

Every op case runs on meta tensors in both engines: the results, their graphs and their first
and second gradients must agree in everything but values (which a meta tensor does not have).
Then the rules of the device itself: what refuses to read values, moves in and out, mixing
with CPU tensors, Module.to('meta'), and PyTorch's exact messages.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from refimpl_cases import CASES, OpCase
from refimpl_helpers import graph, run_program

import refimpl
from refimpl import _backend

torch = pytest.importorskip("torch", reason="PyTorch is the oracle these tests compare with")


def _meta(t: Any) -> tuple[Any, ...] | None:
    """What a meta tensor shows: device, shape, dtype, flags, node."""
    if t is None:
        return None
    return (str(t.device), tuple(t.shape), str(t.dtype), t.requires_grad, t.is_leaf,
            graph(t))


def _observe(lib: Any, case: OpCase) -> tuple[Any, ...]:
    ins = [lib.tensor(a, device="meta", requires_grad=True) for a in case.arrays()]
    try:
        out = case.fn(lib, *ins)
    except Exception as exc:  # the error is the observation
        return ("raised", type(exc).__name__, str(exc))
    v = lib.ones_like(out)
    grads = lib.autograd.grad(out, ins, v, create_graph=True, allow_unused=True)
    live = [g for g in grads if g is not None and g.requires_grad]
    second = (lib.autograd.grad(sum((g * g).sum() for g in live), ins, allow_unused=True)
              if live else (None,) * len(ins))
    return (_meta(out), [_meta(g) for g in grads], [_meta(g) for g in second])


# A boolean mask on meta has no values to count, so PyTorch refuses to index with it (its
# nonzero has no meta kernel; index_put_mask's backward indexes with the mask); refimpl counts
# the mask's hidden values instead.
NEEDS_MASK_VALUES = {"index_mask", "index_put_mask"}


@pytest.mark.parametrize("case", [c for c in CASES if c.id not in NEEDS_MASK_VALUES],
                         ids=[c.id for c in CASES if c.id not in NEEDS_MASK_VALUES])
def test_op_on_meta_matches_torch(case: OpCase) -> None:
    ours = _observe(refimpl, case)
    assert ours == _observe(torch, case)
    assert ours[0] != "raised"
    assert ours[0][0] == "meta"


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_every_meta_tensor_holds_a_meta_array(case: OpCase) -> None:
    # The device of a saved result is read back from its array, so an op that handed a meta
    # tensor a plain NumPy array would put its gradients on the CPU.
    ins = [refimpl.tensor(a, device="meta", requires_grad=True) for a in case.arrays()]
    out = case.fn(refimpl, *ins)
    grads = refimpl.autograd.grad(out, ins, refimpl.ones_like(out), create_graph=True,
                                  allow_unused=True)
    for t in (out, *ins, *(g for g in grads if g is not None)):
        assert isinstance(t._data, _backend.MetaArray)
        assert t.device == refimpl.device("meta")


def _same(code: str) -> dict[str, Any]:
    ours, theirs = run_program(refimpl, code), run_program(torch, code)
    assert ours == theirs
    return ours


@pytest.mark.parametrize("code", [
    "result = torch.rand(3, device='meta', requires_grad=True)",
    "result = torch.ones(2, 3, device='meta', dtype=torch.float64) * 2",
    "result = torch.zeros((), device='meta')",
    "result = torch.zeros(0, device='meta')",
    "result = torch.tensor([1, 2], device='meta')",
    "result = torch.tensor([1.0, 2.0], device='meta') > 1",
    "result = torch.tensor([1.0], device='meta', requires_grad=True).sum()",
    "result = [torch.ones(2, device='meta').max(0)]",
    "result = torch.arange(3, device='meta')",
    "result = torch.full((2,), 3.0, device='meta')",
    "result = torch.zeros_like(torch.ones(2), device='meta')",
    "result = torch.ones(2).to('meta', torch.float64)",
    "result = torch.randn(2, 2, device='meta')",
    "result = torch.ones(2, 3, device='meta').t().contiguous().is_contiguous()",
    "x = torch.ones(2, 3, requires_grad=True).t().contiguous()\n"
    "result = (x.is_contiguous(), x.view(6).shape, type(x.grad_fn).__name__)",
    "result = torch.ones(2, 3, device='meta').type()",
    "result = (torch.device('meta'), torch.device('meta:0'), str(torch.device('meta')))",
    "result = torch.ones(3, device='meta:1').device",
    "result = torch.ones(3, device=torch.device('meta', 0)).device",
    "result = (torch.ones(3, device='meta').is_meta, torch.ones(3).is_meta)",
])
def test_meta_tensors_print_and_describe_themselves_as_torch(code: str) -> None:
    assert _same(code)["outcome"][0] == "ok"


@pytest.mark.parametrize(("code", "error"), [
    ("result = torch.zeros((), device='meta').item()", "RuntimeError"),
    ("result = torch.ones(3, device='meta').item()", "RuntimeError"),
    ("result = float(torch.zeros((), device='meta'))", "RuntimeError"),
    ("result = bool(torch.zeros((), device='meta'))", "RuntimeError"),
    ("result = int(torch.zeros((), device='meta', dtype=torch.int64))", "RuntimeError"),
    ("result = torch.ones(3)[torch.tensor(0, device='meta')]", "RuntimeError"),
    ("result = format(torch.zeros((), device='meta'), '.2f')", "TypeError"),
    ("result = torch.ones(3, device='meta').tolist()", "NotImplementedError"),
    ("result = torch.ones(3, device='meta').numpy()", "TypeError"),
    ("result = torch.ones(3, device='meta', requires_grad=True).numpy()", "TypeError"),
    ("result = torch.ones(3, device='meta').cpu()", "NotImplementedError"),
    ("result = torch.ones(3, device='meta').to('cpu')", "NotImplementedError"),
    ("result = torch.ones(3, device='meta', requires_grad=True).to('cpu')",
     "NotImplementedError"),
    ("result = torch.ones(2).copy_(torch.ones(2, device='meta'))", "NotImplementedError"),
    ("result = torch.ones(2, device='meta') + torch.ones(2)", "RuntimeError"),
    ("result = torch.ones(2) * torch.ones(2, device='meta')", "RuntimeError"),
    ("result = torch.cat([torch.ones(2, device='meta'), torch.ones(2)])", "RuntimeError"),
    ("result = torch.cat([torch.ones(2), torch.ones(2, device='meta')])", "RuntimeError"),
    ("result = torch.stack([torch.ones(2, device='meta'), torch.ones(2)])", "RuntimeError"),
    ("m = torch.ones(2, device='meta')\nresult = torch.where(m > 0, m, torch.ones(2))",
     "RuntimeError"),
    ("result = torch.ones(2).dot(torch.ones(2, device='meta'))", "RuntimeError"),
    ("result = torch.ones(2, device='meta').cuda()", "AssertionError"),
])
def test_reading_values_and_mixing_devices_fail_as_in_torch(code: str, error: str) -> None:
    assert _same(code)["outcome"][0] == error


def test_the_exact_messages() -> None:
    assert _same("result = torch.zeros((), device='meta').item()")["outcome"] == (
        "RuntimeError", "Tensor.item() cannot be called on meta tensors")
    assert _same("result = torch.ones(3, device='meta').tolist()")["outcome"] == (
        "NotImplementedError", "Cannot copy out of meta tensor; no data!")
    assert _same("result = torch.ones(3, device='meta').numpy()")["outcome"] == (
        "TypeError", "can't convert meta device type tensor to numpy. Use Tensor.cpu() to copy "
        "the tensor to host memory first.")
    assert _same("result = torch.ones(2, device='meta') + torch.ones(2)")["outcome"] == (
        "RuntimeError", "Tensor on device cpu is not on the expected device meta!")
    assert _same("result = torch.ones(2) + torch.ones(2, device='meta')")["outcome"] == (
        "RuntimeError", "Tensor on device meta is not on the expected device cpu!")
    assert _same("result = repr(torch.ones(2, 3, device='meta', requires_grad=True) * 2)"
                 )["outcome"] == (
        "ok", "\"tensor(..., device='meta', size=(2, 3), grad_fn=<MulBackward0>)\"")


@pytest.mark.parametrize("code", [
    # A gradient cannot come back from meta to a CPU leaf: backward raises at ToCopyBackward0.
    "x = torch.rand(3, requires_grad=True)\n"
    "try:\n    (x.to('meta') * 3).sum().backward()\n"
    "except NotImplementedError as e:\n    result = (str(e), x.grad)",
    # retain_grad's hook runs before the copy back fails.
    "a0 = torch.rand(3, 2, requires_grad=True)\na = a0.to('meta')\na.retain_grad()\n"
    "b = torch.rand(2, 3).to('meta')\n"
    "try:\n    (10 - (a @ b).sum()).backward()\n"
    "except NotImplementedError as e:\n    result = (str(e), a.grad, a0.grad)",
    # A leaf on meta gets a meta gradient.
    "a = torch.rand(3, 2, requires_grad=True, device='meta')\n"
    "(10 - (a @ torch.rand(2, 3).to('meta')).sum()).backward()\n"
    "result = (a.grad, a.is_leaf, a.grad.is_meta)",
    "x = torch.rand(3, requires_grad=True, device='meta')\nresult = x.to('meta') is x",
    "x = torch.rand(3, requires_grad=True)\ny = x.to(device='meta')\n"
    "result = (type(y.grad_fn).__name__, y.is_leaf, y.grad_fn.next_functions[0][0].variable is x)",
    # The gradient given to backward must be on the output's device.
    "y = torch.rand(3, requires_grad=True, device='meta') * 2\ny.backward(torch.ones(3))",
    "x = torch.rand(3, requires_grad=True, device='meta')\n"
    "g, = torch.autograd.grad((x ** 2).sum(), x, create_graph=True)\n"
    "g.sum().backward()\nresult = (g, x.grad)",
    # A saved tensor modified in place names the meta type as PyTorch's C++ does.
    "x = torch.ones(3, device='meta', requires_grad=True)\nb = x.sigmoid()\nb.mul_(2)\n"
    "b.sum().backward()",
    "x = torch.ones(3, device='meta', requires_grad=True)\nx.add_(1)",
    "c = torch.ones(3, requires_grad=True)\nc.grad = torch.ones(3, device='meta')",
    "c = torch.ones(3, requires_grad=True)\nc.data = torch.ones(3, device='meta')",
    # No memory, so no memory-overlap checks on meta (the same writes refuse on the CPU).
    "result = torch.ones(2, 3, device='meta').expand(4, 2, 3).add_(1)",
    "a = torch.ones(4, device='meta')\nresult = a[1:].copy_(a[:-1])",
    "a = torch.ones(4)\nresult = a[1:].copy_(a[:-1])",
    # A CPU mask selects on meta as many elements as it holds; a CPU tensor moves in by copy_.
    "result = torch.ones(3, device='meta')[torch.tensor([True, False, True])]",
    "result = torch.ones(2, device='meta').copy_(torch.ones(2))",
    "result = torch.tensor(torch.ones(2, device='meta'))",
    "m = torch.ones(2, device='meta', requires_grad=True)\nresult = torch.as_tensor(m) is m",
])
def test_autograd_on_meta_matches_torch(code: str) -> None:
    _same(code)


def test_module_to_meta_gives_new_parameters_as_torch_does() -> None:
    code = (
        "ll = torch.nn.Linear(3, 3)\nw = ll.weight\n"
        "ll(torch.ones(3)).sum().backward()\n"
        "ll.to('meta')\n"
        "inp = torch.rand(3).to('meta')\n"
        "(10 - ll(inp)).sum().backward()\n"
        "result = (ll.weight is w, type(ll.weight).__name__, ll.weight.is_leaf, w.device,\n"
        "          ll.weight.grad, ll.bias.grad, w.grad.device)"
    )
    outcome = _same(code)["outcome"]
    assert outcome[0] == "ok"
    assert outcome[1].startswith("(False, 'Parameter', True, device(type='cpu'), "
                                 "tensor(..., device='meta', size=(3, 3))")


def test_module_to_meta_and_back_within_meta() -> None:
    ll = refimpl.nn.Linear(3, 3).to("meta")
    w = ll.weight
    ll.double()  # meta to meta: the same Parameter takes the cast data
    assert ll.weight is w and w.dtype is refimpl.float64 and w.is_meta


def test_random_factories_on_meta_draw_nothing() -> None:
    # PyTorch's generator does not advance for a meta tensor; refimpl's must not either.
    refimpl.manual_seed(0)
    refimpl.rand(3, device="meta")
    refimpl.randn(3, device="meta")
    after = refimpl.rand(2).numpy().copy()
    refimpl.manual_seed(0)
    np.testing.assert_array_equal(after, refimpl.rand(2).numpy())
    torch.manual_seed(0)
    torch.rand(3, device="meta")
    first = torch.rand(2)
    torch.manual_seed(0)
    assert torch.equal(first, torch.rand(2))


def test_meta_copy_shares_no_memory_with_its_source() -> None:
    cpu = refimpl.zeros(3)
    meta = cpu.to("meta")
    meta.fill_(5.0)
    np.testing.assert_array_equal(cpu.numpy(), np.zeros(3, dtype=np.float32))


def test_numpy_under_no_grad_reads_a_tensor_that_requires_grad() -> None:
    # PyTorch refuses numpy() of a tensor that requires grad only while grad mode is on.
    x = refimpl.ones(2, requires_grad=True)
    with refimpl.no_grad():
        np.testing.assert_array_equal(x.numpy(), np.ones(2, dtype=np.float32))
    with pytest.raises(RuntimeError, match="Can't call numpy\\(\\) on Tensor that requires"):
        x.numpy()
