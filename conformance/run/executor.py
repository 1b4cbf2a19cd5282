"""Run one case on one engine and say what happened.

    >>> from conformance.engines import load_engine
    >>> result = run_case({"id": "leaf.ones", "rule": "A new tensor is a leaf.",
    ...                    "steps": [{"run": "x = torch.ones(2)",
    ...                               "expect": {"x.is_leaf": True}}]},
    ...                   load_engine("torch"))            # doctest: +SKIP
    >>> result.verdict                                       # doctest: +SKIP
    'passed'

Each case gets a fresh namespace, grad mode enabled and its own NumPy generator
(`default_rng(seed)`), so every engine computes with the same numbers. Steps run statement by
statement; the statement that raises gives the error's stage. A per-case watchdog
(`SIGALRM`, when running in the main thread of a Unix process) turns a hang into an `error`
verdict; an exception from the runner or the adapter is an `error` too. Neither stops a run.
"""

from __future__ import annotations

import ast
import builtins
import re
import signal
import threading
import time
import traceback
import warnings
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from types import CodeType
from typing import Any

import numpy as np

from conformance.casefile.case import Case, Raises, Step, Warn
from conformance.casefile.loader import default_builtins
from conformance.casefile.sandbox import case_builtins
from conformance.engines.base import Engine
from conformance.run import snippets
from conformance.run.compare import NoValues, Unreadable, compare, describe, helpers
from conformance.run.refusals import Raised, class_problem, refusal_problem

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


class CaseTimeout(BaseException):
    """Raised inside a case by the watchdog (a BaseException, so snippets cannot swallow it)."""


class _AdapterFailure(Exception):
    """The adapter itself failed (turning a value into NumPy, naming a node): an `error`."""


class _Stop(Exception):
    """A step raised where it should not: later steps would run on a state the case never
    meant, so the case stops here (its checks so far are kept)."""


def run_case(case: Case | Mapping[str, Any], engine: Engine, seed: int | None = None, *,
             timeout: float | None = DEFAULT_TIMEOUT) -> CaseResult:
    """Run `case` (a Case or a plain dict) on `engine`; `seed` overrides the case's seed. A
    case the engine cannot run (unavailable, a feature missing) is `unsupported`; expectations
    files are the judge's (`conformance.verdict.judge`)."""
    if not isinstance(case, Case):
        case = Case.from_dict(case)
    early = unrunnable(case, engine, seed)
    if early is not None:
        return early
    seed = case.seed if seed is None else seed
    base = {"case_id": case.id, "engine": engine.name, "topic": case.topic, "seed": seed}
    start = time.perf_counter()
    result = _execute(case, engine, seed, timeout, base)
    result.duration_s = time.perf_counter() - start
    return result


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


def _execute(case: Case, engine: Engine, seed: int, timeout: float | None,
             base: dict[str, Any]) -> CaseResult:
    index: int | None = None
    step: Step | None = None
    checks: list[Check] = []
    try:
        with watchdog(timeout):
            namespace: dict[str, Any] = {}
            try:
                engine.reset()
                namespace = new_namespace(engine, np.random.default_rng(seed), case.builtins,
                                          {step_filename(case, i): step.run
                                           for i, step in enumerate(case.steps)})
                for index, step in enumerate(case.steps):
                    _run_step(case, index, step, engine, namespace, checks)
            finally:
                # Dropping the case's objects closes what it left suspended (a generator
                # inside a `with` block) before the engine's state is restored.
                snippets.empty(namespace)
                engine.reset()
    except CaseTimeout:
        return CaseResult(verdict="error", step=index, snippet=step.run if step else None,
                          message=f"timed out after {timeout:g} s", checks=checks, **base)
    except _Stop:
        pass
    except _AdapterFailure as exc:
        return CaseResult(verdict="error", step=index, snippet=step.run if step else None,
                          message=str(exc), checks=checks, **base)
    except Exception as exc:  # noqa: BLE001 - a crash in one case must not stop the run
        return CaseResult(verdict="error", step=index, snippet=step.run if step else None,
                          message=f"the runner crashed: {type(exc).__name__}: {exc}\n"
                          f"{traceback.format_exc(limit=-8)}", checks=checks, **base)
    if not checks:
        return CaseResult(verdict="passed", **base)
    head = next((c for c in checks if c.level == "semantics"), checks[0])
    more = f" (and {len(checks) - 1} more failed check(s))" if len(checks) > 1 else ""
    return CaseResult(verdict="failed", step=head.step, snippet=head.snippet,
                      expected=head.expected, actual=head.actual, message=head.message + more,
                      checks=checks, **base)


def new_namespace(engine: Engine, rng: np.random.Generator,
                  builtin_names: frozenset[str] | None = None,
                  sources: Mapping[str, str] | None = None) -> dict[str, Any]:
    """A fresh case namespace, the `__dict__` of the process's case module (see `snippets`):
    the builtins api.yaml allows (`builtin_names`, default the default spec's), the
    observation helpers and the engine's facades. `sources` maps the file names snippets are
    compiled with to their text, for tools that read a function's source."""
    names = builtin_names if builtin_names is not None else default_builtins()
    namespace: dict[str, Any] = snippets.fresh(sources or {})
    namespace["__builtins__"] = dict(vars(builtins)) if engine.python_builtins \
        else dict(case_builtins(names))
    namespace.update(helpers(engine))
    namespace.update(engine.namespace(rng))
    return namespace


@contextmanager
def watchdog(timeout: float | None) -> Iterator[None]:
    """Raise CaseTimeout in the block once `timeout` seconds have passed (SIGALRM; only in
    the main thread, elsewhere the block runs unwatched)."""
    usable = (timeout is not None and timeout > 0 and hasattr(signal, "setitimer")
              and threading.current_thread() is threading.main_thread())
    if not usable:
        yield
        return

    def expire(signum: int, frame: Any) -> None:
        raise CaseTimeout()

    previous = signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, timeout)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def _run_step(case: Case, index: int, step: Step, engine: Engine,
              namespace: dict[str, Any], checks: list[Check]) -> None:
    statements = [(statement, compile(ast.Module([statement], []),
                                      step_filename(case, index), "exec"))
                  for statement in ast.parse(step.run).body]
    raised, caught = run_statements(statements, namespace)

    def fail(level: str, what: str, message: str, expected: str | None = None,
             actual: str | None = None, snippet: str | None = None) -> None:
        checks.append(Check(index, level, what, message, expected, actual, snippet or step.run))

    unexpected = _check_raised(step.raises, raised, engine, step.run, fail)
    _check_warnings(step.warns, caught, engine, fail)
    if unexpected:
        raise _Stop
    _check_expect(step, engine, namespace, fail)


def step_filename(case: Case, index: int) -> str:
    """The file name a step's code is compiled with (and its source registered under)."""
    return f"<{case.id} step {index}>"


def run_statements(statements: Sequence[tuple[ast.stmt, CodeType]], namespace: dict[str, Any]
                   ) -> tuple[Raised | None, list[warnings.WarningMessage]]:
    """Execute compiled statements in order until one raises, recording every warning.

    Returns what was raised, with the statement that raised it and where (None when all ran),
    and the warnings caught. The fuzzer calls this too, with code compiled once for both
    engines.
    """
    raised: Raised | None = None
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for index, (statement, code) in enumerate(statements):
            try:
                exec(code, namespace)
            except Exception as exc:  # noqa: BLE001 - the engine's error is what we check
                raised = Raised(exc, statement, index, len(statements), code)
                break
    return raised, caught


def _check_raised(spec: Raises | None, raised: Raised | None, engine: Engine, source: str,
                  fail: Callable[..., None]) -> bool:
    """Check the step's error; True when the case cannot go on (it raised where the case
    expects no error, or something other than the refusal the case expects)."""
    if raised is None:
        if spec is not None:
            fail("semantics", "raises", f"expected {spec.type} to be raised, nothing was raised",
                 expected=_raises_text(spec, engine), actual="no error")
        return False
    exc, statement = raised.exc, raised.statement
    text = ast.get_source_segment(source, statement) or ast.unparse(statement)
    where = raised.stage
    actual = f"{type(exc).__name__} ({where}): {exc}"
    if spec is None:
        fail("semantics", "raises", f"unexpected {type(exc).__name__}: {exc}",
             expected="no error", actual=actual, snippet=text)
        return True
    not_a_refusal = refusal_problem(raised, spec.type, engine.adapter_files(),
                                    tuple(engine.refusal_types),
                                    spec.message_for(engine.torch_version))
    if not_a_refusal is None and spec.stage is not None and spec.stage != where \
            and "backward" in (spec.stage, where):
        not_a_refusal = (f"expected the refusal at stage {spec.stage}, the engine raised at "
                         f"{where}: an error in the forward pass is not a refusal of backward")
    if not_a_refusal is not None:
        fail("semantics", "raises", not_a_refusal, expected=_raises_text(spec, engine),
             actual=actual, snippet=text)
        return True
    problem = class_problem(type(exc), spec.type)
    if problem is None and spec.stage is not None and spec.stage != where:
        problem = f"expected the error at stage {spec.stage}, raised at {where}"
    if problem is None:
        expected_message = spec.message_for(engine.torch_version)
        if not message_matches(str(exc), expected_message, engine.message_strictness):
            problem = f"wrong message for {spec.type} ({engine.message_strictness} comparison)"
    if problem is not None:
        # The engine refused where it should: which exception, where and how it is worded is
        # PyTorch's surface.
        fail("surface", "raises", problem, expected=_raises_text(spec, engine), actual=actual,
             snippet=text)
    return False


def _raises_text(spec: Raises, engine: Engine) -> str:
    stage_text = f" ({spec.stage})" if spec.stage else ""
    message = spec.message_for(engine.torch_version)
    return f"{spec.type}{stage_text}: {message}" if message is not None else spec.type + stage_text


def message_matches(actual: str, expected: str | None, strictness: str) -> bool:
    """Compare a message under `exact`, `prefix` or `type` strictness (INTERPRETING.md)."""
    if expected is None or strictness == "type":
        return True
    if strictness == "prefix":
        head = re.split(r"[.:\n]", expected, maxsplit=1)[0]
        return actual.startswith(head)
    return actual == expected


def clean_warning(message: str) -> str:
    """A warning's text without the ` (Triggered internally at ...)` PyTorch appends, each
    Python stack in it replaced by ``<traceback>``."""
    return STACK.sub(TRACEBACK, TRIGGERED.sub("", message))


def _check_warnings(expected: tuple[Warn, ...], caught: list[warnings.WarningMessage],
                    engine: Engine, fail: Callable[..., None]) -> None:
    actual = list(dict.fromkeys((w.category, clean_warning(str(w.message))) for w in caught))

    def same_kind(want: Warn, category: type) -> bool:
        return class_problem(category, want.type) is None

    def matches(want: Warn, category: type, text: str) -> bool:
        return same_kind(want, category) and message_matches(
            text, want.message_for(engine.torch_version), engine.message_strictness)

    expected_text = "; ".join(f"{w.type}: {w.message_for(engine.torch_version)}"
                              for w in expected) or "no warning"
    actual_text = "; ".join(f"{c.__name__}: {t}" for c, t in actual) or "no warning"
    # Whether the step warns is semantics; how it is worded is surface. A warning of another
    # category is another warning (an engine's DeprecationWarning does not meet a UserWarning).
    missing = [w for w in expected if not any(matches(w, c, t) for c, t in actual)]
    extra = [(c, t) for c, t in actual if not any(matches(w, c, t) for w in expected)]
    reworded: set[int] = set()
    for want in missing:
        partner = next((i for i, (category, _) in enumerate(extra)
                        if i not in reworded and same_kind(want, category)), None)
        if partner is not None:
            reworded.add(partner)
        fail("surface" if partner is not None else "semantics", "warns",
             f"expected warning {want.type} was not emitted", expected=expected_text,
             actual=actual_text)
    for index, (category, text) in enumerate(extra):
        if index not in reworded:
            fail("semantics", "warns", f"unexpected warning {category.__name__}: {text}",
                 expected=expected_text, actual=actual_text)


def _check_expect(step: Step, engine: Engine, namespace: dict[str, Any],
                  fail: Callable[..., None]) -> None:
    if not step.expect:
        return
    arrays: dict[str, Any] = {}
    for name, value in namespace.items():
        if name.startswith("_") or not engine.is_tensor(value):
            continue
        if not engine.has_values(value):
            arrays[name] = NoValues(name, engine.device_name(value))
            continue
        try:
            arrays[name] = engine.to_numpy(value)
        except Exception as exc:  # noqa: BLE001 - the adapter's failure, reported where used
            arrays[name] = Unreadable(name, f"{type(exc).__name__}: {exc}")
    for key, expected in step.expect:
        level = observation_level(key, expected)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            try:
                observed = eval(compile(key, f"<expect {key}>", "eval"), namespace)
            except Exception as exc:  # noqa: BLE001 - an observation that raises fails the step
                fail("semantics", key, f"{key}: observing raised {type(exc).__name__}: {exc}",
                     expected=repr(expected), actual=f"{type(exc).__name__}: {exc}")
                continue
            try:
                problem = compare(observed, expected, engine, arrays)
                shown = describe(observed, engine) if problem is not None else None
            except Exception as exc:  # noqa: BLE001 - the adapter could not read the value back
                raise _AdapterFailure(
                    f"{key}: the engine's adapter failed while reading the observed value back: "
                    f"{type(exc).__name__}: {exc}") from exc
        if problem is not None:
            if level == "surface" and _numbers_differ(observed, expected):
                level = "semantics"  # a printed tensor whose values are wrong, not its wording
            fail(level, key, f"{key}: {problem}", expected=repr(expected), actual=shown)


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
