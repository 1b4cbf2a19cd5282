"""What a case must not change in its worker: the engine's own modules and classes.

`owned_attributes` notes, when a worker starts, the identity of every settable-named attribute
of every module and class reachable from the engine's namespace; `tampered` says, after a case,
which of them was rebound (the worker is then replaced before the next case sees the damage).
"""

from __future__ import annotations

import types
from typing import Any

import numpy as np

from conformance.run import wire

_MISSING = object()
_IMMUTABLE_TYPE = 1 << 8
"""`Py_TPFLAGS_IMMUTABLETYPE` in a type's `__flags__`."""


def owned_attributes(engine: Any, names: tuple[str, ...]) -> list[tuple[Any, str, int]]:
    """The engine's modules and classes reachable from its namespace, with the identity of
    every settable-named attribute they hold: a case may assign `x.grad`, but must not reach
    `type(x).grad` or `torch.autograd.Function.grad` through an alias and change them (or
    leave there a generator suspended in a `with` block) for later cases.

    Reachable means by attribute, through any number of modules of the engine's own packages
    (`torch.autograd.graph`, `torch.utils.checkpoint`): every module, class (with its bases)
    and other object with attributes they hold is watched. It runs once per worker (once per
    case with `--fresh-worker`): about 120 ms for PyTorch (2,800 owners) and 8 ms for refimpl
    on an idle 2-core machine; `tampered` then takes about 4 ms and 0.2 ms after each case."""
    if not wire.quietly(lambda: bool(getattr(engine, "available", False)), False):
        return []
    namespace = wire.quietly(lambda: dict(engine.namespace(np.random.default_rng(0))), {})
    watched = []
    for owner in _owners(wire.quietly(lambda: list(namespace.values()), [])):
        attributes = _dict(owner) or {}
        # An object whose class has `__getattr__` may add attributes itself on first use
        # (`torch.ops.aten.<op>`): of it, only what it holds already is watched.
        lazy = _adds_attributes(owner)
        watched += [(owner, name, id(attributes.get(name, _MISSING))) for name in names
                    if not lazy or name in attributes]
    return watched


def _owners(roots: list[Any]) -> list[Any]:
    """The watched objects: everything with attributes the roots hold, whatever defines it
    (an adapter's own classes), then, through the modules of the packages the roots belong to
    (each walked once, so the walk ends), the modules, classes and objects those define."""
    roots = [wire.quietly(lambda root=root: getattr(root, "_module", root), root)  # a facade
             for root in roots]
    packages = {_package(obj) for root in roots for obj in (root, *_values(root))
                if _is_module(obj)}
    owners: dict[int, Any] = {}
    seen: set[int] = set()

    def watch(member: Any, ours: set[str] | None) -> None:
        if id(member) not in seen:
            seen.add(id(member))
            for owner in wire.quietly(lambda: _owners_of(member, ours), ()):
                owners.setdefault(id(owner), owner)

    modules = []
    for root in roots:
        for member in (root, *_values(root)):
            watch(member, None)
            modules += [member] if _is_module(member) and _package(member) in packages else []
    walked: set[int] = set()
    while modules:
        module = modules.pop()
        if id(module) in walked:
            continue
        walked.add(id(module))
        for member in _values(module):
            watch(member, packages)
            if _is_module(member) and _package(member) in packages:
                modules.append(member)
    return list(owners.values())


def _owners_of(obj: Any, packages: set[str] | None) -> tuple[Any, ...]:
    """What of `obj` a case could rebind attributes of (a class: it and its bases), as far
    as it belongs to `packages` (None: whatever package)."""
    def ours(owner: Any) -> bool:
        return packages is None or _package(owner) in packages

    if issubclass(type(obj), type):
        # An immutable type (a builtin's) refuses any assignment.
        return tuple(cls for cls in type.__getattribute__(obj, "__mro__")[:-1]
                     if not cls.__flags__ & _IMMUTABLE_TYPE and ours(cls))
    if _is_module(obj) and _makes_attributes(obj):
        return ()
    if _is_module(obj) or (not callable(obj) and _dict(obj) is not None):
        return (obj,) if ours(obj) else ()
    return ()


def _makes_attributes(module: Any) -> bool:
    """Whether a module's class makes attributes on first access (`torch.ops.aten.grad`
    appears when Dynamo first reads it): its contents change by design, not by a case."""
    cls = type(module)
    return cls is not types.ModuleType and any("__getattr__" in vars(c) for c in cls.__mro__
                                               if c is not types.ModuleType)


def _adds_attributes(obj: Any) -> bool:
    return any("__getattr__" in (_dict(cls) or {}) for cls in type(obj).__mro__)


def _is_module(obj: Any) -> bool:
    # type(), not isinstance(): an object may answer `__class__` with anything.
    return issubclass(type(obj), types.ModuleType)


def _package(obj: Any) -> str:
    """The top-level package that defines a module, a class or another object's class."""
    if _is_module(obj):
        name = (_dict(obj) or {}).get("__name__")
    else:
        cls = obj if issubclass(type(obj), type) else type(obj)
        name = (_dict(cls) or {}).get("__module__")
    return str(name).split(".", 1)[0] if isinstance(name, str) else ""


def _dict(obj: Any) -> dict[str, Any] | types.MappingProxyType | None:
    """`obj.__dict__` without running the object's own `__getattribute__` or `__getattr__`
    (a deprecated object warns, a lazy module imports); None when it has no plain one."""
    try:
        attributes = object.__getattribute__(obj, "__dict__")
    except BaseException:  # noqa: BLE001 - whatever an engine object raises: no attributes
        return None
    return attributes if type(attributes) in (dict, types.MappingProxyType) else None


def _values(obj: Any) -> list[Any]:
    return list((_dict(obj) or {}).values())


def tampered(watched: list[tuple[Any, str, int]]) -> str | None:
    """The first watched attribute that no longer holds the object it held, as `Owner.name`;
    None when every one is as it was."""
    owner_now: Any = _MISSING
    attributes: Any = {}
    for owner, name, identity in watched:
        if owner is not owner_now:  # the names of one owner come one after another
            owner_now, attributes = owner, _dict(owner) or {}
        if id(attributes.get(name, _MISSING)) != identity:
            return f"{_shown(owner)}.{name}"
    return None


def _shown(owner: Any) -> str:
    if issubclass(type(owner), type):
        shown = wire.quietly(lambda: type.__getattribute__(owner, "__name__"), None)
    elif _is_module(owner):
        shown = (_dict(owner) or {}).get("__name__")
    else:
        shown = None
    return wire.quietly(lambda: wire.text(shown or type(owner).__name__), "?")
