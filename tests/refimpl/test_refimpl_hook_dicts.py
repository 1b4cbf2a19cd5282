"""Hooks as PyTorch keeps them: a tensor's ``_backward_hooks`` and
``_post_accumulate_grad_hooks`` dicts and a module's ``_forward_hooks`` and kin, keyed by handle
id, which code outside PyTorch reads and edits (FSDP checks a tensor's
``_backward_hooks.values()``, cleanup code clears a module's ``_forward_hooks``, hook libraries
pop entries by id).
Underscore attributes are outside the case language, so each program here runs on refimpl and
on PyTorch 2.13 and the two outcomes must be equal."""

from __future__ import annotations

from collections import OrderedDict
from typing import Any

import pytest

import refimpl

torch = pytest.importorskip("torch", reason="PyTorch is the oracle these tests compare with")


def _outcome(program: Any, lib: Any) -> Any:
    try:
        return ("value", program(lib))
    except Exception as e:  # noqa: BLE001 - the class and text are what is compared
        return ("raises", type(e).__name__, str(e))


def _grad(t: Any) -> Any:
    return None if t.grad is None else t.grad.tolist()


def _keys(hooks: Any) -> Any:
    # Handle ids count every handle of the process, so only their number and order compare.
    return None if hooks is None else (type(hooks).__name__, len(hooks))


def leaf_dict_cleared_by_hand(L: Any) -> Any:
    x = L.ones(2, requires_grad=True)
    before = _keys(x._backward_hooks)
    x.register_hook(lambda g: g * 2)
    after = _keys(x._backward_hooks)
    x._backward_hooks.clear()
    (x * 3).sum().backward()
    return before, after, _grad(x)


def leaf_dict_edited_by_hand(L: Any) -> Any:
    x = L.ones(2, requires_grad=True)
    x.register_hook(lambda g: g * 2)
    x._backward_hooks[10**6] = lambda g: g * 10
    (x * 3).sum().backward()
    return _grad(x)


def leaf_dict_assigned(L: Any) -> Any:
    x = L.ones(2, requires_grad=True)
    x.register_hook(lambda g: g * 2)
    x._backward_hooks = OrderedDict([(5, lambda g: g * 7)])
    (x * 1).sum().backward()
    y = L.ones(2, requires_grad=True)
    y.register_hook(lambda g: g * 2)
    y._backward_hooks = None
    (y * 1).sum().backward()
    return _grad(x), _grad(y), y._backward_hooks


def non_leaf_dict_edited_by_hand(L: Any) -> Any:
    x = L.ones(2, requires_grad=True)
    y = x * 2
    y.register_hook(lambda g: g * 2)
    y._backward_hooks[10**6] = lambda g: g * 10
    y.sum().backward()
    return _grad(x)


def non_leaf_dict_assigned_is_not_registered(L: Any) -> Any:
    # The dict registered at the first register_hook stays on the node; a dict assigned
    # later (or None) changes the attribute only, and a dict assigned before any hook is
    # never registered, so a hook added to it never runs.
    out = []
    for replacement in (None, OrderedDict([(5, lambda g: g * 7)])):
        x = L.ones(2, requires_grad=True)
        y = x * 2
        y.register_hook(lambda g: g * 2)
        y._backward_hooks = replacement
        y.sum().backward()
        out.append(_grad(x))
    x = L.ones(2, requires_grad=True)
    y = x * 2
    y._backward_hooks = OrderedDict([(5, lambda g: g * 7)])
    y.register_hook(lambda g: g * 3)
    y.sum().backward()
    out.append(_grad(x))
    return out


def retain_grad_alone_makes_no_dict(L: Any) -> Any:
    x = L.ones(2, requires_grad=True)
    y = x * 2
    y.retain_grad()
    before = y._backward_hooks
    y.register_hook(lambda g: g * 3)
    y.sum().backward()
    return before, _keys(y._backward_hooks), _grad(y), _grad(x)


def in_place_starts_a_new_dict(L: Any) -> Any:
    log = []
    x = L.ones(2, requires_grad=True)
    y = x * 2
    y.register_hook(lambda g: (log.append(("before", g.tolist())), g * 2)[1])
    first = y._backward_hooks
    y.mul_(3)
    reset = y._backward_hooks
    y.register_hook(lambda g: (log.append(("after", g.tolist())), g * 5)[1])
    second = _keys(y._backward_hooks)
    y.sum().backward()
    return _keys(first), reset, second, _grad(x), log


def base_written_resets_a_views_dict(L: Any) -> Any:
    base = L.ones(2, requires_grad=True).clone()
    view = base[:]
    view.register_hook(lambda g: g * 3)
    base.mul_(2)
    # The view's grad_fn is brought up to date when it is next read, and its dict with it.
    stale = _keys(view._backward_hooks)
    name = type(view.grad_fn).__name__
    return stale, name, view._backward_hooks


def hooks_by_handle_and_with(L: Any) -> Any:
    x = L.ones(2, requires_grad=True)
    with x.register_hook(lambda g: g * 2) as handle:
        inside = _keys(x._backward_hooks)
        listed = list(x._backward_hooks) == [handle.id]
    (x * 1).sum().backward()
    return inside, listed, _keys(x._backward_hooks), _grad(x)


def post_accumulate_dict(L: Any) -> Any:
    x = L.ones(2, requires_grad=True)
    before = x._post_accumulate_grad_hooks
    seen = []
    handle = x.register_post_accumulate_grad_hook(lambda t: seen.append(t.grad.tolist()))
    during = _keys(x._post_accumulate_grad_hooks)
    (x * 2).sum().backward()
    handle.remove()
    (x * 2).sum().backward()
    return before, during, _keys(x._post_accumulate_grad_hooks), seen


def deleting_the_dict_is_refused(L: Any) -> Any:
    x = L.ones(2, requires_grad=True)
    del x._backward_hooks


def hook_in_the_dict_checked_under_its_name(L: Any) -> Any:
    x = L.ones(2, requires_grad=True)
    y = x * 2

    def widen(g: Any) -> Any:
        return L.ones(3)

    y.register_hook(lambda g: g)
    y.register_hook(widen)
    y.sum().backward()


def module_hook_dicts(L: Any) -> Any:
    lin = L.nn.Linear(2, 2)
    calls = []
    a = lin.register_forward_hook(lambda m, args, out: calls.append("a"))
    b = lin.register_forward_hook(lambda m, args, kwargs, out: calls.append("b"),
                                  with_kwargs=True, always_call=True, prepend=True)
    p = lin.register_forward_pre_hook(lambda m, args, kwargs: calls.append("p"),
                                      with_kwargs=True)
    lin.register_full_backward_hook(lambda m, gi, go: calls.append("bw"))
    lin.register_full_backward_pre_hook(lambda m, go: calls.append("bwpre"))
    shapes = {name: _keys(getattr(lin, name)) for name in (
        "_forward_hooks", "_forward_hooks_with_kwargs", "_forward_hooks_always_called",
        "_forward_pre_hooks", "_forward_pre_hooks_with_kwargs", "_backward_hooks",
        "_backward_pre_hooks")}
    order = list(lin._forward_hooks) == [b.id, a.id]
    lin(L.ones(1, 2, requires_grad=True)).sum().backward()
    b.remove()
    flags = (_keys(lin._forward_hooks_with_kwargs), _keys(lin._forward_hooks_always_called))
    del lin._forward_pre_hooks[p.id]
    lin._backward_hooks.clear()
    lin(L.ones(1, 2, requires_grad=True)).sum().backward()
    return shapes, order, flags, calls


def module_hooks_cleared_by_hand(L: Any) -> Any:
    lin = L.nn.Linear(2, 2)
    calls = []
    lin.register_forward_hook(lambda m, args, out: calls.append("f"))
    lin.register_forward_pre_hook(lambda m, args: calls.append("p"))
    lin._forward_hooks.clear()
    lin._forward_pre_hooks.clear()
    lin(L.ones(1, 2))
    return calls, _keys(lin._forward_hooks)


PROGRAMS = [leaf_dict_cleared_by_hand, leaf_dict_edited_by_hand, leaf_dict_assigned,
            non_leaf_dict_edited_by_hand, non_leaf_dict_assigned_is_not_registered,
            retain_grad_alone_makes_no_dict, in_place_starts_a_new_dict,
            base_written_resets_a_views_dict, hooks_by_handle_and_with, post_accumulate_dict,
            deleting_the_dict_is_refused, hook_in_the_dict_checked_under_its_name,
            module_hook_dicts, module_hooks_cleared_by_hand]


@pytest.mark.parametrize("program", PROGRAMS, ids=lambda p: p.__name__)
def test_hook_dicts_as_pytorch(program: Any) -> None:
    expected = _outcome(program, torch)
    actual = _outcome(program, refimpl)
    assert actual == expected


def test_programs_reach_what_they_test() -> None:
    # The comparisons above would pass if both libraries raised the same error early.
    assert _outcome(in_place_starts_a_new_dict, torch)[0] == "value"
    assert _outcome(deleting_the_dict_is_refused, torch) == (
        "raises", "RuntimeError", "Deletion of _backwards_hooks not allowed!")
    assert _outcome(hook_in_the_dict_checked_under_its_name, torch) == (
        "raises", "RuntimeError", "hook 'widen' has changed the size of value")
