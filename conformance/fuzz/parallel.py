"""Fuzzing on every core of one machine: `python -m conformance fuzz --jobs N`.

    >>> result = fuzz_in_parallel("torch", "refimpl", jobs=2, examples=400, seed=0,
    ...                           profile="ci", out=None)                      # doctest: +SKIP
    >>> result.programs, result.jobs                                           # doctest: +SKIP
    (400, 2)

Hypothesis draws one program at a time, and drawing takes as long as running it on both engines,
so one fuzzing loop keeps about one core busy. `--jobs N` runs N loops (shards) side by side,
each in a process of its own that loads both engines itself. That process is the isolation:
with as many loops as cores, two more worker processes per loop (what `fuzz` with one loop
uses) cost more in hand-offs than they save. A program an engine does not finish in
`PROGRAM_TIMEOUT_S` is interrupted and reported as a crash finding, as a hung worker is; an
engine that kills the interpreter ends the run with a message to rerun with `--jobs 1`.

- the programs are shared out (`examples` is the total); shard i draws from seed + i when a
  seed is given (from its own random seed otherwise), so a run with the same seed and the same
  N draws the same programs again;
- the shards share the example database, so a failure one of them saves is replayed by every
  later run;
- the first mismatch stops the others at their next program (they report how many they ran);
  it is shrunk and written by the shard that found it.

A campaign across machines is `conformance/fuzz/campaign.py` under pytest-xdist; this is the
same idea for one command on one machine. The processes come from the standard library's
`concurrent.futures.ProcessPoolExecutor`.
"""

from __future__ import annotations

import multiprocessing
import os
import time
from collections import Counter
from collections.abc import Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

from conformance.fuzz.known import KnownDifference
from conformance.fuzz.profiles import get_profile
from conformance.fuzz.runner import (
    FuzzResult,
    Progress,
    default_families,
    fuzz,
    prefer_single_thread,
)

_SHARED: dict[str, Any] = {}
"""In a shard process: the run's stop event and program counter (set by `_initialize`)."""


def jobs_value(text: str) -> int:
    """`--jobs`: a positive number, or `auto` for one per core."""
    if text == "auto":
        return os.cpu_count() or 1
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise ValueError(f"--jobs must be a positive number or auto, got {text!r}")
    return value


def shares(total: int, jobs: int) -> list[int]:
    """`total` programs shared out over `jobs` shards, as evenly as possible."""
    return [total // jobs + (1 if i < total % jobs else 0) for i in range(jobs)]


@dataclass
class _ShardResult:
    result: FuzzResult
    error: str | None = None
    """Why the shard could not start (an engine, the database, the findings folder)."""


def _initialize(stop: Any, counter: Any) -> None:
    _SHARED["stop"] = stop
    _SHARED["counter"] = counter
    prefer_single_thread()


def _tick() -> None:
    counter = _SHARED["counter"]
    with counter.get_lock():
        counter.value += 1


def _shard(names: tuple[str, str], examples: int, seed: int | None, profile: str,
           out: Path | None, families: tuple[str, ...] | None, database: str | None,
           known: tuple[KnownDifference, ...] = ()) -> _ShardResult:
    """One shard: both engines loaded in this process, one fuzzing loop; stops early when
    told to."""
    from conformance.engines import EngineError, load_engine
    from conformance.fuzz.runner import FuzzSetupError

    stop = _SHARED["stop"]
    try:
        reference, other = load_engine(names[0]), load_engine(names[1])
        allowed = default_families(reference, other)
        result = fuzz(reference, other, examples=examples, seed=seed, profile=profile, out=out,
                      families=tuple(f for f in allowed if families is None or f in families),
                      database=database, tick=_tick, stop=stop.is_set, known=known)
    except (EngineError, FuzzSetupError) as exc:
        stop.set()
        return _ShardResult(FuzzResult(names[0], names[1], 0, 0.0, seed, profile), str(exc))
    if result.finding is not None:
        stop.set()
    return _ShardResult(result)


class ShardError(RuntimeError):
    """A shard could not start (the message says which engine, database or folder, and why),
    or its process died."""


def fuzz_in_parallel(reference: str, other: str, *, jobs: int, examples: int | None = None,
                     seed: int | None = None, profile: str = "ci",
                     out: Path | None = None, families: Sequence[str] | None = None,
                     database: str | None = None, progress: bool = False,
                     stream: TextIO | None = None,
                     known: Sequence[KnownDifference] = ()) -> FuzzResult:
    """`fuzz` in `jobs` processes; the programs, findings and rate of all of them.

    The result's `seconds` is the longest shard's fuzzing time (engines loaded), so `rate` is
    what the machine achieved side by side. Raises ShardError when a shard cannot start (the
    others are stopped first).
    """
    chosen = get_profile(profile)
    total = chosen.examples if examples is None else examples
    base = chosen.seed if seed is None else seed
    context = multiprocessing.get_context(
        "forkserver" if "forkserver" in multiprocessing.get_all_start_methods() else "spawn")
    stop, counter = context.Event(), context.Value("q", 0)
    bar = Progress(total, stream, enabled=progress)
    start = time.perf_counter()
    results: list[_ShardResult] = []
    with ProcessPoolExecutor(max_workers=jobs, mp_context=context, initializer=_initialize,
                             initargs=(stop, counter)) as pool:
        pending: set[Future[_ShardResult]] = {
            pool.submit(_shard, (reference, other), share,
                        None if base is None else base + i, profile, out,
                        None if families is None else tuple(families), database, tuple(known))
            for i, share in enumerate(shares(total, jobs)) if share}
        try:
            while pending:
                done, pending = wait(pending, timeout=bar.tick_interval(),
                                     return_when=FIRST_COMPLETED)
                results += [future.result() for future in done]
                bar.count = counter.value
                bar.draw()
        except BrokenProcessPool:
            stop.set()
            raise ShardError(
                "a fuzzing process died (an engine crashed the interpreter, or it ran out of "
                "memory); run with --jobs 1, where each engine runs in a worker process of its "
                "own, to catch the program as a finding") from None
        except BaseException:
            stop.set()  # Ctrl-C reaches the shards too; a crash of ours must not leave them
            raise
        finally:
            bar.close()
    errors = [r.error for r in results if r.error is not None]
    if errors:
        raise ShardError(errors[0])
    findings = [r.result for r in results if r.result.finding is not None]
    first = findings[0] if findings else None
    # The shards fuzz side by side from about the same moment: the longest one's time is the
    # run's, engine start-up left out as in `fuzz`.
    seconds = max((r.result.seconds for r in results), default=time.perf_counter() - start)
    return FuzzResult(
        reference, other, sum(r.result.programs for r in results), seconds, base,
        chosen.name, finding=first.finding if first else None,
        database=results[0].result.database if results else None,
        first_mismatch_at=first.first_mismatch_at if first else None, jobs=jobs,
        more_findings=tuple(r.finding for r in findings[1:]),
        known=dict(sum((Counter(r.result.known) for r in results), Counter())))


__all__ = ["ShardError", "fuzz_in_parallel", "jobs_value", "shares"]
