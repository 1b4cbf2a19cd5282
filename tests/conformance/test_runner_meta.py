"""Tensors without values (PyTorch's meta device): observed by shape, dtype, device and nodes.

A value expectation on such a tensor must fail with a sentence saying what to expect instead,
never crash the runner; engines without a meta device report the cases as unsupported.
"""

from __future__ import annotations

import subprocess
import sys
import types

import numpy as np
import pytest

from conformance.casefile.case import Case
from conformance.engines import TorchLikeEngine, load_engine
from conformance.run.compare import compare, describe
from conformance.run.executor import run_case
from conformance.run.observe import TensorSeen, helpers
from conformance.run.repro import repro_script

ENGINES = ["torch", "refimpl"]


def case(*steps: dict, features: tuple[str, ...] = ("meta",)) -> dict:
    return {"id": "topic.case", "rule": "A rule.", "features": list(features),
            "steps": list(steps)}


@pytest.fixture(params=ENGINES)
def engine(request: pytest.FixtureRequest, torch_engine):
    return torch_engine if request.param == "torch" else load_engine("refimpl")


def _meta_grad(engine):
    ns = engine.namespace(np.random.default_rng(0))
    exec("x = torch.rand(3, requires_grad=True, device='meta')\n(x * 2).sum().backward()", ns)
    return ns["x"].grad


def test_torch_like_engines_declare_meta(engine):
    assert engine.supports("meta")


def test_a_torch_like_module_without_meta_lacks_the_feature(monkeypatch):
    module = types.ModuleType("nometa")

    def empty(*size, device=None):
        raise RuntimeError(f"Expected one of cpu, cuda device type at start of device string: "
                           f"{device}")

    module.empty = empty
    monkeypatch.setitem(sys.modules, "nometa", module)
    engine = TorchLikeEngine("nometa", "nometa")
    assert not engine.supports("meta")
    assert engine.supports("modules")


def test_meta_tensor_is_observed_without_its_values(engine):
    grad = _meta_grad(engine)
    assert not engine.has_values(grad)
    assert compare(grad, {"shape": [3], "dtype": "float32", "device": "meta"}, engine,
                   {}) is None
    assert compare(grad, {"shape": [2]}, engine, {}) == "expected shape [2], observed [3]"
    assert compare(grad, {"device": "cpu"}, engine, {}) == \
        "expected device cpu, observed meta"
    assert describe(grad, engine) == "tensor(..., shape=[3], dtype=float32, device=meta)"
    assert compare(grad, None, engine, {}) == \
        "expected None, observed tensor(..., shape=[3], dtype=float32, device=meta)"
    observe = helpers(engine)
    assert (observe["shape"](grad), observe["dtype"](grad), observe["device"](grad)) == \
        ([3], "float32", "meta")


@pytest.mark.parametrize("expected", [[2.0, 2.0, 2.0], {"value": [2.0, 2.0, 2.0]},
                                      {"np": "np.full(3, 2.0)"}, {"shape": [3], "value": 2.0}])
def test_value_expectation_on_meta_tensor_fails_clearly(engine, expected):
    problem = compare(_meta_grad(engine), expected, engine, {})
    assert problem == ("values of a meta tensor cannot be read; expect its shape/dtype/device "
                       "instead, e.g. {shape: [3], dtype: float32, device: meta}")


def test_np_expectation_reading_a_meta_tensor_names_it(torch_engine):
    import torch

    cpu = torch.ones(3)
    problem = compare(cpu, {"np": "m * 0 + 1"}, torch_engine,
                      {"m": TensorSeen("tensor", "float32", (3,), "meta", None)})
    assert problem == ("the expected value reads m, a meta tensor whose values cannot be read; "
                       "expect its shape/dtype/device instead")


def test_value_helper_refuses_a_meta_tensor(engine):
    with pytest.raises(ValueError, match="values of a meta tensor cannot be read"):
        helpers(engine)["value"](_meta_grad(engine))
    with pytest.raises(ValueError, match="has no values"):
        engine.to_numpy(_meta_grad(engine))


def test_case_on_meta_passes_with_shape_expectations(engine):
    result = run_case(case({
        "run": "x = torch.rand(2, 3, requires_grad=True, device='meta')\n"
               "y = (x * 2).sum()\ny.backward()",
        "expect": {"x.grad": {"shape": [2, 3], "dtype": "float32", "device": "meta"},
                   "graph(y)": "SumBackward0(MulBackward0(AccumulateGrad, None))",
                   "shape(x.grad)": [2, 3], "device(x.grad)": "meta", "x.grad.is_meta": True,
                   "y": {"shape": [], "device": "meta"}},
    }), engine)
    assert (result.verdict, result.message) == ("passed", "")


def test_value_expectation_in_a_case_fails_and_names_the_step(engine):
    result = run_case(case(
        {"run": "x = torch.rand(2, requires_grad=True, device='meta')"},
        {"run": "(x * 2).sum().backward()", "expect": {"x.grad": [2.0, 2.0]}},
    ), engine)
    assert (result.verdict, result.step) == ("failed", 1)
    assert result.message == (
        "x.grad: values of a meta tensor cannot be read; expect its shape/dtype/device "
        "instead, e.g. {shape: [2], dtype: float32, device: meta}")
    assert result.actual == "tensor(..., shape=[2], dtype=float32, device=meta)"


def test_np_expectation_on_a_cpu_tensor_reading_a_meta_one_fails(engine):
    result = run_case(case({
        "run": "m = torch.rand(2, device='meta')\nc = torch.ones(2)",
        "expect": {"c": {"np": "m * 0 + 1"}},
    }), engine)
    assert result.verdict == "failed"
    assert "reads m, a meta tensor whose values cannot be read" in result.message


def test_meta_cases_are_unsupported_without_the_feature(torch_engine):
    mygrad = load_engine("mygrad")
    if not mygrad.available:
        pytest.skip("mygrad is not installed")
    result = run_case(case({"run": "x = torch.rand(2, device='meta')",
                            "expect": {"device(x)": "meta"}}), mygrad)
    assert (result.verdict, result.message) == ("unsupported", "engine lacks feature meta")


def test_modules_created_on_meta_are_not_redrawn(engine):
    # The runner redraws random parameters from its own generator; a meta parameter has no
    # values to redraw and must not make the case crash.
    result = run_case(case({"run": "ll = nn.Linear(3, 2, device='meta')",
                            "expect": {"ll.weight": {"shape": [2, 3], "device": "meta"}}},
                           features=("meta", "modules")), engine)
    assert (result.verdict, result.message) == ("passed", "")


@pytest.mark.parametrize("name", ENGINES)
def test_repro_script_prints_meta_tensors_without_reading_them(name, tmp_path):
    engine = load_engine(name)
    if not engine.available:
        pytest.skip(f"{name} is not available")
    repro = repro_script(Case.from_dict(case({
        "run": "x = torch.rand(2, requires_grad=True, device='meta')\n(x * 2).sum().backward()",
        "expect": {"x.grad": {"shape": [2], "device": "meta"}},
    })), engine)
    script = tmp_path / "repro.py"
    # The case's names live in the script's case namespace, `_case`, as in the runner.
    script.write_text(repro + "\ntry:\n    value(_case['x'].grad)\nexcept ValueError as error:\n"
                      "    print('value:', error)\n")
    out = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                         check=True).stdout
    assert "x.grad = tensor(..., device='meta', size=(2,))" in out
    assert "value: a meta tensor has no values" in out
