"""Run many cases on several engines, one engine after the other, and summarise.

    >>> report = run_suite(cases, [load_engine("refimpl"), load_engine("torch")])  # doctest: +SKIP
    >>> report.summary("torch")["passed"]                                          # doctest: +SKIP
"""

from __future__ import annotations

import subprocess
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from conformance.case import Case
from conformance.engines.base import Engine
from conformance.executor import DEFAULT_TIMEOUT, VERDICTS, CaseResult, run_case
from conformance.expectations import Entry, Expectations
from conformance.loader import REPO_ROOT

SUMMARY_KEYS = VERDICTS


@dataclass
class EngineRun:
    engine: Engine
    results: list[CaseResult] = field(default_factory=list)
    unused_expectations: list[Entry] = field(default_factory=list)
    expectations_source: str | None = None
    wall_s: float = 0.0

    def summary(self, topic: str | None = None) -> dict[str, int]:
        counts = Counter(r.verdict for r in self.results if topic is None or r.topic == topic)
        return {key: counts.get(key, 0) for key in SUMMARY_KEYS}


@dataclass
class SuiteReport:
    cases: list[Case]
    runs: list[EngineRun]
    wall_s: float = 0.0

    @property
    def ok(self) -> bool:
        return all(result.ok for run in self.runs for result in run.results)

    def topics(self) -> list[str]:
        return sorted({case.topic for case in self.cases})

    def run_for(self, name: str) -> EngineRun:
        return next(run for run in self.runs if run.engine.name == name)


def run_suite(cases: Sequence[Case], engines: Sequence[Engine], *,
              timeout: float | None = DEFAULT_TIMEOUT,
              expectations: dict[str, Path] | None = None) -> SuiteReport:
    """Run every case on every engine. `expectations` overrides an engine's expectations file."""
    start = time.perf_counter()
    runs = []
    for engine in engines:
        path = (expectations or {}).get(engine.name, engine.expectations)
        listed = Expectations.load(path)
        run = EngineRun(engine, expectations_source=str(path) if path else None)
        engine_start = time.perf_counter()
        for case in cases:
            run.results.append(run_case(case, engine, timeout=timeout, expectations=listed))
        run.wall_s = time.perf_counter() - engine_start
        run.unused_expectations = listed.unused([case.id for case in cases])
        runs.append(run)
    return SuiteReport(list(cases), runs, time.perf_counter() - start)


def suite_info() -> dict[str, Any]:
    """The suite's version and the git commit of the checkout, when there is one."""
    from conformance import __version__

    if not (REPO_ROOT / ".git").exists():
        # An installed wheel: a repository around site-packages is not this suite's.
        return {"name": "autograd-conformance", "version": __version__, "commit": None}
    try:
        commit = subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=REPO_ROOT, capture_output=True, text=True,
            timeout=5, check=True,
        ).stdout.strip() or None
    except (OSError, subprocess.SubprocessError):
        commit = None
    return {"name": "autograd-conformance", "version": __version__, "commit": commit}

