"""Engines that misbehave the ways a buggy or hostile engine can, for the worker tests.

Each is refimpl, except that `torch.ones` of exactly 13 elements does the damage (so the other
cases of a run show whether the damage reached them). Imported by the workers as
`faulty_workers:<factory>`.
"""

from __future__ import annotations

import os
import signal
import sys
import time
from collections.abc import Callable
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


def _segfault() -> None:
    os.kill(os.getpid(), signal.SIGSEGV)


def _leak() -> None:
    _LEAK.append(bytearray(200 * 2**20))


def hangs() -> TorchLikeEngine:
    return _Faulty("hangs", _hang_with_sigalrm_blocked)


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
