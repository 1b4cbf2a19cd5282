"""copy.deepcopy of tensors (cases cannot import ``copy``) and bfloat16, against PyTorch 2.13."""

from __future__ import annotations

import copy
from typing import Any

import numpy as np
import pytest

import refimpl

torch = pytest.importorskip("torch", reason="PyTorch is the oracle these tests compare with")


@pytest.mark.parametrize("lib", [refimpl, torch], ids=["refimpl", "torch"])
def test_deepcopy_of_a_leaf_copies_values_flag_and_grad(lib: Any) -> None:
    x = lib.tensor([[1.0, 2.0], [3.0, 4.0]], requires_grad=True)
    (x * 2).sum().backward()
    c = copy.deepcopy(x)
    assert c is not x and c.is_leaf and c.requires_grad
    assert c.grad is not None and c.grad is not x.grad
    np.testing.assert_array_equal(c.grad.numpy(), [[2.0, 2.0], [2.0, 2.0]])
    with lib.no_grad():
        c.mul_(10)
        c.grad.zero_()
    np.testing.assert_array_equal(x.detach().numpy(), [[1.0, 2.0], [3.0, 4.0]])
    np.testing.assert_array_equal(x.grad.numpy(), [[2.0, 2.0], [2.0, 2.0]])


@pytest.mark.parametrize("lib", [refimpl, torch], ids=["refimpl", "torch"])
def test_deepcopy_keeps_layout_and_shared_tensors(lib: Any) -> None:
    t = lib.ones(2, 3).t()
    pair = copy.deepcopy([t, t])
    assert pair[0] is pair[1]
    assert not pair[0].is_contiguous()
    assert copy.deepcopy(lib.ones(2)).requires_grad is False


@pytest.mark.parametrize("lib", [refimpl, torch], ids=["refimpl", "torch"])
def test_deepcopy_of_a_non_leaf_is_refused(lib: Any) -> None:
    y = lib.ones(2, requires_grad=True) * 2
    with pytest.raises(RuntimeError) as info:
        copy.deepcopy(y)
    assert str(info.value) == (
        "Only Tensors created explicitly by the user (graph leaves) support the deepcopy "
        "protocol at the moment.  If you were attempting to deepcopy a module, this may be "
        "because of a torch.nn.utils.weight_norm usage, see "
        "https://github.com/pytorch/pytorch/pull/103001")


def test_bfloat16_follows_pytorch_where_ml_dtypes_is_installed() -> None:
    pytest.importorskip("ml_dtypes", reason="refimpl's bfloat16 arrays come from ml_dtypes")
    observed = []
    for lib in (refimpl, torch):
        b = lib.tensor([1.5, 2.25], dtype=lib.bfloat16, requires_grad=True)
        (b * b).sum().backward()
        h = lib.ones(2, dtype=lib.float16)
        observed.append((str(b.grad.dtype), b.grad.float().tolist(), str((b + h).dtype),
                         str((b * 1j).dtype), b.type()))
    assert observed[0] == observed[1]
    with pytest.raises(RuntimeError, match="c10::BFloat16 without overflow"):
        refimpl.full((2,), 1e39, dtype=refimpl.bfloat16)
