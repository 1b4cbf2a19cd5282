"""The comparison of an observation with its expected value, in the runner (the parent).

The rules are those of INTERPRETING.md "Observation expressions":

    >>> compare(2.0000001, 2, engine=None, arrays={})   # a float within float32 tolerance
    >>> compare(True, 1, engine=None, arrays={})
    'expected 1 (int), observed True (bool)'

`compare` returns None when the observation matches, else a sentence saying how it differs.
Observations arrive as plain data (`conformance.run.observe`): a tensor is a `TensorSeen`. An
engine's own tensor may be given instead, with its engine, and is read the same way.

A tensor whose values cannot be read (one on PyTorch's meta device: `Engine.has_values` is
False) is observed by its dtype, shape and device only; an expectation of its values fails
with a sentence saying what to expect instead.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from conformance.casefile.sandbox import eval_np
from conformance.engines.base import Engine
from conformance.run.observe import TensorSeen, no_values_message, tensor_seen

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


def _seen(value: Any, engine: Engine | None) -> Any:
    """`value` with an engine's tensor or a NumPy array read as a `TensorSeen`."""
    if engine is not None and engine.is_tensor(value):
        return tensor_seen(value, engine)
    if isinstance(value, np.ndarray):
        return TensorSeen("array", value.dtype.name, tuple(value.shape), "cpu", value)
    return value


def describe(value: Any, engine: Engine | None = None) -> str:
    """A short text for an observed or expected value, for reports."""
    value = _seen(value, engine)
    if isinstance(value, TensorSeen):
        if value.values is None:
            return (f"{value.kind}(..., shape={list(value.shape)}, dtype={value.dtype}, "
                    f"device={value.device})")
        return f"{value.kind}({_array_text(value.values)}, dtype={value.dtype})"
    if isinstance(value, (list, tuple)):
        items = ", ".join(describe(item, engine) for item in value)
        return f"[{items}]" if isinstance(value, list) else \
            f"({items}{',' if len(value) == 1 else ''})"
    return repr(value)


def _array_text(array: np.ndarray) -> str:
    return np.array2string(array, separator=", ", threshold=20, precision=8)


def compare(observed: Any, expected: Any, engine: Engine | None,
            arrays: Mapping[str, TensorSeen | np.ndarray]) -> str | None:
    """None when `observed` matches `expected`, else why not. `arrays` feeds `{np: ...}`: the
    case's tensors by name, as `TensorSeen` (or NumPy arrays)."""
    observed = _seen(observed, engine)
    if isinstance(observed, TensorSeen):
        return _compare_tensor(observed, expected, arrays)
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


def _compare_tensor(observed: TensorSeen, expected: Any,
                    arrays: Mapping[str, TensorSeen | np.ndarray]) -> str | None:
    array, dtype, device = observed.values, observed.dtype, observed.device
    shape = list(observed.shape)
    if expected is None:
        return f"expected None, observed {describe(observed)}"
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
        if observed.unreadable is not None:
            return f"the values could not be read back: {observed.unreadable}"
        return no_values_message(shape, dtype, device)
    if "np" in spec:
        code = compile(spec["np"], "<np expectation>", "eval")
        read = {name: _seen(arrays[name], None) for name in code.co_names if name in arrays}
        for name, seen in read.items():
            if seen.values is None and seen.unreadable is None:
                return (f"the expected value reads {name}, a {seen.device} tensor whose "
                        "values cannot be read; expect its shape/dtype/device instead")
            if seen.values is None:
                return (f"the expected value reads {name}, and its values could not be read "
                        f"back: {seen.unreadable}")
        want = np.asarray(eval_np(spec["np"], {name: seen.values for name, seen in read.items()}))
    elif "value" in spec:
        if isinstance(spec["value"], (str, Mapping)):
            return f"expected {spec['value']!r}, observed {describe(observed)}"
        want = np.asarray(spec["value"])
    else:
        return None
    if list(want.shape) != list(array.shape):
        return f"expected shape {list(want.shape)}, observed {list(array.shape)}: " \
               f"{describe(observed)}"
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
