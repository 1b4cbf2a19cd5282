"""Anomaly detection, as ``torch.autograd.anomaly_mode``: ``detect_anomaly`` and
``set_detect_anomaly``.

While it is on, every backward node created remembers the Python stack of the forward call
that made it; when a node fails during backward, a warning names the node and prints that
stack (or says that there is none), then the error goes on. With ``check_nan`` (the
default) a node whose gradients hold NaN fails with PyTorch's message. The state is
process-wide, as PyTorch's ``AnomalyMode`` is, not per thread::

    with refimpl.autograd.detect_anomaly():
        (x / x).sum().backward()   # RuntimeError: Function 'DivBackward0' returned nan ...
"""

from __future__ import annotations

import os
import sys
import traceback
import warnings
import weakref
from collections.abc import Sequence
from typing import Any

__all__ = ["detect_anomaly", "set_detect_anomaly", "is_anomaly_enabled",
           "is_anomaly_check_nan_enabled"]

ENABLED_WARNING = ("Anomaly Detection has been enabled. This mode will increase the runtime "
                   "and should only be enabled for debugging.")
NO_FORWARD_INFO = ("No forward pass information available. Enable detect anomaly during "
                   "forward pass for more information.")

_enabled = False
_check_nan = True
# For each node created while detection was on: the forward stack that created it, and the
# node whose backward was running then (its parent: a node a create_graph backward recorded).
_traces: weakref.WeakKeyDictionary[Any, tuple[str, Any]] = weakref.WeakKeyDictionary()
# The nodes the engine is running under detection, innermost last.
_evaluating: list[Any] = []
# Frames of refimpl itself are left out of a stack: PyTorch's operators run in C++ and
# leave no Python frames of their own.
_PACKAGE = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep


def is_anomaly_enabled() -> bool:
    """Whether anomaly detection is on."""
    return _enabled


def is_anomaly_check_nan_enabled() -> bool:
    """Whether anomaly detection, when on, fails a node that returns NaN."""
    return _check_nan


def _set(mode: bool, check_nan: bool) -> None:
    global _enabled, _check_nan
    _enabled, _check_nan = mode, check_nan


class detect_anomaly:  # noqa: N801 - PyTorch's name
    """A context that turns anomaly detection on; creating it warns that it slows things down."""

    def __init__(self, check_nan: bool = True) -> None:
        self.prev = _enabled
        self.check_nan = check_nan
        self.prev_check_nan = _check_nan
        warnings.warn(ENABLED_WARNING, UserWarning, stacklevel=2)

    def __enter__(self) -> None:
        _set(True, self.check_nan)

    def __exit__(self, *exc: object) -> None:
        _set(self.prev, self.prev_check_nan)


class set_detect_anomaly:  # noqa: N801 - PyTorch's name
    """Set anomaly detection on or off: at once when called, and back on block exit."""

    def __init__(self, mode: bool, check_nan: bool = True) -> None:
        self.prev = _enabled
        self.prev_check_nan = _check_nan
        _set(mode, check_nan)

    def __enter__(self) -> None:
        pass

    def __exit__(self, *exc: object) -> None:
        _set(self.prev, self.prev_check_nan)


def record(node: Any) -> None:
    """Remember the forward stack that creates ``node`` (called only while detection is on)."""
    frames = [f for f in traceback.extract_stack()[:-1]
              if not os.path.abspath(f.filename).startswith(_PACKAGE)]
    # PyTorch's text ends at the last frame's line: the newline after it goes with the
    # " (Triggered internally at ...)" PyTorch appends, which readers strip.
    _traces[node] = ("".join(traceback.format_list(frames)).rstrip("\n"),
                     _evaluating[-1] if _evaluating else None)


def forward_trace(node: Any) -> str | None:
    """The forward stack remembered for ``node`` (created under anomaly mode), or None."""
    found = _traces.get(node)
    return None if found is None else found[0]


def report(node: Any) -> None:
    """Warn, as PyTorch does before a failing node's error goes on: its forward stack, then
    that of each node whose backward created it (a create_graph backward), outermost last."""
    trace, parent = _traces.get(node, (None, None))
    where = NO_FORWARD_INFO if trace is None else \
        f"Traceback of forward call that caused the error:\n{trace}"
    _warn(f"Error detected in {node.name()}. {where}")
    while parent is not None:
        trace, grandparent = _traces.get(parent, (None, None))
        if trace is None:
            message = f"Error detected in {parent.name()}. {NO_FORWARD_INFO}"
        else:
            message = (f"\n\nPrevious calculation was induced by {parent.name()}. Traceback of "
                       f"forward call that induced the previous calculation:\n{trace}")
        _warn(message)
        parent = grandparent


def _warn(message: str) -> None:
    # The report goes with an error already on its way: with warnings turned into errors,
    # PyTorch prints it to stderr instead, and the original error is the one raised.
    try:
        warnings.warn(message, UserWarning, stacklevel=4)
    except Warning as warning:
        sys.stderr.write(f"{type(warning).__name__}: {warning}\n")


def apply(node: Any, grad: Any) -> Any:
    """Run ``node`` in the engine while detection is on: check its gradients for NaN (the
    engine reports a failure before it goes on)."""
    _evaluating.append(node)
    try:
        grads = node.apply(grad)
        if _check_nan:
            check_nan(node, grads)
    finally:
        _evaluating.pop()
    return grads


def check_nan(node: Any, grads: Sequence[Any]) -> None:
    """PyTorch's error for a node that returned NaN in one of its gradients."""
    from refimpl import _backend

    for i, g in enumerate(grads):
        if g is None or g._device.type == "meta":
            continue
        backend = _backend.backend_of(g._device)
        data = g._data
        if backend.item((data != data).any()):  # NaN is the one value unequal to itself
            raise RuntimeError(f"Function '{node.name()}' returned nan values in its {i}th "
                               "output.")
