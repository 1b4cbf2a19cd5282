"""Run a program on an engine, record every observation, and compare two engines' records.

    >>> from conformance.engines import load_engine
    >>> torch_engine = load_engine("torch")                               # doctest: +SKIP
    >>> compiled = compile_program(program)                               # doctest: +SKIP
    >>> a = observe(compiled, torch_engine); b = observe(compiled, other)  # doctest: +SKIP
    >>> first_mismatch(a, b, strictness="exact")                          # doctest: +SKIP

Statements run exactly as in the executor (`conformance.run.observe.run_statements`: same
namespace, same warning capture, same error stage), so a program that agrees here gives the
same verdict as the case written from it. Observations are normalised to plain data: a tensor
becomes a `TensorObservation` (dtype, shape, device, NumPy values), an observation that raises
becomes a `RaisedObservation`.
"""

from __future__ import annotations

import ast
import math
import warnings
from dataclasses import dataclass, field
from functools import lru_cache
from types import CodeType
from typing import Any

import numpy as np

from conformance.engines.base import Engine
from conformance.fuzz.program import Program
from conformance.run import snippets, wire
from conformance.run.compare import TOLERANCES
from conformance.run.executor import clean_warning, message_matches, observation_level
from conformance.run.observe import new_namespace, run_statements
from conformance.run.refusals import node_at, stage_of

# Engines may sum in different orders: float32 gets a looser relative tolerance than a case's
# (1.3e-6), or rounding alone would be reported; float64 keeps the case tolerance.
FUZZ_TOLERANCES = {**TOLERANCES, "float32": (1e-4, 1e-5), "complex64": (1e-4, 1e-5)}
STRICTNESS_ORDER = ("exact", "prefix", "type")
PRECISION_ORDER = ("float16", "bfloat16", "float32", "float64")
"""Float dtypes, least precise first."""


def least_precise(*dtypes: str) -> str:
    """The least precise of float dtypes (`least_precise("float64", "float32") == "float32"`)."""
    return min(dtypes, key=PRECISION_ORDER.index)


@dataclass(frozen=True)
class TensorObservation:
    dtype: str
    shape: tuple[int, ...]
    device: str
    values: np.ndarray = field(compare=False)

    def text(self) -> str:
        values = np.array2string(self.values, separator=", ", threshold=20, precision=8)
        return f"tensor({values}, dtype={self.dtype}, shape={list(self.shape)})"


@dataclass(frozen=True)
class RaisedObservation:
    """Evaluating the observation expression raised."""

    type: str
    message: str

    def text(self) -> str:
        return f"<observing raised {self.type}: {self.message}>"


# Observations of these classes travel from a worker tagged by these names.
wire.register("tensor", TensorObservation)
wire.register("raised", RaisedObservation)


@dataclass(frozen=True)
class StepError:
    statement: int
    """Index of the statement that raised within the step."""
    type: str
    stage: str
    message: str

    def text(self) -> str:
        return f"{self.type} ({self.stage}, statement {self.statement}): {self.message}"


@dataclass
class StepRecord:
    error: StepError | None
    warnings: tuple[tuple[str, str], ...]
    """(category name, message) pairs, each once, sorted."""
    observations: dict[str, Any]


@dataclass(frozen=True)
class CompiledStep:
    statements: tuple[tuple[ast.stmt, CodeType], ...]
    observe: tuple[tuple[str, CodeType], ...]


@dataclass(frozen=True)
class CompiledProgram:
    program: Program
    steps: tuple[CompiledStep, ...]


@dataclass(frozen=True)
class Difference:
    what: str
    """The observation expression, or `error` / `warnings`."""
    reference: str
    other: str


@dataclass(frozen=True)
class Mismatch:
    step: int
    differences: tuple[Difference, ...]

    def text(self, reference: str, other: str) -> str:
        lines = [f"step {self.step}: {len(self.differences)} difference(s)"]
        for diff in self.differences:
            lines += [f"  {diff.what}:", f"    {reference}: {diff.reference}",
                      f"    {other}: {diff.other}"]
        return "\n".join(lines)


@lru_cache(maxsize=8192)
def _compile_expression(key: str) -> CodeType:
    # Observation keys repeat across programs (`v1.grad`): compile each text once.
    return compile(key, "<observe>", "eval")


@lru_cache(maxsize=4096)
def _step_filename(index: int) -> str:
    return f"<fuzz step {index}>"


def _compile_statement(source: str, filename: str) -> tuple[tuple[ast.stmt, CodeType], ...]:
    return tuple((statement, compile(ast.Module([statement], []), filename, "exec"))
                 for statement in ast.parse(source).body)


def compile_program(program: Program) -> CompiledProgram:
    """Parse and compile a program once, for both engines."""
    return CompiledProgram(program, tuple(
        CompiledStep(_compile_statement(step.run, _step_filename(index)),
                     tuple((key, _compile_expression(key)) for key in step.observe))
        for index, step in enumerate(program.steps)))


def observe(compiled: CompiledProgram, engine: Engine) -> list[StepRecord]:
    """Run every step on `engine` and record its error, warnings and observations."""
    records = []
    namespace: dict[str, Any] = {}
    engine.reset()
    try:
        namespace = new_namespace(engine, np.random.default_rng(compiled.program.seed),
                                  sources={_step_filename(index): step.run
                                           for index, step in enumerate(compiled.program.steps)})
        for step in compiled.steps:
            raised, caught = run_statements(step.statements, namespace, engine)
            error = None
            if raised is not None:
                statement = step.statements[raised.statement][0]
                error = StepError(raised.statement, raised.type,
                                  stage_of(statement, node_at(statement, raised.position)),
                                  raised.message)
            warned = tuple(sorted({(w.classes[0][1], clean_warning(w.message))
                                   for w in caught}))
            records.append(StepRecord(error, warned,
                                      _observations(step, namespace, engine)))
    finally:
        # As in the executor: the program's objects go (closing what it left suspended)
        # before the engine's state is restored.
        snippets.empty(namespace)
        engine.reset()
    return records


def _observations(step: CompiledStep, namespace: dict[str, Any], engine: Engine
                  ) -> dict[str, Any]:
    out: dict[str, Any] = {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for key, code in step.observe:
            try:
                value = eval(code, namespace)
            except Exception as exc:  # noqa: BLE001 - both engines may fail to observe alike
                out[key] = RaisedObservation(type(exc).__name__, str(exc))
                continue
            out[key] = normalise(value, engine)
    return out


_PLAIN = frozenset((bool, str, int, float))


def normalise(value: Any, engine: Engine) -> Any:
    """Plain data for an observed value: tensors become TensorObservation."""
    if value is None or type(value) in _PLAIN:  # most observations: flags, names, no grad
        return value
    if engine.is_tensor(value):
        # A copy: `to_numpy` may share memory with the tensor, and a later in-place op must
        # not rewrite what an earlier step observed.
        values = np.array(engine.to_numpy(value), copy=True)
        return TensorObservation(engine.dtype_name(value), tuple(values.shape),
                                 engine.device_name(value), values)
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, (list, tuple)):
        return tuple(normalise(item, engine) for item in value)
    return value


def weakest(*strictness: str) -> str:
    """The least strict of the adapters' message strictness (exact > prefix > type)."""
    return max(strictness, key=STRICTNESS_ORDER.index)


def first_mismatch(reference: list[StepRecord], other: list[StepRecord],
                   strictness: str = "exact", program: Program | None = None,
                   level: str = "full") -> Mismatch | None:
    """The first step where the records differ, with every difference in it.

    With `program`, each step's `precision` says which observations are compared with the
    tolerance of a less precise dtype than their own. At `level="semantics"` the observations
    of PyTorch's surface (`observation_level`: node names, graph text, repr, identity) are not
    compared, as the judge leaves them out at that level.
    """
    for index, (a, b) in enumerate(zip(reference, other, strict=True)):
        precision = dict(program.steps[index].precision) if program is not None else {}
        differences = []
        if not _same_error(a.error, b.error, strictness):
            differences.append(Difference("error", _error_text(a.error), _error_text(b.error)))
        if not _same_warnings(a.warnings, b.warnings, strictness):
            differences.append(Difference("warnings", _warnings_text(a.warnings),
                                          _warnings_text(b.warnings)))
        for key, want in a.observations.items():
            if level == "semantics" and observation_level(key, want) == "surface":
                continue
            got = b.observations.get(key)
            if not same_value(want, got, strictness, precision.get(key)):
                differences.append(Difference(key, text(want), text(got)))
        if differences:
            return Mismatch(index, tuple(differences))
    return None


def _same_error(a: StepError | None, b: StepError | None, strictness: str) -> bool:
    if a is None or b is None:
        return a is b
    return (a.statement, a.type, a.stage) == (b.statement, b.type, b.stage) \
        and message_matches(b.message, a.message, strictness)


def _same_warnings(a: tuple[tuple[str, str], ...], b: tuple[tuple[str, str], ...],
                   strictness: str) -> bool:
    if len(a) != len(b):
        return False
    return all(any(ca == cb and message_matches(mb, ma, strictness) for cb, mb in b)
               for ca, ma in a)


def same_value(a: Any, b: Any, strictness: str = "exact", computed_in: str | None = None
               ) -> bool:
    """Whether two normalised observations agree (dtype-aware, NaN and inf aware).

    `computed_in` is the least precise float dtype the value was computed in, when that is
    less precise than the dtype it has now.
    """
    if isinstance(a, TensorObservation) or isinstance(b, TensorObservation):
        if not (isinstance(a, TensorObservation) and isinstance(b, TensorObservation)):
            return False
        if (a.dtype, a.shape, a.device) != (b.dtype, b.shape, b.device):
            return False
        return _close(a.values, b.values, FUZZ_TOLERANCES.get(_tolerance_dtype(a.dtype,
                                                                              computed_in)))
    if isinstance(a, RaisedObservation) or isinstance(b, RaisedObservation):
        if not (isinstance(a, RaisedObservation) and isinstance(b, RaisedObservation)):
            return False
        return a.type == b.type and message_matches(b.message, a.message, strictness)
    if isinstance(a, tuple) or isinstance(b, tuple):
        return isinstance(a, tuple) and isinstance(b, tuple) and len(a) == len(b) and all(
            same_value(x, y, strictness, computed_in) for x, y in zip(a, b, strict=True))
    if isinstance(a, float) and isinstance(b, float) and type(a) is type(b):
        return (math.isnan(a) and math.isnan(b)) or _close(
            np.asarray(a), np.asarray(b), FUZZ_TOLERANCES["float32"])
    return type(a) is type(b) and a == b


def _tolerance_dtype(dtype: str, computed_in: str | None) -> str:
    # A float64 tensor made by `.double()` of a float32 result holds float32 rounding, and
    # engines round float32 differently (summation order): comparing it with the float64
    # tolerance would report rounding as a difference. Its tolerance is that of the least
    # precise dtype it was computed in. Integer and bool values stay exact.
    if computed_in is None or dtype not in PRECISION_ORDER or computed_in not in PRECISION_ORDER:
        return dtype
    return least_precise(dtype, computed_in)


def _close(a: np.ndarray, b: np.ndarray, tolerance: tuple[float, float] | None) -> bool:
    if tolerance is None:
        return bool(np.array_equal(a, b))
    if np.array_equal(a, b):  # the common case, several times cheaper than isclose
        return True
    rtol, atol = tolerance
    return bool(np.all(np.isclose(a, b, rtol=rtol, atol=atol, equal_nan=True)))


def text(value: Any) -> str:
    """A short description of a normalised observation, for messages."""
    if isinstance(value, (TensorObservation, RaisedObservation)):
        return value.text()
    if isinstance(value, tuple):
        return "(" + ", ".join(text(item) for item in value) + ")"
    return repr(value)


def _error_text(error: StepError | None) -> str:
    return "no error" if error is None else error.text()


def _warnings_text(warned: tuple[tuple[str, str], ...]) -> str:
    return "; ".join(f"{c}: {m}" for c, m in warned) or "no warning"
