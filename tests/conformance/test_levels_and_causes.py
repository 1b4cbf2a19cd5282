"""Conformance levels, every failed check reported, failures grouped by cause, the HTML report
and expectations files bootstrapped from a run."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from conformance.report.formats import to_html
from conformance.run.executor import observation_level, run_case
from conformance.verdict.causes import by_cause, expectations_text, normalise
from conformance.verdict.suite import run_suite

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]

# One case, four failures on an engine that names nodes its own way and has no accumulation:
# a node name (surface) at step 0, hiding a wrong accumulated gradient (semantics) at step 2.
CASE = {"id": "topic.hidden", "rule": "r", "steps": [
    {"run": "x = torch.tensor([1.0, 2.0], requires_grad=True)\ny = x * 3",
     "expect": {"grad_fn_name(y)": "MulBackward0", "y.requires_grad": True}},
    {"run": "y.sum().backward()", "expect": {"x.grad": [3.0, 3.0]}},
    {"run": "(x * 3).sum().backward()", "expect": {"x.grad": [6.0, 6.0]}},
]}


@pytest.fixture(scope="module")
def broken():
    sys.path.insert(0, str(REPO / "tests" / "meta"))
    from broken_engines import BREAKS, BrokenEngine

    return BrokenEngine(BREAKS["no_accumulation"])


@pytest.mark.parametrize(("key", "expected", "level"), [
    ("grad_fn_name(y)", "MulBackward0", "surface"),
    ("grad_fn_name(y)", None, "semantics"),
    ("graph(y)", "SumBackward0(AccumulateGrad)", "surface"),
    ("graph(y)", None, "semantics"),
    ("node_name(y.grad_fn.next_functions[0][0])", "AccumulateGrad", "surface"),
    ("repr(x)", "tensor([1.])", "surface"),
    ("x.grad is g", True, "surface"),
    ("x.grad", [1.0], "semantics"),
    ("dtype(x)", "float32", "semantics"),
    ("x.is_leaf", True, "semantics"),
    ("y.grad_fn is None", True, "surface"),
])
def test_the_level_of_an_observation_comes_from_the_observation(key, expected, level):
    assert observation_level(key, expected) == level


def test_a_case_reports_every_failed_check_and_heads_with_the_semantic_one(broken):
    result = run_case(CASE, broken)
    assert result.verdict == "failed"
    assert [(c.step, c.level) for c in result.checks] == [(2, "semantics")]
    renamed = run_case(CASE, _renamed_engine())
    assert [(c.step, c.level) for c in renamed.checks] == [(0, "surface")]
    assert renamed.verdict_at("semantics") == "passed"
    assert renamed.verdict_at("full") == "failed"


def test_a_node_name_no_longer_hides_a_later_gradient_bug():
    engine = _renamed_engine(no_accumulation=True)
    result = run_case(CASE, engine)
    assert [(c.step, c.level) for c in result.checks] == [(0, "surface"), (2, "semantics")]
    assert result.step == 2 and "x.grad" in result.message, "the headline is the semantic one"
    assert "(and 1 more failed check(s))" in result.message
    assert result.verdict_at("semantics") == "failed"


def test_a_printed_tensor_with_wrong_numbers_is_a_semantic_failure(torch_engine):
    case = {"id": "topic.repr", "rule": "r", "steps": [
        {"run": "x = torch.tensor([1.0, 2.0])", "expect": {"repr(x)": "tensor([1., 3.])"}},
        {"run": "y = torch.tensor([1.0, 2.0])", "expect": {"repr(y)": "tensor([1.,  2.])"}}]}
    result = run_case(case, torch_engine)
    assert [(c.step, c.level) for c in result.checks] == [(0, "semantics"), (1, "surface")]


def test_raises_and_warnings_split_into_semantics_and_surface(torch_engine):
    def case(step):
        return {"id": "topic.x", "rule": "r", "steps": [step]}

    wrong_type = run_case(case({"run": "x = torch.ones(2)\nx.backward()",
                                "raises": {"type": "ValueError"}}), torch_engine)
    assert [c.level for c in wrong_type.checks] == ["surface"]
    nothing = run_case(case({"run": "x = torch.ones(2)", "raises": {"type": "RuntimeError"}}),
                       torch_engine)
    assert [c.level for c in nothing.checks] == ["semantics"]
    worded = run_case(case({"run": "x = torch.ones(2, requires_grad=True)\ny = x * 2\n"
                                   "g = y.grad",
                            "warns": [{"type": "UserWarning", "message": "other words"}]}),
                      torch_engine)
    assert [c.level for c in worded.checks] == ["surface"]
    silent = run_case(case({"run": "x = torch.ones(2)",
                            "warns": [{"type": "UserWarning", "message": "w"}]}), torch_engine)
    assert [c.level for c in silent.checks] == ["semantics"]


def test_causes_group_failures_semantic_first(broken):
    report = run_suite([_case(CASE), _case({**CASE, "id": "topic.hidden-too"})],
                       [_renamed_engine(no_accumulation=True)])
    causes = by_cause(report.runs[0].results)
    assert [(c.level, c.count) for c in causes] == [("semantics", 2)]
    assert causes[0].text == "<tensor>.grad: expected […], observed […]" or \
        causes[0].text.startswith("<tensor>.grad: expected")
    assert normalise("grad_fn_name(y): expected 'AddBackward0', observed 'Add'") == \
        "grad_fn_name(…): expected '…', observed '…'"


@pytest.mark.parametrize(("message", "cause"), [
    ("x.grad: observing raised AttributeError: the engine's 'Tensor' object has no attribute "
     "'dtype'", "AttributeError: '…' object has no attribute 'dtype'"),
    ("x.grad: the engine's dtype is 'float64', PyTorch's 'float32'",
     "<tensor>.grad: the engine's dtype is '…', PyTorch's '…'"),
    ("unexpected RuntimeError: can't differentiate 'x' (it's a leaf)",
     "unexpected RuntimeError: can't differentiate '…' (it's a leaf)"),
])
def test_a_cause_keeps_its_apostrophes(message, cause):
    assert normalise(message) == cause


def test_written_expectations_make_the_next_run_pass(tmp_path):
    empty = tmp_path / "none.yaml"
    empty.write_text("xfail: {}\n")
    written = tmp_path / "mygrad.yaml"
    first = _cli("run", "--engine", "mygrad", "-q", "-k", "grad_fn.", "-k", "leaf.",
                 "--expectations", f"mygrad={empty}", "--write-expectations", str(written))
    assert first.returncode == 1
    data = yaml.safe_load(written.read_text())
    assert data["xfail"] and all(r.startswith("FILL IN (") for r in data["xfail"].values())
    levels = [line.split(": ")[1].split(",")[0] for line in written.read_text().splitlines()
              if line.startswith("  # -- cause ")]
    assert levels and levels == sorted(levels, key=["error", "semantics", "surface"].index), \
        "semantic causes come first"
    second = _cli("run", "--engine", "mygrad", "-q", "-k", "grad_fn.", "-k", "leaf.",
                  "--expectations", f"mygrad={written}")
    assert second.returncode == 0, second.stdout[-2000:] + second.stderr[-2000:]
    # Filled-in reasons (with an apostrophe) survive writing the file again.
    first_id = next(iter(data["xfail"]))
    text = written.read_text().replace(f'"{data["xfail"][first_id]}"',
                                       '"MyGrad\'s own reason"', 1)
    written.write_text(text)
    _cli("run", "--engine", "mygrad", "-q", "-k", "grad_fn.", "-k", "leaf.", "--expectations",
         f"mygrad={written}", "--write-expectations", str(written))
    again = yaml.safe_load(written.read_text())["xfail"]
    assert "MyGrad's own reason" in again.values()
    assert set(again) == set(data["xfail"])


def test_semantics_level_from_the_command_line(tmp_path):
    report = tmp_path / "r.json"
    done = _cli("run", "--engine", "mygrad", "--level", "semantics", "--json", str(report), "-q")
    assert done.returncode == 0, done.stderr
    engine = json.loads(report.read_text())["engines"][0]
    assert engine["level"] == "semantics"
    full, semantic = engine["summaries"]["full"], engine["summaries"]["semantics"]
    assert semantic["passed"] > full["passed"], "surface-only divergences pass at semantics"
    assert "level semantics (at full:" in done.stdout


def test_html_report_is_one_self_contained_file(tmp_path, broken):
    report = run_suite([_case(CASE)], [_renamed_engine(no_accumulation=True)])
    page = to_html(report)
    assert page.startswith("<!DOCTYPE html>") and "<script" not in page and "http" not in page
    assert "What to fix first" in page and "<details>" in page
    assert "topic.hidden" in page and "[semantics]" in page and "[surface]" in page
    path = tmp_path / "r.html"
    done = _cli("run", "--engine", "refimpl", "-q", "-k", "leaf.", "--html", str(path))
    assert done.returncode == 0 and "Topics by engine" in path.read_text()


def test_written_expectations_keep_unrelated_divergences_apart(torch_engine):
    # Three wrong gradients of three different operations read alike ("x.grad: expected [...],
    # observed [...]"); each needs its own reason, and two cases of one operation share one.
    def gradient_case(name, op):
        return _case({"id": f"topic.{name}", "rule": "r", "steps": [
            {"run": f"x = torch.ones(2, requires_grad=True)\ny = {op}"},
            {"run": "y.sum().backward()", "expect": {"x.grad": [5.0, 5.0]}}]})

    cases = [gradient_case("sigmoid", "x.sigmoid()"), gradient_case("cumsum", "x.cumsum(0)"),
             gradient_case("scaled", "x * 3"), gradient_case("scaled-again", "3 * x")]
    results = [run_case(case, torch_engine) for case in cases]
    assert len({normalise(r.message) for r in results}) == 1, "the causes read alike"
    text = expectations_text("e", results, cases={case.id: case for case in cases})
    reasons = yaml.safe_load(text)["xfail"]
    assert len(set(reasons.values())) == 3, text
    assert reasons["topic.scaled"] == reasons["topic.scaled-again"]
    assert ".sigmoid" in reasons["topic.sigmoid"] and ".cumsum" in reasons["topic.cumsum"]
    assert text.count("  # -- cause ") == 3


def test_expectations_text_of_a_clean_run_is_valid_yaml():
    assert yaml.safe_load(expectations_text("e", [])) == {"xfail": {}}


def _case(data):
    from conformance.casefile.case import Case

    return Case.from_dict(data)


def _renamed_engine(no_accumulation: bool = False):
    """refimpl whose nodes are named like MyGrad's (`Mul`), optionally without accumulation."""
    from conformance.engines.generic import TorchLikeEngine

    base = None
    if no_accumulation:
        sys.path.insert(0, str(REPO / "tests" / "meta"))
        from broken_engines import BREAKS, BrokenEngine

        base = BrokenEngine(BREAKS["no_accumulation"])

    class Renamed(type(base) if base is not None else TorchLikeEngine):
        def node_name(self, node):
            return type(node).__name__.replace("Backward0", "")

    engine = base if base is not None else TorchLikeEngine("renamed", "refimpl")
    engine.__class__ = Renamed
    return engine


def _cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "conformance", *args], cwd=REPO,
                          capture_output=True, text=True, timeout=300)


def test_a_missing_name_is_one_cause_however_it_shows():
    # Raised by a step, by an observation, or where a refusal was expected: the missing name
    # is what to add, so the groups of --write-expectations do not split it.
    messages = [
        "unexpected AttributeError: 'Tensor' object has no attribute 'autograd'",
        "x.grad: 'module' object has no attribute 'autograd': an attribute the engine's "
        "objects do not have, which is not a refusal",
        "t.size(0): observing raised AttributeError: 'Facade' object has no attribute "
        "'autograd'",
    ]
    assert {normalise(m) for m in messages} == {
        "AttributeError: '…' object has no attribute 'autograd'"}
    assert normalise("unexpected AttributeError: 'Tensor' object has no attribute 'view'") != \
        normalise(messages[0])
