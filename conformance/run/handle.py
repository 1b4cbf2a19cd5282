"""One engine handle, wherever the engine runs.

Every front end (`run`, the pytest plugin, the reference, engine reports, the fuzzer) sees an
engine through an `EngineHandle`: its facts (`name`, `supports`, `message_strictness`,
`level`, `expectations`...), `run` a case, `call` a function on the engine, `abort` the case in
flight, `close`. Two implementations:

- `EngineWorkers` (`conformance.run.workers`): the engine in its own worker processes; what the
  command line and the pytest plugin use.
- `InProcess`: the engine in this process, for the project's own tests and in-memory engines.

    >>> with InProcess(load_engine("refimpl")) as refimpl:            # doctest: +SKIP
    ...     refimpl.run(case, timeout=10).verdict
    'passed'

Verdicts come from `conformance.verdict.judge`. `timeout` means one thing everywhere: the
seconds a case (or a call) may run before it is an `error`.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable
from typing import Any, Protocol

from conformance.casefile.case import Case
from conformance.engines.base import Engine
from conformance.run.executor import DEFAULT_TIMEOUT, CaseResult, run_case
from conformance.run.observe import CaseTimeout, watchdog
from conformance.run.repro import repro_script


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

    def call(self, function: Callable[..., Any], *args: Any, timeout: float) -> Any:
        """`function(engine, *args)` where the engine is; it must return plain data (JSON:
        strings, numbers, lists, dicts with string keys). Raises `EngineCrashed` when the
        engine's process dies or hangs, or the function raises."""
        return self.call_later(function, *args, timeout=timeout).result()

    @abstractmethod
    def call_later(self, function: Callable[..., Any], *args: Any, timeout: float) -> Any:
        """Start `call`; the returned object's `result()` waits for its answer (calls on
        engines in worker processes then run side by side)."""

    @abstractmethod
    def repro_script(self, case: Case, seed: int | None = None,
                     last_step: int | None = None) -> str:
        """`conformance.run.repro.repro_script` for this engine, written where it runs."""

    def abort(self) -> None:  # noqa: B027 - an engine in this process stops with Ctrl-C itself
        """Stop the case in flight (from another thread): its `run` raises `Aborted`."""

    def close(self) -> None:  # noqa: B027 - nothing to release in this process
        """Release the engine's processes."""

    def replace_process(self) -> None:  # noqa: B027 - an engine in this process has no other
        """Run the next case in a fresh process: the last one may have damaged this one (an
        expectations entry under `isolate`)."""

    def __enter__(self) -> EngineHandle:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class Aborted(Exception):
    """The run was stopped while this case was in flight; it has no verdict."""


class EngineCrashed(Exception):
    """The engine's process died or hung during a `call`; the message says how."""


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

    def call_later(self, function: Callable[..., Any], *args: Any,
                   timeout: float) -> _Answered:
        # Runs now, under the watchdog (in the main thread) that turns a hang into a crash.
        try:
            with watchdog(timeout):
                return _Answered(function(self.engine, *args), None)
        except CaseTimeout:
            return _Answered(None, f"the engine did not answer within {timeout:g} s (a hang)")
        except Exception as exc:  # noqa: BLE001 - the engine's failure, reported as a crash
            return _Answered(None, f"{type(exc).__name__}: {exc}")

    def repro_script(self, case: Case, seed: int | None = None,
                     last_step: int | None = None) -> str:
        return repro_script(case, self.engine, seed, last_step)

    def close(self) -> None:
        self.engine.close()


class _Answered:
    """The answer of a call made in this process."""

    def __init__(self, value: Any, crash: str | None) -> None:
        self.value = value
        self.crash = crash

    def result(self) -> Any:
        if self.crash is not None:
            raise EngineCrashed(self.crash)
        return self.value


def as_handle(engine: Engine | EngineHandle) -> EngineHandle:
    """`engine` as a handle: an `Engine` object runs in this process."""
    return engine if isinstance(engine, EngineHandle) else InProcess(engine)
