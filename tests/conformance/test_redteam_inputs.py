"""The holes a red team found in what lint accepts (commit 6b35e3a), each closed:

- a name bound only inside another scope (a lambda's parameter, a function's local, a class
  body, a comprehension), only on a path that may not run (an `if`, a `for`, the statement of a
  `raises` step that raises) or deleted again counted as bound for the rest of the case, where
  Python looks it up in the builtins;
- attributes written through an alias of the engine's modules and classes (`Fn.grad = ...`);
- lint time quadratic in the names a case binds;
- YAML scalars past Python's limits (a 5,000-digit integer, the date `2024-13-45`) crashed
  lint and run, in a case file and in an expectations file;
- a case id that ends in a newline;
- an expectations prefix that matches every case (`""`) or none.
"""

from __future__ import annotations

import builtins
import json
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from conformance.casefile.loader import load
from conformance.verdict.expectations import Expectations, ExpectationsError

REPO = Path(__file__).resolve().parents[2]
DATA = Path(__file__).resolve().parent / "data"

HEAD = """\
- id: topic.redteam
  rule: A rule.
  sources:
    - doc: doc
      quote: A tensor created by the user is a leaf.
  steps:
"""
RAISES = "      raises: {type: RuntimeError}\n"


def case_text(*steps: str | tuple[str, str]) -> str:
    """A case whose steps run these snippets; a (snippet, yaml) pair adds keys to its step.
    The first step's snippet starts on line 8."""
    text = HEAD
    for step in steps:
        snippet, more = step if isinstance(step, tuple) else (step, "")
        text += "    - run: |\n" + textwrap.indent(textwrap.dedent(snippet).strip() + "\n",
                                                   " " * 8) + more
    return text


def problems(tmp_path: Path, resources, text: str) -> list[str]:
    path = tmp_path / "topic.yaml"
    path.write_text(text, encoding="utf-8")
    return [str(p) for p in load([path], resources).problems]


def lint(path: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "conformance", "lint", str(path), "--spec", str(DATA / "spec")],
        cwd=REPO, capture_output=True, text=True, timeout=120)


# -- names bound as Python binds them -------------------------------------------------------

# (name, steps, the name read unbound, its line, its step). Each name is a builtin the data
# spec's api.yaml does not list: a run with Python's builtins (compiled autograd) reaches it.
UNBOUND = [
    ("lambda parameter", ["f = lambda eval: 0\neval('1')"], "eval", 9, 0),
    ("local of a function", ["def g():\n    open = 1\nopen('f')"], "open", 10, 0),
    ("parameter of a function", ["def g(breakpoint):\n    return breakpoint\nbreakpoint()"],
     "breakpoint", 10, 0),
    ("class-body name", ["class A:\n    exec = 1\nexec('1')"], "exec", 10, 0),
    ("loop variable of a loop that may not run", ["for compile in []:\n    pass\ncompile('1')"],
     "compile", 10, 0),
    ("comprehension variable", ["y = [vars for vars in [1]]\nvars()"], "vars", 9, 0),
    ("binding in an if that never runs", ["if len([]):\n    input = 1\ninput()"], "input", 10,
     0),
    ("binding on one branch of an if", ["if len([]):\n    help = 1\nelse:\n    pass\nhelp()"],
     "help", 12, 0),
    ("deleted name", ["open = 1\ndel open\nopen('f')"], "open", 10, 0),
    ("lambda parameter, read in a later step", ["f = lambda eval: 0", "eval('1')"], "eval", 10,
     1),
]


@pytest.mark.parametrize(("steps", "name", "line", "step"), [u[1:] for u in UNBOUND],
                         ids=[u[0] for u in UNBOUND])
def test_a_name_bound_only_in_another_scope_or_path_is_unknown(tmp_path: Path, resources,
                                                                steps: list[str], name: str,
                                                                line: int, step: int) -> None:
    path = tmp_path / "topic.yaml"
    found = problems(tmp_path, resources, case_text(*steps))
    assert f"{path}:{line}: case topic.redteam: step {step}: unknown name '{name}'" in \
        [p.split(": bind", 1)[0] for p in found], found


def test_the_statement_a_raises_step_raises_binds_nothing(tmp_path: Path, resources) -> None:
    """Only the last statement of a `raises` step may raise, and the case goes on after it:
    what it binds is missing; what the statements before it bind is there."""
    text = case_text(("x = torch.ones(2)\nopen = x.backward()", RAISES), "y = x\nopen('f')")
    path = tmp_path / "topic.yaml"
    found = problems(tmp_path, resources, text)
    assert [p.split(": bind", 1)[0] for p in found] == [
        f"{path}:13: case topic.redteam: step 1: unknown name 'open'"], found


# Read by a function, lambda or generator, which looks the name up when it runs (perhaps while
# the case's own binding is missing): such a name may not be a Python builtin's.
LAZY = [
    ("function", "input = torch.ones(2)\ndef f():\n    return input * 2", "input", 10),
    ("lambda", "eval = 1\nf = lambda: eval", "eval", 9),
    ("generator", "open = 1\ng = (open for i in [1])", "open", 9),
]


@pytest.mark.parametrize(("snippet", "name", "line"), [s[1:] for s in LAZY],
                         ids=[s[0] for s in LAZY])
def test_a_builtin_name_read_when_a_function_runs_is_refused(tmp_path: Path, resources,
                                                             snippet: str, name: str,
                                                             line: int) -> None:
    path = tmp_path / "topic.yaml"
    found = problems(tmp_path, resources, case_text(snippet))
    assert any(p.startswith(f"{path}:{line}: case topic.redteam: step 0: '{name}' is read by a "
                            "function, lambda or generator") for p in found), found


def test_class_body_names_are_not_seen_by_its_methods(tmp_path: Path, resources) -> None:
    path = tmp_path / "topic.yaml"
    found = problems(tmp_path, resources,
                     case_text("class A:\n    k = 1\n    def m(self):\n        return k"))
    assert any(p.startswith(f"{path}:11: case topic.redteam: step 0: unknown name 'k' (read "
                            "by a function") for p in found), found


# Steps that bind every name before Python looks it up.
BOUND = [
    ("a function reads a name a later step binds",
     ["def f():\n    return x * 2", "x = torch.ones(2)\ny = f()"]),
    ("closure", ["def f():\n    a = 1\n    def g():\n        return a\n    return g()\nb = f()"]),
    ("class body reads its own names", ["class A:\n    k = 1\n    j = k + 1"]),
    ("both branches of an if", ["if len([]):\n    a = 1\nelse:\n    a = 2\nb = a"]),
    ("with body", ["with torch.no_grad():\n    y = torch.ones(2)\nz = y"]),
    ("earlier statement of a loop body", ["for i in [1, 2]:\n    y = i\n    z = y"]),
    ("recursion", ["def f(n):\n    return f(n - 1) if n else 0\nb = f(2)"]),
    ("comprehension reads a top-level name", ["a = 1\nb = [a + i for i in [1, 2]]"]),
    ("parameters and locals", ["def f(a, *rest, k=1):\n    b = a + k\n    return [b, rest]\n"
                               "c = f(1, 2)"]),
]


@pytest.mark.parametrize("steps", [b[1] for b in BOUND], ids=[b[0] for b in BOUND])
def test_names_python_binds_are_bound(tmp_path: Path, resources, steps: list[str]) -> None:
    assert problems(tmp_path, resources, case_text(*steps)) == []


def run_with_listed_builtins(steps: list[str]) -> None:
    """Run the steps as the runner does, with the builtins the data spec lists and nothing
    else: a name the case did not bind raises NameError."""
    torch = pytest.importorskip("torch")
    names = {"len": len, "isinstance": isinstance, "tuple": tuple, "type": type,
             "__build_class__": builtins.__build_class__}
    namespace = {"__builtins__": names, "__name__": "case", "torch": torch}
    for step in steps:
        exec(compile(textwrap.dedent(step), "<step>", "exec"), namespace)


@pytest.mark.parametrize(("steps", "name"), [u[1:3] for u in UNBOUND],
                         ids=[u[0] for u in UNBOUND])
def test_python_agrees_the_refused_names_are_unbound(steps: list[str], name: str) -> None:
    with pytest.raises(NameError, match=f"'{name}'"):
        run_with_listed_builtins(steps)


@pytest.mark.parametrize("steps", [b[1] for b in BOUND], ids=[b[0] for b in BOUND])
def test_python_agrees_the_accepted_names_are_bound(steps: list[str]) -> None:
    run_with_listed_builtins(steps)


def test_del_inside_a_loop_is_refused(tmp_path: Path, resources) -> None:
    """The loop's next pass would read the deleted name from the builtins."""
    path = tmp_path / "topic.yaml"
    found = problems(tmp_path, resources,
                     case_text("a = 1\nfor i in [1, 2]:\n    b = a\n    del a"))
    assert any(p.startswith(f"{path}:11: case topic.redteam: step 0: 'del a' inside a for loop")
               for p in found), found


def test_a_class_made_by_type_with_a_namespace_is_refused(tmp_path: Path, resources) -> None:
    """Its namespace could hold an `__exit__` that swallows an error in a `with` body, whose
    bindings lint counts as made."""
    path = tmp_path / "topic.yaml"
    found = problems(tmp_path, resources, case_text(
        "S = type('S', (), {'a': lambda self, *args: True})"))
    assert any(p.startswith(f"{path}:8: case topic.redteam: step 0: type() with other than one "
                            "argument") for p in found), found


# -- attribute writes through aliases --------------------------------------------------------

ALIAS_WRITES = [
    ("alias of a torch member", ["Fn = torch.ones\nFn.grad = None"], "Fn.grad", 9),
    ("alias of an alias", ["A = torch.autograd\nB = A.grad\nB.grad = None"], "B.grad", 10),
    ("a tensor's class", ["x = torch.ones(2)\ntype(x).grad = None"], "type(x).grad", 9),
    ("alias of a tensor's class", ["x = torch.ones(2)\nT = type(x)\ndel T.grad"], "T.grad", 10),
    ("a helper", ["graph.grad = None"], "graph.grad", 8),
    ("alias of a helper", ["g = graph\ng.requires_grad = True"], "g.requires_grad", 9),
    ("augmented", ["Fn = torch.ones\nFn.grad += 1"], "Fn.grad", 9),
    ("loop over engine objects", ["for M in [torch.ones, torch.rand]:\n    M.grad = None"],
     "M.grad", 9),
    ("default argument", ["def f(M=torch.ones):\n    M.grad = None"], "M.grad", 9),
    ("in a function, aliased by a later step",
     ["def f():\n    Fn.grad = None", "Fn = torch.ones\nf()"], "Fn.grad", 9),
]


@pytest.mark.parametrize(("steps", "shown", "line"), [a[1:] for a in ALIAS_WRITES],
                         ids=[a[0] for a in ALIAS_WRITES])
def test_an_engine_object_is_not_written_through_an_alias(tmp_path: Path, resources,
                                                          steps: list[str], shown: str,
                                                          line: int) -> None:
    path = tmp_path / "topic.yaml"
    found = problems(tmp_path, resources, case_text(*steps))
    assert any(p.startswith(f"{path}:{line}: case topic.redteam: step 0: '{shown}' may not be "
                            "assigned or deleted") for p in found), found


@pytest.mark.parametrize("snippet", [
    "x = torch.ones(2)\nx.grad = None\ndel x.grad\nx.requires_grad = True",
    "w = torch.ones(2)\nv = w\nv.requires_grad = True",
    "class MyFn:\n    pass\nMyFn.grad = 1",
], ids=["a tensor", "an alias of a tensor", "a class of the case's own"])
def test_the_case_own_objects_may_be_written(tmp_path: Path, resources, snippet: str) -> None:
    assert problems(tmp_path, resources, case_text(snippet)) == []


# -- lint time linear in the names a case binds ---------------------------------------------

def _few_steps(names: int) -> str:
    """`names` short assignments, a thousand to a step."""
    return HEAD + "".join(
        "    - run: |\n" + "".join(f"        a{i} = 1\n" for i in range(start, min(names,
                                                                               start + 1000)))
        for start in range(0, names, 1000))


def _one_a_step(names: int) -> str:
    """`names` steps, each binding one alias of the same tensor."""
    return HEAD + "    - run: a = torch.ones(1)\n" + "".join(f"    - run: b{i} = a\n"
                                                          for i in range(names))


def _seconds(tmp_path: Path, resources, text: str) -> float:
    path = tmp_path / "topic.yaml"
    path.write_text(text, encoding="utf-8")
    best = float("inf")
    for _ in range(2):
        start = time.perf_counter()
        result = load([path], resources)
        best = min(best, time.perf_counter() - start)
        assert result.problems == [] and len(result.cases) == 1
    return best


@pytest.mark.parametrize(("shape", "names"), [(_few_steps, 5_000), (_one_a_step, 2_000)],
                         ids=["assignments in a few steps", "one alias a step"])
def test_lint_time_is_linear_in_the_names_a_case_binds(tmp_path: Path, resources, shape,
                                                       names: int) -> None:
    small = _seconds(tmp_path, resources, shape(names))
    large = _seconds(tmp_path, resources, shape(4 * names))
    # Four times the names: about four times the time when linear, sixteen when quadratic.
    assert large / small < 8, (small, large)
    assert large < 10, large


# -- YAML scalars past Python's limits -------------------------------------------------------

LONG_INT = "1" * 5_000


@pytest.mark.parametrize(("value", "fragment"), [
    (LONG_INT, "at most 4300 decimal digits"),
    ("-" + LONG_INT, "at most 4300 decimal digits"),
    ("0x" + "f" * 4_000, "at most 4300 decimal digits"),
    ("1:" * 3_000 + "1", "at most 4300 decimal digits"),
    ("!!bool maybe", "cannot read 'maybe' as !!bool"),
    ("!!float abc", "cannot read 'abc' as !!float"),
], ids=["5,000 digits", "negative", "hexadecimal", "base 60", "not a bool", "not a float"])
def test_an_unreadable_scalar_in_a_case_is_a_problem_with_file_line_and_case(
        tmp_path: Path, value: str, fragment: str) -> None:
    path = tmp_path / "topic.yaml"
    path.write_text(case_text(("x = torch.ones(2)", f"      expect:\n        x: {value}\n")),
                    encoding="utf-8")
    done = lint(path)
    output = done.stdout + done.stderr
    assert done.returncode == 1 and "Traceback" not in output, output[-2000:]
    assert any(p.startswith(f"{path}:10: case topic.redteam: cannot read ") and fragment in p
               for p in done.stdout.splitlines()), output[-2000:]


def test_a_timestamp_is_read_as_text(tmp_path: Path, resources) -> None:
    """`2024-13-45` is no date: PyYAML's timestamp constructor raised on it."""
    text = case_text(("x = torch.ones(2)", "      expect:\n        len(x): 2024-13-45\n"))
    path = tmp_path / "topic.yaml"
    path.write_text(text, encoding="utf-8")
    result = load([path], resources)
    assert result.problems == []
    assert result.cases[0].steps[0].expect == (("len(x)", "2024-13-45"),)


def test_an_unreadable_scalar_in_an_expectations_file_says_where(tmp_path: Path) -> None:
    path = tmp_path / "expectations.yaml"
    path.write_text(f"xfail:\n  basic.leaf: a reason\n  basic.other: {LONG_INT}\n",
                    encoding="utf-8")
    with pytest.raises(ExpectationsError, match=f"^{path}:3: cannot read .* at most 4300"):
        Expectations.load(path)
    path.write_text("skip:\n  basic.: 2024-13-45\n", encoding="utf-8")
    assert Expectations.load(path).entries[0].reason == "2024-13-45"


def test_a_run_refuses_an_unreadable_expectations_file_before_any_case(tmp_path: Path) -> None:
    listed = tmp_path / "expectations.yaml"
    listed.write_text(f"xfail:\n  basic.leaf: {LONG_INT}\n", encoding="utf-8")
    report = tmp_path / "report.json"
    done = subprocess.run(
        [sys.executable, "-m", "conformance", "run", "--engine", "refimpl", "--cases",
         str(DATA / "cases"), "--spec", str(DATA / "spec"), "-k", "basic.leaf", "-q",
         "--expectations", f"refimpl={listed}", "--json", str(report)],
        cwd=REPO, capture_output=True, text=True, timeout=300)
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr[-2000:]
    assert f"{listed}:2: cannot read " in done.stderr
    written = json.loads(report.read_text(encoding="utf-8"))
    assert written["results"] == [] and written["status"] == "interrupted", written


# -- case ids ---------------------------------------------------------------------------------

def test_a_case_id_may_not_end_in_a_newline(tmp_path: Path, resources) -> None:
    text = case_text("x = 1") + case_text("y = 1").replace("id: topic.redteam",
                                                           'id: "topic.redteam\\n"')
    path = tmp_path / "topic.yaml"
    found = problems(tmp_path, resources, text)
    assert any(p.startswith(f"{path}:9: ") and "id must match" in p for p in found), found


def test_a_cited_case_id_may_not_end_in_a_newline(tmp_path: Path, resources) -> None:
    text = case_text("x = 1").replace("  steps:", '  see_also: ["topic.other\\n"]\n  steps:')
    found = problems(tmp_path, resources, text)
    assert any("'see_also': 'topic.other\\n' is not a case id" in p for p in found), found


# -- expectations prefixes --------------------------------------------------------------------

@pytest.mark.parametrize("prefix", ['""', '" "', "topic", "Topic.A", '"topic.a b"', "'*'",
                                    "topic..a", '"topic.a\\n"'],
                         ids=["empty", "whitespace", "no topic dot", "upper case", "space",
                              "star", "empty name", "newline"])
def test_an_expectations_prefix_must_be_the_start_of_a_case_id(tmp_path: Path,
                                                               prefix: str) -> None:
    path = tmp_path / "expectations.yaml"
    path.write_text(f"xfail:\n  topic.a: fine\nskip:\n  {prefix}: a reason\n", encoding="utf-8")
    with pytest.raises(ExpectationsError, match=f"^{path}:4: skip entry .* names no case"):
        Expectations.load(path)


def test_prefixes_of_case_ids_load(tmp_path: Path) -> None:
    path = tmp_path / "expectations.yaml"
    path.write_text("xfail:\n  topic.: a\n  topic.a: b\n  errors.advanced-: c\n  a.b.c.: d\n",
                    encoding="utf-8")
    assert [e.prefix for e in Expectations.load(path).entries] == [
        "topic.", "topic.a", "errors.advanced-", "a.b.c."]
