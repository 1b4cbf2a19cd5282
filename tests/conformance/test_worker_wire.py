"""What a worker sends the runner is data, never code: JSON the parent reads field by field, so a
value a case or an engine made (a `str` subclass with its own `__reduce__`) cannot run anything
in the runner, and data the parent cannot read is an `error` verdict, not a crash."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import faulty_workers
import numpy as np
import pytest
import yaml

from conformance.casefile.case import Case
from conformance.casefile.loader import load
from conformance.fuzz.differential import (
    RaisedObservation,
    StepError,
    StepRecord,
    TensorObservation,
)
from conformance.fuzz.runner import decode_records
from conformance.run.executor import CaseResult, Check
from conformance.run.observe import (
    CaseSeen,
    ExceptionSeen,
    ObservingRaised,
    StepSeen,
    TensorSeen,
    WarningSeen,
    seen_value,
)
from conformance.run.wire import MalformedData, Opaque, loads
from conformance.run.wire import answer as _answer
from conformance.run.wire import plain as _plain
from conformance.run.wire import strict as _strict
from conformance.run.workers import MAX_ANSWER_BYTES, EngineWorkers, _outcome
from conformance.verdict.suite import run_suite


def _records(raw: bytes) -> Any:
    return decode_records(loads(raw))

HERE = Path(__file__).resolve().parent
SOURCES = [{"doc": "doc", "quote": "A tensor created by the user is a leaf."}]

# A case that passes lint: `type` makes a `str` subclass whose pickle calls `sum`, and an object
# whose repr is one of those. Its expectation fails, so the repr becomes the check's `actual`.
REDUCES = """
- id: topic.reduce
  rule: A rule.
  sources:
    - doc: forum-is-leaf
      quote: leaf
  steps:
    - run: |
        def pickled(self):
            return (sum, (range(10000),))
        text = type("Text", (str,), {"__reduce__": pickled})
        def shown(self):
            return text("x is shown")
        Shown = type("Shown", (), {"__repr__": shown})
        x = Shown()
      expect:
        x: 1
"""


def test_a_case_cannot_run_code_in_the_runner_through_a_pickled_repr(tmp_path: Path) -> None:
    (tmp_path / "topic.yaml").write_text(REDUCES)
    # Lint now refuses a class made by type() with a namespace; the wire must hold without
    # lint too, so the case runs as it was written.
    assert any("type()" in str(p) or "makes a class" in str(p)
               for p in load([tmp_path / "topic.yaml"]).problems)
    with EngineWorkers("refimpl") as engine:
        result = engine.run(Case.from_dict(yaml.safe_load(REDUCES)[0]))
    assert result.verdict == "failed"
    # Unpickled in the runner, the text would have become sum(range(10000)) == 49995000.
    assert type(result.actual) is str and result.actual == "x is shown"
    assert type(result.checks[0].actual) is str and result.checks[0].actual == "x is shown"


def test_an_engines_value_cannot_run_code_in_the_runner(tmp_path: Path) -> None:
    marker = tmp_path / "marker"
    case = Case.from_dict({"id": "topic.marked", "rule": "A rule.", "sources": SOURCES,
                           "steps": [{"run": f"x = marked({str(marker)!r})",
                                      "expect": {"x": 1}}]})
    with EngineWorkers("faulty_workers:marks") as engine:
        result = engine.run(case)
    assert not marker.exists(), marker.read_text()
    assert result.verdict == "failed" and result.actual == "marked"


@pytest.mark.parametrize(("factory", "what"), [
    ("sends_malformed_text", "text that is not JSON"),
    ("sends_malformed_fields", "seen.duration_s: a str where a float belongs"),
], ids=["not JSON", "a field of the wrong type"])
def test_malformed_data_from_a_worker_is_an_error_of_that_case(tmp_path: Path, factory: str,
                                                               what: str) -> None:
    def case(name: str, run: str) -> Case:
        return Case.from_dict({"id": f"topic.{name}", "rule": "A rule.", "sources": SOURCES,
                               "steps": [{"run": run, "expect": {"x.is_leaf": True}}]})

    cases = [case("before", "x = torch.ones(2)"), case("trigger", "x = torch.ones(13)"),
             case("after", "x = torch.ones(2)")]
    with EngineWorkers(f"faulty_workers:{factory}") as engine:
        report = run_suite(cases, [engine])
    results = {r.case_id: r for r in report.runs[0].results}
    assert [r.verdict for r in results.values()] == ["passed", "error", "passed"]
    message = results["topic.trigger"].message
    assert "the engine's worker sent malformed data" in message and what in message
    assert "a fresh worker runs the next case" in message


class _Hostile(str):
    def __reduce__(self) -> Any:
        return (faulty_workers.write_marker, (self.marker,))


def _hostile(text: str, marker: Path) -> str:
    value = _Hostile(text)
    value.marker = str(marker)
    return value


def _seen(text: str) -> CaseSeen:
    exception = ExceptionSeen((("builtins", "RuntimeError"),), text, 0, 1, (1, 1, 0, 5), False,
                              False, None, False)
    tensor = TensorSeen("tensor", "float32", (2,), "cpu", np.array([1.0, 2.0], np.float32))
    return CaseSeen([StepSeen(exception, [WarningSeen((("builtins", "UserWarning"),), text)],
                              {"x": seen_value([tensor, (text, 1)], None),
                               "y": ObservingRaised("E", text)},
                              {"x": tensor})], "timeout", 0, text, 0.5)


def _answer_of(seen: CaseSeen, **fields: Any) -> bytes:
    return _answer(lambda: {"seen": _plain(seen, CaseSeen), "tampered": None,
                            "resident_bytes": 10, "replace": None, **fields})


def test_a_str_subclass_in_what_was_seen_crosses_as_plain_text(tmp_path: Path) -> None:
    marker = tmp_path / "marker"
    outcome = _outcome(_answer_of(_seen(_hostile("shown", marker))))
    back = outcome["seen"]
    step = back.steps[0]
    for text in (back.message, step.raised.message, step.warnings[0].message,
                 step.values["x"][1][0], step.values["y"].message):
        assert type(text) is str and text == "shown"
    assert not marker.exists()


def test_every_field_of_what_was_seen_crosses() -> None:
    seen = _seen("m\n\u2028")
    outcome = _outcome(_answer_of(seen, replace="why"))
    back = outcome["seen"]
    assert outcome["replace"] == "why" and outcome["resident_bytes"] == 10
    np.testing.assert_array_equal(back.steps[0].arrays["x"].values, [1.0, 2.0])
    assert back.steps[0].values["x"][0].values.dtype == np.float32
    # Arrays compare by identity in a dataclass's ==: compare the rest field by field.
    assert (back.ended, back.ended_in, back.message, back.duration_s) == ("timeout", 0,
                                                                          seen.message, 0.5)
    assert back.steps[0].raised == seen.steps[0].raised
    assert back.steps[0].warnings == seen.steps[0].warnings
    assert back.steps[0].values["y"] == seen.steps[0].values["y"]
    assert back.steps[0].values["x"][1] == seen.steps[0].values["x"][1]


def _record() -> StepRecord:
    arrays = [np.arange(6, dtype=np.float32).reshape(2, 3), np.array([np.nan, -np.inf, 1e-300]),
              np.array([True, False]), np.array(3, dtype=np.int64),
              np.array([1 + 2j], dtype=np.complex64), np.zeros((0, 2), dtype=np.uint8),
              np.array([1.5], dtype=np.float16)]
    observations: dict[str, Any] = {
        f"t{i}": TensorObservation(str(a.dtype), a.shape, "cpu", a) for i, a in enumerate(arrays)}
    observations.update({
        "flag": True, "count": 3, "ratio": 0.5, "nan": math.nan, "name": "MulBackward0",
        "none": None, "calls": ("a", "b"), "nested": (None, (1, 2.0)),
        "raised": RaisedObservation("RuntimeError", "no grad"), "z": 1 - 1j,
        "odd": object.__new__(type("Odd", (), {"__repr__": lambda self: "<odd>"})),
        "sub": type("Sub", (str,), {})("a str subclass")})
    return StepRecord(StepError(1, "RuntimeError", "backward", "boom"),
                      (("UserWarning", "careful"),), observations)


def test_fuzz_records_cross_with_their_arrays_exactly() -> None:
    record = _record()
    raw = _answer(lambda: {"records": _plain([record], list[StepRecord]), "crash": None})
    [back], crash = _records(raw)
    assert crash is None
    assert back.error == record.error and back.warnings == record.warnings
    assert list(back.observations) == list(record.observations)
    for key, want in record.observations.items():
        got = back.observations[key]
        if isinstance(want, TensorObservation):
            assert got == want and got.values.dtype == want.values.dtype
            assert got.values.shape == want.values.shape
            np.testing.assert_array_equal(got.values, want.values)
        elif key == "nan":
            assert type(got) is float and math.isnan(got)
        elif key in ("odd", "sub"):
            assert type(got) is Opaque and repr(got) == repr(want)
        else:
            assert got == want and type(got) is type(want)


def _encoded() -> dict[str, Any]:
    return json.loads(_answer(lambda: {"records": _plain([_record()], list[StepRecord]),
                                       "crash": None}))


def _tensor(message: dict[str, Any]) -> dict[str, Any]:
    return message["ok"]["records"][0]["observations"]["t0"]["tensor"]["values"]


def _set(path: list[Any], value: Any) -> Any:
    message = _encoded()
    target = message
    for key in path[:-1]:
        target = target[key]
    target[path[-1]] = value
    return message


OBSERVATIONS = ["ok", "records", 0, "observations"]
BAD_MESSAGES = {
    "not bytes": "a str",
    "not JSON": b"{",
    "too deep": b"[" * 100000 + b"]" * 100000,
    "an int of too many digits": b'{"ok": ' + b"9" * 5000 + b"}",
    "two answers": b'{"ok": 1, "raised": 2}',
    "an unknown tag": _set([*OBSERVATIONS, "calls"], {"pickle": "gASV"}),
    "two tags": _set([*OBSERVATIONS, "calls"], {"tuple": [], "complex": [1.0, 2.0]}),
    "a dtype that is not plain": _set([*OBSERVATIONS, "t0", "tensor", "values", "dtype"],
                                      "object"),
    "fewer bytes than the shape": _set([*OBSERVATIONS, "t0", "tensor", "values", "shape"],
                                       [3, 3]),
    "a negative dimension": _set([*OBSERVATIONS, "t0", "tensor", "values", "shape"], [-2, -3]),
    "data that is not base64": _set([*OBSERVATIONS, "t0", "tensor", "values", "data"], "**"),
    "a missing field": _set(["ok", "records", 0], {"error": None, "warnings": []}),
    "an extra field": _set(["ok", "crash_also"], None),
    "a bool where an int belongs": _set(["ok", "records", 0, "error", "statement"], True),
    "a list where a str belongs": _set(["ok", "records", 0, "warnings", 0, 1], ["x"]),
    "records and a crash": _set(["ok", "crash"], "both"),
    "an error of the wrong shape": {"raised": "SystemExit"},
}


@pytest.mark.parametrize("message", BAD_MESSAGES.values(), ids=BAD_MESSAGES.keys())
def test_malformed_records_are_refused_with_a_reason(message: Any) -> None:
    raw = message if isinstance(message, (bytes, str)) else json.dumps(message).encode()
    with pytest.raises(MalformedData):
        _records(raw)


def test_a_worker_cannot_send_a_verdict() -> None:
    # The parent judges: an answer that carries a result of its own is refused, whatever it
    # says, and a field the parent does not know is no way around that.
    result = CaseResult(case_id="t.c", engine="e", verdict="passed")
    raw = _answer(lambda: {"result": _plain(result, CaseResult), "repro": None,
                           "resident_bytes": 0, "replace": None})
    with pytest.raises(MalformedData, match="seen"):
        _outcome(raw)
    with pytest.raises(MalformedData, match="fields"):
        _outcome(_answer(lambda: {"seen": _plain(_seen("x"), CaseSeen), "tampered": None,
                                  "resident_bytes": 0, "replace": None, "verdict": "passed"}))


def test_an_answer_past_its_bound_is_refused_before_it_is_read() -> None:
    raw = b'{"ok": "' + b"A" * (MAX_ANSWER_BYTES + 1) + b'"}'
    with pytest.raises(MalformedData, match="bytes"):
        _outcome(raw)


def test_strict_reading_builds_only_the_types_asked_for() -> None:
    assert _strict([1, 2], tuple[int, ...], "x") == (1, 2)
    assert _strict(3, float, "x") == 3.0 and type(_strict(3, float, "x")) is float
    with pytest.raises(MalformedData):
        _strict(1.5, int, "x")
    with pytest.raises(MalformedData):
        _strict({"step": 0}, Check, "x")
