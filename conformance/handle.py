"""One engine handle, wherever the engine runs, and one judge of a case on it.

Every front end (`run`, the pytest plugin, the reference, engine reports) sees an engine
through an `EngineHandle`: its facts (`name`, `supports`, `message_strictness`, `level`,
`expectations`...), `run` a case, `abort` the case in flight, `close`. Two implementations:

- `EngineWorkers` (`conformance.workers`): the engine in its own worker processes; what the
  command line and the pytest plugin use.
- `InProcess`: the engine in this process, for the project's own tests and in-memory engines.

    >>> with InProcess(load_engine("refimpl")) as refimpl:            # doctest: +SKIP
    ...     judge(case, refimpl, Expectations.load(None)).verdict
    'passed'

`judge` is the one way a verdict is reached: a case the engine cannot run (unavailable, a
feature missing, listed as skip) is `unsupported` without running, the rest run, and the
engine's expectations entry turns a failure into `xfail` and a pass into `stale`. The verdict
is read at the handle's level (`--level`, else the adapter's own).

`timeout` means one thing everywhere: the seconds a case may run before it is an `error`.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping
from typing import Any, Protocol

from conformance.case import Case
from conformance.engines.base import Engine
from conformance.executor import DEFAULT_TIMEOUT, CaseResult, not_run, run_case, settle
from conformance.expectations import Expectations
from conformance.repro import repro_script


class EngineFacts(Protocol):
    """What the runner reads of an engine, wherever it runs (an `Engine`, or the plain-data
    `RemoteEngine` of an engine in workers)."""

    name: str
    message_strictness: str
    level: str
    unavailable_reason: str | None

    @property
    def available(self) -> bool: ...

    def supports(self, feature: str) -> bool: ...

    def describe(self) -> dict[str, Any]: ...


class EngineHandle(ABC):
    """An engine the runner can run cases on."""

    facts: EngineFacts
    repros: dict[str, str]
    """Repro scripts of the failed and errored cases, by case id."""
    runs_beside_others: bool = False
    """Whether cases may run on it from a thread while other engines run theirs (an engine in
    this process runs in the main thread, where its watchdog works)."""

    @abstractmethod
    def run(self, case: Case, seed: int | None = None, *,
            timeout: float = DEFAULT_TIMEOUT) -> CaseResult:
        """Run `case`; whatever the engine does, a `CaseResult` comes back."""

    def abort(self) -> None:  # noqa: B027 - an engine in this process stops with Ctrl-C itself
        """Stop the case in flight (from another thread): its `run` raises `Aborted`."""

    def close(self) -> None:  # noqa: B027 - nothing to release in this process
        """Release the engine's processes."""

    def __enter__(self) -> EngineHandle:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class Aborted(Exception):
    """The run was stopped while this case was in flight; it has no verdict."""


class InProcess(EngineHandle):
    """An engine run in this process, one case after the other."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self.facts = engine
        self.repros = {}

    def run(self, case: Case, seed: int | None = None, *,
            timeout: float = DEFAULT_TIMEOUT) -> CaseResult:
        result = run_case(case, self.engine, seed, timeout=timeout)
        if result.verdict in ("failed", "error"):
            try:
                self.repros[case.id] = repro_script(case, self.engine, result.seed, result.step)
            except Exception as exc:  # noqa: BLE001 - a repro is a help, never a second failure
                self.repros[case.id] = f"# no repro script: {type(exc).__name__}: {exc}\n"
        return result


def as_handle(engine: Engine | EngineHandle) -> EngineHandle:
    """`engine` as a handle: an `Engine` object runs in this process."""
    return engine if isinstance(engine, EngineHandle) else InProcess(engine)


def judge(case: Case, handle: EngineHandle, expectations: Expectations, *,
          timeout: float = DEFAULT_TIMEOUT, level: str | None = None,
          seed: int | None = None) -> CaseResult:
    """The verdict of `case` on the engine behind `handle`, read at `level` (default: the
    adapter's own)."""
    entry = expectations.match(case.id)
    result = not_run(case, handle.facts, seed, entry)
    if result is None:
        result = settle(handle.run(case, seed, timeout=timeout), entry, expectations.source)
    result.level = level or getattr(handle.facts, "level", "full")
    return result


def expectations_for(handle: EngineHandle, overrides: Mapping[str, Any] | None = None
                     ) -> Expectations:
    """The handle's expectations file, or the override given for its engine's name."""
    facts = handle.facts
    return Expectations.load((overrides or {}).get(facts.name,
                                                   getattr(facts, "expectations", None)))
