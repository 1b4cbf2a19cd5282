"""Examples as PyTorch sessions: values printed as PyTorch 2.13 prints them, with NumPy alone."""

from __future__ import annotations

import subprocess
import sys
import warnings

import numpy as np
import pytest

from conformance.casefile.case import Case
from conformance.reference import printing
from conformance.reference.session import observation, render_case

RNG = np.random.default_rng(0)
VALUES = [
    [6.0, 12.0], [[1, 2], [3, 4]], 0.5, 3.0, -2.5, 7, True, [True, False], [], [[]],
    [1e-5, 1.0], [1e9, 2.0], [float("nan"), 1.0, float("inf"), -float("inf")], [-0.0, 0.0],
    [0.1, 0.25, -3.5], [123456.0, 0.001], list(range(30)), list(range(2000)),
    RNG.standard_normal(40).tolist(), RNG.standard_normal((3, 4, 5)).tolist(),
    RNG.random(1200).tolist(), [1 + 2j, 3 - 1j], [[0.0]], [1e38, 3.0e38],
]
DTYPES = [None, "float64", "float16", "bfloat16", "int32", "int64", "uint8", "bool"]


def _fits(values, dtype):
    flat = np.ravel(np.asarray(values, dtype=object)).tolist()
    if any(isinstance(v, complex) for v in flat):
        return dtype is None
    if dtype in ("int32", "int64", "uint8"):
        return all(isinstance(v, int) and 0 <= v < 256 for v in flat)
    if dtype == "bool":
        return all(isinstance(v, bool) for v in flat)
    return True


@pytest.mark.parametrize("values", VALUES, ids=lambda v: repr(v)[:30])
def test_tensor_repr_matches_pytorch(values):
    torch = pytest.importorskip("torch")
    for dtype in DTYPES:
        if not _fits(values, dtype):
            continue
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # float16 overflow to inf is what PyTorch shows too
            expected = repr(torch.tensor(values, dtype=getattr(torch, dtype) if dtype else None))
            assert printing.tensor_repr(values, dtype) == expected, dtype


def test_device_dtype_and_size_as_pytorch_prints_them():
    assert printing.tensor_repr([1.0, 2.0], "float64", "cuda:0") == \
        "tensor([1., 2.], device='cuda:0', dtype=torch.float64)"
    assert printing.tensor_repr(3.0, shape=[2, 2]) == "tensor([[3., 3.],\n        [3., 3.]])"
    assert printing.device_repr("cuda:0") == "device(type='cuda', index=0)"
    assert printing.device_repr("meta") == "device(type='meta')"
    assert printing.size_repr([3, 4]) == "torch.Size([3, 4])"


def _case(*steps):
    return Case.from_dict({"id": "t.x", "rule": "r", "steps": list(steps)})


def test_helpers_become_the_pytorch_they_stand_for():
    kinds = {"y": "tensor"}
    assert observation("grad_fn_name(y)", "MulBackward0", kinds) == \
        [">>> y.grad_fn", "<MulBackward0 object at 0x...>"]
    assert observation("grad_fn_name(x + y)", None, kinds) == \
        [">>> print((x + y).grad_fn)", "None"]
    assert observation("node_name(y.grad_fn.next_functions[0][0])", "AccumulateGrad") == \
        [">>> y.grad_fn.next_functions[0][0]", "<AccumulateGrad object at 0x...>"]
    assert observation("shape(y)", [2, 3]) == [">>> y.shape", "torch.Size([2, 3])"]
    assert observation("dtype(y)", "float64") == [">>> y.dtype", "torch.float64"]
    assert observation("graph(y)", "MulBackward0(AccumulateGrad, None)") == \
        [">>> print(graph(y))", "MulBackward0(AccumulateGrad, None)"]


def test_python_values_and_tensors_are_told_apart_by_the_code():
    text = render_case(_case({
        "run": "x = torch.tensor([1., 2.], requires_grad=True)\n"
               "n = len(x.shape)\ni = x.argmax()\ng = torch.autograd.grad(x.sum(), x)",
        "expect": {"n": 1, "i": 1, "x.is_leaf": True, "g": [[1.0, 1.0]], "g[0]": [1.0, 1.0],
                   "(x.is_leaf, x.requires_grad)": [True, True],
                   "x.grad": {"value": [1.0], "dtype": "float64"},
                   "x.data": {"np": "x * 2"}}})).text
    assert ">>> n\n1\n" in text
    assert ">>> i\ntensor(1)\n" in text
    assert ">>> x.is_leaf\nTrue\n" in text
    assert ">>> g\n(tensor([1., 1.]),)\n" in text
    assert ">>> g[0]\ntensor([1., 1.])\n" in text
    assert ">>> (x.is_leaf, x.requires_grad)\n(True, True)\n" in text
    assert ">>> x.grad\ntensor([1.], dtype=torch.float64)\n" in text
    assert ">>> x.data  # a tensor equal to x * 2, computed with NumPy" in text


def test_statements_errors_and_warnings():
    rendered = render_case(_case(
        {"run": "x = torch.ones(2, requires_grad=True)\nwith torch.no_grad():\n    y = x * 2"},
        {"run": "g = y.grad", "warns": [{"type": "UserWarning", "message": "careful"}]},
        {"run": "y.requires_grad = False",
         "raises": {"type": "RuntimeError", "message": "only leaves",
                    "messages": [{"torch": "<2.1", "message": "older words"}]}}))
    assert rendered.text.splitlines() == [
        ">>> x = torch.ones(2, requires_grad=True)",
        ">>> with torch.no_grad():",
        "...     y = x * 2",
        "...",
        ">>> g = y.grad",
        "UserWarning: careful",
        ">>> y.requires_grad = False",
        "Traceback (most recent call last):",
        "  ...",
        "RuntimeError: only leaves",
    ]
    assert rendered.older_messages == [("RuntimeError", "<2.1", "older words")]


def test_the_runner_does_not_need_sphinx():
    code = ("import sys, conformance.cli, conformance.reference.generate\n"
            "assert not {'sphinx', 'docutils', 'myst_parser'} & set(sys.modules), "
            "sorted(m for m in sys.modules if m.startswith(('sphinx', 'docutils')))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120, check=False)
    assert done.returncode == 0, done.stderr
