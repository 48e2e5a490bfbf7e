"""The worked solutions of notebook 01's exercises (``hooklab.course.nb01_callbacks``).

Imported only when a notebook shows a solution (``exercise.solution()``); a student build of the course
leaves this folder out. Each function has the name the notebook asks the learner to write."""

from __future__ import annotations

import functools
from typing import Callable

import torch
from torch import nn

from hooklab.callbacks import Callbacks


def register_each(callbacks: Callbacks, names: list[str], log: list[str]) -> None:
    """Register one callback per name; calling ``callbacks()`` appends each name to ``log``, in order.

    >>> cbs, log = Callbacks(), []
    >>> register_each(cbs, ["a", "b"], log); cbs(); log
    ['a', 'b']
    """
    for name in names:
        # partial binds `name` now, while the loop is on it (a default argument
        # `lambda name=name: log.append(name)` or a factory function work too)
        callbacks.register(functools.partial(log.append, name))


def run_with_hook(model: nn.Module, x: torch.Tensor, hook: Callable) -> torch.Tensor:
    """Run ``model(x)`` with ``hook`` as a forward hook, and remove the hook again, also on an error.

    >>> layer = nn.Linear(2, 1)
    >>> _ = run_with_hook(layer, torch.ones(2), lambda module, args, output: print("ran"))
    ran
    >>> len(layer._forward_hooks)
    0
    """
    handle = model.register_forward_hook(hook)
    with handle:  # handle.remove() on the way out, even if model(x) raises
        return model(x)  # model(x), not model.forward(x): only __call__ runs the hooks
