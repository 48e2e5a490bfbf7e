"""hooklab.Hooks and the signature check."""

from __future__ import annotations

import pytest
import torch
from torch import nn

import hooklab
from hooklab import Hooks
from hooklab.kinds import check_hook_signature, check_kind, expected_signature


def linear() -> nn.Linear:
    layer = nn.Linear(2, 2, bias=False)
    with torch.no_grad():
        layer.weight.copy_(torch.eye(2))
    return layer


def double(module, args, output):
    return output * 2


def test_forward_hook_changes_output_and_is_removed_on_exit():
    layer = linear()
    with Hooks() as hooks:
        hooks.forward(layer, double)
        assert layer(torch.ones(2)).tolist() == [2.0, 2.0]
        assert len(hooks) == 1
    assert layer(torch.ones(2)).tolist() == [1.0, 1.0]
    assert hooklab.count_hooks(layer) == 0


def test_same_key_replaces_never_stacks():
    layer = linear()
    hooks = Hooks()
    for _ in range(5):
        hooks.forward(layer, double, key="x2")
    assert len(layer._forward_hooks) == 1
    assert layer(torch.ones(2)).tolist() == [2.0, 2.0]


def test_without_a_key_two_registrations_never_replace_each_other():
    """Explicit identity: two lambdas (or a function re-defined and registered again) on one module
    stack up, as with PyTorch's own register_forward_hook; only a key or a named owner replaces."""
    layer = linear()
    hooks = Hooks()
    hooks.forward(layer, lambda module, args, output: output * 2)
    hooks.forward(layer, lambda module, args, output: output * 3)
    assert len(layer._forward_hooks) == 2 and len(hooks) == 2
    assert layer(torch.ones(2)).tolist() == [6.0, 6.0]
    assert len(set(hooks.keys())) == 2


def test_different_functions_on_same_module_both_stay():
    layer = linear()
    hooks = Hooks()

    def plus_one(module, args, output):
        return output + 1
    hooks.forward(layer, double)
    hooks.forward(layer, plus_one)
    assert len(hooks) == 2
    assert layer(torch.ones(2)).tolist() == [3.0, 3.0]  # (1 * 2) + 1, registration order


def test_with_block_that_raises_leaves_zero_hooks():
    layer = linear()
    x = torch.ones(2, requires_grad=True)
    with pytest.raises(ZeroDivisionError):
        with Hooks() as hooks:
            hooks.forward(layer, double)
            hooks.forward_pre(layer, lambda m, args: None)
            hooks.backward(layer, lambda m, gi, go: None)
            hooks.backward_pre(layer, lambda m, go: None)
            hooks.tensor(x, lambda g: None)
            1 / 0
    assert hooklab.count_hooks(layer) == 0
    assert len(hooks) == 0


def test_named_hooks_replace_the_previous_owner_and_close_it():
    layer = linear()
    first = Hooks("rerun-test")
    first.forward(layer, double)
    second = Hooks("rerun-test")  # like re-running the cell that builds it
    second.forward(layer, double)
    assert len(layer._forward_hooks) == 1
    assert len(first) == 0 and len(second) == 1
    with pytest.raises(RuntimeError, match="replaced by a newer Hooks"):
        first.forward(layer, double)  # the old owner is closed: nothing it registers could be cleaned up
    third = Hooks("rerun-test")
    assert len(layer._forward_hooks) == 0 and len(third) == 0


def test_mapping_target_registers_on_each_module_and_one_remove_takes_all():
    model = nn.Sequential(nn.Linear(2, 2), nn.ReLU(), nn.Linear(2, 2))
    hooks = Hooks()
    registration = hooks.forward(hooklab.select(model, type=nn.Linear), double, key="lin")
    assert len(hooks) == 2 and hooks.keys() == ["lin"] and len(registration.handles) == 2
    registration.remove()  # the returned object removes every one of them
    assert hooklab.count_hooks(model) == 0 and len(hooks) == 0 and hooks.keys() == []
    hooks.add("forward", hooklab.select(model, type=nn.Linear), double, key="lin")
    hooks.drop("lin")
    assert hooklab.count_hooks(model) == 0


def test_a_registration_is_pytorchs_handle_plus_its_owner():
    layer = linear()
    hooks = Hooks()
    registration = hooks.forward(layer, double)
    [handle] = registration.handles
    assert isinstance(handle, torch.utils.hooks.RemovableHandle) and handle.id in layer._forward_hooks
    handle.remove()  # removed behind the owner's back, through PyTorch's own handle
    assert len(hooks) == 0  # len counts what PyTorch still holds
    with hooks.forward(layer, double):
        assert layer(torch.ones(2)).tolist() == [2.0, 2.0]
    assert len(layer._forward_hooks) == 0


def test_forward_pre_single_value_is_wrapped():
    layer = linear()
    with Hooks() as hooks:
        hooks.forward_pre(layer, lambda m, args: args[0] * 10)
        assert layer(torch.ones(2)).tolist() == [10.0, 10.0]


def test_with_kwargs_and_prepend_and_always_call_pass_through():
    class Scale(nn.Module):
        def forward(self, x, *, factor=1.0):
            if x.sum() < 0:
                raise ValueError("negative input")
            return x * factor

    m = Scale()
    seen = []
    with Hooks() as hooks:
        hooks.forward_pre(m, lambda mod, args, kwargs: (args, {"factor": 5.0}), with_kwargs=True)
        assert m(torch.ones(1), factor=2.0).item() == 5.0
        hooks.forward(m, lambda mod, a, out: seen.append("second"), key="b")
        hooks.forward(m, lambda mod, a, out: seen.append("first"), key="a", prepend=True)
        m(torch.ones(1))
        assert seen == ["first", "second"]
        hooks.forward(m, lambda mod, a, out: seen.append("always"), key="c", always_call=True)
        seen.clear()
        with pytest.raises(ValueError, match="negative input"):
            m(-torch.ones(1))
        assert seen == ["always"]  # forward raised: only the always_call hook ran


def test_backward_hook_replaces_grad_input():
    layer = linear()
    x = torch.ones(1, 2, requires_grad=True)
    with Hooks() as hooks:
        hooks.backward(layer, lambda m, gi, go: (gi[0] * 0,))
        layer(x).sum().backward()
    assert x.grad.tolist() == [[0.0, 0.0]]


def test_backward_pre_hook_replaces_grad_output():
    layer = linear()
    x = torch.ones(1, 2, requires_grad=True)
    with Hooks() as hooks:
        hooks.backward_pre(layer, lambda m, go: (go[0] * 3,))
        layer(x).sum().backward()
    assert x.grad.tolist() == [[3.0, 3.0]]


def test_tensor_hook_and_post_accumulate_grad():
    w = torch.tensor([1.0, 2.0], requires_grad=True)
    seen = []
    with Hooks() as hooks:
        hooks.tensor(w, lambda g: g * 10)
        hooks.post_accumulate_grad(w, lambda p: seen.append(p.grad.tolist()))
        (w * w).sum().backward()
    assert w.grad.tolist() == [20.0, 40.0]
    assert seen == [[20.0, 40.0]]


@pytest.mark.parametrize("kind, bad, fragment", [
    ("forward", lambda module, output: None, "hook(module, args, output)"),
    ("forward_pre", lambda module: None, "hook(module, args)"),
    ("backward", lambda module, grad_output: None, "hook(module, grad_input, grad_output)"),
    ("backward_pre", lambda grad_output: None, "hook(module, grad_output)"),
    ("tensor", lambda: None, "hook(grad)"),
    ("tensor", lambda module, grad: None, "hook(grad)"),
])
def test_wrong_signature_is_rejected_when_registered(kind, bad, fragment):
    layer = linear()
    target = torch.ones(2, requires_grad=True) if kind == "tensor" else layer
    with pytest.raises(TypeError) as err:
        Hooks().add(kind, target, bad)
    assert fragment in str(err.value)
    assert "Change it to" in str(err.value)
    assert hooklab.count_hooks(layer) == 0


def test_signature_check_accepts_bound_methods_varargs_and_defaults():
    class Counter:
        def __init__(self):
            self.n = 0

        def hook(self, module, args, output):
            self.n += 1

    check_hook_signature(Counter().hook, "forward")  # self is already bound: 3 parameters left
    check_hook_signature(lambda *a: None, "forward")
    check_hook_signature(lambda module, args, output, extra=1: None, "forward")
    check_hook_signature(print, "tensor")  # builtin without a signature: accepted


def test_signature_hint_for_kwargs():
    with pytest.raises(TypeError, match="with_kwargs=True"):
        check_hook_signature(lambda m, a, kw, out: None, "forward")
    check_hook_signature(lambda m, a, kw, out: None, "forward", with_kwargs=True)


def test_not_callable_is_rejected():
    with pytest.raises(TypeError, match="no parentheses"):
        Hooks().forward(linear(), double(None, None, torch.ones(1)))


def test_required_keyword_only_is_rejected():
    with pytest.raises(TypeError, match="keyword-only"):
        check_hook_signature(lambda grad, *, scale: grad, "tensor")


def test_unknown_kind_suggests_close_ones():
    with pytest.raises(ValueError) as err:
        Hooks().add("forwrd", linear(), double)
    assert "'forward'" in str(err.value) and "Valid kinds" in str(err.value)
    assert check_kind("tensor").name == "tensor" and check_kind("tensor").register == "register_hook"
    assert expected_signature("forward", with_kwargs=True) == "hook(module, args, kwargs, output)"


def test_non_module_targets_get_clear_errors():
    hooks = Hooks()
    with pytest.raises(TypeError, match="hooklab.select"):
        hooks.forward("fc", double)
    with pytest.raises(TypeError, match="hooks.tensor"):
        hooks.forward(torch.ones(2), double)
    with pytest.raises(TypeError, match="got int"):
        hooks.forward(3, double)
    with pytest.raises(TypeError, match="goes on a tensor"):
        hooks.tensor(linear(), lambda g: g)
    with pytest.raises(ValueError, match="empty"):
        hooks.add("forward", {}, double)


def test_tensor_without_grad_is_rejected_with_advice():
    with pytest.raises(ValueError, match="requires_grad=True"):
        Hooks().tensor(torch.ones(3), lambda g: g)
    non_leaf = torch.ones(2, requires_grad=True) * 2
    with pytest.raises(ValueError, match="leaf"):
        Hooks().post_accumulate_grad(non_leaf, lambda p: None)


def test_unknown_option_is_rejected():
    with pytest.raises(TypeError, match="always_call"):
        Hooks().add("backward", linear(), lambda m, gi, go: None, always_call=True)


def test_drop_unknown_key_lists_the_close_keys():
    hooks = Hooks()
    hooks.forward(linear(), double, key="double")
    with pytest.raises(KeyError, match="'double'"):
        hooks.drop("doubel")
    assert "double" in hooks and list(hooks) == ["double"]
    hooks.drop("double")
    assert len(hooks) == 0


def test_repr_is_readable():
    hooks = Hooks("repr-demo")
    assert repr(hooks) == "Hooks('repr-demo'): no hooks"
    layer = linear()
    hooks.forward(layer, double, key="x2")
    assert repr(hooks) == "Hooks('repr-demo'): 1 hook\n  'x2': forward hook double on Linear"
    hooks.remove()


def test_failed_registration_leaves_nothing_behind():
    model = nn.Sequential(nn.Linear(2, 2), nn.Linear(2, 2))
    hooks = Hooks()
    with pytest.raises(TypeError):
        hooks.add("forward", {"0": model[0], "x": "not a module"}, double)
    assert hooklab.count_hooks(model) == 0
