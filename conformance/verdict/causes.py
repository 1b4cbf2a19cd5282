"""Failures grouped by cause: what an engine author should fix first.

A cause is a failed check's message with what varies from case to case taken out (numbers,
quoted names, values, the variables of the observation), kept apart by level: a semantic cause
(a wrong gradient, a missing error) comes before a surface one (a node name, a message's
wording), then the causes that cost the most cases first.

    >>> normalise("grad_fn_name(y): expected 'AddBackward0', observed 'Add'")
    "grad_fn_name(…): expected '…', observed '…'"

One cause can stand for unrelated divergences (a wrong gradient of `sigmoid` and one of
`cumsum` read alike), so the groups of an expectations file (`expectations_text`) are also
kept apart by what the case does up to the failing step: the functions, methods and operators
of its snippets and of the observation, less the set-up nearly every case shares.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import yaml

_KEY = re.compile(r"^([A-Za-z_][\w.]*)\(([^()]*)\)")
MAX_LINE = 4000
"""How much of a message's first line a cause is made from: an engine's text can be any length,
and no cause needs more to be told apart."""


class _Spans:
    """Each span from a match of `opening` to the first match after it of the closing pattern
    for what opened (`closing[match]`), as the lazy regex `opening.*?closing` finds them but in
    linear time. The regex tries every opening and looks for its end up to the end of the line,
    so a line of many unclosed openings took minutes; here an opening of a kind once found
    unclosed is skipped, since no end follows a later one either."""

    def __init__(self, opening: str, closing: Mapping[str, str]) -> None:
        self.opening = re.compile(opening)
        self.closing = {kind: re.compile(pattern) for kind, pattern in closing.items()}

    def sub(self, replacement: str, text: str) -> str:
        parts, done, at, unclosed = [], 0, 0, set()
        while (start := self.opening.search(text, at)) is not None:
            kind = start.group()
            end = None if kind in unclosed else self.closing[kind].search(text, start.end())
            if end is None:
                unclosed.add(kind)
                at = start.start() + 1
                continue
            parts += [text[done:start.start()], replacement]
            done = at = end.end()
        return "".join(parts) + text[done:]


# Each rewrites one line (a message's first, so no newline) in time linear in its length: the
# text is an engine's, so no pattern may scan the rest of the line again from every position.
_PATTERNS: tuple[tuple[re.Pattern[str] | _Spans, str], ...] = (
    (re.compile(r"0x[0-9a-fA-F]+"), "0x…"),
    # What is missing is the cause: keep the name in "has no attribute 'x'", "name 'x' ...".
    # A quote opens only where no letter precedes it and closes only where none follows, so
    # the apostrophes of "the engine's" and "can't" are text, not quotes.
    (_Spans(r"(?<!attribute )(?<!name )(?<!\w)'|\"", {"'": r"'(?!\w)", '"': '"'}), "'…'"),
    # Text and bracketed text, one level deep: no character both ends a run and starts the next.
    (re.compile(r"\[[^\[\]\n]*(\[[^\[\]\n]*\][^\[\]\n]*)*\]"), "[…]"),
    # A tensor's text runs to the first `)` before a comma, a space or the line's end.
    (_Spans(r"tensor\(", {"tensor(": r"\)(?=,|$| )"}), "tensor(…)"),
    (re.compile(r"\b\d+(\.\d+)?(e[-+]?\d+)?\b"), "N"),
    (re.compile(r"\s+"), " "),
)


PLACEHOLDER = "FILL IN"
"""How a reason `--write-expectations` wrote begins until a person replaces it: the runs
that read such a reason say how many are left."""


def unfilled(results: Any, level: str) -> list[Any]:
    """The results known to fail (xfail at `level`) whose reason is still a placeholder."""
    return [r for r in results
            if r.verdict_at(level) == "xfail" and (r.reason or "").startswith(PLACEHOLDER)]


def normalise(message: str) -> str:
    """The cause of a failure message: its first line without what varies between cases."""
    text = (message.splitlines() or [""])[0][:MAX_LINE]
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
    missing = _MISSING.search(text)
    if missing:
        # A missing name is one cause wherever it shows (raised by a step, by an observation,
        # or where a refusal was expected): the name alone says what to add.
        return f"{_MISSING_CAUSE}'{missing.group(1)}'"
    return text.strip()


_MISSING = re.compile(r"has no attribute '([^'…]+)'")
_MISSING_CAUSE = "AttributeError: '…' object has no attribute "


def is_missing_name(cause_text: str) -> bool:
    """Whether a normalised cause is a missing attribute (not split by what cases do)."""
    return cause_text.startswith(_MISSING_CAUSE)


# Set-up and reductions nearly every case uses: they tell no divergence from another.
_COMMON = frozenset({
    "torch.tensor", "torch.ones", "torch.zeros", "torch.rand", "torch.randn", "torch.arange",
    "torch.empty", "torch.full", "torch.ones_like", "torch.zeros_like", "torch.rand_like",
    "torch.randn_like", "torch.manual_seed", ".sum", ".backward", ".requires_grad_",
})
_OPERATORS = {
    ast.Add: "+", ast.Sub: "-", ast.Mult: "*", ast.Div: "/", ast.FloorDiv: "//", ast.Mod: "%",
    ast.Pow: "**", ast.MatMult: "@", ast.USub: "unary -", ast.Invert: "~",
    ast.BitAnd: "&", ast.BitOr: "|", ast.BitXor: "^", ast.LShift: "<<", ast.RShift: ">>",
}
_MODULES = ("torch", "nn", "F", "np")


@dataclass
class Cause:
    level: str
    text: str
    case_ids: list[str] = field(default_factory=list)
    involves: tuple[str, ...] = ()
    """What the cases of the group do (`involved`); empty when grouped by cause alone."""

    @property
    def count(self) -> int:
        return len(self.case_ids)


def by_cause(results: Iterable[Any], cases: Mapping[str, Any] | None = None) -> list[Cause]:
    """The causes of the failed and errored `results`, semantic first, then by count.

    Each case counts once, under the cause of its first semantic failure when it has one.
    With `cases` (case id to `Case`), a cause is also split by what each case does up to
    the failing step (`involved`), so unrelated divergences that read alike keep apart."""
    causes: dict[tuple[str, str, tuple[str, ...]], Cause] = {}
    for result in results:
        if result.verdict not in ("failed", "error"):
            continue
        checks = getattr(result, "checks", None) or []
        head = next((c for c in checks if c.level == "semantics"), checks[0] if checks else None)
        if result.verdict == "error" or head is None:
            level, text = "error", result.message
        else:
            level, text = head.level, head.message
        cause = normalise(text)
        involves = involved(result, head, cases) \
            if cases is not None and not is_missing_name(cause) else ()
        key = (level, cause, involves)
        causes.setdefault(key, Cause(level, key[1], involves=involves)).case_ids.append(
            result.case_id)
    order = {"error": 0, "semantics": 1, "surface": 2}
    return sorted(causes.values(),
                  key=lambda c: (order.get(c.level, 3), -c.count, c.text, c.involves))


def involved(result: Any, check: Any = None, cases: Mapping[str, Any] | None = None
             ) -> tuple[str, ...]:
    """What `result`'s case does up to its failing step: the functions (`torch.cumsum`),
    methods (`.sigmoid`) and operators (`*`) of its snippets and of the failed observation
    (`grad_fn_name`), less the set-up every case shares. Without the case, the failing step's
    snippet alone."""
    step = getattr(check, "step", None)
    step = result.step if step is None else step
    case = (cases or {}).get(result.case_id)
    if case is not None:
        last = len(case.steps) - 1 if step is None else min(step, len(case.steps) - 1)
        sources = [s.run for s in case.steps[: last + 1]]
    else:
        sources = [getattr(check, "snippet", None) or result.snippet or ""]
    what = getattr(check, "what", None)
    names: set[str] = set()
    for source, mode in [*((s, "exec") for s in sources), (what or "", "eval")]:
        names |= _names(source, mode)
    return tuple(sorted(names - _COMMON - {"raises", "warns"}))


def _names(source: str, mode: str) -> set[str]:
    try:
        tree = ast.parse(source, mode=mode)
    except (SyntaxError, ValueError, RecursionError):
        return set()
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            names.add(_dotted(node.func))
        elif isinstance(node, ast.BinOp | ast.UnaryOp | ast.AugAssign):
            operator = _OPERATORS.get(type(node.op))
            if operator is not None:
                names.add(operator)
        elif isinstance(node, ast.Subscript) and isinstance(node.ctx, ast.Load):
            names.add("[]")
    names.discard("")
    return names


def _dotted(func: ast.expr) -> str:
    """`torch.autograd.grad` for a function of a module the case is given, `.sum` for a
    method, the name itself for a plain call."""
    if isinstance(func, ast.Name):
        return func.id
    if not isinstance(func, ast.Attribute):
        return ""
    parts = [func.attr]
    node = func.value
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name) and node.id in _MODULES:
        return ".".join([node.id, *reversed(parts)])
    return f".{func.attr}"


def expectations_text(engine: str, results: Sequence[Any], known: Any = None,
                      cases: Mapping[str, Any] | None = None) -> str:
    """An expectations file listing every failed or errored case, grouped by cause and by
    what the case does (`involved`), with one reason per group to fill in
    (`run --write-expectations`). `known` (an `Expectations`): the file's entries so far; an
    entry that still matches a failing case keeps its reason. `cases`: case id to `Case`, so
    a group is told by every step up to the failing one, not the failing step's alone."""
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
        "# One group per cause and what its cases do, the most urgent first. Replace each",
        "# group's reason (the same text on every line of the group) with what the engine",
        "# does instead, and move the real bugs out of this file once they are fixed. Writing",
        "# it again keeps the reasons of the entries that still match a failing case and adds",
        "# groups for new failures.",
        "xfail:",
    ]
    if kept:
        lines += ["", "  # -- kept from the file as it was"]
        lines += [f"  {_scalar(prefix)}: {_scalar(reason)}" for prefix, reason in kept.items()]
    for number, cause in enumerate(by_cause(failing, cases or {}), 1):
        where = f"; in {', '.join(cause.involves)}" if cause.involves else ""
        reason = f"{PLACEHOLDER} ({cause.level}{where}): {cause.text}"
        lines += ["", f"  # -- cause {number}: {cause.level}, {cause.count} case(s): "
                      f"{_one_line(cause.text)}"]
        if cause.involves:
            lines.append(f"  # -- involves {_one_line(', '.join(cause.involves))}")
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
