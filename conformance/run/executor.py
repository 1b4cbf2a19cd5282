"""Judge one case on one engine from what its engine's process saw (`judge_seen`), and run it
in this process (`run_case`: observe, then judge).

    >>> from conformance.engines import load_engine
    >>> result = run_case({"id": "leaf.ones", "rule": "A new tensor is a leaf.",
    ...                    "steps": [{"run": "x = torch.ones(2)",
    ...                               "expect": {"x.is_leaf": True}}]},
    ...                   load_engine("torch"))            # doctest: +SKIP
    >>> result.verdict                                       # doctest: +SKIP
    'passed'

How a case runs is `conformance.run.observe`'s: a fresh namespace, grad mode enabled and its
own NumPy generator (`default_rng(seed)`) per case, steps run statement by statement, a watchdog
that turns a hang into an `error`. What it saw is compared here with what the case expects:
the statement that raised gives the error's stage, a refusal is checked by
`conformance.run.refusals`, values by `conformance.run.compare`.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field
from typing import Any, Protocol

from conformance.casefile.case import Case, Raises, Step, Warn
from conformance.engines.base import Engine
from conformance.run.compare import compare, describe
from conformance.run.observe import (
    CaseSeen,
    Classes,
    ExceptionSeen,
    ObservingRaised,
    Plan,
    StepSeen,
    WarningSeen,
    cut,
    observe_case,
)
from conformance.run.refusals import (
    class_problem,
    node_at,
    refusal_problem,
    same_head,
    stage,
    stage_of,
)

VERDICTS = ("passed", "failed", "error", "unsupported", "xfail", "stale")
LEVELS = ("full", "semantics")
"""`semantics` checks what every engine with PyTorch's autograd model must do (values, gradients,
shapes, dtypes, flags, which step raises or warns); `full` adds PyTorch's surface (node names,
graph text, exception class and stage, message and warning text, repr, object identity)."""
DEFAULT_TIMEOUT = 10.0
TRIGGERED = re.compile(r"\s*\(Triggered internally at .*\)\s*\Z", re.DOTALL)
# A Python stack in a warning's text (anomaly mode's "Traceback of forward call ..."): lines
# `  File "...", line N, in name`, each with its source line. Its frames depend on the engine
# (PyTorch's own Python frames, file paths), so it compares as TRACEBACK.
STACK = re.compile(r'(?:  File "[^\n]*", line \d+, in [^\n]*(?:\n    [^\n]*)?(?:\n|\Z))+')
TRACEBACK = "<traceback>"


@dataclass
class Check:
    """One failed check of a case: the step, what was observed, and its level."""

    step: int
    level: str
    """`semantics` or `surface` (see LEVELS), derived from the observation itself."""
    what: str
    """The observation (an `expect` key), `raises`, or `warns`."""
    message: str
    expected: str | None = None
    actual: str | None = None
    snippet: str | None = None


@dataclass
class CaseResult:
    """The outcome of one case on one engine (one row of every report).

    A case runs every step it can and records every failed check (`checks`); the headline
    fields (`step`, `message`, `expected`, `actual`) are those of the first semantic failure,
    or of the first failure when all are surface. `verdict` is at the `full` level;
    `verdict_at("semantics")` leaves the surface checks out."""

    case_id: str
    engine: str
    verdict: str
    topic: str = ""
    step: int | None = None
    snippet: str | None = None
    expected: str | None = None
    actual: str | None = None
    message: str = ""
    duration_s: float = 0.0
    seed: int = 0
    reason: str | None = None
    """The expectations file's reason for `xfail`, `stale` or a skip."""
    checks: list[Check] = field(default_factory=list)
    level: str = "full"
    """The level `ok` and the reports' headline verdict are read at."""

    def verdict_at(self, level: str) -> str:
        """The verdict at `level`: at `semantics`, a case whose every failed check is surface
        has passed (an expectations entry for it is still needed at `full`, so not stale)."""
        if level == "semantics" and self.verdict in ("failed", "xfail") and self.checks \
                and all(check.level == "surface" for check in self.checks):
            return "passed"
        return self.verdict

    @property
    def ok(self) -> bool:
        return self.verdict_at(self.level) not in ("failed", "error")

    def to_dict(self) -> dict[str, Any]:
        """The result as a report row: `verdict` at the run's level (what its summary counts),
        `verdicts` at every level."""
        return {**asdict(self), "verdict": self.verdict_at(self.level),
                "verdicts": {level: self.verdict_at(level) for level in LEVELS}}


def run_case(case: Case | Mapping[str, Any], engine: Engine, seed: int | None = None, *,
             timeout: float | None = DEFAULT_TIMEOUT) -> CaseResult:
    """Run `case` (a Case or a plain dict) on `engine` in this process: observe it
    (`conformance.run.observe`), then judge what was seen (`judge_seen`), as a worker and its
    runner do; `seed` overrides the case's seed. A case the engine cannot run (unavailable, a
    feature missing) is `unsupported`; expectations files are the judge's
    (`conformance.verdict.judge`)."""
    if not isinstance(case, Case):
        case = Case.from_dict(case)
    early = unrunnable(case, engine, seed)
    if early is not None:
        return early
    return judge_seen(case, observe_case(Plan.of(case, seed), engine, timeout), engine, seed)


def unrunnable(case: Case, engine: Any, seed: int | None = None,
               skip_reason: str | None = None) -> CaseResult | None:
    """The `unsupported` result of a case that is not run at all (engine unavailable, a
    feature missing, `skip_reason` given), or None. `engine` is an `Engine` or anything with
    its `name`, `available`, `unavailable_reason` and `supports` (an engine in workers)."""
    base = {"case_id": case.id, "engine": engine.name, "topic": case.topic,
            "seed": case.seed if seed is None else seed}
    if not engine.available:
        return CaseResult(verdict="unsupported", message=f"engine unavailable: "
                          f"{engine.unavailable_reason}", **base)
    missing = [feature for feature in case.features if not engine.supports(feature)]
    if missing:
        return CaseResult(verdict="unsupported",
                          message=f"engine lacks feature {', '.join(missing)}", **base)
    if skip_reason is not None:
        return CaseResult(verdict="unsupported", message=f"skipped: {skip_reason}",
                          reason=skip_reason, **base)
    return None


class JudgedFacts(Protocol):
    """What judging reads of an engine: its name and how its messages are compared."""

    name: str
    message_strictness: str
    torch_version: str


def judge_seen(case: Case, seen: CaseSeen, engine: JudgedFacts, seed: int | None = None
               ) -> CaseResult:
    """The result of `case` from what its engine's process saw (`seen`): every check of every
    step it ran, in order, until a step raised where the case expects no error (or something
    other than the refusal it expects), or the case ended early (a timeout, the adapter
    failing, a crash: an `error`). Only this function reaches a verdict."""
    seed = case.seed if seed is None else seed
    base = {"case_id": case.id, "engine": engine.name, "topic": case.topic, "seed": seed,
            "duration_s": seen.duration_s}
    checks: list[Check] = []
    ran_backward = False
    for index, step in enumerate(case.steps):
        record = seen.steps[index] if index < len(seen.steps) else None
        ended_here = seen.ended is not None and seen.ended_in == index
        if record is None:
            if seen.ended is not None:
                break
            checks.append(Check(index, "semantics", "run", "the engine's process sent nothing "
                                "for this step", snippet=step.run))
            return _failed(checks, base)
        statements = ast.parse(step.run).body

        def fail(level: str, what: str, message: str, expected: str | None = None,
                 actual: str | None = None, snippet: str | None = None,
                 index: int = index, step: Step = step) -> None:
            checks.append(Check(index, level, what, cut(message), expected,
                                None if actual is None else cut(actual), snippet or step.run))

        unexpected = _check_raised(step.raises, record.raised, statements, engine, step.run,
                                   fail, ran_backward)
        _check_warnings(step.warns, record.warnings, engine, fail)
        if unexpected:
            return _failed(checks, base)
        if ended_here:
            break
        if record.values is None:
            fail("semantics", "run", "the engine's process did not observe this step")
            return _failed(checks, base)
        _check_expect(step, record, fail)
        ran = statements if record.raised is None else statements[:record.raised.statement]
        ran_backward = ran_backward or any(stage(s) == "backward" for s in ran)
    if seen.ended is not None:
        index = seen.ended_in
        return CaseResult(verdict="error", step=index,
                          snippet=case.steps[index].run if index is not None else None,
                          message=cut(seen.message), checks=checks, **base)
    return _failed(checks, base)


def _failed(checks: list[Check], base: dict[str, Any]) -> CaseResult:
    """`passed` without checks, else `failed` headed by the first semantic failure."""
    if not checks:
        return CaseResult(verdict="passed", **base)
    head = next((c for c in checks if c.level == "semantics"), checks[0])
    more = f" (and {len(checks) - 1} more failed check(s))" if len(checks) > 1 else ""
    return CaseResult(verdict="failed", step=head.step, snippet=head.snippet,
                      expected=head.expected, actual=head.actual, message=head.message + more,
                      checks=checks, **base)


def _check_raised(spec: Raises | None, raised: ExceptionSeen | None,
                  statements: list[ast.stmt], engine: JudgedFacts, source: str,
                  fail: Callable[..., None], ran_backward: bool) -> bool:
    """Check the step's error; True when the case cannot go on (it raised where the case
    expects no error, or something other than the refusal the case expects)."""
    if raised is None:
        if spec is not None:
            fail("semantics", "raises", f"expected {spec.type} to be raised, nothing was raised",
                 expected=_raises_text(spec, engine), actual="no error")
        return False
    if not 0 <= raised.statement < len(statements):
        fail("semantics", "raises", f"the engine's process said statement {raised.statement} "
             f"raised; the step has {len(statements)}", actual=raised.type)
        return True
    statement = statements[raised.statement]
    text = ast.get_source_segment(source, statement) or ast.unparse(statement)
    where = stage_of(statement, node_at(statement, raised.position))
    actual = f"{raised.type} ({where}): {raised.message}"
    if spec is None:
        fail("semantics", "raises", f"unexpected {raised.type}: {raised.message}",
             expected="no error", actual=actual, snippet=text)
        return True
    expected_message = spec.message_for(engine.torch_version)
    not_a_refusal = refusal_problem(raised, statement, spec.type, expected_message,
                                    ran_backward=ran_backward, expected_stage=spec.stage)
    if not_a_refusal is None and spec.stage is not None and spec.stage != where \
            and "backward" in (spec.stage, where):
        not_a_refusal = (f"expected the refusal at stage {spec.stage}, the engine raised at "
                         f"{where}: an error in the forward pass is not a refusal of backward")
    if not_a_refusal is not None:
        fail("semantics", "raises", not_a_refusal, expected=_raises_text(spec, engine),
             actual=actual, snippet=text)
        return True
    problem = class_problem(raised.classes, spec.type)
    if problem is None and spec.stage is not None and spec.stage != where:
        problem = f"expected the error at stage {spec.stage}, raised at {where}"
    if problem is None:
        if not message_matches(raised.message, expected_message, engine.message_strictness):
            problem = f"wrong message for {spec.type} ({engine.message_strictness} comparison)"
    if problem is not None:
        # The engine refused where it should: which exception, where and how it is worded is
        # PyTorch's surface.
        fail("surface", "raises", problem, expected=_raises_text(spec, engine), actual=actual,
             snippet=text)
    return False


def _raises_text(spec: Raises, engine: JudgedFacts) -> str:
    stage_text = f" ({spec.stage})" if spec.stage else ""
    message = spec.message_for(engine.torch_version)
    return f"{spec.type}{stage_text}: {message}" if message is not None else spec.type + stage_text


def message_matches(actual: str, expected: str | None, strictness: str) -> bool:
    """Compare a message under `exact`, `prefix` or `type` strictness (INTERPRETING.md)."""
    if expected is None or strictness == "type":
        return True
    if strictness == "prefix":
        return same_head(actual, expected)
    return actual == expected


def clean_warning(message: str) -> str:
    """A warning's text without the ` (Triggered internally at ...)` PyTorch appends, each
    Python stack in it replaced by ``<traceback>``."""
    return STACK.sub(TRACEBACK, TRIGGERED.sub("", message))


def _check_warnings(expected: tuple[Warn, ...], caught: list[WarningSeen],
                    engine: JudgedFacts, fail: Callable[..., None]) -> None:
    actual = list(dict.fromkeys((w.classes, clean_warning(w.message)) for w in caught))

    def same_kind(want: Warn, classes: Classes) -> bool:
        return class_problem(classes, want.type) is None

    def matches(want: Warn, classes: Classes, text: str) -> bool:
        return same_kind(want, classes) and message_matches(
            text, want.message_for(engine.torch_version), engine.message_strictness)

    expected_text = "; ".join(f"{w.type}: {w.message_for(engine.torch_version)}"
                              for w in expected) or "no warning"
    actual_text = "; ".join(f"{c[0][1]}: {t}" for c, t in actual) or "no warning"
    # Whether the step warns is semantics; how it is worded is surface. A warning of another
    # category is another warning (an engine's DeprecationWarning does not meet a UserWarning).
    missing = [w for w in expected if not any(matches(w, c, t) for c, t in actual)]
    extra = [(c, t) for c, t in actual if not any(matches(w, c, t) for w in expected)]
    reworded: set[int] = set()
    for want in missing:
        partner = next((i for i, (classes, _) in enumerate(extra)
                        if i not in reworded and same_kind(want, classes)), None)
        if partner is not None:
            reworded.add(partner)
        fail("surface" if partner is not None else "semantics", "warns",
             f"expected warning {want.type} was not emitted", expected=expected_text,
             actual=actual_text)
    for index, (classes, text) in enumerate(extra):
        if index not in reworded:
            fail("semantics", "warns", f"unexpected warning {classes[0][1]}: {text}",
                 expected=expected_text, actual=actual_text)


def _check_expect(step: Step, record: StepSeen, fail: Callable[..., None]) -> None:
    values = record.values or {}
    for key, expected in step.expect:
        level = observation_level(key, expected)
        if key not in values:
            fail("semantics", key, f"{key}: the engine's process sent no observation for it",
                 expected=repr(expected), actual="nothing")
            continue
        observed = values[key]
        if isinstance(observed, ObservingRaised):
            fail("semantics", key, f"{key}: observing raised {observed.type}: {observed.message}",
                 expected=repr(expected), actual=f"{observed.type}: {observed.message}")
            continue
        problem = compare(observed, expected, None, record.arrays)
        if problem is not None:
            if level == "surface" and _numbers_differ(observed, expected):
                level = "semantics"  # a printed tensor whose values are wrong, not its wording
            fail(level, key, f"{key}: {problem}", expected=repr(expected),
                 actual=describe(observed))


# Observations that show PyTorch's face rather than its autograd model.
SURFACE_HELPERS = frozenset({"grad_fn_name", "node_name", "graph", "repr", "str", "type"})


_NUMBER = re.compile(r"[-+]?(?:\d+\.?\d*|\.\d+)(?:e[-+]?\d+)?|nan|inf")


def _numbers_differ(observed: Any, expected: Any) -> bool:
    """Whether a printed observation (`repr(x.grad)`) shows other numbers than expected."""
    if not isinstance(observed, str) or not isinstance(expected, str):
        return False
    strip = re.compile(r"0x[0-9a-f]+|[A-Za-z_]\w*\d\w*")  # addresses and names like Mul0
    return _NUMBER.findall(strip.sub("", observed)) != _NUMBER.findall(strip.sub("", expected))


def observation_level(key: str, expected: Any) -> str:
    """`surface` when the observation reads a node's name, graph text, repr or type, or the
    identity of objects (`is`); `semantics` otherwise. Whether a tensor has a grad_fn at all
    (`grad_fn_name(y): null`) is semantics."""
    tree = ast.parse(key, mode="eval")
    for node in ast.walk(tree):
        if isinstance(node, ast.Compare) and any(isinstance(op, (ast.Is, ast.IsNot))
                                                 for op in node.ops):
            return "surface"
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) \
                and node.func.id in SURFACE_HELPERS:
            if node is tree.body and node.func.id in ("grad_fn_name", "graph") \
                    and expected is None:
                continue
            return "surface"
    return "semantics"
