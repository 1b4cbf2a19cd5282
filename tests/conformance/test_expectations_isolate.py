"""The `isolate` section of an expectations file: a case that can damage the process it runs in
is judged as under `xfail`, and the engine's worker is replaced right after it."""

from __future__ import annotations

from pathlib import Path

from conformance.casefile.case import Case
from conformance.run.workers import EngineWorkers
from conformance.verdict.expectations import Expectations
from conformance.verdict.judge import judge

CASE = {"id": "topic.{name}", "rule": "A rule.",
        "steps": [{"run": "x = torch.tensor([1.0, 2.0])",
                   "expect": {"x": [1.0, 5.0]}}]}


def _case(name: str) -> Case:
    return Case.from_dict({**CASE, "id": CASE["id"].format(name=name)})


def test_an_isolated_case_is_xfail_and_the_next_case_gets_a_fresh_worker(tmp_path: Path):
    path = tmp_path / "expectations.yaml"
    path.write_text('xfail:\n  topic.kept: differs\nisolate:\n  topic.damaging: "BUG: corrupts '
                    'memory"\n', encoding="utf-8")
    expectations = Expectations.load(path)
    assert expectations.match("topic.damaging").kind == "isolate"
    with EngineWorkers("faulty_workers:pid") as engine:
        first = engine.call(_worker_pid, timeout=30)
        kept = judge(_case("kept"), engine, expectations)
        assert engine.call(_worker_pid, timeout=30) == first, "xfail keeps the worker"
        damaging = judge(_case("damaging"), engine, expectations)
        after = engine.call(_worker_pid, timeout=30)
    assert (kept.verdict, damaging.verdict) == ("xfail", "xfail")
    assert damaging.reason == "BUG: corrupts memory"
    assert after != first, "the worker that ran the isolated case was replaced"


def _worker_pid(engine) -> int:
    import os

    return os.getpid()
