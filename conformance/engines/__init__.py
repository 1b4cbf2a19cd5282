"""Engine adapters and how an engine is chosen by name.

`load_engine(spec)` accepts a built-in name (`refimpl`, `refimpl-cuda`, `torch`, `torch-cuda`,
`torch-compiled-autograd`),
a name registered by a package under the entry point group `autograd_conformance.engines`
(for example in `pyproject.toml`)::

    [project.entry-points."autograd_conformance.engines"]
    mygrad = "conformance.engines.mygrad_adapter:make_engine"

or `module:factory`, a callable that returns an `Engine`. An engine that cannot run here
(package missing, no CUDA device) is returned as `EngineUnavailable` with the reason.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from importlib.metadata import entry_points
from typing import Any

from conformance.engines.base import Engine, EngineUnavailable, Strictness
from conformance.engines.generic import TorchLikeEngine

ENTRY_POINT_GROUP = "autograd_conformance.engines"
# The third-party adapters this package ships, as pyproject.toml declares them under
# ENTRY_POINT_GROUP; listed here too so their names work from a checkout that is not installed.
SHIPPED = {
    "mygrad": "conformance.engines.mygrad_adapter:make_engine",
    "tinygrad": "conformance.engines.tinygrad_adapter:make_engine",
    "jax": "conformance.engines.jax_adapter:make_engine",
    "paddle": "conformance.engines.paddle_adapter:make_engine",
}

__all__ = [
    "ENTRY_POINT_GROUP", "Engine", "EngineError", "EngineUnavailable", "Strictness",
    "TorchLikeEngine", "builtin_names", "load_engine",
]


class EngineError(ValueError):
    """An engine name that resolves to nothing, or a factory that does not build an Engine."""


def _cuda_usable(module: Any) -> bool:
    # Both PyTorch and refimpl answer through `cuda.is_available()`; refimpl's answer covers
    # CuPy with a GPU as well as a stand-in backend installed by tests.
    return bool(module.cuda.is_available())


def _make_torch_like(name: str, module: str, default_device: str | None = None) -> Engine:
    repro_import = "import torch" if module == "torch" else f"import {module} as torch"
    probe = TorchLikeEngine(name, module, repro_import=repro_import)
    if not probe.available:
        return EngineUnavailable(name, probe.unavailable_reason or "unavailable")
    has_cuda = _cuda_usable(probe.torch)
    if default_device is not None and not has_cuda:
        return EngineUnavailable(name, f"no usable CUDA device for {module}",
                                 device=default_device, version=probe.version)
    lacks = frozenset() if has_cuda else frozenset({"cuda"})
    return TorchLikeEngine(name, module, default_device=default_device, lacks=lacks,
                           repro_import=repro_import)


def _compiled_autograd() -> Engine:
    # Imported on demand: only this engine needs Dynamo's modules loaded.
    from conformance.engines.compiled_autograd import make_engine

    return make_engine()


def _torch_func_tape() -> Engine:
    from conformance.engines.torch_func_adapter import make_engine

    return make_engine()


BUILTINS: dict[str, Callable[[], Engine]] = {
    "refimpl": lambda: _make_torch_like("refimpl", "refimpl"),
    "refimpl-cuda": lambda: _make_torch_like("refimpl-cuda", "refimpl", "cuda"),
    "torch": lambda: _make_torch_like("torch", "torch"),
    "torch-cuda": lambda: _make_torch_like("torch-cuda", "torch", "cuda"),
    "torch-compiled-autograd": _compiled_autograd,
    "torch-func-tape": _torch_func_tape,
}


def builtin_names() -> list[str]:
    return list(BUILTINS)


def plugin_names() -> list[str]:
    return sorted({ep.name for ep in entry_points(group=ENTRY_POINT_GROUP)} | set(SHIPPED))


def load_engine(spec: str) -> Engine:
    """The engine named by `spec`: built-in name, entry point name, or `module:factory`."""
    engine = _load(spec)
    engine.spec = spec
    return engine


def _load(spec: str) -> Engine:
    if spec in BUILTINS:
        return BUILTINS[spec]()
    factory: Callable[[], Any] | None = None
    for ep in entry_points(group=ENTRY_POINT_GROUP):
        if ep.name == spec:
            factory = _import(ep.value, spec)
            break
    if factory is None and spec in SHIPPED:
        factory = _import(SHIPPED[spec], spec)
    if factory is None and ":" in spec:
        factory = _import(spec, spec)
    if factory is None:
        known = ", ".join(builtin_names() + plugin_names())
        raise EngineError(f"unknown engine {spec!r}: use one of {known} or module:factory")
    engine = factory()
    if not isinstance(engine, Engine):
        raise EngineError(f"engine factory {spec!r} returned {type(engine).__name__}, "
                          "not a conformance.engines.Engine")
    return engine


def _import(target: str, spec: str) -> Callable[[], Any]:
    module_name, _, attribute = target.partition(":")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise EngineError(f"engine {spec!r}: cannot import {module_name}: {exc}") from exc
    factory = module
    for part in attribute.split("."):
        factory = getattr(factory, part, None)
        if factory is None:
            raise EngineError(f"engine {spec!r}: {module_name} has no attribute {attribute!r}")
    if not callable(factory):
        raise EngineError(f"engine {spec!r}: {target} is not callable")
    return factory
