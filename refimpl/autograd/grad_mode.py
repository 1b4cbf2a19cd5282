"""Grad mode: whether ops record the backward graph, per thread, as in ``torch.autograd.grad_mode``.

``no_grad``, ``enable_grad`` and ``set_grad_enabled`` work as context managers and as
decorators; ``set_grad_enabled(False)`` also switches the mode when simply called. Every
context restores the previous mode on exit, also when the block raises::

    with refimpl.no_grad():
        y = x * 2          # y.requires_grad is False
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable
from typing import Any, TypeVar

__all__ = ["no_grad", "enable_grad", "set_grad_enabled", "is_grad_enabled"]

F = TypeVar("F", bound=Callable[..., Any])


class _State(threading.local):
    # A new thread starts with grad mode enabled, as in PyTorch.
    enabled = True


_state = _State()


def is_grad_enabled() -> bool:
    """True when ops record the backward graph in this thread."""
    return _state.enabled


class _GradModeContext:
    """Base of the three grad-mode contexts: enter sets ``_mode``, exit restores the old one."""

    _mode: bool

    def __init__(self) -> None:
        self._prev: list[bool] = []

    def __enter__(self) -> None:
        self._prev.append(_state.enabled)
        _state.enabled = self._mode

    def __exit__(self, *exc: object) -> None:
        _state.enabled = self._prev.pop()

    def __call__(self, func: F) -> F:
        mode = self._mode

        @functools.wraps(func)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            with type(self).__new__(type(self))._init_with(mode):
                return func(*args, **kwargs)

        return wrapper  # type: ignore[return-value]

    def _init_with(self, mode: bool) -> _GradModeContext:
        self._prev = []
        self._mode = mode
        return self


class _NoParamContext(_GradModeContext):
    """A context that may also decorate without parentheses: ``@no_grad`` as ``@no_grad()``."""

    def __new__(cls, orig_func: Callable[..., Any] | None = None) -> Any:
        if orig_func is None:
            return super().__new__(cls)
        return super().__new__(cls)._init_with(cls._mode)(orig_func)

    def __init__(self, orig_func: Callable[..., Any] | None = None) -> None:
        super().__init__()


class no_grad(_NoParamContext):  # noqa: N801 - PyTorch's name
    """Disable graph recording inside the block or the decorated function."""

    _mode = False


class enable_grad(_NoParamContext):  # noqa: N801 - PyTorch's name
    """Enable graph recording, also inside a ``no_grad`` block."""

    _mode = True


class set_grad_enabled(_GradModeContext):  # noqa: N801 - PyTorch's name
    """Set grad mode to ``mode``: at once when called, and back to the old mode on block exit."""

    def __init__(self, mode: bool) -> None:
        if not isinstance(mode, bool):
            raise TypeError(
                "set_grad_enabled(): argument 'enabled' (position 1) must be bool, "
                f"not {type(mode).__name__}"
            )
        super().__init__()
        self._mode = mode
        # PyTorch switches the mode in the constructor, so a plain call takes effect.
        self._prev.append(_state.enabled)
        _state.enabled = mode

    def __enter__(self) -> None:
        # The constructor already switched the mode and remembered the previous one.
        if not self._prev:
            super().__enter__()

    def __call__(self, func: F) -> F:
        # Used as a decorator the constructor's switch must not leak into the caller.
        _state.enabled = self._prev.pop()
        return super().__call__(func)
