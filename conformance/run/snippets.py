"""The module a case's snippets run in.

A case's statements run with a module's `__dict__` as their globals: the module is named `case`
(the name PyTorch's messages show for a class a snippet defines, `<class 'case.Twice'>`), it is
registered in `sys.modules` for the life of the process, and each snippet's source is in
`linecache` under the file name its code was compiled with. So tools that look a function's
module or source up treat snippet code as they treat a user's script: Dynamo (compiled autograd
traces a hook through it and imports the hook's module), `inspect.getsource`, `pickle` of a
class a snippet defines, tracebacks.

One module serves every case a process runs, one case at a time: Dynamo keeps references to a
function's module, so a new module per case would leave it holding the old one, and a stub
module beside the namespace would not hold the globals it looks up. Each case gets the module
emptied and filled afresh (`fresh`).
"""

from __future__ import annotations

import io
import linecache
import sys
import types
from collections.abc import Mapping

MODULE_NAME = "case"
FALLBACK_NAME = "_autograd_conformance_case"
"""Used when the process already has a module named `case` that is not ours (a package of that
name imported by the host program): it is left alone."""

_module: types.ModuleType | None = None
_name = MODULE_NAME
"""The module's name, kept apart: between cases its `__dict__` is empty."""
_registered: list[str] = []


def case_module() -> types.ModuleType:
    """The process's case module, registered in `sys.modules`."""
    global _module, _name
    if _module is None:
        _name = MODULE_NAME if MODULE_NAME not in sys.modules else FALLBACK_NAME
        _module = types.ModuleType(_name)
    if _name not in sys.modules:
        sys.modules[_name] = _module
    return _module


def fresh(sources: Mapping[str, str] = {}) -> dict:  # noqa: B006 - read only
    """The case module's namespace, emptied of the previous case's names, with `sources`
    (compiled file name -> source text) findable through `linecache`."""
    module = case_module()
    namespace = module.__dict__
    empty(namespace)
    namespace.update({"__name__": _name, "__doc__": None, "__package__": None,
                      "__loader__": None, "__spec__": None})
    forget_sources()
    for filename, text in sources.items():
        # Split where Python's tokenizer splits (\n, \r\n, \r), not at every character
        # str.splitlines breaks on, so line numbers in tracebacks point at the right line.
        lines = io.StringIO(text, newline=None).readlines()
        if lines and not lines[-1].endswith("\n"):
            lines[-1] += "\n"
        # No modification time: `linecache.checkcache` keeps entries it cannot stat.
        linecache.cache[filename] = (len(text), None, lines, filename)
        _registered.append(filename)
    return namespace


OWN = ("__builtins__", "__name__", "__doc__", "__package__", "__loader__", "__spec__")
"""The names the runner puts in the module besides the case's (which never start with '_')."""


def empty(namespace: dict) -> None:
    """Drop the case's names and the module's own; leave every other name starting with '_',
    which is Dynamo's. Dynamo puts names into the globals of the code it compiles (a hook a
    snippet defines) and deletes each itself when that code is collected, which may be after
    the case: deleted here, its own deletion would fail (an ignored KeyError printed). Case
    text cannot name anything starting with '_', so no case sees them."""
    for name in [n for n in namespace if not n.startswith("_")] + list(OWN):
        namespace.pop(name, None)


def forget_sources() -> None:
    """Drop the snippet sources registered for the previous case."""
    while _registered:
        linecache.cache.pop(_registered.pop(), None)
