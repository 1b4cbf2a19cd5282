"""``refimpl.cuda``: whether the cuda device (CuPy, or an installed stand-in) is usable."""

from __future__ import annotations

from refimpl import _backend

__all__ = ["is_available", "device_count"]


def is_available() -> bool:
    """True when tensors can be created with ``device='cuda'``."""
    return _backend.cuda_is_available()


def device_count() -> int:
    return 1 if _backend.cuda_is_available() else 0
