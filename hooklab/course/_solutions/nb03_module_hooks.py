"""The worked solutions of notebook 03's exercises (``hooklab.course.nb03_module_hooks``).

Imported only when a notebook shows a solution (``exercise.solution()``); a student build of the course
leaves this folder out. Each function has the name the notebook asks the learner to write."""

from __future__ import annotations

import torch.nn.functional as F
from torch import nn


def add_dropout_after_relus(module):
    """For ``model.apply``: on every ReLU, a forward hook that applies dropout (p=0.25) while training."""

    def dropout(module, args, output):
        # Return the new tensor: assigning it to `output` would change nothing.
        # training=module.training: drop only while training, never after model.eval().
        return F.dropout(output, p=0.25, training=module.training)

    if isinstance(module, nn.ReLU):  # model.apply visits EVERY module, the model itself too
        module.register_forward_hook(dropout)


def halve_input_grad(module, grad_input, grad_output):
    """A full backward hook: the gradient that flows on to the module's input, halved."""
    # grad_input holds one gradient per positional argument of the call (here just x); it may contain None.
    # Return a NEW tuple of the same length; do not change grad_input in place.
    return tuple(None if g is None else g * 0.5 for g in grad_input)


class Capture:
    """Captures a layer's outputs with a bound method as the hook."""

    def __init__(self):
        self.outputs = []

    def hook(self, module, args, output):           # a bound method: `self` is already filled in
        self.outputs.append(output.detach())        # the values, without the autograd graph

    def clear(self):
        self.outputs.clear()                        # call between runs, or the list keeps growing
