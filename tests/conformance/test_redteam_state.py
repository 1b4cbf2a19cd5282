"""The red team's state attacks: no case changes a later case's verdict through autograd state,
whatever it reaches and however it holds it.

The hole (red team, commit 6b35e3a): a case left saved-tensor hooks disabled for every later
case of its worker, from a generator suspended inside `disable_saved_tensors_hooks` and kept
on `torch.autograd.Function` through an alias (`Fn = torch.autograd.Function; Fn.grad = gen`).
The reset did not restore the flag, the leak check asked the hook stack instead, and the tamper
scan did not watch `torch.autograd.Function`. The cases here are built as `Case` objects, never
through the loader: the worker must hold even against a case lint never saw.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass, field

import numpy as np
import pytest

from conformance.casefile.case import Case
from conformance.engines import load_engine
from conformance.run.workers import EngineWorkers

ENGINES = ["torch", "refimpl"]
SETTABLE = ["bias", "data", "grad", "grad_dtype", "grad_fn", "requires_grad", "running_mean",
            "scale", "weight"]


def held(block: str, holder: str) -> str:
    """A snippet that leaves a generator suspended inside `with <block>:`, kept on `holder`."""
    return ("def held():\n"
            f"    with {block}:\n"
            "        yield 1\n"
            "gen = held()\n"
            "for _ in gen:\n"
            "    break\n"
            f"{holder} = gen\n")


ATTACK = Case.from_dict({
    "id": "redteam.disable-through-alias", "rule": "The red team's case.",
    "steps": [{"run": held("torch.autograd.graph.disable_saved_tensors_hooks('disabled')",
                           "Fn = torch.autograd.Function\nFn.grad")}]})
SAVES_WITH_HOOKS = Case.from_dict({
    "id": "redteam.saved-tensor-hooks", "rule": "A later case packs what it saves.",
    "steps": [{"run": ("packed = []\n"
                       "x = torch.ones(3, requires_grad=True)\n"
                       "def pack(t):\n"
                       "    packed.append(t)\n"
                       "    return t\n"
                       "with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):\n"
                       "    y = x.exp().sum()\n"
                       "y.backward()\n"),
               "expect": {"len(packed) > 0": True, "x.grad": {"np": "np.exp(np.ones(3))"}}}]})


@pytest.mark.parametrize("name", ENGINES)
def test_hooks_disabled_through_an_alias_are_tampering_and_the_next_case_passes(
        name: str) -> None:
    with EngineWorkers(name, settable=SETTABLE) as engine:
        attack = engine.run(ATTACK)
        later = engine.run(SAVES_WITH_HOOKS)
    assert later.verdict == "passed", later.message
    assert attack.verdict == "error"
    assert "Function.grad was rebound" in attack.message
    assert engine.replaced_after[ATTACK.id] == "the case rebound Function.grad"


@pytest.mark.parametrize("name", ENGINES)
def test_hooks_disabled_by_a_block_held_out_of_the_scans_sight_are_a_leak(name: str) -> None:
    # Kept under a name no case may assign, so the tamper scan does not see it: the reset
    # restores the flag, and the leak check replaces the worker, whose held block would set
    # the flag again in whichever later case it is let go.
    case = Case.from_dict({
        "id": "redteam.disable-held-elsewhere", "rule": "r",
        "steps": [{"run": held("torch.autograd.graph.disable_saved_tensors_hooks('disabled')",
                               "torch.autograd.graph.held_open")}]})
    with EngineWorkers(name, settable=SETTABLE) as engine:
        first = engine.run(case)
        later = engine.run(SAVES_WITH_HOOKS)
    assert first.verdict == "passed", first.message
    assert later.verdict == "passed", later.message
    assert "saved-tensor hooks are disabled by a `with` block still held after the case" in \
        engine.replaced_after[case.id]


@dataclass(frozen=True)
class Piece:
    """A piece of autograd state: the words `state_leak` uses for it, a snippet that switches
    it (a `with` block held beyond the case where only a block can), and per engine an
    expression that is True while it is as a fresh worker has it."""

    reported: str
    switch: str
    fresh: dict[str, str] = field(default_factory=dict)
    block_only: bool = False

    def case(self, kind: str, run: str) -> Case:
        return Case.from_dict({"id": f"state.{kind}", "rule": self.reported,
                               "steps": [{"run": run}]})


HOLDER = "torch.autograd.graph.held_open"
DISPATCH_MODE = ("class Passing(torch.utils._python_dispatch.TorchDispatchMode):\n"
                 "    def __torch_dispatch__(self, func, types, args=(), kwargs=None):\n"
                 "        return func(*args, **(kwargs or {}))\n")
PIECES = {
    "grad": Piece("grad mode is off", "torch.set_grad_enabled(False)",
                  {"torch": "torch.is_grad_enabled()", "refimpl": "torch.is_grad_enabled()"}),
    "inference": Piece("inference mode is on", held("torch.inference_mode()", HOLDER),
                       {"torch": "not torch.is_inference_mode_enabled()",
                        "refimpl": "not torch.is_inference_mode_enabled()"}, block_only=True),
    "anomaly": Piece("anomaly mode is on", "torch.autograd.set_detect_anomaly(True)",
                     {"torch": "not torch.is_anomaly_enabled()",
                      "refimpl": "not torch.is_anomaly_enabled()"}),
    "anomaly-check-nan": Piece(
        "anomaly mode's NaN check is off",
        "torch.autograd.set_detect_anomaly(False, check_nan=False)",
        {"torch": "torch.is_anomaly_check_nan_enabled()",
         "refimpl": "torch.is_anomaly_check_nan_enabled()"}),
    "default-dtype": Piece("the default dtype is float64",
                           "torch.set_default_dtype(torch.float64)",
                           {"torch": "torch.get_default_dtype() == torch.float32"}),
    "forward-ad-level": Piece(
        "a forward-AD level is open", "torch.autograd.forward_ad.enter_dual_level()",
        {"torch": "torch.autograd.forward_ad._current_level == -1",
         "refimpl": "torch.autograd.forward_ad._state.level == -1"}),
    "forward-grad": Piece("forward grad is off",
                          "torch.autograd.forward_ad._set_fwd_grad_enabled(False)",
                          {"torch": "torch._C._is_fwd_grad_enabled()"}),
    "multithreading": Piece("multithreaded backward is off",
                            "torch.autograd.set_multithreading_enabled(False)",
                            {"torch": "torch.autograd.is_multithreading_enabled()",
                             "refimpl": "torch.autograd.is_multithreading_enabled()"}),
    "grad-layout": Piece("the grad layout contract is relaxed",
                         "torch.autograd.enforce_grad_layout_policy(False)",
                         {"torch": "torch._C._is_grad_layout_enforcement_enabled()"}),
    "view-replay": Piece("view replay is on", "torch.autograd._force_original_view_tracking(True)",
                         {"torch": "not torch.autograd.is_view_replay_enabled()"}),
    "warn-always": Piece("warn_always is off", "torch.set_warn_always(False)",
                         {"torch": "torch.is_warn_always_enabled()",
                          "refimpl": "torch.is_warn_always_enabled()"}),
    "saved-tensor-hooks": Piece(
        "saved-tensor hooks are installed",
        held("torch.autograd.graph.saved_tensors_hooks(lambda t: t * 0, lambda t: t)", HOLDER),
        {"torch": "torch._C._autograd._top_saved_tensors_default_hooks(False) is None",
         "refimpl": "not torch.autograd.graph.SAVED_TENSORS_HOOKS.stack"}, block_only=True),
    "saved-tensor-hooks-disabled": Piece(
        "saved-tensor hooks are disabled",
        held("torch.autograd.graph.disable_saved_tensors_hooks('disabled')", HOLDER),
        {"torch": "torch._C._autograd._saved_tensors_hooks_is_enabled()",
         "refimpl": "torch.autograd.graph.SAVED_TENSORS_HOOKS.disabled is None"},
        block_only=True),
    "allow-mutation": Piece(
        "allow_mutation_on_saved_tensors is entered",
        held("torch.autograd.graph.allow_mutation_on_saved_tensors()", HOLDER),
        {"torch": "not torch.autograd.graph._allow_mutation_on_saved_tensors_enabled",
         "refimpl": "torch.autograd.graph.MUTATION_CONTEXT.active is None"}, block_only=True),
    "dispatch-mode": Piece("a TorchDispatchMode is entered",
                           DISPATCH_MODE + held("Passing()", HOLDER),
                           {"torch": "torch._C._len_torch_dispatch_stack() == 0"},
                           block_only=True),
    "checkpoint-early-stop": Piece(
        "checkpoint early stop is set to False",
        held("torch.utils.checkpoint.set_checkpoint_early_stop(False)", HOLDER),
        {"torch": "torch.utils.checkpoint._enable_checkpoint_early_stop is None",
         "refimpl": "torch.utils.checkpoint._early_stop is None"}, block_only=True),
    "checkpoint-debug": Piece(
        "checkpoint debug is set to True",
        held("torch.utils.checkpoint.set_checkpoint_debug_enabled(True)", HOLDER),
        {"torch": "torch.utils.checkpoint._checkpoint_debug_enabled is None"},
        block_only=True),
}
CASES = [(name, piece) for piece in PIECES for name in ENGINES if name in PIECES[piece].fresh]


@pytest.fixture(scope="module")
def workers() -> Iterator[dict[str, EngineWorkers]]:
    with EngineWorkers("torch", settable=SETTABLE) as torch, \
            EngineWorkers("refimpl", settable=SETTABLE) as refimpl:
        yield {"torch": torch, "refimpl": refimpl}


@pytest.mark.parametrize(("name", "piece"), CASES)
def test_state_a_case_switches_is_not_seen_by_the_next_case_in_its_worker(
        workers: dict[str, EngineWorkers], name: str, piece: str) -> None:
    state = PIECES[piece]
    engine = workers[name]
    switch = state.case(f"{piece}-switched", state.switch)
    check = Case.from_dict({"id": f"state.{piece}-fresh", "rule": "r",
                            "steps": [{"run": "pass", "expect": {state.fresh[name]: True}}]})
    assert engine.run(switch).verdict == "passed"
    result = engine.run(check)
    assert result.verdict == "passed", result.message
    if state.block_only:
        # Still held once the case's objects are gone: the worker ran its last case.
        assert state.reported in engine.replaced_after[switch.id]
    else:
        assert switch.id not in engine.replaced_after


@pytest.mark.parametrize(("name", "piece"), CASES)
def test_state_left_changed_is_reported_and_reset_restores_it(name: str, piece: str) -> None:
    state = PIECES[piece]
    engine = load_engine(name)
    engine.reset()
    namespace = engine.namespace(np.random.default_rng(0))
    try:
        exec(state.switch, namespace)  # noqa: S102 - the piece's own snippet, no reset after it
        assert state.reported in (engine.state_leak() or "")
        engine.reset()
        leak = engine.state_leak() or ""
        if piece == "inference":
            # Only its guard's owner can leave inference mode: it stays reported.
            assert state.reported in leak
        elif state.block_only:
            assert eval(state.fresh[name], namespace)  # noqa: S307 - the piece's own query
            assert f"{state.reported} by a `with` block still held after the case" in leak
        else:
            assert eval(state.fresh[name], namespace)  # noqa: S307 - the piece's own query
            assert leak == ""
    finally:
        generator = vars(engine.torch.autograd.graph).pop("held_open", None)
        if generator is not None:
            # Its exit undoes what reset already undid (a pop of an empty hook stack): the
            # reason a worker with such a block is replaced.
            with contextlib.suppress(Exception):
                generator.close()
        engine.reset()
    assert engine.state_leak() is None
