"""Walk what a module returns: the tensors inside tuples, lists, dicts, namedtuples and dataclasses.

A module's output is often not one tensor: ``nn.LSTM`` returns ``(output, (h, c))``,
``nn.MultiheadAttention`` ``(output, weights)``, a detection backbone an ``OrderedDict``, a Hugging
Face model a ``ModelOutput`` (a dataclass that is also a dict). These functions are the one place in
hooklab that walks such a value; each tensor is named by its *path* from the top (``output[1][0]``,
``output['out']``, ``output.logits``).

What they walk: tensors, tuples, lists, dicts (``OrderedDict`` and other dict types), namedtuples
(``PackedSequence``) and dataclass instances (``ModelOutput``). Anything else (torchvision's
``ImageList``, a class of your own) is a leaf they cannot see into: :func:`unreachable` lists such
leaves, so a caller can say what it could not reach instead of silently skipping it.

>>> import torch
>>> out = (torch.zeros(5, 1, 3), (torch.zeros(1, 1, 3), torch.zeros(1, 1, 3)))
>>> [path for path, _ in tensors_in(out)]
['output[0]', 'output[1][0]', 'output[1][1]']
>>> describe(out)
'tuple(Tensor[5, 1, 3], tuple(Tensor[1, 1, 3], Tensor[1, 1, 3]))'
"""

from __future__ import annotations

import copy
import dataclasses
from typing import Any, Callable

import torch

__all__ = ["children", "tensors_in", "replace_tensors", "map_tensors", "describe", "unreachable"]

#: Leaves that hold no tensor, so there is nothing to reach inside them.
_PLAIN = (type(None), bool, int, float, complex, str, bytes, torch.dtype, torch.device, torch.Size)


def _is_dataclass(value: Any) -> bool:
    return dataclasses.is_dataclass(value) and not isinstance(value, type)


def _is_namedtuple(value: Any) -> bool:
    return isinstance(value, tuple) and hasattr(value, "_fields")


def children(value: Any) -> list[tuple[str, str, Any]] | None:
    """``[(path suffix, label, child)]`` of a container, or ``None`` for a leaf (a tensor, a number,
    an object of another class).

    >>> import torch
    >>> [(s, label) for s, label, _ in children({"out": torch.zeros(1)})]
    [("['out']", 'out')]
    """
    if _is_dataclass(value):
        return [(f".{f.name}", f.name, getattr(value, f.name)) for f in dataclasses.fields(value)]
    if _is_namedtuple(value):
        return [(f".{n}", n, v) for n, v in zip(value._fields, value)]
    if isinstance(value, (tuple, list)):
        return [(f"[{i}]", "", v) for i, v in enumerate(value)]
    if isinstance(value, dict):
        return [(f"[{k!r}]", str(k), v) for k, v in value.items()]
    return None


def tensors_in(value: Any, path: str = "output") -> list[tuple[str, torch.Tensor]]:
    """Every tensor inside ``value``, depth first, with the path that reaches it.

    >>> import torch
    >>> [p for p, _ in tensors_in({"logits": torch.zeros(2), "mask": None})]
    ["output['logits']"]
    """
    if isinstance(value, torch.Tensor):
        return [(path, value)]
    found: list[tuple[str, torch.Tensor]] = []
    for suffix, _, child in children(value) or []:
        found += tensors_in(child, path + suffix)
    return found


def unreachable(value: Any, path: str = "output") -> list[tuple[str, str]]:
    """``[(path, type name)]`` of every leaf inside ``value`` that is neither a tensor nor a plain
    value (number, string, ``None``): objects these functions cannot see into.

    >>> from types import SimpleNamespace
    >>> unreachable((SimpleNamespace(t=1), None, 3))
    [('output[0]', 'SimpleNamespace')]
    """
    if isinstance(value, (torch.Tensor, *_PLAIN)):
        return []
    kids = children(value)
    if kids is None:
        return [(path, type(value).__name__)]
    found: list[tuple[str, str]] = []
    for suffix, _, child in kids:
        found += unreachable(child, path + suffix)
    return found


def replace_tensors(value: Any, fn: Callable[[str, torch.Tensor], Any], path: str = "output", *,
                    other: Callable[[str, Any], Any] | None = None) -> Any:
    """``value`` rebuilt with every tensor ``t`` at ``path`` replaced by ``fn(path, t)``; the
    containers keep their types (tuple, namedtuple, list, dict type, dataclass). A leaf that is not
    a tensor stays as it is, or becomes ``other(path, leaf)`` when ``other`` is given.

    >>> import torch
    >>> out = replace_tensors((torch.ones(2), [torch.ones(1)]), lambda path, t: path)
    >>> out
    ('output[0]', ['output[1][0]'])
    """
    if isinstance(value, torch.Tensor):
        return fn(path, value)
    kids = children(value)
    if kids is None:
        return value if other is None else other(path, value)
    new = [replace_tensors(child, fn, path + suffix, other=other) for suffix, _, child in kids]
    if _is_dataclass(value):
        return _rebuild_dataclass(value, {f.name: v for f, v in zip(dataclasses.fields(value), new)})
    if _is_namedtuple(value):
        return type(value)(*new)
    if isinstance(value, (tuple, list)):
        try:
            return type(value)(new)
        except TypeError:  # a subclass whose constructor takes other arguments
            return tuple(new) if isinstance(value, tuple) else list(new)
    items = list(zip(value.keys(), new))
    try:
        return type(value)(items)
    except TypeError:
        return dict(items)


def _rebuild_dataclass(value: Any, fields: dict[str, Any]) -> Any:
    try:
        return dataclasses.replace(value, **{f.name: fields[f.name] for f in dataclasses.fields(value) if f.init})
    except (TypeError, ValueError):  # a dataclass whose __init__ or __post_init__ will not take them back
        clone = copy.copy(value)
        for key, field_value in fields.items():
            object.__setattr__(clone, key, field_value)
        if isinstance(clone, dict):  # a dataclass that is also a dict (Hugging Face's ModelOutput)
            for key, field_value in fields.items():
                if key in clone:
                    dict.__setitem__(clone, key, field_value)
        return clone


def map_tensors(value: Any, fn: Callable[[torch.Tensor], torch.Tensor]) -> Any:
    """``value`` with ``fn`` applied to every floating-point tensor in it; the structure and every
    other value stay as they are.

    >>> import torch
    >>> out = map_tensors((torch.ones(2), (torch.ones(1), torch.arange(2))), lambda t: t * 3)
    >>> out[0].tolist(), out[1][0].tolist(), out[1][1].tolist()
    ([3.0, 3.0], [3.0], [0, 1])
    """
    return replace_tensors(value, lambda _, t: fn(t) if t.is_floating_point() else t)


def describe(value: Any) -> str:
    """The structure of ``value``, with each tensor's shape (and its dtype when it is not the
    default float type).

    >>> import torch
    >>> describe({"ids": torch.zeros(2, dtype=torch.long), "loss": None})
    'dict(ids: Tensor[2] int64, loss: None)'
    """
    if isinstance(value, torch.Tensor):
        dtype = "" if value.dtype == torch.get_default_dtype() else f" {str(value.dtype).replace('torch.', '')}"
        return f"Tensor{list(value.shape)}{dtype}"
    if value is None:
        return "None"
    kids = children(value)
    if kids is None:
        return type(value).__name__
    name = type(value).__name__
    if isinstance(value, (tuple, list)) and not _is_namedtuple(value) and not _is_dataclass(value):
        return f"{name}({', '.join(describe(c) for _, _, c in kids)})"
    return f"{name}({', '.join(f'{label}: {describe(c)}' for _, label, c in kids)})"
