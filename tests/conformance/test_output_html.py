"""The HTML report of a run with nothing failing still says what did not run and what is
expected to diverge, and why."""

from __future__ import annotations

import re

from conformance.casefile.case import Case
from conformance.report.formats import to_html
from conformance.run.executor import CaseResult
from conformance.verdict.suite import EngineRun, SuiteReport


class Info:
    name, version, device, available, unavailable_reason = "e", "1", "cpu", True, None


def clean_report() -> SuiteReport:
    def result(case_id: str, verdict: str, reason: str | None = None) -> CaseResult:
        return CaseResult(case_id=case_id, engine="e", verdict=verdict,
                          topic=case_id.split(".")[0], reason=reason)

    results = [
        result("cuda.a", "unsupported", "engine lacks feature cuda"),
        result("cuda.b", "unsupported", "engine lacks feature cuda"),
        result("leaf.a", "passed"),
        result("leaf.b", "xfail", "the engine names nodes <Op>Backward"),
        result("leaf.c", "xfail", "the engine names nodes <Op>Backward"),
        result("grad.a", "passed"),
    ]
    cases = [Case.from_dict({"id": r.case_id, "rule": "r", "steps": [{"run": "x = 1"}]})
             for r in results]
    return SuiteReport(cases, [EngineRun(Info(), results=results)])


def cell(page: str, topic: str) -> tuple[str, str]:
    match = re.search(rf"<tr><td>{topic}</td><td class=(\w+)>([^<]*)</td></tr>", page)
    assert match, page
    return match.group(1), match.group(2)


def test_a_topic_that_did_not_run_is_grey_and_says_so() -> None:
    page = to_html(clean_report())
    assert cell(page, "cuda") == ("none", "none run, 2 unsupported")
    assert cell(page, "leaf") == ("mixed", "1/3 passed, 2 xfail")
    assert cell(page, "grad") == ("passed", "1/1 passed")
    assert ".none{" in page


def test_the_expected_divergences_are_listed_with_their_reasons() -> None:
    page = to_html(clean_report())
    assert "<h2>Expected divergences: e</h2>" in page
    assert ("<tr><td class=n>2</td><td>the engine names nodes &lt;Op&gt;Backward</td>"
            "<td><code>leaf.b</code></td></tr>") in page
