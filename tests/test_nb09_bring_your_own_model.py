"""hooklab.course.nb09_bring_your_own_model: the solutions pass, the typical mistakes are named."""

from __future__ import annotations

import pytest
import torch

import hooklab
import hooklab.course._solutions.nb09_bring_your_own_model as solved
import hooklab.course.nb09_bring_your_own_model as nb09

from .checking import mistakes


def test_brief():
    assert nb09.brief({"a": 1, "b": [2, 3]}, "b", "a") == "b=[2, 3], a=1"
    with pytest.raises(KeyError, match="has no"):
        nb09.brief({"a": 1}, "missing")


def test_the_solutions_pass():
    assert nb09.find_tensors.check(solved.tensor_paths).passed
    assert nb09.scale_everything.check(solved.make_scaler).passed


def test_tensor_paths_agrees_with_explore():
    from hooklab.nested import tensors_in
    out = (torch.zeros(2), {"h": [torch.ones(1), None], "n": 3})
    assert [p for p, _ in solved.tensor_paths(out)] == [p for p, _ in tensors_in(out)]


# ---------------------------------------------------------------- exercise 1
def _one_level(output, path="output"):
    if isinstance(output, torch.Tensor):
        return [(path, output)]
    if isinstance(output, (tuple, list)):
        return [(f"{path}[{i}]", t) for i, t in enumerate(output) if isinstance(t, torch.Tensor)]
    return []


def _dots(output, path="output"):
    if isinstance(output, torch.Tensor):
        return [(path, output)]
    found = []
    if isinstance(output, (tuple, list)):
        for i, item in enumerate(output):
            found += _dots(item, f"{path}.{i}")
    elif isinstance(output, dict):
        for key, item in output.items():
            found += _dots(item, f"{path}[{key!r}]")
    return found


def _dict_by_index(output, path="output"):
    if isinstance(output, torch.Tensor):
        return [(path, output)]
    items = list(output.values()) if isinstance(output, dict) else output if isinstance(output, (tuple, list)) else []
    found = []
    for i, item in enumerate(items):
        found += _dict_by_index(item, f"{path}[{i}]")
    return found


def _keeps_none(output, path="output"):
    if isinstance(output, (tuple, list)):
        return [pair for i, item in enumerate(output) for pair in _keeps_none(item, f"{path}[{i}]")]
    if isinstance(output, dict):
        return [pair for k, item in output.items() for pair in _keeps_none(item, f"{path}[{k!r}]")]
    return [(path, output)]


def _copies(output, path="output"):
    return [(p, t.clone()) for p, t in solved.tensor_paths(output, path)]


def test_exercise_1_names_the_typical_mistakes():
    assert "recursion" in mistakes(nb09.find_tensors, _one_level)
    assert "output[0], not output.0" in mistakes(nb09.find_tensors, _dots)
    assert "name their key" in mistakes(nb09.find_tensors, _dict_by_index)
    assert "not a tensor: skip" in mistakes(nb09.find_tensors, _keeps_none)
    assert "the tensor itself" in mistakes(nb09.find_tensors, _copies)
    assert "returns None" in mistakes(nb09.find_tensors, lambda output, path="output": None)


# ---------------------------------------------------------------- exercise 2
def _no_return(factor):
    def hook(module, args, output):
        output = output * factor  # rebinds a local name only
    return hook


def _first_only(factor):
    def hook(module, args, output):
        return output * factor if isinstance(output, torch.Tensor) else output[0] * factor
    return hook


def _in_place(factor):
    def scale(value):
        if isinstance(value, torch.Tensor):
            if value.is_floating_point():
                value.mul_(factor)
        elif isinstance(value, (tuple, list)):
            for v in value:
                scale(v)
        elif isinstance(value, dict):
            for v in value.values():
                scale(v)
    def hook(module, args, output):
        scale(output)
        return output
    return hook


def _lists_for_tuples(factor):
    def scale(value):
        if isinstance(value, torch.Tensor):
            return value * factor if value.is_floating_point() else value
        if isinstance(value, (tuple, list)):
            return [scale(v) for v in value]
        if isinstance(value, dict):
            return {k: scale(v) for k, v in value.items()}
        return value
    return lambda module, args, output: scale(output)


def _every_tensor(factor):
    def scale(value):
        if isinstance(value, torch.Tensor):
            return value * factor
        if isinstance(value, tuple):
            return tuple(scale(v) for v in value)
        if isinstance(value, dict):
            return {k: scale(v) for k, v in value.items()}
        return value
    return lambda module, args, output: scale(output)


def _top_level_only(factor):
    def hook(module, args, output):
        if isinstance(output, tuple):
            return tuple(o * factor if isinstance(o, torch.Tensor) else o for o in output)
        if isinstance(output, dict):
            return {k: v * factor if v.is_floating_point() else v for k, v in output.items()}
        return output * factor
    return hook


def test_exercise_2_names_the_typical_mistakes():
    assert "only by returning" in mistakes(nb09.scale_everything, _no_return)
    assert "returned one tensor" in mistakes(nb09.scale_everything, _first_only)
    assert "changed in place" in mistakes(nb09.scale_everything, _in_place)
    assert "keep tuples as tuples" in mistakes(nb09.scale_everything, _lists_for_tuples)
    assert "scale only floating-point" in mistakes(nb09.scale_everything, _every_tensor)
    assert "unchanged: ['h', 'c']" in mistakes(nb09.scale_everything, _top_level_only)
    assert "not a function" in mistakes(nb09.scale_everything, lambda factor: None)

