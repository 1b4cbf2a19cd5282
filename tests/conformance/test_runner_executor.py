"""Executor verdicts, stages, messages, warnings, data, timeouts and crash isolation."""

from __future__ import annotations

import ast
from pathlib import Path

import numpy as np
import pytest

from conformance.casefile.case import Case
from conformance.casefile.loader import load
from conformance.engines.base import Engine
from conformance.run.executor import clean_warning, message_matches, run_case
from conformance.run.handle import InProcess
from conformance.run.refusals import stage
from conformance.verdict.expectations import Expectations
from conformance.verdict.judge import judge

NONLEAF = ("you can only change requires_grad flags of leaf variables. If you want to use a "
           "computed variable in a subgraph that doesn't require differentiation use "
           "var_no_grad = var.detach().")


def case(*steps: dict, **extra) -> dict:
    return {"id": "topic.case", "rule": "A rule.", "steps": list(steps), **extra}


def test_fixture_cases_pass_on_torch(resources, torch_engine):
    cases = load([Path(__file__).parent / "data" / "cases"], resources).cases
    verdicts = {c.id: run_case(c, torch_engine).verdict for c in cases}
    assert verdicts == dict.fromkeys(verdicts, "passed")


def test_failed_value_reports_step_expected_and_actual(torch_engine):
    result = run_case(case({"run": "x = torch.ones(2)"},
                           {"run": "y = x * 3", "expect": {"y": [3.0, 4.0]}}), torch_engine)
    assert (result.verdict, result.step, result.snippet) == ("failed", 1, "y = x * 3")
    assert result.expected == "[3.0, 4.0]"
    assert "tensor([3., 3.], dtype=float32)" == result.actual


def test_wrong_node_name_fails(torch_engine):
    result = run_case(case({"run": "x = torch.ones(2, requires_grad=True)\ny = x + 1",
                            "expect": {"grad_fn_name(y)": "AddBackward"}}), torch_engine)
    assert result.verdict == "failed"
    assert "AddBackward0" in result.actual


def test_expected_error_with_stage_and_exact_message(torch_engine):
    steps = ({"run": "x = torch.ones(2, requires_grad=True)\ny = x * 2"},
             {"run": "z = 1\ny.requires_grad = False",
              "raises": {"type": "RuntimeError", "stage": "attribute", "message": NONLEAF},
              "expect": {"y.requires_grad": True}})
    assert run_case(case(*steps), torch_engine).verdict == "passed"
    wrong_stage = dict(steps[1], raises={"type": "RuntimeError", "stage": "forward"})
    result = run_case(case(steps[0], wrong_stage), torch_engine)
    assert result.verdict == "failed" and "stage forward" in result.message
    wrong_text = dict(steps[1], raises={"type": "RuntimeError", "message": NONLEAF + "!"})
    assert run_case(case(steps[0], wrong_text), torch_engine).verdict == "failed"


def test_missing_and_unexpected_errors_fail(torch_engine):
    missing = run_case(case({"run": "x = 1", "raises": {"type": "RuntimeError"}}), torch_engine)
    assert missing.verdict == "failed" and "nothing was raised" in missing.message
    unexpected = run_case(case({"run": "x = torch.ones(2)\nx.backward()"}), torch_engine)
    assert unexpected.verdict == "failed"
    assert unexpected.snippet == "x.backward()"
    assert unexpected.actual.startswith("RuntimeError (backward): element 0 of tensors")


def test_message_version_ranges(torch_engine):
    raises = {"type": "RuntimeError", "message": "new wording",
              "messages": [{"torch": "<2.1", "message": NONLEAF}]}
    steps = (case({"run": "x = torch.ones(1, requires_grad=True)\ny = x * 2"},
                  {"run": "y.requires_grad = False", "raises": raises}))
    assert run_case(steps, torch_engine).verdict == "failed"
    old = _Renamed(torch_engine, torch_version="2.0.1")
    assert run_case(steps, old).verdict == "passed"


def test_warning_message_version_ranges(torch_engine):
    old_text = "The .grad attribute of a Tensor that is not a leaf Tensor is being accessed."
    warns = [{"type": "UserWarning", "message": "new wording",
              "messages": [{"torch": "<2.1", "message": old_text}]}]
    steps = case({"run": "x = torch.ones(1, requires_grad=True)\ny = x * 2"},
                 {"run": "g = y.grad", "warns": warns})
    assert run_case(steps, torch_engine).verdict == "failed"
    prefix_only = _Renamed(torch_engine, torch_version="2.0.1")
    prefix_only.message_strictness = "prefix"
    assert run_case(steps, prefix_only).verdict == "passed"


@pytest.mark.parametrize(("strictness", "actual", "matches"), [
    ("exact", NONLEAF, True), ("exact", NONLEAF[:-1], False),
    ("prefix", "you can only change requires_grad flags of leaf variables, sorry", True),
    ("prefix", "You can only change", False),
    ("type", "anything at all", True),
])
def test_message_strictness(strictness, actual, matches):
    assert message_matches(actual, NONLEAF, strictness) is matches


def test_warnings_expected_unexpected_and_cleaned(torch_engine):
    text = ("The .grad attribute of a Tensor that is not a leaf Tensor is being accessed. "
            "Its .grad attribute won't be populated during autograd.backward(). If you indeed "
            "want the .grad field to be populated for a non-leaf Tensor, use .retain_grad() on "
            "the non-leaf Tensor. If you access the non-leaf Tensor by mistake, make sure you "
            "access the leaf Tensor instead. See github.com/pytorch/pytorch/pull/30531 for more "
            "information.")
    first = {"run": "x = torch.ones(2, requires_grad=True)\ny = x * 2"}
    warned = {"run": "g = y.grad", "warns": [{"type": "UserWarning", "message": text}]}
    assert run_case(case(first, warned), torch_engine).verdict == "passed"
    silent = run_case(case(first, {"run": "g = y.grad"}), torch_engine)
    assert silent.verdict == "failed" and "unexpected warning UserWarning" in silent.message
    missing = run_case(case(first, dict(warned, run="g = x.grad")), torch_engine)
    assert missing.verdict == "failed" and "was not emitted" in missing.message
    # Observing is silent: the same access as an expect key raises no complaint.
    assert run_case(case(dict(first, expect={"y.grad": None})), torch_engine).verdict == "passed"
    assert clean_warning("msg (Triggered internally at /a/b.h:4.)") == "msg"


@pytest.mark.parametrize(("source", "expected"), [
    ("y.backward()", "backward"),
    ("loss = (x * 2).sum().backward(retain_graph=True)", "backward"),
    ("g = torch.autograd.grad(y, x)", "backward"),
    ("y.requires_grad = False", "attribute"),
    ("x.grad = torch.ones(2)", "attribute"),
    ("g = y.grad", "attribute"),
    ("y.requires_grad_(False)", "attribute"),
    ("y.detach_()", "attribute"),
    ("z = x * 2", "forward"),
    ("y = x.detach().requires_grad_()", "forward"),
])
def test_stage_classification(source, expected):
    assert stage(ast.parse(source).body[0]) == expected


def test_random_data_comes_from_the_runner_generator(torch_engine):
    steps = case({"run": "a = torch.rand(2, 3)\nb = torch.randn(4, dtype=torch.float64)\n"
                         "lin = nn.Linear(3, 2)"}, seed=7)
    rng = np.random.default_rng(7)
    a, b = rng.random((2, 3)), rng.standard_normal(4)
    bound = 1 / np.sqrt(3)
    weight, bias = rng.uniform(-bound, bound, (2, 3)), rng.uniform(-bound, bound, 2)
    expect = {"a": {"np": repr(a.tolist()), "dtype": "float32"},
              "b": {"value": b.tolist(), "dtype": "float64"},
              "lin.weight": weight.tolist(), "lin.bias": bias.tolist()}
    steps["steps"][0]["expect"] = expect
    assert run_case(steps, torch_engine).verdict == "passed"
    assert run_case(steps, torch_engine, seed=8).verdict == "failed"


def test_each_case_gets_a_fresh_namespace_and_grad_mode(torch_engine):
    leaky = case({"run": "torch.set_grad_enabled(False)\nleftover = 1"})
    assert run_case(leaky, torch_engine).verdict == "passed"
    probe = run_case(case({"run": "x = torch.ones(1, requires_grad=True) * 2",
                           "expect": {"x.requires_grad": True}}), torch_engine)
    assert probe.verdict == "passed"
    unknown = run_case(case({"run": "y = leftover"}), torch_engine)
    assert unknown.verdict == "failed" and "NameError" in unknown.message


def test_unsupported_feature(torch_engine):
    result = run_case(case({"run": "x = 1"}, features=["cuda"]), torch_engine)
    expected = "unsupported" if not torch_engine.supports("cuda") else "passed"
    assert result.verdict == expected


def test_xfail_stale_and_skip(tmp_path, torch_engine):
    listing = tmp_path / "engine.yaml"
    listing.write_text("xfail:\n  topic.: known\nskip:\n  topic.case: hangs\n  gone.: old\n")
    expectations = Expectations.load(listing)
    engine = InProcess(torch_engine)

    def verdict_of(data):
        return judge(Case.from_dict(data), engine, expectations)

    assert verdict_of(case({"run": "x = 1"})).verdict == "unsupported"
    failing = dict(case({"run": "x = 1", "raises": {"type": "KeyError"}}), id="topic.other")
    passing = dict(case({"run": "x = 1"}), id="topic.third")
    assert verdict_of(failing).verdict == "xfail"
    stale = verdict_of(passing)
    assert stale.verdict == "stale" and stale.reason == "known"
    assert [e.prefix for e in expectations.unused(["topic.case", "topic.other"])] == ["gone."]


def test_timeout_is_an_error_and_the_run_goes_on(torch_engine):
    hang = case({"run": "while True:\n    x = 1"})
    result = run_case(hang, torch_engine, timeout=0.3)
    assert result.verdict == "error" and "timed out after 0.3 s" in result.message
    assert run_case(case({"run": "x = 1"}), torch_engine).verdict == "passed"


def test_a_crashing_adapter_is_an_error_and_the_run_goes_on(torch_engine):
    broken = _Renamed(torch_engine, crash=True)
    result = run_case(case({"run": "x = torch.ones(2)", "expect": {"x": [1.0, 1.0]}}), broken)
    assert result.verdict == "error" and "ZeroDivisionError" in result.message
    # Not "the runner crashed" with an empty message: what failed, and where.
    assert result.message.startswith("x: the engine's adapter failed while reading")
    assert run_case(case({"run": "x = torch.ones(2)", "expect": {"x": [1.0, 1.0]}}),
                    torch_engine).verdict == "passed"


def test_cases_can_be_built_from_dicts_or_objects(torch_engine):
    data = case({"run": "x = 1", "expect": {"x": 1}})
    assert run_case(Case.from_dict(data), torch_engine).verdict == "passed"
    assert run_case(data, torch_engine).case_id == "topic.case"


class _Renamed(Engine):
    """The torch engine with another torch_version, or with a to_numpy that crashes."""

    def __init__(self, inner: Engine, torch_version: str = "2.13.0", crash: bool = False):
        self.inner, self.crash = inner, crash
        self.name, self.torch_version = "renamed", torch_version

    def namespace(self, rng):
        return self.inner.namespace(rng)

    def to_numpy(self, tensor):
        if self.crash:
            raise ZeroDivisionError("adapter bug")
        return self.inner.to_numpy(tensor)

    def is_tensor(self, obj):
        return self.inner.is_tensor(obj)

    def reset(self):
        self.inner.reset()


@pytest.mark.parametrize("name", ["torch", "refimpl"])
def test_adapters_read_the_values_of_an_immutable_zero_tensor(name, torch_engine):
    # The second derivative of abs is a ZeroTensor, whose numpy() refuses; an observation of
    # its values must still read zeros, not crash the adapter.
    from conformance.engines import load_engine

    engine = torch_engine if name == "torch" else load_engine("refimpl")
    ns = engine.namespace(np.random.default_rng(0))
    exec("x = torch.tensor([1., -2.], requires_grad=True)\n"
         "g, = torch.autograd.grad(x.abs().sum(), [x], create_graph=True)\n"
         "h, = torch.autograd.grad(g.sum(), [x])", ns)
    assert ns["h"]._is_zerotensor()
    np.testing.assert_array_equal(engine.to_numpy(ns["h"]), np.zeros(2, dtype=np.float32))
