"""The MyGrad adapter translates the torch-shaped API onto MyGrad's own operations."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

pytest.importorskip("mygrad", reason="MyGrad is not installed (pip install -c constraints.txt "
                    "mygrad)")

from conformance.engines import load_engine  # noqa: E402 - only once MyGrad is known present


@pytest.fixture()
def ns() -> dict[str, Any]:
    return load_engine("mygrad").namespace(np.random.default_rng(0))


def node(tensor: Any) -> str | None:
    return None if tensor.grad_fn is None else type(tensor.grad_fn).__name__


def test_methods_map_to_mygrad_operations(ns: dict[str, Any]) -> None:
    torch = ns["torch"]
    x = torch.tensor([[1.0, -2.0, 3.0], [4.0, 5.0, -6.0]], requires_grad=True)
    cases = {
        "Add": x.add(1), "Subtract": x.sub(1), "Multiply": x.mul(2), "Divide": x.div(2),
        "Power": x.pow(3), "Negative": x.neg(), "Sum": x.sum(1, keepdim=True),
        "Mean": torch.mean(x, 0), "Reshape": x.view(-1), "Transpose": x.t(),
        "SwapAxes": x.transpose(0, 1), "ExpandDims": x.unsqueeze(0),
        "BroadcastTo": x[0].expand(2, -1), "GetItem": x.select(1, 2), "ReLu": x.relu(),
        "Positive": x.clone(), "Concatenate": torch.cat([x, x]), "Stack": torch.stack([x, x]),
        "Where": torch.where(x > 0, x, 0.0), "MatMul": x.mm(x.t()),
        "Softmax": ns["F"].softmax(x, dim=1),
    }
    assert {name: node(result) for name, result in cases.items()} == \
        {name: name for name in cases}
    assert cases["BroadcastTo"].shape == (2, 3)
    assert cases["GetItem"].tolist() == [3.0, -6.0]
    assert cases["Sum"].shape == (2, 1)


def test_max_by_dim_gives_values_and_constant_indices(ns: dict[str, Any]) -> None:
    x = ns["torch"].tensor([[1.0, 5.0], [7.0, 2.0]], requires_grad=True)
    values, indices = x.max(1)
    assert values.tolist() == [5.0, 7.0] and node(values) == "Max"
    assert indices.tolist() == [1, 0] and not indices.requires_grad
    assert node(x.max()) == "Max" and x.max().item() == 7.0


def test_comparisons_are_constant_tensors(ns: dict[str, Any]) -> None:
    x = ns["torch"].tensor([1.0, 2.0], requires_grad=True)
    mask = x > 1.5
    assert mask.tolist() == [False, True]
    assert not mask.requires_grad and mask.is_leaf


def test_dtype_moves_use_astype_and_keep_identity_when_nothing_changes(ns: dict[str, Any]
                                                                       ) -> None:
    torch = ns["torch"]
    x = torch.tensor([1.0, 2.0], requires_grad=True)
    assert x.float() is x and x.to(torch.float32) is x and x.cpu() is x
    d = x.double()
    assert d.dtype == np.float64 and d.grad_fn is None  # MyGrad's astype leaves the graph


def test_in_place_methods_mutate_through_mygrad(ns: dict[str, Any]) -> None:
    torch = ns["torch"]
    x = torch.tensor([1.0, 2.0], requires_grad=True)
    y = x * 2
    assert y.add_(1) is y and y.tolist() == [3.0, 5.0] and node(y) == "Add"
    y.zero_()
    assert y.tolist() == [0.0, 0.0]
    y[0] = 4.0
    assert y.tolist() == [4.0, 0.0]


def test_missing_counterparts_raise_attribute_error(ns: dict[str, Any]) -> None:
    torch = ns["torch"]
    x = torch.tensor([1.0], requires_grad=True)
    with pytest.raises(AttributeError, match="detach_"):
        x.detach_()
    with pytest.raises(AttributeError, match="F.linear"):
        ns["F"].linear(x, x)
    with pytest.raises(AttributeError, match="nn.Linear"):
        ns["nn"].Linear(1, 1)
    assert not hasattr(torch, "autograd")
