"""hooklab.registered_hooks / count_hooks: every hook kind PyTorch keeps in a dict, each one tested,
and the kinds it cannot see (hooks on intermediate tensors and on autograd nodes)."""

from __future__ import annotations

from collections import OrderedDict

import pytest
import torch
from torch import nn
from torch.nn.utils import parametrize

import hooklab


def model() -> nn.Sequential:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(2, 3), nn.ReLU(), nn.Linear(3, 1))


def noop(*args):
    return None


#: kind -> how to register it on model()'s module "2" with plain PyTorch.
MODULE_KINDS = {
    "forward_pre": lambda m: m[2].register_forward_pre_hook(noop),
    "forward": lambda m: m[2].register_forward_hook(noop),
    "backward_pre": lambda m: m[2].register_full_backward_pre_hook(noop),
    "backward": lambda m: m[2].register_full_backward_hook(noop),
    "state_dict_pre": lambda m: m[2].register_state_dict_pre_hook(noop),
    "state_dict": lambda m: m[2].register_state_dict_post_hook(noop),
    "load_state_dict_pre": lambda m: m[2].register_load_state_dict_pre_hook(noop),
    "load_state_dict_post": lambda m: m[2].register_load_state_dict_post_hook(noop),
}


@pytest.mark.parametrize("kind", sorted(MODULE_KINDS))
def test_each_module_hook_kind_is_listed_and_gone_after_remove(kind):
    m = model()
    handle = MODULE_KINDS[kind](m)
    assert hooklab.registered_hooks(m, include_global=False).rows == [["2", kind, "noop"]]
    handle.remove()
    assert hooklab.count_hooks(m, include_global=False) == 0


@pytest.mark.parametrize("kind, register", [
    ("tensor", lambda t: t.register_hook(noop)),
    ("post_accumulate_grad", lambda t: t.register_post_accumulate_grad_hook(noop)),
])
def test_each_tensor_hook_kind_on_a_parameter_is_listed_under_its_name(kind, register):
    m = model()
    handle = register(m[0].weight)
    report = hooklab.registered_hooks(m, include_global=False)
    assert report.rows == [["0.weight", kind, "noop"]]
    assert report.count(kind=kind, module="0.weight") == 1 and hooklab.count_hooks(m, include_global=False) == 1
    handle.remove()
    assert hooklab.count_hooks(m, include_global=False) == 0


def test_hooks_on_buffers_and_on_the_root_module_parameters():
    m = model()
    m.register_buffer("scale", torch.ones(1, requires_grad=True))
    m.register_parameter("offset", nn.Parameter(torch.zeros(1)))
    handles = [m.scale.register_hook(noop), m.scale.register_post_accumulate_grad_hook(noop),
               m.offset.register_hook(noop)]
    rows = hooklab.registered_hooks(m, include_global=False).rows
    assert sorted(rows) == [["offset", "tensor", "noop"], ["scale", "post_accumulate_grad", "noop"],
                            ["scale", "tensor", "noop"]]
    for handle in handles:
        handle.remove()
    assert hooklab.count_hooks(m, include_global=False) == 0


def test_every_kind_at_once_through_hooklab_hooks_and_global_hooks():
    m = model()
    glob = torch.nn.modules.module.register_module_forward_hook(noop)
    try:
        with hooklab.Hooks() as hooks:
            hooks.forward(m[0], noop)
            hooks.backward(m[2], noop)
            hooks.tensor(m[0].weight, noop)
            hooks.post_accumulate_grad(m[2].bias, noop)
            report = hooklab.registered_hooks(m)
            assert sorted(map(tuple, report.rows)) == sorted([
                ("0", "forward", "noop"), ("2", "backward", "noop"), ("0.weight", "tensor", "noop"),
                ("2.bias", "post_accumulate_grad", "noop"), ("(global)", "forward", "noop")])
            assert hooklab.count_hooks(m) == 5 and hooklab.count_hooks(m, include_global=False) == 4
            assert "post_accumulate_grad" in str(report) and "2.bias" in str(report)
        assert hooklab.count_hooks(m, include_global=False) == 0
    finally:
        glob.remove()
    assert hooklab.count_hooks(m) == 0


def test_a_tied_parameter_is_listed_once():
    first, second = nn.Linear(2, 2), nn.Linear(2, 2)
    second.weight = first.weight
    tied = nn.Sequential(first, second)
    handle = first.weight.register_hook(noop)
    assert hooklab.registered_hooks(tied, include_global=False).rows == [["0.weight", "tensor", "noop"]]
    handle.remove()


def test_a_hook_on_a_parametrized_weight_is_found_on_its_original():
    class Clamp(nn.Module):
        def forward(self, w):
            return w.clamp(-1, 1)

    m = model()
    parametrize.register_parametrization(m[0], "weight", Clamp())
    handle = m[0].parametrizations.weight.original.register_hook(noop)
    assert hooklab.registered_hooks(m, include_global=False).rows == [
        ["0.parametrizations.weight.original", "tensor", "noop"]]
    handle.remove()


def test_what_it_cannot_see_hooks_on_intermediate_tensors_and_on_autograd_nodes():
    """The limits its docstring states: a hook on an activation, and a hook on a grad_fn node."""
    m = model()
    fired = []
    activation = m[0](torch.ones(1, 2))
    activation.register_hook(lambda grad: fired.append("tensor hook on an activation"))
    activation.grad_fn.register_hook(lambda grad_inputs, grad_outputs: fired.append("node hook"))
    assert isinstance(activation._backward_hooks, OrderedDict)  # PyTorch keeps it on the activation,
    assert hooklab.count_hooks(m) == 0  # which the model does not hold
    m[2](m[1](activation)).sum().backward()
    assert sorted(fired) == ["node hook", "tensor hook on an activation"]  # both existed and fired
