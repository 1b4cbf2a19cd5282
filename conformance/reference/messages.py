"""The messages index: every error and warning the spec knows, with its causes and its fixes.

A reader arrives with a message on their screen. Each message is a section of
`messages.html` (anchor `message-<id>`) holding its exact PyTorch 2.13 text, the older
wordings the cases record, one line per cause (the rule of each case that meets it, linked) and
what to do (each case's `fix`, linked to the cases that show it). Messages that match an entry
of the inventory (`spec/messages.yaml`) are grouped by that entry, so the same error with other
numbers in it is one section; the others (errors of operators, of Python) by their exact text.
The page ends with the inventory's coverage: which of PyTorch's autograd messages a case shows.
"""

from __future__ import annotations

import hashlib
import re
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field

from conformance.casefile.case import Case
from conformance.casefile.messages import (
    Coverage,
    ExpectedText,
    Inventory,
    InventoryMessage,
    coverage,
    expected_texts,
    shown,
)
from conformance.reference import rst

_WORD = re.compile(r"[A-Za-z]{3}")
_LEADING = re.compile(r"^\W+")
TITLE_LENGTH = 96
"""Longer messages are cut in the section title; the full text is the section's first block."""


@dataclass
class MessageGroup:
    """One section of the index: a message and every case that expects it."""

    anchor: str
    kind: str
    type: str
    text: str
    """The text shown: the inventory template (`…` for run-time values) or the exact text."""
    entry: InventoryMessage | None = None
    texts: list[ExpectedText] = field(default_factory=list)
    distinct: str | None = None
    """A title that tells this message from others that begin the same (`_distinct_titles`)."""

    @property
    def title(self) -> str:
        if self.distinct is not None:
            return self.distinct
        one_line = " ".join(self.text.split())
        if len(one_line) <= TITLE_LENGTH:
            return one_line
        return one_line[:TITLE_LENGTH].rsplit(" ", 1)[0] + " …"

    @property
    def cases(self) -> list[Case]:
        seen: dict[str, Case] = {}
        for text in self.texts:
            seen.setdefault(text.case.id, text.case)
        return list(seen.values())

    @property
    def exact_texts(self) -> list[str]:
        """The texts the cases expect (PyTorch 2.13), each once."""
        return list(dict.fromkeys(text.message for text in self.texts))

    @property
    def older(self) -> list[tuple[str, str]]:
        return list(dict.fromkeys(pair for text in self.texts for pair in text.older))


@dataclass
class MessageIndex:
    groups: list[MessageGroup]
    inventory: Inventory | None
    coverage: Coverage | None

    def group_of(self, case_id: str) -> list[MessageGroup]:
        return [g for g in self.groups if any(t.case.id == case_id for t in g.texts)]


def build_index(cases: Sequence[Case], inventory: Inventory | None) -> MessageIndex:
    expected = expected_texts(cases)
    covered = coverage(inventory, expected) if inventory is not None else None
    # Each text was matched against the inventory once, by `coverage`; its entry is read back.
    entry_of: dict[int, InventoryMessage] = {}
    if inventory is not None and covered is not None:
        by_id = {entry.id: entry for entry in inventory.messages}
        entry_of = {id(text): by_id[entry_id] for entry_id, texts in covered.covered.items()
                    for text in texts}
    groups: dict[str, MessageGroup] = {}
    for text in expected:
        if not _WORD.search(text.message):
            continue  # a value carried by an exception (StopIteration's), not a message
        entry = entry_of.get(id(text))
        if entry is None and _chosen_by_the_case(text):
            continue  # the case's own words (disable_saved_tensors_hooks("...")), not PyTorch's
        if entry is not None:
            key = f"message-{entry.id}"
            group = groups.setdefault(key, MessageGroup(key, entry.kind, entry.type,
                                                        shown(entry.text), entry))
        else:
            key = _anchor(text.kind, text.message)
            group = groups.setdefault(key, MessageGroup(key, text.kind, text.type,
                                                        " ".join(text.message.split())))
        group.texts.append(text)
    ordered = sorted(groups.values(),
                     key=lambda g: (g.kind != "error", _LEADING.sub("", g.text.lower())))
    _distinct_titles(ordered)
    return MessageIndex(ordered, inventory, covered)


def _distinct_titles(groups: Sequence[MessageGroup]) -> None:
    """Messages whose cut titles are the same (the three version-counter errors) get titles
    that show where each differs: its start, then the words around the first difference."""
    by_title: dict[str, list[MessageGroup]] = defaultdict(list)
    for group in groups:
        by_title[group.title].append(group)
    for same in by_title.values():
        if len(same) < 2:
            continue
        for group in same:
            text = " ".join(group.text.split())
            # Where it parts from each of the others: the words there, in order.
            points = sorted({_common_prefix(text, " ".join(o.text.split()))
                             for o in same if o is not group})
            parts = [text[:48].rsplit(" ", 1)[0]]
            for differs in points:
                start = text.rfind(" ", 0, max(differs - 12, 0)) + 1
                part = text[start:start + 40]
                parts.append(part.rsplit(" ", 1)[0] if start + 40 < len(text) else part)
            group.distinct = " … ".join(parts) + " …"


def _common_prefix(a: str, b: str) -> int:
    n = 0
    while n < min(len(a), len(b)) and a[n] == b[n]:
        n += 1
    return n


def _chosen_by_the_case(text: ExpectedText) -> bool:
    """Whether the message is a string the case's own code spells out (a message a program
    hands to PyTorch to raise, or raises itself), not one of PyTorch's."""
    literals = (repr(text.message), '"' + text.message.replace('"', '\\"') + '"')
    return any(literal in step.run for step in text.case.steps for literal in literals)


def _anchor(kind: str, message: str) -> str:
    words = re.findall(r"[a-z0-9]+", message.lower())[:6]
    digest = hashlib.sha1(f"{kind}\n{' '.join(message.split())}".encode()).hexdigest()[:6]
    return "message-" + "-".join(words or ["text"]) + "-" + digest


def messages_page(index: MessageIndex, oracle: str, short_oracle: str) -> str:
    errors = [g for g in index.groups if g.kind == "error"]
    warnings = [g for g in index.groups if g.kind == "warning"]
    cases = {t.case.id for g in index.groups for t in g.texts}
    out = [
        rst.heading("Error and warning messages", "="),
        "Paste the message on your screen into the search box, or find it below. Each "
        f"message is shown with {oracle}'s exact text (``…`` stands for a value that changes: "
        "a number, a name, a shape), "
        + ("the older wordings still met, " if any(g.older for g in index.groups) else "")
        + "**why it happens** (each cause is a case: a short program that shows it) and "
        "**what to do**.",
        "",
        f"{len(errors)} errors and {len(warnings)} warnings, expected by {len(cases)} cases.",
        "",
    ]
    if index.inventory is not None and index.coverage is not None:
        done, total = index.coverage.in_scope(index.inventory)
        out += [f"Of the {total} messages in PyTorch's autograd sources that a user of this "
                f"API can meet, {done} are shown by a case; :ref:`the inventory "
                f"<message-inventory>` lists them all.", ""]
    for title, groups in (("Errors", errors), ("Warnings", warnings)):
        if groups:
            out.append(rst.heading(title, "-"))
            out += [group_section(group, short_oracle) for group in groups]
    if index.inventory is not None and index.coverage is not None:
        out.append(inventory_section(index.inventory, index.coverage))
    return "\n".join(out)


def group_section(group: MessageGroup, short_oracle: str) -> str:
    body = [rst.literal(group.text)]
    facts = f"{'Raised' if group.kind == 'error' else 'Emitted'} as {rst.code(group.type)}"
    if group.entry is not None and group.entry.origin:
        facts += f", from PyTorch's {rst.code(group.entry.origin)}"
    body.append(facts + ".\n")
    if group.entry is not None:
        body.append(f"As the cases meet it in {rst.text(short_oracle)}:\n")
        body.append(".. rst-class:: exact-messages\n")
        body += [f"- {rst.quoted(text)}" for text in group.exact_texts]
        body.append("")
    for versions, older in group.older:
        body.append(f"PyTorch {rst.text(versions)} words it: {rst.quoted(older)}\n")
    body.append(".. rubric:: Why it happens\n")
    for case in group.cases:
        body.append(f"- {rst.text(case.rule)} (:spec:case:`{case.id}`)")
    body.append("")
    fixes = [case for case in group.cases if case.fix is not None]
    if fixes:
        body.append(".. rubric:: What to do\n")
        for case in fixes:
            assert case.fix is not None
            line = f"- {rst.text(case.fix.text)}"
            if case.fix.cases:
                line += " Shown in " + ", ".join(f":spec:case:`{c}`" for c in case.fix.cases) + "."
            body.append(line + f" (for :spec:case:`{case.id}`)")
        body.append("")
    return (f".. spec:message:: {group.anchor}\n   :title: {_title_option(group.title)}\n\n"
            + rst.indent("\n".join(body)) + "\n")


def _title_option(title: str) -> str:
    """An option value is one line; control characters have no business in a title."""
    return " ".join(re.sub(r"[\x00-\x1f\x7f]", " ", title).split())


def inventory_section(inventory: Inventory, covered: Coverage) -> str:
    done, total = covered.in_scope(inventory)
    out = [".. _message-inventory:\n", rst.heading("Inventory of PyTorch's autograd messages",
                                                   "-")]
    percent = f" ({100 * done / total:.0f}%)" if total else ""
    out.append(
        f"The errors and warnings of PyTorch {rst.text(inventory.torch)}'s autograd sources "
        f"(``torch/csrc/autograd/`` and ``torch/autograd/``), from "
        f"{rst.code('spec/messages.yaml')}, whose header says how they were read (sources: "
        f"{rst.text(inventory.source_commit)}); each text was checked against the wheel built "
        f"from {rst.code(inventory.git_version[:12])}. {len(inventory.messages)} messages; "
        f"{total} a user of the API this spec covers can meet, of which **{done}{percent} are "
        f"shown by a case**; the others are out of scope for the reason given.\n")
    by_origin: dict[str, list[InventoryMessage]] = defaultdict(list)
    for entry in inventory.messages:
        by_origin[entry.origin].append(entry)
    rows = []
    for origin, entries in sorted(by_origin.items()):
        inside = [e for e in entries if e.scope == "in"]
        rows.append([rst.code(origin), str(len(entries)), str(len(inside)),
                     str(sum(1 for e in inside if covered.covered.get(e.id)))])
    out.append(rst.table(["source file", "messages", "in scope", "shown by a case"], rows,
                         [55, 15, 15, 15]))
    missing = [e for e in inventory.messages if e.scope == "in" and not covered.covered.get(e.id)]
    out.append(rst.heading("In scope, no case yet", "~"))
    if missing:
        out += [f"- {rst.quoted(shown(e.text))} ({rst.code(e.origin)})" for e in missing]
        out.append("")
    else:
        out.append("None.\n")
    out.append(rst.heading("Out of scope", "~"))
    outside = [e for e in inventory.messages if e.scope == "out"]
    out += [f"- {rst.quoted(shown(e.text))} ({rst.code(e.origin)}): {rst.text(e.reason)}"
            for e in outside]
    out.append("")
    return "\n".join(out)
