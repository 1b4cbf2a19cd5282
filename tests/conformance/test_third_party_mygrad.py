"""The shipped third-party adapter (MyGrad) runs the real spec, and its expectations file is true.

An adapter's xfail list is a claim about the engine: every listed case must still fail (else it
is stale) and every failure must be listed with a reason, so the run ends with no `failed`,
`error` or `stale` verdict and no entry that matches no case.
"""

from __future__ import annotations

import pytest

from conformance.casefile.loader import DEFAULT_SPEC_DIR, SpecResources, load
from conformance.engines import load_engine
from conformance.verdict.suite import run_suite

pytest.importorskip("mygrad", reason="MyGrad is not installed (pip install -c constraints.txt "
                    "mygrad)")


def test_mygrad_runs_the_spec_with_every_divergence_listed() -> None:
    loaded = load([DEFAULT_SPEC_DIR / "cases"], SpecResources.load(DEFAULT_SPEC_DIR))
    assert not loaded.problems
    engine = load_engine("mygrad")
    assert engine.available, engine.unavailable_reason
    run = run_suite(loaded.cases, [engine]).runs[0]
    summary = run.summary()
    unexpected = [(r.case_id, r.verdict, r.message) for r in run.results
                  if r.verdict in ("failed", "error", "stale")]
    assert unexpected == []
    assert run.unused_expectations == []
    assert summary["passed"] > 0, "the adapter proves the interface on real cases"
    assert summary["xfail"] > 0
