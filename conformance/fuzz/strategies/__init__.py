"""Hypothesis strategies that draw autograd programs in the case language.

    >>> from hypothesis import given
    >>> @given(programs())
    ... def test_runs(program):
    ...     ...

A program is a few steps. Each step is zero to three forward statements (leaves, elementwise
ops with broadcasting, reductions, matmul, views, cat/stack, detach/clone, module calls),
optionally inside a grad-mode region, followed by at most one statement that may raise on
purpose (an in-place op, `backward`, `autograd.grad`, a flag toggle): an error skips the rest of
its step, so it must come last. The generator tracks each tensor's shape, dtype and a rough
value range, so almost every statement is valid and `log`/`sqrt`/division only see positive
data (NaN then means a real difference); whether a statement raises is left to the engines.

The op table follows `spec/api.yaml`: the tensor methods, `torch.*`, `F.*` and `nn.*` ops
listed there are drawn (not Dropout, whose mask comes from the engine's own generator, nor
`argmax`, `half` and `empty`: integer, float16 and uninitialised data need checks of their own),
and an op whose name is missing there is left out, so every program passes the loader's check.

The strategies live in `state` (variables and helpers), `forward` (forward statements) and
`more` (hooks, custom Functions, more ops, statements that may raise); this module draws steps
and programs from them.
"""

from __future__ import annotations

from collections.abc import Iterable

from hypothesis import strategies as st

from conformance.casefile.vocabulary import Api
from conformance.fuzz.program import Program, ProgramStep
from conformance.fuzz.strategies.forward import batchnorm_eps, leaf
from conformance.fuzz.strategies.more import (
    FAMILY_OPS,
    FORWARD_OPS,
    LAST_OPS,
    inference_use,
)
from conformance.fuzz.strategies.state import (
    BOOL,
    DEFAULT_EPS,
    FAMILIES,
    MAX_STEPS,
    TENSOR_OBSERVATIONS,
    Draw,
    TensorVar,
    _between,
    _choice,
    _State,
    default_api,
)

__all__ = ["DEFAULT_EPS", "FAMILIES", "TensorVar", "batchnorm_eps", "default_api", "programs"]

# Steps and programs ------------------------------------------------------------------------

def _indent(lines: list[str], depth: int) -> list[str]:
    return [("    " * depth) + line for text in lines for line in text.splitlines()]


SAVED_TENSOR_HOOKS = {
    # Unpacks float tensors scaled: every gradient computed from a saved tensor changes.
    "scale": ("lambda t: t.detach()",
              "lambda t: t * 2 if t.dtype in (torch.float32, torch.float64) else t"),
    "identity": ("lambda t: t", "lambda t: t"),
}
"""Pack and unpack hooks. Hooks that count the calls are not drawn: refimpl's nodes do not yet
save exactly PyTorch's tensors (index_put_'s indices, the mm of a Linear's create_graph
backward, NativeBatchNormBackward0's six), so every such program would be reported."""


def _region(draw: Draw, state: _State) -> tuple[list[str], int] | None:
    """A grad-mode, inference-mode or saved-tensor-hooks region: its header lines and the
    body's depth; sets the state's modes inside it."""
    # Plain steps first (Hypothesis shrinks towards the first choice) and most often.
    kinds = ["none", "none", "none", "no_grad", "set_grad_enabled", "enable_grad"]
    if "inference_mode" in state.families and state.allows("torch.inference_mode"):
        kinds.append("inference_mode")
    if "saved_tensor_hooks" in state.families and state.allows(
            "torch.autograd.graph.saved_tensors_hooks"):
        kinds.append("saved_tensors_hooks")
    kind = _choice(draw, kinds)
    if kind == "none":
        return None
    if kind == "no_grad":
        state.grad_enabled = False
        return ["with torch.no_grad():"], 1
    if kind == "set_grad_enabled":
        state.grad_enabled = draw(BOOL)
        return [f"with torch.set_grad_enabled({state.grad_enabled}):"], 1
    if kind == "inference_mode":
        state.grad_enabled, state.inference, state.inference_used = False, True, True
        state.features.add("inference_mode")
        return ["with torch.inference_mode():"], 1
    if kind == "saved_tensors_hooks":
        pack, unpack = SAVED_TENSOR_HOOKS[_choice(draw, tuple(SAVED_TENSOR_HOOKS))]
        state.features.add("saved_tensor_hooks")
        state.saved_hooks = True
        return [f"with torch.autograd.graph.saved_tensors_hooks({pack}, {unpack}):"], 1
    return ["with torch.no_grad():", "    with torch.enable_grad():"], 2


def _step(draw: Draw, state: _State, base: tuple[int, ...]) -> str:
    lines: list[str] = []
    region = _region(draw, state)
    depth = 0
    if region is not None:
        header, depth = region
        lines += header
    family_ops = [op for op, family in FAMILY_OPS.items() if family in state.families]
    last_ops = [op for op in LAST_OPS if op is not inference_use or state.inference_used]
    body: list[str] = []
    for _ in range(draw(_between(0, 3))):
        op = _choice(draw, ("leaf", *FORWARD_OPS, *(("family",) if family_ops else ())))
        if op == "family":
            op = _choice(draw, family_ops)
        text = leaf(draw, state, base) if op == "leaf" or not state.tensors \
            else op(draw, state)
        if text:
            body.append(text)
    last = _choice(draw, (None, *range(len(last_ops))))
    if last is not None:
        text = last_ops[last](draw, state)
        if text:
            body.append(text)
    if not body:
        body.append(leaf(draw, state, base))
    state.grad_enabled, state.inference, state.saved_hooks = True, False, False
    return "\n".join(lines + _indent(body, depth))


def _observations(state: _State) -> tuple[tuple[str, ...], tuple[tuple[str, str], ...]]:
    """The observation keys after a step, and the precision of those computed in a less
    precise dtype than their own (see `ProgramStep.precision`)."""
    keys = [template.format(v=t.name) for t in state.tensors for template in TENSOR_OBSERVATIONS]
    lowest = state.lowest_precision()
    precision = []
    for t in state.tensors:
        if t.precision != t.dtype:
            precision.append((t.name, t.precision))
        if lowest != t.dtype:
            precision.append((f"{t.name}.grad", lowest))
    for mod in state.modules:
        first = f"{mod.name}[0]" if mod.kind == "Sequential" else mod.name
        keys += [f"{first}.weight.grad", f"{first}.bias.grad"]
        if lowest != mod.dtype:
            precision += [(f"{first}.weight.grad", lowest), (f"{first}.bias.grad", lowest)]
        if mod.kind.startswith("BatchNorm"):
            keys += [f"{mod.name}.running_mean", f"{mod.name}.running_var"]
            if mod.precision != mod.dtype:
                precision += [(f"{mod.name}.running_mean", mod.precision),
                              (f"{mod.name}.running_var", mod.precision)]
    if state.inference_used:
        keys += [f"{t.name}.is_inference()" for t in state.tensors]
    if state.calls:
        keys.append("calls")
    keys.append("torch.is_grad_enabled()")
    return tuple(keys), tuple(precision)


@st.composite
def _programs(draw: Draw, api: Api, families: frozenset[str], max_steps: int) -> Program:
    state = _State(api, families)
    # The largest shape of the program; leaves take suffixes of it, some dims set to 1. Its
    # length is drawn uniformly (a list strategy would make most programs 1-d).
    base = tuple(draw(_between(1, 3)) for _ in range(draw(_between(1, 4))))
    steps = []
    for _ in range(draw(_between(1, max_steps))):
        state.features = set()
        run = _step(draw, state, base)
        observe, precision = _observations(state)
        steps.append(ProgramStep(run, observe, tuple(sorted(state.features)), precision))
    seed = draw(_between(0, 2**16))
    return Program(tuple(steps), seed=seed)


def programs(api: Api | None = None, families: Iterable[str] = FAMILIES,
             max_steps: int = MAX_STEPS) -> st.SearchStrategy[Program]:
    """Programs over `api` (default: spec/api.yaml) using the given families of FAMILIES."""
    families = frozenset(families)
    unknown = families - set(FAMILIES)
    if unknown:
        raise ValueError(f"unknown program families {sorted(unknown)}: use {', '.join(FAMILIES)}")
    return _programs(api or default_api(), families, max_steps)
