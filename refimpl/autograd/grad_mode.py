"""Grad mode and inference mode: whether ops record the backward graph, per thread, as in
``torch.autograd.grad_mode``.

``no_grad``, ``enable_grad``, ``set_grad_enabled`` and ``inference_mode`` work as context
managers and as decorators; ``set_grad_enabled(False)`` also switches the mode when simply
called. Every context restores the previous modes on exit, also when the block raises::

    with refimpl.no_grad():
        y = x * 2          # y.requires_grad is False

Ops record a node only while grad mode is on and inference mode is off
(``recording()``). Inference mode also marks every tensor allocated inside it as an
inference tensor (``Tensor.is_inference()``), which autograd refuses to save for backward or
to write in place outside inference mode; those rules live with the code they guard
(``refimpl.ops.table``, ``refimpl.ops.inplace``, ``refimpl._tensor``).

As decorators the contexts follow ``torch.utils._contextlib``: a generator function gets the
mode inside each resumption (every ``send``, ``throw`` and ``close``), not between them; any
other callable (an ``async def`` too) gets it for the call itself; a class is wrapped as a
function that constructs it, with PyTorch's FutureWarning.
"""

from __future__ import annotations

import functools
import inspect
import threading
import warnings
from collections.abc import Callable, Generator
from typing import Any, TypeVar

__all__ = ["no_grad", "enable_grad", "set_grad_enabled", "is_grad_enabled", "inference_mode",
           "is_inference_mode_enabled", "recording", "set_multithreading_enabled",
           "is_multithreading_enabled"]

F = TypeVar("F", bound=Callable[..., Any])

CLASS_DECORATION_WARNING = (
    "Decorating classes is deprecated and will be disabled in future versions. You should "
    "only decorate functions or methods. To preserve the current behavior of class "
    "decoration, you can directly decorate the `__init__` method and nothing else."
)


class _State(threading.local):
    # A new thread starts with grad mode enabled and inference mode off, as in PyTorch.
    enabled = True
    inference = False
    multithreading = True


_state = _State()


def is_grad_enabled() -> bool:
    """True when grad mode is on in this thread (ops record unless inference mode is on)."""
    return _state.enabled


def is_inference_mode_enabled() -> bool:
    """True when inference mode is on in this thread."""
    return _state.inference


def is_multithreading_enabled() -> bool:
    """True unless ``set_multithreading_enabled(False)`` is in force in this thread."""
    return _state.multithreading


def recording() -> bool:
    """Whether an op run now records its node: grad mode on and inference mode off (inference
    mode skips autograd entirely, even under ``enable_grad``)."""
    return _state.enabled and not _state.inference


class _ModeContext:
    """Base of the mode contexts: enter applies the mode, exit restores both modes as they
    were. ``_clone`` makes the fresh context a decorator enters on each call."""

    def __init__(self) -> None:
        self._prev: list[tuple[bool, bool]] = []

    def _switch(self) -> None:
        raise NotImplementedError

    def _clone(self) -> _ModeContext:
        return type(self)()

    def __enter__(self) -> None:
        self._prev.append((_state.enabled, _state.inference))
        self._switch()

    def __exit__(self, *exc: object) -> None:
        _state.enabled, _state.inference = self._prev.pop()

    def __call__(self, func: F) -> F:
        if inspect.isclass(func):
            warnings.warn(CLASS_DECORATION_WARNING, FutureWarning, stacklevel=2)
            cls = func

            def func(*args: Any, **kwargs: Any) -> Any:
                return cls(*args, **kwargs)

        factory = self._clone
        if inspect.isgeneratorfunction(func):
            return _wrap_generator(factory, func)  # type: ignore[return-value]

        @functools.wraps(func)
        def decorate_context(*args: Any, **kwargs: Any) -> Any:
            with factory():
                return func(*args, **kwargs)

        return decorate_context  # type: ignore[return-value]


def _wrap_generator(factory: Callable[[], _ModeContext], func: Callable[..., Any]
                    ) -> Callable[..., Generator[Any, Any, Any]]:
    """``func``'s generators with the mode set inside each resumption and restored when they
    yield back to the caller (PyTorch's ``_wrap_generator``)."""

    @functools.wraps(func)
    def generator_context(*args: Any, **kwargs: Any) -> Generator[Any, Any, Any]:
        gen = func(*args, **kwargs)
        try:
            with factory():
                response = gen.send(None)
            while True:
                try:
                    request = yield response
                except GeneratorExit:
                    with factory():
                        gen.close()
                    raise
                except BaseException as exc:
                    with factory():
                        response = gen.throw(exc)
                else:
                    with factory():
                        response = gen.send(request)
        except StopIteration as e:
            return e.value

    return generator_context


class _NoParamContext(_ModeContext):
    """A context that may also decorate without parentheses: ``@no_grad`` as ``@no_grad()``."""

    def __new__(cls, orig_func: Callable[..., Any] | None = None) -> Any:
        if orig_func is None:
            return super().__new__(cls)
        return cls()(orig_func)

    def __init__(self, orig_func: Callable[..., Any] | None = None) -> None:
        super().__init__()


class no_grad(_NoParamContext):  # noqa: N801 - PyTorch's name
    """Disable graph recording inside the block or the decorated function."""

    def _switch(self) -> None:
        _state.enabled = False


class enable_grad(_NoParamContext):  # noqa: N801 - PyTorch's name
    """Enable grad mode, also inside a ``no_grad`` block (not inside inference mode, which
    records nothing whatever grad mode says)."""

    def _switch(self) -> None:
        _state.enabled = True


class set_grad_enabled(_ModeContext):  # noqa: N801 - PyTorch's name
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
        self._prev.append((_state.enabled, _state.inference))
        _state.enabled = mode

    def _switch(self) -> None:
        _state.enabled = self._mode

    def _clone(self) -> _ModeContext:
        clone = object.__new__(set_grad_enabled)
        clone._prev = []
        clone._mode = self._mode
        return clone

    def __enter__(self) -> None:
        # The constructor already switched the mode and remembered the previous one.
        if not self._prev:
            super().__enter__()

    def __call__(self, func: F) -> F:
        # Used as a decorator the constructor's switch must not leak into the caller.
        _state.enabled = self._prev.pop()[0]
        return super().__call__(func)


class inference_mode(_ModeContext):  # noqa: N801 - PyTorch's name
    """Enable (``mode=True``) or disable inference mode inside the block or the decorated
    function. Entering it with ``mode=True`` turns grad mode off, with ``mode=False`` on, as
    PyTorch's ``InferenceMode`` guard does."""

    def __new__(cls, mode: Any = True) -> Any:
        if isinstance(mode, bool):
            return super().__new__(cls)
        # ``@inference_mode`` without parentheses: ``mode`` is the function to decorate.
        return cls()(mode)

    def __init__(self, mode: bool = True) -> None:
        super().__init__()
        self._mode = mode

    def _switch(self) -> None:
        _state.inference = self._mode
        _state.enabled = not self._mode

    def _clone(self) -> _ModeContext:
        return inference_mode(self._mode)


class set_multithreading_enabled:  # noqa: N801 - PyTorch's name
    """Allow (``mode=True``, a new thread's default) or forbid backward to run on per-device
    worker threads: at once when called, and back to the old setting on block exit. refimpl's
    backward always runs on the calling thread, so only ``is_multithreading_enabled`` sees it,
    as on a PyTorch without accelerators::

        with refimpl.autograd.set_multithreading_enabled(False):
            refimpl.autograd.is_multithreading_enabled()   # False
    """

    def __init__(self, mode: bool) -> None:
        self.prev = _state.multithreading
        self.mode = mode
        # PyTorch switches it in the constructor, so a plain call takes effect.
        _state.multithreading = mode

    def __enter__(self) -> None:
        pass

    def __exit__(self, *exc: object) -> None:
        _state.multithreading = self.prev
