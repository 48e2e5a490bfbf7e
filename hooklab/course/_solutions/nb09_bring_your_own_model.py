"""The worked solutions of notebook 09's exercises (``hooklab.course.nb09_bring_your_own_model``).

Imported only when a notebook shows a solution (``exercise.solution()``); a student build of the course
leaves this folder out. Each function has the name the notebook asks the learner to write."""

from __future__ import annotations

import torch


def tensor_paths(output, path="output"):
    """Every tensor in `output` as (path, tensor) pairs, depth first."""
    if isinstance(output, torch.Tensor):
        return [(path, output)]
    found = []
    if isinstance(output, (tuple, list)):
        for i, item in enumerate(output):
            found += tensor_paths(item, f"{path}[{i}]")
    elif isinstance(output, dict):
        for key, item in output.items():
            found += tensor_paths(item, f"{path}[{key!r}]")
    return found  # anything else (None, a number, a string) holds no tensor


def make_scaler(factor):
    """Return a forward hook that multiplies every floating-point tensor of the output by `factor`."""
    def scale(value):
        if isinstance(value, torch.Tensor):
            return value * factor if value.is_floating_point() else value  # a new tensor: nothing in place
        if isinstance(value, tuple):
            return tuple(scale(v) for v in value)
        if isinstance(value, list):
            return [scale(v) for v in value]
        if isinstance(value, dict):
            return {k: scale(v) for k, v in value.items()}
        return value

    def hook(module, args, output):
        return scale(output)  # what a forward hook returns replaces the output
    return hook
