"""No case changes another case's verdict through thread-local autograd state.

A case may leave grad mode off, inference or anomaly mode on, saved-tensor hooks installed, a
forward-AD level open or another default dtype, by a plain call or from a generator suspended
inside a `with` block. The runner restores all of it between cases; what an engine cannot
restore is reported by `Engine.state_leak()`, and the worker running it is replaced.
"""

from __future__ import annotations

import pytest

from conformance.engines import load_engine
from conformance.run.executor import run_case

SUSPENDED = {
    "id": "leak.suspended-generator", "rule": "A generator suspended inside modes.",
    "steps": [{"run": (
        "def held():\n"
        "    with torch.inference_mode():\n"
        "        with torch.autograd.graph.saved_tensors_hooks(lambda t: t * 0, lambda t: t):\n"
        "            yield 1\n"
        "g = held()\n"
        "for _ in g:\n"
        "    break\n"
        "cycle = [g]\n"
        "cycle.append(cycle)\n"),
        "expect": {"torch.is_inference_mode_enabled()": True}}],
}
PLAIN_CALLS = {
    "id": "leak.plain-calls", "rule": "Modes switched on by plain calls.",
    "steps": [{"run": ("torch.set_grad_enabled(False)\n"
                       "torch.autograd.set_detect_anomaly(True)\n"
                       "torch.autograd.forward_ad.enter_dual_level()\n")}],
}
LATER = {
    "id": "leak.later", "rule": "A later case sees a fresh thread's autograd state.",
    "steps": [{"run": "x = torch.ones(3, requires_grad=True)\ny = x.exp()\ny.sum().backward()",
               "expect": {"y.requires_grad": True, "x.is_inference()": False,
                          "x.grad": {"np": "np.exp(np.ones(3))"},
                          "torch.is_grad_enabled()": True,
                          "torch.is_anomaly_enabled()": False}}],
}


@pytest.mark.parametrize("name", ["torch", "refimpl"])
@pytest.mark.parametrize("first", [SUSPENDED, PLAIN_CALLS], ids=lambda c: c["id"])
def test_a_case_leaves_no_state_for_the_next(name: str, first: dict) -> None:
    engine = load_engine(name)
    assert run_case(first, engine, timeout=None).verdict == "passed"
    assert engine.state_leak() is None
    result = run_case(LATER, engine, timeout=None)
    assert result.verdict == "passed", result.message


def test_a_default_dtype_left_changed_is_restored() -> None:
    engine = load_engine("torch")
    case = {"id": "leak.dtype", "rule": "r",
            "steps": [{"run": "torch.set_default_dtype(torch.float64)"}]}
    assert run_case(case, engine, timeout=None).verdict == "passed"
    assert engine.state_leak() is None
    later = {"id": "leak.dtype-later", "rule": "r",
             "steps": [{"run": "x = torch.ones(1)", "expect": {"dtype(x)": "float32"}}]}
    assert run_case(later, engine, timeout=None).verdict == "passed"


@pytest.mark.parametrize("name", ["torch", "refimpl"])
def test_state_held_beyond_the_case_is_reported(name: str) -> None:
    engine = load_engine(name)
    held = {"id": "leak.held", "rule": "r", "steps": [{"run": (
        "def held():\n"
        "    with torch.inference_mode():\n"
        "        yield 1\n"
        "g = held()\n"
        "for _ in g:\n"
        "    break\n"
        "torch.autograd.held_by_the_engine = g\n")}]}
    try:
        run_case(held, engine, timeout=None)
        assert "inference mode is on" in (engine.state_leak() or "")
    finally:
        generator = engine.torch.autograd.__dict__.pop("held_by_the_engine", None)
        if generator is not None:
            generator.close()
    assert engine.state_leak() is None


@pytest.mark.parametrize("name", ["torch", "refimpl", "mygrad", "tinygrad", "paddle", "jax",
                                  "autograd", "mlx", "torch-func-tape"])
def test_a_fresh_engine_reports_no_leak(name: str) -> None:
    # A leak reported where there is none would replace the worker after every case.
    engine = load_engine(name)
    if not engine.available:
        pytest.skip(f"{name} is not installed here: {engine.unavailable_reason}")
    engine.reset()
    assert engine.state_leak() is None
