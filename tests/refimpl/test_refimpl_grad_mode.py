"""Grad mode: contexts, decorators, plain calls, threads and exceptions."""

from __future__ import annotations

import threading

import pytest

import refimpl


@pytest.fixture(autouse=True)
def _restore_mode():
    yield
    refimpl.set_grad_enabled(True)


def _records() -> bool:
    return (refimpl.ones(1, requires_grad=True) * 2).requires_grad


def test_no_grad_context_and_enable_grad_inside() -> None:
    x = refimpl.ones(2, requires_grad=True)
    with refimpl.no_grad():
        y = x * 2
        assert not refimpl.is_grad_enabled()
        with refimpl.enable_grad():
            z = x * 2
        assert not refimpl.is_grad_enabled()
    assert refimpl.is_grad_enabled()
    assert (y.requires_grad, y.is_leaf, y.grad_fn) == (False, True, None)
    assert type(z.grad_fn).__name__ == "MulBackward0"


def test_decorators_with_and_without_parentheses() -> None:
    @refimpl.no_grad()
    def called() -> bool:
        return _records()

    @refimpl.no_grad
    def bare() -> bool:
        return _records()

    @refimpl.set_grad_enabled(False)
    def switched() -> bool:
        return _records()

    assert refimpl.is_grad_enabled(), "decorating must not switch the mode"
    assert (called(), bare(), switched()) == (False, False, False)
    assert refimpl.is_grad_enabled()
    assert called.__name__ == "called"

    with refimpl.no_grad():
        assert refimpl.enable_grad()(_records)() is True


def test_set_grad_enabled_plain_call_and_context() -> None:
    refimpl.set_grad_enabled(False)
    assert not _records()
    refimpl.set_grad_enabled(True)
    assert _records()
    ctx = refimpl.set_grad_enabled(False)
    assert not refimpl.is_grad_enabled(), "the constructor switches the mode, as in PyTorch"
    with ctx:
        assert not _records()
    assert refimpl.is_grad_enabled()
    with refimpl.no_grad(), refimpl.set_grad_enabled(True):
        assert _records()


def test_set_grad_enabled_rejects_non_bool() -> None:
    with pytest.raises(TypeError, match=r"argument 'enabled' \(position 1\) must be bool, not int"):
        refimpl.set_grad_enabled(1)


def test_mode_restored_when_block_raises() -> None:
    with pytest.raises(ValueError), refimpl.no_grad():
        raise ValueError("boom")
    assert refimpl.is_grad_enabled()

    @refimpl.no_grad()
    def fails() -> None:
        raise KeyError("boom")

    with pytest.raises(KeyError):
        fails()
    assert refimpl.is_grad_enabled()
    refimpl.set_grad_enabled(False)
    with pytest.raises(ValueError), refimpl.enable_grad():
        raise ValueError("boom")
    assert not refimpl.is_grad_enabled()


def test_grad_mode_is_per_thread() -> None:
    seen: dict[str, bool] = {}
    inside = threading.Event()
    release = threading.Event()

    def worker() -> None:
        seen["start"] = refimpl.is_grad_enabled()
        with refimpl.no_grad():
            seen["worker_records"] = _records()
            inside.set()
            release.wait(5)

    t = threading.Thread(target=worker)
    with refimpl.no_grad():
        t.start()
        inside.wait(5)
        main_disabled = not refimpl.is_grad_enabled()
    seen["main_records"] = _records()  # the worker is still inside its no_grad block
    release.set()
    t.join(5)
    assert seen == {"start": True, "worker_records": False, "main_records": True}
    assert main_disabled


def test_backward_runs_with_grad_mode_of_create_graph() -> None:
    x = refimpl.tensor(2.0, requires_grad=True)
    (g,) = refimpl.autograd.grad(x ** 3, x, create_graph=True)
    assert g.requires_grad and refimpl.is_grad_enabled()
    (g2,) = refimpl.autograd.grad(x ** 3, x)
    assert not g2.requires_grad
