"""Observation and comparison: identical engines agree; every kind of difference is caught."""

from __future__ import annotations

import re

import numpy as np
import pytest

from conformance.fuzz.differential import (
    FUZZ_TOLERANCES,
    RaisedObservation,
    StepError,
    StepRecord,
    TensorObservation,
    compile_program,
    first_mismatch,
    observe,
    same_value,
    weakest,
)
from conformance.fuzz.program import Program, ProgramStep
from conformance.fuzz.runner import fuzz
from conformance.fuzz.strategies import DEFAULT_EPS, batchnorm_eps


def _tensor(values, dtype="float32") -> TensorObservation:
    array = np.asarray(values, dtype=dtype)
    return TensorObservation(dtype, tuple(array.shape), "cpu", array)


def test_identical_engines_never_mismatch(torch_engine, tmp_path):
    from conformance.engines import load_engine

    result = fuzz(torch_engine, load_engine("torch"), examples=150, seed=11, out=tmp_path)
    assert result.finding is None
    assert result.programs == 150
    assert not any(tmp_path.iterdir())


def test_observe_records_errors_warnings_and_values(torch_engine):
    program = Program((
        ProgramStep("x = torch.ones(2, requires_grad=True)\ny = (x * 3).sum()",
                    ("y", "graph(y)", "x.grad")),
        ProgramStep("y.backward()\ny.backward()", ("x.grad",)),
        ProgramStep("y.grad", ("y.grad",)),
    ))
    records = observe(compile_program(program), torch_engine)
    assert records[0].error is None
    assert records[0].observations["graph(y)"] == "SumBackward0(MulBackward0(AccumulateGrad, None))"
    assert same_value(records[0].observations["y"], _tensor(6.0))
    assert records[0].observations["x.grad"] is None
    error = records[1].error
    assert (error.statement, error.type, error.stage) == (1, "RuntimeError", "backward")
    assert error.message.startswith("Trying to backward through the graph a second time")
    assert same_value(records[1].observations["x.grad"], _tensor([3.0, 3.0]))
    assert records[2].warnings and records[2].warnings[0][0] == "UserWarning"
    assert "non-leaf Tensor" in records[2].warnings[0][1]


@pytest.mark.parametrize(("a", "b", "same"), [
    (_tensor([1.0, np.nan]), _tensor([1.0, np.nan]), True),
    (_tensor([np.inf]), _tensor([-np.inf]), False),
    (_tensor([1.0]), _tensor([1.00001]), True),          # float32 rounding
    (_tensor([1.0], "float64"), _tensor([1.00001], "float64"), False),
    (_tensor([1.0]), _tensor([1.0], "float64"), False),  # dtype
    (_tensor([1.0]), _tensor([[1.0]]), False),           # shape
    (_tensor(1.0), None, False),
    ("MulBackward0(AccumulateGrad)", "MulBackward0(AccumulateGrad)", True),
    ("MulBackward0", "MulBackward1", False),
    (True, 1, False),
    ((_tensor(1.0), None), (_tensor(1.0), None), True),
    (RaisedObservation("AttributeError", "no grad"), None, False),
])
def test_same_value(a, b, same):
    assert same_value(a, b) is same
    assert same_value(b, a) is same


def _record(error=None, warnings=(), **observations) -> StepRecord:
    return StepRecord(error, tuple(warnings), observations)


def test_errors_compare_at_the_weaker_strictness():
    ours = [_record(StepError(0, "RuntimeError", "backward", "Trying to backward. Again."))]
    theirs = [_record(StepError(0, "RuntimeError", "backward", "Trying to backward. Twice."))]
    mismatch = first_mismatch(ours, theirs, "exact")
    assert mismatch is not None and mismatch.differences[0].what == "error"
    assert first_mismatch(ours, theirs, weakest("exact", "prefix")) is None
    other_stage = [_record(StepError(0, "RuntimeError", "forward", "Trying to backward. Again."))]
    assert first_mismatch(ours, other_stage, "type") is not None


def test_first_mismatch_names_the_step_and_every_difference():
    ours = [_record(a=1), _record(a=1, b="x", warnings=[("UserWarning", "w")])]
    theirs = [_record(a=1), _record(a=2, b="y")]
    mismatch = first_mismatch(ours, theirs)
    assert mismatch.step == 1
    assert [d.what for d in mismatch.differences] == ["warnings", "a", "b"]
    assert "UserWarning: w" in mismatch.text("torch", "other")


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_batchnorm_eps_keeps_constant_channels_within_tolerance(torch_engine, dtype):
    """A channel of equal values normalises to exactly 0; PyTorch's rounding of its mean,
    divided by sqrt(eps), must stay below the comparison's atol at the eps the generator picks
    (with the default eps, float32 data of magnitude 14 is off by more than atol)."""
    torch = pytest.importorskip("torch")
    atol = FUZZ_TOLERANCES[dtype][1]
    values = np.random.default_rng(0).uniform(-1.0, 1.0, size=256)
    for bound in (1.0, 5.0, 14.0, 1e3):
        x = torch.tensor(values * bound, dtype=getattr(torch, dtype))[None, :].expand(3, 256)
        eps = batchnorm_eps(dtype, bound)
        out = torch.nn.BatchNorm1d(256, eps=eps, dtype=getattr(torch, dtype))(x)
        assert float(out.detach().abs().max()) <= atol, (bound, eps)
    if dtype == "float32":
        x = torch.tensor(values * 14.0, dtype=torch.float32)[None, :].expand(3, 256)
        assert float(torch.nn.BatchNorm1d(256)(x).detach().abs().max()) > atol
    else:
        assert batchnorm_eps(dtype, 100.0) == DEFAULT_EPS


def test_generated_batchnorms_get_a_safe_eps():
    from hypothesis import HealthCheck, given, seed, settings

    from conformance.fuzz.strategies import programs

    made: list[str] = []

    @seed(3)
    @settings(max_examples=300, deadline=None, database=None,
              suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
    @given(programs(families=("modules", "batchnorm")))
    def collect(program: Program) -> None:
        made.extend(re.findall(r"nn\.BatchNorm[12]d\((.*?)\)(\.double\(\))?$",
                               program.source(), flags=re.M))

    collect()
    float32 = [args for args, double in made if not double]
    # Inputs bounded near 0 (zeros, zero_) keep the default eps; rand-derived ones do not.
    with_eps = [args for args in float32 if "eps=" in args]
    assert float32 and len(with_eps) >= 0.8 * len(float32), (len(with_eps), len(float32))


def test_a_float64_value_computed_in_float32_gets_the_float32_tolerance():
    rounded = _tensor([1.0 + 5e-7], "float64")  # four float32 ulps away from 1.0
    assert not same_value(_tensor([1.0], "float64"), rounded)
    assert same_value(_tensor([1.0], "float64"), rounded, computed_in="float32")
    assert not same_value(_tensor([1.0], "float64"), _tensor([1.001], "float64"),
                          computed_in="float32")
    # Only ever looser: a float32 value computed from float64 keeps the float32 tolerance.
    assert same_value(_tensor([1.0]), _tensor([1.00001]), computed_in="float64")


def _perturbed(records: list[StepRecord], key: str, relative: float) -> list[StepRecord]:
    last = records[-1]
    value = last.observations[key]
    moved = TensorObservation(value.dtype, value.shape, value.device,
                              value.values * (1.0 + relative))
    return [*records[:-1], StepRecord(last.error, last.warnings,
                                      {**last.observations, key: moved})]


def _batchnorm_program(moved_from: str) -> Program:
    kw = "" if moved_from == "float32" else ", dtype=torch.float64"
    precision = (("z", "float32"),) if moved_from == "float32" else ()
    return Program((ProgramStep(
        f"x = torch.rand(2, 3, 2, 2{kw}, requires_grad=True)\n"
        f"m = nn.BatchNorm2d(3){'' if moved_from == 'float32' else '.double()'}\n"
        "z = m(x).double()", ("z",), precision=precision),))


def test_a_moved_float32_batchnorm_result_is_not_reported_for_float32_rounding(torch_engine):
    program = _batchnorm_program("float32")
    records = observe(compile_program(program), torch_engine)
    assert records[0].observations["z"].dtype == "float64"
    other = _perturbed(records, "z", 5e-7)  # a few float32 ulps
    assert first_mismatch(records, other, program=program) is None
    # Without the program's precision the value would be held to float64's tolerance.
    assert first_mismatch(records, other) is not None
    wrong = first_mismatch(records, _perturbed(records, "z", 1e-3), program=program)
    assert wrong is not None and wrong.differences[0].what == "z"


def test_a_genuine_float64_difference_is_still_reported(torch_engine):
    program = _batchnorm_program("float64")
    records = observe(compile_program(program), torch_engine)
    mismatch = first_mismatch(records, _perturbed(records, "z", 5e-7), program=program)
    assert mismatch is not None and mismatch.differences[0].what == "z"


def test_an_observation_that_raises_differently_becomes_a_raising_step(torch_engine, tmp_path):
    """An expect cannot say that observing raises: the finding runs the observation as a
    statement that must raise the reference's error, so the case still tells engines apart."""
    from dataclasses import replace

    from conformance.fuzz.findings import build_finding, write_finding
    from conformance.run.executor import run_case

    program = Program((
        ProgramStep("v1 = torch.rand(())\nwith torch.no_grad():\n    v2 = v1.reshape(1, -1)\n"
                    "v2.requires_grad_()\nv3 = v2.squeeze(0)\nv1.add_(1.0)",
                    ("v3.is_leaf", "v3.requires_grad")),
    ))
    ours = observe(compile_program(program), torch_engine)
    raised = ours[0].observations["v3.is_leaf"]
    assert isinstance(raised, RaisedObservation)
    theirs = [replace(ours[0], observations={
        **ours[0].observations,
        "v3.is_leaf": RaisedObservation(raised.type, raised.message.replace("Squeeze1", "X"))})]
    mismatch = first_mismatch(ours, theirs)
    finding = write_finding(build_finding(program, mismatch, torch_engine, torch_engine, ours),
                            tmp_path)
    assert finding.lint_problems == ()
    last = finding.case["steps"][-1]
    assert last["run"] == "v3.is_leaf"
    assert last["raises"] == {"type": "RuntimeError", "stage": "attribute",
                              "message": raised.message}
    from conformance.casefile.loader import load

    case = load([finding.yaml_path]).cases[0]
    assert run_case(case, torch_engine).verdict == "passed"
