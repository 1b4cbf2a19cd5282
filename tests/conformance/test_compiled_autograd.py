"""Snippets run as a real module, and the `torch-compiled-autograd` engine really is compiled
autograd (not eager PyTorch under another name)."""

from __future__ import annotations

import builtins
import importlib
import inspect
import linecache
import pickle
import sys

import numpy as np
import pytest

from conformance.casefile.files import DEFAULT_SPEC_DIR
from conformance.casefile.loader import load
from conformance.engines import load_engine
from conformance.run import snippets
from conformance.run.executor import run_case
from conformance.run.observe import new_namespace

torch = pytest.importorskip("torch", reason="compiled autograd is PyTorch's")

SOURCE = (
    "class Point:\n"
    "    def __init__(self, x):\n"
    "        self.x = x\n"
    "SCALE = 3\n"
    "def hook(g):\n"
    "    return g * SCALE\n"
)


def test_a_snippet_runs_in_a_module_tools_can_find() -> None:
    engine = load_engine("torch")
    namespace = new_namespace(engine, np.random.default_rng(0),
                              sources={"<demo step 0>": SOURCE})
    exec(compile(SOURCE, "<demo step 0>", "exec"), namespace)
    module = sys.modules[namespace["__name__"]]
    assert module.__dict__ is namespace
    assert importlib.import_module(namespace["__name__"]) is module
    # inspect finds the function's source, pickle finds the class by its module.
    assert inspect.getsource(namespace["hook"]) == "def hook(g):\n    return g * SCALE\n"
    assert pickle.loads(pickle.dumps(namespace["Point"](5))).x == 5
    # A new case empties the module and forgets the old sources.
    again = new_namespace(engine, np.random.default_rng(0))
    assert again is namespace and "hook" not in again
    assert linecache.getline("<demo step 0>", 1) == ""


def test_source_lines_are_split_as_python_splits_them() -> None:
    # A form feed or U+2028 inside a comment is one line to Python's tokenizer.
    text = "x = 1  # a\x0cb\u2028c\ny = 2\n"
    snippets.fresh({"<lines>": text})
    assert linecache.getline("<lines>", 2) == "y = 2\n"
    snippets.fresh()


HOOK_CASE = {
    "id": "compiled.snippet-hook", "rule": "A hook defined in a snippet, reading a global.",
    "steps": [{"run": SOURCE + (
        "x = torch.ones(2, requires_grad=True)\n"
        "y = x * 2\n"
        "y.register_hook(hook)\n"
        "y.sum().backward()\n"),
        "expect": {"x.grad": [6.0, 6.0]}}],
}


@pytest.fixture
def compiled():
    engine = load_engine("torch-compiled-autograd")
    if not engine.available:
        pytest.skip(f"no compiled autograd here: {engine.unavailable_reason}")
    yield engine
    engine.close()


def _captures() -> int:
    from torch._dynamo.utils import counters

    return int(counters["compiled_autograd"]["captures"])


def test_a_snippet_hook_runs_under_compiled_autograd(compiled) -> None:
    from torch._dynamo import compiled_autograd

    before = _captures()
    result = run_case(HOOK_CASE, compiled, timeout=None)
    assert result.verdict == "passed", result.message
    assert _captures() > before, "the backward did not go through compiled autograd"
    assert compiled_autograd.compiled_autograd_enabled
    compiled.close()
    assert not compiled_autograd.compiled_autograd_enabled


def test_the_engine_is_not_eager_torch(compiled) -> None:
    # A divergence of compiled autograd from eager autograd that the spec pins: retain_grad()
    # on a root no input needs. Eager torch passes the case, compiled autograd does not.
    cases = {c.id: c for c in load([DEFAULT_SPEC_DIR / "cases"]).cases}
    case = cases["fuzz_findings.retain-grad-on-unneeded-root"]
    assert run_case(case, load_engine("torch"), timeout=None).verdict == "passed"
    result = run_case(case, compiled, timeout=None)
    assert result.verdict == "failed"
    assert "b.grad" in result.message


def test_dynamo_guards_see_the_guarded_getattr(compiled) -> None:
    # Dynamo evaluates guards on a snippet's hook in the snippet's globals; with the case
    # sandbox's builtins alone this case failed in a fresh worker (KeyError: getattr) and
    # passed only after other cases had run. It gets a getattr that reads nothing private,
    # and no other builtin the vocabulary does not list.
    cases = {c.id: c for c in load([DEFAULT_SPEC_DIR / "cases"]).cases}
    result = run_case(cases["hooks.post-accumulate-grad-hook"], compiled, timeout=None)
    assert result.verdict == "passed", result.message
    given = new_namespace(compiled, np.random.default_rng(0))["__builtins__"]
    assert not {"eval", "exec", "open", "compile", "globals", "vars"} & set(given)
    assert given["getattr"] is not builtins.getattr
    with pytest.raises(AttributeError, match="private"):
        given["getattr"](compiled, "__class__")
