"""Run many cases on several engines and summarise.

    >>> with EngineWorkers("refimpl") as refimpl, EngineWorkers("torch") as torch:  # doctest: +SKIP
    ...     report = run_suite(cases, [refimpl, torch])
    >>> report.run_for("torch").summary()["passed"]                                # doctest: +SKIP

Every engine is an `EngineHandle` (`conformance.run.handle`) and every verdict comes from
`handle.judge`. Engines in worker processes run side by side, one thread each waiting on its
workers; an `Engine` object given directly runs in this process, one case after the other (the
in-memory engines of the project's own tests). `on_result` sees every result as it arrives, so
a report can be written as the run goes; Ctrl-C stops the run between cases and returns what
has been done, marked `interrupted`.
"""

from __future__ import annotations

import random
import subprocess
import threading
import time
from collections import Counter
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from conformance import __version__
from conformance.casefile.case import Case
from conformance.casefile.files import REPO_ROOT
from conformance.engines.base import Engine
from conformance.run.executor import DEFAULT_TIMEOUT, VERDICTS, CaseResult
from conformance.run.handle import Aborted, EngineFacts, EngineHandle, as_handle
from conformance.verdict.expectations import Entry, Expectations
from conformance.verdict.judge import expectations_for, judge

SUMMARY_KEYS = VERDICTS


@dataclass
class EngineRun:
    engine: EngineFacts
    results: list[CaseResult] = field(default_factory=list)
    unused_expectations: list[Entry] = field(default_factory=list)
    expectations_source: str | None = None
    wall_s: float = 0.0
    repros: dict[str, str] = field(default_factory=dict)
    """Repro scripts of the failed and errored cases, by case id (from engines in workers)."""

    level: str = "full"
    """The level this engine's verdicts are read at (`--level`, else the adapter's own)."""

    def summary(self, topic: str | None = None, level: str | None = None) -> dict[str, int]:
        level = level or self.level
        counts = Counter(r.verdict_at(level) for r in self.results
                         if topic is None or r.topic == topic)
        return {key: counts.get(key, 0) for key in SUMMARY_KEYS}


@dataclass
class SuiteReport:
    cases: list[Case]
    runs: list[EngineRun]
    wall_s: float = 0.0
    interrupted: bool = False
    """The run was stopped before every case ran on every engine (Ctrl-C, SIGTERM)."""

    @property
    def ok(self) -> bool:
        return all(result.ok for run in self.runs for result in run.results)

    def topics(self) -> list[str]:
        return sorted({case.topic for case in self.cases})

    def run_for(self, name: str) -> EngineRun:
        return next(run for run in self.runs if run.engine.name == name)


def run_suite(cases: Sequence[Case], engines: Sequence[Engine | EngineHandle], *,
              timeout: float | None = DEFAULT_TIMEOUT,
              expectations: dict[str, Path] | None = None,
              all_case_ids: Sequence[str] | None = None,
              on_result: Callable[[EngineRun, CaseResult], None] | None = None,
              stop: threading.Event | None = None, level: str | None = None,
              shuffle: int | None = None) -> SuiteReport:
    """Run every case on every engine. `expectations` overrides an engine's expectations file
    (keyed by engine name). An expectations entry is stale only when it matches none of
    `all_case_ids` (default: the cases run), so running a selection reports none. `level`
    (`full` or `semantics`) is the level verdicts are read at; None: each adapter's own.
    `shuffle` runs the cases in an order drawn from that seed (the same for every engine), so
    engine state kept between cases shows; results and reports keep the cases' order."""
    start = time.perf_counter()
    stop = stop or threading.Event()
    lock = threading.Lock()
    timeout = timeout or DEFAULT_TIMEOUT
    known_ids = list(all_case_ids) if all_case_ids is not None else [c.id for c in cases]
    order = list(cases)
    if shuffle is not None:
        random.Random(shuffle).shuffle(order)
    runs = []
    for engine in engines:
        handle = as_handle(engine)
        listed = expectations_for(handle, expectations)
        run = EngineRun(handle.facts, expectations_source=listed.source,
                        level=level or getattr(handle.facts, "level", "full"))
        run.unused_expectations = listed.unused(known_ids)
        runs.append((run, handle, listed))

    def drive(run: EngineRun, handle: EngineHandle, listed: Expectations) -> None:
        engine_start = time.perf_counter()
        for case in order:
            if stop.is_set():
                break
            try:
                result = judge(case, handle, listed, timeout=timeout, level=run.level)
            except Aborted:
                break
            if case.id in handle.repros:
                script = handle.repros.pop(case.id)
                # A case whose only failed checks are surface ones passes a semantics run: it
                # gets no repro script there.
                if result.verdict_at(run.level) != "passed":
                    run.repros[case.id] = script
            with lock:
                run.results.append(result)
                if on_result is not None:
                    on_result(run, result)
        run.wall_s = time.perf_counter() - engine_start

    beside = [item for item in runs if item[1].runs_beside_others]
    with ThreadPoolExecutor(max_workers=max(1, len(beside))) as threads:
        futures = []

        def stop_all() -> None:
            stop.set()  # each engine's thread stops; a case in flight gets no verdict
            for _, handle, _ in beside:
                handle.abort()

        try:
            # Submitted inside the `try`: a Ctrl-C that lands while the threads start must stop
            # them too, or leaving the `with` block waits for every case to run.
            futures += [threads.submit(drive, *item) for item in beside]
            for item in runs:
                if not item[1].runs_beside_others:
                    drive(*item)
            while wait(futures, timeout=0.2).not_done:  # short waits: Ctrl-C gets through
                pass
        except KeyboardInterrupt:
            stop_all()
        except BaseException:
            stop_all()
            raise
        for future in futures:
            future.result()
    position = {case.id: index for index, case in enumerate(cases)}
    for run, _, _ in runs:
        run.results.sort(key=lambda result: position.get(result.case_id, len(position)))
    return SuiteReport(list(cases), [run for run, _, _ in runs], time.perf_counter() - start,
                       interrupted=stop.is_set())


def suite_info() -> dict[str, Any]:
    """The suite's version and the git commit of the checkout, when there is one."""
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

