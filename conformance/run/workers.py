"""Engines run in worker processes: nothing an engine does reaches the runner or another engine.

The parent process owns the cases, the verdicts and the reports; it never imports an engine.
Each engine lives in its own pool of worker processes (`pebble.ProcessPool`), started by the
`forkserver` method so that no engine state is ever inherited. A worker loads the engine once,
then receives one case at a time and sends back JSON text, never a pickled object: a case can
make values whose `repr` is a `str` subclass with its own `__reduce__`, and unpickling such a
value would run code in the runner. The parent rebuilds the `CaseResult` (and the repro script
of a failure: only the worker has the engine's hooks to write it) from that text, checking every
field's type; data it cannot read is an `error` verdict, never a crash of the runner.

What the parent enforces, whatever the engine does:
- a hard timeout per case (the case's own watchdog plus a grace period): a worker that hangs,
  blocks SIGALRM or swallows the watchdog's exception is killed, and the verdict shows the
  Python stack it hung in (`faulthandler` writes it to a file the parent reads);
- a dead worker (a segfault, `os._exit`, `sys.exit`, a kill) costs the case in flight one
  `error` verdict that says what happened, and a fresh worker runs the next case (and writes
  the lost case's repro script);
- memory: each worker's address space is capped (`RLIMIT_AS`, never above the hard limit the
  runner itself was started under), and a worker whose resident memory has grown past half of
  that cap is replaced after the case;
- a case that rebinds an attribute of the engine's own classes or modules (only `settable`
  names can be assigned, e.g. `type(x).grad = None`) gets an `error`, and the worker is
  replaced before the next case sees the damage;
- a case after which the engine reports state it could not restore (`Engine.state_leak`) keeps
  its verdict, and the worker is replaced; `fresh_worker_per_case=True` replaces it after every
  case.

    >>> with EngineWorkers("torch") as torch_engine:                 # doctest: +SKIP
    ...     result = torch_engine.run(case, timeout=10)
    >>> result.verdict                                               # doctest: +SKIP
    'passed'

`pebble` is used rather than `concurrent.futures`: its pool kills a worker whose task times
out and replaces it, and tells a dead worker's exit code apart from an exception.
"""

from __future__ import annotations

import faulthandler
import multiprocessing
import multiprocessing.connection
import multiprocessing.forkserver
import multiprocessing.resource_tracker
import os
import shutil
import signal
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import CancelledError, ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from pebble import ProcessExpired, ProcessPool

from conformance.casefile.case import Case
from conformance.casefile.loader import DEFAULT_SPEC_DIR, SpecResources
from conformance.engines import EngineError, load_engine
from conformance.engines.base import DESCRIBED
from conformance.run import wire
from conformance.run.executor import DEFAULT_TIMEOUT, VERDICTS, CaseResult, run_case
from conformance.run.handle import Aborted, EngineCrashed, EngineHandle
from conformance.run.repro import repro_script

DEFAULT_MEMORY_MB = 4096
GRACE_S = 5.0
"""How long past the case's own timeout the parent waits before it kills the worker."""
START_TIMEOUT_S = 120.0
"""How long a new worker may take to import and set up its engine."""
REPRO_TIMEOUT_S = 30.0
"""How long a fresh worker may take to write the repro script of a case whose worker was lost
(on top of loading the engine); past that the case has no script."""
WATCHDOG_S = 30.0
"""How long past a task's own time limit the runner waits for the pool to end it before it kills
the worker itself. Pebble stops an overrunning worker only once it holds the pool's channel lock;
a worker that hangs while holding that lock (deadlocked in malloc after an engine corrupted its
heap, as Paddle does in some cases) can never be stopped by the pool, and its task would be
waited for forever."""
STACK_LINES = 40
"""How many lines of a hung or crashed worker's Python stack its verdict's message keeps."""


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




# ------------------------------------------------------------------------------------------
# The worker's side. Everything here runs in the worker process, next to the engine.


@dataclass
class _Worker:
    """The state of one worker process (module globals of the worker, never of the parent)."""

    engine: Any = None
    watched: list[tuple[Any, str, int]] = field(default_factory=list)


_WORKER = _Worker()
_MISSING = object()


def _initialize(spec: str, memory_bytes: int | None, settable: tuple[str, ...],
                pid_file: str | None = None) -> None:
    """Runs once in each new worker: say who it is, cap its memory, load the engine, note what
    it owns."""
    if pid_file is not None:
        # The runner's last resort against a worker its pool cannot stop (WATCHDOG_S).
        with open(pid_file, "w", encoding="ascii") as stream:
            stream.write(str(os.getpid()))
    if memory_bytes:
        import resource

        cap = address_space_cap(memory_bytes)
        try:
            resource.setrlimit(resource.RLIMIT_AS, (cap, cap))
        except (ValueError, OSError):  # the hard limit inherited from the runner still holds
            pass
    # The parent handles Ctrl-C; a worker must not die of it halfway through a case.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    _leave_with_the_runner()
    try:
        _WORKER.engine = load_engine(spec)
    except BaseException as exc:  # noqa: BLE001 - reported by the first task, in one line
        _WORKER.engine = exc
        return
    _WORKER.watched = _owned_attributes(_WORKER.engine, settable)


def _leave_with_the_runner() -> None:
    """End this worker as soon as the runner that started it is gone. A runner that is killed
    (SIGKILL, a crash) cannot stop its workers, and a worker hung in a case would otherwise live
    on for ever, holding the forkserver, the runner's output pipes and a CPU."""
    runner = multiprocessing.parent_process()
    if runner is None:
        return

    def watch() -> None:
        multiprocessing.connection.wait([runner.sentinel])
        os._exit(3)

    threading.Thread(target=watch, name="runner-watch", daemon=True).start()


def address_space_cap(requested: int) -> int:
    """`requested` bytes, or the hard `RLIMIT_AS` this process runs under when that is lower
    (a container started under `ulimit -v`): a process may lower its limits, never raise
    them, and asking for more kills every worker at start."""
    try:
        import resource

        _, hard = resource.getrlimit(resource.RLIMIT_AS)
    except (ImportError, OSError, ValueError):
        return requested
    if hard == resource.RLIM_INFINITY or hard <= 0:
        return requested
    return min(requested, hard)




def _owned_attributes(engine: Any, names: tuple[str, ...]) -> list[tuple[Any, str, int]]:
    """The engine's modules and classes reachable from its namespace, with the identity of
    every settable-named attribute they hold: a case may assign `x.grad`, but must not reach
    `type(x).grad` or `torch.Tensor.grad` through an alias and change them for later cases."""
    if not wire.quietly(lambda: bool(getattr(engine, "available", False)), False):
        return []
    namespace = wire.quietly(lambda: dict(engine.namespace(np.random.default_rng(0))), {})
    owners: dict[int, Any] = {}
    for root in wire.quietly(lambda: list(namespace.values()), []):
        for obj in (root, *_members(root)):
            for owner in wire.quietly(lambda obj=obj: _owners_of(obj), ()):
                owners.setdefault(id(owner), owner)
    return [(owner, name, id(_own(owner, name))) for owner in owners.values() for name in names]


def _owners_of(obj: Any) -> tuple[Any, ...]:
    if isinstance(obj, type):
        return tuple(obj.__mro__[:-1])
    if hasattr(obj, "__dict__") and not callable(obj):
        return (obj,)
    return ()


def _members(root: Any) -> list[Any]:
    target = wire.quietly(lambda: getattr(root, "_module", root), root)  # a facade over a module
    return wire.quietly(lambda: list(vars(target).values()), [])


def _own(owner: Any, name: str) -> Any:
    return wire.quietly(lambda: vars(owner).get(name, _MISSING), _MISSING)


def _tampered() -> str | None:
    for owner, name, identity in _WORKER.watched:
        if id(_own(owner, name)) != identity:
            shown = wire.quietly(lambda owner=owner: wire.text(getattr(owner, "__name__", None)
                                                       or type(owner).__name__), "?")
            return f"{shown}.{name}"
    return None


def _state_leak(engine: Any) -> str | None:
    """What the engine says a case left behind (`Engine.state_leak`), or None when clean. A
    check that raises, or answers anything but None or text, counts as a leak."""
    try:
        check = getattr(engine, "state_leak", None)
        leak = check() if check is not None else None
    except BaseException as exc:  # noqa: BLE001 - an engine that cannot tell is not clean
        return f"its state_leak() raised {wire.type_name(exc)}"
    if leak is None:
        return None
    if isinstance(leak, str):
        return wire.text(leak) or "state_leak() gave no description"
    return f"its state_leak() answered a {wire.type_name(leak)}"










def _describe(features: tuple[str, ...]) -> bytes:
    return wire.answer(_facts, features)


def _facts(features: tuple[str, ...]) -> dict[str, Any]:
    engine = _WORKER.engine
    if isinstance(engine, BaseException):
        raise WorkerStartError(wire.exception_text(engine) or wire.type_name(engine))
    described = engine.describe()
    expectations = getattr(engine, "expectations", None)
    reason = described.get("unavailable_reason")
    return {
        **{key: wire.text(described.get(key, default)) for key, default in _FACTS.items()},
        "unavailable_reason": None if reason is None else wire.text(reason),
        "features": [wire.text(f) for f in features if engine.supports(f)],
        "expectations": wire.text(os.fspath(expectations)) if expectations else None,
    }


_FACTS = {"name": "engine", "version": "unknown", "device": "cpu", "torch_version": "",
          "message_strictness": "exact", "level": "full"}
"""The text facts of an engine the parent keeps, with what a `describe` without one means."""
_OTHER_FACTS = ("unavailable_reason", "features", "expectations")


def _run(case: Case, seed: int | None, timeout: float, stack_file: str | None) -> bytes:
    """Run one case in the worker: the result, a repro script when it failed, the RSS, and
    why the worker must be replaced after it (None: it may run the next case)."""
    return wire.answer(_run_case, case, seed, timeout, stack_file)


def _run_case(case: Case, seed: int | None, timeout: float, stack_file: str | None
              ) -> dict[str, Any]:
    engine = _WORKER.engine
    if isinstance(engine, BaseException):  # it loaded in the first worker, not in this one
        raise WorkerStartError(f"the engine could not be loaded in a fresh worker: "
                               f"{wire.type_name(engine)}: {wire.exception_text(engine)}")
    with _stack_on_hang(stack_file, timeout + GRACE_S / 2):
        result = run_case(case, engine, seed, timeout=timeout)
    replace = None
    tampered = _tampered()
    if tampered is not None:
        result.verdict = "error"
        result.message = (f"the case changed the engine itself ({tampered} was rebound), "
                          "which would change the verdicts of later cases; the worker was "
                          "replaced")
        replace = f"the case rebound {tampered}"
    leak = _state_leak(engine)
    if leak is not None and replace is None:
        replace = f"the case left engine state behind ({leak})"
    script = None
    if result.verdict in ("failed", "error"):
        try:
            script = repro_script(case, engine, result.seed, result.step)
        except Exception as exc:  # noqa: BLE001 - a repro is a help, never a second failure
            script = f"# no repro script: {wire.type_name(exc)}: {wire.exception_text(exc)}\n"
    return {"result": wire.plain(result, CaseResult), "repro": None if script is None
            else wire.text(script), "resident_bytes": _resident_bytes(), "replace": replace}


class _stack_on_hang:  # noqa: N801 - used as a `with` block, like contextlib's
    """While a case runs: `faulthandler` writes the Python stack of every thread to
    `stack_file` if the case is still running after `delay` seconds (the parent kills the
    worker a little later and reads the file), or at once if the worker crashes."""

    def __init__(self, stack_file: str | None, delay: float) -> None:
        self.stack_file = stack_file
        self.delay = delay
        self.stream: Any = None
        self.was_enabled = False

    def __enter__(self) -> None:
        if not self.stack_file:
            return
        try:
            self.stream = open(self.stack_file, "w", encoding="utf-8")  # noqa: SIM115
            self.was_enabled = faulthandler.is_enabled()
            faulthandler.enable(file=self.stream, all_threads=True)
            faulthandler.dump_traceback_later(self.delay, exit=False, file=self.stream)
        except (OSError, ValueError, OverflowError):  # no stack then, the case still runs
            self.__exit__()

    def __exit__(self, *exc: object) -> None:
        if self.stream is None:
            return
        faulthandler.cancel_dump_traceback_later()
        if self.was_enabled:
            faulthandler.enable(file=sys.stderr, all_threads=True)
        else:
            faulthandler.disable()
        self.stream.close()
        self.stream = None






def _call(function: Callable[..., Any], args: tuple[Any, ...]) -> bytes:
    """`function(engine, *args)` in the worker, answered as plain data."""
    return wire.answer(function, _WORKER.engine, *args)


def _repro(case: Case, seed: int | None, last_step: int | None) -> bytes:
    return wire.answer(lambda: wire.text(repro_script(case, _WORKER.engine, seed, last_step)))


def _resident_bytes() -> int:
    try:
        with open("/proc/self/statm", encoding="ascii") as stream:
            return int(stream.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return 0


# ------------------------------------------------------------------------------------------
# The wire: dataclasses as JSON-ready plain data and back, driven by their type hints.





























def _outcome(raw: Any) -> dict[str, Any]:
    """The parent's reading of `_run`'s answer."""
    answer = wire.fields(wire.loads(raw), ("result", "repro", "resident_bytes", "replace"),
                         "answer")
    result = wire.strict(answer["result"], CaseResult, "result")
    if result.verdict not in VERDICTS:
        raise wire.MalformedData(f"the verdict {result.verdict!r}")
    return {"result": result,
            "repro": wire.strict(answer["repro"], str | None, "repro"),
            "resident_bytes": wire.strict(answer["resident_bytes"], int, "resident_bytes"),
            "replace": wire.strict(answer["replace"], str | None, "replace")}




# ------------------------------------------------------------------------------------------
# The parent's side.


class _Hung(Exception):
    """A worker its pool could not stop in time, killed by the runner (EngineWorkers._result)."""


class PendingCall:
    """A `call_later` in flight."""

    def __init__(self, workers: EngineWorkers, future: Any, timeout: float) -> None:
        self._workers = workers
        self._future = future
        self._timeout = timeout

    def result(self) -> Any:
        """The call's answer (plain data); raises `EngineCrashed` when the worker died, hung,
        raised or sent malformed data (the worker is then replaced)."""
        future = self._future
        try:
            raw = self._workers._result(future, self._timeout)
        except _Hung as hung:
            self._workers._recycle()
            raise EngineCrashed(f"the engine's worker process {hung}") from None
        except BaseException as exc:
            if not future.done() or future.cancelled() or future.exception() is not exc:
                raise
            self._workers._recycle()
            raise EngineCrashed(f"the engine's worker process "
                                f"{_what_happened(exc, self._timeout)}") from None
        try:
            return wire.loads(raw)
        except wire.Raised as exc:
            self._workers._recycle()
            raise EngineCrashed(f"{exc.type_name}: {exc.message}") from None
        except wire.MalformedData as exc:
            self._workers._recycle()
            raise EngineCrashed(f"the engine's worker sent malformed data ({exc})") from None


def _context() -> multiprocessing.context.BaseContext:
    method = "forkserver" if "forkserver" in multiprocessing.get_all_start_methods() else "spawn"
    return multiprocessing.get_context(method)


def _start_forkserver_deaf_to_ctrl_c() -> None:
    """Start the forkserver, if it is not running yet, with SIGINT blocked (as multiprocessing
    starts its resource tracker). Every worker is forked from it: without this, a worker runs
    with Python's own SIGINT handler from the fork until pebble ignores SIGINT, which is after
    the worker has imported the runner, and a Ctrl-C typed in a terminal (sent to the whole
    process group) kills the workers being started, costing cases bogus `error` verdicts or
    breaking the pool. The runner alone handles Ctrl-C; it stops its workers itself."""
    if _context().get_start_method() != "forkserver":
        return
    # The resource tracker unblocks SIGINT when it starts: start it first.
    multiprocessing.resource_tracker.ensure_running()
    previous = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
    try:
        multiprocessing.forkserver.ensure_running()
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, previous)


class EngineWorkers(EngineHandle):
    """A pool of worker processes running one engine; `run` is safe to call from one thread.

    `repros` holds the repro scripts of failed or errored cases by case id (the caller takes
    them); `replaced_after` says, by case id, why the worker was replaced after a case that
    kept its verdict (state the engine could not restore) or lost it (tampering, memory)."""

    runs_beside_others = True

    @property
    def facts(self) -> RemoteEngine:
        """What the parent knows of the engine (plain data sent by a worker)."""
        return self.engine

    def __init__(self, spec: str, *, memory_mb: int | None = DEFAULT_MEMORY_MB,
                 features: Iterable[str] = (), settable: Iterable[str] = (),
                 fresh_worker_per_case: bool = False) -> None:
        self.spec = spec
        self.memory_bytes = address_space_cap(memory_mb * 2**20) if memory_mb else None
        self.fresh_worker_per_case = fresh_worker_per_case
        self.repros: dict[str, str] = {}
        """Repro scripts of failed or errored cases, by case id."""
        self.replaced_after: dict[str, str] = {}
        self._aborted = False
        self._future: Any = None
        self._stacks = tempfile.mkdtemp(prefix="conformance-worker-")
        self._stack_file = os.path.join(self._stacks, "stack.txt")
        self._pid_file = os.path.join(self._stacks, "worker.pid")
        self._initargs = (spec, self.memory_bytes, tuple(settable), self._pid_file)
        self._pool = self._new_pool()
        self.engine = self._start(tuple(features))

    def _new_pool(self) -> ProcessPool:
        _start_forkserver_deaf_to_ctrl_c()
        return ProcessPool(max_workers=1, context=_context(), initializer=_initialize,
                           initargs=self._initargs)

    def _start(self, features: tuple[str, ...]) -> RemoteEngine:
        future = self._schedule(_describe, args=(features,), timeout=START_TIMEOUT_S)
        try:
            facts = wire.fields(wire.loads(self._result(future, START_TIMEOUT_S)),
                                (*_FACTS, *_OTHER_FACTS), "facts")
            engine = RemoteEngine(
                spec=self.spec,
                **{key: wire.strict(facts[key], str, key) for key in _FACTS},
                unavailable_reason=wire.strict(facts["unavailable_reason"], str | None,
                                           "unavailable_reason"),
                features=frozenset(wire.strict(facts["features"], list[str], "features")),
                expectations=_path(wire.strict(facts["expectations"], str | None,
                                           "expectations")))
        except wire.Raised as exc:
            self.close()
            message = exc.message if exc.type_name == WorkerStartError.__name__ else str(exc)
            raise WorkerStartError(f"engine {self.spec!r}: {message}") from None
        except wire.MalformedData as exc:
            self.close()
            raise WorkerStartError(f"engine {self.spec!r}: the worker sent malformed data "
                                   f"while loading it ({exc})") from None
        except _Hung as hung:
            self.close()
            raise WorkerStartError(f"engine {self.spec!r}: the worker {hung}") from None
        except BaseException as exc:
            self.close()
            if not future.done() or future.cancelled() or future.exception() is not exc:
                raise  # the user's Ctrl-C in this process
            raise WorkerStartError(f"engine {self.spec!r}: the worker died while loading it "
                                   f"({_what_happened(exc, START_TIMEOUT_S)})") from None
        return engine

    def run(self, case: Case, seed: int | None = None, *,
            timeout: float = DEFAULT_TIMEOUT) -> CaseResult:
        """Run `case` in a worker; whatever happens to the worker, a `CaseResult` comes back."""
        start = time.perf_counter()
        limit = timeout + GRACE_S
        if self._aborted:
            raise Aborted(case.id)
        self._clear_stack()
        self._future = future = self._schedule(
            _run, args=(case, seed, timeout, self._stack_file), timeout=limit)
        if self._aborted:
            # abort() ran between the check above and publishing the future, so it could not
            # cancel this one: cancel it here, or the run waits out the case's whole timeout.
            future.cancel()
            raise Aborted(case.id)
        try:
            raw = self._result(future, limit)
        except _Hung as hung:
            if self._aborted:
                raise Aborted(case.id) from None
            return self._lost(case, seed, f"the engine's worker process {hung}", start,
                              stack=True)
        except BaseException as exc:
            if self._aborted:
                raise Aborted(case.id) from None
            if not future.done() or future.cancelled() or future.exception() is not exc:
                raise  # the user's Ctrl-C in this process, not the worker's doing
            return self._lost(case, seed, f"the engine's worker process "
                                          f"{_what_happened(exc, limit)}", start, stack=True)
        try:
            outcome = _outcome(raw)
        except wire.Raised as exc:  # SystemExit and the like, raised by the engine outside a step
            what = exc.message if exc.type_name == WorkerStartError.__name__ else \
                f"the engine raised {exc.type_name}: {exc.message} outside the case's control"
            return self._lost(case, seed, what, start)
        except wire.MalformedData as exc:
            return self._lost(case, seed, f"the engine's worker sent malformed data ({exc})",
                              start)
        result = outcome["result"]
        if outcome["repro"] is not None:
            self.repros[case.id] = outcome["repro"]
        replace = outcome["replace"]
        if replace is None and self.memory_bytes \
                and outcome["resident_bytes"] > self.memory_bytes // 2:
            replace = (f"its resident memory ({outcome['resident_bytes'] // 2**20} MiB) passed "
                       f"half of its {self.memory_bytes // 2**20} MiB cap")
        if replace is not None:
            self.replaced_after[case.id] = replace
        if replace is not None or self.fresh_worker_per_case:
            self._recycle()
        return result

    def _lost(self, case: Case, seed: int | None, what: str, start: float, *,
              stack: bool = False) -> CaseResult:
        """The `error` of a case whose worker died, hung or answered nonsense: the worker is
        replaced, and the fresh one writes the case's repro script."""
        shown = self._read_stack() if stack else ""
        self._recycle()
        message = f"{what}; a fresh worker runs the next case"
        if shown:
            message += f"\nthe worker's Python stack (most recent call first):\n{shown}"
        seed = case.seed if seed is None else seed
        script = self._repro_after_loss(case, seed)
        if script is not None:
            self.repros[case.id] = script
        return CaseResult(case_id=case.id, engine=self.engine.name, verdict="error",
                          topic=case.topic, seed=seed, message=message,
                          duration_s=time.perf_counter() - start)

    def _repro_after_loss(self, case: Case, seed: int) -> str | None:
        """The repro script of a lost case, from the fresh worker (which also has to load the
        engine first); None when it cannot write one in time, or the run was stopped."""
        if self._aborted:
            return None
        self._future = future = self._schedule(_repro, args=(case, seed, None),
                                                    timeout=REPRO_TIMEOUT_S)
        if self._aborted:
            future.cancel()
            return None
        try:
            answer = future.result(timeout=START_TIMEOUT_S + REPRO_TIMEOUT_S)
            script = wire.strict(wire.loads(answer), str, "repro")
        except (wire.Raised, wire.MalformedData, CancelledError):
            return None
        except BaseException as exc:
            if isinstance(exc, FutureTimeout) and not future.done():
                future.cancel()  # the fresh worker never got to it: it is still loading
                return None
            if not future.done() or future.cancelled() or future.exception() is not exc:
                raise
            self._recycle()  # that one died or hung too: the next case gets another
            return None
        return script

    def _clear_stack(self) -> None:
        try:
            os.remove(self._stack_file)
        except OSError:
            pass

    def _read_stack(self) -> str:
        """What `faulthandler` wrote in the worker that ran the case, trimmed: each thread's
        frames down to where the worker called the runner (below that it is always the same
        pebble and multiprocessing machinery), and no block for the worker's own watch on the
        runner."""
        try:
            with open(self._stack_file, encoding="utf-8", errors="replace") as stream:
                written = stream.read(256 * 1024).rstrip().splitlines()
        except OSError:
            return ""
        blocks: list[list[str]] = []
        for line in written:
            if not line.startswith("  File ") or not blocks:
                blocks.append([])
            blocks[-1].append(line)
        lines = []
        for block in blocks:
            ours = next((i for i, line in enumerate(block) if f'{os.sep}workers.py"' in line
                         and f"{os.sep}conformance{os.sep}" in line), len(block))
            if ours < len(block) and block[ours].endswith(" in watch"):
                continue
            lines += block[:ours]
        if len(lines) > STACK_LINES:
            lines = [*lines[:STACK_LINES], f"  ... ({len(lines) - STACK_LINES} more lines)"]
        return "\n".join(line[:300] for line in lines)

    def _result(self, future: Any, limit: float) -> Any:
        """`future.result()`, but never for ever: when the pool has not ended a task
        `WATCHDOG_S` past its `limit`, the pool cannot (see WATCHDOG_S), so the worker is killed
        here and `_Hung` raised; the caller replaces the pool, whose lock may have died held."""
        try:
            return future.result(timeout=limit + WATCHDOG_S)
        except FutureTimeout:
            if future.done():
                raise  # the task's own time limit, enforced by the pool
        killed = self._kill_worker()
        raise _Hung(f"hung past {limit + WATCHDOG_S:g} s and its pool could not stop it; the "
                    f"runner {'killed it' if killed else 'could not find it to kill it'}")

    def _kill_worker(self) -> bool:
        """SIGKILL the pool's worker (the process id it wrote when it started)."""
        try:
            with open(self._pid_file, encoding="ascii") as stream:
                pid = int(stream.read().strip())
        except (OSError, ValueError):
            return False
        try:
            os.kill(pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            return False
        return True

    def _schedule(self, function: Callable[..., Any], args: tuple[Any, ...], timeout: float
                  ) -> Any:
        """`ProcessPool.schedule` on a pool that can take it: a pool whose workers all died
        before taking a task (pebble's "All workers expired") refuses every later task with
        RuntimeError, so it is replaced first."""
        try:
            return self._pool.schedule(function, args=args, timeout=timeout)
        except RuntimeError:
            self._recycle()
            return self._pool.schedule(function, args=args, timeout=timeout)

    def replace_process(self) -> None:
        self._recycle()

    def _recycle(self) -> None:
        self._pool.stop()
        self._pool.join()
        self._pool = self._new_pool()

    def call(self, function: Callable[..., Any], *args: Any, timeout: float) -> Any:
        return self.call_later(function, *args, timeout=timeout).result()

    def call_later(self, function: Callable[..., Any], *args: Any,
                   timeout: float) -> PendingCall:
        """Start `function(engine, *args)` in the worker (`function` is importable by name;
        its answer is plain data); `PendingCall.result()` waits for it."""
        future = self._schedule(_call, args=(function, args), timeout=timeout)
        return PendingCall(self, future, timeout)

    def repro_script(self, case: Case, seed: int | None = None,
                     last_step: int | None = None) -> str:
        """`conformance.run.repro.repro_script` for this engine, written where the engine is (a
        comment saying why, when the worker cannot write it)."""
        future = self._schedule(_repro, args=(case, seed, last_step),
                                     timeout=START_TIMEOUT_S)
        try:
            return wire.strict(wire.loads(self._result(future, START_TIMEOUT_S)), str, "repro")
        except (wire.Raised, wire.MalformedData) as exc:
            return _no_script(str(exc))
        except _Hung as hung:
            self._recycle()
            return _no_script(f"the engine's worker process {hung}")
        except BaseException as exc:
            if not future.done() or future.cancelled() or future.exception() is not exc:
                raise
            self._recycle()
            return _no_script(f"the engine's worker process "
                              f"{_what_happened(exc, START_TIMEOUT_S)}")

    def abort(self) -> None:
        """Stop the case in flight (from another thread): its `run` raises `Aborted`."""
        self._aborted = True
        future = self._future
        if future is not None:
            future.cancel()  # pebble kills the worker running it

    def close(self) -> None:
        # A thread still running a case (the run was stopped another way than abort) gets
        # Aborted at once, instead of a broken pool it would replace to run the next case.
        self.abort()
        self._pool.stop()
        self._pool.join()
        shutil.rmtree(self._stacks, ignore_errors=True)

    def __enter__(self) -> EngineWorkers:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _no_script(why: str) -> str:
    """A repro "script" that only says why there is none, every line a comment."""
    return "".join(f"# {line}\n" for line in f"no repro script: {why}".splitlines())


def _path(text: str | None) -> Path | None:
    return Path(text) if text else None


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
    return f"was stopped ({type(exc).__name__}: {exc})"


def start_engines(specs: Sequence[str], *, memory_mb: int | None = DEFAULT_MEMORY_MB,
                  spec_dir: Path = DEFAULT_SPEC_DIR,
                  fresh_worker_per_case: bool = False) -> list[EngineWorkers]:
    """One `EngineWorkers` per engine spec, started side by side (each imports its engine)."""
    resources = SpecResources.load(spec_dir)
    features = sorted(resources.features or ())
    settable = sorted(resources.api.settable) if resources.api else []
    futures: list[Any] = []
    started: list[EngineWorkers] = []
    failed: BaseException | None = None
    try:
        with ThreadPoolExecutor(max_workers=max(1, len(specs))) as threads:
            for spec in specs:
                futures.append(threads.submit(
                    EngineWorkers, spec, memory_mb=memory_mb or None, features=features,
                    settable=settable, fresh_worker_per_case=fresh_worker_per_case))
            for future in futures:
                try:
                    started.append(future.result())
                except (EngineError, WorkerStartError) as exc:
                    failed = failed or exc
    except BaseException:
        # Ctrl-C wherever it lands here (waiting for an engine, or for the loading threads to
        # end): every engine that loads or has loaded is closed, no worker outlives the run.
        for future in futures:
            if future.exception() is None:
                future.result().close()
        raise
    if failed is not None:
        for worker in started:
            worker.close()
        raise failed
    return started
