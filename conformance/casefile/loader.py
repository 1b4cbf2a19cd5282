"""Load and check case files; every problem is reported as `file:line: message`.

`load(paths)` reads every file first and runs nothing: YAML errors, the JSON Schema
(`spec/case.schema.json` when present), the case structure, duplicate ids (across all files),
ids that do not start with the file's stem, unregistered features, quotes missing from the cited
document (`spec/sources.yaml`; with `texts_dir`, also that each quote is in the document's
text), and the `ast` check of every snippet and expectation against `spec/api.yaml`. It also
refuses case text too long or too deeply nested to parse safely, `raises` and `warns` that
name a base class (`Exception`, `Warning`) and `{np: ...}` expectations that are the observed
value itself.

    >>> result = load([Path("spec/cases")])            # doctest: +SKIP
    >>> for problem in result.problems: print(problem)  # doctest: +SKIP
    spec/cases/leaf.yaml:12: case leaf.x step 0: unknown name 'z': ...
"""

from __future__ import annotations

import ast
import bisect
import dataclasses
import json
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any

from conformance.casefile.case import (
    ID_PATTERN,
    Case,
    CaseFormatError,
    cites_missing_case,
    line_of,
)
from conformance.casefile.features import undeclared
from conformance.casefile.files import (
    DEFAULT_SPEC_DIR,
    read_yaml,
)
from conformance.casefile.sandbox import check_np, np_expressions
from conformance.casefile.sources import SourceDocument, collapse, load_sources, read_texts
from conformance.casefile.vocabulary import (
    TOO_COMPLEX,
    Api,
    ApiFormatError,
    CaseCheck,
    TooComplex,
    parse,
)

# Classes a step may not name in `raises` or `warns`: bases that PyTorch never raises or emits
# as such, which an expected type matches along with every class below them (an engine's own
# error derived from Exception would meet `raises: {type: Exception}`). Python's abstract
# bases of errors are refused; OSError is not: Python raises it as such (a failed system call).
ABSTRACT_ERRORS = frozenset({"BaseException", "Exception", "ArithmeticError", "LookupError",
                             "BufferError", "Warning"})
ABSTRACT_WARNINGS = frozenset({"BaseException", "Exception", "Warning"})

# A problem's message quotes case text; it is cut to this length.
MAX_MESSAGE = 300


@dataclass(frozen=True, order=True)
class Problem:
    file: str
    line: int
    message: str

    def __post_init__(self) -> None:
        # A message may quote what the file holds; a hostile file must not make it huge.
        if len(self.message) > MAX_MESSAGE:
            object.__setattr__(self, "message", self.message[:MAX_MESSAGE - 15] + " ... (cut)")

    def __str__(self) -> str:
        return f"{self.file}:{self.line}: {self.message}"


@dataclass
class LoadResult:
    cases: list[Case] = field(default_factory=list)
    problems: list[Problem] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.problems


@dataclass
class SpecResources:
    """What cases are checked against: the schema, the features, the API, the source documents.

    `texts_dir`, when given, is a folder with the documents' texts (`lint --sources DIR`), and
    `docstrings` reads PyTorch's installed docstrings (`lint --docstrings`): every quote of such
    a document is then also checked against its words.
    """

    spec_dir: Path
    texts_dir: Path | None = None
    docstrings: bool = False
    features: frozenset[str] | None = None
    api: Api | None = None
    schema: Any = None
    sources: dict[str, SourceDocument] | None = None
    texts: dict[str, str] = field(default_factory=dict)
    problems: list[Problem] = field(default_factory=list)

    @classmethod
    def load(cls, spec_dir: Path | None = None, texts_dir: Path | None = None,
             docstrings: bool = False) -> SpecResources:
        spec_dir = Path(spec_dir) if spec_dir is not None else DEFAULT_SPEC_DIR
        resources = cls(spec_dir, Path(texts_dir) if texts_dir is not None else None,
                        docstrings)
        resources._load_features(spec_dir / "features.yaml")
        resources._load_api(spec_dir / "api.yaml")
        resources._load_schema(spec_dir / "case.schema.json")
        resources._load_sources(spec_dir / "sources.yaml")
        return resources

    def _load_features(self, path: Path) -> None:
        if not path.exists():
            self.problems.append(Problem(str(path), 1, "feature registry not found"))
            return
        data, problems = read_yaml(path)
        self.problems += [Problem(str(path), line, msg) for line, msg in problems]
        if data is None:
            data = {}
        if not isinstance(data, Mapping):
            self.problems.append(Problem(str(path), 1, "must be a mapping of name: description"))
            return
        self.features = frozenset(str(name) for name in data)

    def _load_api(self, path: Path) -> None:
        if not path.exists():
            self.problems.append(Problem(str(path), 1, "API vocabulary not found"))
            return
        data, problems = read_yaml(path)
        self.problems += [Problem(str(path), line, msg) for line, msg in problems]
        try:
            self.api = Api.from_mapping(data)
        except ApiFormatError as exc:
            self.problems.append(Problem(str(path), line_of(data) or 1, str(exc)))

    def _load_schema(self, path: Path) -> None:
        if not path.exists():
            return  # The schema serves editors; the loader's own structure check still runs.
        try:
            import jsonschema

            schema = json.loads(path.read_text(encoding="utf-8"))
            jsonschema.Draft202012Validator.check_schema(schema)
            self.schema = jsonschema.Draft202012Validator(schema)
        except (OSError, ValueError, jsonschema.SchemaError) as exc:
            self.problems.append(Problem(str(path), 1, f"unusable JSON Schema: {exc}"))

    def _load_sources(self, path: Path) -> None:
        if not path.exists():
            self.problems.append(Problem(str(path), 1, "source document registry not found"))
            return
        self.sources, problems = load_sources(path)
        self.problems += [Problem(str(path), line, msg) for line, msg in problems]
        if self.texts_dir is None and not self.docstrings:
            return
        self.texts, missing = read_texts(self.sources, self.texts_dir, self.docstrings)
        self.problems += [Problem(str(path), 1, f"--sources: {msg}") for msg in missing]
        for doc in self.sources.values():
            for passage in doc.pytorch_docs:
                if doc.id in self.texts and collapse(passage.quote) not in self.texts[doc.id]:
                    self.problems.append(Problem(str(path), 1, f"{doc.id}: pytorch_docs quote "
                                                 f"not in {doc.file}: {passage.quote[:60]!r}"))


def case_files(paths: Iterable[Path]) -> tuple[list[Path], list[Problem]]:
    """The case files named by `paths` (files, or folders of `*.yaml`), and what is wrong."""
    files: list[Path] = []
    problems: list[Problem] = []
    for path in map(Path, paths):
        if path.is_dir():
            found = sorted(p for p in path.glob("*.yaml") if p.is_file())
            problems += [Problem(str(p), 1, "case files end in .yaml: rename it, or it is not "
                                            "read") for p in sorted(path.glob("*.yml"))]
            if not found:
                problems.append(Problem(str(path), 1, "no case files (*.yaml) in this folder"))
            files += found
        elif not path.exists():
            problems.append(Problem(str(path), 1, "no such file or directory"))
        elif path.suffix != ".yaml":
            problems.append(Problem(str(path), 1, "case files end in .yaml"))
        else:
            files.append(path)
    return files, problems


def load(paths: Iterable[Path], resources: SpecResources | None = None) -> LoadResult:
    """Load every case file under `paths` (files or directories) and check all of it."""
    resources = resources or SpecResources.load()
    files, problems = case_files(paths)
    result = LoadResult(problems=list(resources.problems) + problems)
    seen: dict[str, str] = {}
    for path in files:
        cases, problems = load_file(path, resources, seen)
        result.cases += cases
        result.problems += problems
    result.problems += _reference_problems(result.cases, {path.stem for path in files})
    return result


def _reference_problems(cases: list[Case], topics: set[str]) -> list[Problem]:
    """`see_also` and `fix.cases` must name cases that exist. A reference into a topic whose
    file was not loaded (a run of one file) cannot be checked and is left alone; `lint` of the
    whole spec checks them all."""
    known = {case.id for case in cases}
    problems = []
    for case in cases:
        refs = [("see_also", ref, line_of(case.raw, "see_also")) for ref in case.see_also]
        if case.fix is not None:
            refs += [("fix", ref, case.fix.line) for ref in case.fix.cases]
        for key, ref, line in refs:
            if cites_missing_case(ref, known, topics):
                problems.append(Problem(case.file or "?", line or case.line or 1,
                                        f"case {case.id}: {key} names {ref!r}, which is not a "
                                        f"case (check the id in {ref.split('.', 1)[0]}.yaml)"))
    return problems


def load_file(path: Path, resources: SpecResources, seen: dict[str, str] | None = None
              ) -> tuple[list[Case], list[Problem]]:
    """Load one case file. `seen` maps ids to `file:line` across files, for duplicates."""
    seen = {} if seen is None else seen
    name = str(path)
    data, yaml_problems = read_yaml(path)
    case_at = _case_at(data)
    problems = [Problem(name, line, case_at(line) + message) for line, message in yaml_problems]
    if data is None and not problems:
        problems.append(Problem(name, 1, "empty file: a case file is a YAML list of cases"))
    if data is None:
        return [], problems
    if not isinstance(data, list):
        kind = "a mapping" if isinstance(data, Mapping) else type(data).__name__
        problems.append(Problem(name, line_of(data) or 1,
                                f"the top level must be a list of cases, not {kind}"))
        return [], problems
    schema_lines = _schema_problems(data, resources, name, problems)
    cases = []
    for index, item in enumerate(data):
        line = line_of(item) or line_of(data) or 1
        if index in schema_lines:
            continue  # The schema already said what is wrong with this entry.
        try:
            case = Case.from_dict(item, file=name)
        except CaseFormatError as exc:
            problems += [Problem(name, at or line, msg) for at, msg in exc.problems]
            continue
        try:
            problems += _check_case(case, path.stem, resources, seen, name)
        except (RecursionError, MemoryError):
            # `Case.from_dict` bounds what the checks parse and walk; should a form of text
            # still slip past those bounds, it is this case's problem, not a crash of lint.
            problems.append(Problem(name, line, f"case {case.id}: {TOO_COMPLEX}"))
            continue
        if resources.api is not None:
            case = dataclasses.replace(case, builtins=resources.api.globals)
        cases.append(case)
    problems.sort()
    return cases, problems


def _case_at(data: Any) -> Callable[[int], str]:
    """For a file's list of cases: `case ID: ` for a line inside a case that has a valid id,
    `''` for any other line (found by bisection: a file may have many problems)."""
    starts = getattr(data, "item_lines", [])

    def prefix(line: int) -> str:
        index = bisect.bisect_right(starts, line) - 1
        item = data[index] if index >= 0 else None
        case_id = item.get("id") if isinstance(item, Mapping) else None
        return f"case {case_id}: " if isinstance(case_id, str) \
            and ID_PATTERN.fullmatch(case_id) else ""

    return prefix


def _schema_problems(data: list[Any], resources: SpecResources, name: str,
                     problems: list[Problem]) -> set[int]:
    if resources.schema is None:
        return set()
    bad: set[int] = set()
    for error in resources.schema.iter_errors(data):
        path = list(error.absolute_path)
        node: Any = data
        line = line_of(data) or 1
        for key in path:
            line = line_of(node, key) if isinstance(node, Mapping) else line_of(node) or line
            try:
                node = node[key]
            except (KeyError, IndexError, TypeError):
                break
            line = line_of(node) or line
        if path and isinstance(path[0], int):
            bad.add(path[0])
        where = "/".join(str(p) for p in path) or "top level"
        problems.append(Problem(name, line or 1, f"schema: {where}: {error.message}"))
    return bad


def _check_case(case: Case, stem: str, resources: SpecResources, seen: dict[str, str],
                name: str) -> list[Problem]:
    problems: list[Problem] = []
    line = case.line or 1

    def add(at: int | None, message: str) -> None:
        problems.append(Problem(name, at or line, f"case {case.id}: {message}"))

    if case.id in seen:
        add(line_of(case.raw, "id"), f"duplicate id (first defined at {seen[case.id]})")
    else:
        seen[case.id] = f"{name}:{line}"
    if case.topic != stem:
        add(line_of(case.raw, "id"), f"id must start with '{stem}.' (the file's stem)")
    if resources.features is not None:
        for feature in case.features:
            if feature not in resources.features:
                add(line_of(case.raw, "features"),
                    f"unknown feature '{feature}' (register it in spec/features.yaml)")
        for use in undeclared(case, resources.features):
            add(use.line, f"step {use.step}: {use.what!r} uses feature '{use.feature}': "
                f"add it to features:")
    for source in (*case.sources, *case.errata):
        if resources.sources is not None and source.doc not in resources.sources:
            add(source.line, f"unknown source document '{source.doc}' (the ids are in "
                f"{resources.spec_dir / 'sources.yaml'}: {', '.join(sorted(resources.sources))})")
        elif source.doc in resources.texts and collapse(source.quote) not in \
                resources.texts[source.doc]:
            add(source.line, f"quote not found in {source.doc}: {source.quote[:60]!r}")
    for index, step in enumerate(case.steps):
        for at, message in _abstract_types(step, _raw_step(case, index)):
            add(at or step.line, f"step {index}: {message}")
    for at, message in _self_comparisons(case):
        add(at, message)
    if resources.api is not None:
        check = CaseCheck(resources.api)
        for index, step in enumerate(case.steps):
            check.snippet(step.run, f"step {index}", step.run_line or step.line or line,
                          may_stop=step.raises is not None)
            for (key, _), key_line in zip(step.expect, step.expect_lines, strict=True):
                check.expression(key, f"step {index}: expect {key!r}", key_line or step.line
                                 or line)
            for key, expected in step.expect:
                for holder, source in np_expressions(expected):
                    for message in check_np(source, check.defined):
                        add(line_of(holder, "np"), f"step {index}: expect {key!r}: {message}")
        for problem in check.finish():
            add(problem.line, problem.message)
    return problems


def _raw_step(case: Case, index: int) -> Mapping[str, Any]:
    """The step as the file holds it (for its lines); empty for a case made in memory."""
    steps = case.raw.get("steps") if isinstance(case.raw, Mapping) else None
    if isinstance(steps, list) and index < len(steps) and isinstance(steps[index], Mapping):
        return steps[index]
    return {}


def _abstract_types(step: Any, raw: Mapping[str, Any]) -> list[tuple[int | None, str]]:
    """`raises` and `warns` entries naming a base class that would match far more than the
    one class PyTorch raises or emits."""
    found: list[tuple[int | None, str]] = []
    if step.raises is not None and step.raises.type in ABSTRACT_ERRORS:
        found.append((line_of(raw.get("raises"), "type"),
                      f"raises type '{step.raises.type}' is a base class that matches errors "
                      "of many kinds: name the class PyTorch 2.13 raises (RuntimeError, "
                      "TypeError, IndexError, ...)"))
    raw_warns = raw.get("warns")
    for position, warn in enumerate(step.warns):
        if warn.type in ABSTRACT_WARNINGS:
            entry = raw_warns[position] if isinstance(raw_warns, list) \
                and position < len(raw_warns) else None
            found.append((line_of(entry, "type"),
                          f"warns type '{warn.type}' is a base class that matches every "
                          "warning: name the category PyTorch 2.13 emits (UserWarning, "
                          "FutureWarning, ...)"))
    return found


def _self_comparisons(case: Case) -> list[tuple[int | None, str]]:
    """Expectations whose `{np: ...}` value is the observed value itself (`x: {np: "x"}`, or
    through a plain alias `y = x`): the NumPy side reads the same tensor after the step, so
    every engine passes, whatever it did to the tensor."""
    found: list[tuple[int | None, str]] = []
    aliases = _Aliases()
    for index, step in enumerate(case.steps):
        _follow_aliases(step.run, aliases)
        for (key, expected), key_line in zip(step.expect, step.expect_lines, strict=True):
            if not isinstance(expected, Mapping) or not isinstance(expected.get("np"), str):
                continue
            observed = _observed_form(key, "key", aliases.of)
            if observed is not None and observed == _observed_form(expected["np"], "np",
                                                                   aliases.of):
                found.append((line_of(expected, "np") or key_line or step.line,
                              f"step {index}: expect {key!r}: {{np: {expected['np']!r}}} is "
                              "the observed value itself, so every engine passes: state the "
                              "expected values (literals, or an np expression over the inputs "
                              "or over a copy saved before the step)"))
    return found


def _follow_aliases(source: str, aliases: _Aliases) -> None:
    """Update `aliases` with a snippet's top-level statements: `y = x` makes y an alias of x;
    any other binding of a name ends its aliases."""
    try:
        tree = parse(source, "exec")
    except (SyntaxError, TooComplex):
        return
    for stmt in getattr(tree, "body", []):
        if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 \
                and isinstance(stmt.targets[0], ast.Name) and isinstance(stmt.value, ast.Name):
            aliases.bind(stmt.targets[0].id, stmt.value.id)
            continue
        for node in ast.walk(stmt):
            if isinstance(node, ast.Name) and isinstance(node.ctx, (ast.Store, ast.Del)):
                aliases.unbind(node.id)


@dataclass
class _Aliases:
    """Which name's object each alias holds (`of`), and the aliases of each name (`holders`),
    so that rebinding a name ends its aliases at the cost of those, not of every alias."""

    of: dict[str, str] = field(default_factory=dict)
    holders: dict[str, set[str]] = field(default_factory=dict)

    def bind(self, name: str, source: str) -> None:
        """`name = source`."""
        resolved = self.of.get(source, source)
        self.unbind(name)
        if resolved != name:
            self.of[name] = resolved
            self.holders.setdefault(resolved, set()).add(name)

    def unbind(self, name: str) -> None:
        held = self.of.pop(name, None)
        if held is not None:
            self.holders[held].discard(name)
        for alias in self.holders.pop(name, ()):
            del self.of[alias]


# Wrappers that leave the values as they are: `value(t)`, `t.detach()`, `t.clone()`, `t.data`
# in a key; a plain conversion to an array in an np expression.
_KEY_WRAPPERS = frozenset({"detach", "clone"})
_NP_WRAPPERS = frozenset({"array", "asarray"})


def _observed_form(source: str, kind: str, aliases: Mapping[str, str]) -> str | None:
    """The expression with value-preserving wrappers and aliases removed, as `ast.dump` text."""
    try:
        tree = parse(source, "eval")
    except (SyntaxError, TooComplex):
        return None
    node = tree.body  # type: ignore[attr-defined]
    inner = _unwrap(node, kind)
    while inner is not None:
        node, inner = inner, _unwrap(inner, kind)
    return ast.dump(_Rename(aliases).visit(node))


def _unwrap(node: ast.expr, kind: str) -> ast.expr | None:
    """What a value-preserving wrapper wraps (None when `node` is not one)."""
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.UAdd):
        return node.operand
    if kind == "key" and isinstance(node, ast.Attribute) and node.attr == "data":
        return node.value
    if not isinstance(node, ast.Call) or node.keywords:
        return None
    func = node.func
    if kind == "key" and isinstance(func, ast.Name) and func.id == "value" \
            and len(node.args) == 1:
        return node.args[0]
    if kind == "key" and isinstance(func, ast.Attribute) and func.attr in _KEY_WRAPPERS \
            and not node.args:
        return func.value
    if kind == "np" and isinstance(func, ast.Attribute) and func.attr in _NP_WRAPPERS \
            and isinstance(func.value, ast.Name) and func.value.id == "np" \
            and len(node.args) == 1:
        return node.args[0]
    return None


class _Rename(ast.NodeTransformer):
    def __init__(self, aliases: Mapping[str, str]) -> None:
        self.aliases = aliases

    def visit_Name(self, node: ast.Name) -> ast.Name:
        return ast.Name(id=self.aliases.get(node.id, node.id), ctx=ast.Load())


@lru_cache(maxsize=1)
def default_builtins() -> frozenset[str]:
    """The names of the default vocabulary's `globals` (what a case built in memory, with no
    spec of its own, may use as builtins)."""
    api = SpecResources.load().api
    return api.globals if api is not None else frozenset()
