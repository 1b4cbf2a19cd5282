"""A standalone Python script that replays a case on an engine up to the step that failed.

The script imports the engine's own module (`import torch`, `import refimpl as torch`), draws
`torch.rand`/`randn` data from the same NumPy generator the runner uses, runs every step and
prints each observation next to its expected value, so the failure can be studied without the
runner. The steps run in a namespace of their own (`_case`: the engine, the helpers and only the
builtins the case language allows), as in the runner; `python -i repro.py` then `_case["x"]`
shows a case's tensor. (`nn` modules keep the engine's own initial parameters in the script.)

No text of the case is ever source code of the script: each step's snippet and each
observation is a string literal (`repr`), compiled and run by the script itself, so a character
that ends a line for one reader and not for another (U+2028, a form feed, a lone carriage
return) cannot turn part of a comment into a statement. The snippet is shown above its step
as comments, every character that is not printable written as an escape.
"""

from __future__ import annotations

import site
import sys
import sysconfig
from pathlib import Path

from conformance.casefile.case import Case
from conformance.casefile.loader import default_builtins
from conformance.casefile.sandbox import MACHINERY_BUILTINS
from conformance.casefile.vocabulary import HELPERS as HELPER_NAMES
from conformance.engines.base import Engine

_PACKAGE = Path(__file__).resolve().parents[1]  # the whole conformance package

HELPERS = '''
def grad_fn_name(t):
    return None if t.grad_fn is None else type(t.grad_fn).__name__


def node_name(n):
    return None if n is None else type(n).__name__


def graph(t):
    def render(n):
        if n is None:
            return "None"
        children = [f for f, _ in getattr(n, "next_functions", ())]
        inner = ", ".join(render(c) for c in children)
        return type(n).__name__ + (f"({inner})" if children else "")
    return None if t.grad_fn is None else render(t.grad_fn)


def shape(t):
    return list(t.shape)


def dtype(t):
    return str(t.dtype).replace("torch.", "")


def device(t):
    return str(t.device)


def value(t):
    if getattr(t, "is_meta", False):
        raise ValueError("a meta tensor has no values; print its shape, dtype and device")
    t = t.detach().cpu()
    if getattr(t, "_is_zerotensor", lambda: False)():
        t = t.clone()  # an immutable ZeroTensor: read its materialized copy
    return t.numpy()
'''

RANDOM = '''
_rng = np.random.default_rng(SEED)


def _draw(fill, size, dtype=None, requires_grad=False, device=None):
    if len(size) == 1 and not isinstance(size[0], int):
        size = tuple(size[0])
    kwargs = {"dtype": dtype or torch.float32, "requires_grad": requires_grad}
    if device is not None:
        kwargs["device"] = device
    return torch.tensor(fill(tuple(size)), **kwargs)


def _like(fill):
    return lambda t, dtype=None, requires_grad=False, device=None: _draw(
        fill, (tuple(t.shape),), dtype or t.dtype, requires_grad, device or t.device)


def _manual_seed(seed):
    _rng.bit_generator.state = np.random.PCG64(seed).state


# The runner feeds every engine the same numbers: random data comes from NumPy.
torch.rand = lambda *size, **kw: _draw(_rng.random, size, **kw)
torch.randn = lambda *size, **kw: _draw(_rng.standard_normal, size, **kw)
torch.rand_like = _like(_rng.random)
torch.randn_like = _like(_rng.standard_normal)
torch.manual_seed = _manual_seed
'''


RUNNERS = '''

# The case's code runs as the runner runs it: in a namespace of its own, holding the engine, the
# observation helpers and only the builtins the case language allows (and, for an engine whose
# machinery needs one, a guarded getattr that reads nothing private).
def _guarded_getattr(obj, name, *default):
    if not isinstance(name, str) or name.startswith("_"):
        raise AttributeError(f"{name!r}: the case sandbox's getattr reads no private name")
    return getattr(obj, name, *default)


_BUILTINS = {name: getattr(builtins, name) for name in ALLOWED_BUILTINS if hasattr(builtins, name)}
_BUILTINS.update({name: _guarded_getattr for name in MACHINERY_BUILTINS})
_BUILTINS.update(__build_class__=builtins.__build_class__, __import__=builtins.__import__)
_case = {"__name__": "case", "__builtins__": _BUILTINS}
_case.update(globals().get("_namespace") or {"torch": torch, "nn": nn, "F": F})
_case.update({name: globals()[name] for name in HELPER_NAMES})


def _step(source, where):
    # The snippet runs from a string, so nothing in it can be a statement of this script.
    linecache.cache[where] = (len(source), None, source.splitlines(True), where)
    exec(compile(source, where, "exec"), _case)


def _observe(key, where, expected):
    observed = eval(compile(key, f"{where[:-1]} expect>", "eval"), _case)
    print(key, "=", repr(observed), "| expected:", expected)
'''


def repro_script(case: Case, engine: Engine, seed: int | None = None,
                 last_step: int | None = None) -> str:
    """The script for `case` on `engine`, running steps up to `last_step` (all when None)."""
    seed = case.seed if seed is None else seed
    steps = case.steps if last_step is None else case.steps[: last_step + 1]
    lines = [
        f"# Repro: case {_comment(case.id)} on engine {_comment(engine.name)} "
        f"{_comment(str(engine.version))} (seed {int(seed)}).",
        f"# Rule: {_comment(case.rule)}",
        "import builtins",
        "import linecache",
        "import warnings",
        "",
        "import numpy as np",
        "",
        f"SEED = {int(seed)}",
    ]
    folders = adapter_folders(engine)
    if folders:
        # The runner found the adapter through its own sys.path (its working folder,
        # PYTHONPATH): the script must find it from wherever it is run.
        lines += ["", "import sys", ""]
        lines += [f"sys.path.insert(0, {_literal(folder)})" for folder in reversed(folders)]
        lines.append("")
    lines.append(engine.repro_prelude().rstrip())
    if engine.repro_prelude().startswith("import"):
        # A torch-like module imported on its own: the script draws the runner's numbers and
        # defines the helpers itself. An adapter's prelude brings both from the adapter.
        lines += [RANDOM.rstrip(), HELPERS.rstrip()]
    allowed = sorted(str.__str__(name) for name in (
        case.builtins if case.builtins is not None else default_builtins()) if name.isidentifier())
    machinery = sorted(name for name in engine.machinery_builtins if name in MACHINERY_BUILTINS)
    lines += ["", 'warnings.simplefilter("always")', f"ALLOWED_BUILTINS = {allowed!r}",
              f"MACHINERY_BUILTINS = {machinery!r}", f"HELPER_NAMES = {list(HELPER_NAMES)!r}",
              RUNNERS.rstrip()]
    for index, step in enumerate(steps):
        where = f"<{case.id} step {index}>"
        lines += ["", f"# step {index}"]
        lines += [f"#     {_comment_line(line)}".rstrip() for line in step.run.rstrip().split("\n")]
        run = f"_step({_literal(step.run)}, {_literal(where)})"
        if step.raises is not None:
            message = step.raises.message_for(engine.torch_version)
            expected = step.raises.type + (f": {message}" if message else "")
            lines += [
                f"# expects {_comment(expected)}",
                "try:",
                f"    {run}",
                "except Exception as error:",
                f'    print("step {index} raised", type(error).__name__, "-", error)',
                f'    print("  expected:", {_literal(expected)})',
                "else:",
                f'    print("step {index} raised nothing; expected", {_literal(expected)})',
            ]
        else:
            lines.append(run)
        for warn in step.warns:
            lines.append(f"# expects warning {_comment(warn.type)}: {_comment(str(warn.message))}")
        for key, expected in step.expect:
            lines.append(f"_observe({_literal(key)}, {_literal(where)}, "
                         f"{_literal(repr(expected))})")
    return "\n".join(lines) + "\n"


def adapter_folders(engine: Engine) -> list[str]:
    """The folders that make the modules of an out-of-tree adapter importable: those of the
    `module` of a `module:factory` spec and of the engine's class, when a module's file lies
    neither in an installed location (the standard library, site-packages) nor in this
    package. Each is the folder its top-level package is imported from, first module first."""
    spec = getattr(engine, "spec", None) or ""
    names = [spec.partition(":")[0]] if ":" in spec else []
    names.append(type(engine).__module__)
    folders: list[str] = []
    for name in names:
        file = getattr(sys.modules.get(name), "__file__", None)
        if not file:
            continue
        path = Path(file).resolve()
        if _installed(path):
            continue
        # `a.b.c` is `a/b/c.py` or `a/b/c/__init__.py` under the folder on sys.path.
        depth = name.count(".") + (path.stem == "__init__")
        if depth >= len(path.parents):
            continue
        folder = str(path.parents[depth])
        if folder not in folders:
            folders.append(folder)
    return folders


def _installed(path: Path) -> bool:
    roots = [_PACKAGE, *map(Path, site.getsitepackages()), Path(site.getusersitepackages())]
    roots += [Path(p) for key, p in sysconfig.get_paths().items()
              if key in ("stdlib", "platstdlib", "purelib", "platlib")]
    return any(path.is_relative_to(root.resolve()) for root in roots)


def _literal(text: str) -> str:
    """A Python string literal of `text` on one line, whatever `text` is (a subclass of `str`
    cannot bring a `__repr__` of its own)."""
    return str.__repr__(str.__str__(text))


def _comment_line(line: str) -> str:
    """One line of a snippet inside a `#` comment: indentation kept, every character that is
    not printable written as an escape."""
    return "".join(ch if ch.isprintable() else ch.encode("unicode_escape").decode("ascii")
                   for ch in line)


def _comment(text: str) -> str:
    """Text from a case file made safe inside a `#` comment: one line, every character that is
    not printable (line breaks included, however the file spelled them) written as an escape."""
    text = " ".join(text.split())
    return "".join(ch if ch.isprintable() else ch.encode("unicode_escape").decode("ascii")
                   for ch in text)
