"""In-place ops: version counters, the three PyTorch errors and CopySlices, against PyTorch."""

from __future__ import annotations

import pytest
from refimpl_helpers import run_program

import refimpl

torch = pytest.importorskip("torch", reason="PyTorch is the oracle these tests compare with")

PROGRAMS = {
    "leaf_inplace": "x = torch.rand(3, requires_grad=True); x.add_(1)",
    "leaf_view_inplace": "x = torch.rand(3, requires_grad=True); x[0:2].mul_(2)",
    "leaf_setitem": "x = torch.rand(3, requires_grad=True); x[0] = 1.0",
    "leaf_inplace_no_grad_ok": "z = torch.tensor(2.0, requires_grad=True)\n"
                               "with torch.no_grad():\n    z.add_(1)\n"
                               "result = (z, z._version)",
    "versions": "g = torch.rand(3); h = g * 2; v0 = h._version; h.add_(1); "
                "w = g[0:2]; w.mul_(2); result = (v0, h._version, g._version, w._version)",
    "iadd_operator": "x = torch.tensor([1., 2.]); y = x; y += 1; result = (x, y is x)",
    "inplace_chain_graph": "v = torch.tensor([1., 2., 3.], requires_grad=True); w = v * 1; "
                           "w.add_(1); p = torch.tensor([1., 2., 3.], requires_grad=True); "
                           "w.mul_(p); w.sum().backward(); "
                           "result = (type(w.grad_fn).__name__, v.grad, p.grad)",
    "zero_and_copy_nodes": "w = torch.rand(3, requires_grad=True) * 1; w.zero_(); "
                           "a = type(w.grad_fn).__name__; w.copy_(torch.rand(3)); "
                           "result = (a, type(w.grad_fn).__name__)",
    "leaf_becomes_nonleaf": "n = torch.zeros(3); n.add_(torch.ones(3, requires_grad=True)); "
                            "result = (type(n.grad_fn).__name__, n.is_leaf, n.requires_grad)",
    "setitem_nonleaf": "v = torch.tensor([1., 2., 3.], requires_grad=True); w = v * 1; "
                       "w[0] = 5.0; w.sum().backward(); "
                       "result = (w, type(w.grad_fn).__name__, v.grad)",
    "setitem_value_requires_grad": "w = torch.ones(3) * 1; "
                                   "q = torch.tensor([2.], requires_grad=True); w[0:1] = q * 3; "
                                   "(w * w).sum().backward(); result = (w, q.grad, "
                                   "[None if n is None else type(n).__name__ "
                                   "for n, _ in w.grad_fn.next_functions])",
    "view_written_in_place": "v = torch.tensor([1., 2., 3.], requires_grad=True); w = v * 1; "
                             "w2 = w[0:2]; w2.mul_(2); (w * w).sum().backward(); "
                             "result = (type(w.grad_fn).__name__, type(w2.grad_fn).__name__, "
                             "v.grad, w._version)",
    "int_inplace_float": "torch.tensor([1, 2]).add_(1.5)",
}


@pytest.mark.parametrize("name", list(PROGRAMS))
def test_inplace_like_torch(name: str) -> None:
    code = PROGRAMS[name]
    assert run_program(refimpl, code) == run_program(torch, code)


def test_detach_shares_version_counter_and_data_does_not() -> None:
    x = refimpl.tensor([1.0, 2.0])
    d = x.detach()
    d.add_(1)
    assert (x._version, d._version) == (1, 1)
    data = x.data
    data.add_(1)
    assert x.tolist() == [3.0, 4.0] and x._version == 1
