"""Fixtures for the refimpl tests: the cuda backend under test."""

from __future__ import annotations

from collections.abc import Iterator
from types import ModuleType

import pytest
import strict_cupy

from refimpl import _backend


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
