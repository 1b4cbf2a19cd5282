"""The adapter interface: everything the runner needs to know about an engine.

An adapter is an `Engine` subclass. The runner never imports an engine itself; it asks the
adapter for a fresh namespace per case and for the few facts it cannot read through the
torch-shaped API (how to turn a tensor into NumPy, what a backward node is called)::

    class MyEngine(Engine):
        name = "mine"
        message_strictness = "type"

        def namespace(self, rng):           # -> {"torch": ..., "nn": ..., "F": ...}
            ...
        def to_numpy(self, tensor):         # -> numpy.ndarray (detached, on the host)
            ...
        def is_tensor(self, obj):
            ...
        def has_values(self, tensor):       # optional: False for tensors without data (meta)
            ...

    def make_engine() -> Engine:            # referenced as `package.module:make_engine`
        return MyEngine()
"""

from __future__ import annotations

import builtins
import os
import sys
from abc import ABC, abstractmethod
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Literal

import numpy as np

Strictness = Literal["exact", "prefix", "type"]
DESCRIBED = ("name", "version", "device", "torch_version", "message_strictness", "level",
             "available", "unavailable_reason")
"""The facts of an engine every report carries (`Engine.describe`)."""


class Engine(ABC):
    """An autograd engine seen through the torch-shaped case language."""

    name: str = "engine"
    version: str = "unknown"
    device: str = "cpu"
    torch_version: str = "2.13.0"
    """The PyTorch version whose messages the engine is held to (selects `messages` ranges)."""
    message_strictness: Strictness = "exact"
    level: str = "full"
    """The conformance level the engine is held to by default: `full` (PyTorch's surface too:
    node names, messages, repr) or `semantics` (values, gradients, flags, which step raises)."""
    features: frozenset[str] = frozenset()
    expectations: Path | None = None
    """The implementer's skip/xfail file (see `conformance.verdict.expectations`), if any."""
    unavailable_reason: str | None = None
    """Why the engine cannot run here (missing package, no CUDA device); None when it can."""
    _adapter_files: frozenset[str] | None = None
    refusal_types: tuple[type[BaseException], ...] = ()
    """The engine's exception classes that mean "refused" although they would otherwise read
    as a missing name or a crash (an engine whose checks raise SystemError, say). Any other
    exception is a refusal unless it means a missing name, a crash, or the adapter's own
    `raise` (`conformance.run.refusals`)."""
    machinery_builtins: tuple[str, ...] = ()
    """Builtins the engine's own machinery looks up in the globals of snippet code, beyond the
    few `api.yaml` allows (Dynamo evaluates its guards there and reads `getattr`). Each is one
    of `conformance.casefile.sandbox.MACHINERY_BUILTINS`: a name case text cannot spell (lint
    refuses it), bound to a guarded version that reaches no name starting with '_'. No engine
    gets Python's builtins as they are."""

    @property
    def available(self) -> bool:
        return self.unavailable_reason is None

    def supports(self, feature: str) -> bool:
        return feature in self.features

    @abstractmethod
    def namespace(self, rng: np.random.Generator) -> dict[str, Any]:
        """Fresh `torch`, `nn` and `F` objects for one case, drawing random data from `rng`."""

    @abstractmethod
    def to_numpy(self, tensor: Any) -> np.ndarray:
        """The tensor's values as a NumPy array on the host, detached from any graph."""

    @abstractmethod
    def is_tensor(self, obj: Any) -> bool:
        """Whether `obj` is one of the engine's tensors."""

    def has_values(self, tensor: Any) -> bool:
        """Whether the tensor's values can be read. A tensor on PyTorch's meta device has a
        shape, a dtype and a device but no data: the runner observes it without `to_numpy`."""
        return True

    def reset(self) -> None:  # noqa: B027 - most engines keep no global state to restore
        """Restore global state between cases (grad mode, warning filters of the engine)."""

    def state_leak(self) -> str | None:
        """After `reset`: the engine state a case changed and `reset` could not restore (a
        mode still on, hooks still installed), or could restore only for now (a `with` block
        something still holds, whose exit would set its old state again in a later case), or
        None. The runner gives the next case a fresh worker when there is any, so no case
        decides another's verdict."""
        return None

    def close(self) -> None:  # noqa: B027 - most engines hold nothing process-wide
        """Undo what the engine switched on in this process for its cases (an engine run in
        the runner's own process, `InProcess`, is closed when its handle is)."""

    def adapter_files(self) -> frozenset[str]:
        """The source files of the adapter's own code (never the engine's): an exception
        whose `raise` runs in them is the adapter's, not a refusal of the engine. The
        default is the runner's package and the modules of this class's hierarchy; an
        adapter that keeps its facades in other modules adds their files."""
        if self._adapter_files is None:
            self._adapter_files = _adapter_files(self)
        return self._adapter_files

    def grad_fn(self, tensor: Any) -> Any:
        return tensor.grad_fn

    def node_name(self, node: Any) -> str:
        return type(node).__name__

    def next_functions(self, node: Any) -> Sequence[Any]:
        """The nodes feeding `node`, in input order; None for an input that needs no grad."""
        return [function for function, _ in node.next_functions]

    def dtype_name(self, tensor: Any) -> str:
        return str(tensor.dtype).removeprefix("torch.")

    def device_name(self, tensor: Any) -> str:
        return str(tensor.device)

    spec: str | None = None
    """How the engine was named when it was loaded (`mygrad`, `pkg.adapter:make_engine`); set
    by `load_engine`, so a repro script can load it the same way."""

    def repro_prelude(self) -> str:
        """Python lines that bind `torch`, `nn`, `F` and the observation helpers (through this
        adapter's own hooks: node names, next_functions, dtype names, to_numpy) in a
        standalone repro script."""
        return (
            "from conformance.run.observe import helpers\n"
            "from conformance.engines import load_engine\n"
            "import numpy as np\n"
            f"_engine = load_engine({(self.spec or self.name)!r})\n"
            "_namespace = _engine.namespace(np.random.default_rng(SEED))\n"
            "torch, nn, F = _namespace['torch'], _namespace['nn'], _namespace['F']\n"
            "globals().update(helpers(_engine))\n"
        )

    def describe(self) -> dict[str, Any]:
        return {key: getattr(self, key) for key in DESCRIBED}


class EngineUnavailable(Engine):
    """Stands in for an engine that cannot be used here; every case is `unsupported`."""

    def __init__(self, name: str, reason: str, *, device: str = "cpu",
                 version: str = "unknown") -> None:
        self.name = name
        self.unavailable_reason = reason
        self.device = device
        self.version = version

    def namespace(self, rng: np.random.Generator) -> dict[str, Any]:
        raise RuntimeError(f"engine {self.name} is unavailable: {self.unavailable_reason}")

    def to_numpy(self, tensor: Any) -> np.ndarray:
        raise RuntimeError(f"engine {self.name} is unavailable: {self.unavailable_reason}")

    def is_tensor(self, obj: Any) -> bool:
        return False


def _adapter_files(engine: Any) -> frozenset[str]:
    """The files of the adapter's own code: the runner's package and every module of the
    engine class's hierarchy (an out-of-tree adapter's module among them)."""
    files = set()
    package = sys.modules[__name__.split(".")[0]]
    root = getattr(package, "__path__", [None])[0]
    for module in list(sys.modules.values()):
        path = getattr(module, "__file__", None)
        if root is not None and isinstance(path, str) and path.startswith(root + os.sep):
            files.add(path)
    for cls in type(engine).__mro__:
        module = sys.modules.get(cls.__module__)
        path = getattr(module, "__file__", None)
        if isinstance(path, str):
            files.add(path)
    files.discard(builtins.__file__ if hasattr(builtins, "__file__") else "")
    return frozenset(files)
