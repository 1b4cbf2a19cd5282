"""Generated programs are valid cases: they pass the loader's checks against spec/api.yaml."""

from __future__ import annotations

import re

import pytest
from hypothesis import HealthCheck, given, seed, settings

from conformance.casefile.loader import load
from conformance.casefile.vocabulary import Api
from conformance.fuzz.findings import SOURCE, dump_cases
from conformance.fuzz.program import Program
from conformance.fuzz.strategies import FAMILIES, default_api, programs

FAST = settings(max_examples=60, deadline=None, database=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


def _draw_many(strategy, count: int = 60, start: int = 0) -> list[Program]:
    drawn: list[Program] = []

    @seed(start)
    @settings(FAST, max_examples=count)
    @given(strategy)
    def collect(program: Program) -> None:
        drawn.append(program)

    collect()
    return drawn


def test_programs_lint_as_cases(tmp_path):
    drawn = _draw_many(programs(), count=100)
    cases = []
    for index, program in enumerate(drawn):
        case = program.to_case(f"fuzz.program-{index}")
        case["sources"] = [dict(SOURCE)]
        case["steps"][-1]["expect"] = {key: None for key in program.steps[-1].observe}
        cases.append(case)
    path = tmp_path / "fuzz.yaml"
    path.write_text(dump_cases(cases))
    result = load([path])
    assert result.problems == []
    assert len(result.cases) == len(drawn)


def test_programs_cover_the_op_table_and_the_autograd_surface():
    needles = (".backward(", "torch.autograd.grad(", "create_graph=True", "torch.no_grad()",
                   "torch.enable_grad()", "torch.set_grad_enabled(", ".retain_grad()",
                   "requires_grad_(", ".detach()", ".clone()", "torch.cat(", "torch.stack(",
                   "nn.Linear(", "nn.Conv2d(", "nn.BatchNorm", "torch.matmul(", ".view(",
                   "keepdim=True", ".expand(", ".transpose(", "retain_graph=True",
                   "allow_unused=True", "grad_outputs=", "gradient=", ".sum(dim=", ".max(",
                   ".add_(", "[0] = ", ".eval()", "torch.log(", "float64", ".permute(",
                   ".contiguous()", ".select(", ".dot(", ".mv(", ".mm(", "torch.addmm(",
                   "F.linear(", "nn.Sequential(", "softmax(", "_loss(", "Loss(", ".exp_()",
                   ".pow_(", ".div_(", ".data", ".to(torch.", ".double()", "torch.full(", "_like(",
                   "eps=")
    # A second thousand programs only where the first lacks something: what a draw gives can
    # shift with Hypothesis's state in a busy test process, what the strategy can give cannot.
    sources = ""
    for start in (4, 5):
        sources += "\n".join(p.source() for p in _draw_many(programs(), count=1000, start=start))
        if all(needle in sources for needle in needles):
            break
    for needle in needles:
        assert needle in sources, f"no generated program uses {needle}"
    # Iterating over a tensor (unbind): `v5, v6 = v4`.
    assert re.search(r"^\s*v\d+(, v\d+)*,? = v\d+$", sources, flags=re.M)


def test_programs_draw_hooks_functions_modes_and_the_new_ops():
    # Each family drawn on its own, so that a rare statement (removing a hook it registered
    # before) is not left to the luck of a mixed draw.
    needles = {
        "hooks": (".register_hook(lambda g: g * 2)", ".remove()",
                  "register_post_accumulate_grad_hook("),
        "node_hooks": (".grad_fn.register_prehook(", ".grad_fn.register_hook("),
        "custom_function": ("class Square(torch.autograd.Function)", "mark_non_differentiable",
                            "once_differentiable", "MulAdd.apply("),
        "inference_mode": ("with torch.inference_mode():",),
        "saved_tensor_hooks": ("saved_tensors_hooks(lambda t: t.detach()",
                               "saved_tensors_hooks(lambda t: t,"),
        "ops_more": (".narrow(", "split(", "chunk(", "sgn(", ".median(", "diagonal(",
                     ".repeat("),
        "checkpoint": ("use_reentrant=True", "use_reentrant=False"),
    }
    for family, wanted in needles.items():
        sources = ""
        for start in range(6, 16):
            drawn = _draw_many(programs(families=(family,)), count=400, start=start)
            sources += "\n".join(p.source() for p in drawn)
            if all(needle in sources for needle in wanted):
                break
        for needle in wanted:
            assert needle in sources, f"no generated {family} program uses {needle}"


def test_new_families_can_be_left_out_and_declare_their_features():
    others = [f for f in FAMILIES if f not in ("hooks", "node_hooks", "custom_function",
                                                "inference_mode", "saved_tensor_hooks",
                                                "ops_more", "checkpoint")]
    drawn = _draw_many(programs(families=others), count=150, start=8)
    sources = "\n".join(p.source() for p in drawn)
    for needle in ("register_", "autograd.Function", "inference_mode", "saved_tensors_hooks",
                   ".narrow(", ".median(", ".repeat(", "checkpoint("):
        assert needle not in sources
    for program in _draw_many(programs(), count=150, start=9):
        text = program.source()
        assert ("inference_mode()" in text) == ("inference_mode" in program.features)
        assert ("saved_tensors_hooks(" in text) == ("saved_tensor_hooks" in program.features)
        assert ("autograd.Function" in text) <= ("custom_function" in program.features)
        assert (".register_hook(lambda g:" in text) <= ("hooks" in program.features)
        assert ("utils.checkpoint.checkpoint(" in text) == ("checkpoint" in program.features)


def test_only_names_listed_in_the_api_are_used():
    api = default_api()
    hidden = {"transpose", "expand", "mul_", "add_"}
    narrow = Api(api.globals, {k: v - {"cat", "Conv2d"} for k, v in api.namespaces.items()},
                 api.attributes - hidden)
    sources = "\n".join(p.source() for p in _draw_many(programs(narrow), count=80, start=1))
    for name in sorted(hidden):
        assert f".{name}(" not in sources
    assert "torch.cat(" not in sources and "nn.Conv2d(" not in sources
    assert "torch.stack(" in sources or ".view(" in sources  # still a rich program set


def test_families_can_be_left_out():
    sources = "\n".join(p.source() for p in _draw_many(programs(families=()), count=80, start=2))
    assert "nn." not in sources
    assert "create_graph" not in sources
    assert not re.search(r"\.(add|mul|sub|zero|fill)_\(|\] = ", sources)


def test_features_name_what_the_program_needs():
    for program in _draw_many(programs(), count=60, start=3):
        text = program.source()
        assert ("nn.Conv2d(" in text) == ("conv" in program.features)
        assert ("create_graph=True" in text) == ("create_graph" in program.features)
        assert set(program.features) <= set(FAMILIES)


def test_unknown_family_is_rejected():
    with pytest.raises(ValueError, match="unknown program families"):
        programs(families=["inplace", "sparse"])


def test_a_value_moved_from_float32_keeps_float32_precision():
    from conformance.fuzz.strategies import _observations
    from conformance.fuzz.strategies.state import TensorVar, _derived, _State

    state = _State(default_api(), frozenset(FAMILIES))
    wide = state.add(TensorVar(state.fresh(), (2,), "float64", True, True, 1.0, True))
    assert _observations(state)[1] == ()  # float64 only: float64 tolerance everywhere
    narrow = state.add(TensorVar(state.fresh(), (2,), "float32", True, True, 1.0, True))
    moved = _derived(state, [narrow], (2,), "float64", 1.0, True)  # narrow.double()
    mixed = _derived(state, [wide, moved], (2,), "float64", 2.0, True)  # wide + moved
    _, precision = _observations(state)
    assert (moved.name, "float32") in precision and (mixed.name, "float32") in precision
    assert (wide.name, "float32") not in precision  # its value never met float32
    assert (f"{wide.name}.grad", "float32") in precision  # its gradient flows through `mixed`


def test_precision_names_only_observed_keys_and_less_precise_dtypes():
    for program in _draw_many(programs(), count=100, start=5):
        for step in program.steps:
            assert all(key in step.observe and dtype == "float32"
                       for key, dtype in step.precision), step
