"""The worked solutions of notebook 02's exercises (``hooklab.course.nb02_tensor_hooks``).

Imported only when a notebook shows a solution (``exercise.solution()``); a student build of the course
leaves this folder out. Each function has the name the notebook asks the learner to write."""

from __future__ import annotations

import torch
from torch import nn


def clamp_hook(grad: torch.Tensor) -> torch.Tensor:
    """A tensor hook: the gradient with every element clamped to [-1, 1].

    >>> clamp_hook(torch.tensor([-3.0, 0.5, 2.0])).tolist()
    [-1.0, 0.5, 1.0]
    """
    return grad.clamp(-1.0, 1.0)  # a new tensor; `grad` itself stays as it was


def log_grad_norms(model: nn.Module, log: dict[str, float]) -> list:
    """On every parameter of ``model``, a hook that stores its gradient's norm in ``log[name]``.

    Returns the handles, so that the caller can remove the hooks again.

    >>> model, log = nn.Linear(2, 1), {}
    >>> handles = log_grad_norms(model, log)
    >>> model(torch.ones(2)).sum().backward(); sorted(log)
    ['bias', 'weight']
    """
    handles = []
    for name, param in model.named_parameters():
        def hook(grad, name=name):  # name=name binds this loop's name (late binding, notebook 01)
            log[name] = grad.norm().item()  # only look: returning None keeps the gradient
        handles.append(param.register_hook(hook))
    return handles
