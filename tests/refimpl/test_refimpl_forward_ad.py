"""Forward-mode AD (``autograd.forward_ad``) against PyTorch 2.13: tangents of every op case,
the level's lifetime, detach, and the errors."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from refimpl_cases import CASES, OpCase
from refimpl_helpers import run_program

import refimpl

torch = pytest.importorskip("torch", reason="PyTorch is the oracle these tests compare with")


def _tangent(lib: Any, case: OpCase, arrays: list[np.ndarray], tangents: list[np.ndarray],
             requires_grad: bool) -> tuple[np.ndarray, np.ndarray]:
    fwad = lib.autograd.forward_ad
    with fwad.dual_level():
        ins = [fwad.make_dual(lib.tensor(a, requires_grad=requires_grad), lib.tensor(t))
               for a, t in zip(arrays, tangents, strict=True)]
        out = fwad.unpack_dual(case.fn(lib, *ins))
        assert out.tangent is not None
        return (out.primal.detach().numpy(force=True), out.tangent.detach().numpy(force=True))


@pytest.mark.parametrize("requires_grad", [False, True], ids=["plain", "requires_grad"])
@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_tangent_matches_torch(case: OpCase, requires_grad: bool) -> None:
    arrays = case.arrays(np.float64)
    rng = np.random.default_rng(5)
    tangents = [rng.uniform(-1, 1, a.shape) for a in arrays]
    ours = _tangent(refimpl, case, arrays, tangents, requires_grad)
    theirs = _tangent(torch, case, arrays, tangents, requires_grad)
    np.testing.assert_allclose(ours[0], theirs[0], rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(ours[1], theirs[1], rtol=1e-9, atol=1e-12)


PROGRAMS = {
    "plain-tensor-has-no-tangent": """
fw = torch.autograd.forward_ad
x = torch.ones(2)
with fw.dual_level():
    u = fw.unpack_dual(x)
result = (u.primal is x, u.tangent, type(u).__name__, u._fields)
""",
    "exit-drops-tangents": """
fw = torch.autograd.forward_ad
with fw.dual_level() as level:
    d = fw.make_dual(torch.tensor([1., 2.]), torch.tensor([3., 4.]))
    y = d * d
    inside = fw.unpack_dual(y).tangent
result = (level, inside, fw.unpack_dual(y).tangent, fw.unpack_dual(d).tangent, y)
""",
    "detach-drops-tangent": """
fw = torch.autograd.forward_ad
with fw.dual_level():
    d = fw.make_dual(torch.tensor(1.), torch.tensor(2.))
    f = d * 3
    e = fw.unpack_dual(d.detach()).tangent
    f.detach_()
    result = (fw.unpack_dual(d).tangent, e, fw.unpack_dual(f).tangent)
""",
    "no-grad-keeps-forward-ad": """
fw = torch.autograd.forward_ad
with fw.dual_level():
    d = fw.make_dual(torch.tensor([1., 2.]), torch.tensor([1., -1.]))
    with torch.no_grad():
        result = fw.unpack_dual(d.exp() * 2).tangent
""",
    "in-place-updates-tangent": """
fw = torch.autograd.forward_ad
with fw.dual_level():
    d = fw.make_dual(torch.tensor([1., 2.]), torch.tensor([0.5, -1.]))
    q = d * 1
    q.mul_(d)
    result = fw.unpack_dual(q).tangent
""",
    "dual-is-a-view-and-prints-its-tangent": """
fw = torch.autograd.forward_ad
x = torch.tensor([1., 2.], requires_grad=True)
with fw.dual_level():
    d = fw.make_dual(x, torch.tensor([0.5, -1.]))
    p = fw.unpack_dual(d).primal
    result = (d, d._base is x, p, p._base is x, fw.unpack_dual(d).tangent is not None)
""",
    "long-repr-wraps-the-tangent": """
fw = torch.autograd.forward_ad
with fw.dual_level():
    result = fw.make_dual(torch.tensor([1.25, 2.5, 3.75]), torch.tensor([0.5, -1.0, 2.0])) * 2
""",
    "make-dual-outside-a-level": """
torch.autograd.forward_ad.make_dual(torch.ones(2), torch.ones(2))
""",
    "nested-levels": """
fw = torch.autograd.forward_ad
with fw.dual_level():
    with fw.dual_level():
        pass
""",
    "tangent-of-another-size": """
fw = torch.autograd.forward_ad
with fw.dual_level():
    fw.make_dual(torch.ones(2), torch.ones(3))
""",
    "integer-primal": """
fw = torch.autograd.forward_ad
with fw.dual_level():
    fw.make_dual(torch.ones(2, dtype=torch.int64), torch.ones(2))
""",
    "integer-tangent": """
fw = torch.autograd.forward_ad
with fw.dual_level():
    fw.make_dual(torch.ones(2), torch.ones(2, dtype=torch.int64))
""",
    "exit-without-a-level": """
torch.autograd.forward_ad.exit_dual_level()
""",
}


@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_forward_ad_program_matches_torch(name: str) -> None:
    code = PROGRAMS[name]
    assert run_program(refimpl, code) == run_program(torch, code)
