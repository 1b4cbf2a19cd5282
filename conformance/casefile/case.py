"""The case model: what a case file entry means once it has been read.

Cases are built from plain dicts, so the loader (YAML files) and the fuzzer (cases made in
memory) share one constructor::

    >>> case = Case.from_dict({
    ...     "id": "leaf.sum",
    ...     "rule": "A sum of a leaf that requires grad is not a leaf.",
    ...     "steps": [{"run": "x = torch.ones(2, requires_grad=True)\\ny = x.sum()",
    ...                "expect": {"y.is_leaf": False}}],
    ... })
    >>> case.topic, len(case.steps)
    ('leaf', 1)

`Case.from_dict` raises `CaseFormatError` (with every problem found, each with the line when
the dict came from the loader) for a dict that is not a valid case, and for case text that is
too long or too deeply nested to parse safely (`conformance.casefile.vocabulary.parse`): a
case built in memory is held to the same bounds as one read from a file, so nothing that runs it
meets text that overflows the stack.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from packaging.specifiers import InvalidSpecifier, SpecifierSet

from conformance.casefile.vocabulary import TooComplex, parse

ID_PATTERN = re.compile(r"[a-z0-9_]+(\.[a-z0-9_-]+)+\Z")
"""A case id; `\\Z`, not `$`, which would also match before a newline that ends the id."""
STAGES = ("forward", "backward", "attribute")
CASE_KEYS = {"id", "rule", "sources", "errata", "features", "steps", "seed", "fix", "see_also"}
FIX_KEYS = {"text", "cases"}
STEP_KEYS = {"run", "expect", "raises", "warns"}
RAISES_KEYS = {"type", "stage", "message", "messages"}
# An expected value is data, walked by code that recurses (comparisons, the feature scan); a
# dict built in memory may nest without end, share one list many times over or contain itself.
MAX_VALUE_NESTING = 32
MAX_VALUE_ITEMS = 1_000_000


class CaseFormatError(ValueError):
    """A dict is not a valid case. `problems` holds `(line or None, message)` pairs."""

    def __init__(self, problems: list[tuple[int | None, str]]) -> None:
        self.problems = problems
        super().__init__("; ".join(message for _, message in problems))


@dataclass(frozen=True)
class Source:
    doc: str
    quote: str
    line: int | None = None


@dataclass(frozen=True)
class Erratum:
    doc: str
    quote: str
    correction: str
    line: int | None = None


@dataclass(frozen=True)
class Fix:
    """What a user who meets the case's error, warning or trap should do, and the cases that
    show it done (ids, possibly of other topics)."""

    text: str
    cases: tuple[str, ...] = ()
    line: int | None = None


@dataclass(frozen=True)
class MessageVariant:
    """An older wording of a message, for PyTorch versions matching `torch` (PEP 440)."""

    torch: str
    message: str


@dataclass(frozen=True)
class ExpectedMessage:
    """An error or warning a step expects: its class name and its text, per PyTorch version."""

    type: str
    message: str | None = None
    messages: tuple[MessageVariant, ...] = ()

    def message_for(self, torch_version: str) -> str | None:
        """The expected text for an engine held to `torch_version` (first matching range)."""
        for variant in self.messages:
            if SpecifierSet(variant.torch).contains(torch_version, prereleases=True):
                return variant.message
        return self.message


@dataclass(frozen=True)
class Raises(ExpectedMessage):
    stage: str | None = None


@dataclass(frozen=True)
class Warn(ExpectedMessage):
    pass


@dataclass(frozen=True)
class Step:
    run: str
    expect: tuple[tuple[str, Any], ...] = ()
    raises: Raises | None = None
    warns: tuple[Warn, ...] = ()
    line: int | None = None
    run_line: int | None = None
    """File line of the first line of `run`'s text (None for cases made in memory)."""
    expect_lines: tuple[int | None, ...] = ()


@dataclass(frozen=True)
class Case:
    id: str
    rule: str
    steps: tuple[Step, ...]
    sources: tuple[Source, ...] = ()
    errata: tuple[Erratum, ...] = ()
    features: tuple[str, ...] = ()
    seed: int = 0
    fix: Fix | None = None
    see_also: tuple[str, ...] = ()
    """Ids of related cases; the reference links them both ways."""
    file: str | None = None
    line: int | None = None
    raw: Mapping[str, Any] = field(default_factory=dict, compare=False, repr=False)
    builtins: frozenset[str] | None = field(default=None, compare=False, repr=False)
    """The builtin names the case may use (its api.yaml's `globals`); None for the default
    spec's. The loader sets it, so a case runs with the names it was checked against."""

    @property
    def topic(self) -> str:
        return self.id.split(".", 1)[0]

    @classmethod
    def from_dict(cls, data: Any, file: str | None = None) -> Case:
        """Build a case from a plain dict (or a loader mapping that carries line numbers)."""
        parser = _Parser()
        case = parser.case(data, file)
        if parser.problems or case is None:
            raise CaseFormatError(parser.problems or [(None, "not a case")])
        return case


def cites_missing_case(case_id: str, known: set[str], topics: set[str]) -> bool:
    """Whether a cited case id names no loaded case where it should: a case of a topic whose
    file was not loaded (a run of one file) cannot be checked and is left alone."""
    return case_id not in known and case_id.split(".", 1)[0] in topics


def line_of(node: Any, key: Any = None) -> int | None:
    """The file line of a loaded mapping (or of one of its keys), None for plain dicts."""
    if key is not None:
        lines = getattr(node, "key_lines", None)
        if lines and key in lines:
            return lines[key]
    return getattr(node, "line", None)


def line_or_first(node: Any, key: Any = None) -> int:
    """`line_of`, or line 1 for data without lines: a problem always names a line."""
    return line_of(node, key) or 1


def value_line(node: Any, key: Any) -> int | None:
    """The file line where the text of `node[key]` starts (after `|` for block scalars)."""
    lines = getattr(node, "text_lines", None)
    if lines and key in lines:
        return lines[key]
    return line_of(node, key)


class _Parser:
    """Checks structure while building; collects problems instead of stopping at the first."""

    def __init__(self) -> None:
        self.problems: list[tuple[int | None, str]] = []

    def problem(self, line: int | None, message: str) -> None:
        self.problems.append((line, message))

    def text(self, node: Mapping[str, Any], key: str, where: str, required: bool = True) -> Any:
        if key not in node:
            if required:
                self.problem(line_of(node), f"{where}: missing key '{key}'")
            return None
        value = node[key]
        if not isinstance(value, str) or not value.strip():
            self.problem(line_of(node, key), f"{where}: '{key}' must be a non-empty string")
            return None
        return value

    def unknown_keys(self, node: Mapping[str, Any], allowed: set[str], where: str) -> None:
        for key in node:
            if key not in allowed:
                self.problem(
                    line_of(node, key),
                    f"{where}: unknown key '{key}' (allowed: {', '.join(sorted(allowed))})",
                )

    def case(self, data: Any, file: str | None) -> Case | None:
        if not isinstance(data, Mapping):
            self.problem(line_of(data), f"a case must be a mapping, not {_kind(data)}")
            return None
        case_id = self.text(data, "id", "case")
        where = f"case {case_id}" if case_id else "case"
        if case_id is not None and not ID_PATTERN.fullmatch(case_id):
            self.problem(
                line_of(data, "id"),
                f"{where}: id must match {ID_PATTERN.pattern} (topic.name, lower case)",
            )
        self.unknown_keys(data, CASE_KEYS, where)
        rule = self.text(data, "rule", where)
        sources = tuple(self.sources(data, where))
        errata = tuple(self.errata(data, where))
        features = self.features(data, where)
        seed = data.get("seed", 0)
        if not isinstance(seed, int) or isinstance(seed, bool) or seed < 0:
            self.problem(line_of(data, "seed"), f"{where}: seed must be a non-negative integer")
            seed = 0
        fix = self.fix(data, where)
        see_also = self.case_ids(data, "see_also", where)
        steps = self.steps(data, where)
        if case_id is None or rule is None or steps is None:
            return None
        if case_id in see_also:
            self.problem(line_of(data, "see_also"), f"{where}: see_also names the case itself")
        return Case(
            id=case_id, rule=rule, steps=steps, sources=sources, errata=errata,
            features=features, seed=seed, fix=fix, see_also=see_also, file=file,
            line=line_of(data), raw=data,
        )

    def case_ids(self, node: Mapping[str, Any], key: str, where: str) -> tuple[str, ...]:
        ids = node.get(key, [])
        if not isinstance(ids, list) or not all(isinstance(i, str) for i in ids):
            self.problem(line_of(node, key), f"{where}: '{key}' must be a list of case ids")
            return ()
        for bad in [i for i in ids if not ID_PATTERN.fullmatch(i)]:
            self.problem(line_of(node, key), f"{where}: '{key}': {bad!r} is not a case id "
                         f"(topic.name, lower case)")
        if len(set(ids)) != len(ids):
            self.problem(line_of(node, key), f"{where}: '{key}' lists a case twice")
        return tuple(i for i in ids if ID_PATTERN.fullmatch(i))

    def fix(self, data: Mapping[str, Any], where: str) -> Fix | None:
        if "fix" not in data:
            return None
        node = data["fix"]
        if not isinstance(node, Mapping):
            self.problem(line_of(data, "fix"), f"{where}: 'fix' must be a mapping with 'text' "
                         "(what to do) and optionally 'cases' (ids of cases that show it)")
            return None
        self.unknown_keys(node, FIX_KEYS, f"{where} fix")
        text = self.text(node, "text", f"{where} fix")
        cases = self.case_ids(node, "cases", f"{where} fix")
        return Fix(text, cases, line_of(data, "fix")) if text else None

    def mappings(self, data: Mapping[str, Any], key: str, where: str) -> list[Any]:
        items = data.get(key, [])
        if not isinstance(items, list):
            self.problem(line_of(data, key), f"{where}: '{key}' must be a list")
            return []
        good = []
        for item in items:
            if isinstance(item, Mapping):
                good.append(item)
            else:
                self.problem(
                    line_of(items) or line_of(data, key),
                    f"{where}: each entry of '{key}' must be a mapping, not {_kind(item)}",
                )
        return good

    def sources(self, data: Mapping[str, Any], where: str) -> list[Source]:
        out = []
        for item in self.mappings(data, "sources", where):
            self.unknown_keys(item, {"doc", "quote"}, f"{where} source")
            doc = self.text(item, "doc", f"{where} source")
            quote = self.text(item, "quote", f"{where} source")
            if doc and quote:
                out.append(Source(doc, quote, line_of(item, "quote")))
        return out

    def errata(self, data: Mapping[str, Any], where: str) -> list[Erratum]:
        out = []
        for item in self.mappings(data, "errata", where):
            self.unknown_keys(item, {"doc", "quote", "correction"}, f"{where} erratum")
            doc = self.text(item, "doc", f"{where} erratum")
            quote = self.text(item, "quote", f"{where} erratum")
            correction = self.text(item, "correction", f"{where} erratum")
            if doc and quote and correction:
                out.append(Erratum(doc, quote, correction, line_of(item, "quote")))
        return out

    def features(self, data: Mapping[str, Any], where: str) -> tuple[str, ...]:
        features = data.get("features", [])
        if not isinstance(features, list) or not all(isinstance(f, str) for f in features):
            self.problem(line_of(data, "features"), f"{where}: 'features' must be a list of names")
            return ()
        return tuple(features)

    def steps(self, data: Mapping[str, Any], where: str) -> tuple[Step, ...] | None:
        if "steps" not in data:
            self.problem(line_of(data), f"{where}: missing key 'steps'")
            return None
        steps = data["steps"]
        if not isinstance(steps, list) or not steps:
            self.problem(line_of(data, "steps"), f"{where}: 'steps' must be a non-empty list")
            return None
        out = []
        for index, node in enumerate(steps):
            step = self.step(node, f"{where} step {index}", line_of(steps) or line_of(data))
            if step is not None:
                out.append(step)
        return tuple(out) if len(out) == len(steps) else None

    def step(self, node: Any, where: str, fallback: int | None) -> Step | None:
        if not isinstance(node, Mapping):
            self.problem(line_of(node) or fallback,
                         f"{where}: must be a mapping, not {_kind(node)}")
            return None
        self.unknown_keys(node, STEP_KEYS, where)
        run = self.text(node, "run", where)
        expect: list[tuple[str, Any]] = []
        expect_lines: list[int | None] = []
        if "expect" in node:
            mapping = node["expect"]
            if not isinstance(mapping, Mapping):
                self.problem(line_of(node, "expect"), f"{where}: 'expect' must be a mapping")
            else:
                for key, value in mapping.items():
                    if not isinstance(key, str):
                        self.problem(
                            line_of(mapping, key),
                            f"{where}: expect key {key!r} must be an expression string "
                            "(quote it in YAML)",
                        )
                        continue
                    expect.append((key, value))
                    expect_lines.append(line_of(mapping, key))
                    self.bounded_expectation(mapping, key, where)
        raises = self.raises(node, where) if "raises" in node else None
        warns = self.warns(node, where)
        if run is None:
            return None
        if not self.bounded(run, "exec", value_line(node, "run"), f"{where}: run"):
            return None
        return Step(
            run=run, expect=tuple(expect), raises=raises, warns=tuple(warns),
            line=line_of(node), run_line=value_line(node, "run"),
            expect_lines=tuple(expect_lines),
        )

    def bounded(self, source: str, mode: str, line: int | None, where: str) -> bool:
        """Whether `source` is within the bounds of `conformance.casefile.vocabulary.parse`.
        Syntax errors are left to the API check, which says what is wrong with the text."""
        try:
            parse(source, mode)
        except SyntaxError:
            return True
        except TooComplex as exc:
            self.problem(line, f"{where}: {exc}")
            return False
        return True

    def bounded_expectation(self, mapping: Mapping[str, Any], key: str, where: str) -> None:
        line = line_of(mapping, key)
        label = f"{where}: expect {_short(key)}"
        self.bounded(key, "eval", line, label)
        nps, problem = _walk_value(mapping[key])
        if problem is not None:
            self.problem(line, f"{label}: {problem}")
            return
        for holder, source in nps:
            if isinstance(source, str):
                self.bounded(source, "eval", line_of(holder, "np") or line, f"{label}: np")

    def raises(self, node: Mapping[str, Any], where: str) -> Raises | None:
        spec = node["raises"]
        where = f"{where} raises"
        if not isinstance(spec, Mapping):
            self.problem(line_of(node, "raises"), f"{where}: must be a mapping")
            return None
        self.unknown_keys(spec, RAISES_KEYS, where)
        kind = self.text(spec, "type", where)
        stage = spec.get("stage")
        if stage is not None and stage not in STAGES:
            self.problem(line_of(spec, "stage"), f"{where}: stage must be one of {STAGES}")
        message = self.text(spec, "message", where, required=False)
        variants = self.variants(spec, where)
        if kind is None:
            return None
        return Raises(type=kind, stage=stage, message=message, messages=variants)

    def variants(self, spec: Mapping[str, Any], where: str) -> tuple[MessageVariant, ...]:
        """Older wordings under `messages`, each with a PEP 440 range of PyTorch versions."""
        variants = []
        for item in self.mappings(spec, "messages", where):
            spec_text = self.text(item, "torch", f"{where} messages")
            text = self.text(item, "message", f"{where} messages")
            if spec_text is None or text is None:
                continue
            try:
                SpecifierSet(spec_text)
            except InvalidSpecifier:
                self.problem(
                    line_of(item, "torch"),
                    f"{where}: {spec_text!r} is not a PEP 440 version specifier (e.g. '<2.1')",
                )
                continue
            variants.append(MessageVariant(spec_text, text))
        return tuple(variants)

    def warns(self, node: Mapping[str, Any], where: str) -> list[Warn]:
        out = []
        for item in self.mappings(node, "warns", f"{where}"):
            self.unknown_keys(item, {"type", "message", "messages"}, f"{where} warns")
            kind = self.text(item, "type", f"{where} warns")
            message = self.text(item, "message", f"{where} warns", required=False)
            variants = self.variants(item, f"{where} warns")
            if kind:
                out.append(Warn(kind, message, variants))
        return out


def _kind(value: Any) -> str:
    return "null" if value is None else type(value).__name__


def _short(text: str) -> str:
    """A key as a message quotes it: whole when short, its start and length when not."""
    if len(text) <= 40:
        return repr(text)
    return f"{text[:30]!r}... ({len(text)} characters)"


def _walk_value(value: Any) -> tuple[list[tuple[Mapping[str, Any], Any]], str | None]:
    """The `{np: ...}` mappings inside an expected value, and why the value is refused (too
    deep, too many items, or containing itself), found without recursion."""
    nps: list[tuple[Mapping[str, Any], Any]] = []
    stack = [(value, 1)]
    items = 0
    while stack:
        item, depth = stack.pop()
        items += 1
        if depth > MAX_VALUE_NESTING or items > MAX_VALUE_ITEMS:
            return nps, (f"expected value too deeply nested or too large (at most "
                         f"{MAX_VALUE_NESTING} levels and {MAX_VALUE_ITEMS} items)")
        if isinstance(item, Mapping):
            if "np" in item:
                nps.append((item, item["np"]))
            stack.extend((child, depth + 1) for child in item.values())
        elif isinstance(item, (list, tuple)):
            stack.extend((child, depth + 1) for child in item)
    return nps, None
