"""The shipped tape (conformance/engines/tape.py over refimpl.ops.kernels): refimpl's autograd
state with an engine's functions and vector-Jacobian products.

The proof that the tape is faithful is `torch-func-tape`: PyTorch's own operators and
`torch.func.vjp` on the tape must pass every case PyTorch passes at the `semantics` level,
short of the features the tape does not offer. Beside it: installing an engine leaves refimpl
as it was once closed, an op an engine lacks is a missing name (never refimpl's value), and
each engine adapter on the tape stays small.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from conformance.casefile.files import DEFAULT_SPEC_DIR
from conformance.casefile.loader import load
from conformance.engines import load_engine
from conformance.engines.tape import TAPE_LACKS, TapeEngine, numpy_like_ops, tape_ops

ROOT = Path(__file__).resolve().parents[2]
ADAPTERS = ("jax_adapter.py", "mlx_adapter.py", "autograd_adapter.py")


def test_torch_func_on_the_tape_passes_what_torch_passes(tmp_path: Path) -> None:
    pytest.importorskip("torch", reason="the proof runs PyTorch's operators on the tape")
    report = tmp_path / "report.json"
    done = subprocess.run(
        [sys.executable, "-m", "conformance", "run", "-q", "--engine", "torch-func-tape",
         "--level", "semantics", "--json", str(report)],
        cwd=ROOT, capture_output=True, text=True, timeout=600, check=False)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    cases = {case.id: case for case in load([DEFAULT_SPEC_DIR / "cases"]).cases}
    results = json.loads(report.read_text())["results"]
    assert len(results) == len(cases)
    for result in results:
        verdict = result["verdicts"]["semantics"]
        if verdict == "unsupported":
            # Only the features the tape does not offer (CUDA, meta, repr).
            assert set(cases[result["case_id"]].features) & TAPE_LACKS, result["case_id"]
        else:
            assert verdict == "passed", (result["case_id"], result["message"])
    passed = sum(r["verdicts"]["semantics"] == "passed" for r in results)
    assert passed >= 650, f"only {passed} cases ran on the tape"


def _torch_func() -> TapeEngine:
    pytest.importorskip("torch", reason="the tape's own tests run torch.func on it")
    engine = load_engine("torch-func-tape")
    assert isinstance(engine, TapeEngine)
    return engine


def test_closing_a_tape_engine_gives_refimpl_back_its_own_math() -> None:
    import refimpl
    from refimpl.ops import kernels
    from refimpl.ops.table import ROWS

    before = {name: row.forward for name, row in ROWS.items()}
    engine = _torch_func()
    namespace = engine.namespace(np.random.default_rng(0))
    assert kernels.installed() is engine.kernels
    x = namespace["torch"].tensor([1.0, 2.0], requires_grad=True)
    (x * x).sum().backward()
    assert x.grad.tolist() == [2.0, 4.0]
    assert ROWS["mul.Tensor"].forward is not before["mul.Tensor"]
    engine.close()
    assert kernels.installed() is None
    assert {name: row.forward for name, row in ROWS.items()} == before
    y = refimpl.tensor([3.0], requires_grad=True)
    (y * y).sum().backward()
    assert y.grad.tolist() == [6.0] and type((y * 2).grad_fn).__name__ == "MulBackward0"


def test_the_values_and_gradients_are_the_engines() -> None:
    # A kernel table whose exp is off by one: the tape must show the engine's value and the
    # engine's derivative, never refimpl's.
    engine = _torch_func()
    import torch

    table = dict(engine.kernels.ops)
    engine.kernels.ops["exp"] = lambda x: torch.exp(x) + x
    try:
        refimpl = engine.namespace(np.random.default_rng(0))["torch"]
        x = refimpl.tensor([0.0, 1.0], requires_grad=True)
        y = x.exp()
        y.sum().backward()
        assert np.allclose(y.detach().numpy(), [1.0, np.e + 1])
        assert np.allclose(x.grad.numpy(), [2.0, np.e + 1])
    finally:
        engine.kernels.ops.clear()
        engine.kernels.ops.update(table)
        engine.close()


def test_an_op_the_engine_lacks_is_a_missing_name_not_refimpls_value() -> None:
    engine = _torch_func()
    table = dict(engine.kernels.ops)
    del engine.kernels.ops["exp"]
    try:
        refimpl = engine.namespace(np.random.default_rng(0))["torch"]
        with pytest.raises(NotImplementedError, match="torch.func has no function for the op "
                                                      "'exp'"):
            refimpl.tensor([1.0]).exp()
    finally:
        engine.kernels.ops.update(table)
        engine.close()


def test_create_graph_gradients_depend_on_what_pytorchs_formula_reads() -> None:
    engine = _torch_func()
    try:
        torch = engine.namespace(np.random.default_rng(0))["torch"]
        x = torch.tensor([2.0], requires_grad=True)
        y = torch.tensor([3.0], requires_grad=True)
        (g,) = torch.autograd.grad((x * 2).sum(), x, create_graph=True)
        assert not g.requires_grad  # the gradient of x * 2 is a constant
        gx, gy = torch.autograd.grad((x * y).sum(), (x, y), create_graph=True)
        assert torch.autograd.grad(gx.sum(), y)[0].tolist() == [1.0]
        assert torch.autograd.grad(gx.sum(), x, allow_unused=True)[0] is None
        (h,) = torch.autograd.grad((x ** 3).sum(), x, create_graph=True)
        (h2,) = torch.autograd.grad(h.sum(), x, create_graph=True)
        (h3,) = torch.autograd.grad(h2.sum(), x)
        assert (h.tolist(), h2.tolist(), h3.tolist()) == ([12.0], [12.0], [6.0])
    finally:
        engine.close()


def test_every_engine_adapter_on_the_tape_is_small() -> None:
    for name in ADAPTERS:
        lines = (ROOT / "conformance" / "engines" / name).read_text().count("\n")
        assert lines <= 300, f"{name} has {lines} lines: move what is common into the tape"


def test_the_numpy_table_covers_every_math_row() -> None:
    table = numpy_like_ops(np, lambda fn, primals, cotangent: [cotangent])
    missing = [name for name, _, _, status in tape_ops() if status == "-" and name not in table]
    assert missing == []


def test_tape_ops_lists_what_an_engine_lacks() -> None:
    pytest.importorskip("torch", reason="lists the torch-func-tape engine's table")
    done = subprocess.run([sys.executable, "-m", "conformance", "tape-ops", "--engine",
                           "torch-func-tape"], cwd=ROOT, capture_output=True, text=True,
                          timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    statuses = {line.split()[1]: line.split()[0] for line in done.stdout.splitlines()}
    assert statuses["mul.Tensor"] == "ok" and statuses["view"] == "view"
    assert statuses["sigmoid_backward"] == "ok"  # the formula of a row saving its result
    assert statuses["convolution_backward.input"] == "helper"
    assert "missing" not in statuses.values()
    refused = subprocess.run([sys.executable, "-m", "conformance", "tape-ops", "--engine",
                              "refimpl"], cwd=ROOT, capture_output=True, text=True,
                             timeout=120, check=False)
    assert refused.returncode == 2 and "not an engine on the tape" in refused.stdout
