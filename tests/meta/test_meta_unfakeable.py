"""No verdict can be earned by accident.

- The `new-adapter` skeleton for an engine whose API is not PyTorch's, with every feature of
  `spec/features.yaml` declared and nothing translated, passes no case at either level: a
  missing name (AttributeError, NameError, a call the engine cannot make) is never a refusal.
- An engine whose every backward raises NotImplementedError (a RuntimeError subclass) meets no
  case that expects a refusal at backward.
- An adapter that raises a refusal itself does not meet the case; one that translates the
  engine's exception (`raise ... from exc`) does.
- A refusal from an earlier statement of the step, or from the forward part of a backward
  statement, does not meet the case.
"""

from __future__ import annotations

import subprocess
import sys
from typing import Any

import numpy as np
import pytest
import yaml

import refimpl
from conformance.casefile.case import Case
from conformance.casefile.loader import DEFAULT_SPEC_DIR, load
from conformance.engines import Engine, load_engine
from conformance.engines.generic import TorchLikeEngine
from conformance.run.executor import LEVELS, run_case

CASES = load([DEFAULT_SPEC_DIR / "cases"]).cases
FEATURES = frozenset(yaml.safe_load((DEFAULT_SPEC_DIR / "features.yaml").read_text()))


@pytest.fixture(scope="module")
def skeleton(tmp_path_factory: pytest.TempPathFactory) -> Engine:
    out = tmp_path_factory.mktemp("skel")
    subprocess.run([sys.executable, "-m", "conformance", "new-adapter", "skel", "--out",
                    str(out)], check=True, capture_output=True)
    adapter = out / "skel_adapter.py"
    text = adapter.read_text()
    declared = 'features: frozenset[str] = frozenset({"autograd_state"})'
    assert declared in text, "the skeleton no longer declares its features this way"
    adapter.write_text(text.replace(declared, f"features = frozenset({sorted(FEATURES)!r})"))
    sys.path.insert(0, str(out))
    try:
        yield load_engine("skel_adapter:make_engine")
    finally:
        sys.path.remove(str(out))
        sys.modules.pop("skel_adapter", None)


def test_the_skeleton_passes_no_case_at_either_level(skeleton: Engine) -> None:
    assert all(skeleton.supports(feature) for feature in FEATURES)
    passed = {level: [] for level in LEVELS}
    for case in CASES:
        result = run_case(case, skeleton, timeout=None)
        for level in LEVELS:
            if result.verdict_at(level) == "passed":
                passed[level].append(case.id)
    assert passed == {level: [] for level in LEVELS}


class _NotImplementedBackward(TorchLikeEngine):
    """refimpl whose every backward (method, autograd.backward, autograd.grad) raises
    NotImplementedError."""

    def namespace(self, rng: np.random.Generator) -> dict[str, Any]:
        namespace = super().namespace(rng)
        self._saved = (refimpl.Tensor.backward, refimpl.autograd.grad,
                       refimpl.autograd.backward)

        def refuse(*args: Any, **kwargs: Any) -> None:
            raise NotImplementedError("backward is not implemented")

        refimpl.Tensor.backward = refuse
        refimpl.autograd.grad = refuse
        refimpl.autograd.backward = refuse
        return namespace

    def reset(self) -> None:
        saved = getattr(self, "_saved", None)
        if saved is not None:
            refimpl.Tensor.backward, refimpl.autograd.grad, refimpl.autograd.backward = saved
            self._saved = None
        super().reset()


def _expects_backward_refusal(case: Case) -> bool:
    return any(step.raises is not None and step.raises.stage == "backward"
               for step in case.steps)


def test_not_implemented_backward_meets_no_backward_refusal() -> None:
    engine = _NotImplementedBackward("broken", "refimpl")
    cases = [case for case in CASES if _expects_backward_refusal(case)
             and all(engine.supports(f) for f in case.features)]
    assert len(cases) > 30
    met = [case.id for case in cases
           if run_case(case, engine, timeout=None).verdict_at("semantics") == "passed"]
    assert met == []
    x = refimpl.ones(2, requires_grad=True)
    x.sum().backward()  # the engine's reset restored refimpl
    assert x.grad.tolist() == [1.0, 1.0]


REFUSAL = {"id": "meta.refusal", "rule": "A leaf requiring grad refuses an in-place op.",
           "steps": [{"run": "x = torch.ones(2, requires_grad=True)"},
                     {"run": "x.add_(1)", "raises": {"type": "RuntimeError",
                                                     "stage": "forward"}}]}


class _Facade:
    """A `torch` whose `ones` builds tensors through `make` (an adapter's translation)."""

    def __init__(self, make: Any) -> None:
        self.ones = make


class _FakeTensor:
    def __init__(self, adapter_refuses: bool, translate: bool) -> None:
        self._adapter_refuses = adapter_refuses
        self._translate = translate
        self.requires_grad = True

    def add_(self, other: Any) -> None:
        if not self._translate:
            raise RuntimeError("a leaf Variable that requires grad is being used in an in-place "
                               "operation.")
        try:
            refimpl.ones(2, requires_grad=True).add_(other)
        except RuntimeError as exc:
            raise RuntimeError(str(exc)) from exc


class _Translating(Engine):
    name = "translating"
    message_strictness = "type"

    def __init__(self, translate: bool) -> None:
        self.translate = translate

    def namespace(self, rng: np.random.Generator) -> dict[str, Any]:
        def ones(*size: Any, requires_grad: bool = False) -> _FakeTensor:
            return _FakeTensor(not self.translate, self.translate)

        return {"torch": _Facade(ones), "nn": None, "F": None}

    def to_numpy(self, tensor: Any) -> np.ndarray:
        return np.ones(2)

    def is_tensor(self, obj: Any) -> bool:
        return isinstance(obj, _FakeTensor)


def test_a_refusal_the_adapter_invents_is_not_the_engines() -> None:
    result = run_case(REFUSAL, _Translating(translate=False), timeout=None)
    assert result.verdict_at("semantics") == "failed"
    assert "the adapter's own code raised" in result.message


def test_a_refusal_the_adapter_translates_is_the_engines() -> None:
    result = run_case(REFUSAL, _Translating(translate=True), timeout=None)
    assert result.verdict == "passed", result.message


@pytest.mark.parametrize(("run", "why"), [
    ("y = x * 2\nx.add_(1)\nz = 1", "statement 2 of 3 raised"),
    ("(x.add_(1) * 2).sum().backward()", "expected the refusal at stage backward"),
])
def test_a_refusal_from_elsewhere_in_the_step_does_not_count(run: str, why: str) -> None:
    case = {"id": "meta.elsewhere", "rule": "r",
            "steps": [{"run": "x = torch.ones(2, requires_grad=True)"},
                      {"run": run, "raises": {"type": "RuntimeError", "stage": "backward"
                                              if "backward" in run else "forward"}}]}
    for name in ("torch", "refimpl"):
        result = run_case(case, load_engine(name), timeout=None)
        assert result.verdict_at("semantics") == "failed", (name, result)
        assert why in result.message, result.message


def test_the_stage_is_where_the_exception_came_from() -> None:
    case = {"id": "meta.stage", "rule": "r",
            "steps": [{"run": "x = torch.ones(2, requires_grad=True)\ny = x * 2"},
                      {"run": "y.sum().backward(torch.ones(3))",
                       "raises": {"type": "RuntimeError", "stage": "backward"}}]}
    result = run_case(case, load_engine("refimpl"), timeout=None)
    assert result.verdict == "passed", result.message


def test_a_builtin_subclass_is_not_the_class_the_case_names() -> None:
    case = {"id": "meta.subclass", "rule": "r",
            "steps": [{"run": "x = torch.ones(2, requires_grad=True)",
                       "expect": {"x.requires_grad": True}},
                      {"run": "x.sum().backward()\nraise_it()",
                       "raises": {"type": "RuntimeError"}}]}
    engine = load_engine("refimpl")

    def namespace_with(exc: type[BaseException]) -> Any:
        base = engine.namespace

        def namespace(rng: np.random.Generator) -> dict[str, Any]:
            names = base(rng)

            def raise_it() -> None:
                raise exc("no")

            return {**names, "raise_it": raise_it}

        return namespace

    class EngineError(RuntimeError):
        pass

    for exc, verdict in ((RecursionError, "failed"), (EngineError, "passed")):
        engine.namespace = namespace_with(exc)  # type: ignore[method-assign]
        result = run_case(Case.from_dict(case), engine, timeout=None)
        assert result.verdict == verdict, (exc, result.message)
