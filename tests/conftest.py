"""Fixtures shared by the refimpl tests: the cuda backend under test, and a machine without one.

The device tests run twice: once on the strict CuPy stand-in (`tests/refimpl/strict_cupy.py`,
whose arrays refuse implicit conversion to NumPy, so a host/device mix-up fails on any
machine), and once on real CuPy where a CUDA device is usable.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest

import refimpl
from refimpl import _backend

# The stand-in is a plain module beside the core's tests; make it importable as `strict_cupy`
# for every test folder.
sys.path.insert(0, str(Path(__file__).resolve().parent / "refimpl"))
import strict_cupy  # noqa: E402


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
    module = strict_cupy if request.param == "strict_cupy" else _real_cupy()
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
