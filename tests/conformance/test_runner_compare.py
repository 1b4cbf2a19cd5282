"""Comparison rules: dtype-aware tolerances, NaN and infinities, mappings, NumPy expressions."""

from __future__ import annotations

import numpy as np
import pytest

from conformance.run.compare import compare


@pytest.mark.parametrize(("observed", "expected", "ok"), [
    (np.float32([1.0]), [1.000001], True),
    (np.float32([1.0]), [1.0001], False),
    (np.float64([1.0]), [1.0 + 1e-8], True),
    (np.float64([1.0]), [1.000001], False),
    (np.float16([1.0]), [1.0005], True),
    (np.int64([2, 3]), [2, 3], True),
    (np.int64([2, 3]), [2, 4], False),
    (np.array([np.nan, np.inf]), [float("nan"), float("inf")], True),
    (np.array([np.inf]), [float("-inf")], False),
    (np.float32([[1.0, 2.0]]), [1.0, 2.0], False),
    (np.array(True), True, True),
])
def test_array_tolerances(observed, expected, ok):
    assert (compare(observed, expected, None, {}) is None) is ok


def test_tensor_mapping_checks_each_key(torch_engine):
    import torch

    t = torch.tensor([[1.0, 2.0]], dtype=torch.float64)
    assert compare(t, {"value": [[1.0, 2.0]], "dtype": "float64", "shape": [1, 2],
                       "device": "cpu"}, torch_engine, {}) is None
    assert "expected dtype float32" in compare(t, {"dtype": "float32"}, torch_engine, {})
    assert "expected shape [2]" in compare(t, {"shape": [2]}, torch_engine, {})
    assert compare(t, {"np": "a * 2"}, torch_engine, {"a": np.array([[0.5, 1.0]])}) is None
    assert compare(t, None, torch_engine, {}).startswith("expected None")


@pytest.mark.parametrize(("observed", "expected", "ok"), [
    (None, None, True), (1, None, False), (True, True, True), (True, 1, False),
    (1, True, False), (3, 3, True), (2.0000001, 2, True), (2.1, 2, False),
    ("MulBackward0", "MulBackward0", True), ((2, 3), [2, 3], True), ([2, 3], [2], False),
    (1.5, {"value": 1.5}, False),
])
def test_python_values(observed, expected, ok):
    assert (compare(observed, expected, None, {}) is None) is ok
