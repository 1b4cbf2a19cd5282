"""Engines run in worker processes: nothing an engine does reaches the runner or another engine.

The parent process owns the cases, the verdicts and the reports; it never imports an engine.
Each engine lives in its own pool of worker processes (`pebble.ProcessPool`), started by the
`forkserver` method so that no engine state is ever inherited. A worker loads the engine once,
then receives one case at a time and sends back JSON text, never a pickled object: a case can
make values whose `repr` is a `str` subclass with its own `__reduce__`, and unpickling such a
value would run code in the runner. The parent rebuilds the `CaseResult` (and the repro script
of a failure: only the worker has the engine's hooks to write it) from that text, checking every
field's type; data it cannot read is an `error` verdict, never a crash of the runner.

What the parent enforces, whatever the engine does:
- a hard timeout per case (the case's own watchdog plus a grace period): a worker that hangs,
  blocks SIGALRM or swallows the watchdog's exception is killed, and the verdict shows the
  Python stack it hung in (`faulthandler` writes it to a file the parent reads);
- a dead worker (a segfault, `os._exit`, `sys.exit`, a kill) costs the case in flight one
  `error` verdict that says what happened, and a fresh worker runs the next case (and writes
  the lost case's repro script);
- memory: each worker's address space is capped (`RLIMIT_AS`, never above the hard limit the
  runner itself was started under), and a worker whose resident memory has grown past half of
  that cap is replaced after the case;
- a case that rebinds an attribute of the engine's own classes or modules (only `settable`
  names can be assigned, e.g. `type(x).grad = None`) gets an `error`, and the worker is
  replaced before the next case sees the damage;
- a case after which the engine reports state it could not restore (`Engine.state_leak`) keeps
  its verdict, and the worker is replaced; `fresh_worker_per_case=True` replaces it after every
  case.

    >>> with EngineWorkers("torch") as torch_engine:                 # doctest: +SKIP
    ...     result = torch_engine.run(case, timeout=10)
    >>> result.verdict                                               # doctest: +SKIP
    'passed'

`pebble` is used rather than `concurrent.futures`: its pool kills a worker whose task times
out and replaces it, and tells a dead worker's exit code apart from an exception.
"""

from __future__ import annotations

import base64
import dataclasses
import faulthandler
import functools
import json
import multiprocessing
import os
import shutil
import signal
import sys
import tempfile
import time
import types
import typing
from collections.abc import Callable, Iterable
from concurrent.futures import CancelledError
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from pebble import ProcessExpired, ProcessPool

from conformance.case import Case
from conformance.engines.base import DESCRIBED
from conformance.executor import DEFAULT_TIMEOUT, VERDICTS, CaseResult, run_case
from conformance.handle import Aborted, EngineHandle

DEFAULT_MEMORY_MB = 4096
GRACE_S = 5.0
"""How long past the case's own timeout the parent waits before it kills the worker."""
START_TIMEOUT_S = 120.0
"""How long a new worker may take to import and set up its engine."""
REPRO_TIMEOUT_S = 30.0
"""How long a fresh worker may take to write the repro script of a case whose worker was lost
(on top of loading the engine); past that the case has no script."""
STACK_LINES = 40
"""How many lines of a hung or crashed worker's Python stack its verdict's message keeps."""


class WorkerStartError(RuntimeError):
    """The engine cannot be loaded in a worker (unknown name, import error, bad factory)."""


class MalformedData(ValueError):
    """What a worker sent is not what the parent asked for (wrong JSON, a wrong type)."""


@dataclass(frozen=True)
class RemoteEngine:
    """What the parent knows of an engine running in workers: the facts reports and verdicts
    need, as plain data. It answers `supports`, `available` and `describe` like an `Engine`."""

    spec: str
    name: str
    version: str
    device: str
    torch_version: str
    message_strictness: str
    level: str
    features: frozenset[str]
    expectations: Path | None
    unavailable_reason: str | None

    @property
    def available(self) -> bool:
        return self.unavailable_reason is None

    def supports(self, feature: str) -> bool:
        return feature in self.features

    def describe(self) -> dict[str, Any]:
        return {**{key: getattr(self, key) for key in DESCRIBED}, "spec": self.spec}


@dataclass(frozen=True, repr=False)
class Opaque:
    """An observed value of no plain type (one of the engine's own objects), as the worker saw
    it: the name of its type and its repr. Two are the same observation when both agree, and
    it prints as the value did."""

    type: str
    text: str

    def __repr__(self) -> str:
        return self.text


# ------------------------------------------------------------------------------------------
# The worker's side. Everything here runs in the worker process, next to the engine.


@dataclass
class _Worker:
    """The state of one worker process (module globals of the worker, never of the parent)."""

    engine: Any = None
    watched: list[tuple[Any, str, int]] = field(default_factory=list)


_WORKER = _Worker()
_MISSING = object()


def _initialize(spec: str, memory_bytes: int | None, settable: tuple[str, ...]) -> None:
    """Runs once in each new worker: cap its memory, load the engine, note what it owns."""
    if memory_bytes:
        import resource

        cap = address_space_cap(memory_bytes)
        try:
            resource.setrlimit(resource.RLIMIT_AS, (cap, cap))
        except (ValueError, OSError):  # the hard limit inherited from the runner still holds
            pass
    # The parent handles Ctrl-C; a worker must not die of it halfway through a case.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    from conformance.engines import load_engine

    try:
        _WORKER.engine = load_engine(spec)
    except BaseException as exc:  # noqa: BLE001 - reported by the first task, in one line
        _WORKER.engine = exc
        return
    _WORKER.watched = _owned_attributes(_WORKER.engine, settable)


def address_space_cap(requested: int) -> int:
    """`requested` bytes, or the hard `RLIMIT_AS` this process runs under when that is lower
    (a container started under `ulimit -v`): a process may lower its limits, never raise
    them, and asking for more kills every worker at start."""
    try:
        import resource

        _, hard = resource.getrlimit(resource.RLIMIT_AS)
    except (ImportError, OSError, ValueError):
        return requested
    if hard == resource.RLIM_INFINITY or hard <= 0:
        return requested
    return min(requested, hard)


def _quietly(read: Callable[[], Any], default: Any) -> Any:
    """`read()`, or `default` when it raises anything: an engine's objects may raise from any
    attribute access, and a scan for tampering must never stop the engine from loading."""
    try:
        return read()
    except BaseException:  # noqa: BLE001 - whatever an engine object raises
        return default


def _owned_attributes(engine: Any, names: tuple[str, ...]) -> list[tuple[Any, str, int]]:
    """The engine's modules and classes reachable from its namespace, with the identity of
    every settable-named attribute they hold: a case may assign `x.grad`, but must not reach
    `type(x).grad` or `torch.Tensor.grad` through an alias and change them for later cases."""
    if not _quietly(lambda: bool(getattr(engine, "available", False)), False):
        return []
    namespace = _quietly(lambda: dict(engine.namespace(np.random.default_rng(0))), {})
    owners: dict[int, Any] = {}
    for root in _quietly(lambda: list(namespace.values()), []):
        for obj in (root, *_members(root)):
            for owner in _quietly(lambda obj=obj: _owners_of(obj), ()):
                owners.setdefault(id(owner), owner)
    return [(owner, name, id(_own(owner, name))) for owner in owners.values() for name in names]


def _owners_of(obj: Any) -> tuple[Any, ...]:
    if isinstance(obj, type):
        return tuple(obj.__mro__[:-1])
    if hasattr(obj, "__dict__") and not callable(obj):
        return (obj,)
    return ()


def _members(root: Any) -> list[Any]:
    target = _quietly(lambda: getattr(root, "_module", root), root)  # a facade over a module
    return _quietly(lambda: list(vars(target).values()), [])


def _own(owner: Any, name: str) -> Any:
    return _quietly(lambda: vars(owner).get(name, _MISSING), _MISSING)


def _tampered() -> str | None:
    for owner, name, identity in _WORKER.watched:
        if id(_own(owner, name)) != identity:
            shown = _quietly(lambda owner=owner: _text(getattr(owner, "__name__", None)
                                                       or type(owner).__name__), "?")
            return f"{shown}.{name}"
    return None


def _state_leak(engine: Any) -> str | None:
    """What the engine says a case left behind (`Engine.state_leak`), or None when clean. A
    check that raises, or answers anything but None or text, counts as a leak."""
    try:
        check = getattr(engine, "state_leak", None)
        leak = check() if check is not None else None
    except BaseException as exc:  # noqa: BLE001 - an engine that cannot tell is not clean
        return f"its state_leak() raised {_type_name(exc)}"
    if leak is None:
        return None
    if isinstance(leak, str):
        return _text(leak) or "state_leak() gave no description"
    return f"its state_leak() answered a {_type_name(leak)}"


def _answer(task: Callable[..., Any], *args: Any) -> bytes:
    """What a worker sends back: JSON of `task(*args)` as plain data, or of what it raised.
    Whatever the engine raised stays in the worker: only its type's name and text cross."""
    try:
        message: dict[str, Any] = {"ok": task(*args)}
    except BaseException as exc:  # noqa: BLE001 - SystemExit too: sent as data, not pickled
        message = {"raised": {"type": _type_name(exc), "message": _exception_text(exc)}}
    try:
        return json.dumps(message).encode()
    except BaseException as exc:  # noqa: BLE001 - a value of no wire format: say so
        failure = exc
    # Not JSON, so the parent calls it malformed, quoting it (`json` itself may be what failed:
    # an engine can change any module in its own process).
    return _quietly(lambda: f"the worker could not encode its answer: {_type_name(failure)}: "
                            f"{_exception_text(failure)}".encode(errors="replace"),
                    b"the worker could not encode its answer")


def _text(value: Any) -> str:
    """An exact `str` with the text of `value`: a `str` subclass is copied by `str.__str__`,
    which no subclass can override, so nothing of the subclass goes on."""
    if isinstance(value, str):
        return str.__str__(value)
    text = str(value)
    return str.__str__(text) if isinstance(text, str) else f"<{_type_name(value)}>"


def _type_name(value: Any) -> str:
    return _quietly(lambda: _text(type(value).__qualname__), "?")


def _exception_text(exc: BaseException) -> str:
    return _quietly(lambda: _text(exc), f"<unprintable {_type_name(exc)}>")


def _describe(features: tuple[str, ...]) -> bytes:
    return _answer(_facts, features)


def _facts(features: tuple[str, ...]) -> dict[str, Any]:
    engine = _WORKER.engine
    if isinstance(engine, BaseException):
        raise WorkerStartError(_exception_text(engine) or _type_name(engine))
    described = engine.describe()
    expectations = getattr(engine, "expectations", None)
    reason = described.get("unavailable_reason")
    return {
        **{key: _text(described.get(key, default)) for key, default in _FACTS.items()},
        "unavailable_reason": None if reason is None else _text(reason),
        "features": [_text(f) for f in features if engine.supports(f)],
        "expectations": _text(os.fspath(expectations)) if expectations else None,
    }


_FACTS = {"name": "engine", "version": "unknown", "device": "cpu", "torch_version": "",
          "message_strictness": "exact", "level": "full"}
"""The text facts of an engine the parent keeps, with what a `describe` without one means."""
_OTHER_FACTS = ("unavailable_reason", "features", "expectations")


def _run(case: Case, seed: int | None, timeout: float, stack_file: str | None) -> bytes:
    """Run one case in the worker: the result, a repro script when it failed, the RSS, and
    why the worker must be replaced after it (None: it may run the next case)."""
    return _answer(_run_case, case, seed, timeout, stack_file)


def _run_case(case: Case, seed: int | None, timeout: float, stack_file: str | None
              ) -> dict[str, Any]:
    from conformance.repro import repro_script

    engine = _WORKER.engine
    if isinstance(engine, BaseException):  # it loaded in the first worker, not in this one
        raise WorkerStartError(f"the engine could not be loaded in a fresh worker: "
                               f"{_type_name(engine)}: {_exception_text(engine)}")
    with _stack_on_hang(stack_file, timeout + GRACE_S / 2):
        result = run_case(case, engine, seed, timeout=timeout)
    replace = None
    tampered = _tampered()
    if tampered is not None:
        result.verdict = "error"
        result.message = (f"the case changed the engine itself ({tampered} was rebound), "
                          "which would change the verdicts of later cases; the worker was "
                          "replaced")
        replace = f"the case rebound {tampered}"
    leak = _state_leak(engine)
    if leak is not None and replace is None:
        replace = f"the case left engine state behind ({leak})"
    script = None
    if result.verdict in ("failed", "error"):
        try:
            script = repro_script(case, engine, result.seed, result.step)
        except Exception as exc:  # noqa: BLE001 - a repro is a help, never a second failure
            script = f"# no repro script: {_type_name(exc)}: {_exception_text(exc)}\n"
    return {"result": _plain(result, CaseResult), "repro": None if script is None
            else _text(script), "resident_bytes": _resident_bytes(), "replace": replace}


class _stack_on_hang:  # noqa: N801 - used as a `with` block, like contextlib's
    """While a case runs: `faulthandler` writes the Python stack of every thread to
    `stack_file` if the case is still running after `delay` seconds (the parent kills the
    worker a little later and reads the file), or at once if the worker crashes."""

    def __init__(self, stack_file: str | None, delay: float) -> None:
        self.stack_file = stack_file
        self.delay = delay
        self.stream: Any = None
        self.was_enabled = False

    def __enter__(self) -> None:
        if not self.stack_file:
            return
        try:
            self.stream = open(self.stack_file, "w", encoding="utf-8")  # noqa: SIM115
            self.was_enabled = faulthandler.is_enabled()
            faulthandler.enable(file=self.stream, all_threads=True)
            faulthandler.dump_traceback_later(self.delay, exit=False, file=self.stream)
        except (OSError, ValueError, OverflowError):  # no stack then, the case still runs
            self.__exit__()

    def __exit__(self, *exc: object) -> None:
        if self.stream is None:
            return
        faulthandler.cancel_dump_traceback_later()
        if self.was_enabled:
            faulthandler.enable(file=sys.stderr, all_threads=True)
        else:
            faulthandler.disable()
        self.stream.close()
        self.stream = None


def _observe(program: Any) -> bytes:
    """The fuzzer's records of `program` on this worker's engine, or the engine's crash."""
    return _answer(_observe_records, program)


def _observe_records(program: Any) -> dict[str, Any]:
    from conformance.fuzz.differential import StepRecord, compile_program
    from conformance.fuzz.runner import observe_safely

    records, crash = observe_safely(compile_program(program), _WORKER.engine)
    return {"records": None if records is None else _plain(records, list[StepRecord]),
            "crash": None if crash is None else _text(crash)}


def _repro(case: Case, seed: int | None, last_step: int | None) -> bytes:
    from conformance.repro import repro_script

    return _answer(lambda: _text(repro_script(case, _WORKER.engine, seed, last_step)))


def _resident_bytes() -> int:
    try:
        with open("/proc/self/statm", encoding="ascii") as stream:
            return int(stream.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return 0


# ------------------------------------------------------------------------------------------
# The wire: dataclasses as JSON-ready plain data and back, driven by their type hints.

_NONE = type(None)
ARRAY_DTYPES = frozenset({"bool", "int8", "int16", "int32", "int64", "uint8", "uint16",
                          "uint32", "uint64", "float16", "float32", "float64", "complex64",
                          "complex128"})
"""The dtypes an observed array may have on the wire (the fuzzer's tensors' values)."""
MAX_DIMS = 64


@functools.cache
def _hints(cls: type) -> dict[str, Any]:
    return typing.get_type_hints(cls)


def _optional(hint: Any) -> Any | None:
    """`X` for a hint `X | None`; None for any other hint."""
    if typing.get_origin(hint) in (typing.Union, types.UnionType):
        others = [arg for arg in typing.get_args(hint) if arg is not _NONE]
        if len(others) == 1 and len(typing.get_args(hint)) == 2:
            return others[0]
        raise TypeError(f"no wire format for {hint!r}")
    return None


def _plain(value: Any, hint: Any) -> Any:
    """`value` (of type `hint`) as JSON-ready data of exact built-in types (in the worker)."""
    inner = _optional(hint)
    if inner is not None:
        return None if value is None else _plain(value, inner)
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if hint is Any:
        return _plain_observation(value)
    if hint is str:
        return _text(value)
    if hint is bool:
        return bool(value)
    if hint is int:
        return int.__index__(int(value))
    if hint is float:
        return float.__float__(float(value))
    if hint is np.ndarray:
        return _plain_array(value)
    if origin in (list, frozenset) or (origin is tuple and args[-1:] == (Ellipsis,)):
        return [_plain(item, args[0]) for item in value]
    if origin is tuple:
        items = list(value)
        if len(items) != len(args):
            raise TypeError(f"{len(items)} items for {hint!r}")
        return [_plain(item, arg) for item, arg in zip(items, args, strict=True)]
    if origin is dict and args[0] is str:
        return {_text(key): _plain(item, args[1]) for key, item in dict(value).items()}
    if isinstance(hint, type) and dataclasses.is_dataclass(hint):
        hints = _hints(hint)
        return {f.name: _plain(getattr(value, f.name), hints[f.name])
                for f in dataclasses.fields(hint)}
    raise TypeError(f"no wire format for {hint!r}")


def _plain_observation(value: Any) -> Any:
    """A fuzzer observation (`differential.normalise`) as plain data: JSON's own types as they
    are, anything else tagged by a one-key object."""
    from conformance.fuzz.differential import RaisedObservation, TensorObservation

    if value is None or type(value) in (bool, int, float, str):
        return value
    if type(value) is TensorObservation:
        return {"tensor": _plain(value, TensorObservation)}
    if type(value) is RaisedObservation:
        return {"raised": _plain(value, RaisedObservation)}
    if type(value) is tuple:
        return {"tuple": [_plain_observation(item) for item in value]}
    if type(value) is complex:
        return {"complex": [value.real, value.imag]}
    return {"object": {"type": _type_name(value),
                       "text": _quietly(lambda: _text(repr(value)),
                                        f"<unprintable {_type_name(value)}>")}}


def _plain_array(value: Any) -> dict[str, Any]:
    array = np.asarray(value)
    if array.dtype.name not in ARRAY_DTYPES:
        raise TypeError(f"an observed array of dtype {array.dtype.name} cannot be sent")
    little = np.ascontiguousarray(array, dtype=array.dtype.newbyteorder("<"))
    return {"dtype": array.dtype.name, "shape": [int(n) for n in array.shape],
            "data": base64.b64encode(little.tobytes()).decode("ascii")}


def _strict(data: Any, hint: Any, where: str) -> Any:
    """The value of type `hint` that `data` (parsed JSON, from a worker) stands for; raises
    MalformedData when it is anything else. Only built-in types and the runner's own classes
    are made, from exact types checked here (in the parent)."""
    inner = _optional(hint)
    if inner is not None:
        return None if data is None else _strict(data, inner, where)
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if hint is Any:
        return _observation(data, where)
    if hint in (str, bool, int):
        return _exact(data, hint, where)
    if hint is float:
        if type(data) is int:
            return float(data)
        return _exact(data, float, where)
    if hint is np.ndarray:
        return _array(data, where)
    if origin in (list, tuple, frozenset):
        items = _exact(data, list, where)
        if origin is tuple and args[-1:] != (Ellipsis,):
            if len(items) != len(args):
                raise MalformedData(f"{where}: {len(items)} items where {len(args)} belong")
            return tuple(_strict(item, arg, f"{where}[{i}]")
                         for i, (item, arg) in enumerate(zip(items, args, strict=True)))
        made = [_strict(item, args[0], f"{where}[{i}]") for i, item in enumerate(items)]
        return made if origin is list else origin(made)
    if origin is dict and args[0] is str:
        return {key: _strict(item, args[1], f"{where}[{key!r}]")
                for key, item in _exact(data, dict, where).items()}
    if isinstance(hint, type) and dataclasses.is_dataclass(hint):
        fields = _exact(data, dict, where)
        hints = _hints(hint)
        names = [f.name for f in dataclasses.fields(hint)]
        if set(fields) != set(names):
            raise MalformedData(f"{where}: fields {sorted(fields)} where {hint.__name__} has "
                                f"{names}")
        return hint(**{name: _strict(fields[name], hints[name], f"{where}.{name}")
                       for name in names})
    raise TypeError(f"no wire format for {hint!r}")


def _exact(data: Any, kind: type, where: str) -> Any:
    if type(data) is not kind:
        raise MalformedData(f"{where}: a {type(data).__name__} where a {kind.__name__} belongs")
    return data


_TAGS = ("tensor", "raised", "tuple", "complex", "object")


def _observation(data: Any, where: str) -> Any:
    from conformance.fuzz.differential import RaisedObservation, TensorObservation

    if data is None or type(data) in (bool, int, float, str):
        return data
    tagged = _exact(data, dict, where)
    if len(tagged) != 1 or next(iter(tagged)) not in _TAGS:
        raise MalformedData(f"{where}: an object with keys {sorted(tagged)} where an "
                            f"observation belongs (one of {', '.join(_TAGS)})")
    tag, inner = next(iter(tagged.items()))
    if tag == "tensor":
        return _strict(inner, TensorObservation, where)
    if tag == "raised":
        return _strict(inner, RaisedObservation, where)
    if tag == "tuple":
        return tuple(_observation(item, f"{where}[{i}]")
                     for i, item in enumerate(_exact(inner, list, where)))
    if tag == "complex":
        real, imag = _strict(inner, tuple[float, float], where)
        return complex(real, imag)
    return _strict(inner, Opaque, where)


def _array(data: Any, where: str) -> np.ndarray:
    fields = _exact(data, dict, where)
    if set(fields) != {"dtype", "shape", "data"}:
        raise MalformedData(f"{where}: an array with fields {sorted(fields)}")
    dtype = _exact(fields["dtype"], str, f"{where}.dtype")
    if dtype not in ARRAY_DTYPES:
        raise MalformedData(f"{where}: an array of dtype {dtype!r}")
    shape = _strict(fields["shape"], tuple[int, ...], f"{where}.shape")
    if len(shape) > MAX_DIMS or any(n < 0 for n in shape):
        raise MalformedData(f"{where}: an array of shape {shape}")
    try:
        raw = base64.b64decode(_exact(fields["data"], str, f"{where}.data"), validate=True)
    except ValueError as exc:
        raise MalformedData(f"{where}: array data that is not base64 ({exc})") from None
    kind = np.dtype(dtype).newbyteorder("<")
    if len(raw) != kind.itemsize * int(np.prod(shape, dtype=object)):
        raise MalformedData(f"{where}: {len(raw)} bytes for a {dtype} array of shape {shape}")
    return np.frombuffer(raw, dtype=kind).astype(np.dtype(dtype)).reshape(shape)


def _fields(data: Any, names: Iterable[str], where: str) -> dict[str, Any]:
    """`data` when it is a JSON object with exactly the keys `names`."""
    found = _exact(data, dict, where)
    if set(found) != set(names):
        raise MalformedData(f"{where}: fields {sorted(found)} where {sorted(names)} belong")
    return found


def _loads(raw: Any) -> Any:
    """The answer of a worker task: what it returned (its `ok`), or raises `_Raised` with the
    type and text of what it raised, or MalformedData."""
    if type(raw) is not bytes:
        raise MalformedData(f"a {type(raw).__name__} where JSON text belongs")
    try:
        message = json.loads(raw)
    except (ValueError, RecursionError, MemoryError) as exc:
        start = raw[:200].decode(errors="replace")
        raise MalformedData(f"text that is not JSON ({type(exc).__name__}: "
                            f"{str(exc)[:200]}): {start!r}") from None
    if type(message) is not dict or len(message) != 1 or next(iter(message)) not in (
            "ok", "raised"):
        raise MalformedData("JSON that is neither an answer nor an error")
    if "raised" in message:
        raised = _fields(message["raised"], ("type", "message"), "raised")
        raise _Raised(_exact(raised["type"], str, "raised.type"),
                      _exact(raised["message"], str, "raised.message"))
    return message["ok"]


class _Raised(Exception):
    """A worker task raised: its type's name and its text (the exception stayed there)."""

    def __init__(self, type_name: str, message: str) -> None:
        super().__init__(f"{type_name}: {message}")
        self.type_name = type_name
        self.message = message


def _outcome(raw: Any) -> dict[str, Any]:
    """The parent's reading of `_run`'s answer."""
    answer = _fields(_loads(raw), ("result", "repro", "resident_bytes", "replace"), "answer")
    result = _strict(answer["result"], CaseResult, "result")
    if result.verdict not in VERDICTS:
        raise MalformedData(f"the verdict {result.verdict!r}")
    return {"result": result,
            "repro": _strict(answer["repro"], str | None, "repro"),
            "resident_bytes": _strict(answer["resident_bytes"], int, "resident_bytes"),
            "replace": _strict(answer["replace"], str | None, "replace")}


def _records(raw: Any) -> tuple[Any, str | None]:
    """The parent's reading of `_observe`'s answer: the records, or the engine's crash."""
    from conformance.fuzz.differential import StepRecord

    answer = _fields(_loads(raw), ("records", "crash"), "answer")
    records = _strict(answer["records"], list[StepRecord] | None, "records")
    crash = _strict(answer["crash"], str | None, "crash")
    if (records is None) == (crash is None):
        raise MalformedData("records and a crash, or neither")
    return records, crash


# ------------------------------------------------------------------------------------------
# The parent's side.


def _context() -> multiprocessing.context.BaseContext:
    method = "forkserver" if "forkserver" in multiprocessing.get_all_start_methods() else "spawn"
    return multiprocessing.get_context(method)


class EngineWorkers(EngineHandle):
    """A pool of worker processes running one engine; `run` is safe to call from one thread.

    `repros` holds the repro scripts of failed or errored cases by case id (the caller takes
    them); `replaced_after` says, by case id, why the worker was replaced after a case that
    kept its verdict (state the engine could not restore) or lost it (tampering, memory)."""

    runs_beside_others = True

    @property
    def facts(self) -> RemoteEngine:
        """What the parent knows of the engine (plain data sent by a worker)."""
        return self.engine

    def __init__(self, spec: str, *, memory_mb: int | None = DEFAULT_MEMORY_MB,
                 features: Iterable[str] = (), settable: Iterable[str] = (),
                 fresh_worker_per_case: bool = False) -> None:
        self.spec = spec
        self.memory_bytes = address_space_cap(memory_mb * 2**20) if memory_mb else None
        self.fresh_worker_per_case = fresh_worker_per_case
        self.repros: dict[str, str] = {}
        """Repro scripts of failed or errored cases, by case id."""
        self.replaced_after: dict[str, str] = {}
        self._initargs = (spec, self.memory_bytes, tuple(settable))
        self._aborted = False
        self._future: Any = None
        self._stacks = tempfile.mkdtemp(prefix="conformance-worker-")
        self._stack_file = os.path.join(self._stacks, "stack.txt")
        self._pool = self._new_pool()
        self.engine = self._start(tuple(features))

    def _new_pool(self) -> ProcessPool:
        return ProcessPool(max_workers=1, context=_context(), initializer=_initialize,
                           initargs=self._initargs)

    def _start(self, features: tuple[str, ...]) -> RemoteEngine:
        future = self._pool.schedule(_describe, args=(features,), timeout=START_TIMEOUT_S)
        try:
            facts = _fields(_loads(future.result()), (*_FACTS, *_OTHER_FACTS), "facts")
            engine = RemoteEngine(
                spec=self.spec,
                **{key: _strict(facts[key], str, key) for key in _FACTS},
                unavailable_reason=_strict(facts["unavailable_reason"], str | None,
                                           "unavailable_reason"),
                features=frozenset(_strict(facts["features"], list[str], "features")),
                expectations=_path(_strict(facts["expectations"], str | None,
                                           "expectations")))
        except _Raised as exc:
            self.close()
            message = exc.message if exc.type_name == WorkerStartError.__name__ else str(exc)
            raise WorkerStartError(f"engine {self.spec!r}: {message}") from None
        except MalformedData as exc:
            self.close()
            raise WorkerStartError(f"engine {self.spec!r}: the worker sent malformed data "
                                   f"while loading it ({exc})") from None
        except BaseException as exc:
            self.close()
            if not future.done() or future.cancelled() or future.exception() is not exc:
                raise  # the user's Ctrl-C in this process
            raise WorkerStartError(f"engine {self.spec!r}: the worker died while loading it "
                                   f"({_what_happened(exc, START_TIMEOUT_S)})") from None
        return engine

    def run(self, case: Case, seed: int | None = None, *,
            timeout: float = DEFAULT_TIMEOUT) -> CaseResult:
        """Run `case` in a worker; whatever happens to the worker, a `CaseResult` comes back."""
        start = time.perf_counter()
        limit = timeout + GRACE_S
        if self._aborted:
            raise Aborted(case.id)
        self._clear_stack()
        self._future = future = self._pool.schedule(
            _run, args=(case, seed, timeout, self._stack_file), timeout=limit)
        if self._aborted:
            # abort() ran between the check above and publishing the future, so it could not
            # cancel this one: cancel it here, or the run waits out the case's whole timeout.
            future.cancel()
            raise Aborted(case.id)
        try:
            raw = future.result()
        except BaseException as exc:
            if self._aborted:
                raise Aborted(case.id) from None
            if not future.done() or future.cancelled() or future.exception() is not exc:
                raise  # the user's Ctrl-C in this process, not the worker's doing
            return self._lost(case, seed, f"the engine's worker process "
                                          f"{_what_happened(exc, limit)}", start, stack=True)
        try:
            outcome = _outcome(raw)
        except _Raised as exc:  # SystemExit and the like, raised by the engine outside a step
            what = exc.message if exc.type_name == WorkerStartError.__name__ else \
                f"the engine raised {exc.type_name}: {exc.message} outside the case's control"
            return self._lost(case, seed, what, start)
        except MalformedData as exc:
            return self._lost(case, seed, f"the engine's worker sent malformed data ({exc})",
                              start)
        result = outcome["result"]
        if outcome["repro"] is not None:
            self.repros[case.id] = outcome["repro"]
        replace = outcome["replace"]
        if replace is None and self.memory_bytes \
                and outcome["resident_bytes"] > self.memory_bytes // 2:
            replace = (f"its resident memory ({outcome['resident_bytes'] // 2**20} MiB) passed "
                       f"half of its {self.memory_bytes // 2**20} MiB cap")
        if replace is not None:
            self.replaced_after[case.id] = replace
        if replace is not None or self.fresh_worker_per_case:
            self._recycle()
        return result

    def _lost(self, case: Case, seed: int | None, what: str, start: float, *,
              stack: bool = False) -> CaseResult:
        """The `error` of a case whose worker died, hung or answered nonsense: the worker is
        replaced, and the fresh one writes the case's repro script."""
        shown = self._read_stack() if stack else ""
        self._recycle()
        message = f"{what}; a fresh worker runs the next case"
        if shown:
            message += f"\nthe worker's Python stack (most recent call first):\n{shown}"
        seed = case.seed if seed is None else seed
        script = self._repro_after_loss(case, seed)
        if script is not None:
            self.repros[case.id] = script
        return CaseResult(case_id=case.id, engine=self.engine.name, verdict="error",
                          topic=case.topic, seed=seed, message=message,
                          duration_s=time.perf_counter() - start)

    def _repro_after_loss(self, case: Case, seed: int) -> str | None:
        """The repro script of a lost case, from the fresh worker (which also has to load the
        engine first); None when it cannot write one in time, or the run was stopped."""
        if self._aborted:
            return None
        self._future = future = self._pool.schedule(_repro, args=(case, seed, None),
                                                    timeout=REPRO_TIMEOUT_S)
        if self._aborted:
            future.cancel()
            return None
        try:
            script = _strict(_loads(future.result(timeout=START_TIMEOUT_S + REPRO_TIMEOUT_S)),
                             str, "repro")
        except (_Raised, MalformedData, CancelledError):
            return None
        except BaseException as exc:
            if isinstance(exc, FutureTimeout) and not future.done():
                future.cancel()  # the fresh worker never got to it: it is still loading
                return None
            if not future.done() or future.cancelled() or future.exception() is not exc:
                raise
            self._recycle()  # that one died or hung too: the next case gets another
            return None
        return script

    def _clear_stack(self) -> None:
        try:
            os.remove(self._stack_file)
        except OSError:
            pass

    def _read_stack(self) -> str:
        """What `faulthandler` wrote in the worker that ran the case, trimmed: each thread's
        frames down to where the worker called the runner (below that it is always the same
        pebble and multiprocessing machinery)."""
        try:
            with open(self._stack_file, encoding="utf-8", errors="replace") as stream:
                written = stream.read(256 * 1024).rstrip().splitlines()
        except OSError:
            return ""
        lines, below_the_case = [], False
        for line in written:
            frame = line.startswith("  File ")
            below_the_case = frame and (below_the_case or f'{os.sep}workers.py"' in line
                                        and f"{os.sep}conformance{os.sep}" in line)
            if not below_the_case:
                lines.append(line)
        if len(lines) > STACK_LINES:
            lines = [*lines[:STACK_LINES], f"  ... ({len(lines) - STACK_LINES} more lines)"]
        return "\n".join(line[:300] for line in lines)

    def _recycle(self) -> None:
        self._pool.stop()
        self._pool.join()
        self._pool = self._new_pool()

    def observe_later(self, program: Any, timeout: float) -> Any:
        """Start observing a fuzzer program; `observed` gives its records or crash."""
        return self._pool.schedule(_observe, args=(program,), timeout=timeout)

    def observed(self, future: Any, timeout: float) -> tuple[Any, str | None]:
        """The records of `observe_later`, or a crash text when the worker died or hung (the
        worker is then replaced, and the fuzzer reports the crash as a finding)."""
        try:
            raw = future.result()
        except BaseException as exc:
            if not future.done() or future.cancelled() or future.exception() is not exc:
                raise
            self._recycle()
            return None, f"the engine's worker process {_what_happened(exc, timeout)}"
        try:
            return _records(raw)
        except _Raised as exc:
            self._recycle()
            return None, f"{exc.type_name}: {exc.message}"
        except MalformedData as exc:
            self._recycle()
            return None, f"the engine's worker sent malformed data ({exc})"

    def repro_script(self, case: Case, seed: int | None = None,
                     last_step: int | None = None) -> str:
        """`conformance.repro.repro_script` for this engine, written where the engine is (a
        comment saying why, when the worker cannot write it)."""
        future = self._pool.schedule(_repro, args=(case, seed, last_step),
                                     timeout=START_TIMEOUT_S)
        try:
            return _strict(_loads(future.result()), str, "repro")
        except (_Raised, MalformedData) as exc:
            return _no_script(str(exc))
        except BaseException as exc:
            if not future.done() or future.cancelled() or future.exception() is not exc:
                raise
            self._recycle()
            return _no_script(f"the engine's worker process "
                              f"{_what_happened(exc, START_TIMEOUT_S)}")

    def abort(self) -> None:
        """Stop the case in flight (from another thread): its `run` raises `Aborted`."""
        self._aborted = True
        future = self._future
        if future is not None:
            future.cancel()  # pebble kills the worker running it

    def close(self) -> None:
        self._pool.stop()
        self._pool.join()
        shutil.rmtree(self._stacks, ignore_errors=True)

    def __enter__(self) -> EngineWorkers:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _no_script(why: str) -> str:
    """A repro "script" that only says why there is none, every line a comment."""
    return "".join(f"# {line}\n" for line in f"no repro script: {why}".splitlines())


def _path(text: str | None) -> Path | None:
    return Path(text) if text else None


def _what_happened(exc: BaseException, limit: float) -> str:
    if isinstance(exc, FutureTimeout):
        return f"did not answer within {limit:g} s and was killed (a hang, or an engine that " \
               "blocks or swallows the case's watchdog)"
    if isinstance(exc, ProcessExpired):
        code = exc.exitcode
        if code is not None and code < 0:
            try:
                name = signal.Signals(-code).name
            except ValueError:
                name = f"signal {-code}"
            killed = " (out of memory?)" if name == "SIGKILL" else ""
            return f"was killed by {name}{killed}"
        return f"exited with status {code}"
    return f"was stopped ({type(exc).__name__}: {exc})"


def facts(engine: Any) -> Any:
    """What a caller reads of an engine (name, features, strictness...), wherever it runs:
    the `RemoteEngine` of engines in workers, the `Engine` itself otherwise."""
    return engine.engine if isinstance(engine, EngineWorkers) else engine
