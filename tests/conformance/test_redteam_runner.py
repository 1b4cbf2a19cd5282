"""The second red team's holes in the runner's core, each shown closed (all were open at
6b35e3a): the verdict is reached in the parent from observations only (3), what a worker sends
is bounded (5), no engine and no repro script hands snippets a real builtin (1, 2), and a refusal
of backward an engine without reverse mode would raise is not earned (10)."""

from __future__ import annotations

import builtins
import subprocess
import sys
from pathlib import Path

import faulty_workers  # noqa: F401 - the hostile factories are imported by the workers by name
import numpy as np
import pytest

from conformance.casefile.case import Case
from conformance.casefile.loader import DEFAULT_SPEC_DIR, load
from conformance.casefile.sandbox import MACHINERY_BUILTINS
from conformance.casefile.vocabulary import FORBIDDEN_GLOBALS
from conformance.engines import load_engine
from conformance.engines.generic import TorchLikeEngine
from conformance.run.executor import judge_seen, run_case
from conformance.run.observe import TEXT_LIMIT, CaseSeen, Plan, StepSeen, new_namespace
from conformance.run.repro import repro_script
from conformance.run.workers import EngineWorkers
from conformance.verdict.expectations import Entry
from conformance.verdict.judge import REASON_LIMIT, settle

SOURCES = [{"doc": "doc", "quote": "A tensor created by the user is a leaf."}]


def _case(name: str, *steps: dict) -> Case:
    return Case.from_dict({"id": f"topic.{name}", "rule": "A rule.", "sources": SOURCES,
                           "steps": list(steps)})


# --- 3: the verdict is the parent's --------------------------------------------------------


def test_a_plan_carries_no_expectation() -> None:
    case = _case("plan", {"run": "x = torch.ones(2)\ny = x * 2",
                          "expect": {"y": {"np": "x + x"}, "x.is_leaf": 12345.5}},
                 {"run": "y.backward()", "raises": {"type": "RuntimeError", "stage": "backward",
                                                    "message": "secret words"}})
    plan = Plan.of(case)
    text = repr(plan)
    assert "secret words" not in text and "12345" not in text and "x + x" not in text
    assert plan.steps[0].observe == ("y", "x.is_leaf") and plan.steps[0].arrays == ("x",)
    assert [step.may_raise for step in plan.steps] == [False, True]


def test_a_worker_that_observes_nothing_fails_every_case_it_runs() -> None:
    # An adapter that replaces the worker's runner with one that computes nothing (at 6b35e3a:
    # a patched `run_case` returning "passed") can only send what it saw: nothing.
    case = _case("nothing", {"run": "x = torch.ones(2)", "expect": {"x.is_leaf": True}})
    result = judge_seen(case, CaseSeen([]), load_engine("refimpl"))
    assert result.verdict == "failed" and "sent nothing for this step" in result.message
    with EngineWorkers("faulty_workers:observes_nothing") as engine:
        result = engine.run(case)
    assert result.verdict == "failed", result.message
    assert "sent nothing for this step" in result.message


def test_an_observation_left_out_fails_its_check() -> None:
    case = _case("left-out", {"run": "x = torch.ones(2)", "expect": {"x.is_leaf": True}})
    seen = CaseSeen([StepSeen(None, [], {}, {})])
    result = judge_seen(case, seen, load_engine("refimpl"))
    assert result.verdict == "failed" and "sent no observation for it" in result.message


# --- 5: bounds ----------------------------------------------------------------------------


def test_a_huge_message_is_cut_in_the_worker_and_the_runner_stays_small() -> None:
    # At 6b35e3a three such cases took the runner to 5.5 GB and lost every report.
    case = _case("huge", {"run": 'assert False, "A" * 20_000_000'})
    with EngineWorkers("refimpl") as engine:
        results = [engine.run(case) for _ in range(3)]
    for result in results:
        assert result.verdict == "failed"
        assert len(result.message) < 3 * TEXT_LIMIT and "[cut: " in result.message
        assert all(len(check.actual or "") < 2 * TEXT_LIMIT for check in result.checks)


def test_a_huge_expectations_reason_is_cut_once() -> None:
    result = run_case(_case("reason", {"run": "x = 1", "expect": {"x": 2}}),
                      load_engine("refimpl"))
    settled = settle(result, Entry("topic.", "xfail", "R" * 1_000_000), "e.yaml")
    assert settled.verdict == "xfail" and len(settled.reason) < REASON_LIMIT + 100
    assert "[cut: " in settled.reason


# --- 1 and 2: no real builtin reaches a snippet -----------------------------------------


@pytest.mark.parametrize("name", ["refimpl", "torch", "torch-compiled-autograd"])
def test_no_shipped_engine_hands_snippets_a_forbidden_builtin(name: str) -> None:
    engine = load_engine(name)
    given = new_namespace(engine, np.random.default_rng(0))["__builtins__"]
    reachable = {key for key, value in given.items() if value is getattr(builtins, key, None)}
    assert not reachable & FORBIDDEN_GLOBALS
    assert set(engine.machinery_builtins) <= set(MACHINERY_BUILTINS)
    for key in set(given) & FORBIDDEN_GLOBALS:
        assert given[key] is MACHINERY_BUILTINS[key]
        with pytest.raises(AttributeError):
            given[key](engine, "__class__")


def test_a_snippet_that_passed_no_lint_still_cannot_reach_eval_on_compiled_autograd() -> None:
    # The red team's first step: `f = lambda eval: 0` passed lint, then `eval(...)` ran with
    # Python's own builtins on torch-compiled-autograd. Built past the loader here, so the
    # run's sandbox is tested on its own.
    case = _case("eval", {"run": "f = lambda eval: 0\nx = eval('1 + 1')",
                          "expect": {"x": 2}})
    result = run_case(case, load_engine("torch-compiled-autograd"))
    assert result.verdict == "failed"
    assert "NameError" in result.message and "eval" in result.message


@pytest.mark.parametrize("name", ["refimpl", "torch"])
def test_a_repro_script_runs_snippets_without_real_builtins(tmp_path: Path, name: str) -> None:
    case = _case("repro", {"run": "x = torch.ones(2)\ny = len([x])", "expect": {"y": 1}},
                 {"run": "z = open('/etc/hostname').read()", "expect": {"z": "host"}})
    script = tmp_path / "repro.py"
    script.write_text(repro_script(case, load_engine(name)))
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                          timeout=120)
    # `len` is in the vocabulary and works; `open` is not, and is no builtin of the snippet.
    assert "y = 1 | expected: 1" in done.stdout, done.stderr
    assert "NameError: name 'open' is not defined" in done.stderr


# --- 10: a refusal a broken engine cannot earn -------------------------------------------


class _NoReverseMode(TorchLikeEngine):
    """refimpl with every backward refused in the engine's own words: an engine without
    reverse mode, held to `semantics` with messages compared by type only."""

    message_strictness = "type"
    level = "semantics"

    def __init__(self) -> None:
        super().__init__("no-reverse-mode", "refimpl", lacks=load_engine("refimpl").lacks)

    def namespace(self, rng: np.random.Generator) -> dict:
        namespace = super().namespace(rng)
        torch = namespace["torch"]

        def refuse(*args: object, **kwargs: object) -> None:
            raise RuntimeError("this engine has no reverse mode")

        torch._module.Tensor.backward = refuse
        torch.autograd = type("Autograd", (), {"grad": staticmethod(refuse),
                                               "backward": staticmethod(refuse)})()
        return namespace

    def reset(self) -> None:
        import refimpl

        refimpl.Tensor.backward = _BACKWARD
        super().reset()


_BACKWARD = None


def test_an_engine_without_reverse_mode_earns_no_refusal_of_backward() -> None:
    global _BACKWARD
    import refimpl

    _BACKWARD = refimpl.Tensor.backward
    cases = [case for case in load([DEFAULT_SPEC_DIR / "cases"]).cases
             if any(step.raises is not None and step.raises.stage == "backward"
                    for step in case.steps)]
    assert len(cases) > 50
    engine = _NoReverseMode()
    try:
        earned = [case.id for case in cases
                  if run_case(case, engine).verdict_at("semantics") == "passed"]
    finally:
        refimpl.Tensor.backward = _BACKWARD
    # At 6b35e3a 49 of these passed at semantics (with the engine's own RuntimeError).
    assert earned == []
    x = refimpl.ones(2, requires_grad=True)
    (x * 2).sum().backward()
    assert x.grad.tolist() == [2.0, 2.0]
