"""Small helpers shared by the refimpl tests (graph text, finite differences)."""

from __future__ import annotations

import re
import warnings
from collections.abc import Callable
from typing import Any

import numpy as np


def graph(t: Any) -> str | None:
    """The backward graph as text, e.g. ``AddBackward0(MulBackward0(AccumulateGrad), None)``."""
    if t.grad_fn is None:
        return None

    def text(node: Any) -> str:
        if node is None:
            return "None"
        inner = ", ".join(text(n) for n, _ in node.next_functions)
        return f"{type(node).__name__}({inner})" if inner else type(node).__name__

    return text(t.grad_fn)


def numerical_vjp(f: Callable[[list[np.ndarray]], np.ndarray], arrays: list[np.ndarray],
                  v: np.ndarray, eps: float) -> list[np.ndarray]:
    """Central finite differences of ``sum(f(arrays) * v)`` with respect to each array."""
    grads = []
    for i, a in enumerate(arrays):
        g = np.zeros_like(a)
        for idx in np.ndindex(a.shape):
            plus = [x.copy() for x in arrays]
            minus = [x.copy() for x in arrays]
            plus[i][idx] += eps
            minus[i][idx] -= eps
            g[idx] = (np.sum(f(plus) * v) - np.sum(f(minus) * v)) / (2 * eps)
        grads.append(g)
    return grads


_ADDRESS = re.compile(r" at 0x[0-9a-f]+")
_TRIGGERED = re.compile(r" \(Triggered internally at .*\)$", re.S)


def run_program(lib: Any, code: str) -> dict[str, Any]:
    """Run ``code`` with ``torch`` bound to ``lib``: its ``result`` repr, error and warnings."""
    namespace: dict[str, Any] = {"torch": lib}
    lib.manual_seed(0)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            exec(code, namespace)
            outcome = ("ok", _ADDRESS.sub("", repr(namespace.get("result"))))
        except Exception as exc:  # the error itself is the observation
            outcome = (type(exc).__name__, str(exc))
    warned = [(w.category.__name__, _TRIGGERED.sub("", str(w.message))) for w in caught]
    return {"outcome": outcome, "warnings": warned}
