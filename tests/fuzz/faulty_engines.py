"""Engines with one seeded fault each, for the meta-tests (loaded as `faulty_engines:...`).

Both wrap the PyTorch adapter, so everything but the fault is PyTorch's own behaviour.
"""

from __future__ import annotations

import os
import signal
import sys
import time
import weakref
from collections.abc import Callable
from typing import Any

import numpy as np

from conformance.engines import load_engine
from conformance.engines.generic import FACTORIES, TorchLikeEngine


class NoAccumulationTorch(TorchLikeEngine):
    """Leaves made by a tensor factory with requires_grad=True do not accumulate `.grad`:
    each backward pass replaces it (a hook clears `.grad` just before AccumulateGrad runs)."""

    def namespace(self, rng: np.random.Generator) -> dict[str, Any]:
        namespace = super().namespace(rng)
        torch = _ClearingFactories(namespace["torch"])
        return {**namespace, "torch": torch}


class _ClearingFactories:
    def __init__(self, facade: Any) -> None:
        self._facade = facade
        self.nn = facade.nn

    def __getattr__(self, name: str) -> Any:
        value = getattr(self._facade, name)
        if name in FACTORIES or name in ("rand_like", "randn_like"):
            return _clearing(value)
        return value


def _clearing(factory: Any) -> Any:
    def make(*args: Any, **kwargs: Any) -> Any:
        tensor = factory(*args, **kwargs)
        if tensor.requires_grad:
            leaf = weakref.ref(tensor)

            def clear(grad: Any) -> Any:
                target = leaf()
                if target is not None:
                    target.grad = None
                return grad

            tensor.register_hook(clear)
        return tensor

    return make


class RenamedSumTorch(TorchLikeEngine):
    """Calls SumBackward1 (sum over dims) `SumBackward0`, the name of the full sum's node."""

    def node_name(self, node: Any) -> str:
        name = super().node_name(node)
        return "SumBackward0" if name == "SumBackward1" else name


class ExitingTorch(TorchLikeEngine):
    """Calls `leave()` (sys.exit, say) where it would name SumBackward1 (a sum over dims), like
    an adapter that exits on something it does not support."""

    leave: Callable[[], None] = staticmethod(lambda: sys.exit(3))

    def node_name(self, node: Any) -> str:
        name = super().node_name(node)
        if name == "SumBackward1":
            self.leave()
        return name


def _raise_keyboard_interrupt() -> None:
    raise KeyboardInterrupt("raised by the engine, not by Ctrl-C")


def _press_ctrl_c() -> None:
    os.kill(os.getpid(), signal.SIGINT)


def _wrap(cls: type[TorchLikeEngine], name: str) -> TorchLikeEngine:
    base = load_engine("torch")
    assert isinstance(base, TorchLikeEngine)
    return cls(name, "torch", repro_import=base.repro_import)


def make_no_accumulation() -> TorchLikeEngine:
    return _wrap(NoAccumulationTorch, "torch-no-accumulation")


def make_renamed_sum() -> TorchLikeEngine:
    return _wrap(RenamedSumTorch, "torch-renamed-sum")


def make_broken() -> TorchLikeEngine:
    """An engine whose namespace cannot be built (like refimpl without its nn package)."""
    engine = _wrap(TorchLikeEngine, "torch-broken")

    def namespace(rng: np.random.Generator) -> dict[str, Any]:
        raise AttributeError("module 'torch' has no attribute 'nn'")

    engine.namespace = namespace  # type: ignore[method-assign]
    return engine


def make_system_exit() -> TorchLikeEngine:
    return _wrap(ExitingTorch, "torch-system-exit")


def make_keyboard_interrupt() -> TorchLikeEngine:
    engine = _wrap(ExitingTorch, "torch-keyboard-interrupt")
    engine.leave = _raise_keyboard_interrupt  # type: ignore[attr-defined]
    return engine


def make_ctrl_c() -> TorchLikeEngine:
    """An engine during whose run the user presses Ctrl-C (SIGINT to this process)."""
    engine = _wrap(ExitingTorch, "torch-ctrl-c")
    engine.leave = _press_ctrl_c  # type: ignore[attr-defined]
    return engine


def make_exit_on_start() -> TorchLikeEngine:
    """An engine whose every namespace ends the process's interpreter: it cannot run at all."""
    engine = make_system_exit()

    def exit_now(rng: Any) -> None:
        sys.exit("no namespace")

    engine.namespace = exit_now
    return engine


def make_interpreter_killer() -> TorchLikeEngine:
    """An engine that ends its process outright (os._exit, as a crash in C code would) where it
    would name SumBackward1."""
    engine = _wrap(ExitingTorch, "torch-interpreter-killer")
    engine.leave = lambda: os._exit(3)  # type: ignore[attr-defined]
    return engine


def make_hanging() -> TorchLikeEngine:
    """An engine that never finishes a program with a sum over dims (it sleeps)."""
    engine = _wrap(ExitingTorch, "torch-hanging")
    engine.leave = lambda: time.sleep(3600)  # type: ignore[attr-defined]
    return engine
