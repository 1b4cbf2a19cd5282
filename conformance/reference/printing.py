"""Values printed the way PyTorch 2.13 prints them, computed with NumPy alone.

The reference shows each expectation as a line of a PyTorch session, so an expected tensor is
printed as `repr(tensor)` would print it (`torch/_tensor_str.py`: precision 4, line width 80,
integers of a float tensor written `6.`, scientific notation when the magnitudes call for it)::

    >>> tensor_repr([6.0, 12.0])
    'tensor([ 6., 12.])'
    >>> tensor_repr([[1, 2], [3, 4]], dtype="float64")
    'tensor([[1., 2.],\\n        [3., 4.]], dtype=torch.float64)'
    >>> tensor_repr(0.5, device="cuda:0")
    "tensor(0.5000, device='cuda:0')"

Only what an expectation can state is printed: values, dtype and device. Whether the observed
tensor requires grad or has a grad_fn is a separate expectation, so no `grad_fn=` suffix.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

PRECISION = 4
LINEWIDTH = 80
THRESHOLD = 1000
EDGEITEMS = 3
# dtypes whose name `repr` leaves out (with float32 as the default dtype).
DEFAULT_DTYPES = ("float32", "complex64", "int64", "bool")


def infer_dtype(values: Any) -> str:
    """The dtype `torch.tensor(values)` gives: bool, int64, float32 or complex64."""
    flat = list(_flatten(values))
    if flat and all(isinstance(v, (bool, np.bool_)) for v in flat):
        return "bool"
    if flat and all(isinstance(v, (int, np.integer)) and not isinstance(v, bool) for v in flat):
        return "int64"
    if any(isinstance(v, complex) for v in flat):
        return "complex64"
    return "float32"


def _flatten(values: Any) -> Any:
    if isinstance(values, (list, tuple)):
        for item in values:
            yield from _flatten(item)
    else:
        yield values


def _as_array(values: Any, dtype: str) -> np.ndarray:
    if dtype != "bfloat16":
        return np.asarray(values, dtype=dtype)
    # NumPy has no bfloat16: keep the top 16 bits of each float32, rounded to nearest even,
    # as PyTorch's conversion does, and print the result as float32.
    array = np.asarray(values, dtype=np.float32)
    bits = array.view(np.uint32).astype(np.uint64)
    rounded = ((bits + 0x7FFF + ((bits >> 16) & 1)) & 0xFFFF0000).astype(np.uint32)
    return np.where(np.isnan(array), array, rounded.view(np.float32))


def tensor_repr(values: Any, dtype: str | None = None, device: str = "cpu",
                shape: list[int] | None = None) -> str:
    """`repr` of the tensor with these values (nested lists or a number), dtype and device."""
    dtype = dtype or infer_dtype(values)
    array = _as_array(values, dtype)
    if shape is not None:
        array = np.broadcast_to(array, tuple(shape))
    prefix = "tensor("
    suffixes = []
    if device != "cpu":
        suffixes.append(f"device='{device}'")
    if array.size == 0:
        if array.ndim != 1:
            suffixes.append(f"size={tuple(array.shape)}")
        if dtype != "float32":
            suffixes.append(f"dtype=torch.{dtype}")
        body = "[]"
    else:
        if dtype not in DEFAULT_DTYPES:
            suffixes.append(f"dtype=torch.{dtype}")
        body = _tensor_str(array, len(prefix))
    return _add_suffixes(prefix + body, suffixes, len(prefix))


def _add_suffixes(text: str, suffixes: list[str], indent: int) -> str:
    parts = [text]
    last_line = len(text) - text.rfind("\n") + 1
    for suffix in suffixes:
        if last_line + len(suffix) + 2 > LINEWIDTH:
            parts.append(",\n" + " " * indent + suffix)
            last_line = indent + len(suffix)
        else:
            parts.append(", " + suffix)
            last_line += len(suffix) + 2
    parts.append(")")
    return "".join(parts)


class _Formatter:
    """PyTorch's `_Formatter`: one width and one notation for every element of a tensor."""

    def __init__(self, values: np.ndarray) -> None:
        self.floating = values.dtype.kind == "f"
        self.int_mode = True
        self.sci_mode = False
        self.width = 1
        flat = values.reshape(-1)
        if not self.floating:
            for value in flat.tolist():
                self.width = max(self.width, len(_plain(value)))
            return
        finite = flat[np.isfinite(flat) & (flat != 0)]
        if finite.size == 0:
            return
        magnitudes = np.abs(finite).astype(np.float64)
        low, high = float(magnitudes.min()), float(magnitudes.max())
        self.int_mode = bool(np.all(finite == np.ceil(finite)))
        self.sci_mode = high / low > 1000.0 or high > 1.0e8 or low < 1.0e-4
        for value in finite.tolist():
            if self.sci_mode:
                text = f"{value:.{PRECISION}e}"
            elif self.int_mode:
                text = f"{value:.0f}" + "."
            else:
                text = f"{value:.{PRECISION}f}"
            self.width = max(self.width, len(text))

    def format(self, value: Any) -> str:
        if self.floating:
            if self.sci_mode:
                text = f"{value:{self.width}.{PRECISION}e}"
            elif self.int_mode:
                text = f"{value:.0f}"
                if not (math.isinf(value) or math.isnan(value)):
                    text += "."
            else:
                text = f"{value:.{PRECISION}f}"
        else:
            text = _plain(value)
        return " " * (self.width - len(text)) + text


def _plain(value: Any) -> str:
    return str(bool(value)) if isinstance(value, (bool, np.bool_)) else f"{value}"


def _summarised(array: np.ndarray) -> np.ndarray:
    """The elements PyTorch looks at to choose a format when it elides the middle of a tensor."""
    if array.ndim == 0:
        return array
    if array.shape[0] > 2 * EDGEITEMS:
        rows = [*array[:EDGEITEMS], *array[-EDGEITEMS:]]
    else:
        rows = list(array)
    if array.ndim == 1:
        return np.asarray(rows)
    return np.stack([_summarised(row) for row in rows])


def _tensor_str(array: np.ndarray, indent: int) -> str:
    summarise = array.size > THRESHOLD
    chosen = _summarised(array) if summarise else array
    if array.dtype.kind == "c":
        real, imag = _Formatter(chosen.real), _Formatter(chosen.imag)
        return _with_formatter(array, indent, summarise, real, imag)
    return _with_formatter(array, indent, summarise, _Formatter(chosen))


def _element(value: Any, real: _Formatter, imag: _Formatter | None) -> str:
    if imag is None:
        return real.format(value)
    real_text = real.format(value.real)
    imag_text = (imag.format(value.imag) + "j").lstrip()
    return real_text + imag_text if imag_text[0] in "+-" else real_text + "+" + imag_text


def _with_formatter(array: np.ndarray, indent: int, summarise: bool, real: _Formatter,
                    imag: _Formatter | None = None) -> str:
    if array.ndim == 0:
        return _element(array.item(), real, imag)
    if array.ndim == 1:
        length = real.width + 2 + (imag.width + 1 if imag is not None else 0)
        per_line = max(1, math.floor((LINEWIDTH - indent) / length))
        if summarise and array.shape[0] > 2 * EDGEITEMS:
            items = ([_element(v, real, imag) for v in array[:EDGEITEMS].tolist()] + [" ..."]
                     + [_element(v, real, imag) for v in array[-EDGEITEMS:].tolist()])
        else:
            items = [_element(v, real, imag) for v in array.tolist()]
        lines = [", ".join(items[i:i + per_line]) for i in range(0, len(items), per_line)]
        return "[" + ("," + "\n" + " " * (indent + 1)).join(lines) + "]"
    if summarise and array.shape[0] > 2 * EDGEITEMS:
        rows = ([_with_formatter(array[i], indent + 1, summarise, real, imag)
                 for i in range(EDGEITEMS)] + ["..."]
                + [_with_formatter(array[i], indent + 1, summarise, real, imag)
                   for i in range(array.shape[0] - EDGEITEMS, array.shape[0])])
    else:
        rows = [_with_formatter(row, indent + 1, summarise, real, imag) for row in array]
    separator = "," + "\n" * (array.ndim - 1) + " " * (indent + 1)
    return "[" + separator.join(rows) + "]"


def dtype_repr(name: str) -> str:
    """`repr(tensor.dtype)`: `torch.float64`."""
    return f"torch.{name}"


def device_repr(name: str) -> str:
    """`repr(tensor.device)`: `device(type='cuda', index=0)`, `device(type='cpu')`."""
    kind, _, index = name.partition(":")
    return f"device(type='{kind}', index={index})" if index else f"device(type='{kind}')"


def size_repr(shape: list[int]) -> str:
    """`repr(tensor.shape)`: `torch.Size([2, 3])`."""
    return f"torch.Size({list(shape)!r})"


def node_repr(name: str) -> str:
    """How PyTorch shows a backward node object; its address differs from run to run."""
    return f"<{name} object at 0x...>"
