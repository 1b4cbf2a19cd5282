"""The wire between a worker and the runner: plain data only.

A worker answers every task with JSON text (`answer`): what the task returned, as exact
built-in types (`plain`), or the type's name and text of what it raised. The parent reads it
with `loads` and rebuilds the runner's own dataclasses from it with `strict`, which checks every
field's type and raises `MalformedData` for anything else. Nothing a case or an engine builds
crosses as an object: a `str` subclass is copied to an exact `str`, an object of no plain type
becomes its type's name and repr (`Opaque`), and arrays travel as dtype, shape and bytes.

The dataclasses of `Any`-typed fields (the fuzzer's observations) are named once by their
owners with `register(tag, cls)`.
"""

from __future__ import annotations

import base64
import dataclasses
import functools
import json
import types
import typing
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

import numpy as np

_TAGGED: dict[str, type] = {}
_BUILT_IN_TAGS = ("tuple", "complex", "object")


def register(tag: str, cls: type) -> type:
    """Let values of the dataclass `cls` travel in `Any`-typed fields, tagged `tag`."""
    if tag in _BUILT_IN_TAGS or _TAGGED.get(tag, cls) is not cls:
        raise ValueError(f"the wire tag {tag!r} is taken")
    _TAGGED[tag] = cls
    return cls


class MalformedData(ValueError):
    """What a worker sent is not what the parent asked for (wrong JSON, a wrong type)."""


@dataclass(frozen=True, repr=False)
class Opaque:
    """An observed value of no plain type (one of the engine's own objects), as the worker saw
    it: the name of its type and its repr. Two are the same observation when both agree, and
    it prints as the value did."""

    type: str
    text: str

    def __repr__(self) -> str:
        return self.text


def quietly(read: Callable[[], Any], default: Any) -> Any:
    """`read()`, or `default` when it raises anything: an engine's objects may raise from any
    attribute access, and a scan for tampering must never stop the engine from loading."""
    try:
        return read()
    except BaseException:  # noqa: BLE001 - whatever an engine object raises
        return default


def answer(task: Callable[..., Any], *args: Any) -> bytes:
    """What a worker sends back: JSON of `task(*args)` as plain data, or of what it raised.
    Whatever the engine raised stays in the worker: only its type's name and text cross."""
    try:
        message: dict[str, Any] = {"ok": task(*args)}
    except BaseException as exc:  # noqa: BLE001 - SystemExit too: sent as data, not pickled
        message = {"raised": {"type": type_name(exc), "message": exception_text(exc)}}
    try:
        return json.dumps(message).encode()
    except BaseException as exc:  # noqa: BLE001 - a value of no wire format: say so
        failure = exc
    # Not JSON, so the parent calls it malformed, quoting it (`json` itself may be what failed:
    # an engine can change any module in its own process).
    return quietly(lambda: f"the worker could not encode its answer: {type_name(failure)}: "
                            f"{exception_text(failure)}".encode(errors="replace"),
                    b"the worker could not encode its answer")


def text(value: Any) -> str:
    """An exact `str` with the text of `value`: a `str` subclass is copied by `str.__str__`,
    which no subclass can override, so nothing of the subclass goes on."""
    if isinstance(value, str):
        return str.__str__(value)
    text = str(value)
    return str.__str__(text) if isinstance(text, str) else f"<{type_name(value)}>"


def type_name(value: Any) -> str:
    return quietly(lambda: text(type(value).__qualname__), "?")


def exception_text(exc: BaseException) -> str:
    return quietly(lambda: text(exc), f"<unprintable {type_name(exc)}>")


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


def plain(value: Any, hint: Any) -> Any:
    """`value` (of type `hint`) as JSON-ready data of exact built-in types (in the worker)."""
    inner = _optional(hint)
    if inner is not None:
        return None if value is None else plain(value, inner)
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if hint is Any:
        return plain_observation(value)
    if hint is str:
        return text(value)
    if hint is bool:
        return bool(value)
    if hint is int:
        return int.__index__(int(value))
    if hint is float:
        return float.__float__(float(value))
    if hint is np.ndarray:
        return _plain_array(value)
    if origin in (list, frozenset) or (origin is tuple and args[-1:] == (Ellipsis,)):
        return [plain(item, args[0]) for item in value]
    if origin is tuple:
        items = list(value)
        if len(items) != len(args):
            raise TypeError(f"{len(items)} items for {hint!r}")
        return [plain(item, arg) for item, arg in zip(items, args, strict=True)]
    if origin is dict and args[0] is str:
        return {text(key): plain(item, args[1]) for key, item in dict(value).items()}
    if isinstance(hint, type) and dataclasses.is_dataclass(hint):
        hints = _hints(hint)
        return {f.name: plain(getattr(value, f.name), hints[f.name])
                for f in dataclasses.fields(hint)}
    raise TypeError(f"no wire format for {hint!r}")


def plain_observation(value: Any) -> Any:
    """A value of a free form (an observation) as plain data: JSON's own types (a list too) as
    they are, anything else tagged by a one-key object: a registered class (`register`), a tuple, a
    complex number, or an object of no plain type as its type's name and repr (`Opaque`)."""
    if value is None or type(value) in (bool, int, float, str):
        return value
    for tag, cls in _TAGGED.items():
        if type(value) is cls:
            return {tag: plain(value, cls)}
    if type(value) is list:
        return [plain_observation(item) for item in value]
    if type(value) is tuple:
        return {"tuple": [plain_observation(item) for item in value]}
    if type(value) is complex:
        return {"complex": [value.real, value.imag]}
    return {"object": {"type": type_name(value),
                       "text": quietly(lambda: text(repr(value)),
                                       f"<unprintable {type_name(value)}>")}}


def _plain_array(value: Any) -> dict[str, Any]:
    array = np.asarray(value)
    if array.dtype.name not in ARRAY_DTYPES:
        raise TypeError(f"an observed array of dtype {array.dtype.name} cannot be sent")
    little = np.ascontiguousarray(array, dtype=array.dtype.newbyteorder("<"))
    return {"dtype": array.dtype.name, "shape": [int(n) for n in array.shape],
            "data": base64.b64encode(little.tobytes()).decode("ascii")}


def strict(data: Any, hint: Any, where: str) -> Any:
    """The value of type `hint` that `data` (parsed JSON, from a worker) stands for; raises
    MalformedData when it is anything else. Only built-in types and the runner's own classes
    are made, from exact types checked here (in the parent)."""
    inner = _optional(hint)
    if inner is not None:
        return None if data is None else strict(data, inner, where)
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if hint is Any:
        return _observation(data, where)
    if hint in (str, bool, int):
        return exact(data, hint, where)
    if hint is float:
        if type(data) is int:
            return float(data)
        return exact(data, float, where)
    if hint is np.ndarray:
        return _array(data, where)
    if origin in (list, tuple, frozenset):
        items = exact(data, list, where)
        if origin is tuple and args[-1:] != (Ellipsis,):
            if len(items) != len(args):
                raise MalformedData(f"{where}: {len(items)} items where {len(args)} belong")
            return tuple(strict(item, arg, f"{where}[{i}]")
                         for i, (item, arg) in enumerate(zip(items, args, strict=True)))
        made = [strict(item, args[0], f"{where}[{i}]") for i, item in enumerate(items)]
        return made if origin is list else origin(made)
    if origin is dict and args[0] is str:
        return {key: strict(item, args[1], f"{where}[{key!r}]")
                for key, item in exact(data, dict, where).items()}
    if isinstance(hint, type) and dataclasses.is_dataclass(hint):
        fields = exact(data, dict, where)
        hints = _hints(hint)
        names = [f.name for f in dataclasses.fields(hint)]
        if set(fields) != set(names):
            raise MalformedData(f"{where}: fields {sorted(fields)} where {hint.__name__} has "
                                f"{names}")
        return hint(**{name: strict(fields[name], hints[name], f"{where}.{name}")
                       for name in names})
    raise TypeError(f"no wire format for {hint!r}")


def exact(data: Any, kind: type, where: str) -> Any:
    if type(data) is not kind:
        raise MalformedData(f"{where}: a {type(data).__name__} where a {kind.__name__} belongs")
    return data




def _observation(data: Any, where: str) -> Any:
    if data is None or type(data) in (bool, int, float, str):
        return data
    if type(data) is list:
        return [_observation(item, f"{where}[{i}]") for i, item in enumerate(data)]
    tagged = exact(data, dict, where)
    tags = (*_TAGGED, *_BUILT_IN_TAGS)
    if len(tagged) != 1 or next(iter(tagged)) not in tags:
        raise MalformedData(f"{where}: an object with keys {sorted(tagged)} where an "
                            f"observation belongs (one of {', '.join(tags)})")
    tag, inner = next(iter(tagged.items()))
    if tag in _TAGGED:
        return strict(inner, _TAGGED[tag], where)
    if tag == "tuple":
        return tuple(_observation(item, f"{where}[{i}]")
                     for i, item in enumerate(exact(inner, list, where)))
    if tag == "complex":
        real, imag = strict(inner, tuple[float, float], where)
        return complex(real, imag)
    return strict(inner, Opaque, where)


def _array(data: Any, where: str) -> np.ndarray:
    fields = exact(data, dict, where)
    if set(fields) != {"dtype", "shape", "data"}:
        raise MalformedData(f"{where}: an array with fields {sorted(fields)}")
    dtype = exact(fields["dtype"], str, f"{where}.dtype")
    if dtype not in ARRAY_DTYPES:
        raise MalformedData(f"{where}: an array of dtype {dtype!r}")
    shape = strict(fields["shape"], tuple[int, ...], f"{where}.shape")
    if len(shape) > MAX_DIMS or any(n < 0 for n in shape):
        raise MalformedData(f"{where}: an array of shape {shape}")
    try:
        raw = base64.b64decode(exact(fields["data"], str, f"{where}.data"), validate=True)
    except ValueError as exc:
        raise MalformedData(f"{where}: array data that is not base64 ({exc})") from None
    kind = np.dtype(dtype).newbyteorder("<")
    if len(raw) != kind.itemsize * int(np.prod(shape, dtype=object)):
        raise MalformedData(f"{where}: {len(raw)} bytes for a {dtype} array of shape {shape}")
    return np.frombuffer(raw, dtype=kind).astype(np.dtype(dtype)).reshape(shape)


def fields(data: Any, names: Iterable[str], where: str) -> dict[str, Any]:
    """`data` when it is a JSON object with exactly the keys `names`."""
    found = exact(data, dict, where)
    if set(found) != set(names):
        raise MalformedData(f"{where}: fields {sorted(found)} where {sorted(names)} belong")
    return found


def loads(raw: Any) -> Any:
    """The answer of a worker task: what it returned (its `ok`), or raises `Raised` with the
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
        raised = fields(message["raised"], ("type", "message"), "raised")
        raise Raised(exact(raised["type"], str, "raised.type"),
                      exact(raised["message"], str, "raised.message"))
    return message["ok"]


class Raised(Exception):
    """A worker task raised: its type's name and its text (the exception stayed there)."""

    def __init__(self, type_name: str, message: str) -> None:
        super().__init__(f"{type_name}: {message}")
        self.type_name = type_name
        self.message = message
