"""Matrix products refuse mixed dtypes with the message of the kernel PyTorch dispatches to."""

from __future__ import annotations

import pytest

import refimpl

torch = pytest.importorskip("torch", reason="these tests compare refimpl with PyTorch")

FORMS = {
    "mm": lambda t, a, b: a @ b,
    "mv": lambda t, a, b: t.matmul(a, b[0]),
    "vm": lambda t, a, b: a[0] @ b,
    "dot": lambda t, a, b: a[0].dot(b[0]),
    "Tensor.mv": lambda t, a, b: a.mv(b[0]),
    "torch.mm": lambda t, a, b: t.mm(a, b),
}


def raised(engine, form, first, second):
    a = engine.ones(2, 2, dtype=getattr(engine, first))
    b = engine.ones(2, 2, dtype=getattr(engine, second))
    with pytest.raises(RuntimeError) as info:
        FORMS[form](engine, a, b)
    return str(info.value)


@pytest.mark.parametrize("form", sorted(FORMS))
@pytest.mark.parametrize(("first", "second"), [("float32", "float64"), ("float64", "float32")])
def test_mixed_dtype_products_raise_like_torch(form, first, second):
    assert raised(refimpl, form, first, second) == raised(torch, form, first, second)
