"""Regression tests for runner bugs an engine author met writing out-of-tree adapters."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from conformance.engines import load_engine
from conformance.engines.generic import TorchLikeEngine
from conformance.run.executor import run_case

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
DATA = HERE / "data"
ENV = {**os.environ, "PYTHONPATH": str(HERE)}


def cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "conformance", *args], cwd=REPO, env=ENV,
                          capture_output=True, text=True, timeout=300)


def test_repro_scripts_use_the_adapters_hooks_and_load_a_module_factory_engine(tmp_path):
    # Bugs 1 and 2: the repro printed PyTorch-style node names whatever the adapter said, and
    # an engine given as module:factory could not be loaded by name in the script.
    case = tmp_path / "topic.yaml"
    case.write_text("""
- id: topic.node
  rule: r
  sources: [{doc: doc, quote: A tensor created by the user is a leaf.}]
  steps:
    - run: |
        x = torch.ones(2, requires_grad=True)
        y = x * 2
      expect:
        grad_fn_name(y): SomethingElse
""")
    done = cli("run", "--engine", "fake_engines:make_renamed_nodes", "--cases", str(case),
               "--spec", str(DATA / "spec"), "--repro-dir", str(tmp_path / "repro"))
    assert done.returncode == 1
    script = tmp_path / "repro" / "renamed-nodes__topic.node.py"
    assert "load_engine('fake_engines:make_renamed_nodes')" in script.read_text()
    ran = subprocess.run([sys.executable, str(script)], env=ENV, capture_output=True,
                         text=True, timeout=120)
    assert ran.returncode == 0, ran.stderr
    assert "Node:MulBackward0" in ran.stdout


def test_a_selection_does_not_make_expectations_stale():
    # Bug 3: with -k, every entry for an unselected case was reported stale.
    done = cli("run", "--engine", "mygrad", "-k", "leaf.")
    assert done.returncode == 0
    assert "stale expectation" not in done.stdout


def test_expectations_keys_are_engine_names_or_specs_and_unknown_keys_fail(tmp_path):
    # Bug 4: a key that was not the engine's name was silently ignored.
    listed = tmp_path / "x.yaml"
    listed.write_text("xfail:\n  leaf.: for the test\n")
    typo = cli("run", "--engine", "mygrad", "-k", "leaf.", "--expectations", f"mygradd={listed}")
    assert typo.returncode == 2 and "no engine 'mygradd' in this run" in typo.stderr
    by_spec = cli("run", "--engine", "conformance.engines.mygrad_adapter:make_engine", "-k",
                  "leaf.", "--expectations",
                  f"conformance.engines.mygrad_adapter:make_engine={listed}")
    assert by_spec.returncode == 0, by_spec.stderr
    assert " xfail" in by_spec.stdout.splitlines()[0] and "stale" in by_spec.stdout


def test_the_oracle_version_of_a_torch_like_engine_is_not_its_own_version():
    # Bug 8: a torch-like engine's messages were matched against its own version number.
    engine = TorchLikeEngine("other", "mygrad")
    assert engine.version.startswith("2.5") and engine.torch_version == "2.13.0"
    assert load_engine("torch").torch_version == "2.13.0"


MINIMAL_TORCH_LIKE = '''
import numpy as np

__version__ = "0.1"
float32 = np.float32


def get_default_dtype():
    return np.float32


class Tensor:
    def __init__(self, values, requires_grad=False):
        self.values = np.asarray(values, dtype=np.float32)
        self.requires_grad = requires_grad
        self.grad = None
        self.grad_fn = None
        self.is_leaf = True

    def detach(self):
        return Tensor(self.values)

    def numpy(self):
        return self.values


def tensor(values, dtype=None, requires_grad=False, device=None):
    return Tensor(values, requires_grad)
'''


def test_a_torch_like_module_without_modes_or_nn_runs_its_cases(tmp_path, monkeypatch):
    # A module with only tensor(...): between cases the adapter puts back only the state the
    # module has (no set_grad_enabled, no autograd), and a case that uses nn or F fails at
    # that step, instead of every case crashing the runner before it starts.
    (tmp_path / "minimal_torch_like.py").write_text(MINIMAL_TORCH_LIKE)
    monkeypatch.syspath_prepend(str(tmp_path))
    engine = TorchLikeEngine("minimal", "minimal_torch_like")
    engine.reset()
    assert engine.state_leak() is None
    leaf = ({"id": "leaf.minimal", "rule": "a leaf", "features": ["autograd_state"],
                  "steps": [{"run": "x = torch.tensor([1.0], requires_grad=True)",
                             "expect": {"x.is_leaf": True, "x.grad": None}}]})
    uses_f = ({"id": "leaf.uses-f", "rule": "uses F", "features": ["autograd_state"],
                    "steps": [{"run": "y = F.relu(torch.tensor([1.0]))",
                               "expect": {"y": [1.0]}}]})
    assert run_case(leaf, engine).verdict == "passed"
    result = run_case(uses_f, engine)
    assert result.verdict == "failed", result.message
    assert "has no attribute 'nn'" in result.message


def test_a_name_the_adapters_own_namespace_lacks_is_said_to_be_the_adapters():
    # A newcomer left `autograd` out of the adapter's Torch class: the failure named the
    # engine's objects, although the engine may well have the name.
    from conformance.engines.generic import TorchLikeEngine as Base

    class Torch:
        def __init__(self, module):
            self.tensor = module.tensor

    class PartialFacade(Base):
        def namespace(self, rng):
            return {"torch": Torch(self.torch), "nn": None, "F": None}

    engine = PartialFacade("partial", "refimpl")
    result = run_case({"id": "autograd_grad.partial", "rule": "r",
                       "features": ["autograd_state"],
                       "steps": [{"run": "x = torch.tensor([1.0, 2.0], requires_grad=True)"},
                                 {"run": "torch.autograd.grad(x * 2, x)",
                                  "raises": {"type": "RuntimeError"}}]}, engine)
    assert result.verdict == "failed"
    assert "the adapter's 'Torch' does not provide" in result.message, result.message
