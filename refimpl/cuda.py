"""``refimpl.cuda``: whether the cuda device (CuPy, or an installed stand-in) is usable.

``simulate_unavailable()`` (refimpl only, not in PyTorch) makes a machine with a GPU behave as
a CPU-only build inside a ``with`` block, for testing code paths that must refuse cuda::

    with refimpl.cuda.simulate_unavailable():
        refimpl.ones(1, device="cuda")   # AssertionError: Torch not compiled with CUDA enabled
"""

from __future__ import annotations

from refimpl import _backend

__all__ = ["is_available", "device_count", "simulate_unavailable"]

simulate_unavailable = _backend.cuda_unavailable


def is_available() -> bool:
    """True when tensors can be created with ``device='cuda'``."""
    return _backend.cuda_is_available()


def device_count() -> int:
    return 1 if _backend.cuda_is_available() else 0
