"""Failures grouped by cause: what an engine author should fix first.

A cause is a failed check's message with what varies from case to case taken out (numbers,
quoted names, values, the variables of the observation), kept apart by level: a semantic cause
(a wrong gradient, a missing error) comes before a surface one (a node name, a message's
wording), then the causes that cost the most cases first.

    >>> normalise("grad_fn_name(y): expected 'AddBackward0', observed 'Add'")
    "grad_fn_name(…): expected '…', observed '…'"
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

_KEY = re.compile(r"^([A-Za-z_][\w.]*)\(([^()]*)\)")
_PATTERNS = (
    (re.compile(r"0x[0-9a-fA-F]+"), "0x…"),
    # What is missing is the cause: keep the name in "has no attribute 'x'", "name 'x' ...".
    # A quote opens only where no letter precedes it and closes only where none follows, so
    # the apostrophes of "the engine's" and "can't" are text, not quotes.
    (re.compile(r"(?<!attribute )(?<!name )(?<!\w)'(?:[^'\n]|'(?=\w))*'(?!\w)"
                r"|\"[^\"\n]*\""), "'…'"),
    (re.compile(r"\[[^\[\]\n]*(\[[^\[\]\n]*\][^\[\]\n]*)*\]"), "[…]"),
    (re.compile(r"tensor\([^\n]*?\)(?=,|$| )"), "tensor(…)"),
    (re.compile(r"\b\d+(\.\d+)?(e[-+]?\d+)?\b"), "N"),
    (re.compile(r"\s+"), " "),
)


def normalise(message: str) -> str:
    """The cause of a failure message: its first line without what varies between cases."""
    text = (message.splitlines() or [""])[0]
    text = re.sub(r" \(and N more failed check\(s\)\)$", "",
                  re.sub(r"\(and \d+ more failed check\(s\)\)", "(and N more failed check(s))",
                         text))
    head, sep, rest = text.partition(": ")
    if sep and _KEY.match(head):
        # An observation such as `grad_fn_name(y)` or `x.grad`: keep the helper, not the names.
        head = _KEY.sub(lambda m: f"{m.group(1)}(…)", head)
    elif sep and re.fullmatch(r"[A-Za-z_][\w.\[\]]*", head):
        head = re.sub(r"^[A-Za-z_]\w*", "<tensor>", head)
    text = f"{head}{sep}{rest}"
    for pattern, replacement in _PATTERNS:
        text = pattern.sub(replacement, text)
    return text.strip()


@dataclass
class Cause:
    level: str
    text: str
    case_ids: list[str] = field(default_factory=list)

    @property
    def count(self) -> int:
        return len(self.case_ids)


def by_cause(results: Iterable[Any]) -> list[Cause]:
    """The causes of the failed and errored `results`, semantic first, then by count.

    Each case counts once, under the cause of its first semantic failure when it has one."""
    causes: dict[tuple[str, str], Cause] = {}
    for result in results:
        if result.verdict not in ("failed", "error"):
            continue
        checks = getattr(result, "checks", None) or []
        head = next((c for c in checks if c.level == "semantics"), checks[0] if checks else None)
        if result.verdict == "error" or head is None:
            level, text = "error", result.message
        else:
            level, text = head.level, head.message
        key = (level, normalise(text))
        causes.setdefault(key, Cause(level, key[1])).case_ids.append(result.case_id)
    order = {"error": 0, "semantics": 1, "surface": 2}
    return sorted(causes.values(), key=lambda c: (order.get(c.level, 3), -c.count, c.text))


def expectations_text(engine: str, results: Sequence[Any],
                      known: Any = None) -> str:
    """An expectations file listing every failed or errored case, grouped by cause, with one
    reason per group to fill in (`run --write-expectations`). `known` (an `Expectations`):
    the file's entries so far; an entry that still matches a failing case keeps its reason."""
    failing = [r for r in results if r.verdict in ("failed", "error", "xfail")]
    kept: dict[str, str] = {}
    if known is not None:
        for result in failing:
            entry = known.match(result.case_id)
            if entry is not None and entry.kind == "xfail":
                kept[entry.prefix] = entry.reason
    fresh = [r for r in failing if not any(r.case_id.startswith(p) for p in kept)]
    failing = [r for r in fresh if r.verdict in ("failed", "error")]
    lines = [
        f"# Expectations for {engine}, written by `python -m conformance run "
        "--write-expectations`.",
        "# One group per cause, the most urgent first. Replace each group's reason (the same",
        "# text on every line of the group) with what the engine does instead, and move the",
        "# real bugs out of this file once they are fixed. Writing it again keeps the reasons",
        "# of the entries that still match a failing case and adds groups for new failures.",
        "xfail:",
    ]
    if kept:
        lines += ["", "  # -- kept from the file as it was"]
        lines += [f"  {_scalar(prefix)}: {_scalar(reason)}" for prefix, reason in kept.items()]
    for number, cause in enumerate(by_cause(failing), 1):
        reason = f"FILL IN ({cause.level}): {cause.text}"
        lines += ["", f"  # -- cause {number}: {cause.level}, {cause.count} case(s): "
                      f"{_one_line(cause.text)}"]
        for case_id in cause.case_ids:
            lines.append(f"  {_scalar(case_id)}: {_scalar(reason)}")
    if not failing and not kept:
        lines[-1] = "xfail: {}"
    return "\n".join(lines) + "\n"


def _scalar(text: str) -> str:
    # Double quotes, so that a reason edited in place may hold an apostrophe.
    return yaml.safe_dump(text, width=10**6, allow_unicode=True,
                          default_style='"').splitlines()[0]


def _one_line(text: str) -> str:
    return " ".join(text.split())[:150]


def write_expectations(path: Path, engine: str, results: Sequence[Any]) -> None:
    """Write `path`; entries already in it that still match a failing case keep their reason."""
    from conformance.expectations import Expectations
    from conformance.reports import write_atomic

    known = Expectations.load(Path(path)) if Path(path).is_file() else None
    write_atomic(Path(path), expectations_text(engine, results, known))
