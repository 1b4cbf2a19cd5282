"""The worker's side of `conformance.run.workers`: everything here runs in a worker process,
next to the engine, and never in the runner.

A worker is started by the pool with `initialize` (it caps its memory, loads the engine and notes
what the engine owns), then runs the pool's tasks: `describe` (the engine's facts), `run` (observe
one case: it gets the case's code and what to look at, never what is expected), `call` (any
function where the engine is) and `repro` (a repro script, asked for once a case has failed).
Each answers with JSON text (`conformance.run.wire`), never a pickled object, and no answer holds
a verdict: the parent judges.
"""

from __future__ import annotations

import faulthandler
import multiprocessing
import multiprocessing.connection
import os
import signal
import sys
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from conformance.casefile.case import Case
from conformance.engines import load_engine
from conformance.run import tamper, wire
from conformance.run.observe import CaseSeen, Plan, observe_case
from conformance.run.repro import repro_script

GRACE_S = 5.0
"""How long past the case's own timeout the parent waits before it kills the worker."""


class WorkerStartError(RuntimeError):
    """The engine cannot be loaded in a worker (unknown name, import error, bad factory)."""


@dataclass
class _Worker:
    """The state of one worker process (module globals of the worker, never of the parent)."""

    engine: Any = None
    watched: list[tuple[Any, str, int]] = field(default_factory=list)


_WORKER = _Worker()


def initialize(spec: str, memory_bytes: int | None, settable: tuple[str, ...],
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
    _WORKER.watched = tamper.owned_attributes(_WORKER.engine, settable)


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


def describe(features: tuple[str, ...]) -> bytes:
    return wire.answer(_facts, features)


def _facts(features: tuple[str, ...]) -> dict[str, Any]:
    engine = _WORKER.engine
    if isinstance(engine, BaseException):
        raise WorkerStartError(wire.exception_text(engine) or wire.type_name(engine))
    described = engine.describe()
    expectations = getattr(engine, "expectations", None)
    reason = described.get("unavailable_reason")
    return {
        **{key: wire.text(described.get(key, default)) for key, default in FACTS.items()},
        "unavailable_reason": None if reason is None else wire.text(reason),
        "features": [wire.text(f) for f in features if engine.supports(f)],
        "expectations": wire.text(os.fspath(expectations)) if expectations else None,
    }


FACTS = {"name": "engine", "version": "unknown", "device": "cpu", "torch_version": "",
          "message_strictness": "exact", "level": "full"}
"""The text facts of an engine the parent keeps, with what a `describe` without one means."""
OTHER_FACTS = ("unavailable_reason", "features", "expectations")


def run(plan: Plan, timeout: float, stack_file: str | None) -> bytes:
    """Observe one case in the worker (`conformance.run.observe`): what it saw, the RSS, what
    the case rebound of the engine (`tamper`) and why the worker must be replaced after it
    (None: it may run the next case). No verdict: the parent judges what was seen."""
    return wire.answer(_observe_case, plan, timeout, stack_file)


def _observe_case(plan: Plan, timeout: float, stack_file: str | None) -> dict[str, Any]:
    engine = _WORKER.engine
    if isinstance(engine, BaseException):  # it loaded in the first worker, not in this one
        raise WorkerStartError(f"the engine could not be loaded in a fresh worker: "
                               f"{wire.type_name(engine)}: {wire.exception_text(engine)}")
    with _stack_on_hang(stack_file, timeout + GRACE_S / 2):
        seen = observe_case(plan, engine, timeout)
    replace = None
    tampered = tamper.tampered(_WORKER.watched)
    if tampered is not None:
        replace = f"the case rebound {tampered}"
    leak = _state_leak(engine)
    if leak is not None and replace is None:
        replace = f"the case left engine state behind ({leak})"
    return {"seen": wire.plain(seen, CaseSeen), "tampered": tampered,
            "resident_bytes": _resident_bytes(), "replace": replace}


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


def call(function: Callable[..., Any], args: tuple[Any, ...]) -> bytes:
    """`function(engine, *args)` in the worker, answered as plain data."""
    return wire.answer(function, _WORKER.engine, *args)


def repro(case: Case, seed: int | None, last_step: int | None) -> bytes:
    return wire.answer(lambda: wire.text(repro_script(case, _WORKER.engine, seed, last_step)))


def _resident_bytes() -> int:
    try:
        with open("/proc/self/statm", encoding="ascii") as stream:
            return int(stream.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return 0
