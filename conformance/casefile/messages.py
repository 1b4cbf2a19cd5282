"""The messages of the spec: what the cases expect, and the inventory of PyTorch's own.

Two sources meet here. The cases expect errors and warnings (`raises`, `warns`) with PyTorch
2.13's exact text. `spec/messages.yaml` is the inventory of the errors and warnings PyTorch's
autograd sources can show a user (`torch/csrc/autograd/`, `torch/autograd/`), each a template
whose `{}` stands for a value formatted at run time, marked in scope (a user of the API the spec
covers can meet it) or out of scope with a reason. A case *covers* an inventory message when
its expected text matches the template; the reference's messages page and its coverage figure
come from that match::

    >>> entry = InventoryMessage.from_text("engine.x", "element {} of tensors does not "
    ...                                    "require grad and does not have a grad_fn")
    >>> entry.matches("element 0 of tensors does not require grad and does not have a grad_fn")
    True
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from conformance.casefile.case import Case
from conformance.casefile.case import line_or_first as _line
from conformance.casefile.files import read_yaml
from conformance.casefile.loader import Problem

KINDS = ("error", "warning")
SCOPES = ("in", "out")
ENTRY_KEYS = {"id", "kind", "type", "text", "origin", "scope", "reason"}
TOP_KEYS = {"torch", "git_version", "source_commit", "messages"}
ENTRY_ID = re.compile(r"^[a-z0-9_]+(\.[a-z0-9_-]+)+$")
# A template must pin down a message: with fewer literal characters it would match the text of
# unrelated messages.
MIN_LITERAL = 10
_PLACEHOLDER = re.compile(r"\{\{|\}\}|\{\}")


@dataclass(frozen=True)
class InventoryMessage:
    id: str
    text: str
    kind: str = "error"
    type: str = "RuntimeError"
    origin: str = ""
    scope: str = "in"
    reason: str = ""
    line: int | None = None
    pattern: re.Pattern[str] = field(default=re.compile(""), compare=False, repr=False)
    literal: int = 0
    """How many characters of the template are literal (the tie-break between templates)."""

    @classmethod
    def from_text(cls, entry_id: str, text: str, **fields: Any) -> InventoryMessage:
        pattern, literal = template_pattern(text)
        return cls(entry_id, text, pattern=pattern, literal=literal, **fields)

    def matches(self, message: str) -> bool:
        return self.pattern.search(" ".join(message.split())) is not None


def template_pattern(text: str) -> tuple[re.Pattern[str], int]:
    """A regex for a template (`{}` is any text, `{{` and `}}` are braces), and how many of its
    characters are literal. Whitespace is collapsed on both sides: a message that PyTorch wraps
    over lines matches its one-line template."""
    parts: list[str] = []
    literal = 0
    position = 0
    text = " ".join(text.split())
    for found in _PLACEHOLDER.finditer(text):
        piece = text[position:found.start()]
        parts.append(re.escape(piece))
        literal += len(piece)
        token = found.group()
        parts.append(".+?" if token == "{}" else re.escape(token[0]))
        literal += 0 if token == "{}" else 1
        position = found.end()
    parts.append(re.escape(text[position:]))
    literal += len(text) - position
    return re.compile("".join(parts), re.DOTALL), literal


def shown(text: str) -> str:
    """A template as a reader sees it: `…` for each value formatted at run time."""
    return _PLACEHOLDER.sub(lambda m: "…" if m.group() == "{}" else m.group()[0], text)


@dataclass
class Inventory:
    torch: str
    git_version: str
    source_commit: str
    messages: list[InventoryMessage]
    path: str = ""

    def match(self, message: str) -> InventoryMessage | None:
        """The entry whose template matches `message` most specifically, if any."""
        found = [entry for entry in self.messages if entry.matches(message)]
        return max(found, key=lambda entry: entry.literal) if found else None


@dataclass(frozen=True)
class ExpectedText:
    """One error or warning a case expects, with its older wordings."""

    case: Case
    step: int
    kind: str
    type: str
    message: str
    older: tuple[tuple[str, str], ...] = ()


def expected_texts(cases: Iterable[Case]) -> list[ExpectedText]:
    """Every error and warning the cases expect, with PyTorch 2.13's text, in case order."""
    found = []
    for case in cases:
        for index, step in enumerate(case.steps):
            expected = [("error", step.raises)] if step.raises is not None else []
            expected += [("warning", warn) for warn in step.warns]
            for kind, item in expected:
                if item is None or not item.message:
                    continue
                older = tuple((v.torch, v.message) for v in item.messages)
                found.append(ExpectedText(case, index, kind, item.type, item.message, older))
    return found


def load_inventory(path: Path) -> tuple[Inventory | None, list[tuple[int, str]]]:
    """Read `messages.yaml`; returns the inventory (None when unreadable) and its problems as
    `(line, message)` pairs."""
    data, problems = read_yaml(path)
    problems = list(problems)
    if data is None:
        return None, problems or [(1, "empty file: the inventory is a mapping with 'messages'")]
    if not isinstance(data, Mapping):
        return None, [(1, "the top level must be a mapping with torch, git_version, "
                          "source_commit and messages")]
    for key in data:
        if key not in TOP_KEYS:
            problems.append((_line(data, key), f"unknown key '{key}' "
                                                f"(allowed: {', '.join(sorted(TOP_KEYS))})"))
    header = {}
    for key in ("torch", "git_version", "source_commit"):
        value = data.get(key)
        if not isinstance(value, str) or not value.strip():
            problems.append((_line(data, key), f"'{key}' must be a non-empty string"))
        header[key] = str(value or "")
    items = data.get("messages")
    if not isinstance(items, list):
        problems.append((_line(data, "messages"), "'messages' must be a list of entries"))
        items = []
    messages: list[InventoryMessage] = []
    seen: dict[str, int] = {}
    for item in items:
        entry = _entry(item, problems)
        if entry is None:
            continue
        if entry.id in seen:
            problems.append((entry.line or 1, f"{entry.id}: duplicate id (first at line "
                                              f"{seen[entry.id]})"))
            continue
        seen[entry.id] = entry.line or 1
        messages.append(entry)
    inventory = Inventory(header["torch"], header["git_version"], header["source_commit"],
                          messages, str(path))
    return inventory, problems


def _entry(item: Any, problems: list[tuple[int, str]]) -> InventoryMessage | None:
    line = _line(item)
    if not isinstance(item, Mapping):
        problems.append((line, "each message must be a mapping (id, kind, type, text, origin, "
                               "scope, reason)"))
        return None
    entry_id = item.get("id")
    where = str(entry_id) if isinstance(entry_id, str) else "message"
    before = len(problems)
    for key in item:
        if key not in ENTRY_KEYS:
            problems.append((_line(item, key), f"{where}: unknown key '{key}' "
                                               f"(allowed: {', '.join(sorted(ENTRY_KEYS))})"))
    for key in ("id", "kind", "type", "text", "origin", "scope"):
        value = item.get(key)
        if not isinstance(value, str) or not value.strip():
            problems.append((_line(item, key), f"{where}: '{key}' must be a non-empty string"))
    if isinstance(entry_id, str) and not ENTRY_ID.match(entry_id):
        problems.append((_line(item, "id"), f"{where}: id must match {ENTRY_ID.pattern}"))
    if item.get("kind") not in KINDS:
        problems.append((_line(item, "kind"), f"{where}: kind must be one of {', '.join(KINDS)}"))
    scope = item.get("scope")
    if scope not in SCOPES:
        problems.append((_line(item, "scope"), f"{where}: scope must be 'in' or 'out'"))
    reason = item.get("reason", "")
    if scope == "out" and (not isinstance(reason, str) or not reason.strip()):
        problems.append((_line(item, "scope"), f"{where}: an out-of-scope message needs a "
                                               f"'reason' (one line: why no case covers it)"))
    text = item.get("text")
    if isinstance(text, str) and text.strip():
        literal = template_pattern(text)[1]
        if literal < MIN_LITERAL:
            problems.append((_line(item, "text"), f"{where}: the template has {literal} "
                                                  f"literal characters; it needs at least "
                                                  f"{MIN_LITERAL} to tell messages apart"))
    if len(problems) > before:
        return None
    return InventoryMessage.from_text(
        entry_id, text, kind=item["kind"], type=item["type"], origin=item["origin"],
        scope=scope, reason=str(reason or ""), line=line)


@dataclass
class Coverage:
    """Which inventory messages the cases expect, and which expected texts are not in it."""

    covered: dict[str, list[ExpectedText]]
    """Entry id -> the expected texts that match it (in scope or not)."""
    unmatched: list[ExpectedText]
    """Expected texts no entry matches: messages of operators or of Python itself."""

    def in_scope(self, inventory: Inventory) -> tuple[int, int]:
        """(covered, total) over the in-scope entries."""
        entries = [e for e in inventory.messages if e.scope == "in"]
        return sum(1 for e in entries if self.covered.get(e.id)), len(entries)


def coverage(inventory: Inventory, expected: Sequence[ExpectedText]) -> Coverage:
    covered: dict[str, list[ExpectedText]] = {}
    unmatched = []
    for text in expected:
        entry = inventory.match(text.message)
        if entry is None:
            unmatched.append(text)
        else:
            covered.setdefault(entry.id, []).append(text)
    return Coverage(covered, unmatched)


INVENTORY = "messages.yaml"


def read_inventory(spec_dir: Path) -> tuple[Inventory | None, list[Problem]]:
    """The spec folder's inventory (None when it has none) and its problems, for `lint`."""
    path = Path(spec_dir) / INVENTORY
    if not path.is_file():
        return None, []
    inventory, problems = load_inventory(path)
    return inventory, [Problem(str(path), line, message) for line, message in problems]
