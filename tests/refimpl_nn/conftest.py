"""Fixtures for the refimpl.nn tests: the cuda backend (strict stand-in or real CuPy)."""

from __future__ import annotations

import importlib.util
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest

import refimpl
from refimpl import _backend

_STAND_IN = Path(__file__).resolve().parent.parent / "refimpl" / "strict_cupy.py"


def _strict_cupy() -> ModuleType:
    # The refimpl core's stand-in, loaded by path so this folder works on its own.
    spec = importlib.util.spec_from_file_location("nn_strict_cupy", _STAND_IN)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _real_cupy() -> ModuleType | None:
    try:
        import cupy
    except ImportError:
        return None
    try:
        return cupy if cupy.cuda.runtime.getDeviceCount() > 0 else None
    except Exception:  # no driver or no device: CuPy raises its own runtime errors
        return None


@pytest.fixture(params=["strict_cupy", "cupy"])
def cuda_backend(request: pytest.FixtureRequest) -> Iterator[ModuleType]:
    """refimpl's cuda device backed by the strict stand-in, or by real CuPy on a GPU."""
    module = _strict_cupy() if request.param == "strict_cupy" else _real_cupy()
    if module is None:
        pytest.skip("real CuPy with a CUDA device is not available on this machine")
    _backend.install_cuda_module(module)
    try:
        yield module
    finally:
        _backend.install_cuda_module(None)


@pytest.fixture
def no_cuda() -> Iterator[None]:
    """A machine where no CUDA device is usable (refimpl's cuda backend refuses)."""
    with refimpl.cuda.simulate_unavailable():
        yield
