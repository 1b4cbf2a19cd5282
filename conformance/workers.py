"""Engines run in worker processes: nothing an engine does reaches the runner or another engine.

The parent process owns the cases, the verdicts and the reports; it never imports an engine.
Each engine lives in its own pool of worker processes (`pebble.ProcessPool`), started by the
`forkserver` method so that no engine state is ever inherited. A worker loads the engine once,
then receives one case at a time and sends back plain data: the `CaseResult`, with the repro
script of a failure (only the worker has the engine's hooks to write it).

What the parent enforces, whatever the engine does:
- a hard timeout per case (the case's own watchdog plus a grace period): a worker that hangs,
  blocks SIGALRM or swallows the watchdog's exception is killed;
- a dead worker (a segfault, `os._exit`, `sys.exit`, a kill) costs the case in flight one
  `error` verdict that says what happened, and a fresh worker runs the next case;
- memory: each worker's address space is capped (`RLIMIT_AS`), and a worker whose resident
  memory has grown past half of that cap is replaced after the case;
- a case that rebinds an attribute of the engine's own classes or modules (only `settable`
  names can be assigned, e.g. `type(x).grad = None`) gets an `error`, and the worker is
  replaced before the next case sees the damage.

    >>> with EngineWorkers("torch") as torch_engine:                 # doctest: +SKIP
    ...     result = torch_engine.run(case, timeout=10)
    >>> result.verdict                                               # doctest: +SKIP
    'passed'

`pebble` is used rather than `concurrent.futures`: its pool kills a worker whose task times
out and replaces it, and tells a dead worker's exit code apart from an exception.
"""

from __future__ import annotations

import multiprocessing
import os
import signal
import time
from collections.abc import Iterable
from concurrent.futures import TimeoutError as FutureTimeout
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from pebble import ProcessExpired, ProcessPool

from conformance.case import Case
from conformance.engines.base import DESCRIBED
from conformance.executor import DEFAULT_TIMEOUT, CaseResult, run_case

DEFAULT_MEMORY_MB = 4096
GRACE_S = 5.0
"""How long past the case's own timeout the parent waits before it kills the worker."""
START_TIMEOUT_S = 120.0
"""How long a new worker may take to import and set up its engine."""


class Aborted(Exception):
    """The run was stopped while this case was in flight; it has no verdict."""


class WorkerStartError(RuntimeError):
    """The engine cannot be loaded in a worker (unknown name, import error, bad factory)."""


@dataclass(frozen=True)
class RemoteEngine:
    """What the parent knows of an engine running in workers: the facts reports and verdicts
    need, as plain data. It answers `supports`, `available` and `describe` like an `Engine`."""

    spec: str
    name: str
    version: str
    device: str
    torch_version: str
    message_strictness: str
    level: str
    features: frozenset[str]
    expectations: Path | None
    unavailable_reason: str | None

    @property
    def available(self) -> bool:
        return self.unavailable_reason is None

    def supports(self, feature: str) -> bool:
        return feature in self.features

    def describe(self) -> dict[str, Any]:
        return {**{key: getattr(self, key) for key in DESCRIBED}, "spec": self.spec}


@dataclass
class _Worker:
    """The state of one worker process (module globals of the worker, never of the parent)."""

    engine: Any = None
    watched: list[tuple[Any, str, int]] = field(default_factory=list)


_WORKER = _Worker()
_MISSING = object()


def _initialize(spec: str, memory_bytes: int | None, settable: tuple[str, ...]) -> None:
    """Runs once in each new worker: cap its memory, load the engine, note what it owns."""
    if memory_bytes:
        import resource

        resource.setrlimit(resource.RLIMIT_AS, (memory_bytes, memory_bytes))
    # The parent handles Ctrl-C; a worker must not die of it halfway through a case.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    from conformance.engines import load_engine

    try:
        _WORKER.engine = load_engine(spec)
    except BaseException as exc:  # noqa: BLE001 - reported by the first task, in one line
        _WORKER.engine = exc
        return
    _WORKER.watched = _owned_attributes(_WORKER.engine, settable)


def _owned_attributes(engine: Any, names: tuple[str, ...]) -> list[tuple[Any, str, int]]:
    """The engine's modules and classes reachable from its namespace, with the identity of
    every settable-named attribute they hold: a case may assign `x.grad`, but must not reach
    `type(x).grad` or `torch.Tensor.grad` through an alias and change them for later cases."""
    if not getattr(engine, "available", False):
        return []
    try:
        namespace = engine.namespace(np.random.default_rng(0))
    except BaseException:  # noqa: BLE001 - the first case reports a namespace that fails
        return []
    owners: dict[int, Any] = {}
    for root in namespace.values():
        for obj in (root, *_members(root)):
            if isinstance(obj, type):
                for cls in obj.__mro__[:-1]:
                    owners.setdefault(id(cls), cls)
            elif hasattr(obj, "__dict__") and not callable(obj):
                owners.setdefault(id(obj), obj)
    return [(owner, name, id(_own(owner, name))) for owner in owners.values() for name in names]


def _members(root: Any) -> Iterable[Any]:
    target = getattr(root, "_module", root)  # a facade over the engine's module
    try:
        return list(vars(target).values())
    except TypeError:
        return []


def _own(owner: Any, name: str) -> Any:
    try:
        return vars(owner).get(name, _MISSING)
    except TypeError:
        return _MISSING


def _tampered() -> str | None:
    for owner, name, identity in _WORKER.watched:
        if id(_own(owner, name)) != identity:
            return f"{getattr(owner, '__name__', type(owner).__name__)}.{name}"
    return None


def _describe(features: tuple[str, ...]) -> dict[str, Any]:
    engine = _WORKER.engine
    if isinstance(engine, BaseException):
        raise WorkerStartError(str(engine) or type(engine).__name__)
    expectations = getattr(engine, "expectations", None)
    return {
        **engine.describe(),
        "features": frozenset(f for f in features if engine.supports(f)),
        "expectations": Path(expectations) if expectations else None,
    }


@dataclass
class _Outcome:
    result: CaseResult
    repro: str | None
    resident_bytes: int
    tampered: bool


def _run(case: Case, seed: int | None, timeout: float) -> _Outcome:
    """Run one case in the worker: the result, a repro script when it failed, the RSS."""
    from conformance.repro import repro_script

    engine = _WORKER.engine
    result = run_case(case, engine, seed, timeout=timeout)
    tampered = _tampered()
    if tampered is not None:
        result.verdict = "error"
        result.message = (f"the case changed the engine itself ({tampered} was rebound), "
                          "which would change the verdicts of later cases; the worker was "
                          "replaced")
    script = None
    if result.verdict in ("failed", "error"):
        try:
            script = repro_script(case, engine, result.seed, result.step)
        except Exception as exc:  # noqa: BLE001 - a repro is a help, never a second failure
            script = f"# no repro script: {type(exc).__name__}: {exc}\n"
    return _Outcome(result, script, _resident_bytes(), tampered is not None)


def _observe(program: Any) -> tuple[Any, str | None]:
    """The fuzzer's records of `program` on this worker's engine, or the engine's crash."""
    from conformance.fuzz.differential import compile_program
    from conformance.fuzz.runner import observe_safely

    return observe_safely(compile_program(program), _WORKER.engine)


def _repro(case: Case, seed: int | None, last_step: int | None) -> str:
    from conformance.repro import repro_script

    return repro_script(case, _WORKER.engine, seed, last_step)


def _resident_bytes() -> int:
    try:
        with open("/proc/self/statm", encoding="ascii") as stream:
            return int(stream.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return 0


def _context() -> multiprocessing.context.BaseContext:
    method = "forkserver" if "forkserver" in multiprocessing.get_all_start_methods() else "spawn"
    return multiprocessing.get_context(method)


class EngineWorkers:
    """A pool of worker processes running one engine; `run` is safe to call from one thread."""

    def __init__(self, spec: str, *, memory_mb: int | None = DEFAULT_MEMORY_MB,
                 features: Iterable[str] = (), settable: Iterable[str] = ()) -> None:
        self.spec = spec
        self.memory_bytes = memory_mb * 2**20 if memory_mb else None
        self._initargs = (spec, self.memory_bytes, tuple(settable))
        self._aborted = False
        self._future: Any = None
        self._pool = self._new_pool()
        self.engine = self._start(tuple(features))
        self.repros: dict[str, str] = {}
        """Repro scripts of failed or errored cases, by case id."""

    def _new_pool(self) -> ProcessPool:
        return ProcessPool(max_workers=1, context=_context(), initializer=_initialize,
                           initargs=self._initargs)

    def _start(self, features: tuple[str, ...]) -> RemoteEngine:
        future = self._pool.schedule(_describe, args=(features,), timeout=START_TIMEOUT_S)
        try:
            facts = future.result()
        except WorkerStartError as exc:
            self.close()
            raise WorkerStartError(f"engine {self.spec!r}: {exc}") from None
        except (ProcessExpired, FutureTimeout, BrokenProcessPool) as exc:
            self.close()
            raise WorkerStartError(f"engine {self.spec!r}: the worker died while loading it "
                                   f"({_what_happened(exc, START_TIMEOUT_S)})") from None
        return RemoteEngine(spec=self.spec, **{k: facts[k] for k in (
            "name", "version", "device", "torch_version", "message_strictness", "features",
            "expectations", "unavailable_reason")}, level=str(facts.get("level", "full")))

    def run(self, case: Case, seed: int | None = None, *,
            timeout: float = DEFAULT_TIMEOUT) -> CaseResult:
        """Run `case` in a worker; whatever happens to the worker, a `CaseResult` comes back."""
        start = time.perf_counter()
        limit = timeout + GRACE_S
        if self._aborted:
            raise Aborted(case.id)
        self._future = future = self._pool.schedule(_run, args=(case, seed, timeout),
                                                    timeout=limit)
        if self._aborted:
            # abort() ran between the check above and publishing the future, so it could not
            # cancel this one: cancel it here, or the run waits out the case's whole timeout.
            future.cancel()
            raise Aborted(case.id)
        try:
            outcome = future.result()
        except BaseException as exc:
            if self._aborted:
                raise Aborted(case.id) from None
            if not future.done() or future.cancelled() or future.exception() is not exc:
                raise  # the user's Ctrl-C in this process, not the worker's doing
            self._recycle()
            if isinstance(exc, (ProcessExpired, FutureTimeout)):
                what = f"the engine's worker process {_what_happened(exc, limit)}"
            else:  # SystemExit and the like, raised by the engine outside any statement
                what = f"the engine raised {type(exc).__name__}: {exc} outside the case's control"
            return self._lost(case, seed, f"{what}; a fresh worker runs the next case", start)
        if outcome.repro is not None:
            self.repros[case.id] = outcome.repro
        if outcome.tampered or (self.memory_bytes
                                and outcome.resident_bytes > self.memory_bytes // 2):
            self._recycle()
        return outcome.result

    def _lost(self, case: Case, seed: int | None, message: str, start: float) -> CaseResult:
        return CaseResult(case_id=case.id, engine=self.engine.name, verdict="error",
                          topic=case.topic, seed=case.seed if seed is None else seed,
                          message=message, duration_s=time.perf_counter() - start)

    def _recycle(self) -> None:
        self._pool.stop()
        self._pool.join()
        self._pool = self._new_pool()

    def observe_later(self, program: Any, timeout: float) -> Any:
        """Start observing a fuzzer program; `observed` gives its records or crash."""
        return self._pool.schedule(_observe, args=(program,), timeout=timeout)

    def observed(self, future: Any, timeout: float) -> tuple[Any, str | None]:
        """The records of `observe_later`, or a crash text when the worker died or hung (the
        worker is then replaced, and the fuzzer reports the crash as a finding)."""
        try:
            return future.result()
        except BaseException as exc:
            if not future.done() or future.cancelled() or future.exception() is not exc:
                raise
            self._recycle()
            if isinstance(exc, (ProcessExpired, FutureTimeout)):
                return None, f"the engine's worker process {_what_happened(exc, timeout)}"
            return None, f"{type(exc).__name__}: {exc}"

    def repro_script(self, case: Case, seed: int | None = None,
                     last_step: int | None = None) -> str:
        """`conformance.repro.repro_script` for this engine, written where the engine is."""
        return self._pool.schedule(_repro, args=(case, seed, last_step),
                                   timeout=START_TIMEOUT_S).result()

    def abort(self) -> None:
        """Stop the case in flight (from another thread): its `run` raises `Aborted`."""
        self._aborted = True
        future = self._future
        if future is not None:
            future.cancel()  # pebble kills the worker running it

    def close(self) -> None:
        self._pool.stop()
        self._pool.join()

    def __enter__(self) -> EngineWorkers:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _what_happened(exc: BaseException, limit: float) -> str:
    if isinstance(exc, FutureTimeout):
        return f"did not answer within {limit:g} s and was killed (a hang, or an engine that " \
               "blocks or swallows the case's watchdog)"
    if isinstance(exc, ProcessExpired):
        code = exc.exitcode
        if code is not None and code < 0:
            try:
                name = signal.Signals(-code).name
            except ValueError:
                name = f"signal {-code}"
            killed = " (out of memory?)" if name == "SIGKILL" else ""
            return f"was killed by {name}{killed}"
        return f"exited with status {code}"
    return "was stopped"


def facts(engine: Any) -> Any:
    """What a caller reads of an engine (name, features, strictness...), wherever it runs:
    the `RemoteEngine` of engines in workers, the `Engine` itself otherwise."""
    return engine.engine if isinstance(engine, EngineWorkers) else engine
