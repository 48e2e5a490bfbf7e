"""The worked solutions of notebook 05's exercises (``hooklab.course.nb05_resnet_traversal``).

Imported only when a notebook shows a solution (``exercise.solution()``); a student build of the course
leaves this folder out. Each function has the name the notebook asks the learner to write."""

from __future__ import annotations

from typing import Callable

import torch
from torch import nn

from hooklab.hooks import Hooks


def make_saver(name: str, store: dict) -> Callable:
    """Return a forward hook that keeps a detached copy of the module's latest output in store[name]."""
    def hook(module, args, output):
        store[name] = output.detach().clone()  # detach: no graph; clone: in-place ops can't change it
    return hook


def count_calls(model: nn.Module, x: torch.Tensor) -> dict[str, int]:
    """How many times each module of `model` runs during `model(x)`, by name."""
    names = {module: name for name, module in model.named_modules()}  # built once
    counts: dict[str, int] = {}

    def count(module, args, output):
        counts[names[module]] = counts.get(names[module], 0) + 1

    with Hooks() as hooks:  # removes every hook on exit, also if model(x) raises
        for name, module in model.named_modules():
            if name:  # skip the model itself
                hooks.forward(module, count, key=name)
        model(x)
    return counts


def make_grad_saver(name: str, grads: dict) -> Callable:
    """Return a forward hook that, through a tensor hook on the output, keeps the gradient
    with respect to the module's output in grads[name]."""
    def hook(module, args, output):
        if output.requires_grad:  # under torch.no_grad() there is no gradient to wait for
            def save(grad):
                grads[name] = grad.detach().clone()  # return nothing: the gradient flows on unchanged
            output.register_hook(save)
        # return nothing: the output stays as it is
    return hook
