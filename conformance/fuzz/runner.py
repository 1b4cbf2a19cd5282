"""The differential fuzzing loop: Hypothesis draws programs, two engines run them, any
difference is shrunk and written out as a case.

    >>> from conformance.engines import load_engine
    >>> result = fuzz(load_engine("torch"), load_engine("refimpl"), profile="ci")  # doctest: +SKIP
    >>> result.finding is None, round(result.rate)                                # doctest: +SKIP
    (True, 150)

Each engine is an `EngineHandle` (`conformance.run.handle`): the command line runs each in its
own worker process, the two side by side on every program (`observe_program` is called where
the engine is, and its records come back as plain data); an `Engine` object given directly runs
in this process. `--jobs` runs several such loops at once (`conformance.fuzz.parallel`).
"""

from __future__ import annotations

import os
import signal
import sys
import threading
import time
import traceback
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

from hypothesis import given
from hypothesis import seed as hypothesis_seed
from hypothesis.errors import FlakyFailure

from conformance.engines.base import Engine
from conformance.fuzz.differential import (
    CompiledProgram,
    Difference,
    Mismatch,
    StepRecord,
    compile_program,
    first_mismatch,
    observe,
    weakest,
)
from conformance.fuzz.findings import (
    CRASH,
    DEFAULT_OUT,
    Finding,
    build_finding,
    unwritable_reason,
    write_finding,
)
from conformance.fuzz.known import KnownDifference, known_finding
from conformance.fuzz.minimise import minimise
from conformance.fuzz.profiles import DatabaseError, get_profile, shown
from conformance.fuzz.program import Program, ProgramStep
from conformance.fuzz.strategies import FAMILIES, programs
from conformance.run import wire
from conformance.run.handle import EngineCrashed, EngineHandle, as_handle
from conformance.run.observe import CaseTimeout

PROGRAM_TIMEOUT_S = 60.0
"""A program that one engine has not finished in this long is a crash finding (a hang)."""

THREAD_VARIABLES = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS")


def prefer_single_thread() -> None:
    """Ask engines loaded after this call for one intra-op thread (unless the user set one).

    Programs use tensors of a few dozen elements: worker threads only add synchronisation, and
    on a busy machine an OpenMP barrier can cost milliseconds per op (PyTorch's batch_norm took
    16 ms instead of 0.05 ms here). Only engines imported afterwards see the setting.
    """
    for variable in THREAD_VARIABLES:
        os.environ.setdefault(variable, "1")


class FuzzSetupError(RuntimeError):
    """The fuzzer cannot start: an engine cannot run even a trivial program, the example
    database cannot be used or the findings folder cannot be written. The message is one line
    that says which, why and what to do."""


class CtrlC(KeyboardInterrupt):
    """The user pressed Ctrl-C while `fuzz` ran; any other KeyboardInterrupt came from an
    engine, and is a finding like any other exception it raises."""


def _raise_ctrl_c(signum: int, frame: object) -> None:
    raise CtrlC


@contextmanager
def _ctrl_c_told_apart() -> Iterator[None]:
    """Make SIGINT raise CtrlC while fuzzing, where Python's own handler is in place (in the
    main thread); elsewhere every KeyboardInterrupt is taken for the user's."""
    if threading.current_thread() is not threading.main_thread() \
            or signal.getsignal(signal.SIGINT) is not signal.default_int_handler:
        yield
        return
    signal.signal(signal.SIGINT, _raise_ctrl_c)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, signal.default_int_handler)


def _is_the_users(exc: BaseException) -> bool:
    """Whether a BaseException out of an engine stops the run rather than being a finding:
    the user's Ctrl-C, or any KeyboardInterrupt when the two cannot be told apart."""
    if not isinstance(exc, KeyboardInterrupt):
        return False
    return isinstance(exc, CtrlC) or signal.getsignal(signal.SIGINT) is not _raise_ctrl_c


class Stopped(BaseException):
    """Raised inside the fuzzing loop when its `stop` callback says so (another shard found a
    mismatch). A BaseException, so Hypothesis ends the run at once instead of shrinking it."""


class _MismatchFound(Exception):
    def __init__(self, program: Program, mismatch: Mismatch, records: list[StepRecord]) -> None:
        super().__init__(f"engines differ at step {mismatch.step}")
        self.program = program
        self.mismatch = mismatch
        self.records = records


@dataclass
class FuzzResult:
    reference: str
    other: str
    programs: int
    """Programs run on both engines (shrinking included)."""
    seconds: float
    seed: int | None
    profile: str
    finding: Finding | None = None
    database: str | None = None
    """The example database (a folder or URL, password hidden; None: none)."""
    first_mismatch_at: int | None = None
    """How many programs had run when the first mismatch appeared (before shrinking)."""
    jobs: int = 1
    """Processes that fuzzed side by side (`conformance.fuzz.parallel`)."""
    more_findings: tuple[Finding, ...] = ()
    """Mismatches other shards found before they were stopped (each written like the first)."""
    known: dict[str, int] = field(default_factory=dict)
    """Programs that differed only in known ways, by the finding they are known under."""

    @property
    def rate(self) -> float:
        return self.programs / self.seconds if self.seconds > 0 else 0.0

    def summary(self) -> str:
        found = "0 mismatches"
        if self.finding:
            count = 1 + len(self.more_findings)
            found = (f"{count} mismatch{'es' if count > 1 else ''} (first at program "
                     f"{self.first_mismatch_at}{' of its shard' if self.jobs > 1 else ''})")
        seed = "random" if self.seed is None else str(self.seed)
        if self.jobs > 1:
            seed = f"{seed}, {self.jobs} processes" + ("" if self.seed is None else
                                                      " (seeds counted up from it)")
        database = f", database {self.database}" if self.database else ""
        known = ""
        if self.known:
            known = (f", {sum(self.known.values())} with known differences only ("
                     + ", ".join(f"{name} {count}" for name, count
                                 in sorted(self.known.items(), key=lambda kv: -kv[1])) + ")")
        return (f"fuzz: {self.programs} programs on {self.reference} (reference) vs "
                f"{self.other}, {found}{known}, {self.seconds:.1f} s, {self.rate:.0f} "
                f"programs/s (profile {self.profile}, seed {seed}{database})")


class Progress:
    """A one-line progress bar on a stream (plain text; a new line every few seconds when the
    stream is not a terminal, so logs stay readable)."""

    def __init__(self, total: int, stream: TextIO | None = None, enabled: bool = True) -> None:
        self.total = total
        self.stream = stream or sys.stderr
        self.enabled = enabled
        self.tty = bool(getattr(self.stream, "isatty", lambda: False)())
        self.start = time.perf_counter()
        self.last = self.start
        self.drawn = False
        self.count = 0

    def tick(self) -> None:
        self.count += 1
        if not self.enabled:
            return
        now = time.perf_counter()
        if now - self.last < self.tick_interval():
            return
        self.last = now
        self.draw()

    def draw(self) -> None:
        """Draw the current state now (a caller that sets `count` itself calls this)."""
        if self.enabled:
            self.drawn = True
            self._draw(time.perf_counter())

    def tick_interval(self) -> float:
        """Seconds between redraws."""
        return 0.25 if self.tty else 5.0

    def _draw(self, now: float) -> None:
        done = min(self.count, self.total)
        width = 30
        filled = width * done // max(self.total, 1)
        rate = self.count / max(now - self.start, 1e-9)
        line = (f"[{'#' * filled}{'.' * (width - filled)}] {done}/{self.total} programs, "
                f"{rate:.0f}/s")
        self.stream.write(f"\r{line}" if self.tty else f"{line}\n")
        self.stream.flush()

    def close(self) -> None:
        """Draw the final state (only when a line was drawn: short runs stay silent)."""
        if self.drawn:
            self._draw(time.perf_counter())
            if self.tty:
                self.stream.write("\n")
            self.stream.flush()


def default_families(*engines: Engine | EngineHandle) -> tuple[str, ...]:
    """The program families every engine supports (a family is named after its feature)."""
    return tuple(f for f in FAMILIES
                 if all(as_handle(engine).facts.supports(f) for engine in engines))


def check_program(program: Program, reference: Engine | EngineHandle,
                  other: Engine | EngineHandle, known: Sequence[KnownDifference] = (),
                  tally: Counter[str] | None = None) -> _MismatchFound | None:
    """Run `program` on both engines; the mismatch (with the reference's records), if any.

    Engines in worker processes run the program side by side, each in its own process. A
    mismatch whose every difference is `known` counts as none (added to `tally` under its
    finding)."""
    reference, other = as_handle(reference), as_handle(other)
    pending = [engine.call_later(observe_program, program, timeout=PROGRAM_TIMEOUT_S)
               for engine in (reference, other)]
    (records, crash_a), (other_records, crash_b) = [_records(call) for call in pending]
    if crash_a or crash_b:
        if crash_a == crash_b:
            return None
        # The whole program goes into the case: where the adapter crashed is not known.
        crash = Difference(CRASH, crash_a or "no crash", crash_b or "no crash")
        mismatch = Mismatch(len(program.steps) - 1, (crash,))
        return _MismatchFound(program, mismatch, records or [])
    strictness = weakest(reference.facts.message_strictness, other.facts.message_strictness)
    # An engine held to `semantics` (one on the tape names its create_graph nodes its own way)
    # is compared at that level: node names, graph text, repr and identity are left out.
    level = "semantics" if "semantics" in (reference.facts.level, other.facts.level) else "full"
    mismatch = first_mismatch(records, other_records, strictness, program, level)
    if mismatch is None:
        return None
    finding = known_finding(mismatch, known) if known else None
    if finding is not None:
        if tally is not None:
            tally[finding] += 1
        return None
    return _MismatchFound(program, mismatch, records)


def reduce_finding(found: _MismatchFound, reference: Engine, other: Engine,
                   known: Sequence[KnownDifference] = ()) -> _MismatchFound:
    """`found` with its program cut down to the statements its mismatch needs.

    A candidate counts when the engines still differ on one of the observations (or the error,
    warnings or crash) that differed originally, so the reduction cannot drift to another bug.
    """
    wanted = {difference.what for difference in found.mismatch.differences}
    last: dict[str, _MismatchFound] = {}

    def fails(candidate: Program) -> bool:
        again = check_program(candidate, reference, other, known)
        if again is None or not wanted & {d.what for d in again.mismatch.differences}:
            return False
        last["found"] = again
        return True

    program = minimise(found.program, fails)
    if program is found.program:
        return found
    # The last accepted candidate is the result: minimise only moves to candidates that fail.
    return last["found"]


def observe_program(engine: Engine, program: Program) -> dict[str, Any]:
    """The records of `program` on `engine`, or its crash, as plain data (this runs where the
    engine is: in a worker, or in this process)."""
    records, crash = observe_safely(compile_program(program), engine)
    return {"records": None if records is None else wire.plain(records, list[StepRecord]),
            "crash": None if crash is None else wire.text(crash)}


def _records(call: Any) -> tuple[list[StepRecord] | None, str | None]:
    """The records of an `observe_program` call, or the engine's crash."""
    try:
        return decode_records(call.result())
    except EngineCrashed as exc:
        return None, str(exc)
    except wire.MalformedData as exc:
        return None, f"the engine's worker sent malformed data ({exc})"


def decode_records(answer: Any) -> tuple[list[StepRecord] | None, str | None]:
    """`observe_program`'s plain-data answer read back: the records, or the engine's crash;
    raises `wire.MalformedData` for anything else."""
    answer = wire.fields(answer, ("records", "crash"), "answer")
    records = wire.strict(answer["records"], list[StepRecord] | None, "records")
    crash = wire.strict(answer["crash"], str | None, "crash")
    if (records is None) == (crash is None):
        raise wire.MalformedData("records and a crash, or neither")
    return records, crash


def observe_safely(compiled: CompiledProgram, engine: Engine
                   ) -> tuple[list[StepRecord] | None, str | None]:
    """The records of `compiled` on `engine`, or the text of the engine's crash."""
    try:
        return observe(compiled, engine), None
    except BaseException as exc:  # noqa: BLE001 - an adapter crash is a finding, not a fuzzer bug
        # SystemExit or GeneratorExit from an engine would otherwise end the run with no word.
        if _is_the_users(exc):
            raise
        if isinstance(exc, CaseTimeout):  # the watchdog of an engine in this process
            return None, (f"the engine did not finish the program in {PROGRAM_TIMEOUT_S:.0f} s "
                          "(a hang)")
        return None, f"{type(exc).__name__}: {exc}\n{traceback.format_exc(limit=-4)}"


def preflight(*engines: Engine | EngineHandle) -> None:
    """Raise FuzzSetupError unless every engine runs a one-line program."""
    probe = Program((ProgramStep("x = torch.ones(2, requires_grad=True)",
                                 ("x.requires_grad",)),))
    for engine in map(as_handle, engines):
        name = engine.facts.name
        if not engine.facts.available:
            raise FuzzSetupError(f"engine {name} is unavailable: "
                                 f"{engine.facts.unavailable_reason}")
        records, crash = _records(engine.call_later(observe_program, probe,
                                                    timeout=PROGRAM_TIMEOUT_S))
        if crash is not None:
            raise FuzzSetupError(f"engine {name} cannot run a one-line program: "
                                 f"{crash.splitlines()[0]}")
        if records[0].error is not None or records[0].observations["x.requires_grad"] is not True:
            raise FuzzSetupError(f"engine {name} fails `x = torch.ones(2, "
                                 f"requires_grad=True)`: {records[0]}")


def fuzz(reference: Engine | EngineHandle, other: Engine | EngineHandle, *,
         examples: int | None = None, seed: int | None = None, profile: str = "ci",
         out: Path | None = DEFAULT_OUT,
         families: Iterable[str] | None = None, progress: bool = False,
         stream: TextIO | None = None, database: str | None = None,
         tick: Callable[[], None] | None = None,
         stop: Callable[[], bool] | None = None,
         known: Sequence[KnownDifference] = ()) -> FuzzResult:
    """Fuzz `other` against `reference`; a finding is shrunk, built and (with `out`) written.

    `examples` and `seed` default to the profile's; `database` (a folder or a
    `redis://host:port/db` URL) to the profile's (see `profiles`). `tick` is called before
    each program; when `stop` returns True the run ends there, with no finding (see
    `conformance.fuzz.parallel`). Raises FuzzSetupError before running any program when `out`
    cannot be written, the database cannot be used or an engine cannot run at all.
    `known` differences (see `conformance.fuzz.known`) are counted, not reported.
    """
    chosen = get_profile(profile)
    reason = unwritable_reason(out) if out is not None else None
    if reason is not None:
        raise FuzzSetupError(f"{reason}: choose another with --out (a campaign: "
                             "$AUTOGRAD_FUZZ_OUT)")
    try:
        hypothesis_settings = chosen.settings(examples, database)
    except DatabaseError as exc:
        raise FuzzSetupError(str(exc)) from None
    reference, other = as_handle(reference), as_handle(other)
    preflight(reference, other)
    seed = chosen.seed if seed is None else seed
    families = default_families(reference, other) if families is None else tuple(families)
    bar = Progress(hypothesis_settings.max_examples, stream, enabled=progress)
    first_at: list[int] = []
    tally: Counter[str] = Counter()

    @given(programs(families=families))
    def run_one(program: Program) -> None:
        if stop is not None and stop():
            raise Stopped
        bar.tick()
        if tick is not None:
            tick()
        found = check_program(program, reference, other, known, tally)
        if found is not None:
            first_at.append(bar.count)
            raise found

    if seed is not None:
        # `hypothesis.seed` also turns the example database off (it is meant for replaying one
        # run); here the seed only picks the new programs, so a shard with a seed still replays
        # the failures others saved: the settings, with the database, are applied after it.
        run_one = hypothesis_seed(seed)(run_one)
    run_one = hypothesis_settings(run_one)
    location = chosen.database_location(database)
    start = time.perf_counter()
    found: _MismatchFound | None = None
    unstable = False
    with _ctrl_c_told_apart():
        try:
            run_one()
        except _MismatchFound as exc:
            found = exc
        except FlakyFailure as exc:
            # The engines differed, then agreed when Hypothesis ran the same program again:
            # state an earlier program left in an engine decided it. Still a finding.
            found = _first_mismatch(exc)
            if found is None:
                raise
            unstable = True
        except Stopped:
            pass
        finally:
            bar.close()
        result = FuzzResult(reference.facts.name, other.facts.name, bar.count,
                            time.perf_counter() - start, seed, chosen.name,
                            database=shown(location) if location else None,
                            first_mismatch_at=first_at[0] if first_at else None,
                            known=dict(tally))
        if found is not None and not unstable:
            # (An unstable mismatch is not cut down: a shorter program's verdict would say
            # nothing, the mismatch not showing on a second run anyway.)
            found = reduce_finding(found, reference, other, known)
    if found is not None:
        finding = build_finding(found.program, found.mismatch, reference, other, found.records)
        finding.unstable = unstable
        result.finding = _write(finding, out) if out is not None else finding
    return result


def _first_mismatch(group: BaseException) -> _MismatchFound | None:
    """The mismatch inside Hypothesis's FlakyFailure (an exception group, maybe nested)."""
    for exc in getattr(group, "exceptions", ()):
        if isinstance(exc, _MismatchFound):
            return exc
        inner = _first_mismatch(exc)
        if inner is not None:
            return inner
    return None


def _write(finding: Finding, out: Path) -> Finding:
    """`write_finding`, except that a folder that broke during the run (a full disk, a
    mount gone) leaves the finding unwritten with the reason, for its message to carry."""
    try:
        return write_finding(finding, out)
    except OSError as exc:
        finding.write_error = f"{out}: {exc.strerror or exc}"
        return finding
