"""PyTorch's ``TORCH_WARN_ONCE``: warnings shown once per process unless ``warn_always`` is on.

``refimpl.set_warn_always(True)`` makes every such warning repeat, as
``torch.set_warn_always(True)`` does; warnings raised while it is on do not use up the
once-per-process allowance.
"""

from __future__ import annotations

import warnings

__all__ = ["set_warn_always", "is_warn_always_enabled", "warn_once"]

_state = {"always": False}
_shown: set[str] = set()


def set_warn_always(b: bool) -> None:
    """Make warnings that PyTorch emits once per process repeat on every occurrence."""
    _state["always"] = bool(b)


def is_warn_always_enabled() -> bool:
    """Whether ``set_warn_always(True)`` is in effect."""
    return _state["always"]


def warn_once(message: str, category: type[Warning] = UserWarning, stacklevel: int = 2) -> None:
    """Emit ``message`` the first time in this process, or every time under warn_always."""
    if not _state["always"]:
        if message in _shown:
            return
        _shown.add(message)
    warnings.warn(message, category, stacklevel=stacklevel + 1)
