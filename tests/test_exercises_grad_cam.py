"""Exercises of notebook 07: the solutions pass, typical mistakes are named."""

from __future__ import annotations

import doctest

import torch

from hooklab.exercises import grad_cam as ex

from .checking import mistakes


def test_solutions_pass():
    assert ex.heat_map.check(ex.my_cam).passed
    assert ex.cam_hooks.check(ex.make_cam_hook).passed
    assert "def my_cam" in ex.heat_map.solution().code
    assert "register_hook" in ex.cam_hooks.solution().code
    assert doctest.testmod(ex).failed == 0


def test_heat_map_mistakes():
    assert "not written yet" in mistakes(ex.heat_map, lambda a, g: (_ for _ in ()).throw(NotImplementedError()))
    assert "returns None" in mistakes(ex.heat_map, lambda a, g: None)
    assert "channel dimension" in mistakes(ex.heat_map, lambda a, g: torch.relu(g.mean((2, 3), keepdim=True) * a))
    assert "apply torch.relu" in mistakes(ex.heat_map, lambda a, g: (g.mean((2, 3), keepdim=True) * a).sum(1))
    assert "averages the gradient over the positions" in mistakes(ex.heat_map, lambda a, g: torch.relu((g * a).sum(1)))
    assert "[N, h, w]" in mistakes(ex.heat_map, lambda a, g: torch.relu((g.mean(1, keepdim=True) * a).sum((1, 2))))


def test_cam_hooks_mistakes():
    def no_clone(saved):
        def save(module, args, output):
            saved["activations"] = output.detach()
            output.register_hook(lambda grad: saved.__setitem__("gradients", grad))
        return save
    assert "in-place ReLU" in mistakes(ex.cam_hooks, no_clone)

    def no_tensor_hook(saved):
        def save(module, args, output):
            saved["activations"] = output.detach().clone()
        return save
    assert "register a tensor hook on the output" in mistakes(ex.cam_hooks, no_tensor_hook)

    def keeps_graph(saved):
        def save(module, args, output):
            saved["activations"] = output.clone()
            output.register_hook(lambda grad: saved.__setitem__("gradients", grad))
        return save
    assert "autograd graph" in mistakes(ex.cam_hooks, keeps_graph)

    def returns_output(saved):
        def save(module, args, output):
            saved["activations"] = output.detach().clone()
            output.register_hook(lambda grad: saved.__setitem__("gradients", grad))
            return output
        return save
    assert "replaces the layer's output" in mistakes(ex.cam_hooks, returns_output)

    def wrong_signature(saved):
        def save(module, output):
            pass
        return save
    assert "hook(module, args, output)" in mistakes(ex.cam_hooks, wrong_signature)

    assert "return the forward hook function itself" in mistakes(ex.cam_hooks, lambda saved: None)
