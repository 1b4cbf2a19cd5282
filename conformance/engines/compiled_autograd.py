"""PyTorch's second autograd engine: compiled autograd (`torch._dynamo.compiled_autograd`).

With compiled autograd on, `backward()` and `torch.autograd.grad` do not run the autograd
graph in the C++ engine: they trace it into an FX graph (calling hooks and custom Functions'
backwards as they go), hand that graph to a compiler and run what it returns. Its semantics are
meant to equal eager autograd's; this engine holds it to the same cases as `torch`.

The engine is PyTorch itself with compiled autograd switched on in the process that runs the
cases, for every case, the way PyTorch's own test suite runs `test_autograd.py` under it
(`compiled_autograd._enable(compiler_fn)`). The compiler is `torch.compile` of the traced graph
with a backend chosen by the environment variable `AUTOGRAD_CA_BACKEND`:

- `eager` (default): Dynamo traces the graph and runs it as traced, no code generation; needs
  no C++ compiler;
- `aot_eager`: AOTAutograd too, still no code generation;
- `inductor`: generated C++ (or Triton) kernels, as a `torch.compile` user gets; needs a C++
  compiler on CPU.

`fullgraph=False`, as `torch.compile` defaults: a hook Dynamo cannot trace breaks the graph
instead of failing the backward.

Compiled autograd keeps a cache of traced graphs keyed by the graph's structure, for the life of
the process. `reset` empties it by default, so each case sees a cold cache and no verdict depends
on which case ran before; `AUTOGRAD_CA_KEEP_CACHE=1` keeps it across cases (with
`run --shuffle SEED`, that shows state the cache carries from one backward to another, which the
spec then pins down in a single case).
"""

from __future__ import annotations

import importlib
import os
from pathlib import Path
from typing import Any

from conformance.engines.base import Engine, EngineUnavailable
from conformance.engines.generic import TorchLikeEngine

NAME = "torch-compiled-autograd"
BACKENDS = ("eager", "aot_eager", "inductor")
BACKEND_ENV = "AUTOGRAD_CA_BACKEND"
KEEP_CACHE_ENV = "AUTOGRAD_CA_KEEP_CACHE"
RECOMPILE_LIMIT = 1_000_000
EXPECTATIONS = Path(__file__).resolve().parent.parent / "expectations" / f"{NAME}.yaml"

REPRO_IMPORT = """\
import torch
from torch._dynamo import compiled_autograd
# Compiled autograd on for every backward and autograd.grad below, with {backend!r} as the
# compiler's backend (as the conformance runner runs it).
# compiler's backend (as the conformance runner runs it). The context is kept in a name: a
# context manager nobody holds is collected, and leaving it switches compiled autograd off.
_compiled_autograd = compiled_autograd._enable(
    lambda gm: torch.compile(gm, backend={backend!r}, fullgraph=False))
_compiled_autograd.__enter__()
import atexit
atexit.register(_compiled_autograd.__exit__, None, None, None)"""


class CompiledAutogradEngine(TorchLikeEngine):
    """PyTorch with compiled autograd on for every backward and `autograd.grad`."""

    expectations = EXPECTATIONS
    # Dynamo evaluates its guards in the globals of the code it compiles (a hook a snippet
    # defines): without `getattr` there, the backward fails inside Dynamo (KeyError: getattr),
    # which a user's script never sees. Of every builtin, the suite's cases need only that one.
    machinery_builtins = ("getattr",)

    def __init__(self, backend: str = "eager", keep_cache: bool = False) -> None:
        if backend not in BACKENDS:
            raise ValueError(f"{BACKEND_ENV}={backend!r}: use one of {', '.join(BACKENDS)}")
        super().__init__(NAME, "torch", lacks=frozenset({"cuda"}),
                         repro_import=REPRO_IMPORT.format(backend=backend))
        self.backend = backend
        self.keep_cache = keep_cache
        self._context: Any = None
        if self.torch is not None:
            importlib.import_module("torch._dynamo.compiled_autograd")
            self.version = f"{self.version} (compiled autograd, backend {backend})"

    @property
    def _machinery(self) -> Any:
        """`torch._dynamo.compiled_autograd` (imported when the engine is made)."""
        return self.torch._dynamo.compiled_autograd

    def _compiler(self, graph: Any) -> Any:
        return self.torch.compile(graph, backend=self.backend, fullgraph=False)

    def reset(self) -> None:
        super().reset()
        compiled_autograd = self._machinery
        config = self.torch._dynamo.config
        # FX gives graphs of the same source one code object, and past Dynamo's recompile
        # limit for a code object, Dynamo stops compiling it: later cases would run their
        # graphs uncompiled, depending on how many cases ran before. No limit, then: every
        # case's backward is compiled, as the first one's is.
        config.recompile_limit = config.accumulated_recompile_limit = RECOMPILE_LIMIT
        if self._context is None or not compiled_autograd.compiled_autograd_enabled:
            # Entered once and kept: compiled autograd stays on between cases; entered again
            # when a case switched it off.
            self._context = compiled_autograd._enable(self._compiler)
            self._context.__enter__()
        if not self.keep_cache:
            self.torch._C._dynamo.compiled_autograd.clear_cache()
        # Dynamo warns some things once per process (`warn_once`), as PyTorch's C++ warnings
        # do unless `set_warn_always` (which reset sets): every case sees the warnings a
        # fresh process shows, whatever ran before it.
        once = getattr(getattr(self.torch._dynamo, "utils", None), "warn_once_cache", None)
        if once is not None:
            once.clear()

    def close(self) -> None:
        """Compiled autograd off again in this process (and its graph cache emptied)."""
        context, self._context = self._context, None
        if context is None:
            return
        try:
            context.__exit__(None, None, None)
        except Exception:  # noqa: BLE001 - a case left its own compiled-autograd context open
            self._machinery.reset()  # every context's effect undone at once
        self.torch._C._dynamo.compiled_autograd.clear_cache()

    def _state_changes(self) -> list[str]:
        changes = super()._state_changes()
        if self._context is not None:
            if not self._machinery.compiled_autograd_enabled:
                changes.append("compiled autograd is off")
        return changes


def make_engine() -> Engine:
    """The engine, with the backend and cache policy the environment asks for."""
    backend = os.environ.get(BACKEND_ENV, "eager")
    keep_cache = os.environ.get(KEEP_CACHE_ENV, "") not in ("", "0")
    probe = TorchLikeEngine(NAME, "torch")
    if not probe.available:
        return EngineUnavailable(NAME, probe.unavailable_reason or "unavailable")
    try:
        import torch._dynamo.compiled_autograd  # noqa: F401 - the engine's own machinery
    except ImportError as exc:
        return EngineUnavailable(NAME, f"this PyTorch has no compiled autograd: {exc}",
                                 version=probe.version)
    return CompiledAutogradEngine(backend, keep_cache)


__all__ = ["BACKENDS", "CompiledAutogradEngine", "NAME", "make_engine"]
