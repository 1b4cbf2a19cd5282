"""The judge: how every verdict is reached, for `run`, the pytest plugin and the reference.

A case the engine cannot run (unavailable, a feature missing, listed as skip) is `unsupported`
without running; the rest run on the engine's handle; the engine's expectations entry turns a
failure into `xfail` and a pass into `stale`; the verdict is read at the level asked for
(`--level`, else the adapter's own)::

    >>> judge(case, EngineWorkers("refimpl"), Expectations.load(None))   # doctest: +SKIP
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from conformance.casefile.case import Case
from conformance.run.executor import DEFAULT_TIMEOUT, CaseResult, unrunnable
from conformance.run.handle import EngineHandle
from conformance.run.observe import cut
from conformance.verdict.expectations import Entry, Expectations

REASON_LIMIT = 2000
"""Characters of an expectations entry's reason a result carries."""


def judge(case: Case, handle: EngineHandle, expectations: Expectations, *,
          timeout: float = DEFAULT_TIMEOUT, level: str | None = None,
          seed: int | None = None) -> CaseResult:
    """The verdict of `case` on the engine behind `handle`, read at `level` (default: the
    adapter's own)."""
    entry = expectations.match(case.id)
    skip = entry.reason if entry is not None and entry.kind == "skip" else None
    result = unrunnable(case, handle.facts, seed, skip)
    if result is None:
        result = settle(handle.run(case, seed, timeout=timeout), entry, expectations.source)
        if entry is not None and entry.kind == "isolate":
            handle.replace_process()
    result.level = level or getattr(handle.facts, "level", "full")
    return result


def settle(result: CaseResult, entry: Entry | None, source: str | None) -> CaseResult:
    """Apply the engine's expectations entry: a listed failure is `xfail`, a listed case that
    passed is `stale`."""
    if entry is not None:
        # An expectations file is text from outside: a reason is copied into every result it
        # covers, so a long one is cut once here rather than written out thousands of times.
        result.reason = cut(entry.reason, REASON_LIMIT)
        if result.verdict in ("failed", "error"):
            result.verdict = "xfail"
        elif result.verdict == "passed":
            result.verdict = "stale"
            result.message = f"listed as xfail in {source} ({entry.prefix}: {entry.reason}) " \
                             "but passed"
    return result


def expectations_for(handle: EngineHandle, overrides: Mapping[str, Any] | None = None
                     ) -> Expectations:
    """The handle's expectations file, or the override given for its engine's name."""
    facts = handle.facts
    return Expectations.load((overrides or {}).get(facts.name,
                                                   getattr(facts, "expectations", None)))
