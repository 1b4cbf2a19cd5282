"""What a worker sends back about a case: observations, never a verdict.

The runner hands the engine's process a `Plan`: each step's code, whether a raise is allowed
there, the observation expressions to evaluate and the names whose values `{np: ...}`
expectations read. It holds no expected value, error or warning: what the case expects stays
with the parent. `observe_case` runs the plan on the engine and records, as plain data, what
happened (`CaseSeen`): each step's exception (`ExceptionSeen`: its classes, message, where it
was raised), its warnings (`WarningSeen`), its observed values (a tensor as a `TensorSeen`,
numbers, strings and sequences as themselves, anything else as its type's name and repr) and
why the case ended early (a timeout, the adapter failing to read a value back, a crash of the
runner's own code). The parent (`conformance.run.executor.judge`) compares that record with the
case; nothing an engine or adapter does in its process can say "passed".

Every text is cut to `TEXT_LIMIT` characters and every array to `ARRAY_LIMIT` elements here,
so what crosses is bounded whatever a case makes; the parent cuts again on its side.
"""

from __future__ import annotations

import ast
import dis
import signal
import sys
import threading
import time
import traceback
import warnings
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from types import CodeType, TracebackType
from typing import Any

import numpy as np

from conformance.casefile.case import Case
from conformance.casefile.loader import default_builtins
from conformance.casefile.sandbox import case_builtins
from conformance.engines.base import Engine
from conformance.run import snippets, wire

TEXT_LIMIT = 8192
"""Characters of any one text a worker sends (a message, a warning, a repr, an observed
string): PyTorch's longest message a case expects has 1,266."""
ARRAY_LIMIT = 1 << 20
"""Elements of one observed array."""


def cut(text: str, limit: int = TEXT_LIMIT) -> str:
    """`text`, or its first `limit` characters and a mark saying how much was left out."""
    if len(text) <= limit:
        return text
    return f"{text[:limit]}… [cut: {len(text) - limit:,} more characters]"


@dataclass(frozen=True)
class PlanStep:
    run: str
    may_raise: bool
    """Whether the case expects this step to raise (else the case stops where it raises)."""
    observe: tuple[str, ...]
    """The observation expressions (`expect` keys), in order."""
    arrays: tuple[str, ...]
    """The case's names whose values `{np: ...}` expected values read."""


@dataclass(frozen=True)
class Plan:
    """A case as the engine's process gets it: its code and what to look at, no expectation."""

    id: str
    seed: int
    steps: tuple[PlanStep, ...]
    builtins: frozenset[str] | None = None

    @classmethod
    def of(cls, case: Case, seed: int | None = None) -> Plan:
        return cls(case.id, case.seed if seed is None else seed,
                   tuple(PlanStep(step.run, step.raises is not None,
                                  tuple(key for key, _ in step.expect), _np_names(step.expect))
                         for step in case.steps), case.builtins)


def _np_names(expect: tuple[tuple[str, Any], ...]) -> tuple[str, ...]:
    names: dict[str, None] = {}
    stack = [value for _, value in expect]
    while stack:
        value = stack.pop()
        if isinstance(value, Mapping):
            source = value.get("np")
            if isinstance(source, str):
                names.update(dict.fromkeys(compile(source, "<np expectation>", "eval").co_names))
            stack.extend(value.values())
        elif isinstance(value, (list, tuple)):
            stack.extend(value)
    return tuple(name for name in names if name != "np")


@dataclass(frozen=True)
class TensorSeen:
    """An observed tensor (or NumPy array) as data: what the runner compares and prints."""

    kind: str
    """`tensor`, or `array` for a NumPy array an observation returned."""
    dtype: str
    shape: tuple[int, ...]
    device: str
    values: np.ndarray | None
    """None when the tensor has no values to read (PyTorch's meta device) or `unreadable`."""
    unreadable: str | None = None
    """Why the adapter could not read the values back (its error), or why they were not sent."""


@dataclass(frozen=True)
class ObservingRaised:
    """Evaluating the observation expression raised."""

    type: str
    message: str


Classes = tuple[tuple[str, str], ...]
"""An exception's or warning's class and its bases, each as (module, name), `object` left out."""


def classes_of(cls: type) -> Classes:
    return tuple((wire.text(getattr(c, "__module__", "") or ""), wire.text(c.__name__))
                 for c in wire.quietly(lambda: cls.__mro__, (cls,)) if c is not object)


@dataclass(frozen=True)
class ExceptionSeen:
    """What a step raised, with the facts only the engine's process can read off the exception
    (its traceback); the parent decides from them whether it is the refusal the case expects
    (`conformance.run.refusals`)."""

    classes: Classes
    message: str
    statement: int
    """Which statement of the step raised (0-based)."""
    statements: int
    """How many statements the step has."""
    position: tuple[int, int, int, int] | None
    """(line, end line, column, end column) of the instruction of the statement that raised
    or called what raised; None where the interpreter keeps no positions."""
    by_adapter: bool
    """A `raise` in the adapter's own files made it (not a translation, `raise ... from`)."""
    at_the_call: bool
    """The innermost frame is the statement's own or the adapter's: the interpreter raised it
    before any engine code ran."""
    adapter_class: str | None
    """For an AttributeError: the name of the adapter-defined class its object belongs to."""
    declared_refusal: bool
    """Its class is one the adapter names as the engine's refusals (`Engine.refusal_types`)."""

    @property
    def type(self) -> str:
        return self.classes[0][1]

    def is_a(self, name: str) -> bool:
        """Whether it is (a subclass of) the built-in exception class `name`."""
        return ("builtins", name) in self.classes


@dataclass(frozen=True)
class WarningSeen:
    classes: Classes
    message: str
    """As `warnings` recorded it, before `executor.clean_warning`."""


@dataclass
class StepSeen:
    raised: ExceptionSeen | None
    warnings: list[WarningSeen]
    values: dict[str, Any] | None = None
    """Each observation's value, None when the step's observations were not evaluated (it
    raised where the plan allows no raise, or the case ended first)."""
    arrays: dict[str, TensorSeen] = field(default_factory=dict)


@dataclass
class CaseSeen:
    steps: list[StepSeen]
    ended: str | None = None
    """Why the case ended before its plan did: `timeout`, `adapter` (the adapter failed while
    reading a value back) or `crash` (the runner's own code raised); None when it ran to the
    end or stopped at a step that raised where the plan allows no raise."""
    ended_in: int | None = None
    """The step it ended in (None: before the first step began)."""
    message: str = ""
    duration_s: float = 0.0


wire.register("seen-tensor", TensorSeen)
wire.register("observing-raised", ObservingRaised)


# --- the observation helpers, bound to the engine, and the case's namespace -------------


def no_values_message(shape: list[int], dtype: str, device: str) -> str:
    """What to write instead of a value expectation for a tensor that has no values."""
    return (f"values of a {device} tensor cannot be read; expect its shape/dtype/device "
            f"instead, e.g. {{shape: {shape}, dtype: {dtype}, device: {device}}}")


def helpers(engine: Engine) -> dict[str, Callable[[Any], Any]]:
    """The observation helpers bound to `engine` (also visible to snippets)."""

    def grad_fn_name(tensor: Any) -> str | None:
        node = engine.grad_fn(tensor)
        return None if node is None else engine.node_name(node)

    def node_name(node: Any) -> str | None:
        return None if node is None else engine.node_name(node)

    def graph(tensor: Any) -> str | None:
        node = engine.grad_fn(tensor)
        return None if node is None else _render(node, engine)

    def shape(tensor: Any) -> list[int]:
        return [int(n) for n in tensor.shape]

    def dtype(tensor: Any) -> str:
        return engine.dtype_name(tensor)

    def device(tensor: Any) -> str:
        return engine.device_name(tensor)

    def value(tensor: Any) -> np.ndarray:
        if not engine.has_values(tensor):
            raise ValueError(no_values_message(shape(tensor), dtype(tensor), device(tensor)))
        return engine.to_numpy(tensor)

    return {
        "grad_fn_name": grad_fn_name, "node_name": node_name, "graph": graph, "shape": shape,
        "dtype": dtype, "device": device, "value": value,
    }


def _render(root: Any, engine: Engine) -> str:
    # Iterative, so that a long chain does not hit Python's recursion limit.
    out: list[str] = []
    stack: list[Any] = [("node", root)]
    while stack:
        kind, item = stack.pop()
        if kind == "text":
            out.append(item)
            continue
        if item is None:
            out.append("None")
            continue
        children = list(engine.next_functions(item))
        out.append(engine.node_name(item))
        if children:
            out.append("(")
            stack.append(("text", ")"))
            for index in range(len(children) - 1, -1, -1):
                stack.append(("node", children[index]))
                if index:
                    stack.append(("text", ", "))
    return "".join(out)


class CaseTimeout(BaseException):
    """Raised inside a case by the watchdog (a BaseException, so snippets cannot swallow it)."""


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


def new_namespace(engine: Engine, rng: np.random.Generator,
                  builtin_names: frozenset[str] | None = None,
                  sources: Mapping[str, str] | None = None) -> dict[str, Any]:
    """A fresh case namespace, the `__dict__` of the process's case module (see `snippets`):
    the builtins api.yaml allows (`builtin_names`, default the default spec's), the
    observation helpers and the engine's facades. `sources` maps the file names snippets are
    compiled with to their text, for tools that read a function's source."""
    names = builtin_names if builtin_names is not None else default_builtins()
    namespace: dict[str, Any] = snippets.fresh(sources or {})
    namespace["__builtins__"] = dict(case_builtins(names, engine.machinery_builtins))
    namespace.update(helpers(engine))
    namespace.update(engine.namespace(rng))
    return namespace


class _AdapterFailure(Exception):
    """The adapter itself failed (turning a value into NumPy, naming a node)."""


def observe_case(plan: Plan, engine: Engine, timeout: float | None) -> CaseSeen:
    """Run `plan` on `engine` (in the engine's process) and record what happened."""
    seen = CaseSeen([])
    start = time.perf_counter()
    index: int | None = None
    try:
        with watchdog(timeout):
            namespace: dict[str, Any] = {}
            try:
                engine.reset()
                namespace = new_namespace(engine, np.random.default_rng(plan.seed),
                                          plan.builtins,
                                          {step_filename(plan.id, i): step.run
                                           for i, step in enumerate(plan.steps)})
                for index, step in enumerate(plan.steps):
                    record = _run_step(plan.id, index, step, engine, namespace)
                    seen.steps.append(record)
                    if record.raised is not None and not step.may_raise:
                        break
                    record.values, record.arrays = {}, {}
                    _observe(step, engine, namespace, record)
            finally:
                # Dropping the case's objects closes what it left suspended (a generator
                # inside a `with` block) before the engine's state is restored.
                snippets.empty(namespace)
                engine.reset()
    except CaseTimeout:
        seen.ended, seen.message = "timeout", f"timed out after {timeout:g} s"
    except _AdapterFailure as exc:
        seen.ended, seen.message = "adapter", cut(wire.exception_text(exc))
    except Exception as exc:  # noqa: BLE001 - a crash in one case must not stop the run
        seen.ended = "crash"
        seen.message = cut(f"the runner crashed: {wire.type_name(exc)}: "
                           f"{wire.exception_text(exc)}\n{traceback.format_exc(limit=-8)}")
    if seen.ended is not None:
        seen.ended_in = index
    seen.duration_s = time.perf_counter() - start
    return seen


def step_filename(case_id: str, index: int) -> str:
    """The file name a step's code is compiled with (and its source registered under)."""
    return f"<{case_id} step {index}>"


def _run_step(case_id: str, index: int, step: PlanStep, engine: Engine,
              namespace: dict[str, Any]) -> StepSeen:
    filename = step_filename(case_id, index)
    statements = [(statement, compile(ast.Module([statement], []), filename, "exec"))
                  for statement in ast.parse(step.run).body]
    raised, caught = run_statements(statements, namespace, engine)
    return StepSeen(raised, caught)


def run_statements(statements: Sequence[tuple[ast.stmt, CodeType]], namespace: dict[str, Any],
                   engine: Engine) -> tuple[ExceptionSeen | None, list[WarningSeen]]:
    """Execute compiled statements in order until one raises, recording every warning: what
    was raised (None when all ran) and the warnings caught. The fuzzer calls this too, with
    code compiled once for both engines."""
    raised: ExceptionSeen | None = None
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for position, (_, code) in enumerate(statements):
            try:
                exec(code, namespace)
            except Exception as exc:  # noqa: BLE001 - the engine's error is what the case checks
                raised = exception_seen(exc, code, position, len(statements), engine)
                break
    return raised, [WarningSeen(classes_of(w.category), cut(wire.exception_text(w.message)))
                    for w in caught]


def _observe(step: PlanStep, engine: Engine, namespace: dict[str, Any],
             record: StepSeen) -> None:
    assert record.values is not None
    for name in step.arrays:
        value = namespace.get(name)
        if not engine.is_tensor(value):
            continue
        try:
            record.arrays[name] = tensor_seen(value, engine)
        except Exception as exc:  # noqa: BLE001 - the adapter's failure, said where it is read
            record.arrays[name] = TensorSeen(
                "tensor", wire.text(engine.dtype_name(value)), tuple(int(n) for n in value.shape),
                wire.text(engine.device_name(value)), None,
                cut(f"{wire.type_name(exc)}: {wire.exception_text(exc)}"))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for key in step.observe:
            try:
                observed = eval(compile(key, f"<expect {key}>", "eval"), namespace)
            except Exception as exc:  # noqa: BLE001 - an observation that raises fails the step
                record.values[key] = ObservingRaised(wire.type_name(exc),
                                                     cut(wire.exception_text(exc)))
                continue
            try:
                record.values[key] = seen_value(observed, engine)
            except Exception as exc:  # noqa: BLE001 - the adapter could not read the value back
                raise _AdapterFailure(
                    f"{key}: the engine's adapter failed while reading the observed value back: "
                    f"{wire.type_name(exc)}: {wire.exception_text(exc)}") from exc


def seen_value(value: Any, engine: Engine | None) -> Any:
    """An observed value as plain data: tensors and arrays as `TensorSeen`, NumPy scalars as
    Python numbers, lists and tuples item by item, a number or string of a subclass as the
    plain value, anything else as its type's name and repr (`wire.Opaque`). Iterative, so a
    deeply nested list cannot overflow the stack."""
    done: list[Any] = []
    stack: list[tuple[str, Any]] = [("value", value)]
    while stack:
        kind, item = stack.pop()
        if kind == "list":
            count, maker = item
            made = maker(done[len(done) - count:]) if count else maker(())
            del done[len(done) - count:]
            done.append(made)
            continue
        if isinstance(item, (list, tuple)) and not (engine is not None and engine.is_tensor(item)):
            items = list(item)
            stack.append(("list", (len(items), list if isinstance(item, list) else tuple)))
            stack.extend(("value", child) for child in reversed(items))
            continue
        done.append(_scalar(item, engine))
    return done[0]


def _scalar(value: Any, engine: Engine | None) -> Any:
    if value is None or type(value) in (bool, int, float, TensorSeen):
        return value
    if engine is not None and engine.is_tensor(value):
        return tensor_seen(value, engine)
    if isinstance(value, np.ndarray):
        return _array_seen("array", value, value.dtype.name, "cpu")
    if isinstance(value, np.generic):
        return _scalar(value.item(), engine)
    if isinstance(value, str):
        return cut(wire.text(value))
    if isinstance(value, int):  # a subclass (bool cannot be subclassed)
        return int.__index__(value)
    if isinstance(value, float):
        return float.__float__(value)
    if isinstance(value, complex):
        return complex(value)
    return wire.Opaque(wire.type_name(value),
                       cut(wire.quietly(lambda: wire.text(repr(value)),
                                        f"<unprintable {wire.type_name(value)}>")))


def tensor_seen(tensor: Any, engine: Engine) -> TensorSeen:
    dtype, device = wire.text(engine.dtype_name(tensor)), wire.text(engine.device_name(tensor))
    if not engine.has_values(tensor):
        return TensorSeen("tensor", dtype, tuple(int(n) for n in tensor.shape), device, None)
    # A copy: `to_numpy` may share memory with the tensor, and a later in-place op must not
    # rewrite what an earlier step observed.
    return _array_seen("tensor", np.array(engine.to_numpy(tensor), copy=True), dtype, device)


def _array_seen(kind: str, array: np.ndarray, dtype: str, device: str) -> TensorSeen:
    shape = tuple(int(n) for n in array.shape)
    if array.size > ARRAY_LIMIT:
        return TensorSeen(kind, dtype, shape, device, None,
                          f"{array.size:,} elements, more than the {ARRAY_LIMIT:,} a worker "
                          "sends of one observed value")
    if array.dtype.name not in wire.ARRAY_DTYPES:
        # A dtype of an extension of NumPy's (ml_dtypes' bfloat16): its values as float64.
        try:
            array = array.astype(np.float64)
        except (TypeError, ValueError):
            return TensorSeen(kind, dtype, shape, device, None,
                              f"values of NumPy dtype {array.dtype.name} cannot be sent")
    return TensorSeen(kind, dtype, shape, device, array)


# --- what only the engine's process can read off an exception: its traceback --------------

_RAISE = frozenset(dis.opmap[name] for name in ("RAISE_VARARGS",) if name in dis.opmap)


def exception_seen(exc: BaseException, code: CodeType, statement: int, statements: int,
                   engine: Engine) -> ExceptionSeen:
    files = frozenset(wire.quietly(lambda: list(engine.adapter_files()), []))
    refusals = wire.quietly(lambda: tuple(engine.refusal_types), ())
    return ExceptionSeen(
        classes=classes_of(type(exc)), message=cut(wire.exception_text(exc)),
        statement=statement, statements=statements, position=_position(exc, code),
        by_adapter=_raised_by(exc, files), at_the_call=_at_the_call(exc, code, files),
        adapter_class=_adapter_class(exc, files) if isinstance(exc, AttributeError) else None,
        declared_refusal=bool(refusals) and isinstance(exc, refusals))


def _position(exc: BaseException, code: CodeType) -> tuple[int, int, int, int] | None:
    tb = _frame_of(exc.__traceback__, code)
    if tb is None or not hasattr(code, "co_positions"):
        return None
    positions = list(code.co_positions())
    index = tb.tb_lasti // 2
    if not 0 <= index < len(positions) or None in positions[index]:
        return None
    line, end_line, col, end_col = positions[index]
    return (line, end_line, col, end_col)


def _frame_of(tb: TracebackType | None, code: CodeType) -> TracebackType | None:
    while tb is not None:
        if tb.tb_frame.f_code is code:
            return tb
        tb = tb.tb_next
    return None


def _innermost(tb: TracebackType | None) -> TracebackType | None:
    while tb is not None and tb.tb_next is not None:
        tb = tb.tb_next
    return tb


def _raised_by(exc: BaseException, files: frozenset[str]) -> bool:
    """Whether the adapter's code executed the `raise` (and did not translate an engine
    exception: `raise ... from exc`)."""
    tb = _innermost(exc.__traceback__)
    if tb is None or tb.tb_frame.f_code.co_filename not in files:
        return False
    raw = tb.tb_frame.f_code.co_code
    if not 0 <= tb.tb_lasti < len(raw) or raw[tb.tb_lasti] not in _RAISE:
        return False  # the adapter called something that raised (engine code, C code)
    return exc.__cause__ is None


def _at_the_call(exc: BaseException, code: CodeType, files: frozenset[str]) -> bool:
    tb = _innermost(exc.__traceback__)
    if tb is None:
        return False
    return tb.tb_frame.f_code is code or tb.tb_frame.f_code.co_filename in files


def _adapter_class(exc: AttributeError, files: frozenset[str]) -> str | None:
    """The name of the class an AttributeError's object belongs to, when the adapter defines
    that class (its facade, its tensor wrapper): the gap may be the adapter's, not the
    engine's."""
    owner = getattr(exc, "obj", None)
    if owner is None:
        return None
    cls = owner if isinstance(owner, type) else type(owner)
    module = sys.modules.get(getattr(cls, "__module__", "") or "")
    if getattr(module, "__file__", None) in files:
        return wire.text(cls.__name__)
    return None
