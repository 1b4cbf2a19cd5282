"""The differential fuzzing loop: Hypothesis draws programs, two engines run them, any
difference is shrunk and written out as a case.

    >>> from conformance.engines import load_engine
    >>> result = fuzz(load_engine("torch"), load_engine("refimpl"), profile="ci")  # doctest: +SKIP
    >>> result.finding is None, round(result.rate)                                # doctest: +SKIP
    (True, 150)

Both engines run in this process, one program after the other, from code compiled once per
program: no subprocess and no import per program, which is what makes 100+ programs per
second possible.
"""

from __future__ import annotations

import os
import sys
import time
import traceback
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import TextIO

from hypothesis import given
from hypothesis import seed as hypothesis_seed

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
from conformance.fuzz.findings import DEFAULT_OUT, Finding, build_finding, write_finding
from conformance.fuzz.minimise import minimise
from conformance.fuzz.profiles import get_profile
from conformance.fuzz.program import Program, ProgramStep
from conformance.fuzz.strategies import FAMILIES, programs

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
    """An engine cannot run even a trivial program; the message says which and why."""


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

    @property
    def rate(self) -> float:
        return self.programs / self.seconds if self.seconds > 0 else 0.0

    def summary(self) -> str:
        found = "1 mismatch" if self.finding else "0 mismatches"
        seed = "random" if self.seed is None else str(self.seed)
        return (f"fuzz: {self.programs} programs on {self.reference} (reference) vs "
                f"{self.other}, {found}, {self.seconds:.1f} s, {self.rate:.0f} programs/s "
                f"(profile {self.profile}, seed {seed})")


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
        self.drawn = True
        self._draw(now)

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


def default_families(*engines: Engine) -> tuple[str, ...]:
    """The program families every engine supports (a family is named after its feature)."""
    return tuple(f for f in FAMILIES if all(engine.supports(f) for engine in engines))


def check_program(program: Program, reference: Engine, other: Engine) -> _MismatchFound | None:
    """Run `program` on both engines; the mismatch (with the reference's records), if any."""
    compiled = compile_program(program)
    records, crash_a = _observe_safely(compiled, reference)
    other_records, crash_b = _observe_safely(compiled, other)
    if crash_a or crash_b:
        if crash_a == crash_b:
            return None
        # The whole program goes into the case: where the adapter crashed is not known.
        crash = Difference("runner crash", crash_a or "no crash", crash_b or "no crash")
        mismatch = Mismatch(len(program.steps) - 1, (crash,))
        return _MismatchFound(program, mismatch, records or [])
    strictness = weakest(reference.message_strictness, other.message_strictness)
    mismatch = first_mismatch(records, other_records, strictness, program)
    return None if mismatch is None else _MismatchFound(program, mismatch, records)


def reduce_finding(found: _MismatchFound, reference: Engine, other: Engine) -> _MismatchFound:
    """`found` with its program cut down to the statements its mismatch needs.

    A candidate counts when the engines still differ on one of the observations (or the error,
    warnings or crash) that differed originally, so the reduction cannot drift to another bug.
    """
    wanted = {difference.what for difference in found.mismatch.differences}
    last: dict[str, _MismatchFound] = {}

    def fails(candidate: Program) -> bool:
        again = check_program(candidate, reference, other)
        if again is None or not wanted & {d.what for d in again.mismatch.differences}:
            return False
        last["found"] = again
        return True

    program = minimise(found.program, fails)
    if program is found.program:
        return found
    # The last accepted candidate is the result: minimise only moves to candidates that fail.
    return last["found"]


def _observe_safely(compiled: CompiledProgram, engine: Engine
                    ) -> tuple[list[StepRecord] | None, str | None]:
    try:
        return observe(compiled, engine), None
    except Exception as exc:  # noqa: BLE001 - an adapter crash is a finding, not a fuzzer bug
        return None, f"{type(exc).__name__}: {exc}\n{traceback.format_exc(limit=-4)}"


def preflight(*engines: Engine) -> None:
    """Raise FuzzSetupError unless every engine runs a one-line program."""
    probe = compile_program(Program((ProgramStep("x = torch.ones(2, requires_grad=True)",
                                                 ("x.requires_grad",)),)))
    for engine in engines:
        if not engine.available:
            raise FuzzSetupError(f"engine {engine.name} is unavailable: "
                                 f"{engine.unavailable_reason}")
        try:
            records = observe(probe, engine)
        except Exception as exc:  # noqa: BLE001 - reported to the user as a setup problem
            raise FuzzSetupError(f"engine {engine.name} cannot run a one-line program: "
                                 f"{type(exc).__name__}: {exc}") from exc
        if records[0].error is not None or records[0].observations["x.requires_grad"] is not True:
            raise FuzzSetupError(f"engine {engine.name} fails `x = torch.ones(2, "
                                 f"requires_grad=True)`: {records[0]}")


def fuzz(reference: Engine, other: Engine, *, examples: int | None = None,
         seed: int | None = None, profile: str = "ci", out: Path | None = DEFAULT_OUT,
         families: Iterable[str] | None = None, progress: bool = False,
         stream: TextIO | None = None) -> FuzzResult:
    """Fuzz `other` against `reference`; a finding is shrunk, built and (with `out`) written.

    `examples` and `seed` default to the profile's. Raises FuzzSetupError when an engine
    cannot run at all.
    """
    chosen = get_profile(profile)
    preflight(reference, other)
    seed = chosen.seed if seed is None else seed
    total = examples if examples is not None else chosen.examples
    families = default_families(reference, other) if families is None else tuple(families)
    bar = Progress(total, stream, enabled=progress)

    @chosen.settings(total)
    @given(programs(families=families))
    def run_one(program: Program) -> None:
        bar.tick()
        found = check_program(program, reference, other)
        if found is not None:
            raise found

    if seed is not None:
        run_one = hypothesis_seed(seed)(run_one)
    start = time.perf_counter()
    found: _MismatchFound | None = None
    try:
        run_one()
    except _MismatchFound as exc:
        found = exc
    finally:
        bar.close()
    result = FuzzResult(reference.name, other.name, bar.count, time.perf_counter() - start,
                        seed, chosen.name)
    if found is not None:
        found = reduce_finding(found, reference, other)
        finding = build_finding(found.program, found.mismatch, reference, other, found.records)
        result.finding = write_finding(finding, out) if out is not None else finding
    return result
