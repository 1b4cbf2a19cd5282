"""``repr`` of tensors in PyTorch's layout (``torch/_tensor_str.py``'s rules, small tensors).

Floats print with 4 decimals, or without decimals (``3.``) when all are whole numbers, or in
scientific notation when their magnitudes span more than 1000x, exceed 1e8 or go below 1e-4;
every element is padded to the widest. Suffixes follow: device, dtype (when not the default
for its kind), then ``grad_fn=<...>`` or ``requires_grad=True``. A meta tensor has no values:
``tensor(..., device='meta', size=(3,), requires_grad=True)``.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

from refimpl import _dtype

if TYPE_CHECKING:
    from refimpl._tensor import Tensor

_SUMMARIZE_OVER = 1000
_EDGE = 3
_LINE_WIDTH = 80


def _flat(values: Any) -> list[Any]:
    if isinstance(values, list):
        out = []
        for v in values:
            out.extend(_flat(v))
        return out
    return [values]


class _Formatter:
    def __init__(self, values: list[Any], kind: str) -> None:
        self.kind = kind
        self.int_mode = True
        self.sci_mode = False
        if kind == "f":
            finite = [abs(v) for v in values if math.isfinite(v) and v != 0]
            if finite:
                lo, hi = min(finite), max(finite)
                self.int_mode = all(v == math.ceil(v) for v in finite)
                if self.int_mode:
                    self.sci_mode = hi / lo > 1000.0 or hi > 1.0e8
                else:
                    self.sci_mode = hi / lo > 1000.0 or hi > 1.0e8 or lo < 1.0e-4
        # As in PyTorch, only finite non-zero floats set the width; nan/inf/0 are padded to it.
        sized = values if kind != "f" else [v for v in values if math.isfinite(v) and v != 0]
        self.width = max((len(self._raw(v)) for v in sized), default=1)

    def _raw(self, v: Any) -> str:
        if self.kind == "b":
            return str(bool(v))
        if self.kind == "i":
            return str(v)
        if self.kind == "c":
            re, im = _Formatter([v.real], "f"), _Formatter([v.imag], "f")
            sign = "+" if im.format(abs(v.imag)) == im.format(v.imag) else "-"
            return f"{re._raw(v.real)}{sign}{im._raw(abs(v.imag))}j"
        if not math.isfinite(v):
            return str(v)
        if self.sci_mode:
            return f"{v:.4e}"
        if self.int_mode:
            return f"{v:.0f}."
        return f"{v:.4f}"

    def format(self, v: Any) -> str:
        return self._raw(v).rjust(self.width)


def _rows(values: Any, fmt: _Formatter, indent: int, summarize: bool) -> str:
    if not isinstance(values, list):
        return fmt.format(values)
    items: list[Any] = values
    if summarize and len(items) > 2 * _EDGE:
        parts = ([_rows(v, fmt, indent + 1, summarize) for v in items[:_EDGE]] + ["..."]
                 + [_rows(v, fmt, indent + 1, summarize) for v in items[-_EDGE:]])
    else:
        parts = [_rows(v, fmt, indent + 1, summarize) for v in items]
    if items and isinstance(items[0], list):
        depth = 1
        probe = items[0]
        while isinstance(probe, list) and probe and isinstance(probe[0], list):
            depth += 1
            probe = probe[0]
        sep = "," + "\n" * depth + " " * (indent + 1)
        return "[" + sep.join(parts) + "]"
    return "[" + ", ".join(parts) + "]"


def _grad_fn_for_repr(t: Tensor) -> str | None:
    if t._base is not None:
        try:
            t._sync_view()
        except RuntimeError:
            return "Invalid"  # PyTorch's name for the node it cannot rebuild for such a view
    return None if t._grad_node is None else type(t._grad_node).__name__


def tensor_repr(t: Tensor) -> str:
    """``repr(t)`` as PyTorch prints it, e.g. ``tensor(20., grad_fn=<AddBackward0>)``."""
    dtype = t.dtype
    suffixes = []
    if t._device.type != "cpu":
        suffixes.append(f"device='{t._device}'")
    if t._device.type == "meta":
        # No values to show: PyTorch prints ``...`` and the size, and the dtype unless it is
        # the default float type.
        body = "..."
        suffixes.append(f"size={tuple(t.shape)}")
        if dtype is not _dtype.float32:
            suffixes.append(f"dtype={dtype!r}")
    else:
        values = t._host().tolist()
        flat = _flat(values)
        if t._data.size == 0:
            body = "[]"
        else:
            fmt = _Formatter(flat, dtype.kind)
            body = _rows(values, fmt, len("tensor("), len(flat) > _SUMMARIZE_OVER)
        if dtype not in (_dtype.float32, _dtype.complex64, _dtype.int64, _dtype.bool):
            suffixes.append(f"dtype={dtype!r}")
        elif t._data.size == 0 and dtype is not _dtype.float32:
            suffixes.append(f"dtype={dtype!r}")
    node = _grad_fn_for_repr(t)
    if node is not None:
        suffixes.append(f"grad_fn=<{node}>")
    elif t._requires_grad:
        suffixes.append("requires_grad=True")
    if t._fw_grad is not None:
        suffixes.append(f"tangent={tensor_repr(t._fw_grad)}")
    return _join_suffixes("tensor(" + body, suffixes, len("tensor("))


def _join_suffixes(text: str, suffixes: list[str], indent: int) -> str:
    # A suffix that would push the last line past 80 columns starts a new, indented line.
    last_line = len(text) - text.rfind("\n") + 1
    for suffix in suffixes:
        if last_line + len(suffix) + 2 > _LINE_WIDTH:
            text += ",\n" + " " * indent + suffix
            last_line = indent + len(suffix)
        else:
            text += ", " + suffix
            last_line += len(suffix) + 2
    return text + ")"
