"""`run --shuffle SEED`: cases run in another order, the same on every engine; reports keep the
cases' order. Engine state kept from one case to the next then shows."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from conformance.casefile.case import Case
from conformance.engines import load_engine
from conformance.verdict.suite import run_suite

REPO = Path(__file__).resolve().parents[2]


def _cases(n: int) -> list[Case]:
    return [Case.from_dict({"id": f"order.c{i:02d}", "rule": "r",
                            "steps": [{"run": f"x = torch.ones({i + 1})",
                                       "expect": {"shape(x)": [i + 1]}}]})
            for i in range(n)]


def test_shuffle_runs_another_order_and_reports_the_cases_order() -> None:
    cases = _cases(12)
    seen: list[str] = []
    report = run_suite(cases, [load_engine("refimpl")], shuffle=7,
                       on_result=lambda run, result: seen.append(result.case_id))
    ids = [case.id for case in cases]
    assert sorted(seen) == ids and seen != ids
    assert [r.case_id for r in report.runs[0].results] == ids
    assert all(r.verdict == "passed" for r in report.runs[0].results)
    again: list[str] = []
    run_suite(cases, [load_engine("torch")], shuffle=7,
              on_result=lambda run, result: again.append(result.case_id))
    assert again == seen  # the same order on every engine


def test_state_kept_between_cases_shows_under_shuffle() -> None:
    # An engine that keeps state between cases: the first case it runs decides the rest.
    first = Case.from_dict({"id": "state.a-first", "rule": "r",
                            "steps": [{"run": "x = torch.ones(2)"}]})
    later = [Case.from_dict({"id": f"state.b{i}", "rule": "r",
                             "steps": [{"run": "x = torch.ones(2)",
                                        "expect": {"dtype(x)": "float32"}}]})
             for i in range(6)]
    engine = load_engine("torch")
    base = engine.namespace
    ran: list[int] = []

    def namespace(rng):
        names = base(rng)
        ran.append(1)
        if len(ran) > 1:  # the engine caches something from its first case, wrongly
            names["torch"].ones = lambda *size: engine.torch.ones(
                *size, dtype=engine.torch.float64)
        return names

    engine.namespace = namespace
    in_order = run_suite([first, *later], [engine]).runs[0].results
    assert [r.verdict for r in in_order] == ["passed"] + ["failed"] * 6
    ran.clear()
    order: list[str] = []
    shuffled = run_suite([first, *later], [engine], shuffle=1,
                         on_result=lambda run, result: order.append(result.case_id)).runs[0]
    assert order[0] != first.id
    # Another case went first and passed; every case after it failed: the verdicts depend on
    # the order, which is what a shuffled run is there to show.
    verdicts = {r.case_id: r.verdict for r in shuffled.results}
    assert verdicts[order[0]] == "passed"
    assert [verdicts[case_id] for case_id in order[1:] if case_id != first.id] == ["failed"] * 5


def test_the_command_line_takes_a_seed(tmp_path: Path) -> None:
    report = tmp_path / "r.json"
    done = subprocess.run([sys.executable, "-m", "conformance", "run", "--engine", "refimpl",
                           "-k", "leaf.", "--shuffle", "5", "--fresh-worker", "--json",
                           str(report), "-q"], cwd=REPO, capture_output=True, text=True,
                          timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    results = json.loads(report.read_text())["results"]
    ids = [r["case_id"] for r in results]
    listed = subprocess.run([sys.executable, "-m", "conformance", "list", "-k", "leaf."],
                            cwd=REPO, capture_output=True, text=True, timeout=120).stdout
    assert ids == [line.split()[0] for line in listed.splitlines() if line.strip()]
    assert all(r["verdict"] == "passed" for r in results)
