"""Messages: the cases' `fix` and `see_also` fields, and the inventory `spec/messages.yaml`.

The inventory lists the errors and warnings of PyTorch 2.13's autograd sources; the
reference's messages page and its coverage figure come from matching the cases' expected texts
against its templates. These tests hold the file to its format, every reference to an existing
case, and the figures to what the cases really expect.
"""

from __future__ import annotations

import ast
import re
import textwrap
from pathlib import Path

import pytest

from conformance.casefile.case import Case, CaseFormatError
from conformance.casefile.loader import DEFAULT_SPEC_DIR, SpecResources, load
from conformance.casefile.messages import (
    InventoryMessage,
    coverage,
    expected_texts,
    load_inventory,
    read_inventory,
    shown,
    template_pattern,
)

SPEC = DEFAULT_SPEC_DIR

CASE = {
    "id": "leaf.refuses",
    "rule": "A rule.",
    "steps": [{"run": "x = torch.ones(2)\nx.backward()",
               "raises": {"type": "RuntimeError", "stage": "backward",
                          "message": "element 0 of tensors does not require grad and does not "
                                     "have a grad_fn"}}],
}


@pytest.fixture(scope="module")
def spec_cases() -> list[Case]:
    result = load([SPEC / "cases"], SpecResources.load(SPEC))
    assert result.problems == []
    return result.cases


def test_fix_and_see_also_are_read():
    case = Case.from_dict({**CASE, "fix": {"text": "Make x require grad.",
                                           "cases": ["leaf.other"]},
                           "see_also": ["backward.other"]})
    assert case.fix is not None and case.fix.text == "Make x require grad."
    assert case.fix.cases == ("leaf.other",)
    assert case.see_also == ("backward.other",)


@pytest.mark.parametrize("fields, problem", [
    ({"fix": "just text"}, "'fix' must be a mapping"),
    ({"fix": {"cases": ["leaf.other"]}}, "missing key 'text'"),
    ({"fix": {"text": "t", "why": "x"}}, "unknown key 'why'"),
    ({"see_also": "leaf.other"}, "'see_also' must be a list of case ids"),
    ({"see_also": ["Not An Id"]}, "'Not An Id' is not a case id"),
    ({"see_also": ["leaf.refuses"]}, "see_also names the case itself"),
    ({"see_also": ["leaf.a", "leaf.a"]}, "lists a case twice"),
])
def test_bad_fix_and_see_also_are_refused(fields, problem):
    with pytest.raises(CaseFormatError) as caught:
        Case.from_dict({**CASE, **fields})
    assert problem in str(caught.value)


def test_a_reference_to_a_missing_case_is_a_lint_problem(tmp_path):
    path = tmp_path / "leaf.yaml"
    path.write_text(textwrap.dedent("""\
        - id: leaf.a
          rule: A rule.
          sources: [{doc: autodiff-notes, quote: "x"}]
          see_also: [leaf.gone, other_topic.not_loaded]
          fix:
            text: Do this.
            cases: [leaf.b, leaf.missing]
          steps:
            - run: x = torch.ones(2)
        - id: leaf.b
          rule: A rule.
          sources: [{doc: autodiff-notes, quote: "x"}]
          steps:
            - run: x = torch.ones(2)
        """), encoding="utf-8")
    problems = [str(p) for p in load([path], SpecResources.load(SPEC)).problems]
    assert any(":4: case leaf.a: see_also names 'leaf.gone'" in p for p in problems), problems
    assert any(":5: case leaf.a: fix names 'leaf.missing'" in p for p in problems), problems
    # A topic whose file was not loaded cannot be checked from this run.
    assert not any("other_topic" in p for p in problems)
    assert not any("'leaf.b'" in p for p in problems)


def test_every_reference_in_the_spec_names_a_case(spec_cases):
    ids = {case.id for case in spec_cases}
    refs = [(case.id, ref) for case in spec_cases
            for ref in (*case.see_also, *(case.fix.cases if case.fix else ()))]
    assert refs, "no case of the spec uses see_also or fix"
    assert [(c, r) for c, r in refs if r not in ids] == []


def test_templates_match_the_message_with_any_value():
    pattern, literal = template_pattern("Mismatch in shape: grad_output[{}] has a shape of {} "
                                        "and output[{}] has a shape of {}.")
    assert pattern.search("Mismatch in shape: grad_output[0] has a shape of torch.Size([3]) "
                          "and output[0] has a shape of torch.Size([2]).")
    assert not pattern.search("Mismatch in dtype: grad_output[0] has a dtype of float")
    assert literal == len("Mismatch in shape: grad_output[] has a shape of  and output[] has "
                          "a shape of .")
    braces = InventoryMessage.from_text("x.braces", "a {{literal}} brace and a {} value")
    assert braces.matches("a {literal} brace and a 3 value")
    assert not braces.matches("a literal brace and a 3 value")
    assert shown("element {} of {{x}}") == "element … of {x}"
    # PyTorch wraps long messages over lines; the template is one line.
    assert braces.matches("a {literal} brace\n   and a 3 value")


def test_the_most_specific_template_wins(tmp_path):
    path = tmp_path / "messages.yaml"
    path.write_text(textwrap.dedent("""\
        torch: "2.13.0"
        git_version: abc
        source_commit: def
        messages:
          - {id: a.general, kind: error, type: RuntimeError, text: "does not require grad{}",
             origin: engine.cpp, scope: in}
          - {id: a.specific, kind: error, type: RuntimeError,
             text: "element {} of tensors does not require grad and does not have a grad_fn",
             origin: engine.cpp, scope: in}
        """), encoding="utf-8")
    inventory, problems = load_inventory(path)
    assert problems == [] and inventory is not None
    found = coverage(inventory, expected_texts([Case.from_dict(CASE)]))
    assert list(found.covered) == ["a.specific"] and found.unmatched == []
    assert found.in_scope(inventory) == (1, 2)


@pytest.mark.parametrize("entry, problem", [
    ('{id: a.b, kind: error, type: RuntimeError, text: "long enough text", origin: f, '
     'scope: out}', "an out-of-scope message needs a 'reason'"),
    ('{id: a.b, kind: oops, type: RuntimeError, text: "long enough text", origin: f, scope: in}',
     "kind must be one of error, warning"),
    ('{id: a.b, kind: error, type: RuntimeError, text: "{} of {}", origin: f, scope: in}',
     "literal characters"),
    ('{id: A, kind: error, type: RuntimeError, text: "long enough text", origin: f, scope: in}',
     "id must match"),
    ('{id: a.b, kind: error, type: RuntimeError, text: "long enough text", origin: f, '
     'scope: in, colour: red}', "unknown key 'colour'"),
    ('{id: a.b, kind: error, text: "long enough text", origin: f, scope: in}',
     "'type' must be a non-empty string"),
])
def test_bad_inventory_entries_are_named_with_their_line(tmp_path, entry, problem):
    path = tmp_path / "messages.yaml"
    path.write_text(f'torch: "2.13.0"\ngit_version: a\nsource_commit: b\nmessages:\n'
                    f'  - {entry}\n', encoding="utf-8")
    _, problems = load_inventory(path)
    assert any(line == 5 and problem in message for line, message in problems), problems


def test_lint_reads_the_inventory(tmp_path):
    (tmp_path / "messages.yaml").write_text("torch: 2\nmessages: 3\n", encoding="utf-8")
    inventory, problems = read_inventory(tmp_path)
    texts = [str(p) for p in problems]
    assert any("messages.yaml:2: 'messages' must be a list" in t for t in texts), texts
    assert any("'git_version' must be a non-empty string" in t for t in texts), texts
    assert read_inventory(tmp_path / "nowhere") == (None, [])


@pytest.fixture(scope="module")
def inventory():
    found, problems = read_inventory(SPEC)
    assert found is not None, f"{SPEC / 'messages.yaml'} is missing"
    assert problems == [], "\n".join(map(str, problems))
    return found


def test_the_inventory_is_pinned_to_the_oracle(inventory):
    import torch

    assert inventory.torch == torch.__version__.split("+")[0]
    assert inventory.git_version == torch.version.git_version


_SENTENCE = re.compile(r"(?<=[.;:,!?])\s+")
_WORD = re.compile(r"[A-Za-z_]{5,}")


def _library_strings(paths: list[Path], texts: list[str]) -> str:
    """The C strings of the libraries that share a word with some inventory text (the others
    cannot hold a message of it; leaving them out keeps the search fast)."""
    words = {word for text in texts for word in _WORD.findall(text)}
    kept = []
    for path in paths:
        for raw in path.read_bytes().split(b"\x00"):
            if len(raw) < 6:
                continue
            text = raw.decode("utf-8", "replace")
            if b" " in raw:
                if not words.isdisjoint(_WORD.findall(text)):
                    kept.append(text)
            elif text in words:
                kept.append(text)
    return "\n".join(" ".join(text.split()) for text in kept)


def _python_strings(root: Path) -> str:
    """Every string constant of PyTorch's autograd Python sources, whitespace collapsed.
    Parsing joins adjacent literals, as Python does before printing them."""
    found = []
    for path in [*root.glob("autograd/**/*.py"), root / "_tensor.py",
                 root / "utils" / "checkpoint.py", root / "utils" / "_contextlib.py"]:
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Constant) and isinstance(node.value, (str, bytes)):
                value = node.value if isinstance(node.value, str) else \
                    node.value.decode("utf-8", "replace")
                found.append(" ".join(value.split()))
    return "\n".join(found)


def _tiled(piece: str, corpora: tuple[str, ...]) -> bool:
    """Whether `piece` is made of strings of the corpora, longest first: C++ builds messages
    from several literals (`"Function " + name + " returned an " + "invalid gradient ..."`).
    A tile inside the piece must be 8 characters or more, so common words alone do not pass."""
    words = piece.split()
    start = 0
    while start < len(words):
        for end in range(len(words), start, -1):
            tile = " ".join(words[start:end])
            if any(tile in corpus for corpus in corpora):
                break
        else:
            return False
        if len(tile) < 8 and 0 < start and end < len(words):
            return False
        start = end
    return True


def test_every_entry_is_a_message_torch_really_has(inventory):
    """Each template's literal text is in the installed PyTorch: its Python sources or the
    strings of its libraries (a template made up, or from another version, fails here). The
    texts a case expects are checked harder still: the case runs on torch."""
    import torch

    root = Path(torch.__file__).parent
    libraries = [root / "lib" / name for name in ("libtorch_cpu.so", "libtorch_python.so")]
    if not all(path.is_file() for path in libraries):
        pytest.skip("this PyTorch build has no libtorch_cpu.so / libtorch_python.so to read")
    python = _python_strings(root)
    binary = _library_strings(libraries, [entry.text for entry in inventory.messages])
    missing = []
    for entry in inventory.messages:
        text = " ".join(entry.text.replace("{{", "{").replace("}}", "}").split())
        for piece in text.split("{}"):
            parts = [p.strip() for p in _SENTENCE.split(piece) if len(p.strip()) >= 12]
            if any(p not in python and p not in binary for p in parts) \
                    and not _tiled(piece.strip(), (python, binary)):
                missing.append(f"{entry.id}: {piece.strip()!r}")
                break
    assert missing == [], "\n".join(missing[:20])


def test_coverage_counts_what_the_cases_expect(inventory, spec_cases):
    expected = expected_texts(spec_cases)
    found = coverage(inventory, expected)
    done, total = found.in_scope(inventory)
    assert total > 0 and 0 < done <= total
    for entry_id, texts in found.covered.items():
        entry = next(e for e in inventory.messages if e.id == entry_id)
        assert all(entry.matches(t.message) for t in texts)
    # Every text the cases expect is either an inventory message or accounted as unmatched.
    assert sum(map(len, found.covered.values())) + len(found.unmatched) == len(expected)
