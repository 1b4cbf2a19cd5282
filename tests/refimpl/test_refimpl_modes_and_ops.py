"""refimpl against PyTorch where the YAML cases cannot reach: inference mode across threads and
in forward AD, generators closed or thrown into under a grad-mode decorator, and a CuPy check
that inference tensors follow their device."""

from __future__ import annotations

import threading
from typing import Any

import pytest

import refimpl

torch = pytest.importorskip("torch")

ENGINES = pytest.mark.parametrize("lib", [refimpl, torch], ids=["refimpl", "torch"])


@ENGINES
def test_inference_mode_is_per_thread(lib: Any) -> None:
    seen: dict[str, bool] = {}
    inside = threading.Event()
    release = threading.Event()

    def worker() -> None:
        seen["worker_start"] = lib.is_inference_mode_enabled()
        with lib.inference_mode():
            seen["worker_tensor"] = lib.ones(1).is_inference()
            inside.set()
            release.wait(5)

    t = threading.Thread(target=worker)
    with lib.inference_mode():
        t.start()
        inside.wait(5)
    seen["main_tensor"] = lib.ones(1).is_inference()  # the worker is still inside its block
    release.set()
    t.join(5)
    assert seen == {"worker_start": False, "worker_tensor": True, "main_tensor": False}


@ENGINES
def test_inference_mode_restored_after_exception(lib: Any) -> None:
    with pytest.raises(ValueError), lib.inference_mode():
        raise ValueError("boom")
    assert not lib.is_inference_mode_enabled()
    assert lib.is_grad_enabled()


@ENGINES
def test_inference_mode_disables_forward_ad(lib: Any) -> None:
    fwad = lib.autograd.forward_ad
    with fwad.dual_level():
        dual = fwad.make_dual(lib.tensor([1.0, 2.0]), lib.tensor([1.0, 1.0]))
        with lib.inference_mode():
            out = dual * 3
        assert fwad.unpack_dual(out).tangent is None
        assert fwad.unpack_dual(dual * 3).tangent.tolist() == [3.0, 3.0]


@ENGINES
def test_decorated_generator_close_and_throw_run_in_the_mode(lib: Any) -> None:
    seen: list[tuple[str, bool]] = []

    @lib.no_grad()
    def gen() -> Any:
        try:
            while True:
                try:
                    yield lib.is_grad_enabled()
                except KeyError:
                    seen.append(("throw", lib.is_grad_enabled()))
        finally:
            seen.append(("close", lib.is_grad_enabled()))

    g = gen()
    assert next(g) is False
    assert g.throw(KeyError("k")) is False
    assert lib.is_grad_enabled()
    g.close()
    assert seen == [("throw", False), ("close", False)]
    assert lib.is_grad_enabled()


@ENGINES
def test_decorated_generator_return_value(lib: Any) -> None:
    @lib.inference_mode()
    def gen() -> Any:
        yield 1
        return lib.ones(1).is_inference()

    g = gen()
    next(g)
    with pytest.raises(StopIteration) as info:
        next(g)
    assert info.value.value is True


@ENGINES
def test_set_grad_enabled_decorates_generators(lib: Any) -> None:
    @lib.set_grad_enabled(False)
    def gen() -> Any:
        yield lib.is_grad_enabled()
        yield lib.is_grad_enabled()

    assert lib.is_grad_enabled()
    assert [(v, lib.is_grad_enabled()) for v in gen()] == [(False, True), (False, True)]


def test_inference_tensors_on_cuda(cuda_backend: Any) -> None:
    x = refimpl.ones(3, device="cuda", requires_grad=True)
    with refimpl.inference_mode():
        y = x * 2
        v = y[1:]
    assert y.is_inference() and v.is_inference() and y.device.type == "cuda"
    with pytest.raises(RuntimeError, match="Inference tensors cannot be saved for backward"):
        x * y
    with pytest.raises(RuntimeError, match="Inplace update to inference tensor outside"):
        v.add_(1)
    assert y.tolist() == [2.0, 3.0, 3.0]


def _anomaly_warnings(lib: Any) -> tuple[str, list[str]]:
    import warnings

    from conformance.run.executor import TRIGGERED

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        lib.autograd.set_detect_anomaly(True)
        try:
            x = lib.tensor([0.0, 1.0], requires_grad=True)
            z = (x / x).sum()  # the forward line the traceback must end with
            with pytest.raises(RuntimeError) as info:
                z.backward()
        finally:
            lib.autograd.set_detect_anomaly(False)
    # The stack itself is compared here (the runner's clean_warning would replace it).
    return str(info.value), [TRIGGERED.sub("", str(w.message)) for w in caught]


def test_anomaly_warning_prints_the_forward_traceback() -> None:
    # The same Python stack on both engines: refimpl leaves its own frames out, as PyTorch's
    # C++ operators leave none.
    ours, theirs = _anomaly_warnings(refimpl), _anomaly_warnings(torch)
    assert ours == theirs
    message, (warning,) = ours
    assert message == "Function 'DivBackward0' returned nan values in its 1th output."
    assert warning.startswith("Error detected in DivBackward0. Traceback of forward call that "
                              "caused the error:\n")
    assert warning.endswith("    z = (x / x).sum()  # the forward line the traceback must end "
                            "with")


@ENGINES
def test_anomaly_mode_is_process_wide(lib: Any) -> None:
    seen: list[bool] = []
    with lib.autograd.set_detect_anomaly(True):
        t = threading.Thread(target=lambda: seen.append(lib.is_anomaly_enabled()))
        t.start()
        t.join(5)
    assert seen == [True]
    assert not lib.is_anomaly_enabled()


def test_anomaly_nan_check_on_cuda(cuda_backend: Any) -> None:
    x = refimpl.tensor([0.0, 1.0], device="cuda", requires_grad=True)
    z = (x / x).sum()
    with pytest.warns(UserWarning, match="Error detected in DivBackward0"), \
            refimpl.autograd.set_detect_anomaly(True), \
            pytest.raises(RuntimeError, match="returned nan values in its 1th output"):
        z.backward()
