"""What a case must not change in its worker: the engine's own modules and classes.

`owned_attributes` notes, when a worker starts, the identity of every settable-named attribute
of every module and class reachable from the engine's namespace; `tampered` says, after a case,
which of them was rebound (the worker is then replaced before the next case sees the damage).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from conformance.run import wire

_MISSING = object()


def owned_attributes(engine: Any, names: tuple[str, ...]) -> list[tuple[Any, str, int]]:
    """The engine's modules and classes reachable from its namespace, with the identity of
    every settable-named attribute they hold: a case may assign `x.grad`, but must not reach
    `type(x).grad` or `torch.Tensor.grad` through an alias and change them for later cases."""
    if not wire.quietly(lambda: bool(getattr(engine, "available", False)), False):
        return []
    namespace = wire.quietly(lambda: dict(engine.namespace(np.random.default_rng(0))), {})
    owners: dict[int, Any] = {}
    for root in wire.quietly(lambda: list(namespace.values()), []):
        for obj in (root, *_members(root)):
            for owner in wire.quietly(lambda obj=obj: _owners_of(obj), ()):
                owners.setdefault(id(owner), owner)
    return [(owner, name, id(_own(owner, name))) for owner in owners.values() for name in names]


def _owners_of(obj: Any) -> tuple[Any, ...]:
    if isinstance(obj, type):
        return tuple(obj.__mro__[:-1])
    if hasattr(obj, "__dict__") and not callable(obj):
        return (obj,)
    return ()


def _members(root: Any) -> list[Any]:
    target = wire.quietly(lambda: getattr(root, "_module", root), root)  # a facade over a module
    return wire.quietly(lambda: list(vars(target).values()), [])


def _own(owner: Any, name: str) -> Any:
    return wire.quietly(lambda: vars(owner).get(name, _MISSING), _MISSING)


def tampered(watched: list[tuple[Any, str, int]]) -> str | None:
    """The first watched attribute that no longer holds the object it held, as `Owner.name`;
    None when every one is as it was."""
    for owner, name, identity in watched:
        if id(_own(owner, name)) != identity:
            shown = wire.quietly(lambda owner=owner: wire.text(getattr(owner, "__name__", None)
                                                       or type(owner).__name__), "?")
            return f"{shown}.{name}"
    return None
