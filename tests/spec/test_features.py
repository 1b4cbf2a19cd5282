"""The feature registry describes what cases use: each feature is derived from a case's own
text, lint holds every case to its `features:` list, and an engine that lacks a feature gets
`unsupported` for exactly the cases that declare it."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest
import yaml

from conformance.casefile.case import Case
from conformance.casefile.features import case_uses, derive, snippet_features
from conformance.casefile.loader import SpecResources, load
from conformance.engines.generic import TorchLikeEngine
from conformance.run.executor import run_case

ROOT = Path(__file__).resolve().parents[2]
SPEC = ROOT / "spec"
REGISTRY = set(yaml.safe_load((SPEC / "features.yaml").read_text(encoding="utf-8")))


def tracked_case_files() -> list[Path]:
    """The committed case files (a topic being written beside them is not yet held to this)."""
    try:
        out = subprocess.run(["git", "ls-files", "spec/cases/*.yaml"], cwd=ROOT, check=True,
                             capture_output=True, text=True).stdout
    except (OSError, subprocess.CalledProcessError):
        return sorted((SPEC / "cases").glob("*.yaml"))
    return [ROOT / line for line in out.split()] or sorted((SPEC / "cases").glob("*.yaml"))


@pytest.fixture(scope="module")
def spec_cases() -> list[Case]:
    result = load(tracked_case_files(), SpecResources.load(SPEC))
    assert [str(p) for p in result.problems] == []
    return result.cases


SNIPPETS = [
    ("x.add_(1)", "inplace"),
    ("x[0] = 1.0", "inplace"),
    ("w -= 0.5 * g", "inplace"),
    ("v = y[0]\nv.mul_(3)", "views"),
    ("d = x.detach()\nd.zero_()", "views"),
    ("y.detach_()", "detach_"),
    ("y.retain_grad()", "retain_grad"),
    ("flag = y.retains_grad", "retain_grad"),
    ("n = y.grad_fn", "node_introspection"),
    ("n = y.grad_fn.next_functions", "node_introspection"),
    ("s = grad_fn_name(y)", "node_introspection"),
    ("s = node_name(n)", "node_introspection"),
    ("s = graph(y)", "node_introspection"),
    ("y.sum().backward(inputs=[x])", "backward_inputs"),
    ("y.backward(create_graph=True)", "backward_create_graph"),
    ("g, = torch.autograd.grad(y, x, create_graph=True)", "create_graph"),
    ("same = g is x.grad", "identity"),
    ("g = x.grad", "autograd_state"),
    ("x = torch.ones(2, requires_grad=True)", "autograd_state"),
    ("x.requires_grad_()", "autograd_state"),
    ("leaf = x.is_leaf", "autograd_state"),
    ("y.backward()", "autograd_state"),
    ("with torch.no_grad():\n    y = x * 2", "no_grad"),
    ("on = torch.is_grad_enabled()", "no_grad"),
    ("with torch.set_grad_enabled(False):\n    y = x * 2", "set_grad_enabled"),
    ("@torch.no_grad()\ndef f(x):\n    return x * 2", "grad_mode_decorators"),
    ("x = torch.ones(2, dtype=torch.complex64)", "complex"),
    ("x = torch.ones(2) * 1j", "complex"),
    ("x = torch.ones(2, dtype=torch.float16)", "half"),
    ("y = x.half()", "half"),
    ("x = torch.ones(2, dtype=torch.bfloat16)", "half"),
    ("h = x.register_hook(f)", "hooks"),
    ("h = y.grad_fn.register_hook(f)", "node_hooks"),
    ("n = y.grad_fn\nh = n.register_hook(f)", "node_hooks"),
    ("h = y.grad_fn.register_prehook(f)", "node_hooks"),
    ("m = nn.Linear(2, 3)", "modules"),
    ("m = nn.Conv2d(1, 1, 3)", "conv"),
    ("x = torch.ones(2, device='cuda')", "cuda"),
    ("x = torch.ones(2, device='meta')", "meta"),
    ("with torch.inference_mode():\n    y = x * 2", "inference_mode"),
    ("s = repr(x)", "repr"),
]


@pytest.mark.parametrize(("source", "feature"), SNIPPETS)
def test_derivation_finds_each_feature(source: str, feature: str) -> None:
    assert feature in REGISTRY
    assert feature in snippet_features(source)


@pytest.mark.parametrize(("source", "feature"), [
    ("g, = torch.autograd.grad(y, x)", "autograd_state"),
    ("none = x.grad is None", "identity"),
    ("exact = type(x) is torch.Tensor", "identity"),
    ("y.backward(create_graph=False)", "backward_create_graph"),
    ("y = x[[0, 1]]\nx[[0]] = 1.0", "views"),
    ("h = x.register_hook(f)", "node_hooks"),
    ("x.requires_grad_()", "inplace"),
    ("y = x.view(2)", "views"),
])
def test_derivation_does_not_overreach(source: str, feature: str) -> None:
    assert feature not in snippet_features(source)


def test_expectations_and_steps_are_read() -> None:
    case = Case.from_dict({"id": "t.c", "rule": "r", "steps": [
        {"run": "x = torch.ones(2, dtype=torch.float64)", "expect": {"grad_fn_name(x)": None}},
        {"run": "y = x * 2", "expect": {"y": {"value": [2.0, 2.0], "dtype": "float16"}},
         "warns": [{"type": "UserWarning", "message": "m"}]},
        {"run": "z = y + 1", "raises": {"type": "RuntimeError", "message":
                                        "... is at version 1; expected version 0 instead."}},
    ]})
    uses = {use.feature: use for use in case_uses(case)}
    assert set(uses) == {"node_introspection", "half", "warnings", "version_counter"}
    assert (uses["node_introspection"].step, uses["half"].step) == (0, 1)
    assert uses["version_counter"].step == 2


def test_undeclared_in_place_fails_lint(tmp_path: Path) -> None:
    path = tmp_path / "topic.yaml"
    path.write_text(
        "- id: topic.add\n"
        "  rule: add_ adds in place.\n"
        "  sources:\n"
        "    - doc: autodiff-notes-flat\n"
        "      quote: \"calculate gradients through the DAG.\"\n"
        "  steps:\n"
        "    - run: x = torch.ones(2)\n"
        "    - run: x.add_(1)\n"
        "      expect:\n"
        "        x: [2.0, 2.0]\n", encoding="utf-8")
    problems = [str(p) for p in load([path], SpecResources.load(SPEC)).problems]
    assert problems == [f"{path}:8: case topic.add: step 1: 'x.add_(1)' uses feature "
                        "'inplace': add it to features:"]
    path.write_text(path.read_text(encoding="utf-8").replace(
        "  steps:\n", "  features: [inplace]\n  steps:\n"), encoding="utf-8")
    assert [str(p) for p in load([path], SpecResources.load(SPEC)).problems] == []


def test_every_case_declares_what_it_uses(spec_cases: list[Case]) -> None:
    undeclared = {case.id: sorted(set(derive(case)) - set(case.features))
                  for case in spec_cases}
    assert {k: v for k, v in undeclared.items() if v} == {}


def test_every_registered_feature_is_used(spec_cases: list[Case]) -> None:
    declared = {feature for case in spec_cases for feature in case.features}
    assert sorted(REGISTRY - declared) == []


@pytest.mark.parametrize("feature", ["detach_", "node_introspection", "autograd_state"])
def test_engine_lacking_a_feature_skips_exactly_its_cases(spec_cases: list[Case],
                                                          feature: str) -> None:
    engine = TorchLikeEngine(f"torch-without-{feature}", "torch",
                             lacks=frozenset({feature, "cuda"}))
    runnable = [case for case in spec_cases if "cuda" not in case.features]
    verdicts = {case.id: run_case(case, engine) for case in runnable}
    unsupported = {cid for cid, result in verdicts.items() if result.verdict == "unsupported"}
    assert unsupported == {case.id for case in runnable if feature in case.features} != set()
    assert {verdicts[cid].message for cid in unsupported} == {f"engine lacks feature {feature}"}
    assert {r.verdict for cid, r in verdicts.items() if cid not in unsupported} == {"passed"}


GUIDE = ROOT / "docs" / "adapters.md"


def test_adapter_guide_lists_every_feature_with_its_meaning() -> None:
    from conformance.casefile.features import docs_section, main, registry

    assert main(["--check", "--spec", str(SPEC), "--docs", str(GUIDE)]) == 0, \
        "docs/adapters.md is stale: run `python -m conformance.casefile.features --write-docs`"
    guide = GUIDE.read_text(encoding="utf-8")
    assert docs_section(registry(SPEC)) in guide
    assert [name for name in sorted(REGISTRY) if f"| `{name}` | " not in guide] == []


def test_write_docs_rewrites_a_stale_feature_list(tmp_path: Path) -> None:
    from conformance.casefile.features import main

    spec = tmp_path / "spec"
    spec.mkdir()
    registry_text = (SPEC / "features.yaml").read_text(encoding="utf-8")
    (spec / "features.yaml").write_text(registry_text + 'teleport: "moving tensors | at once"\n',
                                        encoding="utf-8")
    guide = tmp_path / "docs" / "adapters.md"
    guide.parent.mkdir()
    guide.write_text(GUIDE.read_text(encoding="utf-8"), encoding="utf-8")
    assert main(["--check", "--spec", str(spec)]) == 1
    assert main(["--write-docs", "--spec", str(spec)]) == 0
    assert "| `teleport` | moving tensors \\| at once |" in guide.read_text(encoding="utf-8")
    assert main(["--check", "--spec", str(spec)]) == 0
    outside = guide.read_text(encoding="utf-8").split("<!-- features: begin")
    assert outside[0] == GUIDE.read_text(encoding="utf-8").split("<!-- features: begin")[0]


def test_guide_on_a_missing_core_names_only_registered_features() -> None:
    guide = GUIDE.read_text(encoding="utf-8")
    section = guide.split("## When your engine lacks part of the core", 1)[1].split("\n## ")[0]
    rows = [line.split(" | ")[-1] for line in section.splitlines()
            if line.startswith("| ") and not line.startswith("| your engine")
            and not line.startswith("| ---")]
    named = {name for row in rows for name in re.findall(r"`([a-z_]+)`", row)}
    assert named and named <= REGISTRY, sorted(named - REGISTRY)
    assert "unsupported" in section and "never counted as a refusal" in section
