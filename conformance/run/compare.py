"""Observation helpers and the comparison of an observation with its expected value.

The rules are those of INTERPRETING.md "Observation expressions":

    >>> compare(2.0000001, 2, engine=None, arrays={})   # a float within float32 tolerance
    >>> compare(True, 1, engine=None, arrays={})
    'expected 1 (int), observed True (bool)'

`compare` returns None when the observation matches, else a sentence saying how it differs.

A tensor whose values cannot be read (one on PyTorch's meta device: `Engine.has_values` is
False) is observed by its dtype, shape and device only; an expectation of its values fails
with a sentence saying what to expect instead.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from conformance.casefile.sandbox import eval_np
from conformance.engines.base import Engine

# (rtol, atol) per dtype name; integers and bool compare exactly.
TOLERANCES: dict[str, tuple[float, float]] = {
    "float16": (1e-3, 1e-5),
    "bfloat16": (1.6e-2, 1e-5),
    "float32": (1.3e-6, 1e-5),
    "complex64": (1.3e-6, 1e-5),
    "float64": (1e-7, 1e-7),
    "complex128": (1e-7, 1e-7),
}
FLOAT_TOLERANCE = TOLERANCES["float32"]
TENSOR_KEYS = {"value", "dtype", "shape", "device", "np"}


class NoValues:
    """Stands for a tensor without values in the arrays an `{np: ...}` expectation sees."""

    def __init__(self, name: str, device: str) -> None:
        self.name = name
        self.device = device


class Unreadable:
    """Stands for a tensor the adapter failed to turn into NumPy (its error is the message)."""

    def __init__(self, name: str, error: str) -> None:
        self.name = name
        self.error = error


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


def describe(value: Any, engine: Engine | None = None) -> str:
    """A short text for an observed or expected value, for reports."""
    if engine is not None and engine.is_tensor(value):
        if not engine.has_values(value):
            return (f"tensor(..., shape={[int(n) for n in value.shape]}, "
                    f"dtype={engine.dtype_name(value)}, device={engine.device_name(value)})")
        array = engine.to_numpy(value)
        return f"tensor({_array_text(array)}, dtype={engine.dtype_name(value)})"
    if isinstance(value, np.ndarray):
        return f"array({_array_text(value)}, dtype={value.dtype.name})"
    return repr(value)


def _array_text(array: np.ndarray) -> str:
    return np.array2string(array, separator=", ", threshold=20, precision=8)


def compare(observed: Any, expected: Any, engine: Engine | None,
            arrays: Mapping[str, np.ndarray | NoValues]) -> str | None:
    """None when `observed` matches `expected`, else why not. `arrays` feeds `{np: ...}`."""
    is_tensor = engine is not None and engine.is_tensor(observed)
    if is_tensor or isinstance(observed, np.ndarray):
        return _compare_tensor(observed, expected, engine, arrays, is_tensor)
    if isinstance(observed, np.generic):
        observed = observed.item()
    if expected is None:
        return None if observed is None else f"expected None, observed {describe(observed)}"
    if isinstance(expected, Mapping):
        return f"expected a tensor ({_short(expected)}), observed {describe(observed, engine)}"
    if isinstance(expected, list):
        if not isinstance(observed, (list, tuple)):
            return f"expected a sequence {expected!r}, observed {describe(observed, engine)}"
        if len(observed) != len(expected):
            return (f"expected {len(expected)} items, observed {len(observed)}: "
                    f"{describe(observed, engine)}")
        for index, (item, want) in enumerate(zip(observed, expected, strict=True)):
            problem = compare(item, want, engine, arrays)
            if problem is not None:
                return f"item {index}: {problem}"
        return None
    if isinstance(expected, bool) or isinstance(observed, bool):
        if type(observed) is not type(expected) or observed != expected:
            return f"expected {expected!r} ({type(expected).__name__}), observed " \
                   f"{observed!r} ({type(observed).__name__})"
        return None
    if isinstance(expected, (int, float)) and isinstance(observed, float):
        return _close(np.asarray(observed), np.asarray(float(expected)), FLOAT_TOLERANCE, "float")
    if isinstance(expected, float) and isinstance(observed, int):
        return _close(np.asarray(float(observed)), np.asarray(expected), FLOAT_TOLERANCE, "float")
    try:
        equal = bool(observed == expected)
    except Exception:  # noqa: BLE001 - an object that cannot be compared is not equal
        equal = False
    if not equal:
        return f"expected {expected!r}, observed {describe(observed, engine)}"
    return None


def _short(expected: Any) -> str:
    return repr(expected) if len(repr(expected)) < 80 else repr(expected)[:77] + "..."


def _compare_tensor(observed: Any, expected: Any, engine: Engine | None,
                    arrays: Mapping[str, np.ndarray | NoValues], is_tensor: bool) -> str | None:
    array: np.ndarray | None
    if is_tensor:
        dtype = engine.dtype_name(observed)
        device = engine.device_name(observed)
        if engine.has_values(observed):
            array = engine.to_numpy(observed)
            shape = list(array.shape)
        else:
            array, shape = None, [int(n) for n in observed.shape]
    else:
        array, dtype, device = observed, observed.dtype.name, "cpu"
        shape = list(array.shape)
    if expected is None:
        return f"expected None, observed {describe(observed, engine)}"
    spec = expected if isinstance(expected, Mapping) else {"value": expected}
    unknown = set(spec) - TENSOR_KEYS
    if unknown:
        return f"unknown keys {sorted(unknown)} in a tensor expectation (use {sorted(TENSOR_KEYS)})"
    if "dtype" in spec and spec["dtype"] != dtype:
        return f"expected dtype {spec['dtype']}, observed {dtype}"
    if "device" in spec and spec["device"] != device:
        return f"expected device {spec['device']}, observed {device}"
    if "shape" in spec and list(spec["shape"]) != shape:
        return f"expected shape {list(spec['shape'])}, observed {shape}"
    if array is None and ("np" in spec or "value" in spec):
        return no_values_message(shape, dtype, device)
    if "np" in spec:
        code = compile(spec["np"], "<np expectation>", "eval")
        unreadable = [arrays[name] for name in code.co_names
                      if isinstance(arrays.get(name), NoValues)]
        if unreadable:
            return (f"the expected value reads {unreadable[0].name}, a "
                    f"{unreadable[0].device} tensor whose values cannot be read; expect its "
                    "shape/dtype/device instead")
        failed = [arrays[name] for name in code.co_names
                  if isinstance(arrays.get(name), Unreadable)]
        if failed:
            return (f"the expected value reads {failed[0].name}, and the adapter failed to "
                    f"read it back: {failed[0].error}")
        want = np.asarray(eval_np(spec["np"], arrays))
    elif "value" in spec:
        if isinstance(spec["value"], (str, Mapping)):
            return f"expected {spec['value']!r}, observed {describe(observed, engine)}"
        want = np.asarray(spec["value"])
    else:
        return None
    if list(want.shape) != list(array.shape):
        return f"expected shape {list(want.shape)}, observed {list(array.shape)}: " \
               f"{describe(observed, engine)}"
    return _close(array, want, TOLERANCES.get(dtype), dtype)


def _close(actual: np.ndarray, want: np.ndarray, tolerance: tuple[float, float] | None,
           dtype: str) -> str | None:
    if tolerance is None:
        ok = np.array_equal(actual, want)
    else:
        rtol, atol = tolerance
        try:
            ok = bool(np.all(np.isclose(actual, want, rtol=rtol, atol=atol, equal_nan=True)))
        except TypeError:
            ok = False
    if ok:
        return None
    return (f"expected {_array_text(np.asarray(want))}, observed {_array_text(actual)} "
            f"({dtype})")
