"""Engines that misbehave the ways a buggy or hostile engine can, for the worker tests.

Each is refimpl, except that `torch.ones` of exactly 13 elements does the damage (so the other
cases of a run show whether the damage reached them). Imported by the workers as
`faulty_workers:<factory>`. `torch.pid` is the worker's process id, so a case can show which
worker ran it.
"""

from __future__ import annotations

import os
import signal
import sys
import time
import types
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from conformance.engines.generic import TorchLikeEngine

TRIGGER = 13
_LEAK: list[bytearray] = []


class _Faulty(TorchLikeEngine):
    def __init__(self, name: str, fault: Callable[[], Any]) -> None:
        super().__init__(name, "refimpl")
        self._fault = fault

    def namespace(self, rng: np.random.Generator) -> dict[str, Any]:
        namespace = super().namespace(rng)
        ones, fault = namespace["torch"]._module.ones, self._fault

        def faulty_ones(*size: Any, **kwargs: Any) -> Any:
            if size == (TRIGGER,):
                fault()
            return ones(*size, **kwargs)

        namespace["torch"].ones = faulty_ones
        namespace["torch"].pid = os.getpid()
        return namespace


def _hang_with_sigalrm_blocked() -> None:
    signal.signal(signal.SIGALRM, signal.SIG_IGN)
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGALRM})
    while True:
        time.sleep(0.05)


def _swallow_every_timeout() -> None:
    while True:
        try:
            time.sleep(0.05)
        except BaseException:  # noqa: BLE001, S110 - that is the fault
            pass


def _hang_holding_the_pool_lock() -> None:
    """Take the lock of the worker's channel to its pool, then hang: the pool can then never
    stop this worker (what a worker deadlocked in malloc while sending its result does)."""
    import gc

    channel = next(o for o in gc.get_objects() if type(o).__name__ == "WorkerChannel")
    channel.mutex.acquire()
    _hang_with_sigalrm_blocked()


def _segfault() -> None:
    os.kill(os.getpid(), signal.SIGSEGV)


def _leak() -> None:
    _LEAK.append(bytearray(200 * 2**20))


def _hang_and_say_where() -> None:
    Path(os.environ["FAULTY_WORKERS_PID_FILE"]).write_text(str(os.getpid()))
    _hang_with_sigalrm_blocked()


def hangs_and_says_where() -> TorchLikeEngine:
    """Hangs like `hangs`, after writing its worker's process id to $FAULTY_WORKERS_PID_FILE."""
    return _Faulty("hangs-and-says-where", _hang_and_say_where)


def hangs() -> TorchLikeEngine:
    return _Faulty("hangs", _hang_with_sigalrm_blocked)


def hangs_holding_the_pool_lock() -> TorchLikeEngine:
    return _Faulty("hangs-holding-the-pool-lock", _hang_holding_the_pool_lock)


def swallows_timeout() -> TorchLikeEngine:
    return _Faulty("swallows-timeout", _swallow_every_timeout)


def exits() -> TorchLikeEngine:
    return _Faulty("exits", lambda: sys.exit(3))


def hard_exits() -> TorchLikeEngine:
    return _Faulty("hard-exits", lambda: os._exit(4))


def segfaults() -> TorchLikeEngine:
    return _Faulty("segfaults", _segfault)


def leaks() -> TorchLikeEngine:
    return _Faulty("leaks", _leak)


def patches_numpy() -> TorchLikeEngine:
    """Makes every comparison of values succeed, in its own process."""
    np.isclose = lambda a, b, *args, **kwargs: np.ones(np.broadcast(a, b).shape, dtype=bool)
    np.allclose = lambda *args, **kwargs: True
    return TorchLikeEngine("patches-numpy", "refimpl")


def changes_torch_defaults() -> TorchLikeEngine:
    import torch

    torch.set_default_dtype(torch.float64)
    return TorchLikeEngine("changes-torch-defaults", "refimpl")


def cannot_import() -> TorchLikeEngine:
    import no_such_engine_module  # noqa: F401

    return TorchLikeEngine("never", "refimpl")


def _send_text_that_is_not_json() -> None:
    import json

    json.dumps = lambda *args, **kwargs: "not JSON {"


def _send_a_field_of_the_wrong_type() -> None:
    import json

    dumps = json.dumps

    def wrong(message: Any, *args: Any, **kwargs: Any) -> str:
        message["ok"]["seen"]["duration_s"] = "fast"
        return dumps(message, *args, **kwargs)

    json.dumps = wrong


def sends_malformed_text() -> TorchLikeEngine:
    """Replaces, in its own worker, the JSON its answer is sent as."""
    return _Faulty("malformed-text", _send_text_that_is_not_json)


def sends_malformed_fields() -> TorchLikeEngine:
    return _Faulty("malformed-fields", _send_a_field_of_the_wrong_type)


def pid() -> TorchLikeEngine:
    """refimpl with `torch.pid` and nothing wrong."""
    return _Faulty("pid", lambda: None)


class _LeavesState(_Faulty):
    """Says, after the first case each worker runs, that the case left state behind."""

    def __init__(self, name: str, leak: Callable[[], str | None]) -> None:
        super().__init__(name, lambda: None)
        self._leak = leak
        self._cases = 0

    def state_leak(self) -> str | None:
        self._cases += 1
        return self._leak() if self._cases == 1 else None


def _cannot_tell() -> str | None:
    raise RuntimeError("the engine cannot tell")


def leaves_state() -> TorchLikeEngine:
    return _LeavesState("leaves-state", lambda: "grad mode is off")


def cannot_tell_its_state() -> TorchLikeEngine:
    return _LeavesState("cannot-tell-its-state", _cannot_tell)


class _Raises:
    """Looking into it raises, and not AttributeError."""

    @property
    def _module(self) -> Any:
        raise RuntimeError("_module is not for you")

    @property
    def __dict__(self) -> Any:  # type: ignore[override]
        raise RuntimeError("__dict__ is not for you")


class _ClassRaises:
    @property
    def __class__(self) -> Any:  # type: ignore[override]
        raise SystemExit("__class__ is not for you")


class _Facade:
    """A facade over a module whose members raise when looked into."""

    def __init__(self) -> None:
        self._module = types.SimpleNamespace(raises=_Raises(), class_raises=_ClassRaises())


class _RaisingFacade(TorchLikeEngine):
    def namespace(self, rng: np.random.Generator) -> dict[str, Any]:
        return {**super().namespace(rng), "hostile": _Raises(), "facade": _Facade()}


def raising_facade() -> TorchLikeEngine:
    """refimpl with facade attributes whose every access raises (the workers scan the
    namespace for what the engine owns when they load it)."""
    return _RaisingFacade("raising-facade", "refimpl")


def write_marker(path: str) -> str:
    """What a hostile `__reduce__` calls: proof, in a file, that it ran where it was loaded."""
    Path(path).write_text(f"ran in process {os.getpid()}")
    return "unpickled"


def _marked(path: str) -> Any:
    """An object whose repr is a `str` subclass that writes `path` when it is unpickled."""
    text = type("Text", (str,), {"__reduce__": lambda self: (write_marker, (path,))})
    return type("Marked", (), {"__repr__": lambda self: text("marked")})()


class _Marks(_Faulty):
    def namespace(self, rng: np.random.Generator) -> dict[str, Any]:
        return {**super().namespace(rng), "marked": _marked}


def marks() -> TorchLikeEngine:
    """refimpl with `marked(path)`: a value whose repr, once pickled and unpickled, writes a
    file (run a case that observes it and fails, and the repr is the failure's `actual`)."""
    return _Marks("marks", lambda: None)


def observes_nothing() -> TorchLikeEngine:
    """An adapter that replaces, in its own worker, the runner's observing of a case with one
    that runs nothing and says it saw nothing (all an adapter can say: no verdict crosses)."""
    from conformance.run import observe, worker_side

    worker_side.observe_case = lambda plan, engine, timeout: observe.CaseSeen([])
    return TorchLikeEngine("observes-nothing", "refimpl")
