"""Engines run in worker processes: nothing an engine does reaches the runner or another engine.

The parent process owns the cases, the verdicts and the reports; it never imports an engine.
Each engine lives in its own pool of worker processes (`pebble.ProcessPool`), started by the
`forkserver` method so that no engine state is ever inherited. A worker loads the engine once,
then receives one case at a time and sends back JSON text, never a pickled object: a case can
make values whose `repr` is a `str` subclass with its own `__reduce__`, and unpickling such a
value would run code in the runner. The parent rebuilds the `CaseResult` (and the repro script
of a failure: only the worker has the engine's hooks to write it) from that text, checking every
field's type; data it cannot read is an `error` verdict, never a crash of the runner. What runs
inside a worker is `conformance.run.worker_side`; this module is the parent's side.

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

import multiprocessing
import multiprocessing.connection
import multiprocessing.forkserver
import multiprocessing.resource_tracker
import os
import shutil
import signal
import tempfile
import time
import typing
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import CancelledError, ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pebble import ProcessExpired, ProcessPool

from conformance.casefile.case import Case
from conformance.casefile.loader import DEFAULT_SPEC_DIR, SpecResources
from conformance.engines import EngineError
from conformance.engines.base import DESCRIBED, Strictness
from conformance.run import labels, wire, worker_side
from conformance.run.executor import DEFAULT_TIMEOUT, LEVELS, CaseResult, judge_seen
from conformance.run.handle import Aborted, EngineCrashed, EngineHandle
from conformance.run.observe import CaseSeen, Plan, cut
from conformance.run.worker_side import GRACE_S, WorkerStartError, address_space_cap

DEFAULT_MEMORY_MB = 4096
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


MAX_ANSWER_BYTES = 64 * 2**20
"""The most a worker's answer about one case may hold: the worker cuts every text and array
(`conformance.run.observe`), so only a worker that does not follow its own code sends more."""


def _outcome(raw: Any) -> dict[str, Any]:
    """The parent's reading of `worker_side.run`'s answer."""
    if type(raw) is bytes and len(raw) > MAX_ANSWER_BYTES:
        raise wire.MalformedData(f"an answer of {len(raw):,} bytes (at most "
                                 f"{MAX_ANSWER_BYTES:,})")
    answer = wire.fields(wire.loads(raw), ("seen", "tampered", "resident_bytes", "replace"),
                         "answer")
    return {"seen": wire.strict(answer["seen"], CaseSeen, "seen"),
            "tampered": wire.strict(answer["tampered"], str | None, "tampered"),
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
        return ProcessPool(max_workers=1, context=_context(), initializer=worker_side.initialize,
                           initargs=self._initargs)

    def _start(self, features: tuple[str, ...]) -> RemoteEngine:
        future = self._schedule(worker_side.describe, args=(features,), timeout=START_TIMEOUT_S)
        try:
            facts = wire.fields(wire.loads(self._result(future, START_TIMEOUT_S)),
                                (*worker_side.FACTS, *worker_side.OTHER_FACTS), "facts")
            engine = RemoteEngine(
                spec=self.spec, **_checked_facts(
                    {key: wire.strict(facts[key], str, key) for key in worker_side.FACTS},
                    f"engine {self.spec!r}"),
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
        except labels.LabelError as exc:
            self.close()
            raise WorkerStartError(str(exc)) from None
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
            worker_side.run, args=(Plan.of(case, seed), timeout, self._stack_file),
            timeout=limit)
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
        result = judge_seen(case, outcome["seen"], self.engine, seed)
        if outcome["tampered"] is not None:
            result.verdict = "error"
            result.message = (f"the case changed the engine itself ({cut(outcome['tampered'])} "
                              "was rebound), which would change the verdicts of later cases; "
                              "the worker was replaced")
        if result.verdict in ("failed", "error"):
            self.repros[case.id] = self.repro_script(case, seed, result.step)
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
        self._future = future = self._schedule(worker_side.repro, args=(case, seed, None),
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
            ours = next((i for i, line in enumerate(block) if f'{os.sep}worker_side.py"' in line
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
        future = self._schedule(worker_side.call, args=(function, args), timeout=timeout)
        return PendingCall(self, future, timeout)

    def repro_script(self, case: Case, seed: int | None = None,
                     last_step: int | None = None) -> str:
        """`conformance.run.repro.repro_script` for this engine, written where the engine is (a
        comment saying why, when the worker cannot write it)."""
        future = self._schedule(worker_side.repro, args=(case, seed, last_step),
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


def _checked_facts(facts: dict[str, str], where: str) -> dict[str, str]:
    """An engine's text facts as they enter the runner: its name a valid name, its level and
    message strictness known ones, every other fact one plain line (`labels`); every report and
    page then shows them as they are, and a bad one is the engine's load error."""
    checked = {key: labels.plain_line(value) for key, value in facts.items()}
    checked["name"] = labels.engine_name(facts["name"], where)
    checked["level"] = labels.known(facts["level"], LEVELS, "level", where)
    checked["message_strictness"] = labels.known(facts["message_strictness"],
                                                 typing.get_args(Strictness),
                                                 "message strictness", where)
    return checked


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
